/* ah_path_replan.c: C4P's dynamic half — after a leaf–spine link fails or degrades, new source
 * ports for the flows it carried, so that the moved flows spread over the surviving links instead of
 * piling onto one (ECMP's rehash or a failover onto pre-picked shadow ports does that).
 *
 * The key choice: the objective is the slowest flow's max–min share, which paces a ring collective,
 * estimated per link as capacity ÷ flows; moved flows are placed greedily (the port whose worst link
 * leaves the most), then re-placed until no move helps. Only affected flows move: every other QP
 * keeps its port, so a re-plan costs one RTS→RTS modify per moved QP and nothing elsewhere. */
#include <stdlib.h>
#include <string.h>

#include "ah_path.h"

/* The link indices of the model: NIC ports out and in (per host, NIC and side), then leaf→spine
 * and spine→leaf links (per leaf and spine). */
typedef struct {
  const ah_path_topo_t *t;
  int maxnic, S, nleaf;
  size_t nports, nlinks;
  double *cap; /* per link, relative to a NIC port; 0: down */
  int *count;  /* flows on each link */
  /* the flows of each NIC pair, which keep distinct ports: flow i's pair is grp[gs[i]..ge[i]) */
  int *grp, *gs, *ge;
  const ah_path_flow_t *flows;
  const ah_path_route_t *routes;
} model_t;

static int same_pair(const ah_path_flow_t *a, const ah_path_flow_t *b) {
  return a->shost == b->shost && a->snic == b->snic && a->dhost == b->dhost && a->dnic == b->dnic;
}

static int by_nic_pair(const void *a, const void *b, void *ctx) {
  const ah_path_flow_t *fa = (const ah_path_flow_t *)ctx + *(const int *)a,
                       *fb = (const ah_path_flow_t *)ctx + *(const int *)b;
  int ka[4] = {fa->shost, fa->snic, fa->dhost, fa->dnic},
      kb[4] = {fb->shost, fb->snic, fb->dhost, fb->dnic};
  for (int i = 0; i < 4; i++)
    if (ka[i] != kb[i]) return ka[i] < kb[i] ? -1 : 1;
  return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

/* Groups the flows by NIC pair. Returns 0, or -1 when out of memory. */
static int groups_build(model_t *m, const ah_path_flow_t *flows, int n,
                        const ah_path_route_t *routes) {
  m->flows = flows;
  m->routes = routes;
  m->grp = malloc(((size_t)n + 1) * sizeof *m->grp);
  m->gs = malloc(((size_t)n + 1) * sizeof *m->gs);
  m->ge = malloc(((size_t)n + 1) * sizeof *m->ge);
  if (!m->grp || !m->gs || !m->ge) return -1;
  for (int i = 0; i < n; i++) m->grp[i] = i;
  qsort_r(m->grp, (size_t)n, sizeof *m->grp, by_nic_pair, (void *)flows);
  for (int g = 0; g < n;) {
    int h = g + 1;
    while (h < n && same_pair(&flows[m->grp[g]], &flows[m->grp[h]])) h++;
    for (int q = g; q < h; q++) m->gs[m->grp[q]] = g, m->ge[m->grp[q]] = h;
    g = h;
  }
  return 0;
}

/* Whether another QP of flow i's NIC pair has `port`. */
static int port_taken(const model_t *m, int i, uint16_t port) {
  for (int q = m->gs[i]; q < m->ge[i]; q++)
    if (m->grp[q] != i && m->routes[m->grp[q]].sport == port) return 1;
  return 0;
}

static size_t port_out(const model_t *m, int host, int nic, int side) {
  return ((size_t)host * (size_t)m->maxnic + (size_t)nic) * 2 + (size_t)side;
}
static size_t port_in(const model_t *m, int host, int nic, int side) {
  return m->nports + port_out(m, host, nic, side);
}
static size_t link_up(const model_t *m, int leaf, int spine) {
  return 2 * m->nports + (size_t)leaf * (size_t)m->S + (size_t)spine;
}
static size_t link_down(const model_t *m, int leaf, int spine) {
  return 2 * m->nports + ((size_t)m->nleaf + (size_t)leaf) * (size_t)m->S + (size_t)spine;
}

static int model_init(model_t *m, const ah_path_topo_t *t, const ah_path_link_state_t *links,
                      int nlinks, const ah_path_replan_opts_t *opts) {
  memset(m, 0, sizeof *m);
  m->t = t;
  m->maxnic = 1;
  for (int h = 0; h < t->nhosts; h++)
    if (t->hosts[h].nnics > m->maxnic) m->maxnic = t->hosts[h].nnics;
  m->S = t->nspines;
  m->nleaf = 2 * t->npairs;
  m->nports = (size_t)t->nhosts * (size_t)m->maxnic * 2;
  m->nlinks = 2 * m->nports + 2 * (size_t)m->nleaf * (size_t)m->S;
  m->cap = malloc((m->nlinks + 1) * sizeof *m->cap);
  m->count = calloc(m->nlinks + 1, sizeof *m->count);
  if (!m->cap || !m->count) {
    free(m->cap);
    free(m->count);
    return -1;
  }
  double rel = opts && opts->spine_rel > 0 ? opts->spine_rel : 1.0;
  for (size_t i = 0; i < m->nlinks; i++) m->cap[i] = i < 2 * m->nports ? 1.0 : rel;
  for (int l = 0; l < m->nleaf; l++)
    for (int s = 0; s < m->S; s++)
      if (ah_path_link_failed(t, l, s)) m->cap[link_up(m, l, s)] = m->cap[link_down(m, l, s)] = 0;
  for (int i = 0; i < nlinks; i++) {
    int l = links[i].leaf, s = links[i].spine;
    if (l < 0 || l >= m->nleaf || s < 0 || s >= m->S) continue;
    double f = links[i].fraction < 0 ? 0 : links[i].fraction > 1 ? 1 : links[i].fraction;
    m->cap[link_up(m, l, s)] *= f;
    m->cap[link_down(m, l, s)] *= f;
  }
  return 0;
}

static void model_free(model_t *m) {
  free(m->cap);
  free(m->count);
  free(m->grp);
  free(m->gs);
  free(m->ge);
}

/* The links flow f crosses with `sport` in the model (the switches' view: the topology's failed
 * links are routed around, the link states are not). Returns the count, or -1 when the hash view
 * has no route (every uplink of the leaf failed). */
static int flow_links(const model_t *m, const ah_path_flow_t *f, uint16_t sport, size_t out[4],
                      int *side_p, int *spine_p) {
  int side, spine, rx;
  ah_path_model_route(m->t, f, sport, &side, &spine, &rx);
  int sp = m->t->hosts[f->shost].pair, dp = m->t->hosts[f->dhost].pair, n = 0;
  if (sp != dp && (spine < 0 || rx < 0)) return -1;
  out[n++] = port_out(m, f->shost, f->snic, side);
  if (sp != dp) {
    out[n++] = link_up(m, 2 * sp + side, spine);
    out[n++] = link_down(m, 2 * dp + rx, spine);
  }
  out[n++] = port_in(m, f->dhost, f->dnic, sp != dp ? rx : side);
  *side_p = side;
  *spine_p = sp != dp ? spine : -1;
  return n;
}

/* The share a flow would get on these links with `extra` more flows on each (the worst link's
 * capacity ÷ flows), and in *load_p the sum of the loads, for ties. 0 when a link is down. */
static double share_on(const model_t *m, const size_t *l, int n, int extra, double *load_p) {
  double share = 1e300, load = 0;
  for (int i = 0; i < n; i++) {
    if (!(m->cap[l[i]] > 0)) return 0;
    double s = m->cap[l[i]] / (double)(m->count[l[i]] + extra);
    if (s < share) share = s;
    load += (double)(m->count[l[i]] + extra) / m->cap[l[i]];
  }
  if (load_p) *load_p = load;
  return share;
}

static void add(model_t *m, const size_t *l, int n, int d) {
  for (int i = 0; i < n; i++) m->count[l[i]] += d;
}

/* Places flow f at its best port: the current one unless another leaves its worst link strictly
 * more. Returns 1 when the port changed. */
static int place(model_t *m, int fi, ah_path_route_t *r, int tries) {
  const ah_path_flow_t *f = &m->flows[fi];
  size_t l[4], bl[4];
  int side, spine, n, bn = -1, bside = 0, bspine = -1;
  double bshare = -1, bload = 0, load = 0;
  uint16_t best = r->sport;
  const uint8_t *sg = m->t->hosts[f->shost].gid[f->snic], *dg = m->t->hosts[f->dhost].gid[f->dnic];
  uint32_t pair = ah_path_hash5(0x4e9a11u + (uint32_t)f->k, sg, dg, 0);
  for (int k = -1; k < tries; k++) {
    uint16_t port = k < 0 ? r->sport : ah_path_spread_port(pair, (unsigned)k);
    if (k >= 0 && (port == r->sport || port_taken(m, fi, port))) continue;
    if ((n = flow_links(m, f, port, l, &side, &spine)) < 0) continue;
    double share = share_on(m, l, n, 1, &load);
    /* a move must gain more than rounding: equal shares keep the current port */
    if (share > bshare * (1 + 1e-9) || (share >= bshare * (1 - 1e-9) && bn >= 0 && k >= 0 &&
                                        load < bload * (1 - 1e-9) && best != r->sport)) {
      bshare = share, bload = load, best = port, bn = n, bside = side, bspine = spine;
      memcpy(bl, l, sizeof l);
    }
  }
  if (bn < 0) return 0; /* no route at all: leave it, the caller sees planned 0 */
  add(m, bl, bn, 1);
  int moved = best != r->sport;
  r->sport = best;
  r->side = (int8_t)bside;
  r->spine = (int16_t)bspine;
  r->planned = (int8_t)(bshare > 0);
  return moved;
}

int ah_path_replan(const ah_path_topo_t *t, const ah_path_flow_t *flows, int nflows,
                   const ah_path_link_state_t *links, int nlinks, const ah_path_replan_opts_t *opts,
                   ah_path_route_t *routes, unsigned char *moved) {
  model_t m;
  if (model_init(&m, t, links, nlinks, opts)) return -1;
  int tries = opts && opts->candidates > 0 ? opts->candidates : 256, nmoved = 0;
  unsigned char *aff = calloc((size_t)nflows + 1, 1);
  uint16_t *orig = malloc(((size_t)nflows + 1) * sizeof *orig);
  if (!aff || !orig || groups_build(&m, flows, nflows, routes)) {
    free(aff);
    free(orig);
    model_free(&m);
    return -1;
  }
  /* affected: a flow on a link that is down or below its full capacity, or without a route */
  for (int i = 0; i < nflows; i++) {
    size_t l[4];
    int side, spine, n = flow_links(&m, &flows[i], routes[i].sport, l, &side, &spine);
    orig[i] = routes[i].sport;
    double rel = opts && opts->spine_rel > 0 ? opts->spine_rel : 1.0;
    for (int j = 0; j < n && !aff[i]; j++)
      aff[i] = m.cap[l[j]] < (l[j] < 2 * m.nports ? 1.0 : rel) * (1 - 1e-9);
    if (n < 0) aff[i] = 1;
    else if (!aff[i]) add(&m, l, n, 1);
    if (n >= 0) routes[i].side = (int8_t)side, routes[i].spine = (int16_t)spine;
  }
  for (int i = 0; i < nflows; i++)
    if (aff[i]) place(&m, i, &routes[i], tries);
  /* re-place until a pass moves nothing: a flow placed early may do better once the rest are in */
  for (int pass = 0; pass < 8; pass++) {
    int changed = 0;
    for (int i = 0; i < nflows; i++) {
      if (!aff[i]) continue;
      size_t l[4];
      int side, spine, n = flow_links(&m, &flows[i], routes[i].sport, l, &side, &spine);
      if (n < 0) continue;
      add(&m, l, n, -1);
      changed += place(&m, i, &routes[i], tries);
    }
    if (!changed) break;
  }
  for (int i = 0; i < nflows; i++) {
    int mv = routes[i].sport != orig[i];
    nmoved += mv;
    if (moved) moved[i] = (unsigned char)mv;
  }
  free(aff);
  free(orig);
  model_free(&m);
  return nmoved;
}

double ah_path_replan_share(const ah_path_topo_t *t, const ah_path_flow_t *flows, int nflows,
                            const ah_path_link_state_t *links, int nlinks,
                            const ah_path_replan_opts_t *opts, const ah_path_route_t *routes) {
  model_t m;
  if (model_init(&m, t, links, nlinks, opts)) return -1;
  size_t(*l)[4] = malloc(((size_t)nflows + 1) * sizeof *l);
  int *n = malloc(((size_t)nflows + 1) * sizeof *n);
  double worst = 1e300;
  if (!l || !n) {
    worst = -1;
    goto out;
  }
  for (int i = 0; i < nflows; i++) {
    int side, spine;
    n[i] = flow_links(&m, &flows[i], routes[i].sport, l[i], &side, &spine);
    if (n[i] < 0) worst = 0;
    else add(&m, l[i], n[i], 1);
  }
  for (int i = 0; i < nflows; i++) {
    if (n[i] < 0) continue;
    double s = share_on(&m, l[i], n[i], 0, NULL);
    if (s < worst) worst = s;
  }
  if (nflows == 0) worst = 1;
out:
  free(l);
  free(n);
  model_free(&m);
  return worst;
}

/* The largest r with sum over links of floor(cap / r) >= u: the best slowest-flow share when u
 * flows must cross these links (each link carries at most floor(cap / r) flows of share r). */
static double best_over(const double *cap, int n, int u) {
  if (u <= 0) return 1e300;
  double best = 0;
  for (int i = 0; i < n; i++)
    for (int k = 1; k <= u; k++) {
      double r = cap[i] / (double)k;
      if (!(r > best)) break;
      long fit = 0;
      for (int j = 0; j < n && fit < u; j++) fit += (long)(cap[j] / r * (1 + 1e-12));
      if (fit >= u) best = r;
    }
  return best;
}

double ah_path_replan_bound(const ah_path_topo_t *t, const ah_path_flow_t *flows, int nflows,
                            const ah_path_link_state_t *links, int nlinks,
                            const ah_path_replan_opts_t *opts) {
  model_t m;
  if (model_init(&m, t, links, nlinks, opts)) return -1;
  double bound = nflows ? 1.0 : 1e300;
  int *out = calloc(m.nports / 2 + 1, sizeof *out), *in = calloc(m.nports / 2 + 1, sizeof *in);
  int *up = calloc((size_t)t->npairs + 1, sizeof *up),
      *down = calloc((size_t)t->npairs + 1, sizeof *down);
  double *cap = malloc(((size_t)2 * (size_t)m.S + 1) * sizeof *cap);
  if (!out || !in || !up || !down || !cap) {
    bound = -1;
    goto done;
  }
  for (int i = 0; i < nflows; i++) {
    const ah_path_flow_t *f = &flows[i];
    out[port_out(&m, f->shost, f->snic, 0) / 2]++;
    in[port_out(&m, f->dhost, f->dnic, 0) / 2]++;
    int sp = t->hosts[f->shost].pair, dp = t->hosts[f->dhost].pair;
    if (sp != dp) up[sp]++, down[dp]++;
  }
  double two[2] = {1.0, 1.0};
  for (size_t p = 0; p < m.nports / 2; p++) { /* a NIC's two ports */
    double b = best_over(two, 2, out[p]);
    if (b < bound) bound = b;
    b = best_over(two, 2, in[p]);
    if (b < bound) bound = b;
  }
  for (int p = 0; p < t->npairs; p++) /* a leaf pair's uplinks, then its downlinks */
    for (int dir = 0; dir < 2; dir++) {
      int n = 0;
      for (int side = 0; side < 2; side++)
        for (int s = 0; s < m.S; s++)
          cap[n++] = m.cap[dir ? link_down(&m, 2 * p + side, s) : link_up(&m, 2 * p + side, s)];
      double b = best_over(cap, n, dir ? down[p] : up[p]);
      if (b < bound) bound = b;
    }
done:
  free(out);
  free(in);
  free(up);
  free(down);
  free(cap);
  model_free(&m);
  return bound;
}
