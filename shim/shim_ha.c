/* shim_ha.c: transparent RDMA failover inside the verbs hook (docs/ha.md). Every RC queue pair NCCL
 * connects gets a shadow RC queue pair on the same protection domain and completion queues, on a
 * backup path (AUTOHA_HA=path: same port, another UDP source port; port: the NIC's other port),
 * connected by a background thread through the coordinator hub's directory. NCCL's post_send,
 * post_recv and poll_cq (called inline through context->ops) are replaced on its contexts: peace
 * time, each work request is copied into a log (path/ah_ha_log.c), its wr_id tagged with the log's
 * sequence number and posted to the primary unchanged otherwise; each completion restores NCCL's
 * wr_id and retires log entries. A path error on the primary is absorbed: the two ends agree through
 * the hub on how many messages each took, the sender replays the rest in order on the shadow,
 * the receiver re-posts its receives there, and NCCL keeps seeing completions of the primary's QP
 * number, exactly the ones it would have had without the fault.
 *
 * Key choice: shadows share NCCL's CQs, so NCCL's own completion channel wakes for replayed work and
 * no extra CQ needs polling; completions of the shadow are translated (qp_num, wr_id), and the
 * HA layer's own work requests (heartbeats, drain markers) are recognised by a tag bit and never
 * reach NCCL. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ah_coord.h"
#include "ah_env.h"
#include "ah_ha.h"
#include "ah_ha_rebal.h"
#include "ah_log.h"
#include "ah_path.h"
#include "ah_report.h"
#include "shim_ha.h"
#include "shim_verbs.h"

_Static_assert((int)IBV_WR_RDMA_WRITE == (int)AH_HA_WR_RDMA_WRITE &&
                   (int)IBV_WR_RDMA_WRITE_WITH_IMM == (int)AH_HA_WR_RDMA_WRITE_WITH_IMM &&
                   (int)IBV_WR_SEND == (int)AH_HA_WR_SEND && (int)IBV_WR_SEND_WITH_IMM == (int)AH_HA_WR_SEND_WITH_IMM &&
                   (int)IBV_WR_RDMA_READ == (int)AH_HA_WR_RDMA_READ,
               "ah_ha.h mirrors verbs.h's opcodes");

/* The wr_ids of the HA layer's own work requests (NCCL's are request indexes, slots or UINT64_MAX):
 * a heartbeat on a shadow, and the markers that drain a failed primary. NCCL's WRs keep their own
 * wr_id: RC completes sends, and receives, in posting order, so each completion names its log
 * entry by its place. */
#define WRID_HB 0x6175746f68614842ull          /* "autohaHB" */
#define WRID_DRAIN_SEND 0x6175746f68614453ull  /* "autohaDS" */
#define WRID_DRAIN_RECV 0x6175746f68614452ull  /* "autohaDR" */

enum { HA_PEACE, HA_FAILING, HA_SHADOW, HA_BROKEN };                    /* the primary's data path */
enum { SH_NONE, SH_WANTED, SH_PUBLISHED, SH_RTS, SH_CONNECTED, SH_READY, SH_DEAD }; /* its shadow */
enum { FO_NONE, FO_DRAIN, FO_EXCHANGE };                                 /* failover steps */

#define HA_SLOTS 4096 /* QP numbers per context table (primaries and shadows) */
#define HA_MAX_CTX 32
#define HA_SYNTH_MAX 4096

typedef struct ha_ctx ha_ctx_t;

typedef struct ha_qp {
  struct ibv_qp *qp, *sh;
  ha_ctx_t *hc;
  uint32_t qpn, sh_qpn;
  _Atomic int state, sh_state;
  pthread_mutex_t mu;
  ah_ha_slog_t slog;
  ah_ha_rlog_t rlog;
  int unprotected;          /* a WR the log cannot replay (several SGEs, atomics): no failover */
  /* what NCCL set up, for the shadow */
  struct ibv_pd *pd;
  struct ibv_cq *send_cq, *recv_cq;
  struct ibv_qp_cap cap;
  int port, access, pkey_index;
  struct ibv_qp_attr rtr, rts;
  int rtr_mask, rts_mask;
  union ibv_gid sgid;
  int have_sgid;
  /* the shadow's connection */
  union ibv_gid sh_gid;
  int sh_port;
  double sh_deadline;
  /* failover */
  int fo_step;
  double t_fail, fo_deadline;
  _Atomic int drained_send, drained_recv;
  /* bookkeeping */
  int busy;                 /* the background thread works on it (under ha_mu) */
  int flow;                 /* its flow in the rebalance's plan: -2 not looked up, -1 none */
  uint16_t rb_sport;        /* the port the rebalance moved its shadow to (0: not moved) */
  struct ha_qp *next;
} ha_qp_t;

typedef struct {
  struct ibv_cq *cq;
  struct ibv_wc wc;
} ha_synth_t;

struct ha_ctx {
  struct ibv_context *ctx;
  int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
  int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
  int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
  ah_shim_ha_verbs_t real;
  _Atomic uint32_t key[HA_SLOTS];
  _Atomic(ha_qp_t *) val[HA_SLOTS];
  pthread_mutex_t synth_mu;
  _Atomic int nsynth;
  ha_synth_t synth[HA_SYNTH_MAX];
  /* The background thread's drain poll (drain_poll): while `draining` is set, every poll of this
   * context runs under drain_mu, so that its polls and NCCL's never interleave on a CQ; `pollers`
   * counts NCCL's polls running without the lock, which the drain waits out before it polls. */
  _Atomic int draining, pollers;
  pthread_mutex_t drain_mu;
};

static pthread_mutex_t ha_mu = PTHREAD_MUTEX_INITIALIZER; /* contexts, the QP list, the tables' writers */
static pthread_cond_t ha_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER; /* the thread let go of its QPs (busy 0) */
static ha_ctx_t *ctxs[HA_MAX_CTX];
static _Atomic int nctx;
static ha_qp_t *qps;
static int thread_started;

/* what the report's "ha" section shows */
static _Atomic unsigned long st_shadows, st_failovers, st_replayed, st_synth;
static pthread_mutex_t events_mu = PTHREAD_MUTEX_INITIALIZER;
static ah_report_failover_t events[AH_REPORT_HA_MAX];
static int nevents;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int ah_shim_ha_on(void) {
  static _Atomic int on = -1;
  int v = atomic_load_explicit(&on, memory_order_relaxed);
  if (v < 0) {
    const ah_settings_t *s = ah_env_settings();
    v = s->enable && (s->ha == 1 || s->ha == 2);
    const char *own = getenv("NCCL_IB_RESILIENCY_PORT_FAILOVER");
    if (v && own && atoi(own) == 1) {
      /* two layers replaying the same work requests would deliver them twice */
      ah_log(AH_LOG_WARN, "HA: NCCL_IB_RESILIENCY_PORT_FAILOVER=1: NCCL's own port failover is on, so "
             "autoha's (AUTOHA_HA) stands aside");
      v = 0;
    }
    if (s->enable && s->ha == 3)
      AH_LOG_CAPPED(1, AH_LOG_WARN, "AUTOHA_HA=nic is not built yet: running without shadows (docs/ha.md)");
    atomic_store(&on, v);
  }
  return v;
}

/* ---- the per-context table of managed QP numbers ------------------------------------------- */

static inline uint32_t slot_of(uint32_t qpn) { return (qpn * 2654435761u) >> 20 & (HA_SLOTS - 1); }

/* The managed QP that owns qpn on this context (as primary or shadow), or NULL. Lock-free: the
 * data path calls it for every post and completion. */
static inline ha_qp_t *table_find(ha_ctx_t *hc, uint32_t qpn) {
  uint32_t i = slot_of(qpn);
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

/* Maps qpn to m (m NULL: removes it). Call under ha_mu. Returns 0, or -1 when the table is full. */
static int table_set(ha_ctx_t *hc, uint32_t qpn, ha_qp_t *m) {
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

/* The HA context of ctx, or NULL. The thread's last answer is tried first (a proxy thread works on
 * one context at a time); HA contexts are never freed, so a stale one is only a miss. */
static inline ha_ctx_t *ctx_of(struct ibv_context *ctx) {
  /* initial-exec: no __tls_get_addr call on the data path (the shim is preloaded; one pointer fits
   * glibc's static TLS reserve even if it is not) */
  static _Thread_local ha_ctx_t *last __attribute__((tls_model("initial-exec")));
  if (__builtin_expect(last && last->ctx == ctx, 1)) return last;
  int n = atomic_load_explicit(&nctx, memory_order_acquire);
  for (int i = 0; i < n; i++)
    if (ctxs[i]->ctx == ctx) return last = ctxs[i];
  return NULL;
}

/* ---- synthesized completions ---------------------------------------------------------------- */

static void synth_push(ha_ctx_t *hc, struct ibv_cq *cq, const struct ibv_wc *wc) {
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

static enum ibv_wc_opcode wc_opcode(int wr_opcode) {
  switch (wr_opcode) {
  case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
  case IBV_WR_SEND:
  case IBV_WR_SEND_WITH_IMM: return IBV_WC_SEND;
  default: return IBV_WC_RDMA_WRITE;
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
 * on the shadow, or broken, they go to the QP in use (a dead one flushes them, and NCCL sees it). */
static __attribute__((noinline)) int post_send_slow(ha_ctx_t *hc, ha_qp_t *m, struct ibv_send_wr *wr,
                                                    struct ibv_send_wr **bad) {
  pthread_mutex_lock(&m->mu);
  int st = atomic_load(&m->state);
  int rc = log_and_post_send(hc, m, st == HA_SHADOW || (st == HA_BROKEN && m->fo_step < 0) ? m->sh : m->qp, wr,
                             bad, st != HA_FAILING);
  pthread_mutex_unlock(&m->mu);
  return rc;
}

static __attribute__((noinline)) int post_recv_slow(ha_ctx_t *hc, ha_qp_t *m, struct ibv_recv_wr *wr,
                                                    struct ibv_recv_wr **bad) {
  pthread_mutex_lock(&m->mu);
  int st = atomic_load(&m->state);
  int rc = log_and_post_recv(hc, m, st == HA_SHADOW || (st == HA_BROKEN && m->fo_step < 0) ? m->sh : m->qp, wr,
                             bad, st != HA_FAILING);
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

/* The heartbeat of m's shadow completed (any completion of a shadow not in use is one). */
static void heartbeat_done(ha_qp_t *m, const struct ibv_wc *wc) {
  int want = SH_CONNECTED;
  if (wc->status == IBV_WC_SUCCESS) {
    if (atomic_compare_exchange_strong(&m->sh_state, &want, SH_READY)) {
      atomic_fetch_add(&st_shadows, 1);
      ah_log(AH_LOG_DEBUG, "HA: QP %u: shadow QP %u (port %d) is ready", m->qpn, m->sh_qpn, m->sh_port);
    }
  } else {
    atomic_store(&m->sh_state, SH_DEAD);
    AH_LOG_CAPPED(5, AH_LOG_WARN, "HA: the shadow of QP %u failed its heartbeat (%s); that connection "
                  "has no backup path", m->qpn, status_name(wc->status));
  }
}

/* A successful completion of the QP NCCL's work is on: retires its log entry (RC completes sends
 * and receives in posting order). */
static inline void retire(ha_qp_t *m, const struct ibv_wc *c) {
  if (c->opcode & IBV_WC_RECV) ah_ha_rlog_complete(&m->rlog, m->rlog.tail);
  else ah_ha_slog_complete_next(&m->slog);
}

/* A completion of a managed QP outside the common case (any error, a shadow's, a QP failing
 * over). Returns 1 to hand wc (rewritten) to NCCL, 0 to absorb it. */
static int wc_slow(ha_qp_t *m, struct ibv_wc *wc) {
  int from_sh = wc->qp_num != m->qpn;
  int deliver = 0;
  pthread_mutex_lock(&m->mu);
  int st = atomic_load(&m->state);
  int ok = wc->status == IBV_WC_SUCCESS;
  if (!from_sh && (wc->wr_id == WRID_DRAIN_SEND || wc->wr_id == WRID_DRAIN_RECV) && st == HA_FAILING) {
    atomic_store(wc->wr_id == WRID_DRAIN_SEND ? &m->drained_send : &m->drained_recv, 1);
    pthread_mutex_unlock(&m->mu);
    wake_thread();
    return 0;
  }
  if (from_sh && !(st == HA_SHADOW || (st == HA_BROKEN && m->fo_step < 0))) {
    if (wc->wr_id == WRID_HB) heartbeat_done(m, wc);
    pthread_mutex_unlock(&m->mu);
    return 0;
  }
  if (from_sh || st == HA_PEACE || (st == HA_BROKEN && m->fo_step >= 0)) {
    /* the QP NCCL's work is on: hand it over, as NCCL would have seen it from the primary */
    if (ok) {
      retire(m, wc);
    } else if (st == HA_PEACE && !m->unprotected && atomic_load(&m->sh_state) == SH_READY &&
               (wc->status == IBV_WC_RETRY_EXC_ERR || wc->status == IBV_WC_WR_FLUSH_ERR)) {
      /* a path error on a primary with a ready shadow: absorbed, the background thread takes over */
      m->t_fail = now_s();
      m->fo_step = FO_DRAIN;
      atomic_store(&m->state, HA_FAILING);
      ah_log(AH_LOG_INFO, "HA: QP %u: %s on the primary path; failing over to its shadow QP %u", m->qpn,
             status_name(wc->status), m->sh_qpn);
      pthread_mutex_unlock(&m->mu);
      wake_thread();
      return 0;
    } else if (st != HA_BROKEN) {
      atomic_store(&m->state, HA_BROKEN);
      if (from_sh)
        ah_log(AH_LOG_WARN, "HA: QP %u: its shadow failed too (%s); NCCL gets the error", m->qpn,
               status_name(wc->status));
    }
    wc->qp_num = m->qpn;
    deliver = 1;
  } else if (st == HA_FAILING && ok) {
    /* cannot happen on RC (nothing succeeds after the first error), but never lose one */
    retire(m, wc);
    deliver = 1;
  }
  /* else: the failed primary's error and flushes, or a late completion of the path not in use */
  pthread_mutex_unlock(&m->mu);
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
  /* Dekker with drain_poll: this count is raised before `draining` is read, and the drain sets
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
static int drain_poll(ha_qp_t *m) {
  ha_ctx_t *hc = m->hc;
  struct ibv_wc wc[32];
  int total = 0;
  atomic_store(&hc->draining, 1);
  double until = now_s() + 1.0;
  while (atomic_load(&hc->pollers) != 0) {
    if (now_s() > until) { /* a poll cannot take a second; leave it to the next step */
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
      for (int i = 0; i < out; i++) synth_push(hc, cqs[k], &wc[i]);
      total += r;
      if (r < 32) break;
    }
  }
  pthread_mutex_unlock(&hc->drain_mu);
  atomic_store(&hc->draining, 0);
  return total;
}

/* ---- the contexts ----------------------------------------------------------------------------- */

/* The HA context of ctx, wrapping its data-path ops on first use. Call under ha_mu. */
static ha_ctx_t *ctx_get(struct ibv_context *ctx, const ah_shim_ha_verbs_t *real) {
  ha_ctx_t *hc = ctx_of(ctx);
  if (hc) return hc;
  int n = atomic_load(&nctx);
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
  ctxs[n] = hc;
  atomic_store_explicit(&nctx, n + 1, memory_order_release);
  ctx->ops.post_send = ha_post_send;
  ctx->ops.post_recv = ha_post_recv;
  ctx->ops.poll_cq = ha_poll_cq;
  return hc;
}

static void *ha_thread(void *arg);

void ah_shim_ha_created(struct ibv_qp *qp, const struct ibv_qp_init_attr *init, const ah_shim_ha_verbs_t *real) {
  if (!qp || !init || qp->qp_type != IBV_QPT_RC || init->srq || !real->create_qp || !real->modify_qp ||
      !real->destroy_qp || !real->query_gid || !real->qp_sport || !real->move_sport || !ah_shim_ha_on()) {
    ah_log(AH_LOG_DEBUG, "HA: QP %u is not managed (type %d, verbs %d%d%d%d)", qp ? qp->qp_num : 0,
           qp ? (int)qp->qp_type : -1, !!real->create_qp, !!real->modify_qp, !!real->destroy_qp, !!real->query_gid);
    return;
  }
  int saved = errno;
  ha_qp_t *m = calloc(1, sizeof *m);
  if (!m) goto out;
  uint32_t scap = init->cap.max_send_wr ? init->cap.max_send_wr : 1, rcap = init->cap.max_recv_wr;
  if (ah_ha_slog_init(&m->slog, 2 * scap) != 0 || ah_ha_rlog_init(&m->rlog, 2 * (rcap ? rcap : 1)) != 0) {
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
  pthread_mutex_init(&m->mu, NULL);
  pthread_mutex_lock(&ha_mu);
  ha_ctx_t *hc = ctx_get(qp->context, real);
  if (!hc || table_set(hc, m->qpn, m) != 0) {
    pthread_mutex_unlock(&ha_mu);
    AH_LOG_CAPPED(1, AH_LOG_WARN, "HA: cannot manage QP %u (too many contexts or QPs); it runs without a shadow",
                  qp->qp_num);
    ah_ha_slog_free(&m->slog);
    ah_ha_rlog_free(&m->rlog);
    free(m);
    goto out;
  }
  m->hc = hc;
  m->next = qps;
  qps = m;
  if (!thread_started) {
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, ha_thread, NULL) == 0) thread_started = 1;
    else ah_log(AH_LOG_WARN, "HA: cannot start the background thread; no shadows are built");
    pthread_attr_destroy(&a);
  }
  pthread_mutex_unlock(&ha_mu);
out:
  errno = saved;
}

static ha_qp_t *managed(struct ibv_qp *qp) {
  ha_ctx_t *hc = ctx_of(qp->context);
  ha_qp_t *m = hc ? table_find(hc, qp->qp_num) : NULL;
  return m && m->qp == qp ? m : NULL;
}

void ah_shim_ha_modified(struct ibv_qp *qp, const struct ibv_qp_attr *attr, int mask) {
  if (!qp || !attr || !(mask & IBV_QP_STATE) || !atomic_load(&nctx)) return;
  ha_qp_t *m = managed(qp);
  if (!m) return;
  pthread_mutex_lock(&ha_mu);
  if (attr->qp_state == IBV_QPS_INIT) {
    if (mask & IBV_QP_PORT) m->port = attr->port_num;
    if (mask & IBV_QP_ACCESS_FLAGS) m->access = (int)attr->qp_access_flags;
    if (mask & IBV_QP_PKEY_INDEX) m->pkey_index = attr->pkey_index;
  } else if (attr->qp_state == IBV_QPS_RTR) {
    m->rtr = *attr;
    m->rtr_mask = mask;
    int saved = errno;
    ha_ctx_t *hc = m->hc;
    m->have_sgid = hc->real.query_gid(qp->context, (uint8_t)m->port, attr->ah_attr.grh.sgid_index, &m->sgid) == 0;
    errno = saved;
  } else if (attr->qp_state == IBV_QPS_RTS && m->rtr_mask) {
    m->rts = *attr;
    m->rts_mask = mask;
    if (atomic_load(&m->sh_state) == SH_NONE) {
      if (m->rtr.ah_attr.is_global && m->have_sgid) {
        atomic_store(&m->sh_state, SH_WANTED);
        pthread_cond_signal(&ha_cv);
      } else {
        AH_LOG_CAPPED(1, AH_LOG_INFO, "HA: QP %u has no GRH (InfiniBand): shadows are built on RoCE only",
                      m->qpn);
      }
    }
  }
  pthread_mutex_unlock(&ha_mu);
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
  if (!qp || !atomic_load(&nctx)) return;
  int saved = errno;
  pthread_mutex_lock(&ha_mu);
  ha_qp_t *m = managed(qp);
  if (m) {
    ha_ctx_t *hc = m->hc;
    table_set(hc, m->qpn, NULL);
    if (m->sh) table_set(hc, m->sh_qpn, NULL);
    for (ha_qp_t **p = &qps; *p; p = &(*p)->next)
      if (*p == m) {
        *p = m->next;
        break;
      }
    /* the thread may be working on this QP (a step takes milliseconds): NCCL's QP must outlive it */
    while (m->busy) pthread_cond_wait(&idle_cv, &ha_mu);
    if (m->sh) hc->real.destroy_qp(m->sh);
    qp_free(m);
  }
  pthread_mutex_unlock(&ha_mu);
  errno = saved;
}

/* ---- async events ------------------------------------------------------------------------------ */

static _Atomic unsigned long st_events; /* events absorbed */

int ah_shim_ha_event_absorbed(struct ibv_context *ctx, const struct ibv_async_event *ev) {
  if (!ev || !atomic_load(&nctx)) return 0;
  ha_ctx_t *hc = ctx_of(ctx);
  if (!hc) return 0;
  switch (ev->event_type) {
  case IBV_EVENT_QP_FATAL:
  case IBV_EVENT_QP_REQ_ERR:
  case IBV_EVENT_QP_ACCESS_ERR:
  case IBV_EVENT_COMM_EST:
  case IBV_EVENT_SQ_DRAINED:
  case IBV_EVENT_PATH_MIG:
  case IBV_EVENT_PATH_MIG_ERR:
  case IBV_EVENT_QP_LAST_WQE_REACHED: {
    struct ibv_qp *qp = ev->element.qp;
    ha_qp_t *m = qp ? table_find(hc, qp->qp_num) : NULL;
    if (!m) return 0;
    int st = atomic_load(&m->state);
    /* a shadow's event would look to NCCL like one of its own QPs' (its qp_context is NULL); a
     * primary the HA layer is moving off, or moved off, is no longer NCCL's concern */
    int own = m->sh == qp || (m->qp == qp && (st == HA_FAILING || st == HA_SHADOW));
    if (own) {
      atomic_fetch_add(&st_events, 1);
      AH_LOG_CAPPED(4, AH_LOG_INFO, "HA: async event %d of %s QP %u absorbed", (int)ev->event_type,
                    m->sh == qp ? "the shadow of" : "failed-over", m->qpn);
    }
    return own;
  }
  case IBV_EVENT_PORT_ERR: {
    int port = ev->element.port_num, n = 0, covered = 0;
    pthread_mutex_lock(&ha_mu);
    for (ha_qp_t *m = qps; m; m = m->next) {
      if (m->hc != hc || m->port != port) continue;
      n++;
      int st = atomic_load(&m->state), sh = atomic_load(&m->sh_state);
      covered += m->sh_port != port && (st == HA_SHADOW || ((st == HA_PEACE || st == HA_FAILING) && sh == SH_READY));
    }
    pthread_mutex_unlock(&ha_mu);
    if (n == 0 || covered != n) return 0;
    atomic_fetch_add(&st_events, 1);
    ah_log(AH_LOG_WARN, "HA: %s port %d is down; its %d queue pairs have shadows on another port, so NCCL is not "
           "told (PORT_ERR absorbed)", ctx->device ? ctx->device->name : "?", port, n);
    return 1;
  }
  default:
    return 0;
  }
}

/* ---- the background thread: shadows and failovers --------------------------------------------- */

#define HA_KEY 32 /* AH_COORD_DIR_KEY */
#define KIND_SHADOW 0x31534148u   /* "HAS1" */
#define KIND_FAIL 0x31464148u     /* "HAF1" */
#define KIND_RTS 0x31524148u      /* "HAR1" */
#define KIND_NOTE 0x314e4148u     /* "HAN1": a per-GID doorbell, "a peer of yours failed over" */
#define SHADOW_MAGIC 0x68615348u

typedef struct {
  uint32_t magic, qpn;
  uint8_t gid[16];
  uint32_t port, policy;
  uint32_t sport; /* the primary's UDP source port as the hook set it (0: NCCL's own) */
} shadow_info_t;

/* The directory key of one end's record: its GID, its QP number, the peer's QP number, the kind. */
static void dir_key(uint8_t key[HA_KEY], const uint8_t gid[16], uint32_t qpn, uint32_t peer_qpn,
                    uint32_t kind) {
  memset(key, 0, HA_KEY);
  memcpy(key, gid, 16);
  memcpy(key + 16, &qpn, 4);
  memcpy(key + 20, &peer_qpn, 4);
  memcpy(key + 24, &kind, 4);
}

/* The process's coordinator connection, handed over by shim_coord.c when the process joins a
 * communicator (NULL before, or when the process talks to several hubs). */
static _Atomic(ah_coord_t *) ha_coord;
void ah_shim_ha_set_coord(struct ah_coord *c) { atomic_store(&ha_coord, c); }
static ah_coord_t *coord(void) { return atomic_load(&ha_coord); }

#ifdef AH_COORD_DIR_KEY
static int dir_put(const uint8_t key[32], const void *val, size_t len) {
  ah_coord_t *c = coord();
  return c ? ah_coord_dir_put(c, key, val, len) : -1;
}
static int dir_get(const uint8_t key[32], void *val, size_t cap, double timeout_s) {
  ah_coord_t *c = coord();
  return c ? ah_coord_dir_get(c, key, val, cap, timeout_s) : -1;
}
#else /* a coordinator without the directory: no peer can be reached, so no shadows */
static int dir_put(const uint8_t key[32], const void *val, size_t len) {
  (void)key, (void)val, (void)len;
  AH_LOG_CAPPED(1, AH_LOG_WARN, "HA: this build's coordinator has no directory; no shadows are built");
  return -1;
}
static int dir_get(const uint8_t key[32], void *val, size_t cap, double timeout_s) {
  (void)key, (void)val, (void)cap, (void)timeout_s;
  return -1;
}
#endif

/* Creates the shadow of m, takes it to INIT on its port and publishes it. Returns 0, or -1 (m then
 * runs without a shadow). */
static int shadow_create(ha_qp_t *m) {
  ha_ctx_t *hc = m->hc;
  int policy = ah_env_settings()->ha;
  int port = m->port;
  union ibv_gid gid = m->sgid;
  int gid_index = m->rtr.ah_attr.grh.sgid_index;
  if (policy == 2) {
    port = m->port == 1 ? 2 : 1;
    if (hc->real.query_gid(m->qp->context, (uint8_t)port, gid_index, &gid) != 0) {
      AH_LOG_CAPPED(1, AH_LOG_WARN, "HA: AUTOHA_HA=port but %s has no port %d (or no GID %d on it): QPs "
                    "on it run without a shadow", m->qp->context->device->name, port, gid_index);
      return -1;
    }
  }
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = m->send_cq;
  ia.recv_cq = m->recv_cq;
  ia.cap = m->cap;
  ia.qp_type = IBV_QPT_RC;
  ia.qp_context = NULL; /* never NCCL's: its async events must not look like NCCL's QP's */
  struct ibv_qp *sh = hc->real.create_qp(m->pd, &ia);
  if (!sh) {
    AH_LOG_CAPPED(2, AH_LOG_WARN, "HA: cannot create a shadow for QP %u: %s", m->qpn, strerror(errno));
    return -1;
  }
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = (uint16_t)m->pkey_index;
  a.port_num = (uint8_t)port;
  a.qp_access_flags = (unsigned)m->access;
  if (hc->real.modify_qp(sh, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    AH_LOG_CAPPED(2, AH_LOG_WARN, "HA: cannot take the shadow of QP %u to INIT: %s", m->qpn, strerror(errno));
    hc->real.destroy_qp(sh);
    return -1;
  }
  pthread_mutex_lock(&ha_mu);
  m->sh = sh;
  m->sh_qpn = sh->qp_num;
  m->sh_gid = gid;
  m->sh_port = port;
  table_set(hc, sh->qp_num, m);
  pthread_mutex_unlock(&ha_mu);
  shadow_info_t info = {SHADOW_MAGIC, sh->qp_num, {0}, (uint32_t)port, (uint32_t)policy, m->hc->real.qp_sport(m->qp)};
  memcpy(info.gid, gid.raw, 16);
  uint8_t key[HA_KEY];
  dir_key(key, m->sgid.raw, m->qpn, m->rtr.dest_qp_num, KIND_SHADOW);
  if (dir_put(key, &info, sizeof info) != 0) return -1;
  return 0;
}

/* The fabric model AUTOHA_HA=path picks backup source ports with (AUTOHA_QP_TOPO), or NULL. */
static pthread_once_t topo_once = PTHREAD_ONCE_INIT;
static ah_path_topo_t *topo;
static void topo_load(void) {
  const char *path = ah_shim_qp_topo_path();
  if (!path[0]) return;
  if (ah_path_topo_load(path, &topo) != 0) topo = NULL; /* the loader said why */
}

/* The flow label of m's shadow: AUTOHA_HA=path with a topology picks a source port whose modelled
 * spine avoids both directions of the primary; otherwise the shadow's own QP numbers give
 * another port than the primary's (another ECMP hash, not a guaranteed other link). */
static uint32_t shadow_label(ha_qp_t *m, const shadow_info_t *peer) {
  uint32_t peer_sh_qpn = peer->qpn;
  /* the primaries' ports as they run: the hook's (AUTOHA_QP_SPORT) when it set one, else NCCL's */
  uint32_t plabel = m->rtr.ah_attr.grh.flow_label ? m->rtr.ah_attr.grh.flow_label
                                                  : ah_path_label_from_qpn(m->qpn, m->rtr.dest_qp_num);
  uint16_t psport = m->hc->real.qp_sport(m->qp);
  if (!psport) psport = ah_path_label_to_sport(plabel);
  uint16_t peer_sport = peer->sport ? (uint16_t)peer->sport
                                    : ah_path_label_to_sport(ah_path_label_from_qpn(m->rtr.dest_qp_num, m->qpn));
  uint32_t label = ah_path_label_from_qpn(m->sh_qpn, peer_sh_qpn);
  if (ah_env_settings()->ha == 1) {
    pthread_once(&topo_once, topo_load);
    uint16_t sport = ah_path_backup_sport(topo, m->sgid.raw, m->rtr.ah_attr.grh.dgid.raw, psport, peer_sport,
                                          ah_path_label_to_sport(label));
    if (sport) return ah_path_sport_to_label(sport);
  }
  if (ah_path_label_to_sport(label) == psport) label ^= 0x1;
  return label;
}

/* RTR and RTS of the shadow towards the peer's, then a heartbeat. Returns 0 or -1. */
static int shadow_connect(ha_qp_t *m, const shadow_info_t *peer) {
  ha_ctx_t *hc = m->hc;
  struct ibv_qp_attr a = m->rtr;
  a.qp_state = IBV_QPS_RTR;
  a.dest_qp_num = peer->qpn;
  a.rq_psn = 0;
  a.ah_attr.port_num = (uint8_t)m->sh_port;
  memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
  uint32_t label = shadow_label(m, peer);
  a.ah_attr.grh.flow_label = label;
  int rc = hc->real.modify_qp(m->sh, &a, m->rtr_mask);
  if (rc != 0) {
    AH_LOG_CAPPED(2, AH_LOG_WARN, "HA: cannot take the shadow of QP %u to RTR: %s", m->qpn, strerror(rc));
    return -1;
  }
  a = m->rts;
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  if ((rc = hc->real.modify_qp(m->sh, &a, m->rts_mask)) != 0) {
    AH_LOG_CAPPED(2, AH_LOG_WARN, "HA: cannot take the shadow of QP %u to RTS: %s", m->qpn, strerror(rc));
    return -1;
  }
  /* the heartbeat waits for the peer's shadow to be at RTR too: a request it holds longer than the
   * transport timeout would fail both shadows */
  uint8_t key[HA_KEY];
  uint32_t one = 1;
  dir_key(key, m->sgid.raw, m->qpn, m->rtr.dest_qp_num, KIND_RTS);
  if (dir_put(key, &one, sizeof one) != 0) return -1;
  atomic_store(&m->sh_state, SH_RTS);
  return 0;
}

/* Both shadows are connected: a signalled 0-byte write whose success makes the shadow usable. */
static int shadow_heartbeat(ha_qp_t *m) {
  ha_ctx_t *hc = m->hc;
  atomic_store(&m->sh_state, SH_CONNECTED);
  struct ibv_send_wr w, *bad;
  memset(&w, 0, sizeof w);
  w.wr_id = WRID_HB;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  if (hc->post_send(m->sh, &w, &bad) != 0) return -1;
  return 0;
}

/* Gives NCCL the failed completion it would have had without autoha (the failover could not be
 * completed). Call with m->mu held. */
static void give_error(ha_qp_t *m, const char *why) {
  atomic_store(&m->state, HA_BROKEN);
  m->fo_step = FO_NONE;
  ah_log(AH_LOG_WARN, "HA: QP %u cannot fail over (%s); NCCL gets the error", m->qpn, why);
  struct ibv_wc wc;
  memset(&wc, 0, sizeof wc);
  wc.qp_num = m->qpn;
  if (m->slog.head > m->slog.tail) {
    ah_ha_swr_t *e = ah_ha_slog_at(&m->slog, m->slog.tail);
    for (uint64_t s = m->slog.tail; s < m->slog.head; s++)
      if (m->slog.e[s & (m->slog.cap - 1)].send_flags & IBV_SEND_SIGNALED) {
        e = &m->slog.e[s & (m->slog.cap - 1)];
        break;
      }
    wc.wr_id = e->wr_id;
    wc.status = IBV_WC_RETRY_EXC_ERR;
    wc.opcode = wc_opcode(e->opcode);
    synth_push(m->hc, m->send_cq, &wc);
  } else if (m->rlog.head > m->rlog.tail) {
    wc.wr_id = m->rlog.e[m->rlog.tail & (m->rlog.cap - 1)].wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    synth_push(m->hc, m->recv_cq, &wc);
  }
}

/* The switch: synthesized completions for what the peer took, receives re-posted and the rest
 * replayed on the shadow, in order. Call with m->mu held. Returns 0 or -1 (give_error follows). */
static int replay(ha_qp_t *m, uint64_t peer_done, const char **why_p) {
  ha_ctx_t *hc = m->hc;
  uint64_t first;
  if (ah_ha_replay_plan(&m->slog, peer_done, &first) != 0) {
    *why_p = "the peer's count of delivered messages does not match this side's log";
    return -1;
  }
  unsigned long nsynth = 0, nreplay = 0;
  for (uint64_t s = m->slog.tail; s < first; s++) {
    ah_ha_swr_t *e = &m->slog.e[s & (m->slog.cap - 1)];
    if (!(e->send_flags & IBV_SEND_SIGNALED)) continue;
    struct ibv_wc wc;
    memset(&wc, 0, sizeof wc);
    wc.wr_id = e->wr_id;
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = wc_opcode(e->opcode);
    wc.byte_len = e->opcode == IBV_WR_RDMA_READ ? e->length : 0;
    wc.qp_num = m->qpn;
    synth_push(hc, m->send_cq, &wc);
    nsynth++;
  }
  if (first > m->slog.tail) ah_ha_slog_retire(&m->slog, first - 1);
  for (uint64_t s = m->rlog.tail; s < m->rlog.head; s++) {
    ah_ha_rwr_t *e = &m->rlog.e[s & (m->rlog.cap - 1)];
    struct ibv_sge sge = {e->addr, e->length, e->lkey};
    struct ibv_recv_wr w, *bad;
    memset(&w, 0, sizeof w);
    w.wr_id = e->wr_id;
    w.sg_list = e->num_sge ? &sge : NULL;
    w.num_sge = e->num_sge;
    if (hc->post_recv(m->sh, &w, &bad) != 0) {
      *why_p = "re-posting a receive on the shadow failed";
      return -1;
    }
  }
  for (uint64_t s = first; s < m->slog.head; s++) {
    ah_ha_swr_t *e = &m->slog.e[s & (m->slog.cap - 1)];
    struct ibv_sge sge = {e->addr, e->length, e->lkey};
    if (e->send_flags & IBV_SEND_INLINE) sge.addr = (uint64_t)(uintptr_t)e->inl;
    struct ibv_send_wr w, *bad;
    memset(&w, 0, sizeof w);
    w.wr_id = e->wr_id;
    w.opcode = (enum ibv_wr_opcode)e->opcode;
    w.send_flags = e->send_flags;
    w.imm_data = e->imm;
    w.wr.rdma.remote_addr = e->raddr;
    w.wr.rdma.rkey = e->rkey;
    w.sg_list = e->num_sge ? &sge : NULL;
    w.num_sge = e->num_sge ? 1 : 0;
    if (hc->post_send(m->sh, &w, &bad) != 0) {
      *why_p = "replaying a work request on the shadow failed";
      return -1;
    }
    nreplay++;
  }
  atomic_store_explicit(&m->state, HA_SHADOW, memory_order_release);
  m->fo_step = -1; /* on the shadow for good */
  atomic_fetch_add(&st_failovers, 1);
  atomic_fetch_add(&st_replayed, nreplay);
  atomic_fetch_add(&st_synth, nsynth);
  double stall_ms = (now_s() - m->t_fail) * 1e3;
  ah_log(AH_LOG_WARN, "HA: QP %u (%s port %d) failed over to its shadow QP %u (port %d) in %.1f ms: %lu work "
         "requests replayed, %lu completions the peer had confirmed handed to NCCL", m->qpn,
         m->qp->context->device->name, m->port, m->sh_qpn, m->sh_port, stall_ms, nreplay, nsynth);
  pthread_mutex_lock(&events_mu);
  if (nevents < AH_REPORT_HA_MAX) {
    ah_report_failover_t *f = &events[nevents++];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    f->time_s = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    f->qpn = m->qpn;
    snprintf(f->dev, sizeof f->dev, "%.31s", m->qp->context->device->name);
    f->port = m->port;
    f->shadow_port = m->sh_port;
    f->stall_ms = stall_ms;
    f->replayed = (uint32_t)nreplay;
    f->synthesized = (uint32_t)nsynth;
  }
  pthread_mutex_unlock(&events_mu);
  return 0;
}

/* ---- rebalance: C4P's dynamic re-plan after failovers (AUTOHA_HA=path) ----------------------- */

/* Every process that fails a primary over publishes the leaf–spine links its planned route crossed
 * ("HAL1", keyed by leaf and spine); every process that failed over reads the job's whole set a
 * few times in the seconds after (other processes' failovers come in), re-plans the job's flows
 * around it with ah_path_replan — the same topology, plan and links give every process the same
 * answer — and moves its own queue pairs that the re-plan moved, live, with
 * mlx5dv_modify_qp_udp_sport. Without the re-plan every flow of a dead link lands on its shadow's
 * pre-picked port, and several of them can share one surviving link. It needs every primary on its
 * planned port (AUTOHA_QP_SPORT=plan), or the model does not know where the flows run. */
#define KIND_LINK 0x314c4148u /* "HAL1" */
#define RB_LINKS_MAX 1024     /* leaf–spine links looked up per re-plan */
static const double rb_checks[] = {0.3, 1.0, 3.0}; /* seconds after a failover: re-plan then */

static pthread_once_t rb_once = PTHREAD_ONCE_INIT;
static ah_path_flow_t *rb_flows;
static ah_path_route_t *rb_plan;
static int rb_n; /* flows of the plan; 0: no rebalance */
static double rb_t0; /* the background thread's: the last failover, 0 none pending */
static int rb_step;
static _Atomic unsigned long st_rebal, st_rebal_moved;
static double st_rb_before, st_rb_share, st_rb_bound; /* under events_mu */

static void rb_load(void) {
  const ah_settings_t *env = ah_env_settings();
  pthread_once(&topo_once, topo_load);
  if (env->ha != 1 || !topo) return;
  if (!env->qp || env->qp_sport != AH_PATH_SPORT_PLAN) {
    ah_log(AH_LOG_INFO, "HA: no rebalance after failovers: it needs AUTOHA_QP_SPORT=plan (each primary on its "
           "planned port, so that the fabric model knows where every flow runs)");
    return;
  }
  int n = ah_path_topo_flows(topo, &rb_flows);
  if (n <= 0) return;
  rb_plan = calloc((size_t)n, sizeof *rb_plan);
  if (!rb_plan || ah_path_plan(topo, rb_flows, n, rb_plan) != 0) {
    ah_log(AH_LOG_WARN, "HA: out of memory for the rebalance's plan; failovers keep their shadows' ports");
    free(rb_plan);
    rb_plan = NULL;
    return;
  }
  rb_n = n;
}

/* m's flow in the plan, by the port the hook gave its primary; -1 when the plan does not have it
 * (the receiving end of a connection: the plan places senders). */
static int rb_flow_of(ha_qp_t *m) {
  if (!m->qp) return -1;
  return ah_ha_rebal_flow(topo, rb_flows, rb_plan, rb_n, m->sgid.raw, m->rtr.ah_attr.grh.dgid.raw,
                          m->hc->real.qp_sport(m->qp), NULL);
}

static void rb_link_key(uint8_t key[HA_KEY], int leaf, int spine) {
  static const uint8_t job[16] = {0};
  dir_key(key, job, (uint32_t)leaf, (uint32_t)spine, KIND_LINK);
}

/* m failed over: publish the links its primary's planned route crossed, and re-plan soon. Runs on
 * the background thread. */
static void rb_note_failover(ha_qp_t *m) {
  pthread_once(&rb_once, rb_load);
  if (!rb_n) return;
  if (m->flow == -2) m->flow = rb_flow_of(m);
  if (m->flow >= 0) {
    ah_path_link_state_t l[2];
    int n = ah_ha_rebal_suspects(topo, &rb_flows[m->flow], rb_plan[m->flow].sport, l);
    for (int i = 0; i < n; i++) {
      uint8_t key[HA_KEY];
      double down = 0;
      rb_link_key(key, l[i].leaf, l[i].spine);
      dir_put(key, &down, sizeof down);
    }
  }
  rb_t0 = now_s();
  rb_step = 0;
}

/* Re-plans around the job's known failed links and moves this process's queue pairs the re-plan
 * moved. Runs on the background thread, at the times of rb_checks after the last failover. */
static void rb_check(void) {
  if (!rb_n || rb_t0 == 0 || now_s() < rb_t0 + rb_checks[rb_step]) return;
  if (++rb_step == (int)(sizeof rb_checks / sizeof rb_checks[0])) rb_t0 = 0;
  int nleaf = 2 * topo->npairs, S = topo->nspines;
  static ah_path_link_state_t links[RB_LINKS_MAX];
  /* a link once read as down stays down for this process (nothing brings one back yet): a read
   * that times out on a loaded hub must not put a shadow back on a dead link */
  static double known[RB_LINKS_MAX];
  static int known_init;
  if (!known_init) {
    for (int i = 0; i < RB_LINKS_MAX; i++) known[i] = 1;
    known_init = 1;
  }
  int nl = 0;
  for (int l = 0; l < nleaf; l++)
    for (int sp = 0; sp < S && l * S + sp < RB_LINKS_MAX; sp++) {
      uint8_t key[HA_KEY];
      double frac = 1;
      rb_link_key(key, l, sp);
      if (dir_get(key, &frac, sizeof frac, 0.001) == (int)sizeof frac && frac < known[l * S + sp])
        known[l * S + sp] = frac;
      if (known[l * S + sp] < 1) links[nl++] = (ah_path_link_state_t){l, sp, known[l * S + sp]};
    }
  if (!nl) return;
  ah_path_route_t *routes = malloc((size_t)rb_n * sizeof *routes);
  unsigned char *moved = calloc((size_t)rb_n, 1);
  ah_ha_rebal_result_t res;
  if (!routes || !moved || ah_ha_rebal_plan(topo, rb_flows, rb_plan, rb_n, links, nl, routes, moved, &res) != 0) {
    AH_LOG_CAPPED(1, AH_LOG_WARN, "HA: out of memory for a rebalance; failovers keep their shadows' ports");
    free(routes);
    free(moved);
    return;
  }
  ha_qp_t *work[256];
  int nw = 0, nmoved = 0, nfail = 0;
  pthread_mutex_lock(&ha_mu);
  for (ha_qp_t *m = qps; m && nw < 256; m = m->next)
    if (atomic_load(&m->state) == HA_SHADOW && !m->busy) {
      m->busy = 1;
      work[nw++] = m;
    }
  pthread_mutex_unlock(&ha_mu);
  for (int i = 0; i < nw; i++) {
    ha_qp_t *m = work[i];
    if (m->flow == -2) m->flow = rb_flow_of(m);
    if (m->flow < 0 || !moved[m->flow] || m->rb_sport == routes[m->flow].sport) continue;
    pthread_mutex_lock(&m->mu); /* no post on the shadow while its port changes */
    int rc = atomic_load(&m->state) == HA_SHADOW ? m->hc->real.move_sport(m->sh, routes[m->flow].sport) : 0;
    int err = errno;
    pthread_mutex_unlock(&m->mu);
    if (rc == 0) {
      m->rb_sport = routes[m->flow].sport;
      nmoved++;
    } else {
      nfail++;
      AH_LOG_CAPPED(2, AH_LOG_WARN, "HA: rebalance: cannot move the shadow of QP %u to port %u (%s); it keeps its "
                    "own", m->qpn, routes[m->flow].sport, err == ENOSYS ? "libmlx5 has no mlx5dv_modify_qp_udp_sport" : strerror(err));
    }
  }
  pthread_mutex_lock(&ha_mu);
  for (int i = 0; i < nw; i++) work[i]->busy = 0;
  pthread_cond_broadcast(&idle_cv);
  pthread_mutex_unlock(&ha_mu);
  if (nmoved) {
    atomic_fetch_add(&st_rebal, 1);
    atomic_fetch_add(&st_rebal_moved, (unsigned long)nmoved);
    ah_log(AH_LOG_WARN, "HA: rebalance: %d leaf-spine links down, %d flows re-planned job-wide, %d of this process's "
           "queue pairs moved live; modelled slowest flow %.3f of a port with the plan's ports, %.3f re-planned, best "
           "possible %.3f (%.0f%%)", nl, res.moved, nmoved, res.before, res.share, res.bound,
           res.bound > 0 ? 100 * res.share / res.bound : 0.0);
  }
  pthread_mutex_lock(&events_mu);
  st_rb_before = res.before, st_rb_share = res.share, st_rb_bound = res.bound;
  pthread_mutex_unlock(&events_mu);
  (void)nfail;
  free(routes);
  free(moved);
}

/* One step of m's failover; returns 1 when it moved (run it again soon). */
static int failover_step(ha_qp_t *m) {
  ha_ctx_t *hc = m->hc;
  double t = now_s();
  const ah_settings_t *env = ah_env_settings();
  if (m->fo_step == FO_DRAIN && m->fo_deadline == 0) {
    m->fo_deadline = t + env->ha_failover_s;
    /* the primary to ERR (so the peer's count is final), then one marker per queue: when NCCL has
     * polled both, every completion of the primary has been seen */
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_ERR;
    hc->real.modify_qp(m->qp, &a, IBV_QP_STATE);
    struct ibv_send_wr w, *bad;
    memset(&w, 0, sizeof w);
    w.wr_id = WRID_DRAIN_SEND;
    w.opcode = IBV_WR_RDMA_WRITE;
    w.send_flags = IBV_SEND_SIGNALED;
    if (hc->post_send(m->qp, &w, &bad) != 0) atomic_store(&m->drained_send, 1);
    if (m->cap.max_recv_wr > 0) {
      struct ibv_recv_wr r, *rbad;
      memset(&r, 0, sizeof r);
      r.wr_id = WRID_DRAIN_RECV;
      if (hc->post_recv(m->qp, &r, &rbad) != 0) atomic_store(&m->drained_recv, 1);
    } else {
      atomic_store(&m->drained_recv, 1);
    }
    return 1;
  }
  if (m->fo_step == FO_DRAIN) {
    /* A queue with nothing outstanding (every signalled WR's completion polled: the logs retire on poll)
     * has nothing left for NCCL to see, and NCCL may not poll it at all — the receiving end whose
     * last message arrived waits, in NCCL's ring, for the sender whose failover waits for this
     * side's count. Its marker's flush comes later and is absorbed. */
    if (!atomic_load(&m->drained_send) || !atomic_load(&m->drained_recv)) drain_poll(m);
    pthread_mutex_lock(&m->mu);
    int idle_s = 1, idle_r = m->rlog.head == m->rlog.tail;
    for (uint64_t q = m->slog.tail; q < m->slog.head && idle_s; q++) /* unsignalled WRs complete silently */
      idle_s = !m->slog.sig_all && !(m->slog.e[q & (m->slog.cap - 1)].send_flags & IBV_SEND_SIGNALED);
    pthread_mutex_unlock(&m->mu);
    if ((!atomic_load(&m->drained_send) && !idle_s) || (!atomic_load(&m->drained_recv) && !idle_r)) {
      if (t > m->fo_deadline) {
        pthread_mutex_lock(&m->mu);
        give_error(m, atomic_load(&m->drained_recv) ? "the primary's send completions were not drained in time"
                      : atomic_load(&m->drained_send) ? "the primary's receive completions were not drained in time"
                                                      : "the primary's completions were not drained in time");
        pthread_mutex_unlock(&m->mu);
        return 1;
      }
      return 0;
    }
    pthread_mutex_lock(&m->mu);
    uint64_t done = m->rlog.done;
    pthread_mutex_unlock(&m->mu);
    uint8_t key[HA_KEY];
    dir_key(key, m->sgid.raw, m->qpn, m->rtr.dest_qp_num, KIND_FAIL);
    if (dir_put(key, &done, sizeof done) != 0) {
      pthread_mutex_lock(&m->mu);
      give_error(m, "the coordinator hub is gone");
      pthread_mutex_unlock(&m->mu);
      return 1;
    }
    /* ring the peer's doorbell: an RC responder whose requester lost the path sees no error of its
     * own (on sim/ the provider's peer-failure shortcut flushes it anyway) */
    uint64_t nonce = (uint64_t)(now_s() * 1e9) ^ ((uint64_t)m->qpn << 32) ^ (uint64_t)getpid();
    dir_key(key, m->rtr.ah_attr.grh.dgid.raw, 0, 0, KIND_NOTE);
    dir_put(key, &nonce, sizeof nonce);
    m->fo_step = FO_EXCHANGE;
    return 1;
  }
  if (m->fo_step == FO_EXCHANGE) {
    uint8_t key[HA_KEY];
    dir_key(key, m->rtr.ah_attr.grh.dgid.raw, m->rtr.dest_qp_num, m->qpn, KIND_FAIL);
    uint64_t peer_done = 0;
    int n = dir_get(key, &peer_done, sizeof peer_done, 0.002);
    const char *why = NULL;
    pthread_mutex_lock(&m->mu);
    int switched = 0;
    if (n == (int)sizeof peer_done) {
      if (replay(m, peer_done, &why) != 0) give_error(m, why);
      else switched = 1;
    } else if (now_s() > m->fo_deadline) {
      give_error(m, "the peer did not publish what it received within AUTOHA_HA_FAILOVER_S");
    }
    int moved = n == (int)sizeof peer_done;
    pthread_mutex_unlock(&m->mu);
    if (switched) rb_note_failover(m);
    return moved;
  }
  return 0;
}

/* One step of m's shadow setup; returns 1 when it moved. */
static int shadow_step(ha_qp_t *m) {
  int s = atomic_load(&m->sh_state);
  if (s == SH_WANTED) {
    if (!coord()) return 0; /* the hub is known once the process joined a communicator */
    if (m->sh_deadline == 0) m->sh_deadline = now_s() + ah_env_settings()->ha_connect_s;
    if (shadow_create(m) != 0) {
      atomic_store(&m->sh_state, SH_DEAD);
      return 1;
    }
    atomic_store(&m->sh_state, SH_PUBLISHED);
    return 1;
  }
  if (s == SH_RTS) {
    uint8_t key[HA_KEY];
    uint32_t one = 0;
    dir_key(key, m->rtr.ah_attr.grh.dgid.raw, m->rtr.dest_qp_num, m->qpn, KIND_RTS);
    if (dir_get(key, &one, sizeof one, 0.002) == (int)sizeof one) {
      if (shadow_heartbeat(m) != 0) atomic_store(&m->sh_state, SH_DEAD);
      return 1;
    }
    if (now_s() > m->sh_deadline) {
      ah_log(AH_LOG_INFO, "HA: QP %u: the peer's shadow did not connect within AUTOHA_HA_CONNECT_S; it runs "
             "without one", m->qpn);
      atomic_store(&m->sh_state, SH_DEAD);
      return 1;
    }
    return 0;
  }
  if (s == SH_PUBLISHED) {
    uint8_t key[HA_KEY];
    dir_key(key, m->rtr.ah_attr.grh.dgid.raw, m->rtr.dest_qp_num, m->qpn, KIND_SHADOW);
    shadow_info_t peer;
    int n = dir_get(key, &peer, sizeof peer, 0.002);
    if (n == (int)sizeof peer && peer.magic == SHADOW_MAGIC) {
      if (shadow_connect(m, &peer) != 0) atomic_store(&m->sh_state, SH_DEAD);
      return 1;
    }
    if (now_s() > m->sh_deadline) {
      ah_log(AH_LOG_INFO, "HA: QP %u: the peer published no shadow within AUTOHA_HA_CONNECT_S (no autoha or "
             "AUTOHA_HA=off there?); it runs without one", m->qpn);
      atomic_store(&m->sh_state, SH_DEAD);
      return 1;
    }
  }
  return 0;
}

/* The doorbells of this process's GIDs: when one rang, every primary on that GID whose peer
 * published a failover is moved to ERR, so that its flushed work requests start this side's
 * failover on NCCL's thread like any path error. Runs every 50 ms. */
static void notice_check(void) {
  static double next;
  static struct {
    uint8_t gid[16];
    uint64_t nonce;
  } seen[16];
  static int nseen;
  double t = now_s();
  if (t < next) return;
  next = t + 0.05;
  uint8_t gids[16][16];
  int ngid = 0;
  pthread_mutex_lock(&ha_mu);
  for (ha_qp_t *m = qps; m; m = m->next) {
    if (atomic_load(&m->state) != HA_PEACE || atomic_load(&m->sh_state) != SH_READY) continue;
    int k = 0;
    while (k < ngid && memcmp(gids[k], m->sgid.raw, 16)) k++;
    if (k == ngid && ngid < 16) memcpy(gids[ngid++], m->sgid.raw, 16);
  }
  pthread_mutex_unlock(&ha_mu);
  for (int g = 0; g < ngid; g++) {
    uint8_t key[HA_KEY];
    uint64_t nonce = 0;
    dir_key(key, gids[g], 0, 0, KIND_NOTE);
    if (dir_get(key, &nonce, sizeof nonce, 0.001) != (int)sizeof nonce) continue;
    int k = 0;
    while (k < nseen && memcmp(seen[k].gid, gids[g], 16)) k++;
    if (k < nseen && seen[k].nonce == nonce) continue;
    if (k == nseen) {
      if (nseen == 16) continue;
      memcpy(seen[nseen++].gid, gids[g], 16);
    }
    seen[k].nonce = nonce;
    /* someone rang: look for published failovers of our primaries' peers */
    ha_qp_t *look[256];
    int nl = 0;
    pthread_mutex_lock(&ha_mu);
    for (ha_qp_t *m = qps; m && nl < 256; m = m->next)
      if (atomic_load(&m->state) == HA_PEACE && !memcmp(m->sgid.raw, gids[g], 16) && !m->busy) {
        m->busy = 1;
        look[nl++] = m;
      }
    pthread_mutex_unlock(&ha_mu);
    for (int i = 0; i < nl; i++) {
      ha_qp_t *m = look[i];
      uint64_t peer_done;
      dir_key(key, m->rtr.ah_attr.grh.dgid.raw, m->rtr.dest_qp_num, m->qpn, KIND_FAIL);
      if (atomic_load(&m->state) == HA_PEACE &&
          dir_get(key, &peer_done, sizeof peer_done, 0.001) == (int)sizeof peer_done) {
        struct ibv_qp_attr a;
        memset(&a, 0, sizeof a);
        a.qp_state = IBV_QPS_ERR;
        ah_log(AH_LOG_INFO, "HA: QP %u: its peer failed over; moving the primary to the error state", m->qpn);
        m->hc->real.modify_qp(m->qp, &a, IBV_QP_STATE);
        /* and start this side's failover now: a primary with nothing outstanding produces no
         * flushed completion, and NCCL may post nothing more on it until the peer's failover
         * (which waits for this side's count) has finished */
        pthread_mutex_lock(&m->mu);
        if (atomic_load(&m->state) == HA_PEACE && !m->unprotected && atomic_load(&m->sh_state) == SH_READY) {
          m->t_fail = now_s();
          m->fo_step = FO_DRAIN;
          m->fo_deadline = 0;
          atomic_store(&m->state, HA_FAILING);
          ah_log(AH_LOG_INFO, "HA: QP %u: failing over to its shadow QP %u with its peer", m->qpn, m->sh_qpn);
        } else {
          ah_log(AH_LOG_INFO, "HA: QP %u: cannot follow its peer's failover (state %d, shadow %d, unprotected %d)",
                 m->qpn, atomic_load(&m->state), atomic_load(&m->sh_state), m->unprotected);
        }
        pthread_mutex_unlock(&m->mu);
      }
    }
    pthread_mutex_lock(&ha_mu);
    for (int i = 0; i < nl; i++) look[i]->busy = 0;
    pthread_cond_broadcast(&idle_cv);
    pthread_mutex_unlock(&ha_mu);
  }
}

static void *ha_thread(void *arg) {
  (void)arg;
  for (;;) {
    notice_check();
    rb_check();
    /* pick the QPs with work, marking them busy so that a destroy leaves them to us */
    ha_qp_t *work[256];
    int nw = 0;
    pthread_mutex_lock(&ha_mu);
    for (ha_qp_t *m = qps; m && nw < 256; m = m->next) {
      int s = atomic_load(&m->sh_state);
      if (s == SH_WANTED || s == SH_PUBLISHED || s == SH_RTS || (atomic_load(&m->state) == HA_FAILING && m->fo_step > 0)) {
        m->busy = 1;
        work[nw++] = m;
      }
    }
    if (!nw) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 50 * 1000000L;
      if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      pthread_cond_timedwait(&ha_cv, &ha_mu, &ts);
      pthread_mutex_unlock(&ha_mu);
      continue;
    }
    pthread_mutex_unlock(&ha_mu);
    int moved = 0, failing = 0;
    for (int i = 0; i < nw; i++) failing |= atomic_load(&work[i]->state) == HA_FAILING;
    for (int i = 0; i < nw; i++) {
      ha_qp_t *m = work[i];
      if (atomic_load(&m->state) == HA_FAILING && m->fo_step > 0) moved |= failover_step(m);
      else moved |= shadow_step(m);
    }
    pthread_mutex_lock(&ha_mu);
    for (int i = 0; i < nw; i++) work[i]->busy = 0;
    pthread_cond_broadcast(&idle_cv);
    if (!moved) { /* 1 ms between steps of a failover (the stall NCCL sees), 10 ms otherwise */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += failing ? 1000000L : 10000000L;
      if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      pthread_cond_timedwait(&ha_cv, &ha_mu, &ts);
    }
    pthread_mutex_unlock(&ha_mu);
  }
  return NULL;
}

void ah_shim_ha_report(ah_report_ha_t *h) {
  memset(h, 0, sizeof *h);
  if (!ah_shim_ha_on()) return;
  snprintf(h->policy, sizeof h->policy, "%s", ah_env_settings()->ha == 1 ? "path" : "port");
  h->shadows = atomic_load(&st_shadows);
  h->failovers = atomic_load(&st_failovers);
  h->replayed = atomic_load(&st_replayed);
  h->synthesized = atomic_load(&st_synth);
  h->rebalances = atomic_load(&st_rebal);
  h->rebalanced = atomic_load(&st_rebal_moved);
  pthread_mutex_lock(&events_mu);
  h->nfail = nevents;
  if (h->rebalances) h->rb_before = st_rb_before, h->rb_share = st_rb_share, h->rb_bound = st_rb_bound;
  memcpy(h->fail, events, sizeof events[0] * (size_t)nevents);
  pthread_mutex_unlock(&events_mu);
}
