/* shim_job: a small multi-rank NCCL job for the shim's end-to-end tests, run on sim/ with and
 * without libautoha.so preloaded. It uses only the public NCCL and CUDA runtime APIs.
 *
 *   ncclsim-run -n P -- shim_job [--threads T] [--iters N] [--no-split] [--pause-ms MS] [--linger-ms MS]
 *
 * Each process runs T ranks as threads (global rank RANK*T + t of WORLD_SIZE*T). Every rank issues
 * the same sequence on the world communicator — AllReduce at three sizes, AllGather,
 * ReduceScatter, Broadcast, Reduce, and a group holding an AllReduce and an AllGather — and, unless
 * --no-split, AllReduce on an even/odd split. Inputs are small integers, so every result is exact.
 * Each rank prints:
 *   "checksum rank=R <hash of every output buffer>"           (identical with and without the shim)
 *   "calls rank=R nranks=N coll=C bin=B n=K"                   (one line per key it issued)
 * where bin is floor(log2(bytes per rank)), the key the report must show with exactly K calls.
 * --linger-ms keeps every process but rank 0's alive that long after its communicators are
 * destroyed, as a framework's teardown does (the coordinator's hub, in rank 0's process, is gone by
 * then).
 *
 * Built twice: as the program, and (SHIM_JOB_MODULE) as a library exporting shim_job_main, which
 * lazy_main opens with dlopen after it started (the `import torch` pattern). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "job_keys.h"
#include "ncclsim.h"

#ifdef SHIM_JOB_MODULE
#define main shim_job_main
__attribute__((visibility("default"))) int shim_job_main(int argc, char **argv);
#endif

static int nthreads = 1, iters = 6, split = 1, pause_ms = 0, linger_ms = 0, world, proc_rank;
static ncclUniqueId world_id;

typedef struct {
  int rank, dev, failed;
  uint64_t hash;
  job_keys_t keys;
} rank_t;

#define CHECK(call)                                                                                \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) {                                                                       \
      fprintf(stderr, "shim_job rank %d: %s failed: %s (%s)\n", r->rank, #call,                    \
              ncclGetErrorString(r_), ncclGetLastError(NULL));                                     \
      r->failed = 1;                                                                               \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

/* Fills a device buffer with small integers depending on (rank, salt), so sums stay exact. */
static void fill(float *dev, size_t n, int rank, int salt, float *host) {
  for (size_t i = 0; i < n; i++) host[i] = (float)((rank * 7 + salt * 3 + (int)(i % 13)) % 17);
  cudaMemcpy(dev, host, n * sizeof(float), cudaMemcpyHostToDevice);
}

static void absorb(rank_t *r, const float *dev, size_t n, float *host) {
  cudaMemcpy(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost);
  r->hash = job_hash(r->hash, host, n * sizeof(float));
}

#define MAXN (1u << 20) /* floats: 4 MiB buffers */

static void run_rank(rank_t *r) {
  cudaSetDevice(r->dev);
  cudaStream_t s;
  cudaStreamCreate(&s);
  ncclComm_t comm, sub = NULL;
  CHECK(ncclCommInitRank(&comm, world, world_id, r->rank));
  if (split) CHECK(ncclCommSplit(comm, r->rank % 2, r->rank, &sub, NULL));
  int subn = (world + 1 - r->rank % 2) / 2;
  float *a, *b, *host = malloc((size_t)MAXN * sizeof(float) * 2);
  cudaMalloc((void **)&a, (size_t)MAXN * sizeof(float));
  cudaMalloc((void **)&b, (size_t)MAXN * sizeof(float));
  static const size_t ar_sizes[] = {1024, 256 << 10, 1 << 20}; /* 4K, 1M, 4M bytes */
  r->hash = JOB_HASH_BASIS;
  for (int it = 0; it < iters; it++) {
    for (int k = 0; k < 3; k++) {
      size_t n = ar_sizes[k];
      fill(a, n, r->rank, it + k, host);
      CHECK(ncclAllReduce(a, b, n, ncclFloat, ncclSum, comm, s));
      cudaStreamSynchronize(s);
      absorb(r, b, n, host);
      job_keys_count(&r->keys, world, C_ALLREDUCE, n * 4);
    }
    size_t per = 16 << 10; /* 64 KiB per rank */
    fill(a, per, r->rank, it, host);
    CHECK(ncclAllGather(a, b, per, ncclFloat, comm, s));
    cudaStreamSynchronize(s);
    absorb(r, b, per * (size_t)world, host);
    job_keys_count(&r->keys, world, C_ALLGATHER, per * 4);

    fill(a, per * (size_t)world, r->rank, it + 1, host);
    CHECK(ncclReduceScatter(a, b, per, ncclFloat, ncclSum, comm, s));
    cudaStreamSynchronize(s);
    absorb(r, b, per, host);
    job_keys_count(&r->keys, world, C_REDUCESCATTER, per * 4);

    size_t nb = 32 << 10;
    fill(a, nb, r->rank, it + 2, host);
    CHECK(ncclBroadcast(a, b, nb, ncclFloat, it % world, comm, s));
    cudaStreamSynchronize(s);
    absorb(r, b, nb, host);
    job_keys_count(&r->keys, world, C_BCAST, nb * 4);

    size_t nr = 12 << 10;
    fill(a, nr, r->rank, it + 3, host);
    cudaMemset(b, 0, nr * sizeof(float));
    CHECK(ncclReduce(a, b, nr, ncclFloat, ncclSum, 0, comm, s));
    cudaStreamSynchronize(s);
    if (r->rank == 0) absorb(r, b, nr, host);
    job_keys_count(&r->keys, world, C_REDUCE, nr * 4);

    /* a group of two different collectives: two buckets, each its own key */
    size_t ng = 8 << 10, nag = 2 << 10;
    fill(a, ng, r->rank, it + 4, host);
    fill(a + ng, nag, r->rank, it + 5, host + ng);
    CHECK(ncclGroupStart());
    CHECK(ncclAllReduce(a, b, ng, ncclFloat, ncclSum, comm, s));
    CHECK(ncclAllGather(a + ng, b + ng, nag, ncclFloat, comm, s));
    CHECK(ncclGroupEnd());
    cudaStreamSynchronize(s);
    absorb(r, b, ng + nag * (size_t)world, host);
    job_keys_count(&r->keys, world, C_ALLREDUCE, ng * 4);
    job_keys_count(&r->keys, world, C_ALLGATHER, nag * 4);

    if (sub) {
      size_t ns = 24 << 10; /* 96 KiB: a size only the split uses */
      fill(a, ns, r->rank, it + 6, host);
      CHECK(ncclAllReduce(a, b, ns, ncclFloat, ncclSum, sub, s));
      cudaStreamSynchronize(s);
      absorb(r, b, ns, host);
      job_keys_count(&r->keys, subn, C_ALLREDUCE, ns * 4);
    }
    if (pause_ms > 0) usleep((useconds_t)pause_ms * 1000); /* a job that lasts (interval reports) */
  }
  if (sub) CHECK(ncclCommDestroy(sub));
  CHECK(ncclCommDestroy(comm));
  cudaFree(a);
  cudaFree(b);
  free(host);
  cudaStreamDestroy(s);
}

static void *thread_main(void *arg) {
  run_rank(arg);
  return NULL;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) nthreads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = atoi(argv[++i]);
    else if (strcmp(argv[i], "--no-split") == 0) split = 0;
    else if (strcmp(argv[i], "--pause-ms") == 0 && i + 1 < argc) pause_ms = atoi(argv[++i]);
    else if (strcmp(argv[i], "--linger-ms") == 0 && i + 1 < argc) linger_ms = atoi(argv[++i]);
    else {
      fprintf(
          stderr,
          "usage: shim_job [--threads T] [--iters N] [--no-split] [--pause-ms MS] [--linger-ms MS]\n");
      return 2;
    }
  }
  const char *rs = getenv("RANK"), *ws = getenv("WORLD_SIZE"), *ls = getenv("LOCAL_RANK");
  proc_rank = rs ? atoi(rs) : 0;
  int nprocs = ws ? atoi(ws) : 1, local = ls ? atoi(ls) : 0;
  if (nthreads < 1 || nthreads > 8 || nprocs < 1) return 2;
  world = nprocs * nthreads;
  if (proc_rank == 0 && ncclGetUniqueId(&world_id) != ncclSuccess) {
    fprintf(stderr, "shim_job: ncclGetUniqueId failed\n");
    return 1;
  }
  if (nprocs > 1 && ncclsimExchangeUniqueId("shim_job", proc_rank == 0, &world_id) != 0) return 1;
  rank_t ranks[8];
  pthread_t th[8];
  memset(ranks, 0, sizeof ranks);
  for (int t = 0; t < nthreads; t++) {
    ranks[t].rank = proc_rank * nthreads + t;
    ranks[t].dev = (local * nthreads + t) % 8;
    if (nthreads == 1) run_rank(&ranks[t]);
    else pthread_create(&th[t], NULL, thread_main, &ranks[t]);
  }
  if (nthreads > 1)
    for (int t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
  int failed = 0;
  for (int t = 0; t < nthreads; t++) {
    rank_t *r = &ranks[t];
    failed |= r->failed;
    job_keys_print(r->rank, r->hash, &r->keys);
  }
  if (proc_rank != 0 && linger_ms > 0) usleep((useconds_t)linger_ms * 1000);
  return failed ? 1 : 0;
}
