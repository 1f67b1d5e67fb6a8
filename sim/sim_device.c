/* The device model behind both CUDA stand-ins: devices, the calling thread's current device,
 * streams with their virtual clocks, events, and one primary context per device.
 *
 * The key choice (see sim_internal.h) is that a stream is a clock: work is done at issue and moves
 * the stream's virtual time by its modelled duration. The legacy default stream keeps CUDA's
 * implicit ordering with the blocking streams of its device: work on it starts after everything
 * issued on them, and their work starts after everything issued on it. Streams and events are never
 * returned to malloc once created; destroyed ones are marked dead and kept on a free list, so a stale
 * handle is reported as invalid instead of being read after free. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sim_cuda.h"

typedef struct {
  pthread_mutex_t lock;   /* guards the clocks of this device's streams */
  struct CUstream_st def; /* the default stream (legacy and per-thread) */
  double blocking_max_vt; /* latest end of work issued on a blocking non-default stream */
  int stuck;              /* some stream of the device never finishes its work (NCCLSIM_FAULT) */
  struct CUctx_st ctx;    /* the primary context */
} sim_dev_t;

static sim_dev_t devs[SIM_MAX_DEVICES];
static int ndevs;
static pthread_once_t dev_once = PTHREAD_ONCE_INIT;
static _Thread_local int cur_dev; /* CUDA's default device is 0 */

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *free_streams[1024];
static int nfree_streams;
static struct CUevent_st *free_events[4096];
static int nfree_events;
/* Every stream and event ever allocated, so that none is lost (a program need not destroy its
 * streams and events before it exits, and leak checkers must not count them). */
static void **all_objs;
static size_t nall_objs, cap_all_objs;

/* Allocates a stream or event object and records it. Returns NULL when out of memory. */
static void *obj_alloc(size_t size) {
  void *p = malloc(size);
  if (!p) return NULL;
  pthread_mutex_lock(&pool_lock);
  if (nall_objs == cap_all_objs) {
    size_t cap = cap_all_objs ? 2 * cap_all_objs : 64;
    void **grown = realloc(all_objs, cap * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&pool_lock);
      free(p);
      return NULL;
    }
    all_objs = grown;
    cap_all_objs = cap;
  }
  all_objs[nall_objs++] = p;
  pthread_mutex_unlock(&pool_lock);
  return p;
}

/* Number of devices: the entries of CUDA_VISIBLE_DEVICES when it is set (as CUDA counts them),
 * else NCCLSIM_DEVICES, else 8 or LOCAL_WORLD_SIZE if larger. */
static int count_from_env(void) {
  const char *v = getenv("CUDA_VISIBLE_DEVICES");
  if (v) {
    int n = 0;
    for (const char *p = v; *p;) {
      const char *comma = strchr(p, ',');
      size_t len = comma ? (size_t)(comma - p) : strlen(p);
      if (len > 0 && p[0] != '-') n++;
      else break; /* CUDA stops at the first invalid entry */
      if (!comma) break;
      p = comma + 1;
    }
    return n > SIM_MAX_DEVICES ? SIM_MAX_DEVICES : n;
  }
  int n = 8;
  const char *lws = getenv("LOCAL_WORLD_SIZE");
  if (lws && *lws) {
    long l = strtol(lws, NULL, 10);
    if (l > n && l <= SIM_MAX_DEVICES) n = (int)l;
  }
  v = getenv("NCCLSIM_DEVICES");
  if (v && *v) {
    char *end;
    long d = strtol(v, &end, 10);
    if (*end || d < 1 || d > SIM_MAX_DEVICES)
      sim_log_warn("invalid value for NCCLSIM_DEVICES: '%s' (expected 1..%d); using %d devices", v,
                   SIM_MAX_DEVICES, n);
    else n = (int)d;
  }
  return n;
}

static void dev_init(void) {
  ndevs = count_from_env();
  for (int d = 0; d < SIM_MAX_DEVICES; d++) {
    pthread_mutex_init(&devs[d].lock, NULL);
    devs[d].def.magic = SIM_STREAM_MAGIC;
    devs[d].def.device = d;
    devs[d].ctx.magic = SIM_CTX_MAGIC;
    devs[d].ctx.device = d;
  }
}

int sim_device_count(void) {
  pthread_once(&dev_once, dev_init);
  return ndevs;
}

int sim_device_current(void) {
  pthread_once(&dev_once, dev_init);
  return cur_dev;
}

cudaError_t sim_device_set(int dev) {
  if (dev < 0 || dev >= sim_device_count()) return cudaErrorInvalidDevice;
  cur_dev = dev;
  return cudaSuccess;
}

int sim_device_attr(int attr, int dev) {
  (void)dev;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: return 1024;
    case cudaDevAttrMaxBlockDimX:
    case cudaDevAttrMaxBlockDimY: return 1024;
    case cudaDevAttrMaxBlockDimZ: return 64;
    case cudaDevAttrMaxGridDimX: return 2147483647;
    case cudaDevAttrMaxGridDimY:
    case cudaDevAttrMaxGridDimZ: return 65535;
    case cudaDevAttrMaxSharedMemoryPerBlock: return 48 << 10;
    case cudaDevAttrTotalConstantMemory: return 64 << 10;
    case cudaDevAttrWarpSize: return 32;
    case cudaDevAttrMaxRegistersPerBlock: return 65536;
    case cudaDevAttrClockRate: return 1980000;
    case cudaDevAttrMultiProcessorCount: return SIM_GPU_SMS;
    case cudaDevAttrIntegrated: return 0;
    case cudaDevAttrCanMapHostMemory: return 1;
    case cudaDevAttrConcurrentKernels: return 1;
    case cudaDevAttrPciBusId: return 0x10 + dev;
    case cudaDevAttrPciDeviceId: return 0;
    case cudaDevAttrPciDomainId: return 0;
    case cudaDevAttrAsyncEngineCount: return 3;
    case cudaDevAttrUnifiedAddressing: return 1;
    case cudaDevAttrMemoryClockRate: return 2619000;
    case cudaDevAttrGlobalMemoryBusWidth: return 5120;
    case cudaDevAttrL2CacheSize: return 50 << 20;
    case cudaDevAttrMaxThreadsPerMultiProcessor: return 2048;
    case cudaDevAttrComputeCapabilityMajor: return SIM_GPU_CC_MAJOR;
    case cudaDevAttrComputeCapabilityMinor: return SIM_GPU_CC_MINOR;
    case cudaDevAttrManagedMemory: return 1;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: return 228 << 10;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: return 227 << 10;
    case cudaDevAttrCooperativeLaunch: return 1;
    default: return 0;
  }
}

struct CUctx_st *sim_ctx_primary(int dev) {
  if (dev < 0 || dev >= sim_device_count()) return NULL;
  return &devs[dev].ctx;
}

struct CUctx_st *sim_ctx_resolve(struct CUctx_st *ctx) {
  pthread_once(&dev_once, dev_init);
  for (int d = 0; d < ndevs; d++)
    if (ctx == &devs[d].ctx) return ctx;
  return NULL;
}

/* ---- streams ------------------------------------------------------------------------------------ */

static int is_default(const struct CUstream_st *s) {
  return s >= &devs[0].def && s <= &devs[SIM_MAX_DEVICES - 1].def && s == &devs[s->device].def;
}

int sim_stream_is_default(const struct CUstream_st *s) { return is_default(s); }

struct CUstream_st *sim_stream_resolve(cudaStream_t h) {
  pthread_once(&dev_once, dev_init);
  if (h == NULL || h == cudaStreamLegacy || h == cudaStreamPerThread) return &devs[cur_dev].def;
  struct CUstream_st *s = h;
  if (s->magic != SIM_STREAM_MAGIC) return NULL;
  return s;
}

double sim_stream_time(struct CUstream_st *s) {
  sim_dev_t *d = &devs[s->device];
  pthread_mutex_lock(&d->lock);
  double t = s->vt_us;
  if (is_default(s)) {
    if (d->blocking_max_vt > t) t = d->blocking_max_vt;
  } else if (!(s->flags & cudaStreamNonBlocking)) {
    if (d->def.vt_us > t) t = d->def.vt_us;
  }
  pthread_mutex_unlock(&d->lock);
  if (__builtin_expect(sim_host_clock(), 0)) { /* an idle stream is at the host's time */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double host_us = (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
    if (host_us > t) t = host_us;
  }
  return t;
}

/* Note that the clock never moves back: a grouped call whose tasks end at different times leaves
 * the stream at the latest end. */
void sim_stream_set_time(struct CUstream_st *s, double vt_us) {
  sim_dev_t *d = &devs[s->device];
  pthread_mutex_lock(&d->lock);
  if (vt_us > s->vt_us) s->vt_us = vt_us;
  if (isinf(s->vt_us)) d->stuck = 1;
  if (!is_default(s) && !(s->flags & cudaStreamNonBlocking) && s->vt_us > d->blocking_max_vt)
    d->blocking_max_vt = s->vt_us;
  pthread_mutex_unlock(&d->lock);
}

void sim_stream_advance(struct CUstream_st *s, double us) {
  sim_stream_set_time(s, sim_stream_time(s) + us);
}

cudaError_t sim_stream_create(int device, unsigned flags, int priority, struct CUstream_st **s_p) {
  if (!s_p || (flags & ~(unsigned)cudaStreamNonBlocking)) return cudaErrorInvalidValue;
  if (device < 0 || device >= sim_device_count()) return cudaErrorInvalidDevice;
  struct CUstream_st *s = NULL;
  pthread_mutex_lock(&pool_lock);
  if (nfree_streams > 0) s = free_streams[--nfree_streams];
  pthread_mutex_unlock(&pool_lock);
  if (!s) s = obj_alloc(sizeof *s);
  if (!s) return cudaErrorMemoryAllocation;
  memset(s, 0, sizeof *s);
  s->device = device;
  s->flags = flags;
  s->priority = priority > 0 ? 0 : priority < -5 ? -5 : priority; /* H100: priorities 0..-5 */
  /* A new stream starts at its device's present, not at zero. */
  sim_dev_t *d = &devs[device];
  pthread_mutex_lock(&d->lock);
  s->vt_us = d->def.vt_us > d->blocking_max_vt ? d->def.vt_us : d->blocking_max_vt;
  pthread_mutex_unlock(&d->lock);
  s->magic = SIM_STREAM_MAGIC;
  *s_p = s;
  return cudaSuccess;
}

cudaError_t sim_stream_destroy(struct CUstream_st *s) {
  if (!s || s == (void *)cudaStreamLegacy || s == (void *)cudaStreamPerThread ||
      s->magic != SIM_STREAM_MAGIC || is_default(s))
    return cudaErrorInvalidResourceHandle;
  s->magic = 0;
  pthread_mutex_lock(&pool_lock);
  if (nfree_streams < (int)(sizeof free_streams / sizeof free_streams[0]))
    free_streams[nfree_streams++] = s;
  /* else: kept only in all_objs, so a stale handle stays readable */
  pthread_mutex_unlock(&pool_lock);
  return cudaSuccess;
}

cudaError_t sim_stream_wait_event(struct CUstream_st *s, cudaEvent_t h) {
  struct CUevent_st *e = sim_event_resolve(h);
  if (!e) return cudaErrorInvalidResourceHandle;
  if (e->recorded) sim_stream_set_time(s, e->vt_us);
  return cudaSuccess;
}

/* A stream whose clock is infinite has work that never finishes (an injected hang, sim_fault.c):
 * what waits on it never returns and what is queued behind it never runs. */
int sim_stream_stuck(struct CUstream_st *s) { return isinf(sim_stream_time(s)); }

int sim_device_stuck(int device) {
  if (device < 0 || device >= sim_device_count()) return 0;
  pthread_mutex_lock(&devs[device].lock);
  int stuck = devs[device].stuck;
  pthread_mutex_unlock(&devs[device].lock);
  return stuck;
}

int sim_event_stuck(const struct CUevent_st *e) { return e->recorded && isinf(e->vt_us); }

int sim_event_behind(const struct CUevent_st *e) {
  return e->behind && atomic_load(&e->behind->done) < e->behind_launch;
}

int sim_event_pending(const struct CUevent_st *e) {
  return sim_event_stuck(e) || sim_event_behind(e);
}

int sim_stream_pending(struct CUstream_st *s) {
  return atomic_load(&s->running) || sim_stream_stuck(s);
}

static void nap(void) {
  struct timespec ts = {0, 1000000};
  nanosleep(&ts, NULL);
}

void sim_event_wait(const struct CUevent_st *e) {
  if (sim_event_stuck(e)) sim_block_forever();
  while (sim_event_behind(e)) nap();
}

void sim_stream_wait(struct CUstream_st *s) {
  if (sim_stream_stuck(s)) sim_block_forever();
  while (atomic_load(&s->running)) nap();
}

void sim_stream_launch_begin(struct CUstream_st *s) {
  uint64_t n = atomic_fetch_add(&s->launches, 1) + 1;
  atomic_store(&s->running, n);
}

void sim_stream_launch_end(struct CUstream_st *s) {
  atomic_store(&s->done, atomic_load(&s->running));
  atomic_store(&s->running, 0);
}

void sim_block_forever(void) {
  for (;;) pause();
}

/* ---- events -------------------------------------------------------------------------------------- */

struct CUevent_st *sim_event_resolve(cudaEvent_t h) {
  struct CUevent_st *e = h;
  if (!e || e->magic != SIM_EVENT_MAGIC) return NULL;
  return e;
}

cudaError_t sim_event_create(unsigned flags, struct CUevent_st **e_p) {
  unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (!e_p || (flags & ~known)) return cudaErrorInvalidValue;
  struct CUevent_st *e = NULL;
  pthread_mutex_lock(&pool_lock);
  if (nfree_events > 0) e = free_events[--nfree_events];
  pthread_mutex_unlock(&pool_lock);
  if (!e) e = obj_alloc(sizeof *e);
  if (!e) return cudaErrorMemoryAllocation;
  memset(e, 0, sizeof *e);
  e->flags = flags;
  e->device = sim_device_current();
  e->magic = SIM_EVENT_MAGIC;
  *e_p = e;
  return cudaSuccess;
}

cudaError_t sim_event_destroy(cudaEvent_t h) {
  struct CUevent_st *e = sim_event_resolve(h);
  if (!e) return cudaErrorInvalidResourceHandle;
  e->magic = 0;
  pthread_mutex_lock(&pool_lock);
  if (nfree_events < (int)(sizeof free_events / sizeof free_events[0]))
    free_events[nfree_events++] = e;
  pthread_mutex_unlock(&pool_lock);
  return cudaSuccess;
}

cudaError_t sim_event_record(cudaEvent_t h, struct CUstream_st *s) {
  struct CUevent_st *e = sim_event_resolve(h);
  if (!e || !s) return cudaErrorInvalidResourceHandle;
  e->vt_us = sim_stream_time(s);
  e->recorded = 1;
  uint64_t running = atomic_load(&s->running);
  e->behind = running ? s : NULL;
  e->behind_launch = running;
  return cudaSuccess;
}

cudaError_t sim_event_elapsed(cudaEvent_t start, cudaEvent_t end, float *ms_p) {
  struct CUevent_st *a = sim_event_resolve(start), *b = sim_event_resolve(end);
  if (!ms_p) return cudaErrorInvalidValue;
  if (!a || !b || (a->flags & cudaEventDisableTiming) || (b->flags & cudaEventDisableTiming) ||
      !a->recorded || !b->recorded)
    return cudaErrorInvalidResourceHandle;
  *ms_p = (float)((b->vt_us - a->vt_us) / 1000.0);
  return cudaSuccess;
}

/* ---- what stream capture adds (sim_device_hooks_t) ---------------------------------------------- */

/* Without a capture, no event was recorded in one and every call is allowed. */
static cudaError_t no_capture_check_event(struct CUevent_st *e, int unsafe) {
  (void)e;
  (void)unsafe;
  return cudaSuccess;
}

static sim_device_hooks_t hooks = {.check_event = no_capture_check_event};

void sim_device_set_hooks(const sim_device_hooks_t *h) { hooks = *h; }

/* What cudaEvent* and cuEvent* both do, capture rules first (sim_graph.h). */
cudaError_t sim_event_query(cudaEvent_t h) {
  struct CUevent_st *e = sim_event_resolve(h);
  cudaError_t r = e ? hooks.check_event(e, 1) : cudaErrorInvalidResourceHandle;
  return r == cudaSuccess && sim_event_pending(e) ? cudaErrorNotReady : r;
}

cudaError_t sim_event_synchronize(cudaEvent_t h) {
  struct CUevent_st *e = sim_event_resolve(h);
  cudaError_t r = e ? hooks.check_event(e, 1) : cudaErrorInvalidResourceHandle;
  if (r == cudaSuccess) sim_event_wait(e);
  return r;
}

cudaError_t sim_event_elapsed_time(cudaEvent_t start, cudaEvent_t end, float *ms_p) {
  struct CUevent_st *a = sim_event_resolve(start), *b = sim_event_resolve(end);
  cudaError_t r = a ? hooks.check_event(a, 0) : cudaSuccess;
  if (r == cudaSuccess && b) r = hooks.check_event(b, 0);
  if (r == cudaSuccess && a && b && (sim_event_pending(a) || sim_event_pending(b)))
    return cudaErrorNotReady;
  return r != cudaSuccess ? r : sim_event_elapsed(start, end, ms_p);
}

/* ---- copies -------------------------------------------------------------------------------------- */

double sim_copy_time_us(size_t bytes, int kind) {
  switch (kind) {
    case cudaMemcpyHostToHost: return 0.5 + bytes / 20e3; /* 20 GB/s */
    case cudaMemcpyHostToDevice:
    case cudaMemcpyDeviceToHost: return 2.0 + bytes / 25e3; /* PCIe Gen5-ish 25 GB/s */
    default: return 1.0 + bytes / 1500e3;                   /* on-device 1.5 TB/s */
  }
}
