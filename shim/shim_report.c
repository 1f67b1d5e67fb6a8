/* The process's tuning report: a snapshot of every live communicator context and its keys, and of
 * the destroyed ones (the latest AH_REPORT_DESTROYED_DETAIL in detail, the others summed, folded
 * at their destroy: ah_shim_report_fold), handed to the report writer (tuner/ah_report.c), which
 * writes JSON atomically, and to the metrics writer (tuner/ah_metrics.c, AUTOHA_METRICS), so the two files agree. Written at every
 * communicator teardown, at exit, and from a background thread 10 s after the first communicator,
 * then every AUTOHA_REPORT_INTERVAL_S seconds.
 *
 * Note that the snapshot reads counters that the decision path updates without locks, so a report
 * written while collectives run can be a few calls behind; the one written at exit is exact. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shim_decide.h"
#include "rdma.h"
#include "shim_internal.h"
#include "ah_jansson.h"
#include "ah_metrics.h"
#include "ah_tune.h"

static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;
static void (*_Atomic coord_count)(int *n_p, int *alive_p);

void ah_shim_report_set_coord_count(void (*fn)(int *n_p, int *alive_p)) {
  atomic_store(&coord_count, fn);
}

typedef struct {
  ah_report_t *r;
  int cap;
  int ok;
  int rank_nranks; /* size of the communicator r->rank was taken from */
} build_t;

static void stat_copy(ah_report_stat_t *dst, const ah_stat_t *src) {
  dst->cfg = src->cfg;
  dst->calls = src->calls;
  dst->timed = src->timed;
  dst->us_total = src->us_total;
  dst->bytes_total = src->bytes_total;
}

typedef struct {
  ah_report_key_t *k;
  int cap;
} probes_t;

static void probe_add(void *arg, const ah_config_t *cfg, int samples, double us) {
  probes_t *p = arg;
  if (p->k->nprobes == p->cap) {
    int cap = p->cap ? 2 * p->cap : 16;
    ah_report_probe_t *n = realloc(p->k->probes, (size_t)cap * sizeof *n);
    if (!n) return;
    p->k->probes = n;
    p->cap = cap;
  }
  ah_report_probe_t *e = &p->k->probes[p->k->nprobes++];
  e->cfg = *cfg;
  e->samples = samples;
  e->us = us;
}

static void key_fill(ah_report_key_t *k, const ah_shim_rankkey_t *ck) {
  memset(k, 0, sizeof *k);
  k->coll = ck->coll;
  k->bin = ck->bin;
  k->bytes_min = ck->bytes_min == UINT64_MAX ? 0 : ck->bytes_min;
  k->bytes_max = ck->bytes_max;
  k->calls = ck->next;
  stat_copy(&k->nccl_default, &ck->nccl_default);
  /* "applied" is what the key runs now: NCCL's own choice when its current segment keeps or
   * forces NCCL's pair (a search that converged back to the default), else the applied config. */
  int now_default = ck->seg_first == UINT64_MAX || ck->seg_keep || ck->seg_nccl || ck->seg_refused;
  if (ck->applied.calls > 0 && !now_default) stat_copy(&k->applied, &ck->applied);
  else stat_copy(&k->applied, &ck->nccl_default);
  k->source = ck->source;
  k->sync_waits = ck->sync_waits;
  k->sync_wait_us = ck->sync_wait_us;
  k->captured_calls = ck->captured;
  k->graph_launched_calls = atomic_load(&ck->graph_launched);
  k->refused = ck->refused;
  ah_shim_keystate_t *ks = ck->ks;
  if (ks && ks->tune) {
    pthread_mutex_lock(&ks->lock);
    k->tuned = 1;
    ah_tune_status(ks->tune, &k->tune);
    probes_t p = {k, 0};
    ah_tune_foreach_probe(ks->tune, probe_add, &p);
    pthread_mutex_unlock(&ks->lock);
  }
}

/* Note that a process forked after NCCL's init (a data loader's worker) holds copies of its
 * parent's communicators with the counts of the fork: they are the parent's to report, and a
 * child reporting them wrote over its parent's report (or added ranks to a merge). Only the
 * communicators this process made are reported, so such a child writes none. */
/* c's entry, into rc. Returns 0, or -1 out of memory. */
static int comm_fill(ah_report_comm_t *rc, ah_comm_t *c) {
  memset(rc, 0, sizeof *rc);
  rc->id = c->id;
  rc->nranks = c->nranks;
  rc->nnodes = c->nnodes;
  rc->rank = c->rank;
  pthread_mutex_lock(&c->lock);
  int n = 0;
  for (int coll = 0; coll < AH_NUM_COLLS; coll++)
    for (int bin = 0; bin < AH_BINS; bin++)
      if (c->keys[coll][bin]) n++;
  rc->keys = n ? calloc((size_t)n, sizeof *rc->keys) : NULL;
  if (n && !rc->keys) {
    pthread_mutex_unlock(&c->lock);
    return -1;
  }
  for (int coll = 0; coll < AH_NUM_COLLS; coll++)
    for (int bin = 0; bin < AH_BINS; bin++)
      if (c->keys[coll][bin]) key_fill(&rc->keys[rc->nkeys++], c->keys[coll][bin]);
  pthread_mutex_unlock(&c->lock);
  return 0;
}

/* The process's rank (%r, "rank"): its lowest rank in the largest communicator it belongs to
 * (the world, normally) — not a rank inside some split, where many processes are rank 0. */
static void rank_note(int rank, int nranks, int *rank_p, int *nranks_p) {
  if (rank >= 0 && (nranks > *nranks_p || (nranks == *nranks_p && rank < *rank_p))) {
    *rank_p = rank;
    *nranks_p = nranks;
  }
}

/* Room for one more entry in b's report; NULL (and b->ok cleared) out of memory. */
static ah_report_comm_t *comm_slot(build_t *b) {
  ah_report_t *r = b->r;
  if (r->ncomms == b->cap) {
    int cap = b->cap ? 2 * b->cap : 8;
    ah_report_comm_t *n = realloc(r->comms, (size_t)cap * sizeof *n);
    if (!n) {
      b->ok = 0;
      return NULL;
    }
    r->comms = n;
    b->cap = cap;
  }
  return &r->comms[r->ncomms];
}

/* A live context, or one finalized but not yet folded into the destroyed ones (a report written
 * while its destroy runs). */
static void comm_add(void *arg, ah_comm_t *c) {
  build_t *b = arg;
  if (!b->ok || c->pid != b->r->pid || atomic_load(&c->folded)) return;
  ah_report_comm_t *rc = comm_slot(b);
  if (!rc) return;
  if (comm_fill(rc, c) != 0) {
    b->ok = 0;
    return;
  }
  rank_note(c->rank, c->nranks, &b->r->rank, &b->rank_nranks);
  b->r->ncomms++;
}

static void comm_free(ah_report_comm_t *rc) {
  for (int k = 0; k < rc->nkeys; k++) free(rc->keys[k].probes);
  free(rc->keys);
}

static void report_free(ah_report_t *r) {
  for (int i = 0; i < r->ncomms; i++) comm_free(&r->comms[i]);
  free(r->comms);
}

/* ---- destroyed communicators: the latest in detail, the others summed ---------------------------- */

/* Note that the lock is held by a report's build from its walk of the live contexts to its copy
 * of these, and by a fold from its read of the context to its `folded` mark: a context is then in
 * a report exactly once, live or destroyed, whenever the report is written. */
static pthread_mutex_t destroyed_lock = PTHREAD_MUTEX_INITIALIZER;
static ah_report_comm_t destroyed[AH_REPORT_DESTROYED_DETAIL]; /* a ring, oldest at its head */
static int destroyed_head, ndestroyed;
static ah_report_destroyed_t destroyed_sum;
static int destroyed_rank = -1, destroyed_rank_nranks; /* rank_note over every folded one */

static void stat_sum(ah_report_destroyed_t *d, const ah_report_stat_t *st) {
  d->timed += st->timed;
  d->us_total += st->us_total;
  d->bytes_total += st->bytes_total;
}

/* Adds the entry rc to the summed ones. */
static void destroyed_merge(const ah_report_comm_t *rc) {
  ah_report_destroyed_t *d = &destroyed_sum;
  d->comms++;
  for (int k = 0; k < rc->nkeys; k++) {
    const ah_report_key_t *key = &rc->keys[k];
    d->keys++;
    d->tuned += key->tuned != 0;
    d->calls += key->calls;
    stat_sum(d, &key->nccl_default);
    /* a key that runs NCCL's choice now reports nccl_default's figures as applied (key_fill),
     * config and all; any other applied config differs from NCCL's: that copy is not counted twice */
    if (!ah_config_equal(&key->applied.cfg, &key->nccl_default.cfg)) stat_sum(d, &key->applied);
    d->sync_waits += key->sync_waits;
    d->sync_wait_us += key->sync_wait_us;
  }
}

int ah_shim_report_fold(ah_comm_t *c) {
  const ah_settings_t *s = ah_env_settings();
  if (!c || c->pid != (int)getpid()) return 0; /* a forked child's copy: its parent's to report */
  pthread_mutex_lock(&destroyed_lock);
  if (atomic_load(&c->folded)) {
    pthread_mutex_unlock(&destroyed_lock);
    return 0;
  }
  ah_report_comm_t rc;
  int have = (s->report[0] || s->metrics[0]) && comm_fill(&rc, c) == 0;
  if (have) {
    rc.destroyed = 1;
    if (ndestroyed == AH_REPORT_DESTROYED_DETAIL) { /* the oldest in detail joins the sum */
      destroyed_merge(&destroyed[destroyed_head]);
      comm_free(&destroyed[destroyed_head]);
      destroyed_head = (destroyed_head + 1) % AH_REPORT_DESTROYED_DETAIL;
      ndestroyed--;
    }
    destroyed[(destroyed_head + ndestroyed++) % AH_REPORT_DESTROYED_DETAIL] = rc;
    rank_note(c->rank, c->nranks, &destroyed_rank, &destroyed_rank_nranks);
  } else if (s->report[0] || s->metrics[0]) {
    AH_LOG_CAPPED(3, AH_LOG_WARN,
                  "out of memory keeping communicator %016llx's figures for the report: its "
                  "calls are missing from it",
                  (unsigned long long)c->id);
  }
  atomic_store(&c->folded, 1);
  pthread_mutex_unlock(&destroyed_lock);
  return have;
}

/* Copies the destroyed communicators into b's report (under destroyed_lock). */
static void destroyed_add(build_t *b) {
  ah_report_t *r = b->r;
  for (int i = 0; i < ndestroyed && b->ok; i++) {
    const ah_report_comm_t *src = &destroyed[(destroyed_head + i) % AH_REPORT_DESTROYED_DETAIL];
    ah_report_comm_t *rc = comm_slot(b);
    if (!rc) return;
    *rc = *src;
    rc->keys = src->nkeys ? calloc((size_t)src->nkeys, sizeof *rc->keys) : NULL;
    if (src->nkeys && !rc->keys) {
      b->ok = 0;
      return;
    }
    r->ncomms++; /* counted now, so that report_free frees what was copied so far */
    for (int k = 0; k < src->nkeys; k++) {
      rc->keys[k] = src->keys[k];
      rc->keys[k].probes = NULL;
      rc->keys[k].nprobes = 0;
      size_t bytes = (size_t)src->keys[k].nprobes * sizeof *rc->keys[k].probes;
      if (bytes && !(rc->keys[k].probes = malloc(bytes))) {
        rc->nkeys = k;
        b->ok = 0;
        return;
      }
      if (bytes) memcpy(rc->keys[k].probes, src->keys[k].probes, bytes);
      rc->keys[k].nprobes = src->keys[k].nprobes;
    }
  }
  r->destroyed = destroyed_sum;
  rank_note(destroyed_rank, destroyed_rank_nranks, &r->rank, &b->rank_nranks);
}

/* The metrics file of the snapshot r (AUTOHA_METRICS), beside or without the JSON report. */
static void metrics_write(const ah_report_t *r, const char *job, const char *why) {
  const ah_settings_t *s = ah_env_settings();
  char path[AH_ENV_PATH_MAX], err[256];
  if (ah_template_expand(s->metrics, r->host, r->pid, r->rank, job, path, sizeof path, err,
                         sizeof err) != 0) {
    AH_LOG_CAPPED(1, AH_LOG_ERROR, "AUTOHA_METRICS: %s: no metrics file is written", err);
    return;
  }
  size_t n = strlen(path);
  if (n < 5 || strcmp(path + n - 5, ".prom") != 0)
    AH_LOG_CAPPED(1, AH_LOG_WARN,
                  "AUTOHA_METRICS: %s does not end in .prom: node_exporter's textfile collector "
                  "ignores it (written anyway)",
                  path);
  if (ah_metrics_write(r, path, err, sizeof err) != 0)
    AH_LOG_CAPPED(3, AH_LOG_ERROR, "cannot write the metrics (%s): %s", why, err);
  else ah_log(AH_LOG_DEBUG, "metrics written to %s (%s)", path, why);
}

void ah_shim_report_write(const char *why) {
  const ah_settings_t *s = ah_env_settings();
  if (!ah_shim.enabled || (!s->report[0] && !s->metrics[0])) return;
  pthread_mutex_lock(&write_lock);
  /* Tens of KiB (the run's variables): kept off the stack of whichever thread writes. */
  static ah_report_t r;
  memset(&r, 0, sizeof r);
  r.rank = -1;
  r.pid = (int)getpid();
  if (gethostname(r.host, sizeof r.host) != 0) snprintf(r.host, sizeof r.host, "?");
  r.host[sizeof r.host - 1] = 0;
  ah_report_text_copy(r.job, sizeof r.job, ah_template_job_env()); /* as given, valid as JSON */
  r.nccl_version = ah_shim.nccl_version;
  build_t b = {&r, 0, 1, 0};
  pthread_mutex_lock(&destroyed_lock);
  ah_comm_foreach(comm_add, &b); /* the live ones: a destroyed one is kept below */
  destroyed_add(&b);
  pthread_mutex_unlock(&destroyed_lock);
  /* No communicator in this process (a launcher, `nice`, a shell): nothing to report, and nothing
   * below is touched — the topology would open libcuda.so.1, which may warn in a process that
   * never used NCCL. */
  if (b.ok && r.ncomms == 0) {
    pthread_mutex_unlock(&write_lock);
    return;
  }
  if (!b.ok) {
    AH_LOG_CAPPED(3, AH_LOG_WARN, "out of memory building the report (%s): not written", why);
    report_free(&r);
    pthread_mutex_unlock(&write_lock);
    return;
  }
  /* The JSON library, opened by the first report (tuner/ah_jansson.c): without it there is no
   * report, and ah_jansson_ready() has said so once; the metrics (plain text) are still written. */
  int json = s->report[0] && ah_jansson_ready();
  ah_shim_fingerprint(r.topo);
  snprintf(r.mode, sizeof r.mode, "%s", ah_env_mode_name(ah_env_settings()->mode));
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  r.time_s = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
  r.nhealth = ah_shim_health_findings(r.health, AH_REPORT_HEALTH_MAX);
  ah_shim_health_counts(r.health_counts);
  void (*count)(int *, int *) = atomic_load(&coord_count);
  if (count) count(&r.ncoords, &r.ncoords_alive);
  if (json) ah_shim_run_facts(&r.run);
  ah_shim_ha_report(&r.ha);
  char path[AH_ENV_PATH_MAX], err[256], job[AH_SHIM_JOB_MAX];
  ah_shim_job_name(0, job, sizeof job);
  if (!json) { /* AUTOHA_REPORT=off, or no jansson (said once) */
  } else if (ah_template_expand(s->report, r.host, r.pid, r.rank, job, path, sizeof path, err,
                                sizeof err) != 0) {
    AH_LOG_CAPPED(1, AH_LOG_ERROR, "AUTOHA_REPORT: %s: no report is written", err);
  } else if (ah_report_write(&r, path, err, sizeof err) != 0) {
    AH_LOG_CAPPED(3, AH_LOG_ERROR, "cannot write the report (%s): %s", why, err);
  } else {
    ah_log(AH_LOG_DEBUG, "report written to %s (%s)", path, why);
  }
  if (s->metrics[0]) metrics_write(&r, job, why);
  report_free(&r);
  pthread_mutex_unlock(&write_lock);
}

/* ---- teardown writes: at most one a second, and at most 5% of the time -------------------------- */

/* Note that a report's write grows with the live communicators (the destroyed ones it holds are
 * bounded): the gap after a teardown write is 20 times what the write took, and a second at least,
 * so a job that makes and destroys communicators by the thousand spends at most a twentieth of its
 * time on them. */
#define TEARDOWN_GAP_NS 1000000000ull
static uint64_t teardown_gap_ns = TEARDOWN_GAP_NS;
static pthread_mutex_t teardown_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t teardown_cv = PTHREAD_COND_INITIALIZER;
static uint64_t teardown_last_ns; /* when the last teardown write started */
static int teardown_pending;      /* a teardown came since: the flusher writes it */
static int teardown_flusher;      /* the flusher thread runs */

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A teardown's write, timed for the gap after it. */
static void teardown_write(void) {
  uint64_t t0 = mono_ns();
  ah_shim_report_write("communicator teardown");
  uint64_t gap = 20 * (mono_ns() - t0);
  pthread_mutex_lock(&teardown_lock);
  teardown_gap_ns = gap > TEARDOWN_GAP_NS ? gap : TEARDOWN_GAP_NS;
  pthread_mutex_unlock(&teardown_lock);
}

/* Writes a pending teardown's report once the gap after the previous write has passed. */
static void *teardown_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&teardown_lock);
  for (;;) {
    while (!teardown_pending) pthread_cond_wait(&teardown_cv, &teardown_lock);
    uint64_t due = teardown_last_ns + teardown_gap_ns, now = mono_ns();
    if (now < due) {
      pthread_mutex_unlock(&teardown_lock);
      struct timespec t = {(time_t)((due - now) / 1000000000ull),
                           (long)((due - now) % 1000000000ull)};
      while (nanosleep(&t, &t) != 0) {}
      pthread_mutex_lock(&teardown_lock);
    }
    teardown_pending = 0;
    teardown_last_ns = mono_ns();
    pthread_mutex_unlock(&teardown_lock);
    teardown_write();
    pthread_mutex_lock(&teardown_lock);
  }
  return NULL;
}

void ah_shim_report_teardown(void) {
  pthread_mutex_lock(&teardown_lock);
  uint64_t now = mono_ns();
  int now_write = !teardown_last_ns || now - teardown_last_ns >= teardown_gap_ns;
  if (!now_write && !teardown_flusher) /* none running: this teardown is written now */
    now_write = !(teardown_flusher = ah_shim_thread_detached(teardown_main,
                                                             "the report's teardown writer: "
                                                             "every teardown writes at once") == 0);
  if (now_write) teardown_last_ns = now;
  else {
    teardown_pending = 1;
    pthread_cond_signal(&teardown_cv);
  }
  pthread_mutex_unlock(&teardown_lock);
  if (now_write) teardown_write();
}

/* ---- interval writer ---------------------------------------------------------------------------- */

/* The first write comes REPORT_FIRST_S after the first communicator (or the interval, when that
 * is shorter), then one every interval: a job killed in its first minute still leaves a report. */
#define REPORT_FIRST_S 10

static void *interval_main(void *arg) {
  (void)arg;
  int secs = ah_env_settings()->report_interval_s;
  for (int wait = secs < REPORT_FIRST_S ? secs : REPORT_FIRST_S;; wait = secs) {
    struct timespec t = {wait, 0};
    while (nanosleep(&t, &t) != 0) {}
    ah_shim_report_write("interval");
  }
  return NULL;
}

static pthread_once_t interval_once = PTHREAD_ONCE_INIT;

static void interval_start(void) {
  const ah_settings_t *s = ah_env_settings();
  if (s->report_interval_s <= 0 || (!s->report[0] && !s->metrics[0])) return;
  (void)ah_shim_thread_detached(interval_main,
                                "the report interval thread: reports at teardown and exit only");
}

void ah_shim_report_start_interval(void) { pthread_once(&interval_once, interval_start); }
