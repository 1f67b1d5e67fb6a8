/* ah_profile.c: a report from an earlier run, loaded as a warm start (tuner/ah_report.h).
 *
 * Communicator ids are random per run, so entries are keyed by the communicator's shape (ranks,
 * nodes) and the key (collective, size bin). A profile from another topology or NCCL version is
 * refused whole: a configuration measured on different hardware or a different cost model is a
 * guess, and autoha never applies guesses. Lookups are a binary search over entries sorted once at
 * load, so the decision path neither locks nor allocates. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_jansson.h"
#include "ah_log.h"
#include "ah_report.h"

static int entry_cmp(const void *a, const void *b) {
  const ah_profile_entry_t *x = a, *y = b;
  if (x->nranks != y->nranks) return x->nranks < y->nranks ? -1 : 1;
  if (x->nnodes != y->nnodes) return x->nnodes < y->nnodes ? -1 : 1;
  if (x->coll != y->coll) return x->coll < y->coll ? -1 : 1;
  if (x->bin != y->bin) return x->bin < y->bin ? -1 : 1;
  return 0;
}

static double mean_us(const ah_report_stat_t *s) {
  return s->timed > 0 ? s->us_total / (double)s->timed : NAN;
}

/* The config a key of a report recommends, or 0 when it recommends NCCL's default. */
static int key_choice(const ah_report_key_t *k, ah_config_t *cfg_p, double *us_p, double *def_p) {
  double def = mean_us(&k->nccl_default);
  if (k->tuned && k->tune.state == AH_TUNE_CONVERGED &&
      !ah_config_equal(&k->tune.winner, &k->nccl_default.cfg)) {
    /* The engine's own comparison is the robust one; a winner that did not beat the default is
     * reported as the default by the engine, so this is a real improvement. */
    if (isfinite(k->tune.winner_us) && isfinite(k->tune.default_us) &&
        k->tune.winner_us > k->tune.default_us)
      return 0;
    *cfg_p = k->tune.winner;
    *us_p = k->tune.winner_us;
    *def_p = isfinite(k->tune.default_us) ? k->tune.default_us : def;
    return 1;
  }
  if (k->source == AH_SOURCE_DEFAULT || k->applied.timed == 0) return 0;
  double app = mean_us(&k->applied);
  if (isfinite(def) && app > def) return 0;
  *cfg_p = k->applied.cfg;
  *us_p = app;
  *def_p = def;
  return 1;
}

/* Builds the profile of a parsed report. Returns NULL on allocation failure. */
static ah_profile_t *profile_build(const ah_report_t *r) {
  size_t cap = 0;
  for (int c = 0; c < r->ncomms; c++) cap += (size_t)r->comms[c].nkeys;
  ah_profile_t *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->entries = calloc(cap ? cap : 1, sizeof *p->entries);
  uint64_t *calls = calloc(cap ? cap : 1, sizeof *calls);
  if (!p->entries || !calls) {
    free(calls);
    ah_profile_free(p);
    return NULL;
  }
  for (int c = 0; c < r->ncomms; c++) {
    const ah_report_comm_t *cm = &r->comms[c];
    for (int i = 0; i < cm->nkeys; i++) {
      const ah_report_key_t *k = &cm->keys[i];
      ah_profile_entry_t e;
      memset(&e, 0, sizeof e);
      e.nranks = cm->nranks;
      e.nnodes = cm->nnodes;
      e.coll = k->coll;
      e.bin = k->bin;
      if (!key_choice(k, &e.cfg, &e.us, &e.default_us)) continue;
      /* The same shape and key in several communicators: the busiest one wins. */
      int j;
      for (j = 0; j < p->nentries; j++)
        if (entry_cmp(&p->entries[j], &e) == 0) break;
      if (j < p->nentries) {
        if (k->calls > calls[j]) p->entries[j] = e, calls[j] = k->calls;
        continue;
      }
      p->entries[p->nentries] = e;
      calls[p->nentries++] = k->calls;
    }
  }
  free(calls);
  qsort(p->entries, (size_t)p->nentries, sizeof *p->entries, entry_cmp);
  return p;
}

int ah_profile_load(const char *path, size_t max_bytes, int nccl_version, const char *topo,
                    ah_profile_t **p_p) {
  char err[512];
  ah_report_t *r = NULL;
  if (!ah_jansson_ready()) return -1; /* its one error says no profile is read */
  if (ah_report_read_max(path, max_bytes, &r, err, sizeof err) != 0) {
    ah_log(AH_LOG_ERROR, "profile %s not loaded: %s%s", path, err,
           strncmp(err, "larger than", 11) == 0 ? " (the bound is AUTOHA_PROFILE_MAX_MB)" : "");
    return -1;
  }
  if (nccl_version && r->nccl_version != nccl_version) {
    char a[32], b[32];
    ah_report_version_text(r->nccl_version, 1, a, sizeof a);
    ah_report_version_text(nccl_version, 1, b, sizeof b);
    ah_log(AH_LOG_ERROR,
           "profile %s not loaded: it was measured with NCCL %s and this job runs "
           "NCCL %s",
           path, a, b);
    goto fail_report;
  }
  char why[1024];
  if (topo && *topo && ah_report_topology_diff(topo, r->topo, why, sizeof why) != 0) {
    ah_log(AH_LOG_ERROR,
           "profile %s not loaded: it was measured on another topology (%s; 'here' is "
           "this job, 'there' the profile)",
           path, why);
    goto fail_report;
  }
  ah_profile_t *p = profile_build(r);
  if (!p) {
    ah_log(AH_LOG_ERROR, "profile %s not loaded: out of memory", path);
    goto fail_report;
  }
  ah_report_free(r);
  *p_p = p;
  return 0;
fail_report:
  ah_report_free(r);
  return -1;
}

const ah_profile_entry_t *ah_profile_lookup(const ah_profile_t *p, int nranks, int nnodes, int coll,
                                            int bin) {
  if (!p || p->nentries == 0) return NULL;
  ah_profile_entry_t key;
  memset(&key, 0, sizeof key);
  key.nranks = nranks;
  key.nnodes = nnodes;
  key.coll = coll;
  key.bin = bin;
  return bsearch(&key, p->entries, (size_t)p->nentries, sizeof *p->entries, entry_cmp);
}

void ah_profile_free(ah_profile_t *p) {
  if (!p) return;
  free(p->entries);
  free(p);
}
