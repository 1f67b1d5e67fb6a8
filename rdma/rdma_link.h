/* rdma_link.h: per-connection timing (rdma/rdma_link_*.c, docs/diagnosis.md "Slow links") as the
 * verbs hook drives it, and what its two files share: a queue pair's identity and its ring of
 * signalled sends in flight, the contexts whose post_send and poll_cq it wraps, and the lock-free
 * look-ups the data path makes.
 *
 * Key choice: the data path only counts and stamps. A post reads the clock once (the time-stamp
 * counter) and puts (time, bytes) of each signalled work request into the queue pair's ring; a
 * completion takes the oldest entry (RC completes a queue pair's signalled sends in posting order)
 * and adds its bytes, its wait and the queue pair's busy time to three counters. Everything else —
 * identity, windows, the hub — runs once a second on the shim's health thread (rdma_link_qp.c). */
#ifndef AH_RDMA_LINK_H
#define AH_RDMA_LINK_H

#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stdint.h>

#include "rdma_ha.h"

#pragma GCC visibility push(hidden)

/* A signalled send in flight: when it was posted (ticks) and the bytes it and the unsignalled work
 * requests posted before it since the last signalled one carry. */
typedef struct {
  uint64_t t, bytes;
} lk_ent_t;

typedef struct lk_ctx lk_ctx_t;

typedef struct lk_qp {
  struct ibv_qp *qp; /* NCCL's */
  lk_ctx_t *lc;
  uint32_t qpn;
  int timed;        /* a sending end (created without receive work requests): its sends are timed;
                     * a receiving end is in the post map under a marked key, not in the table */
  uint32_t sig_all; /* IBV_SEND_SIGNALED when every send is signalled (sq_sig_all), else 0 */
  /* the poster's */
  uint32_t mask; /* ring entries - 1 */
  lk_ent_t *ring;
  _Atomic uint64_t head; /* signalled sends posted */
  uint64_t unsig;        /* bytes of unsignalled sends posted since the last signalled one */
  /* the poller's (read by the health thread without a lock: a window off by a work request
   * changes nothing) */
  _Atomic uint64_t tail;                   /* signalled sends completed */
  uint64_t last;                           /* ticks of the latest completion */
  _Atomic uint64_t bytes, busy, wait, wrs; /* totals: bytes, busy ticks, post-to-completion ticks */
  /* identity, on the control path (under ah_shim_lk_mu) */
  int port, have_rtr, announced, gpu;
  uint32_t rqpn;
  uint8_t lgid[16], rgid[16];
  uint16_t sport;
  uint32_t label; /* the flow label NCCL gave it at RTR (0: derived from the QP numbers) */
  char dev[16];
  uint64_t s_bytes, s_busy, s_wait, s_wrs; /* the totals at the last window's end */
  double dead_t;                           /* destroyed at (freed two seconds later) */
  struct lk_qp *next;
} lk_qp_t;

#define LK_SLOTS 4096 /* QP numbers per context table */
#define LK_MAX_CTX 32

struct lk_ctx {
  struct ibv_context *ctx;
  int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
  int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
  _Atomic uint32_t key[LK_SLOTS];
  _Atomic(lk_qp_t *) val[LK_SLOTS];
};

extern lk_ctx_t *ah_shim_lk_ctxs[LK_MAX_CTX];
extern _Atomic int ah_shim_lk_nctx;

/* The process-wide map from NCCL's ibv_qp to its timing state, for the post wrapper: the slot is
 * bits 4-16 of the address, then up to LK_PROBES next ones; a receiving end's key has its low bit
 * set; a removed entry keeps its key with a NULL value. Written under ah_shim_lk_mu. */
#define LK_QPMAP 8192
#define LK_PROBES 16
typedef struct {
  _Atomic(struct ibv_qp *) qp;
  _Atomic(lk_qp_t *) m;
} lk_qpmap_t;
extern lk_qpmap_t ah_shim_lk_qpmap[LK_QPMAP + LK_PROBES];

/* The clock the data path reads: the time-stamp counter where there is one (a few cycles), else
 * CLOCK_MONOTONIC in nanoseconds. rdma_link_qp.c turns ticks into seconds. */
uint64_t ah_shim_lk_ticks(void);

/* Wraps ctx's post_send and poll_cq (once per context) and returns its table, or NULL (no room,
 * out of memory). Call under ah_shim_lk_mu. */
lk_ctx_t *ah_shim_lk_ctx_get(struct ibv_context *ctx);
/* Maps qp (and its QP number on lc) to m; m NULL removes them. Returns 0, or -1 when a table is
 * full (its posts or completions are then not timed). Call under ah_shim_lk_mu. */
int ah_shim_lk_map(lk_ctx_t *lc, struct ibv_qp *qp, uint32_t qpn, lk_qp_t *m);

#pragma GCC visibility pop

/* ---- what the verbs hook (rdma_verbs.c) calls ---- */

/* 1 when per-connection timing is on (AUTOHA_HEALTH and AUTOHA_SLOW_LINK_PCT > 0). Cheap after
 * the first call. */
int ah_shim_link_on(void);
/* NCCL created an RC queue pair (init after the provider wrote its capacities back; receiver: the
 * caller asked for receive work requests, as only a connection's receiving end does in net_ib):
 * its context is wrapped and a sending end is timed from its first post. */
void ah_shim_link_created(struct ibv_qp *qp, const struct ibv_qp_init_attr *init, int receiver,
                          const ah_shim_ha_verbs_t *real);
/* NCCL's ibv_modify_qp(qp, attr, mask) succeeded: the port at INIT, the peer and the local GID at
 * RTR are kept (the queue pair's identity for the hub). */
void ah_shim_link_modified(struct ibv_qp *qp, const struct ibv_qp_attr *attr, int mask);
/* NCCL is about to destroy qp: it is no longer timed. */
void ah_shim_link_destroying(struct ibv_qp *qp);
/* NCCL's async thread is handed ev of ctx: a PORT_ERR of a port some of this process's queue pairs
 * are on is told to the hub with their GPUs (NIC_PORT, ah_coord_nic.h) once — a repeat before the
 * port's PORT_ACTIVE is not — and so is that port's PORT_ACTIVE after it; a DEVICE_FATAL tells
 * each port of the NIC that carries such queue pairs down; every other event is left alone.
 * Note that it never changes ev and never waits on the network: the report is queued under the
 * coordinator client's lock (held elsewhere only for memory work) and sent by a non-blocking send
 * when the socket takes it, else by the client's I/O thread (ah_coord_nic_port). It can wait for
 * that lock, for malloc and for its log line's write to stderr, as any log line can. */
void ah_shim_link_port_event(struct ibv_context *ctx, const struct ibv_async_event *ev);

#endif
