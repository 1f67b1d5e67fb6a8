/* The real functions the shim forwards to: NCCL's API (the next definition after the shim, or the
 * libnccl a library opened RTLD_LOCAL brought in, found when the program first calls NCCL after it
 * was loaded) and the CUDA driver's event functions (libcuda.so.1 opened with dlopen, so timing
 * works whatever CUDA runtime the application uses).
 *
 * Note that the table is never half-filled: until NCCL is loaded every entry is a stub, and a
 * function the loaded libnccl lacks keeps its stub, which returns ncclInvalidUsage and logs once,
 * so no wrapper ever calls through NULL. */
#ifndef AH_SHIM_REAL_H
#define AH_SHIM_REAL_H

#include <cuda.h>
#include <nccl.h>

typedef struct {
  ncclResult_t (*GetVersion)(int *);
  ncclResult_t (*GetUniqueId)(ncclUniqueId *);
  ncclResult_t (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*CommInitRankConfig)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
  ncclResult_t (*CommInitAll)(ncclComm_t *, int, const int *);
  ncclResult_t (*CommInitRankScalable)(ncclComm_t *, int, int, int, ncclUniqueId *, ncclConfig_t *);
  ncclResult_t (*CommSplit)(ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*CommAbort)(ncclComm_t);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t *); /* ncclCommAbort's wait */
  ncclResult_t (*CommFinalize)(ncclComm_t);
  ncclResult_t (*CommCount)(const ncclComm_t, int *);
  ncclResult_t (*CommUserRank)(const ncclComm_t, int *);
  ncclResult_t (*CommCuDevice)(const ncclComm_t, int *);
  ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*Broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*Bcast)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                         cudaStream_t);
  ncclResult_t (*AllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                ncclComm_t, cudaStream_t);
  ncclResult_t (*GroupStart)(void);
  ncclResult_t (*GroupEnd)(void);
  ncclResult_t (*GroupSimulateEnd)(ncclSimInfo_t *); /* 2.22+ */
  /* ---- newer entry points wrapped by shim_nccl.c (Shrink) and shim_nccl_more.c ---- */
  ncclResult_t (*CommShrink)(ncclComm_t, int *, int, ncclComm_t *, ncclConfig_t *, int); /* 2.27+ */
  ncclResult_t (*CommRevoke)(ncclComm_t, int); /* 2.28.7+: AUTOHA_HEALTH_ACTION=abort */
  ncclResult_t (*AlltoAll)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                           cudaStream_t); /* 2.28+ */
  ncclResult_t (*Gather)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                         cudaStream_t); /* 2.28+ */
  ncclResult_t (*Scatter)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                          cudaStream_t); /* 2.28+ */
} ah_real_nccl_t;

typedef struct {
  int loaded; /* 1 when every function below was resolved from libcuda.so.1 */
  CUresult (*EventCreate)(CUevent *, unsigned int);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventQuery)(CUevent);
  CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*CtxGetCurrent)(CUcontext *);
  /* Graph capture awareness (shim_timing.c): never NULL, a stub until the driver is resolved and
   * when it lacks the function, which answers "not capturing" (shim_real.c). */
  CUresult (*StreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
  /* Optional from here on (NULL when the driver lacks them). */
  CUresult (*StreamGetCtx)(CUstream, CUcontext *); /* optional: the hang probes (shim_health.c) */
  CUresult (*CtxSetCurrent)(CUcontext);            /* optional: the hang probes */
  /* Optional: the harvest's capture-mode exchange (shim_timing.c). */
  CUresult (*ThreadExchangeStreamCaptureMode)(CUstreamCaptureMode *);
  /* Optional: a communicator's device (ah_shim_cuda_device), the GPU model for the report's
   * topology (shim_topo.c). */
  CUresult (*CtxGetDevice)(CUdevice *);
  CUresult (*DeviceGetName)(char *, int, CUdevice);
  /* Optional: the report's record of the run (shim_topo.c). */
  CUresult (*DriverGetVersion)(int *);
} ah_real_cuda_t;

/* The next definition of `name` after the shim, or the one in the first loaded object that defines
 * it (opened RTLD_LOCAL, as Python opens extension modules); NULL when none. */
void *ah_shim_real_sym(const char *name);

/* Declared hidden (as AH_HIDDEN in shim_internal.h does): a wrapper then calls through an entry in
 * one instruction, not a load of the table's address and a call. */
extern __attribute__((visibility("hidden"))) ah_real_nccl_t ah_real;
extern __attribute__((visibility("hidden"))) ah_real_cuda_t ah_cuda;

/* Fills ah_real: returns 1 once it holds the loaded NCCL (then for good: one load per call), 0 while
 * no loaded object is NCCL (the table holds the stubs, and the next call after the loader reports a
 * new object looks again). Safe from any thread, from every wrapper (another library's constructor
 * may call NCCL before the shim's constructor has run) and from inside a constructor that dlopen
 * runs; leaves errno unchanged. */
int ah_shim_real_init(void);
/* Opens libcuda.so.1 on first use; returns 1 when event timing is available. */
int ah_shim_cuda_init(void);
/* The device of the calling thread's current context (the one cudaSetDevice made current), or -1
 * when there is none or no driver to ask. */
int ah_shim_cuda_device(void);

#endif
