/* qpfake.c: a test-only stand-in for libibverbs that exports ibv_create_qp, ibv_modify_qp and
 * ibv_query_gid under the version node IBVERBS_1.1, exactly as rdma-core does, and records every
 * modify's arguments. tests/qp opens it the way libnccl opens libibverbs (dlopen + dlvsym) or links
 * to it, with and without libautoha.so preloaded, and compares what arrived here byte for byte. */
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

#include "qpfake.h"

#define QPFAKE_MAX 256

static qpfake_call_t calls[QPFAKE_MAX];
static int ncalls;
static uint32_t next_qpn = 0x100;

__attribute__((visibility("default"))) struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
                                                                    struct ibv_qp_init_attr *init) {
  struct ibv_qp *qp = calloc(1, sizeof *qp);
  if (!qp) return NULL;
  qp->context = pd ? pd->context : NULL;
  qp->pd = pd;
  qp->qp_num = next_qpn++;
  qp->qp_type = init ? init->qp_type : IBV_QPT_RC;
  qp->state = IBV_QPS_RESET;
  return qp;
}

__attribute__((visibility("default"))) int ibv_modify_qp(struct ibv_qp *qp,
                                                         struct ibv_qp_attr *attr, int mask) {
  if (ncalls < QPFAKE_MAX) {
    calls[ncalls].qp = qp;
    calls[ncalls].mask = mask;
    memcpy(&calls[ncalls].attr, attr, sizeof *attr);
    ncalls++;
  }
  if (qp && (mask & IBV_QP_STATE)) qp->state = attr->qp_state;
  return 0;
}

/* GID i of a context: the fake device's address with the last byte replaced by the index. */
__attribute__((visibility("default"))) int ibv_query_gid(struct ibv_context *ctx, uint8_t port,
                                                         int index, union ibv_gid *gid) {
  if (!ctx || !ctx->device || port != 1) return -1;
  memset(gid, 0, sizeof *gid);
  gid->raw[10] = gid->raw[11] = 0xFF;
  gid->raw[12] = 10;
  gid->raw[15] = (uint8_t)(ctx->device->name[strlen(ctx->device->name) - 1] - '0' + 1);
  return 0;
}

__attribute__((visibility("default"))) int qpfake_ncalls(void) { return ncalls; }
__attribute__((visibility("default"))) const qpfake_call_t *qpfake_call(int i) {
  return i >= 0 && i < ncalls ? &calls[i] : NULL;
}
__attribute__((visibility("default"))) void qpfake_reset(void) { ncalls = 0; }
