/* CUDA graphs as the report counts them: the NCCL calls the shim decided while a stream was being
 * captured (ah_shim_graph_note) follow the capture into its graph (cudaStreamEndCapture), the graph
 * into its executable graphs (cudaGraphInstantiate*), and every cudaGraphLaunch of one adds them to
 * their keys' graph_launched counts. A launch replays what was captured without NCCL or the tuner
 * seeing it, so this is the only place the shim can count replays.
 *
 * Key choice: the shim wraps the CUDA runtime API, which a preloaded library sees when the program
 * uses the shared runtime (PyTorch, JAX and most frameworks do). A program linked with the static
 * runtime (nvcc's default) launches its graphs inside itself: its report counts captured calls
 * only. The tables are keyed by the runtime's handles and dropped when the runtime destroys them,
 * so a reused handle never inherits counts. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ah_uthash.h"
#include "shim_internal.h"
#include "shim_real.h"

typedef struct {
  ah_shim_rankkey_t *ck;
  uint64_t n; /* calls of the key in the captured work */
} gcount_t;

/* The decided NCCL calls of one capture, graph or executable graph. */
typedef struct {
  const void *handle;
  int n, cap;
  gcount_t *v;
  UT_hash_handle hh;
} gset_t;

static pthread_mutex_t glock = PTHREAD_MUTEX_INITIALIZER;
static gset_t *by_stream, *by_graph, *by_exec;

static gset_t *gset_get(gset_t **table, const void *handle, int create) {
  gset_t *g = NULL;
  HASH_FIND_PTR(*table, &handle, g);
  if (g || !create) return g;
  if (!(g = calloc(1, sizeof *g))) return NULL;
  g->handle = handle;
  HASH_ADD_PTR(*table, handle, g);
  if (!AH_HASH_ADDED(g)) {
    free(g);
    return NULL;
  }
  return g;
}

static void gset_drop(gset_t **table, const void *handle) {
  gset_t *g = gset_get(table, handle, 0);
  if (!g) return;
  HASH_DEL(*table, g);
  free(g->v);
  free(g);
}

static int gset_add(gset_t *g, ah_shim_rankkey_t *ck, uint64_t n) {
  for (int i = 0; i < g->n; i++)
    if (g->v[i].ck == ck) {
      g->v[i].n += n;
      return 0;
    }
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 8;
    gcount_t *v = realloc(g->v, (size_t)cap * sizeof *v);
    if (!v) return -1;
    g->v = v;
    g->cap = cap;
  }
  g->v[g->n++] = (gcount_t){ck, n};
  return 0;
}

/* Copies from's counts into a set of `to` under `handle`, created when needed. Caller holds glock. */
static void gset_copy(gset_t **to, const void *handle, const gset_t *from) {
  gset_t *g = gset_get(to, handle, 1);
  for (int i = 0; g && i < from->n; i++)
    if (gset_add(g, from->v[i].ck, from->v[i].n) != 0) break;
}

void ah_shim_graph_note(cudaStream_t stream, ah_shim_rankkey_t *ck) {
  pthread_mutex_lock(&glock);
  gset_t *g = gset_get(&by_stream, stream, 1);
  if (!g || gset_add(g, ck, 1) != 0)
    AH_LOG_CAPPED(1, AH_LOG_WARN,
                  "out of memory recording a captured call: graph launches of it are not counted");
  pthread_mutex_unlock(&glock);
}

/* The runtime's function behind each wrapper, found once; a wrapper without one fails as CUDA does
 * for a call it does not support (it is only reached by a program that calls the runtime). */
#define REAL(type, name)                                                                           \
  static type real_##name;                                                                         \
  if (!__atomic_load_n(&real_##name, __ATOMIC_ACQUIRE))                                            \
    __atomic_store_n(&real_##name, (type)ah_shim_real_sym(#name), __ATOMIC_RELEASE);               \
  if (!real_##name) return cudaErrorNotSupported

typedef cudaError_t (*end_capture_fn)(cudaStream_t, cudaGraph_t *);
typedef cudaError_t (*instantiate_fn)(cudaGraphExec_t *, cudaGraph_t, unsigned long long);
typedef cudaError_t (*launch_fn)(cudaGraphExec_t, cudaStream_t);
typedef cudaError_t (*graph_destroy_fn)(cudaGraph_t);
typedef cudaError_t (*exec_destroy_fn)(cudaGraphExec_t);

AH_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph) {
  REAL(end_capture_fn, cudaStreamEndCapture);
  cudaError_t r = real_cudaStreamEndCapture(stream, pGraph);
  pthread_mutex_lock(&glock);
  gset_t *s = gset_get(&by_stream, stream, 0);
  if (s && r == cudaSuccess && pGraph && *pGraph) gset_copy(&by_graph, *pGraph, s);
  gset_drop(&by_stream, stream); /* ended either way */
  pthread_mutex_unlock(&glock);
  return r;
}

/* An executable graph inherits its graph's counts. */
static void instantiated(cudaError_t r, cudaGraphExec_t *pExec, cudaGraph_t graph) {
  if (r != cudaSuccess || !pExec || !*pExec) return;
  pthread_mutex_lock(&glock);
  gset_t *g = gset_get(&by_graph, graph, 0);
  gset_drop(&by_exec, *pExec);
  if (g) gset_copy(&by_exec, *pExec, g);
  pthread_mutex_unlock(&glock);
}

AH_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                           unsigned long long flags) {
  REAL(instantiate_fn, cudaGraphInstantiate);
  cudaError_t r = real_cudaGraphInstantiate(pGraphExec, graph, flags);
  instantiated(r, pGraphExec, graph);
  return r;
}

AH_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                    unsigned long long flags) {
  REAL(instantiate_fn, cudaGraphInstantiateWithFlags);
  cudaError_t r = real_cudaGraphInstantiateWithFlags(pGraphExec, graph, flags);
  instantiated(r, pGraphExec, graph);
  return r;
}

AH_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  REAL(launch_fn, cudaGraphLaunch);
  cudaError_t r = real_cudaGraphLaunch(graphExec, stream);
  if (r != cudaSuccess) return r;
  pthread_mutex_lock(&glock);
  gset_t *g = gset_get(&by_exec, graphExec, 0);
  for (int i = 0; g && i < g->n; i++) atomic_fetch_add(&g->v[i].ck->graph_launched, g->v[i].n);
  pthread_mutex_unlock(&glock);
  return r;
}

AH_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  REAL(graph_destroy_fn, cudaGraphDestroy);
  pthread_mutex_lock(&glock);
  gset_drop(&by_graph, graph);
  pthread_mutex_unlock(&glock);
  return real_cudaGraphDestroy(graph);
}

AH_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  REAL(exec_destroy_fn, cudaGraphExecDestroy);
  pthread_mutex_lock(&glock);
  gset_drop(&by_exec, graphExec);
  pthread_mutex_unlock(&glock);
  return real_cudaGraphExecDestroy(graphExec);
}
