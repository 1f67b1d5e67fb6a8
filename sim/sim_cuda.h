/* Internal interface between the CUDA runtime stand-in (sim_cuda_runtime.c), the driver stand-in
 * (sim_cuda_driver.c), the nvcc entry points (sim_cuda_launch.c) and the device model
 * (sim_device.c). Both APIs are thin: they check arguments, translate error codes and call the
 * device model, which owns every device, stream, event and context and their virtual clocks.
 *
 * Error codes inside the model are the runtime's (cudaError_t); the driver maps them to CUresult
 * with sim_cuda_to_cu. */
#ifndef SIM_CUDA_H
#define SIM_CUDA_H

#include <stddef.h>

#include "sim_internal.h"

/* A context: one primary context per device, which is all sim/ models. cuCtxCreate returns it too. */
struct CUctx_st {
  uint32_t magic; /* SIM_CTX_MAGIC */
  int device;
};
#define SIM_CTX_MAGIC 0x43545854u

/* What the simulated GPU reports (an H100-class part). */
#define SIM_GPU_NAME "ncclsim simulated GPU (H100-class)"
#define SIM_GPU_MEM_BYTES (80ull << 30)
#define SIM_GPU_SMS 132
#define SIM_GPU_CC_MAJOR 9
#define SIM_GPU_CC_MINOR 0
/* Versions reported by cudaDriverGetVersion / cuDriverGetVersion and cudaRuntimeGetVersion. */
#define SIM_CUDA_VERSION 13000

/* ---- devices (sim_device.c) -------------------------------------------------------------------- */
/* Makes `dev` the calling thread's device. Returns cudaErrorInvalidDevice when out of range. */
cudaError_t sim_device_set(int dev);
/* The value of a device attribute (the runtime's and the driver's numbering agree). Unknown but
 * plausible attributes read 0. */
int sim_device_attr(int attr, int dev);
/* The primary context of a device, or NULL when `dev` is out of range. */
struct CUctx_st *sim_ctx_primary(int dev);
/* Returns ctx when it is a live context, else NULL. */
struct CUctx_st *sim_ctx_resolve(struct CUctx_st *ctx);

/* ---- streams ---------------------------------------------------------------------------------- */
/* Creates a stream on `device`. Returns cudaSuccess, cudaErrorInvalidValue or
 * cudaErrorMemoryAllocation. */
cudaError_t sim_stream_create(int device, unsigned flags, int priority, struct CUstream_st **s_p);
/* Destroys a stream created by sim_stream_create. Default streams cannot be destroyed. */
cudaError_t sim_stream_destroy(struct CUstream_st *s);
/* Issues `us` microseconds of work on a stream: its clock moves to sim_stream_time(s) + us. */
void sim_stream_advance(struct CUstream_st *s, double us);
/* Makes later work on `s` wait for what `e` captured. */
cudaError_t sim_stream_wait_event(struct CUstream_st *s, cudaEvent_t e);

/* ---- events ----------------------------------------------------------------------------------- */
cudaError_t sim_event_create(unsigned flags, struct CUevent_st **e_p);
cudaError_t sim_event_destroy(cudaEvent_t e);
cudaError_t sim_event_record(cudaEvent_t e, struct CUstream_st *s);
/* Milliseconds between two recorded events. cudaErrorInvalidResourceHandle for a dead event, one
 * created with cudaEventDisableTiming, or one never recorded. */
cudaError_t sim_event_elapsed(cudaEvent_t start, cudaEvent_t end, float *ms_p);
/* Returns e when it is a live event, else NULL. */
struct CUevent_st *sim_event_resolve(cudaEvent_t e);

/* ---- copies ----------------------------------------------------------------------------------- */
/* Modelled duration of a copy of `bytes` (kind: cudaMemcpyKind; memset uses
 * cudaMemcpyDeviceToDevice). */
double sim_copy_time_us(size_t bytes, int kind);

/* ---- errors ----------------------------------------------------------------------------------- */
/* The driver's code for a runtime error code. */
CUresult sim_cuda_to_cu(cudaError_t e);
/* Records `e` as the calling thread's last runtime error (what cudaGetLastError returns). */
void sim_cuda_set_last_error(cudaError_t e);
/* The runtime's name and description of an error code (NULL for a code it does not know). */
const char *sim_cuda_error_name(cudaError_t e);
const char *sim_cuda_error_string(cudaError_t e);

#endif
