/* The decision path: for one bucket NCCL asks about, find its key, count the call index, and look
 * up the configuration committed for that index in the key's schedule.
 *
 * After the first call of a key the path is: one array load to find the rank's key entry, an
 * increment of its index, one lock-free schedule lookup (a converged or pinned key is a forever
 * segment, found in O(1)), a few stores for the report. No allocation, lock or system call: those
 * happen only when a key is first seen, when a schedule runs out (ah_shim_resolve commits the next
 * segment or waits for it) and when a timing result reaches the search. How a communicator's keys
 * are decided is fixed at its first decision (shim_control.c). */
#include <string.h>

#include "shim_control.h"
#include "shim_decide_hot.h"

/* ---- the path ------------------------------------------------------------------------------------ */

static AH_TLS_HOT struct {
  int coll;
  size_t nbytes;
  size_t chunk;
} last_decision;

void ah_shim_simulating(int on) { ah_thread.unusual.simulating = (unsigned char)(on != 0); }

/* Counts a call in its key: returns its call index and the call's bytes per rank. */
static inline uint64_t call_count(const ah_comm_t *c, ah_shim_rankkey_t *ck, const ah_call_t *call,
                                  size_t *bytes_per_rank_p) {
  uint64_t index = ck->next;
  __atomic_store_n(&ck->next, index + 1, __ATOMIC_RELAXED); /* the leader reads it (leader_cut) */
  size_t b = ah_shim_per_rank(call->coll, call->nbytes, c->nranks);
  if (b < ck->bytes_min) ck->bytes_min = b;
  if (b > ck->bytes_max) ck->bytes_max = b;
  *bytes_per_rank_p = b;
  return index;
}

/* Hands a segment's configuration to NCCL, and its chunk to a v6 getChunkSize that follows. */
static inline void decision_apply(ah_decision_t *d, ah_comm_t *c, const ah_call_t *call,
                                  const ah_segment_t *seg) {
  d->algo = seg->config.algo;
  d->proto = seg->config.proto;
  if (seg->config.ndims > AH_DIM_NCHANNELS) d->nchannels = (int)seg->config.res[AH_DIM_NCHANNELS];
  if (seg->config.ndims > AH_DIM_CHUNK) d->chunk = (size_t)seg->config.res[AH_DIM_CHUNK];
  d->source = seg->source;
  if (d->chunk == 0) return; /* ah_thread.chunk_comm was cleared on entry */
  ah_thread.chunk_comm = c;
  last_decision.coll = call->coll;
  last_decision.nbytes = call->nbytes;
  last_decision.chunk = d->chunk;
}

/* The segment that covers call `index` of the key, into ck->seg: the one used last while the
 * schedule is unchanged and it covers the index (a converged key: two loads and compares), else
 * looked up, else resolved (the leader commits, a worker waits). Returns 0 when none applies. */
static inline int segment_of(ah_comm_t *c, ah_shim_rankkey_t *ck, uint64_t index,
                             const ah_call_t *call) {
  const ah_sched_t *sched = ck->ks->sched;
  uint64_t published = ah_sched_published(sched);
  if (__builtin_expect(
          published == ck->seg_published && index >= ck->seg.first &&
              (ck->seg.count == AH_SCHED_FOREVER || index - ck->seg.first < ck->seg.count),
          1))
    return 1;
  if (__builtin_expect(ck->unsettled, 0) && !ah_shim_key_settle(c, ck, index, call)) return 0;
  if (ah_sched_lookup(sched, index, &ck->seg)) {
    ck->seg_published = published; /* read before the lookup: at worst one lookup too many */
    return 1;
  }
  ck->seg_published = UINT64_MAX;
  return ah_shim_resolve(c, ck, index, call, &ck->seg);
}

/* The cost-table cell a v3+ call must allow for the segment's pair to run (seg_cell), found once
 * per segment: NCCL's tables have the same shape at every call. */
static int table_cell(const ah_call_t *call, const ah_config_t *cfg) {
  if (!call->table || (cfg->algo < 0 && cfg->proto < 0)) return -1;
  if (cfg->algo < 0 || cfg->proto < 0) return -2;
  if (cfg->algo >= call->num_algo || cfg->proto >= call->num_proto) return -2; /* never allowed */
  return cfg->algo * call->num_proto + cfg->proto;
}

/* Whether this call's cost table lets NCCL run the segment's pair (a cell of -1 is a pair NCCL
 * cannot or may not run for this call, and can change from call to call with the size or a
 * registered buffer); v1/v2 calls were checked once per segment (seg_refused). */
static inline int table_allows(const ah_call_t *call, const ah_shim_rankkey_t *ck,
                               const ah_config_t *cfg) {
  int cell = ck->seg_cell;
  if (__builtin_expect(cell == -1 || !call->table, 1)) return 1;
  return cell >= 0 ? call->table[cell] >= 0 : ah_config_allowed_call(cfg, call);
}

/* A simulated bucket: the configuration the next real call of its key would get, if committed;
 * nothing is counted, waited for or recorded. */
static void decide_peek(ah_comm_t *c, const ah_call_t *call, ah_decision_t *d) {
  int bin = ah_shim_bin(call->coll, call->nbytes, c->nranks);
  ah_shim_rankkey_t *ck = __atomic_load_n(&c->keys[call->coll][bin], __ATOMIC_ACQUIRE);
  ah_segment_t seg;
  if (!ck || c->ctl == AH_CTL_OBSERVE || !ah_sched_lookup(ck->ks->sched, ck->next, &seg) ||
      ah_config_is_keep(&seg.config) || !ah_config_allowed_call(&seg.config, call))
    return;
  decision_apply(d, c, call, &seg);
}

/* A bucket issued into a stream being captured into a CUDA graph: every launch of the graph replays
 * it with what is decided now, untimed. It takes its call index, as any call, so indices stay
 * aligned across ranks; it runs the index's segment when that is settled (a forever segment:
 * converged, pinned or observed), else NCCL's own choice — a probe would be replayed untimed for
 * the rest of the job. Either way every rank makes the same choice for the same call. */
static void decide_captured(ah_comm_t *c, const ah_call_t *call, ah_decision_t *d) {
  int bin = ah_shim_bin(call->coll, call->nbytes, c->nranks);
  ah_shim_rankkey_t *ck = __atomic_load_n(&c->keys[call->coll][bin], __ATOMIC_ACQUIRE);
  if (!ck && !(ck = ah_shim_key_create(c, call->coll, bin, call))) return;
  size_t bytes_per_rank;
  uint64_t index = call_count(c, ck, call, &bytes_per_rank);
  ck->captured++;
  ah_shim_graph_note(ah_timing_stream(), ck);
  d->ck = ck;
  d->index = index;
  ah_segment_t seg;
  if (c->ctl == AH_CTL_OBSERVE || (ck->unsettled && !ah_shim_key_settle(c, ck, index, call)) ||
      !(ah_sched_lookup(ck->ks->sched, index, &seg) || ah_shim_resolve(c, ck, index, call, &seg)) ||
      seg.count != AH_SCHED_FOREVER || ah_config_is_keep(&seg.config) ||
      !ah_config_allowed_call(&seg.config, call))
    return; /* NCCL's choice */
  decision_apply(d, c, call, &seg);
}

/* A segment this rank has not used yet: classified once (kept out of line, so the per-call path of
 * ah_shim_decide stays as short as the hot-path bar asks), and, when it settles the key (a forever
 * segment), said in words at info level. */
static __attribute__((noinline, cold)) void segment_classify(ah_comm_t *c, ah_shim_rankkey_t *ck,
                                                             const ah_call_t *call,
                                                             const ah_segment_t *seg) {
  ck->seg_first = seg->first;
  ck->seg_keep = ah_config_is_keep(&seg->config);
  /* v1/v2: the support flags are the same for every call of the key, so checked once here; a
   * v3+ table can differ from call to call (NCCL marks cells it may not run per size), so it is
   * checked at each call below, before the call is counted. */
  ck->seg_refused = !ck->seg_keep && !call->table && !ah_config_allowed_call(&seg->config, call);
  ck->seg_cell = ck->seg_keep ? -1 : table_cell(call, &seg->config);
  /* NCCL's own pair with NCCL's resources (a search's starting point): still forced, so every
   * call of the segment runs it, but its calls and times are NCCL's default in the report. */
  ck->seg_nccl = !ck->seg_keep && !ck->seg_refused && ck->nccl_cfg.algo >= 0 &&
                 seg->config.algo == ck->nccl_cfg.algo && seg->config.proto == ck->nccl_cfg.proto;
  for (int i = 0; ck->seg_nccl && i < seg->config.ndims && i < AH_MAX_DIMS; i++)
    if (seg->config.res[i] != 0) ck->seg_nccl = 0;
  if (!ck->seg_keep && !ck->seg_refused && !ck->seg_nccl &&
      !ah_config_equal(&seg->config, &ck->applied.cfg)) {
    memset(&ck->applied, 0, sizeof ck->applied); /* a new config: its own statistics */
    ck->applied.cfg = seg->config;
    ck->gen++;
  }
  if (seg->count == AH_SCHED_FOREVER) ah_shim_decision_log(c, ck, seg); /* settled: say so once */
}

/* After a full decision that forced a forever segment's pair: lets the key's next calls take the
 * short path while the schedule is unchanged, when the call is one it can answer — a whole pair in
 * a v3+ table, no chunk to remember, no user tuner to consult first. */
static void hot_set(ah_comm_t *c, ah_shim_rankkey_t *ck, const ah_call_t *call,
                    const ah_decision_t *d) {
  uint64_t index = d->index;
  if (ck->seg_cell < 0 || !call->table || d->chunk != 0 || c->chain_ctx ||
      ck->seg_published == UINT64_MAX ||
      index + 1 < 16) /* the next call is one of the first 16, all timed */
    return;
  /* The short path does not look at the table's shape: NCCL passes its compile-time numbers of
   * algorithms and protocols, the same at every call. Checked here, at every full decision: a table
   * of another width turns the short path off for the key. */
  if (ck->hot_num_proto != call->num_proto && ck->hot_num_proto != 0) {
    if (ck->hot_num_proto > 0)
      ah_log(AH_LOG_WARN,
             "%s on communicator %016llx: NCCL's cost table has %d protocols, not %d as "
             "before; settled calls of this size take the full decision path",
             ah_coll_name(call->coll), (unsigned long long)c->id, call->num_proto,
             ck->hot_num_proto);
    ck->hot_num_proto = -1;
    __atomic_store_n(&ck->hot_end, 0, __ATOMIC_SEQ_CST); /* whatever index it had reached */
    return;
  }
  ck->hot_algo = d->algo; /* a whole pair (seg_cell >= 0), as this call's table is shaped */
  ck->hot_num_proto = call->num_proto;
  ck->hot_cell = d->algo * call->num_proto + d->proto;
  ck->hot_nchannels = d->nchannels > 0 ? d->nchannels : 0;
  ck->hot_calls = ck->seg_nccl ? &ck->nccl_default.calls : &ck->applied.calls;
  ck->hot_published = ck->seg_published;
  ck->hot_sched = ck->ks->sched;
  /* Until the next call to time: TIME_SAMPLE's next, or the audit's. A re-open or an audit on
   * another thread (each stores its flag or window end, then hot_end 0) may have come after this
   * decision looked: looking again after the store, both sequentially consistent, one side always
   * sees the other (an audit's window end is never the one before it). */
  uint64_t end = (index / 64 + 1) * 64;
  uint64_t hi = atomic_load(&ck->audit_hi);
  if (__builtin_expect(index + 1 < hi, 0)) {
    uint64_t lo = atomic_load_explicit(&ck->audit_lo, memory_order_relaxed);
    uint64_t at = index + 1 < lo ? lo : index + 1;
    if (at < end) end = at;
  }
  __atomic_store_n(&ck->hot_end, end, __ATOMIC_SEQ_CST);
  if (atomic_load(&ck->ks->reopen) || atomic_load(&ck->audit_hi) != hi)
    __atomic_store_n(&ck->hot_end, 0, __ATOMIC_SEQ_CST);
}

/* Whether call `index` is one of the hub's straggler audit (ah_shim_audit): timed like a sample. */
static inline int audited(ah_shim_rankkey_t *ck, uint64_t index) {
  return index < atomic_load_explicit(&ck->audit_hi, memory_order_relaxed) &&
         index >= atomic_load_explicit(&ck->audit_lo, memory_order_relaxed);
}

void ah_shim_decide(ah_comm_t *c, const ah_call_t *call, ah_decision_t *d) {
  *d = (ah_decision_t){.algo = -1, .proto = -1, .source = AH_SOURCE_DEFAULT};
  ah_thread.chunk_comm = NULL;
  int coll = call->coll;
  if ((unsigned)coll >= AH_NUM_FUNCTIONS) return;
  if (__builtin_expect(c->ctl < 0, 0)) ah_shim_comm_control(c);
  if (__builtin_expect(ah_thread.unusual.simulating, 0)) {
    decide_peek(c, call, d);
    return;
  }
  if (__builtin_expect(ah_thread.unusual.captured, 0)) {
    decide_captured(c, call, d);
    return;
  }
  int bin = ah_shim_bin(coll, call->nbytes, c->nranks);
  ah_shim_rankkey_t *ck = __atomic_load_n(&c->keys[coll][bin], __ATOMIC_ACQUIRE);
  if (__builtin_expect(!ck, 0) && !(ck = ah_shim_key_create(c, coll, bin, call))) return;
  size_t bytes_per_rank;
  uint64_t index = call_count(c, ck, call, &bytes_per_rank);
  d->ck = ck;
  d->index = index;
  c->last_stream = ah_thread.stream; /* where the hang probes look (shim_health.c) */
  /* whose host may wait inside NCCL (shim_health.c). Here only, not on the short path: a key's
   * sampled calls (one in 64 at least) come through here, and the thread that makes a
   * communicator's calls seldom changes */
  c->last_caller = &ah_thread;

  int have = 0;
  if (c->ctl != AH_CTL_OBSERVE) {
    if (__builtin_expect(atomic_load_explicit(&ck->ks->reopen, memory_order_relaxed), 0) &&
        ah_shim_is_leader(c))
      ah_shim_leader_cut(c, ck, index);
    have = segment_of(c, ck, index, call);
  }
  const ah_segment_t *seg = &ck->seg; /* valid when have */
  if (__builtin_expect(have && seg->first != ck->seg_first, 0)) segment_classify(c, ck, call, seg);
  if (have && !ck->seg_keep) {
    if (__builtin_expect(!ck->seg_refused && table_allows(call, ck, &seg->config), 1)) {
      uint32_t gen = ck->seg_nccl ? 0 : ck->gen;
      if (ck->seg_nccl) ck->nccl_default.calls++;
      else ck->applied.calls++;
      decision_apply(d, c, call, seg);
      ck->source = seg->source;
      if (seg->count != AH_SCHED_FOREVER || TIME_SAMPLE(index) || audited(ck, index))
        ah_timing_note(ck, index, d->source, gen, bytes_per_rank);
      if (seg->count == AH_SCHED_FOREVER) hot_set(c, ck, call, d);
      return;
    }
    ah_shim_refused(c, call, d); /* a pair this call cannot run: NCCL's choice, counted as such */
  }
  ck->nccl_default.calls++;
  ck->source = have ? seg->source : AH_SOURCE_DEFAULT; /* a pinned or tuned "keep NCCL's choice" */
  d->source = ck->source;
  if ((have && seg->count != AH_SCHED_FOREVER) || TIME_SAMPLE(index) || audited(ck, index))
    ah_timing_note(ck, index, AH_SOURCE_DEFAULT, 0, bytes_per_rank);
}

size_t ah_shim_decide_chunk(ah_comm_t *c, int coll, size_t nbytes) {
  if (ah_thread.chunk_comm != c || last_decision.coll != coll || last_decision.nbytes != nbytes)
    return 0;
  return last_decision.chunk;
}

void ah_shim_refused(ah_comm_t *c, const ah_call_t *call, ah_decision_t *d) {
  ah_shim_rankkey_t *ck = d->ck;
  if (ck && !ck->refused) {
    ck->refused = 1;
    ah_log(AH_LOG_WARN,
           "%s of %zu bytes on communicator %016llx: the committed configuration names "
           "a pair NCCL cannot run here; refused, NCCL's choice kept",
           ah_coll_name(call->coll), call->nbytes, (unsigned long long)c->id);
  }
  d->algo = d->proto = -1;
  d->nchannels = 0;
  d->chunk = 0;
  ah_thread.chunk_comm = NULL; /* nor its chunk (v6) */
}
