/* test_verbs_fabric.c: RC failure semantics on sim/fabric's links. The test attaches its own fabric
 * to the shared link state the provider uses (NCCLSIM_FABRIC_SHM) and takes a NIC port down:
 * the QP whose path crosses it fails its oldest WR with RETRY_EXC_ERR after the scaled timeout
 * (4.096 us x 2^timeout x (retry_cnt + 1) x NCCLSIM_VERBS_TIMEOUT_SCALE), flushes the rest, its
 * peer's receives are flushed and PORT_ERR/PORT_ACTIVE are raised, while a QP on another path
 * never sees an error; a port that comes back before the timeout loses and repeats nothing; a
 * path down only on the way back (the ACKs') fails the requester the same way, its data placed. */
#include <arpa/inet.h>
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ah_check.h"
#include "sim_fabric.h"
#include "vt_pair.h"

static sim_fabric_t *fab;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Sets both links of node 0's NIC `nic`, port 1 (to its leaf and back). */
static void port_set(int nic, double fraction) {
  int n = sim_fabric_link_count(fab), set = 0;
  for (int l = 0; l < n; l++) {
    sim_fabric_link_t li;
    ck_assert_int_eq(sim_fabric_link_info(fab, l, &li), 0);
    if ((li.kind == SIM_FABRIC_LINK_NIC_UP || li.kind == SIM_FABRIC_LINK_NIC_DOWN) &&
        li.ep.node == 0 && li.ep.nic == nic && li.ep.port == 1) {
      ck_assert_int_eq(sim_fabric_set_link(fab, l, fraction), 0);
      set++;
    }
  }
  ck_assert_int_eq(set, 2);
}

/* Sets one link of node 0's NIC `nic`, port 1: SIM_FABRIC_LINK_NIC_UP (to its leaf) or _DOWN. */
static void link_set(int nic, int kind, double fraction) {
  int n = sim_fabric_link_count(fab), set = 0;
  for (int l = 0; l < n; l++) {
    sim_fabric_link_t li;
    ck_assert_int_eq(sim_fabric_link_info(fab, l, &li), 0);
    if (li.kind == kind && li.ep.node == 0 && li.ep.nic == nic && li.ep.port == 1) {
      ck_assert_int_eq(sim_fabric_set_link(fab, l, fraction), 0);
      set++;
    }
  }
  ck_assert_int_eq(set, 1);
}

static void setup(void) {
  char err[256];
  fab = sim_fabric_create(getenv("NCCLSIM_TOPO"), NULL, 0, err, sizeof err);
  ck_assert_msg(fab != NULL, "%s", err);
  ck_assert_msg(sim_fabric_attach(fab, getenv("NCCLSIM_FABRIC_SHM"), err, sizeof err) == 0, "%s",
                err);
  for (int nic = 0; nic < 4; nic++) port_set(nic, 1);
}

static void teardown(void) {
  sim_fabric_unlink(getenv("NCCLSIM_FABRIC_SHM"));
  sim_fabric_free(fab);
}

static void write_n(vt_side_t *s, vt_side_t *r, uint64_t id0, int n, int signal_last) {
  for (int i = 0; i < n; i++)
    ck_assert_int_eq(vt_post(s, IBV_WR_RDMA_WRITE, id0 + (uint64_t)i, (uint32_t)i * 1000, 1000,
                             (uintptr_t)r->buf + (uint64_t)i * 1000, r->mr->rkey,
                             signal_last && i == n - 1 ? IBV_SEND_SIGNALED : 0),
                     0);
}

static void next_async(struct ibv_context *c, enum ibv_event_type want) {
  struct ibv_async_event ev;
  ck_assert_int_eq(ibv_get_async_event(c, &ev), 0);
  ck_assert_msg(ev.event_type == want, "async event %s, want %s", ibv_event_type_str(ev.event_type),
                ibv_event_type_str(want));
  if (want == IBV_EVENT_PORT_ERR || want == IBV_EVENT_PORT_ACTIVE)
    ck_assert_int_eq(ev.element.port_num, 1);
  ibv_ack_async_event(&ev);
}

START_TEST(path_down_retry_exceeded) {
  /* timeout 14: 67 ms a try, x 3 tries = 201 ms, x NCCLSIM_VERBS_TIMEOUT_SCALE 0.25 = 50 ms */
  vt_opts_t o = {.timeout = 14, .retry_cnt = 2, .rnr_retry = 7};
  vt_side_t s, r, s2, r2;
  vt_pair(&s, &r, 0, 1, &o);   /* crosses node0/mlx5_0:1 */
  vt_pair(&s2, &r2, 2, 3, &o); /* another path */
  for (int i = 0; i < 3; i++) ck_assert_int_eq(vt_post_recv(&r, 70 + (uint64_t)i, 0, 64), 0);
  memset(s.buf, 0x3c, 8000);
  port_set(0, 0);
  double t0 = now_s();
  write_n(&s, &r, 1, 4, 1);
  write_n(&s2, &r2, 101, 8, 1); /* the other path works meanwhile */
  struct ibv_wc wc[8];
  ck_assert_int_eq(vt_poll(s2.cq, wc, 1, 5), 1);
  ck_assert_int_eq(wc[0].status, IBV_WC_SUCCESS);
  ck_assert_int_eq(vt_poll(s.cq, wc, 4, 5), 4);
  double dt = now_s() - t0;
  ck_assert_msg(dt >= 0.045 && dt < 1.5, "RETRY_EXC_ERR after %.3f s, want 0.05 (scaled)", dt);
  ck_assert_int_eq(wc[0].status, IBV_WC_RETRY_EXC_ERR); /* the oldest, though unsignalled */
  ck_assert_uint_eq(wc[0].wr_id, 1);
  ck_assert_uint_eq(wc[0].vendor_err, 0x81);
  for (int i = 1; i < 4; i++) {
    ck_assert_int_eq(wc[i].status, IBV_WC_WR_FLUSH_ERR);
    ck_assert_uint_eq(wc[i].wr_id, 1 + (uint64_t)i);
  }
  ck_assert_int_eq(r.buf[0], 0);                /* nothing crossed the dead port */
  ck_assert_int_eq(vt_poll(r.cq, wc, 3, 5), 3); /* the peer's receives flushed */
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(wc[i].status, IBV_WC_WR_FLUSH_ERR);
    ck_assert_uint_eq(wc[i].wr_id, 70 + (uint64_t)i);
  }
  next_async(s.ctx, IBV_EVENT_PORT_ERR);
  ck_assert_int_eq(vt_post(&s, IBV_WR_RDMA_WRITE, 9, 0, 8, (uintptr_t)r.buf, r.mr->rkey, 0), 0);
  ck_assert_int_eq(vt_poll(s.cq, wc, 1, 5), 1);
  ck_assert_int_eq(wc[0].status, IBV_WC_WR_FLUSH_ERR); /* the QP stays in ERR */
  port_set(0, 1);
  next_async(s.ctx, IBV_EVENT_PORT_ACTIVE);
  /* the other pair kept working and saw no error, before or after */
  write_n(&s2, &r2, 201, 8, 1);
  ck_assert_int_eq(vt_poll(s2.cq, wc, 1, 5), 1);
  ck_assert_int_eq(wc[0].status, IBV_WC_SUCCESS);
  ck_assert_int_eq(ibv_poll_cq(s2.cq, 8, wc) + ibv_poll_cq(r2.cq, 8, wc), 0);
  vt_side_free(&s);
  vt_side_free(&r);
  vt_side_free(&s2);
  vt_side_free(&r2);
}
END_TEST

START_TEST(reply_path_down_retry_exceeded) {
  /* only the way into mlx5_0 is down: the WRITEs reach mlx5_1 and are placed, their ACKs cannot
   * come back; the requester's transport timer must still run out (it waited for ever before) */
  vt_opts_t o = {.timeout = 14, .retry_cnt = 2, .rnr_retry = 7};
  vt_side_t s, r;
  vt_pair(&s, &r, 0, 1, &o);
  memset(s.buf, 0x5a, 4000);
  link_set(0, SIM_FABRIC_LINK_NIC_DOWN, 0);
  double t0 = now_s();
  write_n(&s, &r, 1, 4, 1);
  struct ibv_wc wc[4];
  ck_assert_int_eq(vt_poll(s.cq, wc, 4, 5), 4);
  double dt = now_s() - t0;
  ck_assert_msg(dt >= 0.045 && dt < 1.5, "RETRY_EXC_ERR after %.3f s, want 0.05 (scaled)", dt);
  ck_assert_int_eq(wc[0].status, IBV_WC_RETRY_EXC_ERR);
  ck_assert_uint_eq(wc[0].wr_id, 1);
  ck_assert_int_eq((unsigned char)r.buf[0], 0x5a); /* the requests crossed: only replies were cut */
  link_set(0, SIM_FABRIC_LINK_NIC_DOWN, 1);
  vt_side_free(&s);
  vt_side_free(&r);
}
END_TEST

START_TEST(path_back_before_timeout_loses_nothing) {
  /* timeout 18: 1.07 s a try, x 8 tries x 0.25 = 2.1 s; the outage lasts 0.3 s */
  vt_opts_t o = {.timeout = 18, .retry_cnt = 7, .rnr_retry = 7};
  vt_side_t s, r;
  vt_pair(&s, &r, 0, 1, &o);
  for (int i = 0; i < 8000; i++) s.buf[i] = (unsigned char)(i * 7 + 1);
  memcpy(s.buf + 9000, "after the outage", 17);
  ck_assert_int_eq(vt_post_recv(&r, 80, 20000, 64), 0);
  port_set(0, 0);
  write_n(&s, &r, 1, 8, 0);
  ck_assert_int_eq(vt_post(&s, IBV_WR_SEND_WITH_IMM, 9, 9000, 17, 0, 0, IBV_SEND_SIGNALED), 0);
  usleep(300000);
  struct ibv_wc wc[4];
  ck_assert_int_eq(ibv_poll_cq(s.cq, 4, wc), 0);
  ck_assert_int_eq(ibv_poll_cq(r.cq, 4, wc), 0);
  ck_assert_int_eq(r.buf[1], 0); /* held back while the port was down */
  port_set(0, 1);
  ck_assert_int_eq(vt_poll(s.cq, wc, 1, 5), 1);
  ck_assert_int_eq(wc[0].status, IBV_WC_SUCCESS);
  ck_assert_uint_eq(wc[0].wr_id, 9);
  ck_assert_int_eq(vt_poll(r.cq, wc, 1, 5), 1);
  ck_assert_int_eq(wc[0].status, IBV_WC_SUCCESS);
  ck_assert_uint_eq(wc[0].byte_len, 17);
  ck_assert_uint_eq(wc[0].imm_data, 0x12345678);
  ck_assert_str_eq((char *)r.buf + 20000, "after the outage");
  ck_assert_mem_eq(r.buf, s.buf, 8000);
  usleep(20000);
  ck_assert_int_eq(ibv_poll_cq(s.cq, 4, wc) + ibv_poll_cq(r.cq, 4, wc), 0); /* exactly once */
  next_async(s.ctx, IBV_EVENT_PORT_ERR);
  next_async(s.ctx, IBV_EVENT_PORT_ACTIVE);
  vt_side_free(&s);
  vt_side_free(&r);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {path_down_retry_exceeded, path_back_before_timeout_loses_nothing,
                                reply_path_down_retry_exceeded};
  return ah_check_main(
      "verbs_fabric",
      (ah_check_case_t){.name = "fabric", .timeout = 30, .setup = setup, .teardown = teardown},
      tests, AH_CHECK_COUNT(tests));
}
