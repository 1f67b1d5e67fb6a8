/* The decision line: when a rank first runs a key's settled configuration (a forever segment: the
 * search converged, or an override or profile pinned it), one info line says so in words —
 *   allreduce 16M-32M on comm 0x…: tuned nvlstree/simple nch=8, 207 us vs NCCL 215 us (1.04x), after 54 calls
 * It is called from the once-per-segment branch of ah_shim_decide, never per call.
 *
 * The times are the search's own figures where this process holds the key's search (the leader's
 * process), else this rank's measurements: NCCL's default from the calls that ran it, the settled
 * configuration's when the rank last probed it; "?" when the rank has none.
 *
 * One line per process, not per rank: every local rank of the communicator runs the same segment
 * (one schedule per process and key), so the first to run it writes the line and its prefix names
 * the process's ranks ("[0-3]" when one process drives four GPUs), not the writing thread's. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>

#include "ah_tune.h"
#include "shim_decide.h"
#include "shim_internal.h"

static const char *source_words(int source) {
  switch (source) {
    case AH_SOURCE_TUNED: return "tuned";
    case AH_SOURCE_OVERRIDE: return "pinned by AUTOHA_OVERRIDE";
    case AH_SOURCE_PROFILE: return "from AUTOHA_PROFILE";
    default: return "NCCL's choice";
  }
}

static void fmt_us(double us, char *buf, size_t len) {
  if (isnan(us) || us <= 0) snprintf(buf, len, "?");
  else snprintf(buf, len, us < 100 ? "%.1f" : "%.0f", us);
}

void ah_shim_decision_log(const ah_comm_t *c, ah_shim_rankkey_t *ck, const ah_segment_t *seg) {
  if (ah_log_level() < AH_LOG_INFO && !ah_log_nccl_set()) return;
  double win = NAN, def = NAN;
  ah_shim_keystate_t *ks = ck->ks;
  if (ks) { /* another local rank announced this segment (or a later one) already */
    uint64_t had = atomic_load(&ks->said), want = seg->first + 1;
    do
      if (had >= want) return;
    while (!atomic_compare_exchange_weak(&ks->said, &had, want));
  }
  if (ks && ks->tune && seg->source == AH_SOURCE_TUNED) {
    ah_tune_status_t st;
    pthread_mutex_lock(&ks->lock);
    ah_tune_status(ks->tune, &st);
    pthread_mutex_unlock(&ks->lock);
    win = st.winner_us;
    def = st.default_us;
  } else {
    if (ck->nccl_default.timed) def = ck->nccl_default.us_total / (double)ck->nccl_default.timed;
    if (ck->applied.timed && ah_config_equal(&ck->applied.cfg, &seg->config))
      win = ck->applied.us_total / (double)ck->applied.timed;
  }
  int nccls =
      ah_config_is_keep(&seg->config) || ck->seg_nccl; /* the settled configuration is NCCL's */
  if (nccls) win = def;
  char lo[24], hi[24], cfg[96], ws[24], ds[24], ratio[32] = "";
  ah_size_format(ah_size_bin_floor(ck->bin), lo, sizeof lo);
  ah_size_format(ah_size_bin_floor(ck->bin) * 2, hi, sizeof hi);
  if (ah_config_is_keep(&seg->config)) snprintf(cfg, sizeof cfg, "NCCL's own choice");
  else ah_config_format(&seg->config, cfg, sizeof cfg);
  fmt_us(win, ws, sizeof ws);
  fmt_us(def, ds, sizeof ds);
  if (!isnan(win) && !isnan(def) && win > 0) snprintf(ratio, sizeof ratio, " (%.2fx)", def / win);
  if (nccls) {
    ah_log_proc(
        AH_LOG_INFO,
        "%s %s-%s on comm 0x%016llx: %s, keeps NCCL's own choice %s, %s us, after %llu calls",
        ah_coll_name(ck->coll), lo, hi, (unsigned long long)c->id,
        seg->source == AH_SOURCE_DEFAULT ? "the search found nothing faster"
                                         : source_words(seg->source),
        cfg, ds, (unsigned long long)seg->first);
    return;
  }
  ah_log_proc(AH_LOG_INFO,
              "%s %s-%s on comm 0x%016llx: %s %s, %s us vs NCCL %s us%s, after %llu calls",
              ah_coll_name(ck->coll), lo, hi, (unsigned long long)c->id, source_words(seg->source),
              cfg, ws, ds, ratio, (unsigned long long)seg->first);
}
