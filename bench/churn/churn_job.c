/* churn_job: communicator churn, as a job that splits a sub-communicator per phase (pipeline
 * stages, evaluation groups, elastic resizes) makes it: one world communicator, then N cycles of
 * ncclCommSplit, one small AllReduce on the new communicator, and ncclCommDestroy. Prints the
 * wall-clock seconds of the cycles, and of their first and last quarters (rank 0): a cost that
 * grows with the communicators made so far shows as a last quarter slower than the first.
 * --calls K makes K AllReduces on each new communicator (the first of each key is NCCL's choice in
 * tune mode, the later ones the leader's: sim/ fails a call on which the ranks disagree).
 *   ncclsim-run -n P -- churn_job [--cycles N] [--calls K] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ncclsim.h"

#define CHECK(x)                                                                                   \
  do {                                                                                             \
    ncclResult_t r_ = (x);                                                                         \
    if (r_ != ncclSuccess) {                                                                       \
      fprintf(stderr, "churn_job: %s failed: %s\n", #x, ncclGetErrorString(r_));                   \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  int cycles = 2000, calls = 1;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--cycles") == 0 && i + 1 < argc) cycles = atoi(argv[++i]);
    else if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc) calls = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: churn_job [--cycles N] [--calls K]\n");
      return 2;
    }
  int rank = atoi(getenv("RANK") ? getenv("RANK") : "0");
  int world = atoi(getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "1");
  cudaSetDevice(atoi(getenv("LOCAL_RANK") ? getenv("LOCAL_RANK") : "0"));
  ncclUniqueId id;
  if (rank == 0) CHECK(ncclGetUniqueId(&id));
  if (ncclsimExchangeUniqueId("churn", rank == 0, &id) != 0) {
    fprintf(stderr, "churn_job: cannot exchange the unique id\n");
    return 1;
  }
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t s;
  cudaStreamCreate(&s);
  float *buf;
  cudaMalloc((void **)&buf, 1024 * sizeof(float));
  double t0 = now_s(), t_first = 0, t_last_from = 0;
  int quarter = cycles / 4 > 0 ? cycles / 4 : 1;
  for (int c = 0; c < cycles; c++) {
    if (c == quarter) t_first = now_s() - t0;
    if (c == cycles - quarter) t_last_from = now_s();
    ncclComm_t sub;
    CHECK(ncclCommSplit(comm, 0, rank, &sub, NULL));
    for (int k = 0; k < calls; k++) {
      CHECK(ncclAllReduce(buf, buf, 1024, ncclFloat, ncclSum, sub, s));
      cudaStreamSynchronize(s);
    }
    CHECK(ncclCommDestroy(sub));
  }
  double t = now_s() - t0, t_last = now_s() - t_last_from;
  if (rank == 0)
    printf(
        "churn_job: %d cycles of %d calls in %.2f s (first quarter %.3f s, last quarter %.3f s)\n",
        cycles, calls, t, t_first, t_last);
  CHECK(ncclCommDestroy(comm));
  return 0;
}
