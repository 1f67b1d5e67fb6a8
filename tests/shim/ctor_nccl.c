/* A library that uses NCCL from its own constructor, before main and possibly before the shim's
 * constructor has run (the shim must initialise lazily from its first wrapper). It makes a 2-rank
 * communicator with ncclCommInitAll, all-reduces once and checks the sum; ctor_main reads the
 * outcome. */
#include <cuda_runtime_api.h>
#include <nccl.h>

__attribute__((visibility("default"))) int ctor_nccl_status =
    -1; /* 0: every call succeeded, sums right */

static void run(void) {
  ncclComm_t comms[2];
  int devs[2] = {0, 1};
  if (ncclCommInitAll(comms, 2, devs) != ncclSuccess) return;
  float *buf[2], host[256];
  cudaStream_t s[2];
  for (int r = 0; r < 2; r++) {
    cudaSetDevice(r);
    cudaStreamCreate(&s[r]);
    cudaMalloc((void **)&buf[r], sizeof host);
    for (int i = 0; i < 256; i++) host[i] = (float)(r + 1);
    cudaMemcpy(buf[r], host, sizeof host, cudaMemcpyHostToDevice);
  }
  if (ncclGroupStart() != ncclSuccess) return;
  for (int r = 0; r < 2; r++)
    if (ncclAllReduce(buf[r], buf[r], 256, ncclFloat, ncclSum, comms[r], s[r]) != ncclSuccess)
      return;
  if (ncclGroupEnd() != ncclSuccess) return;
  int ok = 1;
  for (int r = 0; r < 2; r++) {
    cudaSetDevice(r);
    cudaStreamSynchronize(s[r]);
    cudaMemcpy(host, buf[r], sizeof host, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 256; i++) ok &= host[i] == 3.0f;
    cudaFree(buf[r]);
    cudaStreamDestroy(s[r]);
    if (ncclCommDestroy(comms[r]) != ncclSuccess) ok = 0;
  }
  ctor_nccl_status = ok ? 0 : 1;
}

__attribute__((constructor)) static void ctor_nccl(void) { run(); }
