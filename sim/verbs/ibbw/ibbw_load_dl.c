/* ibbw_load_dl.c: ncclsim-ibbw-dl's verbs, loaded the way libnccl loads them: dlopen of
 * libibverbs.so.1, every required verb by dlvsym(..., "IBVERBS_1.1"), ibv_reg_mr_iova2 optionally
 * at IBVERBS_1.8; the port query tries the extended verbs_context op when abi_compat says the
 * context has one, as NCCL's wrapper does. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "ibbw_verbs.h"

const char *ibbw_mode = "dlopen";

static int (*compat_query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);

static int query_port_nccl(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a) {
  struct verbs_context *vc = verbs_get_ctx_op(c, query_port);
  if (vc) return vc->query_port(c, port, a, sizeof *a);
  memset(a, 0, sizeof *a);
  return compat_query_port(c, port, a);
}

#define LOAD(field, name)                                                               \
  do {                                                                                  \
    void *f_ = dlvsym(h, name, "IBVERBS_1.1");                                          \
    if (!f_) {                                                                          \
      fprintf(stderr, "ncclsim-ibbw-dl: dlvsym(%s, IBVERBS_1.1): %s\n", name, dlerror()); \
      return -1;                                                                        \
    }                                                                                   \
    memcpy(&v->field, &f_, sizeof f_);                                                  \
  } while (0)

int ibbw_verbs_load(ibbw_verbs_t *v) {
  void *h = dlopen("libibverbs.so.1", RTLD_NOW);
  if (!h) {
    fprintf(stderr, "ncclsim-ibbw-dl: dlopen(libibverbs.so.1): %s\n", dlerror());
    return -1;
  }
  LOAD(get_device_list, "ibv_get_device_list");
  LOAD(free_device_list, "ibv_free_device_list");
  LOAD(get_device_name, "ibv_get_device_name");
  LOAD(open_device, "ibv_open_device");
  LOAD(close_device, "ibv_close_device");
  LOAD(query_gid, "ibv_query_gid");
  LOAD(alloc_pd, "ibv_alloc_pd");
  LOAD(dealloc_pd, "ibv_dealloc_pd");
  LOAD(reg_mr, "ibv_reg_mr");
  LOAD(dereg_mr, "ibv_dereg_mr");
  LOAD(create_cq, "ibv_create_cq");
  LOAD(destroy_cq, "ibv_destroy_cq");
  LOAD(create_qp, "ibv_create_qp");
  LOAD(modify_qp, "ibv_modify_qp");
  LOAD(destroy_qp, "ibv_destroy_qp");
  LOAD(wc_status_str, "ibv_wc_status_str");
  LOAD(query_qp, "ibv_query_qp");
  void *qp = dlvsym(h, "ibv_query_port", "IBVERBS_1.1");
  if (!qp) {
    fprintf(stderr, "ncclsim-ibbw-dl: dlvsym(ibv_query_port, IBVERBS_1.1): %s\n", dlerror());
    return -1;
  }
  memcpy(&compat_query_port, &qp, sizeof qp);
  v->query_port = query_port_nccl;
  void *r2 = dlvsym(h, "ibv_reg_mr_iova2", "IBVERBS_1.8");
  memcpy(&v->reg_mr_iova2, &r2, sizeof r2);
  void *fl = dlvsym(h, "ncclsimVerbsQpFlow", "NCCLSIM_VERBS_1.0");
  memcpy(&v->qp_flow, &fl, sizeof fl);
  return 0;
}
