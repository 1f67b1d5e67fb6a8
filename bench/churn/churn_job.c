/* churn_job: communicator churn, as a job that splits a sub-communicator per phase (pipeline
 * stages, evaluation groups, elastic resizes) makes it: one world communicator, then N cycles of
 * ncclCommSplit, one small AllReduce on the new communicator, and ncclCommDestroy. Prints the
 * wall-clock seconds of the cycles, and of their first and last quarters (rank 0): a cost that
 * grows with the communicators made so far shows as a last quarter slower than the first — and
 * the process's resident set (VmRSS, VmHWM from /proc/self/status) after the cycles, so that
 * run_churn.sh can divide the growth between two cycle counts by the communicators destroyed.
 *   ncclsim-run -n P -- churn_job [--cycles N] */
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

/* The kB of a /proc/self/status field ("VmRSS:"), -1 when it cannot be read. */
static long status_kb(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  size_t n = strlen(field);
  while (kb < 0 && fgets(line, sizeof line, f))
    if (strncmp(line, field, n) == 0) kb = strtol(line + n, NULL, 10);
  fclose(f);
  return kb;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  int cycles = 2000;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--cycles") == 0 && i + 1 < argc) cycles = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: churn_job [--cycles N]\n");
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
    CHECK(ncclAllReduce(buf, buf, 1024, ncclFloat, ncclSum, sub, s));
    cudaStreamSynchronize(s);
    CHECK(ncclCommDestroy(sub));
  }
  double t = now_s() - t0, t_last = now_s() - t_last_from;
  if (rank == 0)
    printf("churn_job: %d cycles in %.2f s (first quarter %.3f s, last quarter %.3f s)\n", cycles,
           t, t_first, t_last);
  if (rank == 0)
    printf("churn_job: rss %ld kB, hwm %ld kB after %d cycles\n", status_kb("VmRSS:"),
           status_kb("VmHWM:"), cycles);
  CHECK(ncclCommDestroy(comm));
  return 0;
}
