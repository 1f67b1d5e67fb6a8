/* A CUDA graph's records and what is done with them: the list of work a capture recorded (shared by
 * the graph and its executables, freed with the last reference), its replay on a launch stream
 * (copies and sets move data again, compute and copies move the stream's clock, captured NCCL groups
 * replay through their own operations), instantiation and destruction, and the node handles and user
 * objects of graph inspection. Captures (sim_cuda_capture.c) append the records.
 *
 * The key choice: records are replayed one after the other on the launch stream, so each depends
 * on the one before it, and branches forked onto other streams are serialised (a conservative
 * time). Graph, executable and node handles are never returned to malloc: a stale one reads as dead. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sim_graph_records.h"

pthread_mutex_t sim_graph_lock = PTHREAD_MUTEX_INITIALIZER;

void sim_graph_nodes_release(sim_nodes_t *g) {
  if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
  for (size_t i = 0; i < g->n; i++) {
    if (g->v[i].kind == N_NCCL) g->v[i].nccl_ops->free(g->v[i].nccl);
    if (g->v[i].kind == N_GRAPH) sim_graph_nodes_release(g->v[i].child);
  }
  for (size_t i = 0; i < g->nhandles; i++)
    if (g->handles[i]) g->handles[i]->magic = 0; /* stale handles read as dead */
  free(g->handles);
  sim_userobj_drop_all(g->uobjs);
  free(g->v);
  free(g);
}

int sim_graph_nodes_grow(sim_nodes_t *g) {
  size_t cap = g->cap ? 2 * g->cap : 16;
  sim_node_t *v = realloc(g->v, cap * sizeof *v);
  if (!v) return 0;
  g->v = v;
  g->cap = cap;
  return 1;
}

/* Graph and executable handles are never returned to malloc (a stale handle must read as dead,
 * not as freed memory); they stay reachable from this list. */
static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static void **handles;
static size_t nhandles, cap_handles;

void *sim_graph_handle_alloc(size_t size) {
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

/* ---- replay -------------------------------------------------------------------------------------- */

cudaError_t sim_graph_replay(const sim_nodes_t *g, struct CUstream_st *s) {
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
        cudaError_t r = sim_graph_replay(n->child, s);
        if (r != cudaSuccess) return r;
        break;
      }
    }
  }
  return cudaSuccess;
}

/* ---- instantiation and destruction --------------------------------------------------------------- */

cudaError_t sim_graph_instantiate(struct CUgraphExec_st **exec_p, struct CUgraph_st *graph) {
  if (!exec_p) return cudaErrorInvalidValue;
  struct CUgraph_st *g = sim_graph_resolve(graph);
  if (!g) return cudaErrorInvalidValue;
  struct CUgraphExec_st *x = sim_graph_handle_alloc(sizeof *x);
  if (!x) return cudaErrorMemoryAllocation;
  atomic_fetch_add(&g->nodes->refs, 1);
  x->nodes = g->nodes;
  x->magic = EXEC_MAGIC;
  *exec_p = x;
  return cudaSuccess;
}

cudaError_t sim_graph_destroy(struct CUgraph_st *graph) {
  struct CUgraph_st *g = sim_graph_resolve(graph);
  if (!g) return cudaErrorInvalidValue;
  g->magic = 0;
  sim_graph_nodes_release(g->nodes);
  g->nodes = NULL;
  return cudaSuccess;
}

cudaError_t sim_graph_exec_destroy(struct CUgraphExec_st *exec) {
  struct CUgraphExec_st *x = sim_graph_exec_resolve(exec);
  if (!x) return cudaErrorInvalidValue;
  x->magic = 0;
  sim_graph_nodes_release(x->nodes);
  x->nodes = NULL;
  return cudaSuccess;
}

/* ---- graph inspection and user objects ------------------------------------------------------------ */

/* The handle of record `i` (under sim_graph_lock); NULL when out of memory. */
static struct CUgraphNode_st *node_handle(sim_nodes_t *g, size_t i) {
  if (i >= g->nhandles) {
    struct CUgraphNode_st **h = realloc(g->handles, g->n * sizeof *h);
    if (!h) return NULL;
    for (size_t k = g->nhandles; k < g->n; k++) h[k] = NULL;
    g->handles = h;
    g->nhandles = g->n;
  }
  if (!g->handles[i]) {
    struct CUgraphNode_st *n = sim_graph_handle_alloc(sizeof *n);
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

cudaError_t sim_graph_get_nodes(struct CUgraph_st *graph, cudaGraphNode_t *nodes, size_t *num) {
  if (!num) return cudaErrorInvalidValue;
  pthread_mutex_lock(&sim_graph_lock);
  struct CUgraph_st *g = sim_graph_resolve(graph);
  cudaError_t r =
      g ? list_nodes(g->nodes, 0, g->nodes->n, nodes, NULL, num) : cudaErrorInvalidValue;
  pthread_mutex_unlock(&sim_graph_lock);
  return r;
}

/* Records are replayed in order, one after the other, so each depends on the one before it. */
cudaError_t sim_graph_node_deps(struct CUgraphNode_st *node, cudaGraphNode_t *deps,
                                cudaGraphEdgeData *edges, size_t *num) {
  if (!num) return cudaErrorInvalidValue;
  pthread_mutex_lock(&sim_graph_lock);
  cudaError_t r = cudaErrorInvalidValue;
  if (node && node->magic == NODE_MAGIC)
    r = list_nodes(node->g, node->idx ? node->idx - 1 : 0, node->idx ? 1 : 0, deps, edges, num);
  pthread_mutex_unlock(&sim_graph_lock);
  return r;
}

cudaError_t sim_graph_retain_user_object(struct CUgraph_st *graph, cudaUserObject_t obj,
                                         unsigned count, unsigned flags) {
  if (flags & ~(unsigned)cudaGraphUserObjectMove) return cudaErrorInvalidValue;
  pthread_mutex_lock(&sim_graph_lock);
  struct CUgraph_st *g = sim_graph_resolve(graph);
  cudaError_t r =
      g ? sim_userobj_take(&g->nodes->uobjs, obj, count, flags != 0) : cudaErrorInvalidValue;
  pthread_mutex_unlock(&sim_graph_lock);
  return r;
}
