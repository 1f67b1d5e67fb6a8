/* path_plan.c: how well RoCE source-port choice spreads a training cluster's long-lived flows over a
 * leaf-spine fabric — a flow-level model, not a packet simulation, and every figure says so.
 *
 * The fabric: 16 leaves in 8 pairs x 8 spines; 4 hosts per leaf pair, each with 8 dual-port NICs
 * (one bonded address, left port to the pair's left leaf, right port to the right leaf, C4-style);
 * uplinks are non-blocking (capacity = the leaf's downlinks / 8 = 4 NIC ports). A flow is one QP;
 * its route is decided by hashes over the RoCEv2 5-tuple (path/ah_path_text.c's model): the host's LAG
 * picks the NIC port, the source leaf's ECMP picks the spine over its live uplinks, the spine's ECMP
 * picks which of the destination's two leaves delivers it. Jobs of 2-16 hosts run rings (NIC n to
 * NIC n of the next host, 2 QPs each) or NCCL-style double binary trees, placed scattered over the
 * cluster as a busy scheduler leaves them. For each mix, with and without one failed uplink:
 *   ecmp    NCCL's ports, derived by the kernel from the QP numbers (flow label 0)
 *   spread  AUTOHA_QP_SPORT=spread: distinct, evenly spread ports per NIC pair
 *   plan    AUTOHA_QP_SPORT=plan: the planner's ports
 * Figures: max link load over the ideal max, dual-port violations (a flow leaving on one side and
 * arriving on the other), and modelled bus bandwidth relative to ideal: each flow gets the smallest
 * capacity/load share along its path (NIC ports and fabric links), a job runs at its slowest flow,
 * averaged over jobs weighted by hosts. "Ideal" is the lowest max load a routing can reach while
 * every NIC keeps its two ports evenly loaded (C4's dual-port balance; unbalancing a NIC costs more
 * than it saves): a leaf pair's cross-pair demand splits in halves over its two leaves, the larger
 * half on the leaf with more live links, each half spread evenly, ceil(half / live links) per link.
 * With all links up that is ceil(pair demand / 16); with a failed uplink the leaf that lost it
 * carries its half on 7 links. A job whose flows sit on links below that load can score above 1.00.
 *
 * `path_plan N` prints the topology file of case N (0-5) instead, in the AUTOHA_QP_TOPO format. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ah_path.h"

#define PAIRS 8
#define SPINES 8
#define HOSTS_PER_PAIR 4
#define NICS 8
#define HOSTS (PAIRS * HOSTS_PER_PAIR)
#define UPLINK_CAP ((double)HOSTS_PER_PAIR * NICS / SPINES)

enum { M_ECMP, M_SPREAD, M_PLAN, NMETHODS };
static const char *method_name[NMETHODS] = {"ecmp", "spread", "plan"};

typedef struct {
  const char *name;
  int njobs;
  int size[8];
  int pattern[8];
} mix_t;

static const mix_t mixes[] = {
    {"rings 16+8+4+2+2", 5, {16, 8, 4, 2, 2}, {0, 0, 0, 0, 0}},
    {"trees 16+8+8", 3, {16, 8, 8}, {1, 1, 1}},
    {"mixed 8r+8t+6r+4t+4r+2r", 6, {8, 8, 6, 4, 4, 2}, {0, 1, 0, 1, 0, 0}},
};

static uint64_t rng_state;
static uint32_t rng(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 33);
}

/* Writes the topology file text for a mix: scattered placement from a fixed seed. */
static char *topo_text(const mix_t *m, int fail) {
  static char buf[1 << 16];
  int perm[HOSTS], n = 0;
  for (int i = 0; i < HOSTS; i++) perm[i] = i;
  for (int i = HOSTS - 1; i > 0; i--) {
    int j = (int)(rng() % (uint32_t)(i + 1)), t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  n += snprintf(buf + n, sizeof buf - (size_t)n, "spines %d\npairs %d\nseeds 0x51 0x52 0x53\n",
                SPINES, PAIRS);
  for (int h = 0; h < HOSTS; h++) {
    n += snprintf(buf + n, sizeof buf - (size_t)n, "host h%d %d\n", h, h / HOSTS_PER_PAIR);
    for (int i = 0; i < NICS; i++)
      n += snprintf(buf + n, sizeof buf - (size_t)n, "nic h%d mlx5_%d 10.%d.%d.%d\n", h, i,
                    h / HOSTS_PER_PAIR, h % HOSTS_PER_PAIR, i + 1);
  }
  int next = 0;
  for (int j = 0; j < m->njobs; j++) {
    /* GPU intensity: bigger jobs are the more intensive ones here, with some spread */
    n += snprintf(buf + n, sizeof buf - (size_t)n, "job j%d %.2f %s 2 ", j,
                  m->size[j] * (1.0 + 0.1 * j), m->pattern[j] ? "tree" : "ring");
    for (int k = 0; k < m->size[j]; k++)
      n += snprintf(buf + n, sizeof buf - (size_t)n, "%sh%d", k ? "," : "", perm[next++]);
    n += snprintf(buf + n, sizeof buf - (size_t)n, "\n");
  }
  if (fail)
    n += snprintf(buf + n, sizeof buf - (size_t)n, "fail %d %d\n", (int)(rng() % (2 * PAIRS)),
                  (int)(rng() % SPINES));
  return buf;
}

typedef struct {
  double max_to_ideal, busbw;
  int violations, max_load, ideal, unplanned;
} result_t;

static result_t evaluate(const ah_path_topo_t *t, const ah_path_flow_t *f, int n,
                         const uint16_t *port) {
  static int up[2 * PAIRS][SPINES], down[2 * PAIRS][SPINES], tx[HOSTS][NICS][2], rx[HOSTS][NICS][2];
  static int out_pair[PAIRS], in_pair[PAIRS], nic_out[HOSTS][NICS], nic_in[HOSTS][NICS];
  static int ideal_up[2 * PAIRS], ideal_down[2 * PAIRS]; /* per leaf */
  int *side = malloc((size_t)n * sizeof *side), *spine = malloc((size_t)n * sizeof *spine),
      *rxs = malloc((size_t)n * sizeof *rxs);
  result_t r = {0};
  memset(up, 0, sizeof up), memset(down, 0, sizeof down), memset(tx, 0, sizeof tx),
      memset(rx, 0, sizeof rx);
  memset(out_pair, 0, sizeof out_pair), memset(in_pair, 0, sizeof in_pair);
  memset(nic_out, 0, sizeof nic_out), memset(nic_in, 0, sizeof nic_in);
  for (int i = 0; i < n; i++) {
    ah_path_model_route(t, &f[i], port[i], &side[i], &spine[i], &rxs[i]);
    int sp = t->hosts[f[i].shost].pair, dp = t->hosts[f[i].dhost].pair;
    tx[f[i].shost][f[i].snic][side[i]]++;
    nic_out[f[i].shost][f[i].snic]++;
    nic_in[f[i].dhost][f[i].dnic]++;
    if (rxs[i] != side[i]) r.violations++;
    if (rxs[i] >= 0) rx[f[i].dhost][f[i].dnic][rxs[i]]++;
    if (spine[i] >= 0) {
      up[2 * sp + side[i]][spine[i]]++;
      if (rxs[i] >= 0) down[2 * dp + rxs[i]][spine[i]]++;
      out_pair[sp]++, in_pair[dp]++;
    }
  }
  /* ideal: the lowest max load a routing can reach while each NIC keeps its two ports evenly
   * loaded (C4's dual-port balance): a pair's demand then splits in halves over its two leaves,
   * the larger half on the leaf with more live links, each half spread evenly over its leaf */
  for (int p = 0; p < PAIRS; p++) {
    for (int dir = 0; dir < 2; dir++) {
      int d = dir ? in_pair[p] : out_pair[p], a = d / 2, b = d - a,
          *ideal = dir ? ideal_down : ideal_up;
      int lL = 0, lR = 0;
      for (int s = 0; s < SPINES; s++)
        lL += !ah_path_link_failed(t, 2 * p, s), lR += !ah_path_link_failed(t, 2 * p + 1, s);
      int o1L = (a + lL - 1) / lL, o1R = (b + lR - 1) / lR, o2L = (b + lL - 1) / lL,
          o2R = (a + lR - 1) / lR;
      int one = o1L > o1R ? o1L : o1R, two = o2L > o2R ? o2L : o2R;
      ideal[2 * p] = one <= two ? o1L : o2L;
      ideal[2 * p + 1] = one <= two ? o1R : o2R;
      for (int x = 0; x < 2; x++) {
        if (ideal[2 * p + x] > r.ideal) r.ideal = ideal[2 * p + x];
        if (ideal[2 * p + x] < 1) ideal[2 * p + x] = 1;
      }
    }
  }
  for (int l = 0; l < 2 * PAIRS; l++)
    for (int s = 0; s < SPINES; s++) {
      if (up[l][s] > r.max_load) r.max_load = up[l][s];
      if (down[l][s] > r.max_load) r.max_load = down[l][s];
    }
  r.max_to_ideal = r.ideal ? (double)r.max_load / r.ideal : 1.0;
  /* bus bandwidth: per job, the slowest flow's share over the ideal one */
  double wsum = 0, acc = 0;
  for (int j = 0; j < t->njobs; j++) {
    double rate = 1e9, ideal = 1e9;
    for (int i = 0; i < n; i++) {
      if (f[i].job != j) continue;
      double x = 1.0 / tx[f[i].shost][f[i].snic][side[i]];
      if (rxs[i] < 0) x = 0; /* unreachable */
      else x = fmin(x, 1.0 / rx[f[i].dhost][f[i].dnic][rxs[i]]);
      double y = fmin(1.0 / ceil(nic_out[f[i].shost][f[i].snic] / 2.0),
                      1.0 / ceil(nic_in[f[i].dhost][f[i].dnic] / 2.0));
      if (spine[i] >= 0) {
        int sp = t->hosts[f[i].shost].pair;
        x = fmin(x, UPLINK_CAP / up[2 * sp + side[i]][spine[i]]);
        if (rxs[i] >= 0)
          x = fmin(x, UPLINK_CAP / down[2 * t->hosts[f[i].dhost].pair + rxs[i]][spine[i]]);
        int dl = 2 * t->hosts[f[i].dhost].pair + (rxs[i] >= 0 ? rxs[i] : side[i]);
        y = fmin(y, fmin(UPLINK_CAP / ideal_up[2 * sp + side[i]], UPLINK_CAP / ideal_down[dl]));
      }
      rate = fmin(rate, x);
      ideal = fmin(ideal, y);
    }
    acc += t->jobs[j].nhosts * (rate / ideal);
    wsum += t->jobs[j].nhosts;
  }
  r.busbw = acc / wsum;
  free(side), free(spine), free(rxs);
  return r;
}

/* ---- planning time at scale ---- */

#define SCALE_PAIRS 32
#define SCALE_HOSTS_PER_PAIR 8
#define SCALE_SPINES 256

/* One ring job over 256 hosts x 8 dual-port NICs x 8 channels = 16,384 flows on 64 leaves x 256
 * spines, with `nfail` distinct failed uplinks drawn with a fixed seed. */
static char *scale_topo_text(int nfail) {
  int hosts = SCALE_PAIRS * SCALE_HOSTS_PER_PAIR;
  size_t cap = 1 << 20;
  char *buf = malloc(cap);
  if (!buf) return NULL;
  int n =
      snprintf(buf, cap, "spines %d\npairs %d\nseeds 0x61 0x62 0x63\n", SCALE_SPINES, SCALE_PAIRS);
  for (int h = 0; h < hosts; h++) {
    n += snprintf(buf + n, cap - (size_t)n, "host s%d %d\n", h, h / SCALE_HOSTS_PER_PAIR);
    for (int i = 0; i < NICS; i++)
      n += snprintf(buf + n, cap - (size_t)n, "nic s%d mlx5_%d 10.%d.%d.%d\n", h, i, h / 256,
                    h % 256, i + 1);
  }
  n += snprintf(buf + n, cap - (size_t)n, "job big 1.0 ring 8 ");
  for (int h = 0; h < hosts; h++) n += snprintf(buf + n, cap - (size_t)n, "%ss%d", h ? "," : "", h);
  n += snprintf(buf + n, cap - (size_t)n, "\n");
  uint64_t saved = rng_state;
  rng_state = 0x5ca1e;
  static unsigned char used[2 * SCALE_PAIRS][SCALE_SPINES];
  memset(used, 0, sizeof used);
  for (int k = 0; k < nfail;) {
    int leaf = (int)(rng() % (2 * SCALE_PAIRS)), spine = (int)(rng() % SCALE_SPINES);
    if (used[leaf][spine]) continue;
    used[leaf][spine] = 1;
    n += snprintf(buf + n, cap - (size_t)n, "fail %d %d\n", leaf, spine);
    k++;
  }
  rng_state = saved;
  return buf;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Plans the scale topology with nfail failed links; returns the seconds taken (-1 on error) and the
 * plan's max/ideal link load and unplanned flows through the pointers. */
static double scale_plan(int nfail, int *nflows_p, double *max_to_ideal_p, int *unplanned_p) {
  char *text = scale_topo_text(nfail);
  ah_path_topo_t *t = NULL;
  if (!text || ah_path_topo_parse(text, "bench-scale", &t)) return free(text), -1;
  free(text);
  ah_path_flow_t *f = NULL;
  int n = ah_path_topo_flows(t, &f);
  ah_path_route_t *routes = n > 0 ? calloc((size_t)n, sizeof *routes) : NULL;
  uint16_t *port = n > 0 ? calloc((size_t)n, sizeof *port) : NULL;
  if (!routes || !port) return -1;
  double t0 = now_s();
  if (ah_path_plan(t, f, n, routes)) return -1;
  double secs = now_s() - t0;
  /* the plan's max link load (through the hash model), over the lowest the demand allows */
  int unplanned = 0, nleaf = 2 * t->npairs, S = t->nspines, maxload = 0;
  int *up = calloc((size_t)nleaf * (size_t)S, sizeof *up),
      *down = calloc((size_t)nleaf * (size_t)S, sizeof *down);
  int *out = calloc((size_t)nleaf, sizeof *out), *in = calloc((size_t)nleaf, sizeof *in);
  if (!up || !down || !out || !in) return -1;
  for (int i = 0; i < n; i++) {
    int side, spine, rx;
    ah_path_model_route(t, &f[i], routes[i].sport, &side, &spine, &rx);
    unplanned += !routes[i].planned;
    if (spine < 0) continue;
    int sl = 2 * t->hosts[f[i].shost].pair + side;
    out[sl]++, up[(size_t)sl * S + spine]++;
    if (rx >= 0) {
      int dl = 2 * t->hosts[f[i].dhost].pair + rx;
      in[dl]++, down[(size_t)dl * S + spine]++;
    }
  }
  int ideal = 1;
  for (int l = 0; l < nleaf; l++) {
    int live = 0;
    for (int sp = 0; sp < S; sp++) {
      live += !ah_path_link_failed(t, l, sp);
      if (up[(size_t)l * S + sp] > maxload) maxload = up[(size_t)l * S + sp];
      if (down[(size_t)l * S + sp] > maxload) maxload = down[(size_t)l * S + sp];
    }
    int need = live ? ((out[l] > in[l] ? out[l] : in[l]) + live - 1) / live : 0;
    if (need > ideal) ideal = need;
  }
  *nflows_p = n;
  *max_to_ideal_p = (double)maxload / ideal;
  *unplanned_p = unplanned;
  free(up), free(down), free(out), free(in);
  free(port);
  free(routes);
  free(f);
  ah_path_topo_free(t);
  return secs;
}

int main(int argc, char **argv) {
  int ncases = (int)(sizeof mixes / sizeof *mixes) * 2;
  if (argc > 1) { /* the topology file of one case; the generator is replayed up to it */
    int want = atoi(argv[1]);
    if (want < 0 || want >= ncases)
      return fprintf(stderr, "usage: path_plan [case 0-%d]\n", ncases - 1), 2;
    rng_state = 0x2024;
    for (int i = 0; i < want; i++) {
      topo_text(&mixes[i / 2], i % 2);
      for (int q = 0; q < HOSTS * NICS; q++) rng(); /* the QPN bases drawn per case */
    }
    fputs(topo_text(&mixes[want / 2], want % 2), stdout);
    return 0;
  }
  int ok = 1;
  double ratio_sum = 0;
  int nratio = 0;
  rng_state = 0x2024;
  printf(
      "path_plan: flow-level leaf-spine model (not a packet simulation): %d leaves x %d spines, "
      "%d hosts x %d dual-port NICs, 2 QPs per NIC pair\n\n",
      2 * PAIRS, SPINES, HOSTS, NICS);
  printf("%-28s %-7s %-7s %10s %10s %10s %12s\n", "jobs", "uplink", "method", "max load",
         "max/ideal", "dual-port", "busbw/ideal");
  for (size_t mi = 0; mi < sizeof mixes / sizeof *mixes; mi++) {
    for (int fail = 0; fail < 2; fail++) {
      ah_path_topo_t *t = NULL;
      if (ah_path_topo_parse(topo_text(&mixes[mi], fail), "bench", &t)) return 2;
      ah_path_flow_t *f = NULL;
      int n = ah_path_topo_flows(t, &f);
      uint16_t *port[NMETHODS];
      ah_path_route_t *routes = calloc((size_t)n, sizeof *routes);
      for (int m = 0; m < NMETHODS; m++) port[m] = calloc((size_t)n, sizeof *port[m]);
      if (n <= 0 || !routes || !port[M_ECMP] || !port[M_SPREAD] || !port[M_PLAN]) return 2;
      /* ecmp: QP numbers handed out per NIC from a random base, in connection order */
      static uint32_t qpn[HOSTS][NICS];
      for (int h = 0; h < HOSTS; h++)
        for (int i = 0; i < NICS; i++) qpn[h][i] = 0x100 + (rng() & 0xFFFF) * 8;
      for (int i = 0; i < n; i++) {
        uint32_t l = qpn[f[i].shost][f[i].snic]++, r = qpn[f[i].dhost][f[i].dnic]++;
        port[M_ECMP][i] = ah_path_label_to_sport(ah_path_label_from_qpn(l, r));
        const uint8_t *sg = t->hosts[f[i].shost].gid[f[i].snic],
                      *dg = t->hosts[f[i].dhost].gid[f[i].dnic];
        port[M_SPREAD][i] = ah_path_spread_port(ah_path_hash5(0, sg, dg, 0), (unsigned)f[i].k);
      }
      if (ah_path_plan(t, f, n, routes)) return 2;
      int unplanned = 0;
      for (int i = 0; i < n; i++)
        port[M_PLAN][i] = routes[i].sport, unplanned += !routes[i].planned;
      result_t res[NMETHODS];
      for (int m = 0; m < NMETHODS; m++) {
        res[m] = evaluate(t, f, n, port[m]);
        printf("%-28s %-7s %-7s %10d %10.2f %10d %12.2f\n", mixes[mi].name,
               fail ? "1 down" : "all up", method_name[m], res[m].max_load, res[m].max_to_ideal,
               res[m].violations, res[m].busbw);
      }
      int pass = res[M_PLAN].max_to_ideal <= 1.05 && res[M_PLAN].violations == 0 && unplanned == 0;
      if (!pass) {
        printf(
            "  MISS: plan max/ideal %.2f, %d dual-port violations, %d flows without a planned port\n",
            res[M_PLAN].max_to_ideal, res[M_PLAN].violations, unplanned);
        ok = 0;
      }
      ratio_sum += log(res[M_PLAN].busbw / res[M_ECMP].busbw);
      nratio++;
      for (int m = 0; m < NMETHODS; m++) free(port[m]);
      free(routes);
      free(f);
      ah_path_topo_free(t);
    }
  }
  /* Planning time at scale: every rank of a job plans (the plan is deterministic), so it must not
   * grow with failed links. Bar: with 1 and 64 failed links within 2x the no-failure time (plus
   * 0.5 s of slack for a noisy machine). */
  printf(
      "\nplanning time (CPU, wall clock): %d leaves x %d spines, %d hosts x %d dual-port NICs, one "
      "ring job, 8 channels\n",
      2 * SCALE_PAIRS, SCALE_SPINES, SCALE_PAIRS * SCALE_HOSTS_PER_PAIR, NICS);
  const int fails[3] = {0, 1, 64};
  double secs[3];
  for (int i = 0; i < 3; i++) {
    int nf = 0, unplanned = 0;
    double mti = 0;
    secs[i] = scale_plan(fails[i], &nf, &mti, &unplanned);
    if (secs[i] < 0) return 2;
    printf(
        "  %6d flows, %2d failed links: %7.2f s  (plan max/ideal %.2f, %d flows without a planned "
        "port)\n",
        nf, fails[i], secs[i], mti, unplanned);
    if (i > 0 && secs[i] > 2 * secs[0] + 0.5) {
      printf("  MISS: %d failed links take %.2f s, the no-failure plan %.2f s\n", fails[i], secs[i],
             secs[0]);
      ok = 0;
    }
  }
  printf(
      "\nbar: plan max/ideal <= 1.05 and 0 dual-port violations in every case; planning with failed "
      "links within 2x the no-failure time\n");
  printf("plan busbw over ecmp busbw (modelled, geometric mean of %d cases): %.2fx %s\n", nratio,
         exp(ratio_sum / nratio), ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
