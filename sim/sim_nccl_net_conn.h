/* A communicator's inter-node connections (struct sim_net) and the calls between the two files of
 * the transport: sim_nccl_net_connect.c plans, creates, connects and frees them, sim_nccl_net.c
 * carries each chunk over them and counts completions. Other files see only sim_nccl_net.h. */
#ifndef SIM_NCCL_NET_CONN_H
#define SIM_NCCL_NET_CONN_H

#include "sim_ib_verbs.h"
#include "sim_nccl_net.h"

#define NET_MAX_QPS 8  /* NCCL_IB_QPS_PER_CONNECTION bound */
#define NET_PREPOST 16 /* receives kept posted per QP */
#define NET_TRAILER 64 /* checksums after the data in a receive buffer */
#define NET_WIN 64     /* message numbers tracked past the lowest one not yet received */

typedef struct {
  int peer, send, ch;
  sim_ib_dev_t *dev;
  int devi;
  struct ibv_qp *qp[NET_MAX_QPS];
  uint32_t peer_qpn[NET_MAX_QPS];
  union ibv_gid peer_gid;
  uint16_t peer_lid;     /* InfiniBand: the peer port's LID, the QPs' dlid */
  struct ibv_mr *mr;     /* sender: its staging slot; receiver: its receive buffer */
  struct ibv_mr *sum_mr; /* sender: the checksums it writes */
  uint64_t *sums;
  char *buf; /* receiver's buffer: slot_bytes of data, then the checksums */
  uint64_t peer_addr;
  uint32_t peer_rkey;
  uint64_t msgs;
  int pending; /* completions this step still waits for */
  size_t piece[NET_MAX_QPS];
  /* accounting (both sides): the message number of this step's piece per QP, and how many were
   * numbered; receiver: lowest number not yet received and a bitmap of those received past it;
   * sender: whether this step's WR still awaits its completion */
  uint32_t step_seq[NET_MAX_QPS], nseq[NET_MAX_QPS];
  uint32_t rnext[NET_MAX_QPS];
  uint64_t rwin[NET_MAX_QPS];
  int outstanding[NET_MAX_QPS];
  double mark_wall, last_virt; /* the last completion (or the step's start), for stalls */
  int have_virt;
} net_conn_t;

/* One message of the handshake, per connection, in the plan's order. */
typedef struct {
  uint32_t ch, send, nqps;
  uint32_t qpn[NET_MAX_QPS];
  uint8_t gid[16];
  uint64_t addr;
  uint32_t rkey, lid; /* lid: the port's, as NCCL's ncclIbDevInfo carries it */
} net_info_t;

struct sim_net {
  int nconn, nqps, split;
  size_t carry; /* NCCLSIM_NET_CARRY_KB: bytes of a chunk that cross (0: all of it) */
  net_conn_t *conn;
  struct ibv_cq *cq[64];           /* per device index, shared by the communicator's connections */
  struct ibv_comp_channel *ch[64]; /* their completion channels (NULL: the provider has none) */
  int *peers, npeers;              /* ranks I exchange handshakes with */
  int *got;                        /* handshake received from peers[i] */
  int *sent;
  int connected;
  int step_active;
  size_t step_bytes;
  uint64_t flows_epoch; /* the provider's epoch when the flows were last published */
  int flows_moved;      /* a QP had failed then: its traffic's carriers may still change */
  double step_virt;     /* the modelled time of the step's chunk, microseconds */
  double progress_wall; /* wall time of the step's start or its last completion */
  double lost_ms;       /* a step with no completion for this long has lost one */
  unsigned async_gen;   /* sim_ib_async_gen() when the async events were last checked */
  struct ncclsimNetStats st;
};

/* What every QP this library creates has as qp_context: the provider tells them apart from QPs a
 * failover layer adds to the same contexts (net_ib points qp_context at its own stats block). */
extern const char sim_net_qp_tag __attribute__((visibility("hidden")));
/* Reads NCCLSIM_NET_INJECT once (test-only faults of the completion stream, sim_nccl_net.c). */
void sim_net_inject_init(void);
/* Posts `count` receives on a QP. Returns -1 when the provider refuses one. */
int sim_net_post_recvs(struct ibv_qp *qp, int count);

#endif
