/* sim/fabric against autoha's planner (path/): for random fabrics, seeds, failed uplinks and flows,
 * the port, spine and delivering leaf sim_fabric_route picks are the ones ah_path_model_route
 * predicts on the topology file sim_fabric_topo_text writes; and sim_fabric_sport is the kernel
 * arithmetic path/ assumes (ah_path_label_from_qpn, ah_path_label_to_sport). This is what makes
 * AUTOHA_QP_SPORT=plan testable end to end on sim/. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_check.h"
#include "ah_path.h"
#include "sim_fabric.h"

static uint32_t rnd(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(*s >> 33);
}

START_TEST(sport_is_the_kernels) {
  uint64_t s = 7;
  ck_assert_uint_eq(sim_fabric_sport(0, 1, 1), 0xC001);      /* label 1*1 = 1 */
  ck_assert_uint_eq(sim_fabric_sport(0x4001, 0, 0), 0xC000); /* high bits fold onto the low ones */
  for (int i = 0; i < 100000; i++) {
    uint32_t l = rnd(&s) & 0xFFFFFF, r = rnd(&s) & 0xFFFFFF, label = rnd(&s) & 0xFFFFF;
    ck_assert_uint_eq(sim_fabric_sport(0, l, r),
                      ah_path_label_to_sport(ah_path_label_from_qpn(l, r)));
    if (label) ck_assert_uint_eq(sim_fabric_sport(label, l, r), ah_path_label_to_sport(label));
  }
}
END_TEST

/* The (side, spine, rx side) a sim route took, from its links; returns 0, or -1 for no route. */
static int decode(const sim_fabric_t *f, const int *links, int n, int *side_p, int *spine_p,
                  int *rx_p) {
  sim_fabric_link_t a, b;
  if (n < 2) return -1;
  sim_fabric_link_info(f, links[0], &a);
  sim_fabric_link_info(f, links[n - 1], &b);
  ck_assert_int_eq(a.kind, SIM_FABRIC_LINK_NIC_UP);
  ck_assert_int_eq(b.kind, SIM_FABRIC_LINK_NIC_DOWN);
  ck_assert_int_eq(a.ep.port, a.leaf % 2 + 1); /* port 1 on the left leaf, port 2 on the right */
  *side_p = a.leaf % 2;
  *rx_p = b.leaf % 2;
  *spine_p = -1;
  if (n == 4) {
    sim_fabric_link_t u;
    sim_fabric_link_info(f, links[1], &u);
    ck_assert_int_eq(u.kind, SIM_FABRIC_LINK_LEAF_UP);
    *spine_p = u.spine;
  }
  return 0;
}

START_TEST(routes_match_the_planners_model) {
  uint64_t s = 0x5eed;
  static char text[1 << 20];
  long compared = 0, cross = 0, failed_routes = 0;
  for (int trial = 0; trial < 40; trial++) {
    int nodes = 2 + (int)(rnd(&s) % 9), hpp = 1 + (int)(rnd(&s) % 3), nics = 1 + (int)(rnd(&s) % 8);
    int spines = 1 + (int)(rnd(&s) % 12), pairs = (nodes + hpp - 1) / hpp;
    char topo[128], spec[512];
    snprintf(topo, sizeof topo, "nodes=%d,gpus=8,nic=%dx400x2", nodes, nics);
    int len = snprintf(spec, sizeof spec, "spines=%d,hostsperpair=%d,seeds=0x%x:0x%x:0x%x", spines,
                       hpp, rnd(&s), rnd(&s), rnd(&s));
    int nfail = trial % 3 == 0 ? 0 : (int)(rnd(&s) % (unsigned)(spines + 2));
    for (int i = 0; i < nfail; i++)
      len +=
          snprintf(spec + len, sizeof spec - (size_t)len, "%s%u-%u",
                   i ? "/" : ",fail=", rnd(&s) % (unsigned)(2 * pairs), rnd(&s) % (unsigned)spines);
    char err[512];
    sim_fabric_t *f = sim_fabric_create(topo, spec, 0, err, sizeof err);
    ck_assert_msg(f != NULL, "%s: %s", spec, err);
    int n = sim_fabric_topo_text(f, NULL, text, sizeof text);
    ck_assert_int_gt(n, 0);
    ck_assert_int_lt(n, (int)sizeof text);
    ah_path_topo_t *t = NULL;
    ck_assert_msg(ah_path_topo_parse(text, "sim_fabric_topo_text", &t) == 0, "%s", text);
    ck_assert_int_eq(t->nspines, spines);
    ck_assert_int_eq(t->nhosts, nodes);
    for (int k = 0; k < 2000; k++) {
      ah_path_flow_t pf = {0,
                           (int)(rnd(&s) % (unsigned)nodes),
                           (int)(rnd(&s) % (unsigned)nics),
                           (int)(rnd(&s) % (unsigned)nodes),
                           (int)(rnd(&s) % (unsigned)nics),
                           0};
      if (pf.shost == pf.dhost && pf.snic == pf.dnic) continue;
      uint16_t sport = (uint16_t)(0xC000 | (rnd(&s) & 0x3FFF));
      sim_fabric_flow_t fl = {
          {pf.shost, pf.snic, 1 + (int)(rnd(&s) & 1)}, {pf.dhost, pf.dnic, 1}, sport, 0};
      int side, spine, rx, sside, sspine, srx, links[4];
      ah_path_model_route(t, &pf, sport, &side, &spine, &rx);
      int m = sim_fabric_route(f, &fl, links, 4);
      if (m < 0) { /* no live route: the planner finds no spine or no leaf to deliver from */
        ck_assert_int_eq(rx, -1);
        failed_routes++;
        continue;
      }
      ck_assert_int_eq(decode(f, links, m, &sside, &sspine, &srx), 0);
      ck_assert_msg(side == sside && spine == sspine && rx == srx,
                    "%s flow %d/%d->%d/%d port 0x%x: planner (%d,%d,%d) sim (%d,%d,%d)", spec,
                    pf.shost, pf.snic, pf.dhost, pf.dnic, sport, side, spine, rx, sside, sspine,
                    srx);
      compared++;
      cross += spine >= 0;
    }
    ah_path_topo_free(t);
    sim_fabric_free(f);
  }
  ck_assert_int_gt(compared, 40000); /* the comparison really ran, over both kinds of route */
  ck_assert_int_gt(cross, 20000);
}
END_TEST

START_TEST(topo_text_names_hosts_and_addresses) {
  char err[256], text[4096];
  sim_fabric_t *f = sim_fabric_create("nodes=2,gpus=8,nic=4x400x2", "seeds=0x51:0x52:0x53,fail=3-1",
                                      0, err, sizeof err);
  ck_assert_msg(f != NULL, "%s", err);
  const char *names[] = {"alpha", "beta"};
  ck_assert_int_gt(sim_fabric_topo_text(f, names, text, sizeof text), 0);
  ah_path_topo_t *t = NULL;
  ck_assert_int_eq(ah_path_topo_parse(text, "text", &t), 0);
  ck_assert_str_eq(t->hosts[1].name, "beta");
  ck_assert_int_eq(t->hosts[1].pair, 1);
  ck_assert_str_eq(t->hosts[1].dev[3], "mlx5_3");
  uint8_t g[16];
  sim_fabric_gid((sim_fabric_ep_t){1, 3, 1}, g);
  ck_assert_mem_eq(t->hosts[1].gid[3], g, 16);
  ck_assert_uint_eq(t->seed_lag, 0x53);
  ck_assert_int_eq(ah_path_link_failed(t, 3, 1), 1);
  ck_assert_int_eq(ah_path_link_failed(t, 3, 0), 0);
  ah_path_topo_free(t);
  char small[16];
  int need = sim_fabric_topo_text(f, NULL, small, sizeof small); /* truncated, length as snprintf */
  ck_assert_int_gt(need, (int)sizeof small);
  ck_assert_uint_eq(strlen(small), sizeof small - 1);
  sim_fabric_free(f);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {sport_is_the_kernels, routes_match_the_planners_model,
                                topo_text_names_hosts_and_addresses};
  return ah_check_main("fabric_planner", (ah_check_case_t){.name = "planner", .timeout = 120},
                       tests, AH_CHECK_COUNT(tests));
}
