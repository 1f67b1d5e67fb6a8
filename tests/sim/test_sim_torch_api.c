/* Unit tests of what sim/ added for PyTorch (issue 19), through libncclsim.so's exported entry
 * points: memory pools, kernel attributes and occupancy, __device__ symbols, cooperative and
 * extensible launches, host functions (at once, and as graph nodes replayed), user objects held by
 * graphs, graph node inspection, 2D copies, driver entry points by version, CUDA's "not supported"
 * for loading device code, cuPointerGetAttribute, virtual memory management; and NCCL 2.30's suspend/resume, memory
 * statistics, window user pointer, and the refusals of grow, one-sided RMA and the device API.
 * Runs with NCCLSIM_DEVICES=4 and NCCLSIM_VERSION=2.30.7 (set by CTest). */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ah_check.h"
#include "sim_nccl_230.h"

/* nvcc's registration entry points have no C prototypes in the public headers. */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                            const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                            dim3 *bDim, dim3 *gDim, int *wSize);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                       const char *deviceName, int ext, size_t size, int constant, int global);

static char kernel_stub, bounded_stub, unregistered_stub; /* stand for kernels' host stubs */
static int device_var[16];                                /* stands for a __device__ int[16] */

static void register_module(void) {
  static int fatbin;
  void **h = __cudaRegisterFatBinary(&fatbin);
  __cudaRegisterFunction(h, &kernel_stub, "k", "k", -1, NULL, NULL, NULL, NULL, NULL);
  __cudaRegisterFunction(h, &bounded_stub, "kb", "kb", 256, NULL, NULL, NULL, NULL, NULL);
  __cudaRegisterVar(h, (char *)device_var, "v", "v", 0, sizeof device_var, 0, 0);
  __cudaUnregisterFatBinary(h); /* its kernels stay known, as a program's do until it exits */
}

START_TEST(test_mem_pool) {
  cudaMemPool_t pool, pool1;
  ck_assert_int_eq(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
  ck_assert_int_eq(cudaDeviceGetDefaultMemPool(&pool1, 1), cudaSuccess);
  ck_assert_ptr_ne(pool, pool1);
  ck_assert_int_eq(cudaDeviceGetDefaultMemPool(&pool, 4), cudaErrorInvalidDevice);
  ck_assert_int_eq(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
  uint64_t used = 1, high = 1, reserved = 1;
  ck_assert_int_eq(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used),
                   cudaSuccess);
  ck_assert_uint_eq(used, 0);
  void *a, *b;
  ck_assert_int_eq(cudaMallocAsync(&a, 1000, NULL), cudaSuccess);
  ck_assert_int_eq(cudaMallocAsync(&b, 3000, NULL), cudaSuccess);
  ck_assert_int_eq(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used),
                   cudaSuccess);
  ck_assert_uint_eq(used, 4000);
  ck_assert_int_eq(cudaFreeAsync(b, NULL), cudaSuccess);
  ck_assert_int_eq(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used),
                   cudaSuccess);
  ck_assert_int_eq(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high), cudaSuccess);
  ck_assert_int_eq(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved),
                   cudaSuccess);
  ck_assert_uint_eq(used, 1000);
  ck_assert_uint_eq(high, 4000);
  ck_assert_uint_eq(reserved, 1000); /* nothing cached */
  uint64_t v = 5;
  ck_assert_int_eq(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &v),
                   cudaErrorInvalidValue);
  v = 0;
  ck_assert_int_eq(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &v), cudaSuccess);
  ck_assert_int_eq(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high), cudaSuccess);
  ck_assert_uint_eq(high, 1000); /* reset to the current value */
  ck_assert_int_eq(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v),
                   cudaErrorInvalidValue);
  v = 1 << 20;
  ck_assert_int_eq(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &v), cudaSuccess);
  v = 0;
  ck_assert_int_eq(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &v), cudaSuccess);
  ck_assert_uint_eq(v, 1 << 20);
  struct cudaMemAccessDesc d = {{cudaMemLocationTypeDevice, 2}, cudaMemAccessFlagsProtReadWrite};
  ck_assert_int_eq(cudaMemPoolSetAccess(pool, &d, 1), cudaSuccess);
  d.location.id = 0; /* the owner keeps read-write */
  d.flags = cudaMemAccessFlagsProtRead;
  ck_assert_int_eq(cudaMemPoolSetAccess(pool, &d, 1), cudaErrorInvalidDevice);
  d.location.id = 9;
  ck_assert_int_eq(cudaMemPoolSetAccess(pool, &d, 1), cudaErrorInvalidDevice);
  ck_assert_int_eq(cudaMemPoolTrimTo(pool, 0), cudaSuccess);
  ck_assert_int_eq(cudaMemPoolTrimTo((cudaMemPool_t)&v, 0), cudaErrorInvalidValue);
  ck_assert_int_eq(cudaFreeAsync(a, NULL), cudaSuccess);
  ck_assert_int_eq(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &v), cudaSuccess);
  ck_assert_uint_eq(v, 0);
  v = 1;
  ck_assert_int_eq(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &v),
                   cudaErrorInvalidValue);
  (void)cudaGetLastError();
}
END_TEST

START_TEST(test_kernel_attributes) {
  register_module();
  struct cudaFuncAttributes fa;
  ck_assert_int_eq(cudaFuncGetAttributes(&fa, &kernel_stub), cudaSuccess);
  ck_assert_int_eq(fa.maxThreadsPerBlock, 1024);
  ck_assert_int_eq(fa.maxDynamicSharedSizeBytes, 48 << 10);
  ck_assert_int_eq(cudaFuncGetAttributes(&fa, &bounded_stub), cudaSuccess);
  ck_assert_int_eq(fa.maxThreadsPerBlock, 256); /* __launch_bounds__ */
  ck_assert_int_eq(cudaFuncGetAttributes(&fa, &unregistered_stub), cudaErrorInvalidDeviceFunction);
  ck_assert_int_eq(
      cudaFuncSetAttribute(&kernel_stub, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10),
      cudaSuccess);
  ck_assert_int_eq(cudaFuncGetAttributes(&fa, &kernel_stub), cudaSuccess);
  ck_assert_int_eq(fa.maxDynamicSharedSizeBytes, 100 << 10);
  ck_assert_int_eq(
      cudaFuncSetAttribute(&kernel_stub, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 << 10),
      cudaErrorInvalidValue);
  ck_assert_int_eq(
      cudaKernelSetAttributeForDevice((cudaKernel_t)&kernel_stub,
                                      cudaFuncAttributePreferredSharedMemoryCarveout, 50, 3),
      cudaSuccess);
  ck_assert_int_eq(
      cudaKernelSetAttributeForDevice((cudaKernel_t)&kernel_stub,
                                      cudaFuncAttributePreferredSharedMemoryCarveout, 50, 4),
      cudaErrorInvalidDevice);
  int n = -1;
  ck_assert_int_eq(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, &kernel_stub, 256, 0),
                   cudaSuccess);
  ck_assert_int_eq(n, 8); /* 2048 threads per SM */
  ck_assert_int_eq(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, &kernel_stub, 32, 0),
                   cudaSuccess);
  ck_assert_int_eq(n, 32); /* 32 blocks per SM */
  ck_assert_int_eq(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, &kernel_stub, 64, 100 << 10),
                   cudaSuccess);
  ck_assert_int_eq(n, 2); /* 228 KiB of shared memory */
  ck_assert_int_eq(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, &bounded_stub, 512, 0),
                   cudaSuccess);
  ck_assert_int_eq(n, 0); /* above the kernel's bound */
  ck_assert_int_eq(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, &unregistered_stub, 64, 0),
                   cudaErrorInvalidDeviceFunction);
  dim3 g = {8, 1, 1}, b = {256, 1, 1}, huge = {132 * 8 + 1, 1, 1};
  ck_assert_int_eq(cudaLaunchCooperativeKernel(&kernel_stub, g, b, NULL, 0, NULL), cudaSuccess);
  ck_assert_int_eq(cudaLaunchCooperativeKernel(&kernel_stub, huge, b, NULL, 0, NULL),
                   cudaErrorCooperativeLaunchTooLarge);
  cudaLaunchAttribute at = {.id = cudaLaunchAttributeCooperative, .val.cooperative = 1};
  cudaLaunchConfig_t cfg = {.gridDim = huge, .blockDim = b, .attrs = &at, .numAttrs = 1};
  ck_assert_int_eq(cudaLaunchKernelExC(&cfg, &kernel_stub, NULL),
                   cudaErrorCooperativeLaunchTooLarge);
  at.val.cooperative = 0;
  ck_assert_int_eq(cudaLaunchKernelExC(&cfg, &kernel_stub, NULL), cudaSuccess);
  at.id = cudaLaunchAttributeIgnore;
  ck_assert_int_eq(cudaLaunchKernelExC(&cfg, &kernel_stub, NULL), cudaSuccess);
  at.id = (cudaLaunchAttributeID)99;
  ck_assert_int_eq(cudaLaunchKernelExC(&cfg, &kernel_stub, NULL), cudaErrorInvalidValue);
  (void)cudaGetLastError();
}
END_TEST

START_TEST(test_symbols) {
  register_module();
  void *p = NULL;
  ck_assert_int_eq(cudaGetSymbolAddress(&p, device_var), cudaSuccess);
  ck_assert_ptr_eq(p, device_var);
  ck_assert_int_eq(cudaGetSymbolAddress(&p, &kernel_stub), cudaErrorInvalidSymbol);
  int src[4] = {7, 8, 9, 10};
  ck_assert_int_eq(
      cudaMemcpyToSymbol(device_var, src, sizeof src, 4 * sizeof(int), cudaMemcpyHostToDevice),
      cudaSuccess);
  ck_assert_int_eq(device_var[4], 7);
  ck_assert_int_eq(device_var[7], 10);
  ck_assert_int_eq(
      cudaMemcpyToSymbol(device_var, src, sizeof src, 14 * sizeof(int), cudaMemcpyHostToDevice),
      cudaErrorInvalidValue); /* past its end */
  ck_assert_int_eq(cudaMemcpyToSymbol(device_var, src, sizeof src, 0, cudaMemcpyDeviceToHost),
                   cudaErrorInvalidMemcpyDirection);
  (void)cudaGetLastError();
}
END_TEST

static void add_one(void *arg) { ++*(int *)arg; }
static void stream_cb(cudaStream_t s, cudaError_t e, void *arg) {
  if (e == cudaSuccess) ++*(int *)arg;
}
static void destroy_obj(void *arg) { ++*(int *)arg; }

START_TEST(test_host_functions_and_graphs) {
  int calls = 0, destroyed = 0;
  cudaStream_t s;
  ck_assert_int_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ck_assert_int_eq(cudaLaunchHostFunc(s, add_one, &calls), cudaSuccess);
  ck_assert_int_eq(calls, 1);
  ck_assert_int_eq(cudaStreamAddCallback(s, stream_cb, &calls, 0), cudaSuccess);
  ck_assert_int_eq(calls, 2);
  ck_assert_int_eq(cudaStreamAddCallback(s, stream_cb, &calls, 1), cudaErrorInvalidValue);

  /* a capture: a copy, a host function; the graph holds a user object */
  char *d, src[64], dst[64];
  ck_assert_int_eq(cudaMalloc((void **)&d, 64), cudaSuccess);
  memset(src, 3, sizeof src);
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ck_assert_int_eq(cudaMemcpyAsync(d, src, 64, cudaMemcpyHostToDevice, s), cudaSuccess);
  ck_assert_int_eq(cudaLaunchHostFunc(s, add_one, &calls), cudaSuccess);
  ck_assert_int_eq(cudaStreamAddCallback(s, stream_cb, &calls, 0),
                   cudaErrorStreamCaptureUnsupported);
  ck_assert_int_eq(calls, 2); /* recorded, not called */
  enum cudaStreamCaptureStatus st;
  unsigned long long id;
  cudaGraph_t cg = NULL;
  ck_assert_int_eq(cudaStreamGetCaptureInfo(s, &st, &id, &cg, NULL, NULL, NULL), cudaSuccess);
  ck_assert_ptr_nonnull(cg);
  cudaUserObject_t obj;
  ck_assert_int_eq(cudaUserObjectCreate(&obj, &destroyed, destroy_obj, 1, 0),
                   cudaErrorInvalidValue);
  ck_assert_int_eq(
      cudaUserObjectCreate(&obj, &destroyed, destroy_obj, 1, cudaUserObjectNoDestructorSync),
      cudaSuccess);
  ck_assert_int_eq(cudaGraphRetainUserObject(cg, obj, 1, cudaGraphUserObjectMove), cudaSuccess);
  ck_assert_int_eq(
      cudaStreamUpdateCaptureDependencies(s, NULL, NULL, 0, cudaStreamSetCaptureDependencies),
      cudaSuccess);
  cudaGraph_t g;
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
  ck_assert_int_eq(cudaStreamUpdateCaptureDependencies(s, NULL, NULL, 0, 0), cudaErrorIllegalState);
  size_t n = 0;
  ck_assert_int_eq(cudaGraphGetNodes(g, NULL, &n), cudaSuccess);
  ck_assert_uint_eq(n, 2);
  cudaGraphNode_t nodes[3];
  n = 3;
  ck_assert_int_eq(cudaGraphGetNodes(g, nodes, &n), cudaSuccess);
  ck_assert_uint_eq(n, 2);
  ck_assert_ptr_null(nodes[2]);
  cudaGraphNode_t deps[2];
  size_t nd = 2;
  ck_assert_int_eq(cudaGraphNodeGetDependencies(nodes[1], deps, NULL, &nd), cudaSuccess);
  ck_assert_uint_eq(nd, 1);
  ck_assert_ptr_eq(deps[0], nodes[0]); /* replayed in order */
  nd = 2;
  ck_assert_int_eq(cudaGraphNodeGetDependencies(nodes[0], deps, NULL, &nd), cudaSuccess);
  ck_assert_uint_eq(nd, 0);
  cudaGraphExec_t x;
  ck_assert_int_eq(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
  ck_assert_int_eq(cudaGraphDestroy(g), cudaSuccess);
  ck_assert_int_eq(destroyed, 0); /* the executable still holds the user object */
  ck_assert_int_eq(cudaGraphLaunch(x, s), cudaSuccess);
  ck_assert_int_eq(cudaGraphLaunch(x, s), cudaSuccess);
  ck_assert_int_eq(calls, 4); /* the host node ran at each replay */
  ck_assert_int_eq(cudaMemcpy(dst, d, 64, cudaMemcpyDeviceToHost), cudaSuccess);
  ck_assert_mem_eq(dst, src, 64);
  ck_assert_int_eq(cudaGraphExecDestroy(x), cudaSuccess);
  ck_assert_int_eq(destroyed, 1);
  ck_assert_int_eq(cudaUserObjectRelease(obj, 1), cudaErrorInvalidValue); /* gone */
  ck_assert_int_eq(cudaGraphAddNode(NULL, g, NULL, NULL, 0, NULL), cudaErrorNotSupported);
  ck_assert_int_eq(cudaStreamBeginCaptureToGraph(s, g, NULL, NULL, 0, cudaStreamCaptureModeGlobal),
                   cudaErrorNotSupported);

  /* a 2D copy: 3 rows of 4 bytes out of rows of 8 */
  char src2[24], dst2[12];
  for (int i = 0; i < 24; i++) src2[i] = (char)i;
  ck_assert_int_eq(cudaMemcpy2DAsync(dst2, 4, src2, 8, 4, 3, cudaMemcpyHostToHost, s), cudaSuccess);
  ck_assert_int_eq(dst2[4], 8);
  ck_assert_int_eq(dst2[11], 19);
  ck_assert_int_eq(cudaMemcpy2DAsync(dst2, 4, src2, 8, 5, 3, cudaMemcpyHostToHost, s),
                   cudaErrorInvalidPitchValue);
  ck_assert_int_eq(cudaFree(d), cudaSuccess);
  ck_assert_int_eq(cudaStreamDestroy(s), cudaSuccess);
  (void)cudaGetLastError();
}
END_TEST

START_TEST(test_driver_and_device_code) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q;
  ck_assert_int_eq(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, 0, &q),
                   cudaSuccess);
  ck_assert_int_eq(q, cudaDriverEntryPointSuccess);
  ck_assert_ptr_eq(fn, (void *)cuCtxGetCurrent);
  ck_assert_int_eq(cudaGetDriverEntryPointByVersion("cuNoSuchThing", &fn, 12000, 0, &q),
                   cudaSuccess);
  ck_assert_int_eq(q, cudaDriverEntryPointSymbolNotFound);
  ck_assert_ptr_null(fn);
  cudaLibrary_t lib;
  ck_assert_int_eq(cudaLibraryLoadData(&lib, "x", NULL, NULL, 0, NULL, NULL, 0),
                   cudaErrorNotSupported);
  CUmodule mod;
  ck_assert_int_eq(cuModuleLoadData(&mod, "x"), CUDA_ERROR_NOT_SUPPORTED);
  CUfunction f;
  ck_assert_int_eq(cuModuleGetFunction(&f, NULL, "k"), CUDA_ERROR_INVALID_HANDLE);
  ck_assert_int_eq(cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
                   CUDA_ERROR_INVALID_HANDLE);
  char *d;
  ck_assert_int_eq(cudaSetDevice(2), cudaSuccess);
  ck_assert_int_eq(cudaMalloc((void **)&d, 5000), cudaSuccess);
  int ord = -1;
  unsigned type = 0;
  CUdeviceptr start = 0;
  size_t size = 0;
  ck_assert_int_eq(
      cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)(d + 10)),
      CUDA_SUCCESS);
  ck_assert_int_eq(ord, 2);
  ck_assert_int_eq(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)d),
                   CUDA_SUCCESS);
  ck_assert_uint_eq(type, CU_MEMORYTYPE_DEVICE);
  ck_assert_int_eq(
      cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)(d + 10)),
      CUDA_SUCCESS);
  ck_assert_ptr_eq((void *)start, d);
  ck_assert_int_eq(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)d),
                   CUDA_SUCCESS);
  ck_assert_uint_eq(size, 5000);
  int local;
  ck_assert_int_eq(
      cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)&local),
      CUDA_ERROR_INVALID_VALUE);
  ck_assert_int_eq(cudaFree(d), cudaSuccess);
  ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
  (void)cudaGetLastError();
}
END_TEST

/* Virtual memory management, as PyTorch's expandable segments use it. */
START_TEST(test_vmm) {
  const size_t G = 2u << 20;
  CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                              .location = {CU_MEM_LOCATION_TYPE_DEVICE, 1}};
  size_t gran = 0;
  ck_assert_int_eq(
      cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
      CUDA_SUCCESS);
  ck_assert_uint_eq(gran, G);
  CUmemAllocationProp bad = prop;
  bad.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CUmemGenericAllocationHandle h, h2, h3;
  ck_assert_int_eq(cuMemCreate(&h, G, &bad, 0), CUDA_ERROR_NOT_SUPPORTED);
  ck_assert_int_eq(cuMemCreate(&h, G + 4096, &prop, 0),
                   CUDA_ERROR_INVALID_VALUE); /* not whole granules */
  ck_assert_int_eq(cuMemCreate(&h, 2 * G, &prop, 0), CUDA_SUCCESS);
  CUdeviceptr base;
  ck_assert_int_eq(cuMemAddressReserve(&base, 4 * G, 0, 0, 0), CUDA_SUCCESS);
  ck_assert_uint_eq(base % G, 0);
  ck_assert_int_eq(cuMemMap(base + 4096, 2 * G, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* unaligned */
  ck_assert_int_eq(cuMemMap(base, 2 * G, 0, h, 0), CUDA_SUCCESS);
  ck_assert_int_eq(cuMemMap(base, 2 * G, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* already mapped */
  CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  ck_assert_int_eq(cuMemSetAccess(base, 4 * G, &acc, 1),
                   CUDA_ERROR_INVALID_VALUE); /* half unmapped */
  ck_assert_int_eq(cuMemSetAccess(base, 2 * G, &acc, 1), CUDA_SUCCESS);
  uint32_t *w = (uint32_t *)(uintptr_t)base;
  w[0] = 11;
  struct cudaPointerAttributes pa;
  ck_assert_int_eq(cudaPointerGetAttributes(&pa, w + 100), cudaSuccess);
  ck_assert_int_eq(pa.type, cudaMemoryTypeDevice);
  ck_assert_int_eq(pa.device, 1);
  CUdeviceptr rb;
  size_t rs;
  ck_assert_int_eq(cuMemGetAddressRange(&rb, &rs, base + 12345), CUDA_SUCCESS);
  ck_assert_uint_eq(rb, base);
  ck_assert_uint_eq(rs, 2 * G);
  ck_assert_int_eq(cuMemRetainAllocationHandle(&h2, w + 5), CUDA_SUCCESS);
  ck_assert_uint_eq(h2, h);
  ck_assert_int_eq(cuMemRelease(h2), CUDA_SUCCESS);
  ck_assert_int_eq(cudaFree(w), cudaErrorInvalidValue); /* not cudaMalloc memory */

  /* stream-ordered writes, at once and replayed from a graph */
  cudaStream_t s;
  ck_assert_int_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ck_assert_int_eq(cuMemsetD32Async(base + 4, 0xdeadbeefu, 10, s), CUDA_SUCCESS);
  ck_assert_uint_eq(w[0], 11);
  ck_assert_uint_eq(w[1], 0xdeadbeefu);
  ck_assert_uint_eq(w[10], 0xdeadbeefu);
  ck_assert_uint_eq(w[11], 0);
  ck_assert_int_eq(cuStreamWriteValue32(s, base, 42, 0), CUDA_SUCCESS);
  ck_assert_uint_eq(w[0], 42);
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ck_assert_int_eq(cuMemsetD32Async(base, 7, 3, s), CUDA_SUCCESS);
  ck_assert_uint_eq(w[0], 42); /* recorded, not done */
  cudaGraph_t g;
  cudaGraphExec_t x;
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
  ck_assert_int_eq(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
  ck_assert_int_eq(cudaGraphLaunch(x, s), cudaSuccess);
  ck_assert_uint_eq(w[0], 7);
  ck_assert_uint_eq(w[2], 7);
  ck_assert_uint_eq(w[3], 0xdeadbeefu);
  ck_assert_int_eq(cudaGraphExecDestroy(x), cudaSuccess);
  ck_assert_int_eq(cudaGraphDestroy(g), cudaSuccess);
  ck_assert_int_eq(cudaStreamDestroy(s), cudaSuccess);

  /* the same memory through an exported and imported handle, mapped a second time */
  int fd = -1;
  ck_assert_int_eq(
      cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
      CUDA_SUCCESS);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(cuMemImportFromShareableHandle(&h3, (void *)(intptr_t)fd,
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                   CUDA_SUCCESS);
  close(fd);
  CUmemAllocationProp got;
  ck_assert_int_eq(cuMemGetAllocationPropertiesFromHandle(&got, h3), CUDA_SUCCESS);
  ck_assert_int_eq(got.location.id, 1);
  ck_assert_int_eq(cuMemMap(base + 2 * G, 2 * G, 0, h3, 0), CUDA_SUCCESS);
  ck_assert_int_eq(cuMemSetAccess(base + 2 * G, 2 * G, &acc, 1), CUDA_SUCCESS);
  ck_assert_uint_eq(((uint32_t *)(uintptr_t)(base + 2 * G))[0], 7); /* shared pages */

  ck_assert_int_eq(cuMemUnmap(base, G), CUDA_ERROR_INVALID_VALUE);           /* half a mapping */
  ck_assert_int_eq(cuMemAddressFree(base, 4 * G), CUDA_ERROR_INVALID_VALUE); /* still mapped */
  ck_assert_int_eq(cuMemUnmap(base, 4 * G), CUDA_SUCCESS);
  ck_assert_int_eq(cudaPointerGetAttributes(&pa, w), cudaSuccess);
  ck_assert_int_eq(pa.type, cudaMemoryTypeUnregistered);
  ck_assert_int_eq(cuMemRelease(h), CUDA_SUCCESS);
  ck_assert_int_eq(cuMemRelease(h3), CUDA_SUCCESS);
  ck_assert_int_eq(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE); /* gone */
  ck_assert_int_eq(cuMemAddressFree(base, 4 * G), CUDA_SUCCESS);
  ck_assert_int_eq(cuMemAddressFree(base, 4 * G), CUDA_ERROR_INVALID_VALUE);
  void *fn = NULL;
  ck_assert_int_eq(cuGetProcAddress("cuMemCreate", &fn, 12000, 0, NULL), CUDA_SUCCESS);
  ck_assert_ptr_eq(fn, (void *)cuMemCreate);
  (void)cudaGetLastError();
}
END_TEST

START_TEST(test_nccl_230) {
  ncclComm_t comm;
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  float *buf;
  ck_assert_int_eq(cudaMalloc((void **)&buf, 64 * sizeof *buf), cudaSuccess);
  uint64_t v = 7;
  ck_assert_int_eq(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v), ncclSuccess);
  ck_assert_uint_eq(v, 0);
  ck_assert_int_eq(ncclCommSuspend(comm, 0x40), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), ncclSuccess);
  ck_assert_int_eq(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), ncclInvalidUsage);
  ck_assert_int_eq(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v), ncclSuccess);
  ck_assert_uint_eq(v, 1);
  ck_assert_int_eq(ncclAllReduce(buf, buf, 64, ncclFloat, ncclSum, comm, NULL), ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "suspended"));
  ck_assert_int_eq(ncclCommResume(comm), ncclSuccess);
  ck_assert_int_eq(ncclCommResume(comm), ncclInvalidUsage);
  ck_assert_int_eq(ncclAllReduce(buf, buf, 64, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
  ck_assert_int_eq(ncclCommMemStats(comm, ncclStatGpuMemTotal, &v), ncclSuccess);
  ck_assert_uint_eq(v, 0); /* staging is host memory */
  ck_assert_int_eq(ncclCommMemStats(comm, (ncclCommMemStat_t)9, &v), ncclInvalidArgument);

  ncclWindow_t win;
  void *user = NULL;
  ck_assert_int_eq(ncclCommWindowRegister(comm, buf, 64 * sizeof *buf, &win, 0), ncclSuccess);
  ck_assert_int_eq(ncclWinGetUserPtr(comm, win, &user), ncclSuccess);
  ck_assert_ptr_eq(user, buf);
  ck_assert_int_eq(ncclWinGetUserPtr(comm, (ncclWindow_t)&v, &user), ncclInvalidArgument);
  ck_assert_int_eq(ncclPutSignal(buf, 4, ncclFloat, 0, win, 0, 0, 0, 0, comm, NULL),
                   ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "not modelled"));
  ck_assert_int_eq(ncclSignal(1, 0, 0, 0, comm, NULL), ncclInvalidArgument); /* peer out of range */
  ncclWaitSignalDesc_t desc = {1, 0, 0, 0};
  ck_assert_int_eq(ncclWaitSignal(1, &desc, comm, NULL), ncclInvalidUsage);
  void *out = NULL;
  ck_assert_int_eq(ncclGetPeerDevicePointer(win, 0, 0, &out), ncclInvalidUsage);
  ck_assert_int_eq(ncclGetLsaMultimemDevicePointer(win, 0, &out), ncclInvalidUsage);
  ck_assert_int_eq(ncclCommWindowDeregister(comm, win), ncclSuccess);
  ncclComm_t grown;
  ck_assert_int_eq(ncclCommGetUniqueId(comm, &id), ncclInvalidUsage);
  ck_assert_int_eq(ncclCommGrow(comm, 2, NULL, -1, &grown, NULL), ncclInvalidUsage);
  ck_assert_int_eq(cudaFree(buf), cudaSuccess);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* Under an emulated NCCL older than the call, the call is refused with its version. */
START_TEST(test_nccl_230_versions) {
  setenv("NCCLSIM_VERSION", "2.28.9", 1);
  ck_assert_int_eq(ncclCommSuspend(NULL, 0), ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "introduced in NCCL 2.29.7"));
  void *p;
  ck_assert_int_eq(ncclWinGetUserPtr(NULL, NULL, &p), ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "introduced in NCCL 2.30.3"));
}
END_TEST

int main(void) {
  Suite *s = suite_create("sim_torch_api");
  const TTest *const cuda_tests[] = {test_mem_pool,
                                     test_kernel_attributes,
                                     test_symbols,
                                     test_host_functions_and_graphs,
                                     test_driver_and_device_code,
                                     test_vmm,
                                     test_nccl_230};
  ah_check_add(s, (ah_check_case_t){.name = "cuda", .timeout = 30}, cuda_tests,
               AH_CHECK_COUNT(cuda_tests));
  /* The version case emulates an older NCCL, which sim/ reads once per process: it runs on its
   * own (CTest's test_sim_torch_api_versions sets CK_RUN_CASE=version). */
  const char *only = getenv("CK_RUN_CASE");
  if (only && strcmp(only, "version") == 0) {
    const TTest *const version_tests[] = {test_nccl_230_versions};
    ah_check_add(s, (ah_check_case_t){.name = "version", .timeout = 30}, version_tests,
                 AH_CHECK_COUNT(version_tests));
  }
  return ah_check_run(s);
}
