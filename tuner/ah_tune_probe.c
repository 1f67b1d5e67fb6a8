/* ah_tune_probe.c: the probes of one key's search (a configuration and its samples) and their
 * statistics — robust means in log time, the pooled noise, the batch of samples the search wants
 * next. The leaf of the engine (ah_tune_internal.h). */
#include <stdlib.h>
#include <string.h>

#include "ah_log.h"
#include "ah_tune_internal.h"

/* ---- probes and their statistics ---- */

double ah_tune_lg(const ah_tune_t *t, int p) {
  const ah_probe_t *pr = &t->probes[p];
  double scratch[AH_TUNE_MAX_SAMPLES];
  return ah_stats_robust_log(pr->us, pr->n, t->sigma, scratch);
}

double ah_tune_se(const ah_tune_t *t, int p) {
  return ah_stats_robust_se(t->probes[p].n, t->sigma);
}

void ah_tune_update_sigma(ah_tune_t *t) {
  ah_stats_noise_t nz;
  nz.count = 0;
  for (int i = 0; i < t->nprobes; i++) {
    const ah_probe_t *pr = &t->probes[i];
    if (pr->epoch != t->epoch) continue;
    ah_stats_noise_add(&nz, pr->us, pr->n, t->scratch);
  }
  /* The pooled estimate weighs in against the prior as residuals accumulate (8 pseudo-residuals
   * of prior), so a few lucky-tight early probes cannot make every later difference significant.
   * The prior is the noise a converged neighbour bin measured (ah_tune_hint_noise), else 3%. */
  double prior =
      t->sigma_prior > 0 ? t->sigma_prior : AH_TUNE_SIGMA_PRIOR; /* a neighbour's, else 3% */
  double est = ah_stats_noise_sigma(&nz, prior, AH_TUNE_SIGMA_FLOOR);
  t->sigma = (8.0 * prior + nz.count * est) / (8.0 + nz.count);
}

/* Config of subspace `sub` at value indices pos (sub -1: the start's algo/proto). */
void ah_tune_make_cfg(const ah_tune_t *t, int sub, const int *pos, ah_config_t *c) {
  memset(c, 0, sizeof(*c));
  c->algo = sub >= 0 ? t->space.sub[sub].algo : t->space.start.algo;
  c->proto = sub >= 0 ? t->space.sub[sub].proto : t->space.start.proto;
  c->ndims = t->space.ndims;
  for (int d = 0; d < t->space.ndims; d++) {
    const ah_dim_t *dim = &t->space.dims[d];
    c->res[d] = dim->nvalues > 0 ? dim->values[pos[d]] : t->space.start.res[d];
  }
}

void ah_tune_window(const ah_tune_t *t, int sub, int d, int *lo_p, int *hi_p) {
  int nv = t->space.dims[d].nvalues;
  *lo_p = 0;
  *hi_p = nv - 1;
  if (sub < 0 || t->space.win[sub][d].n <= 0) return;
  int lo = t->space.win[sub][d].lo, hi = lo + t->space.win[sub][d].n - 1;
  if (lo < 0 || hi >= nv) return; /* ah_tune_create checked; a bad window is the whole list */
  *lo_p = lo;
  *hi_p = hi;
}

/* Finds the current epoch's non-confirm probe of config c, or adds it. Returns its index or -1. */
int ah_tune_probe_get(ah_tune_t *t, int sub, const int *pos_in, const ah_config_t *c) {
  /* Callers often pass another probe's position: copy it before the array may move. */
  int pos_copy[AH_MAX_DIMS];
  const int *pos = NULL;
  if (pos_in) {
    memcpy(pos_copy, pos_in, sizeof pos_copy);
    pos = pos_copy;
  }
  for (int i = 0; i < t->nprobes; i++) {
    ah_probe_t *pr = &t->probes[i];
    if (pr->epoch == t->epoch && !pr->confirm && ah_config_equal(&pr->cfg, c)) {
      if (pr->sub < 0 && sub >= 0) { /* the default turns out to be a point of a subspace */
        pr->sub = sub;
        memcpy(pr->pos, pos, sizeof(pr->pos));
      }
      return i;
    }
  }
  if (t->nprobes == t->capprobes) {
    int cap = t->capprobes ? 2 * t->capprobes : 32;
    ah_probe_t *np = realloc(t->probes, (size_t)cap * sizeof(*np));
    if (!np) {
      ah_log(AH_LOG_ERROR, "tuner: out of memory for %d probes", cap);
      return -1;
    }
    t->probes = np;
    t->capprobes = cap;
  }
  ah_probe_t *pr = &t->probes[t->nprobes];
  memset(pr, 0, sizeof(*pr));
  pr->cfg = *c;
  pr->sub = sub;
  if (pos) memcpy(pr->pos, pos, sizeof(pr->pos));
  pr->epoch = t->epoch;
  return t->nprobes++;
}

void ah_tune_want(ah_tune_t *t, int p, int target) {
  if (p < 0 || t->probes[p].n >= target) return;
  for (int i = 0; i < t->nwants; i++)
    if (t->wants[i].probe == p) {
      if (t->wants[i].target < target) t->wants[i].target = target;
      return;
    }
  if (t->nwants < AH_TUNE_MAX_WANTS) t->wants[t->nwants++] = (ah_want_t){p, target};
}

int ah_tune_wants_met(const ah_tune_t *t) {
  for (int i = 0; i < t->nwants; i++)
    if (t->probes[t->wants[i].probe].n < t->wants[i].target) return 0;
  return 1;
}

/* Calls kept back for the confirmation: its samples plus, twice, the lag with which results
 * come back (each batch waits that long). */
int ah_tune_reserve(const ah_tune_t *t) { return 2 * AH_TUNE_CONFIRM_N + 4 + 2 * t->lag_est; }
