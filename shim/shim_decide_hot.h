/* The settled call's short path: a v3+ getCollInfo whose key runs a forever segment (converged,
 * pinned) with nothing else to do is answered from what the key's last full decision left in it
 * (hot_*), without building a call or a decision. Anything else — a call sampled for timing, a
 * segment published since, a cell this call's table forbids, drift re-opening the key (the leader's
 * timing clears hot_end, shim_keys.c), a graph capture, a simulated group — returns 0 and takes the
 * full path (ah_shim_decide), which is the reference: the short path counts and forces exactly what
 * the full path would. */
#ifndef AH_SHIM_DECIDE_HOT_H
#define AH_SHIM_DECIDE_HOT_H

#include "shim_decide.h"

/* Which calls are timed: every call of a segment that is not forever (a probe the search needs
 * measured), and of a key whose configuration is settled (pinned, converged or observed) its first
 * 16 calls and then one in 64 — enough for the report and for drift checks, while the calls in
 * between cost no CUDA call at all. */
#define TIME_SAMPLE(index) ((index) < 16 || ((index)&63) == 0)

/* Decides call (coll, nbytes) of c on the short path: forces the key's cell in `table` (with
 * num_algo rows, as wide as at the full decision: hot_set checks) and its channel count. Returns 1
 * when done, 0 when the call needs the full path (nothing was changed then). Always inlined: as a
 * call it costs its caller the argument shuffle it saves. */
static inline __attribute__((always_inline)) int ah_shim_decide_hot(ah_comm_t *c, int coll,
                                                                    size_t nbytes, float *table,
                                                                    int num_algo,
                                                                    int *nchannels_p) {
  if (__builtin_expect((unsigned)coll >= AH_NUM_FUNCTIONS, 0)) return 0;
  size_t per_rank = ah_shim_per_rank(coll, nbytes, c->nranks);
  ah_shim_rankkey_t *ck =
      __atomic_load_n(&c->keys[coll][ah_shim_bin_of(per_rank)], __ATOMIC_ACQUIRE);
  if (!ck || ck->next >= __atomic_load_n(&ck->hot_end, __ATOMIC_RELAXED) ||
      ah_sched_published(ck->hot_sched) != ck->hot_published || num_algo <= ck->hot_algo ||
      table[ck->hot_cell] < 0 || ah_thread.unusual.any)
    return 0;
  /* What the checks read is read again below, so that few values stay in registers: the caller
   * must keep all nine of its arguments for the full path, which leaves this path three of its own
   * before it would save and restore registers on every call. */
  __asm__ volatile("" ::: "memory");
  /* The leader reads it (leader_cut) while this thread, its only writer, counts: one add to
   * memory on x86-64 (a whole aligned store, never torn), a relaxed load and store elsewhere. */
#if defined(__x86_64__)
  __asm__ volatile("addq $1, %0" : "+m"(ck->next));
#else
  __atomic_store_n(&ck->next, ck->next + 1, __ATOMIC_RELAXED);
#endif
  if (per_rank < ck->bytes_min) ck->bytes_min = per_rank;
  if (per_rank > ck->bytes_max) ck->bytes_max = per_rank;
  (*ck->hot_calls)++;
  table[ck->hot_cell] = 0.0f;
  if (ck->hot_nchannels > 0 && nchannels_p) *nchannels_p = ck->hot_nchannels;
  c->last_stream = ah_thread.stream; /* where the hang probes look (shim_health.c) */
  ah_thread.chunk_comm = NULL;       /* no v6 chunk for this call */
  return 1;
}

#endif
