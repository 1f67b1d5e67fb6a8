/* Stream capture and CUDA graphs, for both APIs: cudaStreamBeginCapture/EndCapture and their
 * cuStream* twins, the capture modes (global, thread-local, relaxed) with the rules CUDA documents
 * for calls made while a capture is in progress, and graphs that replay what was captured.
 *
 * The key choice: a capture records work in issue order (copies, sets, simulated compute, kernel
 * launches, event records and waits, NCCL groups) instead of doing it, and a graph launch replays
 * the records on the launch stream, in that order: data moves again and the launch stream's clock
 * advances by each record's modelled duration. Branches forked onto other streams by events are
 * therefore serialised at replay (a conservative time). A call that breaks a rule fails with CUDA's
 * error and invalidates the captures concerned; cudaStreamEndCapture then returns
 * cudaErrorStreamCaptureInvalidated and no graph, as CUDA does. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sim_cuda.h"
#include "sim_graph.h"

/* ---- graphs ------------------------------------------------------------------------------------- */

enum { N_COPY, N_SET, N_COMPUTE, N_KERNEL, N_EVENT_RECORD, N_EVENT_WAIT, N_NCCL, N_GRAPH, N_HOST, N_SET32 };

typedef struct sim_nodes sim_nodes_t;

typedef struct {
  int kind;
  int stream;              /* index of the issuing stream in its capture */
  void *dst;
  const void *src;
  size_t bytes;
  int arg;                 /* copy kind, memset value, or 1 for an external event wait */
  double us;
  struct CUevent_st *event;
  struct sim_graph_nccl *nccl;
  const sim_graph_nccl_ops_t *nccl_ops; /* N_NCCL: how to replay and free it */
  sim_nodes_t *child;      /* a graph launched into the capturing stream */
  void (*host_fn)(void *); /* N_HOST: the function and its argument */
  void *host_data;
} sim_node_t;

/* The records of a graph, shared by the graph and every executable instantiated from it (neither
 * can change them: sim/ has no graph-editing API), freed with the last reference. */
struct sim_nodes {
  _Atomic int refs;
  size_t n, cap;
  sim_node_t *v;
  struct sim_userobj_ref *uobjs;   /* user objects the graph retains (under cap_lock) */
  struct CUgraphNode_st **handles; /* node handles handed out so far, by record (under cap_lock) */
  size_t nhandles;
};

/* A node handle (cudaGraphGetNodes): a record of a graph, by index. */
#define NODE_MAGIC 0x4e4f4445u
struct CUgraphNode_st {
  uint32_t magic;
  sim_nodes_t *g;
  size_t idx;
};

#define GRAPH_MAGIC 0x47524150u
#define EXEC_MAGIC 0x47455845u

struct CUgraph_st {
  uint32_t magic;
  sim_nodes_t *nodes;
};
struct CUgraphExec_st {
  uint32_t magic;
  sim_nodes_t *nodes;
};

static void nodes_release(sim_nodes_t *g) {
  if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
  for (size_t i = 0; i < g->n; i++) {
    if (g->v[i].kind == N_NCCL) g->v[i].nccl_ops->free(g->v[i].nccl);
    if (g->v[i].kind == N_GRAPH) nodes_release(g->v[i].child);
  }
  for (size_t i = 0; i < g->nhandles; i++)
    if (g->handles[i]) g->handles[i]->magic = 0; /* stale handles read as dead */
  free(g->handles);
  sim_userobj_drop_all(g->uobjs);
  free(g->v);
  free(g);
}

/* Graph and executable handles are never returned to malloc (a stale handle must read as dead,
 * not as freed memory); they stay reachable from this list. */
static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static void **handles;
static size_t nhandles, cap_handles;

static void *handle_alloc(size_t size) {
  void *p = calloc(1, size);
  if (!p) return NULL;
  pthread_mutex_lock(&handles_lock);
  if (nhandles == cap_handles) {
    size_t cap = cap_handles ? 2 * cap_handles : 64;
    void **grown = realloc(handles, cap * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&handles_lock);
      free(p);
      return NULL;
    }
    handles = grown;
    cap_handles = cap;
  }
  handles[nhandles++] = p;
  pthread_mutex_unlock(&handles_lock);
  return p;
}

static struct CUgraph_st *graph_resolve(struct CUgraph_st *g) {
  return g && g->magic == GRAPH_MAGIC ? g : NULL;
}
static struct CUgraphExec_st *exec_resolve(struct CUgraphExec_st *x) {
  return x && x->magic == EXEC_MAGIC ? x : NULL;
}

/* ---- captures ----------------------------------------------------------------------------------- */

#define CAP_STREAMS 32

struct sim_capture {
  unsigned long long id;   /* unique over the process's life, never 0 */
  int mode;                /* cudaStreamCaptureMode given at begin */
  pthread_t owner;         /* the thread that began it */
  int invalidated;
  int ended;               /* cudaStreamEndCapture took it out of `active` */
  cudaError_t why;         /* the error that invalidated it (EndCapture's return is always 901) */
  struct CUgraph_st *graph;
  struct {
    struct CUstream_st *s;
    long last;             /* index of the last record issued on the stream, -1: none */
    long joined;           /* highest record of it another stream of the capture waited for */
  } streams[CAP_STREAMS];  /* [0]: the origin stream */
  int nstreams;
  struct sim_capture *next;
};

static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_capture *active;        /* captures in progress (under cap_lock) */
/* Ended captures are kept, not freed: in relaxed mode another thread may still hold one it read
 * from a stream an instant before the end, and must find it ended, not freed. */
static struct sim_capture *retired;
static _Atomic int nactive;               /* their number: the lock-free "no capture" test */
static unsigned long long next_capture_id;
static _Thread_local int tl_mode = cudaStreamCaptureModeGlobal;

static struct sim_capture *stream_capture(struct CUstream_st *s) {
  return __atomic_load_n(&s->cap, __ATOMIC_ACQUIRE);
}

static int stream_index(const struct sim_capture *c, const struct CUstream_st *s) {
  for (int i = 0; i < c->nstreams; i++)
    if (c->streams[i].s == s) return i;
  return -1;
}

static struct sim_capture *capture_find(unsigned long long id) {
  for (struct sim_capture *c = active; c; c = c->next)
    if (c->id == id) return c;
  return NULL;
}

static void invalidate(struct sim_capture *c, cudaError_t why) {
  if (!c->invalidated) {
    c->invalidated = 1;
    c->why = why;
  }
}

/* Invalidates every capture with a blocking stream on `device`. Returns how many. Under cap_lock. */
static int invalidate_blocking(int device) {
  int n = 0;
  for (struct sim_capture *c = active; c; c = c->next)
    for (int i = 0; i < c->nstreams; i++)
      if (c->streams[i].s->device == device && !(c->streams[i].s->flags & cudaStreamNonBlocking)) {
        invalidate(c, cudaErrorStreamCaptureImplicit);
        n++;
        break;
      }
  return n;
}

static int blocking_capturing(int device) {
  for (struct sim_capture *c = active; c; c = c->next)
    for (int i = 0; i < c->nstreams; i++)
      if (c->streams[i].s->device == device && !(c->streams[i].s->flags & cudaStreamNonBlocking))
        return 1;
  return 0;
}

int sim_capture_valid(struct sim_capture *cap) {
  pthread_mutex_lock(&cap_lock);
  int ok = capture_find(cap->id) == cap && !cap->invalidated;
  pthread_mutex_unlock(&cap_lock);
  return ok;
}

/* ---- the rules ----------------------------------------------------------------------------------- */

cudaError_t sim_capture_check_unsafe(void) {
  if (atomic_load_explicit(&nactive, memory_order_acquire) == 0) return cudaSuccess;
  if (tl_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  pthread_t me = pthread_self();
  int bad = 0;
  pthread_mutex_lock(&cap_lock);
  for (struct sim_capture *c = active; c; c = c->next) {
    int mine = pthread_equal(c->owner, me);
    if ((mine && c->mode != cudaStreamCaptureModeRelaxed) ||
        (!mine && tl_mode == cudaStreamCaptureModeGlobal && c->mode == cudaStreamCaptureModeGlobal)) {
      invalidate(c, cudaErrorStreamCaptureUnsupported);
      bad = 1;
    }
  }
  pthread_mutex_unlock(&cap_lock);
  return bad ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t sim_capture_enqueue(struct CUstream_st *s, struct sim_capture **cap_p) {
  *cap_p = NULL;
  if (atomic_load_explicit(&nactive, memory_order_acquire) == 0) return cudaSuccess;
  cudaError_t r = cudaSuccess;
  pthread_mutex_lock(&cap_lock);
  struct sim_capture *c = stream_capture(s);
  if (c) {
    if (c->invalidated) r = cudaErrorStreamCaptureInvalidated;
    else *cap_p = c;
  } else if (sim_stream_is_default(s) && invalidate_blocking(s->device)) {
    r = cudaErrorStreamCaptureImplicit;
  }
  pthread_mutex_unlock(&cap_lock);
  return r;
}

cudaError_t sim_capture_check_sync_stream(struct CUstream_st *s) {
  if (atomic_load_explicit(&nactive, memory_order_acquire) == 0) return cudaSuccess;
  cudaError_t r = cudaSuccess;
  pthread_mutex_lock(&cap_lock);
  struct sim_capture *c = stream_capture(s);
  if (c) {
    invalidate(c, cudaErrorStreamCaptureUnsupported);
    r = cudaErrorStreamCaptureUnsupported;
  } else if (sim_stream_is_default(s) && invalidate_blocking(s->device)) {
    r = cudaErrorStreamCaptureImplicit;
  }
  pthread_mutex_unlock(&cap_lock);
  return r != cudaSuccess ? r : sim_capture_check_unsafe();
}

cudaError_t sim_capture_check_sync_device(int device) {
  if (atomic_load_explicit(&nactive, memory_order_acquire) == 0) return cudaSuccess;
  int n = 0;
  pthread_mutex_lock(&cap_lock);
  for (struct sim_capture *c = active; c; c = c->next)
    for (int i = 0; i < c->nstreams; i++)
      if (c->streams[i].s->device == device) {
        invalidate(c, cudaErrorStreamCaptureUnsupported);
        n++;
        break;
      }
  pthread_mutex_unlock(&cap_lock);
  return n ? cudaErrorStreamCaptureUnsupported : sim_capture_check_unsafe();
}

cudaError_t sim_capture_check_event(struct CUevent_st *e, int unsafe) {
  unsigned long long id = __atomic_load_n(&e->cap_id, __ATOMIC_ACQUIRE);
  if (id) {
    pthread_mutex_lock(&cap_lock);
    struct sim_capture *c = capture_find(id);
    if (c) invalidate(c, cudaErrorCapturedEvent);
    pthread_mutex_unlock(&cap_lock);
    return cudaErrorCapturedEvent;
  }
  return unsafe ? sim_capture_check_unsafe() : cudaSuccess;
}

/* The device model asks these rules through its hooks (sim_cuda.h), set before any code runs. */
__attribute__((constructor)) static void capture_hooks_register(void) {
  sim_device_set_hooks(&(sim_device_hooks_t){.check_event = sim_capture_check_event});
}

/* ---- recording ----------------------------------------------------------------------------------- */

static int grow(sim_nodes_t *g) {
  size_t cap = g->cap ? 2 * g->cap : 16;
  sim_node_t *v = realloc(g->v, cap * sizeof *v);
  if (!v) return 0;
  g->v = v;
  g->cap = cap;
  return 1;
}

/* Appends a record issued on `s` to its capture. Returns its index, or -1 with *err_p set. */
static long add_node(struct sim_capture *cap, struct CUstream_st *s, sim_node_t *n, cudaError_t *err_p) {
  long idx = -1;
  pthread_mutex_lock(&cap_lock);
  int si = stream_index(cap, s);
  sim_nodes_t *g = cap->ended ? NULL : cap->graph->nodes;
  if (!g || cap->invalidated || si < 0) {
    *err_p = cudaErrorStreamCaptureInvalidated;
  } else if (g->n == g->cap && !grow(g)) {
    invalidate(cap, cudaErrorMemoryAllocation);
    *err_p = cudaErrorMemoryAllocation;
  } else {
    n->stream = si;
    idx = (long)g->n;
    g->v[g->n++] = *n;
    cap->streams[si].last = idx;
  }
  pthread_mutex_unlock(&cap_lock);
  return idx;
}

static cudaError_t add(struct sim_capture *cap, struct CUstream_st *s, sim_node_t n) {
  cudaError_t err = cudaSuccess;
  add_node(cap, s, &n, &err);
  return err;
}

cudaError_t sim_capture_add_copy(struct sim_capture *cap, struct CUstream_st *s, void *dst,
                                 const void *src, size_t bytes, int kind) {
  return add(cap, s, (sim_node_t){.kind = N_COPY, .dst = dst, .src = src, .bytes = bytes, .arg = kind});
}
cudaError_t sim_capture_add_set(struct sim_capture *cap, struct CUstream_st *s, void *dst, int value,
                                size_t bytes) {
  return add(cap, s, (sim_node_t){.kind = N_SET, .dst = dst, .bytes = bytes, .arg = value});
}
cudaError_t sim_capture_add_compute(struct sim_capture *cap, struct CUstream_st *s, double us) {
  return add(cap, s, (sim_node_t){.kind = N_COMPUTE, .us = us});
}
cudaError_t sim_capture_add_kernel(struct sim_capture *cap, struct CUstream_st *s) {
  return add(cap, s, (sim_node_t){.kind = N_KERNEL});
}
cudaError_t sim_capture_add_set32(struct sim_capture *cap, struct CUstream_st *s, void *dst, uint32_t value,
                                  size_t n) {
  return add(cap, s, (sim_node_t){.kind = N_SET32, .dst = dst, .bytes = n, .arg = (int)value});
}
cudaError_t sim_capture_add_host(struct sim_capture *cap, struct CUstream_st *s, void (*fn)(void *),
                                 void *data) {
  return add(cap, s, (sim_node_t){.kind = N_HOST, .host_fn = fn, .host_data = data});
}
cudaError_t sim_capture_add_nccl(struct sim_capture *cap, struct CUstream_st *s,
                                 struct sim_graph_nccl *g, const sim_graph_nccl_ops_t *ops) {
  return add(cap, s, (sim_node_t){.kind = N_NCCL, .nccl = g, .nccl_ops = ops});
}

cudaError_t sim_capture_event_record(struct CUevent_st *e, struct CUstream_st *s) {
  struct sim_capture *cap;
  cudaError_t r = sim_capture_enqueue(s, &cap);
  if (r != cudaSuccess) return r;
  if (!cap) {
    r = sim_event_record(e, s);
    if (r == cudaSuccess) __atomic_store_n(&e->cap_id, 0ull, __ATOMIC_RELEASE);
    return r;
  }
  sim_node_t n = {.kind = N_EVENT_RECORD, .event = e};
  long idx = add_node(cap, s, &n, &r);
  if (idx < 0) return r;
  e->cap_node = idx;
  e->cap_stream = n.stream;
  __atomic_store_n(&e->cap_id, cap->id, __ATOMIC_RELEASE);
  return cudaSuccess;
}

cudaError_t sim_capture_wait_event(struct CUstream_st *s, struct CUevent_st *e, unsigned flags) {
  unsigned long long id = __atomic_load_n(&e->cap_id, __ATOMIC_ACQUIRE);
  if (atomic_load_explicit(&nactive, memory_order_acquire) == 0 && id == 0)
    return sim_stream_wait_event(s, e);
  cudaError_t r = cudaSuccess;
  int eager = 0;
  pthread_mutex_lock(&cap_lock);
  struct sim_capture *sc = stream_capture(s), *ec = id ? capture_find(id) : NULL;
  if (sc && sc->invalidated) {
    r = cudaErrorStreamCaptureInvalidated;
  } else if (id && !ec) { /* recorded in a capture that is over: that record never ran */
    if (sc) {
      invalidate(sc, cudaErrorStreamCaptureIsolation);
      r = cudaErrorStreamCaptureIsolation;
    }
  } else if (ec && ec->invalidated) {
    r = cudaErrorStreamCaptureInvalidated;
  } else if (ec) { /* a captured event: s joins (or is in) its capture */
    if (sc && sc != ec) {
      invalidate(sc, cudaErrorStreamCaptureMerge);
      invalidate(ec, cudaErrorStreamCaptureMerge);
      r = cudaErrorStreamCaptureMerge;
    } else if (!sc && sim_stream_is_default(s)) {
      invalidate(ec, cudaErrorStreamCaptureImplicit);
      r = cudaErrorStreamCaptureImplicit;
    } else if (!sc && ec->nstreams == CAP_STREAMS) {
      r = cudaErrorNotSupported; /* sim/'s bound on the streams of one capture */
    } else {
      if (!sc) {
        ec->streams[ec->nstreams].s = s;
        ec->streams[ec->nstreams].last = -1;
        ec->streams[ec->nstreams].joined = -1;
        ec->nstreams++;
        __atomic_store_n(&s->cap, ec, __ATOMIC_RELEASE);
      }
      if (e->cap_stream < ec->nstreams && ec->streams[e->cap_stream].s != s &&
          ec->streams[e->cap_stream].joined < e->cap_node)
        ec->streams[e->cap_stream].joined = e->cap_node;
    }
  } else if (sc) { /* an uncaptured event into a capture: only as an external dependency */
    if (!(flags & cudaEventWaitExternal)) {
      invalidate(sc, cudaErrorStreamCaptureIsolation);
      r = cudaErrorStreamCaptureIsolation;
    }
  } else {
    eager = 1;
  }
  if (!eager && sim_stream_is_default(s) && !sc && !ec && invalidate_blocking(s->device))
    r = cudaErrorStreamCaptureImplicit;
  pthread_mutex_unlock(&cap_lock);
  if (r != cudaSuccess) return r;
  if (eager) {
    struct sim_capture *none;
    r = sim_capture_enqueue(s, &none); /* the legacy stream's rule */
    return r != cudaSuccess ? r : sim_stream_wait_event(s, e);
  }
  if (!ec && !sc) return cudaSuccess; /* waited on a record that never ran: nothing to wait for */
  sim_node_t n = {.kind = N_EVENT_WAIT, .event = e, .arg = ec ? 0 : 1};
  add_node(ec ? ec : sc, s, &n, &r);
  return r;
}

/* ---- begin, end, status -------------------------------------------------------------------------- */

static cudaError_t begin_capture(struct CUstream_st *s, int mode) {
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return cudaErrorInvalidValue;
  if (sim_stream_is_default(s)) return cudaErrorStreamCaptureUnsupported; /* the legacy stream */
  struct sim_capture *c = calloc(1, sizeof *c);
  struct CUgraph_st *g = handle_alloc(sizeof *g);
  sim_nodes_t *nodes = calloc(1, sizeof *nodes);
  if (!c || !g || !nodes) {
    free(c);
    free(nodes);
    return cudaErrorMemoryAllocation; /* g stays in the handle list, dead */
  }
  atomic_init(&nodes->refs, 1);
  g->nodes = nodes;
  g->magic = GRAPH_MAGIC;
  c->mode = mode;
  c->owner = pthread_self();
  c->graph = g;
  c->streams[0].s = s;
  c->streams[0].last = c->streams[0].joined = -1;
  c->nstreams = 1;
  pthread_mutex_lock(&cap_lock);
  if (stream_capture(s)) {
    pthread_mutex_unlock(&cap_lock);
    g->magic = 0;
    nodes_release(nodes);
    free(c);
    return cudaErrorIllegalState;
  }
  c->id = ++next_capture_id;
  c->next = active;
  active = c;
  __atomic_store_n(&s->cap, c, __ATOMIC_RELEASE);
  atomic_fetch_add(&nactive, 1);
  pthread_mutex_unlock(&cap_lock);
  return cudaSuccess;
}

static cudaError_t end_capture(struct CUstream_st *s, struct CUgraph_st **graph_p) {
  if (!graph_p) return cudaErrorInvalidValue;
  pthread_mutex_lock(&cap_lock);
  struct sim_capture *c = stream_capture(s);
  if (!c) {
    pthread_mutex_unlock(&cap_lock);
    return cudaErrorIllegalState;
  }
  if (c->streams[0].s != s) {
    invalidate(c, cudaErrorStreamCaptureUnmatched);
    pthread_mutex_unlock(&cap_lock);
    return cudaErrorStreamCaptureUnmatched;
  }
  if (c->mode != cudaStreamCaptureModeRelaxed && !pthread_equal(c->owner, pthread_self())) {
    invalidate(c, cudaErrorStreamCaptureWrongThread);
    pthread_mutex_unlock(&cap_lock);
    return cudaErrorStreamCaptureWrongThread;
  }
  cudaError_t r = cudaSuccess;
  for (int i = 1; i < c->nstreams && !c->invalidated; i++)
    if (c->streams[i].last > c->streams[i].joined) r = cudaErrorStreamCaptureUnjoined;
  if (r != cudaSuccess) invalidate(c, r);
  else if (c->invalidated) r = cudaErrorStreamCaptureInvalidated;
  for (struct sim_capture **p = &active; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  for (int i = 0; i < c->nstreams; i++) __atomic_store_n(&c->streams[i].s->cap, NULL, __ATOMIC_RELEASE);
  atomic_fetch_sub(&nactive, 1);
  c->ended = 1;
  struct CUgraph_st *graph = c->graph;
  c->graph = NULL;
  c->next = retired;
  retired = c;
  pthread_mutex_unlock(&cap_lock);
  if (r != cudaSuccess) {
    graph->magic = 0;
    nodes_release(graph->nodes);
    graph->nodes = NULL;
    *graph_p = NULL;
  } else {
    *graph_p = graph;
  }
  return r;
}

/* Capture status of a stream. The legacy stream of a device with a capturing blocking stream
 * answers cudaErrorStreamCaptureImplicit, without invalidating anything (as documented). */
static cudaError_t capture_info(struct CUstream_st *s, enum cudaStreamCaptureStatus *status,
                                unsigned long long *id_p, struct CUgraph_st **graph_p) {
  if (!status) return cudaErrorInvalidValue;
  if (atomic_load_explicit(&nactive, memory_order_acquire) == 0) { /* no lock on this common path */
    *status = cudaStreamCaptureStatusNone;
    return cudaSuccess;
  }
  cudaError_t r = cudaSuccess;
  pthread_mutex_lock(&cap_lock);
  struct sim_capture *c = stream_capture(s);
  if (!c && sim_stream_is_default(s) && blocking_capturing(s->device)) {
    r = cudaErrorStreamCaptureImplicit;
  } else if (!c) {
    *status = cudaStreamCaptureStatusNone;
  } else {
    *status = c->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    if (id_p) *id_p = c->id;
    if (graph_p) *graph_p = c->invalidated ? NULL : c->graph;
  }
  pthread_mutex_unlock(&cap_lock);
  return r;
}

/* ---- replay -------------------------------------------------------------------------------------- */

static cudaError_t replay(const sim_nodes_t *g, struct CUstream_st *s) {
  for (size_t i = 0; g && i < g->n; i++) {
    const sim_node_t *n = &g->v[i];
    switch (n->kind) {
    case N_COPY:
      memmove(n->dst, n->src, n->bytes);
      sim_stream_advance(s, sim_copy_time_us(n->bytes, n->arg));
      break;
    case N_SET:
      memset(n->dst, n->arg, n->bytes);
      sim_stream_advance(s, sim_copy_time_us(n->bytes, cudaMemcpyDeviceToDevice));
      break;
    case N_COMPUTE: sim_stream_advance(s, n->us); break;
    case N_KERNEL: break; /* kernels never run on sim/ */
    case N_EVENT_RECORD:
      if (sim_event_resolve(n->event) && sim_event_record(n->event, s) == cudaSuccess)
        __atomic_store_n(&n->event->cap_id, 0ull, __ATOMIC_RELEASE);
      break;
    case N_EVENT_WAIT: /* inside the graph, records run in order: only external waits matter */
      if (n->arg && sim_event_resolve(n->event)) sim_stream_wait_event(s, n->event);
      break;
    case N_NCCL:
      if (n->nccl_ops->replay(n->nccl, s) != 0) return cudaErrorLaunchFailure;
      break;
    case N_HOST: n->host_fn(n->host_data); break;
    case N_SET32:
      sim_fill32(n->dst, (uint32_t)n->arg, n->bytes);
      sim_stream_advance(s, sim_copy_time_us(4 * n->bytes, cudaMemcpyDeviceToDevice));
      break;
    case N_GRAPH: {
      cudaError_t r = replay(n->child, s);
      if (r != cudaSuccess) return r;
      break;
    }
    }
  }
  return cudaSuccess;
}

/* ---- the shared implementation of both APIs ------------------------------------------------------ */

static cudaError_t stream_or_error(cudaStream_t h, struct CUstream_st **s_p) {
  *s_p = sim_stream_resolve(h);
  return *s_p ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

static cudaError_t instantiate(struct CUgraphExec_st **exec_p, struct CUgraph_st *graph) {
  if (!exec_p) return cudaErrorInvalidValue;
  struct CUgraph_st *g = graph_resolve(graph);
  if (!g) return cudaErrorInvalidValue;
  struct CUgraphExec_st *x = handle_alloc(sizeof *x);
  if (!x) return cudaErrorMemoryAllocation;
  atomic_fetch_add(&g->nodes->refs, 1);
  x->nodes = g->nodes;
  x->magic = EXEC_MAGIC;
  *exec_p = x;
  return cudaSuccess;
}

static cudaError_t graph_launch(struct CUgraphExec_st *exec, cudaStream_t stream) {
  struct CUgraphExec_st *x = exec_resolve(exec);
  if (!x) return cudaErrorInvalidResourceHandle;
  struct CUstream_st *s;
  cudaError_t r = stream_or_error(stream, &s);
  if (r != cudaSuccess) return r;
  struct sim_capture *cap;
  if ((r = sim_capture_enqueue(s, &cap)) != cudaSuccess) return r;
  if (cap) { /* launched into a capture: a child graph, replayed with its parent */
    atomic_fetch_add(&x->nodes->refs, 1);
    r = add(cap, s, (sim_node_t){.kind = N_GRAPH, .child = x->nodes});
    if (r != cudaSuccess) nodes_release(x->nodes);
    return r;
  }
  sim_nodes_t *nodes = x->nodes; /* held for the replay: another thread may destroy the exec */
  atomic_fetch_add(&nodes->refs, 1);
  r = replay(nodes, s);
  nodes_release(nodes);
  return r;
}

static cudaError_t graph_destroy(struct CUgraph_st *graph) {
  struct CUgraph_st *g = graph_resolve(graph);
  if (!g) return cudaErrorInvalidValue;
  g->magic = 0;
  nodes_release(g->nodes);
  g->nodes = NULL;
  return cudaSuccess;
}

static cudaError_t exec_destroy(struct CUgraphExec_st *exec) {
  struct CUgraphExec_st *x = exec_resolve(exec);
  if (!x) return cudaErrorInvalidValue;
  x->magic = 0;
  nodes_release(x->nodes);
  x->nodes = NULL;
  return cudaSuccess;
}

static cudaError_t exchange_mode(int *mode) {
  if (!mode || (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
                *mode != cudaStreamCaptureModeRelaxed))
    return cudaErrorInvalidValue;
  int old = tl_mode;
  tl_mode = *mode;
  *mode = old;
  return cudaSuccess;
}

/* ---- graph inspection and user objects ------------------------------------------------------------ */


/* The handle of record `i` (under cap_lock); NULL when out of memory. */
static struct CUgraphNode_st *node_handle(sim_nodes_t *g, size_t i) {
  if (i >= g->nhandles) {
    struct CUgraphNode_st **h = realloc(g->handles, g->n * sizeof *h);
    if (!h) return NULL;
    for (size_t k = g->nhandles; k < g->n; k++) h[k] = NULL;
    g->handles = h;
    g->nhandles = g->n;
  }
  if (!g->handles[i]) {
    struct CUgraphNode_st *n = handle_alloc(sizeof *n);
    if (!n) return NULL;
    n->g = g;
    n->idx = i;
    n->magic = NODE_MAGIC;
    g->handles[i] = n;
  }
  return g->handles[i];
}

/* Fills a node array as CUDA does: the count when `out` is NULL, else up to *num handles (the rest
 * NULL) and the number obtained. */
static cudaError_t list_nodes(sim_nodes_t *g, size_t first, size_t count, cudaGraphNode_t *out,
                              cudaGraphEdgeData *edges, size_t *num) {
  if (!out) {
    *num = count;
    return cudaSuccess;
  }
  size_t k = 0;
  for (; k < *num && k < count; k++) {
    out[k] = node_handle(g, first + k);
    if (!out[k]) return cudaErrorMemoryAllocation;
    if (edges) memset(&edges[k], 0, sizeof edges[k]);
  }
  for (size_t j = k; j < *num; j++) out[j] = NULL;
  *num = k;
  return cudaSuccess;
}

static cudaError_t get_nodes(struct CUgraph_st *graph, cudaGraphNode_t *nodes, size_t *num) {
  if (!num) return cudaErrorInvalidValue;
  pthread_mutex_lock(&cap_lock);
  struct CUgraph_st *g = graph_resolve(graph);
  cudaError_t r = g ? list_nodes(g->nodes, 0, g->nodes->n, nodes, NULL, num) : cudaErrorInvalidValue;
  pthread_mutex_unlock(&cap_lock);
  return r;
}

/* Records are replayed in order, one after the other, so each depends on the one before it. */
static cudaError_t node_deps(struct CUgraphNode_st *node, cudaGraphNode_t *deps, cudaGraphEdgeData *edges,
                             size_t *num) {
  if (!num) return cudaErrorInvalidValue;
  pthread_mutex_lock(&cap_lock);
  cudaError_t r = cudaErrorInvalidValue;
  if (node && node->magic == NODE_MAGIC)
    r = list_nodes(node->g, node->idx ? node->idx - 1 : 0, node->idx ? 1 : 0, deps, edges, num);
  pthread_mutex_unlock(&cap_lock);
  return r;
}

static cudaError_t retain_user_object(struct CUgraph_st *graph, cudaUserObject_t obj, unsigned count,
                                      unsigned flags) {
  if (flags & ~(unsigned)cudaGraphUserObjectMove) return cudaErrorInvalidValue;
  pthread_mutex_lock(&cap_lock);
  struct CUgraph_st *g = graph_resolve(graph);
  cudaError_t r = g ? sim_userobj_take(&g->nodes->uobjs, obj, count, flags != 0) : cudaErrorInvalidValue;
  pthread_mutex_unlock(&cap_lock);
  return r;
}

/* The next work on a capturing stream depends on `deps` (nodes of its capture): replay is serial,
 * so any set is honoured; the nodes are checked. */
static cudaError_t update_deps(struct CUstream_st *s, cudaGraphNode_t *deps, size_t num, unsigned flags) {
  if (flags > cudaStreamSetCaptureDependencies || (num && !deps)) return cudaErrorInvalidValue;
  pthread_mutex_lock(&cap_lock);
  struct sim_capture *c = stream_capture(s);
  cudaError_t r = !c ? cudaErrorIllegalState : c->invalidated ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
  for (size_t i = 0; r == cudaSuccess && i < num; i++)
    if (!deps[i] || deps[i]->magic != NODE_MAGIC || deps[i]->g != c->graph->nodes) r = cudaErrorInvalidValue;
  pthread_mutex_unlock(&cap_lock);
  return r;
}

/* ---- runtime API ---------------------------------------------------------------------------------- */

static cudaError_t rt(cudaError_t e) {
  if (e != cudaSuccess) sim_cuda_set_last_error(e);
  return e;
}

SIM_API cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  struct CUstream_st *s;
  cudaError_t r = stream_or_error(stream, &s);
  return rt(r != cudaSuccess ? r : begin_capture(s, (int)mode));
}

SIM_API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph) {
  struct CUstream_st *s;
  cudaError_t r = stream_or_error(stream, &s);
  return rt(r != cudaSuccess ? r : end_capture(s, pGraph));
}

SIM_API cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus) {
  struct CUstream_st *s;
  cudaError_t r = stream_or_error(stream, &s);
  return rt(r != cudaSuccess ? r : capture_info(s, pCaptureStatus, NULL, NULL));
}

/* CUDA 13's signature; CUDA 12's runtime had the 6-argument _v2 and the 7-argument _v3 (below).
 * sim/ records no node handles, so the dependency set reads as empty. */
SIM_API cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
                                             unsigned long long *id_out, cudaGraph_t *graph_out,
                                             const cudaGraphNode_t **dependencies_out,
                                             const cudaGraphEdgeData **edgeData_out,
                                             size_t *numDependencies_out) {
  struct CUstream_st *s;
  cudaError_t r = stream_or_error(stream, &s);
  if (r == cudaSuccess) r = capture_info(s, captureStatus_out, id_out, graph_out);
  if (r == cudaSuccess && *captureStatus_out == cudaStreamCaptureStatusActive) {
    if (dependencies_out) *dependencies_out = NULL;
    if (edgeData_out) *edgeData_out = NULL;
    if (numDependencies_out) *numDependencies_out = 0;
  }
  return rt(r);
}

cudaError_t cudaStreamGetCaptureInfo_v2(cudaStream_t stream, enum cudaStreamCaptureStatus *status,
                                        unsigned long long *id_out, cudaGraph_t *graph_out,
                                        const cudaGraphNode_t **deps_out, size_t *ndeps_out);
cudaError_t cudaStreamGetCaptureInfo_v3(cudaStream_t stream, enum cudaStreamCaptureStatus *status,
                                        unsigned long long *id_out, cudaGraph_t *graph_out,
                                        const cudaGraphNode_t **deps_out,
                                        const cudaGraphEdgeData **edge_out, size_t *ndeps_out);
SIM_API cudaError_t cudaStreamGetCaptureInfo_v2(cudaStream_t stream, enum cudaStreamCaptureStatus *status,
                                                unsigned long long *id_out, cudaGraph_t *graph_out,
                                                const cudaGraphNode_t **deps_out, size_t *ndeps_out) {
  return cudaStreamGetCaptureInfo(stream, status, id_out, graph_out, deps_out, NULL, ndeps_out);
}
SIM_API cudaError_t cudaStreamGetCaptureInfo_v3(cudaStream_t stream, enum cudaStreamCaptureStatus *status,
                                                unsigned long long *id_out, cudaGraph_t *graph_out,
                                                const cudaGraphNode_t **deps_out,
                                                const cudaGraphEdgeData **edge_out, size_t *ndeps_out) {
  return cudaStreamGetCaptureInfo(stream, status, id_out, graph_out, deps_out, edge_out, ndeps_out);
}

SIM_API cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  return rt(exchange_mode((int *)mode));
}

SIM_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                         unsigned long long flags) {
  return rt(instantiate(pGraphExec, graph));
}
SIM_API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                  unsigned long long flags) {
  return rt(instantiate(pGraphExec, graph));
}
SIM_API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return rt(graph_launch(graphExec, stream));
}
SIM_API cudaError_t cudaGraphDestroy(cudaGraph_t graph) { return rt(graph_destroy(graph)); }
SIM_API cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes) {
  return rt(get_nodes(graph, nodes, numNodes));
}
SIM_API cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
                                                 cudaGraphEdgeData *edgeData, size_t *pNumDependencies) {
  return rt(node_deps(node, pDependencies, edgeData, pNumDependencies));
}
SIM_API cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t object, unsigned int count,
                                              unsigned int flags) {
  return rt(retain_user_object(graph, object, count, flags));
}
SIM_API cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t *dependencies,
                                                        const cudaGraphEdgeData *dependencyData,
                                                        size_t numDependencies, unsigned int flags) {
  struct CUstream_st *s;
  cudaError_t r = stream_or_error(stream, &s);
  return rt(r != cudaSuccess ? r : update_deps(s, dependencies, numDependencies, flags));
}
/* Graphs are built only by capture in sim/: editing one, conditional nodes and capturing into an
 * existing graph are refused with CUDA's "not supported". */
SIM_API cudaError_t cudaGraphAddNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                     const cudaGraphNode_t *pDependencies, const cudaGraphEdgeData *dependencyData,
                                     size_t numDependencies, struct cudaGraphNodeParams *nodeParams) {
  return rt(cudaErrorNotSupported);
}
SIM_API cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle *pHandle_out, cudaGraph_t graph,
                                                     unsigned int defaultLaunchValue, unsigned int flags) {
  return rt(cudaErrorNotSupported);
}
SIM_API cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                  const cudaGraphNode_t *dependencies,
                                                  const cudaGraphEdgeData *dependencyData, size_t numDependencies,
                                                  enum cudaStreamCaptureMode mode) {
  return rt(cudaErrorNotSupported);
}
SIM_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) { return rt(exec_destroy(graphExec)); }

/* ---- driver API ----------------------------------------------------------------------------------- */

/* The capture errors have the same numbers in both APIs. */
static CUresult cu(cudaError_t e) { return sim_cuda_to_cu(e); }

static CUresult cu_stream(CUstream h, struct CUstream_st **s_p) {
  *s_p = sim_stream_resolve(h);
  return *s_p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

#undef cuStreamBeginCapture
#undef cuStreamGetCaptureInfo
#undef cuGraphInstantiate
CUresult cuStreamBeginCapture(CUstream hStream);
CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode);
CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id_out);
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id_out,
                                   CUgraph *graph_out, const CUgraphNode **deps_out, size_t *ndeps_out);
CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                            char *logBuffer, size_t bufferSize);
CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                               char *logBuffer, size_t bufferSize);

/* The original cuStreamBeginCapture (CUDA 10.0) had no mode: it captured in global mode. */
SIM_API CUresult cuStreamBeginCapture(CUstream hStream) {
  return cuStreamBeginCapture_v2(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
SIM_API CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  struct CUstream_st *s;
  CUresult r = cu_stream(hStream, &s);
  return r != CUDA_SUCCESS ? r : cu(begin_capture(s, (int)mode));
}
SIM_API CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
  struct CUstream_st *s;
  CUresult r = cu_stream(hStream, &s);
  return r != CUDA_SUCCESS ? r : cu(end_capture(s, phGraph));
}
SIM_API CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
  /* Asked by the autoha shim before every collective: with no capture anywhere, a live handle is
   * answered without resolving it (same answer, a few instructions). */
  if (captureStatus && atomic_load_explicit(&nactive, memory_order_acquire) == 0 &&
      (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD ||
       hStream->magic == SIM_STREAM_MAGIC)) {
    *captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  }
  struct CUstream_st *s;
  CUresult r = cu_stream(hStream, &s);
  return r != CUDA_SUCCESS ? r
                           : cu(capture_info(s, (enum cudaStreamCaptureStatus *)captureStatus, NULL, NULL));
}
SIM_API CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *status,
                                           cuuint64_t *id_out, CUgraph *graph_out,
                                           const CUgraphNode **deps_out, const CUgraphEdgeData **edge_out,
                                           size_t *ndeps_out) {
  struct CUstream_st *s;
  CUresult r = cu_stream(hStream, &s);
  unsigned long long id = 0;
  if (r == CUDA_SUCCESS) r = cu(capture_info(s, (enum cudaStreamCaptureStatus *)status, &id, graph_out));
  if (r == CUDA_SUCCESS && *status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    if (id_out) *id_out = id;
    if (deps_out) *deps_out = NULL;
    if (edge_out) *edge_out = NULL;
    if (ndeps_out) *ndeps_out = 0;
  }
  return r;
}
SIM_API CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *status,
                                           cuuint64_t *id_out, CUgraph *graph_out,
                                           const CUgraphNode **deps_out, size_t *ndeps_out) {
  return cuStreamGetCaptureInfo_v3(hStream, status, id_out, graph_out, deps_out, NULL, ndeps_out);
}
SIM_API CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id_out) {
  return cuStreamGetCaptureInfo_v3(hStream, status, id_out, NULL, NULL, NULL, NULL);
}
SIM_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  return cu(exchange_mode((int *)mode));
}
SIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             unsigned long long flags) {
  return cu(instantiate(phGraphExec, hGraph));
}
SIM_API CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                       char *logBuffer, size_t bufferSize) {
  if (phErrorNode) *phErrorNode = NULL;
  if (logBuffer && bufferSize) logBuffer[0] = 0;
  return cu(instantiate(phGraphExec, hGraph));
}
SIM_API CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                    char *logBuffer, size_t bufferSize) {
  return cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}
SIM_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  return cu(graph_launch(hGraphExec, hStream));
}
SIM_API CUresult cuGraphDestroy(CUgraph hGraph) { return cu(graph_destroy(hGraph)); }
SIM_API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) { return cu(exec_destroy(hGraphExec)); }

/* Entries for cuGetProcAddress (sim_cuda_driver.c): base names resolve to the newest version, as
 * libcuda does for a current cudaVersion. */
const sim_proc_t sim_graph_procs[] = {
    {"cuStreamBeginCapture", (void *)cuStreamBeginCapture_v2},
    {"cuStreamEndCapture", (void *)cuStreamEndCapture},
    {"cuStreamIsCapturing", (void *)cuStreamIsCapturing},
    {"cuStreamGetCaptureInfo", (void *)cuStreamGetCaptureInfo_v3},
    {"cuThreadExchangeStreamCaptureMode", (void *)cuThreadExchangeStreamCaptureMode},
    {"cuGraphInstantiate", (void *)cuGraphInstantiateWithFlags},
    {"cuGraphInstantiateWithFlags", (void *)cuGraphInstantiateWithFlags},
    {"cuGraphLaunch", (void *)cuGraphLaunch},
    {"cuGraphDestroy", (void *)cuGraphDestroy},
    {"cuGraphExecDestroy", (void *)cuGraphExecDestroy},
    {NULL, NULL},
};
