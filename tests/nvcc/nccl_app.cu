// An ordinary CUDA + NCCL program, written against the public headers only and built by nvcc
// against the shared CUDA runtime and libnccl (as PyTorch is). The test runs it on sim/ by putting
// sim/'s folder first on LD_LIBRARY_PATH: as 4 processes under ncclsim-run, and as 1 process with
// 4 threads. It launches a kernel, all-reduces, checks the data, and prints CUDA-event timings,
// which must be identical from run to run (they are sim/'s modelled times).
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__global__ void scale(float *x, int n, float a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

#define N (1 << 20)
static ncclUniqueId g_id;
static int g_nranks;

static int fail(const char *what, int rank) {
  fprintf(stderr, "nccl_app: rank %d: %s\n", rank, what);
  return 1;
}

static int run_rank(int rank, int nranks, ncclUniqueId id, int dev) {
  if (cudaSetDevice(dev) != cudaSuccess) return fail("cudaSetDevice", rank);
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return fail(ncclGetLastError(NULL), rank);
  float *d = NULL;
  float *h = (float *)malloc(N * sizeof(float));
  for (int i = 0; i < N; i++) h[i] = (float)(rank + 1);
  cudaStream_t s;
  cudaEvent_t e0, e1;
  if (cudaMalloc((void **)&d, N * sizeof(float)) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess ||
      cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
    return fail("CUDA setup", rank);
  cudaMemcpyAsync(d, h, N * sizeof(float), cudaMemcpyHostToDevice, s);
  scale<<<(N + 255) / 256, 256, 0, s>>>(d, N, 1.0f); /* not executed on sim/: a no-op scale */
  if (cudaGetLastError() != cudaSuccess) return fail("kernel launch", rank);
  cudaEventRecord(e0, s);
  for (int it = 0; it < 5; it++)
    if (ncclAllReduce(d, d, N, ncclFloat, ncclSum, comm, s) != ncclSuccess) return fail("ncclAllReduce", rank);
  cudaEventRecord(e1, s);
  cudaMemcpyAsync(h, d, N * sizeof(float), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  float ms = -1;
  cudaEventElapsedTime(&ms, e0, e1);
  /* after 5 in-place sums of (1 + ... + n): sum * n^4 */
  double sum = nranks * (nranks + 1) / 2.0, want = sum;
  for (int it = 1; it < 5; it++) want *= nranks;
  for (int i = 0; i < N; i += 4099)
    if (h[i] != (float)want) return fail("wrong all-reduce result", rank);
  printf("rank %d: 5 x AllReduce of %d floats: %.6f ms\n", rank, N, ms);
  ncclCommDestroy(comm);
  cudaFree(d);
  free(h);
  return 0;
}

static void *thread_main(void *arg) {
  long rank = (long)arg;
  return (void *)(long)run_rank((int)rank, g_nranks, g_id, (int)rank);
}

/* Passes the id from rank 0 to the others through a folder both can see: NCCLSIM_RDZV, which
 * ncclsim-run provides (an MPI or torchrun program would use its own channel). */
static int exchange_id(int rank, ncclUniqueId *id) {
  const char *dir = getenv("NCCLSIM_RDZV");
  if (!dir) return fail("NCCLSIM_RDZV is not set: run under ncclsim-run", rank);
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/nccl_app.id", dir);
  if (rank == 0) {
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(id, sizeof *id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0)
      return fail("cannot publish the unique id", rank);
    return 0;
  }
  for (int i = 0; i < 30000; i++) {
    FILE *f = fopen(path, "rb");
    if (f) {
      size_t got = fread(id, sizeof *id, 1, f);
      fclose(f);
      if (got == 1) return 0;
    }
    usleep(1000);
  }
  return fail("timed out waiting for the unique id", rank);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--threads") == 0) {
    g_nranks = atoi(argv[2]);
    if (ncclGetUniqueId(&g_id) != ncclSuccess) return fail("ncclGetUniqueId", 0);
    pthread_t t[16];
    int rc = 0;
    for (long r = 0; r < g_nranks; r++) pthread_create(&t[r], NULL, thread_main, (void *)r);
    for (int r = 0; r < g_nranks; r++) {
      void *ret;
      pthread_join(t[r], &ret);
      rc |= (int)(long)ret;
    }
    return rc;
  }
  const char *r = getenv("RANK"), *w = getenv("WORLD_SIZE"), *l = getenv("LOCAL_RANK");
  if (!r || !w) {
    fprintf(stderr, "usage: nccl_app --threads N | (under ncclsim-run with RANK/WORLD_SIZE)\n");
    return 2;
  }
  int rank = atoi(r), nranks = atoi(w);
  ncclUniqueId id;
  if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) return fail("ncclGetUniqueId", rank);
  if (exchange_id(rank, &id)) return 1;
  return run_rank(rank, nranks, id, l ? atoi(l) : rank);
}
