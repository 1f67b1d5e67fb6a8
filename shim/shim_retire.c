/* What a destroyed communicator leaves behind. At each local rank's destroy (ncclCommDestroy or
 * Abort, NCCL's tuner finalize) the report keeps its figures (ah_shim_report_fold); once no local
 * context of the communicator is live, its contexts leave every walk (ah_comm_release) and what
 * only a live communicator needs is freed: the searches of its keys, their local minima, the
 * hang diagnosis's state and each context's key table. A job that makes communicators by the thousand then holds what the few
 * live ones need, plus a small remainder per destroyed one (docs/shim.md "Communicator churn").
 *
 * Note that the contexts (without their tables), rank keys, key states and schedules stay: the hot path, a thread's
 * pending timing records and the coordinator's deliveries reach them without locks, so no point
 * is known at which nothing can. What is freed here is reached only under a lock (a key state's,
 * the tick's) or behind a quiescence test, as each function says. */
#include <stdlib.h>

#include "shim_control.h"
#include "ah_tune.h"

/* Frees the search and local minima of every key state c's keys use. Safe because every reader
 * of ks->tune and ks->mins takes ks->lock and tests for NULL (shim_keys.c, shim_search.c, the
 * report), except shim_decision.c's first test of ks->tune, made while deciding a call of a live
 * context of the communicator — and none is live when this runs (ah_comm_release checked, under
 * the registry's lock). A communicator made again with the same identity (a unique id reused)
 * starts a new search after the schedule its predecessor committed. */
static void searches_free(ah_comm_t *c) {
  for (int coll = 0; coll < AH_NUM_COLLS; coll++)
    for (int bin = 0; bin < AH_BINS; bin++) {
      ah_shim_rankkey_t *ck = __atomic_load_n(&c->keys[coll][bin], __ATOMIC_ACQUIRE);
      ah_shim_keystate_t *ks = ck ? ck->ks : NULL;
      if (!ks) continue;
      pthread_mutex_lock(&ks->lock);
      ah_tune_destroy(ks->tune);
      ks->tune = NULL;
      free(ks->mins);
      ks->mins = NULL;
      pthread_mutex_unlock(&ks->lock);
    }
}

/* The most contexts one release frees at once: one communicator's local ranks (each with an API
 * observer and a tuner context at most); any beyond stay parked, and are walked, but nothing
 * breaks. */
#define RELEASE_MAX (2 * AH_MAX_LOCAL_RANKS)

void ah_shim_retire(ah_comm_t *c) {
  if (!c) return;
  /* first: the report has it, live or destroyed, at every moment. Not a v1 tuner context: NCCL
   * 2.19/2.20 finalize one without saying which (shim_tuner_face.c), so it stays reported live */
  if (c->abi != 1) (void)ah_shim_report_fold(c);
  ah_commrec_t *rec = c->rec;
  if (ah_shim_comm_retire(c) && rec) {
    ah_comm_t *gone[RELEASE_MAX];
    int n = ah_comm_release(rec, gone, RELEASE_MAX);
    for (int i = 0; i < n; i++) {
      searches_free(gone[i]);
      ah_shim_health_release(gone[i]);
    }
  }
  ah_shim_report_teardown();
}
