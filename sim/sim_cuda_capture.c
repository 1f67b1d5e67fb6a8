/* Stream capture, for both APIs: beginning and ending a capture on a stream, the capture modes
 * (global, thread-local, relaxed) with the rules CUDA documents for calls made while a capture is in
 * progress, and recording work in issue order instead of doing it (copies, sets, simulated compute,
 * kernel launches, event records and waits, NCCL groups, child graphs) into the graph's records
 * (sim_cuda_graph.c).
 *
 * The key choice: CUDA's rules are checked here, in one place, by every API entry point that CUDA
 * documents as affected (sim_graph.h); one atomic load when no capture is in progress. A call that
 * breaks a rule fails with CUDA's error and invalidates the captures concerned; cudaStreamEndCapture
 * then returns cudaErrorStreamCaptureInvalidated and no graph, as CUDA does. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sim_graph_records.h"

#define CAP_STREAMS 32

struct sim_capture {
  unsigned long long id; /* unique over the process's life, never 0 */
  int mode;              /* cudaStreamCaptureMode given at begin */
  pthread_t owner;       /* the thread that began it */
  int invalidated;
  int ended;       /* cudaStreamEndCapture took it out of `active` */
  cudaError_t why; /* the error that invalidated it (EndCapture's return is always 901) */
  struct CUgraph_st *graph;
  struct {
    struct CUstream_st *s;
    long last;            /* index of the last record issued on the stream, -1: none */
    long joined;          /* highest record of it another stream of the capture waited for */
  } streams[CAP_STREAMS]; /* [0]: the origin stream */
  int nstreams;
  struct sim_capture *next;
};

static struct sim_capture *active; /* captures in progress (under sim_graph_lock) */
/* Ended captures are kept, not freed: in relaxed mode another thread may still hold one it read
 * from a stream an instant before the end, and must find it ended, not freed. */
static struct sim_capture *retired;
_Atomic int sim_capture_nactive; /* their number: the lock-free "no capture" test */
static unsigned long long next_capture_id;
_Thread_local int sim_capture_tl_mode = cudaStreamCaptureModeGlobal;

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

/* Invalidates every capture with a blocking stream on `device`. Returns how many. Under sim_graph_lock. */
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
  pthread_mutex_lock(&sim_graph_lock);
  int ok = capture_find(cap->id) == cap && !cap->invalidated;
  pthread_mutex_unlock(&sim_graph_lock);
  return ok;
}

/* ---- the rules ----------------------------------------------------------------------------------- */

cudaError_t sim_capture_check_unsafe(void) {
  if (atomic_load_explicit(&sim_capture_nactive, memory_order_acquire) == 0) return cudaSuccess;
  if (sim_capture_tl_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  pthread_t me = pthread_self();
  int bad = 0;
  pthread_mutex_lock(&sim_graph_lock);
  for (struct sim_capture *c = active; c; c = c->next) {
    int mine = pthread_equal(c->owner, me);
    if ((mine && c->mode != cudaStreamCaptureModeRelaxed) ||
        (!mine && sim_capture_tl_mode == cudaStreamCaptureModeGlobal &&
         c->mode == cudaStreamCaptureModeGlobal)) {
      invalidate(c, cudaErrorStreamCaptureUnsupported);
      bad = 1;
    }
  }
  pthread_mutex_unlock(&sim_graph_lock);
  return bad ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t sim_capture_enqueue(struct CUstream_st *s, struct sim_capture **cap_p) {
  *cap_p = NULL;
  if (atomic_load_explicit(&sim_capture_nactive, memory_order_acquire) == 0) return cudaSuccess;
  cudaError_t r = cudaSuccess;
  pthread_mutex_lock(&sim_graph_lock);
  struct sim_capture *c = stream_capture(s);
  if (c) {
    if (c->invalidated) r = cudaErrorStreamCaptureInvalidated;
    else *cap_p = c;
  } else if (sim_stream_is_default(s) && invalidate_blocking(s->device)) {
    r = cudaErrorStreamCaptureImplicit;
  }
  pthread_mutex_unlock(&sim_graph_lock);
  return r;
}

cudaError_t sim_capture_check_sync_stream(struct CUstream_st *s) {
  if (atomic_load_explicit(&sim_capture_nactive, memory_order_acquire) == 0) return cudaSuccess;
  cudaError_t r = cudaSuccess;
  pthread_mutex_lock(&sim_graph_lock);
  struct sim_capture *c = stream_capture(s);
  if (c) {
    invalidate(c, cudaErrorStreamCaptureUnsupported);
    r = cudaErrorStreamCaptureUnsupported;
  } else if (sim_stream_is_default(s) && invalidate_blocking(s->device)) {
    r = cudaErrorStreamCaptureImplicit;
  }
  pthread_mutex_unlock(&sim_graph_lock);
  return r != cudaSuccess ? r : sim_capture_check_unsafe();
}

cudaError_t sim_capture_check_sync_device(int device) {
  if (atomic_load_explicit(&sim_capture_nactive, memory_order_acquire) == 0) return cudaSuccess;
  int n = 0;
  pthread_mutex_lock(&sim_graph_lock);
  for (struct sim_capture *c = active; c; c = c->next)
    for (int i = 0; i < c->nstreams; i++)
      if (c->streams[i].s->device == device) {
        invalidate(c, cudaErrorStreamCaptureUnsupported);
        n++;
        break;
      }
  pthread_mutex_unlock(&sim_graph_lock);
  return n ? cudaErrorStreamCaptureUnsupported : sim_capture_check_unsafe();
}

cudaError_t sim_capture_check_event(struct CUevent_st *e, int unsafe) {
  unsigned long long id = __atomic_load_n(&e->cap_id, __ATOMIC_ACQUIRE);
  if (id) {
    pthread_mutex_lock(&sim_graph_lock);
    struct sim_capture *c = capture_find(id);
    if (c) invalidate(c, cudaErrorCapturedEvent);
    pthread_mutex_unlock(&sim_graph_lock);
    return cudaErrorCapturedEvent;
  }
  return unsafe ? sim_capture_check_unsafe() : cudaSuccess;
}

/* The device model asks these rules through its hooks (sim_cuda.h), set before any code runs. */
__attribute__((constructor)) static void capture_hooks_register(void) {
  sim_device_set_hooks(&(sim_device_hooks_t){.check_event = sim_capture_check_event});
}

/* ---- recording ----------------------------------------------------------------------------------- */

/* Appends a record issued on `s` to its capture. Returns its index, or -1 with *err_p set. */
static long add_node(struct sim_capture *cap, struct CUstream_st *s, sim_node_t *n,
                     cudaError_t *err_p) {
  long idx = -1;
  pthread_mutex_lock(&sim_graph_lock);
  int si = stream_index(cap, s);
  sim_nodes_t *g = cap->ended ? NULL : cap->graph->nodes;
  if (!g || cap->invalidated || si < 0) {
    *err_p = cudaErrorStreamCaptureInvalidated;
  } else if (g->n == g->cap && !sim_graph_nodes_grow(g)) {
    invalidate(cap, cudaErrorMemoryAllocation);
    *err_p = cudaErrorMemoryAllocation;
  } else {
    n->stream = si;
    idx = (long)g->n;
    g->v[g->n++] = *n;
    cap->streams[si].last = idx;
  }
  pthread_mutex_unlock(&sim_graph_lock);
  return idx;
}

static cudaError_t add(struct sim_capture *cap, struct CUstream_st *s, sim_node_t n) {
  cudaError_t err = cudaSuccess;
  add_node(cap, s, &n, &err);
  return err;
}

cudaError_t sim_capture_add_copy(struct sim_capture *cap, struct CUstream_st *s, void *dst,
                                 const void *src, size_t bytes, int kind) {
  return add(cap, s,
             (sim_node_t){.kind = N_COPY, .dst = dst, .src = src, .bytes = bytes, .arg = kind});
}
cudaError_t sim_capture_add_set(struct sim_capture *cap, struct CUstream_st *s, void *dst,
                                int value, size_t bytes) {
  return add(cap, s, (sim_node_t){.kind = N_SET, .dst = dst, .bytes = bytes, .arg = value});
}
cudaError_t sim_capture_add_compute(struct sim_capture *cap, struct CUstream_st *s, double us) {
  return add(cap, s, (sim_node_t){.kind = N_COMPUTE, .us = us});
}
cudaError_t sim_capture_add_kernel(struct sim_capture *cap, struct CUstream_st *s) {
  return add(cap, s, (sim_node_t){.kind = N_KERNEL});
}
cudaError_t sim_capture_add_set32(struct sim_capture *cap, struct CUstream_st *s, void *dst,
                                  uint32_t value, size_t n) {
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
  if (atomic_load_explicit(&sim_capture_nactive, memory_order_acquire) == 0 && id == 0)
    return sim_stream_wait_event(s, e);
  cudaError_t r = cudaSuccess;
  int eager = 0;
  pthread_mutex_lock(&sim_graph_lock);
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
  pthread_mutex_unlock(&sim_graph_lock);
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

cudaError_t sim_capture_add_graph(struct sim_capture *cap, struct CUstream_st *s,
                                  sim_nodes_t *child) {
  atomic_fetch_add(&child->refs, 1);
  cudaError_t r = add(cap, s, (sim_node_t){.kind = N_GRAPH, .child = child});
  if (r != cudaSuccess) sim_graph_nodes_release(child);
  return r;
}

/* ---- begin, end, status -------------------------------------------------------------------------- */

cudaError_t sim_capture_begin(struct CUstream_st *s, int mode) {
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return cudaErrorInvalidValue;
  if (sim_stream_is_default(s)) return cudaErrorStreamCaptureUnsupported; /* the legacy stream */
  struct sim_capture *c = calloc(1, sizeof *c);
  struct CUgraph_st *g = sim_graph_handle_alloc(sizeof *g);
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
  pthread_mutex_lock(&sim_graph_lock);
  if (stream_capture(s)) {
    pthread_mutex_unlock(&sim_graph_lock);
    g->magic = 0;
    sim_graph_nodes_release(nodes);
    free(c);
    return cudaErrorIllegalState;
  }
  c->id = ++next_capture_id;
  c->next = active;
  active = c;
  __atomic_store_n(&s->cap, c, __ATOMIC_RELEASE);
  atomic_fetch_add(&sim_capture_nactive, 1);
  pthread_mutex_unlock(&sim_graph_lock);
  return cudaSuccess;
}

cudaError_t sim_capture_end(struct CUstream_st *s, struct CUgraph_st **graph_p) {
  if (!graph_p) return cudaErrorInvalidValue;
  pthread_mutex_lock(&sim_graph_lock);
  struct sim_capture *c = stream_capture(s);
  if (!c) {
    pthread_mutex_unlock(&sim_graph_lock);
    return cudaErrorIllegalState;
  }
  if (c->streams[0].s != s) {
    invalidate(c, cudaErrorStreamCaptureUnmatched);
    pthread_mutex_unlock(&sim_graph_lock);
    return cudaErrorStreamCaptureUnmatched;
  }
  if (c->mode != cudaStreamCaptureModeRelaxed && !pthread_equal(c->owner, pthread_self())) {
    invalidate(c, cudaErrorStreamCaptureWrongThread);
    pthread_mutex_unlock(&sim_graph_lock);
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
  for (int i = 0; i < c->nstreams; i++)
    __atomic_store_n(&c->streams[i].s->cap, NULL, __ATOMIC_RELEASE);
  atomic_fetch_sub(&sim_capture_nactive, 1);
  c->ended = 1;
  struct CUgraph_st *graph = c->graph;
  c->graph = NULL;
  c->next = retired;
  retired = c;
  pthread_mutex_unlock(&sim_graph_lock);
  if (r != cudaSuccess) {
    graph->magic = 0;
    sim_graph_nodes_release(graph->nodes);
    graph->nodes = NULL;
    *graph_p = NULL;
  } else {
    *graph_p = graph;
  }
  return r;
}

/* Capture status of a stream. The legacy stream of a device with a capturing blocking stream
 * answers cudaErrorStreamCaptureImplicit, without invalidating anything (as documented). */
cudaError_t sim_capture_info(struct CUstream_st *s, enum cudaStreamCaptureStatus *status,
                             unsigned long long *id_p, struct CUgraph_st **graph_p) {
  if (!status) return cudaErrorInvalidValue;
  if (atomic_load_explicit(&sim_capture_nactive, memory_order_acquire) ==
      0) { /* no lock on this common path */
    *status = cudaStreamCaptureStatusNone;
    return cudaSuccess;
  }
  cudaError_t r = cudaSuccess;
  pthread_mutex_lock(&sim_graph_lock);
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
  pthread_mutex_unlock(&sim_graph_lock);
  return r;
}

/* The next work on a capturing stream depends on `deps` (nodes of its capture): replay is serial,
 * so any set is honoured; the nodes are checked. */
cudaError_t sim_capture_update_deps(struct CUstream_st *s, cudaGraphNode_t *deps, size_t num,
                                    unsigned flags) {
  if (flags > cudaStreamSetCaptureDependencies || (num && !deps)) return cudaErrorInvalidValue;
  pthread_mutex_lock(&sim_graph_lock);
  struct sim_capture *c = stream_capture(s);
  cudaError_t r = !c               ? cudaErrorIllegalState
                  : c->invalidated ? cudaErrorStreamCaptureInvalidated
                                   : cudaSuccess;
  for (size_t i = 0; r == cudaSuccess && i < num; i++)
    if (!deps[i] || deps[i]->magic != NODE_MAGIC || deps[i]->g != c->graph->nodes)
      r = cudaErrorInvalidValue;
  pthread_mutex_unlock(&sim_graph_lock);
  return r;
}
