/* ibbw_load_linked.c: ncclsim-ibbw's verbs from the libibverbs it is linked with (the system's at
 * link time; whatever LD_LIBRARY_PATH finds first at run time). */
#include <dlfcn.h>
#include <string.h>

#include "ibbw_verbs.h"

const char *ibbw_mode = "linked";

/* verbs.h's ibv_query_port is an inline that tries the extended op first: kept as the caller. */
static int query_port_inline(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a) {
  return ibv_query_port(c, port, a);
}

static struct ibv_mr *reg_mr_fn(struct ibv_pd *pd, void *addr, size_t len, int access) {
  return ibv_reg_mr(pd, addr, len, access);
}

int ibbw_verbs_load(sim_verbs_table_t *v) {
  v->get_device_list = ibv_get_device_list;
  v->free_device_list = ibv_free_device_list;
  v->get_device_name = ibv_get_device_name;
  v->open_device = ibv_open_device;
  v->close_device = ibv_close_device;
  v->query_port = query_port_inline;
  v->query_gid = ibv_query_gid;
  v->alloc_pd = ibv_alloc_pd;
  v->dealloc_pd = ibv_dealloc_pd;
  v->reg_mr = reg_mr_fn;
  v->reg_mr_iova2 = ibv_reg_mr_iova2;
  v->dereg_mr = ibv_dereg_mr;
  v->create_cq = ibv_create_cq;
  v->destroy_cq = ibv_destroy_cq;
  v->create_qp = ibv_create_qp;
  v->modify_qp = ibv_modify_qp;
  v->destroy_qp = ibv_destroy_qp;
  v->wc_status_str = ibv_wc_status_str;
  v->query_qp = ibv_query_qp;
  v->get_async_event = ibv_get_async_event;
  v->ack_async_event = ibv_ack_async_event;
  void *f = dlvsym(RTLD_DEFAULT, "ncclsimVerbsQpFlow", "NCCLSIM_VERBS_1.0");
  memcpy(&v->qp_flow, &f, sizeof f);
  return 0;
}
