/* shim_ha_state.c: the HA layer's shared state (shim_ha_int.h): its lock and condition variables,
 * the wrapped contexts, the list of managed queue pairs, the counters and failover records of the
 * report, and the writer of the contexts' QP-number tables. Every other shim_ha_*.c file uses it
 * and it uses none of them, so the layer's files depend on each other in one direction. */
#include "shim_ha_int.h"

pthread_mutex_t ha_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t ha_cv = PTHREAD_COND_INITIALIZER;
pthread_cond_t ha_idle_cv = PTHREAD_COND_INITIALIZER;
ha_ctx_t *ha_ctxs[HA_MAX_CTX];
_Atomic int ha_nctx;
ha_qp_t *ha_qps;
_Atomic unsigned long ha_st_shadows, ha_st_failovers, ha_st_replayed, ha_st_synth;
pthread_mutex_t ha_events_mu = PTHREAD_MUTEX_INITIALIZER;
ah_report_failover_t ha_events[AH_REPORT_HA_MAX];
int ha_nevents;

int ha_table_set(ha_ctx_t *hc, uint32_t qpn, ha_qp_t *m) {
  uint32_t i = slot_of(qpn);
  int free_at = -1;
  for (int n = 0; n < HA_SLOTS; n++, i = (i + 1) & (HA_SLOTS - 1)) {
    uint32_t k = atomic_load(&hc->key[i]);
    if (k == qpn) {
      atomic_store_explicit(&hc->val[i], m, memory_order_release);
      return 0;
    }
    if (k == 0) break;
    if (free_at < 0 && !atomic_load(&hc->val[i])) free_at = (int)i;
  }
  if (!m) return 0;
  if (free_at < 0) {
    if (atomic_load(&hc->key[i]) != 0) return -1;
    free_at = (int)i;
  }
  atomic_store_explicit(&hc->val[free_at], m, memory_order_release);
  atomic_store_explicit(&hc->key[free_at], qpn, memory_order_release);
  return 0;
}
