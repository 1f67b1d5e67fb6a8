/* vb_post.c: posting work — ibv_post_send and ibv_post_recv as verbs.h's inline calls reach them
 * through context->ops. A post copies the WRs (and inline data) into the QP's queues and rings the
 * engine's doorbell; it never waits on the network. Sends need RTS; in ERR both are flushed at once. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vb_internal.h"

static int copy_send(vb_qp_t *q, const struct ibv_send_wr *wr, vb_swqe_t *w) {
  int op = wr->opcode;
  if (op != IBV_WR_RDMA_WRITE && op != IBV_WR_RDMA_WRITE_WITH_IMM && op != IBV_WR_SEND &&
      op != IBV_WR_SEND_WITH_IMM && op != IBV_WR_RDMA_READ)
    return EINVAL;
  if (op == IBV_WR_RDMA_READ && q->qp.qp_type == IBV_QPT_UC) return EINVAL;
  if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->cap.max_send_sge) return EINVAL;
  memset(w, 0, sizeof *w);
  w->wr_id = wr->wr_id;
  w->opcode = op;
  w->signaled = q->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
  w->imm = wr->imm_data;
  w->raddr = wr->wr.rdma.remote_addr;
  w->rkey = wr->wr.rdma.rkey;
  w->nsge = wr->num_sge;
  for (int i = 0; i < wr->num_sge; i++) {
    w->sge[i] = wr->sg_list[i];
    w->len += wr->sg_list[i].length;
  }
  if ((wr->send_flags & IBV_SEND_INLINE) && op != IBV_WR_RDMA_READ) {
    if (w->len > q->cap.max_inline_data) return EINVAL;
    w->inl = malloc(w->len ? w->len : 1);
    if (!w->inl) return ENOMEM;
    uint64_t off = 0;
    for (int i = 0; i < w->nsge; i++) {
      memcpy(w->inl + off, (void *)(uintptr_t)w->sge[i].addr, w->sge[i].length);
      off += w->sge[i].length;
    }
  } else if (wr->send_flags & IBV_SEND_INLINE) {
    return EINVAL;
  }
  return 0;
}

int vb_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  vb_qp_t *q = (vb_qp_t *)qp;
  int rc = 0;
  pthread_mutex_lock(&q->lock);
  enum ibv_qp_state s = q->qp.state;
  for (; wr; wr = wr->next) {
    if (s != IBV_QPS_RTS && s != IBV_QPS_ERR && s != IBV_QPS_SQE) {
      rc = EINVAL;
      break;
    }
    if (q->sq_tail - q->sq_head >= q->cap.max_send_wr) {
      rc = ENOMEM;
      break;
    }
    vb_swqe_t *w = &q->sq[q->sq_tail % q->cap.max_send_wr];
    if ((rc = copy_send(q, wr, w)) != 0) break;
    w->msn = q->next_msn++;
    q->sq_tail++;
  }
  if (rc && bad) *bad = wr;
  if (q->qp.state == IBV_QPS_ERR) vb_qp_flush(q);
  pthread_mutex_unlock(&q->lock);
  vb_engine_kick(q->ctx);
  return rc;
}

int vb_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  vb_qp_t *q = (vb_qp_t *)qp;
  int rc = 0;
  pthread_mutex_lock(&q->lock);
  for (; wr; wr = wr->next) {
    if (q->qp.state == IBV_QPS_RESET || wr->num_sge < 0 ||
        (uint32_t)wr->num_sge > q->cap.max_recv_sge) {
      rc = EINVAL;
      break;
    }
    if (q->rq_tail - q->rq_head >= q->cap.max_recv_wr) {
      rc = ENOMEM;
      break;
    }
    vb_rwqe_t *r = &q->rq[q->rq_tail % q->cap.max_recv_wr];
    r->wr_id = wr->wr_id;
    r->nsge = wr->num_sge;
    r->cap = 0;
    for (int i = 0; i < wr->num_sge; i++) {
      r->sge[i] = wr->sg_list[i];
      r->cap += wr->sg_list[i].length;
    }
    q->rq_tail++;
  }
  if (rc && bad) *bad = wr;
  if (q->qp.state == IBV_QPS_ERR) vb_qp_flush(q);
  pthread_mutex_unlock(&q->lock);
  vb_engine_kick(q->ctx);
  return rc;
}
