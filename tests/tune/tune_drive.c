/* tune_drive.c: see tune_drive.h. The driver keeps its own copy of the committed schedule (the
 * engine must never need to be asked twice for an index) and a queue of results in flight. */
#include "tune_drive.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t tune_rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double tune_rng_uniform(uint64_t *s) { return ((tune_rng_next(s) >> 11) + 0.5) / 9007199254740992.0; }

double tune_rng_normal(uint64_t *s) {
  double u1 = tune_rng_uniform(s), u2 = tune_rng_uniform(s);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void tune_drive_opts_default(tune_drive_opts_t *o) {
  memset(o, 0, sizeof(*o));
  o->sigma = 0.02;
  o->outlier_rate = 0.01;
  o->outlier_factor = 1.5;
  o->lag = 2;
  o->shuffle = 1;
  o->seed = 1;
  o->max_calls = 1000;
  o->stop_when_pinned = 1;
}

typedef struct {
  uint64_t index;
  double us;
  uint64_t due;
} tune_inflight_t;

static void tune_ops_next(void *eng, uint64_t first, ah_segment_t *seg_p) { ah_tune_next(eng, first, seg_p); }
static void tune_ops_observe(void *eng, uint64_t index, double us) { ah_tune_observe(eng, index, us); }
static int tune_ops_reopened(const void *eng) { return ah_tune_reopened(eng); }

void tune_drive_run(ah_tune_t *t, tune_surface_fn f, void *arg, const tune_drive_opts_t *o,
                    tune_drive_result_t *r_p) {
  static const tune_engine_ops_t ops = {tune_ops_next, tune_ops_observe, tune_ops_reopened};
  tune_drive_run_engine(&ops, t, f, arg, o, r_p);
}

/* The duration the engine is told for a call whose configuration ran `us` (noise included): the
 * leader's own, which waits for the last rank to arrive, or with skew_min_signal the shortest
 * across ranks, which is the last rank's and waits for no one. Note that the skew is drawn from
 * its own stream, so runs with and without it see the same configuration noise. */
static double tune_drive_skewed(const tune_drive_opts_t *o, double us, uint64_t *srng) {
  if (o->skew <= 0 || o->ranks < 2) return us;
  double lead = 0, late = 0;
  for (int r = 0; r < o->ranks; r++) {
    double a = o->skew * o->skew_ref_us * tune_rng_uniform(srng);
    if (r == 0) lead = a;
    if (a > late) late = a;
  }
  return o->skew_min_signal ? us : us + (late - lead);
}

void tune_drive_run_engine(const tune_engine_ops_t *ops, void *t, tune_surface_fn f, void *arg,
                           const tune_drive_opts_t *o, tune_drive_result_t *r_p) {
  uint64_t rng = o->seed * 0x2545F4914F6CDD1DULL + 7;
  uint64_t nrng = o->seed * 0x9E3779B97F4A7C15ULL + 0x1234567; /* the noise's own stream */
  uint64_t srng = o->seed * 0xD1B54A32D192ED03ULL + 0x7654321; /* the arrival skew's own stream */
  int lag = o->lag + (o->skew > 0 && o->skew_min_signal ? o->skew_gather_lag : 0);
  int cap = 4096, nseg = 0, nfl = 0;
  ah_segment_t *segs = calloc((size_t)cap, sizeof(*segs));
  tune_inflight_t *fl = calloc((size_t)lag + 64, sizeof(*fl));
  int flcap = lag + 64;
  uint64_t horizon = 0;
  memset(r_p, 0, sizeof(*r_p));
  r_p->pinned_at = UINT64_MAX;
  uint64_t i;
  for (i = 0; i < o->max_calls; i++) {
    if (ops->reopened && ops->reopened(t) && nseg > 0 && segs[nseg - 1].count == AH_SCHED_FOREVER) {
      /* cut the forever segment short at the next index */
      horizon = i;
      if (segs[nseg - 1].first >= i) nseg--;
      else segs[nseg - 1].count = i - segs[nseg - 1].first;
      r_p->reopens_seen++;
      r_p->pinned_at = UINT64_MAX;
    }
    if (i >= horizon) {
      if (nseg == cap) break; /* the test will see too few calls */
      ops->next(t, horizon, &segs[nseg]);
      if (segs[nseg].count == AH_SCHED_FOREVER) {
        horizon = UINT64_MAX;
        r_p->pinned_at = segs[nseg].first;
      } else {
        horizon = segs[nseg].first + segs[nseg].count;
      }
      nseg++;
      r_p->segments++;
    }
    const ah_segment_t *s = &segs[nseg - 1];
    while (s > segs && s->first > i) s--;
    double us = f(arg, &s->config, i);
    if (horizon != UINT64_MAX) r_p->search_us += us;
    if (o->noise) {
      us = o->noise(o->noise_arg, us, &nrng);
    } else {
      us *= exp(o->sigma * tune_rng_normal(&rng));
      if (tune_rng_uniform(&rng) < o->outlier_rate) us *= o->outlier_factor;
    }
    us = tune_drive_skewed(o, us, &srng);
    r_p->final = s->config;
    int lost = o->loss > 0 && tune_rng_uniform(&rng) < o->loss;
    if (!lost && nfl < flcap) fl[nfl++] = (tune_inflight_t){i, us, i + (uint64_t)lag};
    /* deliver what is due, in random order when shuffling */
    for (;;) {
      int due[128], nd = 0;
      for (int k = 0; k < nfl && nd < 128; k++)
        if (fl[k].due <= i) due[nd++] = k;
      if (nd == 0) break;
      int pick = o->shuffle ? due[tune_rng_next(&rng) % (uint64_t)nd] : due[0];
      ops->observe(t, fl[pick].index, fl[pick].us);
      fl[pick] = fl[--nfl];
    }
    if (o->stop_when_pinned && horizon == UINT64_MAX && nfl == 0 && !(ops->reopened && ops->reopened(t))) {
      i++;
      break;
    }
  }
  r_p->calls = i;
  free(fl);
  free(segs);
}
