/* vb_resp.c: the responder — what a NIC does with a request packet arriving on an RC or UC QP:
 * checks the remote key, range and access against its own context's MR table, places the bytes,
 * consumes a receive for SEND and WRITE_WITH_IMM (RNR NAK when there is none), answers READs with
 * response packets, and ACKs each message in order.
 *
 * Messages arrive as segments in order (the ring is reliable), so "exactly once" is kept by the
 * expected message number: after a NAK every packet is dropped until the requester's
 * retransmission restarts that message at offset 0. A packet's effects are applied once
 * (rx_applied) even when its reply has to wait for ring room or a path. */
#include <string.h>

#include "vb_internal.h"

static const double rnr_ms[32] = {655.36, 0.01,  0.02,  0.03,   0.04,   0.06,   0.08,   0.12,
                                  0.16,   0.24,  0.32,  0.48,   0.64,   0.96,   1.28,   1.92,
                                  2.56,   3.84,  5.12,  7.68,   10.24,  15.36,  20.48,  30.72,
                                  40.96,  61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52};

double vb_rnr_delay_s(int min_rnr_timer);
double vb_rnr_delay_s(int min_rnr_timer) { return rnr_ms[min_rnr_timer & 31] * 1e-3; }

static void recv_cqe(vb_qp_t *q, vb_rwqe_t *r, enum ibv_wc_status st, enum ibv_wc_opcode op,
                     uint32_t len, int with_imm, uint32_t imm) {
  struct ibv_wc wc;
  memset(&wc, 0, sizeof wc);
  wc.wr_id = r->wr_id;
  wc.status = st;
  wc.opcode = op;
  wc.byte_len = len;
  wc.qp_num = q->qp.qp_num;
  wc.src_qp = q->attr.dest_qp_num;
  if (with_imm) {
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.imm_data = imm;
  }
  if (st != IBV_WC_SUCCESS) wc.vendor_err = 0x88;
  vb_cq_push((vb_cq_t *)q->qp.recv_cq, &wc);
}

static int reply(vb_qp_t *q, uint32_t type, uint32_t msn, uint32_t code, uint32_t arg) {
  vb_pkt_t a;
  memset(&a, 0, sizeof a);
  a.type = type;
  a.msn = msn;
  a.op = code;
  a.imm = arg;
  return vb_qp_emit(q, &a, NULL, NULL, 0);
}

/* A fatal responder error: NAK it (best effort), move to ERR, raise the async event mlx5 raises. */
static int fail(vb_qp_t *q, const vb_pkt_t *p, uint32_t code) {
  if (q->qp.qp_type == IBV_QPT_RC) reply(q, VB_PKT_NAK, p->msn, code, 0);
  vb_qp_to_error(q, 0);
  vb_async_push(q->ctx, code == VB_NAK_ACCESS ? IBV_EVENT_QP_ACCESS_ERR : IBV_EVENT_QP_REQ_ERR,
                &q->qp);
  return 1;
}

/* Scatters `len` bytes at message offset `off` into a receive's SGEs. */
static void scatter(vb_rwqe_t *r, vb_ctx_t *ctx, uint64_t off, const uint8_t *src, uint64_t len) {
  for (int i = 0; i < r->nsge && len; i++) {
    uint64_t l = r->sge[i].length;
    if (off >= l) {
      off -= l;
      continue;
    }
    uint64_t n = l - off < len ? l - off : len;
    memcpy((uint8_t *)(uintptr_t)r->sge[i].addr + off, src, n);
    src += n;
    len -= n;
    off = 0;
  }
}

static int rwqe_keys_ok(vb_qp_t *q, vb_rwqe_t *r) {
  for (int i = 0; i < r->nsge; i++)
    if (r->sge[i].length && !vb_mr_find(q->ctx, r->sge[i].lkey, 1, r->sge[i].addr, r->sge[i].length,
                                        IBV_ACCESS_LOCAL_WRITE))
      return 0;
  return 1;
}

/* First segment of a message: the checks that decide whether it is accepted. Returns 1 to go
 * on, 0 when the packet was consumed by a NAK or an error. */
static int accept_first(vb_qp_t *q, const vb_pkt_t *p, int *consumed_p) {
  int op = (int)p->op, rc_qp = q->qp.qp_type == IBV_QPT_RC;
  int is_write = op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM;
  if (is_write || op == IBV_WR_RDMA_READ) {
    int need = is_write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;
    if (p->total && (!(q->attr.qp_access_flags & need) ||
                     !vb_mr_find(q->ctx, p->rkey, 0, p->raddr, p->total, need))) {
      *consumed_p = fail(q, p, VB_NAK_ACCESS);
      return 0;
    }
  }
  if (op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM) {
    if (q->rq_head == q->rq_tail) {
      if (rc_qp) {
        if (!reply(q, VB_PKT_NAK, p->msn, VB_NAK_RNR, q->attr.min_rnr_timer)) {
          *consumed_p = 0; /* the NAK waits; so does the packet */
          return 0;
        }
        q->nak_pending = 1;
      } else {
        q->uc_drop = 1;
      }
      *consumed_p = 1;
      return 0;
    }
    vb_rwqe_t *r = &q->rq[q->rq_head % q->cap.max_recv_wr];
    if (op != IBV_WR_RDMA_WRITE_WITH_IMM) {
      if (p->total > r->cap) {
        recv_cqe(q, r, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, 0, 0, 0);
        q->rq_head++;
        *consumed_p = fail(q, p, VB_NAK_INV_REQ);
        return 0;
      }
      if (!rwqe_keys_ok(q, r)) {
        recv_cqe(q, r, IBV_WC_LOC_PROT_ERR, IBV_WC_RECV, 0, 0, 0);
        q->rq_head++;
        *consumed_p = fail(q, p, VB_NAK_REM_OP);
        return 0;
      }
    }
  }
  return 1;
}

static int answer_read(vb_qp_t *q, const vb_pkt_t *p) {
  const uint8_t *src =
      p->total ? vb_mr_find(q->ctx, p->rkey, 0, p->raddr, p->total, IBV_ACCESS_REMOTE_READ) : NULL;
  if (p->total && !src) return fail(q, p, VB_NAK_ACCESS); /* deregistered meanwhile */
  do {
    uint64_t n = p->total - q->rd_resp_off;
    if (n > VB_SEG_MAX) n = VB_SEG_MAX;
    vb_pkt_t r;
    memset(&r, 0, sizeof r);
    r.type = VB_PKT_READ_RESP;
    r.msn = p->msn;
    r.len = (uint32_t)n;
    r.offset = q->rd_resp_off;
    r.total = p->total;
    r.last = q->rd_resp_off + n == p->total;
    if (!vb_qp_emit(q, &r, src ? src + q->rd_resp_off : NULL, NULL, (uint32_t)n)) return 0;
    q->rd_resp_off += n;
  } while (q->rd_resp_off < p->total);
  q->rd_resp_off = 0;
  q->epsn++;
  return 1;
}

/* A request dropped the way a NIC drops one it cannot take (not ready, out of sequence): counted in
 * our ring's header, where the requester sees it and retransmits from its oldest unACKed message
 * (the transport retry of RC, without the wait). */
static int drop(vb_qp_t *q) {
  atomic_fetch_add(&q->in.h->drops, 1);
  return 1;
}

int vb_resp_request(vb_qp_t *q, const vb_pkt_t *p) {
  enum ibv_qp_state s = q->qp.state;
  if (s != IBV_QPS_RTR && s != IBV_QPS_RTS) return drop(q);
  if (s == IBV_QPS_RTR && !q->comm_est_sent) {
    q->comm_est_sent = 1;
    vb_async_push(q->ctx, IBV_EVENT_COMM_EST, &q->qp);
  }
  int rc_qp = q->qp.qp_type == IBV_QPT_RC;
  if (!rc_qp) { /* UC: a message starts at offset 0; one that found no receive is dropped whole */
    if (p->offset == 0) {
      q->epsn = p->msn;
      q->uc_drop = 0;
    } else if (q->uc_drop || p->msn != q->epsn) {
      return 1;
    }
  }
  if (q->nak_pending) {
    if (p->msn != q->epsn || p->offset != 0) return 1;
    q->nak_pending = 0;
  }
  if ((int32_t)(p->msn - q->epsn) < 0) return 1; /* a duplicate (its ACK is on its way): ignored */
  if (p->msn != q->epsn || (p->offset != 0 && p->offset != q->rx_off)) return drop(q); /* a gap */
  int op = (int)p->op;
  if (!q->rx_applied) {
    if (p->offset == 0) {
      int consumed = 1;
      if (!accept_first(q, p, &consumed)) return consumed;
    }
    q->rx_off = p->offset + p->len;
    if (op == IBV_WR_RDMA_READ) return answer_read(q, p);
    const uint8_t *payload = (const uint8_t *)(p + 1);
    if (op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM) {
      if (p->len) {
        uint8_t *dst =
            vb_mr_find(q->ctx, p->rkey, 0, p->raddr + p->offset, p->len, IBV_ACCESS_REMOTE_WRITE);
        if (!dst) return fail(q, p, VB_NAK_ACCESS);
        memcpy(dst, payload, p->len);
      }
    } else {
      scatter(&q->rq[q->rq_head % q->cap.max_recv_wr], q->ctx, p->offset, payload, p->len);
    }
    if (p->last) {
      if (op != IBV_WR_RDMA_WRITE) {
        vb_rwqe_t *r = &q->rq[q->rq_head % q->cap.max_recv_wr];
        int imm = op != IBV_WR_SEND;
        recv_cqe(q, r, IBV_WC_SUCCESS,
                 op == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV,
                 (uint32_t)p->total, imm, p->imm);
        q->rq_head++;
      }
      q->epsn++;
    }
    q->rx_applied = 1;
  }
  if (p->last && rc_qp && !reply(q, VB_PKT_ACK, p->msn, 0, 0)) return 0;
  q->rx_applied = 0;
  return 1;
}
