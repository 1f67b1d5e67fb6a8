/* Throughput of sim/fabric against answers worked out by hand: one shared link split evenly, the
 * classic max-min case with a flow held back elsewhere, strict priority starving the low class,
 * weighted 3:1 sharing (and a class's unused share going to the other), degraded, scheduled and
 * down links, and an oversubscribed uplink. The fabrics are one 100 Gb/s single-port NIC per node,
 * so every figure is a fraction of 100. */
#include <check.h>
#include <stdio.h>

#include "ah_check.h"
#include "sim_fabric.h"

static sim_fabric_t *make(const char *topo, const char *fabric) {
  char err[512];
  sim_fabric_t *f = sim_fabric_create(topo, fabric, 0, err, sizeof err);
  ck_assert_msg(f != NULL, "%s / %s: %s", topo, fabric, err);
  return f;
}

/* Four nodes under one leaf (hostsperpair=4, single-port NIC 0 on the left leaf). */
static sim_fabric_t *one_leaf(const char *extra) {
  char spec[256];
  snprintf(spec, sizeof spec, "hostsperpair=4%s%s", extra ? "," : "", extra ? extra : "");
  return make("nodes=4,gpus=1,nic=1x100", spec);
}

static sim_fabric_flow_t flow(int src, int dst, int dscp) {
  return (sim_fabric_flow_t){{src, 0, 1}, {dst, 0, 1}, 0xC001, (uint8_t)(dscp << 2)};
}

/* The link into node n's NIC (leaf0->nodeN/mlx5_0:1). */
static int down_link(const sim_fabric_t *f, int n) {
  char name[64];
  snprintf(name, sizeof name, "leaf0->node%d/mlx5_0:1", n);
  int l = sim_fabric_link_find(f, name);
  ck_assert_int_ge(l, 0);
  return l;
}

static int up_link(const sim_fabric_t *f, int n) {
  char name[64];
  snprintf(name, sizeof name, "node%d/mlx5_0:1->leaf0", n);
  int l = sim_fabric_link_find(f, name);
  ck_assert_int_ge(l, 0);
  return l;
}

START_TEST(two_flows_split_one_link) {
  sim_fabric_t *f = one_leaf(NULL);
  sim_fabric_flow_t fl[2] = {flow(0, 2, 0), flow(1, 2, 0)};
  double r[2];
  sim_fabric_rates(f, fl, 2, 0, 0, r);
  ck_assert_double_eq_tol(r[0], 50, 1e-6);
  ck_assert_double_eq_tol(r[1], 50, 1e-6);
  sim_fabric_rates(f, fl, 1, 0, 0, r); /* alone: the line rate */
  ck_assert_double_eq_tol(r[0], 100, 1e-6);
  sim_fabric_free(f);
}
END_TEST

START_TEST(max_min_with_a_flow_held_back_elsewhere) {
  sim_fabric_t *f = one_leaf(NULL);
  ck_assert_int_eq(sim_fabric_set_link(f, up_link(f, 0), 0.2), 0); /* node0 sends at most 20 */
  sim_fabric_flow_t fl[3] = {flow(0, 2, 0), flow(1, 2, 0), flow(3, 2, 0)};
  double r[3];
  sim_fabric_rates(f, fl, 3, 0, 0, r);
  ck_assert_double_eq_tol(r[0], 20, 1e-6);
  ck_assert_double_eq_tol(r[1], 40, 1e-6); /* the 80 left on node2's link, shared by two */
  ck_assert_double_eq_tol(r[2], 40, 1e-6);
  sim_fabric_free(f);
}
END_TEST

START_TEST(strict_priority_starves_the_low_class) {
  sim_fabric_t *f = one_leaf(NULL); /* default: strict, higher DSCP first */
  sim_fabric_flow_t fl[2] = {flow(0, 2, 0), flow(1, 2, 46)};
  double r[2];
  sim_fabric_rates(f, fl, 2, 0, 0, r);
  ck_assert_double_eq_tol(r[1], 100, 1e-6);
  ck_assert_double_eq_tol(r[0], 0, 1e-6);
  sim_fabric_set_link(f, up_link(f, 1),
                      0.3); /* the high class can use only 30: the rest is low's */
  sim_fabric_rates(f, fl, 2, 0, 0, r);
  ck_assert_double_eq_tol(r[1], 30, 1e-6);
  ck_assert_double_eq_tol(r[0], 70, 1e-6);
  sim_fabric_free(f);
  f = one_leaf("sched=strict:0/46"); /* an explicit order: DSCP 0 first */
  sim_fabric_rates(f, fl, 2, 0, 0, r);
  ck_assert_double_eq_tol(r[0], 100, 1e-6);
  ck_assert_double_eq_tol(r[1], 0, 1e-6);
  sim_fabric_free(f);
}
END_TEST

START_TEST(weighted_three_to_one) {
  sim_fabric_t *f = one_leaf("sched=wrr:46=3/0=1");
  sim_fabric_flow_t fl[3] = {flow(0, 2, 46), flow(1, 2, 0), flow(3, 2, 46)};
  double r[3];
  sim_fabric_rates(f, fl, 2, 0, 0, r);
  ck_assert_double_eq_tol(r[0], 75, 1e-6);
  ck_assert_double_eq_tol(r[1], 25, 1e-6);
  sim_fabric_rates(f, fl, 3, 0, 0, r); /* the weight is the class's, not each flow's */
  ck_assert_double_eq_tol(r[0], 37.5, 1e-6);
  ck_assert_double_eq_tol(r[2], 37.5, 1e-6);
  ck_assert_double_eq_tol(r[1], 25, 1e-6);
  sim_fabric_set_link(f, up_link(f, 0), 0.1); /* class 46 now uses 10 + what node3 can get */
  sim_fabric_rates(f, fl, 2, 0, 0, r);
  ck_assert_double_eq_tol(r[0], 10, 1e-6);
  ck_assert_double_eq_tol(r[1], 90, 1e-6); /* its unused share went to the low class */
  sim_fabric_free(f);
}
END_TEST

START_TEST(degraded_scheduled_and_down_links) {
  sim_fabric_t *f = one_leaf(NULL);
  char err[256];
  sim_fabric_flow_t fl[2] = {flow(0, 2, 0), flow(1, 2, 0)};
  double r[2];
  ck_assert_int_eq(sim_fabric_set_link(f, down_link(f, 2), 0.5), 0);
  sim_fabric_rates(f, fl, 1, 0, 0, r);
  ck_assert_double_eq_tol(r[0], 50, 1e-6);
  sim_fabric_set_link(f, down_link(f, 2), 1);
  ck_assert_msg(sim_fabric_schedule(f, "at=1s:portdown:node0/mlx5_0:1; at=2s:portup:node0/mlx5_0:1",
                                    err, sizeof err) == 0,
                "%s", err);
  sim_fabric_rates(f, fl, 2, 0.5, 0, r);
  ck_assert_double_eq_tol(r[0], 50, 1e-6);
  sim_fabric_rates(f, fl, 2, 1.5, 0, r); /* node0's port is down: its flow 0, the other all */
  ck_assert_double_eq_tol(r[0], 0, 1e-6);
  ck_assert_double_eq_tol(r[1], 100, 1e-6);
  ck_assert_int_eq(sim_fabric_path_up(f, &fl[0], 1.5, 0), 0);
  sim_fabric_rates(f, fl, 2, 2.5, 0, r);
  ck_assert_double_eq_tol(r[0], 50, 1e-6);
  ck_assert_int_eq(sim_fabric_path_up(f, &fl[0], 2.5, 0), 1);
  sim_fabric_free(f);
}
END_TEST

START_TEST(oversubscribed_uplink) {
  /* One node per pair, one 100G port per node: a 1:1 fabric has one 100G spine; oversub=2 halves it. */
  sim_fabric_t *f = make("nodes=2,gpus=1,nic=1x100", "oversub=2");
  ck_assert_int_eq(sim_fabric_spines(f), 1);
  sim_fabric_flow_t fl = flow(0, 1, 0);
  int links[4];
  ck_assert_int_eq(sim_fabric_route(f, &fl, links, 4), 4);
  double r;
  sim_fabric_rates(f, &fl, 1, 0, 0, &r);
  ck_assert_double_eq_tol(r, 50, 1e-6);
  sim_fabric_free(f);
  f = make("nodes=2,gpus=1,nic=1x100", NULL);
  sim_fabric_rates(f, &fl, 1, 0, 0, &r);
  ck_assert_double_eq_tol(r, 100, 1e-6);
  sim_fabric_free(f);
}
END_TEST

START_TEST(default_fabric_is_one_to_one) {
  /* The default fabric for 2 nodes of 8 dual-port 400G NICs: each leaf has 8 host ports, so 8
   * spines of 400. 16 flows from node0 to node1 with perfectly spread ports would all get 400;
   * ECMP collisions make some slower, none faster, and the total stays within the NICs' 6400. */
  sim_fabric_t *f = make("nodes=2,gpus=8,nic=8x400x2", NULL);
  ck_assert_int_eq(sim_fabric_spines(f), 8);
  sim_fabric_flow_t fl[16];
  double r[16], sum = 0;
  for (int i = 0; i < 16; i++)
    fl[i] = (sim_fabric_flow_t){{0, i % 8, 1}, {1, i % 8, 1}, (uint16_t)(0xC000 + 97 * i), 0};
  sim_fabric_rates(f, fl, 16, 0, 0, r);
  for (int i = 0; i < 16; i++) {
    ck_assert_double_le_tol(r[i], 400, 1e-6);
    ck_assert_double_gt(r[i], 0);
    sum += r[i];
  }
  ck_assert_double_le_tol(sum, 6400, 1e-6);
  sim_fabric_free(f);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {two_flows_split_one_link,
                                max_min_with_a_flow_held_back_elsewhere,
                                strict_priority_starves_the_low_class,
                                weighted_three_to_one,
                                degraded_scheduled_and_down_links,
                                oversubscribed_uplink,
                                default_fabric_is_one_to_one};
  return ah_check_main("fabric_rates", (ah_check_case_t){.name = "rates", .timeout = 30}, tests,
                       AH_CHECK_COUNT(tests));
}
