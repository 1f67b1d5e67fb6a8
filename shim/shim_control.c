/* How a communicator's keys are decided and the waits that decision involves: the coordinator's
 * hooks, the communicator's control (fixed at its first decision, AH_CTL_*), who leads its search,
 * and the bounded waits for the hub's verdict and for the leader's decisions.
 *
 * How a communicator's keys are decided:
 *   observe      NCCL's choice, recorded;
 *   fixed        override, else profile, else NCCL's choice: a forever segment from index 0 that
 *                every rank commits itself — deterministic, so identical on all ranks;
 *   local tune   every rank is in this process: the leader (rank 0) runs ah_tune, and whichever
 *                local rank reaches an uncommitted call first appends the search's next segment;
 *   remote tune  the ranks span processes and the hub says every rank joined with the same
 *                settings (verdict COMPLETE): as local tune in the leader's process, with segments
 *                published to the others. ABANDONED or MISMATCH: NCCL's choice on every rank.
 *                Call 0 of every key is NCCL's choice on every rank, so no rank waits for the
 *                verdict (AH_CTL_PENDING until it comes) or for the leader before a key's second
 *                call: a communicator made for a few calls costs no round trip to the hub. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shim_control.h"

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

ah_shim_coord_hooks_t ah_shim_hooks(void) {
  ah_shim_coord_hooks_t h;
  pthread_mutex_lock(&hooks_lock);
  h = hooks;
  pthread_mutex_unlock(&hooks_lock);
  return h;
}

double ah_shim_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* The one way the shim polls for something another thread or process provides: `yields`
 * sched_yield()s first (the awaited party is usually a call behind), then sleeps from `ns`
 * doubling up to `cap_ns`. */
typedef struct {
  int polls, yields;
  long ns, cap_ns;
} backoff_t;

/* One step of b: a yield, or a nap of its current length. With h, the nap is slept in h->wait with
 * the ticket taken before the caller last looked, so news for the process ends it early. */
static void backoff_step(backoff_t *b, const ah_shim_coord_hooks_t *h, uint64_t comm,
                         uint64_t ticket) {
  if (b->polls++ < b->yields) {
    sched_yield();
    return;
  }
  if (h) {
    h->wait(h->arg, comm, ticket, b->ns / 1000);
  } else {
    struct timespec ts = {0, b->ns};
    nanosleep(&ts, NULL);
  }
  if (b->ns < b->cap_ns) b->ns *= 2;
}

static void backoff(backoff_t *b) { backoff_step(b, NULL, 0, 0); }

/* ---- how a communicator is decided ------------------------------------------------------------ */

int ah_shim_is_leader(const ah_comm_t *c) { return c->rec && c->rec->leader == c; }

/* Note that the leader rank is not always the committer. A thread driving several ranks (grouped
 * calls, nccl-tests, JAX) is asked by NCCL about its communicators in an order of NCCL's choosing,
 * and a rank that waited there for the leader rank's decision would wait for itself: a local rank
 * commits when the leader's decisions are made on its own thread (or none was made yet). A rank on
 * another thread than the leader's waits, as before: it may run far ahead of the leader (NCCL
 * calls are asynchronous on a GPU), and committing the search's next probes before the leader
 * measured the previous ones would spend the budget blind. The search is one object per process
 * and key, serialised by its lock, so every rank reads the same schedule either way. */
int ah_shim_leads_here(const ah_comm_t *c) {
  ah_comm_t *lead =
      c->rec ? __atomic_load_n((ah_comm_t **)&c->rec->leader, __ATOMIC_ACQUIRE) : NULL;
  if (!lead) return 0;
  uintptr_t t = __atomic_load_n(&lead->decider, __ATOMIC_RELAXED);
  return lead == c || t == 0 || t == (uintptr_t)pthread_self();
}

void ah_shim_note_decider(ah_comm_t *c) {
  if (ah_shim_is_leader(c))
    __atomic_store_n(&c->decider, (uintptr_t)pthread_self(), __ATOMIC_RELAXED);
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
  ah_comm_foreach_live(local_rank_collect, &l);
  for (int i = 0; i < l.n; i++)
    if (l.ranks[i] != c->rank) (void)h->attach(h->arg, c->id, c->nranks, l.ranks[i]);
}

/* Waits for the hub's verdict on c's communicator (AH_VERDICT_*, never PENDING).
 *
 * Note that every rank of the communicator in fixed or tune mode, the leader included, waits here
 * (fixed: at its first call; tune: at the second call of a key, call 0 of every key being NCCL's
 * choice whatever the verdict): the hub decides once for all of them, so a rank whose process never
 * reached the hub and the ranks that did (ABANDONED) all run NCCL's own choices. The wait is bounded by the
 * hub (it decides within AUTOHA_COORD_JOIN_S of the first join), by the client's detection of a
 * hub that is gone, and by AUTOHA_SYNC_TIMEOUT_S for a hub that does not answer. */
static ah_verdict_t verdict_wait(const ah_shim_coord_hooks_t *h, ah_comm_t *c) {
  double t0 = ah_shim_now_us(), warn_after = ah_env_settings()->sync_warn_s * 1e6;
  double give_up_after = ah_env_settings()->sync_timeout_s * 1e6;
  int warned = 0;
  backoff_t b = {.yields = 0, .ns = 100000, .cap_ns = 5000000};
  int sleeps = h->ticket && h->wait; /* woken by the verdict's arrival, else a nap */
  for (;;) {
    uint64_t ticket = sleeps ? h->ticket(h->arg, c->id) : 0;
    if (sleeps && h->poll)
      h->poll(h->arg, c->id); /* bytes left in the ring would end every sleep */
    int v = h->verdict ? h->verdict(h->arg, c->id) : AH_VERDICT_GONE;
    if (v != AH_VERDICT_PENDING) return (ah_verdict_t)v;
    double waited = ah_shim_now_us() - t0;
    if (waited > give_up_after) return AH_VERDICT_GONE; /* a hub that does not answer */
    if (!warned && waited > warn_after) {
      warned = 1;
      ah_log(AH_LOG_WARN,
             "rank %d has waited %.1f s for the coordinator's verdict on communicator "
             "%016llx (whether all %d ranks joined the hub with the same settings); still waiting",
             c->rank, waited / 1e6, (unsigned long long)c->id, c->nranks);
    }
    backoff_step(&b, sleeps ? h : NULL, c->id, ticket);
  }
}

/* The control of a communicator spanning processes once the hub decided. */
static int verdict_control(ah_comm_t *c, ah_verdict_t v, int mode) {
  if (v == AH_VERDICT_COMPLETE) return mode == AH_MODE_TUNE ? AH_CTL_REMOTE_TUNE : AH_CTL_FIXED;
  if (v == AH_VERDICT_GONE)
    ah_log(AH_LOG_ERROR,
           "communicator %016llx: the coordinator hub is gone (or did not answer for "
           "AUTOHA_SYNC_TIMEOUT_S) before it decided whether all ranks joined; every rank runs "
           "NCCL's own choices for it",
           (unsigned long long)c->id);
  else if (v == AH_VERDICT_ABANDONED)
    ah_log(
        AH_LOG_WARN,
        "communicator %016llx: not every rank joined the coordinator hub within "
        "AUTOHA_COORD_JOIN_S (a process without autoha, or one that cannot reach the hub): every "
        "rank runs NCCL's own choices for it",
        (unsigned long long)c->id);
  /* MISMATCH: the hook named the ranks and settings that differ */
  return AH_CTL_OBSERVE;
}

static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;

/* The process-wide control of c's communicator once its verdict v is known: the first local rank
 * to learn it sets (and logs) it; the others read it. */
static int verdict_settle(ah_comm_t *c, ah_verdict_t v, int mode) {
  ah_commrec_t *r = c->rec;
  pthread_mutex_lock(&ctl_lock);
  if (atomic_load(&r->ctl) == CTL_AWAIT) atomic_store(&r->ctl, verdict_control(c, v, mode));
  int ctl = atomic_load(&r->ctl);
  pthread_mutex_unlock(&ctl_lock);
  return ctl;
}

/* The leader is rank 0, wherever it is in this process (a thread driving several ranks may reach
 * another rank's first call before rank 0's); when NCCL's init gave no rank (it ran on NCCL's own
 * thread), the first local context of a wholly local communicator leads — any single one will do
 * there. */
static void leader_choose(ah_comm_t *c, int ctl) {
  ah_commrec_t *r = c->rec;
  if (!r || (ctl != AH_CTL_LOCAL_TUNE && ctl != AH_CTL_REMOTE_TUNE)) return;
  pthread_mutex_lock(&ctl_lock);
  if (!r->leader) {
    ah_comm_t *lead = c->rank == 0 ? c : NULL;
    if (!lead) {
      local_rank0_t l = {.id = c->id};
      ah_comm_foreach_live(local_rank0_find, &l);
      lead = l.found;
    }
    if (!lead && c->rank < 0 && ctl == AH_CTL_LOCAL_TUNE) lead = c;
    if (lead) __atomic_store_n(&r->leader, lead, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&ctl_lock);
}

/* Fixes c->ctl at the communicator's first decision. Slow path.
 *
 * Note that a communicator whose ranks are all in this process is decided here alone (one
 * process, one set of settings). One that spans processes runs autoha's choices only when the hub
 * says every rank joined with the same settings digest; otherwise NCCL's own choices on every rank
 * (AH_CTL_OBSERVE), which is what a process without autoha runs, so ranks never disagree. An
 * observing rank joins too (its settings differ from a fixed or tuning rank's) but never waits. */
void ah_shim_comm_control(ah_comm_t *c) {
  int mode = ah_env_settings()->mode;
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
  ah_shim_coord_hooks_t h = ah_shim_hooks();
  pthread_mutex_lock(&ctl_lock);
  ctl = atomic_load(&r->ctl);
  int joined = 0;
  if (ctl < 0 && ctl != CTL_AWAIT) {
    if (atomic_load(&r->announced) >= c->nranks) {
      ctl = mode == AH_MODE_TUNE    ? AH_CTL_LOCAL_TUNE
            : mode == AH_MODE_FIXED ? AH_CTL_FIXED
                                    : AH_CTL_OBSERVE;
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
        AH_LOG_CAPPED(1, AH_LOG_INFO,
                      "communicator %016llx spans processes and autoha is not "
                      "preloaded (no coordinator): it runs fixed, not tuned",
                      (unsigned long long)c->id);
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
  if (ctl == CTL_AWAIT && mode == AH_MODE_TUNE) {
    /* Call 0 of each key is NCCL's choice whatever the hub says: the verdict is awaited at a key's
     * second call (ah_shim_key_settle), by when it has usually arrived — a communicator made for
     * a few calls (churn) never waits for it. Fixed mode waits here: its pinned configurations
     * apply from call 0. */
    c->ctl = AH_CTL_PENDING;
    return;
  }
  if (ctl == CTL_AWAIT) ctl = verdict_settle(c, verdict_wait(&h, c), mode);
  leader_choose(c, ctl);
  c->ctl = ctl;
}

int ah_shim_comm_settle(ah_comm_t *c, uint64_t index) {
  if (c->ctl != AH_CTL_PENDING) return 1;
  int mode = ah_env_settings()->mode, ctl = atomic_load(&c->rec->ctl);
  if (ctl == CTL_AWAIT) {
    ah_shim_coord_hooks_t h = ah_shim_hooks();
    ah_verdict_t v;
    if (index == 0) { /* only a look: this call is NCCL's choice either way */
      if (h.poll) h.poll(h.arg, c->id);
      int got = h.verdict ? h.verdict(h.arg, c->id) : AH_VERDICT_GONE;
      if (got == AH_VERDICT_PENDING) return 0;
      v = (ah_verdict_t)got;
    } else {
      v = verdict_wait(&h, c);
    }
    ctl = verdict_settle(c, v, mode);
  }
  leader_choose(c, ctl);
  c->ctl = ctl;
  return 1;
}

typedef struct {
  const ah_commrec_t *rec;
  int live;
} live_count_t;

static void live_count(void *arg, ah_comm_t *c) {
  live_count_t *l = arg;
  if (c->rec == l->rec && !atomic_load(&c->finalized)) l->live++;
}

/* Note that a rank has two contexts when NCCL did not load the shim as its tuner (the API
 * observer's and none, or both during a chained init), so "last" means no live context of the
 * record at all; a context created after the leave joins again at its first decision, which the
 * hub accepts as it accepts a reconnection. */
int ah_shim_comm_retire(ah_comm_t *c) {
  if (!c) return 0;
  ah_comm_finalize(c);
  ah_commrec_t *r = c->rec;
  if (!r) return 0;
  static pthread_mutex_t retire_lock = PTHREAD_MUTEX_INITIALIZER; /* two ranks' destroys at once */
  pthread_mutex_lock(&retire_lock);
  live_count_t l = {.rec = r};
  ah_comm_foreach_live(live_count, &l);
  int leave = l.live == 0 && r->hub && !atomic_exchange(&r->left, 1);
  pthread_mutex_unlock(&retire_lock);
  if (leave) {
    ah_shim_coord_hooks_t h = ah_shim_hooks();
    if (h.detach)
      h.detach(h.arg, c->id); /* the id attach() joined, which may differ from the record's */
  }
  return l.live == 0;
}

/* ---- waiting for the leader ------------------------------------------------------------------- */

/* Note that the leader may turn out to be in this process while a rank waits (its context decided
 * after this one): the wait then ends with AH_WAIT_LEAD_HERE and the caller commits. */
ah_wait_t ah_shim_worker_wait(ah_comm_t *c, ah_shim_rankkey_t *ck, uint64_t index,
                              ah_segment_t *seg) {
  double t0 = ah_shim_now_us(), warn_after = ah_env_settings()->sync_warn_s * 1e6;
  int warned = 0;
  backoff_t b = {.yields = 64, .ns = 20000, .cap_ns = 500000};
  double give_up_after = ah_env_settings()->sync_timeout_s * 1e6;
  while (!ah_sched_lookup(ck->ks->sched, index, seg)) {
    if (ah_shim_leads_here(c)) return AH_WAIT_LEAD_HERE;
    if (atomic_load_explicit(&ck->ks->gave_up, memory_order_relaxed)) return AH_WAIT_GONE;
    double waited = ah_shim_now_us() - t0;
    if (waited > give_up_after) {
      atomic_store(&ck->ks->gave_up, 1);
      ah_log(AH_LOG_ERROR,
             "rank %d gave up after %.0f s (AUTOHA_SYNC_TIMEOUT_S) waiting for the "
             "leader's decision on call %llu of %s bin %d (communicator %016llx): the leader's "
             "process is dead or hung; this and every later undecided call of the key run NCCL's "
             "own choice",
             c->rank, waited / 1e6, (unsigned long long)index, ah_coll_name(ck->coll), ck->bin,
             (unsigned long long)c->id);
      ck->sync_waits++;
      ck->sync_wait_us += waited;
      return AH_WAIT_GONE;
    }
    if (!warned && waited > warn_after) {
      warned = 1;
      ah_log(AH_LOG_WARN,
             "rank %d has waited %.1f s for the leader's decision on call %llu of %s bin "
             "%d (communicator %016llx); still waiting",
             c->rank, waited / 1e6, (unsigned long long)index, ah_coll_name(ck->coll), ck->bin,
             (unsigned long long)c->id);
    }
    if (c->ctl == AH_CTL_REMOTE_TUNE) {
      ah_shim_coord_hooks_t h = ah_shim_hooks();
      /* The ticket before the last look: news after it ends the nap below at once. */
      uint64_t ticket = h.ticket && h.wait ? h.ticket(h.arg, c->id) : 0;
      if (h.poll) { /* the segment may wait in this process's ring: take it here, then look again */
        h.poll(h.arg, c->id);
        if (ah_sched_lookup(ck->ks->sched, index, seg)) break;
      }
      if (h.alive && !h.alive(h.arg, c->id)) {
        AH_LOG_CAPPED(3, AH_LOG_ERROR,
                      "the coordinator of communicator %016llx is gone: NCCL's "
                      "choice is kept for undecided calls",
                      (unsigned long long)c->id);
        ck->sync_waits++;
        ck->sync_wait_us += ah_shim_now_us() - t0;
        return AH_WAIT_GONE;
      }
      if (h.ticket && h.wait) {
        if (!h.poll && ah_sched_lookup(ck->ks->sched, index, seg))
          break; /* delivered since the ticket */
        backoff_step(&b, &h, c->id, ticket);
        continue;
      }
    }
    backoff(&b);
  }
  ck->sync_waits++;
  ck->sync_wait_us += ah_shim_now_us() - t0;
  return AH_WAIT_HAVE;
}
