/* rdma_ha_int.h: what the HA layer's files share (rdma/rdma_ha_*.c, docs/ha.md): a managed queue
 * pair (its primary, its shadow, their logs and states), a wrapped context, the lock and the lists
 * of the layer, and the lock-free look-ups the data path makes for every work request.
 *
 * Key choice: shadows share NCCL's CQs, so NCCL's own completion channel wakes for replayed work and
 * no extra CQ needs polling; completions of the shadow are translated (qp_num, wr_id), and the HA
 * layer's own work requests (heartbeats, drain markers) are recognised by their wr_id and never
 * reach NCCL. */
#ifndef AH_RDMA_HA_INT_H
#define AH_RDMA_HA_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "ah_coord.h"
#include "ah_ha.h"
#include "ah_ha_beat.h"
#include "ah_log.h"
#include "ah_path.h"
#include "ah_report.h"
#include "rdma_ha.h"

/* Everything declared here is the .so's own: direct (not GOT) access from the data path. */
#pragma GCC visibility push(hidden)

_Static_assert((int)IBV_WR_RDMA_WRITE == (int)AH_HA_WR_RDMA_WRITE &&
                   (int)IBV_WR_RDMA_WRITE_WITH_IMM == (int)AH_HA_WR_RDMA_WRITE_WITH_IMM &&
                   (int)IBV_WR_SEND == (int)AH_HA_WR_SEND &&
                   (int)IBV_WR_SEND_WITH_IMM == (int)AH_HA_WR_SEND_WITH_IMM &&
                   (int)IBV_WR_RDMA_READ == (int)AH_HA_WR_RDMA_READ,
               "ah_ha.h mirrors verbs.h's opcodes");

/* The wr_ids of the HA layer's own work requests (NCCL's are request indexes, slots or UINT64_MAX):
 * a heartbeat on a shadow, and the markers that drain a failed primary. NCCL's WRs keep their own
 * wr_id: RC completes sends, and receives, in posting order, so each completion names its log
 * entry by its place. */
#define WRID_HB 0x6175746f68614842ull         /* "autohaHB" */
#define WRID_DRAIN_SEND 0x6175746f68614453ull /* "autohaDS" */
#define WRID_DRAIN_RECV 0x6175746f68614452ull /* "autohaDR" */

enum { HA_PEACE, HA_FAILING, HA_SHADOW, HA_BROKEN }; /* the primary's data path */
enum {
  SH_NONE,
  SH_WANTED,
  SH_PUBLISHED,
  SH_RTS,
  SH_CONNECTED,
  SH_READY,
  SH_DEAD
};                                                /* its standby */
enum { FO_NONE, FO_DRAIN, FO_WAIT, FO_EXCHANGE }; /* failover steps */

#define HA_GEN_MAX 16     /* shadows built per queue pair over its life (failovers and rebuilds) */
#define HA_REBUILD_S 0.25 /* a dead standby is rebuilt after this long, doubling per failure */
/* A failover whose peer has published no record of its own rings the peer's doorbell again after
 * this long, doubling up to HA_RING_MAX_S: a peer's look-up of this side's record can miss it (the
 * hub's answer slower than the look-up's wait, on a loaded machine), and that peer's carrier may
 * show no error of its own for seconds. */
#define HA_RING_S 0.1
#define HA_RING_MAX_S 0.4

/* A standby: the shadow queue pair being built or ready for the next failover. Generation g pairs
 * with the peer's generation g (the directory's keys carry it); the first is generation 1. */
typedef struct {
  struct ibv_qp *qp;
  uint32_t qpn;
  uint32_t gen;
  _Atomic int state; /* SH_* */
  union ibv_gid gid;
  int port;
  double deadline;   /* connect by then (AUTOHA_HA_CONNECT_S) */
  int hb_out;        /* a heartbeat is outstanding (under the QP's lock) */
  int hb_polled;     /* its CQs were polled for it once it was due (before a miss is counted) */
  double hb_next;    /* the next periodic heartbeat is due (AUTOHA_HA_HEARTBEAT_MS) */
  double hb_ok;      /* the last heartbeat that succeeded */
  ah_ha_beat_t beat; /* its last heartbeat rounds, hit or missed (AUTOHA_HA_HEARTBEAT_MISS) */
  double rebuild_at; /* SH_DEAD: rebuild then (0: never, the peer has no autoha) */
  uint32_t want_gen; /* SH_DEAD: the peer is at this generation; rebuild at it */
  uint16_t sport;    /* its UDP source port (from its flow label) */
  double dead_t;     /* SH_DEAD: since then */
  double ready_t;    /* SH_READY: since then */
} ha_stby_t;

#define HA_SLOTS 4096 /* QP numbers per context table (primaries and shadows) */
#define HA_MAX_CTX 32
#define HA_SYNTH_MAX 4096

typedef struct ha_ctx ha_ctx_t;

/* A queue pair's completion-time measurement (rdma_ha_degrade.c): the background thread samples its
 * signalled work requests outstanding every 100 ms; over a window, mean outstanding x window /
 * completions is the mean time a work request waits for its completion (Little's law). */
typedef struct {
  double t0;         /* the window's start (0: not started) */
  uint64_t done0;    /* signalled completions retired at its start */
  double occ;        /* sum of the outstanding counts sampled */
  int n;             /* samples */
  double lat, lat_t; /* the last window's estimate (s; -1: idle) and its end */
  double judged_t;   /* the lat_t ah_shim_ha_degrade_check last judged */
  double res;        /* the estimate's grain: what one sample of one outstanding adds (s) */
  int slow;          /* windows in a row it was slow against its peers */
  int reported;      /* its links were published as degraded */
  int clear;         /* outside the plan: the rebalance moves it off the bad links */
} ha_dg_t;

typedef struct ha_qp {
  /* qp: NCCL's; sh: the shadow NCCL's traffic is on (set at the first failover, replaced at each
   * later one; NULL before), which the data path's common case reads with sh_qpn */
  struct ibv_qp *qp, *sh;
  ha_ctx_t *hc;
  uint32_t qpn, sh_qpn;
  _Atomic int state;
  pthread_mutex_t mu;
  ah_ha_slog_t slog;
  ah_ha_rlog_t rlog;
  int unprotected; /* a WR the log cannot replay (several SGEs, atomics): no failover */
  int gpu; /* the device current when NCCL created it (its rank's; -1: unknown), for ha_log */
  /* what NCCL set up, for the shadow */
  struct ibv_pd *pd;
  struct ibv_cq *send_cq, *recv_cq;
  struct ibv_qp_cap cap;
  int port, access, pkey_index;
  struct ibv_qp_attr rtr, rts;
  int rtr_mask, rts_mask;
  union ibv_gid sgid;
  int have_sgid;
  /* the shadow in use (sh) and the standby */
  int sh_port;
  uint16_t sh_sport; /* the shadow in use's UDP source port (the rebalance's: rb_sport) */
  uint32_t sh_gen;   /* the generation of the QP carrying the traffic (0: the primary) */
  ha_stby_t sb;
  int peer_seen;    /* the peer published a shadow once: it runs autoha */
  uint32_t gave_up; /* the newest standby generation given up (dead), published as "HAG1" */
  int sb_fails;     /* standbys dead in a row (the rebuild's backoff) */
  int sb_dead_port; /* the port and source port of the last standby that died */
  uint16_t sb_dead_sport;
  double health_next;              /* the next heartbeat and soft-timeout look */
  struct ibv_qp *gens[HA_GEN_MAX]; /* every shadow built, destroyed with NCCL's QP */
  int ngens;
  /* failover */
  int fo_step;
  double t_fail, fo_deadline;
  _Atomic int drained_send, drained_recv;
  int nfail;          /* failovers done */
  uint64_t fo_done;   /* this end's count, published by the failover in progress */
  double fo_look;     /* the failover's next look for a peer ahead */
  double fo_ring;     /* the failover's next look for the peer's record, ringing again if absent */
  double fo_ring_gap; /* and the gap after that one (HA_RING_S, doubling up to HA_RING_MAX_S) */
  /* the soft timeout: the send log's tail as last seen, since when it was outstanding (0: not
   * outstanding), and whether the CQ was polled once the timeout passed */
  uint64_t st_tail;
  double st_since;
  int st_polled;
  /* bookkeeping */
  int busy;          /* the background thread works on it (under ah_shim_ha_mu) */
  int flow;          /* its flow in the rebalance's plan: -2 not looked up, -1 none */
  uint16_t rb_sport; /* the port the rebalance moved its shadow to (0: not moved) */
  struct ha_nic_qp
      *nq; /* AUTOHA_HA=nic: its shadow's NIC and key spaces (rdma_ha_nic.c); else NULL */
  uint16_t rb_psport; /* the port the rebalance moved its primary to (0: not moved) */
  double fb_done,
      fb_look;    /* failback: the last kick; the next look at the peer's given-up generation */
  int fo_planned; /* the failover in progress moves traffic back (AUTOHA_HA_FAILBACK), no fault */
  /* error classes (docs/ha.md, "Detection"): the status that started the failover in progress,
   * and the one whose failover put the traffic on the carrier (0: a path error or none) */
  int fo_status, sh_status;
  ha_dg_t dg; /* its completion time (degraded links; rdma_ha_degrade.c) */
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
  /* the HA poll wrapper of this context (one per context slot, rdma_ha_data.c): what a poll_cq
   * chained in front of it calls next (ops.poll_cq is the wrapper unless something is) */
  int (*ha_poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
  ah_shim_ha_verbs_t real;
  _Atomic uint32_t key[HA_SLOTS];
  _Atomic(ha_qp_t *) val[HA_SLOTS];
  /* The one word NCCL's poll reads (one atomic add that also returns it): the low bits count
   * NCCL's polls running without drain_mu, and two flags say "not the common case" — HA_POLL_DRAIN:
   * the background thread's drain poll (ah_shim_ha_drain_poll) is on, so every poll of this context runs
   * under drain_mu and its polls and NCCL's never interleave on a CQ (the drain waits the count out
   * before it polls); HA_POLL_SYNTH: completions are queued in synth[] for NCCL's next polls. */
  _Atomic uint32_t pollw;
  pthread_mutex_t synth_mu;
  _Atomic int nsynth;
  ha_synth_t synth[HA_SYNTH_MAX];
  pthread_mutex_t drain_mu;
};

#define HA_POLL_DRAIN 0x80000000u
#define HA_POLL_SYNTH 0x40000000u
#define HA_POLL_COUNT 0x3fffffffu

extern pthread_mutex_t ah_shim_ha_mu;     /* contexts, the QP list, the tables' writers */
extern pthread_cond_t ah_shim_ha_cv;      /* wakes the background thread */
extern pthread_cond_t ah_shim_ha_idle_cv; /* the thread let go of its QPs (busy 0) */
extern ha_ctx_t *ah_shim_ha_ctxs[HA_MAX_CTX];
extern _Atomic int ah_shim_ha_nctx;
extern ha_qp_t *ah_shim_ha_qps; /* every managed QP, under ah_shim_ha_mu */

/* what the report's "ha" section shows */
extern _Atomic unsigned long ah_shim_ha_st_shadows, ah_shim_ha_st_failovers, ah_shim_ha_st_replayed,
    ah_shim_ha_st_synth;
extern pthread_mutex_t ah_shim_ha_events_mu;
extern ah_report_failover_t ah_shim_ha_events[AH_REPORT_HA_MAX];
extern int ah_shim_ha_nevents;

static inline double ha_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the per-context table of managed QP numbers ------------------------------------------- */

static inline uint32_t slot_of(uint32_t qpn) { return (qpn * 2654435761u) >> 20 & (HA_SLOTS - 1); }

/* table_find past its first slot i. */
ha_qp_t *ah_shim_ha_table_probe(ha_ctx_t *hc, uint32_t qpn, uint32_t i);

/* The managed QP that owns qpn on this context (as primary or shadow), or NULL. Lock-free: the
 * data path calls it for every completion, so the first slot is tried inline. */
static inline ha_qp_t *table_find(ha_ctx_t *hc, uint32_t qpn) {
  uint32_t i = slot_of(qpn);
  if (__builtin_expect(atomic_load_explicit(&hc->key[i], memory_order_acquire) == qpn, 1)) {
    ha_qp_t *m = atomic_load_explicit(&hc->val[i], memory_order_acquire);
    if (__builtin_expect(m != NULL, 1)) return m;
  }
  return ah_shim_ha_table_probe(hc, qpn, i);
}

/* ---- the process-wide map from NCCL's ibv_qp to its managed QP ------------------------------ */

/* Keyed by the ibv_qp pointer NCCL posts to (its qp_context is NCCL's, so the managed QP cannot be
 * hung on it): the post wrappers find their QP with a mask and, usually, one compare, without the
 * context. The slot is bits 4-16 of the address (the provider's QPs are separate heap blocks), then
 * up to HA_QPMAP_PROBES next ones. A QP's first post finds it through its context's table and puts
 * it here (rdma_ha_data.c); a key stays once set, so readers need no lock: a destroyed QP's entry
 * keeps its managed QP, which is never in peace again (its posts take the slow path, and a new QP
 * at the same address replaces it on its first post). A QP that finds no slot keeps taking its
 * context's table. */
#define HA_QPMAP 8192
#define HA_QPMAP_PROBES 16
typedef struct {
  _Atomic(struct ibv_qp *) qp;
  _Atomic(ha_qp_t *) m;
} ha_qpmap_t;
extern ha_qpmap_t
    ah_shim_ha_qpmap[HA_QPMAP + HA_QPMAP_PROBES]; /* the probes run past the end, not around */
/* What the map answers for a QP it does not hold: never in peace (HA_BROKEN), so the post wrappers
 * test one state for "not in the map", "destroyed" and "not in peace". On no list; never written. */
extern ha_qp_t ah_shim_ha_qp_none;

static inline ha_qpmap_t *qpmap_slot(const struct ibv_qp *qp) {
  return (ha_qpmap_t *)((char *)ah_shim_ha_qpmap +
                        ((uintptr_t)qp & (uintptr_t)((HA_QPMAP - 1) * sizeof(ha_qpmap_t))));
}

/* qpmap_find past its first slot. */
ha_qp_t *ah_shim_ha_qpmap_probe(const struct ibv_qp *qp);

/* The managed primary qp is, or &ah_shim_ha_qp_none (not managed, destroyed, or not in the map). */
static inline ha_qp_t *qpmap_find(const struct ibv_qp *qp) {
  ha_qpmap_t *e = qpmap_slot(qp);
  if (__builtin_expect(atomic_load_explicit(&e->qp, memory_order_acquire) == qp, 1))
    return atomic_load_explicit(&e->m, memory_order_acquire);
  return ah_shim_ha_qpmap_probe(qp);
}

/* The HA context of ctx, or NULL. The thread's last answer is tried first (a proxy thread works on
 * one context at a time); HA contexts are never freed, so a stale one is only a miss. */
static inline ha_ctx_t *ctx_of(struct ibv_context *ctx) {
  /* initial-exec: no __tls_get_addr call on the data path (the shim is preloaded; one pointer fits
   * glibc's static TLS reserve even if it is not) */
  static _Thread_local ha_ctx_t *last __attribute__((tls_model("initial-exec")));
  if (__builtin_expect(last && last->ctx == ctx, 1)) return last;
  int n = atomic_load_explicit(&ah_shim_ha_nctx, memory_order_acquire);
  for (int i = 0; i < n; i++)
    if (ah_shim_ha_ctxs[i]->ctx == ctx) return last = ah_shim_ha_ctxs[i];
  return NULL;
}

/* Maps qpn to m (m NULL: removes it). Call under ah_shim_ha_mu. Returns 0, or -1 when the table is full. */
int ah_shim_ha_table_set(ha_ctx_t *hc, uint32_t qpn, ha_qp_t *m);
/* The HA context of ctx, wrapping its data-path ops on first use, or NULL. Call under ah_shim_ha_mu. */
ha_ctx_t *ah_shim_ha_ctx_get(struct ibv_context *ctx, const ah_shim_ha_verbs_t *real);
/* Queues a completion for NCCL's next poll of cq (behind the ones queued before). */
void ah_shim_ha_synth_push(ha_ctx_t *hc, struct ibv_cq *cq, const struct ibv_wc *wc);
/* Polls m's CQs on the background thread, for a drain NCCL may never poll for. Returns how many. */
int ah_shim_ha_drain_poll(ha_qp_t *m);

/* the directory (rdma_ha_dir.c) */
#define HA_KEY 32               /* AH_COORD_DIR_KEY */
#define KIND_SHADOW 0x31534148u /* "HAS1" */
#define KIND_FAIL 0x31464148u   /* "HAF1" */
#define KIND_RTS 0x31524148u    /* "HAR1" */
#define KIND_NOTE 0x314e4148u   /* "HAN1": a per-GID doorbell, "a peer of yours failed over" */
#define KIND_LINK 0x314c4148u   /* "HAL1": a leaf-spine link a failed primary crossed */
#define KIND_GEN 0x31474148u    /* "HAG1": the newest standby generation a QP gave up (dead) */
#define KIND_DEGRADE                                                                               \
  0x31444148u /* "HAD1": a process's completion-time sample (rdma_ha_degrade.c) */
/* Record kind `kind` of generation gen (1, the first shadow, keeps the kind as it is). */
static inline uint32_t ha_kind_gen(uint32_t kind, uint32_t gen) {
  return gen <= 1 ? kind : (kind & 0x00ffffffu) | (uint32_t)((0x31u + gen - 1) & 0xffu) << 24;
}
void ah_shim_ha_dir_key(uint8_t key[HA_KEY], const uint8_t gid[16], uint32_t qpn, uint32_t peer_qpn,
                        uint32_t kind);
ah_coord_t *ah_shim_ha_dir_coord(void);
int ah_shim_ha_dir_put(const uint8_t key[HA_KEY], const void *val, size_t len);
/* Looks key up, waiting up to timeout_s for a put (HA_LOOK: none, the hub's answer as it is now).
 * Returns the value's length, AH_COORD_DIR_ABSENT when the hub said it was not stored, or
 * AH_COORD_DIR_UNANSWERED (no hub, or no answer within the coordinator's slack): only the hub's
 * word is a miss, so a caller that acts on a miss tells the two apart. */
#define HA_LOOK 0.0
int ah_shim_ha_dir_get(const uint8_t key[HA_KEY], void *val, size_t cap, double timeout_s);
/* Looks n keys up at once, in one round trip (ah_coord_dir_get_many): lens[i] as ah_shim_ha_dir_get's. */
void ah_shim_ha_dir_get_many(const uint8_t (*keys)[HA_KEY], int n, void *vals, size_t cap,
                             int *lens, double timeout_s);

/* The fabric model AUTOHA_HA=path picks backup source ports with (AUTOHA_QP_TOPO), or NULL. */
ah_path_topo_t *ah_shim_ha_topo(void);

/* The QP carrying m's traffic: the shadow in use, else NCCL's. */
static inline struct ibv_qp *ha_carrier(const ha_qp_t *m) { return m->sh ? m->sh : m->qp; }
/* 1 when a path error of m's carrier may be held for a failover: a standby is ready, or being
 * built, or will be rebuilt. Call with m->mu held. */
int ah_shim_ha_can_hold(ha_qp_t *m);
/* Starts m's failover from its carrier (state HA_FAILING, step FO_DRAIN). Call with m->mu held;
 * the background thread takes it up (wake it when not on it). */
void ah_shim_ha_failover_start(ha_qp_t *m, const char *why);
/* A heartbeat's completion on m's standby. Call with m->mu held. */
void ah_shim_ha_heartbeat_done(ha_qp_t *m, const struct ibv_wc *wc);
/* Posts a heartbeat on m's ready standby. Returns 0 or -1 (the standby is then dead). Call with
 * m->mu held. */
int ah_shim_ha_heartbeat_post(ha_qp_t *m);
/* m's peer builds a newer standby generation (pg; 0: read it from the directory): m's standby is
 * given up and rebuilt at it at once. Returns 1 when that changed anything. Call without m->mu. */
int ah_shim_ha_peer_ahead(ha_qp_t *m, uint32_t pg);
/* Marks m's standby dead (why logged), to be rebuilt when its peer has autoha. Call with m->mu held. */
void ah_shim_ha_standby_dead(ha_qp_t *m, const char *why);
/* The state (IBV_PORT_*) of port `port` of hc's device, read with ibv_query_port of the libibverbs
 * NCCL resolved its verbs from; -1 when it cannot be read (no such verb: said once at info; the
 * query failed). Control path only. */
int ah_shim_ha_port_state(ha_ctx_t *hc, int port);
/* AUTOHA_HA=nic (rdma_ha_nic.c): a shadow on the backup NIC of m's device. Prepare opens that NIC
 * (once), mirrors NCCL's memory there, and gives the protection domain, CQs, port and GID the
 * shadow is created with, setting m->nq; 0 or -1 (m then runs without a shadow). Add records the
 * created shadow's QP number qpn (0, -1 when full): every standby generation of m is on the same
 * backup NIC and keeps m->nq; forget drops them all and the peer's cached keys. */
int ah_shim_ha_nic_shadow_prepare(ha_qp_t *m, struct ibv_pd **pd_p, struct ibv_cq **scq_p,
                                  struct ibv_cq **rcq_p, int *port_p, union ibv_gid *gid_p);
int ah_shim_ha_nic_shadow_add(ha_qp_t *m, uint32_t qpn);
void ah_shim_ha_nic_shadow_forget(ha_qp_t *m);
/* Posts on qp, one of m's shadows: NCCL's chain as it is, or on a nic shadow (qp on the backup NIC)
 * one WR at a time with its local keys and remote key translated. Returns what the provider
 * returned (EINVAL, *bad at the WR, when a key has no mirror). */
int ah_shim_ha_sh_post_send(ha_qp_t *m, struct ibv_qp *qp, struct ibv_send_wr *wr,
                            struct ibv_send_wr **bad);
int ah_shim_ha_sh_post_recv(ha_qp_t *m, struct ibv_qp *qp, struct ibv_recv_wr *wr,
                            struct ibv_recv_wr **bad);
/* 1 when qp, one of m's shadows, is on m's backup NIC (AUTOHA_HA=nic). */
static inline int ha_on_nic(const ha_qp_t *m, const struct ibv_qp *qp) {
  return m->nq && qp && qp->context != m->qp->context;
}
/* The name of m's shadows' NIC, or NULL when m's shadows are on its own NIC. */
const char *ah_shim_ha_nic_name(const ha_qp_t *m);
/* Reads the next async event of the i-th open backup NIC without blocking, naming the NIC in
 * *name_p: 1 with *ev (hand it to ah_shim_ha_nic_event_ack), 0 when none is pending (or its events cannot
 * be read), -1 when there is no i-th NIC. The background thread reads them (ah_shim_ha_nic_events). */
int ah_shim_ha_nic_event(int i, struct ibv_async_event *ev, const char **name_p);
void ah_shim_ha_nic_event_ack(struct ibv_async_event *ev);
void ah_shim_ha_nic_events(void);
/* One NCCL CQ and the backup NIC's CQ that stands in for it (rdma_ha_nic.c creates them). */
typedef struct {
  struct ibv_cq *nccl, *bk;
  pthread_mutex_t mu; /* one poller at a time: what it takes is queued in the CQ's order */
} ha_nic_cq_t;
/* Calls fn(c, arg) on each backup CQ standing behind nccl (every backup CQ when nccl is NULL). */
void ah_shim_ha_nic_cq_each(struct ibv_cq *nccl, void (*fn)(ha_nic_cq_t *, void *), void *arg);
/* The managed queue pair whose nic shadow, on bk's NIC, has QP number qpn, or NULL. */
ha_qp_t *ah_shim_ha_nic_shadow_of(struct ibv_cq *bk, uint32_t qpn);
/* The completion side (rdma_ha_nic_cq.c). m's work moves to its nic shadow: NCCL's poll of m's
 * context polls the backup CQs from now on; call before the first post on the shadow (nothing for
 * other shadows). The background thread's poll of every backup CQ (heartbeats; NCCL's work too). */
void ah_shim_ha_nic_go_live(ha_qp_t *m);
void ah_shim_ha_nic_poll_all(void);
/* A completion of one of m's shadows taken from a backup NIC's CQ, translated as NCCL's poll translates a
 * shadow's (rdma_ha_data.c). Returns 1 to hand it to NCCL, 0 to absorb it. */
int ah_shim_ha_wc_from_shadow(ha_qp_t *m, struct ibv_wc *wc);

/* the background thread's steps; each returns 1 when it moved (run again soon) */
void *ah_shim_ha_thread(void *arg);
int ah_shim_ha_shadow_step(ha_qp_t *m);
int ah_shim_ha_failover_step(ha_qp_t *m);
/* Heartbeats, dead standbys' rebuilds and the soft timeout of m; returns 1 when it acted. */
int ah_shim_ha_health_step(ha_qp_t *m);
/* 1 when ah_shim_ha_health_step has something to do for m now. Call under ah_shim_ha_mu. */
int ah_shim_ha_health_due(ha_qp_t *m, double now);
void ah_shim_ha_notice_check(void);
/* Failback (rdma_ha_failback.c), on the background thread, before m's health step: when m's
 * standby is not ready after standbys died and its port was seen down and then active again, it is
 * rebuilt now, one generation ahead, so that the peer follows; a dead standby waiting for its
 * rebuild is rebuilt now when the peer gave up a newer generation (looked at every 0.25 s). Call
 * without m->mu. */
void ah_shim_ha_failback_step(ha_qp_t *m);
/* the rebalance (rdma_ha_rebal.c): m failed over; re-plan when due; the report's figures */
void ah_shim_ha_rebal_note(ha_qp_t *m);
void ah_shim_ha_rebal_check(void);
void ah_shim_ha_rebal_report(ah_report_ha_t *h);
/* 1 when the rebalance has a plan to re-plan (AUTOHA_HA=path, AUTOHA_QP_SPORT=plan, a job line). */
int ah_shim_ha_rebal_on(void);
/* The spine m's primary crosses now in the rebalance's model, or -1 (not in the plan, or no spine). */
int ah_shim_ha_rebal_spine(ha_qp_t *m);
/* m's flow in the rebalance's plan (looked up once), or -1 (no plan, or the plan has no such flow). */
int ah_shim_ha_rebal_flow(ha_qp_t *m);
/* m's completions are persistently slower than its peers': publish the links of its planned route
 * as degraded and re-plan soon. Runs on the background thread. */
void ah_shim_ha_rebal_degraded(ha_qp_t *m);
/* the degraded-link detection (rdma_ha_degrade.c): samples every queue pair every 100 ms and
 * compares their completion times (the background thread's loop) */
void ah_shim_ha_degrade_check(void);

#pragma GCC visibility pop

#endif
