/* The CUDA driver subset that the autoha shim and NCCL clients use: init and versions, devices,
 * primary contexts, streams, events and error strings (cuGetProcAddress is sim_cuda_procs.c). It
 * shares every object with the runtime stand-in (a CUstream is a cudaStream_t, a CUevent a
 * cudaEvent_t), as the real driver and runtime do.
 *
 * Note that each device has exactly one context, its primary context, and that the current context
 * is simply the current device's: cuCtxSetCurrent is cudaSetDevice. cuda.h renames several entry
 * points to _v2 versions; both names are exported, as libcuda does, because a program that resolves
 * symbols by name (dlsym) may ask for either. */
#include <string.h>

#include "sim_cuda.h"
#include "sim_graph.h"

CUresult sim_cuda_to_cu(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return CUDA_SUCCESS;
    case cudaErrorInvalidValue: return CUDA_ERROR_INVALID_VALUE;
    case cudaErrorMemoryAllocation: return CUDA_ERROR_OUT_OF_MEMORY;
    case cudaErrorNoDevice: return CUDA_ERROR_NO_DEVICE;
    case cudaErrorInvalidDevice: return CUDA_ERROR_INVALID_DEVICE;
    case cudaErrorInvalidResourceHandle: return CUDA_ERROR_INVALID_HANDLE;
    case cudaErrorNotReady: return CUDA_ERROR_NOT_READY;
    case cudaErrorNotSupported: return CUDA_ERROR_NOT_SUPPORTED;
    case cudaErrorIllegalState: return CUDA_ERROR_ILLEGAL_STATE;
    case cudaErrorLaunchFailure: return CUDA_ERROR_LAUNCH_FAILED;
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorCapturedEvent:
    case cudaErrorStreamCaptureWrongThread:
      return (CUresult)e; /* the capture errors have the same numbers in both APIs */
    default: return CUDA_ERROR_UNKNOWN;
  }
}

static const struct cu_error {
  CUresult code;
  const char *name, *text;
} cu_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
    /* stream capture (sim_cuda_capture.c) */
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE",
     "the operation cannot be performed in the present state"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_MERGE, "CUDA_ERROR_STREAM_CAPTURE_MERGE",
     "operation would result in a merge of separate capture sequences"},
    {CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
     "capture was not ended in the same stream as it began"},
    {CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
     "capturing stream has unjoined work"},
    {CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
     "dependency created on uncaptured work in another stream"},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {CUDA_ERROR_CAPTURED_EVENT, "CUDA_ERROR_CAPTURED_EVENT",
     "operation not permitted on an event last recorded in a capturing stream"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempt to terminate a thread-local capture sequence from another thread"},
};

/* The table's entry for a code, or NULL for a code the driver does not define. */
static const struct cu_error *cu_error_find(CUresult error) {
  for (size_t i = 0; i < sizeof cu_errors / sizeof cu_errors[0]; i++)
    if (cu_errors[i].code == error) return &cu_errors[i];
  return NULL;
}

SIM_API CUresult cuGetErrorString(CUresult error, const char **pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  const struct cu_error *e = cu_error_find(error);
  *pStr = e ? e->text : NULL;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuGetErrorName(CUresult error, const char **pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  const struct cu_error *e = cu_error_find(error);
  *pStr = e ? e->name : NULL;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- init, versions, devices -------------------------------------------------------------------- */

SIM_API CUresult cuInit(unsigned int Flags) {
  return Flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

SIM_API CUresult cuDriverGetVersion(int *driverVersion) {
  if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = SIM_CUDA_VERSION;
  return CUDA_SUCCESS;
}

static int dev_ok(CUdevice d) { return d >= 0 && d < sim_device_count(); }

SIM_API CUresult cuDeviceGetCount(int *count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = sim_device_count();
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_ok(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_ok(dev)) return CUDA_ERROR_INVALID_DEVICE;
  strncpy(name, SIM_GPU_NAME, (size_t)len - 1);
  name[len - 1] = 0;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_ok(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pi = sim_device_attr((int)attrib, dev); /* the driver and runtime attribute numbers agree */
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_ok(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = SIM_GPU_MEM_BYTES;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_ok(dev)) return CUDA_ERROR_INVALID_DEVICE;
  for (int i = 0; i < 16; i++) uuid->bytes[i] = (char)(i == 15 ? dev : 0x5a);
  return CUDA_SUCCESS;
}

/* ---- contexts ------------------------------------------------------------------------------------ */

#define CTX_STACK 16
static _Thread_local int ctx_stack[CTX_STACK];
static _Thread_local int ctx_depth;

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_ok(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pctx = sim_ctx_primary(dev);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return dev_ok(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_ok(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *flags = 0;
  *active = 1;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetCurrent(CUcontext *pctx) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = sim_device_count() ? sim_ctx_primary(sim_device_current()) : NULL;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (!ctx) return CUDA_SUCCESS; /* unbinding: the thread keeps its device, as the runtime would */
  struct CUctx_st *c = sim_ctx_resolve(ctx);
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  return sim_cuda_to_cu(sim_device_set(c->device));
}

SIM_API CUresult cuCtxGetDevice(CUdevice *device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (sim_device_count() == 0) return CUDA_ERROR_INVALID_CONTEXT;
  *device = sim_device_current();
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSynchronize(void) {
  cudaError_t r = sim_capture_check_sync_device(sim_device_current());
  if (r == cudaSuccess && sim_device_stuck(sim_device_current())) sim_block_forever();
  return sim_cuda_to_cu(r);
}

SIM_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  struct CUctx_st *c = sim_ctx_resolve(ctx);
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx_depth >= CTX_STACK) return CUDA_ERROR_INVALID_VALUE;
  ctx_stack[ctx_depth++] = sim_device_current();
  return sim_cuda_to_cu(sim_device_set(c->device));
}

SIM_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
  if (ctx_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = sim_ctx_primary(sim_device_current());
  return sim_cuda_to_cu(sim_device_set(ctx_stack[--ctx_depth]));
}

/* ---- streams and events -------------------------------------------------------------------------- */

SIM_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority) {
  return sim_cuda_to_cu(sim_stream_create(sim_device_current(), flags, priority, phStream));
}
SIM_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags) {
  return cuStreamCreateWithPriority(phStream, Flags, 0);
}
SIM_API CUresult cuStreamDestroy_v2(CUstream hStream) {
  return sim_cuda_to_cu(sim_stream_destroy(hStream));
}
SIM_API CUresult cuStreamSynchronize(CUstream hStream) {
  struct CUstream_st *s = sim_stream_resolve(hStream);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  cudaError_t r = sim_capture_check_sync_stream(s);
  if (r == cudaSuccess) sim_stream_wait(s);
  return sim_cuda_to_cu(r);
}
SIM_API CUresult cuStreamQuery(CUstream hStream) {
  struct CUstream_st *s = sim_stream_resolve(hStream);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  cudaError_t r = sim_capture_check_sync_stream(s);
  return r == cudaSuccess && sim_stream_pending(s) ? CUDA_ERROR_NOT_READY : sim_cuda_to_cu(r);
}
SIM_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  struct CUstream_st *s = sim_stream_resolve(hStream);
  struct CUevent_st *e = sim_event_resolve(hEvent);
  if (!s || !e) return CUDA_ERROR_INVALID_HANDLE;
  return sim_cuda_to_cu(sim_capture_wait_event(s, e, Flags));
}
SIM_API CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx) {
  struct CUstream_st *s = sim_stream_resolve(hStream);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = sim_ctx_primary(s->device);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags) {
  return sim_cuda_to_cu(sim_event_create(Flags, phEvent));
}
SIM_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  struct CUstream_st *s = sim_stream_resolve(hStream);
  struct CUevent_st *e = sim_event_resolve(hEvent);
  if (!s || !e) return CUDA_ERROR_INVALID_HANDLE;
  return sim_cuda_to_cu(sim_capture_event_record(e, s));
}
SIM_API CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
  return cuEventRecord(hEvent, hStream);
}
SIM_API CUresult cuEventQuery(CUevent hEvent) { return sim_cuda_to_cu(sim_event_query(hEvent)); }
SIM_API CUresult cuEventSynchronize(CUevent hEvent) {
  return sim_cuda_to_cu(sim_event_synchronize(hEvent));
}
SIM_API CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
  return sim_cuda_to_cu(sim_event_elapsed_time(hStart, hEnd, pMilliseconds));
}
SIM_API CUresult cuEventDestroy_v2(CUevent hEvent) {
  return sim_cuda_to_cu(sim_event_destroy(hEvent));
}

/* ---- the names cuda.h hides behind _v2 macros ----------------------------------------------------- */
#undef cuDeviceTotalMem
#undef cuDevicePrimaryCtxRelease
#undef cuCtxPushCurrent
#undef cuCtxPopCurrent
#undef cuStreamDestroy
#undef cuEventDestroy
#undef cuEventElapsedTime
CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuCtxPushCurrent(CUcontext ctx);
CUresult cuCtxPopCurrent(CUcontext *pctx);
CUresult cuStreamDestroy(CUstream hStream);
CUresult cuEventDestroy(CUevent hEvent);
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);

SIM_API CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
  return cuDeviceTotalMem_v2(bytes, dev);
}
SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return cuDevicePrimaryCtxRelease_v2(dev);
}
SIM_API CUresult cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }
SIM_API CUresult cuCtxPopCurrent(CUcontext *pctx) { return cuCtxPopCurrent_v2(pctx); }
SIM_API CUresult cuStreamDestroy(CUstream hStream) { return cuStreamDestroy_v2(hStream); }
SIM_API CUresult cuEventDestroy(CUevent hEvent) { return cuEventDestroy_v2(hEvent); }
SIM_API CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
  return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}
