/* Loading device code at run time — the runtime's libraries (cudaLibrary*), the driver's modules
 * and linker (cuModule*, cuLink*), the functions they hold (cuFunc*, cuLaunchKernel,
 * cuOccupancy*) and TMA descriptors (cuTensorMapEncodeTiled) — and cuPointerGetAttribute.
 *
 * sim/ executes no device code, so it cannot load any: loading answers CUDA's "not supported"
 * (cudaErrorNotSupported, CUDA_ERROR_NOT_SUPPORTED) instead of pretending, and a library, module,
 * link state or CUfunction handle therefore never exists, so every call taking one answers
 * "invalid handle". A program that JIT-compiles kernels (NVRTC) gets the error on its first load. */
#include <string.h>

#include "sim_cuda.h"

static cudaError_t ret(cudaError_t e) {
  sim_cuda_set_last_error(e);
  return e;
}

/* ---- runtime ------------------------------------------------------------------------------------ */

SIM_API cudaError_t cudaLibraryLoadData(cudaLibrary_t *library, const void *code,
                                        enum cudaJitOption *jitOptions, void **jitOptionsValues,
                                        unsigned int numJitOptions,
                                        enum cudaLibraryOption *libraryOptions,
                                        void **libraryOptionValues,
                                        unsigned int numLibraryOptions) {
  return ret(!library || !code ? cudaErrorInvalidValue : cudaErrorNotSupported);
}
SIM_API cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t *library, const char *fileName,
                                            enum cudaJitOption *jitOptions, void **jitOptionsValues,
                                            unsigned int numJitOptions,
                                            enum cudaLibraryOption *libraryOptions,
                                            void **libraryOptionValues,
                                            unsigned int numLibraryOptions) {
  return ret(!library || !fileName ? cudaErrorInvalidValue : cudaErrorNotSupported);
}
SIM_API cudaError_t cudaLibraryUnload(cudaLibrary_t library) {
  return ret(cudaErrorInvalidResourceHandle);
}
SIM_API cudaError_t cudaLibraryGetKernel(cudaKernel_t *pKernel, cudaLibrary_t library,
                                         const char *name) {
  return ret(!pKernel || !name ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
}
SIM_API cudaError_t cudaLibraryGetKernelCount(unsigned int *count, cudaLibrary_t lib) {
  return ret(!count ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
}
SIM_API cudaError_t cudaLibraryGetGlobal(void **dptr, size_t *bytes, cudaLibrary_t library,
                                         const char *name) {
  return ret(!name ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
}
SIM_API cudaError_t cudaLibraryGetManaged(void **dptr, size_t *bytes, cudaLibrary_t library,
                                          const char *name) {
  return ret(!name ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
}
SIM_API cudaError_t cudaLibraryGetUnifiedFunction(void **fptr, cudaLibrary_t library,
                                                  const char *symbol) {
  return ret(!fptr || !symbol ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
}

/* ---- driver -------------------------------------------------------------------------------------- */

SIM_API CUresult cuModuleLoad(CUmodule *module, const char *fname) {
  return !module || !fname ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
}
SIM_API CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  return !module || !image ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
}
SIM_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                    CUjit_option *options, void **optionValues) {
  return !module || !image ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
}
SIM_API CUresult cuModuleUnload(CUmodule hmod) { return CUDA_ERROR_INVALID_HANDLE; }
SIM_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  return !hfunc || !name ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
}
SIM_API CUresult cuLinkCreate(unsigned int numOptions, CUjit_option *options, void **optionValues,
                              CUlinkState *stateOut) {
  return !stateOut ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
}
SIM_API CUresult cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size,
                               const char *name, unsigned int numOptions, CUjit_option *options,
                               void **optionValues) {
  return CUDA_ERROR_INVALID_HANDLE;
}
SIM_API CUresult cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut) {
  return CUDA_ERROR_INVALID_HANDLE;
}
SIM_API CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc) {
  return !pi ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
}
SIM_API CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  return CUDA_ERROR_INVALID_HANDLE;
}
SIM_API CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  return CUDA_ERROR_INVALID_HANDLE;
}
SIM_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
                                void **extra) {
  return CUDA_ERROR_INVALID_HANDLE;
}
SIM_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                           unsigned int gridDimY, unsigned int gridDimZ,
                                           unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes,
                                           CUstream hStream, void **kernelParams) {
  return CUDA_ERROR_INVALID_HANDLE;
}
SIM_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
                                                             int blockSize,
                                                             size_t dynamicSMemSize) {
  return !numBlocks ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
}
/* A TMA descriptor is only read by kernels, which sim/ does not run. */
SIM_API CUresult cuTensorMapEncodeTiled(
    CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
    void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
    const cuuint32_t *boxDim, const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
    CUtensorMapFloatOOBfill oobFill) {
  return !tensorMap ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
}

/* One attribute of the allocation holding `ptr`, from sim/'s record of it (the runtime's
 * cudaPointerGetAttributes reads the same records). */
SIM_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  sim_alloc_t a;
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  if (!sim_mem_find((const void *)(uintptr_t)ptr, &a)) return CUDA_ERROR_INVALID_VALUE;
  int on_device = a.kind == SIM_MEM_DEVICE || a.kind == SIM_MEM_IPC || a.kind == SIM_MEM_VMM;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = sim_ctx_primary(a.device); break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *(unsigned *)data =
          on_device || a.kind == SIM_MEM_MANAGED ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (on_device)
        return CUDA_ERROR_INVALID_VALUE; /* device memory has no host mapping in CUDA */
      *(void **)data = (void *)(uintptr_t)ptr;
      break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned *)data = a.kind == SIM_MEM_MANAGED; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = a.device; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = (CUdeviceptr)a.base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a.size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(unsigned *)data = 1; break;
    default: return CUDA_ERROR_NOT_SUPPORTED; /* the rest are not modelled */
  }
  return CUDA_SUCCESS;
}
