/* bench_job.h: what the job programs of bench/ (train_job, failover_job, fabric_perf) share: the
 * check every NCCL and CUDA call goes through — on failure one line naming the program
 * (BENCH_JOB_NAME, defined before this header), the rank (a variable `rank` in scope) and the call,
 * then exit 1, as a failed rank of a real job would end — and the launcher's environment read as
 * integers. */
#ifndef AH_BENCH_JOB_H
#define AH_BENCH_JOB_H

#include <stdio.h>
#include <stdlib.h>

#ifdef BENCH_JOB_NAME
#define CHECK_NCCL(call)                                                                           \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) {                                                                       \
      fprintf(stderr, BENCH_JOB_NAME ": rank %d: %s failed: %s (%s)\n", rank, #call,               \
              ncclGetErrorString(r_), ncclGetLastError(NULL));                                     \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)
#define CHECK_CUDA(call)                                                                           \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, BENCH_JOB_NAME ": rank %d: %s failed: %s\n", rank, #call,                    \
              cudaGetErrorString(e_));                                                             \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)
#endif

/* The integer value of environment variable name (RANK, WORLD_SIZE, …), def when unset or empty. */
static inline int env_int(const char *name, int def) {
  const char *s = getenv(name);
  return s && *s ? atoi(s) : def;
}

#endif
