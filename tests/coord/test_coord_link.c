/* The slow-link diagnosis's wire forms (coordinator/ah_coord_link.c): queue-pair identities and
 * windows round-trip, and what no process of autoha would send is refused by name; GIDs as text. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "ah_check.h"
#include "ah_coord_internal.h"
#include "ah_coord_link.h"

static void gid(uint8_t g[16], int node, int nic) {
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  memcpy(g, mapped, 12);
  g[12] = 10, g[13] = 0, g[14] = (uint8_t)node, g[15] = (uint8_t)(nic * 4 + 1);
}

static ah_link_qp_t sample_qp(int i) {
  ah_link_qp_t q;
  memset(&q, 0, sizeof q);
  gid(q.lgid, 0, i);
  gid(q.rgid, 1, i);
  q.lqpn = 0x1000 + (uint32_t)i;
  q.rqpn = 0x2000 + (uint32_t)i;
  q.gpu = (uint16_t)i;
  q.role = i % 2 ? AH_LINK_RECEIVER : AH_LINK_SENDER;
  q.port = 1;
  q.sport = (uint16_t)(0xc000 + i);
  snprintf(q.dev, sizeof q.dev, "mlx5_%d", i);
  q.tx_port = 1, q.rx_port = 2;
  q.src_leaf = 0, q.spine = (uint16_t)i, q.dst_leaf = 2;
  return q;
}

START_TEST(identities_roundtrip_and_refusals) {
  ah_link_qp_t q[AH_LINK_QPS], back[AH_LINK_QPS];
  for (int i = 0; i < 3; i++) q[i] = sample_qp(i);
  q[2].src_leaf = q[2].spine = q[2].dst_leaf = AH_LINK_NONE; /* no topology */
  uint8_t w[AH_LINK_QP_MSG_BYTES], bad[AH_LINK_QP_MSG_BYTES];
  ah_link_qps_pack(4242, q, 3, w);
  uint32_t pid = 0;
  char err[160];
  memset(back, 0, sizeof back); /* the padding, for the comparison */
  ck_assert_int_eq(ah_link_qps_unpack(w, &pid, back, err, sizeof err), 3);
  ck_assert_uint_eq(pid, 4242);
  for (int i = 0; i < 3; i++) ck_assert(memcmp(&back[i], &q[i], sizeof q[i]) == 0);
  ck_assert_uint_eq(ah_coord_msg_len(AH_MSG_LINK_QP), AH_LINK_QP_MSG_BYTES);
  memcpy(bad, w, sizeof bad);
  bad[4] = AH_LINK_QPS + 1;
  ck_assert_int_eq(ah_link_qps_unpack(bad, &pid, back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "8 queue pairs"), "%s", err);
  memcpy(bad, w, sizeof bad);
  bad[5 + 3 * AH_LINK_QP_BYTES + 7] = 1;
  ck_assert_int_eq(ah_link_qps_unpack(bad, &pid, back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "unused queue-pair slot 3"), "%s", err);
  /* field by field: role, device name, port, QP number, a partial route */
  ah_link_qp_t x = sample_qp(0);
  x.role = 3;
  ah_link_qps_pack(1, &x, 1, bad);
  ck_assert_int_eq(ah_link_qps_unpack(bad, &pid, back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "role 3"), "%s", err);
  x = sample_qp(0);
  memcpy(x.dev, "mlx5\n0", 7);
  ah_link_qps_pack(1, &x, 1, bad);
  ck_assert_int_eq(ah_link_qps_unpack(bad, &pid, back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "device name"), "%s", err);
  x = sample_qp(0);
  ah_link_qps_pack(1, &x, 1, bad);
  memset(bad + 5 + 16 + 16 + 4 + 4 + 2 + 1 + 1 + 2, 'a', AH_LINK_DEV); /* no NUL */
  ck_assert_int_eq(ah_link_qps_unpack(bad, &pid, back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "device name"), "%s", err);
  x = sample_qp(0);
  x.port = 0;
  ah_link_qps_pack(1, &x, 1, bad);
  ck_assert_int_eq(ah_link_qps_unpack(bad, &pid, back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "port 0"), "%s", err);
  x = sample_qp(0);
  x.lqpn = 0x1000000;
  ah_link_qps_pack(1, &x, 1, bad);
  ck_assert_int_eq(ah_link_qps_unpack(bad, &pid, back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "24 bits"), "%s", err);
  x = sample_qp(0);
  x.dst_leaf = AH_LINK_NONE;
  ah_link_qps_pack(1, &x, 1, bad);
  ck_assert_int_eq(ah_link_qps_unpack(bad, &pid, back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "partial route"), "%s", err);
}
END_TEST

START_TEST(rates_roundtrip_and_refusals) {
  ah_link_rate_t r[AH_LINK_RATES], back[AH_LINK_RATES];
  memset(r, 0, sizeof r);
  for (int i = 0; i < AH_LINK_RATES; i++) {
    gid(r[i].lgid, 0, i);
    r[i].lqpn = 0x100 + (uint32_t)i;
    r[i].bytes = (1ull << 33) + (uint64_t)i;
    r[i].busy_us = 1000 * (uint32_t)i;
    r[i].wait_us = 2000 * (uint32_t)i;
    r[i].wrs = 7 + (uint32_t)i;
  }
  uint8_t w[AH_LINK_RATE_MSG_BYTES], bad[AH_LINK_RATE_MSG_BYTES];
  ah_link_rates_pack(77, r, AH_LINK_RATES, w);
  uint32_t pid = 0;
  char err[160];
  memset(back, 0, sizeof back); /* the padding, for the comparison */
  ck_assert_int_eq(ah_link_rates_unpack(w, &pid, back, err, sizeof err), AH_LINK_RATES);
  ck_assert_uint_eq(pid, 77);
  ck_assert(memcmp(back, r, sizeof r) == 0);
  ck_assert_uint_eq(ah_coord_msg_len(AH_MSG_LINK_RATES), AH_LINK_RATE_MSG_BYTES);
  ah_link_rates_pack(77, r, 2, w);
  ck_assert_int_eq(ah_link_rates_unpack(w, &pid, back, err, sizeof err), 2);
  memcpy(bad, w, sizeof bad);
  bad[5 + 2 * AH_LINK_RATE_BYTES] = 1;
  ck_assert_int_eq(ah_link_rates_unpack(bad, &pid, back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "unused rate slot 2"), "%s", err);
  ah_link_rate_t x = r[1];
  x.busy_us = 60000001;
  ah_link_rates_pack(1, &x, 1, bad);
  ck_assert_int_eq(ah_link_rates_unpack(bad, &pid, back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "busy 60000001 us"), "%s", err);
  x = r[1];
  x.lqpn = 0;
  ah_link_rates_pack(1, &x, 1, bad);
  ck_assert_int_eq(ah_link_rates_unpack(bad, &pid, back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "24 bits"), "%s", err);
  memcpy(bad, w, sizeof bad);
  bad[4] = AH_LINK_RATES + 1;
  ck_assert_int_eq(ah_link_rates_unpack(bad, &pid, back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "14 rates"), "%s", err);
}
END_TEST

START_TEST(gids_read_as_addresses) {
  uint8_t g[16];
  char t[64];
  gid(g, 3, 2);
  ah_link_gid_text(g, t, sizeof t);
  ck_assert_str_eq(t, "10.0.3.9");
  memset(g, 0, sizeof g);
  g[0] = 0xfe, g[1] = 0x80, g[15] = 1;
  ah_link_gid_text(g, t, sizeof t);
  ck_assert_str_eq(t, "fe80::1");
}
END_TEST

int main(void) {
  const TTest *const tests[] = {
      identities_roundtrip_and_refusals,
      rates_roundtrip_and_refusals,
      gids_read_as_addresses,
  };
  return ah_check_main("coord_link", (ah_check_case_t){.name = "link", .timeout = 10}, tests,
                       AH_CHECK_COUNT(tests));
}
