/* sim_verbs_table.h: the control verbs a program calls, as one table — filled, as libnccl does it,
 * from dlopen("libibverbs.so.1") and dlvsym(name, "IBVERBS_1.1") (sim_verbs_table_load: sim/'s
 * libnccl stand-in and ncclsim-ibbw-dl), or from the library a program is linked with
 * (ncclsim-ibbw). Posting and polling never pass through the table: they are verbs.h's inline
 * calls through context->ops. */
#ifndef SIM_VERBS_TABLE_H
#define SIM_VERBS_TABLE_H

#include <stddef.h>

#include <infiniband/verbs.h>

typedef struct {
  struct ibv_device **(*get_device_list)(int *);
  void (*free_device_list)(struct ibv_device **);
  const char *(*get_device_name)(struct ibv_device *);
  struct ibv_context *(*open_device)(struct ibv_device *);
  int (*close_device)(struct ibv_context *);
  int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
  int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *);
  int (*dealloc_pd)(struct ibv_pd *);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
  struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *, void *, size_t, uint64_t,
                                 unsigned); /* optional */
  int (*dereg_mr)(struct ibv_mr *);
  struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
  int (*destroy_cq)(struct ibv_cq *);
  struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
  int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
  int (*destroy_qp)(struct ibv_qp *);
  const char *(*wc_status_str)(enum ibv_wc_status);
  int (*query_qp)(struct ibv_qp *, struct ibv_qp_attr *, int, struct ibv_qp_init_attr *);
  int (*qp_flow)(struct ibv_qp *,
                 void *); /* sim/'s ncclsimVerbsQpFlow@NCCLSIM_VERBS_1.0, optional */
  /* sim/'s ncclsimVerbsEpoch and ncclsimVerbsQpCarriers, optional: where a failed QP's traffic went */
  uint64_t (*epoch)(void);
  int (*qp_carriers)(struct ibv_qp *, const void *, void *, int);
  /* completion channels, optional (NULL when any is missing): waiting for a completion asleep */
  struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *);
  int (*destroy_comp_channel)(struct ibv_comp_channel *);
  int (*get_cq_event)(struct ibv_comp_channel *, struct ibv_cq **, void **);
  void (*ack_cq_events)(struct ibv_cq *, unsigned int);
  /* the devices' async events (required by NCCL, as by sim_verbs_table_load) */
  int (*get_async_event)(struct ibv_context *, struct ibv_async_event *);
  void (*ack_async_event)(struct ibv_async_event *);
} sim_verbs_table_t;

/* Fills the table as libnccl does: dlopen(lib) (RTLD_NOW), every required verb by
 * dlvsym(…, "IBVERBS_1.1"), ibv_reg_mr_iova2@IBVERBS_1.8 and sim/'s ncclsimVerbsQpFlow optionally;
 * query_port tries the context's extended op first, as NCCL's wrapper does. Returns 0, or -1 with
 * the reason (naming the library or the missing verb) in err. */
int sim_verbs_table_load(const char *lib, sim_verbs_table_t *t, char *err, size_t errlen);

#endif
