/* ah_cluster_job.c: job registration, a key per job attached to the job's lease
 * (ah_cluster_lease.c). The value is kept here as well as in etcd, so a lease replaced after an
 * outage gets the job's latest value put back under it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_cluster_job.h"
#include "ah_cluster_lease.h"

struct ah_cluster_job {
  ah_cluster_etcd_t *c;
  char key[AH_CLUSTER_URL_MAX + 2 * AH_CLUSTER_JOB_ID_MAX];
  pthread_mutex_t lock; /* value, between the caller's updates and the lease thread */
  char *value;
  size_t len;
  ah_cluster_lease_t *lease;
};

int ah_cluster_job_key(const char *prefix, const char *job_id, char *out, size_t len, char *err,
                       size_t errlen) {
  size_t n = job_id ? strlen(job_id) : 0;
  const char *why = NULL;
  if (n == 0) why = "empty";
  else if (n >= AH_CLUSTER_JOB_ID_MAX) why = "too long";
  for (size_t i = 0; !why && i < n; i++)
    if (job_id[i] == '/' || job_id[i] <= ' ' || job_id[i] > '~') why = "a '/', space or non-ASCII";
  if (!why) {
    int w = snprintf(out, len, "%sjobs/%s", prefix ? prefix : "", job_id);
    if (w < 0 || (size_t)w >= len) why = "too long with its prefix";
  }
  if (why) {
    if (err && errlen) snprintf(err, errlen, "job id '%.64s' is not usable: %s", job_id, why);
    return -1;
  }
  return 0;
}

static int job_attach(void *arg, int64_t lease, char *err, size_t errlen) {
  ah_cluster_job_t *job = arg;
  pthread_mutex_lock(&job->lock);
  int rc = ah_cluster_etcd_put(job->c, job->key, job->value, job->len, lease, err, errlen);
  pthread_mutex_unlock(&job->lock);
  return rc;
}

/* Replaces job->value with a copy of `value`. Returns 0 or -1 (no memory). */
static int value_set(ah_cluster_job_t *job, const void *value, size_t len) {
  char *v = malloc(len + 1);
  if (!v) return -1;
  if (len) memcpy(v, value, len);
  v[len] = 0;
  free(job->value);
  job->value = v;
  job->len = len;
  return 0;
}

int ah_cluster_job_register(ah_cluster_etcd_t *c, const char *prefix, const char *job_id,
                            const void *value, size_t len, int ttl_s, ah_cluster_job_t **job_p,
                            char *err, size_t errlen) {
  ah_cluster_job_t *job = calloc(1, sizeof *job);
  if (!job) {
    if (err && errlen) snprintf(err, errlen, "out of memory");
    return -1;
  }
  job->c = c;
  pthread_mutex_init(&job->lock, NULL);
  if (ah_cluster_job_key(prefix, job_id, job->key, sizeof job->key, err, errlen) != 0)
    goto undo_job;
  if (value_set(job, value, len) != 0) {
    if (err && errlen) snprintf(err, errlen, "out of memory");
    goto undo_job;
  }
  char what[AH_CLUSTER_JOB_ID_MAX + 8];
  snprintf(what, sizeof what, "job %s", job_id);
  if (ah_cluster_lease_start(c, ttl_s, what, job_attach, job, &job->lease, err, errlen) != 0)
    goto undo_job;
  *job_p = job;
  return 0;
undo_job:
  free(job->value);
  pthread_mutex_destroy(&job->lock);
  free(job);
  return -1;
}

int ah_cluster_job_update(ah_cluster_job_t *job, const void *value, size_t len, char *err,
                          size_t errlen) {
  pthread_mutex_lock(&job->lock);
  int rc = value_set(job, value, len);
  if (rc != 0 && err && errlen) snprintf(err, errlen, "out of memory");
  pthread_mutex_unlock(&job->lock);
  if (rc != 0) return -1;
  return job_attach(job, ah_cluster_lease_id(job->lease), err, errlen);
}

int ah_cluster_job_unregister(ah_cluster_job_t *job, char *err, size_t errlen) {
  int rc = ah_cluster_lease_stop(job->lease, 1, err, errlen);
  free(job->value);
  pthread_mutex_destroy(&job->lock);
  free(job);
  return rc;
}
