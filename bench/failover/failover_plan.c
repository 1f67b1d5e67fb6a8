/* failover_plan: bench/failover's first figure — where the flows of a job go when a spine uplink
 * fails, on sim/'s 1:1 leaf-spine of dual-port 200G NICs (bonded), with the rates of sim/fabric's
 * max-min model (as bench/fabric's figures). Per job (2 and 4 nodes x 8 NICs, ring, 2 or 4 QPs per
 * NIC and direction), for random hash seeds and random failed links, the modelled busbw of a NIC
 * (its flows x the slowest flow's rate: the slowest flow paces a ring) with the ports autoha's
 * planner gave the job:
 *   before      no fault;
 *   ecmp        switches rerouted around the dead link (reroute=1): ECMP rehashes the flows;
 *   naive       switches did not reroute; every flow on the dead link failed over to its shadow's
 *               pre-picked port (the first port of the pair whose path avoids the primary's spine);
 *   replanned   ah_path_replan's ports for the affected flows (the rest stay);
 *   ideal       ah_path_replan_bound: no choice of ports does better on the surviving links.
 * Bar: replanned >= 0.95 of ideal in every run. C4P reports 185.76 -> 301.46 Gb/s (96% of ideal).
 *   failover_plan [RUNS]   (default 20 runs per job and fault kind) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_path.h"
#include "sim_fabric.h"

typedef struct {
  const char *name;
  int down, degraded; /* uplinks taken down, uplinks degraded to half */
} fault_kind_t;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
static double minimum(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++)
    if (v[i] < m) m = v[i];
  return m;
}

/* The slowest flow's rate (Gb/s) in the fabric now. */
static double slowest(const sim_fabric_t *f, const sim_fabric_flow_t *fl, int n, double *gbps) {
  sim_fabric_rates(f, fl, n, 0, 0, gbps);
  double m = 1e300;
  for (int i = 0; i < n; i++)
    if (gbps[i] < m) m = gbps[i];
  return m;
}

static void set_ports(sim_fabric_flow_t *fl, const ah_path_route_t *r, int n) {
  for (int i = 0; i < n; i++) fl[i].sport = r[i].sport;
}

/* Sets leaf–spine link (both directions) to `fraction` in a fabric's private state. */
static int set_link(sim_fabric_t *f, int leaf, int spine, double fraction) {
  char name[64];
  snprintf(name, sizeof name, "leaf%d->spine%d", leaf, spine);
  int a = sim_fabric_link_find(f, name);
  snprintf(name, sizeof name, "spine%d->leaf%d", spine, leaf);
  int b = sim_fabric_link_find(f, name);
  if (a < 0 || b < 0) return -1;
  return sim_fabric_set_link(f, a, fraction) | sim_fabric_set_link(f, b, fraction);
}

/* The shadow's pre-picked port: the first port of the pair's sequence whose modelled path leaves
 * through another spine than the primary's (another side when the flow stays in its leaf pair). */
static uint16_t shadow_port(const ah_path_topo_t *t, const ah_path_flow_t *f, uint16_t primary) {
  int side, spine, rx, pside, pspine;
  ah_path_model_route(t, f, primary, &pside, &pspine, &rx);
  const uint8_t *sg = t->hosts[f->shost].gid[f->snic], *dg = t->hosts[f->dhost].gid[f->dnic];
  uint32_t pair = ah_path_hash5(0x5badu + (uint32_t)f->k, sg, dg, 0);
  for (unsigned k = 0; k < 4096; k++) {
    uint16_t p = ah_path_spread_port(pair, k);
    ah_path_model_route(t, f, p, &side, &spine, &rx);
    if (pspine >= 0 ? spine >= 0 && spine != pspine : side != pside) return p;
  }
  return primary;
}

int main(int argc, char **argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 20;
  if (runs < 1) {
    fprintf(stderr, "failover_plan: RUNS must be a positive number, not '%s'\n", argv[1]);
    return 2;
  }
  static const fault_kind_t kinds[] = {
      {"1 uplink down", 1, 0}, {"2 uplinks down", 2, 0}, {"1 uplink at 50%", 0, 1}};
  const int nkinds = (int)(sizeof kinds / sizeof kinds[0]);
  int ok = 1;
  double worst_all = 1e300, c4p_ecmp = 0, c4p_before = 0, c4p_after = 0, c4p_ideal = 0;
  int c4p_n = 0;
  unsigned rng = 12345;
  for (int nodes = 2; nodes <= 4; nodes += 2)
    for (int ch = 2; ch <= 4; ch += 2)
      for (int kind = 0; kind < nkinds; kind++) {
        double *v =
            calloc((size_t)runs * 6, sizeof *v); /* before ecmp naive replanned ideal ratio */
        if (!v) return 1;
        for (int run = 0; run < runs; run++) {
          char fab[128], fabr[160], err[256];
          unsigned s = (unsigned)(run + 1);
          snprintf(fab, sizeof fab, "bond=1,seeds=%u:%u:%u", s * 3 + 1, s * 5 + 2, s * 7 + 3);
          snprintf(fabr, sizeof fabr, "%s,reroute=1", fab);
          sim_fabric_t *f = sim_fabric_create("nic=8x200x2", fab, nodes, err, sizeof err);
          sim_fabric_t *fr = sim_fabric_create("nic=8x200x2", fabr, nodes, err, sizeof err);
          if (!f || !fr) {
            fprintf(stderr, "failover_plan: fabric: %s\n", err);
            return 1;
          }
          static char text[1 << 16];
          int len = sim_fabric_topo_text(f, NULL, text, sizeof text - 256);
          if (len < 0 || (size_t)len >= sizeof text - 256) return 1;
          char *end = text + len;
          end += sprintf(end, "job bench 1.0 ring %d ", ch);
          for (int n = 0; n < nodes; n++) end += sprintf(end, "%snode%d", n ? "," : "", n);
          strcpy(end, "\n");
          ah_path_topo_t *t;
          ah_path_flow_t *flows;
          if (ah_path_topo_parse(text, "failover_plan", &t)) return 1;
          int nf = ah_path_topo_flows(t, &flows);
          ah_path_route_t *plan = calloc((size_t)nf, sizeof *plan),
                          *re = calloc((size_t)nf, sizeof *re);
          sim_fabric_flow_t *fl = calloc((size_t)nf, sizeof *fl);
          double *gbps = calloc((size_t)nf, sizeof *gbps);
          if (nf <= 0 || !plan || !re || !fl || !gbps || ah_path_plan(t, flows, nf, plan)) return 1;
          for (int i = 0; i < nf; i++) {
            fl[i].src = (sim_fabric_ep_t){flows[i].shost, flows[i].snic, 1};
            fl[i].dst = (sim_fabric_ep_t){flows[i].dhost, flows[i].dnic, 1};
          }
          double port = sim_fabric_port_gbps(f), per_nic = ch;
          set_ports(fl, plan, nf);
          double before = slowest(f, fl, nf, gbps) * per_nic;
          /* the faults: distinct random uplinks of the job's leaves */
          ah_path_link_state_t ls[4];
          int nl = 0;
          while (nl < kinds[kind].down + kinds[kind].degraded) {
            rng = rng * 1103515245u + 12345u;
            int leaf = (int)((rng >> 8) % (unsigned)(2 * nodes));
            rng = rng * 1103515245u + 12345u;
            int spine = (int)((rng >> 8) % (unsigned)sim_fabric_spines(f)), dup = 0;
            for (int i = 0; i < nl; i++) dup |= ls[i].leaf == leaf && ls[i].spine == spine;
            if (dup) continue;
            ls[nl] = (ah_path_link_state_t){leaf, spine, nl < kinds[kind].down ? 0.0 : 0.5};
            if (set_link(f, leaf, spine, ls[nl].fraction) ||
                set_link(fr, leaf, spine, ls[nl].fraction))
              return 1;
            nl++;
          }
          double ecmp = slowest(fr, fl, nf, gbps) * per_nic;
          /* naive failover: flows whose path is down move to their shadow's port */
          for (int i = 0; i < nf; i++) {
            re[i] = plan[i];
            if (!sim_fabric_path_up(f, &fl[i], 0, 0))
              re[i].sport = shadow_port(t, &flows[i], plan[i].sport);
          }
          set_ports(fl, re, nf);
          double naive = slowest(f, fl, nf, gbps) * per_nic;
          memcpy(re, plan, (size_t)nf * sizeof *re);
          if (ah_path_replan(t, flows, nf, ls, nl, NULL, re, NULL) < 0) return 1;
          set_ports(fl, re, nf);
          double replanned = slowest(f, fl, nf, gbps) * per_nic;
          double ideal = ah_path_replan_bound(t, flows, nf, ls, nl, NULL) * port * per_nic;
          double *r = v + (size_t)run * 6;
          r[0] = before, r[1] = ecmp, r[2] = naive, r[3] = replanned, r[4] = ideal,
          r[5] = replanned / ideal;
          if (kind == 0)
            c4p_ecmp += ecmp, c4p_before += naive, c4p_after += replanned, c4p_ideal += ideal,
                c4p_n++;
          free(plan);
          free(re);
          free(fl);
          free(gbps);
          free(flows);
          ah_path_topo_free(t);
          sim_fabric_free(f);
          sim_fabric_free(fr);
        }
        double col[6][256];
        int n = runs < 256 ? runs : 256;
        for (int c = 0; c < 6; c++)
          for (int i = 0; i < n; i++) col[c][i] = v[(size_t)i * 6 + (size_t)c];
        double worst = minimum(col[5], n);
        if (worst < worst_all) worst_all = worst;
        printf(
            "failover_plan: %d nodes x 8, %d QPs/NIC, %s (%d runs, median Gb/s per NIC): before %.1f, "
            "ECMP rehash %.1f, naive failover %.1f, replanned %.1f, ideal %.1f; replanned/ideal %.3f median, "
            "%.3f worst\n",
            nodes, ch, kinds[kind].name, n, median(col[0], n), median(col[1], n), median(col[2], n),
            median(col[3], n), median(col[4], n), median(col[5], n), worst);
        if (worst < 0.95) ok = 0;
        free(v);
      }
  printf(
      "failover_plan: one uplink down, mean over jobs and runs: ECMP rehash %.2f, naive failover %.2f -> "
      "replanned %.2f Gb/s per NIC, %.0f%% of ideal (C4P reports 185.76 -> 301.46 Gb/s, 96%% of ideal)\n",
      c4p_ecmp / c4p_n, c4p_before / c4p_n, c4p_after / c4p_n, 100 * c4p_after / c4p_ideal);
  printf(
      "failover_plan (sim/fabric rates, bar: replanned >= 0.95 of ideal in every run; worst %.3f): %s\n",
      worst_all, ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
