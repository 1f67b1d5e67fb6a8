/* ah_tune.h: the leader's online tuning of one key — AutoCCL-style search, exhaustive over the
 * implementation subspaces (algorithm x protocol) and coordinate descent over the resource
 * dimensions inside each, then a pinned winner watched for drift.
 *
 * The driver (the shim, on the leader rank; a benchmark harness) works in call indices:
 *   - when its schedule's horizon reaches index i, it asks ah_tune_next(t, i, &seg) for the next
 *     segment to commit (a probe: config C for n calls; or, once converged, the winner forever);
 *   - when the measured time of call index j is known (CUDA events complete later, so results
 *     arrive out of step with proposals), it reports it with ah_tune_observe(t, j, us).
 * The engine never sees NCCL, a clock or a socket, so it is tested on synthetic surfaces and
 * benchmarked against sim/'s truth model directly. One ah_tune_t is not thread-safe: the driver
 * serialises the calls on it (the shim holds the key's lock). The search is explained in
 * docs/tuner.md. */
#ifndef AH_TUNE_H
#define AH_TUNE_H

#include <stdint.h>

#include "ah_config.h"
#include "ah_sched.h"

typedef struct {
  int budget_calls;      /* calls a key may spend searching before it gives up (default) */
  int samples_per_probe; /* first samples per configuration (default 1); racing adds more */
  double noise_floor;    /* relative difference below which configs are considered equal */
  double abandon_ratio;  /* a subspace whose first probe is this much slower is dropped */
  double
      prior_ratio; /* a subspace NCCL estimates this much slower than its best is not tried (0: all) */
  int drift_check; /* 1: CUSUM on the pinned config's times re-opens tuning */
  uint64_t seed;   /* for any randomised tie-breaking, so runs are reproducible */
  int batches;     /* 1: a cold key searching channels alone runs designed batches (default);
                            * 0: the sequential descent */
} ah_tune_params_t;

/* Fills the defaults (documented in docs/tuner.md). */
/* AUTOHA_TUNE_BUDGET's default: the calls a key may spend searching (the settings table's row
 * writes its text from this). */
#define AH_TUNE_BUDGET_DEFAULT 180

void ah_tune_params_default(ah_tune_params_t *p);

enum { AH_TUNE_SEARCHING = 0, AH_TUNE_CONVERGED = 1, AH_TUNE_DEFAULT = 2 };

typedef struct ah_tune ah_tune_t;

/* Starts tuning a key over `space`. Returns NULL on allocation failure. */
ah_tune_t *ah_tune_create(const ah_space_t *space, const ah_tune_params_t *params);
void ah_tune_destroy(ah_tune_t *t);

/* What the communicator already learned: the pinned winner `cfg` of a neighbouring key (the same
 * collective on the same communicator, another size bin). Handed in before this key's first
 * ah_tune_next, the search starts warm with a quick check: the hinted point, its channel
 * neighbours and NCCL's default measured back to back, the hint pinned as soon as it beats the
 * default beyond noise and no neighbour beats it, the default kept when they tie; when that is not
 * clear, it screens only NCCL's default, its own subspace and the hinted subspaces (at the hinted
 * resources), descends only the best of them with the finer step first, and confirms the winner
 * against the default as always. Handed in mid-search (the neighbour converged while this key was
 * searching), the quick check runs from there, keeping every sample taken; taken once, and not
 * in the confirmation. Up to AH_TUNE_MAX_HINTS hints; a hint whose (algorithm, protocol) this key
 * cannot run is ignored. Returns 0 when taken, -1 otherwise (converged, too many, not in the space,
 * or mid-search when the quick check does not apply or already ran). A drift re-open forgets the
 * hints. */
#define AH_TUNE_MAX_HINTS 4
int ah_tune_hint(ah_tune_t *t, const ah_config_t *cfg);
/* With a hint: the noise (sigma of log time, ah_tune_status's `sigma`) the neighbour measured, the
 * prior of this key's pooled noise instead of 3% (the larger of several). Returns 0 when taken, -1
 * when no hint was taken or sigma is outside [0.005, 0.5]. Forgotten with the hints. */
int ah_tune_hint_noise(ah_tune_t *t, double sigma);

/* The next segment to commit, starting at call index `first` (the schedule's horizon). Always
 * produces a segment: while searching, a probe (count > 0); once converged or given up, the
 * winner (or NCCL's default) with count AH_SCHED_FOREVER. */
void ah_tune_next(ah_tune_t *t, uint64_t first, ah_segment_t *seg_p);

/* A measured time (microseconds) of call `index`, which ran the configuration committed for it.
 * Results may arrive in any order and for indices of past segments. */
void ah_tune_observe(ah_tune_t *t, uint64_t index, double us);

/* After convergence, with drift checking on: 1 when the pinned config's times have shifted for
 * long enough that tuning was re-opened (the driver then cuts the forever segment short at the
 * next index it commits). */
int ah_tune_reopened(const ah_tune_t *t);

/* State and figures for the report. */
typedef struct {
  int state;             /* AH_TUNE_* */
  int calls_spent;       /* calls committed to probes */
  int probes;            /* distinct configurations measured */
  uint64_t converged_at; /* call index of convergence, or UINT64_MAX */
  ah_config_t winner;    /* best known configuration (start while nothing beat it) */
  double winner_us;      /* robust time of the winner */
  double default_us;     /* robust time of NCCL's default (space->start) */
  int reopen_count;      /* times drift re-opened tuning */
  int hints;             /* neighbours' points taken (ah_tune_hint), at the start or mid-search */
  double sigma;          /* pooled noise of the search (sigma of log time; a neighbour's prior) */
  /* The search's best point, also where NCCL's default was kept over it (not faster beyond
   * noise): what another key of the communicator may start from (ah_tune_hint). The start while
   * nothing was searched. */
  ah_config_t learned;
} ah_tune_status_t;
void ah_tune_status(const ah_tune_t *t, ah_tune_status_t *st_p);

/* Every probe and its result, for the report: calls fn per measured configuration. */
void ah_tune_foreach_probe(const ah_tune_t *t,
                           void (*fn)(void *arg, const ah_config_t *cfg, int samples, double us),
                           void *arg);

#endif
