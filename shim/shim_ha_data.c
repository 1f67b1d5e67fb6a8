/* shim_ha_data.c: the HA layer's data path (docs/ha.md). NCCL calls post_send, post_recv and
 * poll_cq inline through context->ops; ha_ctx_get replaces them on the contexts NCCL's queue pairs
 * live on. Peace time each work request is copied into its queue pair's log (path/ah_ha_log.c) and
 * posted to the primary unchanged; each completion retires log entries, and completions of a shadow
 * are rewritten to the primary's QP number. Everything outside that common case — errors, a
 * failover in progress, the HA layer's own heartbeats and drain markers — goes to the noinline slow
 * paths, so that the common case stays a few dozen instructions per work request (bench/ha_cost). */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "shim_ha_int.h"


/* ---- synthesized completions ---------------------------------------------------------------- */

void ha_synth_push(ha_ctx_t *hc, struct ibv_cq *cq, const struct ibv_wc *wc) {
  pthread_mutex_lock(&hc->synth_mu);
  int n = atomic_load(&hc->nsynth);
  if (n < HA_SYNTH_MAX) {
    hc->synth[n].cq = cq;
    hc->synth[n].wc = *wc;
    atomic_store_explicit(&hc->nsynth, n + 1, memory_order_release);
  } else {
    AH_LOG_CAPPED(1, AH_LOG_ERROR, "HA: more than %d completions waiting to be handed to NCCL; one is lost",
                  HA_SYNTH_MAX);
  }
  pthread_mutex_unlock(&hc->synth_mu);
}

/* Moves up to n waiting completions of cq into wc, in order. Returns how many. */
static int synth_take(ha_ctx_t *hc, struct ibv_cq *cq, struct ibv_wc *wc, int n) {
  int got = 0;
  pthread_mutex_lock(&hc->synth_mu);
  int total = atomic_load(&hc->nsynth), keep = 0;
  for (int i = 0; i < total; i++) {
    if (got < n && hc->synth[i].cq == cq) wc[got++] = hc->synth[i].wc;
    else hc->synth[keep++] = hc->synth[i];
  }
  atomic_store_explicit(&hc->nsynth, keep, memory_order_release);
  pthread_mutex_unlock(&hc->synth_mu);
  return got;
}

/* The names of the statuses the HA layer logs (the shim does not link libibverbs). */
static const char *status_name(enum ibv_wc_status st) {
  switch (st) {
  case IBV_WC_SUCCESS: return "success";
  case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
  case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
  case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded";
  default: return "error";
  }
}

/* ---- posting ---------------------------------------------------------------------------------- */

/* Logs the chain and posts it to `target`; post 0 only logs (a failover in progress posts it
 * later). Returns what the provider returned (ENOMEM when the log is full, which NCCL cannot cause:
 * it never posts more than the QP holds, and the log holds twice that).
 * Note that this is the data path's cost: the entry is filled in place, and the inline bytes are
 * copied only for IBV_SEND_INLINE; the caller's WRs are not modified. */
static inline __attribute__((always_inline)) int log_and_post_send(ha_ctx_t *hc, ha_qp_t *m, struct ibv_qp *target,
                                                                   struct ibv_send_wr *wr, struct ibv_send_wr **bad,
                                                                   int post) {
  ah_ha_slog_t *l = &m->slog;
  const uint64_t first = l->head;
  const uint32_t room = l->cap - (uint32_t)(first - l->tail);
  uint64_t seq = first, cons = l->cons;
  struct ibv_send_wr *w;
  for (w = wr; w; w = w->next, seq++) {
    if (__builtin_expect(seq - first >= room, 0)) { /* cannot happen with NCCL; never fail a post for it */
      ah_ha_slog_unpush(l, first);
      if (!post) {
        *bad = wr;
        return ENOMEM;
      }
      m->unprotected = 1; /* the log no longer covers the QP: no failover for it */
      return hc->post_send(target, wr, bad);
    }
    ah_ha_swr_t *e = &l->e[seq & (l->cap - 1)];
    e->wr_id = w->wr_id;
    e->opcode = w->opcode;
    e->send_flags = w->send_flags;
    e->imm = w->imm_data;
    e->raddr = w->wr.rdma.remote_addr;
    e->rkey = w->wr.rdma.rkey;
    e->num_sge = w->num_sge; /* 0 or 1 replayable (more: unprotected, below) */
    if (w->num_sge > 0) {
      e->addr = w->sg_list[0].addr;
      e->length = w->sg_list[0].length;
      e->lkey = w->sg_list[0].lkey;
      if (__builtin_expect(w->num_sge > 1, 0)) m->unprotected = 1;
      if (__builtin_expect((w->send_flags & IBV_SEND_INLINE) != 0, 0)) {
        if (e->length <= AH_HA_INLINE_MAX) memcpy(e->inl, (const void *)(uintptr_t)e->addr, e->length);
        else m->unprotected = 1;
      }
    } else {
      e->length = 0;
    }
    if (__builtin_expect(w->opcode > IBV_WR_RDMA_READ, 0)) m->unprotected = 1; /* atomics: not replayed */
    cons += (uint64_t)ah_ha_consumes(w->opcode);
    e->cons = cons;
  }
  l->head = seq;
  l->cons = cons;
  int rc = post ? hc->post_send(target, wr, bad) : 0;
  if (__builtin_expect(rc != 0, 0)) { /* forget what was not posted */
    seq = first;
    for (w = wr; w && w != *bad; w = w->next) seq++;
    ah_ha_slog_unpush(l, seq);
  }
  return rc;
}

static inline __attribute__((always_inline)) int log_and_post_recv(ha_ctx_t *hc, ha_qp_t *m, struct ibv_qp *target,
                                                                   struct ibv_recv_wr *wr, struct ibv_recv_wr **bad,
                                                                   int post) {
  ah_ha_rlog_t *l = &m->rlog;
  const uint64_t first = l->head;
  const uint32_t room = l->cap - (uint32_t)(first - l->tail);
  uint64_t seq = first;
  struct ibv_recv_wr *w;
  for (w = wr; w; w = w->next, seq++) {
    if (__builtin_expect(seq - first >= room || w->num_sge > 1, 0)) {
      if (!post) {
        *bad = wr;
        return ENOMEM;
      }
      m->unprotected = 1;
      return hc->post_recv(target, wr, bad);
    }
    ah_ha_rwr_t *e = &l->e[seq & (l->cap - 1)];
    e->wr_id = w->wr_id;
    e->num_sge = w->num_sge > 0;
    if (w->num_sge > 0) e->addr = w->sg_list[0].addr, e->length = w->sg_list[0].length, e->lkey = w->sg_list[0].lkey;
  }
  l->head = seq;
  int rc = post ? hc->post_recv(target, wr, bad) : 0;
  if (__builtin_expect(rc != 0, 0)) {
    seq = first;
    for (w = wr; w && w != *bad; w = w->next) seq++;
    ah_ha_rlog_unpush(l, seq);
  }
  return rc;
}

/* The managed primary `qp` is, or NULL. The thread's last answer is tried first; a managed QP's
 * struct is never freed (its logs are, at destroy, and m->qp becomes NULL), so a stale answer is
 * only a miss. */
static inline ha_qp_t *qp_lookup(ha_ctx_t *hc, struct ibv_qp *qp) {
  static _Thread_local struct ibv_qp *last_qp __attribute__((tls_model("initial-exec")));
  static _Thread_local ha_qp_t *last_m __attribute__((tls_model("initial-exec")));
  if (__builtin_expect(last_qp == qp && last_m->qp == qp, 1)) return last_m;
  ha_qp_t *m = table_find(hc, qp->qp_num);
  if (!m || m->qp != qp) return NULL;
  last_qp = qp;
  last_m = m;
  return m;
}

/* The QP NCCL's work goes to in state st. */
static inline struct ibv_qp *current_qp(ha_qp_t *m, int st) { return st == HA_SHADOW ? m->sh : m->qp; }

/* The post wrappers' uncommon case: a failover in progress logs the WRs (the replay posts them);
 * on a shadow, or broken, they go to the QP carrying the traffic (a dead one flushes them, and
 * NCCL sees it). */
static __attribute__((noinline)) int post_send_slow(ha_ctx_t *hc, ha_qp_t *m, struct ibv_send_wr *wr,
                                                    struct ibv_send_wr **bad) {
  pthread_mutex_lock(&m->mu);
  int st = atomic_load(&m->state);
  int rc = log_and_post_send(hc, m, ha_carrier(m), wr, bad, st != HA_FAILING);
  pthread_mutex_unlock(&m->mu);
  return rc;
}

static __attribute__((noinline)) int post_recv_slow(ha_ctx_t *hc, ha_qp_t *m, struct ibv_recv_wr *wr,
                                                    struct ibv_recv_wr **bad) {
  pthread_mutex_lock(&m->mu);
  int st = atomic_load(&m->state);
  int rc = log_and_post_recv(hc, m, ha_carrier(m), wr, bad, st != HA_FAILING);
  pthread_mutex_unlock(&m->mu);
  return rc;
}

static int ha_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  ha_ctx_t *hc = ctx_of(qp->context);
  if (__builtin_expect(!hc, 0)) return EINVAL;
  ha_qp_t *m = qp_lookup(hc, qp);
  if (!m) return hc->post_send(qp, wr, bad);
  if (__builtin_expect(atomic_load_explicit(&m->state, memory_order_acquire) == HA_PEACE, 1))
    return log_and_post_send(hc, m, qp, wr, bad, 1);
  return post_send_slow(hc, m, wr, bad);
}

static int ha_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  ha_ctx_t *hc = ctx_of(qp->context);
  if (__builtin_expect(!hc, 0)) return EINVAL;
  ha_qp_t *m = qp_lookup(hc, qp);
  if (!m) return hc->post_recv(qp, wr, bad);
  if (__builtin_expect(atomic_load_explicit(&m->state, memory_order_acquire) == HA_PEACE, 1))
    return log_and_post_recv(hc, m, qp, wr, bad, 1);
  return post_recv_slow(hc, m, wr, bad);
}

/* ---- completions ------------------------------------------------------------------------------ */

static void wake_thread(void) {
  pthread_mutex_lock(&ha_mu);
  pthread_cond_signal(&ha_cv);
  pthread_mutex_unlock(&ha_mu);
}

/* A successful completion of the QP NCCL's work is on: retires its log entry (RC completes sends
 * and receives in posting order). */
static inline void retire(ha_qp_t *m, const struct ibv_wc *c) {
  if (c->opcode & IBV_WC_RECV) ah_ha_rlog_complete(&m->rlog, m->rlog.tail);
  else ah_ha_slog_complete_next(&m->slog);
}

/* A completion of a managed QP outside the common case (any error, a standby's, a carrier failing
 * over). Returns 1 to hand wc (rewritten) to NCCL, 0 to absorb it. */
static int wc_slow(ha_qp_t *m, struct ibv_wc *wc) {
  int deliver = 0, wake = 0;
  pthread_mutex_lock(&m->mu);
  int st = atomic_load(&m->state);
  int ok = wc->status == IBV_WC_SUCCESS;
  struct ibv_qp *carrier = ha_carrier(m);
  int from_carrier = carrier && wc->qp_num == carrier->qp_num;
  if (wc->wr_id == WRID_DRAIN_SEND || wc->wr_id == WRID_DRAIN_RECV) {
    /* a drain marker: never NCCL's (a broken carrier's late one included) */
    if (from_carrier && st == HA_FAILING) {
      atomic_store(wc->wr_id == WRID_DRAIN_SEND ? &m->drained_send : &m->drained_recv, 1);
      wake = 1;
    }
  } else if (!from_carrier) {
    /* the standby's heartbeat (or its flush), or a late completion of a queue pair replaced */
    if (m->sb.qp && wc->qp_num == m->sb.qpn) ha_heartbeat_done(m, wc);
  } else if (ok) {
    /* the QP NCCL's work is on: hand it over, as NCCL would have seen it from the primary (while
     * failing, cannot happen on RC — nothing succeeds after the first error — but never lose one) */
    retire(m, wc);
    wc->qp_num = m->qpn;
    deliver = 1;
  } else if ((st == HA_PEACE || st == HA_SHADOW) && !m->unprotected && ha_can_hold(m) &&
             (wc->status == IBV_WC_RETRY_EXC_ERR || wc->status == IBV_WC_WR_FLUSH_ERR)) {
    /* a path error with a standby ready, or on its way: absorbed, the background thread takes over */
    if (st == HA_SHADOW)
      ah_log(AH_LOG_WARN, "HA: QP %u: its shadow failed too (%s, shadow QP %u); failing over again", m->qpn,
             status_name(wc->status), m->sh_qpn);
    ha_failover_start(m, status_name(wc->status));
    wake = 1;
  } else if (st == HA_FAILING) {
    /* the failing carrier's error and flushes */
  } else {
    if (st != HA_BROKEN) {
      atomic_store(&m->state, HA_BROKEN);
      if (m->sh)
        ah_log(AH_LOG_WARN, "HA: QP %u: its shadow failed too (%s) and no other is ready; NCCL gets the error",
               m->qpn, status_name(wc->status));
    }
    wc->qp_num = m->qpn;
    deliver = 1;
  }
  pthread_mutex_unlock(&m->mu);
  if (wake) wake_thread();
  return deliver;
}

/* Translates the r completions the provider returned in wc (retiring log entries, absorbing the HA
 * layer's own and a failing primary's) and packs the ones NCCL gets to the front. Returns how many. */
static inline __attribute__((always_inline)) int wc_filter(ha_ctx_t *hc, struct ibv_wc *wc, int r) {
  int out = 0;
  for (int i = 0; i < r; i++) {
    struct ibv_wc *c = &wc[i];
    ha_qp_t *m = table_find(hc, c->qp_num);
    int keep = 1;
    if (m) {
      int st = atomic_load_explicit(&m->state, memory_order_acquire);
      if (c->status == IBV_WC_SUCCESS && c->qp_num == (st == HA_SHADOW ? m->sh_qpn : m->qpn) &&
          (st == HA_PEACE || st == HA_SHADOW)) {
        retire(m, c); /* the common case */
        c->qp_num = m->qpn;
      } else {
        keep = wc_slow(m, c);
      }
    }
    if (keep) {
      if (out != i) wc[out] = *c;
      out++;
    }
  }
  return out;
}

/* NCCL's poll: the completions the HA layer queued for cq first (they are older), then the
 * provider's. Returns what the provider's poll would. */
static inline __attribute__((always_inline)) int poll_body(ha_ctx_t *hc, struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  int got = 0;
  if (n > 0 && atomic_load_explicit(&hc->nsynth, memory_order_acquire)) got = synth_take(hc, cq, wc, n);
  if (got == n && n > 0) return got;
  int r = hc->poll_cq(cq, n - got, wc + got);
  if (r <= 0) return got ? got : r;
  return got + wc_filter(hc, wc + got, r);
}

static __attribute__((noinline)) int poll_locked(ha_ctx_t *hc, struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  pthread_mutex_lock(&hc->drain_mu);
  int r = poll_body(hc, cq, n, wc);
  pthread_mutex_unlock(&hc->drain_mu);
  return r;
}

static int ha_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  ha_ctx_t *hc = ctx_of(cq->context);
  if (__builtin_expect(!hc, 0)) return -1;
  /* Dekker with ha_drain_poll: this count is raised before `draining` is read, and the drain sets
   * `draining` before it waits for the count to fall, so one of the two always sees the other */
  atomic_fetch_add(&hc->pollers, 1);
  if (__builtin_expect(atomic_load(&hc->draining), 0)) {
    atomic_fetch_sub_explicit(&hc->pollers, 1, memory_order_release);
    return poll_locked(hc, cq, n, wc);
  }
  int r = poll_body(hc, cq, n, wc);
  atomic_fetch_sub_explicit(&hc->pollers, 1, memory_order_release);
  return r;
}

/* Polls m's CQs on the background thread, for a failover whose drain NCCL may never poll for (a
 * receiving end waiting, in NCCL's ring, for the sender whose failover waits for this side's
 * count): every completion is translated as NCCL's poll would and the ones NCCL gets are queued
 * behind the queued ones, which NCCL's poll hands out before the provider's — so each QP's
 * completions still reach NCCL once and in order. Returns the completions it took. */
int ha_drain_poll(ha_qp_t *m) {
  ha_ctx_t *hc = m->hc;
  struct ibv_wc wc[32];
  int total = 0;
  atomic_store(&hc->draining, 1);
  double until = ha_now_s() + 1.0;
  while (atomic_load(&hc->pollers) != 0) {
    if (ha_now_s() > until) { /* a poll cannot take a second; leave it to the next step */
      atomic_store(&hc->draining, 0);
      return 0;
    }
    sched_yield();
  }
  pthread_mutex_lock(&hc->drain_mu);
  struct ibv_cq *cqs[2] = {m->send_cq, m->recv_cq};
  for (int k = 0; k < 2; k++) {
    if (!cqs[k] || (k == 1 && cqs[1] == cqs[0])) continue;
    for (int round = 0; round < 64; round++) { /* bounded: a busy CQ refills */
      int r = hc->poll_cq(cqs[k], 32, wc);
      if (r <= 0) break;
      int out = wc_filter(hc, wc, r);
      for (int i = 0; i < out; i++) ha_synth_push(hc, cqs[k], &wc[i]);
      total += r;
      if (r < 32) break;
    }
  }
  pthread_mutex_unlock(&hc->drain_mu);
  atomic_store(&hc->draining, 0);
  return total;
}

/* ---- the contexts ----------------------------------------------------------------------------- */

/* ha_ctx_get: NCCL's post_send, post_recv and poll_cq of ctx become the wrappers above. */
ha_ctx_t *ha_ctx_get(struct ibv_context *ctx, const ah_shim_ha_verbs_t *real) {
  ha_ctx_t *hc = ctx_of(ctx);
  if (hc) return hc;
  int n = atomic_load(&ha_nctx);
  if (n >= HA_MAX_CTX || !ctx->ops.post_send || !ctx->ops.post_recv || !ctx->ops.poll_cq) return NULL;
  hc = calloc(1, sizeof *hc);
  if (!hc) return NULL;
  hc->ctx = ctx;
  hc->real = *real;
  hc->post_send = ctx->ops.post_send;
  hc->post_recv = ctx->ops.post_recv;
  hc->poll_cq = ctx->ops.poll_cq;
  pthread_mutex_init(&hc->synth_mu, NULL);
  pthread_mutex_init(&hc->drain_mu, NULL);
  ha_ctxs[n] = hc;
  atomic_store_explicit(&ha_nctx, n + 1, memory_order_release);
  ctx->ops.post_send = ha_post_send;
  ctx->ops.post_recv = ha_post_recv;
  ctx->ops.poll_cq = ha_poll_cq;
  return hc;
}
