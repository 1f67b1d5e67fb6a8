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
/* What stream capture adds to the device model, registered by the capture file (sim_cuda_capture.c)
 * from a constructor so that the device model never calls up into capture. The defaults are a
 * process without capture's: every check passes. */
typedef struct {
  /* The capture rules for querying or synchronising event e (sim_capture_check_event). */
  cudaError_t (*check_event)(struct CUevent_st *e, int unsafe);
} sim_device_hooks_t;
void sim_device_set_hooks(const sim_device_hooks_t *h);
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
/* cudaEventQuery, cudaEventSynchronize and cudaEventElapsedTime (the driver's cuEvent* map the
 * result): a capture's rules first, then the event; cudaErrorNotReady while it is not complete. */
cudaError_t sim_event_query(cudaEvent_t e);
cudaError_t sim_event_synchronize(cudaEvent_t e);
cudaError_t sim_event_elapsed_time(cudaEvent_t start, cudaEvent_t end, float *ms_p);
/* Returns e when it is a live event, else NULL. */
struct CUevent_st *sim_event_resolve(cudaEvent_t e);

/* ---- copies ----------------------------------------------------------------------------------- */
/* Modelled duration of a copy of `bytes` (kind: cudaMemcpyKind; memset uses
 * cudaMemcpyDeviceToDevice). */
double sim_copy_time_us(size_t bytes, int kind);

/* ---- memory (sim_cuda_memory.c) ---------------------------------------------------------------- */
/* SIM_MEM_VMM: a cuMemMap mapping (sim_cuda_vmm.c); its `serial` is the allocation handle. */
enum {
  SIM_MEM_DEVICE = 1,
  SIM_MEM_HOST,
  SIM_MEM_MANAGED,
  SIM_MEM_REGISTERED,
  SIM_MEM_IPC,
  SIM_MEM_VMM
};

/* One recorded allocation (or registration, or mapping of another process's allocation). */
typedef struct {
  uintptr_t base;
  size_t size, map_len; /* requested bytes; bytes mapped (device memory: whole pages) */
  int kind;             /* SIM_MEM_* */
  int device;           /* current device when it was made */
  int fd;               /* device memory: its memfd, kept open for IPC; -1 otherwise */
  uint64_t serial;      /* device memory: random id in the memfd's name (stale IPC handles) */
  int refs;             /* IPC mappings: opens of the same handle in this process */
} sim_alloc_t;

/* Allocates memory of a kind (device: a mapped memfd; host, managed: heap) and records it. A
 * zero-byte request succeeds with NULL, as in CUDA. */
cudaError_t sim_mem_alloc(void **p, size_t size, int kind);
/* Frees what sim_mem_alloc returned: device or managed memory (`host` 0), pinned host memory
 * (`host` 1). cudaErrorInvalidValue for any other pointer; NULL is a no-op. */
cudaError_t sim_mem_free(void *p, int host);
cudaError_t sim_mem_record(const sim_alloc_t *a);
/* Copies the record of the allocation containing p. Returns 1 when found. */
int sim_mem_find(const void *p, sim_alloc_t *a_p);
/* Removes and copies the record whose base is exactly `base` and kind `kind`. Returns 1 when found. */
int sim_mem_take(const void *base, int kind, sim_alloc_t *a_p);
/* When this process already maps the IPC allocation `serial`: counts one more open, sets *p_p
 * to the mapping and returns 1. */
int sim_mem_ipc_reopen(uint64_t serial, void **p_p);
/* Records `e` as the calling thread's last error when it is one, and returns it. */
cudaError_t sim_cuda_fail(cudaError_t e);

/* ---- kernels and __device__ variables (sim_cuda_func.c) ---------------------------------------- */
/* Records a kernel's host stub (__cudaRegisterFunction) and a variable's host shadow
 * (__cudaRegisterVar). */
void sim_func_register(const void *host_fun, int thread_limit);
void sim_symbol_register(const void *host_var, size_t size);
/* Blocks of `threads` threads with `shmem` dynamic shared bytes that fit on one SM. */
int sim_occupancy_blocks(int threads, size_t shmem);

/* Writes `value` into n consecutive 32-bit words. */
void sim_fill32(void *dst, uint32_t value, size_t n);

/* ---- memory pools (sim_cuda_pool.c) ------------------------------------------------------------- */
/* Counts a cudaMallocAsync allocation in its device's default pool, and its cudaFreeAsync. */
void sim_pool_note_alloc(void *p, size_t size, int device);
void sim_pool_note_free(void *p);

/* ---- errors ----------------------------------------------------------------------------------- */
/* The driver's code for a runtime error code. */
CUresult sim_cuda_to_cu(cudaError_t e);
/* When this process already maps the IPC allocation `serial`: counts one more open, sets *p_p
 * to the mapping and returns 1. */
int sim_mem_ipc_reopen(uint64_t serial, void **p_p);
/* The calling thread's last runtime error (what cudaGetLastError returns; sim_cuda_error.c), and
 * a call that records `e` in it. */
extern _Thread_local cudaError_t sim_cuda_last_error __attribute__((visibility("hidden")));
void sim_cuda_set_last_error(cudaError_t e);
/* The runtime's name and description of an error code (NULL for a code it does not know). */
const char *sim_cuda_error_name(cudaError_t e);
const char *sim_cuda_error_string(cudaError_t e);

#endif
