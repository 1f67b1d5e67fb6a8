/* rdma_ha_state.c: the HA layer's shared state (rdma_ha_int.h) — its lock and condition variables,
 * the wrapped contexts, the list of managed queue pairs, the report's counters and failover
 * records, the writer of the QP-number tables — and the state changes of a managed queue pair that
 * both the data path (NCCL's poll) and the background thread make: a standby's heartbeat result,
 * its death and rebuild time, whether a carrier's error may be held, the start of a failover.
 * Every other rdma_ha_*.c file uses it and it uses none of them, so the layer's files depend on
 * each other in one direction. */
#include <stdio.h>
#include <string.h>

#include "rdma_ha_int.h"

/* the layer's shared objects (rdma_ha_int.h), defined here so that no other file of the layer
 * depends on another for them */
pthread_mutex_t ah_shim_ha_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t ah_shim_ha_cv = PTHREAD_COND_INITIALIZER;
pthread_cond_t ah_shim_ha_idle_cv = PTHREAD_COND_INITIALIZER;
ha_ctx_t *ah_shim_ha_ctxs[HA_MAX_CTX];
_Atomic int ah_shim_ha_nctx;
ha_qp_t *ah_shim_ha_qps;
pthread_mutex_t ah_shim_ha_events_mu = PTHREAD_MUTEX_INITIALIZER;
ah_report_failover_t ah_shim_ha_events[AH_REPORT_HA_MAX];
int ah_shim_ha_nevents;
_Atomic unsigned long ah_shim_ha_st_shadows, ah_shim_ha_st_failovers, ah_shim_ha_st_replayed,
    ah_shim_ha_st_synth;

int ah_shim_ha_table_set(ha_ctx_t *hc, uint32_t qpn, ha_qp_t *m) {
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

int ah_shim_ha_can_hold(ha_qp_t *m) {
  if (m->unprotected) return 0;
  switch (atomic_load(&m->sb.state)) {
    case SH_WANTED:
    case SH_PUBLISHED:
    case SH_RTS:
    case SH_CONNECTED:
    case SH_READY: return 1;
    case SH_DEAD: return m->sb.rebuild_at != 0;
    default: return 0;
  }
}

void ah_shim_ha_failover_start(ha_qp_t *m, const char *why) {
  m->t_fail = ha_now_s();
  m->fo_step = FO_DRAIN;
  m->fo_deadline = 0;
  m->fo_status = 0; /* a path error's; the caller names an error class's (rdma_ha_data.c) */
  atomic_store(&m->drained_send, 0);
  atomic_store(&m->drained_recv, 0);
  atomic_store(&m->state, HA_FAILING);
  int ready = atomic_load(&m->sb.state) == SH_READY;
  ah_log_dev(m->gpu, AH_LOG_INFO, "HA: QP %u: %s on the %s; failing over to %s QP %u", m->qpn, why,
             m->sh ? "shadow carrying its traffic" : "primary path",
             ready ? "its shadow" : "its shadow, once ready,", m->sb.qpn);
}

/* The names of the statuses the HA layer logs (the shim does not link libibverbs). */
static const char *hb_status(enum ibv_wc_status st) {
  switch (st) {
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
    default: return "error";
  }
}

void ah_shim_ha_heartbeat_done(ha_qp_t *m, const struct ibv_wc *wc) {
  if (wc->qp_num != m->sb.qpn || atomic_load(&m->sb.state) == SH_DEAD)
    return; /* a dead one's flushes */
  if (wc->wr_id == WRID_HB) m->sb.hb_out = 0;
  if (wc->status == IBV_WC_SUCCESS) {
    m->sb.hb_ok = ha_now_s();
    int want = SH_CONNECTED;
    if (atomic_compare_exchange_strong(&m->sb.state, &want, SH_READY)) {
      m->sb.ready_t = m->sb.hb_ok;
      m->sb.rebuild_at = 0;
      m->sb_fails = 0;
      atomic_fetch_add(&ah_shim_ha_st_shadows, 1);
      ah_log_dev(m->gpu, AH_LOG_DEBUG, "HA: QP %u: shadow QP %u (port %d) is ready", m->qpn,
                 m->sb.qpn, m->sb.port);
    }
  } else {
    char why[96];
    snprintf(why, sizeof why, "it failed its heartbeat (%s)", hb_status(wc->status));
    ah_shim_ha_standby_dead(m, why);
  }
}

void ah_shim_ha_standby_dead(ha_qp_t *m, const char *why) {
  if (atomic_load(&m->sb.state) == SH_DEAD) return;
  atomic_store(&m->sb.state, SH_DEAD);
  m->sb.hb_out = 0;
  m->sb.dead_t = ha_now_s();
  /* rebuilt after 0.25, 0.5, 1, 2, 4, then every 8 s while the peer runs autoha (a port that stays
   * down costs a few queue pairs, not a storm), or after 50, 100, 200, 400 ms when a failover
   * waits for it (the stall NCCL sees); past HA_GEN_MAX shadows the connection keeps none */
  int failing = atomic_load(&m->state) == HA_FAILING;
  int k = m->sb_fails < (failing ? 3 : 5) ? m->sb_fails : (failing ? 3 : 5);
  m->sb_fails++;
  m->sb_dead_port = m->sb.port;
  m->sb_dead_sport = m->sb.sport;
  double first = failing ? HA_REBUILD_S / 5 : HA_REBUILD_S;
  m->sb.rebuild_at = m->ngens < HA_GEN_MAX ? ha_now_s() + first * (double)(1 << k) : 0;
  AH_LOG_DEV_CAPPED(8, m->gpu, AH_LOG_WARN, "HA: the standby shadow QP %u of QP %u is dead: %s; %s",
                    m->sb.qpn, m->qpn, why,
                    m->sb.rebuild_at ? "it is rebuilt" : "that connection has no backup path");
}

int ah_shim_ha_port_state(ha_ctx_t *hc, int port) {
  typedef int (*query_port_fn)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
  static _Atomic(query_port_fn) qp_fn;
  static _Atomic int looked;
  query_port_fn f = atomic_load(&qp_fn);
  if (!f && !atomic_exchange(&looked, 1)) {
    /* the exported symbol takes the compat attributes, a prefix of struct ibv_port_attr whose
     * first field is the state */
    if (hc->real.resolve) *(void **)&f = hc->real.resolve("ibv_query_port", "IBVERBS_1.1");
    if (f) atomic_store(&qp_fn, f);
    else
      ah_log(AH_LOG_INFO,
             "HA: ibv_query_port not found: a recovered port is found by the standby "
             "rebuilds' backoff, a dead one by its standbys' errors");
  }
  if (!f) return -1;
  struct ibv_port_attr a;
  memset(&a, 0, sizeof a);
  if (f(hc->ctx, (uint8_t)port, &a) != 0) return -1;
  return (int)a.state;
}
