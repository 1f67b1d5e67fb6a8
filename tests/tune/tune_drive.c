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

double tune_rng_uniform(uint64_t *s) {
  return ((tune_rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
}

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

static void tune_ops_next(void *eng, uint64_t first, ah_segment_t *seg_p) {
  ah_tune_next(eng, first, seg_p);
}
static void tune_ops_observe(void *eng, uint64_t index, double us) {
  ah_tune_observe(eng, index, us);
}
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

/* One key as the driver runs it: its engine, its copy of the committed schedule, its results in
 * flight (due at a step of the driver's clock: the key's own call index alone, the stream's call
 * index when keys are interleaved). */
typedef struct {
  const tune_engine_ops_t *ops;
  void *eng;
  tune_surface_fn f;
  void *arg;
  const tune_drive_opts_t *o;
  uint64_t rng, nrng, srng, horizon, i;
  int lag, cap, nseg, nfl, flcap, done;
  ah_segment_t *segs;
  tune_inflight_t *fl;
  tune_drive_result_t *r;
} tune_key_t;

/* Sets up key k. Returns 0, or -1 when out of memory. */
static int tune_key_init(tune_key_t *k, const tune_engine_ops_t *ops, void *eng, tune_surface_fn f,
                         void *arg, const tune_drive_opts_t *o, tune_drive_result_t *r_p) {
  memset(k, 0, sizeof(*k));
  k->ops = ops;
  k->eng = eng;
  k->f = f;
  k->arg = arg;
  k->o = o;
  k->r = r_p;
  k->rng = o->seed * 0x2545F4914F6CDD1DULL + 7;
  k->nrng = o->seed * 0x9E3779B97F4A7C15ULL + 0x1234567; /* the noise's own stream */
  k->srng = o->seed * 0xD1B54A32D192ED03ULL + 0x7654321; /* the arrival skew's own stream */
  k->lag = o->lag + (o->skew > 0 && o->skew_min_signal ? o->skew_gather_lag : 0);
  k->cap = 4096;
  k->flcap = k->lag + 64;
  k->segs = calloc((size_t)k->cap, sizeof(*k->segs));
  k->fl = calloc((size_t)k->flcap, sizeof(*k->fl));
  memset(r_p, 0, sizeof(*r_p));
  r_p->pinned_at = UINT64_MAX;
  return k->segs && k->fl ? 0 : -1;
}

static void tune_key_free(tune_key_t *k) {
  k->r->calls = k->i;
  free(k->fl);
  free(k->segs);
  k->fl = NULL;
  k->segs = NULL;
}

/* Runs the key's next call at driver step `now`; its result falls due at now + lag. Returns 0, or
 * -1 when the key cannot go on (schedule full, or max_calls run). */
static int tune_key_call(tune_key_t *k, uint64_t now) {
  const tune_drive_opts_t *o = k->o;
  tune_drive_result_t *r_p = k->r;
  uint64_t i = k->i;
  if (i >= o->max_calls) return -1;
  if (k->ops->reopened && k->ops->reopened(k->eng) && k->nseg > 0 &&
      k->segs[k->nseg - 1].count == AH_SCHED_FOREVER) {
    /* cut the forever segment short at the next index */
    k->horizon = i;
    if (k->segs[k->nseg - 1].first >= i) k->nseg--;
    else k->segs[k->nseg - 1].count = i - k->segs[k->nseg - 1].first;
    r_p->reopens_seen++;
    r_p->pinned_at = UINT64_MAX;
  }
  if (i >= k->horizon) {
    if (k->nseg == k->cap) return -1; /* the test will see too few calls */
    k->ops->next(k->eng, k->horizon, &k->segs[k->nseg]);
    if (k->segs[k->nseg].count == AH_SCHED_FOREVER) {
      k->horizon = UINT64_MAX;
      r_p->pinned_at = k->segs[k->nseg].first;
    } else {
      k->horizon = k->segs[k->nseg].first + k->segs[k->nseg].count;
    }
    k->nseg++;
    r_p->segments++;
  }
  const ah_segment_t *s = &k->segs[k->nseg - 1];
  while (s > k->segs && s->first > i) s--;
  double us = k->f(k->arg, &s->config, i);
  if (k->horizon != UINT64_MAX) r_p->search_us += us;
  if (o->noise) {
    us = o->noise(o->noise_arg, us, &k->nrng);
  } else {
    us *= exp(o->sigma * tune_rng_normal(&k->rng));
    if (tune_rng_uniform(&k->rng) < o->outlier_rate) us *= o->outlier_factor;
  }
  us = tune_drive_skewed(o, us, &k->srng);
  r_p->final = s->config;
  int lost = o->loss > 0 && tune_rng_uniform(&k->rng) < o->loss;
  if (!lost && k->nfl < k->flcap)
    k->fl[k->nfl++] = (tune_inflight_t){i, us, now + (uint64_t)k->lag};
  k->i++;
  return 0;
}

/* Delivers the key's results due by step `now`, in random order when shuffling. Returns 1 when
 * the key is done: pinned, its results drained, not re-opened (with stop_when_pinned). */
static int tune_key_deliver(tune_key_t *k, uint64_t now) {
  for (;;) {
    int due[128], nd = 0;
    for (int j = 0; j < k->nfl && nd < 128; j++)
      if (k->fl[j].due <= now) due[nd++] = j;
    if (nd == 0) break;
    int pick = k->o->shuffle ? due[tune_rng_next(&k->rng) % (uint64_t)nd] : due[0];
    k->ops->observe(k->eng, k->fl[pick].index, k->fl[pick].us);
    k->fl[pick] = k->fl[--k->nfl];
  }
  return k->o->stop_when_pinned && k->horizon == UINT64_MAX && k->nfl == 0 &&
         !(k->ops->reopened && k->ops->reopened(k->eng));
}

void tune_drive_run_engine(const tune_engine_ops_t *ops, void *t, tune_surface_fn f, void *arg,
                           const tune_drive_opts_t *o, tune_drive_result_t *r_p) {
  tune_key_t k;
  if (tune_key_init(&k, ops, t, f, arg, o, r_p) == 0)
    while (tune_key_call(&k, k.i) == 0 && !tune_key_deliver(&k, k.i - 1)) {}
  tune_key_free(&k);
}

int tune_drive_run_comm(tune_comm_key_t *keys, int nkeys, const tune_comm_ops_t *cops, void *user) {
  tune_key_t *ks = calloc((size_t)(nkeys > 0 ? nkeys : 1), sizeof(*ks));
  int *state =
      calloc((size_t)(nkeys > 0 ? nkeys : 1), sizeof(*state)); /* 0 waiting, 1 running, 2 done */
  int rc = ks && state ? 0 : -1;
  uint64_t now = 0;
  int left = nkeys, rr = 0;
  while (rc == 0 && left > 0) {
    /* Keys the job calls for the first time by now start, with what the others learned so far. */
    uint64_t next_arrival = UINT64_MAX;
    int running = 0;
    for (int j = 0; j < nkeys; j++) {
      if (state[j] == 0 && keys[j].arrive <= now) {
        void *eng = cops->start(user, j);
        if (!eng || tune_key_init(&ks[j], cops->ops, eng, keys[j].f, keys[j].arg, &keys[j].o,
                                  &keys[j].r) != 0) {
          rc = -1;
          break;
        }
        state[j] = 1;
      }
      if (state[j] == 0 && keys[j].arrive < next_arrival) next_arrival = keys[j].arrive;
      if (state[j] == 1) running++;
    }
    if (rc != 0) break;
    if (running == 0) { /* only pinned keys run until the next new one: nothing to learn */
      now = next_arrival;
      continue;
    }
    /* The stream's next call: the next running key in turn. */
    while (state[rr % nkeys] != 1) rr++;
    int j = rr++ % nkeys;
    if (tune_key_call(&ks[j], now) != 0) {
      state[j] = 2;
      left--;
      tune_key_free(&ks[j]);
      cops->done(user, j);
    }
    for (int q = 0; q < nkeys; q++)
      if (state[q] == 1 && tune_key_deliver(&ks[q], now)) {
        state[q] = 2;
        left--;
        tune_key_free(&ks[q]);
        cops->done(user, q);
      }
    now++;
  }
  for (int q = 0; q < nkeys; q++)
    if (state && state[q] == 1) tune_key_free(&ks[q]);
  free(ks);
  free(state);
  return rc;
}
