/* A training-shaped NCCL job for sim/: each iteration runs an FSDP-style forward (all-gather of
 * each layer's parameters, then the layer's compute), a backward (compute, then reduce-scatter of
 * the layer's gradients, overlapping the next layer's compute), and a DDP-style all-reduce of
 * gradient buckets (25 MiB and a smaller tail). Compute is simulated on the stream's virtual clock,
 * with interference on the communication that overlaps it. Rank 0 prints the mean iteration time
 * measured with CUDA events: a simulated time, from sim/'s model.
 *
 * Run it under ncclsim-run: ncclsim-run -n 8 --nodes 2 -- train_job [--iters N] [--warmup W]
 *
 * Faults of the program itself, for diagnosis tests (the collective library's own faults are
 * sim/'s NCCLSIM_FAULT): --stall R:N makes rank R stop for good before its collective #N (0-based,
 * counted over the job's collectives), as a rank stuck in its input pipeline or a deadlock would;
 * --mismatch R:N makes rank R issue collective #N with half the element count of the others';
 * --host-delay R:US makes rank R's host sleep US microseconds at the start of every iteration (a
 * slow input pipeline: visible on sim/ only with NCCLSIM_HOST_CLOCK=1, as on a GPU whose stream
 * runs dry while its host is late).
 * --fork-loader makes every rank fork a child after its first iteration, as PyTorch's DataLoader
 * forks its workers once NCCL is up: the child makes no NCCL call, and leaves through exit() (its
 * atexit handlers run) while the parent trains on; the parent waits for it at the end.
 * --pace-us US makes every rank's host sleep US microseconds at the start of every iteration: the
 * wall-clock pace of a real step (data loading, the optimizer), which changes no simulated time.
 * Diagnosis that counts in seconds (the hub's audits, its hang threshold) meets jobs of a few steps
 * a second with it, where sim/'s steps otherwise take a millisecond.
 *
 * --late-key N adds, from iteration N on, one 64 KiB AllReduce to every iteration: a key the job
 * first meets late (tuned, and decided for every rank, when its first call comes).
 *
 * --sync step makes the host wait for each iteration's work (cudaStreamSynchronize on the compute
 * stream, as a loop that logs a loss does); --sync item copies one float of the parameters to the
 * host after each iteration (cudaMemcpy, as PyTorch's `.item()` or `.cpu()`). Without it the host
 * waits once, at the end, and runs ahead of its GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ncclsim.h"

#define BENCH_JOB_NAME "train_job"
#include "bench_job.h"

/* Parses a count option; exits with usage status 2 on a bad value. */
static int parse_opt(const char *opt, const char *s, int lo, int hi) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*end || end == s || v < lo || v > hi) {
    fprintf(stderr, "train_job: invalid value for %s: '%s' (expected %d..%d)\n", opt, s, lo, hi);
    exit(2);
  }
  return (int)v;
}

/* Parses "R:N" for a fault option; exits with usage status 2 on a bad value. */
static void parse_fault(const char *opt, const char *s, long *rank_p, unsigned long *call_p) {
  char tail;
  if (sscanf(s, "%ld:%lu%c", rank_p, call_p, &tail) != 2 || *rank_p < 0) {
    fprintf(stderr, "train_job: invalid value for %s: '%s' (expected RANK:N)\n", opt, s);
    exit(2);
  }
}

static long stall_rank = -1, mismatch_rank = -1, delay_rank = -1;
static unsigned long stall_call, mismatch_call, delay_us, ncalls;
static int pace_us;       /* --pace-us: every host's sleep per iteration */
static int fork_loader;   /* --fork-loader: a data-loader-shaped child per rank */
static int late_key = -1; /* --late-key: the iteration from which the 64 KiB AllReduce runs */

/* The element count this rank passes to its next collective (which it counts), after the faults:
 * a stall never returns. */
static size_t call_count(int rank, size_t count) {
  if (rank == stall_rank && ncalls == stall_call) {
    fprintf(stderr, "train_job: rank %d stalls before collective #%lu (--stall)\n", rank, ncalls);
    fflush(stderr);
    for (;;) pause();
  }
  if (rank == mismatch_rank && ncalls == mismatch_call) {
    fprintf(stderr,
            "train_job: rank %d issues collective #%lu with %zu elements, not %zu (--mismatch)\n",
            rank, ncalls, count / 2, count);
    count /= 2;
  }
  ncalls++;
  return count;
}

int main(int argc, char **argv) {
  int iters = 40, layers = 4, warmup = -1;
  /* Simulated compute per layer (forward, backward) and per optimizer step, in microseconds: sized
   * so that communication is a visible share of an iteration, as in large data-parallel jobs. */
  int fwd_us = 150, bwd_us = 300, opt_us = 200;
  int sync = 0;                               /* --sync: 0 at the end only, 1 step, 2 item */
  size_t layer_params = 2u << 20;             /* elements per layer (float): 8 MiB (--layer-kib) */
  size_t bucket = 25u << 20, tail = 7u << 20; /* DDP bucket sizes in bytes (--bucket-kib: the
                                               * tail stays 7/25 of the bucket) */
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
      iters = parse_opt("--iters", argv[++i], 2, 1000000);
    else if (strcmp(argv[i], "--layers") == 0 && i + 1 < argc)
      layers = parse_opt("--layers", argv[++i], 1, 1000);
    else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc)
      warmup = parse_opt("--warmup", argv[++i], 0, 999999);
    else if (strcmp(argv[i], "--fwd-us") == 0 && i + 1 < argc)
      fwd_us = parse_opt("--fwd-us", argv[++i], 0, 10000000);
    else if (strcmp(argv[i], "--bwd-us") == 0 && i + 1 < argc)
      bwd_us = parse_opt("--bwd-us", argv[++i], 0, 10000000);
    else if (strcmp(argv[i], "--layer-kib") == 0 && i + 1 < argc)
      layer_params = (size_t)parse_opt("--layer-kib", argv[++i], 1, 1 << 20) * 1024 / sizeof(float);
    else if (strcmp(argv[i], "--bucket-kib") == 0 && i + 1 < argc) {
      bucket = (size_t)parse_opt("--bucket-kib", argv[++i], 1, 1 << 20) * 1024;
      tail = bucket * 7 / 25 / sizeof(float) * sizeof(float);
    } else if (strcmp(argv[i], "--stall") == 0 && i + 1 < argc)
      parse_fault("--stall", argv[++i], &stall_rank, &stall_call);
    else if (strcmp(argv[i], "--mismatch") == 0 && i + 1 < argc)
      parse_fault("--mismatch", argv[++i], &mismatch_rank, &mismatch_call);
    else if (strcmp(argv[i], "--host-delay") == 0 && i + 1 < argc)
      parse_fault("--host-delay", argv[++i], &delay_rank, &delay_us);
    else if (strcmp(argv[i], "--fork-loader") == 0) fork_loader = 1;
    else if (strcmp(argv[i], "--late-key") == 0 && i + 1 < argc)
      late_key = parse_opt("--late-key", argv[++i], 0, 100000000);
    else if (strcmp(argv[i], "--pace-us") == 0 && i + 1 < argc)
      pace_us = parse_opt("--pace-us", argv[++i], 0, 10000000);
    else if (strcmp(argv[i], "--sync") == 0 && i + 1 < argc) {
      const char *v = argv[++i];
      if (strcmp(v, "step") == 0) sync = 1;
      else if (strcmp(v, "item") == 0) sync = 2;
      else if (strcmp(v, "end") == 0) sync = 0;
      else {
        fprintf(stderr, "train_job: invalid value for --sync: '%s' (expected end, step or item)\n",
                v);
        return 2;
      }
    } else {
      fprintf(
          stderr,
          "usage: train_job [--iters N] [--layers L] [--warmup W] [--fwd-us US] [--bwd-us US] "
          "[--layer-kib K] [--bucket-kib K] [--stall R:N] [--mismatch R:N] [--host-delay R:US] [--pace-us US] [--fork-loader] [--late-key N] [--sync end|step|item]\n");
      return 2;
    }
  }
  if (warmup < 0)
    warmup = iters / 4; /* untimed first iterations (an online tuner searches there) */
  if (warmup >= iters) {
    fprintf(stderr, "train_job: --warmup %d leaves no timed iteration of %d\n", warmup, iters);
    return 2;
  }
  int rank = env_int("RANK", 0), world = env_int("WORLD_SIZE", 1), local = env_int("LOCAL_RANK", 0);
  CHECK_CUDA(cudaSetDevice(local));
  ncclUniqueId id;
  if (rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
  if (ncclsimExchangeUniqueId("train_job", rank == 0, &id) != 0) return 1;
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, world, id, rank));

  cudaStream_t compute, comms;
  CHECK_CUDA(cudaStreamCreate(&compute));
  CHECK_CUDA(cudaStreamCreate(&comms));
  ncclsimStreamSetInterference(comms, 0.5); /* the comm stream overlaps compute */

  size_t shard = layer_params / (size_t)world;
  float *params = NULL, *grads = NULL, *gshard = NULL, *gbuf = NULL;
  CHECK_CUDA(cudaMalloc((void **)&params, layer_params * sizeof(float)));
  CHECK_CUDA(cudaMalloc((void **)&grads, layer_params * sizeof(float)));
  CHECK_CUDA(cudaMalloc((void **)&gshard, shard * sizeof(float)));
  CHECK_CUDA(cudaMalloc((void **)&gbuf, bucket));
  CHECK_CUDA(cudaMemset(gbuf, 0, bucket));
  CHECK_CUDA(cudaMemset(grads, 0, layer_params * sizeof(float)));
  CHECK_CUDA(cudaMemset(params, 0, layer_params * sizeof(float)));

  cudaEvent_t t0, t1, done;
  CHECK_CUDA(cudaEventCreate(&t0));
  CHECK_CUDA(cudaEventCreate(&t1));
  CHECK_CUDA(cudaEventCreate(&done));
  pid_t loader = -1;
  for (int it = 0; it < iters; it++) {
    if (it == warmup) CHECK_CUDA(cudaEventRecord(t0, compute));
    if (rank == delay_rank) usleep((useconds_t)delay_us);
    if (pace_us > 0) usleep((useconds_t)pace_us);
    for (int l = 0; l < layers; l++) { /* forward: gather the layer, then compute with it */
      CHECK_NCCL(ncclAllGather(params + (size_t)rank * shard, params, call_count(rank, shard),
                               ncclFloat, comm, comms));
      CHECK_CUDA(cudaEventRecord(done, comms));
      CHECK_CUDA(cudaStreamWaitEvent(compute, done, 0));
      ncclsimStreamAddCompute(compute, fwd_us);
    }
    for (int l = layers - 1; l >= 0; l--) { /* backward: compute, then scatter the gradients */
      ncclsimStreamAddCompute(compute, bwd_us);
      CHECK_CUDA(cudaEventRecord(done, compute));
      CHECK_CUDA(cudaStreamWaitEvent(comms, done, 0));
      CHECK_NCCL(ncclReduceScatter(grads, gshard, call_count(rank, shard), ncclFloat, ncclSum, comm,
                                   comms));
    }
    /* DDP buckets of the dense part of the model */
    CHECK_NCCL(ncclAllReduce(gbuf, gbuf, call_count(rank, bucket / sizeof(float)), ncclFloat,
                             ncclSum, comm, comms));
    CHECK_NCCL(ncclAllReduce(gbuf, gbuf, call_count(rank, tail / sizeof(float)), ncclFloat, ncclSum,
                             comm, comms));
    if (late_key >= 0 && it >= late_key) /* a bucket of a layer unfrozen late in the job */
      CHECK_NCCL(ncclAllReduce(gbuf, gbuf,
                               call_count(rank, (bucket < 65536 ? bucket : 65536) / sizeof(float)),
                               ncclFloat, ncclSum, comm, comms));
    CHECK_CUDA(cudaEventRecord(done, comms));
    CHECK_CUDA(cudaStreamWaitEvent(compute, done, 0)); /* optimizer step waits for all gradients */
    ncclsimStreamAddCompute(compute, opt_us);
    if (sync == 1) CHECK_CUDA(cudaStreamSynchronize(compute));
    if (fork_loader && it == 0) {
      fflush(NULL);
      loader = fork();
      if (loader == 0) { /* the worker: no NCCL, some work, then exit() as a Python process does */
        usleep(50000);
        exit(0);
      }
    }
    if (sync == 2) {
      float loss;
      CHECK_CUDA(cudaMemcpy(&loss, params, sizeof loss, cudaMemcpyDeviceToHost));
    }
  }
  CHECK_CUDA(cudaEventRecord(t1, compute));
  CHECK_CUDA(cudaEventSynchronize(t1));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, t0, t1));
  if (rank == 0)
    printf(
        "train_job: %d ranks on %s, %d timed iterations: %.3f ms per iteration (simulated, sim/)\n",
        world, getenv("NCCLSIM_TOPO") ? getenv("NCCLSIM_TOPO") : "default topology", iters - warmup,
        ms / (iters - warmup));
  if (loader > 0) waitpid(loader, NULL, 0);
  CHECK_NCCL(ncclCommDestroy(comm));
  return 0;
}
