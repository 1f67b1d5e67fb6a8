/* autoccl_faithful.c: the peer of autoccl_faithful.h, written from AutoCCL's public code (the
 * commit named there). AutoCCL's tuner thread spins: every time a result comes in or a call asks
 * for its configuration, the combined job is asked for candidates until it has none to give, and
 * each sub-job hands out its next batch only once all of its earlier calls have reported. Here
 * that is `acf_spin`, run after every result and before every call. What the job runs, in order,
 * is the queue of candidates handed out (one segment per candidate).
 *
 * Where AutoCCL's query would block (every sub-job waiting for results, nothing queued), the
 * bench's driver cannot block: the call runs the combined job's optimum so far, and its result is
 * not recorded (AutoCCL would have run nothing). Those calls count as calls spent, as every
 * search's do in the bench. */
#include "autoccl_faithful.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ACF_HALF_PI 1.57079632679489661923

typedef struct {
  int sub;                 /* sub-job, -1: NCCL's default where no sub-job lists it */
  int8_t pos[AH_MAX_DIMS]; /* index into each dimension's values */
  int n, cap;
  double *us;
  uint8_t *fwd; /* 1: the sample reached the sub-job too (recorded after warm-up and native) */
} acf_cand_t;

typedef struct {
  int cand, dim, positive;
} acf_point_t;

typedef struct {
  int c0, nc;       /* candidates [c0, c0 + nc) */
  int *rest, nrest; /* unvisited, in candidate order (restCandidates) */
  int pre, train, asked;
  int expire, profiled; /* calls handed out, results received */
  int by_rand, stride, visit;
  int optimum, optimum_based;
  int done, convergence, finished; /* finished: the combined job counts it done */
  /* coordinate descent */
  int retry, conv_count, cur, dim, positive;
  double lr;
  acf_point_t *next;
  int nnext;
  uint64_t rng;
} acf_sub_t;

typedef struct {
  int cand, calls; /* calls < 0: the sub-job's optimum, forever */
} acf_item_t;

typedef struct {
  uint64_t first, count;
  int cand, filler;
} acf_seg_t;

struct acf {
  ah_space_t space;
  acf_params_t prm;
  acf_cand_t *cands;
  int ncands;
  acf_sub_t *subs;
  int nsubs;
  int dims[AH_MAX_DIMS], nd; /* the dimensions the descent moves along */
  int start, optimum;
  int expire, profiled, dropped, rr, done;
  acf_item_t *queue, *tmp;
  int qhead, qtail, qcap, ntmp, captmp;
  acf_seg_t *segs;
  int nsegs, capsegs;
  acf_point_t *nbuf; /* a step's neighbours */
  int *order;        /* scratch for the neighbour search */
  double *len, *ang;
};

void acf_params_default(acf_params_t *p) {
  p->warmup_steps = 5;
  p->native_steps = 1;
  p->pretrain_steps = 20;
  p->train_steps = 50;
  p->repeat = 1;
  p->optimum_expire = 10;
  p->topk = 3;
  p->retry = 5;
  p->seed = 1;
}

static uint64_t acf_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static int cmp_us(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* meanOfTopPercent(75): the mean of the fastest ceil(75%) of the samples (the sub-job's own, or
 * every one the combined job recorded). INFINITY without samples. */
static double acf_score(const acf_t *a, int c, int fwd_only) {
  const acf_cand_t *k = &a->cands[c];
  double stack[64], *s = k->n <= 64 ? stack : malloc(sizeof(double) * (size_t)k->n);
  if (!s) return INFINITY;
  int n = 0;
  for (int i = 0; i < k->n; i++)
    if (!fwd_only || k->fwd[i]) s[n++] = k->us[i];
  double r = INFINITY;
  if (n > 0) {
    qsort(s, (size_t)n, sizeof(double), cmp_us);
    int m = (int)ceil(0.75 * n);
    double sum = 0;
    for (int i = 0; i < m; i++) sum += s[i];
    r = sum / m;
  }
  if (s != stack) free(s);
  return r;
}

static void acf_config(const acf_t *a, int c, ah_config_t *cfg) {
  const acf_cand_t *k = &a->cands[c];
  if (k->sub < 0) {
    *cfg = a->space.start;
    return;
  }
  memset(cfg, 0, sizeof(*cfg));
  cfg->algo = a->space.sub[k->sub].algo;
  cfg->proto = a->space.sub[k->sub].proto;
  cfg->ndims = a->space.ndims;
  for (int d = 0; d < a->space.ndims; d++)
    cfg->res[d] =
        a->space.dims[d].nvalues > 0 ? a->space.dims[d].values[k->pos[d]] : a->space.start.res[d];
}

static double acf_value(const acf_t *a, int c, int d) {
  const ah_dim_t *dim = &a->space.dims[d];
  return dim->nvalues > 0 ? (double)dim->values[a->cands[c].pos[d]] : 0.0;
}

static int acf_push(acf_item_t **v, int *n, int *cap, acf_item_t it) {
  if (*n == *cap) {
    int nc = *cap ? 2 * *cap : 32;
    acf_item_t *nv = realloc(*v, (size_t)nc * sizeof(*nv));
    if (!nv) return -1;
    *v = nv;
    *cap = nc;
  }
  (*v)[(*n)++] = it;
  return 0;
}

static void acf_tmp(acf_t *a, int cand, int calls) {
  (void)acf_push(&a->tmp, &a->ntmp, &a->captmp, (acf_item_t){cand, calls});
}

static void acf_rest_remove(acf_sub_t *j, int c) {
  for (int i = 0; i < j->nrest; i++)
    if (j->rest[i] == c) {
      memmove(&j->rest[i], &j->rest[i + 1], sizeof(int) * (size_t)(j->nrest - i - 1));
      j->nrest--;
      return;
    }
}

/* getRandIndex: uniform over the sub-job's candidates, visited or not. */
static int acf_rand_index(acf_sub_t *j) { return (int)(acf_rand(&j->rng) % (uint64_t)j->nc); }

/* hasProfiledAll. */
static int acf_profiled_all(const acf_sub_t *j) {
  return j->profiled >= (j->asked < j->expire ? j->asked : j->expire);
}

/* updateOptimum of a sub-job: its best record. */
static void acf_sub_update_optimum(acf_t *a, acf_sub_t *j) {
  double best = INFINITY;
  for (int c = j->c0; c < j->c0 + j->nc; c++) {
    double s = acf_score(a, c, 1);
    if (s < best) {
      best = s;
      j->optimum = c;
    }
  }
  j->optimum_based = j->profiled;
}

/* updateStatus: did one of the last step's points beat the current point? Moves there (the gain
 * sets lr), or turns to the axis' other direction, then the next axis. Returns 0 once 2 x dims
 * directions in a row failed (equality, as the code tests it: a count past it goes on). */
static int acf_update_status(acf_t *a, acf_sub_t *j) {
  double cd = acf_score(a, j->cur, 1), bd = cd;
  int better = -1;
  for (int i = 0; i < j->nnext; i++) {
    double d = acf_score(a, j->next[i].cand, 1);
    if (d < bd) {
      j->lr = (cd - d) / cd * 0.8;
      bd = d;
      better = i;
    }
  }
  if (better >= 0) {
    j->conv_count = 0;
    j->cur = j->next[better].cand;
    j->dim = j->next[better].dim;
    j->positive = j->next[better].positive;
  } else {
    j->conv_count++;
    if (j->positive) {
      j->positive = 0;
    } else {
      j->positive = 1;
      j->dim = (j->dim + 1) % a->nd;
    }
    j->lr = -1;
  }
  return j->conv_count != 2 * a->nd;
}

/* findKCandidatesWithAxis: of the unvisited candidates on the direction's side of the current
 * point (angle to the axis below 90 degrees, in raw values), the k = max(topk, lr x their count)
 * nearest by projection on the axis (ties: the smaller angle), of which the topk farthest. */
static int acf_find_k(acf_t *a, acf_sub_t *j) {
  int axis = a->dims[j->dim], n = 0;
  for (int i = 0; i < j->nrest; i++) {
    int r = j->rest[i];
    double dot = 0, mag = 0;
    for (int d = 0; d < a->space.ndims; d++) {
      double v = acf_value(a, r, d) - acf_value(a, j->cur, d);
      mag += v * v;
      if (d == axis) dot = j->positive ? v : -v;
    }
    if (mag <= 0) continue;
    double angle = acos(dot / sqrt(mag));
    if (!(angle < ACF_HALF_PI)) continue;
    /* insertion keeps candidate order among equal keys, as the code's heap does */
    int at = n;
    while (at > 0 && (a->len[at - 1] > dot || (a->len[at - 1] == dot && a->ang[at - 1] > angle))) {
      a->len[at] = a->len[at - 1];
      a->ang[at] = a->ang[at - 1];
      a->order[at] = a->order[at - 1];
      at--;
    }
    a->len[at] = dot;
    a->ang[at] = angle;
    a->order[at] = r;
    n++;
  }
  int k = isfinite(j->lr) ? (int)(j->lr * n) : 0;
  if (k < a->prm.topk) k = a->prm.topk;
  if (k > n) k = n;
  int out = 0;
  for (int i = k - 1; i >= 0 && out < a->prm.topk; i--)
    a->nbuf[out++] = (acf_point_t){a->order[i], j->dim, j->positive};
  return out;
}

/* A restart at a random unvisited candidate (the optimum when none is left). */
static int acf_restart(acf_t *a, acf_sub_t *j) {
  j->cur = j->nrest > 0 ? j->rest[acf_rand_index(j) % j->nrest] : j->optimum;
  j->dim = 0;
  j->positive = 1;
  j->retry++;
  a->nbuf[0] = (acf_point_t){j->cur, 0, 1};
  return 1;
}

/* surveyWithAxis: the next step's points; they become the points the next status update judges. */
static int acf_survey(acf_t *a, acf_sub_t *j) {
  int nb = 0;
  j->nnext = 0;
  for (int guard = 0; guard < 4 * a->nd + 4 && nb == 0; guard++) {
    nb = acf_find_k(a, j);
    if (nb == 0 && !acf_update_status(a, j)) nb = acf_restart(a, j);
  }
  for (int i = 0; i < nb; i++) j->next[j->nnext++] = a->nbuf[i];
  return nb;
}

/* addTrain of the coordinate-descent job. */
static void acf_train(acf_t *a, acf_sub_t *j) {
  int nb;
  if (a->nd == 0 || j->optimum < 0) { /* nothing to descend along, or no record to start from */
    j->convergence = 1;
    return;
  }
  if (j->retry == 0) {
    j->cur = j->optimum;
    j->dim = 0;
    j->positive = 1;
    j->retry++;
    nb = acf_survey(a, j);
  } else if (j->retry < a->prm.retry) {
    /* note: a restart from here leaves the last step's points to be judged against it */
    nb = acf_update_status(a, j) ? acf_survey(a, j) : acf_restart(a, j);
  } else {
    j->convergence = 1;
    return;
  }
  for (int i = 0; i < nb; i++) {
    int e = j->pre + j->train - j->expire;
    if (e > a->prm.repeat) e = a->prm.repeat;
    if (e <= 0) break;
    acf_tmp(a, a->nbuf[i].cand, e);
    acf_rest_remove(j, a->nbuf[i].cand);
    j->expire += e;
  }
}

/* Job::createResult of a sub-job (it has no warm-up or native calls of its own): its pretrain
 * screen, a descent step once its results are in, then its optimum. Fills a->tmp. */
static void acf_sub_create(acf_t *a, acf_sub_t *j) {
  if (j->done) return;
  if (j->expire < j->pre && j->nrest > 0) {
    for (;;) {
      int e = j->pre - j->expire;
      if (e > a->prm.repeat) e = a->prm.repeat;
      if (e <= 0 || j->nrest == 0) break;
      int i = j->by_rand ? acf_rand_index(j) : j->visit;
      if (!j->by_rand) j->visit = (j->visit + j->stride) % j->nc;
      acf_tmp(a, j->c0 + i, e);
      acf_rest_remove(j, j->c0 + i);
      j->expire += e;
    }
    return;
  }
  if (!acf_profiled_all(j)) return;
  acf_sub_update_optimum(a, j);
  if (j->expire < j->pre + j->train && j->nrest > 0 && !j->convergence) {
    acf_train(a, j);
    return;
  }
  j->done = j->done || j->profiled >= j->expire || j->nrest == 0 || j->convergence;
  if (j->optimum < 0) {
    j->done = 1;
  } else if (j->done) {
    acf_tmp(a, j->optimum, -1);
  } else if (a->prm.optimum_expire > 0) {
    acf_tmp(a, j->optimum, a->prm.optimum_expire);
    j->expire += a->prm.optimum_expire;
  }
}

static void acf_enqueue(acf_t *a, int cand, int calls) {
  int n = a->qtail;
  if (acf_push(&a->queue, &n, &a->qcap, (acf_item_t){cand, calls}) == 0) a->qtail = n;
}

/* callSubjobs: sub-jobs in turn until one hands something out (its optimum's forever turns into
 * TUNER_OPTIMUM_EXPIRE calls), with the two early exits; when every sub-job is done, the best
 * record of all is pinned. Returns 1 when something was handed out or the search ended. */
static int acf_call_subjobs(acf_t *a) {
  int end = a->rr, emitted = 0;
  double warm = a->prm.warmup_steps + a->prm.native_steps;
  do {
    acf_sub_t *j = &a->subs[a->rr];
    a->ntmp = 0;
    acf_sub_create(a, j);
    for (int i = 0; i < a->ntmp; i++) {
      int calls = a->tmp[i].calls < 0 ? a->prm.optimum_expire : a->tmp[i].calls;
      if (calls <= 0) continue;
      acf_enqueue(a, a->tmp[i].cand, calls);
      emitted = 1;
    }
    if (a->profiled > warm && j->optimum >= 0) {
      double gmin = acf_score(a, a->optimum, 0), lmin = acf_score(a, j->optimum, 1);
      if (j->done) {
        j->finished = 1;
        if (lmin < gmin) a->optimum = j->optimum;
      } else if (j->optimum_based > j->pre + j->train * 0.1) {
        if (lmin > gmin * 1.5) j->finished = j->done = 1;
      } else if (j->optimum_based > j->pre + a->prm.repeat * 5.0) {
        if (lmin > gmin * 3) j->finished = j->done = 1;
      }
    }
    a->rr = (a->rr + 1) % a->nsubs;
    if (emitted) break;
  } while (a->rr != end);
  int all = 1;
  for (int s = 0; s < a->nsubs; s++) all = all && a->subs[s].finished;
  if (!all) return emitted;
  double best = INFINITY;
  for (int c = 0; c < a->ncands; c++) {
    double s = acf_score(a, c, 0);
    if (s < best) {
      best = s;
      a->optimum = c;
    }
  }
  a->done = 1;
  a->qhead = a->qtail = 0; /* what was still to hand out is dropped for the optimum */
  return 1;
}

/* The tuner thread's loop: ask until nothing more comes. */
static void acf_spin(acf_t *a) {
  for (int guard = 0; guard < 100000 && !a->done; guard++) {
    if (a->expire < a->prm.warmup_steps + a->prm.native_steps) {
      a->optimum = a->start;
      if (a->prm.warmup_steps > 0) acf_enqueue(a, a->start, a->prm.warmup_steps);
      if (a->prm.native_steps > 0) acf_enqueue(a, a->start, a->prm.native_steps);
      a->expire += a->prm.warmup_steps + a->prm.native_steps;
      continue;
    }
    if (a->nsubs == 0 || !acf_call_subjobs(a)) break;
  }
  if (a->nsubs == 0) a->done = 1;
}

/* One sub-job per (algorithm, protocol): its candidates are every combination of its dimensions'
 * values (the window the space gives it), channels outermost, as AutoCCL enumerates them. */
static int acf_build(acf_t *a) {
  const ah_space_t *sp = &a->space;
  int lo[AH_MAX_SUBSPACES][AH_MAX_DIMS], n[AH_MAX_SUBSPACES][AH_MAX_DIMS], total = 1;
  for (int s = 0; s < sp->nsub; s++) {
    int cnt = 1;
    for (int d = 0; d < sp->ndims; d++) {
      const ah_dim_t *dim = &sp->dims[d];
      lo[s][d] = 0;
      n[s][d] = dim->nvalues > 0 ? dim->nvalues : 1;
      if (dim->nvalues > 0 && sp->win[s][d].n > 0) {
        lo[s][d] = sp->win[s][d].lo;
        n[s][d] = sp->win[s][d].n;
      }
      cnt *= n[s][d];
    }
    total += cnt;
  }
  a->cands = calloc((size_t)total, sizeof(*a->cands));
  a->subs = calloc((size_t)(sp->nsub > 0 ? sp->nsub : 1), sizeof(*a->subs));
  a->order = malloc(sizeof(int) * (size_t)total);
  a->len = malloc(sizeof(double) * (size_t)total);
  a->ang = malloc(sizeof(double) * (size_t)total);
  a->nbuf = malloc(sizeof(acf_point_t) * (size_t)(a->prm.topk + 1));
  if (!a->cands || !a->subs || !a->order || !a->len || !a->ang || !a->nbuf) return -1;
  a->nsubs = sp->nsub;
  for (int d = 0; d < sp->ndims; d++)
    if (sp->dims[d].nvalues >= 2) a->dims[a->nd++] = d;
  int per_pre = sp->nsub ? a->prm.pretrain_steps / sp->nsub : 1;
  int per_train = sp->nsub ? a->prm.train_steps / sp->nsub : 1;
  for (int s = 0; s < sp->nsub; s++) {
    acf_sub_t *j = &a->subs[s];
    j->c0 = a->ncands;
    int idx[AH_MAX_DIMS] = {0};
    for (;;) {
      acf_cand_t *k = &a->cands[a->ncands++];
      k->sub = s;
      for (int d = 0; d < sp->ndims; d++) k->pos[d] = (int8_t)(lo[s][d] + idx[d]);
      int d = sp->ndims - 1;
      while (d >= 0 && ++idx[d] == n[s][d]) idx[d--] = 0;
      if (d < 0) break;
    }
    j->nc = a->ncands - j->c0;
    j->rest = malloc(sizeof(int) * (size_t)j->nc);
    j->next = malloc(sizeof(acf_point_t) * (size_t)(a->prm.topk + 1));
    if (!j->rest || !j->next) return -1;
    for (int i = 0; i < j->nc; i++) j->rest[i] = j->c0 + i;
    j->nrest = j->nc;
    j->pre = per_pre > 1 ? per_pre : 1;
    j->train = per_train > 1 ? per_train : 1;
    j->asked = j->pre + j->train;
    j->optimum = -1;
    j->lr = -1;
    j->rng = a->prm.seed * 0x2545F4914F6CDD1DULL + 977 * (uint64_t)(s + 1);
    /* pretrain: strided unless random visits would miss fewer candidates */
    int visits = j->pre / a->prm.repeat;
    if (visits < 1) visits = 1;
    double miss_rand = pow((j->nc - 1.0) / j->nc, visits);
    double miss_seq = j->nc > visits ? (double)(j->nc - visits) / j->nc : 1.0;
    j->by_rand = !(miss_rand > miss_seq);
    j->stride = j->nc / visits > 1 ? j->nc / visits : 1;
    j->visit = acf_rand_index(j);
  }
  /* NCCL's default: one of the candidates when the space lists its exact point */
  a->start = -1;
  for (int c = 0; c < a->ncands && a->start < 0; c++) {
    ah_config_t cfg;
    acf_config(a, c, &cfg);
    if (ah_config_equal(&cfg, &sp->start)) a->start = c;
  }
  if (a->start < 0) {
    a->start = a->ncands;
    a->cands[a->ncands++].sub = -1;
  }
  a->optimum = a->start;
  return 0;
}

acf_t *acf_create(const ah_space_t *space, const acf_params_t *prm) {
  acf_t *a = calloc(1, sizeof(*a));
  if (!a) return NULL;
  a->space = *space;
  if (prm) a->prm = *prm;
  else acf_params_default(&a->prm);
  if (a->prm.repeat < 1) a->prm.repeat = 1;
  if (a->prm.topk < 1) a->prm.topk = 1;
  for (int d = a->space.start.ndims; d < AH_MAX_DIMS; d++) a->space.start.res[d] = 0;
  a->space.start.ndims = a->space.ndims;
  if (acf_build(a) != 0) {
    acf_destroy(a);
    return NULL;
  }
  return a;
}

void acf_destroy(acf_t *a) {
  if (!a) return;
  for (int c = 0; c < a->ncands; c++) {
    free(a->cands[c].us);
    free(a->cands[c].fwd);
  }
  for (int s = 0; a->subs && s < a->nsubs; s++) {
    free(a->subs[s].rest);
    free(a->subs[s].next);
  }
  free(a->cands);
  free(a->subs);
  free(a->queue);
  free(a->tmp);
  free(a->segs);
  free(a->nbuf);
  free(a->order);
  free(a->len);
  free(a->ang);
  free(a);
}

static void acf_seg_push(acf_t *a, uint64_t first, uint64_t count, int cand, int filler) {
  if (a->nsegs == a->capsegs) {
    int cap = a->capsegs ? 2 * a->capsegs : 64;
    acf_seg_t *ns = realloc(a->segs, (size_t)cap * sizeof(*ns));
    if (!ns) return;
    a->segs = ns;
    a->capsegs = cap;
  }
  a->segs[a->nsegs++] = (acf_seg_t){first, count, cand, filler};
}

void acf_next(acf_t *a, uint64_t first, ah_segment_t *seg_p) {
  memset(seg_p, 0, sizeof(*seg_p));
  seg_p->first = first;
  acf_spin(a);
  int c = a->optimum, filler = 0;
  uint64_t count = 1;
  if (a->done) {
    count = AH_SCHED_FOREVER;
  } else if (a->qhead < a->qtail) {
    c = a->queue[a->qhead].cand;
    count = (uint64_t)a->queue[a->qhead++].calls;
  } else {
    filler = 1; /* AutoCCL's query would wait here */
  }
  acf_config(a, c, &seg_p->config);
  seg_p->count = count;
  seg_p->source = c == a->start ? AH_SOURCE_DEFAULT : AH_SOURCE_TUNED;
  acf_seg_push(a, first, count == AH_SCHED_FOREVER ? UINT64_MAX : count, c, filler);
}

/* Combined addRecord: the first warm-up results to arrive are dropped; the rest are recorded, and
 * reach the candidate's sub-job once warm-up and native calls are past. */
void acf_observe(acf_t *a, uint64_t index, double us) {
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
  if (s < 0 || a->done || a->segs[s].filler || !(us > 0)) return;
  if (a->segs[s].count != UINT64_MAX && index - a->segs[s].first >= a->segs[s].count) return;
  if (a->dropped < a->prm.warmup_steps) {
    a->dropped++;
    a->profiled++;
    acf_spin(a);
    return;
  }
  acf_cand_t *k = &a->cands[a->segs[s].cand];
  if (k->n == k->cap) {
    int cap = k->cap ? 2 * k->cap : 4;
    double *nu = realloc(k->us, sizeof(double) * (size_t)cap);
    if (nu) k->us = nu;
    uint8_t *nf = nu ? realloc(k->fwd, (size_t)cap) : NULL;
    if (nf) k->fwd = nf;
    if (!nu || !nf) return;
    k->cap = cap;
  }
  int fwd = a->profiled >= a->prm.warmup_steps + a->prm.native_steps && k->sub >= 0;
  k->us[k->n] = us;
  k->fwd[k->n++] = (uint8_t)fwd;
  if (fwd) a->subs[k->sub].profiled++;
  a->profiled++;
  acf_spin(a);
}
