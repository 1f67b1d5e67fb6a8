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

VB_API int ncclsimVerbsQpSetSport(struct ibv_qp *qp, uint16_t sport) {
  vb_qp_t *q = (vb_qp_t *)qp;
  if (!q || (q->qp.qp_type != IBV_QPT_RC && q->qp.qp_type != IBV_QPT_UC)) return EINVAL;
  pthread_mutex_lock(&q->lock);
  int rc = 0;
  if (q->qp.state != IBV_QPS_RTS) {
    rc = EINVAL;
  } else {
    q->sport_override = sport;
    q->flow.sport = sport;
  }
  pthread_mutex_unlock(&q->lock);
  return rc;
}
