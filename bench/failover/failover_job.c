/* failover_job: one rank of bench/failover's jobs (run it under ncclsim-run). It runs checked
 * AllReduce and AllGather calls across the simulated nodes for --iters iterations (each with data
 * that changes per iteration, every element compared with what it must be), so a fabric fault
 * injected mid-run lands between or inside calls, then prints this rank's completion accounting:
 *
 *   failover_job: rank 3 iters 40 chunks 640 sends 640 lost 0 duplicated 0 reordered 0 unposted 0
 *   send-duplicated 0 stall-wall-ms 1.2 stall-virt-ms 0.06
 *
 * (one line). A failed call prints NCCL's error and exits 1; a wrong element exits 3.
 *
 * --graph captures the AllReduce and AllGather in a CUDA graph once and replays it every
 * iteration, as frameworks that capture their step do (the data changes in the same buffers). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ncclsim.h"

#define BENCH_JOB_NAME "failover_job"
#include "bench_job.h"

static int rank = -1;

int main(int argc, char **argv) {
  int iters = 20, graph = 0;
  size_t n = 1 << 16; /* floats per rank: 256 KiB */
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = atoi(argv[++i]);
    else if (strcmp(argv[i], "--kib") == 0 && i + 1 < argc)
      n = (size_t)atoi(argv[++i]) * 1024 / sizeof(float);
    else if (strcmp(argv[i], "--graph") == 0) graph = 1;
    else {
      fprintf(stderr, "usage: failover_job [--iters N] [--kib K] [--graph]\n");
      return 2;
    }
  }
  if (iters < 1 || n < 1) {
    fprintf(stderr, "failover_job: --iters and --kib must be positive\n");
    return 2;
  }
  rank = env_int("RANK", 0);
  int nranks = env_int("WORLD_SIZE", 1);
  CHECK_CUDA(cudaSetDevice(env_int("LOCAL_RANK", 0)));
  ncclUniqueId id;
  if (rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
  if (ncclsimExchangeUniqueId("failover_job", rank == 0, &id) != 0) return 1;
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, nranks, id, rank));
  cudaStream_t st;
  CHECK_CUDA(cudaStreamCreate(&st));
  float *buf, *out, *host = malloc(n * sizeof(float) * (size_t)nranks);
  if (!host) return 1;
  CHECK_CUDA(cudaMalloc((void **)&buf, n * sizeof(float)));
  CHECK_CUDA(cudaMalloc((void **)&out, n * sizeof(float) * (size_t)nranks));
  cudaGraphExec_t exec = NULL;
  if (graph) {
    cudaGraph_t g;
    CHECK_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    CHECK_NCCL(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, st));
    CHECK_NCCL(ncclAllGather(buf, out, n, ncclFloat, comm, st));
    CHECK_CUDA(cudaStreamEndCapture(st, &g));
    CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
    CHECK_CUDA(cudaGraphDestroy(g));
  }
  for (int it = 0; it < iters; it++) {
    for (size_t i = 0; i < n; i++) host[i] = (float)((rank + 1) * ((i + (size_t)it) % 61 + 1));
    CHECK_CUDA(cudaMemcpy(buf, host, n * sizeof(float), cudaMemcpyHostToDevice));
    if (graph) {
      CHECK_CUDA(cudaGraphLaunch(exec, st));
    } else {
      CHECK_NCCL(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, st));
      CHECK_NCCL(ncclAllGather(buf, out, n, ncclFloat, comm, st));
    }
    CHECK_CUDA(cudaStreamSynchronize(st));
    CHECK_CUDA(cudaMemcpy(host, out, n * sizeof(float) * (size_t)nranks, cudaMemcpyDeviceToHost));
    float sum = (float)nranks * (float)(nranks + 1) / 2.0f;
    for (size_t i = 0; i < n * (size_t)nranks; i++)
      if (host[i] != sum * (float)((i % n + (size_t)it) % 61 + 1)) {
        fprintf(stderr, "failover_job: rank %d: iteration %d: element %zu is %g, not %g\n", rank,
                it, i, host[i], sum * (float)((i % n + (size_t)it) % 61 + 1));
        return 3;
      }
  }
  struct ncclsimNetStats s;
  CHECK_NCCL(ncclsimNetStats(comm, &s));
  printf(
      "failover_job: rank %d iters %d chunks %llu sends %llu lost %llu duplicated %llu reordered %llu unposted %llu "
      "send-duplicated %llu stall-wall-ms %.3f stall-virt-ms %.3f\n",
      rank, iters, s.chunks, s.sendCompletions, s.lost, s.duplicated, s.reordered, s.sendUnposted,
      s.sendDuplicated, s.maxStallWallMs, s.maxStallVirtMs);
  fflush(stdout);
  if (exec) CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_NCCL(ncclCommDestroy(comm));
  free(host);
  return 0;
}
