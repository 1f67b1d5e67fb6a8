/* sim_loop_job: a job that all-reduces in a loop until told to stop or until a call fails, for the
 * tests that kill one of its ranks. Once its first collective completed, each rank writes its pid to
 * $LOOP_PIDDIR/rank<R>.pid. A rank whose call fails prints the NCCL error and exits 1; after
 * LOOP_SECONDS (default 60) of success every rank exits 0.
 *
 *   ncclsim-run -n 8 -- sim_loop_job */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ncclsim.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void) {
  const char *r = getenv("RANK"), *w = getenv("WORLD_SIZE"), *dir = getenv("LOOP_PIDDIR");
  const char *secs = getenv("LOOP_SECONDS");
  if (!r || !w) {
    fprintf(stderr, "sim_loop_job: RANK and WORLD_SIZE are not set: run under ncclsim-run\n");
    return 2;
  }
  int rank = atoi(r), n = atoi(w);
  double limit = secs ? atof(secs) : 60;
  ncclUniqueId id;
  if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) return 1;
  if (ncclsimExchangeUniqueId("loop", rank == 0, &id) != 0) return 1;
  ncclComm_t comm;
  ncclResult_t res = ncclCommInitRank(&comm, n, id, rank);
  if (res != ncclSuccess) {
    fprintf(stderr, "sim_loop_job: rank %d: ncclCommInitRank failed: %s (%s)\n", rank,
            ncclGetErrorString(res), ncclGetLastError(NULL));
    return 1;
  }
  float *buf;
  cudaMalloc((void **)&buf, 4096 * sizeof(float));
  cudaMemset(buf, 0, 4096 * sizeof(float));
  double start = now_s();
  long it = 0;
  while (now_s() - start < limit) {
    res = ncclAllReduce(buf, buf, 4096, ncclFloat, ncclSum, comm, NULL);
    if (res != ncclSuccess) {
      fprintf(stderr, "sim_loop_job: rank %d: ncclAllReduce %ld failed: %s (%s)\n", rank, it,
              ncclGetErrorString(res), ncclGetLastError(comm));
      ncclCommAbort(comm);
      return 1;
    }
    if (it++ == 0 && dir) { /* in the loop: the pid file says so */
      char path[4096];
      snprintf(path, sizeof path, "%s/rank%d.pid", dir, rank);
      FILE *f = fopen(path, "w");
      if (f) {
        fprintf(f, "%d\n", (int)getpid());
        fclose(f);
      }
    }
  }
  ncclCommDestroy(comm);
  cudaFree(buf);
  return 0;
}
