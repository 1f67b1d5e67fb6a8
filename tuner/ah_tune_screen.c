/* ah_tune_screen.c: a search epoch's opening and the search's dispatcher: the screen of every
 * subspace the prior keeps, the quick warm check a neighbour's hint allows instead, the designed
 * batches of a cold key whose only searched resource is channels, and ah_tune_advance, which runs
 * the phase's evaluation once its samples are in. Its key choice: each opening wants its points all
 * at once, so the driver commits them back to back and the result lag is paid once a round. */
#include <math.h>
#include <string.h>

#include "ah_log.h"
#include "ah_tune_search_internal.h"

static int ah_tune_start_batch(ah_tune_t *t);
static void ah_tune_eval_batch(ah_tune_t *t);

/* ---- start points ---- */

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
      pos[d] =
          d == AH_DIM_NCHANNELS && t->space.ndims == 1 ? (dim->nvalues - 1) / 2 : dim->nvalues / 2;
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

/* Moves spos, a position in subspace s, onto hint h's resources where the hint names one (only the
 * channel count when chan_only), each clamped to s's window. Returns 1 when it moved any. */
static int ah_tune_pos_at_hint(const ah_tune_t *t, int s, int h, int chan_only, int *spos) {
  int any = 0;
  for (int d = 0; d < t->space.ndims && d < t->hints[h].ndims; d++)
    if (t->hints[h].res[d] > 0 && t->space.dims[d].nvalues > 0 &&
        (!chan_only || d == AH_DIM_NCHANNELS)) {
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
  if (q < 0 || q == t->def || t->nquick >= (int)(sizeof(t->quick_pt) / sizeof(t->quick_pt[0])))
    return 0;
  for (int i = 0; i < t->nquick; i++)
    if (t->quick_pt[i] == q) return 0;
  t->quick_pt[t->nquick++] = q;
  return 1;
}

/* Adds to the quick check, and wants AH_TUNE_QUICK_SIDE_N samples of, probe `from`'s channel
 * neighbour one step in direction dir (-1 or 1) within its subspace, when it has one there. */
static void ah_tune_quick_side(ah_tune_t *t, int from, int dir) {
  int j = ah_tune_step_to(t, from, AH_DIM_NCHANNELS, dir, AH_TUNE_MAX_LEVEL);
  if (j < 0) return;
  int sub = t->probes[from].sub, npos[AH_MAX_DIMS];
  memcpy(npos, t->probes[from].pos, sizeof(npos));
  npos[AH_DIM_NCHANNELS] = j;
  ah_config_t c;
  ah_tune_make_cfg(t, sub, npos, &c);
  int q = ah_tune_probe_get(t, sub, npos, &c);
  if (ah_tune_quick_add(t, q)) ah_tune_want(t, q, AH_TUNE_QUICK_SIDE_N);
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
    for (int dir = -1; dir <= 1; dir += 2) ah_tune_quick_side(t, hq, dir);
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
    ah_log(AH_LOG_DEBUG,
           "tuner: quick check: centre %.1f%% ahead of the default (se %.1f%%, n=%d/%d)%s",
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
      ah_log(AH_LOG_DEBUG,
             "tuner: quick check: the rival subspace is faster; it is the centre now");
      t->quick_moves = AH_TUNE_QUICK_MOVES;
      t->quick_alt = -1;
      t->quick_c = alt;
      ah_tune_quick_add(t, alt);
      t->nwants = 0;
      for (int dir = -1; dir <= 1; dir += 2) ah_tune_quick_side(t, alt, dir);
      return;
    }
    rival = -1;
  } else if (rival >= 0) {
    double g = lc - ah_tune_lg(t, rival);
    double rse = sqrt(pow(ah_tune_se(t, c), 2) + pow(ah_tune_se(t, rival), 2));
    int held = g > AH_TUNE_SEARCH_Z * rse ||
               (t->probes[rival].n >= AH_TUNE_MOVE_N && t->probes[c].n >= AH_TUNE_MOVE_N);
    if (held && t->quick_moves < AH_TUNE_QUICK_MOVES) {
      int dir =
          t->probes[rival].pos[AH_DIM_NCHANNELS] > t->probes[c].pos[AH_DIM_NCHANNELS] ? 1 : -1;
      ah_log(AH_LOG_DEBUG, "tuner: quick check: a neighbour beat the centre; it is the centre now");
      t->quick_moves++;
      t->quick_c = rival;
      t->nwants = 0;
      ah_tune_quick_side(t, rival, dir);
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
  ah_log(AH_LOG_DEBUG, "tuner: quick check: unclear (%s); the warm search",
         rival >= 0 ? "moves spent" : "no gain");
  ah_tune_start_screen(t);
}

/* ---- the screen, and the dispatcher ---- */

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
    if (t->space.sub[s].algo == t->space.start.algo &&
        t->space.sub[s].proto == t->space.start.proto)
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
    if (hh >= 0)
      (void)ah_tune_pos_at_hint(t, s, hh, h < 0, spos); /* the hint's value, in s's window */
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
      if (t->space.sub[i].algo == t->hints[h].algo && t->space.sub[i].proto == t->hints[h].proto)
        s = i;
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
      if (t->sub_start[s] >= 0 && ah_tune_lg(t, t->sub_start[s]) < lb)
        lb = ah_tune_lg(t, t->sub_start[s]);
    t->nwants = 0;
    for (int s = 0; s < t->space.nsub; s++)
      if (t->sub_start[s] >= 0 && ah_tune_lg(t, t->sub_start[s]) <= lb + log(AH_TUNE_SCREEN_OUT))
        ah_tune_want(t, t->sub_start[s], t->prm.samples_per_probe);
    if (t->nwants > 0) return;
  }
  for (int h = 0; h < t->nhints;
       h++) { /* a second hinted point of a subspace: the faster starts it */
    int q = t->hint_probe[h];
    if (q < 0) continue;
    int s = t->probes[q].sub;
    if (s >= 0 && t->sub_start[s] >= 0 && ah_tune_lg(t, q) < ah_tune_lg(t, t->sub_start[s]))
      t->sub_start[s] = q;
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
      ah_log(AH_LOG_DEBUG, "tuner: screen %s: %.2f us (n=%d)",
             ah_config_format(&t->probes[p].cfg, b, sizeof(b)), exp(ah_tune_lg(t, p)),
             t->probes[p].n);
    }
  t->best = t->def;
  for (int i = 0; i < t->norder; i++)
    if (ah_tune_lg(t, t->sub_start[t->order[i]]) < ah_tune_lg(t, t->best))
      t->best = t->sub_start[t->order[i]];
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
    if (o == s || t->bt_resc[o] || q0 < 0 || t->probes[q0].n == 0 ||
        ah_tune_lg(t, q0) > lp + log(AH_TUNE_BATCH_RESCREEN))
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
    double se = sqrt(pow(ah_tune_se(t, i), 2) + pow(ah_tune_se(t, P), 2)),
           d = ah_tune_lg(t, i) - lp;
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
  if (t->bt_rounds <= AH_TUNE_BATCH_ROUNDS &&
      t->epoch_calls < t->prm.budget_calls - ah_tune_reserve(t) - 4) {
    ah_tune_batch_plan(t, P);
    if (ah_log_level() >= AH_LOG_DEBUG) {
      char b[96];
      ah_log(AH_LOG_DEBUG,
             "tuner: designed batch %d after %d calls: leader %s (%.2f us, n=%d), %d points wanted",
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
