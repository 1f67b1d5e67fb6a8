/* test_ha_rebal.c: unit tests of the rebalance after failovers and around degraded links
 * (rdma/ah_ha_rebal.c): a queue pair is found by its planned port, a failed primary names the two
 * links its route crossed, the re-plan around a failed spine keeps every flow alive, moves only the
 * flows that crossed it, and reaches >= 0.95 of the best possible share (issue 15's bar) where the
 * plan's ports cut flows; around a degraded spine it moves only the flows on it and beats the plan;
 * a queue pair outside the plan gets a port clear of the bad links. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_check.h"
#include "ah_ha_rebal.h"

/* A 1:1 leaf-spine: 8 spines, one leaf pair per host, 8 NICs per host, rings of 2 channels. */
static char *topo_text(int hosts) {
  static char buf[16384];
  int n = snprintf(buf, sizeof buf, "spines 8\npairs %d\nseeds 11 22 33\n", hosts);
  for (int h = 0; h < hosts; h++) {
    n += snprintf(buf + n, sizeof buf - (size_t)n, "host h%d %d\n", h, h);
    for (int i = 0; i < 8; i++)
      n +=
          snprintf(buf + n, sizeof buf - (size_t)n, "nic h%d mlx5_%d 10.1.%d.%d\n", h, i, h, i + 1);
  }
  n += snprintf(buf + n, sizeof buf - (size_t)n, "job j 1 ring 2 ");
  for (int h = 0; h < hosts; h++)
    n += snprintf(buf + n, sizeof buf - (size_t)n, "%sh%d", h ? "," : "", h);
  snprintf(buf + n, sizeof buf - (size_t)n, "\n");
  return buf;
}

typedef struct {
  ah_path_topo_t *t;
  ah_path_flow_t *flows;
  ah_path_route_t *plan;
  int n;
} fixture_t;

static void setup(fixture_t *f, int hosts) {
  memset(f, 0, sizeof *f);
  ck_assert_int_eq(ah_path_topo_parse(topo_text(hosts), "topo", &f->t), 0);
  f->n = ah_path_topo_flows(f->t, &f->flows);
  ck_assert_int_eq(f->n, hosts * 8 * 2);
  f->plan = calloc((size_t)f->n, sizeof *f->plan);
  ck_assert_int_eq(ah_path_plan(f->t, f->flows, f->n, f->plan), 0);
}

static void teardown(fixture_t *f) {
  free(f->plan);
  free(f->flows);
  ah_path_topo_free(f->t);
}

START_TEST(flow_by_planned_port) {
  fixture_t f;
  setup(&f, 2);
  for (int i = 0; i < f.n; i++) {
    const ah_path_flow_t *fl = &f.flows[i];
    const uint8_t *sg = f.t->hosts[fl->shost].gid[fl->snic],
                  *dg = f.t->hosts[fl->dhost].gid[fl->dnic];
    ck_assert_int_eq(ah_ha_rebal_flow(f.t, f.flows, f.plan, f.n, sg, dg, f.plan[i].sport, NULL), i);
    /* a port the plan did not give this pair, and a taken flow, find nothing */
    unsigned char *taken = calloc((size_t)f.n, 1);
    taken[i] = 1;
    ck_assert_int_eq(ah_ha_rebal_flow(f.t, f.flows, f.plan, f.n, sg, dg, f.plan[i].sport, taken),
                     -1);
    free(taken);
    /* the reverse direction is another flow */
    ck_assert_int_ne(ah_ha_rebal_flow(f.t, f.flows, f.plan, f.n, dg, sg, f.plan[i].sport, NULL), i);
  }
  uint8_t unknown[16] = {0xfe, 0x80};
  ck_assert_int_eq(ah_ha_rebal_flow(f.t, f.flows, f.plan, f.n, unknown, f.t->hosts[1].gid[0],
                                    f.plan[0].sport, NULL),
                   -1);
  teardown(&f);
}
END_TEST

START_TEST(suspects_are_the_route_links) {
  fixture_t f;
  setup(&f, 2);
  for (int i = 0; i < f.n; i++) {
    ah_path_link_state_t l[2];
    int side, spine, rx;
    ah_path_model_route(f.t, &f.flows[i], f.plan[i].sport, &side, &spine, &rx);
    ck_assert_int_eq(ah_ha_rebal_suspects(f.t, &f.flows[i], f.plan[i].sport, l), 2);
    ck_assert_int_eq(l[0].leaf, 2 * f.t->hosts[f.flows[i].shost].pair + side);
    ck_assert_int_eq(l[1].leaf, 2 * f.t->hosts[f.flows[i].dhost].pair + rx);
    ck_assert_int_eq(l[0].spine, spine);
    ck_assert_int_eq(l[1].spine, spine);
    ck_assert(l[0].fraction == 0 && l[1].fraction == 0);
  }
  teardown(&f);
}
END_TEST

/* Spine `spine` fails under a job of `hosts` hosts: the flows through it, as their failovers
 * report them, give the links; the re-plan must move exactly those flows, leave none cut, and be
 * within 5% of the bound. */
static void check_spine_down(int hosts, int spine) {
  fixture_t f;
  setup(&f, hosts);
  ah_path_link_state_t links[256];
  int nl = 0;
  unsigned char *hit = calloc((size_t)f.n, 1);
  for (int i = 0; i < f.n; i++) {
    ah_path_link_state_t l[2];
    int k = ah_ha_rebal_suspects(f.t, &f.flows[i], f.plan[i].sport, l);
    if (k == 0 || l[0].spine != spine) continue;
    hit[i] = 1;
    for (int j = 0; j < k; j++) {
      int dup = 0;
      for (int q = 0; q < nl; q++)
        dup |= links[q].leaf == l[j].leaf && links[q].spine == l[j].spine;
      if (!dup) links[nl++] = l[j];
    }
  }
  ck_assert_msg(nl > 0, "no planned flow crosses spine %d", spine);
  ah_path_route_t *routes = calloc((size_t)f.n, sizeof *routes);
  unsigned char *moved = calloc((size_t)f.n, 1);
  ah_ha_rebal_result_t res;
  ck_assert_int_eq(ah_ha_rebal_plan(f.t, f.flows, f.plan, f.n, links, nl, routes, moved, &res), 0);
  ck_assert(res.before == 0); /* the plan's ports leave flows on the dead spine */
  ck_assert_msg(res.share > 0, "a flow is left without a path");
  ck_assert_msg(res.share >= 0.95 * res.bound,
                "re-planned %.3f < 0.95 x best %.3f (%d hosts, spine %d)", res.share, res.bound,
                hosts, spine);
  int nmoved = 0;
  for (int i = 0; i < f.n; i++) {
    nmoved += moved[i];
    if (!hit[i]) { /* a flow off the dead spine keeps its port */
      ck_assert_int_eq(moved[i], 0);
      ck_assert_uint_eq(routes[i].sport, f.plan[i].sport);
    } else {
      ck_assert_int_eq(moved[i], 1);
      ck_assert_int_ne(routes[i].spine, spine);
    }
  }
  ck_assert_int_eq(nmoved, res.moved);
  free(routes);
  free(moved);
  free(hit);
  teardown(&f);
}

START_TEST(replan_spine_down_2) {
  for (int s = 0; s < 8; s++) check_spine_down(2, s);
}
END_TEST
START_TEST(replan_spine_down_4) {
  for (int s = 0; s < 8; s += 3) check_spine_down(4, s);
}
END_TEST

/* A degraded spine (the links a slow queue pair's route crosses, at the rebalance's 0.1): the
 * re-plan moves exactly the flows on those links, off them, and beats the plan's ports. */
START_TEST(replan_spine_degraded) {
  fixture_t f;
  setup(&f, 2);
  int spine = f.plan[0].spine;
  ck_assert_int_ge(spine, 0);
  ah_path_link_state_t links[2];
  int nl = ah_ha_rebal_suspects(f.t, &f.flows[0], f.plan[0].sport, links);
  ck_assert_int_eq(nl, 2);
  for (int j = 0; j < nl; j++) links[j].fraction = 0.1;
  ah_path_route_t *routes = calloc((size_t)f.n, sizeof *routes);
  unsigned char *moved = calloc((size_t)f.n, 1);
  ah_ha_rebal_result_t res;
  ck_assert_int_eq(ah_ha_rebal_plan(f.t, f.flows, f.plan, f.n, links, nl, routes, moved, &res), 0);
  ck_assert_msg(res.before > 0 && res.share > res.before, "degraded: plan %.3f, re-planned %.3f",
                res.before, res.share);
  ck_assert_msg(res.share >= 0.95 * res.bound, "re-planned %.3f < 0.95 x best %.3f", res.share,
                res.bound);
  ck_assert_int_eq(moved[0], 1);
  for (int i = 0; i < f.n; i++) {
    ah_path_link_state_t l[2];
    int k = ah_ha_rebal_suspects(f.t, &f.flows[i], f.plan[i].sport, l), on = 0;
    for (int j = 0; j < k; j++)
      for (int q = 0; q < nl; q++) on |= l[j].leaf == links[q].leaf && l[j].spine == links[q].spine;
    if (!on) ck_assert_int_eq(moved[i], 0); /* a flow off the slow links keeps its port */
    if (moved[i]) ck_assert_int_ne(routes[i].spine, spine);
  }
  free(routes);
  free(moved);
  teardown(&f);
}
END_TEST

/* A queue pair the plan does not place: found by its GIDs, and given a port whose route leaves the
 * bad links (and not the one it had). */
START_TEST(clear_sport_leaves_bad_links) {
  fixture_t f;
  setup(&f, 2);
  for (int i = 0; i < f.n; i += 3) {
    const ah_path_flow_t *fl = &f.flows[i];
    ah_path_flow_t g;
    ck_assert_int_eq(ah_ha_rebal_flow_by_gids(f.t, f.t->hosts[fl->shost].gid[fl->snic],
                                              f.t->hosts[fl->dhost].gid[fl->dnic], &g),
                     0);
    ck_assert(g.shost == fl->shost && g.snic == fl->snic && g.dhost == fl->dhost &&
              g.dnic == fl->dnic);
    ah_path_link_state_t bad[2];
    int nl = ah_ha_rebal_suspects(f.t, &g, f.plan[i].sport, bad);
    ck_assert_int_eq(nl, 2);
    bad[0].fraction = 0.5, bad[1].fraction = 0;
    uint16_t p =
        ah_ha_rebal_clear_sport(f.t, &g, bad, nl, (uint16_t)(f.plan[i].sport + 1), f.plan[i].sport);
    ck_assert_uint_ne(p, 0);
    ck_assert_uint_ne(p, f.plan[i].sport);
    ah_path_link_state_t l[2];
    int k = ah_ha_rebal_suspects(f.t, &g, p, l);
    ck_assert_int_eq(k, 2);
    for (int j = 0; j < k; j++)
      for (int q = 0; q < nl; q++)
        ck_assert(!(l[j].leaf == bad[q].leaf && l[j].spine == bad[q].spine));
  }
  uint8_t nowhere[16] = {0xfe};
  ah_path_flow_t g;
  ck_assert_int_eq(ah_ha_rebal_flow_by_gids(f.t, nowhere, f.t->hosts[0].gid[0], &g), -1);
  teardown(&f);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {flow_by_planned_port,  suspects_are_the_route_links,
                                replan_spine_down_2,   replan_spine_down_4,
                                replan_spine_degraded, clear_sport_leaves_bad_links};
  return ah_check_main("ha_rebal", (ah_check_case_t){.name = "ha_rebal", .timeout = 60}, tests,
                       AH_CHECK_COUNT(tests));
}
