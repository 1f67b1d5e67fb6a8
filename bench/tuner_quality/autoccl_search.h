/* autoccl_search.h: a rival search bench/tuner_quality runs beside autoha's engine — the paper's
 * pseudo-code: the search the AutoCCL paper (NSDI 2025) publishes, rebuilt from its description
 * (AutoCCL's public code does more: autoccl_faithful.h): one subspace per
 * (algorithm, protocol), each tuned by coordinate descent over the resource dimensions from its
 * starting point, subspaces visited round-robin one step at a time, the leader's own measurements
 * deciding, the best measured point pinned. It speaks the engine's call-index interface (next /
 * observe), so one driver runs both under the same noise, lag and budget. The choices the paper
 * leaves open are listed in docs/tuner.md ("The paper's pseudo-code in the bench"). */
#ifndef AUTOCCL_SEARCH_H
#define AUTOCCL_SEARCH_H

#include <stdint.h>

#include "ah_config.h"
#include "ah_sched.h"

typedef struct {
  int budget_calls; /* calls the search may spend before it pins its best so far */
  int window;       /* calls profiled per configuration (scored by the mean of the fastest 75%) */
  int native_start; /* 1: every subspace starts at NCCL's resources; 0: at a random point (paper) */
  uint64_t seed;    /* random starting points */
} autoccl_params_t;

void autoccl_params_default(autoccl_params_t *p);

typedef struct autoccl autoccl_t;

/* Starts the search of one key over `space`. Returns NULL on allocation failure. */
autoccl_t *autoccl_create(const ah_space_t *space, const autoccl_params_t *prm);
void autoccl_destroy(autoccl_t *a);
/* As ah_tune_next / ah_tune_observe (tuner/ah_tune.h). */
void autoccl_next(autoccl_t *a, uint64_t first, ah_segment_t *seg_p);
void autoccl_observe(autoccl_t *a, uint64_t index, double us);

#endif
