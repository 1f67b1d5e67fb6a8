/* test_path.c: unit tests of the QP path policy (path/ah_path*.c) — the kernel's flow label →
 * UDP source port mapping round-trips for every port 0xC000–0xFFFF and agrees with rdma-core's own
 * helper, the traffic-class rule keeps ECN bits, parsers reject bad input with one error naming
 * the line and its text, the policy falls back to "leave the QP alone", spread is distinct and
 * even, and the planner's routes are what the hash model does, balanced, on live links only. */
#include <check.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ah_check.h"
#include "ah_path.h"

/* ---- stderr capture (Check runs each test in its own process) --------------------------------- */

static char cap_path[64];
static void cap_start(void) {
  snprintf(cap_path, sizeof cap_path, "/tmp/pathtest-XXXXXX");
  int fd = mkstemp(cap_path);
  ck_assert_int_ge(fd, 0);
  dup2(fd, 2);
  close(fd);
}
static const char *cap_text(void) {
  static char buf[8192];
  FILE *f = fopen(cap_path, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  buf[n] = '\0';
  if (f) fclose(f);
  unlink(cap_path);
  return buf;
}
static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++) n++;
  return n;
}

static ah_path_qp_t qp_to(const char *dst) {
  ah_path_qp_t q = {.dev = "mlx5_0", .port = 1, .lqpn = 0x100, .rqpn = 0x200};
  ah_path_gid_parse(dst, q.dgid);
  return q;
}

/* ---- kernel arithmetic ------------------------------------------------------------------------ */

START_TEST(label_roundtrip_every_port) {
  for (uint32_t port = AH_PATH_SPORT_MIN; port <= AH_PATH_SPORT_MAX; port++) {
    uint32_t label = ah_path_sport_to_label((uint16_t)port);
    ck_assert_msg(label != 0 && label <= AH_PATH_LABEL_MASK, "port %u -> label 0x%x", port, label);
    ck_assert_uint_eq(ah_path_label_to_sport(label), port);
    ck_assert_uint_eq(ibv_flow_label_to_udp_sport(label), port); /* rdma-core's helper agrees */
  }
  ck_assert_uint_eq(ah_path_sport_to_label(0xBFFF), 0); /* outside the RoCE range: no label */
  ck_assert_uint_eq(ah_path_sport_to_label(4791), 0);
}
END_TEST

START_TEST(label_to_sport_matches_rdma_core) {
  for (uint32_t fl = 0; fl <= AH_PATH_LABEL_MASK; fl++)
    if (ah_path_label_to_sport(fl) != ibv_flow_label_to_udp_sport(fl))
      ck_abort_msg("label 0x%x: %u vs rdma-core %u", fl, ah_path_label_to_sport(fl),
                   ibv_flow_label_to_udp_sport(fl));
}
END_TEST

START_TEST(label_from_qpn) {
  /* rdma_calc_flow_label: symmetric, 20 bits, the product folded */
  ck_assert_uint_eq(ah_path_label_from_qpn(0x100, 0x777), ah_path_label_from_qpn(0x777, 0x100));
  ck_assert_uint_le(ah_path_label_from_qpn(0xFFFFFF, 0xFFFFFE), AH_PATH_LABEL_MASK);
  uint64_t v = (uint64_t)0x1234 * 0x5678;
  v ^= v >> 20;
  v ^= v >> 40;
  ck_assert_uint_eq(ah_path_label_from_qpn(0x1234, 0x5678), (uint32_t)(v & 0xFFFFF));
}
END_TEST

START_TEST(traffic_class) {
  ck_assert_uint_eq(ah_path_tc_with_dscp(0x02, 26), 0x6A); /* DSCP 26 << 2, ECN bits 10 kept */
  ck_assert_uint_eq(ah_path_tc_with_dscp(0xFF, 0), 0x03);
  ck_assert_uint_eq(ah_path_tc_with_dscp(0x00, 46), 46 << 2);
  int tc = -1, dscp = -1;
  ck_assert_int_eq(ah_path_parse_tc("dscp=26", &tc, &dscp), 0);
  ck_assert_int_eq(tc, 26);
  ck_assert_int_eq(dscp, 1);
  ck_assert_int_eq(ah_path_parse_tc("106", &tc, &dscp), 0);
  ck_assert_int_eq(tc, 106);
  ck_assert_int_eq(dscp, 0);
  ck_assert_int_eq(ah_path_parse_tc("nccl", &tc, &dscp), 0);
  ck_assert_int_eq(tc, -1);
  const char *bad[] = {"dscp=64", "256", "-1", "abc", "dscp=", " 5", "5 ", "", "dscp=1x"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    ck_assert_msg(ah_path_parse_tc(bad[i], &tc, &dscp) == -1, "'%s' accepted", bad[i]);
}
END_TEST

START_TEST(tc_rules) {
  ah_path_tc_rules_t r;
  char why[256];
  ck_assert_int_eq(ah_path_tc_rules_parse("name=dp*:dscp=10;ranks=2-8:46;ranks=100-:dscp=1;*:7", &r,
                                          why, sizeof why),
                   0);
  ck_assert_int_eq(r.n, 4);
  ck_assert_int_eq(ah_path_tc_rules_match(&r, "dp0", 64), 10 << 2);
  ck_assert_int_eq(ah_path_tc_rules_match(&r, "tp", 8), 46);
  ck_assert_int_eq(ah_path_tc_rules_match(&r, NULL, 2), 46);
  ck_assert_int_eq(ah_path_tc_rules_match(&r, NULL, 512), 1 << 2);
  ck_assert_int_eq(ah_path_tc_rules_match(&r, NULL, 0), 7); /* size unknown: only * matches */
  ck_assert_int_eq(ah_path_tc_rules_parse("ranks=4:dscp=26", &r, why, sizeof why), 0);
  ck_assert_int_eq(ah_path_tc_rules_match(&r, NULL, 5), -1);
  ck_assert_int_eq(ah_path_tc_rules_match(&r, NULL, 4), 26 << 2);
  const char *bad[][2] = {{"name=dp*", "rule 1 'name=dp*'"},    {"x:dscp=1", "rule 1 'x'"},
                          {"*:1;ranks=8-2:1", "rule 2: ranks"}, {"*:dscp=64", "rule 1"},
                          {"ranks=0:1", "rule 1: ranks"},       {"*:nccl", "rule 1"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    why[0] = '\0';
    ck_assert_msg(ah_path_tc_rules_parse(bad[i][0], &r, why, sizeof why) == -1, "'%s' accepted",
                  bad[i][0]);
    ck_assert_msg(strstr(why, bad[i][1]) != NULL, "'%s': reason '%s' lacks '%s'", bad[i][0], why,
                  bad[i][1]);
  }
}
END_TEST

/* ---- catalog ---------------------------------------------------------------------------------- */

START_TEST(catalog_lookup) {
  ah_path_catalog_t *c = NULL;
  const char *text =
      "# probed paths\n"
      "mlx5_0 10.0.0.2 49152,49153,0xC010\n"
      "\n"
      "10.0.0.1 10.0.0.3 50000   # by source address\n"
      "* 10.0.0.2 60000\n";
  ck_assert_int_eq(ah_path_catalog_parse(text, "t", &c), 0);
  uint8_t d2[16], d3[16], d4[16], s1[16];
  ah_path_gid_parse("10.0.0.2", d2);
  ah_path_gid_parse("10.0.0.3", d3);
  ah_path_gid_parse("10.0.0.4", d4);
  ah_path_gid_parse("10.0.0.1", s1);
  ck_assert_uint_eq(ah_path_catalog_port(c, "mlx5_0", NULL, d2, 0), 49152);
  ck_assert_uint_eq(ah_path_catalog_port(c, "mlx5_0", NULL, d2, 2), 0xC010);
  ck_assert_uint_eq(ah_path_catalog_port(c, "mlx5_0", NULL, d2, 3), 49152); /* wraps */
  ck_assert_uint_eq(ah_path_catalog_port(c, "mlx5_1", NULL, d2, 0), 60000); /* wildcard source */
  ck_assert_uint_eq(ah_path_catalog_port(c, "mlx5_1", s1, d3, 0), 50000);
  ck_assert_uint_eq(ah_path_catalog_port(c, "mlx5_1", NULL, d3, 0), 0); /* source unknown */
  ck_assert_uint_eq(ah_path_catalog_port(c, "mlx5_0", NULL, d4, 0), 0);
  ah_path_catalog_free(c);
}
END_TEST

START_TEST(catalog_errors) {
  const char *cases[][2] = {
      {"mlx5_0 10.0.0.2 49152\n\n# c\nmlx5_0 10.0.0.2 1234\n", "line 4: 'mlx5_0 10.0.0.2 1234'"},
      {"mlx5_0 nowhere 49152\n", "line 1: 'mlx5_0 nowhere 49152'"},
      {"mlx5_0 10.0.0.2\n", "line 1: 'mlx5_0 10.0.0.2'"},
      {"a 10.0.0.2 49152,,49153\n", "line 1:"},
      {"a 10.0.0.2 49152 extra\n", "line 1:"},
      {"a 10.0.0.2 70000\n", "line 1:"},
  };
  cap_start();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    ah_path_catalog_t *c = (ah_path_catalog_t *)&c;
    ck_assert_int_eq(ah_path_catalog_parse(cases[i][0], "cat.txt", &c), -1);
    ck_assert_ptr_eq(c, (ah_path_catalog_t *)&c); /* output untouched on failure */
  }
  const char *err = cap_text();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    ck_assert_msg(strstr(err, cases[i][1]) != NULL, "missing '%s' in:\n%s", cases[i][1], err);
  ck_assert_int_eq(count(err, "path catalog cat.txt"), 6); /* one error per bad input */
}
END_TEST

/* ---- topology and planner --------------------------------------------------------------------- */

/* 4 leaf pairs, 4 spines, 8 hosts (2 per pair), 4 NICs each; a ring job scattered over the pairs
 * and a tree job, so many flows leave their pair. */
static char *small_topo(const char *extra) {
  static char buf[16384];
  int n = snprintf(buf, sizeof buf, "spines 4\npairs 4\nseeds 11 22 33\n");
  for (int h = 0; h < 8; h++) {
    n += snprintf(buf + n, sizeof buf - (size_t)n, "host h%d %d\n", h, h % 4);
    for (int i = 0; i < 4; i++)
      n +=
          snprintf(buf + n, sizeof buf - (size_t)n, "nic h%d mlx5_%d 10.1.%d.%d\n", h, i, h, i + 1);
  }
  n +=
      snprintf(buf + n, sizeof buf - (size_t)n,
               "job big 9.5 ring 2 h0,h1,h2,h3,h4,h5\njob small 1.0 tree 1 h6,h7,h0,h1\n%s", extra);
  return buf;
}

static void check_plan(const char *extra) {
  ah_path_topo_t *t = NULL;
  ck_assert_int_eq(ah_path_topo_parse(small_topo(extra), "topo", &t), 0);
  ah_path_flow_t *flows = NULL;
  int n = ah_path_topo_flows(t, &flows);
  ck_assert_int_eq(n, 4 * 2 * 6 + 4 * 1 * 3 * 2); /* ring: nics*channels*hosts; tree: 3 edges x2 */
  ah_path_route_t *r = calloc((size_t)n, sizeof *r);
  ck_assert_int_eq(ah_path_plan(t, flows, n, r), 0);
  int up[8][4] = {{0}}, down[8][4] = {{0}}, upd[8] = {0}, downd[8] = {0};
  for (int i = 0; i < n; i++) {
    int side, spine, rx;
    ck_assert_msg(r[i].planned, "flow %d not planned", i);
    ah_path_model_route(t, &flows[i], r[i].sport, &side, &spine, &rx);
    ck_assert_int_eq(side, r[i].side); /* the port really takes the planned route */
    ck_assert_int_eq(spine, r[i].spine);
    ck_assert_int_eq(rx, side); /* C4P: left with left */
    for (int j = 0; j < i; j++) /* QPs of one NIC pair never share a port */
      if (flows[j].shost == flows[i].shost && flows[j].snic == flows[i].snic &&
          flows[j].dhost == flows[i].dhost && flows[j].dnic == flows[i].dnic)
        ck_assert_uint_ne(r[j].sport, r[i].sport);
    if (spine < 0) continue;
    int sl = 2 * t->hosts[flows[i].shost].pair + side,
        dl = 2 * t->hosts[flows[i].dhost].pair + side;
    ck_assert(!ah_path_link_failed(t, sl, spine) && !ah_path_link_failed(t, dl, spine));
    up[sl][spine]++, down[dl][spine]++, upd[sl]++, downd[dl]++;
  }
  for (int l = 0; l < 8; l++) {
    int live = 0;
    for (int s = 0; s < 4; s++) live += !ah_path_link_failed(t, l, s);
    for (int s = 0; s < 4; s++) {
      ck_assert_int_le(up[l][s], (upd[l] + live - 1) / live);
      ck_assert_int_le(down[l][s], (downd[l] + live - 1) / live);
    }
  }
  free(r);
  free(flows);
  ah_path_topo_free(t);
}

START_TEST(plan_balanced) { check_plan(""); }
END_TEST

START_TEST(plan_with_failed_link) { check_plan("fail 2 1\n"); }
END_TEST

/* ---- re-planning around failed or degraded links ---------------------------------------------- */

/* Whether flow f's modelled route with `sport` crosses leaf–spine link (leaf, spine). */
static int crosses(const ah_path_topo_t *t, const ah_path_flow_t *f, uint16_t sport, int leaf,
                   int spine) {
  int side, sp, rx;
  ah_path_model_route(t, f, sport, &side, &sp, &rx);
  if (sp < 0 || sp != spine) return 0;
  return 2 * t->hosts[f->shost].pair + side == leaf || 2 * t->hosts[f->dhost].pair + rx == leaf;
}

/* Plans the small topology, applies `links`, re-plans, and checks: only flows on a hit link moved;
 * no flow crosses a down link; QPs of a NIC pair keep distinct ports; the slowest flow's share is
 * within 5% of the bound no plan can beat, and the bound really bounds it. */
static void check_replan(const ah_path_link_state_t *ls, int nl, int want_moves) {
  ah_path_topo_t *t = NULL;
  ck_assert_int_eq(ah_path_topo_parse(small_topo(""), "topo", &t), 0);
  ah_path_flow_t *flows = NULL;
  int n = ah_path_topo_flows(t, &flows);
  ah_path_route_t *plan = calloc((size_t)n, sizeof *plan), *r = calloc((size_t)n, sizeof *r);
  unsigned char *moved = calloc((size_t)n, 1);
  ck_assert_int_eq(ah_path_plan(t, flows, n, plan), 0);
  memcpy(r, plan, (size_t)n * sizeof *r);
  double before = ah_path_replan_share(t, flows, n, ls, nl, NULL, plan);
  int m = ah_path_replan(t, flows, n, ls, nl, NULL, r, moved);
  ck_assert_int_ge(m, want_moves);
  int nmoved = 0;
  for (int i = 0; i < n; i++) {
    int hit = 0;
    for (int k = 0; k < nl; k++)
      hit |= crosses(t, &flows[i], plan[i].sport, ls[k].leaf, ls[k].spine);
    if (!hit)
      ck_assert_msg(r[i].sport == plan[i].sport, "flow %d moved though no fault touched it", i);
    ck_assert_int_eq(moved[i], r[i].sport != plan[i].sport);
    nmoved += moved[i];
    ck_assert_msg(r[i].planned, "flow %d has no live path", i);
    for (int k = 0; k < nl; k++)
      if (ls[k].fraction == 0)
        ck_assert(!crosses(t, &flows[i], r[i].sport, ls[k].leaf, ls[k].spine));
    for (int j = 0; j < i; j++)
      if (flows[j].shost == flows[i].shost && flows[j].snic == flows[i].snic &&
          flows[j].dhost == flows[i].dhost && flows[j].dnic == flows[i].dnic)
        ck_assert_uint_ne(r[j].sport, r[i].sport);
  }
  ck_assert_int_eq(nmoved, m);
  double after = ah_path_replan_share(t, flows, n, ls, nl, NULL, r);
  double bound = ah_path_replan_bound(t, flows, n, ls, nl, NULL);
  ck_assert_msg(after >= 0.95 * bound, "re-planned share %.3f, bound %.3f", after, bound);
  ck_assert_msg(after <= bound * (1 + 1e-9), "share %.3f above the bound %.3f", after, bound);
  ck_assert_msg(after > before, "re-planning did not help: %.3f -> %.3f", before, after);
  free(plan);
  free(r);
  free(moved);
  free(flows);
  ah_path_topo_free(t);
}

START_TEST(replan_link_down) {
  ah_path_link_state_t ls[] = {{0, 1, 0.0}};
  check_replan(ls, 1, 1);
}
END_TEST

START_TEST(replan_two_links_down_and_degraded) {
  ah_path_link_state_t ls[] = {{0, 1, 0.0}, {3, 2, 0.0}, {5, 0, 0.25}};
  check_replan(ls, 3, 2);
}
END_TEST

START_TEST(replan_leaf_cut_off) { /* every uplink of leaf 2: its flows leave by the other side */
  ah_path_link_state_t ls[] = {{2, 0, 0.0}, {2, 1, 0.0}, {2, 2, 0.0}, {2, 3, 0.0}};
  check_replan(ls, 4, 1);
}
END_TEST

START_TEST(replan_nothing_to_do) { /* a link no flow crosses, and an empty list: nothing moves */
  ah_path_topo_t *t = NULL;
  ck_assert_int_eq(ah_path_topo_parse(small_topo(""), "topo", &t), 0);
  ah_path_flow_t *flows = NULL;
  int n = ah_path_topo_flows(t, &flows);
  ah_path_route_t *r = calloc((size_t)n, sizeof *r);
  ck_assert_int_eq(ah_path_plan(t, flows, n, r), 0);
  ck_assert_int_eq(ah_path_replan(t, flows, n, NULL, 0, NULL, r, NULL), 0);
  double share = ah_path_replan_share(t, flows, n, NULL, 0, NULL, r);
  ck_assert_msg(share > 0 && share <= ah_path_replan_bound(t, flows, n, NULL, 0, NULL) * (1 + 1e-9),
                "share %.3f", share);
  free(r);
  free(flows);
  ah_path_topo_free(t);
}
END_TEST

START_TEST(job_classes) {
  /* Crux: priority by GPU intensity, compressed onto the classes in equal shares */
  ah_path_topo_t *t = NULL;
  ck_assert_int_eq(
      ah_path_topo_parse(small_topo("job mid 5 ring 1 h2,h3\njob low 0.5 ring 1 h4,h5\n"
                                    "classes dscp=46,dscp=26\n"),
                         "t", &t),
      0);
  ck_assert_int_eq(t->njobs, 4); /* big 9.5, small 1.0, mid 5, low 0.5 */
  ck_assert_int_eq(ah_path_job_class(t, 0), 0);
  ck_assert_int_eq(ah_path_job_class(t, 2), 0);
  ck_assert_int_eq(ah_path_job_class(t, 1), 1);
  ck_assert_int_eq(ah_path_job_class(t, 3), 1);
  ah_path_topo_free(t);

  char path[] = "/tmp/pathtopo-XXXXXX";
  int fd = mkstemp(path);
  const char *text = small_topo("classes dscp=46,7\n");
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  ah_path_settings_t s = {.on = 1,
                          .sport = AH_PATH_SPORT_PLAN,
                          .topo = path,
                          .host = "h7",
                          .tc = -1}; /* h7: job small */
  ah_path_policy_t *p = ah_path_policy_create(&s);
  ah_path_qp_t q = qp_to("10.1.1.2");
  ck_assert_int_eq(ah_path_policy_qp_tc(p, &q, 0x02), 7); /* by host name */
  q.has_sgid = 1;
  ah_path_gid_parse("10.1.0.1", q.sgid);                              /* h0: job big */
  ck_assert_int_eq(ah_path_policy_qp_tc(p, &q, 0x02), (46 << 2) | 2); /* by local GID */
  ah_path_policy_free(p);
  ah_path_settings_t s2 = {
      .on = 1, .sport = AH_PATH_SPORT_PLAN, .topo = path, .host = "h7", .tc = 8, .tc_is_dscp = 1};
  p = ah_path_policy_create(&s2);
  ck_assert_int_eq(ah_path_policy_qp_tc(p, &q, 0x02), (8 << 2) | 2); /* AUTOHA_QP_TC wins */
  ah_path_policy_free(p);
  unlink(path);
}
END_TEST

START_TEST(topology_errors) {
  const char *cases[][2] = {
      {"spines 4\npairs 2\nhost a 0\nnic a mlx5_0 10.0.0.1\nbogus 1\n",
       "line 5: 'bogus 1': unknown keyword"},
      {"host a 0\n", "line 1: 'host a 0': spines and pairs must come before hosts"},
      {"spines 4\npairs 2\nhost a 5\n", "line 3: 'host a 5': pair out of range"},
      {"spines 4\npairs 2\nhost a 0\njob j 1 ring 1 a,b\n",
       "line 4: 'job j 1 ring 1 a,b': job names a host"},
      {"spines 4\npairs 2\nhost a 0\njob j x ring 1 a\n", "intensity must be"},
      {"spines 4\npairs 2\nhost a 0\nnic a d 10.0.0.1\nnic a e 10.0.0.1\n",
       "line 5: 'nic a e 10.0.0.1': address used twice"},
      {"spines 4\npairs 2\nfail 4 0\n", "line 3: 'fail 4 0'"},
      {"# nothing\n", "no spines, pairs or hosts"},
      {"spines 4\npairs 2\nclasses dscp=46,300\n",
       "line 3: 'classes dscp=46,300': a class must be"},
  };
  cap_start();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    ah_path_topo_t *t = NULL;
    ck_assert_int_eq(ah_path_topo_parse(cases[i][0], "topo.txt", &t), -1);
    ck_assert_ptr_null(t);
  }
  const char *err = cap_text();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    ck_assert_msg(strstr(err, cases[i][1]) != NULL, "missing '%s' in:\n%s", cases[i][1], err);
  ck_assert_int_eq(count(err, "topology topo.txt"), 9);
}
END_TEST

/* ---- runtime policy --------------------------------------------------------------------------- */

START_TEST(policy_spread) {
  ah_path_settings_t s = {.on = 1, .sport = AH_PATH_SPORT_SPREAD, .host = "nodeA", .tc = -1};
  ah_path_policy_t *p = ah_path_policy_create(&s), *p2 = ah_path_policy_create(&s);
  ck_assert(ah_path_policy_active(p));
  ck_assert_int_eq(ah_path_policy_sport_mode(p), AH_PATH_SPORT_SPREAD);
  ck_assert_int_eq(ah_path_policy_tc(p, 0x02), -1); /* no AUTOHA_QP_TC: NCCL's class stays */
  ah_path_qp_t q = qp_to("10.0.0.9");
  uint16_t ports[64];
  int quarter[4] = {0};
  for (int k = 0; k < 64; k++) {
    ports[k] = ah_path_policy_sport(p, &q);
    ck_assert_uint_eq(ah_path_policy_sport(p2, &q), ports[k]); /* deterministic */
    ck_assert_uint_ge(ports[k], AH_PATH_SPORT_MIN);
    for (int j = 0; j < k; j++) ck_assert_uint_ne(ports[j], ports[k]);
  }
  /* evenly spread: the first 4 ports fall one per quarter of the port space (cyclically) */
  for (int k = 0; k < 4; k++) quarter[((ports[k] - ports[0]) & 0x3FFF) >> 12]++;
  for (int i = 0; i < 4; i++) ck_assert_int_eq(quarter[i], 1);
  ah_path_qp_t other = qp_to("10.0.0.8");
  ck_assert_uint_ne(ah_path_policy_sport(p, &other), ports[0]); /* another pair, another base */
  ah_path_policy_free(p);
  ah_path_policy_free(p2);
}
END_TEST

START_TEST(policy_typed_values) {
  /* The policy takes typed settings: their text is the environment table's to parse and report
   * (tests/tuner). What the policy itself can find wrong is a file that does not load. */
  cap_start();
  ah_path_settings_t off = {.on = 0, .tc = 26, .tc_is_dscp = 1};
  ah_path_policy_t *p = ah_path_policy_create(&off);
  ck_assert(!ah_path_policy_active(p));
  ck_assert_uint_eq(ah_path_policy_sport(p, &(ah_path_qp_t){.dev = "x"}), 0);
  ah_path_policy_free(p);

  ah_path_settings_t tc_only = {.on = 1, .sport = AH_PATH_SPORT_OFF, .tc = 26, .tc_is_dscp = 1};
  p = ah_path_policy_create(&tc_only);
  ck_assert(ah_path_policy_active(p)); /* the traffic class applies */
  ck_assert_int_eq(ah_path_policy_sport_mode(p), AH_PATH_SPORT_OFF);
  ah_path_qp_t q = qp_to("10.0.0.9");
  ck_assert_uint_eq(ah_path_policy_sport(p, &q), 0);
  ck_assert_int_eq(ah_path_policy_tc(p, 0x01), (26 << 2) | 1); /* dscp= keeps NCCL's ECN bits */
  ck_assert_int_eq(ah_path_policy_config_tc(p), 26 << 2);
  ah_path_policy_free(p);

  ah_path_settings_t bad_tc = {.on = 1, .sport = AH_PATH_SPORT_SPREAD, .tc = 99, .tc_is_dscp = 1};
  p = ah_path_policy_create(&bad_tc); /* a DSCP out of range is not applied */
  ck_assert_int_eq(ah_path_policy_tc(p, 0x01), -1);
  ck_assert_int_eq(ah_path_policy_sport_mode(p), AH_PATH_SPORT_SPREAD);
  ah_path_policy_free(p);

  ah_path_settings_t whole = {.on = 1, .tc = 106};
  p = ah_path_policy_create(&whole);
  ck_assert_int_eq(ah_path_policy_tc(p, 0x01), 106); /* a number is the whole byte */
  ck_assert_int_eq(ah_path_policy_sport_mode(p), AH_PATH_SPORT_OFF); /* default: NCCL's ports */
  ah_path_policy_free(p);

  ah_path_settings_t no_topo = {.on = 1, .sport = AH_PATH_SPORT_PLAN, .tc = -1};
  p = ah_path_policy_create(&no_topo);
  ck_assert(!ah_path_policy_active(p));
  ah_path_policy_free(p);

  ah_path_settings_t missing = {
      .on = 1, .sport = AH_PATH_SPORT_FILE, .sport_file = "/nonexistent/cat", .tc = -1};
  p = ah_path_policy_create(&missing);
  ck_assert(!ah_path_policy_active(p));
  ah_path_policy_free(p);

  const char *err = cap_text();
  ck_assert_msg(strstr(err, "AUTOHA_QP_TOPO") != NULL, "%s", err);
  ck_assert_msg(strstr(err, "'/nonexistent/cat'") != NULL, "%s", err);
  ck_assert_int_eq(count(err, "autoha ERROR"), 2);
}
END_TEST

START_TEST(policy_plan) {
  char path[] = "/tmp/pathtopo-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  const char *text = small_topo("");
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  ah_path_settings_t s = {
      .on = 1, .sport = AH_PATH_SPORT_PLAN, .topo = path, .host = "h0", .tc = -1};
  ah_path_policy_t *p = ah_path_policy_create(&s);
  unlink(path);
  ck_assert_int_eq(ah_path_policy_sport_mode(p), AH_PATH_SPORT_PLAN);
  /* h0's NIC 1 to h1's NIC 1 (the ring's next hop): the plan's ports, in QP order */
  ah_path_topo_t *t = NULL;
  ck_assert_int_eq(ah_path_topo_parse(text, "t", &t), 0);
  ah_path_flow_t *flows = NULL;
  int n = ah_path_topo_flows(t, &flows);
  ah_path_route_t *r = calloc((size_t)n, sizeof *r);
  ck_assert_int_eq(ah_path_plan(t, flows, n, r), 0);
  ah_path_qp_t q = qp_to("10.1.1.2"), rx = qp_to("10.1.1.2");
  q.dev = rx.dev = "mlx5_1";
  rx.receiver = 1;
  for (int k = 0; k < 2; k++) {
    uint16_t want = 0;
    for (int i = 0; i < n; i++)
      if (flows[i].shost == 0 && flows[i].snic == 1 && flows[i].dhost == 1 && flows[i].dnic == 1 &&
          flows[i].k == k)
        want = r[i].sport;
    ck_assert_uint_ne(want, 0);
    /* NCCL connects a channel's receiving end to the same peer too (a QP created with receive
     * WRs): it takes a spread port and the senders still get the plan's k-th */
    uint16_t rx_port = ah_path_policy_sport(p, &rx);
    ck_assert_uint_ge(rx_port, AH_PATH_SPORT_MIN);
    ck_assert_uint_eq(ah_path_policy_sport(p, &q), want);
  }
  /* a peer the plan does not know gets a spread port, not NCCL's */
  ah_path_qp_t stranger = qp_to("10.9.9.9");
  ck_assert_uint_ge(ah_path_policy_sport(p, &stranger), AH_PATH_SPORT_MIN);
  free(r);
  free(flows);
  ah_path_topo_free(t);
  ah_path_policy_free(p);
}
END_TEST

/* Issue 18 #5: planning 16,384 flows over 64 leaves x 256 spines costs about the same with 64
 * failed uplinks as with none (it once grew with failed links times spines: 8 s instead of 0.4 s
 * here), and every planned port still routes, in the reference model, where the plan says. The
 * bound is on process CPU time, so a loaded machine does not fail it: 2 s against 0.1 s measured. */
static char *scale_text(int nfail) {
  size_t cap = 1 << 20;
  char *b = malloc(cap);
  ck_assert_ptr_nonnull(b);
  int n = snprintf(b, cap, "spines 256\npairs 32\n");
  for (int h = 0; h < 256; h++) {
    n += snprintf(b + n, cap - (size_t)n, "host s%d %d\n", h, h / 8);
    for (int i = 0; i < 8; i++)
      n += snprintf(b + n, cap - (size_t)n, "nic s%d mlx5_%d 10.0.%d.%d\n", h, i, h, i + 1);
  }
  n += snprintf(b + n, cap - (size_t)n, "job big 1.0 ring 8 ");
  for (int h = 0; h < 256; h++) n += snprintf(b + n, cap - (size_t)n, "%ss%d", h ? "," : "", h);
  n += snprintf(b + n, cap - (size_t)n, "\n");
  for (int k = 0; k < nfail; k++) /* distinct (leaf, spine) pairs */
    n += snprintf(b + n, cap - (size_t)n, "fail %d %d\n", (k * 7) % 64, (k * 37 + 11) % 256);
  return b;
}

static double plan_cpu_s(int nfail) {
  char *text = scale_text(nfail);
  ah_path_topo_t *t = NULL;
  ck_assert_int_eq(ah_path_topo_parse(text, "scale", &t), 0);
  free(text);
  ck_assert_int_eq(t->nfailed, nfail);
  ah_path_flow_t *f = NULL;
  int n = ah_path_topo_flows(t, &f);
  ck_assert_int_eq(n, 16384);
  ah_path_route_t *r = calloc((size_t)n, sizeof *r);
  ck_assert_ptr_nonnull(r);
  clock_t c0 = clock();
  ck_assert_int_eq(ah_path_plan(t, f, n, r), 0);
  double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
  for (int i = 0; i < n; i++) {
    ck_assert_int_eq(r[i].planned, 1);
    int side, spine, rx;
    ah_path_model_route(t, &f[i], r[i].sport, &side, &spine, &rx);
    ck_assert_int_eq(side, r[i].side);
    ck_assert_int_eq(spine, r[i].spine);
    ck_assert(!ah_path_link_failed(t, 2 * t->hosts[f[i].shost].pair + side, spine));
  }
  free(r);
  free(f);
  ah_path_topo_free(t);
  return secs;
}

START_TEST(plan_cost_does_not_grow_with_failed_links) {
  double none = plan_cpu_s(0), many = plan_cpu_s(64);
  printf("16,384 flows, 256 spines: planned in %.2f s CPU with no failed link, %.2f s with 64\n",
         none, many);
  ck_assert_msg(many < 2.0, "64 failed links: %.2f s CPU (no failure: %.2f s)", many, none);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {label_roundtrip_every_port,
                                label_to_sport_matches_rdma_core,
                                label_from_qpn,
                                traffic_class,
                                tc_rules,
                                catalog_lookup,
                                catalog_errors,
                                topology_errors,
                                plan_balanced,
                                plan_with_failed_link,
                                plan_cost_does_not_grow_with_failed_links,
                                job_classes,
                                replan_link_down,
                                replan_two_links_down_and_degraded,
                                replan_leaf_cut_off,
                                replan_nothing_to_do,
                                policy_spread,
                                policy_typed_values,
                                policy_plan};
  return ah_check_main("path", (ah_check_case_t){.name = "path", .timeout = 30}, tests,
                       AH_CHECK_COUNT(tests));
}
