/* ah_tune_internal.h: the state of one key's search (struct ah_tune) and the functions the files
 * of the engine share — ah_tune_probe.c (probes and their statistics) < ah_tune_confirm.c <
 * ah_tune_descent.c < ah_tune_screen.c (screening, descent, confirmation: the search's state
 * machine, ah_tune_search_internal.h) < ah_tune.c (the driver's interface: segments out, results
 * in). Internal to tuner/. */
#ifndef AH_TUNE_INTERNAL_H
#define AH_TUNE_INTERNAL_H

#include <stdint.h>

#include "ah_config.h"
#include "ah_stats.h"
#include "ah_tune.h"

#include "ah_stats.h"

#define AH_TUNE_MAX_SAMPLES 32
#define AH_TUNE_MAX_WANTS (AH_MAX_SUBSPACES + 2)
#define AH_TUNE_MAX_LEVEL 1   /* step ratios 2^(1/2^level): x2, then x1.41 */
#define AH_TUNE_SEARCH_MAXN 4 /* racing: samples a search probe may grow to */
#define AH_TUNE_MOVE_N 4      /* samples of both sides behind a move that gains < BIG_GAIN */
#define AH_TUNE_CONFIRM_N 4   /* fresh samples of the winner before it may replace the default */
#define AH_TUNE_CONFIRM_MAXN 12
#define AH_TUNE_SEARCH_Z 2.0        /* standard errors a move needs during the search */
#define AH_TUNE_CONFIRM_Z 3.0       /* ... and the winner over NCCL's default */
#define AH_TUNE_CONFIRM_Z_CHUNK 2.0 /* ... where the chunk is searched too (ah_tune_eval_confirm) */
#define AH_TUNE_SURE_Z 6.0        /* ... or over NCCL's default without fresh samples, beyond 10% */
#define AH_TUNE_PRIOR_BEHIND 1.2  /* NCCL's estimate puts a subspace this far behind its best ... */
#define AH_TUNE_PRIOR_ABANDON 1.2 /* ... then it is descended only within this of the best ... */
#define AH_TUNE_PRIOR_RESCREEN 1.5 /* ... and re-screened only within this */
#define AH_TUNE_FLAT_Z 1.5         /* standard errors within which fewer resources count as equal */
#define AH_TUNE_STEP_ABANDON                                                                       \
  1.10 /* a later subspace still this much slower after one step is dropped */
#define AH_TUNE_BIG_GAIN 0.10   /* a move gaining more coarsens the step */
#define AH_TUNE_SMALL_GAIN 0.03 /* a move gaining less refines it */
#define AH_TUNE_SCREEN_OUT 1.7  /* a subspace this much slower on its first sample is out */
#define AH_TUNE_RESCREEN_RATIO                                                                     \
  3.0 /* subspaces screened within this of the best get a second look */
/* A channel move from n0 to n1 channels with the chunk searched too takes the chunk nearest
 * chunk x (n0/n1)^this: the best chunk falls as channels grow (sim/: as 1/n where the links bound a
 * step, 1/sqrt(n) where the CTA does). On the shim's lists a doubling halves the chunk, a x1.5
 * step keeps it */
#define AH_TUNE_COUPLE 0.75
/* The model step (ah_tune_fit_step; NCCL 2.30's space, channels and chunk searched): where a
 * leading subspace's descent stops, the bandwidth knee below the centre, else the lowest point of
 * a quadratic in (log2 channels, log2 chunk) fitted to the subspace's probes within
 * AH_TUNE_FIT_REACH (log2 units) of the centre on each axis, is probed — any channel count, not
 * only the list's; at most AH_TUNE_FIT_STEPS per subspace */
#define AH_TUNE_FIT_STEPS 1
#define AH_TUNE_FIT_REACH 1.0
#define AH_TUNE_CHUNK_PRIOR 1.6   /* ... the prior's ratio there (prior_ratio capped) */
#define AH_TUNE_CHUNK_CONFIRM_N 3 /* ... the winner's fresh samples there */
#define AH_TUNE_CHUNK_ABANDON                                                                      \
  1.08 /* ... and a subspace screened this far behind is not descended */
/* Designed batches (ah_tune_eval_batch; channels the only searched resource, cold): each round's
 * probes are chosen together and committed back to back, so the result lag is paid once a round */
#define AH_TUNE_BATCH_DESIGN                                                                       \
  { 1.0, 0.667, 0.333 }          /* a subspace's counts: the middle of its list x these */
#define AH_TUNE_BATCH_ROUNDS 2   /* rounds after the first, at most */
#define AH_TUNE_BATCH_REACH 0.02 /* a point this close to the leader gets a second sample */
#define AH_TUNE_BATCH_RACE_Z                                                                       \
  1.0 /* ... and more while it may be, at this many standard errors, ... */
#define AH_TUNE_BATCH_RACE_GAIN 0.03 /* ... this much faster than the leader */
#define AH_TUNE_BATCH_RESCREEN                                                                     \
  1.3 /* another subspace screened within this is measured at the leader's count */
/* Warm start (ah_tune_hint): no plateau walk (the hint's channels are already below NCCL's cap) */
#define AH_TUNE_WARM_ABANDON 1.05   /* a subspace screened this far behind is not descended */
#define AH_TUNE_WARM_RESCREEN 1.5   /* ... nor re-screened beyond this */
#define AH_TUNE_WARM_LEVEL 1        /* descents start with the finer step */
#define AH_TUNE_WARM_SURE_GAIN 0.05 /* a best this far ahead of the default ... */
#define AH_TUNE_WARM_SURE_Z                                                                        \
  4.0 /* ... and by this many standard errors is pinned without fresh samples */
/* The quick warm check (ah_tune_start_quick): the hint, NCCL's default and the hint's channel
 * neighbours committed back to back; the hint pinned once it beats the default clearly and no
 * neighbour beats it */
#define AH_TUNE_QUICK_N 2        /* first samples of the hint and the default */
#define AH_TUNE_QUICK_SIDE_N 1   /* ... of the other points (a faster one is raced) */
#define AH_TUNE_QUICK_MAXN 6     /* ... the hint and the default may grow to this while unsure */
#define AH_TUNE_QUICK_TIE_N 2    /* samples of each behind keeping the default on a tie */
#define AH_TUNE_QUICK_MOVES 2    /* steps the check may follow a faster neighbour */
#define AH_TUNE_QUICK_Z 2.5      /* standard errors the hint needs over the default */
#define AH_TUNE_SIGMA_PRIOR 0.03 /* log-noise assumed before enough samples are pooled */
#define AH_TUNE_SIGMA_FLOOR 0.005
#define AH_TUNE_DRIFT_SHIFT 0.05 /* relative shift the CUSUM is tuned to detect */
#define AH_TUNE_DRIFT_H 16.0

typedef struct {
  ah_config_t cfg;
  int sub;              /* index into space.sub, or -1 (NCCL's own choice outside the space) */
  int pos[AH_MAX_DIMS]; /* index of each resource value in its dimension */
  int n, committed;     /* samples observed / calls committed */
  int confirm;          /* a fresh re-measurement of a searched config */
  int epoch;            /* search epoch (drift re-opens start a new one) */
  double us[AH_TUNE_MAX_SAMPLES];
} ah_probe_t;

/* A committed segment as the engine remembers it, to attribute results. */
typedef struct {
  uint64_t first, count; /* count UINT64_MAX: forever */
  int probe;
} ah_tseg_t;

typedef struct {
  int probe, target; /* wanted: probe observed at least `target` times */
} ah_want_t;

enum {
  AH_PH_SCREEN = 0,
  AH_PH_RESCREEN = 1,
  AH_PH_DESCEND = 2,
  AH_PH_CONFIRM = 3,
  AH_PH_DONE = 4,
  AH_PH_QUICK = 5,
  AH_PH_BATCH = 6
};

struct ah_tune {
  ah_space_t space;
  ah_tune_params_t prm;
  int state, phase, epoch;
  ah_probe_t *probes;
  int nprobes, capprobes;
  ah_tseg_t *segs;
  int nsegs, capsegs;
  ah_want_t wants[AH_TUNE_MAX_WANTS];
  int nwants;
  int calls_spent, epoch_calls;
  uint64_t asked; /* `first` of the last ah_tune_next() */
  int lag_est;    /* most calls seen started after a call before its result came */
  uint64_t converged_at;
  double sigma;
  int def;        /* probe of NCCL's default (space.start) */
  int def_sub;    /* subspace of NCCL's choice (never abandoned), or -1 */
  int best;       /* best searched probe so far */
  int winner;     /* pinned probe (a confirm probe when the search won) */
  int winner_src; /* probe whose config is pinned */
  int searchable[AH_MAX_DIMS], nsearch;
  /* screening */
  int sub_start[AH_MAX_SUBSPACES];
  int order[AH_MAX_SUBSPACES], norder, cur;
  int rescreened[AH_MAX_SUBSPACES], resc, screen2;
  /* descent */
  int center, dim_i, level, dir, first_step, quiet, moved, jumped, stretched;
  int walk_ref, walked; /* plateau walk: fastest centre on it, and moves along it, this axis */
  int walk_pts[AH_MAX_DIM_VALUES]; /* the centres it left, in order */
  int lv_start[AH_MAX_DIMS];
  int cand[2], ncand;
  int looked_back;      /* the fastest probe of the subspace was taken as its centre */
  int fit_p, fit_steps; /* response-surface step: its pending probe (-1: none), steps taken */
  int confirm_probe;
  /* warm start (ah_tune_hint): neighbours' winners */
  ah_config_t hints[AH_TUNE_MAX_HINTS];
  int nhints;
  int hint_probe[AH_TUNE_MAX_HINTS]; /* each hint's screening probe (-1: none of its own) */
  double sigma_prior; /* neighbours' measured noise (ah_tune_hint_noise), 0: AH_TUNE_SIGMA_PRIOR */
  int quick_off;      /* the quick check is over (or not applicable): the warm search runs */
  int quick_pt[8], nquick;  /* the quick check's points: the hint first, then its neighbours */
  int quick_c, quick_moves; /* its centre (the hint, or a neighbour that beat it) and moves */
  int quick_alt; /* NCCL's best-estimated other subspace at the hint's resources, or -1 */
  /* designed batches (ah_tune_start_batch; channels the only searched resource, cold) */
  int bt_swept[AH_MAX_SUBSPACES]; /* the subspace's channel design was wanted */
  int bt_resc[AH_MAX_SUBSPACES];  /* ... its point at the leader's channels was wanted */
  int bt_lead, bt_rounds; /* the leader after the last round (-1: none yet), rounds evaluated */
  /* drift */
  ah_drift_t drift;
  int drift_on, reopened, reopen_count, forever_seg;
  double scratch[AH_TUNE_MAX_SAMPLES];
};

/* ---- ah_tune_probe.c ---- */

double ah_tune_lg(const ah_tune_t *t, int p); /* robust mean of log time of probe p */
double ah_tune_se(const ah_tune_t *t, int p); /* ... and its standard error */
void ah_tune_update_sigma(ah_tune_t *t);      /* pooled log-noise of this epoch's probes */
/* Config of subspace `sub` at value indices pos (sub -1: the start's algo/proto). */
void ah_tune_make_cfg(const ah_tune_t *t, int sub, const int *pos, ah_config_t *c);
/* The value indices [*lo_p, *hi_p] of dimension d worth probing in subspace sub (-1: all). */
void ah_tune_window(const ah_tune_t *t, int sub, int d, int *lo_p, int *hi_p);
/* Finds the current epoch's non-confirm probe of config c, or adds it. Returns its index or -1. */
int ah_tune_probe_get(ah_tune_t *t, int sub, const int *pos_in, const ah_config_t *c);
void ah_tune_want(ah_tune_t *t, int p,
                  int target); /* the next batch needs p observed target times */
int ah_tune_wants_met(const ah_tune_t *t);
int ah_tune_reserve(const ah_tune_t *t); /* calls kept back for the confirmation */

/* ---- the search's state machine (ah_tune_confirm.c, ah_tune_screen.c) ---- */

void ah_tune_finish(ah_tune_t *t, int winner, int src, int state); /* pins winner (config of src) */
void ah_tune_start_screen(ah_tune_t *t); /* a new epoch's first batch: every subspace once */
/* With hints: plans the quick warm check instead (returns 1), or returns 0 when it does not apply. */
int ah_tune_start_quick(ah_tune_t *t);
void ah_tune_advance(ah_tune_t *t); /* runs evaluations while the batch has its results */

#endif
