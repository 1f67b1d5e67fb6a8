/* sim_ib_verbs.h: libibverbs as sim/'s NCCL stand-in reaches it — the way NCCL's net_ib does:
 * dlopen("libibverbs.so.1") and dlvsym(…, "IBVERBS_1.1") for the control path, the inline
 * ibv_post_send/ibv_post_recv/ibv_poll_cq of verbs.h (through each context's ops) for the data
 * path. Going through dlvsym is the point: a preloaded autoha sees these lookups exactly as it sees
 * real NCCL's. One table per process; devices are opened once and shared by every communicator. */
#ifndef SIM_IB_VERBS_H
#define SIM_IB_VERBS_H

#include <infiniband/verbs.h>

typedef struct {
  struct ibv_device **(*get_device_list)(int *);
  void (*free_device_list)(struct ibv_device **);
  const char *(*get_device_name)(struct ibv_device *);
  struct ibv_context *(*open_device)(struct ibv_device *);
  int (*close_device)(struct ibv_context *);
  int (*query_port)(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *);
  int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *);
  int (*dealloc_pd)(struct ibv_pd *);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
  int (*dereg_mr)(struct ibv_mr *);
  struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
  int (*destroy_cq)(struct ibv_cq *);
  struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
  int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
  int (*destroy_qp)(struct ibv_qp *);
  const char *(*wc_status_str)(enum ibv_wc_status);
  /* sim/'s provider only (NULL elsewhere): the fabric flow a connected QP puts on the wire */
  int (*qp_flow)(struct ibv_qp *, void *flow_out);
} sim_ibv_t;

/* A device NCCL would use: its context and protection domain (opened on first use). */
typedef struct {
  char name[64];
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  int port;          /* the first active port */
  int gid_index;     /* NCCL_IB_GID_INDEX, or the RoCEv2 IPv4-mapped GID found by scanning */
  union ibv_gid gid;
  int link_layer;    /* IBV_LINK_LAYER_* */
} sim_ib_dev_t;

/* The process's table, or NULL when IB is off (NCCL_IB_DISABLE=1) or libibverbs is missing or
 * lacks a required verb (as NCCL then falls back to sockets; the reason is logged once). */
const sim_ibv_t *sim_ib_verbs(void);
/* The devices NCCL_IB_HCA selects, in device-list order; *n_p is their count. */
sim_ib_dev_t *sim_ib_devices(int *n_p);

#endif
