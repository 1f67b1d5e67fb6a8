/* ibbw_verbs.h: the verbs ncclsim-ibbw calls, as one table filled either from the library the
 * program is linked with (ncclsim-ibbw) or, as libnccl does it, from dlopen("libibverbs.so.1") and
 * dlvsym(name, "IBVERBS_1.1") (ncclsim-ibbw-dl). Posting and polling never pass through the table:
 * they are verbs.h's inline calls through context->ops, in both builds. */
#ifndef IBBW_VERBS_H
#define IBBW_VERBS_H

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
  struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *, void *, size_t, uint64_t, unsigned); /* optional */
  int (*dereg_mr)(struct ibv_mr *);
  struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
  int (*destroy_cq)(struct ibv_cq *);
  struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
  int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
  int (*destroy_qp)(struct ibv_qp *);
  const char *(*wc_status_str)(enum ibv_wc_status);
  int (*query_qp)(struct ibv_qp *, struct ibv_qp_attr *, int, struct ibv_qp_init_attr *);
  int (*qp_flow)(struct ibv_qp *, void *); /* sim's ncclsimVerbsQpFlow@NCCLSIM_VERBS_1.0, optional */
} ibbw_verbs_t;

/* Fills the table; returns 0, or -1 with a message on stderr. */
int ibbw_verbs_load(ibbw_verbs_t *v);
/* The mode's name, for messages: "linked" or "dlopen". */
extern const char *ibbw_mode;

#endif
