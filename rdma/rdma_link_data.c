/* rdma_link_data.c: per-connection timing's data path (rdma_link.h, docs/diagnosis.md "Slow
 * links"). NCCL calls post_send and poll_cq inline through context->ops; ah_shim_lk_ctx_get puts
 * these wrappers in front of whatever the context had (the provider's, or the failover layer's,
 * whose own traffic — heartbeats, replays, shadows — never reaches NCCL's view, so it is not timed).
 *
 * A post stamps each signalled work request of a sending end's chain with one clock read and the
 * bytes of the chain up to it; a poll that returned completions reads the clock once and retires,
 * for each successful send completion, the queue pair's oldest entry: its bytes, its
 * post-to-completion wait and the queue pair's busy time (the union of its work requests' spans:
 * from the later of the entry's post and the previous completion) go into the counters. The ring
 * is published before the provider's post (a completion may be polled on another thread before the
 * post returns). bench/link_cost counts what this adds. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "rdma_link.h"
#include "rdma_poll_slots.h"

lk_ctx_t *ah_shim_lk_ctxs[LK_MAX_CTX];
_Atomic int ah_shim_lk_nctx;
lk_qpmap_t ah_shim_lk_qpmap[LK_QPMAP + LK_PROBES];

uint64_t ah_shim_lk_ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
#endif
}

static inline uint64_t ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return ah_shim_lk_ticks();
#endif
}

static inline lk_qpmap_t *qpmap_slot(const struct ibv_qp *qp) {
  return &ah_shim_lk_qpmap[((uintptr_t)qp >> 4) & (LK_QPMAP - 1)];
}

/* A receiving end's key in the map: its address with the low bit set (the fast path's compare
 * fails on it, and the slow path finds its context's post in one look). */
static inline struct ibv_qp *untimed_key(const struct ibv_qp *qp) {
  return (struct ibv_qp *)((uintptr_t)qp | 1);
}

static inline uint32_t slot_of(uint32_t qpn) { return (qpn * 2654435761u) >> 20 & (LK_SLOTS - 1); }

/* The timing state owning qpn on lc, or NULL. */
static inline lk_qp_t *table_find(lk_ctx_t *lc, uint32_t qpn) {
  uint32_t i = slot_of(qpn);
  for (int n = 0; n < LK_SLOTS; n++, i = (i + 1) & (LK_SLOTS - 1)) {
    uint32_t k = atomic_load_explicit(&lc->key[i], memory_order_acquire);
    if (__builtin_expect(k == qpn, 1))
      return atomic_load_explicit(&lc->val[i], memory_order_acquire);
    if (!k) return NULL;
  }
  return NULL;
}

int ah_shim_lk_map(lk_ctx_t *lc, struct ibv_qp *qp, uint32_t qpn, lk_qp_t *m) {
  int rc = -1;
  struct ibv_qp *want = m && !m->timed ? untimed_key(qp) : qp;
  lk_qpmap_t *e = qpmap_slot(qp);
  for (int n = 0; n <= LK_PROBES; n++, e++) { /* its own slot (either key), else the first empty */
    struct ibv_qp *k = atomic_load(&e->qp);
    if (k == qp || k == untimed_key(qp) || (!k && m)) {
      atomic_store_explicit(&e->m, m,
                            memory_order_release); /* m first: a key is never read alone */
      if (k != want && m) atomic_store_explicit(&e->qp, want, memory_order_release);
      rc = 0;
      break;
    }
    if (!k) break;
  }
  /* completions: only a sending end's are timed (a receiving end's number maps to nothing) */
  lk_qp_t *v = m && m->timed ? m : NULL;
  uint32_t i = slot_of(qpn);
  for (int n = 0; lc && qpn && n < LK_SLOTS; n++, i = (i + 1) & (LK_SLOTS - 1)) {
    uint32_t k = atomic_load(&lc->key[i]);
    if (k == qpn || (!k && v)) {
      atomic_store_explicit(&lc->val[i], v, memory_order_release);
      if (!k) atomic_store_explicit(&lc->key[i], qpn, memory_order_release);
      return m ? rc : 0;
    }
    if (!k) break;
  }
  return v ? -1 : m ? rc : 0;
}

/* Stamps the signalled work requests of the chain wr (the general form: several work requests,
 * several SGEs). */
static __attribute__((noinline)) void stamp_chain(lk_qp_t *m, const struct ibv_send_wr *wr) {
  uint64_t h = atomic_load_explicit(&m->head, memory_order_relaxed), unsig = m->unsig, t = 0;
  const uint64_t room =
      (uint64_t)m->mask + 1 - (h - atomic_load_explicit(&m->tail, memory_order_acquire));
  for (uint64_t n = 0; wr; wr = wr->next) {
    for (int i = 0; i < wr->num_sge; i++) unsig += wr->sg_list[i].length;
    if ((wr->send_flags | m->sig_all) & IBV_SEND_SIGNALED) {
      if (n++ >= room) break; /* cannot be with RC's bound; never block */
      if (!t) t = ticks();
      m->ring[h++ & m->mask] = (lk_ent_t){t, unsig};
      unsig = 0;
    }
  }
  atomic_store_explicit(&m->head, h, memory_order_release);
  m->unsig = unsig;
}

/* lk_post_send outside its common case: a chain or several SGEs, a queue pair past its first slot
 * of the map, a receiving end (its key marked: not timed), a queue pair not in the map at all
 * (whose context's next post is found by its context). */
static __attribute__((noinline)) int post_other(struct ibv_qp *qp, struct ibv_send_wr *wr,
                                                struct ibv_send_wr **bad) {
  lk_qpmap_t *e = qpmap_slot(qp);
  for (int n = 0; n <= LK_PROBES; n++, e++) {
    struct ibv_qp *k = atomic_load_explicit(&e->qp, memory_order_acquire);
    lk_qp_t *m =
        k == qp || k == untimed_key(qp) ? atomic_load_explicit(&e->m, memory_order_acquire) : NULL;
    if (m && k == qp) stamp_chain(m, wr);
    if (m) return m->lc->post_send(qp, wr, bad);
    if (!k || k == qp || k == untimed_key(qp)) break;
  }
  int n = atomic_load_explicit(&ah_shim_lk_nctx, memory_order_acquire);
  for (int i = 0; i < n; i++)
    if (ah_shim_lk_ctxs[i]->ctx == qp->context) return ah_shim_lk_ctxs[i]->post_send(qp, wr, bad);
  *bad = wr;
  return EINVAL;
}

/* NCCL's post on any queue pair of a wrapped context. A sending end's common case (one work
 * request, one SGE, its queue pair at its first slot of the map): the look-up, its bytes added,
 * and for a signalled one a clock read and a ring entry; then the context's next post, as a tail
 * call (the uncommon cases too: this function saves no register).
 * Note that the stamps are published before the post (its completion may be polled on another
 * thread before the post returns) and not taken back when the post fails: NCCL fails the
 * connection on a refused post, so no later completion of it is misread. */
static int lk_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  lk_qpmap_t *e = qpmap_slot(qp);
  lk_qp_t *m;
  struct ibv_qp *k = atomic_load_explicit(&e->qp, memory_order_acquire);
  if (__builtin_expect(k != qp || !(m = atomic_load_explicit(&e->m, memory_order_acquire)) ||
                           ((uintptr_t)wr->next | (uintptr_t)(wr->num_sge ^ 1)),
                       0)) {
    /* a receiving end at its first slot: its context's post at once */
    if (k == untimed_key(qp) && (m = atomic_load_explicit(&e->m, memory_order_acquire)))
      return m->lc->post_send(qp, wr, bad);
    return post_other(qp, wr, bad);
  }
  uint64_t unsig = m->unsig + wr->sg_list[0].length;
  if ((wr->send_flags | m->sig_all) & IBV_SEND_SIGNALED) {
    uint64_t h = atomic_load_explicit(&m->head, memory_order_relaxed);
    if (__builtin_expect(h - atomic_load_explicit(&m->tail, memory_order_acquire) <= m->mask, 1)) {
      m->ring[h & m->mask] = (lk_ent_t){ticks(), unsig};
      atomic_store_explicit(&m->head, h + 1, memory_order_release);
      unsig = 0;
    }
  }
  m->unsig = unsig;
  return m->lc->post_send(qp, wr, bad);
}

/* The provider's poll returned r > 0 completions: each successful send completion of a timed
 * queue pair retires its oldest entry into the counters. Returns r (nothing is changed). */
static __attribute__((noinline)) int poll_took(lk_ctx_t *lc, const struct ibv_wc *wc, int r) {
  uint64_t t = 0;
  for (int i = 0; i < r; i++) {
    const struct ibv_wc *c = &wc[i];
    if (c->opcode & IBV_WC_RECV) continue;
    lk_qp_t *m = table_find(lc, c->qp_num);
    if (!m) continue;
    uint64_t tail = atomic_load_explicit(&m->tail, memory_order_relaxed);
    if (tail == atomic_load_explicit(&m->head, memory_order_acquire)) continue;
    const lk_ent_t e = m->ring[tail & m->mask];
    atomic_store_explicit(&m->tail, tail + 1, memory_order_release);
    if (__builtin_expect(c->status != IBV_WC_SUCCESS, 0)) continue;
    if (!t) t = ticks();
    uint64_t from = e.t > m->last ? e.t : m->last;
    if (t > from)
      atomic_store_explicit(&m->busy,
                            atomic_load_explicit(&m->busy, memory_order_relaxed) + (t - from),
                            memory_order_relaxed);
    if (t > e.t)
      atomic_store_explicit(&m->wait,
                            atomic_load_explicit(&m->wait, memory_order_relaxed) + (t - e.t),
                            memory_order_relaxed);
    m->last = t;
    atomic_store_explicit(&m->bytes,
                          atomic_load_explicit(&m->bytes, memory_order_relaxed) + e.bytes,
                          memory_order_relaxed);
    atomic_store_explicit(&m->wrs, atomic_load_explicit(&m->wrs, memory_order_relaxed) + 1,
                          memory_order_relaxed);
  }
  return r;
}

/* NCCL's poll of a CQ of context slot k: the context's next poll, then the completions' retire. */
static inline __attribute__((always_inline)) int poll_ctx(int k, struct ibv_cq *cq, int n,
                                                          struct ibv_wc *wc) {
  lk_ctx_t *lc = ah_shim_lk_ctxs[k];
  int r = lc->poll_cq(cq, n, wc);
  if (r > 0) return poll_took(__atomic_load_n(&ah_shim_lk_ctxs[k], __ATOMIC_RELAXED), wc, r);
  return r;
}

/* One poll wrapper per context slot (rdma_poll_slots.h), as the failover layer's: a poll finds its
 * context with one load. */
AH_POLL_SLOTS_DEFINE(lk_poll_cq, poll_ctx);
_Static_assert(LK_MAX_CTX == AH_POLL_SLOTS, "one poll wrapper per context slot");

lk_ctx_t *ah_shim_lk_ctx_get(struct ibv_context *ctx) {
  int n = atomic_load(&ah_shim_lk_nctx);
  for (int i = 0; i < n; i++)
    if (ah_shim_lk_ctxs[i]->ctx == ctx) return ah_shim_lk_ctxs[i];
  if (n >= LK_MAX_CTX || !ctx->ops.post_send || !ctx->ops.poll_cq) return NULL;
  lk_ctx_t *lc = calloc(1, sizeof *lc);
  if (!lc) return NULL;
  lc->ctx = ctx;
  lc->post_send = ctx->ops.post_send;
  lc->poll_cq = ctx->ops.poll_cq;
  ah_shim_lk_ctxs[n] = lc;
  atomic_store_explicit(&ah_shim_lk_nctx, n + 1, memory_order_release);
  ctx->ops.post_send = lk_post_send;
  ctx->ops.poll_cq = lk_poll_cq[n];
  return lc;
}
