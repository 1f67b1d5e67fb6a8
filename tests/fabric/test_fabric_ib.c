/* sim/fabric's InfiniBand side (ib=1): the subnet manager's LIDs both ways and each plane's SM, no
 * link aggregation, routes around a dead uplink (the SM's re-sweep), two planes that share no switch (a port reaches only its own plane's ports, over
 * its plane's spines), and the errors that name their text. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "ah_check.h"
#include "sim_fabric.h"

static sim_fabric_t *make(const char *topo, const char *fabric) {
  char err[512];
  sim_fabric_t *f = sim_fabric_create(topo, fabric, 0, err, sizeof err);
  ck_assert_msg(f != NULL, "%s / %s: %s", topo, fabric ? fabric : "", err);
  return f;
}

static void bad(const char *topo, const char *fabric, const char *quoted) {
  char err[512];
  sim_fabric_t *f = sim_fabric_create(topo, fabric, 0, err, sizeof err);
  ck_assert_ptr_null(f);
  ck_assert_msg(strstr(err, quoted) != NULL, "'%s' not in: %s", quoted, err);
}

START_TEST(lids_both_ways) {
  /* 3 nodes of 2 dual-port HCAs: 6 leaves (3 pairs) and 2 spines take LIDs 1-8 */
  sim_fabric_t *f = make("nodes=3,gpus=8,nic=2x400x2,ib=1", NULL);
  ck_assert_int_eq(sim_fabric_leaves(f) + sim_fabric_spines(f), 6 + 2);
  ck_assert_int_eq(sim_fabric_lid(f, (sim_fabric_ep_t){0, 0, 1}), 9);
  ck_assert_int_eq(sim_fabric_lid(f, (sim_fabric_ep_t){0, 0, 2}), 10);
  ck_assert_int_eq(sim_fabric_lid(f, (sim_fabric_ep_t){2, 1, 2}), 20);
  ck_assert_int_eq(sim_fabric_lid_count(f), 20);
  ck_assert_int_eq(sim_fabric_lid(f, (sim_fabric_ep_t){3, 0, 1}), 0); /* no node 3 */
  int seen[21] = {0};
  for (int node = 0; node < 3; node++)
    for (int nic = 0; nic < 2; nic++)
      for (int port = 1; port <= 2; port++) {
        sim_fabric_ep_t ep = {node, nic, port}, back;
        uint16_t lid = sim_fabric_lid(f, ep);
        ck_assert_int_gt(lid, 8);
        ck_assert_int_eq(seen[lid]++, 0); /* one port per LID */
        ck_assert_int_eq(sim_fabric_lid_ep(f, lid, &back), 0);
        ck_assert_int_eq(back.node, node);
        ck_assert_int_eq(back.nic, nic);
        ck_assert_int_eq(back.port, port);
        ck_assert_int_eq(sim_fabric_sm_lid(f, ep), 9); /* one plane: one SM, on node0/mlx5_0:1 */
      }
  sim_fabric_ep_t ep;
  ck_assert_int_eq(sim_fabric_lid_ep(f, 5, &ep), -1);  /* a switch's */
  ck_assert_int_eq(sim_fabric_lid_ep(f, 21, &ep), -1); /* nobody's */
  ck_assert_int_eq(sim_fabric_lid_ep(f, 0, &ep), -1);
  /* InfiniBand has no LAG: a dual-port HCA's ports are routed apart, each to its own leaf */
  int links[8];
  sim_fabric_flow_t fl = {{0, 1, 2}, {1, 1, 2}, 0, 0};
  int n = sim_fabric_route(f, &fl, links, 8);
  ck_assert_int_eq(n, 4);
  char name[64];
  ck_assert_str_eq(sim_fabric_link_name(f, links[0], name, sizeof name), "node0/mlx5_1:2->leaf1");
  ck_assert_str_eq(sim_fabric_link_name(f, links[3], name, sizeof name), "leaf3->node1/mlx5_1:2");
  /* the subnet manager routes around a dead uplink (reroute=1 by default on IB), within the plane */
  int spine = -1, before[8], after[8];
  sim_fabric_flow_t far = {{0, 0, 1}, {2, 0, 1}, 0, 0};
  ck_assert_int_eq(sim_fabric_route_at(f, &far, 0, 0, before, 8), 4);
  sim_fabric_link_t li;
  ck_assert_int_eq(sim_fabric_link_info(f, before[1], &li), 0);
  spine = li.spine;
  ck_assert_int_eq(sim_fabric_set_link(f, before[1], 0), 0);
  ck_assert_int_eq(sim_fabric_route_at(f, &far, 0, 0, after, 8), 4);
  ck_assert_int_eq(sim_fabric_link_info(f, after[1], &li), 0);
  ck_assert_int_ne(li.spine, spine);
  ck_assert_int_eq(sim_fabric_path_up(f, &far, 0, 0), 1);
  sim_fabric_free(f);
  bad("nodes=2,gpus=8,nic=2x400x2,ib=1", "bond=1", "bond=1");
}
END_TEST

START_TEST(two_planes_share_no_switch) {
  sim_fabric_t *f = make("nodes=2,gpus=8,nic=8x400x2,ib=1", "planes=2");
  ck_assert_int_eq(sim_fabric_planes(f), 2);
  ck_assert_int_eq(sim_fabric_spines(f), 8); /* 4 per plane */
  /* each plane has its SM: node0's port 1 for plane 0, its port 2 for plane 1 */
  ck_assert_int_eq(sim_fabric_ep_plane(f, (sim_fabric_ep_t){1, 1, 1}), 0);
  ck_assert_int_eq(sim_fabric_ep_plane(f, (sim_fabric_ep_t){1, 1, 2}), 1);
  ck_assert_int_eq(sim_fabric_sm_lid(f, (sim_fabric_ep_t){1, 1, 1}),
                   sim_fabric_lid(f, (sim_fabric_ep_t){0, 0, 1}));
  ck_assert_int_eq(sim_fabric_sm_lid(f, (sim_fabric_ep_t){1, 1, 2}),
                   sim_fabric_lid(f, (sim_fabric_ep_t){0, 0, 2}));
  /* many flows of each plane: every spine they cross is of their plane; across planes, no route */
  int used[2][8] = {{0}};
  for (int i = 0; i < 64; i++)
    for (int port = 1; port <= 2; port++) {
      sim_fabric_flow_t fl = {{0, i % 8, port}, {1, (i / 8) % 8, port}, 0, 0};
      int links[8], n = sim_fabric_route(f, &fl, links, 8);
      ck_assert_int_eq(n, 4);
      sim_fabric_link_t li;
      ck_assert_int_eq(sim_fabric_link_info(f, links[1], &li), 0);
      ck_assert_int_eq(sim_fabric_spine_plane(f, li.spine), port - 1);
      ck_assert_int_eq(sim_fabric_leaf_plane(f, li.leaf), port - 1);
      used[port - 1][li.spine] = 1;
      sim_fabric_flow_t cross = {{0, i % 8, port}, {1, (i / 8) % 8, 3 - port}, 0, 0};
      ck_assert_int_eq(sim_fabric_route(f, &cross, links, 8), -1);
      ck_assert_int_eq(sim_fabric_path_up(f, &cross, 0, 0), 0);
    }
  int spines0 = 0, spines1 = 0;
  for (int s = 0; s < 8; s++) spines0 += used[0][s], spines1 += used[1][s];
  ck_assert_int_ge(spines0, 2); /* the plane's ECMP still spreads */
  ck_assert_int_ge(spines1, 2);
  sim_fabric_free(f);
  /* one HCA of a single-port pair per plane: mlx5_0 on plane 0, mlx5_1 on plane 1 */
  f = make("nodes=2,gpus=8,nic=2x400,ib=1", "planes=2");
  sim_fabric_flow_t rail = {{0, 1, 1}, {1, 1, 1}, 0, 0}, off = {{0, 1, 1}, {1, 0, 1}, 0, 0};
  int links[8];
  ck_assert_int_eq(sim_fabric_route(f, &rail, links, 8), 4);
  ck_assert_int_eq(sim_fabric_route(f, &off, links, 8), -1);
  sim_fabric_free(f);
  bad("nodes=2,gpus=8,nic=2x400x2", "planes=2", "planes=2 is an InfiniBand");
  bad("nodes=2,gpus=8,nic=2x400x2,ib=1", "planes=3", "'planes=3'");
  bad("nodes=2,gpus=8,nic=2x400x2,ib=1", "planes=2,spines=3", "spines=3");
}
END_TEST

int main(void) {
  Suite *s = suite_create("fabric_ib");
  TCase *tc = tcase_create("ib");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, lids_both_ways);
  tcase_add_test(tc, two_planes_share_no_switch);
  suite_add_tcase(s, tc);
  return ah_check_run(s);
}
