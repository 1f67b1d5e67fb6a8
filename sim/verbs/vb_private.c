/* vb_private.c: what sim/ itself asks the provider (version node NCCLSIM_VERBS_1.0): a QP's flow
 * on the fabric and the bytes it sent, for sim's libnccl stand-in; whether a device is one of
 * ours and the UDP source port override, for sim's libmlx5 stand-in. Not part of libibverbs. */
#include <errno.h>
#include <string.h>

#include "ncclsim_verbs.h"
#include "vb_internal.h"

VB_API int ncclsimVerbsQpFlow(struct ibv_qp *qp, void *sim_fabric_flow_out) {
  vb_qp_t *q = (vb_qp_t *)qp;
  if (!q || !sim_fabric_flow_out) return -1;
  pthread_mutex_lock(&q->lock);
  int ok = q->flow_ok && (q->qp.state == IBV_QPS_RTR || q->qp.state == IBV_QPS_RTS);
  if (ok) memcpy(sim_fabric_flow_out, &q->flow, sizeof q->flow);
  pthread_mutex_unlock(&q->lock);
  return ok ? 0 : -1;
}

VB_API uint64_t ncclsimVerbsQpTxBytes(struct ibv_qp *qp) {
  return qp ? atomic_load(&((vb_qp_t *)qp)->tx_bytes) : 0;
}

VB_API int ncclsimVerbsIsDevice(struct ibv_device *device) {
  return device && ((vb_dev_t *)device)->magic == VB_DEV_MAGIC;
}

static _Atomic uint64_t epoch;

void vb_epoch_bump(void) { atomic_fetch_add_explicit(&epoch, 1, memory_order_relaxed); }

VB_API uint64_t ncclsimVerbsEpoch(void) {
  return atomic_load_explicit(&epoch, memory_order_relaxed);
}

/* A QP that is not the caller's and has sent this much is taken to carry a failed QP's traffic
 * (a failover layer's heartbeats and markers stay below it). */
#define VB_CARRIER_MIN_BYTES 4096u

typedef struct {
  vb_qp_t *failed;
  const void *owner_tag;
  int dst_node;
  sim_fabric_flow_t *out;
  int max, n;
} carriers_t;

/* Adds ctx's RC QPs in RTS towards c->dst_node that move bytes and are not the owner's to c. */
static int carriers_of(vb_ctx_t *ctx, void *arg) {
  carriers_t *c = arg;
  pthread_mutex_lock(&ctx->lock);
  for (vb_qp_t *o = ctx->qps; o && c->n < c->max; o = o->hh.next) {
    if (o == c->failed || o->qp.qp_context == c->owner_tag || o->qp.qp_type != IBV_QPT_RC) continue;
    if (atomic_load(&o->tx_bytes) < VB_CARRIER_MIN_BYTES) continue;
    pthread_mutex_lock(&o->lock);
    if (o->flow_ok && o->qp.state == IBV_QPS_RTS && o->flow.dst.node == c->dst_node)
      c->out[c->n++] = o->flow;
    pthread_mutex_unlock(&o->lock);
  }
  pthread_mutex_unlock(&ctx->lock);
  return c->n >= c->max;
}

/* Another context's carriers, if it is a failover layer's own (it holds no QP of the owner's):
 * a context of the owner's carries the owner's other flows, not this one. */
static int carriers_other(vb_ctx_t *ctx, void *arg) {
  carriers_t *c = arg;
  if (ctx == c->failed->ctx) return 0;
  int owners = 0;
  pthread_mutex_lock(&ctx->lock);
  for (vb_qp_t *o = ctx->qps; o && !owners; o = o->hh.next)
    owners = o->qp.qp_context == c->owner_tag;
  pthread_mutex_unlock(&ctx->lock);
  return owners ? 0 : carriers_of(ctx, arg);
}

VB_API int ncclsimVerbsQpCarriers(struct ibv_qp *qp, const void *owner_tag, void *flows_out,
                                  int max) {
  vb_qp_t *q = (vb_qp_t *)qp;
  sim_fabric_flow_t *out = flows_out;
  if (!q || !out || max <= 0) return -1;
  pthread_mutex_lock(&q->lock);
  int state = q->qp.state, ok = q->flow_ok;
  sim_fabric_flow_t mine = q->flow;
  pthread_mutex_unlock(&q->lock);
  if (!ok) return -1;
  if (state == IBV_QPS_RTR || state == IBV_QPS_RTS) {
    out[0] = mine;
    return 1;
  }
  /* Failed: the other RC QPs of its context in RTS towards the same node that move bytes; when
   * there are none, those of the process's contexts that hold none of the owner's QPs (a failover
   * layer's shadows on another NIC). */
  carriers_t c = {q, owner_tag, mine.dst.node, out, max, 0};
  carriers_of(q->ctx, &c);
  if (c.n == 0) vb_ctx_each(carriers_other, &c);
  return c.n;
}

VB_API int ncclsimVerbsQpSetSport(struct ibv_qp *qp, uint16_t sport) {
  vb_qp_t *q = (vb_qp_t *)qp;
  if (!q || (q->qp.qp_type != IBV_QPT_RC && q->qp.qp_type != IBV_QPT_UC)) return EINVAL;
  if (vb_net_is_ib()) return EOPNOTSUPP; /* a UDP source port is RoCEv2's; IB has none (as mlx5) */
  pthread_mutex_lock(&q->lock);
  int rc = 0;
  if (q->qp.state != IBV_QPS_RTS) {
    rc = EINVAL;
  } else {
    q->sport_override = sport;
    q->flow.sport = sport;
    vb_epoch_bump();
  }
  pthread_mutex_unlock(&q->lock);
  return rc;
}
