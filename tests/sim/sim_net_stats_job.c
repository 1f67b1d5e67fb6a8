/* sim_net_stats_job: one rank of test_sim_net_stats's job. It runs checked AllReduce calls across
 * the simulated nodes (through sim/'s verbs provider) and prints this rank's completion accounting
 * from ncclsimNetStats, one line the test reads:
 *
 *   net_stats_job: rank 0 chunks 16 sends 16 lost 0 duplicated 0 reordered 0 unposted 0 send-duplicated 0
 *   stall-wall-us 812
 *
 * The call's error, when one fails, is printed and the rank exits 1 (the lost-completion case). */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ncclsim.h"

static int env_int(const char *name, int def) {
  const char *s = getenv(name);
  return s && *s ? atoi(s) : def;
}

int main(void) {
  int rank = env_int("RANK", 0), nranks = env_int("WORLD_SIZE", 1);
  if (cudaSetDevice(env_int("LOCAL_RANK", 0)) != cudaSuccess) return 1;
  ncclUniqueId id;
  if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) return 1;
  if (ncclsimExchangeUniqueId("net_stats", rank == 0, &id) != 0) return 1;
  ncclComm_t comm;
  cudaStream_t st;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess ||
      cudaStreamCreate(&st) != cudaSuccess) {
    fprintf(stderr, "net_stats_job: rank %d: init failed: %s\n", rank, ncclGetLastError(NULL));
    return 1;
  }
  size_t n = 1 << 16;
  float *buf, *host = malloc(n * sizeof(float));
  if (!host || cudaMalloc((void **)&buf, n * sizeof(float)) != cudaSuccess) return 1;
  for (int it = 0; it < 4; it++) {
    for (size_t i = 0; i < n; i++) host[i] = (float)(rank + 1 + it);
    cudaMemcpy(buf, host, n * sizeof(float), cudaMemcpyHostToDevice);
    ncclResult_t r = ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, st);
    if (r == ncclSuccess)
      r = cudaStreamSynchronize(st) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
    if (r != ncclSuccess) {
      fprintf(stderr, "net_stats_job: rank %d: AllReduce failed: %s\n", rank,
              ncclGetLastError(comm));
      return 1;
    }
    cudaMemcpy(host, buf, n * sizeof(float), cudaMemcpyDeviceToHost);
    float want = (float)nranks * (float)(nranks + 1) / 2.0f + (float)(nranks * it);
    for (size_t i = 0; i < n; i++)
      if (host[i] != want) {
        fprintf(stderr, "net_stats_job: rank %d: wrong result %g (want %g)\n", rank, host[i], want);
        return 1;
      }
  }
  struct ncclsimNetStats s;
  if (ncclsimNetStats(comm, &s) != ncclSuccess ||
      ncclsimNetStats(comm, NULL) != ncclInvalidArgument)
    return 1;
  printf(
      "net_stats_job: rank %d chunks %llu sends %llu lost %llu duplicated %llu reordered %llu unposted %llu "
      "send-duplicated %llu stall-wall-us %.0f\n",
      rank, s.chunks, s.sendCompletions, s.lost, s.duplicated, s.reordered, s.sendUnposted,
      s.sendDuplicated, s.maxStallWallMs * 1e3);
  ncclCommDestroy(comm);
  free(host);
  return 0;
}
