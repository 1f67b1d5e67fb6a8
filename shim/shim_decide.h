/* The decision path shared by every tuner ABI and by the API-side observer: which configuration a
 * collective bucket gets, counted in its key's call index, and the hooks through which the
 * coordinator (shim_coord.c) carries schedules between processes. */
#ifndef AH_SHIM_DECIDE_H
#define AH_SHIM_DECIDE_H

#include <stddef.h>
#include <stdint.h>

#include "ah_coord_health.h"
#include "shim_internal.h"

/* The answer: algo/proto -1 and nchannels/chunk 0 keep NCCL's choice. */
typedef struct {
  int algo, proto, nchannels;
  size_t chunk;
  int source;            /* AH_SOURCE_* */
  ah_shim_rankkey_t *ck; /* the key the call was counted in (NULL: not counted) */
  uint64_t index;        /* its call index */
} ah_decision_t;

/* Decides the configuration of one bucket on communicator `c`, counts the call in its key and
 * attaches the decision to the calling thread's timing record. Never fails: any problem yields
 * "keep NCCL's choice".
 *
 * Note that the index, not arrival time, picks the config: every rank counts the same buckets in
 * the same order, so call i of a key gets the same segment everywhere. A rank whose index is past
 * the committed horizon waits for the leader (tune mode) — it never guesses. */
void ah_shim_decide(ah_comm_t *c, const ah_call_t *call, ah_decision_t *d);

/* Marks the calling thread as inside ncclGroupSimulateEnd (1) or not (0): decisions made meanwhile
 * peek at the next call index without counting, recording or timing anything. */
void ah_shim_simulating(int on);

/* v6: the chunk size for the bucket decided last on this thread (0 keeps NCCL's). */
size_t ah_shim_decide_chunk(ah_comm_t *c, int coll, size_t nbytes);

/* Reports, once per key, a decision NCCL cannot run (a -1 cell or a pair the flags forbid) and
 * clears it, so the call keeps NCCL's choice. ah_shim_decide checks before it counts the call, so
 * such a call is counted as NCCL's from the start and nothing is undone. */
void ah_shim_refused(ah_comm_t *c, const ah_call_t *call, ah_decision_t *d);
/* The info line of a key's settled configuration (shim_decision.c), logged when a rank first runs
 * a forever segment: once per key and rank, plus once per re-open. Not on the per-call path. */
void ah_shim_decision_log(const ah_comm_t *c, ah_shim_rankkey_t *ck, const ah_segment_t *seg);

/* A measured duration (microseconds) of call `index` of a key, with the source and generation the
 * decision had (generation 0: the call kept NCCL's choice). Feeds the report and, on the leader,
 * the search. */
void ah_shim_record_time(ah_shim_rankkey_t *ck, uint64_t index, int source, uint32_t gen, double us,
                         size_t bytes_per_rank);

/* A call's bytes per rank: NCCL hands AllGather and ReduceScatter their total over all ranks. */
static inline size_t ah_shim_per_rank(int coll, size_t nbytes, int nranks) {
  size_t per_rank = nbytes;
  if ((coll == AH_FUNC_ALLGATHER || coll == AH_FUNC_REDUCESCATTER) && nranks > 1)
    per_rank = nbytes / (size_t)nranks;
  return per_rank;
}
/* The size bin of bytes per rank, and of a call: identical to ah_size_bin() (a unit test checks)
 * but branch-light for the hot path. */
static inline int ah_shim_bin_of(size_t per_rank) {
  return per_rank > 1 ? 63 - __builtin_clzll((unsigned long long)per_rank) : 0;
}
static inline int ah_shim_bin(int coll, size_t nbytes, int nranks) {
  return ah_shim_bin_of(ah_shim_per_rank(coll, nbytes, nranks));
}

/* ---- the coordinator's hooks ------------------------------------------------------------------ */

/* The hub's verdict on a communicator spanning processes, as the hooks report it. */
typedef enum {
  AH_VERDICT_GONE = -1,     /* the coordinator is gone before deciding */
  AH_VERDICT_PENDING = 0,   /* not decided yet */
  AH_VERDICT_COMPLETE = 1,  /* every rank joined with the same settings: rank 0 leads the search */
  AH_VERDICT_ABANDONED = 2, /* not every rank joined in time */
  AH_VERDICT_MISMATCH = 3   /* every rank joined, with different settings */
} ah_verdict_t;

struct ah_health_rec; /* coordinator/ah_coord_health.h */

/* Set by shim_coord.c when a coordinator runs. A communicator whose ranks span processes runs
 * autoha's choices (tuned or fixed) only when attach() accepted it and the hub's verdict says every
 * rank joined with the same settings; otherwise (or with no hooks) every rank runs NCCL's own
 * choices, which is also what a rank without autoha runs. */
typedef struct {
  /* Called at the first decision of each local rank of a communicator that spans processes (and
   * for the other local ranks already created, so a thread driving several ranks joins them all).
   * Joins that rank at the hub with this process's settings digest. Returns 1 when the coordinator
   * carries this communicator (wait for verdict()), 0 when it cannot (no stamp, hub unreachable:
   * logged; run NCCL's own choices). */
  int (*attach)(void *arg, uint64_t comm, int nranks, int rank);
  /* The hub's verdict on comm (AH_VERDICT_*); a MISMATCH is logged here, once per process and
   * communicator, naming the ranks and the settings that differ. */
  int (*verdict)(void *arg, uint64_t comm);
  /* Leader side: a segment just committed for a key of an attached communicator. */
  void (*publish)(void *arg, const ah_key_t *key, const ah_segment_t *seg);
  /* 0 once the coordinator of `comm` is gone for good: waiting ranks then stop waiting and keep
   * NCCL's choice for the rest of the job (logged). */
  int (*alive)(void *arg, uint64_t comm);
  /* A rank waiting for a segment of `comm` takes what the coordinator left for this process without
   * waking it (NULL: segments arrive on the coordinator's own thread). */
  void (*poll)(void *arg, uint64_t comm);
  /* Sleeping until news for this process may have come: a rank takes a ticket before it looks
   * (poll, its schedule), then sleeps with it at most timeout_us; it is woken when bytes for the
   * process arrive or a segment is delivered (NULL: it naps the timeout out). */
  uint64_t (*ticket)(void *arg, uint64_t comm);
  void (*wait)(void *arg, uint64_t comm, uint64_t ticket, long timeout_us);
  /* A local rank's progress record of an attached communicator, for the hub's hang diagnosis
   * (shim_health.c; NULL: not sent). */
  void (*progress)(void *arg, uint64_t comm, const struct ah_health_rec *rec);
  /* A local rank's sampled call durations (n <= AH_HEALTH_SAMPLES), for the hub's straggler
   * detection (NULL: not sent). */
  void (*samples)(void *arg, uint64_t comm, uint32_t rank, const ah_health_sample_t *x, int n);
  /* A local rank's duration of a search call of the leader's (every rank, the leader's included):
   * the hub sends the leader the shortest across ranks, which its search learns from instead of
   * its own (ah_shim_search_observe; NULL: the leader learns from its own durations). */
  void (*search_time)(void *arg, uint64_t comm, uint32_t rank, int coll, int bin, uint64_t index,
                      double us);
  /* The last local context of an attached communicator was destroyed (ncclCommDestroy or Abort, or
   * NCCL's tuner finalize): this process leaves it at the hub, which then stops forwarding its
   * segments here, and a hub lost later (its process exits first at the end of every job) is no
   * loss to this one (NULL: the process stays joined until it exits). */
  void (*detach)(void *arg, uint64_t comm);
  void *arg;
} ah_shim_coord_hooks_t;

/* Installs (or, with NULL, removes) the hooks. Call before the communicators it should carry make
 * their first decision. */
void ah_shim_set_coord_hooks(const ah_shim_coord_hooks_t *hooks);

/* The shortest duration across ranks of search call `index` of `key`, from the coordinator (its
 * I/O thread): the leader's search learns it (a key this process does not lead ignores it). */
void ah_shim_search_observe(const ah_key_t *key, uint64_t index, double us);

/* A segment for `key` from the coordinator (any thread, commit order, replays allowed): appended
 * to the local schedule of that key, created if needed. Matches ah_coord_deliver_fn. */
void ah_shim_deliver(void *arg, const ah_key_t *key, const ah_segment_t *seg);

/* The hub's straggler audit (ah_coord_audit.h): every local rank of `key` times its calls from
 * index `from` (or its next call, when past it) for `calls` calls. Any thread. */
void ah_shim_audit(const ah_key_t *key, uint64_t from, unsigned calls);

/* ---- state for tests and the report ----------------------------------------------------------- */

/* The process-wide state of a key, created on demand (NULL on allocation failure). */
ah_shim_keystate_t *ah_shim_keystate_get(const ah_key_t *key);
/* The same, never created: NULL when the key has no state yet. */
ah_shim_keystate_t *ah_shim_keystate_find(const ah_key_t *key);
/* Calls fn for every key state. */
void ah_shim_keystate_foreach(void (*fn)(void *arg, ah_shim_keystate_t *ks), void *arg);

#endif
