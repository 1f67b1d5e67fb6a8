/* sim/fabric's building, addressing, names, routes, fault schedule and shared state: the defaults
 * and every error naming its text, GIDs both ways, every link's name read back, route shapes, the
 * schedule's clocks and grammar, a link set in one process seen in another (fork), and rerouting. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ah_check.h"
#include "sim_fabric.h"

static sim_fabric_t *make(const char *topo, const char *fabric) {
  char err[512];
  sim_fabric_t *f = sim_fabric_create(topo, fabric, 0, err, sizeof err);
  ck_assert_msg(f != NULL, "%s / %s: %s", topo, fabric ? fabric : "", err);
  return f;
}

/* Creating fails and the message quotes `quoted`. */
static void bad(const char *topo, const char *fabric, const char *quoted) {
  char err[512];
  sim_fabric_t *f = sim_fabric_create(topo, fabric, 0, err, sizeof err);
  ck_assert_ptr_null(f);
  ck_assert_msg(strstr(err, quoted) != NULL, "'%s' not in: %s", quoted, err);
}

START_TEST(build_defaults_and_errors) {
  sim_fabric_t *f = make("nodes=2,gpus=8,nic=8x200x2,ib=1", NULL);
  ck_assert_int_eq(sim_fabric_nics(f), 8);
  ck_assert_int_eq(sim_fabric_ports(f), 2);
  ck_assert_int_eq(sim_fabric_is_ib(f), 1);
  ck_assert_double_eq(sim_fabric_port_gbps(f), 200);
  ck_assert_int_eq(sim_fabric_leaves(f), 4); /* one node per pair */
  ck_assert_int_eq(sim_fabric_spines(f), 8); /* 8 host ports per leaf, 1:1 */
  /* 2 nodes x 8 NICs x 2 ports x (up, down) + 4 leaves x 8 spines x (up, down) */
  ck_assert_int_eq(sim_fabric_link_count(f), 64 + 64);
  sim_fabric_free(f);
  f = make("nodes=4,gpus=8,nic=8x400", "hostsperpair=2,oversub=2");
  ck_assert_int_eq(sim_fabric_ports(f), 1);
  ck_assert_int_eq(sim_fabric_leaves(f), 4);
  ck_assert_int_eq(sim_fabric_spines(f), 4); /* 2 hosts x 4 NICs per leaf = 3200, halved */
  sim_fabric_link_t in;
  ck_assert_int_eq(sim_fabric_link_info(f, sim_fabric_link_find(f, "leaf1->spine2"), &in), 0);
  ck_assert_int_eq(in.kind, SIM_FABRIC_LINK_LEAF_UP);
  ck_assert_double_eq_tol(in.gbps, 400, 1e-9);
  sim_fabric_free(f);
  bad("nodes=2,gpus=8", "spines=8,warp=9", "'warp=9'");
  bad("nodes=2,gpus=8", "spines=0", "'spines=0'");
  bad("nodes=2,gpus=8", "seeds=1:2", "'seeds=1:2'");
  bad("nodes=2,gpus=8", "sched=wrr:46", "'sched=wrr:46'");
  bad("nodes=2,gpus=8", "sched=strict:46/46", "'sched=strict:46/46'");
  bad("nodes=2,gpus=8", "fail=9-0", "'fail=9-0'");
  bad("nodes=4,gpus=8", "pairs=1", "pairs=1");
  bad("nodes=2,gpus=8", "spines=4,oversub=2,upgbps=100", "at most two");
  bad("nodes=2,gpus=8,nic=8x400x3", NULL, "'nic=8x400x3'");
}
END_TEST

START_TEST(addresses_both_ways) {
  uint8_t g[16];
  sim_fabric_ep_t ep;
  sim_fabric_gid((sim_fabric_ep_t){258, 3, 2}, g);
  const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 1, 2, 14};
  ck_assert_mem_eq(g, want, 16);
  ck_assert_int_eq(sim_fabric_gid_ep(g, &ep), 0);
  ck_assert_int_eq(ep.node, 258);
  ck_assert_int_eq(ep.nic, 3);
  ck_assert_int_eq(ep.port, 2);
  g[15] = 12; /* port 0: not an address of the fabric */
  ck_assert_int_eq(sim_fabric_gid_ep(g, &ep), -1);
  g[15] = 13;
  g[12] = 11;
  ck_assert_int_eq(sim_fabric_gid_ep(g, &ep), -1);
}
END_TEST

START_TEST(every_link_name_reads_back) {
  sim_fabric_t *f = make("nodes=3,gpus=8,nic=2x400x2", "hostsperpair=2,spines=3");
  char name[64];
  for (int l = 0; l < sim_fabric_link_count(f); l++) {
    sim_fabric_link_name(f, l, name, sizeof name);
    ck_assert_msg(sim_fabric_link_find(f, name) == l, "%d: %s", l, name);
  }
  ck_assert_str_eq(sim_fabric_link_name(f, 0, name, sizeof name), "node0/mlx5_0:1->leaf0");
  ck_assert_str_eq(sim_fabric_link_name(f, 3, name, sizeof name), "leaf1->node0/mlx5_0:2");
  const char *no[] = {"leaf4->spine0",         "leaf0->spine3",         "spine0->leaf01",
                      "node3/mlx5_0:1->leaf2", "node0/mlx5_0:1->leaf1", "node0/mlx5_0:3",
                      "leaf0-spine0",          " leaf0->spine0",        "spine1"};
  for (size_t i = 0; i < sizeof no / sizeof *no; i++)
    ck_assert_msg(sim_fabric_link_find(f, no[i]) == -1, "%s", no[i]);
  sim_fabric_free(f);
}
END_TEST

START_TEST(route_shapes) {
  sim_fabric_t *f = make("nodes=3,gpus=8,nic=2x400", "hostsperpair=2,spines=2");
  int links[4];
  char a[64], b[64];
  sim_fabric_flow_t same_nic = {{0, 1, 1}, {0, 1, 1}, 0xC000, 0};
  ck_assert_int_eq(sim_fabric_route(f, &same_nic, links, 4), 0);
  sim_fabric_flow_t same_leaf = {
      {0, 0, 1}, {1, 0, 1}, 0xC123, 0}; /* NIC 0 of both: the left leaf */
  ck_assert_int_eq(sim_fabric_route(f, &same_leaf, links, 4), 2);
  ck_assert_str_eq(sim_fabric_link_name(f, links[0], a, sizeof a), "node0/mlx5_0:1->leaf0");
  ck_assert_str_eq(sim_fabric_link_name(f, links[1], b, sizeof b), "leaf0->node1/mlx5_0:1");
  sim_fabric_flow_t across = {{0, 1, 1}, {2, 0, 1}, 0xC123, 0}; /* leaf1 to leaf2 through a spine */
  ck_assert_int_eq(sim_fabric_route(f, &across, links, 4), 4);
  ck_assert_str_eq(sim_fabric_link_name(f, links[0], a, sizeof a), "node0/mlx5_1:1->leaf1");
  ck_assert_str_eq(sim_fabric_link_name(f, links[3], b, sizeof b), "leaf2->node2/mlx5_0:1");
  ck_assert_int_eq(sim_fabric_route(f, &across, links, 3), -1); /* max too small */
  sim_fabric_flow_t outside = {{0, 2, 1}, {2, 0, 1}, 0xC123, 0};
  ck_assert_int_eq(sim_fabric_route(f, &outside, links, 4), -1);
  /* ECMP spreads ports over both spines */
  int seen[2] = {0, 0};
  for (int p = 0; p < 64; p++) {
    across.sport = (uint16_t)(0xC000 + p);
    ck_assert_int_eq(sim_fabric_route(f, &across, links, 4), 4);
    sim_fabric_link_t in;
    sim_fabric_link_info(f, links[1], &in);
    seen[in.spine]++;
  }
  ck_assert_int_gt(seen[0], 10);
  ck_assert_int_gt(seen[1], 10);
  sim_fabric_free(f);
}
END_TEST

START_TEST(schedule_clocks_and_grammar) {
  sim_fabric_t *f = make("nodes=2,gpus=8,nic=2x400x2", "spines=4");
  char err[512];
  int up = sim_fabric_link_find(f, "leaf0->spine3"),
      down = sim_fabric_link_find(f, "spine3->leaf0");
  int deg = sim_fabric_link_find(f, "spine0->leaf1"),
      port = sim_fabric_link_find(f, "leaf2->node1/mlx5_1:1");
  ck_assert_msg(
      sim_fabric_schedule(f,
                          "at=2.5s:down:leaf0-spine3; at=100ms:degrade=0.25:leaf1-spine0;\n"
                          "at=5000us@virt:portdown:node1/mlx5_1:1 ;at=3s@wall:up:leaf0-spine3",
                          err, sizeof err) == 0,
      "%s", err);
  ck_assert_double_eq(sim_fabric_link_fraction(f, up, 2.4, 0), 1);
  ck_assert_double_eq(sim_fabric_link_fraction(f, up, 2.5, 0), 0);
  ck_assert_double_eq(sim_fabric_link_fraction(f, down, 2.7, 0), 0); /* both directions */
  ck_assert_double_eq(sim_fabric_link_fraction(f, up, 3.0, 0), 1);
  ck_assert_double_eq(sim_fabric_link_fraction(f, deg, 0.1, 0), 0.25);
  ck_assert_double_eq(sim_fabric_link_fraction(f, port, 1e6, 4999), 1); /* virtual time only */
  ck_assert_double_eq(sim_fabric_link_fraction(f, port, 0, 5000), 0);
  sim_fabric_set_link(f, deg, 0.1); /* the lower of the set state and the schedule */
  ck_assert_double_eq(sim_fabric_link_fraction(f, deg, 0.2, 0), 0.1);
  const char *bads[][2] = {{"at=2x:down:leaf0-spine0", "'at=2x:down:leaf0-spine0'"},
                           {"at=1s:down:leaf9-spine0", "'at=1s:down:leaf9-spine0'"},
                           {"at=1s:portdown:leaf0-spine0", "NIC port"},
                           {"at=1s:degrade=2:leaf0-spine0", "'at=1s:degrade=2:leaf0-spine0'"},
                           {"at=1s@gpu:down:leaf0-spine0", "@gpu"},
                           {"at=1s:down:leaf0-spine0;down", "'down'"},
                           {"file:/nonexistent/faults", "/nonexistent/faults"}};
  for (size_t i = 0; i < sizeof bads / sizeof *bads; i++) {
    ck_assert_int_eq(sim_fabric_schedule(f, bads[i][0], err, sizeof err), -1);
    ck_assert_msg(strstr(err, bads[i][1]) != NULL, "'%s' not in: %s", bads[i][1], err);
  }
  /* a rejected spec changed nothing: leaf0-spine0 never went down */
  ck_assert_double_eq(sim_fabric_link_fraction(f, sim_fabric_link_find(f, "leaf0->spine0"), 10, 0),
                      1);
  char path[] = "/tmp/fabric_faults_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  const char *file =
      "# a comment\nat=1s:down:leaf3->spine2   # one direction\n\nat=2s:up:leaf3->spine2\n";
  ck_assert_int_eq(write(fd, file, strlen(file)), (ssize_t)strlen(file));
  close(fd);
  char spec[64];
  snprintf(spec, sizeof spec, "file:%s", path);
  ck_assert_msg(sim_fabric_schedule(f, spec, err, sizeof err) == 0, "%s", err);
  unlink(path);
  ck_assert_double_eq(sim_fabric_link_fraction(f, sim_fabric_link_find(f, "leaf3->spine2"), 1.5, 0),
                      0);
  ck_assert_double_eq(sim_fabric_link_fraction(f, sim_fabric_link_find(f, "spine2->leaf3"), 1.5, 0),
                      1);
  ck_assert_double_eq(sim_fabric_link_fraction(f, sim_fabric_link_find(f, "leaf3->spine2"), 2.5, 0),
                      1);
  ck_assert_double_eq(sim_fabric_link_fraction(f, up, 2.6, 0), 0); /* the first spec still holds */
  sim_fabric_free(f);
}
END_TEST

START_TEST(schedule_whole_nic) {
  /* nicdown takes every port of a NIC down, both directions; the NIC beside it and other nodes'
   * same NIC keep theirs; nicup brings all of them back */
  sim_fabric_t *f = make("nodes=2,gpus=8,nic=2x400x2", "spines=4,bond=0");
  char err[512];
  ck_assert_msg(sim_fabric_schedule(f, "at=1s:nicdown:node1/mlx5_1;at=3s:nicup:node1/mlx5_1", err,
                                    sizeof err) == 0,
                "%s", err);
  const char *gone[] = {"node1/mlx5_1:1->leaf2", "leaf2->node1/mlx5_1:1", "node1/mlx5_1:2->leaf3",
                        "leaf3->node1/mlx5_1:2"};
  for (int i = 0; i < 4; i++) {
    int l = sim_fabric_link_find(f, gone[i]);
    ck_assert_int_ge(l, 0);
    ck_assert_double_eq(sim_fabric_link_fraction(f, l, 0.5, 0), 1);
    ck_assert_double_eq(sim_fabric_link_fraction(f, l, 2, 0), 0);
    ck_assert_double_eq(sim_fabric_link_fraction(f, l, 3, 0), 1);
  }
  const char *kept[] = {"node1/mlx5_0:1->leaf2", "node1/mlx5_0:2->leaf3", "node0/mlx5_1:1->leaf0"};
  for (int i = 0; i < 3; i++)
    ck_assert_double_eq(sim_fabric_link_fraction(f, sim_fabric_link_find(f, kept[i]), 2, 0), 1);
  const char *bads[] = {"at=1s:nicdown:node1/mlx5_1:1", "at=1s:nicdown:node2/mlx5_0",
                        "at=1s:nicdown:node1/mlx5_01", "at=1s:nicup:leaf0-spine0",
                        "at=1s:down:node1/mlx5_1"};
  for (size_t i = 0; i < sizeof bads / sizeof *bads; i++) {
    ck_assert_int_eq(sim_fabric_schedule(f, bads[i], err, sizeof err), -1);
    ck_assert_msg(strstr(err, bads[i]) != NULL, "'%s' not in: %s", bads[i], err);
  }
  sim_fabric_free(f);
}
END_TEST

START_TEST(schedule_fatal_nic) {
  /* nicfatal: every port of the NIC down for good (a later nicup does not revive it) and the NIC
   * reported fatal from then on; its neighbour and the same NIC of another node are untouched */
  sim_fabric_t *f = make("nodes=2,gpus=8,nic=2x400x2", "spines=4,bond=0");
  char err[512];
  ck_assert_msg(sim_fabric_schedule(f, "at=1s:nicfatal:node1/mlx5_1;at=3s:nicup:node1/mlx5_1", err,
                                    sizeof err) == 0,
                "%s", err);
  int l = sim_fabric_link_find(f, "node1/mlx5_1:2->leaf3");
  ck_assert_int_ge(l, 0);
  ck_assert_double_eq(sim_fabric_link_fraction(f, l, 0.5, 0), 1);
  ck_assert_double_eq(sim_fabric_link_fraction(f, l, 2, 0), 0);
  ck_assert_double_eq(sim_fabric_link_fraction(f, l, 4, 0), 0);
  ck_assert_int_eq(sim_fabric_nic_fatal(f, 1, 1, 0.5, 0), 0);
  ck_assert_int_eq(sim_fabric_nic_fatal(f, 1, 1, 1.5, 0), 1);
  ck_assert_int_eq(sim_fabric_nic_fatal(f, 1, 0, 1.5, 0), 0);
  ck_assert_int_eq(sim_fabric_nic_fatal(f, 0, 1, 1.5, 0), 0);
  ck_assert_int_eq(sim_fabric_schedule(f, "at=1s:nicfatal:node1/mlx5_1:1", err, sizeof err), -1);
  ck_assert_msg(strstr(err, "nicfatal:node1/mlx5_1:1") != NULL, "%s", err);
  sim_fabric_free(f);
}
END_TEST

START_TEST(shared_state_across_fork) {
  char name[64], err[256];
  snprintf(name, sizeof name, "/simfab_test_%d", (int)getpid());
  sim_fabric_unlink(name);
  sim_fabric_t *f = make("nodes=2,gpus=8,nic=2x400x2", "spines=2");
  ck_assert_msg(sim_fabric_attach(f, name, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(sim_fabric_set_link(f, 3, 0.5), 0);
  double parent_now = sim_fabric_wall_s(f);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) { /* another process of the job: its own fabric, the same mapping */
    char e[256];
    sim_fabric_t *g = sim_fabric_create("nodes=2,gpus=8,nic=2x400x2", "spines=2", 0, e, sizeof e);
    int rc = !g || sim_fabric_attach(g, name, e, sizeof e) ? 10 : 0;
    if (!rc && sim_fabric_link_fraction(g, 3, 0, 0) != 0.5) rc = 11;
    if (!rc && !(sim_fabric_wall_s(g) >= parent_now && sim_fabric_wall_s(g) < parent_now + 5))
      rc = 12;
    if (!rc) sim_fabric_set_link(g, 7, 0);
    _exit(rc);
  }
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_int_eq(WEXITSTATUS(status), 0);
  ck_assert_double_eq(sim_fabric_link_fraction(f, 7, 0, 0), 0);
  ck_assert_double_eq(sim_fabric_link_fraction(f, 6, 0, 0), 1);
  /* a fabric of another size is refused, naming the object */
  sim_fabric_t *other = make("nodes=3,gpus=8,nic=2x400x2", "spines=2");
  ck_assert_int_eq(sim_fabric_attach(other, name, err, sizeof err), -1);
  ck_assert_msg(strstr(err, name) != NULL, "%s", err);
  sim_fabric_free(other);
  ck_assert_int_eq(sim_fabric_unlink(name), 0);
  ck_assert_int_eq(sim_fabric_set_link(f, 7, 1), 0); /* the mapping outlives the name */
  ck_assert_double_eq(sim_fabric_link_fraction(f, 7, 0, 0), 1);
  ck_assert_int_eq(sim_fabric_set_link(f, 7, 1.5), -1);
  sim_fabric_free(f);
}
END_TEST

/* Finds a port whose route crosses a spine; returns the uplink's name in buf. */
static uint16_t port_over_spine(sim_fabric_t *f, sim_fabric_flow_t *fl, char *buf, size_t len) {
  int links[4];
  ck_assert_int_eq(sim_fabric_route(f, fl, links, 4), 4);
  sim_fabric_link_t in;
  sim_fabric_link_info(f, links[1], &in);
  snprintf(buf, len, "leaf%d-spine%d", in.leaf, in.spine);
  return fl->sport;
}

START_TEST(reroute_skips_down_links) {
  char err[256], target[64], spec[128];
  for (int reroute = 0; reroute <= 1; reroute++) {
    snprintf(spec, sizeof spec, "spines=4,reroute=%d", reroute);
    sim_fabric_t *f = make("nodes=2,gpus=8,nic=1x400x2", spec);
    sim_fabric_flow_t fl = {{0, 0, 1}, {1, 0, 1}, 0xC0DE, 0};
    port_over_spine(f, &fl, target, sizeof target);
    char ev[128];
    snprintf(ev, sizeof ev, "at=1s:down:%s", target);
    ck_assert_msg(sim_fabric_schedule(f, ev, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(sim_fabric_path_up(f, &fl, 0.5, 0), 1);
    ck_assert_int_eq(sim_fabric_path_up(f, &fl, 1.5, 0), reroute); /* black-holed unless rerouted */
    double r;
    sim_fabric_rates(f, &fl, 1, 1.5, 0, &r);
    ck_assert_double_eq_tol(r, reroute ? 400 : 0, 1e-6);
    int links[4];
    ck_assert_int_eq(sim_fabric_route_at(f, &fl, 1.5, 0, links, 4), 4);
    sim_fabric_link_t in;
    sim_fabric_link_info(f, links[1], &in);
    char now[64];
    snprintf(now, sizeof now, "leaf%d-spine%d", in.leaf, in.spine);
    ck_assert_int_eq(strcmp(now, target) != 0, reroute);
    sim_fabric_free(f);
  }
  /* a bonded NIC's dead port: the bond moves the flow to the other port */
  sim_fabric_t *f = make("nodes=2,gpus=8,nic=1x400x2", "spines=4,reroute=1");
  sim_fabric_flow_t fl = {{0, 0, 1}, {1, 0, 1}, 0xC0DE, 0};
  int links[4];
  ck_assert_int_eq(sim_fabric_route(f, &fl, links, 4), 4);
  sim_fabric_link_t in;
  sim_fabric_link_info(f, links[0], &in);
  sim_fabric_set_link(f, links[0], 0);
  ck_assert_int_eq(sim_fabric_route_at(f, &fl, 0, 0, links, 4), 4);
  sim_fabric_link_t now;
  sim_fabric_link_info(f, links[0], &now);
  ck_assert_int_eq(now.ep.port, 3 - in.ep.port);
  ck_assert_int_eq(sim_fabric_path_up(f, &fl, 0, 0), 1);
  sim_fabric_free(f);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {build_defaults_and_errors,   addresses_both_ways,
                                every_link_name_reads_back,  route_shapes,
                                schedule_clocks_and_grammar, schedule_whole_nic,
                                schedule_fatal_nic,          shared_state_across_fork,
                                reroute_skips_down_links};
  return ah_check_main("fabric", (ah_check_case_t){.name = "fabric", .timeout = 30}, tests,
                       AH_CHECK_COUNT(tests));
}
