/* sim_fabric_rates.c: the rate each always-backlogged flow gets — max-min fair (progressive filling)
 * among the flows of one traffic class (one DSCP), classes served by the fabric's scheduler:
 *   strict: classes in rank order, each filling what the ones before it left;
 *   wrr:    each link splits its capacity among the classes crossing it by weight, a class that
 *           cannot use its share (its flows are held back elsewhere) leaving the rest to the others.
 * The weighted case is a fixed point: per-link class shares, then max-min per class on those shares,
 * then each share re-split with the demand of the classes that did not fill it, until the rates
 * stop moving (at most 64 rounds).
 *
 * Capacities are line rates in Gb/s scaled by each link's fraction at the time asked; a flow with a
 * link down gets 0 and takes nothing from the others. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim_fabric_internal.h"

#define EPS 1e-9
#define WRR_ROUNDS 64

typedef struct {
  int n;                            /* flows */
  int nl;                           /* links in use (local numbering) */
  int (*lid)[SIM_FABRIC_ROUTE_MAX]; /* per flow: local link ids */
  int *nlid;                        /* per flow: how many; -1 when the flow is down */
  int *cls;                         /* per flow: class index */
  double *cap;                      /* per local link: capacity, Gb/s */
} net_t;

/* Max-min fair rates of the flows with cls == c (or every routed flow when c < 0) over capacities
 * cap[] (per local link); rates of other flows are left alone. With froze != NULL, froze[i] is the
 * link that stopped flow i, preferring among links that filled at once one not in soft[] (the
 * links where the class's share was already cut to its demand). */
static void maxmin(const net_t *t, int c, const double *cap, const char *soft, int *froze,
                   double *rate, double *rem, int *cnt, char *frozen) {
  memcpy(rem, cap, (size_t)t->nl * sizeof *rem);
  memset(cnt, 0, (size_t)t->nl * sizeof *cnt);
  int left = 0;
  for (int i = 0; i < t->n; i++) {
    frozen[i] = !(t->nlid[i] > 0 && (c < 0 || t->cls[i] == c));
    if (frozen[i]) continue;
    rate[i] = 0;
    left++;
    for (int k = 0; k < t->nlid[i]; k++) cnt[t->lid[i][k]]++;
  }
  while (left) {
    double inc = INFINITY;
    for (int l = 0; l < t->nl; l++)
      if (cnt[l] && rem[l] / cnt[l] < inc) inc = rem[l] / cnt[l];
    if (inc < 0) inc = 0;
    for (int i = 0; i < t->n; i++) {
      if (frozen[i]) continue;
      rate[i] += inc;
      for (int k = 0; k < t->nlid[i]; k++) rem[t->lid[i][k]] -= inc;
    }
    for (int i = 0; i < t->n; i++) { /* freeze the flows crossing a link that is now full */
      if (frozen[i]) continue;
      int by = -1;
      for (int k = 0; k < t->nlid[i]; k++) {
        int l = t->lid[i][k];
        if (rem[l] <= EPS * (cap[l] + 1) && (by < 0 || (soft && soft[by] && !soft[l]))) by = l;
      }
      if (by < 0) continue;
      frozen[i] = 1;
      left--;
      for (int j = 0; j < t->nlid[i]; j++) cnt[t->lid[i][j]]--;
      if (froze) froze[i] = by;
    }
  }
}

static void strict(const sim_fabric_t *f, const net_t *t, const int *dscp_of, int ncls,
                   double *rate, double *rem, int *cnt, char *frozen) {
  double *left = malloc((size_t)t->nl * sizeof *left);
  if (!left) return;
  memcpy(left, t->cap, (size_t)t->nl * sizeof *left);
  char *done = calloc((size_t)ncls, 1);
  for (int round = 0; done && round < ncls; round++) {
    int c = -1; /* the next class in service order */
    for (int k = 0; k < ncls; k++)
      if (!done[k] && (c < 0 || f->rank[dscp_of[k]] < f->rank[dscp_of[c]])) c = k;
    done[c] = 1;
    maxmin(t, c, left, NULL, NULL, rate, rem, cnt, frozen);
    for (int i = 0; i < t->n; i++)
      if (t->nlid[i] > 0 && t->cls[i] == c)
        for (int k = 0; k < t->nlid[i]; k++)
          left[t->lid[i][k]] = fmax(0, left[t->lid[i][k]] - rate[i]);
  }
  free(done);
  free(left);
}

/* Splits cap among the classes with present[] set by weight, a class getting no more than its
 * demand while another wants more (what no class wants is shared out by weight again). */
static void split(double cap, int ncls, const char *present, const double *w, const double *demand,
                  double *share) {
  for (int c = 0; c < ncls; c++) share[c] = present[c] ? -1 : 0; /* -1: not settled yet */
  for (;;) {
    double wsum = 0, rest = cap;
    for (int c = 0; c < ncls; c++) {
      if (share[c] >= 0 && present[c]) rest -= share[c];
      if (share[c] < 0) wsum += w[c];
    }
    if (wsum <= 0) { /* every class is capped by its demand: the rest stays theirs to use */
      double all = 0;
      for (int c = 0; c < ncls; c++) all += present[c] ? w[c] : 0;
      for (int c = 0; c < ncls; c++)
        if (present[c] && all > 0) share[c] += rest * w[c] / all;
      return;
    }
    int capped = 0;
    for (int c = 0; c < ncls; c++)
      if (share[c] < 0 && demand[c] < rest * w[c] / wsum) share[c] = demand[c], capped = 1;
    if (capped) continue;
    for (int c = 0; c < ncls; c++)
      if (share[c] < 0) share[c] = rest * w[c] / wsum;
    return;
  }
}

static void weighted(const sim_fabric_t *f, const net_t *t, const int *dscp_of, int ncls,
                     double *rate, double *rem, int *cnt, char *frozen) {
  size_t m = (size_t)t->nl * (size_t)ncls;
  double *vcap = malloc(m * sizeof *vcap), *demand = malloc(m * sizeof *demand),
         *use = malloc(m * sizeof *use);
  double *w = malloc((size_t)ncls * sizeof *w), *prev = malloc((size_t)t->n * sizeof *prev);
  double *capc = malloc((size_t)t->nl * sizeof *capc);
  char *present = calloc(m, 1), *soft = malloc((size_t)t->nl), *full = malloc(m);
  int *froze = malloc((size_t)t->n * sizeof *froze);
  if (!vcap || !demand || !use || !w || !prev || !capc || !present || !soft || !full || !froze)
    goto out;
  for (int c = 0; c < ncls; c++) w[c] = f->weight[dscp_of[c]];
  for (size_t k = 0; k < m; k++) demand[k] = INFINITY;
  for (int i = 0; i < t->n; i++)
    for (int k = 0; k < t->nlid[i]; k++) present[(size_t)t->lid[i][k] * ncls + t->cls[i]] = 1;
  for (int round = 0; round < WRR_ROUNDS; round++) {
    for (int l = 0; l < t->nl; l++)
      split(t->cap[l], ncls, present + (size_t)l * ncls, w, demand + (size_t)l * ncls,
            vcap + (size_t)l * ncls);
    memcpy(prev, rate, (size_t)t->n * sizeof *prev);
    for (int c = 0; c < ncls; c++) {
      for (int l = 0; l < t->nl; l++) {
        capc[l] = vcap[(size_t)l * ncls + c];
        soft[l] = demand[(size_t)l * ncls + c] < INFINITY;
      }
      maxmin(t, c, capc, soft, froze, rate, rem, cnt, frozen);
    }
    memset(use, 0, m * sizeof *use);
    memset(full, 0, m);
    for (int i = 0; i < t->n; i++) {
      if (t->nlid[i] <= 0) continue;
      for (int k = 0; k < t->nlid[i]; k++) use[(size_t)t->lid[i][k] * ncls + t->cls[i]] += rate[i];
      full[(size_t)froze[i] * ncls + t->cls[i]] = 1;
    }
    /* A class none of whose flows is held back by this link demands only what it uses here; the
     * others would take more. */
    for (size_t k = 0; k < m; k++) demand[k] = present[k] && !full[k] ? use[k] : INFINITY;
    double moved = 0;
    for (int i = 0; i < t->n; i++) moved = fmax(moved, fabs(rate[i] - prev[i]));
    if (round > 0 && moved < 1e-9) break;
  }
out:
  free(vcap);
  free(demand);
  free(use);
  free(w);
  free(prev);
  free(capc);
  free(present);
  free(soft);
  free(full);
  free(froze);
}

void sim_fabric_rates(const sim_fabric_t *f, const sim_fabric_flow_t *flows, int n, double wall_s,
                      double virt_us, double *gbps) {
  net_t t = {.n = n};
  int *local = malloc((size_t)f->nlinks * sizeof *local);
  int dscp_of[64], cls_of[64], ncls = 0;
  t.lid = malloc((size_t)(n + 1) * sizeof *t.lid);
  t.nlid = malloc((size_t)(n + 1) * sizeof *t.nlid);
  t.cls = malloc((size_t)(n + 1) * sizeof *t.cls);
  t.cap = malloc((size_t)4 * (n + 1) * sizeof *t.cap);
  double *rem = malloc((size_t)4 * (n + 1) * sizeof *rem);
  int *cnt = malloc((size_t)4 * (n + 1) * sizeof *cnt);
  char *frozen = malloc((size_t)n + 1);
  for (int i = 0; i < n; i++) gbps[i] = 0;
  if (!local || !t.lid || !t.nlid || !t.cls || !t.cap || !rem || !cnt || !frozen) goto out;
  for (int l = 0; l < f->nlinks; l++) local[l] = -1;
  for (int d = 0; d < 64; d++) cls_of[d] = -1;
  for (int i = 0; i < n; i++) {
    int links[SIM_FABRIC_ROUTE_MAX],
        k = sim_fabric_route_at(f, &flows[i], wall_s, virt_us, links, SIM_FABRIC_ROUTE_MAX);
    int d = flows[i].tc >> 2;
    if (cls_of[d] < 0) dscp_of[ncls] = d, cls_of[d] = ncls++;
    t.cls[i] = cls_of[d];
    t.nlid[i] = k == 0 ? 0 : -1;
    if (k == 0) gbps[i] = f->port_gbps; /* looped back inside the NIC */
    if (k <= 0 || !sim_fabric_path_up(f, &flows[i], wall_s, virt_us)) continue;
    for (int j = 0; j < k; j++) {
      if (local[links[j]] < 0) {
        sim_fabric_link_t in;
        sim_fabric_link_info(f, links[j], &in);
        t.cap[t.nl] = in.gbps * sim_fabric_link_fraction(f, links[j], wall_s, virt_us);
        local[links[j]] = t.nl++;
      }
      t.lid[i][j] = local[links[j]];
    }
    t.nlid[i] = k;
  }
  if (f->sched == SIM_FABRIC_SCHED_WRR && ncls > 1)
    weighted(f, &t, dscp_of, ncls, gbps, rem, cnt, frozen);
  else if (ncls > 1) strict(f, &t, dscp_of, ncls, gbps, rem, cnt, frozen);
  else maxmin(&t, -1, t.cap, NULL, NULL, gbps, rem, cnt, frozen);
out:
  free(local);
  free(t.lid);
  free(t.nlid);
  free(t.cls);
  free(t.cap);
  free(rem);
  free(cnt);
  free(frozen);
}
