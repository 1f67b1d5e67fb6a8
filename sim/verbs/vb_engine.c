/* vb_engine.c: the simulated NIC — one thread per opened context. Each pass it takes every QP of
 * the context: consumes its inbound ring (requests go to the responder, ACKs, NAKs and READ
 * responses to the requester here), transmits posted work into the peer's ring in segments of at
 * most VB_SEG_MAX bytes, and runs the QP's timers. Then it sleeps on its doorbell (a futex that
 * peers and post_send ring), waking at the next timer or after at most 100 ms to look at the
 * fabric (ports, paths) and at peers that may have died.
 *
 * A requester transmits only to a peer QP in RTR or RTS; requests the peer dropped anyway (it left
 * those states, or a gap) make it go back to its oldest unACKed message.
 *
 * Timers: an RNR NAK holds transmission for the responder's min_rnr_timer, rnr_retry times (7 =
 * forever). A QP with work outstanding that cannot make progress — its flow's path is down, the
 * peer's ring cannot be opened, the peer process is gone or its QP is not in RTR/RTS — completes its oldest
 * WR with RETRY_EXC_ERR once 4.096 us x 2^timeout x (retry_cnt + 1) x NCCLSIM_VERBS_TIMEOUT_SCALE
 * has passed without progress (timeout 0 means never, as in the IB spec). */
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "vb_internal.h"

double vb_rnr_delay_s(int min_rnr_timer);

static double retry_timeout_s(const vb_qp_t *q) {
  if (q->attr.timeout == 0) return -1;
  return 4.096e-6 * (double)(1ull << q->attr.timeout) * (q->attr.retry_cnt + 1) *
         vb_settings()->timeout_scale;
}

static vb_swqe_t *wqe(vb_qp_t *q, uint32_t i) { return &q->sq[i % q->cap.max_send_wr]; }

/* Completes the oldest WR with an error and takes the QP to ERR. */
static void requester_fail(vb_qp_t *q, enum ibv_wc_status st, int tell_peer) {
  if (q->sq_head != q->sq_tail) {
    vb_qp_complete_send(q, wqe(q, q->sq_head), st, 1);
    q->sq_head++;
  }
  vb_qp_to_error(q, tell_peer);
}

/* ---- requester: packets from the responder ---------------------------------------------------- */

static void on_ack(vb_qp_t *q, uint32_t msn, double now) {
  while (q->sq_head != q->sq_tx && (int32_t)(wqe(q, q->sq_head)->msn - msn) <= 0) {
    vb_qp_complete_send(q, wqe(q, q->sq_head), IBV_WC_SUCCESS, 0);
    q->sq_head++;
  }
  q->rnr_count = 0;
  q->last_progress = now;
}

static void on_nak(vb_qp_t *q, const vb_pkt_t *p, double now) {
  if (q->sq_head == q->sq_tail || wqe(q, q->sq_head)->msn != p->msn) return; /* stale */
  if (p->op == VB_NAK_RNR) {
    q->sq_tx = q->sq_head; /* go back: retransmit from the refused message */
    q->tx_off = 0;
    q->rd_off = 0;
    q->rnr_count++;
    if (q->attr.rnr_retry != 7 && q->rnr_count > q->attr.rnr_retry) {
      requester_fail(q, IBV_WC_RNR_RETRY_EXC_ERR, 1);
      return;
    }
    q->rnr_until = now + vb_rnr_delay_s((int)p->imm);
    q->last_progress = now;
    return;
  }
  requester_fail(q,
                 p->op == VB_NAK_ACCESS    ? IBV_WC_REM_ACCESS_ERR
                 : p->op == VB_NAK_INV_REQ ? IBV_WC_REM_INV_REQ_ERR
                                           : IBV_WC_REM_OP_ERR,
                 0);
}

static void on_read_resp(vb_qp_t *q, const vb_pkt_t *p, double now) {
  if (q->sq_head == q->sq_tx) return;
  vb_swqe_t *w = wqe(q, q->sq_head);
  if (w->msn != p->msn || w->opcode != IBV_WR_RDMA_READ || p->offset != q->rd_off) return;
  const uint8_t *src = (const uint8_t *)(p + 1);
  uint64_t off = p->offset, len = p->len;
  for (int i = 0; i < w->nsge && len; i++) {
    uint64_t l = w->sge[i].length;
    if (off >= l) {
      off -= l;
      continue;
    }
    uint64_t n = l - off < len ? l - off : len;
    uint8_t *dst =
        vb_mr_find(q->ctx, w->sge[i].lkey, 1, w->sge[i].addr + off, n, IBV_ACCESS_LOCAL_WRITE);
    if (!dst) {
      requester_fail(q, IBV_WC_LOC_PROT_ERR, 1);
      return;
    }
    memcpy(dst, src, n);
    src += n;
    len -= n;
    off = 0;
  }
  q->rd_off += p->len;
  q->last_progress = now;
  if (p->last) {
    q->rd_off = 0;
    on_ack(q, p->msn, now);
  }
}

/* Consumes the inbound ring; returns whether anything was consumed. */
static int consume(vb_qp_t *q, double now, int budget) {
  int did = 0;
  vb_pkt_t *p;
  while (budget-- > 0 && (p = vb_ring_peek(&q->in)) != NULL) {
    enum ibv_qp_state s = q->qp.state;
    if (s == IBV_QPS_RTR || s == IBV_QPS_RTS || s == IBV_QPS_SQE) {
      if (p->type == VB_PKT_REQ) {
        if (!vb_resp_request(q, p)) break;
      } else if (s != IBV_QPS_RTR) {
        if (p->type == VB_PKT_ACK) on_ack(q, p->msn, now);
        else if (p->type == VB_PKT_NAK) on_nak(q, p, now);
        else if (p->type == VB_PKT_READ_RESP) on_read_resp(q, p, now);
      }
    }
    vb_ring_pop(&q->in);
    did = 1;
  }
  if (did && atomic_load(&q->in.h->prod_waiting)) {
    atomic_store(&q->in.h->prod_waiting, 0);
    if (q->peer_bell) vb_bell_ring(q->peer_bell);
  }
  return did;
}

/* ---- requester: transmission ------------------------------------------------------------------ */

/* The local bytes of [off, off+len) of a WR's SGEs, limited to one SGE; NULL on a bad lkey. */
static const uint8_t *gather(vb_qp_t *q, vb_swqe_t *w, uint64_t off, uint64_t *len_p) {
  if (w->inl) return w->inl + off;
  for (int i = 0; i < w->nsge; i++) {
    uint64_t l = w->sge[i].length;
    if (off >= l) {
      off -= l;
      continue;
    }
    if (*len_p > l - off) *len_p = l - off;
    return vb_mr_find(q->ctx, w->sge[i].lkey, 1, w->sge[i].addr + off, *len_p, 0);
  }
  return NULL;
}

/* NCCLSIM_VERBS_PACE_GBPS: 1 when w, the message about to start, must wait because the QP's path
 * is degraded, lowering *wake_p to when it may leave. The message is held for what its bytes take
 * at a fraction f of the nominal rate beyond what they take at the full rate (len x 8 / rate x
 * (1/f - 1)), so a path at line rate costs nothing (peace time is unchanged) and a degraded one
 * makes its QP's completions slower than its neighbours', as on a real fabric. */
static int paced(vb_qp_t *q, const vb_swqe_t *w, double now, double *wake_p) {
  double g = vb_settings()->pace_gbps, f = q->path_frac_now;
  if (g <= 0 || q->tx_off || !(f > 0 && f < 1)) return 0;
  if (q->pace_until == 0) {
    double bytes = w->len > 64 ? (double)w->len : 64;
    q->pace_until = now + bytes * 8 / (g * 1e9) * (1 / f - 1);
  }
  if (now >= q->pace_until) return 0;
  if (q->pace_until < *wake_p) *wake_p = q->pace_until;
  return 1;
}

static int transmit(vb_qp_t *q, double now, int budget, double *wake_p) {
  int did = 0, uc = q->qp.qp_type == IBV_QPT_UC;
  if (q->qp.state != IBV_QPS_RTS || now < q->rnr_until || !q->peer_ready_now) return 0;
  while (budget-- > 0 && q->sq_tx != q->sq_tail) {
    vb_swqe_t *w = wqe(q, q->sq_tx);
    if (paced(q, w, now, wake_p)) break;
    vb_pkt_t p;
    memset(&p, 0, sizeof p);
    p.type = VB_PKT_REQ;
    p.msn = w->msn;
    p.op = (uint32_t)w->opcode;
    p.offset = q->tx_off;
    p.total = w->len;
    p.raddr = w->raddr;
    p.rkey = w->rkey;
    p.imm = w->imm;
    const uint8_t *src = NULL;
    if (w->opcode != IBV_WR_RDMA_READ && w->len) {
      uint64_t n = w->len - q->tx_off < VB_SEG_MAX ? w->len - q->tx_off : VB_SEG_MAX;
      src = gather(q, w, q->tx_off, &n);
      if (!src) {
        if (q->sq_head != q->sq_tx) break; /* earlier WRs finish first; the error comes in order */
        requester_fail(q, IBV_WC_LOC_PROT_ERR, 1);
        return 1;
      }
      p.len = (uint32_t)n;
    }
    p.last = w->opcode == IBV_WR_RDMA_READ || q->tx_off + p.len == w->len;
    if (!vb_qp_emit(q, &p, src, NULL, p.len)) break;
    did = 1;
    q->last_progress = now;
    q->tx_off += p.len;
    if (p.last) {
      q->tx_off = 0;
      q->pace_until = 0;
      q->sq_tx++;
      if (uc) { /* no ACKs: done once sent */
        vb_qp_complete_send(q, w, IBV_WC_SUCCESS, 0);
        q->sq_head++;
      }
    }
  }
  return did;
}

/* Whether the QP's peer can answer at all (its process alive, its QP not in ERR or destroyed). */
static int peer_alive(vb_qp_t *q) {
  if (!q->out.h) return 0;
  uint32_t st = atomic_load(&q->out.h->owner_state);
  if (st == VB_RING_GONE || st == IBV_QPS_ERR || st == IBV_QPS_RESET) return 0;
  return !(kill(q->out.h->owner_pid, 0) != 0 && errno == ESRCH);
}

/* One QP's pass; returns whether it made progress and lowers *wake_p to its next timer. */
/* An injected completion error (wcerr=) on q's port since q last looked: its oldest work request
 * fails with it and q goes to ERR, as a requester whose responder refused it (the peer learns, as
 * of a requester's RETRY_EXC). One that struck before q was first in RTR or RTS does not strike
 * it. Returns 1 when
 * q failed. */
static int wcerr_struck(vb_qp_t *q) {
  double at = 0;
  int st = vb_net_port_wcerr(q->ctx->dev->node, q->ctx->dev->nic, q->attr.port_num, &at);
  if (q->wcerr_at < 0) q->wcerr_at = st ? at : 0;
  if (!st || at <= q->wcerr_at || q->sq_head == q->sq_tail) return 0;
  q->wcerr_at = at;
  requester_fail(q, (enum ibv_wc_status)st, 1);
  return 1;
}

static int qp_pass(vb_qp_t *q, double now, double *wake_p) {
  enum ibv_qp_state s = q->qp.state;
  int did = 0;
  if (atomic_load(&q->in.h->peer_fatal) &&
      (s == IBV_QPS_RTR || s == IBV_QPS_RTS || s == IBV_QPS_SQE)) {
    vb_qp_to_error(q, 0);
    return 1;
  }
  if (s == IBV_QPS_RTR || s == IBV_QPS_RTS) {
    if (!q->out.h) vb_qp_connect_rings(q);
    q->path_up_now = q->flow_ok && vb_net_path_up(&q->flow);
    q->path_frac_now =
        q->path_up_now && vb_settings()->pace_gbps > 0 ? vb_net_path_frac(&q->flow) : 1;
    /* what the peer's retry timer needs: our replies to it cannot leave */
    if (atomic_load(&q->in.h->owner_path_down) != (uint32_t)!q->path_up_now)
      atomic_store(&q->in.h->owner_path_down, (uint32_t)!q->path_up_now);
  } else {
    q->path_up_now = 0;
  }
  if (s == IBV_QPS_RESET || s == IBV_QPS_INIT || s == IBV_QPS_ERR) {
    vb_pkt_t *p;
    while ((p = vb_ring_peek(&q->in)) != NULL) { /* nothing is accepted in these states */
      if (p->type == VB_PKT_REQ) atomic_fetch_add(&q->in.h->drops, 1);
      vb_ring_pop(&q->in);
      did = 1;
    }
    return did;
  }
  if (q->out.h) {
    uint32_t ps = atomic_load(&q->out.h->owner_state), drops = atomic_load(&q->out.h->drops);
    q->peer_ready_now = ps == IBV_QPS_RTR || ps == IBV_QPS_RTS;
    if (drops !=
        q->peer_drops_seen) { /* the peer dropped requests: go back to the oldest unACKed */
      q->peer_drops_seen = drops;
      if (q->sq_head != q->sq_tx) {
        q->sq_tx = q->sq_head;
        q->tx_off = 0;
        q->rd_off = 0;
      }
    }
  } else {
    q->peer_ready_now = 0;
  }
  did |= consume(q, now, 256);
  if (q->qp.qp_type == IBV_QPT_RC && wcerr_struck(q)) return 1;
  did |= transmit(q, now, 64, wake_p);
  if (q->qp.state != IBV_QPS_RTS || q->sq_head == q->sq_tail) {
    q->stall_since = 0;
    return did;
  }
  if (q->rnr_until > now && q->rnr_until < *wake_p) *wake_p = q->rnr_until;
  /* the retry timer runs only while the QP cannot reach its peer, or waits for ACKs the peer cannot
   * send back (its own path, another ECMP route, is down: RC's timer fires on missing ACKs) */
  int blocked = !q->path_up_now || !q->peer_ready_now ||
                (now - q->last_progress > 0.05 && !peer_alive(q)) ||
                (q->sq_head != q->sq_tx && q->out.h && atomic_load(&q->out.h->owner_path_down));
  double limit = retry_timeout_s(q);
  if (!blocked || q->qp.qp_type != IBV_QPT_RC) {
    q->stall_since = 0;
  } else if (q->stall_since == 0) {
    q->stall_since = now;
  } else if (limit >= 0 && now - q->stall_since >= limit) {
    requester_fail(q, IBV_WC_RETRY_EXC_ERR, 1);
    q->stall_since = 0;
    return 1;
  }
  if (q->stall_since > 0 && limit >= 0 && q->stall_since + limit < *wake_p)
    *wake_p = q->stall_since + limit;
  if (now + 0.01 < *wake_p && q->stall_since > 0) *wake_p = now + 0.01;
  return did;
}

static void ports_pass(vb_ctx_t *ctx) {
  if (!ctx->fatal_sent && vb_net_nic_fatal(ctx->dev->node, ctx->dev->nic)) {
    ctx->fatal_sent = 1; /* after the ports' PORT_ERR, as a NIC whose firmware died reports both */
    for (int p = 1; p <= vb_net_nic_ports(ctx->dev->nic) && p <= 2; p++)
      if (ctx->port_up[p - 1]) {
        ctx->port_up[p - 1] = 0;
        vb_async_push(ctx, IBV_EVENT_PORT_ERR, (void *)(uintptr_t)p);
      }
    vb_async_push(ctx, IBV_EVENT_DEVICE_FATAL, NULL);
  }
  for (int p = 1; p <= vb_net_nic_ports(ctx->dev->nic) && p <= 2; p++) {
    int up = vb_net_port_up(ctx->dev->node, ctx->dev->nic, p);
    if (up != ctx->port_up[p - 1]) {
      ctx->port_up[p - 1] = up;
      vb_async_push(ctx, up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR, (void *)(uintptr_t)p);
    }
  }
}

static void *engine_main(void *arg) {
  vb_ctx_t *ctx = arg;
  while (!atomic_load(&ctx->stop)) {
    uint32_t seen = atomic_load(&ctx->bell->seq);
    double now = vb_now(), wake = now + 0.1;
    int did = 0;
    pthread_mutex_lock(&ctx->lock);
    ports_pass(ctx);
    for (vb_qp_t *q = ctx->qps; q; q = q->hh.next) {
      pthread_mutex_lock(&q->lock);
      did |= qp_pass(q, now, &wake);
      if (q->bell_dirty && q->peer_bell) vb_bell_ring(q->peer_bell);
      q->bell_dirty = 0;
      pthread_mutex_unlock(&q->lock);
    }
    pthread_mutex_unlock(&ctx->lock);
    if (!did) vb_bell_wait(ctx->bell, seen, wake - vb_now());
  }
  return NULL;
}

int vb_engine_start(vb_ctx_t *ctx) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old); /* the engine takes no signals meant for the program */
  int rc = pthread_create(&ctx->engine, NULL, engine_main, ctx);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return rc ? -1 : 0;
}

void vb_engine_stop(vb_ctx_t *ctx) {
  atomic_store(&ctx->stop, 1);
  vb_bell_ring(ctx->bell);
  pthread_join(ctx->engine, NULL);
}
