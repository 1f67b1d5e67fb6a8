/* Unit tests of the coordinator's pure parts: the stamp in the ncclUniqueId tail, the frame header
 * checks (version, type, exact length, 16 MiB prefix), the segment encoding and its range checks,
 * and the handshake MACs. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ah_check.h"
#include "ah_coord_internal.h"
#include "coord_test_util.h"

static ah_coord_stamp_t stamp_sample(void) {
  ah_coord_stamp_t st;
  memset(&st, 0, sizeof st);
  for (int i = 0; i < 16; i++) st.secret[i] = (uint8_t)(i * 7 + 1);
  st.family = AF_INET;
  st.port = 40123;
  st.addr[0] = 10, st.addr[1] = 1, st.addr[2] = 2, st.addr[3] = 3;
  return st;
}

START_TEST(stamp_roundtrip_keeps_ncclbytes) {
  unsigned char id[128];
  for (int i = 0; i < 64; i++) id[i] = (unsigned char)(i + 100);
  memset(id + 64, 0, 64);
  ah_coord_stamp_t st = stamp_sample(), back;
  ah_coord_stamp_write(&st, id);
  for (int i = 0; i < 64; i++) ck_assert_int_eq(id[i], i + 100);
  ck_assert_int_eq(ah_coord_stamp_read(id, &back), 0);
  ck_assert_int_eq(back.port, 40123);
  ck_assert_int_eq(back.family, AF_INET);
  ck_assert_mem_eq(back.addr, st.addr, 16);
  ck_assert_mem_eq(back.secret, st.secret, 16);
}
END_TEST

START_TEST(stamp_absent_or_damaged_is_refused) {
  unsigned char id[128];
  ah_coord_stamp_t st = stamp_sample(), back;
  memset(&back, 0x5a, sizeof back);
  memset(id, 0, sizeof id); /* NCCL >= 2.23: zero tail */
  ck_assert_int_eq(ah_coord_stamp_read(id, &back), -1);
  ck_assert_int_eq(back.port, 0x5a5a); /* untouched on failure */
  srand(7);
  for (int i = 0; i < 128; i++) id[i] = (unsigned char)rand(); /* NCCL < 2.23: caller's garbage */
  ck_assert_int_eq(ah_coord_stamp_read(id, &back), -1);
  for (int bit = 0; bit < 64 * 8; bit++) { /* every single-bit flip of a good stamp is caught */
    ah_coord_stamp_write(&st, id);
    id[64 + bit / 8] ^= (unsigned char)(1u << (bit % 8));
    ck_assert_msg(ah_coord_stamp_read(id, &back) == -1, "bit %d flip accepted", bit);
  }
}
END_TEST

START_TEST(header_accepts_exact_messages) {
  uint8_t h[8];
  ah_coord_hdr_t d;
  char err[200];
  for (uint8_t t = 1; t <= AH_MSG_MAX; t++) {
    ah_coord_hdr_encode(t, ah_coord_msg_len(t), h);
    ck_assert_int_eq(ah_coord_hdr_decode(h, &d, err, sizeof err), 0);
    ck_assert_int_eq(d.type, t);
    ck_assert_uint_eq(d.len, ah_coord_msg_len(t));
  }
}
END_TEST

START_TEST(header_refuses_bad_frames) {
  uint8_t h[8];
  ah_coord_hdr_t d;
  char err[200];
  ah_coord_hdr_encode(AH_MSG_JOIN, 16u << 20, h); /* 16 MiB prefix */
  ck_assert_int_eq(ah_coord_hdr_decode(h, &d, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "oversized"));
  ck_assert_ptr_nonnull(strstr(err, "16777216"));
  ah_coord_hdr_encode(AH_MSG_JOIN, ah_coord_msg_len(AH_MSG_JOIN), h);
  h[4] = 2; /* wrong version */
  ck_assert_int_eq(ah_coord_hdr_decode(h, &d, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "wrong protocol version 2"));
  ah_coord_hdr_encode(AH_MSG_JOIN, ah_coord_msg_len(AH_MSG_JOIN) + 1, h); /* trailing byte */
  ck_assert_int_eq(ah_coord_hdr_decode(h, &d, err, sizeof err), -1);
  /* version 3: JOIN carries the rank and the settings digest (comm, nranks, rank, since, digest
   * u64[3]), VERDICT the verdict and a mismatch's evidence (comm, verdict, mask, 3 ranks) */
  ck_assert_uint_eq(ah_coord_msg_len(AH_MSG_JOIN), 48);
  ck_assert_uint_eq(ah_coord_msg_len(AH_MSG_VERDICT), 28);
  ah_coord_hdr_encode(AH_MSG_JOIN, 24, h); /* a version-2 JOIN's length */
  ck_assert_int_eq(ah_coord_hdr_decode(h, &d, err, sizeof err), -1);
  ah_coord_hdr_encode(AH_MSG_VERDICT, 12, h);
  ck_assert_int_eq(ah_coord_hdr_decode(h, &d, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "message type 11 with length 12 (expected 28)"));
  ah_coord_hdr_encode(0, 0, h); /* unknown type */
  ck_assert_int_eq(ah_coord_hdr_decode(h, &d, err, sizeof err), -1);
  ah_coord_hdr_encode(AH_MSG_MAX + 1, 0, h);
  ck_assert_int_eq(ah_coord_hdr_decode(h, &d, err, sizeof err), -1);
  ah_coord_hdr_encode(AH_MSG_PING, 0, h);
  h[7] = 1; /* reserved bits */
  ck_assert_int_eq(ah_coord_hdr_decode(h, &d, err, sizeof err), -1);
  memcpy(h, "GET / HT", 8); /* garbage */
  ck_assert_int_eq(ah_coord_hdr_decode(h, &d, err, sizeof err), -1);
}
END_TEST

START_TEST(keyseg_roundtrip_and_ranges) {
  uint8_t b[AH_COORD_KEYSEG_BYTES];
  char err[200];
  ah_key_t k = key_make(0x1234567890abcdefull), k2;
  ah_segment_t s = seg_make(5), s2;
  s.count = AH_SCHED_FOREVER;
  s.config.res[3] = (int64_t)1 << 40;
  ah_coord_keyseg_pack(&k, &s, b);
  ck_assert_int_eq(ah_coord_keyseg_unpack(b, &k2, &s2, err, sizeof err), 0);
  ck_assert_uint_eq(k2.comm, k.comm);
  ck_assert_int_eq(k2.coll, k.coll);
  ck_assert_int_eq(k2.bin, k.bin);
  ck_assert_uint_eq(s2.first, s.first);
  ck_assert_uint_eq(s2.count, AH_SCHED_FOREVER);
  ck_assert_int_eq(s2.source, s.source);
  ck_assert(ah_config_equal(&s2.config, &s.config));
  s.config.algo = -1; /* NCCL's own choice is legal */
  s.config.proto = -1;
  ah_coord_keyseg_pack(&k, &s, b);
  ck_assert_int_eq(ah_coord_keyseg_unpack(b, &k2, &s2, err, sizeof err), 0);
  ck_assert_int_eq(s2.config.algo, -1);
  ah_segment_t bad = seg_make(1);
  bad.config.ndims = AH_MAX_DIMS + 1;
  ah_coord_keyseg_pack(&k, &bad, b);
  ck_assert_int_eq(ah_coord_keyseg_unpack(b, &k2, &s2, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "ndims"));
  bad = seg_make(1);
  bad.config.algo = AH_NUM_ALGOS;
  ah_coord_keyseg_pack(&k, &bad, b);
  ck_assert_int_eq(ah_coord_keyseg_unpack(b, &k2, &s2, err, sizeof err), -1);
  bad = seg_make(1);
  bad.first = UINT64_MAX - 2;
  ah_coord_keyseg_pack(&k, &bad, b);
  ck_assert_int_eq(ah_coord_keyseg_unpack(b, &k2, &s2, err, sizeof err), -1);
  ah_key_t kb = k;
  kb.coll = 99;
  ah_coord_keyseg_pack(&kb, &s, b);
  ck_assert_int_eq(ah_coord_keyseg_unpack(b, &k2, &s2, err, sizeof err), -1);
}
END_TEST

START_TEST(mac_depends_on_every_input) {
  uint8_t sec[16] = {1, 2, 3}, sec2[16] = {1, 2, 4}, a[32] = {9}, b[32] = {8};
  uint8_t m[32], m2[32];
  ck_assert_int_eq(ah_coord_mac(sec, "autoha-client", a, b, 42, m), 0);
  ck_assert_int_eq(ah_coord_mac(sec, "autoha-client", a, b, 42, m2), 0);
  ck_assert(ah_coord_mac_equal(m, m2));
  ah_coord_mac(sec2, "autoha-client", a, b, 42, m2);
  ck_assert(!ah_coord_mac_equal(m, m2));
  ah_coord_mac(sec, "autoha-hub", a, b, 42, m2);
  ck_assert(!ah_coord_mac_equal(m, m2));
  ah_coord_mac(sec, "autoha-client", b, a, 42, m2);
  ck_assert(!ah_coord_mac_equal(m, m2));
  ah_coord_mac(sec, "autoha-client", a, b, 43, m2);
  ck_assert(!ah_coord_mac_equal(m, m2));
}
END_TEST

START_TEST(addr_parse_names_bad_text) {
  char err[AH_NET_ERR_LEN];
  struct sockaddr_storage ss;
  socklen_t sl;
  ck_assert_int_eq(ah_coord_net_addr_parse(err, "127.0.0.1:5000", &ss, &sl), AH_NET_OK);
  ck_assert_int_eq(ss.ss_family, AF_INET);
  ck_assert_int_eq(ah_coord_net_addr_parse(err, "[::1]:5000", &ss, &sl), AH_NET_OK);
  ck_assert_int_eq(ss.ss_family, AF_INET6);
  ck_assert_int_eq(ah_coord_net_addr_parse(err, "localhost", &ss, &sl), AH_NET_ERR);
  ck_assert_ptr_nonnull(strstr(err, "'localhost'"));
  ck_assert_int_eq(ah_coord_net_addr_parse(err, "127.0.0.1:99999", &ss, &sl), AH_NET_ERR);
  ck_assert_ptr_nonnull(strstr(err, "99999"));
}
END_TEST

int main(void) {
  Suite *s = suite_create("coord_unit");
  TCase *tc = tcase_create("pure");
  tcase_set_timeout(tc, 10);
  tcase_add_test(tc, stamp_roundtrip_keeps_ncclbytes);
  tcase_add_test(tc, stamp_absent_or_damaged_is_refused);
  tcase_add_test(tc, header_accepts_exact_messages);
  tcase_add_test(tc, header_refuses_bad_frames);
  tcase_add_test(tc, keyseg_roundtrip_and_ranges);
  tcase_add_test(tc, mac_depends_on_every_input);
  tcase_add_test(tc, addr_parse_names_bad_text);
  suite_add_tcase(s, tc);
  return ah_check_run(s);
}
