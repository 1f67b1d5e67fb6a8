/* rdma_ha_qp.c: the queue pairs the HA layer manages (docs/ha.md), as the verbs hook reports NCCL
 * creating, connecting and destroying them: their entries in the QP-number tables, the facts a shadow is built from
 * (port, access, RTR and RTS attributes, GID or, on InfiniBand, LID: rdma_ha_ib.c), the start of the background thread, the switch
 * AUTOHA_HA and the report's "ha" section. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ah_env.h"
#include "rdma.h"
#include "rdma_ha_ib.h"
#include "rdma_ha_int.h"

static int thread_started;

int ah_shim_ha_on(void) {
  static _Atomic int on = -1;
  int v = atomic_load_explicit(&on, memory_order_relaxed);
  if (v < 0) {
    const ah_settings_t *s = ah_env_settings();
    v = s->enable && s->ha != AH_HA_POLICY_OFF;
    const char *own = getenv("NCCL_IB_RESILIENCY_PORT_FAILOVER");
    if (v && own && atoi(own) == 1) {
      /* two layers replaying the same work requests would deliver them twice */
      ah_log(AH_LOG_WARN,
             "HA: NCCL_IB_RESILIENCY_PORT_FAILOVER=1: NCCL's own port failover is on, so "
             "autoha's (AUTOHA_HA) stands aside");
      v = 0;
    }
    atomic_store(&on, v);
  }
  return v;
}

int ah_shim_ha_nic_on(void) { return ah_env_settings()->ha == AH_HA_POLICY_NIC && ah_shim_ha_on(); }

static _Atomic(int (*)(void)) gpu_fn; /* the shim's: the device current on the calling thread */
void ah_shim_ha_set_gpu(int (*fn)(void)) { atomic_store(&gpu_fn, fn); }

void ah_shim_ha_created(struct ibv_qp *qp, const struct ibv_qp_init_attr *init,
                        const ah_shim_ha_verbs_t *real) {
  if (!qp || !init || qp->qp_type != IBV_QPT_RC || init->srq || !real->create_qp ||
      !real->modify_qp || !real->destroy_qp || !real->query_gid || !real->qp_sport ||
      !real->move_sport || !ah_shim_ha_on()) {
    ah_log(AH_LOG_DEBUG, "HA: QP %u is not managed (type %d, verbs %d%d%d%d)", qp ? qp->qp_num : 0,
           qp ? (int)qp->qp_type : -1, !!real->create_qp, !!real->modify_qp, !!real->destroy_qp,
           !!real->query_gid);
    return;
  }
  int saved = errno;
  ha_qp_t *m = calloc(1, sizeof *m);
  if (!m) goto out;
  uint32_t scap = init->cap.max_send_wr ? init->cap.max_send_wr : 1, rcap = init->cap.max_recv_wr;
  if (ah_ha_slog_init(&m->slog, 2 * scap) != 0 ||
      ah_ha_rlog_init(&m->rlog, 2 * (rcap ? rcap : 1)) != 0) {
    ah_ha_slog_free(&m->slog);
    free(m);
    goto out;
  }
  m->slog.sig_all = init->sq_sig_all != 0;
  m->qp = qp;
  m->qpn = qp->qp_num;
  m->pd = qp->pd;
  m->send_cq = init->send_cq;
  m->recv_cq = init->recv_cq;
  m->cap = init->cap;
  m->port = 1;
  m->flow = -2;
  int (*g)(void) = atomic_load(&gpu_fn);
  m->gpu = g ? g() : -1; /* NCCL creates it on a thread of its rank's device */
  pthread_mutex_init(&m->mu, NULL);
  pthread_mutex_lock(&ah_shim_ha_mu);
  ha_ctx_t *hc = ah_shim_ha_ctx_get(qp->context, real);
  if (!hc || ah_shim_ha_table_set(hc, m->qpn, m) != 0) {
    pthread_mutex_unlock(&ah_shim_ha_mu);
    AH_LOG_CAPPED(1, AH_LOG_WARN,
                  "HA: cannot manage QP %u (too many contexts or QPs); it runs without a shadow",
                  qp->qp_num);
    ah_ha_slog_free(&m->slog);
    ah_ha_rlog_free(&m->rlog);
    free(m);
    goto out;
  }
  m->hc = hc;
  m->next = ah_shim_ha_qps;
  ah_shim_ha_qps = m;
  if (!thread_started) {
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, ah_shim_ha_thread, NULL) == 0) thread_started = 1;
    else ah_log(AH_LOG_WARN, "HA: cannot start the background thread; no shadows are built");
    pthread_attr_destroy(&a);
  }
  pthread_mutex_unlock(&ah_shim_ha_mu);
out:
  errno = saved;
}

static ha_qp_t *managed(struct ibv_qp *qp) {
  ha_ctx_t *hc = ctx_of(qp->context);
  ha_qp_t *m = hc ? table_find(hc, qp->qp_num) : NULL;
  return m && m->qp == qp ? m : NULL;
}

void ah_shim_ha_modified(struct ibv_qp *qp, const struct ibv_qp_attr *attr, int mask) {
  if (!qp || !attr || !(mask & IBV_QP_STATE) || !atomic_load(&ah_shim_ha_nctx)) return;
  ha_qp_t *m = managed(qp);
  if (!m) return;
  pthread_mutex_lock(&ah_shim_ha_mu);
  if (attr->qp_state == IBV_QPS_INIT) {
    if (mask & IBV_QP_PORT) m->port = attr->port_num;
    if (mask & IBV_QP_ACCESS_FLAGS) m->access = (int)attr->qp_access_flags;
    if (mask & IBV_QP_PKEY_INDEX) m->pkey_index = attr->pkey_index;
  } else if (attr->qp_state == IBV_QPS_RTR) {
    m->rtr = *attr;
    m->rtr_mask = mask;
    m->have_sgid = ah_shim_ha_ib_rtr(m, qp); /* a GID, or on InfiniBand the LID's address */
  } else if (attr->qp_state == IBV_QPS_RTS && m->rtr_mask) {
    m->rts = *attr;
    m->rts_mask = mask;
    if (atomic_load(&m->sb.state) == SH_NONE && !m->sh) {
      if (m->have_sgid && ah_shim_ha_ib_policy_ok(m)) {
        m->sb.gen = 1;
        atomic_store(&m->sb.state, SH_WANTED);
        pthread_cond_signal(&ah_shim_ha_cv);
      } else if (!m->have_sgid) {
        AH_LOG_DEV_CAPPED(1, m->gpu, AH_LOG_INFO,
                          "HA: QP %u: its port has no %s: it runs without a shadow", m->qpn,
                          ha_by_lid(m) ? "LID (or NCCL gave no dlid)" : "GID at NCCL's index");
      }
    }
  }
  pthread_mutex_unlock(&ah_shim_ha_mu);
}

/* The RC retry window of timeout `to` and retry count `rc`, in seconds (timeout 0: never). */
static double retry_window_s(int to, int rc) {
  return to ? 4.096e-6 * (double)(1ull << to) * (rc + 1) : 1e30;
}

int ah_shim_ha_rts_attr(struct ibv_qp *qp, const struct ibv_qp_attr *attr, int mask,
                        struct ibv_qp_attr *out_p) {
  if (!qp || !attr || !(mask & IBV_QP_STATE) || attr->qp_state != IBV_QPS_RTS ||
      !(mask & (IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT)) || !atomic_load(&ah_shim_ha_nctx))
    return 0;
  const ah_settings_t *s = ah_env_settings();
  ha_qp_t *m = managed(qp);
  if (!m) return 0;
  pthread_mutex_lock(&ah_shim_ha_mu);
  /* the queue pairs that get a shadow (ah_shim_ha_modified): a shorter window elsewhere would only
   * end a connection sooner */
  int shadowed = m->rtr_mask && m->rtr.ah_attr.is_global && m->have_sgid;
  pthread_mutex_unlock(&ah_shim_ha_mu);
  if (!shadowed) return 0;
  int to = (mask & IBV_QP_TIMEOUT) ? attr->timeout : 0,
      rc = (mask & IBV_QP_RETRY_CNT) ? attr->retry_cnt : 0;
  int new_to = to, new_rc = rc;
  /* timeout 0 is "wait forever", the longest of all */
  if ((mask & IBV_QP_TIMEOUT) && s->ha_ib_timeout > 0 && (to == 0 || to > s->ha_ib_timeout))
    new_to = s->ha_ib_timeout;
  if ((mask & IBV_QP_RETRY_CNT) && rc > s->ha_ib_retry_cnt) new_rc = s->ha_ib_retry_cnt;
  if (new_to == to && new_rc == rc) return 0;
  *out_p = *attr;
  out_p->timeout = (uint8_t)new_to;
  out_p->retry_cnt = (uint8_t)new_rc;
  AH_LOG_DEV_CAPPED(
      1, m->gpu, AH_LOG_INFO,
      "HA: QP %u: RC timeout %d -> %d, retry count %d -> %d: a path failure reaches the "
      "failover after %.2f s instead of %.1f s (AUTOHA_HA_IB_TIMEOUT, "
      "AUTOHA_HA_IB_RETRY_CNT; logged once)",
      m->qpn, to, new_to, rc, new_rc, retry_window_s(new_to, new_rc), retry_window_s(to, rc));
  return 1;
}

/* Releases what a destroyed QP held. The struct itself stays (a few hundred bytes per QP NCCL
 * destroys): a data-path thread's cached lookup may still read m->qp, which is now NULL. */
static void qp_free(ha_qp_t *m) {
  ah_ha_slog_free(&m->slog);
  ah_ha_rlog_free(&m->rlog);
  m->slog.cap = m->rlog.cap = 1;
  atomic_store(&m->state, HA_BROKEN);
  m->qp = NULL;
}

void ah_shim_ha_destroying(struct ibv_qp *qp) {
  if (!qp || !atomic_load(&ah_shim_ha_nctx)) return;
  int saved = errno;
  pthread_mutex_lock(&ah_shim_ha_mu);
  ha_qp_t *m = managed(qp);
  if (m) {
    ha_ctx_t *hc = m->hc;
    ah_shim_ha_table_set(hc, m->qpn, NULL);
    for (int g = 0; g < m->ngens; g++) /* a nic shadow's number is another NIC's */
      if (!ha_on_nic(m, m->gens[g])) ah_shim_ha_table_set(hc, m->gens[g]->qp_num, NULL);
    if (m->nq) ah_shim_ha_nic_shadow_forget(m);
    for (ha_qp_t **p = &ah_shim_ha_qps; *p; p = &(*p)->next)
      if (*p == m) {
        *p = m->next;
        break;
      }
    /* the thread may be working on this QP (a step takes milliseconds): NCCL's QP must outlive it */
    while (m->busy) pthread_cond_wait(&ah_shim_ha_idle_cv, &ah_shim_ha_mu);
    for (int g = 0; g < m->ngens; g++) hc->real.destroy_qp(m->gens[g]);
    m->ngens = 0;
    m->sh = m->sb.qp = NULL;
    qp_free(m);
  }
  pthread_mutex_unlock(&ah_shim_ha_mu);
  errno = saved;
}

void ah_shim_ha_report(ah_report_ha_t *h) {
  memset(h, 0, sizeof *h);
  if (!ah_shim_ha_on()) return;
  int ha = ah_env_settings()->ha;
  snprintf(h->policy, sizeof h->policy, "%s",
           ha == AH_HA_POLICY_PATH  ? "path"
           : ha == AH_HA_POLICY_NIC ? "nic"
                                    : "port");
  h->shadows = atomic_load(&ah_shim_ha_st_shadows);
  h->failovers = atomic_load(&ah_shim_ha_st_failovers);
  h->replayed = atomic_load(&ah_shim_ha_st_replayed);
  h->synthesized = atomic_load(&ah_shim_ha_st_synth);
  pthread_mutex_lock(&ah_shim_ha_events_mu);
  h->nfail = ah_shim_ha_nevents;
  memcpy(h->fail, ah_shim_ha_events, sizeof ah_shim_ha_events[0] * (size_t)ah_shim_ha_nevents);
  pthread_mutex_unlock(&ah_shim_ha_events_mu);
  ah_shim_ha_rebal_report(h);
}
