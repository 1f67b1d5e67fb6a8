/* tuner_quality: how close the online search gets to the optimum, and in how many calls, on sim/'s
 * truth model. For every cell of the grid (collective x size x topology x interference x seed) it
 * builds the space the shim offers the tuner (the cost table's non -1 cells; the shim's channel
 * list {1,2,4,8,12,16,24,32,48,64}, whatever the communicator's own count, and its chunk list where
 * the emulated version takes one), starts from NCCL's choice with resources 0 ("NCCL's own"), drives
 * ah_tune with noisy results reported late and shuffled, and scores the pinned config with the
 * exhaustive optimum. --full-space instead lists channels 1..the communicator's count and starts at
 * NCCL's default resources (what the engine would see if the shim knew that count).
 *
 * A probe runs exactly as sim/sim_nccl_select.c runs a tuner's answer: the cost table edited so
 * only the chosen cell is eligible, then sim_model_select with the tuner's channel count as a cap
 * (so every value above the communicator's count runs as that count: a plateau the search has to
 * cross), which fills threads and chunk. The space also carries NCCL's cost-table estimate of each
 * cell, the engine's prior. All figures are from sim/'s model, not hardware.
 *
 * By default every key runs on its own. --comm GAP runs each communicator's keys (one collective,
 * topology, interference and seed: its size bins) interleaved on one stream as a job calls them
 * (tests/tune tune_drive_run_comm): bins are first called in a seeded random order, one every GAP
 * stream calls (0: all at once), then take the stream's calls in turn; results fall due --lag
 * stream calls late, so an interleaved key sees its own results sooner. autoha's new keys start
 * from the best points (and measured noise) of the nearest done bins within --hint-reach bins
 * (default 3; 1 where a second resource is searched) below and above, as the shim passes them in
 * (ah_tune_hint), and a key that is done hands its point to the bins within that reach still
 * searching (--no-late-hints: not); --no-share starts them cold. The AutoCCL peers share
 * nothing (AutoCCL tunes each key on its own). --bin-step 2 runs
 * the shim's own bins (1 KiB .. 1 GiB, x2: 21 per communicator) instead of the grid's x4.
 *
 * --vs-faithful runs AutoCCL's public code as it runs by default (autoccl_faithful.c) on the same
 * keys, noise, lag and seeds, and the paper's pseudo-code beside them for context, and prints per
 * space autoha against the public code: quality, calls to settle, probing cost, keys slower than
 * the default, and AllReduce / AllGather / ReduceScatter at no interference on a line of their own.
 * --vs-autoccl runs the search of the paper's pseudo-code (autoccl_search.c) the same way;
 * --skew S adds per-rank arrival skew (S x NCCL's
 * default time, uniform per rank; tests/tune/tune_drive.c) and prints the engine without skew, from
 * the leader's own duration, and from the shortest duration across ranks. Prints one CSV row per
 * key and search, then the figure with OK or FAILED last; exits 1 when a bar is missed.
 *
 * --truth dev|heldout:SEED|heldout:A-B: the development truth (default) or held-out members
 * (sim/model/sim_model_heldout.c): calls timed at their index (links drift mid-job), the member's
 * AR(1) and call-site noise, keys run to the drift call + 240 pinned or not, scored after the
 * drift. Several members (--vs-faithful): a row each, barred (p5 >= the public code's - 0.003, 0
 * keys slower by >1%) on --truth's, --report-truth's beside them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ah_log.h"
#include "ah_tune.h"
#include "autoccl_faithful.h"
#include "autoccl_search.h"
#include "sim_model.h"
#include "sim_model_heldout.h"
#include "tq_truth.h"
#include "tune_drive.h"

/* Bars from the issues (17: calls and p5 in NCCL 2.28's and 2.30's spaces, p5 under skew). */
#define BAR_MEDIAN_Q 0.98
#define BAR_P5_Q 0.97
#define BAR_MEDIAN_CALLS 40
#define BAR_MAX_CALLS 120
#define SLOWER_TOL 0.01
#define BAR_SKEW_P5_Q 0.95

typedef struct {
  const sim_model_t *m;
  int coll;
  size_t nbytes;
  double phi;
  int ndims;
} cell_t;

/* The run of one configuration, as NCCL would launch it when the tuner picks it. */
static int cell_sim_config(const cell_t *c, const ah_config_t *cfg, sim_config_t *out_p) {
  float table[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
  for (int a = 0; a < SIM_NUM_ALGOS; a++)
    for (int p = 0; p < SIM_NUM_PROTOS; p++) table[a][p] = -1.0f;
  if (cfg->algo < 0 || cfg->proto < 0) { /* NCCL's own choice */
    sim_model_cost_table(c->m, c->coll, c->nbytes, 1, table);
  } else {
    table[cfg->algo][cfg->proto] = 0.0f;
  }
  int nch = cfg->ndims > 0 ? (int)cfg->res[0] : 0;
  size_t chunk = cfg->ndims > 1 ? (size_t)cfg->res[1] : 0;
  return sim_model_select(c->m, c->coll, c->nbytes, table, nch, chunk, out_p);
}

/* The call's time at its index (UINT64_MAX: after any drift, what a key is scored on). */
static double cell_time(void *arg, const ah_config_t *cfg, uint64_t call) {
  const cell_t *c = arg;
  sim_config_t sc;
  if (cell_sim_config(c, cfg, &sc) != 0) return 1e9;
  double us = sim_model_time_at_us(c->m, c->coll, c->nbytes, &sc, c->phi, call);
  return us > 0 ? us : 1e9;
}

static double noise_sigma = 0.02, noise_outliers = 0.01;
static sim_truth_sel_t truth; /* --truth: the member the grid runs on */
static double prior_ratio =
    -1; /* --prior-ratio: autoha's prior pruning (-1: the engine's default) */

/* A key's noise stream: the driver calls the noise once per call, in call order. */
typedef struct {
  const sim_model_t *m;
  uint64_t key, calls;
} noise_stream_t;

static double cell_noise(void *arg, double us, uint64_t *state) {
  noise_stream_t *ns = arg;
  return sim_model_truth_noise(ns->m, us, noise_sigma, noise_outliers, ns->key, ns->calls++, state);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double quantile(double *v, int n, double q) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  if (n == 0) return NAN;
  double pos = q * (n - 1);
  int i = (int)pos;
  if (i + 1 >= n) return v[n - 1];
  return v[i] + (pos - i) * (v[i + 1] - v[i]);
}

static void fmt_sim(const sim_config_t *c, char *buf, size_t len) {
  snprintf(buf, len, "%s/%s/%d/%zu", sim_model_algo_name(c->algo), sim_model_proto_name(c->proto),
           c->nchannels, c->chunk);
}

/* One search under test: autoha's engine or an AutoCCL peer, and the signal it gets. */
typedef struct {
  const char *name;
  int peer;        /* 0 autoha, 1 the paper's pseudo-code, 2 AutoCCL's public code */
  int peer_native; /* the peer's subspaces start at NCCL's resources instead of at random */
  int peer_window; /* the peer's profile window (0: the bench's --peer-window) */
  double skew;     /* arrival skew (share of NCCL's default time), 0: none */
  int min_signal;  /* the engine gets the shortest duration across ranks */
} variant_t;

typedef struct {
  double *q, *calls, *extra, *phi, *lsp; /* lsp: log of the speedup over NCCL's default */
  int *coll;
  char *slow; /* 1: the key ended slower than NCCL's default by more than SLOWER_TOL */
  int n, nslower, nskipped;
  double log_speedup;
} stats_t;

typedef struct {
  int quick, lag, shim_space, version, seeds, only_coll, only_nodes, only_seed, gather_lag,
      peer_window;
  double only_phi;
  size_t only_bytes;
  int comm; /* 1: each communicator's size bins run interleaved in one job (tune_drive_run_comm) */
  int comm_gap;   /* ... the job calls a new bin for the first time every comm_gap stream calls */
  int no_share;   /* ... autoha's keys start cold (nothing learned is passed on) */
  int no_late;    /* ... hints only at a key's start, none mid-search */
  int hint_reach; /* ... a bin learns from done bins at most this many bins away (channels the only
                      * searched resource; otherwise 1: the quick check does not run there) */
  int bin_step;   /* sizes 1 KiB .. 1 GiB in steps of x bin_step (2 or 4) */
} grid_t;

static void peer_next(void *e, uint64_t first, ah_segment_t *s) { autoccl_next(e, first, s); }
static void peer_observe(void *e, uint64_t i, double us) { autoccl_observe(e, i, us); }
static void eng_next(void *e, uint64_t first, ah_segment_t *s) { ah_tune_next(e, first, s); }
static void eng_observe(void *e, uint64_t i, double us) { ah_tune_observe(e, i, us); }
static int eng_reopened(const void *e) { return ah_tune_reopened(e); }
static void acf_ops_next(void *e, uint64_t first, ah_segment_t *s) { acf_next(e, first, s); }
static void acf_ops_observe(void *e, uint64_t i, double us) { acf_observe(e, i, us); }
static const tune_engine_ops_t peer_ops = {peer_next, peer_observe, NULL};
static const tune_engine_ops_t acf_ops = {acf_ops_next, acf_ops_observe, NULL};
static const tune_engine_ops_t eng_ops = {eng_next, eng_observe, eng_reopened};

#define NBINS 21 /* at most: 1 KiB .. 1 GiB, x2 (the shim's bins); the grid's default is x4 */

/* One key of the grid: its cell, the space the shim offers, the optimum, and its search. */
typedef struct {
  cell_t cell;
  ah_space_t sp;
  sim_optimum_t opt;
  int ok; /* 0: no space or no optimum (skipped) */
  size_t bytes;
  /* one run */
  void *eng;
  int probes, state, pinned, nhints, late; /* late: hints taken mid-search (of nhints) */
  ah_config_t winner; /* autoha's best searched point, shared with later keys of the communicator */
  double sigma;       /* ... and the noise its search measured */
  noise_stream_t ns;
} key_t_;

/* Builds the space of key (coll, bytes) on model m as the shim offers it, and its optimum at phi. */
static void key_setup(const grid_t *g, const sim_model_t *m, int coll, size_t bytes, double phi,
                      key_t_ *k) {
  memset(k, 0, sizeof(*k));
  k->bytes = bytes;
  /* The space: what NCCL allows for this call, and NCCL's own cost estimate of each cell (what
   * the shim reads from the table getCollInfo fills). */
  float table[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
  sim_model_cost_table(m, coll, bytes, 1, table);
  ah_space_t *sp = &k->sp;
  for (int a = 0; a < SIM_NUM_ALGOS; a++)
    for (int p = 0; p < SIM_NUM_PROTOS; p++)
      if (table[a][p] >= 0) {
        sp->sub[sp->nsub].algo = (int8_t)a;
        sp->sub[sp->nsub].proto = (int8_t)p;
        sp->est_us[sp->nsub] = table[a][p];
        sp->nsub++;
      }
  int maxch = m->nchannels > m->nvls_channels ? m->nchannels : m->nvls_channels;
  if (maxch > AH_MAX_DIM_VALUES) maxch = AH_MAX_DIM_VALUES;
  sp->ndims = 1;
  if (g->shim_space) { /* the shim's channel list (shim/shim_decide.c): it cannot know the
                        * communicator's count, so the list runs past it to NCCL's limit */
    static const int64_t ch[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64};
    int shim_max = m->topo.version >= 22500 ? 64 : 32;
    for (int i = 0; i < 10 && ch[i] <= shim_max; i++)
      sp->dims[0].values[sp->dims[0].nvalues++] = ch[i];
  } else {
    sp->dims[0].nvalues = maxch;
    for (int i = 0; i < maxch; i++) sp->dims[0].values[i] = i + 1;
  }
  if (m->topo.version >= 23000) { /* per-call chunk (tuner v6) */
    sp->ndims = 2;
    if (g->shim_space) { /* the shim's chunk list and each subspace's window of it */
      ah_space_chunk_build(sp, bytes, coll, m->topo.nranks, m->topo.nnodes);
    } else {
      sp->dims[1].nvalues = 13;
      for (int i = 0; i < 13; i++) sp->dims[1].values[i] = (int64_t)1024 << i;
    }
  }
  if (sp->nsub == 0 || sim_model_optimum(m, coll, bytes, phi, &k->opt) != 0) return;
  k->ok = 1;
  sp->start.algo = (int8_t)k->opt.def.algo;
  sp->start.proto = (int8_t)k->opt.def.proto;
  sp->start.ndims = sp->ndims;
  sp->start.res[0] = g->shim_space ? 0 : k->opt.def.nchannels;
  if (sp->ndims > 1) sp->start.res[1] = g->shim_space ? 0 : (int64_t)k->opt.def.chunk;
  k->cell = (cell_t){m, coll, bytes, phi, sp->ndims};
}

/* The driver's options for one key (the seed as the bench has always derived it). */
static void key_opts(const grid_t *g, const variant_t *v, key_t_ *k, int ti, int ci, int pi,
                     int nodes, int seed, tune_drive_opts_t *o) {
  tune_drive_opts_default(o);
  o->seed = (uint64_t)seed * 1000003 + (uint64_t)((ti * 5 + ci) * 64 + pi * 16) + k->bytes;
  o->noise = cell_noise;
  k->ns = (noise_stream_t){k->cell.m, o->seed, 0};
  o->noise_arg = &k->ns;
  o->lag = g->lag < 0 ? 0 : g->lag;
  o->max_calls = 2000;
  if (truth.heldout) { /* past the member's drift, pinned or not: a re-tune can be seen */
    sim_heldout_t h;
    sim_heldout_draw(truth.seed, &h);
    o->max_calls = h.drift_call + 240;
    o->stop_when_pinned = 0;
  }
  o->ranks = nodes * 8;
  o->skew = v->skew;
  o->skew_ref_us = k->opt.def_us;
  o->skew_min_signal = v->min_signal;
  o->skew_gather_lag = g->gather_lag;
}

/* How many bins away key k takes hints from: --hint-reach where channels are the only searched
 * resource (a far hint goes through the quick check), else adjacent bins only (as the shim). */
static int key_reach(const grid_t *g, const key_t_ *k) {
  return k->sp.ndims > 1 && g->hint_reach > 1 ? 1 : g->hint_reach;
}

/* Creates key k's search; for autoha, with the winners of the communicator's nearest done bins
 * below and above (the same collective: `keys` are one communicator's bins, ascending) unless
 * the run shares nothing. Returns the engine or NULL. */
static void *key_start(const grid_t *g, const variant_t *v, key_t_ *keys, int nbins, int j,
                       uint64_t seed) {
  key_t_ *k = &keys[j];
  k->pinned = 0;
  k->nhints = 0;
  k->late = 0;
  if (v->peer == 2) {
    acf_params_t prm;
    acf_params_default(&prm);
    prm.seed = seed;
    return acf_create(&k->sp, &prm);
  }
  if (!v->peer) {
    ah_tune_params_t prm;
    ah_tune_params_default(&prm);
    prm.seed = seed;
    if (prior_ratio >= 0) prm.prior_ratio = prior_ratio;
    ah_tune_t *t = ah_tune_create(&k->sp, &prm);
    if (t && g->comm && !g->no_share) {
      for (int dir = -1; dir <= 1; dir += 2)
        for (int b = j + dir; b >= 0 && b < nbins && abs(b - j) <= key_reach(g, k); b += dir)
          if (keys[b].ok && keys[b].pinned) {
            if (ah_tune_hint(t, &keys[b].winner) == 0) {
              k->nhints++;
              (void)ah_tune_hint_noise(t, keys[b].sigma);
            }
            break;
          }
    }
    return t;
  }
  autoccl_params_t prm;
  autoccl_params_default(&prm);
  prm.seed = seed;
  prm.native_start = v->peer_native;
  prm.window = v->peer_window > 0 ? v->peer_window : g->peer_window;
  return autoccl_create(&k->sp, &prm);
}

/* Key k's search is over: keeps what the report and later keys need, frees the engine. */
static void key_finish(const variant_t *v, key_t_ *k) {
  if (!v->peer) {
    ah_tune_status_t ts;
    ah_tune_status(k->eng, &ts);
    k->probes = ts.probes;
    k->state = ts.state;
    k->pinned = ts.state == AH_TUNE_CONVERGED;
    k->winner = ts.learned;
    k->sigma = ts.sigma;
    ah_tune_destroy(k->eng);
  } else if (v->peer == 2) {
    acf_destroy(k->eng);
  } else {
    autoccl_destroy(k->eng);
  }
  k->eng = NULL;
}

/* Scores one key's run into st (and a CSV row). */
static void key_score(const variant_t *v, const key_t_ *k, const tune_drive_result_t *r, int nodes,
                      int seed, stats_t *st, FILE *csv) {
  const cell_t *cell = &k->cell;
  sim_config_t tuned;
  cell_sim_config(cell, &r->final, &tuned);
  double tuned_us = cell_time((void *)cell, &r->final, UINT64_MAX);
  double qq = k->opt.best_us / tuned_us;
  double sp_up = k->opt.def_us / tuned_us;
  uint64_t cc = r->pinned_at == UINT64_MAX ? r->calls : r->pinned_at;
  int i = st->n++;
  st->slow[i] = tuned_us > k->opt.def_us * (1.0 + SLOWER_TOL);
  st->nslower += st->slow[i];
  st->q[i] = qq;
  st->calls[i] = (double)cc;
  st->coll[i] = cell->coll;
  st->phi[i] = cell->phi;
  /* The search's cost: its calls' time over what NCCL's default would have taken, in default
   * calls. */
  sim_config_t dc = k->opt.def; /* ... at the job's start: the held-out links drift later */
  st->extra[i] =
      r->search_us / sim_model_time_at_us(cell->m, cell->coll, k->bytes, &dc, cell->phi, 0) -
      (double)cc;
  st->lsp[i] = log(sp_up);
  st->log_speedup += st->lsp[i];
  if (!csv) return;
  char bd[64], bb[64], bt[64];
  fmt_sim(&k->opt.def, bd, sizeof(bd));
  fmt_sim(&k->opt.best, bb, sizeof(bb));
  fmt_sim(&tuned, bt, sizeof(bt));
  fprintf(csv,
          "\"%s\",%s,%zu,%dx8,%.1f,%d,%s,%.3f,%s,%.3f,%s,%.3f,%.4f,%.4f,%llu,%d,%d,%.1f,%d,%d\n",
          v->name, sim_model_coll_name(cell->coll), k->bytes, nodes, cell->phi, seed, bd,
          k->opt.def_us, bb, k->opt.best_us, bt, tuned_us, qq, sp_up, (unsigned long long)cc,
          k->probes, k->state, st->extra[i], k->nhints, k->late);
}

/* The comm driver's view of one communicator's run. */
typedef struct {
  const grid_t *g;
  const variant_t *v;
  key_t_ *keys;
  int nbins;
  int map[NBINS]; /* driver key -> bin */
  tune_comm_key_t *ck;
} comm_run_t;

static void *comm_start(void *user, int j) {
  comm_run_t *c = user;
  key_t_ *k = &c->keys[c->map[j]];
  k->eng = key_start(c->g, c->v, c->keys, c->nbins, c->map[j], c->ck[j].o.seed);
  return k->eng;
}

/* Key j is done: its search is freed, and (unless the run shares nothing) the adjacent bins still
 * searching get its best point mid-search, as the shim hands it over (ah_tune_hint). */
static void comm_done(void *user, int j) {
  comm_run_t *c = user;
  int b0 = c->map[j];
  key_t_ *k = &c->keys[b0];
  key_finish(c->v, k);
  if (c->v->peer || c->g->no_share || c->g->no_late || !k->pinned) return;
  for (int b = b0 - key_reach(c->g, k); b <= b0 + key_reach(c->g, k); b++)
    if (b != b0 && b >= 0 && b < c->nbins && c->keys[b].eng &&
        ah_tune_hint(c->keys[b].eng, &k->winner) == 0) {
      (void)ah_tune_hint_noise(c->keys[b].eng, k->sigma);
      c->keys[b].nhints++;
      c->keys[b].late++;
    }
}

static const tune_engine_ops_t *ops_of(const variant_t *v) {
  return v->peer == 2 ? &acf_ops : v->peer ? &peer_ops : &eng_ops;
}

/* Runs variant v over the grid; one CSV row per key when csv is not NULL. Returns 0, or 2 on a
 * setup failure. */
static int run_grid(const grid_t *g, const variant_t *v, stats_t *st, FILE *csv) {
  static const int colls[] = {AH_FUNC_ALLREDUCE, AH_FUNC_ALLGATHER, AH_FUNC_REDUCESCATTER,
                              AH_FUNC_BROADCAST, AH_FUNC_REDUCE};
  static const int nodes[] = {1, 2, 4, 16};
  static const double phis[] = {0.0, 0.5, 0.8};
  int nseeds = g->quick ? 1 : (g->seeds < 1 ? 1 : g->seeds);
  int nbins = g->bin_step == 2 ? 21 : 11;
  int maxcells = 5 * nbins * 4 * 3 * nseeds;
  memset(st, 0, sizeof(*st));
  st->q = malloc(sizeof(double) * (size_t)maxcells);
  st->calls = malloc(sizeof(double) * (size_t)maxcells);
  st->extra = malloc(sizeof(double) * (size_t)maxcells);
  st->phi = malloc(sizeof(double) * (size_t)maxcells);
  st->coll = malloc(sizeof(int) * (size_t)maxcells);
  st->slow = malloc((size_t)maxcells);
  st->lsp = malloc(sizeof(double) * (size_t)maxcells);
  if (!st->q || !st->calls || !st->extra || !st->phi || !st->coll || !st->slow || !st->lsp)
    return 2;
  for (int ti = 0; ti < 4; ti++) {
    char spec[64], err[256];
    snprintf(spec, sizeof(spec), "nodes=%d,gpus=8,gpu=h100", nodes[ti]);
    sim_topo_t topo;
    if (sim_topo_parse(spec, nodes[ti] * 8, &topo, err, sizeof(err)) != 0) {
      fprintf(stderr, "tuner_quality: %s\n", err);
      return 2;
    }
    if (g->version > 0)
      topo.version = g->version; /* e.g. 23007: NCCL 2.30, per-call chunk (tuner v6) */
    static sim_model_t m;
    sim_model_init(&m, &topo, 0, 0);
    sim_model_truth_set(&m, truth.heldout, truth.seed);
    for (int ci = 0; ci < 5; ci++) {
      for (int pi = 0; pi < 3; pi++) {
        if (g->only_coll >= 0 && (colls[ci] != g->only_coll || nodes[ti] != g->only_nodes ||
                                  fabs(phis[pi] - g->only_phi) > 1e-9))
          continue;
        /* One communicator (collective, topology, interference): its size bins. */
        static key_t_ keys[NBINS];
        int in[NBINS];
        size_t bytes = 1024;
        for (int b = 0; b < nbins; b++, bytes *= (size_t)g->bin_step) {
          in[b] = !(g->only_coll >= 0 && g->only_bytes && bytes != g->only_bytes) &&
                  !(g->quick && bytes != 1024 && bytes != ((size_t)1 << 20) &&
                    bytes != ((size_t)1 << 30));
          key_setup(g, &m, colls[ci], bytes, phis[pi], &keys[b]);
          if (in[b] && !keys[b].ok) st->nskipped++;
          if (!keys[b].ok) in[b] = 0;
        }
        for (int seed = 1; seed <= nseeds; seed++) {
          if (g->only_coll >= 0 && seed != g->only_seed) continue;
          if (!g->comm) { /* every key on its own */
            for (int b = 0; b < nbins; b++) {
              if (!in[b]) continue;
              tune_drive_opts_t o;
              key_opts(g, v, &keys[b], ti, ci, pi, nodes[ti], seed, &o);
              tune_drive_result_t r;
              keys[b].eng = key_start(g, v, keys, nbins, b, v->peer ? o.seed : (uint64_t)seed);
              if (!keys[b].eng) return 2;
              tune_drive_run_engine(ops_of(v), keys[b].eng, cell_time, &keys[b].cell, &o, &r);
              key_finish(v, &keys[b]);
              key_score(v, &keys[b], &r, nodes[ti], seed, st, csv);
            }
            continue;
          }
          /* The communicator's bins interleaved in one job: first called in a random order, one
           * new bin every comm_gap stream calls. */
          comm_run_t c = {g, v, keys, nbins, {0}, NULL};
          tune_comm_key_t ck[NBINS];
          int n = 0;
          for (int b = 0; b < nbins; b++) {
            keys[b].pinned = 0;
            if (in[b]) c.map[n++] = b;
          }
          uint64_t rs = (uint64_t)seed * 0x9E3779B97F4A7C15ULL + (uint64_t)((ti * 5 + ci) * 3 + pi);
          for (int i = n - 1; i > 0; i--) { /* Fisher-Yates */
            int j = (int)(tune_rng_next(&rs) % (uint64_t)(i + 1)), tmp = c.map[i];
            c.map[i] = c.map[j];
            c.map[j] = tmp;
          }
          for (int i = 0; i < n; i++) {
            key_t_ *k = &keys[c.map[i]];
            memset(&ck[i], 0, sizeof(ck[i]));
            ck[i].arrive = (uint64_t)i * (uint64_t)g->comm_gap;
            ck[i].f = cell_time;
            ck[i].arg = &k->cell;
            key_opts(g, v, k, ti, ci, pi, nodes[ti], seed, &ck[i].o);
          }
          c.ck = ck;
          tune_comm_ops_t cops = {ops_of(v), comm_start, comm_done};
          if (tune_drive_run_comm(ck, n, &cops, &c) != 0) return 2;
          for (int i = 0; i < n; i++)
            key_score(v, &keys[c.map[i]], &ck[i].r, nodes[ti], seed, st, csv);
        }
      }
    }
  }
  return 0;
}

typedef struct {
  double med_q, p5_q, med_c, max_c, med_x, p95_x, mean_x, geo;
  int n, nslower;
} figs_t;

static void figs_of(stats_t *st, figs_t *f) {
  f->n = st->n;
  f->nslower = st->nslower;
  f->geo = st->n ? exp(st->log_speedup / st->n) : NAN;
  f->max_c = 0;
  f->mean_x = 0;
  for (int i = 0; i < st->n; i++) {
    if (st->calls[i] > f->max_c) f->max_c = st->calls[i];
    f->mean_x += st->extra[i] / st->n;
  }
  f->med_q = quantile(st->q, st->n, 0.5);
  f->p5_q = quantile(st->q, st->n, 0.05);
  f->med_c = quantile(st->calls, st->n, 0.5);
  f->med_x = quantile(st->extra, st->n, 0.5);
  f->p95_x = quantile(st->extra, st->n, 0.95);
}

static void stats_free(stats_t *st) {
  free(st->q);
  free(st->calls);
  free(st->extra);
  free(st->phi);
  free(st->coll);
  free(st->slow);
  free(st->lsp);
}

static void figs_row(const char *name, const figs_t *f) {
  printf("| %-46s | %.4f | %.4f | %4.0f | %4.0f | %4d/%d | %5.1f / %5.1f | %.4fx |\n", name,
         f->med_q, f->p5_q, f->med_c, f->max_c, f->nslower, f->n, f->med_x, f->p95_x, f->geo);
}

static void figs_header(void) {
  printf(
      "| %-46s | med q  | p5 q   | med calls | max calls | slower >1%% | probing cost med / p95 | geomean |\n",
      "search (sim/ truth model)");
  printf("|---|---|---|---|---|---|---|---|\n");
}

/* Keeps only the keys of AllReduce, AllGather and ReduceScatter at no interference in st. */
static int stats_main_colls(stats_t *st) {
  int n = 0;
  st->nslower = 0;
  st->log_speedup = 0;
  for (int i = 0; i < st->n; i++) {
    int c = st->coll[i];
    if ((c != AH_FUNC_ALLREDUCE && c != AH_FUNC_ALLGATHER && c != AH_FUNC_REDUCESCATTER) ||
        st->phi[i] != 0.0)
      continue;
    st->q[n] = st->q[i];
    st->calls[n] = st->calls[i];
    st->extra[n] = st->extra[i];
    st->coll[n] = c;
    st->slow[n] = st->slow[i];
    st->lsp[n] = st->lsp[i];
    st->log_speedup += st->lsp[i];
    st->nslower += st->slow[i];
    st->phi[n++] = 0.0;
  }
  st->n = n;
  return n > 0 ? 0 : -1;
}

/* --vs-faithful: autoha beside AutoCCL's public code (f[1]; f[2], the paper's pseudo-code, is
 * context), in the space of the run. Bars (issue 35): p5 at least the peer's less 0.003, median
 * calls at most half the peer's, probing cost (mean over keys) at most a quarter of the peer's,
 * no key slower than NCCL's default by more than 1%. */
static int report_vs_faithful(const grid_t *g, const variant_t *vs, const figs_t *f,
                              const figs_t *fm) {
  for (int i = 0; i < 2; i++) {
    char name[96];
    snprintf(name, sizeof(name), "%s: AR/AG/RS, no interference", vs[i].name);
    figs_row(name, &fm[i]);
  }
  double ratio = f[1].mean_x > 0 ? f[0].mean_x / f[1].mean_x : INFINITY;
  int ok_p5 = f[0].p5_q >= f[1].p5_q - 0.003, ok_calls = f[0].med_c <= 0.5 * f[1].med_c;
  int ok_cost = ratio <= 0.25, ok_slower = f[0].nslower == 0;
  int ok = f[0].n > 0 && ok_p5 && ok_calls && ok_cost && ok_slower;
  printf(
      "tuner_quality vs AutoCCL's public code (sim/ truth model, %s, same keys, noise, lag and "
      "seeds): p5 %.4f vs %.4f (bar >= peer - 0.003: %s); median calls %.0f vs %.0f, max %.0f vs "
      "%.0f (bar median <= half: %s); probing cost mean %.2f vs %.2f default calls, ratio %.3f "
      "(bar <= 0.25: %s), median %.1f vs %.1f; keys slower than default by >1%% %d vs %d (bar 0: "
      "%s); AR/AG/RS at no interference p5 %.4f vs %.4f, median calls %.0f vs %.0f %s\n",
      g->shim_space ? "the shim's space" : "AutoCCL's own space (channels 1..the communicator's)",
      f[0].p5_q, f[1].p5_q, ok_p5 ? "met" : "MISSED", f[0].med_c, f[1].med_c, f[0].max_c,
      f[1].max_c, ok_calls ? "met" : "MISSED", f[0].mean_x, f[1].mean_x, ratio,
      ok_cost ? "met" : "MISSED", f[0].med_x, f[1].med_x, f[0].nslower, f[1].nslower,
      ok_slower ? "met" : "MISSED", fm[0].p5_q, fm[1].p5_q, fm[0].med_c, fm[1].med_c,
      ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}

/* Several members of the family (--truth, barred, then --report-truth): autoha beside AutoCCL's
 * public code on each, one row each, the bar on the first nbar. Returns the exit status. */
static int run_truths(const grid_t *g, const variant_t *vs, const sim_truth_sel_t *tr, int ntr,
                      int nbar, FILE *csv) {
  int ok = 1, n = 0;
  printf(
      "| truth (sim/ model) | autoha p5 | public code p5 | median calls | slower >1%% | bar |\n");
  printf("|---|---|---|---|---|---|\n");
  for (int t = 0; t < ntr; t++) {
    figs_t f[2];
    truth = tr[t];
    for (int i = 0; i < 2; i++) {
      stats_t st;
      if (run_grid(g, &vs[i], &st, csv) != 0) return 2;
      figs_of(&st, &f[i]);
      stats_free(&st);
    }
    int met = f[0].n > 0 && f[0].p5_q >= f[1].p5_q - 0.003 && f[0].nslower == 0;
    if (t < nbar) ok = ok && met, n = f[0].n;
    printf("| heldout:%llu | %.4f | %.4f | %.0f vs %.0f | %d vs %d | %s |\n",
           (unsigned long long)tr[t].seed, f[0].p5_q, f[1].p5_q, f[0].med_c, f[1].med_c,
           f[0].nslower, f[1].nslower, t < nbar ? (met ? "met" : "MISSED") : "reported");
  }
  printf(
      "tuner_quality on the held-out truth family (sim/ model, %d keys per member, the shim's "
      "space): on heldout:%llu..%llu autoha's p5 >= AutoCCL's public code's - 0.003 and 0 keys "
      "slower than NCCL's default by >1%% (the rows above; the other rows are reported, not "
      "barred) %s\n",
      n, (unsigned long long)tr[0].seed, (unsigned long long)tr[nbar - 1].seed,
      ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  const char *csv_path = "tuner_quality.csv";
  grid_t g = {0, 2, 1, 0, 3, -1, 0, 0, 2, 4, -1, 0, 0, 0, 0, 0, 3, 4};
  int mode = 0; /* 0: autoha alone, 1: beside the paper's pseudo-code, 2: skew, 3: beside AutoCCL's
                 * public code */
  double skew = 0.2;
  sim_truth_sel_t truths[24];
  int ntr = 0, nbar = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc) csv_path = argv[++i];
    else if (strcmp(argv[i], "--quick") == 0) g.quick = 1;
    else if (strcmp(argv[i], "--shim-space") == 0) g.shim_space = 1; /* the default */
    else if (strcmp(argv[i], "--full-space") == 0) g.shim_space = 0;
    else if (strcmp(argv[i], "--version") == 0 && i + 1 < argc) g.version = atoi(argv[++i]);
    else if (strcmp(argv[i], "--seeds") == 0 && i + 1 < argc) g.seeds = atoi(argv[++i]);
    else if (strcmp(argv[i], "--noise") == 0 && i + 1 < argc &&
             sscanf(argv[++i], "%lf,%lf", &noise_sigma, &noise_outliers) == 2) {
    } else if (strcmp(argv[i], "--lag") == 0 && i + 1 < argc) g.lag = atoi(argv[++i]);
    else if (strcmp(argv[i], "--vs-autoccl") == 0) mode = 1;
    else if (strcmp(argv[i], "--vs-faithful") == 0) mode = 3;
    else if (strcmp(argv[i], "--prior-ratio") == 0 && i + 1 < argc) prior_ratio = atof(argv[++i]);
    else if (strcmp(argv[i], "--truth") == 0 && i + 1 < argc && nbar == ntr) {
      if (tq_truths_add(argv[++i], truths, &ntr, 24) != 0) return 2;
      nbar = ntr;
    } else if (strcmp(argv[i], "--report-truth") == 0 && i + 1 < argc && nbar > 0) {
      if (tq_truths_add(argv[++i], truths, &ntr, 24) != 0) return 2;
    } else if (strcmp(argv[i], "--skew") == 0 && i + 1 < argc) {
      mode = 2;
      skew = atof(argv[++i]);
    } else if (strcmp(argv[i], "--gather-lag") == 0 && i + 1 < argc) g.gather_lag = atoi(argv[++i]);
    else if (strcmp(argv[i], "--comm") == 0 && i + 1 < argc) {
      g.comm = 1;
      g.comm_gap = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--independent") == 0) g.comm = 0;
    else if (strcmp(argv[i], "--no-share") == 0) g.no_share = 1;
    else if (strcmp(argv[i], "--no-late-hints") == 0) g.no_late = 1;
    else if (strcmp(argv[i], "--hint-reach") == 0 && i + 1 < argc) g.hint_reach = atoi(argv[++i]);
    else if (strcmp(argv[i], "--bin-step") == 0 && i + 1 < argc)
      g.bin_step = atoi(argv[++i]) == 2 ? 2 : 4;
    else if (strcmp(argv[i], "--peer-window") == 0 && i + 1 < argc) g.peer_window = atoi(argv[++i]);
    else if (strcmp(argv[i], "--cell") == 0 && i + 1 < argc &&
             sscanf(argv[++i], "%d,%zu,%d,%lf,%d", &g.only_coll, &g.only_bytes, &g.only_nodes,
                    &g.only_phi, &g.only_seed) == 5)
      ah_log_set_level(AH_LOG_DEBUG); /* one cell, with the engine's decisions logged */
    else {
      fprintf(
          stderr,
          "usage: tuner_quality [--csv PATH] [--quick] [--lag CALLS] [--shim-space | --full-space] [--version CODE] [--seeds N] [--comm GAP [--no-share] [--no-late-hints] [--hint-reach BINS] | --independent] [--bin-step 2|4] [--noise SIGMA,OUTLIERS] [--vs-autoccl | --vs-faithful | --skew SHARE [--gather-lag CALLS]] [--cell COLL,BYTES,NODES,PHI,SEED] [--truth dev|heldout:SEED|heldout:A-B [--report-truth heldout:A-B]] [--prior-ratio R]\n"
          "  COLL: 0 broadcast, 1 reduce, 2 allgather, 3 reducescatter, 4 allreduce; BYTES 0: every bin\n");
      return 2;
    }
  }
  FILE *csv = fopen(csv_path, "w");
  if (!csv) {
    perror(csv_path);
    return 2;
  }
  fprintf(csv,
          "search,coll,bytes,topo,phi,seed,default,default_us,optimum,optimum_us,tuned,tuned_us,"
          "quality,speedup,calls,probes,state,search_cost,hints,late_hints\n");
  variant_t vs[8];
  int nv = 0;
  if (mode == 0) {
    vs[nv++] = (variant_t){"autoha", 0, 0, 0, 0, 0};
  } else if (mode == 1) {
    vs[nv++] = (variant_t){"autoha", 0, 0, 0, 0, 0};
    vs[nv++] = (variant_t){"the paper's pseudo-code, random start", 1, 0, 0, 0, 0};
    vs[nv++] = (variant_t){"the paper's pseudo-code, at NCCL's resources", 1, 1, 0, 0, 0};
    /* Context, not bars: can the peer buy autoha's p5 with longer profiles? */
    vs[nv++] = (variant_t){"the paper's pseudo-code, 2-call profiles", 1, 0, 2, 0, 0};
    vs[nv++] = (variant_t){"the paper's pseudo-code, 8-call profiles", 1, 0, 8, 0, 0};
    vs[nv++] = (variant_t){"the paper's pseudo-code, 16-call profiles", 1, 0, 16, 0, 0};
  } else if (mode == 3) {
    vs[nv++] = (variant_t){"autoha", 0, 0, 0, 0, 0};
    vs[nv++] = (variant_t){"AutoCCL's public code (default mode 5)", 2, 0, 0, 0, 0};
    vs[nv++] = (variant_t){"the paper's pseudo-code, random start", 1, 0, 0, 0, 0};
  } else {
    vs[nv++] = (variant_t){"autoha, no skew", 0, 0, 0, 0, 0};
    vs[nv++] = (variant_t){"autoha, skew, leader's own duration", 0, 0, 0, skew, 0};
    vs[nv++] = (variant_t){"autoha, skew, shortest duration across ranks", 0, 0, 0, skew, 1};
    vs[nv++] = (variant_t){"the paper's pseudo-code, no skew", 1, 0, 0, 0, 0};
    vs[nv++] = (variant_t){"the paper's pseudo-code, skew, leader's own", 1, 0, 0, skew, 0};
  }
  if (ntr > 1 || nbar < ntr) {
    if (mode != 3 || !truths[0].heldout) {
      fprintf(stderr, "tuner_quality: several truths need --vs-faithful and held-out members\n");
      return 2;
    }
    int rc = run_truths(&g, vs, truths, ntr, nbar, csv);
    fclose(csv);
    return rc;
  }
  if (ntr == 1) truth = truths[0];
  figs_t f[8], fm[8]; /* fm: AllReduce, AllGather and ReduceScatter at no interference */
  clock_t t0 = clock();
  for (int i = 0; i < nv; i++) {
    stats_t st;
    int rc = run_grid(&g, &vs[i], &st, csv);
    if (rc != 0) return rc;
    figs_of(&st, &f[i]);
    if (stats_main_colls(&st) != 0) return 2;
    figs_of(&st, &fm[i]);
    stats_free(&st);
  }
  fclose(csv);
  double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
  printf(
      "tuner_quality: %d keys x %d searches in %.1f s, noise sigma %.3f with %.3f outliers at "
      "1.5x, results reported %d calls late, per-key CSV in %s, truth %s%.0llu\n",
      f[0].n, nv, secs, noise_sigma, noise_outliers, g.lag, csv_path,
      truth.heldout ? "heldout:" : "dev", (unsigned long long)truth.seed);
  if (g.comm)
    printf(
        "tuner_quality: each communicator's %d size bins (x%d) as one job, a new bin every %d stream "
        "calls, lag in stream calls; autoha's new bins start from done bins within %d bin(s)%s\n",
        g.bin_step == 2 ? 21 : 11, g.bin_step, g.comm_gap, g.hint_reach,
        g.no_share ? " (off: --no-share)" : "");
  if (mode == 0) {
    int ok = f[0].n > 0 && f[0].med_q >= BAR_MEDIAN_Q && f[0].p5_q >= BAR_P5_Q &&
             f[0].med_c <= BAR_MEDIAN_CALLS && f[0].max_c <= BAR_MAX_CALLS && f[0].nslower == 0;
    printf(
        "tuner_quality: search cost (extra time over NCCL's default while searching, in default "
        "calls) median %.1f p95 %.1f\n",
        f[0].med_x, f[0].p95_x);
    printf(
        "tuner_quality (sim/ truth model): optimum/tuned median %.4f (bar >= %.2f) p5 %.4f (bar >= "
        "%.2f); calls to converge median %.0f (bar <= %d) max %.0f (bar <= %d); slower than "
        "default by >1%%: %d/%d keys (bar 0); geomean speedup over default %.4fx %s\n",
        f[0].med_q, BAR_MEDIAN_Q, f[0].p5_q, BAR_P5_Q, f[0].med_c, BAR_MEDIAN_CALLS, f[0].max_c,
        BAR_MAX_CALLS, f[0].nslower, f[0].n, f[0].geo, ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
  }
  figs_header();
  for (int i = 0; i < nv; i++) figs_row(vs[i].name, &f[i]);
  if (mode == 3) return report_vs_faithful(&g, vs, f, fm);
  if (mode == 1) {
    /* The bar: half the peer's median calls or fewer, at an equal or better p5 — against each
     * start the peer may take. */
    int ok = f[0].n > 0 && f[0].nslower == 0;
    for (int i = 1; i < 3; i++) ok = ok && f[0].med_c <= 0.5 * f[i].med_c && f[0].p5_q >= f[i].p5_q;
    printf(
        "tuner_quality vs the paper's pseudo-code of AutoCCL (sim/ truth model, same keys, noise, "
        "lag, budget and seeds): autoha median calls %.0f vs %.0f / %.0f (bar <= half), p5 %.4f "
        "vs %.4f / %.4f (bar >=), keys slower than default %d vs %d / %d %s\n",
        f[0].med_c, f[1].med_c, f[2].med_c, f[0].p5_q, f[1].p5_q, f[2].p5_q, f[0].nslower,
        f[1].nslower, f[2].nslower, ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
  }
  int ok = f[2].n > 0 && f[2].p5_q >= BAR_SKEW_P5_Q && f[2].nslower == 0;
  printf(
      "tuner_quality under %.0f%% random arrival skew (sim/ truth model): p5 %.4f without skew, "
      "%.4f from the leader's own duration, %.4f from the shortest across ranks (bar >= %.2f); "
      "median calls %.0f / %.0f / %.0f; slower than default %d / %d / %d %s\n",
      100 * skew, f[0].p5_q, f[1].p5_q, f[2].p5_q, BAR_SKEW_P5_Q, f[0].med_c, f[1].med_c,
      f[2].med_c, f[0].nslower, f[1].nslower, f[2].nslower, ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
