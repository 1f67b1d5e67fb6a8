/* fabric_perf: one rank of bench/fabric's job (run it under ncclsim-run). It connects a
 * communicator across the simulated nodes — on sim/, through the verbs provider and its fabric,
 * with whatever source ports the QP hook (or NCCL's flow label 0) gave the queue pairs — checks a
 * few real AllReduce and AllGather calls byte for byte, and then prints, from rank 0, the modelled
 * bus bandwidth of large calls on the communicator as connected, in nccl-tests' terms:
 *
 *   fabric_perf: allreduce 268435456 B: 123.4 us, busbw 345.6 GB/s
 *
 * Large sizes are modelled rather than moved (ncclsimCommModelTime): 32 ranks x 1 GiB of real
 * data would take minutes on a 2-core machine, and the figure is the model's either way.
 * FABRIC_PERF_ROUNDS=N repeats the checked calls N times first (default 1): real traffic for as
 * long as something beside the job needs to settle (bench/ha_cost: the HA layer's shadows). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ncclsim.h"
#include "bench_job.h"

static int rank = -1;

static void die(const char *what, const char *detail) {
  fprintf(stderr, "fabric_perf: rank %d: %s: %s\n", rank, what, detail);
  exit(1);
}
#define CHECK_NCCL(call)                                                                           \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) die(#call, ncclGetLastError(NULL));                                     \
  } while (0)
#define CHECK_CUDA(call)                                                                           \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) die(#call, cudaGetErrorString(e_));                                     \
  } while (0)

/* A few real calls whose every byte is checked: the data crossed the nodes through the QPs. */
static void check_calls(ncclComm_t comm, int nranks, cudaStream_t st) {
  size_t n = 1 << 18; /* 1 MiB of floats: several QP messages per call */
  float *buf, *out;
  CHECK_CUDA(cudaMalloc((void **)&buf, n * sizeof(float)));
  CHECK_CUDA(cudaMalloc((void **)&out, n * sizeof(float) * (size_t)nranks));
  float *host = malloc(n * sizeof(float) * (size_t)nranks);
  if (!host) die("malloc", "out of memory");
  for (size_t i = 0; i < n; i++) host[i] = (float)((rank + 1) * ((i % 97) + 1));
  CHECK_CUDA(cudaMemcpy(buf, host, n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_NCCL(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, st));
  CHECK_NCCL(ncclAllGather(buf, out, n, ncclFloat, comm, st));
  CHECK_CUDA(cudaStreamSynchronize(st));
  CHECK_CUDA(cudaMemcpy(host, out, n * sizeof(float) * (size_t)nranks, cudaMemcpyDeviceToHost));
  float ranks_sum = (float)nranks * (float)(nranks + 1) / 2.0f;
  for (size_t i = 0; i < n * (size_t)nranks; i++)
    if (host[i] != ranks_sum * (float)((i % n % 97) + 1)) die("data check", "a byte differs");
  free(host);
  CHECK_CUDA(cudaFree(buf));
  CHECK_CUDA(cudaFree(out));
}

int main(int argc, char **argv) {
  rank = env_int("RANK", 0);
  int nranks = env_int("WORLD_SIZE", 1);
  CHECK_CUDA(cudaSetDevice(env_int("LOCAL_RANK", 0)));
  ncclUniqueId id;
  if (rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
  if (ncclsimExchangeUniqueId("fabric_perf", rank == 0, &id) != 0) return 1;
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, nranks, id, rank));
  cudaStream_t st;
  CHECK_CUDA(cudaStreamCreate(&st));
  for (int k = env_int("FABRIC_PERF_ROUNDS", 1); k > 0; k--) check_calls(comm, nranks, st);
  if (rank == 0) {
    static const struct {
      const char *name;
      int coll;
      int allreduce;
    } colls[] = {{"allreduce", 4, 1}, {"allgather", 2, 0}};
    static const char *const dflt[] = {"268435456"};
    const char *const *sizes = argc > 1 ? (const char *const *)argv + 1 : dflt;
    int nsizes = argc > 1 ? argc - 1 : 1;
    for (int a = 0; a < nsizes; a++) {
      size_t bytes = strtoull(sizes[a], NULL, 0);
      for (size_t c = 0; c < sizeof colls / sizeof colls[0]; c++) {
        double us;
        CHECK_NCCL(ncclsimCommModelTime(comm, colls[c].coll, bytes, &us));
        /* nccl-tests' busbw factors: 2(n-1)/n for AllReduce, (n-1)/n for AllGather */
        double f = (colls[c].allreduce ? 2.0 : 1.0) * (nranks - 1) / nranks;
        printf("fabric_perf: %s %zu B: %.1f us, busbw %.1f GB/s\n", colls[c].name, bytes, us,
               (double)bytes / (us * 1e3) * f);
      }
    }
  }
  CHECK_NCCL(ncclCommDestroy(comm));
  return 0;
}
