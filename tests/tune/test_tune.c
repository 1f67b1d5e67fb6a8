/* test_tune.c: the tuning engine on synthetic surfaces — unimodal, plateaued (also above NCCL's
 * channel cap, where every larger channel count runs as the cap), noisy, subspaces
 * with a single legal point, a surface where NCCL's default is optimal, results out of order and
 * lost, drift re-opening tuning, budgets and bad input, a channels x chunk ridge — plus its robust
 * statistics.
 *
 * A surface gives each (algorithm, protocol) subspace a base time and a log-quadratic bowl (with an
 * optional flat bottom) along channels and chunk, so the true optimum is known by enumeration. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ah_check.h"
#include "ah_fit.h"
#include "ah_stats.h"
#include "ah_tune.h"
#include "tune_drive.h"

typedef struct {
  int nsub;
  double base[AH_MAX_SUBSPACES];   /* time at the bowl's bottom */
  double opt[AH_MAX_SUBSPACES][2]; /* optimum value per dimension */
  double curv[AH_MAX_SUBSPACES];   /* relative cost per (log2 distance)^2 */
  double flat;                     /* half-width (log2) of a flat bottom */
  double scale_after;              /* from call `change_at` on, every time x this */
  uint64_t change_at;
  double own_ch; /* channels NCCL picks for a resource value of 0 */
  double cap_ch; /* NCCL runs more channels than this as this many (0: none) */
  ah_space_t space;
} surf_t;

static int sub_of(const surf_t *s, const ah_config_t *c) {
  for (int i = 0; i < s->space.nsub; i++)
    if (s->space.sub[i].algo == c->algo && s->space.sub[i].proto == c->proto) return i;
  return -1;
}

static double surf_time(void *arg, const ah_config_t *c, uint64_t call) {
  const surf_t *s = arg;
  int i = sub_of(s, c);
  ck_assert_int_ge(i, 0); /* the engine only proposes legal pairs */
  double t = s->base[i];
  for (int d = 0; d < c->ndims && d < 2; d++) {
    double v = (double)c->res[d];
    if (v == 0 && d == 0 && s->own_ch > 0) v = s->own_ch;        /* "NCCL's own choice" */
    if (d == 0 && s->cap_ch > 0 && v > s->cap_ch) v = s->cap_ch; /* the communicator's count */
    ck_assert(v > 0);
    double x = fabs(log2(v / s->opt[i][d])) - s->flat;
    if (x > 0) t *= 1.0 + s->curv[i] * x * x;
  }
  if (s->change_at && call >= s->change_at) t *= s->scale_after;
  return t;
}

static double surf_best(surf_t *s) {
  double best = INFINITY;
  ah_config_t c;
  memset(&c, 0, sizeof(c));
  c.ndims = s->space.ndims;
  for (int i = 0; i < s->space.nsub; i++) {
    c.algo = s->space.sub[i].algo;
    c.proto = s->space.sub[i].proto;
    int n0 = s->space.ndims > 0 ? s->space.dims[0].nvalues : 1;
    int n1 = s->space.ndims > 1 ? s->space.dims[1].nvalues : 1;
    for (int a = 0; a < n0; a++)
      for (int b = 0; b < n1; b++) {
        if (s->space.ndims > 0) c.res[0] = s->space.dims[0].values[a];
        if (s->space.ndims > 1) c.res[1] = s->space.dims[1].values[b];
        double t = surf_time(s, &c, 0);
        if (t < best) best = t;
      }
  }
  return best;
}

/* Three subspaces, channels 1..64; NCCL's default is ring/simple at 32 channels. */
static void surf_init(surf_t *s) {
  memset(s, 0, sizeof(*s));
  s->space.nsub = 3;
  s->space.sub[0].algo = AH_ALGO_RING, s->space.sub[0].proto = AH_PROTO_SIMPLE;
  s->space.sub[1].algo = AH_ALGO_RING, s->space.sub[1].proto = AH_PROTO_LL128;
  s->space.sub[2].algo = AH_ALGO_TREE, s->space.sub[2].proto = AH_PROTO_LL;
  s->space.ndims = 1;
  s->space.dims[0].nvalues = 64;
  for (int i = 0; i < 64; i++) s->space.dims[0].values[i] = i + 1;
  s->space.start.algo = AH_ALGO_RING;
  s->space.start.proto = AH_PROTO_SIMPLE;
  s->space.start.ndims = 1;
  s->space.start.res[0] = 32;
  for (int i = 0; i < 3; i++) {
    s->curv[i] = 0.08;
    s->opt[i][0] = 32;
    s->opt[i][1] = 512 * 1024;
  }
  s->base[0] = 100, s->base[1] = 115, s->base[2] = 200;
}

/* surf_init's space with a far better subspace: ring/ll128, 20% faster than the default, with its
 * optimum at 12 channels (the default runs 32). */
static void surf_init_far(surf_t *s) {
  surf_init(s);
  s->base[1] = 80;
  s->opt[1][0] = 12;
  s->curv[1] = 0.25;
}

static double cfg_time(surf_t *s, const ah_config_t *c) { return surf_time(s, c, 0); }

static ah_tune_t *run(surf_t *s, const tune_drive_opts_t *o, tune_drive_result_t *r) {
  ah_tune_params_t p;
  ah_tune_params_default(&p);
  ah_tune_t *t = ah_tune_create(&s->space, &p);
  ck_assert_ptr_nonnull(t);
  tune_drive_run(t, surf_time, s, o, r);
  return t;
}

/* A search of sp with parameters p (NULL: the defaults), driven on f with the driver's defaults and
 * noise seed `seed`: the common case of the seed loops below. Returns it (the caller destroys it). */
static ah_tune_t *search_seed(const ah_space_t *sp, const ah_tune_params_t *p, tune_surface_fn f,
                              void *arg, int seed, tune_drive_result_t *r) {
  ah_tune_params_t dp;
  if (!p) {
    ah_tune_params_default(&dp);
    p = &dp;
  }
  ah_tune_t *t = ah_tune_create(sp, p);
  ck_assert_ptr_nonnull(t);
  tune_drive_opts_t o;
  tune_drive_opts_default(&o);
  o.seed = (uint64_t)seed;
  tune_drive_run(t, f, arg, &o, r);
  return t;
}

/* run() with the driver's defaults and one seed. */
static ah_tune_t *run_seed(surf_t *s, int seed, tune_drive_result_t *r) {
  return search_seed(&s->space, NULL, surf_time, s, seed, r);
}

/* One seed's run on s pins, within `calls` calls, a config at least `quality` of the optimum's speed. */
static void expect_optimum(surf_t *s, int seed, double quality, uint64_t calls) {
  tune_drive_result_t r;
  ah_tune_t *t = run_seed(s, seed, &r);
  double q = surf_best(s) / cfg_time(s, &r.final);
  ck_assert_msg(q >= quality, "seed %d: %.3f of optimum (nch=%lld)", seed, q,
                (long long)r.final.res[0]);
  ck_assert_uint_le(r.pinned_at, calls);
  ah_tune_destroy(t);
}

/* The pinned config `fin` of a seed's run is at most 1% slower than s's default. */
static void expect_no_worse(surf_t *s, int seed, const ah_config_t *fin) {
  double def_us = cfg_time(s, &s->space.start), fin_us = cfg_time(s, fin);
  ck_assert_msg(fin_us <= def_us * 1.01, "seed %d: pinned %.2f us, default %.2f", seed, fin_us,
                def_us);
}

START_TEST(test_unimodal) {
  /* The best subspace is ring/ll128 with its optimum at 12 channels, far from the default (32). */
  int far = 0;
  for (int seed = 1; seed <= 12; seed++) {
    surf_t s;
    surf_init_far(&s);
    tune_drive_result_t r;
    ah_tune_t *t = run_seed(&s, seed, &r);
    ah_tune_status_t st;
    ah_tune_status(t, &st);
    ck_assert_int_eq(st.state, AH_TUNE_CONVERGED);
    ck_assert_uint_ne(r.pinned_at, UINT64_MAX);
    ck_assert_uint_le(r.pinned_at, 120);
    double q = surf_best(&s) / cfg_time(&s, &r.final);
    ck_assert_msg(q >= 0.95, "seed %d: reached %.3f of the optimum (nch=%lld)", seed, q,
                  (long long)r.final.res[0]);
    ck_assert_int_eq(r.final.proto, AH_PROTO_LL128);
    if (r.final.res[0] < 8 || r.final.res[0] > 18) far++;
    ck_assert(st.winner_us > 0 && st.default_us > st.winner_us);
    ck_assert_int_ge(st.probes, 4);
    ah_tune_destroy(t);
  }
  ck_assert_int_le(far, 1);
}
END_TEST

START_TEST(test_shim_shaped_space) {
  /* As the shim builds it: channels {1,2,4,8,12,16,24,32,48,64} and a start whose channel value is
   * 0 (NCCL's own choice, 24 here). The best is ring/simple at 8 channels, 20% faster. */
  static const int64_t ch[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64};
  for (int seed = 1; seed <= 6; seed++) {
    surf_t s;
    surf_init(&s);
    s.space.dims[0].nvalues = 10;
    for (int i = 0; i < 10; i++) s.space.dims[0].values[i] = ch[i];
    s.space.start.res[0] = 0;
    s.own_ch = 24;
    s.opt[0][0] = 8;
    s.curv[0] = 0.1;
    tune_drive_result_t r;
    ah_tune_t *t = run_seed(&s, seed, &r);
    double q = surf_best(&s) / cfg_time(&s, &r.final);
    ck_assert_msg(q >= 0.97, "seed %d: %.3f of optimum (nch=%lld)", seed, q,
                  (long long)r.final.res[0]);
    ck_assert(cfg_time(&s, &r.final) <= cfg_time(&s, &s.space.start));
    ck_assert_uint_le(r.pinned_at, 100);
    ah_tune_destroy(t);
  }
}
END_TEST

/* Calls per subspace, counted around surf_time: which subspaces the search spends calls on. */
typedef struct {
  surf_t *s;
  int calls[AH_MAX_SUBSPACES];
} count_t;

static double count_time(void *arg, const ah_config_t *c, uint64_t call) {
  count_t *k = arg;
  int i = sub_of(k->s, c);
  if (i >= 0) k->calls[i]++;
  return surf_time(k->s, c, call);
}

/* Adds the chunk dimension (powers of two, 64 KiB..4 MiB) to s's space, starting at start bytes. */
static void surf_add_chunk(surf_t *s, int64_t start) {
  s->space.ndims = 2;
  s->space.dims[1].nvalues = 7;
  for (int i = 0; i < 7; i++) s->space.dims[1].values[i] = (int64_t)65536 << i;
  s->space.start.ndims = 2;
  s->space.start.res[1] = start;
}

static void count_listed(void *arg, const ah_config_t *cfg, int samples, double us) {
  (void)cfg, (void)samples, (void)us;
  (*(int *)arg)++;
}

/* Runs a default search on s with seed, counting its calls per subspace in *k (k->calls[i]);
 * asserts that tree/ll (subspace 2) got calls exactly when screened says so, that subspace 1
 * (within the prior) did, and that the result is within 3% of s's optimum (what says which run). */
static void prior_run(surf_t *s, int seed, int screened, const char *what) {
  count_t k = {s, {0}};
  tune_drive_result_t r;
  ah_tune_t *t = search_seed(&s->space, NULL, count_time, &k, seed, &r);
  if (screened) ck_assert_msg(k.calls[2] > 0, "%s seed %d: tree/ll never screened", what, seed);
  else ck_assert_msg(k.calls[2] == 0, "%s seed %d: tree/ll got %d calls", what, seed, k.calls[2]);
  ck_assert_int_gt(k.calls[1], 0); /* within the prior: screened */
  double q = surf_best(s) / cfg_time(s, &r.final);
  ck_assert_msg(q >= 0.97, "%s seed %d: %.3f of optimum", what, seed, q);
  ah_tune_destroy(t);
}

START_TEST(test_prior_prunes) {
  /* NCCL's estimates put tree/ll (subspace 2) at 5x its best, past the prior's 4x: with the prior
   * it never gets a call;
   * without estimates (0) it is screened. The search still reaches the optimum either way. */
  for (int seed = 1; seed <= 4; seed++) {
    for (int prior = 0; prior <= 1; prior++) {
      surf_t s;
      surf_init(&s);
      s.space.est_us[0] = prior ? 100.0f : 0.0f;
      s.space.est_us[1] = prior ? 120.0f : 0.0f;
      s.space.est_us[2] = prior ? 500.0f : 0.0f;
      prior_run(&s, seed, !prior, prior ? "with the prior" : "without estimates");
    }
  }
}
END_TEST

START_TEST(test_prior_chunk) {
  /* NCCL's estimates put tree/ll at 1.7x its best: within the 4x where channels are the only
   * searched resource (screened), beyond the 1.6x where the chunk is searched too (never a call).
   * The search reaches the optimum in both. */
  for (int seed = 1; seed <= 4; seed++) {
    for (int chunk = 0; chunk <= 1; chunk++) {
      surf_t s;
      surf_init(&s);
      if (chunk) surf_add_chunk(&s, 512 * 1024);
      s.space.est_us[0] = 100.0f;
      s.space.est_us[1] = 120.0f;
      s.space.est_us[2] = 170.0f;
      prior_run(&s, seed, !chunk, chunk ? "channels x chunk" : "channels");
    }
  }
}
END_TEST

START_TEST(test_sure_pin_chunk) {
  /* Channels x chunk, ring/ll128 8% faster at its optimum (24 channels, 512 KiB) than NCCL's
   * default, noise 1%: a best that far ahead on 4 samples of both is pinned without fresh samples
   * (no confirm probe: every probe the report lists is a searched point, counted once), at the
   * optimum. */
  for (int seed = 1; seed <= 4; seed++) {
    surf_t s;
    surf_init(&s);
    surf_add_chunk(&s, 512 * 1024); /* NCCL's default at its own optimum: 100 us */
    s.base[1] = 92;
    s.opt[1][0] = 24;
    s.opt[1][1] = 512 * 1024;
    tune_drive_opts_t o;
    tune_drive_opts_default(&o);
    o.seed = (uint64_t)seed;
    o.sigma = 0.01;
    o.outlier_rate = 0;
    tune_drive_result_t r;
    ah_tune_t *t = run(&s, &o, &r);
    ah_tune_status_t st;
    ah_tune_status(t, &st);
    ck_assert_int_eq(st.state, AH_TUNE_CONVERGED);
    double q = surf_best(&s) / cfg_time(&s, &r.final);
    ck_assert_msg(r.final.algo == AH_ALGO_RING && r.final.proto == AH_PROTO_LL128 && q >= 0.99,
                  "seed %d: %d/%d %lld ch %lld B, %.3f of optimum", seed, r.final.algo,
                  r.final.proto, (long long)r.final.res[0], (long long)r.final.res[1], q);
    int listed = 0;
    ah_tune_foreach_probe(t, count_listed, &listed);
    ck_assert_int_eq(listed, st.probes); /* no confirm probe measured */
    ah_tune_destroy(t);
  }
}
END_TEST

START_TEST(test_drive_skew) {
  /* The driver's arrival skew: the shortest duration across ranks, gathered without extra lag,
   * is the run without skew, call for call; the leader's own duration moves the search. */
  tune_drive_result_t r[3];
  for (int v = 0; v < 3; v++) {
    surf_t s;
    surf_init(&s);
    s.base[1] = 90;
    s.opt[1][0] = 12;
    tune_drive_opts_t o;
    tune_drive_opts_default(&o);
    o.seed = 5;
    o.ranks = 16;
    o.skew = v == 0 ? 0.0 : 0.2;
    o.skew_ref_us = 100;
    o.skew_min_signal = v == 1;
    o.skew_gather_lag = 0;
    ah_tune_t *t = run(&s, &o, &r[v]);
    ah_tune_destroy(t);
  }
  ck_assert_uint_eq(r[1].pinned_at, r[0].pinned_at);
  ck_assert_int_eq(r[1].final.algo, r[0].final.algo);
  ck_assert_int_eq(r[1].final.proto, r[0].final.proto);
  ck_assert_int_eq(r[1].final.res[0], r[0].final.res[0]);
  ck_assert_int_eq(r[1].segments, r[0].segments);
  ck_assert(r[2].segments != r[0].segments || r[2].pinned_at != r[0].pinned_at);
}
END_TEST

START_TEST(test_two_dims) {
  /* channels x chunk (powers of two 64K..4M): coordinate descent over both axes. */
  surf_t s;
  surf_init(&s);
  surf_add_chunk(&s, 2 * 1024 * 1024);
  s.opt[0][0] = 16;
  s.opt[0][1] = 262144;
  s.curv[0] = 0.2;
  for (int seed = 1; seed <= 6; seed++) expect_optimum(&s, seed, 0.95, 200);
}
END_TEST

/* A ridge: the time depends on the bytes a channel moves per step (channels x chunk) far more than
 * on the channel count alone, as on sim/'s pipelines (handshakes per step against the fill). */
static double ridge_time(void *arg, const ah_config_t *c, uint64_t call) {
  (void)call;
  const double *k = arg; /* steepness across the ridge, and along it */
  double nc = (double)c->res[0], cc = (double)c->res[1];
  ck_assert(nc > 0 && cc > 0);
  double w = log2(nc * cc / (8.0 * 512 * 1024)), u = log2(nc / 8.0);
  return 100.0 * (1.0 + k[0] * w * w + k[1] * u * u);
}

/* One subspace (algo/Simple) over the shim's channel list x chunks of 1 KiB..2 MiB, started at
 * (nch, chunk). */
static void plane_space(ah_space_t *sp, int algo, int64_t nch, int64_t chunk) {
  static const int64_t ch[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64};
  memset(sp, 0, sizeof(*sp));
  sp->nsub = 1;
  sp->sub[0].algo = algo, sp->sub[0].proto = AH_PROTO_SIMPLE;
  sp->ndims = 2;
  sp->dims[0].nvalues = 10;
  for (int i = 0; i < 10; i++) sp->dims[0].values[i] = ch[i];
  sp->dims[1].nvalues = 12;
  for (int i = 0; i < 12; i++) sp->dims[1].values[i] = (int64_t)1024 << i;
  sp->start.algo = algo, sp->start.proto = AH_PROTO_SIMPLE;
  sp->start.ndims = 2;
  sp->start.res[0] = nch;
  sp->start.res[1] = chunk;
}

/* One search of sp with the default parameters, driven on f with noise seed `seed`. */
static void plane_search(const ah_space_t *sp, tune_surface_fn f, void *arg, int seed,
                         tune_drive_result_t *r) {
  ah_tune_destroy(search_seed(sp, NULL, f, arg, seed, r));
}

START_TEST(test_coupled_ridge) {
  /* Channels x chunk on a ridge, the start (32 channels, 2 MiB) far off the optimum (8, 512 KiB):
   * a channel move that keeps the chunk crosses the ridge's steep side, so coordinate descent
   * stops early; moves that also scale the chunk (ah_tune_couple) follow it. Where the chunk's
   * list ends (2 MiB) the moves down the channels keep it, and the descent may stop in the corner
   * (2 channels, 2 MiB: 0.926) with the diagonal step measured faster, not significantly: the
   * look back at the subspace's fastest probe takes it (before it, seeds 11, 53 and 56 of 60
   * stopped there). */
  ah_space_t sp;
  plane_space(&sp, AH_ALGO_RING, 32, 2 * 1024 * 1024);
  double k[2] = {0.2, 0.02};
  for (int seed = 1; seed <= 60; seed++) {
    tune_drive_result_t r;
    plane_search(&sp, ridge_time, k, seed, &r);
    double q = 100.0 / ridge_time(k, &r.final, 0);
    /* descent with the chunk held on channel moves pins 2 channels at 2 MiB here (0.926) */
    ck_assert_msg(q >= 0.97, "seed %d: %.3f of optimum (nch=%lld chunk=%lld)", seed, q,
                  (long long)r.final.res[0], (long long)r.final.res[1]);
    ck_assert_uint_le(r.pinned_at, 80);
  }
}
END_TEST

/* A knee: the time falls as 1/channels (a bandwidth share) down to 9 channels, where a link
 * saturates, and each channel adds 2% beyond; the chunk a bowl around 4.5 MiB per step in total
 * (channels x chunk). On the shim's list the best points are 8 (0.90 of the optimum) and 12
 * (0.95); 9 is the optimum, 10 within 2%. */
static double knee_time(void *arg, const ah_config_t *c, uint64_t call) {
  (void)arg;
  (void)call;
  double nc = (double)c->res[0], cc = (double)c->res[1];
  ck_assert(nc > 0 && cc > 0);
  double w = log2(nc * cc / (9.0 * 512 * 1024));
  return (900.0 / nc > 100.0 ? 900.0 / nc : 100.0) * (1.0 + 0.02 * nc) * (1.0 + 0.02 * w * w);
}

START_TEST(test_knee) {
  /* Coordinate descent on the list stops at 12 channels (x1.41 from 8 lands on 12); the model
   * step (the bandwidth knee, the response surface) must name a count between 8 and 12. */
  ah_space_t sp;
  plane_space(&sp, AH_ALGO_NVLS, 16, 256 * 1024);
  ah_config_t opt = sp.start;
  opt.res[0] = 9;
  opt.res[1] = 512 * 1024;
  double best = knee_time(NULL, &opt, 0);
  int good = 0, between = 0;
  for (int seed = 1; seed <= 8; seed++) {
    tune_drive_result_t r;
    plane_search(&sp, knee_time, NULL, seed, &r);
    double q = best / knee_time(NULL, &r.final, 0);
    good += q >= 0.97;
    between += r.final.res[0] > 8 && r.final.res[0] < 12;
    ck_assert_msg(q >= 0.93, "seed %d: %.3f of optimum (nch=%lld chunk=%lld)", seed, q,
                  (long long)r.final.res[0], (long long)r.final.res[1]);
    ck_assert_uint_le(r.pinned_at, 120);
  }
  ck_assert_int_ge(good, 6);
  ck_assert_int_ge(between, 6);
}
END_TEST

START_TEST(test_fit) {
  /* An exact quadratic in (x, y) on a 3 x 3 grid: recovered, cross term included. */
  ah_fit_point_t pt[9];
  int n = 0;
  for (int i = -1; i <= 1; i++)
    for (int j = -1; j <= 1; j++) {
      double x = 3.2 + 0.6 * i, y = 17.0 + j, dx = x - 3.3, dy = y - 16.6;
      pt[n++] = (ah_fit_point_t){x, y, 0.3 + 0.1 * dx * dx + 0.05 * dy * dy + 0.02 * dx * dy, 2.0};
    }
  double coef[AH_FIT_TERMS];
  ck_assert_int_eq(ah_fit_quad(pt, n, 0.0, coef), 0);
  double zt = 0.3 + 0.1 * 0.01 + 0.05 * 0.16 + 0.02 * 0.1 * 0.4; /* at (3.4, 17.0) */
  ck_assert_double_eq_tol(ah_fit_eval(coef, 3.4, 17.0), zt, 1e-9);
  ck_assert_double_eq_tol(coef[5], 0.02, 1e-9);
  double xs[] = {log2(8), log2(9), log2(10), log2(11), log2(12)}, ys[] = {16, 17, 18};
  int ix, iy;
  ck_assert_int_eq(ah_fit_argmin(coef, xs, 5, ys, 3, &ix, &iy), 0);
  ck_assert_int_eq(ix, 2); /* log2(10) = 3.32, nearest the bottom's 3.3 */
  ck_assert_int_eq(iy, 1);
  /* One outlier (+0.3, a 1.35x slow run) among 25 points: Huber-clipped, the bottom's value
   * stays within 0.5%; plain least squares is pulled several times further. */
  ah_fit_point_t po[25];
  int no = 0;
  for (int i = -2; i <= 2; i++)
    for (int j = -2; j <= 2; j++) {
      double x = 3.2 + 0.3 * i, y = 17.0 + 0.5 * j, dx = x - 3.3, dy = y - 16.6;
      po[no++] = (ah_fit_point_t){x, y, 0.3 + 0.1 * dx * dx + 0.05 * dy * dy + 0.02 * dx * dy, 2.0};
    }
  po[11].z += 0.3; /* (3.2, 16.5), next to the bottom */
  double cr[AH_FIT_TERMS], cl[AH_FIT_TERMS];
  ck_assert_int_eq(ah_fit_quad(po, no, 0.02, cr), 0);
  ck_assert_int_eq(ah_fit_quad(po, no, 0.0, cl), 0);
  double er = fabs(ah_fit_eval(cr, 3.3, 16.6) - 0.3), el = fabs(ah_fit_eval(cl, 3.3, 16.6) - 0.3);
  ck_assert_msg(er < 0.005 && el > 3 * er, "robust error %.4f, plain %.4f", er, el);
  /* A cross (centre and one step each way on each axis): no xy information, the cross term is
   * dropped and the rest interpolated. */
  ah_fit_point_t pc[5] = {
      {0, 0, 1.0, 1}, {1, 0, 1.3, 1}, {-1, 0, 1.1, 1}, {0, 1, 1.2, 1}, {0, -1, 1.4, 1}};
  ck_assert_int_eq(ah_fit_quad(pc, 5, 0.0, coef), 0);
  ck_assert_double_eq_tol(coef[5], 0.0, 1e-12);
  for (int i = 0; i < 5; i++)
    ck_assert_double_eq_tol(ah_fit_eval(coef, pc[i].x, pc[i].y), pc[i].z, 1e-9);
  /* Degenerate: every point on one line of y, or too few points. */
  ah_fit_point_t pl[6];
  for (int i = 0; i < 6; i++) pl[i] = (ah_fit_point_t){(double)i, 2.0, (double)(i * i), 1};
  ck_assert_int_eq(ah_fit_quad(pl, 6, 0.0, coef), -1);
  ck_assert_int_eq(ah_fit_quad(pc, 4, 0.0, coef), -1);
  ck_assert_int_eq(ah_fit_argmin(coef, xs, 0, ys, 3, &ix, &iy), -1);
  /* The knee: 8 channels at 1267 us scaled as 1/channels meet 12 channels' 1124 us at 9.02; with
   * the right side rising (slope 0.2 in log-log) further left. */
  double k = ah_fit_knee(8, log(1267.0), 12, log(1124.0), 0.0);
  ck_assert_double_eq_tol(k, 8 * 1267.0 / 1124.0, 1e-9);
  ck_assert_double_eq_tol(ah_fit_knee(8, log(1267.0), 12, log(1124.0), -0.3), k,
                          1e-9); /* negative: flat */
  double k2 = ah_fit_knee(8, log(130.6), 12, log(124.6), 0.2);
  ck_assert_double_eq_tol(log(130.6) - (log(k2) - log(8)), log(124.6) + 0.2 * (log(k2) - log(12)),
                          1e-9);
  ck_assert(k2 > 8.8 && k2 < 9.0);
  ck_assert_double_eq(ah_fit_knee(8, log(1.6), 12, 0.0, 0.0), 0.0); /* 12.8: not between */
  ck_assert_double_eq(ah_fit_knee(8, 0.0, 12, 0.0, 0.0), 0.0);      /* not slower below */
  ck_assert_double_eq(ah_fit_knee(12, 0.1, 8, 0.0, 0.0), 0.0);      /* wrong order */
}
END_TEST

START_TEST(test_plateau) {
  /* A flat bottom from 8 to 32 channels (+-1 in log2 around 16), the default at 64 on its slope:
   * the engine must leave the slope and stop on the plateau rather than wander on it. */
  for (int seed = 1; seed <= 8; seed++) {
    surf_t s;
    surf_init(&s);
    s.space.start.res[0] = 64;
    s.opt[0][0] = 16;
    s.flat = 1.0;
    s.curv[0] = 0.3;
    expect_optimum(&s, seed, 0.97, 100);
  }
}
END_TEST

START_TEST(test_plateau_above_cap) {
  /* The real run behind the plateau walk: NCCL caps the tuner's channels at the communicator's
   * own count (16), which the shim cannot know, so its list runs to 64 and every value from 16 up
   * measures the same; the start (0, NCCL's own) is 16 too. The optimum is 8 channels, 9% faster
   * (ring/ll128 82.6 us at 16, 75.1 us at 8, as on sim/'s 2x8 H100 AllGather of 8 MiB at phi 0.5).
   * Descending from 64 meets equal times at 32 and 16: the search must walk through the plateau
   * towards fewer channels rather than stop on it. */
  static const int64_t ch[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64};
  int found = 0;
  for (int seed = 1; seed <= 8; seed++) {
    surf_t s;
    surf_init(&s);
    s.space.start.proto = AH_PROTO_LL128;
    s.space.dims[0].nvalues = 10;
    for (int i = 0; i < 10; i++) s.space.dims[0].values[i] = ch[i];
    s.space.start.res[0] = 0;
    s.own_ch = 16;
    s.cap_ch = 16;
    s.base[0] = 110, s.base[1] = 75.1, s.base[2] = 160;
    s.opt[1][0] = 8;
    s.curv[1] = 0.1;
    tune_drive_result_t r;
    ah_tune_t *t = run_seed(&s, seed, &r);
    expect_no_worse(&s, seed, &r.final);
    ck_assert_uint_le(r.pinned_at, 120);
    if (r.final.proto == AH_PROTO_LL128 && r.final.res[0] == 8) found++;
    ah_tune_destroy(t);
  }
  ck_assert_msg(found >= 7, "8 channels found in %d of 8 runs", found);
}
END_TEST

START_TEST(test_noisy) {
  /* 6% noise and 5% outliers at 2x: a 15% better config is still found, and nothing slower than
   * the default is ever pinned. */
  int found = 0;
  for (int seed = 1; seed <= 10; seed++) {
    surf_t s;
    surf_init(&s);
    s.opt[0][0] = 8;
    s.curv[0] = 0.1; /* 32 channels costs 40% more than 8 */
    tune_drive_opts_t o;
    tune_drive_opts_default(&o);
    o.sigma = 0.06;
    o.outlier_rate = 0.05;
    o.outlier_factor = 2.0;
    o.seed = (uint64_t)seed;
    tune_drive_result_t r;
    ah_tune_t *t = run(&s, &o, &r);
    expect_no_worse(&s, seed, &r.final);
    if (cfg_time(&s, &r.final) <= surf_best(&s) * 1.10) found++;
    ck_assert_uint_le(r.pinned_at, 200);
    ah_tune_destroy(t);
  }
  ck_assert_int_ge(found, 8);
}
END_TEST

START_TEST(test_single_point) {
  /* Every subspace has one legal channel value; ring/ll is 20% faster than the default. */
  for (int seed = 1; seed <= 5; seed++) {
    surf_t s;
    surf_init(&s);
    s.space.dims[0].nvalues = 1;
    s.space.dims[0].values[0] = 4;
    s.space.start.res[0] = 4;
    s.space.sub[2].algo = AH_ALGO_RING;
    s.space.sub[2].proto = AH_PROTO_LL;
    s.base[2] = 80;
    tune_drive_result_t r;
    ah_tune_t *t = run_seed(&s, seed, &r);
    ah_tune_status_t st;
    ah_tune_status(t, &st);
    ck_assert_int_eq(st.probes, 3);
    ck_assert_int_eq(r.final.proto, AH_PROTO_LL);
    ck_assert_uint_le(r.pinned_at, 30);
    ah_tune_destroy(t);
  }
  /* No dimension at all and one subspace equal to the default: nothing to tune. */
  surf_t s;
  surf_init(&s);
  s.space.nsub = 1;
  s.space.ndims = 0;
  s.space.start.ndims = 0;
  ah_tune_t *t = ah_tune_create(&s.space, NULL);
  ck_assert_ptr_nonnull(t);
  ah_segment_t seg;
  ah_tune_next(t, 0, &seg);
  ck_assert_uint_eq(seg.count, AH_SCHED_FOREVER);
  ck_assert_int_eq(seg.source, AH_SOURCE_DEFAULT);
  ah_tune_status_t st;
  ah_tune_status(t, &st);
  ck_assert_int_eq(st.state, AH_TUNE_DEFAULT);
  ck_assert_int_eq(st.calls_spent, 0);
  ah_tune_destroy(t);
}
END_TEST

START_TEST(test_default_optimal) {
  /* NCCL's default is the optimum, other subspaces are within 1-3%: across seeds, the pinned
   * config is never more than 1% slower than the default. */
  for (int seed = 1; seed <= 30; seed++) {
    surf_t s;
    surf_init(&s);
    s.base[1] = 101;
    s.base[2] = 103;
    s.curv[0] = 0.01; /* shallow: neighbours within noise */
    tune_drive_result_t r;
    ah_tune_t *t = run_seed(&s, seed, &r);
    expect_no_worse(&s, seed, &r.final);
    ck_assert_uint_le(r.pinned_at, 200);
    ah_tune_status_t st;
    ah_tune_status(t, &st);
    ck_assert_int_eq(st.state, AH_TUNE_CONVERGED);
    ah_tune_destroy(t);
  }
}
END_TEST

START_TEST(test_out_of_order) {
  /* Results arrive 12 calls late, shuffled, and 10% never arrive: the engine keeps proposing,
   * converges, and finds the optimum. Also: results for indices never committed are ignored. */
  for (int seed = 1; seed <= 6; seed++) {
    surf_t s;
    surf_init_far(&s);
    tune_drive_opts_t o;
    tune_drive_opts_default(&o);
    o.lag = 12;
    o.loss = 0.10;
    o.seed = (uint64_t)seed;
    ah_tune_t *t = ah_tune_create(&s.space, NULL);
    ah_tune_observe(t, 1000000, 5.0); /* not committed: ignored */
    ah_tune_observe(t, 0, NAN);       /* bad value: ignored */
    tune_drive_result_t r;
    tune_drive_run(t, surf_time, &s, &o, &r);
    ck_assert_uint_ne(r.pinned_at, UINT64_MAX);
    ck_assert_uint_le(r.pinned_at, 200);
    double q = surf_best(&s) / cfg_time(&s, &r.final);
    ck_assert_msg(q >= 0.95, "seed %d: %.3f of optimum", seed, q);
    ah_tune_destroy(t);
  }
}
END_TEST

/* Drives t on s for `calls` calls, o's other options as they are set (again on the same t: a
 * second part of the same job). */
static void drive_calls(ah_tune_t *t, surf_t *s, tune_drive_opts_t *o, uint64_t calls,
                        tune_drive_result_t *r) {
  o->max_calls = calls;
  tune_drive_run(t, surf_time, s, o, r);
}

START_TEST(test_drift_reopens) {
  /* After convergence the pinned config's subspace slows 40% (others do not): CUSUM re-opens
   * tuning, the driver cuts the forever segment, and the search moves to the other subspace. */
  surf_t s;
  surf_init(&s);
  s.base[1] = 104; /* ring/ll128: slower than ring/simple at first */
  tune_drive_opts_t o;
  tune_drive_opts_default(&o);
  o.seed = 3;
  tune_drive_result_t r;
  ah_tune_t *t = run(&s, &o, &r);
  ah_tune_status_t st;
  ah_tune_status(t, &st);
  ck_assert_int_eq(st.state, AH_TUNE_CONVERGED);
  ck_assert_int_eq(r.final.proto, AH_PROTO_SIMPLE);
  ck_assert_int_eq(ah_tune_reopened(t), 0);
  /* Stationary: 3000 more pinned calls, no re-open. */
  o.stop_when_pinned = 0;
  o.max_calls = 3000;
  s.base[0] = 100;
  tune_drive_run(t, surf_time, &s, &o, &r);
  ck_assert_int_eq(r.reopens_seen, 0);
  ah_tune_destroy(t);

  /* Now a shift: ring/simple becomes 40% slower after call 150. */
  surf_init(&s);
  s.base[1] = 104;
  s.base[0] = 100;
  o.seed = 3;
  o.stop_when_pinned = 0;
  o.max_calls = 600;
  s.change_at = 150;
  s.scale_after = 1.0;
  t = ah_tune_create(&s.space, NULL);
  /* drive in two parts: before the change, then with ring/simple slowed */
  drive_calls(t, &s, &o, 150, &r);
  ah_tune_status(t, &st);
  ck_assert_int_eq(st.state, AH_TUNE_CONVERGED);
  s.base[0] = 140;
  drive_calls(t, &s, &o, 600, &r);
  ck_assert_int_eq(r.reopens_seen, 1);
  ah_tune_status(t, &st);
  ck_assert_int_eq(st.reopen_count, 1);
  ck_assert_int_eq(st.state, AH_TUNE_CONVERGED);
  ck_assert_int_eq(r.final.proto, AH_PROTO_LL128);
  ah_tune_destroy(t);

  /* With drift_check off, the same shift leaves the key pinned. */
  surf_init(&s);
  s.base[1] = 104;
  ah_tune_params_t p;
  ah_tune_params_default(&p);
  p.drift_check = 0;
  t = ah_tune_create(&s.space, &p);
  drive_calls(t, &s, &o, 150, &r);
  s.base[0] = 140;
  drive_calls(t, &s, &o, 600, &r);
  ck_assert_int_eq(r.reopens_seen, 0);
  ah_tune_status(t, &st);
  ck_assert_int_eq(st.reopen_count, 0);
  ah_tune_destroy(t);
}
END_TEST

START_TEST(test_budget) {
  /* A budget of 24 calls: the engine never commits more than that to probes, then pins. */
  surf_t s;
  surf_init_far(&s);
  ah_tune_params_t p;
  ah_tune_params_default(&p);
  p.budget_calls = 24;
  ah_tune_t *t = ah_tune_create(&s.space, &p);
  tune_drive_opts_t o;
  tune_drive_opts_default(&o);
  tune_drive_result_t r;
  tune_drive_run(t, surf_time, &s, &o, &r);
  ah_tune_status_t st;
  ah_tune_status(t, &st);
  ck_assert_int_le(st.calls_spent, 24);
  ck_assert_uint_le(r.pinned_at, 24);
  ck_assert(st.state == AH_TUNE_CONVERGED || st.state == AH_TUNE_DEFAULT);
  expect_no_worse(&s, (int)o.seed, &r.final);
  ah_tune_destroy(t);
}
END_TEST

/* A surface that accepts any configuration (chaos test): a hash of the config gives its time. */
static double chaos_time(void *arg, const ah_config_t *c, uint64_t call) {
  (void)arg;
  (void)call;
  uint64_t h = 1469598103934665603ULL;
  h = (h ^ (uint64_t)(uint8_t)c->algo) * 1099511628211ULL;
  h = (h ^ (uint64_t)(uint8_t)c->proto) * 1099511628211ULL;
  for (int d = 0; d < c->ndims && d < AH_MAX_DIMS; d++)
    h = (h ^ (uint64_t)c->res[d]) * 1099511628211ULL;
  return 10.0 + (double)(h % 1000) / 10.0;
}

START_TEST(test_chaos) {
  /* Random spaces (including none, single points, starts outside the space), random lag, loss and
   * order, and garbage results: the engine never crashes, always pins within its budget, and only
   * ever proposes pairs of the space or NCCL's own choice. */
  uint64_t rng = 77;
  for (int run_i = 0; run_i < 300; run_i++) {
    ah_space_t sp;
    memset(&sp, 0, sizeof(sp));
    sp.nsub = (int)(tune_rng_next(&rng) % (AH_MAX_SUBSPACES + 1));
    for (int i = 0; i < sp.nsub; i++) {
      sp.sub[i].algo = (int8_t)(i / AH_NUM_PROTOS);
      sp.sub[i].proto = (int8_t)(i % AH_NUM_PROTOS);
    }
    sp.ndims = (int)(tune_rng_next(&rng) % 3);
    for (int d = 0; d < sp.ndims; d++) {
      sp.dims[d].nvalues = 1 + (int)(tune_rng_next(&rng) % AH_MAX_DIM_VALUES);
      for (int i = 0; i < sp.dims[d].nvalues; i++)
        sp.dims[d].values[i] = (int64_t)(i + 1) * (d ? 4096 : 1);
    }
    sp.start.algo = (int8_t)((int)(tune_rng_next(&rng) % (AH_NUM_ALGOS + 1)) - 1);
    sp.start.proto = (int8_t)((int)(tune_rng_next(&rng) % (AH_NUM_PROTOS + 1)) - 1);
    sp.start.ndims = sp.ndims;
    for (int d = 0; d < sp.ndims; d++) sp.start.res[d] = (int64_t)(tune_rng_next(&rng) % 80);
    ah_tune_params_t p;
    ah_tune_params_default(&p);
    p.budget_calls = 20 + (int)(tune_rng_next(&rng) % 200);
    ah_tune_t *t = ah_tune_create(&sp, &p);
    ck_assert_ptr_nonnull(t);
    ah_tune_observe(t, 5, -1.0);
    ah_tune_observe(t, 7, INFINITY);
    tune_drive_opts_t o;
    tune_drive_opts_default(&o);
    o.seed = (uint64_t)run_i + 1;
    o.lag = (int)(tune_rng_next(&rng) % 20);
    o.loss = tune_rng_uniform(&rng) * 0.5;
    o.sigma = tune_rng_uniform(&rng) * 0.2;
    o.outlier_rate = tune_rng_uniform(&rng) * 0.1;
    o.max_calls = 600;
    tune_drive_result_t r;
    tune_drive_run(t, chaos_time, NULL, &o, &r);
    ck_assert_msg(r.pinned_at != UINT64_MAX && r.pinned_at <= (uint64_t)p.budget_calls,
                  "run %d: pinned at %llu, budget %d", run_i, (unsigned long long)r.pinned_at,
                  p.budget_calls);
    int legal = r.final.algo == sp.start.algo && r.final.proto == sp.start.proto;
    for (int i = 0; i < sp.nsub; i++)
      legal |= r.final.algo == sp.sub[i].algo && r.final.proto == sp.sub[i].proto;
    ck_assert_msg(legal, "run %d: pinned a pair outside the space", run_i);
    ah_tune_status_t st;
    ah_tune_status(t, &st);
    ck_assert(st.state == AH_TUNE_CONVERGED || st.state == AH_TUNE_DEFAULT);
    ck_assert_int_le(st.calls_spent, p.budget_calls);
    ah_tune_destroy(t);
  }
}
END_TEST

static void count_probe(void *arg, const ah_config_t *cfg, int samples, double us) {
  int *n = arg;
  ck_assert_int_gt(samples, 0);
  ck_assert(us > 0);
  ck_assert_int_eq(cfg->ndims, 1);
  (*n)++;
}

START_TEST(test_bad_space_and_report) {
  surf_t s;
  surf_init(&s);
  s.space.nsub = 99; /* out of range: nothing tuned, default kept */
  ah_tune_t *t = ah_tune_create(&s.space, NULL);
  ck_assert_ptr_nonnull(t);
  ah_segment_t seg;
  ah_tune_next(t, 0, &seg);
  ck_assert_uint_eq(seg.count, AH_SCHED_FOREVER);
  ck_assert_int_eq(seg.config.algo, AH_ALGO_RING);
  ah_tune_destroy(t);

  surf_init(&s);
  tune_drive_opts_t o;
  tune_drive_opts_default(&o);
  tune_drive_result_t r;
  t = run(&s, &o, &r);
  int n = 0;
  ah_tune_foreach_probe(t, count_probe, &n);
  ah_tune_status_t st;
  ah_tune_status(t, &st);
  ck_assert_int_ge(n, st.probes);
  ck_assert_int_ge(st.probes, 3);
  ck_assert_uint_eq(st.converged_at, r.pinned_at);
  ck_assert(st.calls_spent > 0 && (uint64_t)st.calls_spent <= r.pinned_at);
  ah_tune_destroy(t);
}
END_TEST

START_TEST(test_stats) {
  /* The bias-corrected trimmed mean of log-normal samples is unbiased for every sample count,
   * ignores a 1.5x outlier, and the pooled noise estimate finds sigma. */
  uint64_t rng = 42;
  double scratch[32], us[32];
  for (int n = 2; n <= 8; n++) {
    double sum = 0;
    int reps = 4000;
    for (int r = 0; r < reps; r++) {
      for (int i = 0; i < n; i++) us[i] = 100.0 * exp(0.02 * tune_rng_normal(&rng));
      sum += ah_stats_robust_log(us, n, 0.02, scratch);
    }
    double bias = sum / reps - log(100.0);
    ck_assert_msg(fabs(bias) < 0.002, "n=%d: bias %.4f", n, bias);
  }
  for (int i = 0; i < 4; i++) us[i] = 100.0;
  us[3] = 150.0;
  ck_assert(fabs(exp(ah_stats_robust_log(us, 4, 0.0, scratch)) - 100.0) < 1e-9);
  ck_assert(ah_stats_trim_bias(2, 1) < -0.5 && ah_stats_trim_bias(2, 1) > -0.6);
  static ah_stats_noise_t nz;
  nz.count = 0;
  ck_assert(ah_stats_noise_sigma(&nz, 0.03, 0.005) == 0.03);
  for (int p = 0; p < 200; p++) {
    int n = 3 + p % 4;
    for (int i = 0; i < n; i++) {
      us[i] = 50.0 * exp(0.02 * tune_rng_normal(&rng));
      if (tune_rng_uniform(&rng) < 0.01) us[i] *= 1.5;
    }
    ah_stats_noise_add(&nz, us, n, scratch);
  }
  double sg = ah_stats_noise_sigma(&nz, 0.03, 0.005);
  ck_assert_msg(sg > 0.015 && sg < 0.027, "sigma estimate %.4f", sg);
  ck_assert(ah_stats_robust_se(4, 0.02) < ah_stats_robust_se(2, 0.02));
}
END_TEST

START_TEST(test_cusum) {
  uint64_t rng = 9;
  ah_drift_t d;
  ah_drift_init(&d, 100.0, 0.02, 0.05, 16.0);
  for (int i = 0; i < 20000; i++) {
    double x = 100.0 * exp(0.02 * tune_rng_normal(&rng));
    if (tune_rng_uniform(&rng) < 0.01) x *= 1.5;
    ck_assert_msg(!ah_drift_add(&d, x), "false alarm at sample %d", i);
  }
  int at = -1;
  for (int i = 0; i < 200 && at < 0; i++)
    if (ah_drift_add(&d, 110.0 * exp(0.02 * tune_rng_normal(&rng)))) at = i;
  ck_assert_int_ge(at, 0);
  ck_assert_int_le(at, 30);
  ah_drift_init(&d, 100.0, 0.02, 0.05, 16.0);
  at = -1;
  for (int i = 0; i < 200 && at < 0; i++)
    if (ah_drift_add(&d, 85.0 * exp(0.02 * tune_rng_normal(&rng)))) at = i;
  ck_assert_int_ge(at, 0);
  ck_assert_int_le(at, 30);
}
END_TEST

/* The reference learnt from the pinned config's first samples, as the engine uses it: on noise
 * that is not Gaussian — 2% log-noise with 1% outliers plus a right tail (an exponential jitter of
 * mean 3%, or the wait for the last of 8 ranks arriving up to 10% late) — 400 stable streams of
 * 2,000 calls each trip no re-tune (with the median of 24 samples as the reference, 1-2% of them
 * did, after a few hundred calls), and a 10% slowdown is still caught within 60 calls in all but
 * at most one of 50 streams (a warm-up full of outliers widens the noise). */
static double jitter_sample(uint64_t *rng, int kind, double base) {
  double x = base * exp(0.02 * tune_rng_normal(rng));
  if (tune_rng_uniform(rng) < 0.01) x *= 1.5;
  if (kind == 0) return x * exp(-0.03 * log(tune_rng_uniform(rng)));
  double lead = 0.0, late = 0.0;
  for (int r = 0; r < 8; r++) {
    double a = 0.10 * 100.0 * tune_rng_uniform(rng);
    if (r == 0) lead = a;
    if (a > late) late = a;
  }
  return x + (late - lead);
}

START_TEST(test_cusum_learnt_reference) {
  for (int kind = 0; kind < 2; kind++) {
    uint64_t rng = 11 + (uint64_t)kind;
    int trips = 0, slow = 0;
    for (int run = 0; run < 400; run++) {
      ah_drift_t d;
      ah_drift_init(&d, 0.0, 0.02, 0.05, 16.0);
      for (int i = 0; i < 2000; i++)
        if (ah_drift_add(&d, jitter_sample(&rng, kind, 100.0))) {
          trips++;
          break;
        }
      if (run % 8) continue;
      ah_drift_init(&d, 0.0, 0.02, 0.05, 16.0);
      for (int i = 0; i < AH_DRIFT_WARMUP + 50; i++)
        ck_assert_int_eq(ah_drift_add(&d, jitter_sample(&rng, kind, 100.0)), 0);
      int at = -1;
      for (int i = 0; i < 200 && at < 0; i++)
        if (ah_drift_add(&d, jitter_sample(&rng, kind, 110.0))) at = i;
      if (at < 0 || at > 60) slow++;
    }
    ck_assert_msg(trips == 0, "noise kind %d: %d of 400 stable streams re-tuned", kind, trips);
    ck_assert_msg(slow <= 1, "noise kind %d: a 10%% shift missed for 60 calls in %d of 50", kind,
                  slow);
  }
}
END_TEST

/* What the communicator learned (ah_tune_hint): taken only before the first call, only for a
 * subspace of the space, at most AH_TUNE_MAX_HINTS; a warm start from a neighbour's optimum (shim
 * shaped space, ring/ll128 at 12 channels 20% faster than the default) reaches the optimum in fewer
 * calls than a cold one over the same seeds (each seed within 5% of it, half on it), and a hint that points at a slow subspace never
 * leaves the key slower than NCCL's default. */
static void surf_init_shim_far(surf_t *s) {
  static const int64_t ch[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64};
  surf_init_far(s);
  s->space.dims[0].nvalues = 10;
  for (int i = 0; i < 10; i++) s->space.dims[0].values[i] = ch[i];
  s->space.start.res[0] = 0;
  s->own_ch = 24;
}

static ah_tune_t *run_hinted(surf_t *s, int seed, const ah_config_t *hint, tune_drive_result_t *r) {
  ah_tune_params_t p;
  ah_tune_params_default(&p);
  ah_tune_t *t = ah_tune_create(&s->space, &p);
  ck_assert_ptr_nonnull(t);
  if (hint) ck_assert_int_eq(ah_tune_hint(t, hint), 0);
  tune_drive_opts_t o;
  tune_drive_opts_default(&o);
  o.seed = (uint64_t)seed;
  tune_drive_run(t, surf_time, s, &o, r);
  return t;
}

/* A driver with results at once and 2% log-noise that hands `late` to the search mid-run (at call
 * `at`, once its segment there is committed). Returns the call index the key was pinned at
 * (2000: never) and its final config in *fin. */
static uint64_t drive_quick(ah_tune_t *t, surf_t *s, uint64_t seed, const ah_config_t *late,
                            uint64_t at, ah_config_t *fin) {
  uint64_t rng = seed * 0x9E3779B97F4A7C15ULL + 1, i = 0;
  int hinted = 0;
  while (i < 2000) {
    ah_segment_t seg;
    ah_tune_next(t, i, &seg);
    *fin = seg.config;
    if (seg.count == AH_SCHED_FOREVER) return i;
    for (uint64_t k = 0; k < seg.count; k++, i++) {
      ah_tune_observe(t, i, surf_time(s, &seg.config, i) * exp(0.02 * tune_rng_normal(&rng)));
      if (late && !hinted && i + 1 >= at) {
        ck_assert_int_eq(ah_tune_hint(t, late), 0);
        hinted = 1;
      }
    }
  }
  return i;
}

START_TEST(test_hint_api) {
  surf_t s;
  surf_init_shim_far(&s);
  ah_tune_params_t p;
  ah_tune_params_default(&p);
  ah_tune_t *t = ah_tune_create(&s.space, &p);
  ah_config_t h = {AH_ALGO_RING, AH_PROTO_LL128, 0, 1, {12, 0, 0, 0}};
  ah_config_t bad = {AH_ALGO_NVLS, AH_PROTO_SIMPLE, 0, 1, {12, 0, 0, 0}}; /* not in the space */
  ck_assert_int_eq(ah_tune_hint(t, &bad), -1);
  for (int i = 0; i < AH_TUNE_MAX_HINTS; i++) ck_assert_int_eq(ah_tune_hint(t, &h), 0);
  ck_assert_int_eq(ah_tune_hint(t, &h), -1); /* full */
  ah_tune_destroy(t);
  t = ah_tune_create(&s.space, &p);
  ah_segment_t seg;
  ah_tune_next(t, 0, &seg);
  ck_assert_int_eq(ah_tune_hint(t, &bad), -1);
  ck_assert_int_eq(ah_tune_hint(t, &h), 0);  /* mid-search: the quick check starts */
  ck_assert_int_eq(ah_tune_hint(t, &h), -1); /* ... and runs: no second one */
  ah_tune_destroy(t);
  t = ah_tune_create(&s.space, &p);
  ah_config_t fin;
  drive_quick(t, &s, 3, NULL, 0, &fin);
  ck_assert_int_eq(ah_tune_hint(t, &h), -1); /* converged */
  ah_tune_destroy(t);
}
END_TEST

/* The quick warm check (tuner/ah_tune_screen.c ah_tune_start_quick): a hint at the optimum (12
 * channels of ring/ll128, 1.5x ahead of the default) is pinned within 14 calls in at least 10 of
 * 12 seeds (its points and the default committed back to back: 8 calls, results 2 calls late);
 * a hint as fast as the default keeps the default, within 14 calls in at least 8 seeds; a hint in a 2x slower subspace
 * never leaves the key slower than the default. */
START_TEST(test_quick_warm) {
  ah_config_t opt = {AH_ALGO_RING, AH_PROTO_LL128, 0, 1, {12, 0, 0, 0}};
  ah_config_t slow = {AH_ALGO_TREE, AH_PROTO_LL, 0, 1, {4, 0, 0, 0}};
  int fast = 0, ties = 0;
  for (int seed = 1; seed <= 12; seed++) {
    surf_t s;
    surf_init_shim_far(&s);
    tune_drive_result_t r;
    ah_tune_t *t = run_hinted(&s, seed, &opt, &r);
    ck_assert_uint_ne(r.pinned_at, UINT64_MAX);
    ck_assert_msg(surf_best(&s) / cfg_time(&s, &r.final) >= 0.99,
                  "seed %d: pinned %.2f us, best %.2f", seed, cfg_time(&s, &r.final),
                  surf_best(&s));
    if (r.pinned_at <= 14) fast++;
    ah_tune_destroy(t);
    t = run_hinted(&s, seed, &slow, &r);
    expect_no_worse(&s, seed, &r.final);
    ah_tune_destroy(t);
    /* the default's own subspace at NCCL's own channel count: the same time */
    surf_init_shim_far(&s);
    s.base[1] =
        200; /* ring/ll128 out of the race, ring/simple best at 24: the default is the optimum */
    s.opt[0][0] = 24;
    ah_config_t same = s.space.start;
    same.res[0] = 24;
    t = run_hinted(&s, seed, &same, &r);
    if (r.pinned_at <= 14) ties++;
    expect_no_worse(&s, seed, &r.final);
    ah_tune_destroy(t);
  }
  ck_assert_int_ge(fast, 10);
  ck_assert_int_ge(ties, 8);
}
END_TEST

/* A hint from across a protocol boundary: the neighbour's best is ring/ll128 at 12 channels (4%
 * ahead of the default here), but this bin's best is NCCL's own subspace, ring/simple, at those 12
 * channels (4% ahead of the hint). The quick check measures NCCL's subspace at the hint's channels
 * too, so it must not pin the hint: the optimum in at least 10 of 12 seeds. Also the noise prior
 * (ah_tune_hint_noise): refused without a hint or out of range. */
START_TEST(test_quick_boundary) {
  ah_config_t hint = {AH_ALGO_RING, AH_PROTO_LL128, 0, 1, {12, 0, 0, 0}};
  int good = 0;
  for (int seed = 1; seed <= 12; seed++) {
    surf_t s;
    surf_init_shim_far(&s);
    s.opt[0][0] = 12; /* ring/simple: 100 us at 12 channels, 108 at NCCL's own 24 */
    s.base[1] = 104;  /* ring/ll128: 104 us at 12 */
    tune_drive_result_t r;
    ah_tune_t *t = run_hinted(&s, seed, &hint, &r);
    ck_assert_uint_ne(r.pinned_at, UINT64_MAX);
    expect_no_worse(&s, seed, &r.final);
    if (surf_best(&s) / cfg_time(&s, &r.final) >= 0.99) good++;
    ah_tune_destroy(t);
  }
  ck_assert_int_ge(good, 10);
  surf_t s;
  surf_init_shim_far(&s);
  ah_tune_params_t p;
  ah_tune_params_default(&p);
  ah_tune_t *t = ah_tune_create(&s.space, &p);
  ck_assert_int_eq(ah_tune_hint_noise(t, 0.02), -1); /* no hint yet */
  ck_assert_int_eq(ah_tune_hint(t, &hint), 0);
  ck_assert_int_eq(ah_tune_hint_noise(t, 0.9), -1);
  ck_assert_int_eq(ah_tune_hint_noise(t, 0.02), 0);
  ah_tune_status_t st;
  ah_tune_status(t, &st);
  ck_assert_msg(st.sigma > 0.019 && st.sigma < 0.021, "noise prior %.4f, want 0.02", st.sigma);
  ah_tune_destroy(t);
}
END_TEST

/* Designed batches (channels searched alone, cold, results 2 calls late) against the sequential
 * descent (batches 0) on the same 16 seeds, on the shim's channel list with the optimum at 12
 * channels of a subspace other than NCCL's: the batches take at most 70% of the descent's calls
 * (measured: 19-23 a seed against 27-45), pin the optimum (within 1%) in at least 14 seeds (the
 * descent: all 16; the batches' worst two measured 0.959 and 0.921, a point two single-sample
 * rounds did not tell from the leader), at least 0.9 of it in every seed, and never a config
 * slower than the default. */
START_TEST(test_batches) {
  uint64_t calls[2] = {0, 0};
  int good = 0;
  for (int b = 0; b <= 1; b++)
    for (int seed = 1; seed <= 16; seed++) {
      surf_t s;
      surf_init_shim_far(&s);
      ah_tune_params_t p;
      ah_tune_params_default(&p);
      p.batches = b;
      tune_drive_result_t r;
      ah_tune_t *t = search_seed(&s.space, &p, surf_time, &s, seed, &r);
      ck_assert_uint_ne(r.pinned_at, UINT64_MAX);
      double q = surf_best(&s) / cfg_time(&s, &r.final);
      ck_assert_msg(q >= 0.9, "seed %d, batches %d: pinned %.3f of the optimum", seed, b, q);
      if (b && q >= 0.99) good++;
      expect_no_worse(&s, seed, &r.final);
      calls[b] += r.pinned_at;
      ah_tune_destroy(t);
    }
  ck_assert_int_ge(good, 14);
  ck_assert_msg(calls[1] * 10 <= calls[0] * 7, "batches %llu calls, descent %llu",
                (unsigned long long)calls[1], (unsigned long long)calls[0]);
}
END_TEST

/* A hint arriving mid-search (a neighbour bin converged meanwhile): a cold key hinted with the
 * optimum after 6 calls (the designed batches pin some cold keys within 10 with results at once)
 * converges on it in fewer calls than the cold search, over 12 seeds. */
START_TEST(test_hint_mid_search) {
  ah_config_t opt = {AH_ALGO_RING, AH_PROTO_LL128, 0, 1, {12, 0, 0, 0}};
  uint64_t cold = 0, late = 0;
  for (int seed = 1; seed <= 12; seed++) {
    surf_t s;
    surf_init_shim_far(&s);
    ah_tune_params_t p;
    ah_tune_params_default(&p);
    ah_config_t fin;
    ah_tune_t *t = ah_tune_create(&s.space, &p);
    cold += drive_quick(t, &s, (uint64_t)seed, NULL, 0, &fin);
    ah_tune_destroy(t);
    t = ah_tune_create(&s.space, &p);
    late += drive_quick(t, &s, (uint64_t)seed, &opt, 6, &fin);
    ck_assert_msg(surf_best(&s) / cfg_time(&s, &fin) >= 0.99, "seed %d: pinned %.2f us, best %.2f",
                  seed, cfg_time(&s, &fin), surf_best(&s));
    ah_tune_destroy(t);
  }
  ck_assert_msg(late * 10 <= cold * 8, "hinted mid-search %llu calls, cold %llu",
                (unsigned long long)late, (unsigned long long)cold);
}
END_TEST

START_TEST(test_warm_start) {
  ah_config_t near = {AH_ALGO_RING, AH_PROTO_LL128, 0, 1, {16, 0, 0, 0}}; /* a neighbour's best */
  ah_config_t slow = {AH_ALGO_TREE, AH_PROTO_LL, 0, 1, {4, 0, 0, 0}};     /* 2x slower subspace */
  uint64_t cold = 0, warm = 0;
  int good = 0;
  for (int seed = 1; seed <= 16; seed++) {
    surf_t s;
    surf_init_shim_far(&s);
    tune_drive_result_t rc, rw, rs;
    ah_tune_t *t = run_hinted(&s, seed, NULL, &rc);
    ah_tune_destroy(t);
    t = run_hinted(&s, seed, &near, &rw);
    double q = surf_best(&s) / cfg_time(&s, &rw.final);
    ck_assert_msg(q >= 0.95, "seed %d: warm start reached %.3f of the optimum (%s nch=%lld)", seed,
                  q, rw.final.proto == AH_PROTO_LL128 ? "ll128" : "other",
                  (long long)rw.final.res[0]);
    if (q >= 0.99) good++;
    ck_assert_uint_ne(rw.pinned_at, UINT64_MAX);
    ah_tune_destroy(t);
    cold += rc.pinned_at;
    warm += rw.pinned_at;
    t = run_hinted(&s, seed, &slow, &rs);
    expect_no_worse(&s, seed, &rs.final);
    ah_tune_destroy(t);
  }
  /* the optimum (12 channels) itself in half the seeds: the other half stop on the hint, 4% off,
   * where one finer step is not significant on 4 samples (a cold search gets there by a coarse
   * step from farther away; the cold search's designed batches keep that within 10% more calls
   * than the warm start, where the sequential descent took 25% more) */
  ck_assert_int_ge(good, 8);
  ck_assert_msg(warm * 10 <= cold * 9, "warm starts took %llu calls, cold %llu",
                (unsigned long long)warm, (unsigned long long)cold);
}
END_TEST

/* The communicator driver: keys interleaved on one stream see their results sooner in their own
 * calls (lag counts stream calls), join at their arrival, and each pins. An engine stand-in
 * records, per key, the most calls it had committed past a call before that call's result came. */
typedef struct {
  uint64_t asked, maxlag;
  int done;
} lagrec_t;

static void lag_next(void *e, uint64_t first, ah_segment_t *seg) {
  lagrec_t *l = e;
  memset(seg, 0, sizeof(*seg));
  seg->first = first;
  seg->config.ndims = 1;
  seg->config.res[0] = 1;
  seg->count = first >= 20 ? AH_SCHED_FOREVER : 1;
  l->asked = first;
}

static void lag_observe(void *e, uint64_t index, double us) {
  lagrec_t *l = e;
  (void)us;
  if (index < 20 && l->asked - index > l->maxlag)
    l->maxlag = l->asked - index; /* while searching */
}

typedef struct {
  lagrec_t rec[3];
  int started[3], nstarted, order[3];
} lagjob_t;

static void *lag_start(void *user, int j) {
  lagjob_t *jb = user;
  jb->started[j] = 1;
  jb->order[jb->nstarted++] = j;
  return &jb->rec[j];
}

static void lag_done(void *user, int j) { ((lagjob_t *)user)->rec[j].done = 1; }

static double flat_time(void *arg, const ah_config_t *c, uint64_t call) {
  (void)arg, (void)c, (void)call;
  return 10.0;
}

START_TEST(test_drive_comm) {
  static const tune_engine_ops_t ops = {lag_next, lag_observe, NULL};
  tune_comm_ops_t cops = {&ops, lag_start, lag_done};
  /* alone: results 2 calls late are 2 of the key's own calls late */
  lagjob_t one;
  memset(&one, 0, sizeof(one));
  tune_comm_key_t k1[1];
  memset(k1, 0, sizeof(k1));
  tune_drive_opts_default(&k1[0].o);
  k1[0].f = flat_time;
  ck_assert_int_eq(tune_drive_run_comm(k1, 1, &cops, &one), 0);
  ck_assert_uint_eq(one.rec[0].maxlag, 2);
  ck_assert_uint_eq(k1[0].r.pinned_at, 20);
  /* three keys in turn: a key's result is back before its next call */
  lagjob_t three;
  memset(&three, 0, sizeof(three));
  tune_comm_key_t k3[3];
  memset(k3, 0, sizeof(k3));
  for (int j = 0; j < 3; j++) {
    tune_drive_opts_default(&k3[j].o);
    k3[j].o.seed = (uint64_t)j + 1;
    k3[j].f = flat_time;
    k3[j].arrive = (uint64_t)(2 - j) * 5; /* key 2 first, key 0 last */
  }
  ck_assert_int_eq(tune_drive_run_comm(k3, 3, &cops, &three), 0);
  ck_assert_int_eq(three.nstarted, 3);
  ck_assert_int_eq(three.order[0], 2);
  ck_assert_int_eq(three.order[2], 0);
  for (int j = 0; j < 3; j++) {
    ck_assert_int_eq(three.rec[j].done, 1);
    ck_assert_uint_eq(k3[j].r.pinned_at, 20);
  }
  ck_assert_uint_le(three.rec[0].maxlag, 1); /* key 0 ran interleaved from its first call */
}
END_TEST

static Suite *tune_suite(void) {
  Suite *s = suite_create("tune");
  const TTest *const search_tests[] = {test_unimodal,
                                       test_two_dims,
                                       test_coupled_ridge,
                                       test_knee,
                                       test_shim_shaped_space,
                                       test_plateau,
                                       test_plateau_above_cap,
                                       test_noisy,
                                       test_single_point,
                                       test_default_optimal,
                                       test_out_of_order,
                                       test_drift_reopens,
                                       test_budget,
                                       test_bad_space_and_report,
                                       test_chaos,
                                       test_prior_prunes,
                                       test_prior_chunk,
                                       test_sure_pin_chunk,
                                       test_drive_skew,
                                       test_hint_api,
                                       test_warm_start,
                                       test_quick_warm,
                                       test_quick_boundary,
                                       test_hint_mid_search,
                                       test_batches,
                                       test_drive_comm};
  ah_check_add(s, (ah_check_case_t){.name = "search", .timeout = 60}, search_tests,
               AH_CHECK_COUNT(search_tests));
  const TTest *const stats_tests[] = {test_stats, test_fit, test_cusum,
                                      test_cusum_learnt_reference};
  ah_check_add(s, (ah_check_case_t){.name = "stats", .timeout = 30}, stats_tests,
               AH_CHECK_COUNT(stats_tests));
  return s;
}

int main(void) { return ah_check_run(tune_suite()); }
