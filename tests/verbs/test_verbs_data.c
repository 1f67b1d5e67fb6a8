/* test_verbs_data.c: RC semantics of the provider's data path, two QPs on two NICs of one process:
 * remote key, range and access checks (REM_ACCESS_ERR, and the responder's QP_ACCESS_ERR event),
 * RNR waits and RNR retry exhaustion, unsignalled WRs, flushing in ERR, a vanished peer timing out
 * with RETRY_EXC_ERR, NCCL's 0-byte WRITE_WITH_IMM into an SGE-less receive, and its loopback
 * flush READ. */
#include <arpa/inet.h>
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ah_check.h"
#include "sim_fabric.h"
#include "vt_pair.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void expect_status(vt_side_t *x, uint64_t wr_id, enum ibv_wc_status st) {
  struct ibv_wc wc;
  ck_assert_int_eq(vt_poll(x->cq, &wc, 1, 10), 1);
  ck_assert_msg(wc.wr_id == wr_id && wc.status == st, "wr_id %llu status %s, want %llu %s",
                (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
                (unsigned long long)wr_id, ibv_wc_status_str(st));
  ck_assert_uint_eq(wc.qp_num, x->qp->qp_num);
}

/* One bad remote access of each kind on a fresh pair. */
static void remote_access_case(int kind) {
  vt_opts_t o = {.rnr_retry = 7};
  if (kind == 2)
    o.mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ; /* no REMOTE_WRITE */
  vt_side_t s, r;
  vt_pair(&s, &r, 0, 1, &o);
  uint64_t raddr = (uintptr_t)r.buf;
  uint32_t rkey = r.mr->rkey;
  int op = IBV_WR_RDMA_WRITE;
  struct ibv_mr *wo = NULL;
  if (kind == 0) rkey ^= 0x100;                               /* no such key */
  if (kind == 1) raddr += VT_BUF - 100;                       /* runs past the MR's end */
  if (kind == 3) rkey = s.mr->rkey, raddr = (uintptr_t)s.buf; /* the other device's key */
  if (kind == 4) { /* READ from a MR without REMOTE_READ */
    wo = ibv_reg_mr(r.pd, r.buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ck_assert_ptr_nonnull(wo);
    rkey = wo->rkey;
    op = IBV_WR_RDMA_READ;
  }
  memset(r.buf, 0, 4096);
  memset(s.buf, 0xab, 4096);
  ck_assert_int_eq(vt_post(&s, op, 11, 0, 200, raddr, rkey, IBV_SEND_SIGNALED), 0);
  ck_assert_int_eq(vt_post(&s, IBV_WR_RDMA_WRITE, 12, 0, 8, (uintptr_t)r.buf, r.mr->rkey, 0), 0);
  expect_status(&s, 11, IBV_WC_REM_ACCESS_ERR);
  expect_status(&s, 12, IBV_WC_WR_FLUSH_ERR); /* error completions are reported even unsignalled */
  ck_assert_int_eq(r.buf[0], 0);              /* nothing was placed */
  struct ibv_async_event ev;
  ck_assert_int_eq(ibv_get_async_event(r.ctx, &ev), 0);
  ck_assert_int_eq(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
  ck_assert_ptr_eq(ev.element.qp, r.qp);
  ibv_ack_async_event(&ev);
  if (wo) ck_assert_int_eq(ibv_dereg_mr(wo), 0);
  vt_side_free(&s);
  vt_side_free(&r);
}

START_TEST(rem_access_bad_key) { remote_access_case(0); }
END_TEST
START_TEST(rem_access_out_of_range) { remote_access_case(1); }
END_TEST
START_TEST(rem_access_no_write_right) { remote_access_case(2); }
END_TEST
START_TEST(rem_access_other_device_key) { remote_access_case(3); }
END_TEST
START_TEST(rem_access_no_read_right) { remote_access_case(4); }
END_TEST

START_TEST(rnr_retry_exhausted) {
  vt_opts_t o = {.rnr_retry = 3, .min_rnr_timer = 5 /* 0.06 ms */};
  vt_side_t s, r;
  vt_pair(&s, &r, 0, 1, &o);
  ck_assert_int_eq(vt_post(&s, IBV_WR_SEND, 21, 0, 64, 0, 0, IBV_SEND_SIGNALED), 0);
  ck_assert_int_eq(vt_post(&s, IBV_WR_SEND, 22, 0, 64, 0, 0, IBV_SEND_SIGNALED), 0);
  expect_status(&s, 21, IBV_WC_RNR_RETRY_EXC_ERR);
  expect_status(&s, 22, IBV_WC_WR_FLUSH_ERR);
  /* the peer was told (the simulation's shortcut): a receive posted now is flushed */
  double t0 = now_s();
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr ia;
  do ck_assert_int_eq(ibv_query_qp(r.qp, &a, IBV_QP_STATE, &ia), 0);
  while (a.qp_state != IBV_QPS_ERR && now_s() - t0 < 5 && usleep(1000) == 0);
  ck_assert_int_eq(a.qp_state, IBV_QPS_ERR);
  ck_assert_int_eq(vt_post_recv(&r, 23, 0, 64), 0);
  expect_status(&r, 23, IBV_WC_WR_FLUSH_ERR);
  vt_side_free(&s);
  vt_side_free(&r);
}
END_TEST

START_TEST(rnr_waits_for_a_receive) {
  vt_opts_t o = {.rnr_retry = 7, .min_rnr_timer = 14 /* 1.28 ms */};
  vt_side_t s, r;
  vt_pair(&s, &r, 0, 1, &o);
  memcpy(s.buf, "hello, rnr", 11);
  ck_assert_int_eq(vt_post(&s, IBV_WR_SEND_WITH_IMM, 31, 0, 11, 0, 0, IBV_SEND_SIGNALED), 0);
  usleep(50000); /* tens of RNR NAKs */
  struct ibv_wc wc;
  ck_assert_int_eq(ibv_poll_cq(s.cq, 1, &wc), 0);
  ck_assert_int_eq(vt_post_recv(&r, 32, 100, 64), 0);
  expect_status(&s, 31, IBV_WC_SUCCESS);
  ck_assert_int_eq(vt_poll(r.cq, &wc, 1, 5), 1);
  ck_assert_int_eq(wc.status, IBV_WC_SUCCESS);
  ck_assert_int_eq(wc.opcode, IBV_WC_RECV);
  ck_assert_uint_eq(wc.byte_len, 11);
  ck_assert(wc.wc_flags & IBV_WC_WITH_IMM);
  ck_assert_uint_eq(wc.imm_data, 0x12345678);
  ck_assert_str_eq((char *)r.buf + 100, "hello, rnr");
  ck_assert_int_eq(ibv_poll_cq(r.cq, 1, &wc), 0); /* exactly once */
  vt_side_free(&s);
  vt_side_free(&r);
}
END_TEST

START_TEST(unsignalled_wrs_complete_silently) {
  for (int sig_all = 0; sig_all < 2; sig_all++) {
    vt_opts_t o = {.sq_sig_all = sig_all};
    vt_side_t s, r;
    vt_pair(&s, &r, 2, 3, &o);
    for (int i = 0; i < 10; i++) {
      s.buf[i * 100] = (unsigned char)(i + 1);
      ck_assert_int_eq(
          vt_post(&s, IBV_WR_RDMA_WRITE, (uint64_t)i, (uint32_t)i * 100, 100,
                  (uintptr_t)r.buf + (uint64_t)i * 100, r.mr->rkey, i == 9 ? IBV_SEND_SIGNALED : 0),
          0);
    }
    struct ibv_wc wc[16];
    int want = sig_all ? 10 : 1;
    ck_assert_int_eq(vt_poll(s.cq, wc, want, 5), want);
    if (sig_all)
      for (int i = 0; i < 10; i++) ck_assert_uint_eq(wc[i].wr_id, (uint64_t)i);
    struct ibv_wc extra;
    usleep(20000);
    ck_assert_int_eq(ibv_poll_cq(s.cq, 1, &extra), 0);
    if (!sig_all) ck_assert_uint_eq(wc[0].wr_id, 9); /* only the signalled one */
    for (int i = 0; i < 10; i++) ck_assert_int_eq(r.buf[i * 100], i + 1); /* every WR was placed */
    vt_side_free(&s);
    vt_side_free(&r);
  }
}
END_TEST

START_TEST(flush_in_err) {
  vt_opts_t o = {0};
  vt_side_t s, r;
  vt_pair(&s, &r, 0, 1, &o);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(vt_post_recv(&r, 40 + (uint64_t)i, 0, 64), 0);
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
  ck_assert_int_eq(ibv_modify_qp(r.qp, &a, IBV_QP_STATE), 0);
  struct ibv_wc wc[4];
  ck_assert_int_eq(vt_poll(r.cq, wc, 3, 5), 3);
  for (int i = 0; i < 3; i++) {
    ck_assert_uint_eq(wc[i].wr_id, 40 + (uint64_t)i);
    ck_assert_int_eq(wc[i].status, IBV_WC_WR_FLUSH_ERR);
  }
  ck_assert_int_eq(vt_post(&r, IBV_WR_RDMA_WRITE, 44, 0, 8, (uintptr_t)s.buf, s.mr->rkey, 0), 0);
  expect_status(&r, 44, IBV_WC_WR_FLUSH_ERR); /* posting in ERR: flushed, even unsignalled */
  a.qp_state = IBV_QPS_RESET;
  ck_assert_int_eq(ibv_modify_qp(r.qp, &a, IBV_QP_STATE), 0);
  ck_assert_int_ne(vt_post(&r, IBV_WR_RDMA_WRITE, 45, 0, 8, (uintptr_t)s.buf, s.mr->rkey, 0), 0);
  vt_side_free(&s);
  vt_side_free(&r);
}
END_TEST

START_TEST(vanished_peer_times_out) {
  /* timeout 12 = 16.8 ms per try, x (retry_cnt 2 + 1) = 50 ms */
  vt_opts_t o = {.timeout = 12, .retry_cnt = 2};
  vt_side_t s, r;
  vt_pair(&s, &r, 0, 1, &o);
  ck_assert_int_eq(ibv_destroy_qp(r.qp), 0);
  r.qp = NULL;
  double t0 = now_s();
  ck_assert_int_eq(
      vt_post(&s, IBV_WR_RDMA_WRITE, 51, 0, 8, (uintptr_t)r.buf, r.mr->rkey, IBV_SEND_SIGNALED), 0);
  ck_assert_int_eq(
      vt_post(&s, IBV_WR_RDMA_WRITE, 52, 0, 8, (uintptr_t)r.buf, r.mr->rkey, IBV_SEND_SIGNALED), 0);
  expect_status(&s, 51, IBV_WC_RETRY_EXC_ERR);
  double dt = now_s() - t0;
  ck_assert_msg(dt >= 0.045 && dt < 3, "RETRY_EXC_ERR after %.3f s, want about 0.05", dt);
  expect_status(&s, 52, IBV_WC_WR_FLUSH_ERR);
  vt_side_free(&s);
  ibv_destroy_cq(r.cq);
  ibv_dereg_mr(r.mr);
  ibv_dealloc_pd(r.pd);
  ibv_close_device(r.ctx);
  free(r.buf);
}
END_TEST

START_TEST(zero_byte_write_imm_sgeless_recv) {
  vt_opts_t o = {0};
  vt_side_t s, r;
  vt_pair(&s, &r, 0, 1, &o);
  ck_assert_int_eq(vt_post_recv(&r, 61, 0, 0), 0); /* SGE-less, as NCCL posts them */
  struct ibv_send_wr wr = {.wr_id = 62,
                           .num_sge = 0,
                           .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                           .send_flags = IBV_SEND_SIGNALED,
                           .imm_data = htonl(77)},
                     *bad;
  ck_assert_int_eq(ibv_post_send(s.qp, &wr, &bad), 0); /* rkey and address 0 */
  expect_status(&s, 62, IBV_WC_SUCCESS);
  struct ibv_wc wc;
  ck_assert_int_eq(vt_poll(r.cq, &wc, 1, 5), 1);
  ck_assert_int_eq(wc.status, IBV_WC_SUCCESS);
  ck_assert_int_eq(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  ck_assert_uint_eq(wc.byte_len, 0);
  ck_assert_uint_eq(ntohl(wc.imm_data), 77);
  ck_assert_uint_eq(wc.wr_id, 61);
  vt_side_free(&s);
  vt_side_free(&r);
}
END_TEST

/* A requester in RTS before its responder reaches RTR (each side moves on its own schedule):
 * the WRITE waits, then completes once, when the responder is ready... */
START_TEST(responder_late_to_rtr) {
  vt_opts_t o = {.timeout = 18, .retry_cnt = 7};
  vt_side_t s, r;
  vt_pair_half(&s, &r, 0, 1, &o);
  memcpy(s.buf, "late but whole", 15);
  ck_assert_int_eq(
      vt_post(&s, IBV_WR_RDMA_WRITE, 91, 0, 15, (uintptr_t)r.buf, r.mr->rkey, IBV_SEND_SIGNALED),
      0);
  usleep(50000);
  struct ibv_wc wc;
  ck_assert_int_eq(ibv_poll_cq(s.cq, 1, &wc), 0);
  ck_assert_int_eq(r.buf[0], 0);
  ck_assert_int_eq(vt_qp_rtr_rts(r.qp, s.qp, s.ctx, &o), 0);
  expect_status(&s, 91, IBV_WC_SUCCESS);
  ck_assert_str_eq((char *)r.buf, "late but whole");
  vt_side_free(&s);
  vt_side_free(&r);
}
END_TEST

/* ...and fails with RETRY_EXC_ERR when the responder never gets there (16.8 ms x 3 tries). */
START_TEST(responder_never_ready) {
  vt_opts_t o = {.timeout = 12, .retry_cnt = 2};
  vt_side_t s, r;
  vt_pair_half(&s, &r, 0, 1, &o);
  ck_assert_int_eq(vt_post(&s, IBV_WR_RDMA_WRITE, 92, 0, 15, (uintptr_t)r.buf, r.mr->rkey, 0), 0);
  expect_status(&s, 92, IBV_WC_RETRY_EXC_ERR);
  ck_assert_int_eq(r.buf[0], 0);
  vt_side_free(&s);
  vt_side_free(&r);
}
END_TEST

/* NCCL's flush QP: connected to itself (its own GID and QP number), a 1-byte signalled READ. */
START_TEST(loopback_read) {
  vt_opts_t o = {.qp_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ};
  vt_side_t s, unused;
  vt_pair(&s, &unused, 0, 1, &o);
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RESET};
  ck_assert_int_eq(ibv_modify_qp(s.qp, &a, IBV_QP_STATE), 0);
  ck_assert_int_eq(vt_connect(s.qp, s.qp, s.ctx, &o), 0);
  s.buf[5000] = 0x5e;
  s.buf[0] = 0;
  ck_assert_int_eq(vt_post(&s, IBV_WR_RDMA_READ, 0x1000, 0, 1, (uintptr_t)s.buf + 5000, s.mr->rkey,
                           IBV_SEND_SIGNALED),
                   0);
  struct ibv_wc wc;
  ck_assert_int_eq(vt_poll(s.cq, &wc, 1, 5), 1);
  ck_assert_int_eq(wc.status, IBV_WC_SUCCESS);
  ck_assert_int_eq(wc.opcode, IBV_WC_RDMA_READ);
  ck_assert_uint_eq(wc.wr_id, 0x1000);
  ck_assert_int_eq(s.buf[0], 0x5e);
  vt_side_free(&s);
  vt_side_free(&unused);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {rem_access_bad_key,
                                rem_access_out_of_range,
                                rem_access_no_write_right,
                                rem_access_other_device_key,
                                rem_access_no_read_right,
                                rnr_retry_exhausted,
                                rnr_waits_for_a_receive,
                                unsignalled_wrs_complete_silently,
                                flush_in_err,
                                vanished_peer_times_out,
                                zero_byte_write_imm_sgeless_recv,
                                loopback_read,
                                responder_late_to_rtr,
                                responder_never_ready};
  int rc = ah_check_main("verbs_data", (ah_check_case_t){.name = "data", .timeout = 30}, tests,
                         AH_CHECK_COUNT(tests));
  sim_fabric_unlink(
      getenv("NCCLSIM_FABRIC_SHM")); /* the job's link state: the launcher's to remove */
  return rc;
}
