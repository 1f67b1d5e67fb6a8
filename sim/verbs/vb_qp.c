/* vb_qp.c: RC and UC queue pairs — creation (the QP number is the O_EXCL-created name of the QP's
 * inbound ring, so numbers are unique per device across processes), the state machine with mlx5's
 * attribute-mask rules, queries, completions of send WRs, and flushing in ERR (posting is vb_post.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vb_internal.h"

#define MAX_WR 8192
#define MAX_INLINE 256

static _Atomic uint32_t qpn_serial;

VB_API struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia) {
  if (!pd || !ia || (ia->qp_type != IBV_QPT_RC && ia->qp_type != IBV_QPT_UC) || !ia->send_cq ||
      !ia->recv_cq || ia->srq || ia->cap.max_send_wr < 1 || ia->cap.max_send_wr > MAX_WR ||
      ia->cap.max_recv_wr > MAX_WR || ia->cap.max_send_sge > VB_MAX_SGE ||
      ia->cap.max_recv_sge > VB_MAX_SGE || ia->cap.max_inline_data > MAX_INLINE ||
      ia->send_cq->context != pd->context || ia->recv_cq->context != pd->context) {
    errno = EINVAL;
    return NULL;
  }
  vb_ctx_t *ctx = vb_ctx(pd->context);
  vb_qp_t *q = calloc(1, sizeof *q);
  if (!q) goto fail;
  q->wcerr_at = -1; /* injected completion errors: not looked yet (vb_engine.c) */
  q->cap = ia->cap;
  if (q->cap.max_send_sge < 1) q->cap.max_send_sge = 1;
  if (q->cap.max_recv_sge < 1) q->cap.max_recv_sge = 1;
  if (q->cap.max_recv_wr < 1) q->cap.max_recv_wr = 1;
  q->sq = calloc(q->cap.max_send_wr, sizeof *q->sq);
  q->rq = calloc(q->cap.max_recv_wr, sizeof *q->rq);
  if (!q->sq || !q->rq) goto fail_q;
  /* QP numbers decide NCCL's RoCE source ports (flow label 0), so they must not change from run to
   * run: seeded by the process's RANK where the launcher sets one, else its pid. */
  const char *rank = getenv("RANK");
  uint32_t seed = rank && *rank ? (uint32_t)strtoul(rank, NULL, 10) + 1 : (uint32_t)getpid();
  uint32_t qpn = 0;
  for (int tries = 0; tries < 4096; tries++) {
    uint32_t s = atomic_fetch_add(&qpn_serial, 1);
    qpn = (seed * 2654435761u + s * 40503u) % 0xffff00u + 0x40;
    if (vb_ring_create(&q->in, ctx->dev->node, ctx->dev->nic, qpn, ctx->bell_name) == 0) break;
    if (errno != EEXIST) goto fail_q;
    qpn = 0;
  }
  if (!qpn) goto fail_q;
  pthread_mutex_init(&q->lock, NULL);
  q->ctx = ctx;
  q->sq_sig_all = ia->sq_sig_all;
  q->qp.context = pd->context;
  q->qp.qp_context = ia->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = ia->send_cq;
  q->qp.recv_cq = ia->recv_cq;
  q->qp.qp_num = qpn;
  q->qp.handle = qpn;
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = ia->qp_type;
  pthread_mutex_init(&q->qp.mutex, NULL);
  pthread_cond_init(&q->qp.cond, NULL);
  q->attr.qp_state = IBV_QPS_RESET;
  q->attr.path_mtu = IBV_MTU_4096;
  q->attr.port_num = 1;
  ia->cap = q->cap;
  pthread_mutex_lock(&ctx->lock);
  HASH_ADD(hh, ctx->qps, qp.qp_num, sizeof(uint32_t), q);
  int added = VB_HASH_ADDED(q);
  pthread_mutex_unlock(&ctx->lock);
  if (!added) {
    vb_ring_close(&q->in, 1);
    goto fail_q;
  }
  return &q->qp;
fail_q:
  free(q->sq);
  free(q->rq);
  free(q);
fail:
  errno = ENOMEM;
  return NULL;
}

static void drop_out(vb_qp_t *q) {
  vb_ring_close(&q->out, 0);
  if (q->peer_bell) vb_bell_close(q->peer_bell, NULL);
  q->peer_bell = NULL;
}

VB_API int ibv_destroy_qp(struct ibv_qp *qp) {
  vb_qp_t *q = (vb_qp_t *)qp;
  vb_ctx_t *ctx = q->ctx;
  pthread_mutex_lock(&ctx->lock);
  HASH_DEL(ctx->qps, q);
  pthread_mutex_unlock(&ctx->lock);
  pthread_mutex_lock(&q->lock);
  drop_out(q);
  vb_ring_close(&q->in, 1);
  for (uint32_t i = q->sq_head; i != q->sq_tail; i++) free(q->sq[i % q->cap.max_send_wr].inl);
  pthread_mutex_unlock(&q->lock);
  pthread_mutex_destroy(&q->lock);
  free(q->sq);
  free(q->rq);
  free(q);
  return 0;
}

/* Opens the peer QP's ring and its engine's doorbell from the RTR attributes; computes the flow.
 * Returns 0 when connected; -1 leaves the QP unconnected (the engine retries and, while it cannot,
 * runs the QP's retry timer). */
int vb_qp_connect_rings(vb_qp_t *q) {
  if (q->out.h) return 0;
  sim_fabric_ep_t ep;
  /* InfiniBand without a GRH is addressed by the destination LID alone */
  int by_lid = vb_net_is_ib() && !q->attr.ah_attr.is_global;
  if (by_lid ? vb_net_lid_ep(q->attr.ah_attr.dlid, &ep) != 0
             : vb_net_gid_ep(q->attr.ah_attr.grh.dgid.raw, &ep) != 0)
    return -1;
  q->flow.src.node = q->ctx->dev->node;
  q->flow.src.nic = q->ctx->dev->nic;
  q->flow.src.port = q->attr.port_num;
  q->flow.dst = ep;
  if (vb_net_is_ib()) {
    /* an IB switch forwards by destination LID, one path per (source, LID) here with LMC 0: no
     * UDP source port enters the hash; the service level picks the queue as DSCP does on RoCE */
    q->flow.tc = (uint8_t)(q->attr.ah_attr.sl << 2);
    q->flow.sport = 0;
  } else {
    q->flow.tc = q->attr.ah_attr.grh.traffic_class;
    q->flow.sport = q->sport_override ? q->sport_override
                                      : vb_net_sport(q->attr.ah_attr.grh.flow_label, q->qp.qp_num,
                                                     q->attr.dest_qp_num);
  }
  q->flow_ok = 1;
  if (vb_ring_open(&q->out, ep.node, ep.nic, q->attr.dest_qp_num) != 0) return -1;
  q->peer_drops_seen = atomic_load(&q->out.h->drops);
  snprintf(q->peer_bell_name, sizeof q->peer_bell_name, "%s", q->out.h->doorbell);
  q->peer_bell = vb_bell_open(q->peer_bell_name);
  if (!q->peer_bell) {
    vb_ring_close(&q->out, 0);
    return -1;
  }
  return 0;
}

static int attr_values_ok(vb_qp_t *q, const struct ibv_qp_attr *a, int mask) {
  if ((mask & IBV_QP_PORT) && (a->port_num < 1 || a->port_num > vb_net_nic_ports(q->ctx->dev->nic)))
    return 0;
  if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0) return 0;
  if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096))
    return 0;
  if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31) return 0;
  if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) return 0;
  if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) return 0;
  if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31) return 0;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > 16) return 0;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > 16) return 0;
  if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > 0xffffff) return 0;
  if (mask & IBV_QP_AV) {
    /* RoCE needs a GRH; the GID table has one entry */
    if (!vb_net_is_ib() && !a->ah_attr.is_global) return 0;
    if (vb_net_is_ib() && !a->ah_attr.is_global &&
        (a->ah_attr.dlid == 0 || a->ah_attr.dlid >= 0xC000))
      return 0; /* a unicast LID */
    if (a->ah_attr.is_global && a->ah_attr.grh.sgid_index != 0) return 0;
  }
  if ((mask & IBV_QP_ACCESS_FLAGS) &&
      (a->qp_access_flags & ~(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)))
    return 0;
  return 1;
}

static void apply(vb_qp_t *q, const struct ibv_qp_attr *a, int mask) {
  struct ibv_qp_attr *t = &q->attr;
  if (mask & IBV_QP_PKEY_INDEX) t->pkey_index = a->pkey_index;
  if (mask & IBV_QP_PORT) t->port_num = a->port_num;
  if (mask & IBV_QP_ACCESS_FLAGS) t->qp_access_flags = a->qp_access_flags;
  if (mask & IBV_QP_AV) t->ah_attr = a->ah_attr;
  if (mask & IBV_QP_PATH_MTU) t->path_mtu = a->path_mtu;
  if (mask & IBV_QP_DEST_QPN) t->dest_qp_num = a->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) t->rq_psn = a->rq_psn;
  if (mask & IBV_QP_SQ_PSN) t->sq_psn = a->sq_psn;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) t->max_dest_rd_atomic = a->max_dest_rd_atomic;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) t->max_rd_atomic = a->max_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) t->min_rnr_timer = a->min_rnr_timer;
  if (mask & IBV_QP_TIMEOUT) t->timeout = a->timeout;
  if (mask & IBV_QP_RETRY_CNT) t->retry_cnt = a->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) t->rnr_retry = a->rnr_retry;
  if (mask & IBV_QP_PATH_MIG_STATE) t->path_mig_state = a->path_mig_state;
  if (mask & IBV_QP_ALT_PATH) t->alt_ah_attr = a->alt_ah_attr;
}

static void set_state(vb_qp_t *q, enum ibv_qp_state s) {
  if (q->qp.state != s) vb_epoch_bump();
  q->qp.state = s;
  q->attr.qp_state = s;
  if (q->in.h) atomic_store(&q->in.h->owner_state, (uint32_t)s);
}

static void reset(vb_qp_t *q) {
  for (uint32_t i = q->sq_head; i != q->sq_tail; i++) free(q->sq[i % q->cap.max_send_wr].inl);
  q->sq_head = q->sq_tx = q->sq_tail = 0;
  q->rq_head = q->rq_tail = 0;
  q->tx_off = q->rd_off = q->rd_resp_off = q->rx_off = 0;
  q->next_msn = q->epsn = 0;
  q->rnr_until = q->stall_since = 0;
  q->rnr_count = q->nak_pending = q->rx_applied = q->comm_est_sent = q->err_flushed = 0;
  q->flow_ok = 0;
  drop_out(q);
  /* discard what is queued for us; the producer keeps its head */
  atomic_store(&q->in.h->tail, atomic_load(&q->in.h->head));
  atomic_store(&q->in.h->peer_fatal, 0);
}

VB_API int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask) {
  vb_qp_t *q = (vb_qp_t *)qp;
  if (!attr) return EINVAL;
  pthread_mutex_lock(&q->lock);
  enum ibv_qp_state cur = q->qp.state;
  enum ibv_qp_state next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
  int rc = 0;
  if (((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur) ||
      !vb_qp_transition_ok(q->qp.qp_type, cur, next, mask) || !attr_values_ok(q, attr, mask)) {
    rc = EINVAL;
  } else {
    apply(q, attr, mask);
    if (next == IBV_QPS_RESET) {
      reset(q);
      set_state(q, next);
    } else if (next == IBV_QPS_ERR) {
      set_state(q, next);
      vb_qp_to_error(q, 0);
    } else {
      if (next == IBV_QPS_RTR && cur == IBV_QPS_INIT) {
        q->epsn = 0;
        vb_qp_connect_rings(q); /* a failure is retried by the engine */
      }
      set_state(q, next);
    }
  }
  pthread_mutex_unlock(&q->lock);
  if (!rc) vb_engine_kick(q->ctx);
  return rc;
}

VB_API int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
                        struct ibv_qp_init_attr *init) {
  vb_qp_t *q = (vb_qp_t *)qp;
  pthread_mutex_lock(&q->lock);
  *attr = q->attr;
  attr->qp_state = attr->cur_qp_state = q->qp.state;
  attr->cap = q->cap;
  attr->sq_draining = 0;
  if (init) {
    memset(init, 0, sizeof *init);
    init->qp_context = q->qp.qp_context;
    init->send_cq = q->qp.send_cq;
    init->recv_cq = q->qp.recv_cq;
    init->cap = q->cap;
    init->qp_type = q->qp.qp_type;
    init->sq_sig_all = q->sq_sig_all;
  }
  pthread_mutex_unlock(&q->lock);
  return 0;
}

/* ---- completions and errors ------------------------------------------------------------------ */

static enum ibv_wc_opcode wc_op(int wr_op) {
  switch (wr_op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    default: return IBV_WC_SEND;
  }
}

static uint32_t vendor_err(enum ibv_wc_status st) {
  switch (st) { /* mlx5 syndromes, as ibv_wc.vendor_err carries them */
    case IBV_WC_SUCCESS: return 0;
    case IBV_WC_WR_FLUSH_ERR: return 0xf9;
    case IBV_WC_RETRY_EXC_ERR: return 0x81;
    case IBV_WC_RNR_RETRY_EXC_ERR: return 0x82;
    case IBV_WC_REM_ACCESS_ERR: return 0x89;
    case IBV_WC_REM_INV_REQ_ERR: return 0x8a;
    case IBV_WC_LOC_PROT_ERR: return 0x04;
    case IBV_WC_LOC_LEN_ERR: return 0x01;
    default: return 0x88;
  }
}

/* Retires the send WQE at sq_head: a completion when it failed, was signalled, or `force`. */
void vb_qp_complete_send(vb_qp_t *q, vb_swqe_t *w, enum ibv_wc_status st, int force) {
  if (st != IBV_WC_SUCCESS || w->signaled || force) {
    struct ibv_wc wc;
    memset(&wc, 0, sizeof wc);
    wc.wr_id = w->wr_id;
    wc.status = st;
    wc.opcode = wc_op(w->opcode);
    wc.byte_len = (uint32_t)w->len;
    wc.qp_num = q->qp.qp_num;
    wc.vendor_err = vendor_err(st);
    vb_cq_push((vb_cq_t *)q->qp.send_cq, &wc);
  }
  free(w->inl);
  w->inl = NULL;
}

/* Every outstanding send and receive completes with WR_FLUSH_ERR (caller holds q->lock; QP in ERR). */
void vb_qp_flush(vb_qp_t *q) {
  while (q->sq_head != q->sq_tail) {
    vb_qp_complete_send(q, &q->sq[q->sq_head % q->cap.max_send_wr], IBV_WC_WR_FLUSH_ERR, 1);
    q->sq_head++;
  }
  q->sq_tx = q->sq_head;
  q->tx_off = 0;
  while (q->rq_head != q->rq_tail) {
    vb_rwqe_t *r = &q->rq[q->rq_head % q->cap.max_recv_wr];
    struct ibv_wc wc;
    memset(&wc, 0, sizeof wc);
    wc.wr_id = r->wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = q->qp.qp_num;
    wc.vendor_err = vendor_err(IBV_WC_WR_FLUSH_ERR);
    vb_cq_push((vb_cq_t *)q->qp.recv_cq, &wc);
    q->rq_head++;
  }
}

/* The simulation's shortcut: a QP that fails tells its peer through the peer's ring header, and
 * the peer's engine moves that QP to ERR and flushes it (real RC peers find out by their own
 * timeouts, or never). */
void vb_qp_to_error(vb_qp_t *q, int tell_peer) {
  set_state(q, IBV_QPS_ERR);
  vb_qp_flush(q);
  if (tell_peer && q->out.h && q->out.h != q->in.h) {
    atomic_store(&q->out.h->peer_fatal, 1);
    if (q->peer_bell) vb_bell_ring(q->peer_bell);
  }
}

/* The engine's transmissions and the responder's replies leave through here. */
int vb_qp_emit(vb_qp_t *q, const vb_pkt_t *p, const void *payload, const void *payload2,
               uint32_t len1) {
  if (!q->out.h || !q->path_up_now || !vb_ring_can_put(&q->out, p->len)) return 0;
  vb_ring_put(&q->out, p, payload, payload2, len1);
  q->bell_dirty = 1;
  atomic_fetch_add_explicit(&q->tx_bytes, p->len, memory_order_relaxed);
  return 1;
}
