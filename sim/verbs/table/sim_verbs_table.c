/* sim_verbs_table.c: loading libibverbs the way libnccl does (src/misc/ibvsymbols.cc): dlopen,
 * every required verb by dlvsym(…, "IBVERBS_1.1") — one miss fails the whole table — and the port
 * query through the extended verbs_context op when abi_compat says the context has one
 * (src/misc/ibvwrap.cc), else the exported ibv_query_port on a zeroed struct. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "sim_verbs_table.h"

static int (*compat_query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);

static int query_port_nccl(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a) {
  struct verbs_context *vc = verbs_get_ctx_op(c, query_port);
  if (vc) return vc->query_port(c, port, a, sizeof *a);
  memset(a, 0, sizeof *a);
  return compat_query_port(c, port, a);
}

int sim_verbs_table_load(const char *lib, sim_verbs_table_t *t, char *err, size_t errlen) {
  void *h = dlopen(lib, RTLD_NOW);
  if (!h) {
    snprintf(err, errlen, "dlopen(%s): %s", lib, dlerror());
    return -1;
  }
  static const struct {
    size_t off;
    const char *name;
  } required[] = {
#define VERB(field, name) {offsetof(sim_verbs_table_t, field), name}
      VERB(get_device_list, "ibv_get_device_list"),
      VERB(free_device_list, "ibv_free_device_list"),
      VERB(get_device_name, "ibv_get_device_name"),
      VERB(open_device, "ibv_open_device"),
      VERB(close_device, "ibv_close_device"),
      VERB(query_gid, "ibv_query_gid"),
      VERB(alloc_pd, "ibv_alloc_pd"),
      VERB(dealloc_pd, "ibv_dealloc_pd"),
      VERB(reg_mr, "ibv_reg_mr"),
      VERB(dereg_mr, "ibv_dereg_mr"),
      VERB(create_cq, "ibv_create_cq"),
      VERB(destroy_cq, "ibv_destroy_cq"),
      VERB(create_qp, "ibv_create_qp"),
      VERB(modify_qp, "ibv_modify_qp"),
      VERB(destroy_qp, "ibv_destroy_qp"),
      VERB(wc_status_str, "ibv_wc_status_str"),
      VERB(query_qp, "ibv_query_qp"),
      VERB(get_async_event, "ibv_get_async_event"),
      VERB(ack_async_event, "ibv_ack_async_event"),
#undef VERB
  };
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
    void *f = dlvsym(h, required[i].name, "IBVERBS_1.1");
    if (!f) {
      snprintf(err, errlen, "%s lacks %s@IBVERBS_1.1", lib, required[i].name);
      return -1;
    }
    memcpy((char *)t + required[i].off, &f, sizeof f);
  }
  void *qp = dlvsym(h, "ibv_query_port", "IBVERBS_1.1");
  if (!qp) {
    snprintf(err, errlen, "%s lacks ibv_query_port@IBVERBS_1.1", lib);
    return -1;
  }
  memcpy(&compat_query_port, &qp, sizeof qp);
  t->query_port = query_port_nccl;
  void *f = dlvsym(h, "ibv_reg_mr_iova2", "IBVERBS_1.8");
  memcpy(&t->reg_mr_iova2, &f, sizeof f);
  f = dlvsym(h, "ncclsimVerbsQpFlow", "NCCLSIM_VERBS_1.0");
  memcpy(&t->qp_flow, &f, sizeof f);
  void *ep = dlvsym(h, "ncclsimVerbsEpoch", "NCCLSIM_VERBS_1.0");
  void *qc = dlvsym(h, "ncclsimVerbsQpCarriers", "NCCLSIM_VERBS_1.0");
  if (ep && qc) {
    memcpy(&t->epoch, &ep, sizeof ep);
    memcpy(&t->qp_carriers, &qc, sizeof qc);
  }
  void *cc = dlvsym(h, "ibv_create_comp_channel", "IBVERBS_1.0");
  void *dc = dlvsym(h, "ibv_destroy_comp_channel", "IBVERBS_1.0");
  void *ge = dlvsym(h, "ibv_get_cq_event", "IBVERBS_1.1");
  void *ae = dlvsym(h, "ibv_ack_cq_events", "IBVERBS_1.1");
  if (cc && dc && ge && ae) {
    memcpy(&t->create_comp_channel, &cc, sizeof cc);
    memcpy(&t->destroy_comp_channel, &dc, sizeof dc);
    memcpy(&t->get_cq_event, &ge, sizeof ge);
    memcpy(&t->ack_cq_events, &ae, sizeof ae);
  }
  return 0;
}
