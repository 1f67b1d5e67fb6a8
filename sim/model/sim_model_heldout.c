/* The held-out truth family (docs/sim.md): truths the tuner in tuner/ was never fitted to. A member
 * is drawn from a seed and perturbs the parts of the development truth's time that
 * sim_model_truth.c hands it: channel counts that do not divide over the NICs/rings, a protocol
 * faster than NCCL's table says in a size band, a subspace NCCL rates over 2x slower that wins, a
 * second communicator on the same links, a mid-job link drift, and noise that is AR(1) over calls
 * and bimodal between call sites. The key choice: everything is a pure function of (seed, inputs),
 * so a sim/ job, ncclsim-optimum and bench/tuner_quality see one truth and reruns repeat it. */
#include "sim_model_heldout.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_model_internal.h"

int sim_truth_parse(const char *text, sim_truth_sel_t *sel_p, char *err, size_t errlen) {
  if (!text || !*text || strcmp(text, "dev") == 0) {
    *sel_p = (sim_truth_sel_t){0, 0};
    return 0;
  }
  if (strncmp(text, "heldout:", 8) == 0 && text[8] >= '0' && text[8] <= '9') {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text + 8, &end, 10);
    if (!errno && !*end && v >= 1) {
      *sel_p = (sim_truth_sel_t){1, (uint64_t)v};
      return 0;
    }
  }
  snprintf(err, errlen,
           "invalid value for NCCLSIM_TRUTH: '%s' (expected dev or heldout:SEED, SEED an "
           "integer >= 1)",
           text);
  return -1;
}

/* splitmix64 of a mixed input: one well-spread 64-bit value per (seed, a, b). */
static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static double unit_of(uint64_t x) { return ((double)(x >> 11) + 0.5) / 9007199254740992.0; }

static double draw_in(uint64_t *s, double lo, double hi) {
  *s = mix(*s);
  return lo + (hi - lo) * unit_of(*s);
}

static int draw_pick(uint64_t *s, int n) {
  *s = mix(*s);
  return (int)(*s % (uint64_t)n);
}

void sim_heldout_draw(uint64_t seed, sim_heldout_t *h_p) {
  static const int steps[] = {3, 4, 6, 8};
  static const int protos[] = {AH_PROTO_LL, AH_PROTO_LL128, AH_PROTO_SIMPLE};
  static const int algos[] = {AH_ALGO_RING, AH_ALGO_TREE, AH_ALGO_PAT, AH_ALGO_NVLS_TREE};
  static const int cont_nch[] = {4, 8, 16};
  uint64_t s = seed * 0xd1b54a32d192ed03ull + 0x5eed;
  sim_heldout_t h;
  memset(&h, 0, sizeof h);
  h.seed = seed;
  h.step = steps[draw_pick(&s, 4)];
  h.step_pen = draw_in(&s, 0.5, 1.0);
  h.cross_proto = protos[draw_pick(&s, 3)];
  h.cross_lo = ldexp(1.0, 14 + draw_pick(&s, 9)); /* 16 KiB .. 4 MiB */
  h.cross_hi = h.cross_lo * ldexp(1.0, 2 + draw_pick(&s, 4));
  h.cross_f = draw_in(&s, 0.55, 0.8);
  h.fast_algo = algos[draw_pick(&s, 4)];
  h.fast_proto = protos[draw_pick(&s, 3)];
  h.fast_k = draw_in(&s, 0.55, 0.8);
  h.fast_rmax = draw_in(&s, 3.0, 6.0);
  h.ar_rho = draw_in(&s, 0.6, 0.9);
  h.site_period = 2 + draw_pick(&s, 3);
  h.site_gap = draw_in(&s, 0.03, 0.08);
  h.cont_duty = draw_in(&s, 0.2, 0.6);
  h.cont_nch = cont_nch[draw_pick(&s, 3)];
  h.drift_call = (uint64_t)(40 + draw_pick(&s, 121));
  h.drift_nic = draw_in(&s, 0, 1) < 0.6;
  h.drift_scale = draw_in(&s, 0.6, 0.85);
  *h_p = h;
}

void sim_heldout_links(const sim_heldout_t *h, uint64_t call, double *nic_p, double *nvl_p) {
  int drifted = call >= h->drift_call;
  *nic_p = drifted && h->drift_nic ? h->drift_scale : 1.0;
  *nvl_p = drifted && !h->drift_nic ? h->drift_scale : 1.0;
}

/* NCCL's cost-table ratio of (a, p) to its best cell, with NCCL's shipped constants (not a tuner's
 * edits), for one (model, coll, nbytes); -1 when the cell is not in the table. Cached per thread:
 * sim_model_optimum asks the same key thousands of times. */
static double table_ratio(const sim_model_t *m, int coll, size_t nbytes, int a, int p) {
  static _Thread_local struct {
    int valid, coll, nranks, nnodes, version, nch;
    size_t nbytes;
    double nic, nvl;
    float t[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
  } c;
  const sim_topo_t *t = &m->topo;
  if (!c.valid || c.coll != coll || c.nbytes != nbytes || c.nranks != t->nranks ||
      c.nnodes != t->nnodes || c.version != t->version || c.nch != m->nchannels ||
      c.nic != t->nic_gbps || c.nvl != t->nvl_gbps) {
    static _Thread_local sim_model_t shipped; /* 2.4 KB: kept off the stack */
    shipped = *m;
    sim_model_default_constants(&shipped.consts, t->version);
    sim_model_cost_table(&shipped, coll, nbytes, 1, c.t);
    c.valid = 1;
    c.coll = coll;
    c.nbytes = nbytes;
    c.nranks = t->nranks;
    c.nnodes = t->nnodes;
    c.version = t->version;
    c.nch = m->nchannels;
    c.nic = t->nic_gbps;
    c.nvl = t->nvl_gbps;
  }
  double best = INFINITY;
  for (int i = 0; i < SIM_NUM_ALGOS; i++)
    for (int j = 0; j < SIM_NUM_PROTOS; j++)
      if (c.t[i][j] >= 0 && c.t[i][j] < best) best = c.t[i][j];
  if (c.t[a][p] < 0 || !(best > 0)) return -1;
  return c.t[a][p] / best;
}

/* Weight in [0, 1] of x inside [lo, hi], tapered in log2 over one octave either side. */
static double band(double x, double lo, double hi) {
  double l = log2(x), a = log2(lo), b = log2(hi);
  if (l < a - 1 || l > b + 1) return 0;
  if (l < a) return l - (a - 1);
  if (l > b) return (b + 1) - l;
  return 1;
}

/* The fast subspace's factor: k / r where NCCL's ratio r is in [2, rmax], blended to 1 in log
 * below 1.5 and above 1.5 x rmax. */
static double fast_factor(const sim_heldout_t *h, double r) {
  if (!(r >= 1.5) || r > 1.5 * h->fast_rmax) return 1.0;
  double full = log(h->fast_k / (r < 2 ? 2 : r > h->fast_rmax ? h->fast_rmax : r)), w = 1;
  if (r < 2) w = log(r / 1.5) / log(2 / 1.5);
  else if (r > h->fast_rmax) w = log(1.5 * h->fast_rmax / r) / log(1.5);
  return exp(w * full);
}

double sim_heldout_time_us(const sim_heldout_t *h, const sim_model_t *m, int coll, size_t nbytes,
                           const sim_config_t *cfg, int nc, const sim_time_parts_t *dev) {
  int multi = m->topo.nnodes > 1;
  double link = dev->link, sm = dev->sm, fill = dev->fill;
  if (nc < 1) nc = 1;
  /* Channels spread over `step` NICs/rings: the busiest carries ceil(nc/step) of them. */
  if (nc > h->step) {
    double imb = ceil((double)nc / h->step) * h->step / nc;
    link *= 1 + h->step_pen * (imb - 1);
  }
  /* A second communicator on the same links, active cont_duty of the time: per-QP fair sharing
   * gives this call nc / (nc + cont_nch) of a link while both run (NVLink: half the effect). */
  double d = h->cont_duty * (multi ? 1.0 : 0.5), share = (double)h->cont_nch / nc;
  link *= 1 + d * (share < 2 ? share : 2);
  /* The protocol NCCL's table gets wrong in a size band. */
  if (cfg->proto == h->cross_proto) {
    double w = band((double)nbytes, h->cross_lo, h->cross_hi), f = 1 - w * (1 - h->cross_f);
    link *= f;
    sm *= f;
    fill *= f;
  }
  double us = dev->lat + dev->adm + fmax(link, sm) + dev->ovh + fill;
  if (cfg->algo == h->fast_algo && cfg->proto == h->fast_proto)
    us *= fast_factor(h, table_ratio(m, coll, nbytes, cfg->algo, cfg->proto));
  return us;
}

static double normal_of(uint64_t x) {
  double u1 = unit_of(mix(x)), u2 = unit_of(mix(x ^ 0x6a09e667f3bcc909ull));
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

#define AR_TERMS 32

double sim_heldout_noise(const sim_heldout_t *h, double us, double sigma, double outlier_rate,
                         uint64_t key, uint64_t call) {
  uint64_t base = mix(h->seed ^ mix(key));
  double x = 0, w = 1, rho = h->ar_rho;
  for (int j = 0; j < AR_TERMS; j++, w *= rho)
    x += w * normal_of(base ^ ((call - (uint64_t)j) * 0x9e3779b97f4a7c15ull));
  /* Stationary unit variance: (1 - rho^2) sum rho^2j over the terms kept. */
  x *= sqrt((1 - rho * rho) / (1 - pow(rho, 2.0 * AR_TERMS)));
  double f = sigma > 0 ? exp(sigma * x) : 1.0;
  if (call % (uint64_t)h->site_period == (uint64_t)h->site_period - 1) f *= 1 + h->site_gap;
  if (unit_of(mix(base ^ (call * 0xd1b54a32d192ed03ull) ^ 0x71ull)) < outlier_rate) f *= 1.5;
  return us * f;
}
