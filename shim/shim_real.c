/* Resolution of the real NCCL and CUDA-driver functions (see shim_real.h). NCCL is resolved
 * lazily: at the constructor and, while it is still missing, again at the next NCCL call after the
 * loader reports a new object, because PyTorch brings libnccl in with `import torch`, long after the
 * constructor ran. The next definition after the shim (dlsym(RTLD_NEXT)) is preferred; a libnccl
 * that only a module opened RTLD_LOCAL brought in (Python loads extension modules that way) is not
 * in the global scope, so it is found by walking the loaded objects for one that defines
 * ncclGetVersion, and resolved through its own handle (dlopen RTLD_NOLOAD). */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "ah_elf.h"
#include "shim_internal.h"
#include "shim_real.h"

ah_real_nccl_t ah_real;

/* cuStreamIsCapturing until the driver is resolved, and for good when it lacks the function (a
 * driver older than CUDA 10 has no graphs to capture) or cannot be opened: resolves it, then asks
 * the real one, else answers "not capturing". So the entry is never NULL, and the capture check
 * that opens every bracket (shim_timing.h) is one indirect call with no test before it. */
static CUresult capturing_unresolved(CUstream stream, CUstreamCaptureStatus *status_p) {
  ah_shim_cuda_init();
  CUresult (*f)(CUstream, CUstreamCaptureStatus *) =
      __atomic_load_n(&ah_cuda.StreamIsCapturing, __ATOMIC_ACQUIRE);
  if (f != capturing_unresolved) return f(stream, status_p);
  *status_p = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

ah_real_cuda_t ah_cuda = {.StreamIsCapturing = capturing_unresolved};

static _Atomic int real_found; /* the table holds NCCL: set once, never cleared */

/* Stubs for functions the loaded libnccl lacks, and for every function while no NCCL is loaded: a
 * defined error, logged once per function. */
static void stub_log(const char *name) {
  if (atomic_load_explicit(&real_found, memory_order_acquire))
    ah_log(AH_LOG_ERROR, "the loaded NCCL has no %s; the call fails with ncclInvalidUsage", name);
  else
    ah_log(AH_LOG_ERROR, "%s called but no NCCL is loaded; the call fails with ncclInvalidUsage",
           name);
}
#define STUB(name, ...)                                                                            \
  static ncclResult_t stub_##name(__VA_ARGS__) {                                                   \
    static int logged;                                                                             \
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED)) stub_log("nccl" #name);                \
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
STUB(CommInitRankScalable, ncclComm_t *c, int n, int r, int nid, ncclUniqueId *ids,
     ncclConfig_t *cfg)
STUB(CommSplit, ncclComm_t c, int color, int key, ncclComm_t *nc, ncclConfig_t *cfg)
STUB(CommDestroy, ncclComm_t c)
STUB(CommAbort, ncclComm_t c)
STUB(CommGetAsyncError, ncclComm_t c, ncclResult_t *e)
STUB(CommFinalize, ncclComm_t c)
STUB(CommCount, const ncclComm_t c, int *n)
STUB(CommUserRank, const ncclComm_t c, int *r)
STUB(CommCuDevice, const ncclComm_t c, int *d)
STUB(AllReduce, const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t o, ncclComm_t c,
     cudaStream_t st)
STUB(Broadcast, const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c,
     cudaStream_t st)
STUB(Bcast, void *b, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st)
STUB(Reduce, const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t o, int root,
     ncclComm_t c, cudaStream_t st)
STUB(AllGather, const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st)
STUB(ReduceScatter, const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t o, ncclComm_t c,
     cudaStream_t st)
STUB(GroupStart, void)
STUB(GroupEnd, void)
STUB(GroupSimulateEnd, ncclSimInfo_t *info)
/* ---- newer entry points (shim_nccl.c: Shrink; shim_nccl_more.c: AlltoAll, Gather, Scatter) ---- */
STUB(CommShrink, ncclComm_t c, int *excl, int nexcl, ncclComm_t *nc, ncclConfig_t *cfg, int flags)
STUB(CommRevoke, ncclComm_t c, int flags)
STUB(AlltoAll, const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st)
STUB(Gather, const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c,
     cudaStream_t st)
STUB(Scatter, const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c,
     cudaStream_t st)
#undef STUB

/* A lookup in `src`: RTLD_NEXT or a handle of the loaded libnccl; none (NULL) while NCCL is missing. */
static void *real_sym(void *src, const char *name) { return src ? dlsym(src, name) : NULL; }

/* Looks `ncclX` up in `src` into the table `t`; falls back to the library's strong `pncclX` name,
 * then to the stub. Note that dlsym(RTLD_NEXT, "ncclX") can find the weak ncclX alias inside
 * libnccl, which is the same code as pncclX, so either way the call reaches NCCL and not the shim
 * again. */
#define RESOLVE(field)                                                                             \
  do {                                                                                             \
    void *p = real_sym(src, "nccl" #field);                                                        \
    if (!p) p = real_sym(src, "pnccl" #field);                                                     \
    t->field = p ? (__typeof__(t->field))p : stub_##field;                                         \
  } while (0)

static void real_resolve(void *src, ah_real_nccl_t *t) {
  RESOLVE(GetVersion);
  RESOLVE(GetUniqueId);
  RESOLVE(CommInitRank);
  RESOLVE(CommInitRankConfig);
  RESOLVE(CommInitAll);
  RESOLVE(CommInitRankScalable);
  RESOLVE(CommSplit);
  RESOLVE(CommDestroy);
  RESOLVE(CommAbort);
  RESOLVE(CommGetAsyncError);
  RESOLVE(CommFinalize);
  RESOLVE(CommCount);
  RESOLVE(CommUserRank);
  RESOLVE(CommCuDevice);
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
  RESOLVE(CommRevoke);
  RESOLVE(AlltoAll);
  RESOLVE(Gather);
  RESOLVE(Scatter);
}
#undef RESOLVE

/* ---- finding the loaded libnccl ---------------------------------------------------------------- */

typedef struct {
  int counted;             /* the loader's object count has been read */
  unsigned long long adds; /* dl_phdr_info.dlpi_adds: objects ever loaded */
  unsigned long long last; /* the count at the last fruitless search */
  int unchanged;           /* nothing was loaded since: the walk stopped at once */
  char path[4096];         /* the first object other than the shim that defines ncclGetVersion */
} real_scan_t;

/* Finds `name` in the first loaded object other than the shim that defines it (an object opened
 * RTLD_LOCAL included), for the CUDA runtime functions the shim wraps. NULL when none does. */
typedef struct {
  const char *name;
  char path[4096];
} sym_scan_t;

static int sym_scan_object(struct dl_phdr_info *info, size_t size, void *arg) {
  extern ElfW(Dyn) _DYNAMIC[] __attribute__((visibility("hidden")));
  (void)size;
  sym_scan_t *s = arg;
  if (!info->dlpi_name || !info->dlpi_name[0]) return 0;
  const ElfW(Dyn) *dyn = NULL;
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  if (!dyn || dyn == _DYNAMIC || !ah_elf_lookup(info->dlpi_addr, dyn, s->name)) return 0;
  size_t n = strlen(info->dlpi_name);
  if (n >= sizeof s->path) return 0;
  memcpy(s->path, info->dlpi_name, n + 1);
  return 1;
}

void *ah_shim_real_sym(const char *name) {
  void *p = dlsym(RTLD_NEXT, name);
  if (p) return p;
  sym_scan_t s = {.name = name};
  dl_iterate_phdr(sym_scan_object, &s);
  void *h = s.path[0] ? dlopen(s.path, RTLD_NOLOAD | RTLD_LAZY) : NULL;
  p = h ? dlsym(h, name) : NULL; /* the handle stays open: the object stays loaded while used */
  if (!p) (void)dlerror();
  return p;
}

/* dl_iterate_phdr callback: reads only the objects' own tables (ah_elf_lookup), since the loader
 * holds its list lock here and a dlopen or dlsym inside could deadlock. */
static int real_scan_object(struct dl_phdr_info *info, size_t size, void *arg) {
  extern ElfW(Dyn) _DYNAMIC[] __attribute__((visibility("hidden")));
  real_scan_t *s = arg;
  if (!s->counted) {
    s->counted = 1;
    if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds) {
      s->adds = info->dlpi_adds;
      if (s->adds != 0 && s->adds == s->last) return s->unchanged = 1;
    }
  }
  if (!info->dlpi_name || !info->dlpi_name[0])
    return 0; /* the program (RTLD_NEXT covers it) or the vDSO */
  const ElfW(Dyn) *dyn = NULL;
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  if (!dyn || dyn == _DYNAMIC)
    return 0; /* the shim itself defines no ncclGetVersion, but be sure */
  if (!ah_elf_lookup(info->dlpi_addr, dyn, "ncclGetVersion") &&
      !ah_elf_lookup(info->dlpi_addr, dyn, "pncclGetVersion"))
    return 0;
  size_t n = strlen(info->dlpi_name);
  if (n >= sizeof s->path) return 0;
  memcpy(s->path, info->dlpi_name, n + 1);
  return 1;
}

static _Atomic unsigned long long real_seen_adds; /* objects loaded at the last fruitless search */

/* Returns where to resolve NCCL from — RTLD_NEXT, or a handle of the loaded libnccl (kept open, so
 * it stays loaded while the shim forwards to it) — or NULL when no loaded object is NCCL. Costs one
 * walk of the object list when something was loaded since the last fruitless search, else one
 * step of it. */
static void *real_find(const char **how_p) {
  real_scan_t s = {.last = atomic_load_explicit(&real_seen_adds, memory_order_relaxed)};
  dl_iterate_phdr(real_scan_object, &s);
  if (s.unchanged) return NULL;
  void *src = NULL;
  if (dlsym(RTLD_NEXT, "ncclGetVersion") || dlsym(RTLD_NEXT, "pncclGetVersion")) {
    src = RTLD_NEXT;
    *how_p = "the next definition after the shim";
  } else if (s.path[0]) {
    src = dlopen(s.path, RTLD_NOLOAD | RTLD_LAZY);
    if (!src)
      AH_LOG_CAPPED(1, AH_LOG_WARN,
                    "NCCL is loaded from %s but cannot be opened (%s); NCCL calls fail", s.path,
                    dlerror());
    *how_p = "outside the global scope (a library opened RTLD_LOCAL)";
  }
  if (!src) {
    (void)dlerror(); /* the fruitless lookups leave no error for the application to find */
    atomic_store_explicit(&real_seen_adds, s.adds, memory_order_relaxed);
  }
  return src;
}

/* ---- publishing the table ------------------------------------------------------------------------ */

static pthread_mutex_t real_lock = PTHREAD_MUTEX_INITIALIZER;
static int real_filled; /* under real_lock: the table holds the stubs or NCCL */

/* Copies `t` into ah_real word by word with atomic stores: a thread that called while NCCL was
 * still missing may be reading a field as it changes, and sees the stub or NCCL's function. */
typedef uintptr_t __attribute__((may_alias)) real_word_t;
static void real_publish(const ah_real_nccl_t *t) {
  _Static_assert(sizeof *t % sizeof(real_word_t) == 0,
                 "ah_real_nccl_t holds only function pointers");
  const real_word_t *from = (const real_word_t *)t;
  real_word_t *to = (real_word_t *)&ah_real;
  for (size_t i = 0; i < sizeof *t / sizeof *to; i++)
    __atomic_store_n(&to[i], from[i], __ATOMIC_RELAXED);
}

int ah_shim_real_init(void) {
  if (__builtin_expect(atomic_load_explicit(&real_found, memory_order_acquire), 1)) return 1;
  int saved = errno;
  const char *how = "";
  void *src = real_find(&how);
  ah_real_nccl_t t;
  real_resolve(src, &t); /* the loader calls happen here, outside real_lock (see below) */
  /* Note that real_lock is never held across a loader call: a thread inside dlopen holds the
   * loader's lock while it runs constructors, and one of them may call NCCL and land here. */
  pthread_mutex_lock(&real_lock);
  int published = 0;
  if (!atomic_load_explicit(&real_found, memory_order_relaxed) && (src || !real_filled)) {
    real_publish(&t);
    real_filled = 1;
    if (src) {
      atomic_store_explicit(&real_found, 1, memory_order_release);
      published = 1;
    }
  }
  pthread_mutex_unlock(&real_lock);
  if (published) {
    Dl_info info;
    const char *path = dladdr((void *)t.GetVersion, &info) && info.dli_fname ? info.dli_fname : "?";
    ah_log(AH_LOG_DEBUG, "NCCL resolved from %s, %s", path, how);
  }
  errno = saved;
  return atomic_load_explicit(&real_found, memory_order_acquire);
}

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
  ah_cuda.EventElapsedTime =
      (__typeof__(ah_cuda.EventElapsedTime))dlsym(h, "cuEventElapsedTime_v2");
  if (!ah_cuda.EventElapsedTime)
    ah_cuda.EventElapsedTime = (__typeof__(ah_cuda.EventElapsedTime))dlsym(h, "cuEventElapsedTime");
  ah_cuda.EventDestroy = (__typeof__(ah_cuda.EventDestroy))dlsym(h, "cuEventDestroy_v2");
  if (!ah_cuda.EventDestroy)
    ah_cuda.EventDestroy = (__typeof__(ah_cuda.EventDestroy))dlsym(h, "cuEventDestroy");
  ah_cuda.CtxGetCurrent = (__typeof__(ah_cuda.CtxGetCurrent))dlsym(h, "cuCtxGetCurrent");
  __typeof__(ah_cuda.StreamIsCapturing) capturing =
      (__typeof__(ah_cuda.StreamIsCapturing))dlsym(h, "cuStreamIsCapturing");
  if (capturing) /* else the stub stays: never capturing */
    __atomic_store_n(&ah_cuda.StreamIsCapturing, capturing, __ATOMIC_RELEASE);
  ah_cuda.StreamGetCtx = (__typeof__(ah_cuda.StreamGetCtx))dlsym(h, "cuStreamGetCtx");
  ah_cuda.CtxSetCurrent = (__typeof__(ah_cuda.CtxSetCurrent))dlsym(h, "cuCtxSetCurrent");
  ah_cuda.ThreadExchangeStreamCaptureMode =
      (__typeof__(ah_cuda.ThreadExchangeStreamCaptureMode))dlsym(
          h, "cuThreadExchangeStreamCaptureMode");
  ah_cuda.CtxGetDevice = (__typeof__(ah_cuda.CtxGetDevice))dlsym(h, "cuCtxGetDevice");
  ah_cuda.DeviceGetName = (__typeof__(ah_cuda.DeviceGetName))dlsym(h, "cuDeviceGetName");
  ah_cuda.DriverGetVersion = (__typeof__(ah_cuda.DriverGetVersion))dlsym(h, "cuDriverGetVersion");
  if (ah_cuda.EventCreate && ah_cuda.EventRecord && ah_cuda.EventQuery &&
      ah_cuda.EventElapsedTime && ah_cuda.EventDestroy && ah_cuda.CtxGetCurrent)
    ah_cuda.loaded = 1;
  else ah_log(AH_LOG_WARN, "libcuda.so.1 lacks the event functions: collectives are not timed");
}

int ah_shim_cuda_device(void) {
  CUdevice dev;
  CUcontext ctx = NULL;
  if (!ah_shim_cuda_init() || !ah_cuda.CtxGetDevice ||
      ah_cuda.CtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx ||
      ah_cuda.CtxGetDevice(&dev) != CUDA_SUCCESS)
    return -1;
  return (int)dev;
}

int ah_shim_cuda_init(void) {
  static _Atomic int done;
  if (!atomic_load_explicit(&done, memory_order_acquire)) {
    pthread_once(&cuda_once, cuda_resolve);
    atomic_store_explicit(&done, 1, memory_order_release);
  }
  return ah_cuda.loaded;
}
