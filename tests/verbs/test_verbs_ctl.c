/* test_verbs_ctl.c: the provider's control path through the exported verbs — the node's devices
 * and ports as NCCLSIM_TOPO describes them, the GID, the extended query_port, ibv_modify_qp's
 * attribute-mask rules (mlx5's), MR registration checks, completion channels, and the private
 * flow lookup with mlx5dv_modify_qp_udp_sport. Runs with NCCLSIM_TOPO=...,nic=4x400, node 3. */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/mlx5dv.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ah_check.h"
#include "sim_fabric.h"
#include "ncclsim_verbs.h"
#include "vt_pair.h"

START_TEST(devices_and_ports) {
  int n = -1;
  struct ibv_device **l = ibv_get_device_list(&n);
  ck_assert_int_eq(n, 4);
  ck_assert_str_eq(ibv_get_device_name(l[2]), "mlx5_2");
  ck_assert_ptr_null(l[4]);
  ck_assert(mlx5dv_is_supported(l[0]));
  struct ibv_context *c = ibv_open_device(l[2]);
  ibv_free_device_list(l);
  ck_assert_ptr_eq(verbs_get_ctx(c) != NULL ? (void *)1 : NULL, (void *)1);
  struct ibv_device_attr da;
  ck_assert_int_eq(ibv_query_device(c, &da), 0);
  ck_assert_int_eq(da.phys_port_cnt, 1);
  ck_assert_int_ge(da.max_qp, 1024);
  struct ibv_port_attr pa;
  memset(&pa, 0x5a, sizeof pa);
  ck_assert_int_eq(ibv_query_port(c, 1, &pa), 0); /* verbs.h's inline: the extended op */
  ck_assert_int_eq(pa.state, IBV_PORT_ACTIVE);
  ck_assert_int_eq(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
  ck_assert_int_eq(pa.gid_tbl_len, 1);
  ck_assert_int_eq(pa.active_width, 2);   /* 4X */
  ck_assert_int_eq(pa.active_speed, 128); /* NDR: 4 x 100 = 400 Gb/s */
  ck_assert_int_eq(ibv_query_port(c, 2, &pa), EINVAL);
  union ibv_gid g;
  ck_assert_int_eq(ibv_query_gid(c, 1, 0, &g), 0);
  static const unsigned char want[16] = {0, 0, 0,    0,    0,  0, 0, 0,
                                         0, 0, 0xff, 0xff, 10, 0, 3, 2 * 4 + 1};
  ck_assert_mem_eq(g.raw, want, 16);
  ck_assert_int_ne(ibv_query_gid(c, 1, 1, &g), 0);
  __be16 pkey;
  ck_assert_int_eq(ibv_query_pkey(c, 1, 0, &pkey), 0);
  ck_assert_uint_eq(pkey, 0xffff);
  ck_assert_int_eq(ibv_close_device(c), 0);
}
END_TEST

static void qp_state_is(struct ibv_qp *qp, enum ibv_qp_state s) {
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr ia;
  ck_assert_int_eq(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
  ck_assert_int_eq(a.qp_state, s);
}

START_TEST(modify_qp_masks) {
  vt_opts_t o = {0};
  struct ibv_context *c = vt_open(0);
  struct ibv_pd *pd = ibv_alloc_pd(c);
  struct ibv_cq *cq = ibv_create_cq(c, 16, NULL, NULL, 0);
  struct ibv_qp_init_attr ia = {
      .send_cq = cq,
      .recv_cq = cq,
      .qp_type = IBV_QPT_RC,
      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp *qp = ibv_create_qp(pd, &ia), *peer = ibv_create_qp(pd, &ia);
  ck_assert_ptr_nonnull(qp);
  ck_assert_uint_ne(qp->qp_num, peer->qp_num);
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  ck_assert_int_eq(ibv_modify_qp(qp, &a, init & ~IBV_QP_PORT), EINVAL);  /* missing */
  ck_assert_int_eq(ibv_modify_qp(qp, &a, init | IBV_QP_SQ_PSN), EINVAL); /* extra */
  a.qp_state = IBV_QPS_RTS;
  ck_assert_int_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), EINVAL); /* RESET->RTS */
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 9;
  ck_assert_int_eq(ibv_modify_qp(qp, &a, init), EINVAL); /* no such port */
  a.port_num = 1;
  qp_state_is(qp, IBV_QPS_RESET);
  ck_assert_int_eq(ibv_modify_qp(qp, &a, init), 0);
  qp_state_is(qp, IBV_QPS_INIT);
  /* INIT->RTR without MIN_RNR_TIMER: EINVAL, and the QP stays in INIT */
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = peer->qp_num;
  a.max_dest_rd_atomic = 1;
  a.ah_attr.is_global = 1;
  ck_assert_int_eq(ibv_query_gid(c, 1, 0, &a.ah_attr.grh.dgid), 0);
  int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
            IBV_QP_MAX_DEST_RD_ATOMIC;
  ck_assert_int_eq(ibv_modify_qp(qp, &a, rtr), EINVAL);
  qp_state_is(qp, IBV_QPS_INIT);
  a.ah_attr.is_global = 0; /* RoCE needs the GRH */
  ck_assert_int_eq(ibv_modify_qp(qp, &a, rtr | IBV_QP_MIN_RNR_TIMER), EINVAL);
  a.ah_attr.is_global = 1;
  ck_assert_int_eq(ibv_modify_qp(qp, &a, rtr | IBV_QP_MIN_RNR_TIMER), 0);
  qp_state_is(qp, IBV_QPS_RTR);
  /* RTR->RTS without TIMEOUT fails; with it passes; CUR_STATE must be the real one */
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  int rts = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
            IBV_QP_MAX_QP_RD_ATOMIC;
  ck_assert_int_eq(ibv_modify_qp(qp, &a, rts & ~IBV_QP_TIMEOUT), EINVAL);
  a.cur_qp_state = IBV_QPS_INIT;
  ck_assert_int_eq(ibv_modify_qp(qp, &a, rts | IBV_QP_CUR_STATE), EINVAL);
  a.retry_cnt = 8;
  ck_assert_int_eq(ibv_modify_qp(qp, &a, rts), EINVAL); /* retry_cnt is 3 bits */
  a.retry_cnt = 7;
  ck_assert_int_eq(ibv_modify_qp(qp, &a, rts), 0);
  qp_state_is(qp, IBV_QPS_RTS);
  ck_assert_int_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT),
                   EINVAL); /* RTS->RTS: not TIMEOUT */
  a.min_rnr_timer = 3;
  ck_assert_int_eq(ibv_modify_qp(qp, &a, IBV_QP_MIN_RNR_TIMER), 0); /* no STATE: stays in RTS */
  a.qp_state = IBV_QPS_INIT;
  ck_assert_int_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL); /* RTS->INIT is illegal */
  a.qp_state = IBV_QPS_ERR;
  ck_assert_int_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT),
                   EINVAL); /* ->ERR: STATE only */
  ck_assert_int_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
  qp_state_is(qp, IBV_QPS_ERR);
  a.qp_state = IBV_QPS_RESET;
  ck_assert_int_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
  qp_state_is(qp, IBV_QPS_RESET);
  /* UC: INIT->RTR needs no MAX_DEST_RD_ATOMIC / MIN_RNR_TIMER, and refuses them */
  ia.qp_type = IBV_QPT_UC;
  struct ibv_qp *uc = ibv_create_qp(pd, &ia);
  ck_assert_ptr_nonnull(uc);
  ck_assert_int_eq(vt_connect(uc, peer, c, &o), 0);
  ck_assert_int_eq(ibv_destroy_qp(uc), 0);
  ck_assert_int_eq(ibv_destroy_qp(qp), 0);
  ck_assert_int_eq(ibv_destroy_qp(peer), 0);
  ck_assert_int_eq(ibv_destroy_cq(cq), 0);
  ck_assert_int_eq(ibv_dealloc_pd(pd), 0);
  ck_assert_int_eq(ibv_close_device(c), 0);
}
END_TEST

START_TEST(mr_registration) {
  struct ibv_context *c = vt_open(1);
  struct ibv_pd *pd = ibv_alloc_pd(c);
  static char b[4096];
  ck_assert_ptr_null(ibv_reg_mr(pd, b, sizeof b, IBV_ACCESS_REMOTE_WRITE)); /* needs LOCAL_WRITE */
  ck_assert_int_eq(errno, EINVAL);
  struct ibv_mr *m1 = ibv_reg_mr(pd, b, sizeof b, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *m2 = ibv_reg_mr_iova2(pd, b, sizeof b, 0x1000,
                                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
  ck_assert_ptr_nonnull(m1);
  ck_assert_ptr_nonnull(m2);
  ck_assert_uint_ne(m1->rkey, m2->rkey);
  ck_assert_uint_eq(m1->lkey, m1->rkey);
  errno = 0;
  ck_assert_ptr_null(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE));
  ck_assert_int_eq(errno, EOPNOTSUPP); /* NCCL's DMA-BUF probe */
  ck_assert_int_eq(ibv_dereg_mr(m1), 0);
  ck_assert_int_eq(ibv_dereg_mr(m2), 0);
  ck_assert_int_eq(ibv_dealloc_pd(pd), 0);
  ck_assert_int_eq(ibv_close_device(c), 0);
}
END_TEST

START_TEST(comp_channel) {
  vt_opts_t o = {0};
  vt_side_t s, r;
  vt_pair(&s, &r, 0, 1, &o);
  struct ibv_comp_channel *ch = ibv_create_comp_channel(r.ctx);
  /* a QP pair whose receive side completes on a CQ bound to the channel */
  struct ibv_cq *rcq = ibv_create_cq(r.ctx, 8, (void *)0x78, ch, 0);
  struct ibv_qp_init_attr ia = {
      .send_cq = rcq,
      .recv_cq = rcq,
      .qp_type = IBV_QPT_RC,
      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp *rq = ibv_create_qp(r.pd, &ia);
  struct ibv_qp_init_attr sa = ia;
  sa.send_cq = sa.recv_cq = s.cq;
  struct ibv_qp *sq = ibv_create_qp(s.pd, &sa);
  ck_assert_int_eq(vt_connect(sq, rq, r.ctx, &o), 0);
  ck_assert_int_eq(vt_connect(rq, sq, s.ctx, &o), 0);
  ck_assert_int_eq(ibv_req_notify_cq(rcq, 0), 0);
  struct ibv_sge sge = {(uintptr_t)r.buf, 64, r.mr->lkey};
  struct ibv_recv_wr rw = {.wr_id = 5, .sg_list = &sge, .num_sge = 1}, *rbad;
  ck_assert_int_eq(ibv_post_recv(rq, &rw, &rbad), 0);
  struct ibv_sge ss = {(uintptr_t)s.buf, 64, s.mr->lkey};
  struct ibv_send_wr sw = {.wr_id = 6,
                           .sg_list = &ss,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     *sbad;
  ck_assert_int_eq(ibv_post_send(sq, &sw, &sbad), 0);
  struct ibv_cq *ev_cq;
  void *ev_ctx;
  ck_assert_int_eq(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0); /* blocks until the receive lands */
  ck_assert_ptr_eq(ev_cq, rcq);
  ck_assert_ptr_eq(ev_ctx, (void *)0x78);
  ibv_ack_cq_events(ev_cq, 1);
  struct ibv_wc wc;
  ck_assert_int_eq(vt_poll(rcq, &wc, 1, 5), 1);
  ck_assert_uint_eq(wc.wr_id, 5);
  ck_assert_int_eq(wc.opcode, IBV_WC_RECV);
  ck_assert_int_eq(vt_poll(s.cq, &wc, 1, 5), 1);
  ck_assert_uint_eq(wc.wr_id, 6);
  ck_assert_int_eq(ibv_destroy_qp(sq), 0);
  ck_assert_int_eq(ibv_destroy_qp(rq), 0);
  ck_assert_int_eq(ibv_destroy_cq(rcq), 0);
  ck_assert_int_eq(ibv_destroy_comp_channel(ch), 0);
  vt_side_free(&s);
  vt_side_free(&r);
}
END_TEST

START_TEST(flow_and_udp_sport) {
  vt_opts_t o = {0};
  vt_side_t s, r;
  vt_pair(&s, &r, 1, 3, &o);
  sim_fabric_flow_t f;
  ck_assert_int_eq(ncclsimVerbsQpFlow(s.qp, &f), 0);
  ck_assert_int_eq(f.src.node, 3);
  ck_assert_int_eq(f.src.nic, 1);
  ck_assert_int_eq(f.src.port, 1);
  ck_assert_int_eq(f.dst.nic, 3);
  ck_assert_uint_ge(f.sport, 0xC000);
  ck_assert_int_eq(mlx5dv_modify_qp_udp_sport(s.qp, 0xD00D), 0);
  ck_assert_int_eq(ncclsimVerbsQpFlow(s.qp, &f), 0);
  ck_assert_uint_eq(f.sport, 0xD00D);
  ck_assert_int_eq(
      vt_post(&s, IBV_WR_RDMA_WRITE, 1, 0, 1000, (uintptr_t)r.buf, r.mr->rkey, IBV_SEND_SIGNALED),
      0);
  struct ibv_wc wc;
  ck_assert_int_eq(vt_poll(s.cq, &wc, 1, 5), 1);
  ck_assert_uint_eq(ncclsimVerbsQpTxBytes(s.qp), 1000);
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RESET};
  ck_assert_int_eq(ibv_modify_qp(s.qp, &a, IBV_QP_STATE), 0);
  ck_assert_int_eq(ncclsimVerbsQpFlow(s.qp, &f), -1);
  ck_assert_int_eq(mlx5dv_modify_qp_udp_sport(s.qp, 0xD00E), EINVAL); /* only in RTS */
  vt_side_free(&s);
  vt_side_free(&r);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {devices_and_ports, modify_qp_masks, mr_registration, comp_channel,
                                flow_and_udp_sport};
  int rc = ah_check_main("verbs_ctl", (ah_check_case_t){.name = "ctl", .timeout = 30}, tests,
                         AH_CHECK_COUNT(tests));
  sim_fabric_unlink(
      getenv("NCCLSIM_FABRIC_SHM")); /* the job's link state: the launcher's to remove */
  return rc;
}
