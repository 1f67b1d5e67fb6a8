/* ah_tune_descent.c: the search inside the subspaces (algo x proto), one after another in screening
 * order: coordinate descent with adaptive steps and a plateau walk towards fewer channels, the model
 * step where the chunk is searched too, and the driver that re-screens, abandons or descends each
 * subspace. Its key choice: a move needs significance on AH_TUNE_MOVE_N samples of both sides (a
 * lucky pair would send the descent the wrong way), and a channel move carries the chunk along,
 * their optima being coupled. Each step asks for samples and is judged when they are in. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ah_fit.h"
#include "ah_log.h"
#include "ah_tune_search_internal.h"

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
int ah_tune_step_to(const ah_tune_t *t, int c, int d, int dir, int level) {
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
  double n0 = (double)ch->values[from[AH_DIM_NCHANNELS]],
         n1 = (double)ch->values[pos[AH_DIM_NCHANNELS]];
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
    ah_log(AH_LOG_DEBUG, "tuner: descent stopped; faster on %d samples: %s (%.2f us)",
           t->probes[f].n, ah_config_format(&t->probes[f].cfg, b, sizeof(b)),
           exp(ah_tune_lg(t, f)));
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
               ah_config_format(&t->probes[q].cfg, b, sizeof(b)), exp(ah_tune_lg(t, q)),
               t->probes[q].n);
      }
      t->center = q;
      t->walk_ref = q;
      t->walked = i; /* the points after q are behind the walk now */
      return;
    }
  }
}

void ah_tune_eval_step(ah_tune_t *t) {
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
      hint = t->probes[p].pos[t->searchable[t->dim_i]] > t->probes[c0].pos[t->searchable[t->dim_i]]
                 ? 1
                 : -1;
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
  if (t->dir == 0 && t->level == 0 && !t->moved && !t->stretched && hint != 0 &&
      d != AH_DIM_CHUNK) {
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

/* Wants the point of subspace s at nch channels (any count: the shim's list is only the descent's
 * steps) and chunk index ck as the response surface's next probe, with the centre to compare it
 * with. Returns 1 when that point is new and wanted, 0 otherwise (measured already, the centre,
 * or out of memory). */
static int ah_tune_fit_propose(ah_tune_t *t, int s, int64_t nch, int ck, const char *why) {
  int pos[AH_MAX_DIMS];
  memcpy(pos, t->probes[t->center].pos, sizeof(pos));
  pos[AH_DIM_CHUNK] = ck;
  pos[AH_DIM_NCHANNELS] =
      ah_tune_value_pos(&t->space.dims[AH_DIM_NCHANNELS], nch); /* nearest listed */
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
static int ah_tune_coupled_chunk(const ah_tune_t *t, int s, int64_t chunk, int64_t n0, int64_t n1,
                                 int at) {
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
  if (t->nsearch != 2 || t->space.ndims <= AH_DIM_CHUNK || t->center < 0 ||
      t->fit_steps >= AH_TUNE_FIT_STEPS ||
      t->epoch_calls >= t->prm.budget_calls - ah_tune_reserve(t) - 4)
    return 0;
  const ah_probe_t *cp = &t->probes[t->center];
  int s = cp->sub;
  if (s < 0 || cp->cfg.res[AH_DIM_NCHANNELS] <= 0 || cp->cfg.res[AH_DIM_CHUNK] <= 0) return 0;
  /* Only a subspace that leads: a fit step in one already behind costs calls for nothing. */
  if (t->best >= 0 && t->best != t->center && ah_tune_lg(t, t->center) > ah_tune_lg(t, t->best))
    return 0;
  int64_t ncen = cp->cfg.res[AH_DIM_NCHANNELS];
  double xc = log2((double)ncen), yc = log2((double)cp->cfg.res[AH_DIM_CHUNK]);
  ah_fit_point_t pt[AH_FIT_MAX_POINTS];
  int n = 0, l = -1, h = -1;
  double xlo = xc, xhi = xc, ylo = yc, yhi = yc;
  for (int i = 0; i < t->nprobes && n < AH_FIT_MAX_POINTS; i++) {
    const ah_probe_t *pr = &t->probes[i];
    int64_t ch = pr->cfg.res[AH_DIM_NCHANNELS];
    if (pr->epoch != t->epoch || pr->confirm || pr->sub != s || pr->n == 0 || ch <= 0 ||
        pr->cfg.res[AH_DIM_CHUNK] <= 0)
      continue;
    /* the knee's points: the most channels below the centre's and the fewest above, the fastest
     * of each count */
    if (ch < ncen &&
        (l < 0 || ch > t->probes[l].cfg.res[AH_DIM_NCHANNELS] ||
         (ch == t->probes[l].cfg.res[AH_DIM_NCHANNELS] && ah_tune_lg(t, i) < ah_tune_lg(t, l))))
      l = i;
    if (ch > ncen &&
        (h < 0 || ch < t->probes[h].cfg.res[AH_DIM_NCHANNELS] ||
         (ch == t->probes[h].cfg.res[AH_DIM_NCHANNELS] && ah_tune_lg(t, i) < ah_tune_lg(t, h))))
      h = i;
    double x = log2((double)ch), y = log2((double)pr->cfg.res[AH_DIM_CHUNK]);
    if (fabs(x - xc) > AH_TUNE_FIT_REACH + 1e-9 || fabs(y - yc) > AH_TUNE_FIT_REACH + 1e-9)
      continue;
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
    double k =
        ah_fit_knee((double)nl, ah_tune_lg(t, l), (double)ncen, ah_tune_lg(t, t->center), sh);
    int64_t nk = (int64_t)floor(k + 0.5);
    if (k > 0 && nk > nl && nk < ncen &&
        ah_tune_fit_propose(
            t, s, nk,
            ah_tune_coupled_chunk(t, s, cp->cfg.res[AH_DIM_CHUNK], ncen, nk, cp->pos[AH_DIM_CHUNK]),
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
  for (int64_t v = (int64_t)ceil(exp2(xlo) - 1e-9);
       v <= (int64_t)floor(exp2(xhi) + 1e-9) && nx < AH_MAX_DIM_VALUES; v++) {
    nv[nx] = v;
    xs[nx++] = log2((double)v);
  }
  ah_tune_window(t, s, AH_DIM_CHUNK, &lo, &hi);
  for (int j = lo; j <= hi; j++) {
    double y = t->space.dims[AH_DIM_CHUNK].values[j] > 0
                   ? log2((double)t->space.dims[AH_DIM_CHUNK].values[j])
                   : -1;
    if (y < ylo - 1e-9 || y > yhi + 1e-9) continue;
    ks[ny] = j;
    ys[ny++] = y;
  }
  if (ah_fit_argmin(coef, xs, nx, ys, ny, &ix, &iy) != 0) return 0;
  if (ah_fit_eval(coef, xc, yc) - ah_fit_eval(coef, xs[ix], ys[iy]) <=
      log(1.0 + t->prm.noise_floor))
    return 0;
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
void ah_tune_eval_fit(ah_tune_t *t) {
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
int ah_tune_prefer(const ah_tune_t *t, int p, int q) {
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
void ah_tune_next_subspace(ah_tune_t *t) {
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
  return t->prm.prior_ratio > 0 && t->space.est_us[s] > 0 &&
         t->space.est_us[s] > AH_TUNE_PRIOR_BEHIND * emin;
}

/* How far behind the best a subspace may measure and still be descended. */
double ah_tune_abandon_ratio(const ah_tune_t *t, int s) {
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
void ah_tune_sub_pos(const ah_tune_t *t, int s, const int *pos, int start, int *out) {
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
                                     : t->nhints > 0            ? AH_TUNE_WARM_RESCREEN
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

void ah_tune_eval_rescreen(ah_tune_t *t) {
  int s = t->order[t->cur], q = t->resc;
  if (ah_tune_lg(t, q) < ah_tune_lg(t, t->sub_start[s])) t->sub_start[s] = q;
  t->phase = AH_PH_DESCEND;
  ah_tune_pick_subspace(t);
}

/* Index of the value of dim nearest (in ratio) to v > 0. */
int ah_tune_value_pos(const ah_dim_t *dim, int64_t v) {
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
