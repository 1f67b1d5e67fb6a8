/* autoccl_search.c: the paper's pseudo-code of AutoCCL (autoccl_search.h). NCCL's default is
 * profiled first (it is what the job runs until something beats it); then the subspaces take
 * turns, one profiled point each: a subspace starts at its starting point and moves along one
 * resource axis at a time, by a step that grows with the bandwidth it just gained, and counts the
 * axis tuned when neither direction gains. Points already profiled are looked up, not run again
 * (the paper's history table). The best profiled point wins — no re-measurement against the
 * default.
 *
 * While a profile's results are in flight the job keeps running the best point so far (the
 * config table's entry); those calls count as calls spent, as they do for autoha's engine. */
#include "autoccl_search.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define AC_MAX_SAMPLES 32
#define AC_ABANDON_EARLY 3.0 /* a subspace this much slower than the best after ... */
#define AC_ABANDON_EARLY_N 5 /* ... this many of its profiles is dropped */
#define AC_ABANDON_LATE 1.5  /* ... and this much slower once 10% of the budget is spent */

typedef struct {
  ah_config_t cfg;
  int sub; /* subspace, or -1 for NCCL's default */
  int pos[AH_MAX_DIMS];
  int n, committed;
  double us[AC_MAX_SAMPLES];
} ac_probe_t;

typedef struct {
  int opt;                /* best probe of the subspace, -1 before its starting point */
  int start[AH_MAX_DIMS]; /* starting point */
  int dim_i, dir, step, flipped, tuned_dims, profiles, done;
} ac_sub_t;

typedef struct {
  uint64_t first, count;
  int probe;
} ac_seg_t;

struct autoccl {
  ah_space_t space;
  autoccl_params_t prm;
  ac_probe_t *probes;
  int nprobes, capprobes;
  ac_seg_t *segs;
  int nsegs, capsegs;
  ac_sub_t sub[AH_MAX_SUBSPACES];
  int searchable[AH_MAX_DIMS], nsearch;
  int def, best, active, rr, spent, pinned;
  uint64_t rng;
};

void autoccl_params_default(autoccl_params_t *p) {
  p->budget_calls = 180;
  p->window = 4;
  p->native_start = 0;
  p->seed = 1;
}

static uint64_t ac_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static int cmp_us(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The paper's score of a profile: the mean of its fastest 75% of samples. */
static double ac_score(const ac_probe_t *p) {
  double s[AC_MAX_SAMPLES];
  int n = p->n;
  if (n <= 0) return INFINITY;
  memcpy(s, p->us, sizeof(double) * (size_t)n);
  qsort(s, (size_t)n, sizeof(double), cmp_us);
  int k = (3 * n + 3) / 4;
  double sum = 0;
  for (int i = 0; i < k; i++) sum += s[i];
  return sum / k;
}

static int ac_cfg_same(const ah_config_t *a, const ah_config_t *b) {
  if (a->algo != b->algo || a->proto != b->proto || a->ndims != b->ndims) return 0;
  for (int d = 0; d < a->ndims && d < AH_MAX_DIMS; d++)
    if (a->res[d] != b->res[d]) return 0;
  return 1;
}

static int ac_probe_get(autoccl_t *a, int sub, const int *pos) {
  ah_config_t c;
  memset(&c, 0, sizeof(c));
  if (sub < 0) {
    c = a->space.start;
  } else {
    c.algo = a->space.sub[sub].algo;
    c.proto = a->space.sub[sub].proto;
    c.ndims = a->space.ndims;
    for (int d = 0; d < a->space.ndims; d++)
      c.res[d] =
          a->space.dims[d].nvalues > 0 ? a->space.dims[d].values[pos[d]] : a->space.start.res[d];
  }
  for (int i = 0; i < a->nprobes; i++)
    if (a->probes[i].sub == sub && ac_cfg_same(&a->probes[i].cfg, &c)) return i;
  if (a->nprobes == a->capprobes) {
    int cap = a->capprobes ? 2 * a->capprobes : 32;
    ac_probe_t *np = realloc(a->probes, (size_t)cap * sizeof(*np));
    if (!np) return -1;
    a->probes = np;
    a->capprobes = cap;
  }
  ac_probe_t *p = &a->probes[a->nprobes];
  memset(p, 0, sizeof(*p));
  p->cfg = c;
  p->sub = sub;
  if (pos) memcpy(p->pos, pos, sizeof(p->pos));
  return a->nprobes++;
}

static void ac_pin(autoccl_t *a) {
  a->pinned = 1;
  a->active = -1;
}

/* Drops subspaces left far behind the best (the paper's two abandonment rules). */
static void ac_abandon(autoccl_t *a) {
  double lb = ac_score(&a->probes[a->best]);
  for (int s = 0; s < a->space.nsub; s++) {
    ac_sub_t *ss = &a->sub[s];
    if (ss->done || ss->opt < 0) continue;
    double l = ac_score(&a->probes[ss->opt]);
    if ((ss->profiles >= AC_ABANDON_EARLY_N && l > AC_ABANDON_EARLY * lb) ||
        (a->spent >= a->prm.budget_calls / 10 && l > AC_ABANDON_LATE * lb))
      ss->done = 1;
  }
}

/* One descent step's verdict on probe p of subspace s (profiled, or found in the history). */
static void ac_judge(autoccl_t *a, int s, int p) {
  ac_sub_t *ss = &a->sub[s];
  ss->profiles++;
  if (ac_score(&a->probes[p]) < ac_score(&a->probes[a->best])) a->best = p;
  if (ss->opt < 0) {
    ss->opt = p;
    return;
  }
  double so = ac_score(&a->probes[ss->opt]), sp = ac_score(&a->probes[p]);
  if (sp < so) {
    /* Bandwidth gain relative to the new point sets the next step along the same direction. */
    double gain = 1.0 - sp / so;
    int nv = a->space.dims[a->searchable[ss->dim_i]].nvalues;
    ss->step = (int)lround(gain * nv);
    if (ss->step < 1) ss->step = 1;
    ss->opt = p;
    return;
  }
  if (!ss->flipped) { /* the other direction of the same axis, from the smallest step */
    ss->flipped = 1;
    ss->dir = -ss->dir;
    ss->step = 1;
    return;
  }
  ss->tuned_dims++;
  ss->dim_i = (ss->dim_i + 1) % a->nsearch;
  ss->dir = 1;
  ss->step = 1;
  ss->flipped = 0;
  if (ss->tuned_dims >= a->nsearch) ss->done = 1;
}

/* The next point to profile: the next subspace in turn takes one step (points already profiled
 * are judged at once, at no cost). Pins the best when every subspace is done. */
static void ac_plan(autoccl_t *a) {
  for (int guard = 0; guard < 100000; guard++) {
    int s = -1;
    for (int k = 1; k <= a->space.nsub; k++) {
      int c = (a->rr + k) % a->space.nsub;
      if (!a->sub[c].done) {
        s = c;
        break;
      }
    }
    if (s < 0) {
      ac_pin(a);
      return;
    }
    a->rr = s;
    ac_sub_t *ss = &a->sub[s];
    int pos[AH_MAX_DIMS];
    if (ss->opt < 0) {
      memcpy(pos, ss->start, sizeof(pos));
    } else {
      memcpy(pos, a->probes[ss->opt].pos, sizeof(pos));
      int d = a->searchable[ss->dim_i], nv = a->space.dims[d].nvalues;
      int j = pos[d] + ss->dir * ss->step;
      if (j < 0) j = 0;
      if (j > nv - 1) j = nv - 1;
      if (j == pos[d]) { /* at the end of the axis: that direction cannot gain */
        int opt = ss->opt;
        ss->profiles--;
        ac_judge(a, s, opt);
        continue;
      }
      pos[d] = j;
    }
    int p = ac_probe_get(a, s, pos);
    if (p < 0) {
      ac_pin(a);
      return;
    }
    if (a->probes[p].n >= a->prm.window) {
      ac_judge(a, s, p);
      ac_abandon(a);
      continue;
    }
    a->active = p;
    return;
  }
  ac_pin(a);
}

autoccl_t *autoccl_create(const ah_space_t *space, const autoccl_params_t *prm) {
  autoccl_t *a = calloc(1, sizeof(*a));
  if (!a) return NULL;
  a->space = *space;
  if (prm) a->prm = *prm;
  else autoccl_params_default(&a->prm);
  if (a->prm.window < 1) a->prm.window = 1;
  if (a->prm.window > AC_MAX_SAMPLES) a->prm.window = AC_MAX_SAMPLES;
  a->rng = a->prm.seed * 0x2545F4914F6CDD1DULL + 11;
  for (int d = a->space.start.ndims; d < AH_MAX_DIMS; d++) a->space.start.res[d] = 0;
  a->space.start.ndims = a->space.ndims;
  for (int d = 0; d < a->space.ndims; d++)
    if (a->space.dims[d].nvalues >= 2) a->searchable[a->nsearch++] = d;
  for (int s = 0; s < a->space.nsub; s++) {
    ac_sub_t *ss = &a->sub[s];
    ss->opt = -1;
    ss->dir = 1;
    ss->step = 1;
    ss->done = a->nsearch == 0;
    for (int d = 0; d < a->space.ndims; d++) {
      const ah_dim_t *dim = &a->space.dims[d];
      if (dim->nvalues <= 0) continue;
      if (!a->prm.native_start) {
        ss->start[d] = (int)(ac_rand(&a->rng) % (uint64_t)dim->nvalues);
        continue;
      }
      /* NCCL's resources; 0 ("NCCL's own") maps as in autoha's engine: channels at the top. */
      int64_t v = a->space.start.res[d];
      int bi = d == AH_DIM_NCHANNELS ? dim->nvalues - 1 : dim->nvalues / 2;
      double bd = INFINITY;
      for (int k = 0; v > 0 && k < dim->nvalues; k++) {
        double dd = fabs(log((double)dim->values[k] / (double)v));
        if (dd < bd) {
          bd = dd;
          bi = k;
        }
      }
      ss->start[d] = bi;
    }
  }
  a->def = ac_probe_get(a, -1, NULL);
  if (a->def < 0) {
    autoccl_destroy(a);
    return NULL;
  }
  a->best = a->def;
  a->active = a->def;
  a->rr = a->space.nsub - 1;
  if (a->space.nsub == 0 || a->nsearch == 0) ac_pin(a);
  return a;
}

void autoccl_destroy(autoccl_t *a) {
  if (!a) return;
  free(a->probes);
  free(a->segs);
  free(a);
}

static void ac_seg_push(autoccl_t *a, uint64_t first, uint64_t count, int probe) {
  if (a->nsegs == a->capsegs) {
    int cap = a->capsegs ? 2 * a->capsegs : 64;
    ac_seg_t *ns = realloc(a->segs, (size_t)cap * sizeof(*ns));
    if (!ns) return;
    a->segs = ns;
    a->capsegs = cap;
  }
  a->segs[a->nsegs++] = (ac_seg_t){first, count, probe};
}

void autoccl_next(autoccl_t *a, uint64_t first, ah_segment_t *seg_p) {
  memset(seg_p, 0, sizeof(*seg_p));
  seg_p->first = first;
  if (!a->pinned && a->spent >= a->prm.budget_calls) ac_pin(a);
  if (a->pinned) {
    seg_p->count = AH_SCHED_FOREVER;
    seg_p->config = a->probes[a->best].cfg;
    seg_p->source = a->best == a->def ? AH_SOURCE_DEFAULT : AH_SOURCE_TUNED;
    ac_seg_push(a, first, UINT64_MAX, a->best);
    return;
  }
  int p = a->best, count = 1;
  if (a->active >= 0 && a->probes[a->active].committed < a->prm.window) {
    p = a->active;
    count = a->prm.window - a->probes[p].committed;
  }
  if (count > a->prm.budget_calls - a->spent) count = a->prm.budget_calls - a->spent;
  if (count < 1) count = 1;
  a->probes[p].committed += count;
  a->spent += count;
  ac_seg_push(a, first, (uint64_t)count, p);
  seg_p->count = (uint64_t)count;
  seg_p->config = a->probes[p].cfg;
  seg_p->source = p == a->def ? AH_SOURCE_DEFAULT : AH_SOURCE_TUNED;
}

void autoccl_observe(autoccl_t *a, uint64_t index, double us) {
  int s = -1;
  for (int lo = 0, hi = a->nsegs - 1; lo <= hi;) {
    int mid = (lo + hi) / 2;
    if (a->segs[mid].first <= index) {
      s = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  if (s < 0 || a->pinned || !(us > 0)) return;
  if (a->segs[s].count != UINT64_MAX && index - a->segs[s].first >= a->segs[s].count) return;
  ac_probe_t *pr = &a->probes[a->segs[s].probe];
  if (pr->n >= AC_MAX_SAMPLES) return;
  pr->us[pr->n++] = us;
  int p = a->segs[s].probe;
  if (p != a->active || pr->n < a->prm.window) return;
  a->active = -1;
  if (p != a->def) {
    ac_judge(a, pr->sub, p);
    ac_abandon(a);
  }
  ac_plan(a);
}
