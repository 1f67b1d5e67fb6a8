/* The decision path: for one bucket NCCL asks about, find its key, count the call index, and look
 * up the configuration committed for that index in the key's schedule.
 *
 * After the first call of a key the path is: one array load to find the rank's key entry, an
 * increment of its index, one lock-free schedule lookup (a converged or pinned key is a forever
 * segment, found in O(1)), a few stores for the report. No allocation, lock or system call: those
 * happen only when a key is first seen, when a schedule runs out (the leader commits the next
 * segment; other ranks wait for it) and when a timing result reaches the search.
 *
 * How a communicator's keys are decided is fixed at its first decision (AH_CTL_*):
 *   observe      NCCL's choice, recorded;
 *   fixed        override, else profile, else NCCL's choice: a forever segment from index 0 that
 *                every rank commits itself — deterministic, so identical on all ranks;
 *   local tune   every rank is in this process: the leader (rank 0) drives ah_tune and appends
 *                segments to the shared schedule, the other local ranks read it;
 *   remote tune  the ranks span processes, the coordinator accepted the communicator and its hub
 *                says every rank joined (verdict COMPLETE): as local tune, with segments published
 *                by the leader and delivered to the others. When not every rank joined in time
 *                (ABANDONED) every rank runs it fixed, as a process that never joined does. */
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ah_override.h"
#include "shim_decide.h"
#include "ah_uthash.h"
#ifdef AH_HAVE_TUNE
#include "ah_tune.h"
#endif

/* ---- process-wide key states ------------------------------------------------------------------ */

typedef struct {
  ah_keystate_t ks;
  UT_hash_handle hh;
} ks_entry_t;

static pthread_mutex_t ks_lock = PTHREAD_MUTEX_INITIALIZER;
static ks_entry_t *ks_table;

ah_keystate_t *ah_shim_keystate_get(const ah_key_t *key) {
  ah_key_t k;
  memset(&k, 0, sizeof k); /* hashed as bytes: no stray padding */
  k.comm = key->comm;
  k.coll = key->coll;
  k.bin = key->bin;
  pthread_mutex_lock(&ks_lock);
  ks_entry_t *e = NULL;
  HASH_FIND(hh, ks_table, &k, sizeof k, e);
  if (!e && (e = calloc(1, sizeof *e)) != NULL) {
    e->ks.key = k;
    e->ks.sched = ah_sched_create();
    if (!e->ks.sched) {
      free(e);
      e = NULL;
    } else {
      pthread_mutex_init(&e->ks.lock, NULL);
      HASH_ADD(hh, ks_table, ks.key, sizeof k, e);
      if (!AH_HASH_ADDED(e)) {
        pthread_mutex_destroy(&e->ks.lock);
        ah_sched_destroy(e->ks.sched);
        free(e);
        e = NULL;
      }
    }
  }
  pthread_mutex_unlock(&ks_lock);
  if (!e) AH_LOG_CAPPED(3, AH_LOG_WARN, "out of memory creating a key's state: it keeps NCCL's choice");
  return e ? &e->ks : NULL;
}

void ah_shim_keystate_foreach(void (*fn)(void *arg, ah_keystate_t *ks), void *arg) {
  pthread_mutex_lock(&ks_lock);
  for (ks_entry_t *e = ks_table; e; e = e->hh.next) fn(arg, &e->ks);
  pthread_mutex_unlock(&ks_lock);
}

/* ---- coordinator hooks ------------------------------------------------------------------------ */

static pthread_mutex_t hooks_lock = PTHREAD_MUTEX_INITIALIZER;
static ah_shim_coord_hooks_t hooks;
static _Atomic int hooks_set;

void ah_shim_set_coord_hooks(const ah_shim_coord_hooks_t *h) {
  pthread_mutex_lock(&hooks_lock);
  if (h) hooks = *h;
  else memset(&hooks, 0, sizeof hooks);
  atomic_store(&hooks_set, h != NULL);
  pthread_mutex_unlock(&hooks_lock);
}

static ah_shim_coord_hooks_t hooks_copy(void) {
  ah_shim_coord_hooks_t h;
  pthread_mutex_lock(&hooks_lock);
  h = hooks;
  pthread_mutex_unlock(&hooks_lock);
  return h;
}

void ah_shim_deliver(void *arg, const ah_key_t *key, const ah_segment_t *seg) {
  (void)arg;
  ah_keystate_t *ks = ah_shim_keystate_get(key);
  if (!ks) return;
  if (ah_sched_append(ks->sched, seg) != 0)
    AH_LOG_CAPPED(5, AH_LOG_ERROR,
                  "coordinator delivered a segment for comm %016llx %s bin %d at call %llu that does "
                  "not extend the schedule (horizon %llu): ignored",
                  (unsigned long long)key->comm, ah_coll_name(key->coll), key->bin,
                  (unsigned long long)seg->first, (unsigned long long)ah_sched_horizon(ks->sched));
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* ---- how a communicator is decided ------------------------------------------------------------ */

static int is_leader(const ah_comm_t *c) { return c->rec && c->rec->leader == c; }

/* Whether the key's search runs in this process: any local rank may then commit the next segment.
 *
 * Note that the leader rank is not the only committer: a thread driving several ranks (grouped
 * calls, nccl-tests, JAX) is asked by NCCL about its communicators in an order of NCCL's choosing,
 * and a rank that waited there for the leader rank's decision would wait for itself. The search is
 * one object per process and key, serialised by its lock, so whichever local rank reaches an
 * uncommitted call first commits it, and every rank reads the same schedule. */
static int leads_here(const ah_comm_t *c) {
  return c->rec && __atomic_load_n(&c->rec->leader, __ATOMIC_ACQUIRE) != NULL;
}

/* r->ctl while a communicator spanning processes has joined the hub and waits for its verdict. */
#define CTL_AWAIT (-2)

typedef struct {
  uint64_t id;
  int ranks[64];
  int n;
} local_ranks_t;

static void local_rank_collect(void *arg, ah_comm_t *c) {
  local_ranks_t *l = arg;
  if (c->id == l->id && c->rank >= 0 && l->n < 64) l->ranks[l->n++] = c->rank;
}

typedef struct {
  uint64_t id;
  ah_comm_t *found;
} local_rank0_t;

static void local_rank0_find(void *arg, ah_comm_t *c) {
  local_rank0_t *l = arg;
  if (c->id == l->id && c->rank == 0 && !l->found) l->found = c;
}

/* Joins every local rank of c's communicator whose context exists (c's own included): a thread
 * that drives several ranks (grouped calls) waits for the verdict at the first one, so the others
 * must have joined by then. The hub and the client count a rank joined twice once. */
static void join_local_ranks(const ah_shim_coord_hooks_t *h, ah_comm_t *c) {
  local_ranks_t l = {.id = c->id};
  ah_comm_foreach(local_rank_collect, &l);
  for (int i = 0; i < l.n; i++)
    if (l.ranks[i] != c->rank) (void)h->attach(h->arg, c->id, c->nranks, l.ranks[i]);
}

/* Waits for the hub's verdict on c's communicator (AH_VERDICT_*, never PENDING).
 *
 * Note that every rank of the communicator in fixed or tune mode, the leader included, waits here
 * at its first call: the hub decides once for all of them, so a rank whose process never reached
 * the hub and the ranks that did (ABANDONED) all run NCCL's own choices. The wait is bounded by the
 * hub (it decides within AUTOHA_COORD_JOIN_S of the first join) and by the client's detection of
 * a hub that is gone. */
static ah_verdict_t verdict_wait(const ah_shim_coord_hooks_t *h, ah_comm_t *c) {
  double t0 = now_us(), warn_after = (ah_shim.settings ? ah_shim.settings->sync_warn_s : 10.0) * 1e6;
  int warned = 0;
  long sleep_ns = 100000;
  for (;;) {
    int v = h->verdict ? h->verdict(h->arg, c->id) : AH_VERDICT_GONE;
    if (v != AH_VERDICT_PENDING) return (ah_verdict_t)v;
    double waited = now_us() - t0;
    if (!warned && waited > warn_after) {
      warned = 1;
      ah_log(AH_LOG_WARN, "rank %d has waited %.1f s for the coordinator's verdict on communicator "
             "%016llx (whether all %d ranks joined the hub with the same settings); still waiting",
             c->rank, waited / 1e6, (unsigned long long)c->id, c->nranks);
    }
    struct timespec ts = {0, sleep_ns};
    nanosleep(&ts, NULL);
    if (sleep_ns < 5000000) sleep_ns *= 2;
  }
}

/* The control of a communicator spanning processes once the hub decided. */
static int verdict_control(ah_comm_t *c, ah_verdict_t v, int mode) {
  if (v == AH_VERDICT_COMPLETE) return mode == AH_MODE_TUNE ? AH_CTL_REMOTE_TUNE : AH_CTL_FIXED;
  if (v == AH_VERDICT_GONE)
    ah_log(AH_LOG_ERROR, "communicator %016llx: the coordinator hub is gone before it decided "
           "whether all ranks joined; every rank runs NCCL's own choices for it", (unsigned long long)c->id);
  else if (v == AH_VERDICT_ABANDONED)
    ah_log(AH_LOG_WARN, "communicator %016llx: not every rank joined the coordinator hub within "
           "AUTOHA_COORD_JOIN_S (a process without autoha, or one that cannot reach the hub): every "
           "rank runs NCCL's own choices for it", (unsigned long long)c->id);
  /* MISMATCH: the hook named the ranks and settings that differ */
  return AH_CTL_OBSERVE;
}

/* Fixes c->ctl at the communicator's first decision. Slow path.
 *
 * Note that a communicator whose ranks are all in this process is decided here alone (one
 * process, one set of settings). One that spans processes runs autoha's choices only when the hub
 * says every rank joined with the same settings digest; otherwise NCCL's own choices on every rank
 * (AH_CTL_OBSERVE), which is what a process without autoha runs, so ranks never disagree. An
 * observing rank joins too (its settings differ from a fixed or tuning rank's) but never waits. */
static void comm_control(ah_comm_t *c) {
  static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
  int mode = ah_shim.mode;
#ifndef AH_HAVE_TUNE
  if (mode == AH_MODE_TUNE) {
    AH_LOG_CAPPED(1, AH_LOG_WARN, "AUTOHA_MODE=tune: this build has no search engine; running as fixed");
    mode = AH_MODE_FIXED;
  }
#endif
  ah_commrec_t *r = c->rec;
  int ctl;
  if (c->abi == 0) {
    c->ctl = AH_CTL_OBSERVE;
    return;
  }
  if (!r) { /* no process-wide record (out of memory): nothing to agree with */
    c->ctl = mode == AH_MODE_OBSERVE ? AH_CTL_OBSERVE : AH_CTL_FIXED;
    return;
  }
  ah_shim_coord_hooks_t h = hooks_copy();
  pthread_mutex_lock(&ctl_lock);
  ctl = atomic_load(&r->ctl);
  int joined = 0;
  if (ctl < 0 && ctl != CTL_AWAIT) {
    if (atomic_load(&r->announced) >= c->nranks) {
      ctl = mode == AH_MODE_TUNE ? AH_CTL_LOCAL_TUNE : mode == AH_MODE_FIXED ? AH_CTL_FIXED : AH_CTL_OBSERVE;
    } else if (atomic_load(&hooks_set) && h.attach && c->rank >= 0 &&
               h.attach(h.arg, c->id, c->nranks, c->rank)) {
      /* A rank NCCL did not tell us never joins, so the hub abandons the communicator for every
       * rank and this one runs NCCL's choices with them. */
      ctl = mode == AH_MODE_OBSERVE ? AH_CTL_OBSERVE : CTL_AWAIT;
      r->hub = 1;
      joined = 1;
    } else if (!atomic_load(&hooks_set)) {
      /* No unique id ever passed the shim's wrappers: autoha is NCCL's tuner plugin without
       * being preloaded, so no rank can compare settings. Fixed choices are deterministic in the
       * settings, which a launcher gives every rank alike; searching needs a coordinator. */
      ctl = mode == AH_MODE_OBSERVE ? AH_CTL_OBSERVE : AH_CTL_FIXED;
      if (mode == AH_MODE_TUNE)
        AH_LOG_CAPPED(1, AH_LOG_INFO, "communicator %016llx spans processes and autoha is not "
                      "preloaded (no coordinator): it runs fixed, not tuned", (unsigned long long)c->id);
    } else {
      ctl = AH_CTL_OBSERVE; /* the hook said why (no stamp, hub unreachable) */
    }
    atomic_store(&r->ctl, ctl);
  }
  if (r->hub) { /* every local rank joins, so the hub can compare all of them */
    if (!joined && c->rank >= 0) (void)h.attach(h.arg, c->id, c->nranks, c->rank);
    join_local_ranks(&h, c);
  }
  pthread_mutex_unlock(&ctl_lock);
  if (ctl == CTL_AWAIT) {
    ah_verdict_t v = verdict_wait(&h, c);
    pthread_mutex_lock(&ctl_lock);
    if (atomic_load(&r->ctl) == CTL_AWAIT) /* the first local rank to learn it logs it */
      atomic_store(&r->ctl, verdict_control(c, v, mode));
    ctl = atomic_load(&r->ctl);
    pthread_mutex_unlock(&ctl_lock);
  }
  {
#ifdef AH_HAVE_TUNE
    /* The leader is rank 0, wherever it is in this process (a thread driving several ranks may
     * reach another rank's first call before rank 0's); when NCCL's init gave no rank (it ran on
     * NCCL's own thread), the first local context of a wholly local communicator leads — any
     * single one will do there. */
    pthread_mutex_lock(&ctl_lock);
    if ((ctl == AH_CTL_LOCAL_TUNE || ctl == AH_CTL_REMOTE_TUNE) && !r->leader) {
      ah_comm_t *lead = c->rank == 0 ? c : NULL;
      if (!lead) {
        local_rank0_t l = {.id = c->id};
        ah_comm_foreach(local_rank0_find, &l);
        lead = l.found;
      }
      if (!lead && c->rank < 0 && ctl == AH_CTL_LOCAL_TUNE) lead = c;
      if (lead) __atomic_store_n(&r->leader, lead, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&ctl_lock);
#endif
  }
  c->ctl = ctl;
}

/* ---- configurations ---------------------------------------------------------------------------- */

static void config_keep(ah_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->algo = -1;
  cfg->proto = -1;
  cfg->ndims = 0;
}

static int config_is_keep(const ah_config_t *cfg) {
  if (cfg->algo >= 0 || cfg->proto >= 0) return 0;
  for (int i = 0; i < cfg->ndims && i < AH_MAX_DIMS; i++)
    if (cfg->res[i] != 0) return 0;
  return 1;
}

/* Whether NCCL can run the (possibly partial) pair of cfg for this call. */
static int config_allowed(const ah_config_t *cfg, const ah_call_t *call) {
  if (cfg->algo < 0 && cfg->proto < 0) return 1;
  if (call->table) return ah_override_allowed_table(cfg, call->table, call->num_algo, call->num_proto);
  /* v1/v2: no table; NCCL 2.19-2.21 do no checks of their own, so the shim checks the flags. */
  int a = cfg->algo, p = cfg->proto;
  if (a >= AH_NUM_ALGOS || p >= AH_NUM_PROTOS) return 0;
  if ((a == AH_ALGO_COLLNET_DIRECT || a == AH_ALGO_COLLNET_CHAIN) && !call->collnet) return 0;
  if ((a == AH_ALGO_NVLS || a == AH_ALGO_NVLS_TREE) && (!call->nvls || (p >= 0 && p != AH_PROTO_SIMPLE)))
    return 0;
  if (a == AH_ALGO_TREE && call->coll != AH_FUNC_ALLREDUCE) return 0;
  if (a == AH_ALGO_PAT) return 0; /* PAT arrived with the cost table (2.23) */
  return 1;
}

/* The configuration a key is pinned to without tuning: an override, else the profile's entry, else
 * NCCL's own choice. Deterministic in (settings, profile, communicator shape, key, cost table), so
 * every rank computes the same segment. */
static void pinned_segment(const ah_comm_t *c, int coll, int bin, const ah_call_t *call,
                           ah_segment_t *seg) {
  memset(seg, 0, sizeof *seg);
  seg->first = 0;
  seg->count = AH_SCHED_FOREVER;
  seg->source = AH_SOURCE_DEFAULT;
  config_keep(&seg->config);
  const ah_settings_t *s = ah_shim.settings;
  ah_config_t cfg;
  /* A key matches a rule when the lowest size of its bin lies in the rule's range (sizes are
   * bytes per rank): keys, not single calls, carry a configuration. */
  if (s && s->override.nrules > 0 &&
      ah_override_match(&s->override, coll, (uint64_t)ah_size_bin_floor(bin), &cfg) >= 0) {
    if (config_allowed(&cfg, call)) {
      seg->config = cfg;
      seg->source = AH_SOURCE_OVERRIDE;
      return;
    }
    char buf[96];
    AH_LOG_CAPPED(5, AH_LOG_WARN, "override %s for %s of %zu bytes on communicator %016llx names a "
                  "pair NCCL cannot run there; refused, NCCL's choice kept",
                  ah_config_format(&cfg, buf, sizeof buf), ah_coll_name(coll), call->nbytes,
                  (unsigned long long)c->id);
  }
  const ah_profile_t *p = ah_shim.profile;
  const ah_profile_entry_t *e = p ? ah_profile_lookup(p, c->nranks, c->nnodes, coll, bin) : NULL;
  if (e && config_allowed(&e->cfg, call)) {
    seg->config = e->cfg;
    seg->source = AH_SOURCE_PROFILE;
  }
}

/* NCCL's own choice from a v3+ table: the argmin over non-negative cells, ties to the first. */
static void table_argmin(const ah_call_t *call, ah_config_t *cfg) {
  config_keep(cfg);
  if (!call->table) return;
  float best = -1;
  for (int a = 0; a < call->num_algo; a++)
    for (int p = 0; p < call->num_proto; p++) {
      float v = call->table[a * call->num_proto + p];
      if (v >= 0 && (best < 0 || v < best)) {
        best = v;
        cfg->algo = (int8_t)a;
        cfg->proto = (int8_t)p;
      }
    }
}

#ifdef AH_HAVE_TUNE
/* The space of a key: the pairs NCCL allows for this call (non -1 cells; for v1/v2 the pairs the
 * flags allow), channels up to the most NCCL can have (it caps the tuner's value at the
 * communicator's count from 2.22; before that channels are not tuned), and on 2.30+ (v6) the chunk
 * size. */
static void space_build(const ah_comm_t *c, const ah_call_t *call, ah_space_t *sp) {
  memset(sp, 0, sizeof *sp);
  for (int a = 0; a < AH_NUM_ALGOS; a++)
    for (int p = 0; p < AH_NUM_PROTOS; p++) {
      ah_config_t cfg;
      config_keep(&cfg);
      cfg.algo = (int8_t)a;
      cfg.proto = (int8_t)p;
      int ok;
      if (call->table) ok = a < call->num_algo && p < call->num_proto && call->table[a * call->num_proto + p] >= 0;
      else ok = config_allowed(&cfg, call);
      if (ok && sp->nsub < AH_MAX_SUBSPACES) {
        sp->sub[sp->nsub].algo = (int8_t)a;
        sp->sub[sp->nsub].proto = (int8_t)p;
        /* NCCL's estimate: the search's prior (orders and prunes subspaces, tuner/ah_tune.c) */
        sp->est_us[sp->nsub] = call->table ? call->table[a * call->num_proto + p] : 0.0f;
        sp->nsub++;
      }
    }
  sp->ndims = 0;
  if (ah_shim.nccl_version >= 22200) {
    static const int64_t ch[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64};
    int maxch = ah_shim.nccl_version >= 22500 ? 64 : 32;
    /* Channels NCCL cannot have are not worth a probe: the user's caps, when set, bound them. */
    static const char *caps[] = {"NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS"};
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
      const char *v = getenv(caps[i]);
      char *end;
      long n = v && *v ? strtol(v, &end, 10) : 0;
      if (v && *v && !*end && n >= 1 && n < maxch) maxch = (int)n;
    }
    ah_dim_t *d = &sp->dims[AH_DIM_NCHANNELS];
    for (size_t i = 0; i < sizeof ch / sizeof ch[0] && ch[i] <= maxch; i++) d->values[d->nvalues++] = ch[i];
    sp->ndims = 1;
  }
  if (c->abi >= 6) {
    ah_dim_t *d = &sp->dims[AH_DIM_CHUNK];
    for (int64_t v = 64 << 10; v <= 4 << 20; v *= 2) d->values[d->nvalues++] = v;
    if (sp->ndims == 0) { /* dimension 1 needs dimension 0: channels then only "keep" */
      sp->dims[AH_DIM_NCHANNELS].nvalues = 1;
      sp->dims[AH_DIM_NCHANNELS].values[0] = 0;
    }
    sp->ndims = 2;
  }
  table_argmin(call, &sp->start);
  sp->start.ndims = sp->ndims;
}
#endif

/* ---- key entries --------------------------------------------------------------------------------- */

/* First call of a key on this rank: its entry, its process-wide state and, when this communicator
 * is not tuned here (or the key is pinned), the pinned forever segment. Slow path. */
static ah_ckey_t *ckey_create(ah_comm_t *c, int coll, int bin, const ah_call_t *call) {
  ah_ckey_t *ck = calloc(1, sizeof *ck);
  if (!ck) {
    AH_LOG_CAPPED(3, AH_LOG_WARN, "out of memory creating a key: it keeps NCCL's choice");
    return NULL;
  }
  ah_key_t key = {c->id, coll, bin};
  ck->ks = ah_shim_keystate_get(&key);
  if (!ck->ks) {
    free(ck);
    return NULL;
  }
  ck->coll = coll;
  ck->bin = bin;
  ck->bytes_min = UINT64_MAX;
  ck->seg_first = UINT64_MAX;
  ck->source = AH_SOURCE_DEFAULT;
  ck->leader = is_leader(c);
  table_argmin(call, &ck->nccl_cfg);
  ck->dflt.cfg = ck->nccl_cfg;
  config_keep(&ck->applied.cfg);
  if (c->ctl != AH_CTL_OBSERVE) {
    ah_segment_t seg;
    pinned_segment(c, coll, bin, call, &seg);
    int tuned = (c->ctl == AH_CTL_LOCAL_TUNE || c->ctl == AH_CTL_REMOTE_TUNE) && seg.source == AH_SOURCE_DEFAULT;
    if (!tuned && ah_sched_horizon(ck->ks->sched) == 0 && ah_sched_append(ck->ks->sched, &seg) != 0)
      ah_log(AH_LOG_WARN, "could not commit the pinned configuration of %s bin %d", ah_coll_name(coll), bin);
    /* A pinned key of a tuned communicator is committed by each rank itself; the leader must not
     * start a search for it. */
  }
  pthread_mutex_lock(&ck->ks->lock);
  if (ck->ks->nlocal < AH_MAX_LOCAL_RANKS) ck->ks->local[ck->ks->nlocal++] = ck;
  pthread_mutex_unlock(&ck->ks->lock);
  pthread_mutex_lock(&c->lock);
  __atomic_store_n(&c->keys[coll][bin], ck, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&c->lock);
  return ck;
}

#ifdef AH_HAVE_TUNE
/* Leader: commits segments until call `index` is covered. Returns 1 when it is. */
static int leader_commit(ah_comm_t *c, ah_ckey_t *ck, uint64_t index, const ah_call_t *call,
                         ah_segment_t *seg) {
  ah_keystate_t *ks = ck->ks;
  int ok = 0;
  pthread_mutex_lock(&ks->lock);
  if (!ks->tune) {
    if (!ks->space_set) {
      space_build(c, call, &ks->space);
      ks->space_set = 1;
    }
    ah_tune_params_t params;
    ah_tune_params_default(&params);
    if (ah_shim.settings && ah_shim.settings->tune_budget > 0) params.budget_calls = ah_shim.settings->tune_budget;
    params.seed = ks->key.comm ^ ((uint64_t)ks->key.coll << 32) ^ (uint64_t)ks->key.bin;
    ks->tune = ah_tune_create(&ks->space, &params);
  }
  if (ks->tune) {
    ah_shim_coord_hooks_t h = {0};
    if (c->ctl == AH_CTL_REMOTE_TUNE) h = hooks_copy();
    for (int guard = 0; guard < 1024 && !(ok = ah_sched_lookup(ks->sched, index, seg)); guard++) {
      ah_segment_t next;
      ah_tune_next(ks->tune, ah_sched_horizon(ks->sched), &next);
      if (ah_sched_append(ks->sched, &next) != 0) break;
      if (h.publish) h.publish(h.arg, &ks->key, &next);
    }
  }
  pthread_mutex_unlock(&ks->lock);
  if (!ok) AH_LOG_CAPPED(3, AH_LOG_ERROR, "the search could not commit call %llu of %s bin %d; NCCL's "
                         "choice is kept for it", (unsigned long long)index, ah_coll_name(ck->coll), ck->bin);
  return ok;
}

/* Leader, after drift re-opened a converged key: cuts the forever segment short far enough ahead
 * that no rank has passed the cut. Local ranks are at most a few calls apart (each collective waits
 * for all of them), and the cut is placed AH_CUT_MARGIN calls past the furthest local rank; ranks
 * in other processes are the coordinator's to keep behind (it delivers the cut). */
#define AH_CUT_MARGIN 64
static void leader_cut(ah_comm_t *c, ah_ckey_t *ck, uint64_t index) {
  ah_keystate_t *ks = ck->ks;
  pthread_mutex_lock(&ks->lock);
  if (atomic_exchange(&ks->reopen, 0) && ks->tune && ah_sched_horizon(ks->sched) == UINT64_MAX) {
    uint64_t furthest = index;
    for (int i = 0; i < ks->nlocal; i++) {
      uint64_t n = __atomic_load_n(&ks->local[i]->next, __ATOMIC_RELAXED);
      if (n > furthest) furthest = n;
    }
    ah_segment_t next;
    ah_tune_next(ks->tune, furthest + AH_CUT_MARGIN, &next);
    if (ah_sched_append(ks->sched, &next) == 0 && c->ctl == AH_CTL_REMOTE_TUNE) {
      ah_shim_coord_hooks_t h = hooks_copy();
      if (h.publish) h.publish(h.arg, &ks->key, &next);
    }
  }
  pthread_mutex_unlock(&ks->lock);
}
#endif

/* Other ranks: wait until the leader (here or through the coordinator) commits call `index`.
 * Returns 1 with the segment, 0 when the coordinator is gone for good, or 2 when the leader turned
 * out to be in this process meanwhile (its context decided after this one): commit it here. */
static int worker_wait(ah_comm_t *c, ah_ckey_t *ck, uint64_t index, ah_segment_t *seg) {
  double t0 = now_us(), warn_after = (ah_shim.settings ? ah_shim.settings->sync_warn_s : 10.0) * 1e6;
  int warned = 0, polls = 0;
  long sleep_ns = 20000;
  double give_up_after = (ah_shim.settings ? ah_shim.settings->sync_timeout_s : 300.0) * 1e6;
  while (!ah_sched_lookup(ck->ks->sched, index, seg)) {
    if (leads_here(c)) return 2;
    if (atomic_load_explicit(&ck->ks->gave_up, memory_order_relaxed)) return 0;
    double waited = now_us() - t0;
    if (waited > give_up_after) {
      atomic_store(&ck->ks->gave_up, 1);
      ah_log(AH_LOG_ERROR, "rank %d gave up after %.0f s (AUTOHA_SYNC_TIMEOUT_S) waiting for the "
             "leader's decision on call %llu of %s bin %d (communicator %016llx): the leader's "
             "process is dead or hung; this and every later undecided call of the key run NCCL's "
             "own choice", c->rank, waited / 1e6, (unsigned long long)index, ah_coll_name(ck->coll),
             ck->bin, (unsigned long long)c->id);
      ck->sync_waits++;
      ck->sync_wait_us += waited;
      return 0;
    }
    if (!warned && waited > warn_after) {
      warned = 1;
      ah_log(AH_LOG_WARN, "rank %d has waited %.1f s for the leader's decision on call %llu of %s bin "
             "%d (communicator %016llx); still waiting", c->rank, waited / 1e6,
             (unsigned long long)index, ah_coll_name(ck->coll), ck->bin, (unsigned long long)c->id);
    }
    if (c->ctl == AH_CTL_REMOTE_TUNE) {
      ah_shim_coord_hooks_t h = hooks_copy();
      if (h.alive && !h.alive(h.arg, c->id)) {
        AH_LOG_CAPPED(3, AH_LOG_ERROR, "the coordinator of communicator %016llx is gone: NCCL's "
                      "choice is kept for undecided calls", (unsigned long long)c->id);
        ck->sync_waits++;
        ck->sync_wait_us += now_us() - t0;
        return 0;
      }
    }
    /* The leader is usually a call or two behind: yield first, then sleep in growing steps. */
    if (++polls <= 64) {
      sched_yield();
      continue;
    }
    struct timespec ts = {0, sleep_ns};
    nanosleep(&ts, NULL);
    if (sleep_ns < 500000) sleep_ns *= 2;
  }
  ck->sync_waits++;
  ck->sync_wait_us += now_us() - t0;
  return 1;
}

/* The segment of call `index` when the schedule does not cover it yet. Slow path. */
static int resolve(ah_comm_t *c, ah_ckey_t *ck, uint64_t index, const ah_call_t *call, ah_segment_t *seg) {
  if (c->ctl == AH_CTL_FIXED) {
    pinned_segment(c, ck->coll, ck->bin, call, seg);
    (void)ah_sched_append(ck->ks->sched, seg); /* a replay when another local rank was first */
    return ah_sched_lookup(ck->ks->sched, index, seg);
  }
#ifdef AH_HAVE_TUNE
  if (leads_here(c)) return leader_commit(c, ck, index, call, seg);
#endif
  int w = worker_wait(c, ck, index, seg);
#ifdef AH_HAVE_TUNE
  if (w == 2) return leader_commit(c, ck, index, call, seg);
#endif
  return w == 1;
}

/* ---- the path ------------------------------------------------------------------------------------ */

/* Which calls are timed: every call of a segment that is not forever (a probe the search needs
 * measured), and of a key whose configuration is settled (pinned, converged or observed) its first
 * 16 calls and then one in 64 — enough for the report and for drift checks, while the calls in
 * between cost no CUDA call at all. */
#define TIME_SAMPLE(index) ((index) < 16 || ((index)&63) == 0)

static AH_TLS_HOT struct {
  ah_comm_t *c;
  int coll;
  size_t nbytes;
  size_t chunk;
} last_decision;

static AH_TLS_HOT int simulating;

void ah_shim_simulating(int on) { simulating = on; }

/* A simulated bucket: the configuration the next real call of its key would get, if committed;
 * nothing is counted, waited for or recorded. */
static void decide_peek(ah_comm_t *c, const ah_call_t *call, ah_decision_t *d) {
  int bin = ah_shim_bin(call->coll, call->nbytes, c->nranks);
  ah_ckey_t *ck = __atomic_load_n(&c->keys[call->coll][bin], __ATOMIC_ACQUIRE);
  ah_segment_t seg;
  if (!ck || c->ctl == AH_CTL_OBSERVE || !ah_sched_lookup(ck->ks->sched, ck->next, &seg) ||
      config_is_keep(&seg.config) || (!call->table && !config_allowed(&seg.config, call)))
    return;
  d->algo = seg.config.algo;
  d->proto = seg.config.proto;
  if (seg.config.ndims > AH_DIM_NCHANNELS) d->nchannels = (int)seg.config.res[AH_DIM_NCHANNELS];
  if (seg.config.ndims > AH_DIM_CHUNK) d->chunk = (size_t)seg.config.res[AH_DIM_CHUNK];
  d->source = seg.source;
  last_decision.c = c;
  last_decision.coll = call->coll;
  last_decision.nbytes = call->nbytes;
  last_decision.chunk = d->chunk;
}

/* A bucket issued into a stream being captured into a CUDA graph: every launch of the graph replays
 * it with what is decided now, untimed. It takes its call index, as any call, so indices stay
 * aligned across ranks; it runs the index's segment when that is settled (a forever segment:
 * converged, pinned or observed), else NCCL's own choice — a probe would be replayed untimed for
 * the rest of the job. Either way every rank makes the same choice for the same call. */
static void decide_captured(ah_comm_t *c, const ah_call_t *call, ah_decision_t *d) {
  int bin = ah_shim_bin(call->coll, call->nbytes, c->nranks);
  ah_ckey_t *ck = __atomic_load_n(&c->keys[call->coll][bin], __ATOMIC_ACQUIRE);
  if (!ck && !(ck = ckey_create(c, call->coll, bin, call))) return;
  uint64_t index = ck->next;
  __atomic_store_n(&ck->next, index + 1, __ATOMIC_RELAXED);
  size_t bpr = call->nbytes;
  if ((call->coll == AH_FUNC_ALLGATHER || call->coll == AH_FUNC_REDUCESCATTER) && c->nranks > 1)
    bpr /= (size_t)c->nranks;
  if (bpr < ck->bytes_min) ck->bytes_min = bpr;
  if (bpr > ck->bytes_max) ck->bytes_max = bpr;
  ck->captured++;
  d->ck = ck;
  d->index = index;
  ah_segment_t seg;
  if (c->ctl == AH_CTL_OBSERVE ||
      !(ah_sched_lookup(ck->ks->sched, index, &seg) || resolve(c, ck, index, call, &seg)) ||
      seg.count != AH_SCHED_FOREVER || config_is_keep(&seg.config) || !config_allowed(&seg.config, call))
    return; /* NCCL's choice */
  d->algo = seg.config.algo;
  d->proto = seg.config.proto;
  if (seg.config.ndims > AH_DIM_NCHANNELS) d->nchannels = (int)seg.config.res[AH_DIM_NCHANNELS];
  if (seg.config.ndims > AH_DIM_CHUNK) d->chunk = (size_t)seg.config.res[AH_DIM_CHUNK];
  d->source = seg.source;
  last_decision.c = c;
  last_decision.coll = call->coll;
  last_decision.nbytes = call->nbytes;
  last_decision.chunk = d->chunk;
}

void ah_shim_decide(ah_comm_t *c, const ah_call_t *call, ah_decision_t *d) {
  d->algo = d->proto = -1;
  d->nchannels = 0;
  d->chunk = 0;
  d->source = AH_SOURCE_DEFAULT;
  d->ck = NULL;
  d->index = 0;
  last_decision.c = NULL;
  int coll = call->coll;
  if ((unsigned)coll >= AH_NUM_FUNCTIONS) return;
  if (__builtin_expect(c->ctl < 0, 0)) comm_control(c);
  if (__builtin_expect(simulating, 0)) {
    decide_peek(c, call, d);
    return;
  }
  if (__builtin_expect(ah_timing_captured, 0)) {
    decide_captured(c, call, d);
    return;
  }
  int bin = ah_shim_bin(coll, call->nbytes, c->nranks);
  ah_ckey_t *ck = __atomic_load_n(&c->keys[coll][bin], __ATOMIC_ACQUIRE);
  if (__builtin_expect(!ck, 0) && !(ck = ckey_create(c, coll, bin, call))) return;
  uint64_t index = ck->next;
  __atomic_store_n(&ck->next, index + 1, __ATOMIC_RELAXED); /* the leader reads it (leader_cut) */
  size_t bpr = call->nbytes;
  if ((coll == AH_FUNC_ALLGATHER || coll == AH_FUNC_REDUCESCATTER) && c->nranks > 1) bpr /= (size_t)c->nranks;
  if (bpr < ck->bytes_min) ck->bytes_min = bpr;
  if (bpr > ck->bytes_max) ck->bytes_max = bpr;
  d->ck = ck;
  d->index = index;

  ah_segment_t seg;
  int have = 0;
  if (c->ctl != AH_CTL_OBSERVE) {
#ifdef AH_HAVE_TUNE
    if (__builtin_expect(atomic_load_explicit(&ck->ks->reopen, memory_order_relaxed), 0) && is_leader(c))
      leader_cut(c, ck, index);
#endif
    have = ah_sched_lookup(ck->ks->sched, index, &seg) || resolve(c, ck, index, call, &seg);
  }
  if (have && seg.first != ck->seg_first) { /* a segment this rank has not used yet: classify it once */
    ck->seg_first = seg.first;
    ck->seg_keep = config_is_keep(&seg.config);
    ck->seg_refused = !ck->seg_keep && !call->table && !config_allowed(&seg.config, call);
    /* NCCL's own pair with NCCL's resources (a search's starting point): still forced, so every
     * call of the segment runs it, but its calls and times are NCCL's default in the report. */
    ck->seg_nccl = !ck->seg_keep && !ck->seg_refused && ck->nccl_cfg.algo >= 0 &&
                   seg.config.algo == ck->nccl_cfg.algo && seg.config.proto == ck->nccl_cfg.proto;
    for (int i = 0; ck->seg_nccl && i < seg.config.ndims && i < AH_MAX_DIMS; i++)
      if (seg.config.res[i] != 0) ck->seg_nccl = 0;
    if (!ck->seg_keep && !ck->seg_refused && !ck->seg_nccl && !ah_config_equal(&seg.config, &ck->applied.cfg)) {
      memset(&ck->applied, 0, sizeof ck->applied); /* a new config: its own statistics */
      ck->applied.cfg = seg.config;
      ck->gen++;
    }
  }
  if (have && !ck->seg_keep) {
    if (__builtin_expect(!ck->seg_refused, 1)) {
      uint32_t gen = ck->seg_nccl ? 0 : ck->gen;
      if (ck->seg_nccl) ck->dflt.calls++;
      else ck->applied.calls++;
      d->algo = seg.config.algo;
      d->proto = seg.config.proto;
      if (seg.config.ndims > AH_DIM_NCHANNELS) d->nchannels = (int)seg.config.res[AH_DIM_NCHANNELS];
      if (seg.config.ndims > AH_DIM_CHUNK) d->chunk = (size_t)seg.config.res[AH_DIM_CHUNK];
      d->source = seg.source;
      ck->source = seg.source;
      last_decision.c = c;
      last_decision.coll = coll;
      last_decision.nbytes = call->nbytes;
      last_decision.chunk = d->chunk;
      if (seg.count != AH_SCHED_FOREVER || TIME_SAMPLE(index)) ah_timing_note(ck, index, d->source, gen, bpr);
      return;
    }
    ah_shim_refused(c, call, d); /* v1/v2: a pair the flags forbid; NCCL would not check it */
  }
  ck->dflt.calls++;
  ck->source = have ? seg.source : AH_SOURCE_DEFAULT; /* a pinned or tuned "keep NCCL's choice" */
  d->source = ck->source;
  if ((have && seg.count != AH_SCHED_FOREVER) || TIME_SAMPLE(index)) ah_timing_note(ck, index, AH_SOURCE_DEFAULT, 0, bpr);
}

size_t ah_shim_decide_chunk(ah_comm_t *c, int coll, size_t nbytes) {
  if (last_decision.c != c || last_decision.coll != coll || last_decision.nbytes != nbytes) return 0;
  return last_decision.chunk;
}

void ah_shim_refused(ah_comm_t *c, const ah_call_t *call, ah_decision_t *d) {
  ah_ckey_t *ck = d->ck;
  if (ck && (d->algo >= 0 || d->proto >= 0 || d->nchannels > 0 || d->chunk > 0) && !ck->seg_nccl &&
      ck->applied.calls > 0) {
    ck->applied.calls--; /* accounted as applied by ah_shim_decide: it ran NCCL's choice instead */
    ck->dflt.calls++;
  }
  if (ck && !ck->refused) {
    ck->refused = 1;
    ah_log(AH_LOG_WARN, "%s of %zu bytes on communicator %016llx: the committed configuration names "
           "a pair NCCL cannot run here; refused, NCCL's choice kept", ah_coll_name(call->coll),
           call->nbytes, (unsigned long long)c->id);
  }
  d->algo = d->proto = -1;
  d->nchannels = 0;
  d->chunk = 0;
  last_decision.c = NULL; /* nor its chunk (v6) */
}

void ah_shim_record_time(ah_ckey_t *ck, uint64_t index, int source, uint32_t gen, double us,
                         size_t bytes_per_rank) {
  if (!ck || !(us >= 0) || !isfinite(us)) return;
  /* gen 0: the call kept NCCL's choice; otherwise it ran the applied config of that generation
   * (times of an older generation arrive late and are dropped from the report, not the search). */
  ah_stat_t *st = NULL;
  if (gen == 0) st = &ck->dflt;
  else if (gen == ck->gen) st = &ck->applied;
  if (st) {
    st->timed++;
    st->us_total += us;
    st->bytes_total += (double)bytes_per_rank;
  }
#ifdef AH_HAVE_TUNE
  ah_keystate_t *ks = ck->ks;
  if (ck->leader && ks->tune) { /* the search learns from the leader's own calls only */
    pthread_mutex_lock(&ks->lock);
    ah_tune_observe(ks->tune, index, us);
    if (ah_sched_horizon(ks->sched) == UINT64_MAX && ah_tune_reopened(ks->tune)) atomic_store(&ks->reopen, 1);
    pthread_mutex_unlock(&ks->lock);
  }
#else
  (void)index;
#endif
}
