/* tune_drive.h: a driver for the tuning engine as the shim's leader would run it — commits the
 * segments ah_tune_next() proposes when the horizon is reached, "runs" each call on a surface
 * (a function from configuration to true microseconds) with seeded multiplicative noise, and
 * reports results late (lag), shuffled and optionally lost. Shared by tests/tune and
 * bench/tuner_quality, so the benchmark scores the engine under the same conditions it is tested in. */
#ifndef TUNE_DRIVE_H
#define TUNE_DRIVE_H

#include <stdint.h>

#include "ah_tune.h"

typedef double (*tune_surface_fn)(void *arg, const ah_config_t *cfg, uint64_t call);

/* The search under test, as the driver sees it: autoha's engine (tune_drive_run) or a rival
 * search with the same call-index interface (bench/tuner_quality's AutoCCL-style search). */
typedef struct {
  void (*next)(void *eng, uint64_t first, ah_segment_t *seg_p);
  void (*observe)(void *eng, uint64_t index, double us);
  int (*reopened)(const void *eng); /* NULL: never re-opens */
} tune_engine_ops_t;

typedef struct {
  double sigma;        /* log-normal noise */
  double outlier_rate; /* share of calls slowed by outlier_factor */
  double outlier_factor;
  int lag;     /* a call's result is reported this many calls later (0: at once) */
  int shuffle; /* 1: results due at the same time arrive in random order */
  double loss; /* share of results never reported */
  uint64_t seed;
  uint64_t max_calls;   /* calls to run */
  int stop_when_pinned; /* 1: stop once the forever segment is committed and results drained */
  /* optional: noise from the caller (bench uses sim_model_noise); NULL = built-in */
  double (*noise)(void *arg, double us, uint64_t *state);
  void *noise_arg;
  /* Arrival skew: each of `ranks` ranks reaches the call skew x skew_ref_us x U(0,1) late; the
   * leader (rank 0) measures its own duration, which includes waiting for the last rank. With
   * skew_min_signal the engine instead gets the shortest duration across ranks (the last rank's,
   * which waits for no one), as the hub could gather it, skew_gather_lag calls later still. */
  int ranks;
  double skew;
  double skew_ref_us;
  int skew_min_signal;
  int skew_gather_lag;
} tune_drive_opts_t;

typedef struct {
  uint64_t calls;     /* calls run */
  uint64_t pinned_at; /* first index of the last forever segment, UINT64_MAX if none */
  ah_config_t final;  /* config of the last call run */
  int reopens_seen;   /* times the driver saw ah_tune_reopened() and cut the forever segment */
  int segments;       /* segments committed */
  double search_us;   /* noise-free time of the calls run before the pin (the search's cost) */
} tune_drive_result_t;

void tune_drive_opts_default(tune_drive_opts_t *o);
void tune_drive_run(ah_tune_t *t, tune_surface_fn f, void *arg, const tune_drive_opts_t *o,
                    tune_drive_result_t *r_p);
/* The same run for any engine behind ops. */
void tune_drive_run_engine(const tune_engine_ops_t *ops, void *eng, tune_surface_fn f, void *arg,
                           const tune_drive_opts_t *o, tune_drive_result_t *r_p);

/* A communicator's keys interleaved on one stream, as a job calls its size bins: each key joins
 * at its first call (`arrive`, a stream call index) and the running keys then take the stream's
 * calls in turn. A result falls due `o.lag` stream calls after its call, so a key interleaved with
 * others sees its own results sooner (in its own calls) than one running alone. Per key: its
 * options (seed, noise, max_calls, ...; skew included) and, after the run, its result in its own
 * call indices, as tune_drive_run_engine reports one key. */
typedef struct {
  uint64_t arrive;
  tune_surface_fn f;
  void *arg;
  tune_drive_opts_t o;
  tune_drive_result_t r;
} tune_comm_key_t;

typedef struct {
  const tune_engine_ops_t *ops;
  /* Key j's first call: returns its engine, created then (so it can be handed what the keys
   * already done learned), or NULL to stop the run. */
  void *(*start)(void *user, int j);
  /* Key j is done (pinned with its results drained, or out of calls): keys[j].r is final. */
  void (*done)(void *user, int j);
} tune_comm_ops_t;

/* Runs the keys interleaved until every one is done. Returns 0, or -1 (out of memory, or a start
 * returned NULL). */
int tune_drive_run_comm(tune_comm_key_t *keys, int nkeys, const tune_comm_ops_t *cops, void *user);

/* Deterministic RNG helpers (splitmix64). */
uint64_t tune_rng_next(uint64_t *s);
double tune_rng_uniform(uint64_t *s);
double tune_rng_normal(uint64_t *s);

#endif
