/* sim_tc_job: one rank of test_sim_traffic_class (2 ranks on 2 nodes under ncclsim-run). Two
 * communicators, A and B, with their own traffic classes (ncclConfig_t.trafficClass, argv[1] and
 * argv[2]), share every NIC link. Rank 0 prints B's network share alone, then while A has a
 * collective in flight on rank 0 (a thread waits in A's AllReduce, which rank 1 joins only after
 * the measurement):
 *
 *   sim_tc_job: B alone 1.000, B beside A 0.250
 *
 * With a link name as argv[3], rank 0 then degrades that link to half its capacity through
 * ncclsimFabricSetLink and prints A's share (A's own collective still in flight: B is idle). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ncclsim.h"

static int rank;

#define CHECK(call)                                                                                \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) {                                                                       \
      fprintf(stderr, "sim_tc_job: rank %d: %s: %s\n", rank, #call, ncclGetLastError(NULL));       \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static ncclComm_t comm_a;
static float *buf_a;

static ncclComm_t make(const char *tag, int tc) {
  ncclUniqueId id;
  if (rank == 0) CHECK(ncclGetUniqueId(&id));
  if (ncclsimExchangeUniqueId(tag, rank == 0, &id) != 0) exit(1);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.trafficClass = tc;
  ncclComm_t c;
  CHECK(ncclCommInitRankConfig(&c, 2, id, rank, &cfg));
  return c;
}

static _Atomic int a_started;

static void *run_a(void *arg) {
  (void)arg;
  atomic_store(&a_started, 1);
  CHECK(ncclAllReduce(buf_a, buf_a, 1, ncclFloat, ncclSum, comm_a, 0));
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: sim_tc_job TC_A TC_B [LINK]\n");
    return 2;
  }
  rank = atoi(getenv("RANK") ? getenv("RANK") : "0");
  if (cudaSetDevice(0) != cudaSuccess || cudaMalloc((void **)&buf_a, sizeof(float)) != cudaSuccess)
    return 1;
  comm_a = make("a", atoi(argv[1]));
  ncclComm_t b = make("b", atoi(argv[2]));
  double alone, beside;
  CHECK(ncclsimCommNetShare(b, &alone));
  ncclUniqueId go = {{0}};
  if (rank == 0) {
    pthread_t t;
    pthread_create(&t, NULL, run_a, NULL);
    /* A's AllReduce is in flight on this rank once the thread is in it: waiting for the thread to
     * run first keeps a loaded machine, where it may start late, from measuring B alone */
    while (!atomic_load(&a_started)) usleep(1000);
    usleep(300000);
    CHECK(ncclsimCommNetShare(b, &beside));
    printf("sim_tc_job: B alone %.3f, B beside A %.3f\n", alone, beside);
    fflush(stdout);
    if (argc > 3) { /* a link degraded for the whole job through ncclsim.h */
      double degraded;
      if (ncclsimFabricSetLink(argv[3], 0.5) != 0) return 1;
      CHECK(ncclsimCommNetShare(comm_a, &degraded));
      printf("sim_tc_job: A with %s at half capacity %.3f\n", argv[3], degraded);
      if (ncclsimFabricSetLink(argv[3], 1.0) != 0) return 1;
    }
    if (ncclsimExchangeUniqueId("go", 1, &go) != 0) return 1;
    pthread_join(t, NULL);
  } else {
    if (ncclsimExchangeUniqueId("go", 0, &go) != 0) return 1;
    run_a(NULL);
  }
  CHECK(ncclCommDestroy(comm_a));
  CHECK(ncclCommDestroy(b));
  return 0;
}
