/* ah_tune_confirm.c: the end of a key's search (the method is described at the top of ah_tune.c and
 * in docs/tuner.md): the best point's confirmation against NCCL's default on fresh samples, and
 * finishing, which pins the winner and arms the drift check. Its key choice: a best picked out of
 * many probes carries selection luck, so it replaces NCCL's choice only on fresh samples beyond
 * AH_TUNE_CONFIRM_Z standard errors, or without them where the gain is far beyond what luck gives. */
#include <math.h>
#include <stdlib.h>

#include "ah_log.h"
#include "ah_tune_search_internal.h"

/* ---- finishing ---- */

void ah_tune_finish(ah_tune_t *t, int winner, int src, int state) {
  if (ah_log_level() >= AH_LOG_DEBUG) {
    char b[96];
    ah_log(AH_LOG_DEBUG,
           "tuner: %s %s (%.2f us, n=%d; default %.2f us, n=%d; noise %.1f%%) after %d "
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
    ah_drift_init(&t->drift, 0.0, t->sigma > 0.01 ? t->sigma : 0.01, AH_TUNE_DRIFT_SHIFT,
                  AH_TUNE_DRIFT_H);
    t->drift_on = 1;
  }
}

void ah_tune_start_confirm(ah_tune_t *t) {
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
   * calls, p5 unchanged, no key slower than the default; docs/history.md "Round four"), and after
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

void ah_tune_eval_confirm(ah_tune_t *t) {
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
