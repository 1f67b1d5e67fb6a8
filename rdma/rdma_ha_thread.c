/* rdma_ha_thread.c: the HA layer's background thread (docs/ha.md): it builds standbys, runs
 * failovers step by step, sends heartbeats, watches the soft timeout, answers peers' doorbells and
 * re-plans after failovers, sleeping 50 ms
 * when there is nothing to do and 1 ms between the steps of a failover. */
#include <time.h>

#include "rdma_ha_int.h"

void *ah_shim_ha_thread(void *arg) {
  (void)arg;
  for (;;) {
    ah_shim_ha_notice_check();
    ah_shim_ha_degrade_check();
    ah_shim_ha_rebal_check();
    ah_shim_ha_nic_poll_all(); /* heartbeats of shadows on a backup NIC, whose CQs NCCL does not poll */
    ah_shim_ha_nic_events(); /* and that NIC's async events, which NCCL does not read either */
    /* pick the QPs with work, marking them busy so that a destroy leaves them to us */
    ha_qp_t *work[256];
    int nw = 0;
    double now = ha_now_s();
    pthread_mutex_lock(&ah_shim_ha_mu);
    for (ha_qp_t *m = ah_shim_ha_qps; m && nw < 256; m = m->next) {
      int s = atomic_load(&m->sb.state);
      if (s == SH_WANTED || s == SH_PUBLISHED || s == SH_RTS ||
          (atomic_load(&m->state) == HA_FAILING && m->fo_step > 0) ||
          ah_shim_ha_health_due(m, now)) {
        m->busy = 1;
        work[nw++] = m;
      }
    }
    if (!nw) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 50 * 1000000L;
      if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      pthread_cond_timedwait(&ah_shim_ha_cv, &ah_shim_ha_mu, &ts);
      pthread_mutex_unlock(&ah_shim_ha_mu);
      continue;
    }
    pthread_mutex_unlock(&ah_shim_ha_mu);
    int moved = 0, failing = 0, building = 0;
    for (int i = 0; i < nw; i++) {
      int s = atomic_load(&work[i]->sb.state);
      failing |= atomic_load(&work[i]->state) == HA_FAILING;
      building |= s == SH_WANTED || s == SH_PUBLISHED || s == SH_RTS;
    }
    for (int i = 0; i < nw; i++) {
      ha_qp_t *m = work[i];
      /* a failover may wait for its standby: both advance in the same round */
      if (atomic_load(&m->state) == HA_FAILING && m->fo_step > 0)
        moved |= ah_shim_ha_failover_step(m);
      int s = atomic_load(&m->sb.state);
      if (s == SH_WANTED || s == SH_PUBLISHED || s == SH_RTS) moved |= ah_shim_ha_shadow_step(m);
      if (ah_shim_ha_health_due(m, ha_now_s())) {
        ah_shim_ha_failback_step(
            m); /* a recovered port: its standby rebuilt now (rdma_ha_failback.c) */
        moved |= ah_shim_ha_health_step(m);
      }
    }
    pthread_mutex_lock(&ah_shim_ha_mu);
    for (int i = 0; i < nw; i++) work[i]->busy = 0;
    pthread_cond_broadcast(&ah_shim_ha_idle_cv);
    if (!moved) { /* 1 ms between steps of a failover (the stall NCCL sees), 10 ms while a standby is
                   * built, 50 ms for heartbeats and the soft timeout's look */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += failing ? 1000000L : building ? 10000000L : 50000000L;
      if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      pthread_cond_timedwait(&ah_shim_ha_cv, &ah_shim_ha_mu, &ts);
    }
    pthread_mutex_unlock(&ah_shim_ha_mu);
  }
  return NULL;
}
