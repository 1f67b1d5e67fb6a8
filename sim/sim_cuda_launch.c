/* The entry points that nvcc-generated host code calls: module registration at start-up
 * (__cudaRegisterFatBinary and friends), the <<<...>>> launch sequence (__cudaPushCallConfiguration,
 * __cudaPopCallConfiguration, __cudaGetKernel, __cudaLaunchKernel) and cudaLaunchKernel.
 *
 * Kernels are never executed: sim/ has no GPU to run device code on, and a launch checks its
 * configuration and stream, then takes no virtual time (simulated compute is added explicitly with
 * ncclsimStreamAddCompute). Registration only has to hand back a handle, so that an unmodified
 * program built with nvcc links and starts. */
#include <stdlib.h>

#include "sim_cuda.h"
#include "sim_graph.h"

/* Not in the public headers as C prototypes (nvcc declares them in its generated code). */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                            const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                            dim3 *bDim, dim3 *gDim, int *wSize);
void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                       const char *deviceName, int ext, size_t size, int constant, int global);
void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress, char *deviceAddress,
                              const char *deviceName, int ext, size_t size, int constant,
                              int global);
char __cudaInitModule(void **fatCubinHandle);
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st *stream);
cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                       void *stream);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *fun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                               size_t sharedMem, cudaStream_t stream);

/* One handle per registered fat binary: the runtime's handle is a void ** that the program keeps
 * and passes back; its content is ours. */
SIM_API void **__cudaRegisterFatBinary(void *fatCubin) {
  void **h = calloc(1, sizeof *h);
  if (h) *h = fatCubin;
  return h;
}
SIM_API void __cudaRegisterFatBinaryEnd(void **fatCubinHandle) { (void)fatCubinHandle; }
SIM_API void __cudaUnregisterFatBinary(void **fatCubinHandle) { free(fatCubinHandle); }
/* Functions and variables are recorded (sim_cuda_func.c) so that attribute, occupancy and symbol
 * queries can tell a kernel or a __device__ variable from any other address, as CUDA does. */
SIM_API void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                    const char *deviceName, int thread_limit, uint3 *tid,
                                    uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize) {
  sim_func_register(hostFun, thread_limit);
}
SIM_API void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                               const char *deviceName, int ext, size_t size, int constant,
                               int global) {
  sim_symbol_register(hostVar, size);
}
SIM_API void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
                                      char *deviceAddress, const char *deviceName, int ext,
                                      size_t size, int constant, int global) {}
SIM_API char __cudaInitModule(void **fatCubinHandle) { return 1; }

/* The launch configuration of `kernel<<<g, b, shm, s>>>(...)`: pushed, then popped by the stub
 * nvcc generates for the kernel, on the same thread. A short stack covers launches nested in the
 * evaluation of another launch's arguments. */
typedef struct {
  dim3 grid, block;
  size_t shmem;
  void *stream;
} launch_cfg_t;
#define CFG_DEPTH 8
static _Thread_local launch_cfg_t cfg_stack[CFG_DEPTH];
static _Thread_local int cfg_depth;

SIM_API unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                             struct CUstream_st *stream) {
  if (cfg_depth >= CFG_DEPTH) return 1;
  launch_cfg_t c = {gridDim, blockDim, sharedMem, stream};
  cfg_stack[cfg_depth++] = c;
  return 0;
}

SIM_API cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                               void *stream) {
  if (cfg_depth == 0) return cudaErrorInvalidConfiguration;
  launch_cfg_t c = cfg_stack[--cfg_depth];
  if (gridDim) *gridDim = c.grid;
  if (blockDim) *blockDim = c.block;
  if (sharedMem) *sharedMem = c.shmem;
  if (stream) *(void **)stream = c.stream;
  return cudaSuccess;
}

SIM_API cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *fun) {
  if (!kernel || !fun) return cudaErrorInvalidDeviceFunction;
  *kernel = (cudaKernel_t)fun;
  return cudaSuccess;
}

/* Checks what CUDA checks before a launch; the kernel itself does not run. A cooperative launch
 * must also fit on the device at once: at most the occupancy answer times the SM count. */
static cudaError_t launch_ex(const void *fun, dim3 grid, dim3 block, size_t shmem,
                             cudaStream_t stream, int cooperative) {
  if (!fun) return cudaErrorInvalidDeviceFunction;
  unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0 || threads > 1024 ||
      grid.y > 65535 || grid.z > 65535 || shmem > (227u << 10))
    return cudaErrorInvalidConfiguration;
  if (cooperative) {
    int per_sm = sim_occupancy_blocks((int)threads, shmem);
    if ((unsigned long long)grid.x * grid.y * grid.z > (unsigned long long)per_sm * SIM_GPU_SMS)
      return cudaErrorCooperativeLaunchTooLarge;
  }
  struct CUstream_st *s = sim_stream_resolve(stream);
  if (!s) return cudaErrorInvalidResourceHandle;
  struct sim_capture *cap;
  cudaError_t r = sim_capture_enqueue(s, &cap);
  if (r == cudaSuccess && cap) r = sim_capture_add_kernel(cap, s); /* replayed as a launch */
  return r;
}

static cudaError_t launch(const void *fun, dim3 grid, dim3 block, size_t shmem,
                          cudaStream_t stream) {
  return launch_ex(fun, grid, block, shmem, stream, 0);
}

/* A failed launch is reported through cudaGetLastError, as in CUDA. */
static cudaError_t launch_ret(cudaError_t e) {
  if (e != cudaSuccess) sim_cuda_set_last_error(e);
  return e;
}

SIM_API cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                       void **args, size_t sharedMem, cudaStream_t stream) {
  return launch_ret(launch((const void *)kernel, gridDim, blockDim, sharedMem, stream));
}

SIM_API cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                     size_t sharedMem, cudaStream_t stream) {
  return launch_ret(launch(func, gridDim, blockDim, sharedMem, stream));
}

SIM_API cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim,
                                                void **args, size_t sharedMem,
                                                cudaStream_t stream) {
  return launch_ret(launch_ex(func, gridDim, blockDim, sharedMem, stream, 1));
}

/* The extensible launch: of the attributes, only cooperation changes what sim/ checks; an id past
 * the last one CUDA 13 defines (cudaLaunchAttributeNvlinkUtilCentricScheduling) is refused. */
SIM_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
                                        void **args) {
  if (!config || (config->numAttrs && !config->attrs)) return launch_ret(cudaErrorInvalidValue);
  int coop = 0;
  for (unsigned i = 0; i < config->numAttrs; i++) {
    const cudaLaunchAttribute *a = &config->attrs[i];
    if ((int)a->id < 0 ||
        (int)a->id > cudaLaunchAttributeNvlinkUtilCentricScheduling) /* 0: ignored */
      return launch_ret(cudaErrorInvalidValue);
    if (a->id == cudaLaunchAttributeCooperative) coop = a->val.cooperative != 0;
  }
  return launch_ret(launch_ex(func, config->gridDim, config->blockDim, config->dynamicSmemBytes,
                              config->stream, coop));
}
