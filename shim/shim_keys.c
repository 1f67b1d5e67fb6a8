/* The key table: per process, one state per (communicator, collective, size bin) key — the
 * schedule every local rank reads and, where the search runs, the search — and per rank one entry
 * per key with its call index and the statistics the report shows.
 *
 * Key states are created on demand (first call, or a segment delivered by the coordinator) and
 * never freed, so a pointer to one stays valid for the life of the process; a released
 * communicator's searches and local minima within them are (shim_retire.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ah_pin.h"
#include "ah_uthash.h"
#include "shim_control.h"
#include "shim_real.h"
#include "ah_tune.h"

/* ---- process-wide key states ------------------------------------------------------------------ */

typedef struct {
  ah_shim_keystate_t ks;
  UT_hash_handle hh;
} ks_entry_t;

static pthread_mutex_t ks_lock = PTHREAD_MUTEX_INITIALIZER;
static ks_entry_t *ks_table;

/* The state of key, created when absent and `create` is set. Returns it, or NULL. */
static ah_shim_keystate_t *keystate_lookup(const ah_key_t *key, int create) {
  ah_key_t k;
  memset(&k, 0, sizeof k); /* hashed as bytes: no stray padding */
  k.comm = key->comm;
  k.coll = key->coll;
  k.bin = key->bin;
  pthread_mutex_lock(&ks_lock);
  ks_entry_t *e = NULL;
  HASH_FIND(hh, ks_table, &k, sizeof k, e);
  if (!e && !create) {
    pthread_mutex_unlock(&ks_lock);
    return NULL;
  }
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
  if (!e)
    AH_LOG_CAPPED(3, AH_LOG_WARN, "out of memory creating a key's state: it keeps NCCL's choice");
  return e ? &e->ks : NULL;
}

ah_shim_keystate_t *ah_shim_keystate_get(const ah_key_t *key) { return keystate_lookup(key, 1); }

ah_shim_keystate_t *ah_shim_keystate_find(const ah_key_t *key) { return keystate_lookup(key, 0); }

void ah_shim_keystate_foreach(void (*fn)(void *arg, ah_shim_keystate_t *ks), void *arg) {
  pthread_mutex_lock(&ks_lock);
  for (ks_entry_t *e = ks_table; e; e = e->hh.next) fn(arg, &e->ks);
  pthread_mutex_unlock(&ks_lock);
}

void ah_shim_search_observe(const ah_key_t *key, uint64_t index, double us) {
  ah_shim_keystate_t *ks =
      ah_shim_keystate_find(key); /* a key never seen here is not searched here */
  if (!ks || !(us >= 0)) return;
  pthread_mutex_lock(&ks->lock);
  if (ks->tune) ah_tune_observe(ks->tune, index, us); /* drift is not checked across processes */
  pthread_mutex_unlock(&ks->lock);
}

void ah_shim_audit(const ah_key_t *key, uint64_t from, unsigned calls) {
  ah_shim_keystate_t *ks =
      ah_shim_keystate_find(key); /* a key never called here: nothing to time */
  if (!ks || calls == 0) return;
  pthread_mutex_lock(&ks->lock);
  for (int i = 0; i < ks->nlocal; i++) {
    ah_shim_rankkey_t *ck = ks->local[i];
    uint64_t next = __atomic_load_n(&ck->next, __ATOMIC_RELAXED);
    uint64_t lo = from > next ? from : next; /* a rank past `from` starts at its next call */
    atomic_store(&ck->audit_hi, 0);          /* no half-written window is ever read as one */
    atomic_store(&ck->audit_lo, lo);
    atomic_store(&ck->audit_hi, lo + calls);
    __atomic_store_n(&ck->hot_end, 0, __ATOMIC_SEQ_CST); /* its next call takes the full path */
  }
  pthread_mutex_unlock(&ks->lock);
}

/* A local minimum waits this long for the rest of the ranks, as the hub waits across processes. */
#define LOCAL_MIN_WAIT_US 500000.0

/* Passes slot m's shortest duration to the search; later times of its call are ignored. */
static void local_min_pass(ah_shim_keystate_t *ks, ah_shim_localmin_t *m) {
  if (ks->tune) ah_tune_observe(ks->tune, m->index, m->us);
  m->n = -1;
}

/* Local rank ck's duration of search call `index` of a communicator whose ranks are all in this
 * process: the search learns the shortest once every rank that times its calls has reported it, as
 * the hub gathers it across processes. Note that a rank whose times never come (a call NCCL decided
 * on its own thread is not timed) must not hold the search up: only ranks that have reported a time
 * of the key are waited for, and what the others reported is passed on 500 ms after the first did,
 * or when a call 64 later needs the slot (a rank that stopped). A time for a call already passed on
 * is ignored. */
static void local_min_observe(ah_shim_rankkey_t *ck, uint64_t index, double us, int nranks) {
  ah_shim_keystate_t *ks = ck->ks;
  double now = ah_shim_now_us();
  pthread_mutex_lock(&ks->lock);
  if (!ks->tune) { /* no search to learn it (its communicator was released: shim_retire.c) */
    pthread_mutex_unlock(&ks->lock);
    return;
  }
  if (!ck->timer) {
    ck->timer = 1;
    ks->ntimers++;
  }
  int want = ks->ntimers < nranks ? ks->ntimers : nranks;
  if (!ks->mins) ks->mins = calloc(AH_LOCAL_MIN_SLOTS, sizeof *ks->mins);
  ah_shim_localmin_t *m = ks->mins ? &ks->mins[index % AH_LOCAL_MIN_SLOTS] : NULL;
  if (m && (m->n == 0 || m->index < index)) { /* free, or an earlier call's: that one is due now */
    if (m->n > 0) local_min_pass(ks, m);
    *m = (ah_shim_localmin_t){.index = index, .us = us, .t0_us = now, .n = 1};
  } else if (m && m->index == index && m->n > 0) {
    if (us < m->us) m->us = us;
    m->n++;
  } /* else passed on already, or the slot holds a later call: too late */
  if (m && m->index == index && m->n >= want) local_min_pass(ks, m);
  for (int i = 0; ks->mins && i < AH_LOCAL_MIN_SLOTS; i++)
    if (ks->mins[i].n > 0 && now - ks->mins[i].t0_us > LOCAL_MIN_WAIT_US)
      local_min_pass(ks, &ks->mins[i]);
  pthread_mutex_unlock(&ks->lock);
}

void ah_shim_deliver(void *arg, const ah_key_t *key, const ah_segment_t *seg) {
  (void)arg;
  ah_shim_keystate_t *ks = ah_shim_keystate_get(key);
  if (!ks) return;
  if (ah_sched_append(ks->sched, seg) != 0)
    AH_LOG_CAPPED(
        5, AH_LOG_ERROR,
        "coordinator delivered a segment for comm %016llx %s bin %d at call %llu that does "
        "not extend the schedule (horizon %llu): ignored",
        (unsigned long long)key->comm, ah_coll_name(key->coll), key->bin,
        (unsigned long long)seg->first, (unsigned long long)ah_sched_horizon(ks->sched));
}

/* ---- a rank's key entries ------------------------------------------------------------------------ */

void ah_shim_pinned(const ah_comm_t *c, int coll, int bin, const ah_call_t *call,
                    ah_segment_t *seg) {
  ah_pin_segment(ah_env_settings(), ah_shim.profile, c->id, c->nranks, c->nnodes, coll, bin, call,
                 seg);
}

void ah_shim_key_reopen(ah_shim_rankkey_t *ck) {
  atomic_store(&ck->ks->reopen, 1);
  __atomic_store_n(&ck->hot_end, 0,
                   __ATOMIC_SEQ_CST); /* its next call takes the full path, which cuts */
}

ah_shim_rankkey_t *ah_shim_rankkey_new(int coll, int bin) {
  ah_shim_rankkey_t *ck = malloc(sizeof *ck);
  if (ck) /* every other member starts at zero */
    *ck = (ah_shim_rankkey_t){.coll = coll,
                              .bin = bin,
                              .bytes_min = UINT64_MAX,
                              .seg_first = UINT64_MAX,
                              .seg_published = UINT64_MAX,
                              .hot_published = UINT64_MAX,
                              .source = AH_SOURCE_DEFAULT};
  return ck;
}

void ah_shim_key_segment0(ah_shim_keystate_t *ks, ah_segment_t *seg) {
  memset(seg, 0, sizeof *seg);
  ah_config_keep(&seg->config);
  seg->first = 0;
  seg->count = 1;
  seg->source = AH_SOURCE_DEFAULT;
  (void)ah_sched_append(ks->sched, seg); /* a replay when another rank or the hub was first */
}

void ah_shim_key_control(ah_comm_t *c, ah_shim_rankkey_t *ck, const ah_call_t *call) {
  ck->leader = c->ctl != AH_CTL_OBSERVE && ah_shim_is_leader(c);
  if (c->ctl == AH_CTL_OBSERVE) return;
  ah_segment_t seg;
  ah_shim_pinned(c, ck->coll, ck->bin, call, &seg);
  int tuned = (c->ctl == AH_CTL_LOCAL_TUNE || c->ctl == AH_CTL_REMOTE_TUNE) &&
              seg.source == AH_SOURCE_DEFAULT;
  ck->searched = tuned;
  if (tuned) return;
  /* A pinned key of a tuned communicator is committed by each rank itself; the leader must not
   * start a search for it. Spanning processes, its call 0 is NCCL's choice as every key's is. */
  if (c->ctl == AH_CTL_REMOTE_TUNE && ah_sched_horizon(ck->ks->sched) == 0) {
    ah_segment_t zero;
    ah_shim_key_segment0(ck->ks, &zero);
    seg.first = 1;
  }
  if (ah_sched_horizon(ck->ks->sched) == seg.first && ah_sched_append(ck->ks->sched, &seg) != 0)
    ah_log(AH_LOG_WARN, "could not commit the pinned configuration of %s bin %d",
           ah_coll_name(ck->coll), ck->bin);
}

int ah_shim_key_settle(ah_comm_t *c, ah_shim_rankkey_t *ck, uint64_t index, const ah_call_t *call) {
  if (!ah_shim_comm_settle(c, index)) return 0; /* call 0 before the verdict: NCCL's choice */
  ck->unsettled = 0;
  ah_shim_key_control(c, ck, call);
  return c->ctl != AH_CTL_OBSERVE;
}

ah_shim_rankkey_t *ah_shim_key_create(ah_comm_t *c, int coll, int bin, const ah_call_t *call) {
  ah_shim_note_decider(c);
  if (!c->cuctx && ah_shim_cuda_init())
    (void)ah_cuda.CtxGetCurrent(&c->cuctx); /* for the hang probes */
  ah_shim_rankkey_t *ck = ah_shim_rankkey_new(coll, bin);
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
  ck->comm = c;
  ah_config_table_argmin(call, &ck->nccl_cfg);
  ck->nccl_default.cfg = ck->nccl_cfg;
  ah_config_keep(&ck->applied.cfg);
  if (c->ctl == AH_CTL_PENDING) ck->unsettled = 1; /* ah_shim_key_settle does the rest */
  else ah_shim_key_control(c, ck, call);
  pthread_mutex_lock(&ck->ks->lock);
  if (ck->ks->nlocal < AH_MAX_LOCAL_RANKS) ck->ks->local[ck->ks->nlocal++] = ck;
  pthread_mutex_unlock(&ck->ks->lock);
  pthread_mutex_lock(&c->lock);
  __atomic_store_n(&c->keys[coll][bin], ck, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&c->lock);
  return ck;
}

void ah_shim_record_time(ah_shim_rankkey_t *ck, uint64_t index, int source, uint32_t gen, double us,
                         size_t bytes_per_rank) {
  if (!ck || !(us >= 0) || !isfinite(us)) return;
  /* gen 0: the call kept NCCL's choice; otherwise it ran the applied config of that generation
   * (times of an older generation arrive late and are dropped from the report, not the search). */
  ah_stat_t *st = NULL;
  if (gen == 0) st = &ck->nccl_default;
  else if (gen == ck->gen) st = &ck->applied;
  if (st) {
    st->timed++;
    st->us_total += us;
    st->bytes_total += (double)bytes_per_rank;
  }
  ah_comm_t *c = ck->comm;
  if (c && c->rec && c->rec->hub)
    ah_shim_health_sample(c, ck->coll, ck->bin, index, us); /* hub-joined */
  ah_shim_keystate_t *ks = ck->ks;
  /* A search learns from the shortest duration across ranks, not the leader's own: a rank that
   * arrived early also times its wait for the last. Across processes the hub gathers it
   * (ah_shim_search_observe); within one, the key state does. */
  ah_segment_t seg;
  int probe =
      c && ck->searched && ah_sched_lookup(ks->sched, index, &seg) && seg.count != AH_SCHED_FOREVER;
  if (probe && c->ctl == AH_CTL_REMOTE_TUNE) {
    ah_shim_coord_hooks_t h = ah_shim_hooks();
    if (h.search_time) {
      h.search_time(h.arg, c->id, (uint32_t)c->rank, ck->coll, ck->bin, index, us);
      return;
    }
  }
  if (probe && c->ctl == AH_CTL_LOCAL_TUNE && c->nranks > 1) {
    local_min_observe(ck, index, us, c->nranks);
    return;
  }
  if (ck->leader &&
      ks->tune) { /* a pinned config's drift, a one-rank search: the leader's own calls */
    pthread_mutex_lock(&ks->lock);
    ah_tune_observe(ks->tune, index, us);
    if (ah_sched_horizon(ks->sched) == UINT64_MAX && ah_tune_reopened(ks->tune))
      ah_shim_key_reopen(ck);
    pthread_mutex_unlock(&ks->lock);
  }
}
