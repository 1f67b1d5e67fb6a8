/* ah_tune_search.c: the search's state machine for one key (the method is described at the top of
 * ah_tune.c and in docs/tuner.md): a warm key's quick check of a neighbour's point, screening the
 * subspaces, re-screening the close ones, coordinate descent inside each, the winner's
 * confirmation against NCCL's default, and finishing. Each step
 * asks for samples (ah_tune_want) and is evaluated when they have all come back (ah_tune_advance). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_fit.h"
#include "ah_log.h"
#include "ah_tune_internal.h"

/* ---- finishing ---- */

void ah_tune_finish(ah_tune_t *t, int winner, int src, int state) {
  if (ah_log_level() >= AH_LOG_DEBUG) {
    char b[96];
    ah_log(AH_LOG_DEBUG, "tuner: %s %s (%.2f us, n=%d; default %.2f us, n=%d; noise %.1f%%) after %d "
           "calls, %d probes, results up to %d calls late",
           state == AH_TUNE_CONVERGED ? "pinned" : "gave up, pinned",
           ah_config_format(&t->probes[winner].cfg, b, sizeof(b)), exp(ah_tune_lg(t, winner)),
           t->probes[winner].n, t->def >= 0 ? exp(ah_tune_lg(t, t->def)) : 0.0,
           t->def >= 0 ? t->probes[t->def].n : 0, 100.0 * t->sigma, t->epoch_calls, t->nprobes,
           t->lag_est);
  }
  t->phase = AH_PH_DONE;
  t->state = state;
  t->winner = winner;
  t->winner_src = src;
  t->nwants = 0;
  t->drift_on = 0;
  if (t->prm.drift_check && winner >= 0 && t->probes[winner].n > 0) {
    ah_drift_init(&t->drift, 0.0, t->sigma > 0.01 ? t->sigma : 0.01,
                  AH_TUNE_DRIFT_SHIFT, AH_TUNE_DRIFT_H);
    t->drift_on = 1;
  }
}

static void ah_tune_start_confirm(ah_tune_t *t) {
  t->phase = AH_PH_CONFIRM;
  t->nwants = 0;
  /* A best that is not measured faster than the default (a tie kept for its fewer resources)
   * cannot pass the confirmation: NCCL's choice stays without spending its samples. */
  if (t->best < 0 || t->best == t->def || ah_tune_lg(t, t->best) >= ah_tune_lg(t, t->def) ||
      ah_config_equal(&t->probes[t->best].cfg, &t->probes[t->def].cfg)) {
    ah_tune_finish(t, t->def, t->def, AH_TUNE_CONVERGED);
    return;
  }
  int b = t->best;
  /* A gain far beyond what selection luck can produce needs no fresh samples: on at least
   * AH_TUNE_MOVE_N samples of both, more than AH_TUNE_BIG_GAIN and AH_TUNE_SURE_Z standard errors. */
  double gain = ah_tune_lg(t, t->def) - ah_tune_lg(t, b);
  double se = sqrt(pow(ah_tune_se(t, b), 2) + pow(ah_tune_se(t, t->def), 2));
  if (t->probes[b].n >= AH_TUNE_MOVE_N && t->probes[t->def].n >= AH_TUNE_MOVE_N &&
      gain > log(1.0 + AH_TUNE_BIG_GAIN) && gain > AH_TUNE_SURE_Z * se) {
    ah_tune_finish(t, b, b, AH_TUNE_CONVERGED);
    return;
  }
  /* Warm, the best was not picked out of a whole search's probes but from a few points a neighbour
   * named: less selection luck to undo, so a smaller clear gain is pinned as it is. So it is where
   * the chunk is searched too, where fresh samples did not overturn such a gain (sim/: 40 -> 39
   * calls, p5 unchanged, no key slower than the default; docs/tuner.md "Round four"), and after
   * designed batches (bt_lead set), whose leader was picked from a few designed points. */
  if ((t->nhints > 0 || t->nsearch == 2 || t->bt_lead >= 0) && t->probes[b].n >= AH_TUNE_MOVE_N &&
      t->probes[t->def].n >= AH_TUNE_MOVE_N && gain > log(1.0 + AH_TUNE_WARM_SURE_GAIN) &&
      gain > AH_TUNE_WARM_SURE_Z * se) {
    ah_tune_finish(t, b, b, AH_TUNE_CONVERGED);
    return;
  }
  if (t->nprobes == t->capprobes) {
    int cap = 2 * t->capprobes;
    ah_probe_t *np = realloc(t->probes, (size_t)cap * sizeof(*np));
    if (!np) {
      ah_log(AH_LOG_ERROR, "tuner: out of memory confirming a winner; keeping NCCL's default");
      ah_tune_finish(t, t->def, t->def, AH_TUNE_DEFAULT);
      return;
    }
    t->probes = np;
    t->capprobes = cap;
  }
  ah_probe_t *pr = &t->probes[t->nprobes];
  *pr = t->probes[b];
  pr->n = pr->committed = 0;
  pr->confirm = 1;
  t->confirm_probe = t->nprobes++;
  /* With the chunk searched too, 3 fresh samples: the winner there is held to 2 standard errors
   * and may get 3 more while the gain is plausible (sim/: 41 -> 40 calls, no key slower); so is
   * a winner of the designed batches (ah_tune_eval_batch). */
  int dn = t->probes[t->def].n,
      cn = t->nsearch == 2 || t->bt_lead >= 0 ? AH_TUNE_CHUNK_CONFIRM_N : AH_TUNE_CONFIRM_N;
  ah_tune_want(t, t->confirm_probe, cn);
  ah_tune_want(t, t->def, dn > cn ? dn : cn);
}

static void ah_tune_eval_confirm(ah_tune_t *t) {
  int c = t->confirm_probe, d = t->def;
  double gain = ah_tune_lg(t, d) - ah_tune_lg(t, c);
  double se = sqrt(pow(ah_tune_se(t, c), 2) + pow(ah_tune_se(t, d), 2));
  double floor = log(1.0 + t->prm.noise_floor);
  /* With the chunk searched too, the winner is held to fewer standard errors: its final point
   * came from more probes near the optimum (the response surface), where 3 standard errors of 12
   * fresh samples kept NCCL's default over points 3-5% faster (docs/tuner.md). So is a winner of
   * the designed batches: it faces the default right after a few rounds, without the descent's
   * many races, and 3 standard errors kept the default over points 3-6% faster there (sim/ 2.28:
   * p5 0.9694 -> 0.9726, 27 -> 25 calls, no key slower). */
  double z = t->nsearch == 2 || t->bt_lead >= 0 ? AH_TUNE_CONFIRM_Z_CHUNK : AH_TUNE_CONFIRM_Z;
  if (gain > floor && gain > z * se) {
    ah_tune_finish(t, c, t->best, AH_TUNE_CONVERGED);
    return;
  }
  /* Undecided but plausible: more samples of both, within the confirmation cap. */
  if (gain > 0.5 * floor && t->probes[c].n < AH_TUNE_CONFIRM_MAXN) {
    t->nwants = 0;
    ah_tune_want(t, c, t->probes[c].n + 3);
    int dn = t->probes[d].n;
    ah_tune_want(t, d, dn > t->probes[c].n + 3 ? dn : t->probes[c].n + 3);
    return;
  }
  ah_tune_finish(t, d, d, AH_TUNE_CONVERGED);
}

/* ---- descent ---- */

/* Index of the value nearest (in ratio) to values[i] * r^dir, at least one index away, within the
 * window [lo, hi]; -1 past its ends. */
static int ah_tune_neighbour(const ah_dim_t *dim, int lo, int hi, int i, int dir, int level) {
  double r = pow(2.0, level >= 0 ? 1.0 / (double)(1 << level) : (double)(1 << -level));
  double v = (double)dim->values[i];
  int j = i;
  if (v > 0) {
    double target = dir > 0 ? v * r : v / r, bestd = INFINITY;
    for (int k = lo; k <= hi; k++) {
      if (dim->values[k] <= 0) continue;
      double dd = fabs(log((double)dim->values[k] / target));
      if (dd < bestd) {
        bestd = dd;
        j = k;
      }
    }
  }
  if (dir > 0 && j <= i) j = i + 1;
  if (dir < 0 && j >= i) j = i - 1;
  return j >= lo && j <= hi ? j : -1;
}

/* ah_tune_neighbour along dimension d within the window of probe c's subspace. */
static int ah_tune_step_to(const ah_tune_t *t, int c, int d, int dir, int level) {
  int lo, hi;
  ah_tune_window(t, t->probes[c].sub, d, &lo, &hi);
  return ah_tune_neighbour(&t->space.dims[d], lo, hi, t->probes[c].pos[d], dir, level);
}

/* pos, a point of subspace sub whose channel index moved from that of `from`, with the chunk the
 * move carries along: the chunk nearest from's x (n0/n1)^AH_TUNE_COUPLE in sub's window (ties to
 * the smaller). Note that channel and chunk optima are coupled (a step moves channels x chunk
 * bytes: fewer channels want a larger chunk), so a channel move that kept the chunk would measure
 * each channel count at the wrong chunk and coordinate descent would stop on the ridge
 * (docs/tuner.md). Without a chunk dimension, or from a value of 0 (NCCL's own), pos is left as
 * it is. */
static void ah_tune_couple(const ah_tune_t *t, int sub, const int *from, int *pos) {
  if (t->space.ndims <= AH_DIM_CHUNK || t->space.dims[AH_DIM_CHUNK].nvalues < 2) return;
  const ah_dim_t *ch = &t->space.dims[AH_DIM_NCHANNELS], *ck = &t->space.dims[AH_DIM_CHUNK];
  double n0 = (double)ch->values[from[AH_DIM_NCHANNELS]], n1 = (double)ch->values[pos[AH_DIM_NCHANNELS]];
  double c0 = (double)ck->values[from[AH_DIM_CHUNK]];
  if (n0 <= 0 || n1 <= 0 || c0 <= 0 || n0 == n1) return;
  double want = c0 * pow(n0 / n1, AH_TUNE_COUPLE), bestd = INFINITY;
  int lo, hi, at = from[AH_DIM_CHUNK];
  ah_tune_window(t, sub, AH_DIM_CHUNK, &lo, &hi);
  for (int k = lo; k <= hi; k++) {
    double dd = ck->values[k] > 0 ? fabs(log((double)ck->values[k] / want)) : INFINITY;
    if (dd < bestd - 1e-9) { /* a tie (x2 channels: x1.41 either way) keeps the smaller chunk */
      bestd = dd;
      at = k;
    }
  }
  pos[AH_DIM_CHUNK] = at;
}

/* Proposes one unmeasured point: probe c0 moved to value index j along dimension d, as the only
 * candidate. Returns 1 when that point was new and is now wanted, 0 otherwise (already measured,
 * the centre itself, or out of memory). */
static int ah_tune_probe_single(ah_tune_t *t, int c0, int d, int j) {
  int pos[AH_MAX_DIMS];
  memcpy(pos, t->probes[c0].pos, sizeof(pos));
  pos[d] = j;
  if (d == AH_DIM_NCHANNELS) ah_tune_couple(t, t->probes[c0].sub, t->probes[c0].pos, pos);
  ah_config_t c;
  ah_tune_make_cfg(t, t->probes[c0].sub, pos, &c);
  int p = ah_tune_probe_get(t, t->probes[c0].sub, pos, &c);
  if (p < 0 || p == c0 || t->probes[p].n != 0) return 0;
  t->nwants = 0;
  t->cand[0] = p;
  t->ncand = 1;
  ah_tune_want(t, p, t->prm.samples_per_probe);
  return 1;
}


static void ah_tune_next_subspace(ah_tune_t *t);
static void ah_tune_pick_subspace(ah_tune_t *t);

static void ah_tune_plan_step(ah_tune_t *t);
static int ah_tune_fit_step(ah_tune_t *t);

/* The descent along axis dim_i starts afresh at step level `level`: no direction, move, jump,
 * stretch or plateau walk yet. */
static void ah_tune_axis_begin(ah_tune_t *t, int level) {
  t->level = level;
  t->dir = 0;
  t->moved = 0;
  t->jumped = 0;
  t->stretched = 0;
  t->walk_ref = -1;
  t->walked = 0;
}

/* Where the descent of a subspace stops with the chunk searched too, the fastest of its probes
 * measured faster than the centre on at least AH_TUNE_MOVE_N samples of both becomes the centre
 * (once per subspace), before the model step. Note that the descent's moves need significance,
 * and the centre was kept *because* it measured fast, while a neighbour was named before it was
 * measured: the model step's own rule (merely faster on AH_TUNE_MOVE_N samples of both). Where
 * channels x chunk is what counts (a ridge), coordinate descent stops in a corner whose diagonal
 * neighbour, a channel step with the chunk carried along, measured a few percent faster without
 * significance (tests/tune test_coupled_ridge: 3 of 60 seeds pinned there at 0.926 before). */
static void ah_tune_look_back(ah_tune_t *t) {
  int c0 = t->center, f = -1;
  if (t->nsearch != 2 || t->looked_back || c0 < 0 || t->probes[c0].n < AH_TUNE_MOVE_N) return;
  for (int i = 0; i < t->nprobes; i++) {
    const ah_probe_t *pr = &t->probes[i];
    if (i == c0 || pr->epoch != t->epoch || pr->confirm || pr->sub != t->probes[c0].sub ||
        pr->n < AH_TUNE_MOVE_N || ah_tune_lg(t, i) >= ah_tune_lg(t, c0))
      continue;
    if (f < 0 || ah_tune_lg(t, i) < ah_tune_lg(t, f)) f = i;
  }
  t->looked_back = 1;
  if (f < 0) return;
  if (ah_log_level() >= AH_LOG_DEBUG) {
    char b[96];
    ah_log(AH_LOG_DEBUG, "tuner: descent stopped; faster on %d samples: %s (%.2f us)", t->probes[f].n,
           ah_config_format(&t->probes[f].cfg, b, sizeof(b)), exp(ah_tune_lg(t, f)));
  }
  t->center = f;
}

static void ah_tune_dim_done(ah_tune_t *t) {
  int d = t->searchable[t->dim_i];
  t->lv_start[d] = AH_TUNE_MAX_LEVEL;
  t->quiet = t->moved ? 1 : t->quiet + 1;
  if (t->quiet >= t->nsearch) { /* a full round of axes without a move: this subspace is done */
    ah_tune_look_back(t);
    if (!ah_tune_fit_step(t)) ah_tune_next_subspace(t);
    return;
  }
  t->dim_i = (t->dim_i + 1) % t->nsearch;
  ah_tune_axis_begin(t, t->lv_start[t->searchable[t->dim_i]]);
  ah_tune_plan_step(t);
}

static void ah_tune_step_failed(ah_tune_t *t) {
  t->level++;
  t->dir = 0;
  if (t->level > AH_TUNE_MAX_LEVEL) {
    ah_tune_dim_done(t);
    return;
  }
  ah_tune_plan_step(t);
}

static void ah_tune_plan_step(ah_tune_t *t) {
  t->nwants = 0;
  t->ncand = 0;
  if (t->epoch_calls >= t->prm.budget_calls - ah_tune_reserve(t)) {
    ah_tune_start_confirm(t); /* keep enough budget to confirm the winner */
    return;
  }
  /* copies, not a pointer into t->probes: ah_tune_probe_get may move the array */
  int sub = t->probes[t->center].sub, cpos[AH_MAX_DIMS];
  memcpy(cpos, t->probes[t->center].pos, sizeof(cpos));
  int d = t->searchable[t->dim_i];
  for (int dir = -1; dir <= 1; dir += 2) {
    if (t->dir != 0 && dir != t->dir) continue;
    int j = ah_tune_step_to(t, t->center, d, dir, t->level);
    if (j < 0) continue;
    int pos[AH_MAX_DIMS];
    memcpy(pos, cpos, sizeof(pos));
    pos[d] = j;
    if (d == AH_DIM_NCHANNELS) ah_tune_couple(t, sub, cpos, pos);
    ah_config_t c;
    ah_tune_make_cfg(t, sub, pos, &c);
    int p = ah_tune_probe_get(t, sub, pos, &c);
    if (p < 0 || p == t->center) continue;
    t->cand[t->ncand++] = p;
    ah_tune_want(t, p, t->prm.samples_per_probe);
  }
  if (t->ncand == 0) ah_tune_step_failed(t);
}

/* 1 when probe p (fewer channels) is as fast as q within noise: slower by at most twice the noise
 * floor on two samples each, or, on at least n samples of both, by at most AH_TUNE_FLAT_Z standard
 * errors of the difference. Note that this is loose on purpose (noise must not stop a walk on a
 * flat stretch); ah_tune_walk_settle() takes back what it lets the walk drift. */
static int ah_tune_flat(const ah_tune_t *t, int p, int q, int n) {
  double loss = ah_tune_lg(t, p) - ah_tune_lg(t, q);
  if (t->probes[p].n < 2 || t->probes[q].n < 2) return 0;
  double tol = log(1.0 + t->prm.noise_floor);
  if (loss <= 2 * tol) return 1;
  if (t->probes[p].n < n || t->probes[q].n < n) return 0;
  double se = sqrt(pow(ah_tune_se(t, p), 2) + pow(ah_tune_se(t, q), 2));
  return loss <= AH_TUNE_FLAT_Z * se;
}

/* Where a plateau walk stops, the refinement starts from its point with the fewest resources
 * among those within the noise floor of its fastest. Note that the walk itself accepts a point
 * up to AH_TUNE_FLAT_Z standard errors slower (so noise cannot stop it on a flat stretch), which
 * on a gentle slope can carry it a few percent past the plateau's edge: this takes that back. */
static void ah_tune_walk_settle(ah_tune_t *t) {
  if (t->walked == 0) return;
  int c0 = t->center;
  double lref = ah_tune_lg(t, c0), floor = log(1.0 + t->prm.noise_floor);
  for (int i = 0; i < t->walked; i++)
    if (ah_tune_lg(t, t->walk_pts[i]) < lref) lref = ah_tune_lg(t, t->walk_pts[i]);
  if (ah_tune_lg(t, c0) <= lref + floor) return;
  for (int i = t->walked - 1; i >= 0; i--) { /* the walk's points, fewest resources first */
    int q = t->walk_pts[i];
    if (ah_tune_lg(t, q) <= lref + floor) {
      if (ah_log_level() >= AH_LOG_DEBUG) {
        char b[96];
        ah_log(AH_LOG_DEBUG, "tuner: plateau walk settles back on %s (%.2f us, n=%d)",
               ah_config_format(&t->probes[q].cfg, b, sizeof(b)), exp(ah_tune_lg(t, q)), t->probes[q].n);
      }
      t->center = q;
      t->walk_ref = q;
      t->walked = i; /* the points after q are behind the walk now */
      return;
    }
  }
}

static void ah_tune_eval_step(ah_tune_t *t) {
  int c0 = t->center;
  double l0 = ah_tune_lg(t, c0), se0 = ah_tune_se(t, c0);
  double floor = log(1.0 + t->prm.noise_floor);
  int mv = -1;
  double mv_gain = 0;
  int unsure[2], nunsure = 0, hint = 0, flat = -1, refused = 0;
  int d = t->searchable[t->dim_i];
  for (int i = 0; i < t->ncand; i++) {
    int p = t->cand[i];
    double gain = l0 - ah_tune_lg(t, p);
    double se = sqrt(se0 * se0 + pow(ah_tune_se(t, p), 2));
    /* Fewer resources at a time equal within noise (of the centre and of the fastest point of the
     * walk so far, so a gentle climb cannot add up): the plateau walk's next point. */
    if (d == AH_DIM_NCHANNELS && t->probes[p].pos[d] < t->probes[c0].pos[d] && t->nhints == 0 &&
        ah_tune_flat(t, p, c0, AH_TUNE_MOVE_N) &&
        (t->walk_ref < 0 || ah_tune_flat(t, p, t->walk_ref, 2)))
      flat = p;
    else if (d == AH_DIM_NCHANNELS && t->probes[p].pos[d] < t->probes[c0].pos[d] &&
             gain > -AH_TUNE_SEARCH_Z * se)
      refused = 1; /* fewer channels, not equal enough to walk on, not clearly slower either */
    /* The direction a longer step may pay in: a side measured faster (not significantly), or, at
     * the end of an axis, the only side unless it is clearly slower. */
    if (gain > 0 || (t->ncand == 1 && gain > -AH_TUNE_SEARCH_Z * se))
      hint = t->probes[p].pos[t->searchable[t->dim_i]] > t->probes[c0].pos[t->searchable[t->dim_i]] ? 1 : -1;
    /* A small win must hold on AH_TUNE_MOVE_N samples of both before the search moves: a lucky
     * pair of samples would otherwise send the descent the wrong way. */
    int sure = (t->probes[p].n >= AH_TUNE_MOVE_N && t->probes[c0].n >= AH_TUNE_MOVE_N) ||
               gain > log(1.0 + AH_TUNE_BIG_GAIN);
    if (gain > floor && gain > AH_TUNE_SEARCH_Z * se && sure) {
      if (gain > mv_gain) {
        mv = p;
        mv_gain = gain;
      }
    } else if (flat != p &&
               (gain > 0 || (d == AH_DIM_NCHANNELS && t->probes[p].pos[d] < t->probes[c0].pos[d] &&
                             gain > -AH_TUNE_SEARCH_Z * se)) &&
               (t->probes[p].n < AH_TUNE_SEARCH_MAXN || t->probes[c0].n < AH_TUNE_SEARCH_MAXN)) {
      /* measured faster, not yet significantly, or with fewer resources and not clearly slower
       * (a plateau point must hold on as many samples as a small win): race it */
      unsure[nunsure++] = p;
    }
  }
  if (mv < 0 && flat < 0 && nunsure > 0 &&
      t->epoch_calls < t->prm.budget_calls - ah_tune_reserve(t) - 4) {
    t->nwants = 0;
    int need = 0;
    for (int i = 0; i < nunsure; i++) {
      /* a single first sample is raced to 2 first, else 2 more */
      int n = t->probes[unsure[i]].n + (t->probes[unsure[i]].n == 1 ? 1 : 2);
      if (n > AH_TUNE_SEARCH_MAXN) n = AH_TUNE_SEARCH_MAXN;
      ah_tune_want(t, unsure[i], n);
      if (n > need) need = n;
    }
    ah_tune_want(t, c0, need);
    if (t->nwants > 0) return; /* race on: evaluate again when they arrive */
  }
  /* Abandon a later subspace that one step leaves clearly behind the best so far. */
  if (t->first_step && t->best >= 0 && t->probes[t->best].sub != t->probes[c0].sub &&
      t->probes[c0].sub != t->def_sub) {
    double lb = ah_tune_lg(t, t->best), lc = mv >= 0 ? ah_tune_lg(t, mv) : l0;
    if (lc > lb + log(AH_TUNE_STEP_ABANDON)) {
      t->first_step = 0;
      ah_tune_next_subspace(t);
      return;
    }
  }
  t->first_step = 0;
  if (ah_log_level() >= AH_LOG_DEBUG) {
    char b0[96], b1[96];
    ah_log(AH_LOG_DEBUG, "tuner: step dim %d level %d from %s (%.2f us, n=%d): %s", t->dim_i,
           t->level, ah_config_format(&t->probes[c0].cfg, b0, sizeof(b0)), exp(l0), t->probes[c0].n,
           mv >= 0 ? ah_config_format(&t->probes[mv].cfg, b1, sizeof(b1)) : "no move");
  }
  if (mv >= 0) {
    const ah_probe_t *np = &t->probes[mv];
    t->dir = np->pos[d] > t->probes[c0].pos[d] ? 1 : -1;
    t->center = mv;
    t->moved = 1;
    t->walk_ref = -1;
    t->walked = 0;
    /* Steps adapt to the gain: a large one coarsens the step (the optimum is far), a small one
     * refines it (the optimum is near). */
    if (mv_gain > log(1.0 + AH_TUNE_BIG_GAIN) && t->level > 0) t->level--;
    else if (mv_gain < log(1.0 + AH_TUNE_SMALL_GAIN) && t->level < AH_TUNE_MAX_LEVEL) {
      t->level++;
      t->dir = 0; /* a finer step: neither side of the new centre is known yet */
    }
    ah_tune_plan_step(t);
    return;
  }
  /* No significant gain, but fewer resources for the same time: walk on through the plateau in
   * that direction with the same step (equal time on fewer channels frees SMs for the job's own
   * compute, and a plateau may hide a drop beyond it: NCCL runs any channel count above the
   * communicator's own as its own, so the shim's list from there up is flat). The walk ends where
   * the time gets worse beyond noise; the refinement then starts around its last point. */
  if (flat >= 0 && t->walked < t->space.dims[d].nvalues) {
    if (t->walk_ref < 0 || ah_tune_lg(t, c0) < ah_tune_lg(t, t->walk_ref)) t->walk_ref = c0;
    t->walk_pts[t->walked++] = c0;
    t->dir = -1;
    t->center = flat;
    t->moved = 1;
    if (ah_log_level() >= AH_LOG_DEBUG) {
      char b1[96];
      ah_log(AH_LOG_DEBUG, "tuner: plateau walk to %s (%.2f us, n=%d)",
             ah_config_format(&t->probes[flat].cfg, b1, sizeof(b1)), exp(ah_tune_lg(t, flat)),
             t->probes[flat].n);
    }
    ah_tune_plan_step(t);
    return;
  }
  /* A plateau walk stopped on a point not clearly slower: one look a step further (x4) before it
   * ends, once per axis. Where the plateau is NCCL's cap, the point the walk refused is still on
   * it (noise made it look slower) and the drop lies beyond it. */
  if (t->walked > 0 && t->dir < 0 && refused && !t->stretched) {
    int j = ah_tune_step_to(t, c0, d, -1, -1);
    t->stretched = 1;
    if (j >= 0) {
      if (ah_tune_probe_single(t, c0, d, j)) return;
    }
  }
  /* No move from the first step of an axis, but one side measured faster (not significantly): the
   * gain may lie a longer step away (few channels, then a steep drop), so probe x4 that way once.
   * Not along the chunk: its time is a smooth bowl (handshakes against fill) whose start the
   * prior puts near the bottom, and the look cost calls without a better p5 (docs/tuner.md). */
  if (t->dir == 0 && t->level == 0 && !t->moved && !t->stretched && hint != 0 && d != AH_DIM_CHUNK) {
    int j = ah_tune_step_to(t, c0, d, hint, -1);
    t->stretched = 1;
    if (j >= 0) {
      if (ah_tune_probe_single(t, c0, d, j)) return;
    }
  }
  /* No move. A line search that stalls on a gentle slope gets one jump to the end of the axis it
   * was heading for (few channels is often best for small messages, and a 2% step is within
   * noise where the end is 6% better). Otherwise refine the step around the centre. A plateau walk
   * needs no jump: it already went on through equal times and stopped where the time got worse. */
  if (t->dir != 0 && !t->jumped && t->walk_ref < 0) {
    int lo, hi;
    ah_tune_window(t, t->probes[c0].sub, d, &lo, &hi);
    int i = t->probes[c0].pos[d], b = t->dir < 0 ? lo : hi;
    t->jumped = 1;
    if (abs(b - i) >= 2) {
      if (ah_tune_probe_single(t, c0, d, b)) return;
    }
  }
  ah_tune_walk_settle(t);
  ah_tune_step_failed(t);
}

/* ---- the response-surface step ---- */

/* Index of the value of dim nearest (in ratio) to v > 0. */
static int ah_tune_value_pos(const ah_dim_t *dim, int64_t v);

/* Wants the point of subspace s at nch channels (any count: the shim's list is only the descent's
 * steps) and chunk index ck as the response surface's next probe, with the centre to compare it
 * with. Returns 1 when that point is new and wanted, 0 otherwise (measured already, the centre,
 * or out of memory). */
static int ah_tune_fit_propose(ah_tune_t *t, int s, int64_t nch, int ck, const char *why) {
  int pos[AH_MAX_DIMS];
  memcpy(pos, t->probes[t->center].pos, sizeof(pos));
  pos[AH_DIM_CHUNK] = ck;
  pos[AH_DIM_NCHANNELS] = ah_tune_value_pos(&t->space.dims[AH_DIM_NCHANNELS], nch); /* nearest listed */
  ah_config_t c;
  ah_tune_make_cfg(t, s, pos, &c);
  c.res[AH_DIM_NCHANNELS] = nch;
  int p = ah_tune_probe_get(t, s, pos, &c);
  if (p < 0 || p == t->center || t->probes[p].n != 0) return 0;
  if (ah_log_level() >= AH_LOG_DEBUG) {
    char b[96];
    ah_log(AH_LOG_DEBUG, "tuner: %s predicts %s", why, ah_config_format(&c, b, sizeof(b)));
  }
  t->fit_steps++;
  t->fit_p = p;
  t->nwants = 0;
  t->cand[0] = p;
  t->ncand = 1;
  ah_tune_want(t, p, t->prm.samples_per_probe);
  ah_tune_want(t, t->center, t->prm.samples_per_probe);
  return 1;
}

/* The chunk index of subspace s nearest chunk x (n0/n1)^AH_TUNE_COUPLE: what a move from n0 to n1
 * channels carries along (see ah_tune_couple). */
static int ah_tune_coupled_chunk(const ah_tune_t *t, int s, int64_t chunk, int64_t n0, int64_t n1, int at) {
  const ah_dim_t *ck = &t->space.dims[AH_DIM_CHUNK];
  double want = (double)chunk * pow((double)n0 / (double)n1, AH_TUNE_COUPLE), bestd = INFINITY;
  int lo, hi;
  ah_tune_window(t, s, AH_DIM_CHUNK, &lo, &hi);
  for (int j = lo; j <= hi; j++) {
    double dd = ck->values[j] > 0 ? fabs(log((double)ck->values[j] / want)) : INFINITY;
    if (dd < bestd - 1e-9) {
      bestd = dd;
      at = j;
    }
  }
  return at;
}

/* Where the descent of a subspace stopped (channels and chunk both searched, the centre at least
 * as fast as the best so far), probes the point a model of the measured probes predicts faster,
 * at most AH_TUNE_FIT_STEPS times per subspace. Two models, both of generic shape, neither of any
 * NCCL's or simulator's formula:
 *   - the bandwidth knee: the measured channel count next below the centre's, its time scaled as
 *     1/channels (a bandwidth share), meets the centre's time at ah_fit_knee's count; when that
 *     lies strictly between the two, it is probed (the chunk coupled). Note that a time curve that
 *     falls as 1/channels and then stops (a link saturates) has its bottom at the knee, where a
 *     parabola through x2 / x1.41 steps sees a symmetric bowl around the list value next above it
 *     (sim/: 12 where 9 is 4.5% faster);
 *   - the response surface: a quadratic in (log2 channels, log2 chunk) fitted to the subspace's
 *     probes within AH_TUNE_FIT_REACH of the centre on each axis (robust log times weighted by
 *     samples, Huber-clipped at 2 sigma), its lowest point among every channel count and the
 *     window's chunks inside the fitted points' box, when it predicts a gain beyond the noise
 *     floor.
 * Returns 1 when a probe is wanted (ah_tune_eval_fit judges it), 0 otherwise. */
static int ah_tune_fit_step(ah_tune_t *t) {
  if (t->nsearch != 2 || t->space.ndims <= AH_DIM_CHUNK || t->center < 0 || t->fit_steps >= AH_TUNE_FIT_STEPS ||
      t->epoch_calls >= t->prm.budget_calls - ah_tune_reserve(t) - 4)
    return 0;
  const ah_probe_t *cp = &t->probes[t->center];
  int s = cp->sub;
  if (s < 0 || cp->cfg.res[AH_DIM_NCHANNELS] <= 0 || cp->cfg.res[AH_DIM_CHUNK] <= 0) return 0;
  /* Only a subspace that leads: a fit step in one already behind costs calls for nothing. */
  if (t->best >= 0 && t->best != t->center && ah_tune_lg(t, t->center) > ah_tune_lg(t, t->best)) return 0;
  int64_t ncen = cp->cfg.res[AH_DIM_NCHANNELS];
  double xc = log2((double)ncen), yc = log2((double)cp->cfg.res[AH_DIM_CHUNK]);
  ah_fit_point_t pt[AH_FIT_MAX_POINTS];
  int n = 0, l = -1, h = -1;
  double xlo = xc, xhi = xc, ylo = yc, yhi = yc;
  for (int i = 0; i < t->nprobes && n < AH_FIT_MAX_POINTS; i++) {
    const ah_probe_t *pr = &t->probes[i];
    int64_t ch = pr->cfg.res[AH_DIM_NCHANNELS];
    if (pr->epoch != t->epoch || pr->confirm || pr->sub != s || pr->n == 0 || ch <= 0 || pr->cfg.res[AH_DIM_CHUNK] <= 0)
      continue;
    /* the knee's points: the most channels below the centre's and the fewest above, the fastest
     * of each count */
    if (ch < ncen && (l < 0 || ch > t->probes[l].cfg.res[AH_DIM_NCHANNELS] ||
                      (ch == t->probes[l].cfg.res[AH_DIM_NCHANNELS] && ah_tune_lg(t, i) < ah_tune_lg(t, l))))
      l = i;
    if (ch > ncen && (h < 0 || ch < t->probes[h].cfg.res[AH_DIM_NCHANNELS] ||
                      (ch == t->probes[h].cfg.res[AH_DIM_NCHANNELS] && ah_tune_lg(t, i) < ah_tune_lg(t, h))))
      h = i;
    double x = log2((double)ch), y = log2((double)pr->cfg.res[AH_DIM_CHUNK]);
    if (fabs(x - xc) > AH_TUNE_FIT_REACH + 1e-9 || fabs(y - yc) > AH_TUNE_FIT_REACH + 1e-9) continue;
    pt[n++] = (ah_fit_point_t){x, y, ah_tune_lg(t, i), (double)pr->n};
    if (x < xlo) xlo = x;
    if (x > xhi) xhi = x;
    if (y < ylo) ylo = y;
    if (y > yhi) yhi = y;
  }
  if (l >= 0) {
    int64_t nl = t->probes[l].cfg.res[AH_DIM_NCHANNELS];
    double sh = h >= 0 ? (ah_tune_lg(t, h) - ah_tune_lg(t, t->center)) /
                             log((double)t->probes[h].cfg.res[AH_DIM_NCHANNELS] / (double)ncen)
                       : 0;
    double k = ah_fit_knee((double)nl, ah_tune_lg(t, l), (double)ncen, ah_tune_lg(t, t->center), sh);
    int64_t nk = (int64_t)floor(k + 0.5);
    if (k > 0 && nk > nl && nk < ncen &&
        ah_tune_fit_propose(t, s, nk, ah_tune_coupled_chunk(t, s, cp->cfg.res[AH_DIM_CHUNK], ncen, nk, cp->pos[AH_DIM_CHUNK]),
                            "bandwidth knee"))
      return 1;
  }
  double coef[AH_FIT_TERMS];
  if (ah_fit_quad(pt, n, 2.0 * t->sigma, coef) != 0) return 0;
  /* Candidates: every channel count and every chunk of the window within the fitted points' box
   * (no extrapolation beyond what was measured). */
  double xs[AH_MAX_DIM_VALUES], ys[AH_MAX_DIM_VALUES];
  int64_t nv[AH_MAX_DIM_VALUES];
  int ks[AH_MAX_DIM_VALUES], nx = 0, ny = 0, lo, hi, ix, iy;
  for (int64_t v = (int64_t)ceil(exp2(xlo) - 1e-9); v <= (int64_t)floor(exp2(xhi) + 1e-9) && nx < AH_MAX_DIM_VALUES; v++) {
    nv[nx] = v;
    xs[nx++] = log2((double)v);
  }
  ah_tune_window(t, s, AH_DIM_CHUNK, &lo, &hi);
  for (int j = lo; j <= hi; j++) {
    double y = t->space.dims[AH_DIM_CHUNK].values[j] > 0 ? log2((double)t->space.dims[AH_DIM_CHUNK].values[j]) : -1;
    if (y < ylo - 1e-9 || y > yhi + 1e-9) continue;
    ks[ny] = j;
    ys[ny++] = y;
  }
  if (ah_fit_argmin(coef, xs, nx, ys, ny, &ix, &iy) != 0) return 0;
  if (ah_fit_eval(coef, xc, yc) - ah_fit_eval(coef, xs[ix], ys[iy]) <= log(1.0 + t->prm.noise_floor)) return 0;
  return ah_tune_fit_propose(t, s, nv[ix], ks[iy], "response surface");
}

/* A model's point is in: it becomes the centre when faster beyond the noise floor and
 * AH_TUNE_SEARCH_Z standard errors on AH_TUNE_MOVE_N samples of both (or by a big gain), or when
 * merely faster on AH_TUNE_MOVE_N samples of both. Note that the second rule is looser than a
 * descent step's on purpose: the point was named by a model of every probe, not picked because it
 * measured fast, while the centre was (its samples carry selection luck); requiring significance
 * kept 12 channels over a 9 that the knee named and that is 4% faster. A point measured faster
 * but on fewer samples is raced; then the models run again with it (up to AH_TUNE_FIT_STEPS), or
 * the subspace is done. */
static void ah_tune_eval_fit(ah_tune_t *t) {
  int p = t->fit_p, c0 = t->center;
  double gain = ah_tune_lg(t, c0) - ah_tune_lg(t, p);
  double se = sqrt(pow(ah_tune_se(t, c0), 2) + pow(ah_tune_se(t, p), 2));
  int enough = t->probes[p].n >= AH_TUNE_MOVE_N && t->probes[c0].n >= AH_TUNE_MOVE_N;
  if ((gain > log(1.0 + t->prm.noise_floor) && gain > AH_TUNE_SEARCH_Z * se &&
       (enough || gain > log(1.0 + AH_TUNE_BIG_GAIN))) ||
      (enough && gain > 0)) {
    t->center = p;
  } else if (gain > 0 && !enough && t->epoch_calls < t->prm.budget_calls - ah_tune_reserve(t) - 4) {
    t->nwants = 0;
    ah_tune_want(t, p, AH_TUNE_MOVE_N);
    ah_tune_want(t, c0, AH_TUNE_MOVE_N);
    if (t->nwants > 0) return;
  }
  t->fit_p = -1;
  if (!ah_tune_fit_step(t)) ah_tune_next_subspace(t);
}

/* ---- subspaces ---- */

static int ah_tune_start_batch(ah_tune_t *t);
static void ah_tune_eval_batch(ah_tune_t *t);

static void ah_tune_start_subspace(ah_tune_t *t, int center) {
  t->phase = AH_PH_DESCEND;
  t->center = center;
  t->dim_i = 0;
  t->quiet = 0;
  ah_tune_axis_begin(t, 0);
  t->first_step = 1;
  t->fit_p = -1;
  t->fit_steps = 0;
  t->looked_back = 0;
  /* Warm, the start is a neighbour's optimum, near this key's: the finer step first. */
  int lv = t->nhints > 0 ? AH_TUNE_WARM_LEVEL : 0;
  t->level = lv;
  for (int d = 0; d < AH_MAX_DIMS; d++) t->lv_start[d] = lv;
  if (t->nsearch == 0) {
    ah_tune_next_subspace(t);
    return;
  }
  ah_tune_plan_step(t);
}

/* 1 when probe p should replace q as the best so far: faster, or within the noise floor and with
 * fewer channels (the SMs a channel takes are the job's compute's loss). Note that NCCL's default
 * counts as having more: its resources are NCCL's own, unknown here, and a searched point as fast
 * gives the later subspaces resources to be re-screened at. The confirmation still compares the
 * best with the default, so a tie never replaces NCCL's choice. */
static int ah_tune_prefer(const ah_tune_t *t, int p, int q) {
  double lp = ah_tune_lg(t, p), lq = ah_tune_lg(t, q);
  if (lp < lq) return 1;
  if (lp > lq + log(1.0 + t->prm.noise_floor)) return 0;
  if (t->probes[q].sub < 0) return t->probes[p].sub >= 0;
  if (t->probes[p].sub < 0) return 0;
  return t->space.ndims > AH_DIM_NCHANNELS &&
         t->probes[p].cfg.res[AH_DIM_NCHANNELS] < t->probes[q].cfg.res[AH_DIM_NCHANNELS];
}

/* The current subspace is done (converged or abandoned): its centre competes for best, and the
 * next subspace in screening order is descended unless its screen already put it clearly behind. */
static void ah_tune_next_subspace(ah_tune_t *t) {
  if (t->center >= 0 && (t->best < 0 || ah_tune_prefer(t, t->center, t->best))) t->best = t->center;
  t->center = -1;
  t->cur++;
  ah_tune_pick_subspace(t);
}

/* Same resources in another subspace: 1 when the best point's searchable values differ from p's. */
static int ah_tune_res_differ(const ah_tune_t *t, int p, int q) {
  for (int i = 0; i < t->nsearch; i++)
    if (t->probes[p].pos[t->searchable[i]] != t->probes[q].pos[t->searchable[i]]) return 1;
  return 0;
}

/* 1 when NCCL's own estimate puts subspace s more than AH_TUNE_PRIOR_BEHIND behind its best
 * estimate. Note that such a subspace is re-screened and descended on tighter ratios: NCCL's
 * model and the measurement are two independent signs that it is behind. */
static int ah_tune_prior_behind(const ah_tune_t *t, int s) {
  double emin = INFINITY;
  for (int i = 0; i < t->space.nsub; i++)
    if (t->space.est_us[i] > 0 && t->space.est_us[i] < emin) emin = t->space.est_us[i];
  return t->prm.prior_ratio > 0 && t->space.est_us[s] > 0 && t->space.est_us[s] > AH_TUNE_PRIOR_BEHIND * emin;
}

/* How far behind the best a subspace may measure and still be descended. */
static double ah_tune_abandon_ratio(const ah_tune_t *t, int s) {
  double r = t->prm.abandon_ratio;
  /* With the chunk searched too, each descent costs more calls and ends in the model step: a
   * subspace screened 8% behind is dropped (sim/: p5 0.9736 -> 0.9746, 51 -> 49 calls). */
  if (t->nsearch == 2 && r > AH_TUNE_CHUNK_ABANDON) r = AH_TUNE_CHUNK_ABANDON;
  if (t->nhints > 0 && r > AH_TUNE_WARM_ABANDON) return AH_TUNE_WARM_ABANDON;
  return ah_tune_prior_behind(t, s) && r > AH_TUNE_PRIOR_ABANDON ? AH_TUNE_PRIOR_ABANDON : r;
}

/* pos (a point of the whole space) as a point of subspace s: each index clamped into s's window;
 * where the start leaves a dimension to NCCL (value 0) and s has a window there, with `start`
 * the window's middle instead. */
static void ah_tune_sub_pos(const ah_tune_t *t, int s, const int *pos, int start, int *out) {
  for (int d = 0; d < AH_MAX_DIMS; d++) out[d] = pos[d];
  for (int d = 0; d < t->space.ndims; d++) {
    if (t->space.dims[d].nvalues <= 0) continue;
    int lo, hi;
    ah_tune_window(t, s, d, &lo, &hi);
    if (start && t->space.start.res[d] <= 0 && s >= 0 && t->space.win[s][d].n > 0)
      out[d] = t->space.win[s][d].at;
    if (out[d] < lo) out[d] = lo;
    if (out[d] > hi) out[d] = hi;
  }
}

/* Starts the descent of the next subspace (in screening order) that is not clearly behind, or the
 * confirmation when none is left. Note that a subspace screened at NCCL's resources is screened
 * again at the best point's resources before it is judged: interference and message size move
 * every subspace's best channel count the same way, so that is where it is likely good. */
static void ah_tune_pick_subspace(ah_tune_t *t) {
  for (; t->cur < t->norder; t->cur++) {
    int s = t->order[t->cur], p = t->sub_start[s];
    if (p < 0 || t->probes[p].n == 0) continue;
    double lb = ah_tune_lg(t, t->best);
    if (!t->rescreened[s] && t->probes[t->best].sub >= 0 && ah_tune_res_differ(t, p, t->best) &&
        ah_tune_lg(t, p) <= lb + log(ah_tune_prior_behind(t, s) ? AH_TUNE_PRIOR_RESCREEN
                                     : t->nhints > 0           ? AH_TUNE_WARM_RESCREEN
                                                               : AH_TUNE_RESCREEN_RATIO)) {
      t->rescreened[s] = 1;
      ah_config_t c;
      int rpos[AH_MAX_DIMS];
      ah_tune_sub_pos(t, s, t->probes[t->best].pos, 0, rpos);
      ah_tune_make_cfg(t, s, rpos, &c);
      int q = ah_tune_probe_get(t, s, rpos, &c);
      if (q >= 0) {
        t->resc = q;
        if (t->probes[q].n < t->prm.samples_per_probe) {
          t->phase = AH_PH_RESCREEN;
          t->nwants = 0;
          ah_tune_want(t, q, t->prm.samples_per_probe);
          return; /* ah_tune_eval_rescreen() resumes here */
        }
        if (ah_tune_lg(t, q) < ah_tune_lg(t, p)) t->sub_start[s] = p = q;
      }
    }
    /* NCCL's own subspace is always descended cold; warm, only while NCCL's default is in the
     * lead (the neighbours' winners are the evidence, and the default itself still faces the
     * winner in the confirmation). */
    int own = s == t->def_sub &&
              (t->nhints == 0 || ah_tune_lg(t, t->def) <= lb + log(AH_TUNE_WARM_ABANDON));
    if (!own && ah_tune_lg(t, p) > lb + log(ah_tune_abandon_ratio(t, s))) continue;
    ah_tune_start_subspace(t, p);
    return;
  }
  ah_tune_start_confirm(t);
}

static void ah_tune_eval_rescreen(ah_tune_t *t) {
  int s = t->order[t->cur], q = t->resc;
  if (ah_tune_lg(t, q) < ah_tune_lg(t, t->sub_start[s])) t->sub_start[s] = q;
  t->phase = AH_PH_DESCEND;
  ah_tune_pick_subspace(t);
}

/* Value indices of the start's resources: exact when legal, nearest (in ratio) otherwise; a value
 * of 0 (NCCL's own choice) starts a dimension in the middle of its list — for channels searched
 * alone the lower of two middle values (12 of the shim's list, not 16: sim/ 2.28 space 40 -> 35
 * calls at p5 0.9703 -> 0.9711), but where the chunk is searched too the upper, the 16 channels the
 * chunk's start is fitted at (12 there: p5 0.9633 -> 0.9575). */
static void ah_tune_start_pos(const ah_tune_t *t, int *pos) {
  for (int d = 0; d < AH_MAX_DIMS; d++) pos[d] = 0;
  for (int d = 0; d < t->space.ndims; d++) {
    const ah_dim_t *dim = &t->space.dims[d];
    if (dim->nvalues <= 0) continue;
    int64_t v = t->space.start.res[d];
    if (v <= 0) {
      pos[d] = d == AH_DIM_NCHANNELS && t->space.ndims == 1 ? (dim->nvalues - 1) / 2 : dim->nvalues / 2;
      continue;
    }
    double bestd = INFINITY;
    for (int k = 0; k < dim->nvalues; k++) {
      double dd = dim->values[k] > 0 ? fabs(log((double)dim->values[k] / (double)v)) : INFINITY;
      if (dd < bestd) {
        bestd = dd;
        pos[d] = k;
      }
    }
  }
}

/* Index of the value of dim nearest (in ratio) to v > 0. */
static int ah_tune_value_pos(const ah_dim_t *dim, int64_t v) {
  int best = 0;
  double bestd = INFINITY;
  for (int k = 0; k < dim->nvalues; k++) {
    double dd = dim->values[k] > 0 ? fabs(log((double)dim->values[k] / (double)v)) : INFINITY;
    if (dd < bestd) {
      bestd = dd;
      best = k;
    }
  }
  return best;
}

/* Moves spos, a position in subspace s, onto hint h's resources where the hint names one (only the
 * channel count when chan_only), each clamped to s's window. Returns 1 when it moved any. */
static int ah_tune_pos_at_hint(const ah_tune_t *t, int s, int h, int chan_only, int *spos) {
  int any = 0;
  for (int d = 0; d < t->space.ndims && d < t->hints[h].ndims; d++)
    if (t->hints[h].res[d] > 0 && t->space.dims[d].nvalues > 0 && (!chan_only || d == AH_DIM_NCHANNELS)) {
      int lo, hi, v = ah_tune_value_pos(&t->space.dims[d], t->hints[h].res[d]);
      ah_tune_window(t, s, d, &lo, &hi);
      spos[d] = v < lo ? lo : v > hi ? hi : v;
      any = 1;
    }
  return any;
}

/* The hint for subspace s, or -1: the first with resources of its own (a neighbour that kept
 * NCCL's default says which subspace, not which resources), else the first. */
static int ah_tune_hint_of(const ah_tune_t *t, int s) {
  int any = -1;
  for (int h = 0; h < t->nhints; h++)
    if (t->hints[h].algo == t->space.sub[s].algo && t->hints[h].proto == t->space.sub[s].proto) {
      for (int d = 0; d < t->hints[h].ndims && d < AH_MAX_DIMS; d++)
        if (t->hints[h].res[d] > 0) return h;
      if (any < 0) any = h;
    }
  return any;
}

/* ---- the quick warm check ---- */

/* Subspace index of (algo, proto) of cfg, or -1. */
static int ah_tune_sub_of(const ah_tune_t *t, const ah_config_t *cfg) {
  for (int s = 0; s < t->space.nsub; s++)
    if (t->space.sub[s].algo == cfg->algo && t->space.sub[s].proto == cfg->proto) return s;
  return -1;
}

/* Adds probe q to the quick check's points (once). Returns 1 when added. */
static int ah_tune_quick_add(ah_tune_t *t, int q) {
  if (q < 0 || q == t->def || t->nquick >= (int)(sizeof(t->quick_pt) / sizeof(t->quick_pt[0]))) return 0;
  for (int i = 0; i < t->nquick; i++)
    if (t->quick_pt[i] == q) return 0;
  t->quick_pt[t->nquick++] = q;
  return 1;
}

/* Plans the quick warm check when a hint names resources and channels are the only searched
 * resource: the hinted point(s) of the centre's
 * subspace, the centre's channel neighbours (x1.41 each side), one point of a rival subspace (the
 * other neighbour's, or NCCL's best-rated other) and NCCL's default, all wanted at once so the
 * driver commits them back to back and no result lag stalls the key. Returns 1 when planned, 0
 * when it does not apply (no hint with resources, another resource searched, or the check already
 * ran). */
int ah_tune_start_quick(ah_tune_t *t) {
  /* Channels only: where a second resource is searched (NCCL 2.30's chunk) the optima of the two
   * are coupled and a check along channels alone pinned points up to 25% off (sim/: p5 0.9579 ->
   * 0.9474 in the communicator mode); such keys take the warm search. */
  if (t->quick_off || t->nhints == 0 || t->def < 0 || t->nsearch != 1 ||
      t->searchable[0] != AH_DIM_NCHANNELS)
    return 0;
  /* The centre: the hint with resources whose subspace NCCL's cost table rates best; a hint in
   * another subspace (this bin sits between two neighbours that disagree) is the rival subspace. */
  int h0 = -1, ho = -1;
  for (int h = 0; h < t->nhints; h++) {
    int hs = ah_tune_sub_of(t, &t->hints[h]), res = 0;
    for (int d = 0; d < t->hints[h].ndims && d < AH_MAX_DIMS; d++) res |= t->hints[h].res[d] > 0;
    if (hs < 0 || !res) continue;
    if (h0 < 0 || t->space.est_us[hs] < t->space.est_us[ah_tune_sub_of(t, &t->hints[h0])]) h0 = h;
  }
  if (h0 < 0) return 0;
  int s = ah_tune_sub_of(t, &t->hints[h0]);
  for (int h = 0; h < t->nhints && ho < 0; h++) {
    int hs = ah_tune_sub_of(t, &t->hints[h]);
    if (hs >= 0 && hs != s) ho = h;
  }
  t->nquick = 0;
  int pos[AH_MAX_DIMS];
  ah_tune_start_pos(t, pos);
  for (int k = -1; k < t->nhints && t->nquick < 2; k++) { /* the centre's hint, then others in s */
    int h = k < 0 ? h0 : k, spos[AH_MAX_DIMS];
    if (k == h0 || ah_tune_sub_of(t, &t->hints[h]) != s) continue;
    ah_tune_sub_pos(t, s, pos, 1, spos);
    if (!ah_tune_pos_at_hint(t, s, h, 0, spos)) continue;
    ah_config_t c;
    ah_tune_make_cfg(t, s, spos, &c);
    ah_tune_quick_add(t, ah_tune_probe_get(t, s, spos, &c));
  }
  if (t->nquick == 0) return 0;
  t->nwants = 0; /* a running search's plan gives way; its probes stay */
  int hq = t->quick_pt[0];
  ah_tune_want(t, hq, AH_TUNE_QUICK_N);
  ah_tune_want(t, t->def, AH_TUNE_QUICK_N);
  for (int i = 1; i < t->nquick; i++) ah_tune_want(t, t->quick_pt[i], AH_TUNE_QUICK_N);
  if (t->space.ndims > AH_DIM_NCHANNELS && t->space.dims[AH_DIM_NCHANNELS].nvalues >= 2)
    for (int dir = -1; dir <= 1; dir += 2) {
      int j = ah_tune_step_to(t, hq, AH_DIM_NCHANNELS, dir, AH_TUNE_MAX_LEVEL), npos[AH_MAX_DIMS];
      if (j < 0) continue;
      memcpy(npos, t->probes[hq].pos, sizeof(npos));
      npos[AH_DIM_NCHANNELS] = j;
      ah_config_t c;
      ah_tune_make_cfg(t, s, npos, &c);
      int q = ah_tune_probe_get(t, s, npos, &c);
      if (ah_tune_quick_add(t, q)) ah_tune_want(t, q, AH_TUNE_QUICK_SIDE_N);
    }
  /* A hint from one side may come from across a protocol's boundary (a neighbour bin's best
   * subspace is not this one's): the subspace NCCL's cost table rates best among the others (its
   * own choice, unless that is the hint's) is measured at the hint's resources too. */
  t->quick_alt = -1;
  int s2 = ho >= 0 ? ah_tune_sub_of(t, &t->hints[ho]) : t->def_sub != s ? t->def_sub : -1;
  if (s2 < 0) {
    double e2 = INFINITY;
    for (int i = 0; i < t->space.nsub; i++)
      if (i != s && t->space.est_us[i] > 0 && t->space.est_us[i] < e2) {
        e2 = t->space.est_us[i];
        s2 = i;
      }
    double emin = t->space.est_us[s] > 0 ? t->space.est_us[s] : e2;
    if (s2 >= 0 && t->prm.prior_ratio > 0 && e2 > t->prm.prior_ratio * emin) s2 = -1;
  }
  if (s2 >= 0) {
    int apos[AH_MAX_DIMS];
    ah_tune_sub_pos(t, s2, t->probes[hq].pos, 0, apos);
    if (ho >= 0) (void)ah_tune_pos_at_hint(t, s2, ho, 0, apos); /* the other hint's own point */
    ah_config_t c;
    ah_tune_make_cfg(t, s2, apos, &c);
    int q = ah_tune_probe_get(t, s2, apos, &c);
    if (q >= 0 && q != t->def) {
      t->quick_alt = q;
      ah_tune_want(t, q, AH_TUNE_QUICK_SIDE_N);
    }
  }
  t->phase = AH_PH_QUICK;
  t->best = t->quick_c = hq;
  t->quick_moves = 0;
  return 1;
}

/* The quick check's next step once its samples are in. The rival subspace's point measured faster
 * than the centre beyond the noise floor is raced (AH_TUNE_MOVE_N samples each) and, when it holds,
 * becomes the centre once, with its own channel neighbours. A channel neighbour measured faster is
 * raced the same way and, when it holds, becomes the centre, with the next point that way probed
 * (AH_TUNE_QUICK_MOVES at most: the neighbour bin's optimum is near). With nothing faster: the hint
 * is pinned when it beats NCCL's default beyond AH_TUNE_QUICK_Z standard errors and the noise
 * floor; a centre that moved (picked *because* it measured fast) by the same margin only on
 * AH_TUNE_MOVE_N samples of both, its later ones fresh, else through the ordinary confirmation; a
 * centre as fast as the default within noise keeps the default (the neighbour's search found
 * nothing better there either); a plausible gain gets more samples; otherwise the warm search runs,
 * reusing every sample taken here. */
static void ah_tune_eval_quick(ah_tune_t *t) {
  int c = t->quick_c, d = t->def, rival = -1;
  double floor = log(1.0 + t->prm.noise_floor), lc = ah_tune_lg(t, c);
  for (int i = 0; i < t->nquick; i++) {
    int q = t->quick_pt[i];
    if (q != c && t->probes[q].n > 0 && ah_tune_lg(t, q) < lc - floor &&
        (rival < 0 || ah_tune_lg(t, q) < ah_tune_lg(t, rival)))
      rival = q;
  }
  double gain = ah_tune_lg(t, d) - lc;
  double se = sqrt(pow(ah_tune_se(t, c), 2) + pow(ah_tune_se(t, d), 2));
  if (ah_log_level() >= AH_LOG_DEBUG)
    ah_log(AH_LOG_DEBUG, "tuner: quick check: centre %.1f%% ahead of the default (se %.1f%%, n=%d/%d)%s",
           100.0 * gain, 100.0 * se, t->probes[c].n, t->probes[d].n,
           rival >= 0 ? ", a neighbour faster" : "");
  int alt = t->quick_alt;
  if (alt >= 0 && t->probes[alt].n > 0 && ah_tune_lg(t, alt) < lc - floor) {
    /* another subspace measures faster at the same resources: the hint may be from across a
     * boundary. Raced; when it holds, the check moves there (once), else the warm search (which
     * screens the subspaces) decides. */
    if (t->probes[alt].n < AH_TUNE_MOVE_N || t->probes[c].n < AH_TUNE_MOVE_N) {
      t->nwants = 0;
      ah_tune_want(t, alt, AH_TUNE_MOVE_N);
      ah_tune_want(t, c, AH_TUNE_MOVE_N);
      return;
    }
    if (t->quick_moves < AH_TUNE_QUICK_MOVES) { /* it held: the check goes on there, once */
      ah_log(AH_LOG_DEBUG, "tuner: quick check: the rival subspace is faster; it is the centre now");
      t->quick_moves = AH_TUNE_QUICK_MOVES;
      t->quick_alt = -1;
      t->quick_c = alt;
      ah_tune_quick_add(t, alt);
      t->nwants = 0;
      for (int dir = -1; dir <= 1; dir += 2) {
        int j = ah_tune_step_to(t, alt, AH_DIM_NCHANNELS, dir, AH_TUNE_MAX_LEVEL), npos[AH_MAX_DIMS];
        if (j < 0) continue;
        memcpy(npos, t->probes[alt].pos, sizeof(npos));
        npos[AH_DIM_NCHANNELS] = j;
        ah_config_t cf;
        ah_tune_make_cfg(t, t->probes[alt].sub, npos, &cf);
        int q = ah_tune_probe_get(t, t->probes[alt].sub, npos, &cf);
        if (ah_tune_quick_add(t, q)) ah_tune_want(t, q, AH_TUNE_QUICK_SIDE_N);
      }
      return;
    }
    rival = -1;
  } else if (rival >= 0) {
    double g = lc - ah_tune_lg(t, rival);
    double rse = sqrt(pow(ah_tune_se(t, c), 2) + pow(ah_tune_se(t, rival), 2));
    int held = g > AH_TUNE_SEARCH_Z * rse ||
               (t->probes[rival].n >= AH_TUNE_MOVE_N && t->probes[c].n >= AH_TUNE_MOVE_N);
    if (held && t->quick_moves < AH_TUNE_QUICK_MOVES) {
      int dir = t->probes[rival].pos[AH_DIM_NCHANNELS] > t->probes[c].pos[AH_DIM_NCHANNELS] ? 1 : -1;
      ah_log(AH_LOG_DEBUG, "tuner: quick check: a neighbour beat the centre; it is the centre now");
      t->quick_moves++;
      t->quick_c = rival;
      t->nwants = 0;
      int j = ah_tune_step_to(t, rival, AH_DIM_NCHANNELS, dir, AH_TUNE_MAX_LEVEL);
      if (j >= 0) {
        int npos[AH_MAX_DIMS];
        memcpy(npos, t->probes[rival].pos, sizeof(npos));
        npos[AH_DIM_NCHANNELS] = j;
        ah_config_t cf;
        ah_tune_make_cfg(t, t->probes[rival].sub, npos, &cf);
        int q = ah_tune_probe_get(t, t->probes[rival].sub, npos, &cf);
        if (ah_tune_quick_add(t, q)) ah_tune_want(t, q, AH_TUNE_QUICK_SIDE_N);
      }
      return; /* evaluated again when the new point is in (at once when there is none) */
    }
    if (!held) { /* race the two */
      ah_log(AH_LOG_DEBUG, "tuner: quick check: a neighbour measured faster; racing it");
      int n = t->probes[c].n > t->probes[rival].n ? t->probes[c].n : t->probes[rival].n;
      n = n + 2 > AH_TUNE_MOVE_N ? AH_TUNE_MOVE_N : n + 2;
      t->nwants = 0;
      ah_tune_want(t, c, n);
      ah_tune_want(t, rival, n);
      return;
    }
  } else {
    /* The hint, or a centre that moved: that one was picked *because* it measured fast, so it is
     * pinned only on AH_TUNE_MOVE_N samples (the later ones fresh), else confirmed as usual. */
    int moved = c != t->quick_pt[0], n = t->probes[c].n + 2;
    if (gain > floor && gain > AH_TUNE_QUICK_Z * se &&
        (!moved || (t->probes[c].n >= AH_TUNE_MOVE_N && t->probes[d].n >= AH_TUNE_MOVE_N))) {
      t->best = c;
      ah_log(AH_LOG_DEBUG, "tuner: quick check: the centre beats the default; pinned");
      ah_tune_finish(t, c, c, AH_TUNE_CONVERGED);
      return;
    }
    if (gain > 0.5 * floor && n <= AH_TUNE_QUICK_MAXN) { /* plausible: both grow */
      ah_log(AH_LOG_DEBUG, "tuner: quick check: a gain is plausible; more samples");
      t->nwants = 0;
      ah_tune_want(t, c, n);
      ah_tune_want(t, d, t->probes[d].n > n ? t->probes[d].n : n);
      return;
    }
    if (gain <= floor && gain > -AH_TUNE_SEARCH_Z * se) { /* a tie: NCCL's choice stays */
      if (t->probes[c].n >= AH_TUNE_QUICK_TIE_N && t->probes[d].n >= AH_TUNE_QUICK_TIE_N) {
        t->best = c;
        ah_log(AH_LOG_DEBUG, "tuner: quick check: as fast as the default; the default stays");
        ah_tune_finish(t, d, d, AH_TUNE_CONVERGED);
        return;
      }
      t->nwants = 0;
      ah_tune_want(t, c, AH_TUNE_QUICK_TIE_N);
      ah_tune_want(t, d, AH_TUNE_QUICK_TIE_N);
      return;
    }
    if (moved && gain > 0) {
      t->best = c;
      ah_log(AH_LOG_DEBUG, "tuner: quick check: a moved centre ahead; confirming it");
      ah_tune_start_confirm(t);
      return;
    }
  }
  t->quick_off = 1; /* the evidence is not clear: the warm search, from what was measured */
  ah_log(AH_LOG_DEBUG, "tuner: quick check: unclear (%s); the warm search", rival >= 0 ? "moves spent" : "no gain");
  ah_tune_start_screen(t);
}

void ah_tune_start_screen(ah_tune_t *t) {
  t->phase = AH_PH_SCREEN;
  t->nwants = 0;
  t->best = t->winner = t->center = t->confirm_probe = t->bt_lead = -1;
  t->cur = -1;
  t->norder = 0;
  t->fit_p = -1;
  memset(t->rescreened, 0, sizeof(t->rescreened));
  t->screen2 = 0;
  int pos[AH_MAX_DIMS];
  ah_tune_start_pos(t, pos);
  t->def = ah_tune_probe_get(t, -1, NULL, &t->space.start);
  t->def_sub = -1;
  for (int s = 0; s < t->space.nsub; s++)
    if (t->space.sub[s].algo == t->space.start.algo && t->space.sub[s].proto == t->space.start.proto)
      t->def_sub = s;
  if (t->def < 0) return;
  if (ah_tune_start_quick(t)) return;
  ah_tune_want(t, t->def, t->prm.samples_per_probe);
  /* The prior: NCCL's own estimates. A subspace it puts more than prior_ratio behind its best
   * estimate is not screened (NCCL's own subspace always is). */
  double emin = INFINITY;
  for (int s = 0; s < t->space.nsub; s++)
    if (t->space.est_us[s] > 0 && t->space.est_us[s] < emin) emin = t->space.est_us[s];
  /* Warm (neighbours' best points known): the hinted subspaces at the hinted resources, with all
   * their screening samples at once; the other subspaces the prior keeps (a neighbour bin may sit
   * across a protocol's boundary) at the first hint's channels, one sample first as cold. */
  int warm = t->nhints > 0, h0 = -1;
  for (int h = 0; h < t->nhints && h0 < 0; h++)
    for (int d = 0; d < t->hints[h].ndims && d < AH_MAX_DIMS; d++)
      if (t->hints[h].res[d] > 0) h0 = h;
  t->screen2 = 0;
  for (int s = 0; s < t->space.nsub; s++) {
    t->sub_start[s] = -1;
    int h = warm ? ah_tune_hint_of(t, s) : -1;
    if (h < 0 && t->prm.prior_ratio > 0 && s != t->def_sub && t->space.est_us[s] > 0 &&
        t->space.est_us[s] > t->prm.prior_ratio * emin)
      continue;
    ah_config_t c;
    int spos[AH_MAX_DIMS], hh = h >= 0 ? h : h0;
    ah_tune_sub_pos(t, s, pos, 1, spos);
    if (hh >= 0) (void)ah_tune_pos_at_hint(t, s, hh, h < 0, spos); /* the hint's value, in s's window */
    ah_tune_make_cfg(t, s, spos, &c);
    t->sub_start[s] = ah_tune_probe_get(t, s, spos, &c);
    /* the rest once the first sample shows it is in the race */
    ah_tune_want(t, t->sub_start[s], h >= 0 ? t->prm.samples_per_probe : 1);
  }
  if (ah_tune_start_batch(t)) return;
  /* Neighbours on both sides that settled on different resources in one subspace: each point is
   * screened, and the faster starts the subspace (ah_tune_eval_screen). */
  for (int h = 0; h < t->nhints; h++) {
    t->hint_probe[h] = -1;
    int s = -1;
    for (int i = 0; i < t->space.nsub; i++)
      if (t->space.sub[i].algo == t->hints[h].algo && t->space.sub[i].proto == t->hints[h].proto) s = i;
    if (s < 0 || t->sub_start[s] < 0 || ah_tune_hint_of(t, s) == h) continue;
    int spos[AH_MAX_DIMS];
    memcpy(spos, t->probes[t->sub_start[s]].pos, sizeof(spos));
    if (!ah_tune_pos_at_hint(t, s, h, 0, spos)) continue;
    ah_config_t c;
    ah_tune_make_cfg(t, s, spos, &c);
    int q = ah_tune_probe_get(t, s, spos, &c);
    if (q < 0 || q == t->sub_start[s] || q == t->def) continue;
    t->hint_probe[h] = q;
    ah_tune_want(t, q, t->prm.samples_per_probe);
  }
}

static void ah_tune_eval_screen(ah_tune_t *t) {
  /* Two stages: one sample of every subspace first; a subspace already AH_TUNE_SCREEN_OUT times
   * slower than the best (an outlier is 1.5x, so no contender measures that slow) is out without
   * its second sample, which saves the search most of its cost on large messages (LL at 1 GiB
   * runs ten times longer than NCCL's choice). */
  if (!t->screen2) {
    t->screen2 = 1;
    double lb = ah_tune_lg(t, t->def);
    for (int s = 0; s < t->space.nsub; s++)
      if (t->sub_start[s] >= 0 && ah_tune_lg(t, t->sub_start[s]) < lb) lb = ah_tune_lg(t, t->sub_start[s]);
    t->nwants = 0;
    for (int s = 0; s < t->space.nsub; s++)
      if (t->sub_start[s] >= 0 && ah_tune_lg(t, t->sub_start[s]) <= lb + log(AH_TUNE_SCREEN_OUT))
        ah_tune_want(t, t->sub_start[s], t->prm.samples_per_probe);
    if (t->nwants > 0) return;
  }
  for (int h = 0; h < t->nhints; h++) { /* a second hinted point of a subspace: the faster starts it */
    int q = t->hint_probe[h];
    if (q < 0) continue;
    int s = t->probes[q].sub;
    if (s >= 0 && t->sub_start[s] >= 0 && ah_tune_lg(t, q) < ah_tune_lg(t, t->sub_start[s])) t->sub_start[s] = q;
  }
  t->norder = 0;
  for (int s = 0; s < t->space.nsub; s++) {
    if (t->sub_start[s] < 0) continue;
    double l = ah_tune_lg(t, t->sub_start[s]);
    int i = t->norder++;
    while (i > 0 && ah_tune_lg(t, t->sub_start[t->order[i - 1]]) > l) {
      t->order[i] = t->order[i - 1];
      i--;
    }
    t->order[i] = s;
  }
  if (ah_log_level() >= AH_LOG_DEBUG)
    for (int i = 0; i < t->norder; i++) {
      char b[96];
      int p = t->sub_start[t->order[i]];
      ah_log(AH_LOG_DEBUG, "tuner: screen %s: %.2f us (n=%d)", ah_config_format(&t->probes[p].cfg, b, sizeof(b)),
             exp(ah_tune_lg(t, p)), t->probes[p].n);
    }
  t->best = t->def;
  for (int i = 0; i < t->norder; i++)
    if (ah_tune_lg(t, t->sub_start[t->order[i]]) < ah_tune_lg(t, t->best)) t->best = t->sub_start[t->order[i]];
  t->center = -1;
  t->cur = -1;
  ah_tune_next_subspace(t);
}

/* Runs evaluations while the current batch has all its results. */
void ah_tune_advance(ah_tune_t *t) {
  for (int guard = 0; guard < 64 && t->phase != AH_PH_DONE && ah_tune_wants_met(t); guard++) {
    ah_tune_update_sigma(t);
    if (t->phase == AH_PH_SCREEN) ah_tune_eval_screen(t);
    else if (t->phase == AH_PH_RESCREEN) ah_tune_eval_rescreen(t);
    else if (t->phase == AH_PH_DESCEND && t->fit_p >= 0) ah_tune_eval_fit(t);
    else if (t->phase == AH_PH_DESCEND) ah_tune_eval_step(t);
    else if (t->phase == AH_PH_CONFIRM) ah_tune_eval_confirm(t);
    else if (t->phase == AH_PH_QUICK) ah_tune_eval_quick(t);
    else if (t->phase == AH_PH_BATCH) ah_tune_eval_batch(t);
  }
}

/* ---- designed batches (channels the only searched resource, cold) ---- */

/* Wants subspace s's channel design, one sample each: the counts nearest the middle of s's window
 * of the channel list x each of AH_TUNE_BATCH_DESIGN, at probe `from`'s other resources. Note that
 * the middle, not the start: where the start names a count (NCCL's own, known), the default
 * already measures it, and a design around it collapses where it is 1 (sim/ --full-space: p5
 * 0.9560 -> 0.9731); where the start leaves channels to NCCL, the middle is the start (12 of the
 * shim's list). */
static void ah_tune_batch_design(ah_tune_t *t, int s, int from) {
  static const double ratios[] = AH_TUNE_BATCH_DESIGN;
  const ah_dim_t *dim = &t->space.dims[AH_DIM_NCHANNELS];
  int base[AH_MAX_DIMS], lo, hi;
  memcpy(base, t->probes[from].pos, sizeof(base));
  ah_tune_window(t, s, AH_DIM_NCHANNELS, &lo, &hi);
  base[AH_DIM_NCHANNELS] = (lo + hi) / 2;
  double v0 = (double)dim->values[base[AH_DIM_NCHANNELS]];
  t->bt_swept[s] = 1;
  for (size_t i = 0; i < sizeof(ratios) / sizeof(ratios[0]); i++) {
    int64_t v = (int64_t)floor(v0 * ratios[i] + 0.5);
    int j = ah_tune_value_pos(dim, v > 0 ? v : 1), spos[AH_MAX_DIMS];
    memcpy(spos, base, sizeof(spos));
    spos[AH_DIM_NCHANNELS] = j < lo ? lo : j > hi ? hi : j;
    ah_config_t c;
    ah_tune_make_cfg(t, s, spos, &c);
    ah_tune_want(t, ah_tune_probe_get(t, s, spos, &c), 1);
  }
}

/* Plans the first designed batch when it applies — a cold key (no hint) whose only searched
 * resource is channels (NCCL 2.22-2.29), with a list of at least 4 counts and NCCL's own subspace
 * in the space: the screen ah_tune_start_screen wanted (NCCL's default, every subspace the prior
 * keeps at the start) plus NCCL's own subspace's channel design. Returns 1 when planned. */
static int ah_tune_start_batch(ah_tune_t *t) {
  if (!t->prm.batches || t->nhints > 0 || t->nsearch != 1 || t->searchable[0] != AH_DIM_NCHANNELS ||
      t->space.dims[AH_DIM_NCHANNELS].nvalues < 4)
    return 0;
  int s = t->def_sub;
  if (s < 0 || t->sub_start[s] < 0) return 0;
  memset(t->bt_swept, 0, sizeof(t->bt_swept));
  memset(t->bt_resc, 0, sizeof(t->bt_resc));
  t->bt_lead = -1;
  t->bt_rounds = 0;
  ah_tune_batch_design(t, s, t->sub_start[s]);
  t->phase = AH_PH_BATCH;
  return 1;
}

/* 1 when p is a searched point of this epoch with samples. */
static int ah_tune_batch_pt(const ah_tune_t *t, int p) {
  const ah_probe_t *pr = &t->probes[p];
  return pr->epoch == t->epoch && !pr->confirm && pr->sub >= 0 && pr->n > 0;
}

/* Wants the next designed batch around the leader P, all at once:
 *   - the leader's subspace's design, when not yet measured (another subspace leads);
 *   - the design of every other subspace screened within its abandonment ratio of the leader (the
 *     descent's own rule: a subspace at the start's count may hide a better count, e.g. LL128 on
 *     one node at 12 channels 1.6x slower than at 8);
 *   - the leader's counts one x1.41 step (the descent's finest) each way, not yet measured;
 *   - every other subspace screened within AH_TUNE_BATCH_RESCREEN of the leader at the leader's
 *     count, once (the descent's re-screen);
 *   - a second sample of every point measured within AH_TUNE_BATCH_REACH of the leader, and the
 *     leader's; two more (up to AH_TUNE_SEARCH_MAXN) of a point that may still be more than
 *     AH_TUNE_BATCH_RACE_GAIN faster than the leader at AH_TUNE_BATCH_RACE_Z standard errors. Note
 *     that points closer than that are not raced: telling them apart costs a round of samples
 *     and wins less than the p5 bar's 3%. */
static void ah_tune_batch_plan(ah_tune_t *t, int P) {
  int s = t->probes[P].sub, ppos[AH_MAX_DIMS];
  memcpy(ppos, t->probes[P].pos, sizeof(ppos));
  double lp = ah_tune_lg(t, P);
  if (!t->bt_swept[s]) ah_tune_batch_design(t, s, P);
  for (int o = 0; o < t->space.nsub; o++) {
    int q0 = t->sub_start[o];
    if (o == s || t->bt_swept[o] || q0 < 0 || t->probes[q0].n == 0 ||
        ah_tune_lg(t, q0) > lp + log(ah_tune_abandon_ratio(t, o)))
      continue;
    ah_tune_batch_design(t, o, q0);
  }
  for (int dir = -1; dir <= 1; dir += 2) { /* the descent's finest step each way */
    int j = ah_tune_step_to(t, P, AH_DIM_NCHANNELS, dir, AH_TUNE_MAX_LEVEL), pos[AH_MAX_DIMS];
    if (j < 0) continue;
    memcpy(pos, ppos, sizeof(pos));
    pos[AH_DIM_NCHANNELS] = j;
    ah_config_t c;
    ah_tune_make_cfg(t, s, pos, &c);
    int q = ah_tune_probe_get(t, s, pos, &c);
    if (q >= 0 && t->probes[q].n == 0) ah_tune_want(t, q, 1);
  }
  for (int o = 0; o < t->space.nsub; o++) {
    int q0 = t->sub_start[o];
    if (o == s || t->bt_resc[o] || q0 < 0 || t->probes[q0].n == 0 || ah_tune_lg(t, q0) > lp + log(AH_TUNE_BATCH_RESCREEN))
      continue;
    int pos[AH_MAX_DIMS];
    ah_tune_sub_pos(t, o, ppos, 0, pos);
    ah_config_t c;
    ah_tune_make_cfg(t, o, pos, &c);
    int q = ah_tune_probe_get(t, o, pos, &c);
    t->bt_resc[o] = 1;
    if (q >= 0 && t->probes[q].n == 0) ah_tune_want(t, q, 1);
  }
  for (int i = 0; i < t->nprobes; i++) {
    if (!ah_tune_batch_pt(t, i)) continue;
    int n = t->probes[i].n;
    double se = sqrt(pow(ah_tune_se(t, i), 2) + pow(ah_tune_se(t, P), 2)), d = ah_tune_lg(t, i) - lp;
    if (n < 2 && d <= log(1.0 + AH_TUNE_BATCH_REACH)) {
      ah_tune_want(t, i, 2);
      ah_tune_want(t, P, 2);
    } else if (i != P && n >= 2 && n < AH_TUNE_SEARCH_MAXN &&
               AH_TUNE_BATCH_RACE_Z * se - d > log(1.0 + AH_TUNE_BATCH_RACE_GAIN)) {
      int m = n + 2 > AH_TUNE_SEARCH_MAXN ? AH_TUNE_SEARCH_MAXN : n + 2;
      ah_tune_want(t, i, m);
      ah_tune_want(t, P, m);
    }
  }
}

/* A designed batch is in: plans the next one around the leader (the fastest searched point;
 * ah_tune_batch_plan), or, when it needs nothing more or AH_TUNE_BATCH_ROUNDS were planned, hands
 * the leader to the confirmation. Each batch is committed back to back, so the result lag is paid
 * once per round, not once per step as in the descent. The winner is the leader, or a point within
 * the noise floor of it with fewer channels and at least 2 samples; one not ahead of NCCL's default
 * by the noise floor keeps the default at once. */
static void ah_tune_eval_batch(ah_tune_t *t) {
  int P = -1;
  for (int i = 0; i < t->nprobes; i++)
    if (ah_tune_batch_pt(t, i) && (P < 0 || ah_tune_lg(t, i) < ah_tune_lg(t, P))) P = i;
  t->nwants = 0;
  t->bt_rounds++;
  if (P < 0) {
    ah_tune_start_confirm(t);
    return;
  }
  t->bt_lead = P;
  if (t->bt_rounds <= AH_TUNE_BATCH_ROUNDS && t->epoch_calls < t->prm.budget_calls - ah_tune_reserve(t) - 4) {
    ah_tune_batch_plan(t, P);
    if (ah_log_level() >= AH_LOG_DEBUG) {
      char b[96];
      ah_log(AH_LOG_DEBUG, "tuner: designed batch %d after %d calls: leader %s (%.2f us, n=%d), %d points wanted",
             t->bt_rounds, t->epoch_calls, ah_config_format(&t->probes[P].cfg, b, sizeof(b)),
             exp(ah_tune_lg(t, P)), t->probes[P].n, t->nwants);
    }
    if (t->nwants > 0) return;
  }
  int b = P;
  for (int i = 0; i < t->nprobes; i++)
    if (ah_tune_batch_pt(t, i) && t->probes[i].n >= 2 && i != b && ah_tune_prefer(t, i, b)) b = i;
  t->best = b;
  if (ah_tune_lg(t, t->def) - ah_tune_lg(t, b) < log(1.0 + t->prm.noise_floor)) {
    ah_tune_finish(t, t->def, t->def, AH_TUNE_CONVERGED);
    return;
  }
  ah_tune_start_confirm(t);
}
