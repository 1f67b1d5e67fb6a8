/* hotpath_job: the shim's hot path in isolation. One process, one thread, two ranks made with
 * ncclCommInitAll(2) on sim/; every iteration is one group holding an AllReduce on each rank, so
 * NCCL (sim/) asks the tuner once per rank per iteration. After a warm-up that takes every key past
 * its first decisions and its timed calls, a measured window of iterations runs:
 *
 *   hotpath_job --warmup W --iters N [--shape S] [--window] [--nested-simulate]
 *
 * --shape   group2 (the default: one group of one AllReduce per rank), group8 (one group of four
 *           AllReduces per rank: NCCL asks the tuner once per call, all in one launch), ungrouped
 *           (one thread per rank, each AllReduce its own call outside any group, as a program with
 *           a thread per GPU makes them).
 *
 * --nested-simulate  every iteration's group also holds an empty inner group closed by
 *           ncclGroupSimulateEnd (tests/shim/check_nested_simulate.sh).
 * --window  brackets the measured iterations with getppid() markers (for strace) and with
 *           ahcount_begin()/ahcount_end() when the counting library (tests/shim/ahcount.c) is
 *           preloaded, then prints "window mallocs=M locks=L" — run with and without the shim.
 * otherwise the measured loop is a callgrind window (window_mark): callgrind dumps the measured
 *           iterations' counts on their own (bench/hotpath/run.sh).
 * Prints "calls=<collective API calls in the measured window>". */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <valgrind/callgrind.h>

#define N 1024

static int nested_simulate; /* --nested-simulate */
static int per_group = 1;   /* AllReduces per rank in a group (--shape group8: 4) */

static int iteration(ncclComm_t comms[2], float *buf[2], cudaStream_t s[2]) {
  if (ncclGroupStart() != ncclSuccess) return -1;
  for (int k = 0; k < per_group; k++)
    for (int r = 0; r < 2; r++)
      if (ncclAllReduce(buf[r], buf[r], N, ncclFloat, ncclSum, comms[r], s[r]) != ncclSuccess)
        return -1;
  if (nested_simulate) { /* an empty inner group, planned and dropped; the outer one still runs */
    ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
    if (ncclGroupStart() != ncclSuccess || ncclGroupSimulateEnd(&info) != ncclSuccess) return -1;
  }
  return ncclGroupEnd() == ncclSuccess ? 0 : -1;
}

/* --shape ungrouped: each rank's thread runs its warm-up, meets the other at the barrier, where
 * one of them starts the count, runs its measured calls, and meets it again to stop it. */
typedef struct {
  int rank, warmup, iters, rc;
  ncclComm_t comm;
  float *buf;
  cudaStream_t s;
} rank_arg_t;
static pthread_barrier_t barrier;

/* The measured window for callgrind: counters zeroed at its start, dumped at its end, so the dump
 * (callgrind's file with ".1" appended) holds the window only. Not collection toggles: callgrind
 * counts calls while collection is off too, and zeroing keeps those. */
static void window_mark(int begin) {
  if (begin) CALLGRIND_ZERO_STATS;
  else CALLGRIND_DUMP_STATS_AT("window");
}

/* Both threads stop here; one opens or closes the window, and neither goes on before it has. */
static void toggle_together(int begin) {
  if (pthread_barrier_wait(&barrier) == PTHREAD_BARRIER_SERIAL_THREAD) window_mark(begin);
  pthread_barrier_wait(&barrier);
}

static void *rank_main(void *p) {
  rank_arg_t *a = p;
  cudaSetDevice(a->rank);
  for (int phase = 0; phase < 2; phase++) { /* the warm-up, then the measured calls */
    for (int i = 0; i < (phase ? a->iters : a->warmup) && a->rc == 0; i++)
      if (ncclAllReduce(a->buf, a->buf, N, ncclFloat, ncclSum, a->comm, a->s) != ncclSuccess)
        a->rc = -1;
    if (cudaStreamSynchronize(a->s) != cudaSuccess) a->rc = -1;
    toggle_together(!phase); /* on an error too: the other thread waits here */
  }
  return NULL;
}

static int run_ungrouped(ncclComm_t comms[2], float *buf[2], cudaStream_t s[2], int warmup,
                         int iters) {
  rank_arg_t a[2];
  pthread_t t[2];
  pthread_barrier_init(&barrier, NULL, 2);
  for (int r = 0; r < 2; r++) {
    a[r] = (rank_arg_t){r, warmup, iters, 0, comms[r], buf[r], s[r]};
    if (pthread_create(&t[r], NULL, rank_main, &a[r]) != 0) return -1;
  }
  for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
  pthread_barrier_destroy(&barrier);
  return a[0].rc || a[1].rc ? -1 : 0;
}

int main(int argc, char **argv) {
  int warmup = 200, iters = 1000, window = 0, ungrouped = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) warmup = atoi(argv[++i]);
    else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = atoi(argv[++i]);
    else if (strcmp(argv[i], "--window") == 0) window = 1;
    else if (strcmp(argv[i], "--nested-simulate") == 0) nested_simulate = 1;
    else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc && strcmp(argv[i + 1], "group2") == 0)
      per_group = 1, i++;
    else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc && strcmp(argv[i + 1], "group8") == 0)
      per_group = 4, i++;
    else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc &&
             strcmp(argv[i + 1], "ungrouped") == 0)
      ungrouped = 1, i++;
    else {
      fprintf(stderr,
              "hotpath_job: unknown argument '%s'; usage: hotpath_job [--warmup W] "
              "[--iters N] [--shape group2|group8|ungrouped] [--window] "
              "[--nested-simulate]\n",
              argv[i]);
      return 2;
    }
  }
  if (ungrouped && (window || nested_simulate)) {
    fprintf(stderr,
            "hotpath_job: --shape ungrouped takes neither --window nor --nested-simulate\n");
    return 2;
  }
  ncclComm_t comms[2];
  int devs[2] = {0, 1};
  ncclResult_t res = ncclCommInitAll(comms, 2, devs);
  if (res != ncclSuccess) {
    fprintf(stderr, "hotpath_job: ncclCommInitAll: %s\n", ncclGetErrorString(res));
    return 1;
  }
  float *buf[2];
  cudaStream_t s[2];
  for (int r = 0; r < 2; r++) {
    cudaSetDevice(r);
    cudaStreamCreate(&s[r]);
    cudaMalloc((void **)&buf[r], N * sizeof(float));
    cudaMemset(buf[r], 0, N * sizeof(float));
  }
  if (ungrouped) {
    if (run_ungrouped(comms, buf, s, warmup, iters) != 0) {
      fprintf(stderr, "hotpath_job: a collective failed\n");
      return 1;
    }
    printf("calls=%d\n", 2 * iters);
    for (int r = 0; r < 2; r++) ncclCommDestroy(comms[r]);
    return 0;
  }
  for (int i = 0; i < warmup; i++)
    if (iteration(comms, buf, s) != 0) return 1;
  void (*begin)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "ahcount_begin");
  void (*end)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "ahcount_end");
  long (*get)(int) = (long (*)(int))dlsym(RTLD_DEFAULT, "ahcount_get");
  if (window) {
    (void)getppid(); /* marker for strace */
    if (begin) begin();
  } else {
    window_mark(1);
  }
  int rc = 0;
  for (int i = 0; i < iters && rc == 0; i++) rc = iteration(comms, buf, s);
  if (window) {
    if (end) end();
    (void)getppid();
  } else {
    window_mark(0);
  }
  if (rc != 0) {
    fprintf(stderr, "hotpath_job: a collective failed\n");
    return 1;
  }
  if (window && get) printf("window mallocs=%ld locks=%ld\n", get(0), get(1));
  printf("calls=%d\n", 2 * per_group * iters);
  for (int r = 0; r < 2; r++) ncclCommDestroy(comms[r]);
  return 0;
}
