/* Resolution of the real NCCL and CUDA-driver functions (see shim_real.h). NCCL functions come from
 * dlsym(RTLD_NEXT): the definition the application would have called without the shim. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>

#include "shim_internal.h"
#include "shim_real.h"

ah_real_nccl_t ah_real;
ah_real_cuda_t ah_cuda;

/* Stubs for functions the loaded libnccl lacks: a defined error, logged once per function. */
#define STUB(name, ...)                                                                            \
  static ncclResult_t stub_##name(__VA_ARGS__) {                                                   \
    static int logged;                                                                             \
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))                                        \
      ah_log(AH_LOG_ERROR, "the loaded NCCL has no nccl" #name "; the call fails with ncclInvalidUsage"); \
    return ncclInvalidUsage;                                                                       \
  }
/* Without any NCCL (the shim preloaded into a launcher or a helper) the version is simply 0. */
static ncclResult_t stub_GetVersion(int *v) {
  if (v) *v = 0;
  return ncclInvalidUsage;
}
STUB(GetUniqueId, ncclUniqueId *id)
STUB(CommInitRank, ncclComm_t *c, int n, ncclUniqueId id, int r)
STUB(CommInitRankConfig, ncclComm_t *c, int n, ncclUniqueId id, int r, ncclConfig_t *cfg)
STUB(CommInitAll, ncclComm_t *c, int n, const int *d)
STUB(CommInitRankScalable, ncclComm_t *c, int n, int r, int nid, ncclUniqueId *ids, ncclConfig_t *cfg)
STUB(CommSplit, ncclComm_t c, int color, int key, ncclComm_t *nc, ncclConfig_t *cfg)
STUB(CommDestroy, ncclComm_t c)
STUB(CommAbort, ncclComm_t c)
STUB(CommFinalize, ncclComm_t c)
STUB(CommCount, const ncclComm_t c, int *n)
STUB(CommUserRank, const ncclComm_t c, int *r)
STUB(AllReduce, const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t o, ncclComm_t c, cudaStream_t st)
STUB(Broadcast, const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st)
STUB(Bcast, void *b, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st)
STUB(Reduce, const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t o, int root, ncclComm_t c, cudaStream_t st)
STUB(AllGather, const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st)
STUB(ReduceScatter, const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t o, ncclComm_t c, cudaStream_t st)
STUB(GroupStart, void)
STUB(GroupEnd, void)
STUB(GroupSimulateEnd, ncclSimInfo_t *info)
/* ---- newer entry points (shim_nccl.c: Shrink; shim_nccl_more.c: AlltoAll, Gather, Scatter) ---- */
STUB(CommShrink, ncclComm_t c, int *excl, int nexcl, ncclComm_t *nc, ncclConfig_t *cfg, int flags)
STUB(AlltoAll, const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st)
STUB(Gather, const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st)
STUB(Scatter, const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st)
#undef STUB

/* Looks `ncclX` up after the shim; falls back to the library's strong `pncclX` name, then to the
 * stub. Note that dlsym(RTLD_NEXT, "ncclX") can find the weak ncclX alias inside libnccl, which
 * is the same code as pncclX, so either way the call reaches NCCL and not the shim again. */
#define RESOLVE(field)                                                                             \
  do {                                                                                             \
    void *p = dlsym(RTLD_NEXT, "nccl" #field);                                                     \
    if (!p) p = dlsym(RTLD_NEXT, "pnccl" #field);                                                  \
    ah_real.field = p ? (__typeof__(ah_real.field))p : stub_##field;                               \
  } while (0)

static pthread_once_t real_once = PTHREAD_ONCE_INIT;

static void real_resolve(void) {
  RESOLVE(GetVersion);
  RESOLVE(GetUniqueId);
  RESOLVE(CommInitRank);
  RESOLVE(CommInitRankConfig);
  RESOLVE(CommInitAll);
  RESOLVE(CommInitRankScalable);
  RESOLVE(CommSplit);
  RESOLVE(CommDestroy);
  RESOLVE(CommAbort);
  RESOLVE(CommFinalize);
  RESOLVE(CommCount);
  RESOLVE(CommUserRank);
  RESOLVE(AllReduce);
  RESOLVE(Broadcast);
  RESOLVE(Bcast);
  RESOLVE(Reduce);
  RESOLVE(AllGather);
  RESOLVE(ReduceScatter);
  RESOLVE(GroupStart);
  RESOLVE(GroupEnd);
  RESOLVE(GroupSimulateEnd);
  /* ---- newer entry points (see the stubs above) ---- */
  RESOLVE(CommShrink);
  RESOLVE(AlltoAll);
  RESOLVE(Gather);
  RESOLVE(Scatter);
}

void ah_shim_real_init(void) { pthread_once(&real_once, real_resolve); }

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;

static void cuda_resolve(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    ah_log(AH_LOG_WARN, "cannot open libcuda.so.1 (%s): collectives are not timed", dlerror());
    return;
  }
  /* The _v2 names are what cuda.h maps these to; older drivers export the plain names. */
  ah_cuda.EventCreate = (__typeof__(ah_cuda.EventCreate))dlsym(h, "cuEventCreate");
  ah_cuda.EventRecord = (__typeof__(ah_cuda.EventRecord))dlsym(h, "cuEventRecord");
  ah_cuda.EventQuery = (__typeof__(ah_cuda.EventQuery))dlsym(h, "cuEventQuery");
  ah_cuda.EventElapsedTime = (__typeof__(ah_cuda.EventElapsedTime))dlsym(h, "cuEventElapsedTime_v2");
  if (!ah_cuda.EventElapsedTime)
    ah_cuda.EventElapsedTime = (__typeof__(ah_cuda.EventElapsedTime))dlsym(h, "cuEventElapsedTime");
  ah_cuda.EventDestroy = (__typeof__(ah_cuda.EventDestroy))dlsym(h, "cuEventDestroy_v2");
  if (!ah_cuda.EventDestroy) ah_cuda.EventDestroy = (__typeof__(ah_cuda.EventDestroy))dlsym(h, "cuEventDestroy");
  ah_cuda.CtxGetCurrent = (__typeof__(ah_cuda.CtxGetCurrent))dlsym(h, "cuCtxGetCurrent");
  ah_cuda.StreamIsCapturing = (__typeof__(ah_cuda.StreamIsCapturing))dlsym(h, "cuStreamIsCapturing");
  ah_cuda.ThreadExchangeStreamCaptureMode =
      (__typeof__(ah_cuda.ThreadExchangeStreamCaptureMode))dlsym(h, "cuThreadExchangeStreamCaptureMode");
  if (ah_cuda.EventCreate && ah_cuda.EventRecord && ah_cuda.EventQuery && ah_cuda.EventElapsedTime &&
      ah_cuda.EventDestroy && ah_cuda.CtxGetCurrent)
    ah_cuda.loaded = 1;
  else
    ah_log(AH_LOG_WARN, "libcuda.so.1 lacks the event functions: collectives are not timed");
}

int ah_shim_cuda_init(void) {
  static _Atomic int done;
  if (!atomic_load_explicit(&done, memory_order_acquire)) {
    pthread_once(&cuda_once, cuda_resolve);
    atomic_store_explicit(&done, 1, memory_order_release);
  }
  return ah_cuda.loaded;
}
