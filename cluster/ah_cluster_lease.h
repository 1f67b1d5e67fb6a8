/* ah_cluster_lease.h: a lease kept alive by a thread, the ground of job registration and of the
 * planner election: what a process attaches to it disappears from etcd within the lease's TTL of
 * the process's death, and at once when it is stopped. */
#ifndef AH_CLUSTER_LEASE_H
#define AH_CLUSTER_LEASE_H

#include <pthread.h>
#include <stdint.h>

#include "ah_cluster_etcd.h"

/* A background thread's stoppable sleep (the lease keeper's, the election's poller): a condition
 * on the monotonic clock, so a wall-clock step never stretches or cuts a sleep, and the stop flag it
 * watches, under one lock. */
typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t wake;
  int stop; /* under lock */
} ah_cluster_sleep_t;

void ah_cluster_sleep_init(ah_cluster_sleep_t *s);
void ah_cluster_sleep_destroy(ah_cluster_sleep_t *s);
/* Sleeps up to ms milliseconds or until stopped. Returns 1 when stopped. */
int ah_cluster_sleep_ms(ah_cluster_sleep_t *s, long ms);
/* Stops the sleeper: its sleep returns at once, and every later one too. */
void ah_cluster_sleep_stop(ah_cluster_sleep_t *s);

typedef struct ah_cluster_lease ah_cluster_lease_t;

/* What the owner attaches to each new lease (its key), called with the lease's id: at start, on
 * the caller's thread, and again on the lease's thread whenever the lease was lost (etcd
 * unreachable for longer than the TTL) and a new one granted. Returns 0, or -1 with err. */
typedef int (*ah_cluster_lease_attach_fn)(void *arg, int64_t lease, char *err, size_t errlen);

/* Grants a lease of ttl_s seconds (2..3600), runs attach(arg, id) and starts the thread that
 * renews it every third of its TTL. Returns 0 with *l_p, or -1 with err (nothing left behind:
 * a granted lease whose attach failed is revoked). `what` names the owner in log lines ("job
 * train-42"). attach may be NULL. */
int ah_cluster_lease_start(ah_cluster_etcd_t *c, int ttl_s, const char *what,
                           ah_cluster_lease_attach_fn attach, void *arg, ah_cluster_lease_t **l_p,
                           char *err, size_t errlen);

/* The lease's id now (it changes when a lost lease is replaced). */
int64_t ah_cluster_lease_id(ah_cluster_lease_t *l);

/* Stops the thread (it wakes at once) and, with `revoke`, revokes the lease so everything
 * attached to it goes now rather than at its TTL. Returns 0, or -1 when the revoke failed (err
 * says why; the lease then expires by itself). Frees l either way. */
int ah_cluster_lease_stop(ah_cluster_lease_t *l, int revoke, char *err, size_t errlen);

#endif
