/* The CUDA runtime subset that NCCL clients and the autoha shim use: devices, memory, copies,
 * streams, events and errors. Memory is host memory (device pointers are ordinary pointers), so
 * copies of every kind are memmove; each call that CUDA would queue on a stream moves that stream's
 * virtual clock by the copy's modelled duration (sim_device.c).
 *
 * As in CUDA, every failing call records its code as the calling thread's last error, which
 * cudaGetLastError returns and clears and cudaPeekAtLastError returns (sim_cuda_error.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_profiler_api.h>

#include "sim_cuda.h"
#include "sim_graph.h"

static cudaError_t rt_ret(cudaError_t e) {
  if (e != cudaSuccess) sim_cuda_last_error = e;
  return e;
}

/* ---- versions and devices ------------------------------------------------------------------------ */

SIM_API cudaError_t cudaDriverGetVersion(int *driverVersion) {
  if (!driverVersion) return rt_ret(cudaErrorInvalidValue);
  *driverVersion = SIM_CUDA_VERSION;
  return cudaSuccess;
}

SIM_API cudaError_t cudaRuntimeGetVersion(int *runtimeVersion) {
  if (!runtimeVersion) return rt_ret(cudaErrorInvalidValue);
  *runtimeVersion = SIM_CUDA_VERSION;
  return cudaSuccess;
}

SIM_API cudaError_t cudaGetDeviceCount(int *count) {
  if (!count) return rt_ret(cudaErrorInvalidValue);
  *count = sim_device_count();
  return *count ? cudaSuccess : rt_ret(cudaErrorNoDevice);
}

SIM_API cudaError_t cudaSetDevice(int device) { return rt_ret(sim_device_set(device)); }

SIM_API cudaError_t cudaGetDevice(int *device) {
  if (!device) return rt_ret(cudaErrorInvalidValue);
  if (sim_device_count() == 0) return rt_ret(cudaErrorNoDevice);
  *device = sim_device_current();
  return cudaSuccess;
}

SIM_API cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  if (!prop) return rt_ret(cudaErrorInvalidValue);
  if (device < 0 || device >= sim_device_count()) return rt_ret(cudaErrorInvalidDevice);
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "%s", SIM_GPU_NAME);
  for (int i = 0; i < 16; i++) prop->uuid.bytes[i] = (char)(i == 15 ? device : 0x5a);
  prop->totalGlobalMem = SIM_GPU_MEM_BYTES;
  prop->sharedMemPerBlock = 48 << 10;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->memPitch = 2147483647;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->totalConstMem = 64 << 10;
  prop->major = SIM_GPU_CC_MAJOR;
  prop->minor = SIM_GPU_CC_MINOR;
  prop->multiProcessorCount = SIM_GPU_SMS;
  prop->canMapHostMemory = 1;
  prop->concurrentKernels = 1;
  prop->pciBusID = sim_device_attr(cudaDevAttrPciBusId, device);
  prop->asyncEngineCount = 3;
  prop->unifiedAddressing = 1;
  prop->memoryBusWidth = 5120;
  prop->l2CacheSize = 50 << 20;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->streamPrioritiesSupported = 1;
  prop->sharedMemPerMultiprocessor = 228 << 10;
  prop->regsPerMultiprocessor = 65536;
  prop->managedMemory = 1;
  prop->cooperativeLaunch = 1;
  prop->sharedMemPerBlockOptin = 227 << 10;
  prop->maxBlocksPerMultiProcessor = 32;
  prop->hostNumaId = -1;
  return cudaSuccess;
}

/* CUDA 12's headers map cudaGetDeviceProperties to this name; CUDA 13's do not, so declare it. */
cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp *prop, int device);
SIM_API cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp *prop, int device) {
  return cudaGetDeviceProperties(prop, device);
}

SIM_API cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  if (!value) return rt_ret(cudaErrorInvalidValue);
  if (device < 0 || device >= sim_device_count()) return rt_ret(cudaErrorInvalidDevice);
  *value = sim_device_attr((int)attr, device);
  return cudaSuccess;
}

SIM_API cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) {
  if (!pciBusId || len <= 0) return rt_ret(cudaErrorInvalidValue);
  if (device < 0 || device >= sim_device_count()) return rt_ret(cudaErrorInvalidDevice);
  snprintf(pciBusId, (size_t)len, "00000000:%02X:00.0",
           sim_device_attr(cudaDevAttrPciBusId, device));
  return cudaSuccess;
}

SIM_API cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority) {
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return cudaSuccess;
}

/* Work is complete once issued, so synchronising has nothing to wait for. */
SIM_API cudaError_t cudaDeviceSynchronize(void) {
  cudaError_t r = sim_capture_check_sync_device(sim_device_current());
  if (r == cudaSuccess && sim_device_stuck(sim_device_current())) sim_block_forever();
  return rt_ret(r);
}
SIM_API cudaError_t cudaDeviceReset(void) { return cudaSuccess; }

SIM_API cudaError_t cudaMemGetInfo(size_t *free_p, size_t *total_p) {
  if (!free_p || !total_p) return rt_ret(cudaErrorInvalidValue);
  *total_p = SIM_GPU_MEM_BYTES;
  *free_p = SIM_GPU_MEM_BYTES - (1ull << 30);
  return cudaSuccess;
}

/* ---- memory -------------------------------------------------------------------------------------- */

/* Device, pinned host and managed memory: recorded by kind (sim_cuda_memory.c), device memory in
 * shared pages so that IPC handles can map it elsewhere. */
static cudaError_t mem_alloc(void **p, size_t size, int kind) {
  return rt_ret(sim_mem_alloc(p, size, kind));
}

/* Allocation and freeing are "potentially unsafe" while a capture is in progress (CUDA's capture
 * modes): sim_capture_check_unsafe applies the rule. */
static cudaError_t unsafe(void) { return rt_ret(sim_capture_check_unsafe()); }

SIM_API cudaError_t cudaMalloc(void **devPtr, size_t size) {
  return unsafe() != cudaSuccess ? sim_cuda_last_error : mem_alloc(devPtr, size, SIM_MEM_DEVICE);
}
SIM_API cudaError_t cudaMallocHost(void **ptr, size_t size) {
  return unsafe() != cudaSuccess ? sim_cuda_last_error : mem_alloc(ptr, size, SIM_MEM_HOST);
}
SIM_API cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags) {
  (void)flags;
  return unsafe() != cudaSuccess ? sim_cuda_last_error : mem_alloc(pHost, size, SIM_MEM_HOST);
}
SIM_API cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags) {
  (void)flags;
  return unsafe() != cudaSuccess ? sim_cuda_last_error : mem_alloc(devPtr, size, SIM_MEM_MANAGED);
}
SIM_API cudaError_t cudaFree(void *devPtr) {
  return unsafe() != cudaSuccess ? sim_cuda_last_error : rt_ret(sim_mem_free(devPtr, 0));
}
SIM_API cudaError_t cudaFreeHost(void *ptr) {
  return unsafe() != cudaSuccess ? sim_cuda_last_error : rt_ret(sim_mem_free(ptr, 1));
}

/* Graph memory nodes are not modelled: a stream-ordered allocation or free issued into a capture
 * fails with cudaErrorStreamCaptureUnsupported rather than acting once, at capture, and never again. */
static cudaError_t no_memory_nodes(struct CUstream_st *s) {
  struct sim_capture *cap;
  cudaError_t r = sim_capture_enqueue(s, &cap);
  return rt_ret(r != cudaSuccess ? r : cap ? cudaErrorStreamCaptureUnsupported : cudaSuccess);
}

SIM_API cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream) {
  struct CUstream_st *s = sim_stream_resolve(hStream);
  if (!s) return rt_ret(cudaErrorInvalidResourceHandle);
  if (no_memory_nodes(s) != cudaSuccess) return sim_cuda_last_error;
  cudaError_t r = mem_alloc(devPtr, size, SIM_MEM_DEVICE);
  if (r == cudaSuccess) sim_pool_note_alloc(*devPtr, size, sim_device_current());
  return r;
}
SIM_API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream) {
  struct CUstream_st *s = sim_stream_resolve(hStream);
  if (!s) return rt_ret(cudaErrorInvalidResourceHandle);
  if (no_memory_nodes(s) != cudaSuccess) return sim_cuda_last_error;
  cudaError_t r = sim_mem_free(devPtr, 0);
  if (r == cudaSuccess) sim_pool_note_free(devPtr);
  return rt_ret(r);
}

/* ---- copies and sets ------------------------------------------------------------------------------ */

/* The stream a copy or set goes on (*s_p) and the capture it joins (*cap_p; NULL: it runs now).
 * Returns cudaSuccess or the error, recorded. */
static cudaError_t transfer_on(cudaStream_t stream, struct CUstream_st **s_p,
                               struct sim_capture **cap_p) {
  *s_p = sim_stream_resolve(stream);
  if (!*s_p) return rt_ret(cudaErrorInvalidResourceHandle);
  return rt_ret(sim_capture_enqueue(*s_p, cap_p));
}

/* A copy on `stream` (NULL: the legacy stream); a synchronous one (cudaMemcpy, cudaMemcpyPeer)
 * returns only once the copy has run, so it never returns behind a stream that never finishes
 * (NCCLSIM_FAULT=hang): the legacy stream starts after every blocking stream of its device. */
static cudaError_t copy_on(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                           cudaStream_t stream, int synchronous) {
  if ((int)kind < cudaMemcpyHostToHost || (int)kind > cudaMemcpyDefault)
    return rt_ret(cudaErrorInvalidMemcpyDirection);
  struct CUstream_st *s;
  struct sim_capture *cap;
  cudaError_t ce = transfer_on(stream, &s, &cap);
  if (ce != cudaSuccess || count == 0) return ce;
  if (!dst || !src) return rt_ret(cudaErrorInvalidValue);
  if (cap) return rt_ret(sim_capture_add_copy(cap, s, dst, src, count, (int)kind));
  memmove(dst, src, count);
  sim_stream_advance(s, sim_copy_time_us(count, (int)kind));
  if (synchronous && sim_stream_stuck(s)) sim_block_forever();
  return cudaSuccess;
}

static cudaError_t copy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                        cudaStream_t stream) {
  return copy_on(dst, src, count, kind, stream, 0);
}

SIM_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
  if (unsafe() != cudaSuccess) return sim_cuda_last_error; /* a synchronous copy */
  return copy_on(dst, src, count, kind, NULL, 1);
}
SIM_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                    enum cudaMemcpyKind kind, cudaStream_t stream) {
  return copy(dst, src, count, kind, stream);
}
SIM_API cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice,
                                   size_t count) {
  if (unsafe() != cudaSuccess) return sim_cuda_last_error;
  return copy_on(dst, src, count, cudaMemcpyDeviceToDevice, NULL, 1);
}
SIM_API cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice,
                                        size_t count, cudaStream_t stream) {
  return copy(dst, src, count, cudaMemcpyDeviceToDevice, stream);
}

/* A 2D copy: `height` rows of `width` bytes, each a copy of its own (recorded as such in a capture). */
SIM_API cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                                      size_t width, size_t height, enum cudaMemcpyKind kind,
                                      cudaStream_t stream) {
  if (width > dpitch || width > spitch) return rt_ret(cudaErrorInvalidPitchValue);
  if (width == 0 || height == 0) return copy(dst, src, 0, kind, stream);
  for (size_t row = 0; row < height; row++) {
    cudaError_t r =
        copy((char *)dst + row * dpitch, (const char *)src + row * spitch, width, kind, stream);
    if (r != cudaSuccess) return r;
  }
  return cudaSuccess;
}

/* No profiler is ever attached to sim/; CUDA answers success then too. */
SIM_API cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
SIM_API cudaError_t cudaProfilerStop(void) { return cudaSuccess; }

static cudaError_t set(void *dst, int value, size_t count, cudaStream_t stream) {
  struct CUstream_st *s;
  struct sim_capture *cap;
  cudaError_t ce = transfer_on(stream, &s, &cap);
  if (ce != cudaSuccess || count == 0) return ce;
  if (!dst) return rt_ret(cudaErrorInvalidValue);
  if (cap) return rt_ret(sim_capture_add_set(cap, s, dst, value, count));
  memset(dst, value, count);
  sim_stream_advance(s, sim_copy_time_us(count, cudaMemcpyDeviceToDevice));
  return cudaSuccess;
}

SIM_API cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
  if (unsafe() != cudaSuccess) return sim_cuda_last_error;
  return set(devPtr, value, count, NULL);
}
SIM_API cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
  return set(devPtr, value, count, stream);
}

/* ---- streams -------------------------------------------------------------------------------------- */

SIM_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                 int priority) {
  return rt_ret(sim_stream_create(sim_device_current(), flags, priority, pStream));
}
SIM_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
  return cudaStreamCreateWithPriority(pStream, flags, 0);
}
SIM_API cudaError_t cudaStreamCreate(cudaStream_t *pStream) {
  return cudaStreamCreateWithPriority(pStream, cudaStreamDefault, 0);
}
SIM_API cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  return rt_ret(sim_stream_destroy(stream));
}
SIM_API cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  struct CUstream_st *s = sim_stream_resolve(stream);
  cudaError_t r = s ? sim_capture_check_sync_stream(s) : cudaErrorInvalidResourceHandle;
  if (r == cudaSuccess) sim_stream_wait(s);
  return rt_ret(r);
}
SIM_API cudaError_t cudaStreamQuery(cudaStream_t stream) {
  struct CUstream_st *s = sim_stream_resolve(stream);
  cudaError_t r = s ? sim_capture_check_sync_stream(s) : cudaErrorInvalidResourceHandle;
  return r == cudaSuccess && sim_stream_pending(s) ? cudaErrorNotReady : rt_ret(r);
}
SIM_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                        unsigned int flags) {
  struct CUstream_st *s = sim_stream_resolve(stream);
  if (!s) return rt_ret(cudaErrorInvalidResourceHandle);
  struct CUevent_st *e = sim_event_resolve(event);
  if (!e) return rt_ret(cudaErrorInvalidResourceHandle);
  return rt_ret(sim_capture_wait_event(s, e, flags));
}
SIM_API cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority) {
  struct CUstream_st *s = sim_stream_resolve(hStream);
  if (!s || !priority) return rt_ret(s ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
  *priority = s->priority;
  return cudaSuccess;
}
SIM_API cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags) {
  struct CUstream_st *s = sim_stream_resolve(hStream);
  if (!s || !flags) return rt_ret(s ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
  *flags = s->flags;
  return cudaSuccess;
}

/* ---- events --------------------------------------------------------------------------------------- */

SIM_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  return rt_ret(sim_event_create(flags, event));
}
SIM_API cudaError_t cudaEventCreate(cudaEvent_t *event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}
SIM_API cudaError_t cudaEventDestroy(cudaEvent_t event) { return rt_ret(sim_event_destroy(event)); }
SIM_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  struct CUstream_st *s = sim_stream_resolve(stream);
  if (!s) return rt_ret(cudaErrorInvalidResourceHandle);
  struct CUevent_st *e = sim_event_resolve(event);
  if (!e) return rt_ret(cudaErrorInvalidResourceHandle);
  return rt_ret(sim_capture_event_record(e, s));
}
SIM_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                             unsigned int flags) {
  return cudaEventRecord(event, stream);
}
/* Not ready is no error: cudaGetLastError does not report it. */
static cudaError_t rt_ret_ready(cudaError_t e) { return e == cudaErrorNotReady ? e : rt_ret(e); }
SIM_API cudaError_t cudaEventQuery(cudaEvent_t event) {
  return rt_ret_ready(sim_event_query(event));
}
SIM_API cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return rt_ret(sim_event_synchronize(event));
}
SIM_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  return rt_ret_ready(sim_event_elapsed_time(start, end, ms));
}
