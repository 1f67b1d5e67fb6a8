/* hotpath_job: the shim's hot path in isolation. One process, one thread, two ranks made with
 * ncclCommInitAll(2) on sim/; every iteration is one group holding an AllReduce on each rank, so
 * NCCL (sim/) asks the tuner once per rank per iteration. After a warm-up that takes every key past
 * its first decisions and its timed calls, a measured window of iterations runs:
 *
 *   hotpath_job --warmup W --iters N [--window] [--nested-simulate]
 *
 * --nested-simulate  every iteration's group also holds an empty inner group closed by
 *           ncclGroupSimulateEnd (tests/shim/check_nested_simulate.sh).
 * --window  brackets the measured iterations with getppid() markers (for strace) and with
 *           ahcount_begin()/ahcount_end() when the counting library (tests/shim/ahcount.c) is
 *           preloaded, then prints "window mallocs=M locks=L" — run with and without the shim.
 * otherwise the measured loop is bracketed with CALLGRIND_TOGGLE_COLLECT, so callgrind run with
 *           --collect-atstart=no counts only the measured iterations (bench/hotpath/run.sh).
 * Prints "calls=<collective API calls in the measured window>". */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <valgrind/callgrind.h>

#define N 1024

static int nested_simulate; /* --nested-simulate */

static int iteration(ncclComm_t comms[2], float *buf[2], cudaStream_t s[2]) {
  if (ncclGroupStart() != ncclSuccess) return -1;
  for (int r = 0; r < 2; r++)
    if (ncclAllReduce(buf[r], buf[r], N, ncclFloat, ncclSum, comms[r], s[r]) != ncclSuccess)
      return -1;
  if (nested_simulate) { /* an empty inner group, planned and dropped; the outer one still runs */
    ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
    if (ncclGroupStart() != ncclSuccess || ncclGroupSimulateEnd(&info) != ncclSuccess) return -1;
  }
  return ncclGroupEnd() == ncclSuccess ? 0 : -1;
}

int main(int argc, char **argv) {
  int warmup = 200, iters = 1000, window = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) warmup = atoi(argv[++i]);
    else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = atoi(argv[++i]);
    else if (strcmp(argv[i], "--window") == 0) window = 1;
    else if (strcmp(argv[i], "--nested-simulate") == 0) nested_simulate = 1;
    else {
      fprintf(stderr,
              "usage: hotpath_job [--warmup W] [--iters N] [--window] [--nested-simulate]\n");
      return 2;
    }
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
  for (int i = 0; i < warmup; i++)
    if (iteration(comms, buf, s) != 0) return 1;
  void (*begin)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "ahcount_begin");
  void (*end)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "ahcount_end");
  long (*get)(int) = (long (*)(int))dlsym(RTLD_DEFAULT, "ahcount_get");
  if (window) {
    (void)getppid(); /* marker for strace */
    if (begin) begin();
  } else {
    CALLGRIND_TOGGLE_COLLECT;
  }
  int rc = 0;
  for (int i = 0; i < iters && rc == 0; i++) rc = iteration(comms, buf, s);
  if (window) {
    if (end) end();
    (void)getppid();
  } else {
    CALLGRIND_TOGGLE_COLLECT;
  }
  if (rc != 0) {
    fprintf(stderr, "hotpath_job: a collective failed\n");
    return 1;
  }
  if (window && get) printf("window mallocs=%ld locks=%ld\n", get(0), get(1));
  printf("calls=%d\n", 2 * iters);
  for (int r = 0; r < 2; r++) ncclCommDestroy(comms[r]);
  return 0;
}
