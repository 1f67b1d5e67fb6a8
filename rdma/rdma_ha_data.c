/* rdma_ha_data.c: the HA layer's data path (docs/ha.md). NCCL calls post_send, post_recv and
 * poll_cq inline through context->ops; ah_shim_ha_ctx_get replaces them on the contexts NCCL's queue pairs
 * live on. Peace time each work request is copied into its queue pair's log (rdma/ah_ha_log.c) and
 * posted to the primary unchanged; each completion retires log entries, and completions of a shadow
 * are rewritten to the primary's QP number. Everything outside that common case — errors, a
 * failover in progress, the HA layer's own heartbeats and drain markers — goes to the noinline slow
 * paths, so that the common case stays a few dozen instructions per work request (bench/ha_cost). */
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "rdma_ha_int.h"
#include "rdma_poll_slots.h"

/* ---- synthesized completions ---------------------------------------------------------------- */

void ah_shim_ha_synth_push(ha_ctx_t *hc, struct ibv_cq *cq, const struct ibv_wc *wc) {
  pthread_mutex_lock(&hc->synth_mu);
  int n = atomic_load(&hc->nsynth);
  if (n < HA_SYNTH_MAX) {
    hc->synth[n].cq = cq;
    hc->synth[n].wc = *wc;
    atomic_store_explicit(&hc->nsynth, n + 1, memory_order_release);
    atomic_fetch_or(&hc->pollw, HA_POLL_SYNTH);
  } else {
    AH_LOG_CAPPED(1, AH_LOG_ERROR,
                  "HA: more than %d completions waiting to be handed to NCCL; one is lost",
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
  if (!keep) atomic_fetch_and(&hc->pollw, ~HA_POLL_SYNTH);
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
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    default: return "error";
  }
}

/* 1 when a failed completion of m's carrier with status st fails the connection over (docs/ha.md,
 * "Detection", after nccl-ha's table of recoverable errors): a path error (retries exhausted, or
 * the flushes after one) always; RNR_RETRY_EXC and REM_ACCESS — a responder that had no receive
 * posted, or refused a key — when the carrier did not get the traffic by a failover for the same
 * status: a fresh queue pair pair, its receives re-posted from the log, clears a responder's
 * transient state, while a cause that stays (a peer that never posts, a bad key) follows the
 * connection to the new path, and the second time NCCL gets it. Access, length and protection
 * errors of the local side are the program's and reach NCCL. */
static int fails_over(const ha_qp_t *m, enum ibv_wc_status st) {
  if (st == IBV_WC_RETRY_EXC_ERR || st == IBV_WC_WR_FLUSH_ERR) return 1;
  if (st == IBV_WC_RNR_RETRY_EXC_ERR || st == IBV_WC_REM_ACCESS_ERR)
    return !(m->sh && m->sh_status == (int)st);
  return 0;
}

/* ---- the QP map (rdma_ha_int.h) and the tables' probes ----------------------------------------- */

ha_qpmap_t ah_shim_ha_qpmap[HA_QPMAP + HA_QPMAP_PROBES];
ha_qp_t ah_shim_ha_qp_none = {.state = HA_BROKEN};
static pthread_mutex_t qpmap_mu = PTHREAD_MUTEX_INITIALIZER; /* the map's writers */

ha_qp_t *ah_shim_ha_qpmap_probe(const struct ibv_qp *qp) {
  ha_qpmap_t *e = qpmap_slot(qp);
  for (int n = 0; n <= HA_QPMAP_PROBES; n++, e++) {
    struct ibv_qp *k = atomic_load_explicit(&e->qp, memory_order_acquire);
    if (k == qp) return atomic_load_explicit(&e->m, memory_order_acquire);
    if (!k) break;
  }
  return &ah_shim_ha_qp_none;
}

/* Maps qp to m, its managed QP (found through the context's table by a post the map did not take):
 * qp's slot if it has one (a QP destroyed at this address left its own managed QP there, never in
 * peace again), else the first empty one. Returns 0, or -1 when its slots are all taken (its posts
 * keep taking the context's table). */
static __attribute__((noinline)) int qpmap_set(struct ibv_qp *qp, ha_qp_t *m) {
  int rc = -1, room = 0;
  ha_qpmap_t *e = qpmap_slot(qp);
  for (int n = 0; n <= HA_QPMAP_PROBES && !room; n++) { /* no lock for a QP the map cannot hold */
    struct ibv_qp *k = atomic_load(&e[n].qp);
    room = k == qp || !k;
  }
  if (!room) return -1;
  pthread_mutex_lock(&qpmap_mu);
  for (int n = 0; n <= HA_QPMAP_PROBES; n++, e++) {
    struct ibv_qp *k = atomic_load(&e->qp);
    if (k == qp || !k) {
      atomic_store_explicit(&e->m, m, memory_order_release);
      if (!k)
        atomic_store_explicit(&e->qp, qp,
                              memory_order_release); /* m first: a key is never read alone */
      rc = 0;
      break;
    }
  }
  pthread_mutex_unlock(&qpmap_mu);
  return rc;
}

ha_qp_t *ah_shim_ha_table_probe(ha_ctx_t *hc, uint32_t qpn, uint32_t i) {
  for (int n = 0; n < HA_SLOTS; n++, i = (i + 1) & (HA_SLOTS - 1)) {
    uint32_t k = atomic_load_explicit(&hc->key[i], memory_order_acquire);
    if (k == 0) return NULL;
    if (k == qpn) {
      ha_qp_t *m = atomic_load_explicit(&hc->val[i], memory_order_acquire);
      if (m) return m;
    }
  }
  return NULL;
}

/* ---- posting ---------------------------------------------------------------------------------- */

/* The verbs structs' layout the fast path copies in 16-byte moves (ah_ha.h's entries mirror it). */
_Static_assert(
    sizeof(enum ibv_wr_opcode) == 4 &&
        offsetof(struct ibv_send_wr, opcode) == offsetof(struct ibv_send_wr, num_sge) + 4 &&
        offsetof(struct ibv_send_wr, send_flags) == offsetof(struct ibv_send_wr, num_sge) + 8 &&
        offsetof(struct ibv_send_wr, imm_data) == offsetof(struct ibv_send_wr, num_sge) + 12 &&
        offsetof(ah_ha_swr_t, opcode) == offsetof(ah_ha_swr_t, num_sge) + 4 &&
        offsetof(ah_ha_swr_t, send_flags) == offsetof(ah_ha_swr_t, num_sge) + 8 &&
        offsetof(ah_ha_swr_t, imm) == offsetof(ah_ha_swr_t, num_sge) + 12,
    "num_sge, opcode, send_flags, imm: one 16-byte group in both");
_Static_assert(offsetof(struct ibv_send_wr, wr.rdma.rkey) ==
                       offsetof(struct ibv_send_wr, wr.rdma.remote_addr) + 8 &&
                   sizeof(((struct ibv_send_wr *)0)->wr) >= 16 &&
                   offsetof(ah_ha_swr_t, rkey) == offsetof(ah_ha_swr_t, raddr) + 8,
               "remote_addr, rkey: one 16-byte group in both");
_Static_assert(sizeof(struct ibv_sge) == 16 && offsetof(struct ibv_sge, length) == 8 &&
                   offsetof(struct ibv_sge, lkey) == 12 &&
                   offsetof(ah_ha_swr_t, length) == offsetof(ah_ha_swr_t, addr) + 8 &&
                   offsetof(ah_ha_swr_t, lkey) == offsetof(ah_ha_swr_t, addr) + 12 &&
                   offsetof(ah_ha_rwr_t, length) == offsetof(ah_ha_rwr_t, addr) + 8 &&
                   offsetof(ah_ha_rwr_t, lkey) == offsetof(ah_ha_rwr_t, addr) + 12,
               "an SGE: one 16-byte group in all three");
_Static_assert(IBV_WC_SUCCESS == 0 && HA_PEACE == 0, "poll_took tests both with one or");
_Static_assert(sizeof(ah_ha_swr_t) == 64 && sizeof(ah_ha_rwr_t) == 32,
               "entries are found with a shift");

#define COPY16(dst, dfield, src, sfield)                                                           \
  memcpy((char *)(dst) + offsetof(__typeof__(*(dst)), dfield),                                     \
         (const char *)(src) + offsetof(__typeof__(*(src)), sfield), 16)

/* Appends the single WR w to the send log l if it has the common form: one SGE or none, an opcode
 * up to RDMA_READ, no IBV_SEND_INLINE, and the log has room. Returns 1 when it logged it, 0 when it
 * logged nothing (the caller takes the general path).
 * Note that this is most of a post's cost: three 16-byte copies and the wr_id, the count of
 * consuming messages, and for a signalled WR its number in the ring of signalled entries. */
static inline __attribute__((always_inline)) int slog_append1(ah_ha_slog_t *l,
                                                              const struct ibv_send_wr *w) {
  const uint64_t h = l->head;
  if (__builtin_expect(h >= l->lim, 0)) return 0;
  /* copied first and checked in place (few live registers: the caller's three stay put); the
   * entry is not the log's until head moves */
  ah_ha_swr_t *e = &l->e[h & (l->cap - 1)];
  e->wr_id = w->wr_id;
  COPY16(e, num_sge, w, num_sge);
  COPY16(e, raddr, w, wr.rdma);
  if (__builtin_expect((unsigned)e->num_sge > 1 || (unsigned)e->opcode > IBV_WR_RDMA_READ ||
                           (e->send_flags & IBV_SEND_INLINE),
                       0))
    return 0;
  if (__builtin_expect(e->num_sge != 0, 1)) COPY16(e, addr, w->sg_list, addr);
  else e->addr = 0, e->length = 0, e->lkey = 0;
  static const uint8_t consumes[AH_HA_WR_RDMA_READ + 1] = {0, 1, 1, 1,
                                                           0}; /* ah_ha_consumes, as a load */
  const uint64_t cons = l->cons + consumes[e->opcode];
  e->cons = cons;
  l->cons = cons;
  if (l->sig_all || (e->send_flags & IBV_SEND_SIGNALED)) l->sig[l->nsig++ & (l->cap - 1)] = h;
  l->head = h + 1;
  return 1;
}

/* slog_append1 for a chain: every WR in the common form, or nothing logged. Returns 1 or 0. */
static int slog_append_chain(ah_ha_slog_t *l, const struct ibv_send_wr *wr) {
  const uint64_t first = l->head;
  for (const struct ibv_send_wr *w = wr; w; w = w->next)
    if (!slog_append1(l, w)) {
      ah_ha_slog_unpush(l, first);
      return 0;
    }
  return 1;
}

/* The receive side's slog_append1: one SGE or none, and room. */
static inline __attribute__((always_inline)) int rlog_append1(ah_ha_rlog_t *l,
                                                              const struct ibv_recv_wr *w) {
  const uint64_t h = l->head;
  const int nsge = w->num_sge;
  if (__builtin_expect(h - l->tail >= l->cap || (unsigned)nsge > 1, 0)) return 0;
  ah_ha_rwr_t *e = &l->e[h & (l->cap - 1)];
  const struct ibv_sge *sg = w->sg_list;
  e->wr_id = w->wr_id;
  e->num_sge = nsge;
  if (nsge) COPY16(e, addr, sg, addr);
  l->head = h + 1;
  return 1;
}

/* Logs the chain and posts it to `target`; post 0 only logs (a failover in progress posts it
 * later). Returns what the provider returned (ENOMEM when the log is full, which NCCL cannot cause:
 * it never posts more than the QP holds, and the log holds twice that).
 * Note that this is the general path (any WR form; the failover's posts): the common form takes
 * slog_append1. The caller's WRs are not modified. */
static int log_and_post_send(ha_ctx_t *hc, ha_qp_t *m, struct ibv_qp *target,
                             struct ibv_send_wr *wr, struct ibv_send_wr **bad, int post) {
  ah_ha_slog_t *l = &m->slog;
  const uint64_t first = l->head;
  const uint32_t room = l->cap - (uint32_t)(first - l->tail);
  struct ibv_send_wr *w;
  uint64_t seq = first;
  for (w = wr; w; w = w->next, seq++) {
    if (__builtin_expect(seq - first >= room,
                         0)) { /* cannot happen with NCCL; never fail a post for it */
      ah_ha_slog_unpush(l, first);
      if (!post) {
        *bad = wr;
        return ENOMEM;
      }
      m->unprotected = 1; /* the log no longer covers the QP: no failover for it */
      return hc->post_send(target, wr, bad);
    }
    ah_ha_swr_t e;
    memset(&e, 0, sizeof e);
    e.wr_id = w->wr_id;
    e.opcode = w->opcode;
    e.send_flags = w->send_flags;
    e.imm = w->imm_data;
    e.raddr = w->wr.rdma.remote_addr;
    e.rkey = w->wr.rdma.rkey;
    e.num_sge = w->num_sge > 0; /* 0 or 1 replayable (more: unprotected, below) */
    if (w->num_sge > 0) {
      e.addr = w->sg_list[0].addr;
      e.length = w->sg_list[0].length;
      e.lkey = w->sg_list[0].lkey;
      if (w->num_sge > 1) m->unprotected = 1;
      if (w->send_flags & IBV_SEND_INLINE) {
        if (e.length <= AH_HA_INLINE_MAX)
          memcpy(ah_ha_slog_inl(l, seq), (const void *)(uintptr_t)e.addr, e.length);
        else m->unprotected = 1;
      }
    }
    if (w->opcode > IBV_WR_RDMA_READ) m->unprotected = 1; /* atomics: not replayed */
    ah_ha_slog_push(l, &e);
  }
  int rc = post ? hc->post_send(target, wr, bad) : 0;
  if (__builtin_expect(rc != 0, 0)) { /* forget what was not posted */
    seq = first;
    for (w = wr; w && w != *bad; w = w->next) seq++;
    ah_ha_slog_unpush(l, seq);
  }
  return rc;
}

static int log_and_post_recv(ha_ctx_t *hc, ha_qp_t *m, struct ibv_qp *target,
                             struct ibv_recv_wr *wr, struct ibv_recv_wr **bad, int post) {
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
    if (w->num_sge > 0)
      e->addr = w->sg_list[0].addr, e->length = w->sg_list[0].length, e->lkey = w->sg_list[0].lkey;
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

/* A post of the chain wr that the fast path logged failed: forgets the WRs from *bad on (the
 * provider's, or the whole chain when *bad is not in it). */
static __attribute__((noinline)) void send_unlog(ah_ha_slog_t *l, const struct ibv_send_wr *wr,
                                                 struct ibv_send_wr *const *bad) {
  uint64_t n = 0, posted = 0;
  int seen = 0;
  for (const struct ibv_send_wr *w = wr; w; w = w->next, n++) {
    if (w == *bad) seen = 1;
    if (!seen) posted++;
  }
  ah_ha_slog_unpush(l, l->head - n + posted);
}

/* The managed primary `qp` is on its context's table, or NULL (the post wrappers' second try,
 * after ah_shim_ha_qpmap). */
static inline ha_qp_t *qp_lookup(ha_ctx_t *hc, struct ibv_qp *qp) {
  ha_qp_t *m = table_find(hc, qp->qp_num);
  return m && m->qp == qp ? m : NULL;
}

/* The post wrappers' uncommon case: a failover in progress logs the WRs (the replay posts them);
 * on a shadow, or broken, they go to the QP carrying the traffic (a dead one flushes them, and
 * NCCL sees it). */
static __attribute__((noinline)) int post_send_slow(ha_ctx_t *hc, ha_qp_t *m,
                                                    struct ibv_send_wr *wr,
                                                    struct ibv_send_wr **bad) {
  pthread_mutex_lock(&m->mu);
  int st = atomic_load(&m->state);
  struct ibv_qp *to = ha_carrier(m);
  int rc;
  if (st != HA_FAILING && ha_on_nic(m, to)) {
    /* a shadow on another NIC: logged with NCCL's keys, posted with the mirrors' */
    uint64_t first = m->slog.head;
    rc = log_and_post_send(hc, m, to, wr, bad, 0);
    if (rc == 0 && (rc = ah_shim_ha_sh_post_send(m, to, wr, bad)) != 0) {
      uint64_t seq = first;
      for (struct ibv_send_wr *w = wr; w && w != *bad; w = w->next) seq++;
      ah_ha_slog_unpush(&m->slog, seq);
    }
  } else {
    rc = log_and_post_send(hc, m, to, wr, bad, st != HA_FAILING);
  }
  pthread_mutex_unlock(&m->mu);
  return rc;
}

static __attribute__((noinline)) int post_recv_slow(ha_ctx_t *hc, ha_qp_t *m,
                                                    struct ibv_recv_wr *wr,
                                                    struct ibv_recv_wr **bad) {
  pthread_mutex_lock(&m->mu);
  int st = atomic_load(&m->state);
  struct ibv_qp *to = ha_carrier(m);
  int rc;
  if (st != HA_FAILING && ha_on_nic(m, to)) {
    uint64_t first = m->rlog.head;
    rc = log_and_post_recv(hc, m, to, wr, bad, 0);
    if (rc == 0 && (rc = ah_shim_ha_sh_post_recv(m, to, wr, bad)) != 0) {
      uint64_t seq = first;
      for (struct ibv_recv_wr *w = wr; w && w != *bad; w = w->next) seq++;
      ah_ha_rlog_unpush(&m->rlog, seq);
    }
  } else {
    rc = log_and_post_recv(hc, m, to, wr, bad, st != HA_FAILING);
  }
  pthread_mutex_unlock(&m->mu);
  return rc;
}

/* Every post the fast path does not take: a QP not in the map yet (or not managed), one not in
 * peace, a chain, a WR not in the common form. */
static __attribute__((noinline)) int post_send_other(struct ibv_qp *qp, struct ibv_send_wr *wr,
                                                     struct ibv_send_wr **bad) {
  ha_ctx_t *hc = ctx_of(qp->context);
  if (__builtin_expect(!hc, 0)) return EINVAL;
  ha_qp_t *m = qp_lookup(hc, qp);
  if (!m) return hc->post_send(qp, wr, bad);
  if (atomic_load_explicit(&m->state, memory_order_acquire) != HA_PEACE)
    return post_send_slow(hc, m, wr, bad);
  if (qpmap_find(qp) != m) qpmap_set(qp, m); /* its first post: the next ones find it in the map */
  if (!slog_append_chain(&m->slog, wr)) return log_and_post_send(hc, m, qp, wr, bad, 1);
  int rc = hc->post_send(qp, wr, bad);
  if (rc != 0) send_unlog(&m->slog, wr, bad);
  return rc;
}

static __attribute__((noinline)) int post_recv_other(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                                                     struct ibv_recv_wr **bad) {
  ha_ctx_t *hc = ctx_of(qp->context);
  if (__builtin_expect(!hc, 0)) return EINVAL;
  ha_qp_t *m = qp_lookup(hc, qp);
  if (!m) return hc->post_recv(qp, wr, bad);
  if (atomic_load_explicit(&m->state, memory_order_acquire) != HA_PEACE)
    return post_recv_slow(hc, m, wr, bad);
  if (qpmap_find(qp) != m) qpmap_set(qp, m);
  return log_and_post_recv(hc, m, qp, wr, bad, 1);
}

/* The provider refused the single WR the fast path logged: forgets it. Returns rc. */
static __attribute__((noinline)) int send_refused(ha_qp_t *m, int rc) {
  ah_ha_slog_unpush(&m->slog, m->slog.head - 1);
  return rc;
}

static __attribute__((noinline)) int recv_refused(ha_qp_t *m, int rc) {
  ah_ha_rlog_unpush(&m->rlog, m->rlog.head - 1);
  return rc;
}

/* NCCL's post (net_ib posts one WR per call but for multi-receive chains): peace time, the QP found
 * in the map, the WR in the log, the provider's post. A single WR the provider refused is the one
 * just logged. */
static int ha_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  ha_qp_t *m = qpmap_find(qp);
  if (__builtin_expect(atomic_load_explicit(&m->state, memory_order_acquire) != HA_PEACE ||
                           wr->next || !slog_append1(&m->slog, wr),
                       0))
    return post_send_other(qp, wr, bad);
  int rc = m->hc->post_send(qp, wr, bad);
  if (__builtin_expect(rc != 0, 0)) return send_refused(m, rc);
  return 0;
}

static int ha_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  ha_qp_t *m = qpmap_find(qp);
  if (__builtin_expect(atomic_load_explicit(&m->state, memory_order_acquire) != HA_PEACE ||
                           wr->next || !rlog_append1(&m->rlog, wr),
                       0))
    return post_recv_other(qp, wr, bad);
  int rc = m->hc->post_recv(qp, wr, bad);
  if (__builtin_expect(rc != 0, 0)) return recv_refused(m, rc);
  return 0;
}

/* ---- completions ------------------------------------------------------------------------------ */

static void wake_thread(void) {
  pthread_mutex_lock(&ah_shim_ha_mu);
  pthread_cond_signal(&ah_shim_ha_cv);
  pthread_mutex_unlock(&ah_shim_ha_mu);
}

/* A successful completion of the QP NCCL's work is on: retires its log entry (RC completes sends
 * and receives in posting order). */
static inline void retire(ha_qp_t *m, const struct ibv_wc *c) {
  if (c->opcode & IBV_WC_RECV) ah_ha_rlog_complete_next(&m->rlog);
  else ah_ha_slog_complete_next(&m->slog);
}

/* A completion of a managed QP outside the common case (any error, a standby's, a carrier failing
 * over); nic: it came from a backup NIC's CQ (AUTOHA_HA=nic), whose QP numbers are that NIC's and
 * may equal this one's. Returns 1 to hand wc (rewritten) to NCCL, 0 to absorb it. */
static int wc_slow(ha_qp_t *m, struct ibv_wc *wc, int nic) {
  int deliver = 0, wake = 0;
  pthread_mutex_lock(&m->mu);
  int st = atomic_load(&m->state);
  int ok = wc->status == IBV_WC_SUCCESS;
  struct ibv_qp *carrier = ha_carrier(m);
  int from_carrier = carrier && wc->qp_num == carrier->qp_num && ha_on_nic(m, carrier) == nic;
  if (wc->wr_id == WRID_DRAIN_SEND || wc->wr_id == WRID_DRAIN_RECV) {
    /* a drain marker: never NCCL's (a broken carrier's late one included) */
    if (from_carrier && st == HA_FAILING) {
      atomic_store(wc->wr_id == WRID_DRAIN_SEND ? &m->drained_send : &m->drained_recv, 1);
      wake = 1;
    }
  } else if (!from_carrier) {
    /* the standby's heartbeat (or its flush), or a late completion of a queue pair replaced */
    if (m->sb.qp && wc->qp_num == m->sb.qpn && ha_on_nic(m, m->sb.qp) == nic)
      ah_shim_ha_heartbeat_done(m, wc);
  } else if (ok) {
    /* the QP NCCL's work is on: hand it over, as NCCL would have seen it from the primary (while
     * failing, cannot happen on RC — nothing succeeds after the first error — but never lose one) */
    retire(m, wc);
    wc->qp_num = m->qpn;
    deliver = 1;
  } else if ((st == HA_PEACE || st == HA_SHADOW) && !m->unprotected && ah_shim_ha_can_hold(m) &&
             fails_over(m, wc->status)) {
    /* a path error with a standby ready, or on its way: absorbed, the background thread takes over */
    if (st == HA_SHADOW)
      ah_log_dev(m->gpu, AH_LOG_WARN,
                 "HA: QP %u: its shadow failed too (%s, shadow QP %u); failing over again", m->qpn,
                 status_name(wc->status), m->sh_qpn);
    ah_shim_ha_failover_start(m, status_name(wc->status));
    if (wc->status == IBV_WC_RNR_RETRY_EXC_ERR || wc->status == IBV_WC_REM_ACCESS_ERR)
      m->fo_status = (int)wc->status;
    wake = 1;
  } else if (st == HA_FAILING) {
    /* the failing carrier's error and flushes */
  } else {
    if (st != HA_BROKEN) {
      atomic_store(&m->state, HA_BROKEN);
      if (m->sh && m->sh_status == (int)wc->status)
        ah_log_dev(
            m->gpu, AH_LOG_WARN,
            "HA: QP %u: %s again on the shadow its failover for it moved the traffic to (shadow "
            "QP %u): not the path's; NCCL gets the error",
            m->qpn, status_name(wc->status), m->sh_qpn);
      else if (m->sh)
        ah_log_dev(
            m->gpu, AH_LOG_WARN,
            "HA: QP %u: its shadow failed too (%s) and no other is ready; NCCL gets the error",
            m->qpn, status_name(wc->status));
    }
    wc->qp_num = m->qpn;
    deliver = 1;
  }
  pthread_mutex_unlock(&m->mu);
  if (wake) wake_thread();
  return deliver;
}

int ah_shim_ha_wc_from_shadow(ha_qp_t *m, struct ibv_wc *wc) {
  int st = atomic_load_explicit(&m->state, memory_order_acquire);
  /* the common case after a nic failover: the nic shadow carrying the traffic (not a standby's
   * heartbeat, not a replaced shadow's late completion) */
  if (wc->status == IBV_WC_SUCCESS && st == HA_SHADOW && wc->qp_num == m->sh_qpn &&
      ha_on_nic(m, m->sh)) {
    retire(m, wc);
    wc->qp_num = m->qpn;
    return 1;
  }
  return wc_slow(m, wc, 1);
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
        keep = wc_slow(m, c, 0);
      }
    }
    if (keep) {
      if (out != i) wc[out] = *c;
      out++;
    }
  }
  return out;
}

/* NCCL's poll outside the common case: the completions the HA layer queued for cq first (they are
 * older), then the provider's. Returns what the provider's poll would. */
static int poll_body(ha_ctx_t *hc, struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  int got = 0;
  if (n > 0 && atomic_load_explicit(&hc->nsynth, memory_order_acquire))
    got = synth_take(hc, cq, wc, n);
  if (got == n && n > 0) return got;
  int r = hc->poll_cq(cq, n - got, wc + got);
  if (r <= 0) return got ? got : r;
  return got + wc_filter(hc, wc + got, r);
}

/* The poll's uncommon case, entered with the poll count raised: under drain_mu while the drain is
 * on (the count is lowered first: the drain waits for it), else with the queued completions first. */
static __attribute__((noinline)) int poll_unusual(ha_ctx_t *hc, uint32_t w, struct ibv_cq *cq,
                                                  int n, struct ibv_wc *wc) {
  if (w & HA_POLL_DRAIN) {
    atomic_fetch_sub_explicit(&hc->pollw, 1, memory_order_release);
    pthread_mutex_lock(&hc->drain_mu);
    int r = poll_body(hc, cq, n, wc);
    pthread_mutex_unlock(&hc->drain_mu);
    return r;
  }
  int r = poll_body(hc, cq, n, wc);
  atomic_fetch_sub_explicit(&hc->pollw, 1, memory_order_release);
  return r;
}

/* The end of a fast poll that took completions: the poll count falls. Returns out. */
static inline int poll_done(ha_ctx_t *hc, int out) {
  atomic_fetch_sub_explicit(&hc->pollw, 1, memory_order_release);
  return out;
}

/* Completions were queued after the fast poll began (a replay queues the ones the peer confirmed
 * before it posts on the shadow, whose completions can be in this poll): the out completions it
 * translated in wc go behind them and NCCL gets the queue's front, at most out of them (the rest on
 * its next polls), so each QP's completions reach it in order. The CQ polled is the one of a
 * managed QP's completion (none: nothing to order). Returns how many NCCL gets. */
static __attribute__((noinline)) int poll_requeue(ha_ctx_t *hc, struct ibv_wc *wc, int out) {
  struct ibv_cq *cq = NULL;
  for (int i = 0; i < out && !cq; i++) {
    ha_qp_t *m = table_find(hc, wc[i].qp_num);
    if (m) cq = wc[i].opcode & IBV_WC_RECV ? m->recv_cq : m->send_cq;
  }
  if (cq) {
    for (int i = 0; i < out; i++) ah_shim_ha_synth_push(hc, cq, &wc[i]);
    out = synth_take(hc, cq, wc, out);
  }
  return poll_done(hc, out);
}

/* poll_took from the i-th completion on, which is not in the common case. */
static __attribute__((noinline)) int poll_took_rest(ha_ctx_t *hc, struct ibv_wc *wc, int r, int i) {
  int out = i + wc_filter(hc, wc + i, r - i);
  if (__builtin_expect(atomic_load_explicit(&hc->pollw, memory_order_acquire) & HA_POLL_SYNTH, 0))
    return poll_requeue(hc, wc, out);
  return poll_done(hc, out);
}

/* The fast poll's provider returned r > 0 completions in wc: translates them and lowers the poll
 * count (poll_done). Returns how many NCCL gets. The common case, for each: a success on a primary
 * in peace whose log holds its entry — the table look-up of its QP number, one state load and a
 * counter bump (the retire); anything else (a shadow's, an error, a QP failing over) goes to
 * wc_filter from there on. */
static __attribute__((noinline)) int poll_took(ha_ctx_t *hc, struct ibv_wc *wc, int r) {
  for (int i = 0; i < r; i++) {
    struct ibv_wc *c = &wc[i];
    const uint32_t qpn = c->qp_num;
    ha_qp_t *m = table_find(hc, qpn);
    if (!m) continue; /* not managed: NCCL's as it is */
    const int st = atomic_load_explicit(&m->state, memory_order_acquire);
    if (__builtin_expect(((int)c->status | st) != 0 /* IBV_WC_SUCCESS, HA_PEACE */ || qpn != m->qpn,
                         0))
      return poll_took_rest(hc, wc, r, i);
    if (c->opcode & IBV_WC_RECV) {
      ah_ha_rlog_t *l = &m->rlog;
      if (__builtin_expect(l->tail == l->head, 0)) return poll_took_rest(hc, wc, r, i);
      l->tail++;
      l->done++;
    } else {
      ah_ha_slog_t *l = &m->slog;
      if (__builtin_expect(l->sig_tail == l->nsig, 0)) return poll_took_rest(hc, wc, r, i);
      ah_ha_slog_complete_next(l);
    }
    c->qp_num = m->qpn;
  }
  if (__builtin_expect(atomic_load_explicit(&hc->pollw, memory_order_acquire) & HA_POLL_SYNTH, 0))
    return poll_requeue(hc, wc, r);
  return poll_done(hc, r);
}

/* NCCL's poll of a CQ of context slot k. Peace time: one atomic add on the context's poll word
 * (which also says whether anything is unusual), the provider's poll, the translation of what it
 * returned. */
static inline __attribute__((always_inline)) int poll_ctx(int k, struct ibv_cq *cq, int n,
                                                          struct ibv_wc *wc) {
  ha_ctx_t *hc = ah_shim_ha_ctxs[k];
  /* Dekker with ah_shim_ha_drain_poll, on one word: this add raises the count and reads the drain flag,
   * the drain's atomic or sets the flag and reads the count, so one of the two sees the other */
  uint32_t w = atomic_fetch_add(&hc->pollw, 1);
  if (__builtin_expect(w & (HA_POLL_DRAIN | HA_POLL_SYNTH), 0))
    return poll_unusual(hc, w, cq, n, wc);
  int r = hc->poll_cq(cq, n, wc);
  /* the slot is read again rather than kept across the call (it never changes once set): one
   * register less to save on every poll */
  hc = __atomic_load_n(&ah_shim_ha_ctxs[k], __ATOMIC_RELAXED);
  if (r > 0) return poll_took(hc, wc, r);
  return poll_done(hc, r);
}

/* One poll wrapper per context slot (rdma_poll_slots.h): context k's ops.poll_cq is ha_poll_cq_k,
 * so a poll finds its context with one load instead of a look-up. */
AH_POLL_SLOTS_DEFINE(ha_poll_cq, poll_ctx);
_Static_assert(HA_MAX_CTX == AH_POLL_SLOTS, "one poll wrapper per context slot");

/* Polls m's CQs on the background thread, for a failover whose drain NCCL may never poll for (a
 * receiving end waiting, in NCCL's ring, for the sender whose failover waits for this side's
 * count): every completion is translated as NCCL's poll would and the ones NCCL gets are queued
 * behind the queued ones, which NCCL's poll hands out before the provider's — so each QP's
 * completions still reach NCCL once and in order. Returns the completions it took. */
int ah_shim_ha_drain_poll(ha_qp_t *m) {
  ha_ctx_t *hc = m->hc;
  struct ibv_wc wc[32];
  int total = 0;
  uint32_t w = atomic_fetch_or(&hc->pollw, HA_POLL_DRAIN) | HA_POLL_DRAIN;
  double until = ha_now_s() + 1.0;
  while (w & HA_POLL_COUNT) {
    if (ha_now_s() > until) { /* a poll cannot take a second; leave it to the next step */
      atomic_fetch_and(&hc->pollw, ~HA_POLL_DRAIN);
      return 0;
    }
    sched_yield();
    w = atomic_load(&hc->pollw);
  }
  pthread_mutex_lock(&hc->drain_mu);
  struct ibv_cq *cqs[2] = {m->send_cq, m->recv_cq};
  for (int k = 0; k < 2; k++) {
    if (!cqs[k] || (k == 1 && cqs[1] == cqs[0])) continue;
    for (int round = 0; round < 64; round++) { /* bounded: a busy CQ refills */
      int r = hc->poll_cq(cqs[k], 32, wc);
      if (r <= 0) break;
      int out = wc_filter(hc, wc, r);
      for (int i = 0; i < out; i++) ah_shim_ha_synth_push(hc, cqs[k], &wc[i]);
      total += r;
      if (r < 32) break;
    }
  }
  pthread_mutex_unlock(&hc->drain_mu);
  atomic_fetch_and(&hc->pollw, ~HA_POLL_DRAIN);
  return total;
}

/* ---- the contexts ----------------------------------------------------------------------------- */

/* ah_shim_ha_ctx_get: NCCL's post_send, post_recv and poll_cq of ctx become the wrappers above. */
ha_ctx_t *ah_shim_ha_ctx_get(struct ibv_context *ctx, const ah_shim_ha_verbs_t *real) {
  ha_ctx_t *hc = ctx_of(ctx);
  if (hc) return hc;
  int n = atomic_load(&ah_shim_ha_nctx);
  if (n >= HA_MAX_CTX || !ctx->ops.post_send || !ctx->ops.post_recv || !ctx->ops.poll_cq)
    return NULL;
  hc = calloc(1, sizeof *hc);
  if (!hc) return NULL;
  hc->ctx = ctx;
  hc->real = *real;
  hc->post_send = ctx->ops.post_send;
  hc->post_recv = ctx->ops.post_recv;
  hc->poll_cq = ctx->ops.poll_cq;
  hc->ha_poll_cq = ha_poll_cq[n];
  pthread_mutex_init(&hc->synth_mu, NULL);
  pthread_mutex_init(&hc->drain_mu, NULL);
  ah_shim_ha_ctxs[n] = hc;
  atomic_store_explicit(&ah_shim_ha_nctx, n + 1, memory_order_release);
  ctx->ops.post_send = ha_post_send;
  ctx->ops.post_recv = ha_post_recv;
  ctx->ops.poll_cq = ha_poll_cq[n];
  return hc;
}
