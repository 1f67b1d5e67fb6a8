/* churn_job: communicator churn, as a job that splits a sub-communicator per phase (pipeline
 * stages, evaluation groups, elastic resizes) makes it: one world communicator, then N cycles of
 * ncclCommSplit, one small AllReduce on the new communicator, and ncclCommDestroy. Prints the
 * wall-clock seconds of the cycles, and of their first and last quarters (rank 0): a cost that
 * grows with the communicators made so far shows as a last quarter slower than the first — and
 * the process's resident set (VmRSS, VmHWM from /proc/self/status) after the cycles, so that
 * run_churn.sh can divide the growth between two cycle counts by the communicators destroyed.
 * With --threads T the process holds T ranks of its own world, one thread each, which destroy
 * each communicator at once (the shim's release of a communicator whose ranks are all local).
 * --calls K makes K AllReduces on each new communicator (the first of each key is NCCL's choice in
 * tune mode, the later ones the leader's: sim/ fails a call on which the ranks disagree).
 *   ncclsim-run -n P -- churn_job [--cycles N] [--calls K]
 *   ncclsim-run -n 1 -- churn_job --threads T [--cycles N] [--calls K] */
#include <pthread.h>
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

typedef struct {
  int rank, world, cycles, calls;
  ncclUniqueId id;
  double t, t_first, t_last;
} churn_t;

/* One rank's cycles (exits the process on a failed call). */
static void churn(churn_t *j) {
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, j->world, j->id, j->rank));
  cudaStream_t s;
  cudaStreamCreate(&s);
  float *buf;
  cudaMalloc((void **)&buf, 1024 * sizeof(float));
  double t0 = now_s(), t_last_from = 0;
  int quarter = j->cycles / 4 > 0 ? j->cycles / 4 : 1;
  for (int c = 0; c < j->cycles; c++) {
    if (c == quarter) j->t_first = now_s() - t0;
    if (c == j->cycles - quarter) t_last_from = now_s();
    ncclComm_t sub;
    CHECK(ncclCommSplit(comm, 0, j->rank, &sub, NULL));
    for (int k = 0; k < j->calls; k++) {
      CHECK(ncclAllReduce(buf, buf, 1024, ncclFloat, ncclSum, sub, s));
      cudaStreamSynchronize(s);
    }
    CHECK(ncclCommDestroy(sub));
  }
  j->t = now_s() - t0;
  j->t_last = now_s() - t_last_from;
  CHECK(ncclCommDestroy(comm));
  cudaFree(buf);
  cudaStreamDestroy(s);
}

static void *churn_main(void *arg) {
  churn(arg);
  return NULL;
}

int main(int argc, char **argv) {
  int cycles = 2000, threads = 0, calls = 1;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--cycles") == 0 && i + 1 < argc) cycles = atoi(argv[++i]);
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc) calls = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: churn_job [--cycles N] [--threads T] [--calls K]\n");
      return 2;
    }
  if (threads < 0 || threads > 64) {
    fprintf(stderr, "churn_job: --threads %d: expected 1 to 64\n", threads);
    return 2;
  }
  int rank = atoi(getenv("RANK") ? getenv("RANK") : "0");
  int world = atoi(getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "1");
  cudaSetDevice(atoi(getenv("LOCAL_RANK") ? getenv("LOCAL_RANK") : "0"));
  ncclUniqueId id;
  if (threads) { /* every rank here: no exchange */
    CHECK(ncclGetUniqueId(&id));
    churn_t j[64];
    pthread_t tid[64];
    for (int t = 0; t < threads; t++) {
      j[t] = (churn_t){.rank = t, .world = threads, .cycles = cycles, .calls = calls, .id = id};
      if (pthread_create(&tid[t], NULL, churn_main, &j[t]) != 0) {
        fprintf(stderr, "churn_job: cannot start thread %d\n", t);
        return 1;
      }
    }
    for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
    printf(
        "churn_job: %d cycles on %d threads in %.2f s (first quarter %.3f s, last quarter "
        "%.3f s)\n",
        cycles, threads, j[0].t, j[0].t_first, j[0].t_last);
  } else {
    if (rank == 0) CHECK(ncclGetUniqueId(&id));
    if (ncclsimExchangeUniqueId("churn", rank == 0, &id) != 0) {
      fprintf(stderr, "churn_job: cannot exchange the unique id\n");
      return 1;
    }
    churn_t j = {.rank = rank, .world = world, .cycles = cycles, .calls = calls, .id = id};
    churn(&j);
    if (rank == 0)
      printf("churn_job: %d cycles in %.2f s (first quarter %.3f s, last quarter %.3f s)\n", cycles,
             j.t, j.t_first, j.t_last);
  }
  if (rank == 0)
    printf("churn_job: rss %ld kB, hwm %ld kB after %d cycles\n", status_kb("VmRSS:"),
           status_kb("VmHWM:"), cycles);
  return 0;
}
