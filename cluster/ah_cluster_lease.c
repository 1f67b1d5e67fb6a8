/* ah_cluster_lease.c: one lease and the thread that keeps it. The thread renews every third of
 * the TTL, so two renewals may fail before the lease lapses; when etcd says the lease is gone
 * (it was unreachable for a whole TTL), the thread grants a new one and has the owner attach its
 * keys again, so a job registration outlives an etcd outage without its owner noticing. Outages
 * are logged once each, with the error, and once when they end. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ah_cluster_lease.h"
#include "ah_log.h"

struct ah_cluster_lease {
  ah_cluster_etcd_t *c;
  int ttl_s;
  char what[128];
  ah_cluster_lease_attach_fn attach;
  void *arg;
  _Atomic int64_t id;
  pthread_t thread;
  ah_cluster_sleep_t sleep;
};

void ah_cluster_sleep_init(ah_cluster_sleep_t *s) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->wake, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&s->lock, NULL);
  s->stop = 0;
}

void ah_cluster_sleep_destroy(ah_cluster_sleep_t *s) {
  pthread_cond_destroy(&s->wake);
  pthread_mutex_destroy(&s->lock);
}

int ah_cluster_sleep_ms(ah_cluster_sleep_t *s, long ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&s->lock);
  while (!s->stop && pthread_cond_timedwait(&s->wake, &s->lock, &ts) != ETIMEDOUT) {}
  int stop = s->stop;
  pthread_mutex_unlock(&s->lock);
  return stop;
}

void ah_cluster_sleep_stop(ah_cluster_sleep_t *s) {
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_signal(&s->wake);
  pthread_mutex_unlock(&s->lock);
}

/* Grants a lease and attaches the owner's keys to it. Returns 0 with *id_p, or -1 with err. */
static int grant_attach(ah_cluster_lease_t *l, int64_t *id_p, char *err, size_t errlen) {
  int64_t id;
  if (ah_cluster_etcd_lease_grant(l->c, l->ttl_s, &id, err, errlen) != 0) return -1;
  if (l->attach && l->attach(l->arg, id, err, errlen) != 0) {
    ah_cluster_etcd_lease_revoke(l->c, id, NULL, 0);
    return -1;
  }
  *id_p = id;
  return 0;
}

static void *keeper(void *arg) {
  ah_cluster_lease_t *l = arg;
  long period_ms = l->ttl_s * 1000L / 3;
  int outage = 0; /* an error was logged and not yet its end */
  while (!ah_cluster_sleep_ms(&l->sleep, period_ms)) {
    char err[AH_CLUSTER_ERR_LEN];
    int64_t ttl = 0, id = atomic_load(&l->id);
    int rc = ah_cluster_etcd_lease_keepalive(l->c, id, &ttl, err, sizeof err);
    if (rc == 0 && ttl <= 0) {
      /* gone: etcd expired it while unreachable, so the owner's keys went with it */
      if (grant_attach(l, &id, err, sizeof err) == 0) {
        atomic_store(&l->id, id);
        ah_log(AH_LOG_WARN, "etcd: the lease of %s had expired; a new one holds it again", l->what);
        outage = 0;
        continue;
      }
      rc = -1;
    }
    if (rc != 0 && !outage) {
      ah_log(AH_LOG_WARN, "etcd: cannot renew the lease of %s (retrying every %ld ms): %s", l->what,
             period_ms, err);
      outage = 1;
    } else if (rc == 0 && outage) {
      ah_log(AH_LOG_INFO, "etcd: the lease of %s is renewed again", l->what);
      outage = 0;
    }
  }
  return NULL;
}

int ah_cluster_lease_start(ah_cluster_etcd_t *c, int ttl_s, const char *what,
                           ah_cluster_lease_attach_fn attach, void *arg, ah_cluster_lease_t **l_p,
                           char *err, size_t errlen) {
  if (ttl_s < 2 || ttl_s > 3600) {
    if (err && errlen) snprintf(err, errlen, "lease TTL %d s is outside 2..3600", ttl_s);
    return -1;
  }
  ah_cluster_lease_t *l = calloc(1, sizeof *l);
  if (!l) {
    if (err && errlen) snprintf(err, errlen, "out of memory");
    return -1;
  }
  l->c = c;
  l->ttl_s = ttl_s;
  snprintf(l->what, sizeof l->what, "%s", what ? what : "?");
  l->attach = attach;
  l->arg = arg;
  ah_cluster_sleep_init(&l->sleep);
  int64_t id;
  if (grant_attach(l, &id, err, errlen) != 0) goto undo_init;
  atomic_store(&l->id, id);
  int e = pthread_create(&l->thread, NULL, keeper, l);
  if (e != 0) {
    if (err && errlen) snprintf(err, errlen, "pthread_create: %s", strerror(e));
    goto undo_grant;
  }
  *l_p = l;
  return 0;
undo_grant:
  ah_cluster_etcd_lease_revoke(c, id, NULL, 0);
undo_init:
  ah_cluster_sleep_destroy(&l->sleep);
  free(l);
  return -1;
}

int64_t ah_cluster_lease_id(ah_cluster_lease_t *l) { return atomic_load(&l->id); }

int ah_cluster_lease_stop(ah_cluster_lease_t *l, int revoke, char *err, size_t errlen) {
  ah_cluster_sleep_stop(&l->sleep);
  pthread_join(l->thread, NULL);
  int rc = revoke ? ah_cluster_etcd_lease_revoke(l->c, atomic_load(&l->id), err, errlen) : 0;
  ah_cluster_sleep_destroy(&l->sleep);
  free(l);
  return rc;
}
