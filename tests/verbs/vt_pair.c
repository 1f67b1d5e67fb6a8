/* vt_pair.c: the unit tests' QP pairs (vt_pair.h). */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vt_pair.h"

struct ibv_context *vt_open(int nic) {
  int n = 0;
  struct ibv_device **l = ibv_get_device_list(&n);
  ck_assert_ptr_nonnull(l);
  ck_assert_int_gt(n, nic);
  struct ibv_context *c = ibv_open_device(l[nic]);
  ibv_free_device_list(l);
  ck_assert_ptr_nonnull(c);
  return c;
}

static void side(vt_side_t *x, int nic, const vt_opts_t *o) {
  memset(x, 0, sizeof *x);
  x->ctx = vt_open(nic);
  x->pd = ibv_alloc_pd(x->ctx);
  x->buf = calloc(1, VT_BUF);
  int access = o->mr_access
                   ? o->mr_access
                   : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  x->mr = ibv_reg_mr(x->pd, x->buf, VT_BUF, access);
  ck_assert_ptr_nonnull(x->mr);
  x->cq = ibv_create_cq(x->ctx, 1024, NULL, NULL, 0);
  struct ibv_qp_init_attr ia = {.send_cq = x->cq,
                                .recv_cq = x->cq,
                                .sq_sig_all = o->sq_sig_all,
                                .qp_type = o->qp_type ? o->qp_type : IBV_QPT_RC,
                                .cap = {.max_send_wr = 256,
                                        .max_recv_wr = 256,
                                        .max_send_sge = 2,
                                        .max_recv_sge = 2,
                                        .max_inline_data = (uint32_t)o->max_inline}};
  x->qp = ibv_create_qp(x->pd, &ia);
  ck_assert_ptr_nonnull(x->qp);
}

int vt_qp_init(struct ibv_qp *qp, const vt_opts_t *o) {
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_INIT,
      .port_num = 1,
      .qp_access_flags =
          o->qp_access ? o->qp_access : IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int vt_qp_rtr_rts(struct ibv_qp *qp, struct ibv_qp *peer, struct ibv_context *peer_ctx,
                  const vt_opts_t *o) {
  int rc_qp = qp->qp_type == IBV_QPT_RC, rc;
  union ibv_gid gid;
  ck_assert_int_eq(ibv_query_gid(peer_ctx, 1, 0, &gid), 0);
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = peer->qp_num;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = (uint8_t)(o->min_rnr_timer ? o->min_rnr_timer : 1);
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = gid;
  a.ah_attr.grh.hop_limit = 255;
  a.ah_attr.port_num = 1;
  int m = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if ((rc =
           ibv_modify_qp(qp, &a, rc_qp ? m | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : m)))
    return rc;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = (uint8_t)(o->timeout ? o->timeout : 14);
  a.retry_cnt = (uint8_t)o->retry_cnt;
  a.rnr_retry = (uint8_t)o->rnr_retry;
  a.max_rd_atomic = 1;
  m = IBV_QP_STATE | IBV_QP_SQ_PSN;
  return ibv_modify_qp(
      qp, &a,
      rc_qp ? m | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC
            : m);
}

int vt_connect(struct ibv_qp *qp, struct ibv_qp *peer, struct ibv_context *peer_ctx,
               const vt_opts_t *o) {
  int rc = vt_qp_init(qp, o);
  return rc ? rc : vt_qp_rtr_rts(qp, peer, peer_ctx, o);
}

void vt_pair(vt_side_t *s, vt_side_t *r, int a, int b, const vt_opts_t *o) {
  vt_pair_half(s, r, a, b, o);
  ck_assert_int_eq(vt_qp_rtr_rts(r->qp, s->qp, s->ctx, o), 0);
}

void vt_pair_half(vt_side_t *s, vt_side_t *r, int a, int b, const vt_opts_t *o) {
  side(s, a, o);
  side(r, b, o);
  ck_assert_int_eq(vt_connect(s->qp, r->qp, r->ctx, o), 0);
  ck_assert_int_eq(vt_qp_init(r->qp, o), 0);
}

void vt_side_free(vt_side_t *x) {
  ck_assert_int_eq(ibv_destroy_qp(x->qp), 0);
  ck_assert_int_eq(ibv_destroy_cq(x->cq), 0);
  ck_assert_int_eq(ibv_dereg_mr(x->mr), 0);
  ck_assert_int_eq(ibv_dealloc_pd(x->pd), 0);
  ck_assert_int_eq(ibv_close_device(x->ctx), 0);
  free(x->buf);
}

int vt_poll(struct ibv_cq *cq, struct ibv_wc *wc, int n, double timeout_s) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int got = 0;
  while (got < n) {
    int k = ibv_poll_cq(cq, n - got, wc + got);
    ck_assert_int_ge(k, 0);
    got += k;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9 > timeout_s) break;
    if (!k) usleep(200);
  }
  return got;
}

int vt_post(vt_side_t *s, int opcode, uint64_t wr_id, uint32_t loff, uint32_t len, uint64_t raddr,
            uint32_t rkey, int flags) {
  struct ibv_sge sge = {(uintptr_t)s->buf + loff, len, s->mr->lkey};
  struct ibv_send_wr wr = {.wr_id = wr_id,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = opcode,
                           .send_flags = (unsigned)flags},
                     *bad;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  wr.imm_data = 0x12345678;
  return ibv_post_send(s->qp, &wr, &bad);
}

int vt_post_recv(vt_side_t *r, uint64_t wr_id, uint32_t off, uint32_t len) {
  struct ibv_sge sge = {(uintptr_t)r->buf + off, len, r->mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = len ? 1 : 0}, *bad;
  return ibv_post_recv(r->qp, &wr, &bad);
}
