/* ah_cluster_job.h: a job's registration with the cluster: one key, PREFIX/jobs/JOB, holding what
 * the job publishes (its flows, topology and intensity, as JSON text), under a lease the process
 * keeps alive. A job that dies disappears within the TTL; one that ends cleanly at once. */
#ifndef AH_CLUSTER_JOB_H
#define AH_CLUSTER_JOB_H

#include <stddef.h>

#include "ah_cluster_etcd.h"

#define AH_CLUSTER_JOB_ID_MAX 128

typedef struct ah_cluster_job ah_cluster_job_t;

/* Writes the key of job `job_id` under `prefix` ("/autoha/" gives "/autoha/jobs/JOB") to out.
 * Returns 0, or -1 when the id is empty, over AH_CLUSTER_JOB_ID_MAX - 1 bytes, or holds a '/' or
 * a byte outside printable ASCII (err names it), or the key does not fit. */
int ah_cluster_job_key(const char *prefix, const char *job_id, char *out, size_t len, char *err,
                       size_t errlen);

/* Registers job `job_id` with `value` (len bytes) under a lease of ttl_s seconds, kept alive by a
 * thread. Returns 0 with *job_p, or -1 with err (nothing is left in etcd). A registration whose
 * lease lapses while etcd is away is put back by the thread when etcd returns. */
int ah_cluster_job_register(ah_cluster_etcd_t *c, const char *prefix, const char *job_id,
                            const void *value, size_t len, int ttl_s, ah_cluster_job_t **job_p,
                            char *err, size_t errlen);

/* Replaces what the job publishes. Returns 0 or -1 with err. */
int ah_cluster_job_update(ah_cluster_job_t *job, const void *value, size_t len, char *err,
                          size_t errlen);

/* Ends the registration: the thread stops and the lease is revoked, so the key goes now.
 * Returns 0, or -1 when etcd could not be told (the key then goes at the TTL). Frees job. */
int ah_cluster_job_unregister(ah_cluster_job_t *job, char *err, size_t errlen);

#endif
