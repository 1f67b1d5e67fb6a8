/* shim_control.h: the pieces behind the decision path (ah_shim_decide, shim_decide.c), in their
 * dependency order — each file uses only those listed before it:
 *   shim_control.c  how a communicator's keys are decided (its control, fixed at the first
 *                   decision), who leads its search, and the waits for the hub and the leader;
 *   shim_keys.c     the process's key table, a rank's key entries and their statistics;
 *   shim_search.c   the search a leader's process drives: the space, the commits, the cut.
 * Internal to the shim. */
#ifndef AH_SHIM_CONTROL_H
#define AH_SHIM_CONTROL_H

#include <stdint.h>

#include "shim_decide.h"

/* ---- shim_control.c -------------------------------------------------------------------------- */

/* Microseconds on CLOCK_MONOTONIC: what the shim's waits and deadlines are timed with. */
double ah_shim_now_us(void);
/* A copy of the coordinator's hooks (all NULL when none are installed). */
ah_shim_coord_hooks_t ah_shim_hooks(void);
/* Whether c is the rank that leads its communicator's search (rank 0, or the first local context
 * of a wholly local communicator whose ranks NCCL did not name). */
int ah_shim_is_leader(const ah_comm_t *c);
/* Whether c commits the next segment of its key itself: the search runs in this process and c is
 * the leader, or the leader's decisions are made on the calling thread (or none was made yet). */
int ah_shim_leads_here(const ah_comm_t *c);
/* Records, for the leader, the thread that makes its decisions (slow path only: key creation and
 * resolution). */
void ah_shim_note_decider(ah_comm_t *c);
/* Fixes c->ctl (AH_CTL_*) at the communicator's first decision; may wait for the hub's verdict.
 * Slow path. */
void ah_shim_comm_control(ah_comm_t *c);
/* An AH_CTL_PENDING communicator at call `index` of one of its keys: fixes c->ctl from the hub's
 * verdict — at index 0 only when the verdict is here already, later by waiting for it (bounded as
 * the first call's wait of a fixed communicator). Returns 1 when c->ctl is final. Slow path. */
int ah_shim_comm_settle(ah_comm_t *c, uint64_t index);
/* Marks c finalized (ncclCommDestroy/Abort, NCCL's tuner finalize) and, when it was the last live
 * local context of a communicator that joined the hub, leaves the communicator there. Returns 1
 * when no context of c's record is live any more (the caller may release them: shim_retire.c),
 * else 0. */
int ah_shim_comm_retire(ah_comm_t *c);

/* How a wait for the leader's decision ended. */
typedef enum {
  AH_WAIT_GONE = 0, /* the coordinator is gone, or AUTOHA_SYNC_TIMEOUT_S passed: NCCL's choice */
  AH_WAIT_HAVE = 1, /* the segment of the call arrived */
  AH_WAIT_LEAD_HERE = 2 /* the search turned out to run in this process: commit the call here */
} ah_wait_t;
/* A rank outside the leader's process waits until call `index` of ck is committed. */
ah_wait_t ah_shim_worker_wait(ah_comm_t *c, ah_shim_rankkey_t *ck, uint64_t index,
                              ah_segment_t *seg);

/* ---- shim_keys.c ----------------------------------------------------------------------------- */

/* A rank's key entry with nothing counted yet (no key state, no configuration); NULL when
 * memory runs out. */
ah_shim_rankkey_t *ah_shim_rankkey_new(int coll, int bin);
/* Drift re-opened the key that ck (the leader's entry) belongs to: its next call takes the full
 * path, which cuts the forever segment short (ah_shim_leader_cut). */
void ah_shim_key_reopen(ah_shim_rankkey_t *ck);
/* First call of a key on this rank: its entry, its process-wide state and, when the key is not
 * searched here, its pinned forever segment. NULL (logged) when memory runs out. Slow path. */
ah_shim_rankkey_t *ah_shim_key_create(ah_comm_t *c, int coll, int bin, const ah_call_t *call);
/* The part of a key's creation that depends on its communicator's control (c->ctl final): who
 * leads it, whether it is searched, its pinned segment (with call 0 NCCL's choice when the
 * communicator spans processes). Slow path. */
void ah_shim_key_control(ah_comm_t *c, ah_shim_rankkey_t *ck, const ah_call_t *call);
/* Commits call 0 of a key as NCCL's own choice (keep, one call) into *seg, unless committed
 * already: the first call of every key of a tuned communicator spanning processes. */
void ah_shim_key_segment0(ah_shim_keystate_t *ks, ah_segment_t *seg);
/* A key made while its communicator was AH_CTL_PENDING, at call `index`: settles the communicator
 * (ah_shim_comm_settle), then the key (ah_shim_key_control). Returns 0 when the call runs NCCL's
 * choice (index 0 before the verdict, or a communicator that ended up observed), 1 when the
 * schedule decides it. Slow path. */
int ah_shim_key_settle(ah_comm_t *c, ah_shim_rankkey_t *ck, uint64_t index, const ah_call_t *call);
/* The pinned segment of one of c's keys (settings/ah_pin.c with this process's settings). */
void ah_shim_pinned(const ah_comm_t *c, int coll, int bin, const ah_call_t *call,
                    ah_segment_t *seg);

/* ---- shim_search.c --------------------------------------------------------------------------- */

/* The segment of call `index` when the key's schedule does not cover it yet: committed here (fixed
 * communicators, or the search in this process) or waited for. Returns 1 with *seg, or 0: NCCL's
 * choice for the call. Slow path. */
int ah_shim_resolve(ah_comm_t *c, ah_shim_rankkey_t *ck, uint64_t index, const ah_call_t *call,
                    ah_segment_t *seg);
/* After drift re-opened a converged key: cuts its forever segment short ahead of every local rank
 * (the leader's thread only). */
void ah_shim_leader_cut(ah_comm_t *c, ah_shim_rankkey_t *ck, uint64_t index);

#endif
