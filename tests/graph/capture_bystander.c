/* capture_bystander: one thread holds a capture open in CUDA's global mode while another thread
 * of the same process issues eager NCCL collectives (one thread driving both ranks of a 2-rank
 * communicator, grouped), as a framework's side thread does while the main thread captures. The
 * bystander itself makes no call that CUDA forbids during another thread's global capture; with
 * libautoha.so preloaded, the shim's own event queries (its timing harvest) must not make one
 * either. Exits 0 when the capture ends valid and its graph replays correctly, 1 otherwise.
 *
 *   capture_bystander [--calls N]      (run directly, on sim/, NCCLSIM_DEVICES >= 2) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#define N 4096

static long calls = 200;
static _Atomic int ready, capturing, bystander_done;
static long bystander_errors;

static void *bystander(void *arg) {
  (void)arg;
  ncclComm_t comms[2];
  int devs[2] = {0, 1};
  cudaStream_t s[2];
  float *buf[2];
  if (ncclCommInitAll(comms, 2, devs) != ncclSuccess) {
    bystander_errors++;
    atomic_store(&ready, 1);
    goto done;
  }
  for (int i = 0; i < 2; i++) {
    cudaSetDevice(i);
    cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking);
    buf[i] = calloc(N, sizeof(float)); /* device memory is host memory on sim/ */
    for (int j = 0; j < N; j++) buf[i][j] = 1.0f;
  }
  atomic_store(&ready, 1);
  while (!atomic_load(&capturing)) {} /* start once the capture is open */
  for (long k = 0; k < calls; k++) {
    ncclGroupStart();
    for (int i = 0; i < 2; i++)
      ncclAllReduce(buf[i], buf[i], N, ncclFloat, ncclMax, comms[i], s[i]);
    if (ncclGroupEnd() != ncclSuccess) bystander_errors++;
  }
  for (int i = 0; i < 2; i++) {
    ncclCommDestroy(comms[i]);
    free(buf[i]);
  }
done:
  atomic_store(&bystander_done, 1);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--calls")) calls = atol(argv[2]);
  pthread_t th;
  pthread_create(&th, NULL, bystander, NULL);
  cudaSetDevice(0);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  static int a[N], b[N];
  for (int j = 0; j < N; j++) a[j] = j;
  cudaGraph_t g = NULL;
  while (!atomic_load(&ready)) {}
  cudaError_t begin = cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  cudaError_t copy = cudaMemcpyAsync(b, a, sizeof a, cudaMemcpyDeviceToDevice, s);
  atomic_store(&capturing, 1);
  while (!atomic_load(&bystander_done)) {} /* the whole bystander run happens during the capture */
  cudaError_t end = cudaStreamEndCapture(s, &g);
  pthread_join(th, NULL);
  cudaGraphExec_t x;
  int ok = begin == cudaSuccess && copy == cudaSuccess && end == cudaSuccess &&
           cudaGraphInstantiate(&x, g, 0) == cudaSuccess && cudaGraphLaunch(x, s) == cudaSuccess &&
           b[N - 1] == N - 1 && bystander_errors == 0;
  printf(
      "capture_bystander: %ld grouped calls beside a global-mode capture: begin %s, end %s, "
      "bystander errors %ld: %s\n",
      calls, cudaGetErrorName(begin), cudaGetErrorName(end), bystander_errors,
      ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
