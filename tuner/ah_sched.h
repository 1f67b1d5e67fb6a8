/* ah_sched.h: the schedule of one key — the leader's committed decisions, as the list of segments
 * "calls [first, first+count) of this key run configuration C" (count 0: from first on, forever).
 *
 * Every rank keeps one schedule per (communicator, key). The leader appends to it; a worker's copy
 * is filled by the coordinator (or, for ranks in the leader's process, is the leader's copy
 * itself). A rank looks up the configuration of call index i and, when i is past what has been
 * committed, waits for the leader — it never guesses (NCCL hangs when ranks disagree).
 *
 * Note that readers never lock: segments are appended to a fixed-capacity array and published by
 * a release store of the count, and a forever segment is found in O(1), so a converged key costs
 * one atomic load. Writers (the leader's thread or the coordinator's receive thread) serialise
 * among themselves. */
#ifndef AH_SCHED_H
#define AH_SCHED_H

#include <stdatomic.h>
#include <stdint.h>

#include "ah_config.h"

#define AH_SCHED_FOREVER 0

typedef struct {
  uint64_t first;
  uint64_t count; /* calls covered; AH_SCHED_FOREVER for all calls from first on */
  ah_config_t config;
  int32_t source; /* AH_SOURCE_* of the config (default, override, profile, tuned) */
  int32_t pad;
} ah_segment_t;

enum { AH_SOURCE_DEFAULT = 0, AH_SOURCE_OVERRIDE = 1, AH_SOURCE_PROFILE = 2, AH_SOURCE_TUNED = 3 };

typedef struct ah_sched ah_sched_t;

/* Creates an empty schedule. Returns NULL on allocation failure. */
ah_sched_t *ah_sched_create(void);
void ah_sched_destroy(ah_sched_t *s);

/* Appends a segment. Segments must be contiguous (seg->first == ah_sched_horizon(s)) unless the
 * schedule already ends in a forever segment, which a later segment may cut short (drift re-opens
 * tuning from a given index). Returns 0, or -1 (non-contiguous, overlapping a past index, or full)
 * with the schedule unchanged. Appending the same segment twice (a replay) is a no-op returning 0. */
int ah_sched_append(ah_sched_t *s, const ah_segment_t *seg);

/* First call index not yet committed; UINT64_MAX once a forever segment is committed. */
uint64_t ah_sched_horizon(const ah_sched_t *s);

/* The part of a schedule a reader loads on every call, first in struct ah_sched, so that
 * ah_sched_published is one inline load. */
typedef struct {
  _Atomic uint64_t n; /* published segments */
} ah_sched_head_t;

/* How many segments are published (an acquire load). Every change to the schedule (an append, a
 * forever segment cut short) publishes one more, so a reader that looked a segment up when this was
 * n may keep using it, for the indices it covers, while this is still n. */
static inline uint64_t ah_sched_published(const ah_sched_t *s) {
  return atomic_load_explicit(&((ah_sched_head_t *)(void *)s)->n, memory_order_acquire);
}

/* Looks up the segment covering call `index`. Returns 1 and copies it to seg_p, or 0 when the index
 * is not committed yet. Lock-free. */
int ah_sched_lookup(const ah_sched_t *s, uint64_t index, ah_segment_t *seg_p);

/* Calls fn for every committed segment, in order (for replay to a reconnecting client and for the
 * report). */
void ah_sched_foreach(const ah_sched_t *s, void (*fn)(void *arg, const ah_segment_t *seg),
                      void *arg);

#endif
