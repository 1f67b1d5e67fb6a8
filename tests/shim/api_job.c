/* api_job: exercises the nccl.h 2.27/2.28 additions the way a program written elsewhere would, on
 * sim/ under ncclsim-run (one rank per process), with or without libautoha.so preloaded:
 *
 *   ncclsim-run -n 4 -- api_job [--iters N]
 *
 * Every rank runs N iterations of AlltoAll, Gather (root 0), Scatter (root 3) and an AllReduce,
 * checking every received element; rank 0 shares a cudaMalloc buffer with the others through a
 * CUDA IPC handle (they read its contents and write a marker rank 0 then finds); then the ranks
 * other than 1 shrink the world without rank 1 and run N AllReduces on the child, checked.
 * Prints "ok rank=R" and exits 0 when every check held; exits 1 naming the first wrong value. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ncclsim.h"

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    fprintf(stderr, "api_job rank %d: ", rank);                                                    \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fprintf(stderr, "\n");                                                                         \
    exit(1);                                                                                       \
  } while (0)
#define NCCL_OK(call)                                                                              \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess)                                                                         \
      FAIL("%s: %s (%s)", #call, ncclGetErrorString(r_), ncclGetLastError(NULL));                  \
  } while (0)

static int rank, nranks;

static int32_t val(int from, int to, size_t i) {
  return from * 1000000 + to * 10000 + (int32_t)(i % 9973);
}

int main(int argc, char **argv) {
  int iters = 20;
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], "--iters") == 0) iters = atoi(argv[++i]);
  const char *rs = getenv("RANK"), *ws = getenv("WORLD_SIZE");
  rank = rs ? atoi(rs) : 0;
  nranks = ws ? atoi(ws) : 1;
  if (nranks != 4) FAIL("run with 4 ranks (ncclsim-run -n 4)");
  cudaSetDevice(rank);
  ncclUniqueId id;
  if (rank == 0) NCCL_OK(ncclGetUniqueId(&id));
  if (ncclsimExchangeUniqueId("api_job", rank == 0, &id) != 0) FAIL("unique id exchange failed");
  ncclComm_t world;
  NCCL_OK(ncclCommInitRank(&world, nranks, id, rank));
  cudaStream_t s;
  cudaStreamCreate(&s);
  enum { A2A = 4096, G = 1000, S = 2000 };
  int32_t *a_in, *a_out, *g_in, *g_out, *s_in, *s_out;
  float *x, *y;
  cudaMalloc((void **)&a_in, sizeof(int32_t) * A2A * 4);
  cudaMalloc((void **)&a_out, sizeof(int32_t) * A2A * 4);
  cudaMalloc((void **)&g_in, sizeof(int32_t) * G);
  cudaMalloc((void **)&g_out, sizeof(int32_t) * G * 4);
  cudaMalloc((void **)&s_in, sizeof(int32_t) * S * 4);
  cudaMalloc((void **)&s_out, sizeof(int32_t) * S);
  cudaMalloc((void **)&x, sizeof(float) * 1024);
  cudaMalloc((void **)&y, sizeof(float) * 1024);
  for (int it = 0; it < iters; it++) {
    for (int to = 0; to < 4; to++)
      for (size_t i = 0; i < A2A; i++) a_in[to * A2A + i] = val(rank, to, i + (size_t)it);
    for (size_t i = 0; i < G; i++) g_in[i] = val(rank, 0, i + (size_t)it);
    for (int to = 0; to < 4; to++)
      for (size_t i = 0; i < S; i++) s_in[to * S + i] = val(3, to, i + (size_t)it);
    for (int i = 0; i < 1024; i++) x[i] = (float)(rank + i);
    NCCL_OK(ncclAlltoAll(a_in, a_out, A2A, ncclInt32, world, s));
    NCCL_OK(ncclGather(g_in, g_out, G, ncclInt32, 0, world, s));
    NCCL_OK(ncclScatter(s_in, s_out, S, ncclInt32, 3, world, s));
    NCCL_OK(ncclAllReduce(x, y, 1024, ncclFloat32, ncclSum, world, s));
    cudaStreamSynchronize(s);
    for (int from = 0; from < 4; from++)
      for (size_t i = 0; i < A2A; i++)
        if (a_out[from * A2A + i] != val(from, rank, i + (size_t)it))
          FAIL("alltoall: wrong element %zu from rank %d", i, from);
    for (int from = 0; rank == 0 && from < 4; from++)
      for (size_t i = 0; i < G; i++)
        if (g_out[from * G + i] != val(from, 0, i + (size_t)it))
          FAIL("gather: wrong element %zu from rank %d", i, from);
    for (size_t i = 0; i < S; i++)
      if (s_out[i] != val(3, rank, i + (size_t)it)) FAIL("scatter: wrong element %zu", i);
    for (int i = 0; i < 1024; i++)
      if (y[i] != (float)(6 + 4 * i)) FAIL("allreduce: wrong element %d", i);
  }
  /* CUDA IPC: rank 0's buffer, mapped by the others through a handle sent with ncclBroadcast. */
  cudaIpcMemHandle_t h;
  int32_t *shared = NULL;
  if (rank == 0) {
    if (cudaMalloc((void **)&shared, 4096) != cudaSuccess) FAIL("cudaMalloc");
    for (int i = 0; i < 1024; i++) shared[i] = 7 * i;
    if (cudaIpcGetMemHandle(&h, shared) != cudaSuccess) FAIL("cudaIpcGetMemHandle");
  }
  char *hbuf;
  cudaMalloc((void **)&hbuf, sizeof h);
  if (rank == 0) memcpy(hbuf, &h, sizeof h);
  NCCL_OK(ncclBroadcast(hbuf, hbuf, sizeof h, ncclInt8, 0, world, s));
  if (rank != 0) {
    memcpy(&h, hbuf, sizeof h);
    int32_t *peer = NULL;
    cudaError_t e = cudaIpcOpenMemHandle((void **)&peer, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) FAIL("cudaIpcOpenMemHandle: %s", cudaGetErrorString(e));
    for (int i = 0; i < 1000; i++)
      if (peer[i] != 7 * i) FAIL("ipc: wrong element %d", i);
    peer[1000 + rank] = -rank;
    if (cudaIpcCloseMemHandle(peer) != cudaSuccess) FAIL("cudaIpcCloseMemHandle");
  }
  NCCL_OK(ncclAllReduce(x, y, 1, ncclFloat32, ncclSum, world, s)); /* the markers are written */
  if (rank == 0)
    for (int r = 1; r < 4; r++)
      if (shared[1000 + r] != -r) FAIL("ipc: rank %d's marker missing", r);
  /* Shrink without rank 1 (which, as NCCL requires, does not call). */
  if (rank != 1) {
    int excl[1] = {1};
    ncclComm_t child;
    NCCL_OK(ncclCommShrink(world, excl, 1, &child, NULL, NCCL_SHRINK_DEFAULT));
    int n = 0, me = -1;
    NCCL_OK(ncclCommCount(child, &n));
    NCCL_OK(ncclCommUserRank(child, &me));
    if (n != 3 || me != (rank == 0 ? 0 : rank - 1)) FAIL("shrink: child rank %d of %d", me, n);
    for (int it = 0; it < iters; it++) {
      NCCL_OK(ncclAllReduce(x, y, 1024, ncclFloat32, ncclSum, child, s));
      for (int i = 0; i < 1024; i++)
        if (y[i] != (float)(0 + 2 + 3 + 3 * i)) FAIL("shrink: allreduce wrong element %d", i);
    }
    NCCL_OK(ncclCommDestroy(child));
  }
  NCCL_OK(ncclCommDestroy(world));
  printf("ok rank=%d\n", rank);
  return 0;
}
