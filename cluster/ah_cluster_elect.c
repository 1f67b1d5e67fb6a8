/* ah_cluster_elect.c: the planner election. One txn decides it: create the key only if it does
 * not exist (create_revision == 0), under the candidate's lease. Holding is then read from etcd,
 * never remembered: a candidate holds the role while the key exists under its own current lease,
 * so a lease lost and replaced (ah_cluster_lease.c) is a role lost, and a retried create whose
 * first attempt had succeeded (ah_cluster_etcd_create) is a role won. Candidates poll rather than
 * watch: the JSON gateway's watch is a long-lived stream, and a poll of one key every few hundred
 * milliseconds costs etcd nothing. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ah_cluster_elect.h"
#include "ah_cluster_lease.h"
#include "ah_log.h"

#define ID_MAX 256

struct ah_cluster_elect {
  ah_cluster_etcd_t *c;
  char key[1024], id[ID_MAX];
  long poll_ms;
  ah_cluster_lease_t *lease;
  _Atomic int leader;
  pthread_t thread;
  ah_cluster_sleep_t sleep;
  int outage;
  int ttl_s;
  double ok_s; /* when etcd last answered a poll (monotonic seconds; the poller's own) */
};

static double mono_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One poll: creates the key if absent, then says whether this candidate holds it. */
static void campaign(ah_cluster_elect_t *e) {
  char err[AH_CLUSTER_ERR_LEN];
  int64_t lease = ah_cluster_lease_id(e->lease);
  ah_cluster_kv_t holder;
  int rc =
      ah_cluster_etcd_create(e->c, e->key, e->id, strlen(e->id), lease, &holder, err, sizeof err);
  if (rc < 0) {
    /* unknown: keep the last answer for half a TTL after etcd last answered, then step down. The
     * lease was renewed at most a third of a TTL before that answer, so the key can go (and
     * another candidate take it) two thirds of a TTL after it at the earliest: a holder cut off
     * steps down before, at the end of the poll that finds half a TTL gone */
    if (!e->outage) ah_log(AH_LOG_WARN, "etcd: election %s: %s", e->key, err);
    e->outage = 1;
    if (mono_s() - e->ok_s >= e->ttl_s / 2.0 && atomic_exchange(&e->leader, 0))
      ah_log(AH_LOG_WARN,
             "etcd: %s gives up the planner role (%s): etcd has not answered for half its lease's "
             "TTL",
             e->id, e->key);
    return;
  }
  e->outage = 0;
  e->ok_s = mono_s();
  int held = rc == 1 || (holder.key && holder.lease == lease);
  if (rc == 0) ah_cluster_kv_clear(&holder);
  int was = atomic_exchange(&e->leader, held);
  if (held != was)
    ah_log(AH_LOG_INFO, "etcd: %s %s the planner role (%s)", e->id, held ? "holds" : "lost",
           e->key);
}

static void *poller(void *arg) {
  ah_cluster_elect_t *e = arg;
  for (;;) {
    if (ah_cluster_sleep_ms(&e->sleep, e->poll_ms)) return NULL;
    campaign(e);
  }
}

int ah_cluster_elect_start(ah_cluster_etcd_t *c, const char *key, const char *id, int ttl_s,
                           ah_cluster_elect_t **e_p, char *err, size_t errlen) {
  ah_cluster_elect_t *e = calloc(1, sizeof *e);
  if (!e) {
    if (err && errlen) snprintf(err, errlen, "out of memory");
    return -1;
  }
  if (!key || !*key || strlen(key) >= sizeof e->key || !id || !*id || strlen(id) >= ID_MAX) {
    if (err && errlen)
      snprintf(err, errlen, "election key '%.64s' or candidate id '%.64s' is empty or too long",
               key ? key : "", id ? id : "");
    free(e);
    return -1;
  }
  e->c = c;
  snprintf(e->key, sizeof e->key, "%s", key);
  snprintf(e->id, sizeof e->id, "%s", id);
  e->ttl_s = ttl_s;
  e->ok_s = mono_s();
  e->poll_ms = ttl_s * 1000L / 4;
  if (e->poll_ms > 500) e->poll_ms = 500;
  ah_cluster_sleep_init(&e->sleep);
  char what[ID_MAX + 16];
  snprintf(what, sizeof what, "candidate %s", id);
  if (ah_cluster_lease_start(c, ttl_s, what, NULL, NULL, &e->lease, err, errlen) != 0)
    goto undo_init;
  campaign(e);
  int rc = pthread_create(&e->thread, NULL, poller, e);
  if (rc != 0) {
    if (err && errlen) snprintf(err, errlen, "pthread_create: %s", strerror(rc));
    goto undo_lease;
  }
  *e_p = e;
  return 0;
undo_lease:
  ah_cluster_lease_stop(e->lease, 1, NULL, 0);
undo_init:
  ah_cluster_sleep_destroy(&e->sleep);
  free(e);
  return -1;
}

int ah_cluster_elect_is_leader(ah_cluster_elect_t *e) { return atomic_load(&e->leader); }

int ah_cluster_elect_holder(ah_cluster_etcd_t *c, const char *key, char *out, size_t len, char *err,
                            size_t errlen) {
  ah_cluster_kv_t kv;
  int rc = ah_cluster_etcd_get(c, key, &kv, err, errlen);
  if (rc != 1) return rc;
  snprintf(out, len, "%s", kv.value);
  ah_cluster_kv_clear(&kv);
  return 1;
}

int ah_cluster_elect_stop(ah_cluster_elect_t *e, char *err, size_t errlen) {
  ah_cluster_sleep_stop(&e->sleep);
  pthread_join(e->thread, NULL);
  atomic_store(&e->leader, 0);
  int rc = ah_cluster_lease_stop(e->lease, 1, err, errlen);
  ah_cluster_sleep_destroy(&e->sleep);
  free(e);
  return rc;
}
