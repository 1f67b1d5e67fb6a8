/* The NCCL side's part in per-connection timing (rdma/rdma_link_*.c, docs/diagnosis.md "Slow
 * links"): which GPU a queue pair is for. NCCL creates its queue pairs on its proxy thread, which
 * runs on its rank's device, so the device current on the creating thread tells the ranks of a
 * process apart (one process driving several GPUs has one proxy thread per communicator and
 * device); the hub matches it with each rank's GPU from its progress records. */
#include "shim_internal.h"
#include "shim_real.h"
#include "rdma.h"

/* The device of the calling thread's current CUDA context, or -1 (no driver, no context). */
static int current_gpu(void) {
  CUdevice dev;
  if (!ah_shim_cuda_init() || !ah_cuda.CtxGetDevice || ah_cuda.CtxGetDevice(&dev) != CUDA_SUCCESS)
    return -1;
  return (int)dev;
}

void ah_shim_link_init(void) {
  ah_shim_link_set_gpu(current_gpu);
  ah_shim_ha_set_gpu(current_gpu);
}
