/* Unit tests of the coordinator's pure parts: the stamp in the ncclUniqueId tail, the frame header
 * checks (version, type, exact length, 16 MiB prefix), the segment encoding and its range checks,
 * the handshake MACs, and the interface the hub binds (AUTOHA_COORD_IFNAME, NCCL_SOCKET_IFNAME's
 * rules) over a fake interface list. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
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

/* A fake host: loopback, a docker bridge, eth0 (down), eth1 with IPv6 link-local then IPv4, an
 * ib0 with IPv4, and ens5 with only a global IPv6 address, in getifaddrs' order. */
static struct sockaddr_in v4[5];
static struct sockaddr_in6 v6[2];
static ah_coord_if_t fake[8];
static int nfake;

static void fake_host(int with_ib) {
  const char *a4[] = {"127.0.0.1", "172.17.0.1", "10.0.0.5", "10.0.1.5", "192.168.7.5"};
  for (int i = 0; i < 5; i++) {
    memset(&v4[i], 0, sizeof v4[i]);
    v4[i].sin_family = AF_INET;
    ck_assert_int_eq(inet_pton(AF_INET, a4[i], &v4[i].sin_addr), 1);
  }
  const char *a6[] = {"fe80::1", "2001:db8::5"};
  for (int i = 0; i < 2; i++) {
    memset(&v6[i], 0, sizeof v6[i]);
    v6[i].sin6_family = AF_INET6;
    ck_assert_int_eq(inet_pton(AF_INET6, a6[i], &v6[i].sin6_addr), 1);
  }
  nfake = 0;
  fake[nfake++] = (ah_coord_if_t){"lo", AF_INET, 1, (struct sockaddr *)&v4[0]};
  fake[nfake++] = (ah_coord_if_t){"docker0", AF_INET, 1, (struct sockaddr *)&v4[1]};
  fake[nfake++] = (ah_coord_if_t){"eth0", AF_INET, 0, (struct sockaddr *)&v4[2]};
  fake[nfake++] = (ah_coord_if_t){"eth1", AF_INET6, 1, (struct sockaddr *)&v6[0]};
  fake[nfake++] = (ah_coord_if_t){"eth1", AF_INET, 1, (struct sockaddr *)&v4[3]};
  if (with_ib) fake[nfake++] = (ah_coord_if_t){"ib0", AF_INET, 1, (struct sockaddr *)&v4[4]};
  fake[nfake++] = (ah_coord_if_t){"ens5", AF_INET6, 1, (struct sockaddr *)&v6[1]};
  fake[nfake++] = (ah_coord_if_t){"eth2", 17 /* AF_PACKET: no IP address */, 1, NULL};
}

static const char *chosen(const char *spec) {
  int i = ah_coord_if_choose(fake, nfake, spec);
  return i < 0 ? "(none)" : fake[i].name;
}

START_TEST(ifname_choice_follows_nccl_socket_ifname) {
  fake_host(1);
  /* Default: ib* first, as NCCL. */
  ck_assert_str_eq(chosen(NULL), "ib0");
  ck_assert_str_eq(chosen(""), "ib0");
  fake_host(0);
  /* Then anything but docker* and lo*: eth0 is down, eth1's first address is link-local IPv6, so
   * eth1's IPv4 address. */
  int i = ah_coord_if_choose(fake, nfake, NULL);
  ck_assert_int_eq(i, 4);
  ck_assert_int_eq(((const struct sockaddr_in *)fake[i].addr)->sin_addr.s_addr,
                   v4[3].sin_addr.s_addr);
  /* Prefixes, exclusion, exact names. */
  ck_assert_str_eq(chosen("ens"), "ens5"); /* a global IPv6 address is usable */
  ck_assert_str_eq(chosen("eth"), "eth1");
  ck_assert_str_eq(chosen("=eth"), "(none)"); /* exact: no interface is named "eth" */
  ck_assert_str_eq(chosen("=eth1"), "eth1");
  ck_assert_str_eq(chosen("=eth0"), "(none)"); /* down */
  ck_assert_str_eq(chosen("docker,eth"),
                   "docker0"); /* the list order is not a preference: getifaddrs' is */
  ck_assert_str_eq(chosen("^lo,docker,eth"), "ens5");
  ck_assert_str_eq(chosen("^=eth1"), "lo");
  ck_assert_str_eq(chosen("lo"), "lo");
  ck_assert_str_eq(chosen("wlan"), "(none)");
  ck_assert_str_eq(chosen(",,eth1,"), "eth1");
  /* Only docker and loopback: docker before lo, as NCCL. */
  nfake = 2;
  ck_assert_str_eq(chosen(NULL), "docker0");
  nfake = 1;
  ck_assert_str_eq(chosen(NULL), "lo");
  nfake = 0;
  ck_assert_int_eq(ah_coord_if_choose(fake, nfake, NULL), -1);
  /* The matcher alone. */
  ck_assert_int_eq(ah_coord_if_match("eth0", "eth"), 1);
  ck_assert_int_eq(ah_coord_if_match("eth0", "^eth"), 0);
  ck_assert_int_eq(ah_coord_if_match("ib0", "^eth"), 1);
  ck_assert_int_eq(ah_coord_if_match("eth0", "=eth0,ib0"), 1);
  ck_assert_int_eq(ah_coord_if_match("eth00", "=eth0"), 0);
  /* The host's own list: with a spec that matches nothing, -1 and the default's choice. */
  struct sockaddr_storage ss;
  socklen_t sl;
  char name[64];
  ck_assert_int_eq(ah_coord_net_host_addr("=no-such-interface", &ss, &sl, name, sizeof name), -1);
  ck_assert_int_eq(ah_coord_net_host_addr("lo", &ss, &sl, name, sizeof name), 0);
  ck_assert_str_eq(name, "lo");
  ck_assert_int_eq(((struct sockaddr_in *)&ss)->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
}
END_TEST

int main(void) {
  const TTest *const tests[] = {
      stamp_roundtrip_keeps_ncclbytes, stamp_absent_or_damaged_is_refused,
      header_accepts_exact_messages,   header_refuses_bad_frames,
      keyseg_roundtrip_and_ranges,     mac_depends_on_every_input,
      addr_parse_names_bad_text,       ifname_choice_follows_nccl_socket_ifname};
  return ah_check_main("coord_unit", (ah_check_case_t){.name = "pure", .timeout = 10}, tests,
                       AH_CHECK_COUNT(tests));
}
