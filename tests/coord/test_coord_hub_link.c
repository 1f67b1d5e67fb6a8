/* The hub's slow-link diagnosis (coordinator/ah_coord_hub_link.c) live on 127.0.0.1: 6 ranks in 4
 * processes (two processes drive two GPUs each) announce their queue pairs, a ring over 2 NICs per
 * rank, and send progress records and windows once a second; the cable from leaf 5 to spine 1
 * runs at 3%, so the two connections through it do. The hub pairs each sending end with its
 * peer's receiving end, makes them ranks by process and GPU, and sends every process the findings
 * naming the ranks and the cable (tied with the NIC port it feeds, which carries no other
 * traffic); a malformed LINK_QP is refused by name and its connection dropped. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "ah_check.h"
#include "ah_coord_link.h"
#include "coord_test_util.h"

#define RANKS 6
#define PROCS 4
#define NICS 2
static const int proc_of[RANKS] = {0, 0, 1, 2, 2, 3}; /* processes 0 and 2 hold two ranks */

static void nic_gid(uint8_t g[16], int r, int k) {
  memset(g, 0, 16);
  g[10] = g[11] = 0xff;
  g[12] = 10, g[13] = 0, g[14] = (uint8_t)r, g[15] = (uint8_t)(4 * k + 1);
}
static uint32_t send_qpn(int r, int k) { return (uint32_t)(0x100 + r * 16 + k); }
static uint32_t recv_qpn(int r, int k) { return (uint32_t)(0x100 + r * 16 + 8 + k); }
static uint16_t gpu_of(int r) { return (uint16_t)(r == 1 || r == 4 ? 1 : 0); }

/* Rank r's queue pairs: NIC k sends to rank r + 1 over spine k (from leaf r, to leaf r + 1). */
static void announce(ah_coord_t *c, int r) {
  ah_link_qp_t q[2 * NICS];
  memset(q, 0, sizeof q);
  int next = (r + 1) % RANKS, prev = (r + RANKS - 1) % RANKS;
  for (int k = 0; k < NICS; k++) {
    ah_link_qp_t *s = &q[k], *v = &q[NICS + k];
    nic_gid(s->lgid, r, k), nic_gid(s->rgid, next, k);
    s->lqpn = send_qpn(r, k), s->rqpn = recv_qpn(next, k), s->role = AH_LINK_SENDER;
    s->src_leaf = (uint16_t)r, s->spine = (uint16_t)k, s->dst_leaf = (uint16_t)next;
    s->tx_port = s->rx_port = 1;
    nic_gid(v->lgid, r, k), nic_gid(v->rgid, prev, k);
    v->lqpn = recv_qpn(r, k), v->rqpn = send_qpn(prev, k), v->role = AH_LINK_RECEIVER;
    v->src_leaf = v->spine = v->dst_leaf = AH_LINK_NONE;
    for (ah_link_qp_t *x = s; x; x = x == s ? v : NULL) {
      x->gpu = gpu_of(r), x->port = 1, x->sport = (uint16_t)(0xc000 + k);
      snprintf(x->dev, sizeof x->dev, "mlx5_%d", k);
    }
  }
  ck_assert_int_eq(ah_coord_link_qps(c, 9000u + (uint32_t)proc_of[r], q, 2 * NICS), 0);
}

START_TEST(a_slow_connection_is_named_to_every_process) {
  log_start();
  ah_coord_stamp_t st;
  ah_coord_hub_t *hub = hub_start_test(&st);
  ck_assert_ptr_nonnull(hub);
  ah_coord_t *cs[PROCS];
  const uint64_t comm = 0x11c4;
  ck_assert_int_eq(clients_join_complete(&st, cs, PROCS, proc_of, RANKS, comm), 0);
  for (int r = 0; r < RANKS; r++) announce(cs[proc_of[r]], r);
  int found = 0;
  /* A record every 250 ms: the hub's hang bound is 1 s (hub_start_test), which a loaded machine's
   * record a second overran (every rank "hung" in the broadcast, found before the slow link). */
  for (int tick = 0; tick < 48 && !found; tick++) {
    for (int r = 0; r < RANKS; r++) {
      ah_health_rec_t rec = {.rank = (uint32_t)r,
                             .pid = 9000u + (uint32_t)proc_of[r],
                             .gpu = gpu_of(r),
                             .state = AH_HEALTH_BUSY,
                             .nkeys = 1};
      rec.keys[0] = (ah_health_key_t){0, 20, 10u * (uint64_t)tick};
      ck_assert_int_eq(ah_coord_progress(cs[proc_of[r]], comm, &rec), 0);
      ah_link_rate_t lr[NICS];
      memset(lr, 0, sizeof lr);
      for (int k = 0; k < NICS; k++) {
        nic_gid(lr[k].lgid, r, k);
        lr[k].lqpn = send_qpn(r, k);
        lr[k].bytes = 32u << 20;
        lr[k].busy_us = 100000u + (uint32_t)(r * 3 + k) * 1000u;
        if ((r == 4 || r == 5) && k == 1) lr[k].busy_us *= 33; /* through leaf5-spine1: 3% */
        lr[k].wrs = 512;
      }
      ck_assert_int_eq(ah_coord_link_rates(cs[proc_of[r]], 9000u + (uint32_t)proc_of[r], lr, NICS),
                       0);
    }
    sleep_ms(250);
    found = 1;
    for (int p = 0; p < PROCS; p++) found &= ah_coord_client_findings(cs[p]) >= 1;
  }
  ck_assert_msg(found, "the finding did not reach every process: %s", log_text());
  /* rank 4 is process 2's second GPU, rank 5 process 3's only rank */
  ck_assert_msg(log_wait("slow link on comm 00000000000011c4: rank 4 (127.0.0.1 pid 9002 gpu 1) -> "
                         "rank 5 (127.0.0.1 pid 9003 gpu 0) at ",
                         2000),
                "%s", log_text());
  ck_assert_msg(log_wait("slow link on comm 00000000000011c4: rank 5 (127.0.0.1 pid 9003 gpu 0) -> "
                         "rank 0 (127.0.0.1 pid 9000 gpu 0) at ",
                         2000),
                "%s", log_text());
  ck_assert_msg(strstr(log_text(),
                       ": link leaf5-spine1 or port mlx5_1:1 (10.0.5.5); QP 321 mlx5_1:1, 1 "
                       "of 2 slow"),
                "%s", log_text());
  ck_assert_msg(!strstr(log_text(), "rank 1 (") && !strstr(log_text(), "rank 2 ("), "%s",
                log_text());
  /* a malformed LINK_QP: refused by name, that connection dropped, the others served */
  ah_link_qp_t bad;
  memset(&bad, 0, sizeof bad);
  bad.lqpn = 5, bad.role = 9, bad.port = 1;
  snprintf(bad.dev, sizeof bad.dev, "mlx5_0");
  ck_assert_int_eq(ah_coord_link_qps(cs[3], 9003, &bad, 1), 0);
  ck_assert_msg(log_wait("refused a LINK_QP from 127.0.0.1", 2000), "%s", log_text());
  ck_assert_msg(strstr(log_text(), "role 9 (expected 1 sender, 2 receiver)"), "%s", log_text());
  ck_assert(legit_roundtrip(&st, 0x77));
  for (int p = 0; p < PROCS; p++) ah_coord_client_close(cs[p]);
  ah_coord_hub_close(hub);
  log_stop();
}
END_TEST

int main(void) {
  const TTest *const tests[] = {a_slow_connection_is_named_to_every_process};
  Suite *s = suite_create("coord_hub_link");
  TCase *tc = tcase_create("hub_link");
  tcase_set_timeout(tc, 60);
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) tcase_add_test(tc, tests[i]);
  suite_add_tcase(s, tc);
  return ah_check_run(s);
}
