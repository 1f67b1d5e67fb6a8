/* multi_gpu_job: one thread drives every "GPU" of its process, the way nccl-tests (default -t 1 -g
 * N), JAX/XLA and single-process multi-GPU programs drive NCCL: communicators created together
 * (ncclCommInitAll, or ncclCommInitRank for each device inside one group), and every collective
 * issued for all local ranks inside one ncclGroupStart/ncclGroupEnd.
 *
 *   ncclsim-run -n P -- multi_gpu_job --gpus G [--iters N] [--init-all]
 *
 * Process p drives ranks p*G .. p*G+G-1 of a world communicator of P*G ranks. Each iteration
 * issues, grouped
 * over the local ranks, AllReduce at three sizes, AllGather, ReduceScatter, Broadcast and Reduce,
 * and checks every element of every output against the value computed on the host: inputs are small
 * integers, so results are exact. Prints, like shim_job:
 *   "checksum rank=R <hash of every output buffer>"
 *   "calls rank=R nranks=N coll=C bin=B n=K"
 * and exits 1 on any NCCL error or wrong element. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "job_keys.h"
#include "ncclsim.h"

#define MAXG 8
#define MAXN (64u << 10) /* floats per buffer */

typedef struct {
  int rank, dev;
  ncclComm_t comm;
  cudaStream_t s;
  float *a, *b;
  uint64_t hash;
  job_keys_t keys;
} rank_t;

static int gpus = 4, iters = 500, init_all = 0, world, proc_rank;
static rank_t ranks[MAXG];
static float host_in[MAXN], host_out[MAXN], expect[MAXN];
static long wrong;

/* The input element i of `rank` in iteration `salt`: a small integer, so sums stay exact. */
static float in_val(int rank, int salt, size_t i) {
  return (float)((rank * 7 + salt * 3 + (int)(i % 13)) % 17);
}

#define NCCLCHECK(call)                                                                            \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) {                                                                       \
      fprintf(stderr, "multi_gpu_job: %s failed: %s (%s)\n", #call, ncclGetErrorString(r_),        \
              ncclGetLastError(NULL));                                                             \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static void fill(rank_t *r, float *dev, size_t n, int salt) {
  for (size_t i = 0; i < n; i++) host_in[i] = in_val(r->rank, salt, i);
  cudaSetDevice(r->dev);
  cudaMemcpy(dev, host_in, n * sizeof(float), cudaMemcpyHostToDevice);
}

/* Copies n floats of r's output out, hashes them and compares them with expect[]. */
static void check(rank_t *r, const char *what, size_t n) {
  cudaSetDevice(r->dev);
  cudaStreamSynchronize(r->s);
  cudaMemcpy(host_out, r->b, n * sizeof(float), cudaMemcpyDeviceToHost);
  r->hash = job_hash(r->hash, host_out, n * sizeof(float));
  for (size_t i = 0; i < n; i++)
    if (host_out[i] != expect[i]) {
      if (wrong++ < 5)
        fprintf(stderr, "multi_gpu_job: rank %d %s element %zu is %g, expected %g\n", r->rank, what,
                i, (double)host_out[i], (double)expect[i]);
      return;
    }
}

/* AllReduce of n floats on every local rank. */
static void allreduce(size_t n, int salt) {
  NCCLCHECK(ncclGroupStart());
  for (int g = 0; g < gpus; g++) {
    rank_t *r = &ranks[g];
    fill(r, r->a, n, salt);
    NCCLCHECK(ncclAllReduce(r->a, r->b, n, ncclFloat, ncclSum, r->comm, r->s));
  }
  NCCLCHECK(ncclGroupEnd());
  for (int g = 0; g < gpus; g++) {
    rank_t *r = &ranks[g];
    for (size_t i = 0; i < n; i++) {
      float v = 0;
      for (int q = 0; q < world; q++) v += in_val(q, salt, i);
      expect[i] = v;
    }
    check(r, "allreduce", n);
    job_keys_count(&r->keys, world, C_ALLREDUCE, n * 4);
  }
}

static void iteration(int it) {
  static const size_t ar[] = {256, 8 << 10, 48 << 10}; /* 1 KiB, 32 KiB, 192 KiB */
  for (int k = 0; k < 3; k++) allreduce(ar[k], it + k);

  size_t per = 2 << 10; /* AllGather: 8 KiB per rank */
  NCCLCHECK(ncclGroupStart());
  for (int g = 0; g < gpus; g++) {
    fill(&ranks[g], ranks[g].a, per, it + 3);
    NCCLCHECK(ncclAllGather(ranks[g].a, ranks[g].b, per, ncclFloat, ranks[g].comm, ranks[g].s));
  }
  NCCLCHECK(ncclGroupEnd());
  for (size_t i = 0; i < per * (size_t)world; i++)
    expect[i] = in_val((int)(i / per), it + 3, i % per);
  for (int g = 0; g < gpus; g++) {
    check(&ranks[g], "allgather", per * (size_t)world);
    job_keys_count(&ranks[g].keys, world, C_ALLGATHER, per * 4);
  }

  NCCLCHECK(ncclGroupStart());
  for (int g = 0; g < gpus; g++) {
    fill(&ranks[g], ranks[g].a, per * (size_t)world, it + 4);
    NCCLCHECK(ncclReduceScatter(ranks[g].a, ranks[g].b, per, ncclFloat, ncclSum, ranks[g].comm,
                                ranks[g].s));
  }
  NCCLCHECK(ncclGroupEnd());
  for (int g = 0; g < gpus; g++) {
    rank_t *r = &ranks[g];
    for (size_t i = 0; i < per; i++) {
      float v = 0;
      for (int q = 0; q < world; q++) v += in_val(q, it + 4, (size_t)r->rank * per + i);
      expect[i] = v;
    }
    check(r, "reducescatter", per);
    job_keys_count(&r->keys, world, C_REDUCESCATTER, per * 4);
  }

  size_t nb = 4 << 10;
  int root = it % world;
  NCCLCHECK(ncclGroupStart());
  for (int g = 0; g < gpus; g++) {
    fill(&ranks[g], ranks[g].a, nb, it + 5);
    NCCLCHECK(
        ncclBroadcast(ranks[g].a, ranks[g].b, nb, ncclFloat, root, ranks[g].comm, ranks[g].s));
  }
  NCCLCHECK(ncclGroupEnd());
  for (size_t i = 0; i < nb; i++) expect[i] = in_val(root, it + 5, i);
  for (int g = 0; g < gpus; g++) {
    check(&ranks[g], "broadcast", nb);
    job_keys_count(&ranks[g].keys, world, C_BCAST, nb * 4);
  }

  size_t nr = 3 << 10;
  NCCLCHECK(ncclGroupStart());
  for (int g = 0; g < gpus; g++) {
    fill(&ranks[g], ranks[g].a, nr, it + 6);
    NCCLCHECK(
        ncclReduce(ranks[g].a, ranks[g].b, nr, ncclFloat, ncclSum, 0, ranks[g].comm, ranks[g].s));
  }
  NCCLCHECK(ncclGroupEnd());
  for (size_t i = 0; i < nr; i++) {
    float v = 0;
    for (int q = 0; q < world; q++) v += in_val(q, it + 6, i);
    expect[i] = v;
  }
  for (int g = 0; g < gpus; g++) {
    if (ranks[g].rank == 0) check(&ranks[g], "reduce", nr);
    else cudaStreamSynchronize(ranks[g].s);
    job_keys_count(&ranks[g].keys, world, C_REDUCE, nr * 4);
  }
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--gpus") == 0 && i + 1 < argc) gpus = atoi(argv[++i]);
    else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = atoi(argv[++i]);
    else if (strcmp(argv[i], "--init-all") == 0) init_all = 1;
    else {
      fprintf(stderr, "usage: multi_gpu_job --gpus G [--iters N] [--init-all]\n");
      return 2;
    }
  }
  const char *rs = getenv("RANK"), *ws = getenv("WORLD_SIZE"), *ls = getenv("LOCAL_RANK");
  proc_rank = rs ? atoi(rs) : 0;
  int nprocs = ws ? atoi(ws) : 1, local = ls ? atoi(ls) : 0;
  if (gpus < 1 || gpus > MAXG || nprocs < 1 || (init_all && nprocs != 1)) {
    fprintf(stderr, "multi_gpu_job: --gpus 1..%d; --init-all needs one process\n", MAXG);
    return 2;
  }
  world = nprocs * gpus;
  ncclComm_t comms[MAXG];
  int devs[MAXG];
  for (int g = 0; g < gpus; g++) {
    ranks[g].rank = proc_rank * gpus + g;
    ranks[g].dev = devs[g] = (local * gpus + g) % 8;
    ranks[g].hash = JOB_HASH_BASIS;
  }
  if (init_all) {
    NCCLCHECK(ncclCommInitAll(comms, gpus, devs));
  } else {
    ncclUniqueId id;
    if (proc_rank == 0) NCCLCHECK(ncclGetUniqueId(&id));
    if (nprocs > 1 && ncclsimExchangeUniqueId("multi_gpu_job", proc_rank == 0, &id) != 0) return 1;
    NCCLCHECK(ncclGroupStart());
    for (int g = 0; g < gpus; g++) {
      cudaSetDevice(devs[g]);
      NCCLCHECK(ncclCommInitRank(&comms[g], world, id, ranks[g].rank));
    }
    NCCLCHECK(ncclGroupEnd());
  }
  for (int g = 0; g < gpus; g++) {
    rank_t *r = &ranks[g];
    r->comm = comms[g];
    cudaSetDevice(r->dev);
    cudaStreamCreate(&r->s);
    cudaMalloc((void **)&r->a, MAXN * sizeof(float));
    cudaMalloc((void **)&r->b, MAXN * sizeof(float));
  }
  for (int it = 0; it < iters; it++) iteration(it);
  for (int g = 0; g < gpus; g++) NCCLCHECK(ncclCommDestroy(ranks[g].comm));
  for (int g = 0; g < gpus; g++) {
    rank_t *r = &ranks[g];
    job_keys_print(r->rank, r->hash, &r->keys);
  }
  if (wrong) fprintf(stderr, "multi_gpu_job: %ld wrong outputs\n", wrong);
  return wrong ? 1 : 0;
}
