/* sim_ib_verbs.h: libibverbs as sim/'s NCCL stand-in reaches it — the way NCCL's net_ib does:
 * dlopen("libibverbs.so.1") and dlvsym(…, "IBVERBS_1.1") for the control path, the inline
 * ibv_post_send/ibv_post_recv/ibv_poll_cq of verbs.h (through each context's ops) for the data
 * path. Going through dlvsym is the point: a preloaded autoha sees these lookups exactly as it sees
 * real NCCL's. One table per process; devices are opened once and shared by every communicator. */
#ifndef SIM_IB_VERBS_H
#define SIM_IB_VERBS_H

#include "sim_verbs_table.h"

/* A device NCCL would use: its context and protection domain (opened on first use). */
typedef struct {
  char name[64];
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  int port;      /* the first active port */
  int gid_index; /* NCCL_IB_GID_INDEX, or the RoCEv2 IPv4-mapped GID found by scanning */
  union ibv_gid gid;
  int link_layer; /* IBV_LINK_LAYER_* */
  uint16_t lid;   /* the port's LID (InfiniBand: QPs are addressed by it) */
} sim_ib_dev_t;

/* The process's table, or NULL when IB is off (NCCL_IB_DISABLE=1) or libibverbs is missing or
 * lacks a required verb (as NCCL then falls back to sockets; the reason is logged once). */
const sim_verbs_table_t *sim_ib_verbs(void);
/* The devices NCCL_IB_HCA selects, in device-list order; *n_p is their count. */
sim_ib_dev_t *sim_ib_devices(int *n_p);

#endif
