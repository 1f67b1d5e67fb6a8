/* autoccl_faithful.h: a peer for bench/tuner_quality that follows what AutoCCL's public code does
 * by default, not the paper's pseudo-code (that one is autoccl_search.h). Facts read from
 * github.com/gbxu/autoccl at commit a0bf96bf646c23287da66104260dc4c2c5cdfc85 (files under
 * ext-tuner/example: plugin/cuda/plugin.cc, src/cuda/nccl_combined_job.h, src/include/jobs/job.h,
 * src/include/jobs/coordinate_descent_job.h, src/misc/math.h, src/include/optimizers/optimizer.h,
 * src/include/optimizers/hybrid_optimizer.h, src/include/datatype.h, src/tuner.cc,
 * src/cuda/cuda_timer.h); this is the project's own code written from those facts.
 *
 * The default TUNER_MODE 5 is a combined job over coordinate-descent sub-jobs, one per
 * (algorithm, protocol): NCCL's default runs first (5 warm-up calls dropped, 1 recorded); each
 * sub-job screens its share of 20 pretrain calls over its candidates, then descends from the best
 * of them, each step probing the 3 farthest of the nearest unvisited candidates along one axis
 * (more of them, the larger the last gain: lr = 0.8 x relative gain), restarts at a random
 * unvisited candidate after 2 x dims failed directions, and stops after 5 starts or its share of
 * 50 train calls; its optimum is then re-run for 10 calls; sub-jobs far behind the best are
 * dropped; the final pick is the best record of all. One call per candidate, scored by the mean of
 * its fastest 75% of samples. docs/tuner.md ("AutoCCL's public code in the bench") lists what the
 * bench's driver cannot model and how it is handled. */
#ifndef AUTOCCL_FAITHFUL_H
#define AUTOCCL_FAITHFUL_H

#include <stdint.h>

#include "ah_config.h"
#include "ah_sched.h"

typedef struct {
  int warmup_steps;   /* TUNER_WARMUP_STEPS: NCCL's default, results dropped */
  int native_steps;   /* NCCL's default, recorded (the code passes TUNER_PROFILE_REPEAT) */
  int pretrain_steps; /* TUNER_PRETRAIN_STEPS, split evenly over the sub-jobs */
  int train_steps;    /* TUNER_TRAIN_STEPS, split evenly over the sub-jobs */
  int repeat;         /* TUNER_PROFILE_REPEAT: calls per candidate */
  int optimum_expire; /* TUNER_OPTIMUM_EXPIRE: calls re-running a finished sub-job's optimum */
  int topk;           /* TUNER_ACCESS_TOPK: candidates probed per descent step */
  int retry;          /* TUNER_RETRY: descents (the first one and the restarts) per sub-job */
  uint64_t seed;      /* the code seeds from std::random_device; here it is seeded */
} acf_params_t;

/* AutoCCL's defaults: 5, 1, 20, 50, 1, 10, 3, 5. */
void acf_params_default(acf_params_t *p);

typedef struct acf acf_t;

/* Starts the search of one key over `space` (its start is NCCL's default). Returns NULL on
 * allocation failure. */
acf_t *acf_create(const ah_space_t *space, const acf_params_t *prm);
void acf_destroy(acf_t *a);
/* As ah_tune_next / ah_tune_observe (tuner/ah_tune.h). */
void acf_next(acf_t *a, uint64_t first, ah_segment_t *seg_p);
void acf_observe(acf_t *a, uint64_t index, double us);

#endif
