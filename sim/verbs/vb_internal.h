/* vb_internal.h: the objects of sim/'s libibverbs stand-in and the calls between its files.
 *
 * Every verbs object embeds rdma-core's struct first (built against the real verbs.h, so the
 * layouts are rdma-core's) and adds the provider's state after it. File order, one direction only:
 * vb_env (settings) -> vb_net (the fabric's view) -> vb_ring (shared rings, doorbells) -> vb_device,
 * vb_mr, vb_cq (with async events) -> vb_qp_attr (pure mask rules) -> vb_qp, vb_post (verbs on
 * QPs) -> vb_resp (responder) -> vb_engine (the NIC thread, requester side) -> vb_context (opening
 * a context, which starts its engine). */
#ifndef VB_INTERNAL_H
#define VB_INTERNAL_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* uthash in its non-fatal mode: an add that cannot allocate is refused (the item's table pointer
 * stays NULL) instead of exit(), since this provider lives inside the job's processes. sim/ takes
 * uthash as the package gives it, not through autoha's own wrapper (sim/ stands under autoha). */
#define HASH_NONFATAL_OOM 1
#include <uthash.h>
#define VB_HASH_ADDED(item) ((item)->hh.tbl != NULL)
#include "../fabric/sim_fabric.h"

#define VB_API __attribute__((visibility("default")))

/* ---- settings (vb_env.c) ------------------------------------------------------------------- */
typedef struct {
  int node;             /* NCCLSIM_NODE */
  double timeout_scale; /* NCCLSIM_VERBS_TIMEOUT_SCALE */
  size_t ring_bytes;    /* NCCLSIM_VERBS_RING_KB */
  double pace_gbps;     /* NCCLSIM_VERBS_PACE_GBPS: 0, degraded paths are not slowed */
  char prefix[80];      /* shm names: NCCLSIM_SHM_PREFIX, else "ncclsim-<uid>-" */
  char pci[256];        /* NCCLSIM_VERBS_PCI: "" for the default layout (vb_sysfs.c) */
  char ports[256];      /* NCCLSIM_VERBS_PORTS: "" for the fabric's port count on every NIC */
} vb_settings_t;
const vb_settings_t *vb_settings(void);

/* ---- the NICs' place in the PCI tree, as sysfs shows it (vb_sysfs.c) ------------------------- */
#define VB_SYSFS_NICS 64
#define VB_SYSFS_PATH 256 /* IBV_SYSFS_PATH_MAX */
/* Builds (or finds) the sysfs-shaped tree of a node of n NICs laid out by NCCLSIM_VERBS_PCI and
 * sets paths[k] to NIC k's ibdev_path in it. Returns 0, or -1 (logged; paths unchanged from k on). */
int vb_sysfs_paths(int n, char paths[][VB_SYSFS_PATH]);
void vb_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double vb_now(void); /* CLOCK_MONOTONIC seconds */

/* ---- the fabric as the provider sees it (vb_net.c) ----------------------------------------- */
int vb_net_init(char *err, size_t errlen); /* idempotent; -1 when the topology is invalid */
int vb_net_nics(void);
int vb_net_ports(void);
/* The ports NIC `nic` shows through verbs: vb_net_ports(), or 1 where NCCLSIM_VERBS_PORTS says so
 * (a node of mixed NICs: the fabric cables a second port the NIC does not show). */
int vb_net_nic_ports(int nic);
int vb_net_is_ib(void);
double vb_net_port_gbps(void);
void vb_net_gid(int node, int nic, int port, uint8_t gid[16]);
int vb_net_gid_ep(const uint8_t gid[16], sim_fabric_ep_t *ep_p);
/* InfiniBand: a port's LID and its plane's SM's (the fabric's subnet manager), the port a LID
 * names (-1: none) */
uint16_t vb_net_lid(int node, int nic, int port);
uint16_t vb_net_sm_lid(int node, int nic, int port);
int vb_net_lid_ep(uint16_t lid, sim_fabric_ep_t *ep_p);
int vb_net_port_up(int node, int nic, int port);
/* Whether the fabric's schedule failed the NIC whole (nicfatal) by now. */
int vb_net_nic_fatal(int node, int nic);
/* The IBV_WC_* status the fault schedule injected on verbs port `port` of a NIC by now (wcerr=,
 * docs/sim-fabric.md), with its time in *at_p; 0 when none (a bonded port: either member's). */
int vb_net_port_wcerr(int node, int nic, int port, double *at_p);
uint16_t vb_net_sport(uint32_t flow_label, uint32_t lqpn, uint32_t rqpn);
int vb_net_path_up(const sim_fabric_flow_t *flow);
/* The lowest capacity fraction of the links the flow crosses now (1: all at line rate, 0: a link
 * down or no route): NCCLSIM_VERBS_PACE_GBPS's pacing (vb_engine.c). */
double vb_net_path_frac(const sim_fabric_flow_t *flow);

/* ---- shared rings and doorbells (vb_ring.c) ------------------------------------------------ */
/* A packet as it sits in a QP's inbound ring (64-byte header, payload after it). */
enum { VB_PKT_PAD = 0, VB_PKT_REQ, VB_PKT_ACK, VB_PKT_NAK, VB_PKT_READ_RESP };
enum { VB_NAK_RNR = 1, VB_NAK_ACCESS, VB_NAK_INV_REQ, VB_NAK_REM_OP };
typedef struct {
  uint32_t type, len;     /* packet type, payload bytes */
  uint32_t msn;           /* message sequence number (per direction, from 0 at RTR/RTS) */
  uint32_t op;            /* REQ: IBV_WR_* opcode; NAK: VB_NAK_* */
  uint64_t offset, total; /* segment's place in its message */
  uint64_t raddr;
  uint32_t rkey, imm; /* imm as posted (network order) */
  uint32_t last, pad[3];
} vb_pkt_t;
_Static_assert(sizeof(vb_pkt_t) == 64, "packet header is one cache line");

typedef struct {
  uint32_t magic;
  int32_t owner_pid;
  uint32_t qpn;
  _Atomic uint32_t owner_state;  /* the owning QP's ibv_qp_state, VB_RING_GONE once destroyed */
  _Atomic uint32_t peer_fatal;   /* set by the peer: "I went to ERR, flush" (the sim's shortcut) */
  _Atomic uint32_t prod_waiting; /* the producer found the ring full */
  _Atomic uint32_t drops;        /* requests the owner dropped (not ready, out of sequence) */
  char doorbell[96];             /* shm name of the owning engine's doorbell */
  _Atomic uint32_t
      owner_path_down; /* the owner's own path back to us is down (its ACKs are held) */
  char pad0[60];
  _Atomic uint64_t head; /* producer position (bytes, monotonic) */
  char pad1[56];
  _Atomic uint64_t tail; /* consumer position */
  char pad2[56];
  uint64_t size; /* data bytes after the header */
} vb_ring_hdr_t;
#define VB_RING_MAGIC 0x76627231u
#define VB_RING_GONE 0xffu
#define VB_RING_HDR 512

typedef struct {
  _Atomic uint32_t seq;
  _Atomic uint32_t waiters;
} vb_bell_t;

typedef struct {
  vb_ring_hdr_t *h;
  uint8_t *data;
  size_t map_len;
  char name[128];
} vb_ring_t;

void vb_ring_name(char *buf, size_t len, int node, int nic, uint32_t qpn);
int vb_ring_create(vb_ring_t *r, int node, int nic, uint32_t qpn, const char *bell_name);
int vb_ring_open(vb_ring_t *r, int node, int nic, uint32_t qpn);
void vb_ring_close(vb_ring_t *r, int unlink_it);
/* Producer: room for a packet with `len` payload bytes? Reserves nothing. */
int vb_ring_can_put(vb_ring_t *r, uint32_t len);
void vb_ring_put(vb_ring_t *r, const vb_pkt_t *p, const void *payload, const void *payload2,
                 uint32_t len1);
/* Consumer: the next packet or NULL; vb_ring_pop releases it. */
vb_pkt_t *vb_ring_peek(vb_ring_t *r);
void vb_ring_pop(vb_ring_t *r);

vb_bell_t *vb_bell_create(const char *name);
vb_bell_t *vb_bell_open(const char *name);
void vb_bell_close(vb_bell_t *b, const char *name_to_unlink);
void vb_bell_ring(vb_bell_t *b);
void vb_bell_wait(vb_bell_t *b, uint32_t seen, double timeout_s);

/* ---- objects ----------------------------------------------------------------------------- */
#define VB_DEV_MAGIC 0x7662646576ull

/* ibv_device first, then the zeroed room where rdma-core keeps verbs_device's ops pointer (which
 * rdma-core's mlx5dv_is_supported reads), then ours. */
typedef struct {
  struct ibv_device dev;
  uint8_t rdma_core_room[256];
  uint64_t magic;
  int node, nic;
} vb_dev_t;

typedef struct vb_qp vb_qp_t;
typedef struct vb_mr vb_mr_t;

typedef struct vb_ctx {
  struct verbs_context vctx; /* ends with struct ibv_context */
  vb_dev_t *dev;
  pthread_mutex_t lock; /* qps and mrs tables; held by the engine for a pass */
  vb_qp_t *qps;         /* by qpn */
  vb_mr_t *mrs;         /* by rkey */
  uint32_t next_key;
  int async_wr;   /* write end of the async-event pipe (read end: async_fd) */
  int port_up[2]; /* last port state seen, for PORT_ERR / PORT_ACTIVE */
  int fatal_sent; /* DEVICE_FATAL pushed (nicfatal) */
  char bell_name[96];
  vb_bell_t *bell;
  pthread_t engine;
  _Atomic int stop;
} vb_ctx_t;

/* Calls fn on each open context of the process until it returns non-zero; returns that value (0
 * when none did). fn runs under the registry's lock: it may take a context's lock, not open or close
 * one. */
int vb_ctx_each(int (*fn)(vb_ctx_t *, void *), void *arg);
/* Enters an opened context in the registry, and takes a closing one out (vb_context.c). */
void vb_ctx_register(vb_ctx_t *ctx);
void vb_ctx_unregister(vb_ctx_t *ctx);
/* The provider's device behind `d`, or NULL when it is not one of ours. */
vb_dev_t *vb_dev(struct ibv_device *d);
/* The extended query_port op of a context (struct verbs_context's query_port). */
int vb_query_port_ext(struct ibv_context *c, uint8_t port, struct ibv_port_attr *out, size_t len);

static inline vb_ctx_t *vb_ctx(struct ibv_context *c) {
  return (vb_ctx_t *)((char *)c - offsetof(vb_ctx_t, vctx.context));
}

struct vb_mr {
  struct ibv_mr mr;
  uint64_t iova; /* what remote peers address */
  int access;
  UT_hash_handle hh;
};

/* Looks a key up in the context's table (caller holds ctx->lock): the host address for
 * [va, va+len) if the MR covers it with `access` (lkey when is_local), else NULL. */
void *vb_mr_find(vb_ctx_t *ctx, uint32_t key, int is_local, uint64_t va, uint64_t len, int access);

typedef struct {
  struct ibv_cq cq;
  pthread_mutex_t lock;
  struct ibv_wc *wc;
  int cap, head, count;
  int armed, solicited_only;
} vb_cq_t;

/* Adds a completion (caller may hold a QP lock; takes the CQ's). */
void vb_cq_push(vb_cq_t *cq, const struct ibv_wc *wc);
void vb_async_push(vb_ctx_t *ctx, enum ibv_event_type type, void *element);
/* Sets the context's CQ ops (poll_cq, req_notify_cq); vb_context.c sets the rest. */
void vb_cq_install_ops(vb_ctx_t *ctx);
/* Counts changes that can move traffic between this process's flows: a QP changing state or
 * getting a new source port (ncclsimVerbsEpoch reads it). */
void vb_epoch_bump(void);

/* Send and receive work queue entries, copied from the caller's WRs at post time. */
#define VB_MAX_SGE 16
typedef struct {
  uint64_t wr_id;
  int opcode; /* IBV_WR_* */
  int signaled;
  uint32_t imm;
  uint64_t raddr;
  uint32_t rkey;
  int nsge;
  struct ibv_sge sge[VB_MAX_SGE];
  uint64_t len;
  uint8_t *inl; /* inline copy (NULL when not inline) */
  uint32_t msn;
} vb_swqe_t;

typedef struct {
  uint64_t wr_id;
  int nsge;
  struct ibv_sge sge[VB_MAX_SGE];
  uint64_t cap;
} vb_rwqe_t;

struct vb_qp {
  struct ibv_qp qp;
  vb_ctx_t *ctx;
  UT_hash_handle hh;
  pthread_mutex_t lock;
  struct ibv_qp_cap cap;
  int sq_sig_all;
  struct ibv_qp_attr attr; /* what modify_qp set; attr.qp_state mirrors qp.state */
  uint16_t sport_override;
  /* send queue: [sq_head, sq_tx) transmitted and waiting for the ACK, [sq_tx, sq_tail) not yet */
  vb_swqe_t *sq;
  uint32_t sq_head, sq_tx, sq_tail; /* free-running indexes; slot = index % max_send_wr */
  uint64_t tx_off;                  /* bytes of sq[sq_tx] sent */
  uint32_t next_msn;                /* msn of the next posted WR */
  double rnr_until;                 /* no transmission before this (RNR wait) */
  int rnr_count;
  double stall_since; /* path down / peer gone since (0: not stalled) */
  uint64_t rd_off;    /* bytes of the oldest READ's response received */
  /* receive queue */
  vb_rwqe_t *rq;
  uint32_t rq_head, rq_tail;
  /* responder */
  uint32_t epsn;        /* msn expected next */
  int nak_pending;      /* sent a NAK; dropping until epsn restarts at offset 0 */
  int rx_applied;       /* the head packet's effects are done, its reply is not */
  uint64_t rd_resp_off; /* READ being answered: bytes sent */
  uint64_t rx_off;      /* bytes of the current inbound message placed */
  int comm_est_sent;
  /* rings */
  vb_ring_t in;  /* our inbound ring (we consume) */
  vb_ring_t out; /* the peer's inbound ring (we produce) */
  vb_bell_t *peer_bell;
  char peer_bell_name[96];
  sim_fabric_flow_t flow;
  int flow_ok; /* dgid named a fabric endpoint */
  _Atomic uint64_t tx_bytes;
  int err_flushed;
  /* per engine pass */
  int path_up_now;          /* the flow's path is up (checked once a pass) */
  double path_frac_now;     /* its slowest link's fraction (NCCLSIM_VERBS_PACE_GBPS only) */
  double pace_until;        /* the message being sent leaves no earlier (0: not held) */
  int bell_dirty;           /* put packets into the peer's ring: ring its bell */
  double last_progress;     /* last time an ACK/response arrived or a packet left */
  int uc_drop;              /* UC: dropping the current message (no receive posted) */
  uint32_t peer_drops_seen; /* the peer's drop count when we last went back */
  int peer_ready_now;       /* the peer QP is in RTR or RTS */
  /* injected completion errors (wcerr=): the time of the last one this QP took or that struck
   * before it existed (-1: not looked yet); later ones strike it */
  double wcerr_at;
};

int vb_qp_transition_ok(enum ibv_qp_type type, enum ibv_qp_state cur, enum ibv_qp_state next,
                        int mask);
/* Moves a QP to ERR (caller holds qp->lock): flushes both queues, tells the peer. */
void vb_qp_to_error(vb_qp_t *qp, int tell_peer);
void vb_qp_flush(vb_qp_t *qp);
void vb_qp_complete_send(vb_qp_t *qp, vb_swqe_t *w, enum ibv_wc_status st, int force);
int vb_qp_connect_rings(vb_qp_t *qp);

/* Engine (vb_engine.c) and responder (vb_resp.c); both called with ctx->lock and qp->lock held. */
int vb_engine_start(vb_ctx_t *ctx);
void vb_engine_stop(vb_ctx_t *ctx);
/* Wakes the context's engine (its doorbell): posted work or a state change wants a pass. */
static inline void vb_engine_kick(vb_ctx_t *ctx) { vb_bell_ring(ctx->bell); }
/* The responder's handling of one request packet: 1 when consumed, 0 when its reply cannot leave
 * yet (ring full, path down; the packet stays and is resumed, never applied twice). */
int vb_resp_request(vb_qp_t *qp, const vb_pkt_t *p);
/* Puts a packet into the peer's ring if the path is up and there is room: 1 sent, 0 not now
 * (vb_qp.c). */
int vb_qp_emit(vb_qp_t *qp, const vb_pkt_t *p, const void *payload, const void *payload2,
               uint32_t len1);
int vb_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int vb_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
#define VB_SEG_MAX (32u << 10)

#endif
