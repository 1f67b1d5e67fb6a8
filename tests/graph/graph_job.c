/* graph_job: a training-step-shaped job that captures its collectives into a CUDA graph, as
 * frameworks do (PyTorch's torch.cuda.graphs, vLLM's captured decode steps). Every rank runs, on two
 * communicators (the world and a rank-reversed split of it), a step of four collectives:
 *   --eager N iterations of the step issued eagerly, then one capture of the step (with the copy of
 *   the step's input in and of its outputs out) into a graph, --launches L launches of that graph
 *   with new input each time, then --eager N eager iterations again,
 * and checks every result exactly (inputs are small integers). It exits non-zero if any capture
 * call, launch or collective fails (sim/ refuses a collective on which ranks chose different
 * configurations, which is how a hang of real NCCL shows) or any result is wrong.
 *
 *   ncclsim-run -n P -- graph_job [--threads T] [--eager N] [--launches L]
 *                                 [--mode global|thread_local|relaxed]
 *
 * --threads T runs T ranks per process, one thread each (world = P x T). --mode is the capture
 * mode passed to cudaStreamBeginCapture; with several rank threads per process, global mode would
 * let one rank's eager calls invalidate another's capture, as it does on CUDA. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ncclsim.h"

#define AR_N (16 * 1024) /* AllReduce on the world: floats */
#define AG_N (2 * 1024)  /* AllGather on the split: ints per rank */
#define RS_N (4 * 1024)  /* ReduceScatter on the world: floats per rank */
#define AR2_N 1024       /* AllReduce on the split: ints */

static int nprocs, threads = 1, world;
static long eager = 100, launches = 1000;
static int mode = cudaStreamCaptureModeGlobal;
static ncclUniqueId id;

typedef struct {
  int rank;
  long errors, bad;
  long captured, launched;
} rank_state_t;

typedef struct {
  float *ar_in, *ar_out, *rs_in, *rs_out;
  int *ag_in, *ag_out, *ar2_in, *ar2_out;
} bufs_t;

/* Rank r's input element j at step `it`: small integers, so every sum is exact in float. */
static int val(int r, long it, size_t j) { return r + 1 + (int)(it % 7) + (int)(j % 5); }

static void fill(bufs_t *h, int rank, long it) {
  for (size_t j = 0; j < AR_N; j++) h->ar_in[j] = (float)val(rank, it, j);
  for (size_t j = 0; j < (size_t)RS_N * world; j++) h->rs_in[j] = (float)val(rank, it, j);
  for (size_t j = 0; j < AG_N; j++) h->ag_in[j] = val(rank, it, j) * 3;
  for (size_t j = 0; j < AR2_N; j++) h->ar2_in[j] = val(rank, it, j) - 2;
}

/* The step's collectives on the device buffers d (stream s). */
static ncclResult_t step(const bufs_t *d, ncclComm_t wc, ncclComm_t sc, cudaStream_t s) {
  ncclResult_t r;
  if ((r = ncclAllReduce(d->ar_in, d->ar_out, AR_N, ncclFloat, ncclSum, wc, s)) != ncclSuccess)
    return r;
  if ((r = ncclAllGather(d->ag_in, d->ag_out, AG_N, ncclInt32, sc, s)) != ncclSuccess) return r;
  if ((r = ncclReduceScatter(d->rs_in, d->rs_out, RS_N, ncclFloat, ncclSum, wc, s)) != ncclSuccess)
    return r;
  return ncclAllReduce(d->ar2_in, d->ar2_out, AR2_N, ncclInt32, ncclMax, sc, s);
}

static void copy_all(const bufs_t *dst, const bufs_t *src, int in, enum cudaMemcpyKind kind,
                     cudaStream_t s, cudaError_t *err) {
  cudaError_t e = cudaSuccess;
#define CP(f, n)                                                                                   \
  if (e == cudaSuccess) e = cudaMemcpyAsync(dst->f, src->f, (n) * sizeof *dst->f, kind, s)
  if (in) {
    CP(ar_in, AR_N);
    CP(rs_in, (size_t)RS_N * world);
    CP(ag_in, AG_N);
    CP(ar2_in, AR2_N);
  } else {
    CP(ar_out, AR_N);
    CP(rs_out, RS_N);
    CP(ag_out, (size_t)AG_N * world);
    CP(ar2_out, AR2_N);
  }
#undef CP
  if (*err == cudaSuccess) *err = e;
}

/* Checks the outputs of step `it` on rank `rank` (split rank: world - 1 - rank). Returns 0 or 1. */
static int check(const bufs_t *h, int rank, long it, long *bad) {
  for (size_t j = 0; j < AR_N; j++) {
    float want = 0;
    for (int r = 0; r < world; r++) want += (float)val(r, it, j);
    if (h->ar_out[j] != want) goto wrong;
  }
  for (size_t j = 0; j < RS_N; j++) {
    float want = 0;
    for (int r = 0; r < world; r++) want += (float)val(r, it, (size_t)rank * RS_N + j);
    if (h->rs_out[j] != want) goto wrong;
  }
  for (int sr = 0; sr < world; sr++) { /* split rank sr is world rank world-1-sr */
    for (size_t j = 0; j < AG_N; j++)
      if (h->ag_out[(size_t)sr * AG_N + j] != val(world - 1 - sr, it, j) * 3) goto wrong;
  }
  for (size_t j = 0; j < AR2_N; j++)
    if (h->ar2_out[j] != val(world - 1, it, j) - 2) goto wrong;
  return 0;
wrong:
  if ((*bad)++ < 3) fprintf(stderr, "graph_job: rank %d: wrong result at step %ld\n", rank, it);
  return 1;
}

static int bufs_alloc(bufs_t *b, int device) {
  size_t sz[8] = {AR_N * 4,  AR_N * 4, (size_t)RS_N * world * 4,
                  RS_N * 4,  AG_N * 4, (size_t)AG_N * world * 4,
                  AR2_N * 4, AR2_N * 4};
  void **p[8] = {(void **)&b->ar_in,  (void **)&b->ar_out, (void **)&b->rs_in,
                 (void **)&b->rs_out, (void **)&b->ag_in,  (void **)&b->ag_out,
                 (void **)&b->ar2_in, (void **)&b->ar2_out};
  for (int i = 0; i < 8; i++)
    if ((device ? cudaMalloc(p[i], sz[i]) : cudaMallocHost(p[i], sz[i])) != cudaSuccess) return -1;
  return 0;
}

static void bufs_free(bufs_t *b, int device) {
  void *p[8] = {b->ar_in, b->ar_out, b->rs_in,  b->rs_out,
                b->ag_in, b->ag_out, b->ar2_in, b->ar2_out};
  for (int i = 0; i < 8; i++) {
    if (device) cudaFree(p[i]);
    else cudaFreeHost(p[i]);
  }
}

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    fprintf(stderr, "graph_job: rank %d: ", st->rank);                                             \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fputc('\n', stderr);                                                                           \
    st->errors++;                                                                                  \
    goto out;                                                                                      \
  } while (0)

/* One eager step: inputs in, collectives, outputs out, checked. */
static int eager_step(rank_state_t *st, bufs_t *h, const bufs_t *d, ncclComm_t wc, ncclComm_t sc,
                      cudaStream_t s, long it) {
  cudaError_t ce = cudaSuccess;
  fill(h, st->rank, it);
  copy_all(d, h, 1, cudaMemcpyHostToDevice, s, &ce);
  ncclResult_t r = step(d, wc, sc, s);
  copy_all(h, d, 0, cudaMemcpyDeviceToHost, s, &ce);
  if (ce == cudaSuccess) ce = cudaStreamSynchronize(s);
  if (r != ncclSuccess || ce != cudaSuccess) {
    fprintf(stderr, "graph_job: rank %d: eager step %ld failed: %s / %s (%s)\n", st->rank, it,
            ncclGetErrorString(r), cudaGetErrorName(ce), ncclGetLastError(wc));
    st->errors++;
    return -1;
  }
  check(h, st->rank, it, &st->bad);
  return 0;
}

static void *rank_main(void *arg) {
  rank_state_t *st = arg;
  ncclComm_t wc = NULL, sc = NULL;
  cudaStream_t s = NULL;
  cudaGraph_t g = NULL;
  cudaGraphExec_t x = NULL;
  bufs_t h, d;
  memset(&h, 0, sizeof h);
  memset(&d, 0, sizeof d);
  cudaSetDevice(st->rank % threads);
  if (ncclCommInitRank(&wc, world, id, st->rank) != ncclSuccess) FAIL("ncclCommInitRank failed");
  if (ncclCommSplit(wc, 0, world - 1 - st->rank, &sc, NULL) != ncclSuccess)
    FAIL("ncclCommSplit failed");
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) FAIL("no stream");
  if (bufs_alloc(&h, 0) || bufs_alloc(&d, 1)) FAIL("out of memory");
  long it = 0;
  for (long i = 0; i < eager; i++, it++)
    if (eager_step(st, &h, &d, wc, sc, s, it)) goto out;

  /* the capture: the step with its input and output copies (host buffers are pinned) */
  cudaError_t ce = cudaStreamBeginCapture(s, (enum cudaStreamCaptureMode)mode);
  if (ce != cudaSuccess) FAIL("cudaStreamBeginCapture: %s", cudaGetErrorName(ce));
  copy_all(&d, &h, 1, cudaMemcpyHostToDevice, s, &ce);
  ncclResult_t r = step(&d, wc, sc, s);
  copy_all(&h, &d, 0, cudaMemcpyDeviceToHost, s, &ce);
  cudaError_t ee = cudaStreamEndCapture(s, &g);
  if (ce != cudaSuccess || r != ncclSuccess || ee != cudaSuccess)
    FAIL("capture failed: copies %s, NCCL %s (%s), cudaStreamEndCapture %s", cudaGetErrorName(ce),
         ncclGetErrorString(r), ncclGetLastError(wc), cudaGetErrorName(ee));
  st->captured = 4;
  if ((ce = cudaGraphInstantiate(&x, g, 0)) != cudaSuccess)
    FAIL("cudaGraphInstantiate: %s", cudaGetErrorName(ce));
  for (long i = 0; i < launches; i++, it++) {
    fill(&h, st->rank, it);
    if ((ce = cudaGraphLaunch(x, s)) != cudaSuccess ||
        (ce = cudaStreamSynchronize(s)) != cudaSuccess)
      FAIL("launch %ld: %s (%s)", i, cudaGetErrorName(ce), ncclGetLastError(wc));
    st->launched++;
    check(&h, st->rank, it, &st->bad);
  }
  for (long i = 0; i < eager; i++, it++)
    if (eager_step(st, &h, &d, wc, sc, s, it)) goto out;
out:
  if (x) cudaGraphExecDestroy(x);
  if (g) cudaGraphDestroy(g);
  if (sc) ncclCommDestroy(sc);
  if (wc) ncclCommDestroy(wc);
  bufs_free(&h, 0);
  bufs_free(&d, 1);
  return NULL;
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--eager")) eager = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--launches")) launches = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--mode") && !strcmp(argv[i + 1], "global"))
      mode = cudaStreamCaptureModeGlobal;
    else if (!strcmp(argv[i], "--mode") && !strcmp(argv[i + 1], "thread_local"))
      mode = cudaStreamCaptureModeThreadLocal;
    else if (!strcmp(argv[i], "--mode") && !strcmp(argv[i + 1], "relaxed"))
      mode = cudaStreamCaptureModeRelaxed;
    else {
      fprintf(stderr, "graph_job: unknown option '%s %s'\n", argv[i], argv[i + 1]);
      return 2;
    }
  }
  const char *r = getenv("RANK"), *w = getenv("WORLD_SIZE");
  if (!r || !w || threads < 1 || threads > 64) {
    fprintf(stderr, "graph_job: RANK and WORLD_SIZE are not set: run under ncclsim-run\n");
    return 2;
  }
  int proc = atoi(r);
  nprocs = atoi(w);
  world = nprocs * threads;
  if (proc == 0 && ncclGetUniqueId(&id) != ncclSuccess) return 1;
  if (ncclsimExchangeUniqueId("graphjob", proc == 0, &id) != 0) return 1;
  rank_state_t st[64];
  pthread_t th[64];
  for (int t = 0; t < threads; t++) {
    memset(&st[t], 0, sizeof st[t]);
    st[t].rank = proc * threads + t;
    pthread_create(&th[t], NULL, rank_main, &st[t]);
  }
  long errors = 0, bad = 0, launched = 0;
  for (int t = 0; t < threads; t++) {
    pthread_join(th[t], NULL);
    errors += st[t].errors;
    bad += st[t].bad;
    launched += st[t].launched;
  }
  printf("graph_job: process %d: %ld graph launches, %ld failures, %ld wrong results\n", proc,
         launched, errors, bad);
  return errors || bad || launched != launches * threads ? 1 : 0;
}
