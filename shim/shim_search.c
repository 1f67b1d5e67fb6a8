/* The search a leader's process drives for a key: the space it searches (built from the first cost
 * table NCCL hands the tuner), the commits of the search's next segments — by whichever local rank
 * reaches an uncommitted call first — with their publication to other processes, and the cut of a
 * converged key that drift re-opened. ah_shim_resolve is the one entry of the slow path: it commits
 * or waits, for every kind of communicator. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "shim_control.h"
#include "ah_tune.h"

/* The space of a key: the pairs NCCL allows for this call (non -1 cells; for v1/v2 the pairs the
 * flags allow), channels up to the most NCCL can have (it caps the tuner's value at the
 * communicator's count from 2.22; before that channels are not tuned), and on 2.30+ (v6) the chunk
 * size. */
static void space_build(const ah_comm_t *c, const ah_call_t *call, ah_space_t *sp) {
  memset(sp, 0, sizeof *sp);
  for (int a = 0; a < AH_NUM_ALGOS; a++)
    for (int p = 0; p < AH_NUM_PROTOS; p++) {
      ah_config_t cfg;
      ah_config_keep(&cfg);
      cfg.algo = (int8_t)a;
      cfg.proto = (int8_t)p;
      int ok;
      if (call->table)
        ok = a < call->num_algo && p < call->num_proto && call->table[a * call->num_proto + p] >= 0;
      else ok = ah_config_allowed_call(&cfg, call);
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
    for (size_t i = 0; i < sizeof ch / sizeof ch[0] && ch[i] <= maxch; i++)
      d->values[d->nvalues++] = ch[i];
    sp->ndims = 1;
  }
  if (c->abi >= 6) {
    ah_space_chunk_build(sp, call->nbytes, call->coll, c->nranks, c->nnodes);
    if (sp->ndims == 0) { /* dimension 1 needs dimension 0: channels then only "keep" */
      sp->dims[AH_DIM_NCHANNELS].nvalues = 1;
      sp->dims[AH_DIM_NCHANNELS].values[0] = 0;
    }
    sp->ndims = 2;
  }
  ah_config_table_argmin(call, &sp->start);
  sp->start.ndims = sp->ndims;
}

/* What the communicator already learned, handed to a new search (tuner/ah_tune.h ah_tune_hint):
 * the best point and noise of the nearest converged bin below and above (within hint_bins() bins,
 * x2 each) of the same collective. Note that a neighbour's lock is only tried: a leader holding it
 * may be waiting for ours, and a hint is not worth a wait. */
#define AH_HINT_BINS 3
/* Bins a hint may come from: AH_HINT_BINS where channels are the only searched resource (the
 * engine's quick check tests a hint before it trusts it), adjacent bins only otherwise (the warm
 * search lost p5 on hints from farther away; docs/tuner.md "Warm start"). */
static int hint_bins(const ah_shim_keystate_t *ks) {
  return ks->space.ndims > 1 ? 1 : AH_HINT_BINS;
}

/* The bin d steps from ks's in direction dir (-1, +1), locked, when it exists, its lock comes free
 * within a few hundred tries and it searches the same space; else NULL. The caller unlocks it.
 * Note that the lock is only tried, with a yield between tries, never waited for: its holder may be
 * waiting for ks's lock, which the caller holds. Runs once per key start or convergence. */
#define AH_NEIGHBOUR_TRIES 256
static ah_shim_keystate_t *neighbour_trylock(const ah_shim_keystate_t *ks, int dir, int d) {
  ah_key_t nk = ks->key;
  nk.bin += dir * d;
  ah_shim_keystate_t *n = ah_shim_keystate_find(&nk);
  if (!n) return NULL;
  int tries = 0;
  while (pthread_mutex_trylock(&n->lock) != 0)
    if (++tries == AH_NEIGHBOUR_TRIES) return NULL;
    else sched_yield();
  if (n->tune && n->space.ndims == ks->space.ndims) return n;
  pthread_mutex_unlock(&n->lock);
  return NULL;
}

static void search_hint(ah_shim_keystate_t *ks) {
  for (int dir = -1; dir <= 1; dir += 2)
    for (int d = 1; d <= hint_bins(ks); d++) {
      ah_shim_keystate_t *n = neighbour_trylock(ks, dir, d);
      if (!n) continue;
      ah_tune_status_t st;
      ah_tune_status(n->tune, &st);
      int got = st.state == AH_TUNE_CONVERGED;
      pthread_mutex_unlock(&n->lock);
      if (got) {
        if (ah_tune_hint(ks->tune, &st.learned) == 0) (void)ah_tune_hint_noise(ks->tune, st.sigma);
        break;
      }
    }
}

/* ks just converged: its best point goes to the bins of the same collective within hint_bins()
 * that are still searching (ah_tune_hint mid-search: each runs its quick check on it). Called with ks's lock
 * held; a neighbour's lock is only tried, so two leaders sharing at once cannot deadlock, and a
 * neighbour busy now simply misses it. */
static void search_share(ah_shim_keystate_t *ks) {
  ah_tune_status_t st;
  ah_tune_status(ks->tune, &st);
  if (st.state != AH_TUNE_CONVERGED) return;
  for (int dir = -1; dir <= 1; dir += 2)
    for (int d = 1; d <= hint_bins(ks); d++) {
      ah_shim_keystate_t *n = neighbour_trylock(ks, dir, d);
      if (!n) continue;
      ah_tune_status_t ns;
      ah_tune_status(n->tune, &ns);
      if (ns.state == AH_TUNE_SEARCHING && ah_tune_hint(n->tune, &st.learned) == 0)
        (void)ah_tune_hint_noise(n->tune, st.sigma);
      pthread_mutex_unlock(&n->lock);
    }
}

/* Leader: commits segments until call `index` is covered. Returns 1 when it is. */
static int leader_commit(ah_comm_t *c, ah_shim_rankkey_t *ck, uint64_t index, const ah_call_t *call,
                         ah_segment_t *seg) {
  ah_shim_keystate_t *ks = ck->ks;
  int ok = 0;
  pthread_mutex_lock(&ks->lock);
  if (!ks->tune) {
    if (!ks->space_set) {
      space_build(c, call, &ks->space);
      ks->space_set = 1;
    }
    ah_tune_params_t params;
    ah_tune_params_default(&params);
    if (ah_env_settings()->tune_budget > 0) params.budget_calls = ah_env_settings()->tune_budget;
    params.seed = ks->key.comm ^ ((uint64_t)ks->key.coll << 32) ^ (uint64_t)ks->key.bin;
    /* A drift re-open cuts the pinned (forever) segment at an index no rank has passed yet. The
     * leader knows where its own process's ranks are, not where the other processes' are: their
     * host threads can run ahead of it by as many calls as their streams hold, and a cut behind
     * one of them would make ranks disagree. So a communicator that spans processes keeps its
     * winner for the rest of the job (docs/tuner.md). */
    if (c->ctl == AH_CTL_REMOTE_TUNE) params.drift_check = 0;
    ks->tune = ah_tune_create(&ks->space, &params);
    if (ks->tune) search_hint(ks);
  }
  if (ks->tune) {
    ah_shim_coord_hooks_t h = {0};
    uint64_t upto = index;
    if (c->ctl == AH_CTL_REMOTE_TUNE) {
      h = ah_shim_hooks();
      /* Call 0 was NCCL's choice on every rank (AH_CTL_PENDING): committed now (and published, the
       * schedules being contiguous) with the search's first segment. */
      if (ah_sched_horizon(ks->sched) == 0) {
        ah_segment_t zero;
        ah_shim_key_segment0(ks, &zero);
        if (h.publish) h.publish(h.arg, &ks->key, &zero);
      }
      if (upto == 0) upto = 1;
    }
    for (int guard = 0; guard < 1024 && !ah_sched_lookup(ks->sched, upto, seg); guard++) {
      ah_segment_t next;
      ah_tune_next(ks->tune, ah_sched_horizon(ks->sched), &next);
      if (ah_sched_append(ks->sched, &next) != 0) break;
      if (h.publish) h.publish(h.arg, &ks->key, &next);
      if (next.count == AH_SCHED_FOREVER) search_share(ks);
    }
    ok = ah_sched_lookup(ks->sched, index, seg);
  }
  pthread_mutex_unlock(&ks->lock);
  if (!ok)
    AH_LOG_CAPPED(3, AH_LOG_ERROR,
                  "the search could not commit call %llu of %s bin %d; NCCL's "
                  "choice is kept for it",
                  (unsigned long long)index, ah_coll_name(ck->coll), ck->bin);
  return ok;
}

/* Leader, after drift re-opened a converged key: cuts the forever segment short far enough ahead
 * that no rank has passed the cut. Local ranks are at most a few calls apart (each collective waits
 * for all of them), and the cut is placed AH_CUT_MARGIN calls past the furthest local rank; ranks
 * in other processes are the coordinator's to keep behind (it delivers the cut). */
#define AH_CUT_MARGIN 64
void ah_shim_leader_cut(ah_comm_t *c, ah_shim_rankkey_t *ck, uint64_t index) {
  ah_shim_keystate_t *ks = ck->ks;
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
      ah_shim_coord_hooks_t h = ah_shim_hooks();
      if (h.publish) h.publish(h.arg, &ks->key, &next);
    }
  }
  pthread_mutex_unlock(&ks->lock);
}

int ah_shim_resolve(ah_comm_t *c, ah_shim_rankkey_t *ck, uint64_t index, const ah_call_t *call,
                    ah_segment_t *seg) {
  ah_shim_note_decider(c);
  if (c->ctl == AH_CTL_FIXED) {
    ah_shim_pinned(c, ck->coll, ck->bin, call, seg);
    (void)ah_sched_append(ck->ks->sched, seg); /* a replay when another local rank was first */
    return ah_sched_lookup(ck->ks->sched, index, seg);
  }
  if (c->ctl == AH_CTL_PENDING) return 0; /* settled before any lookup (ah_shim_key_settle) */
  /* Call 0 of a key spanning processes is NCCL's choice on every rank: nothing to wait for, and
   * nothing to commit yet — the leader commits it with the search's first segment at call 1, so a
   * communicator made for one call per key costs no search (bench/churn). */
  if (index == 0 && c->ctl == AH_CTL_REMOTE_TUNE) return 0;
  if (ah_shim_leads_here(c)) return leader_commit(c, ck, index, call, seg);
  ah_wait_t w = ah_shim_worker_wait(c, ck, index, seg);
  if (w == AH_WAIT_LEAD_HERE) return leader_commit(c, ck, index, call, seg);
  return w == AH_WAIT_HAVE;
}
