/* The records of a CUDA graph and the calls between the three files that implement capture and
 * graphs: sim_cuda_graph.c (records, replay, instantiation, inspection), sim_cuda_capture.c (captures
 * and their rules, recording) and sim_cuda_graph_api.c (the runtime's and driver's entry points).
 * Other files see only sim_graph.h. */
#ifndef SIM_GRAPH_RECORDS_H
#define SIM_GRAPH_RECORDS_H

#include <pthread.h>

#include "sim_cuda.h"
#include "sim_graph.h"

#define SIM_HIDDEN __attribute__((visibility("hidden")))

enum {
  N_COPY,
  N_SET,
  N_COMPUTE,
  N_KERNEL,
  N_EVENT_RECORD,
  N_EVENT_WAIT,
  N_NCCL,
  N_GRAPH,
  N_HOST,
  N_SET32
};

typedef struct sim_nodes sim_nodes_t;

typedef struct {
  int kind;
  int stream; /* index of the issuing stream in its capture */
  void *dst;
  const void *src;
  size_t bytes;
  int arg; /* copy kind, memset value, or 1 for an external event wait */
  double us;
  struct CUevent_st *event;
  struct sim_graph_nccl *nccl;
  const sim_graph_nccl_ops_t *nccl_ops; /* N_NCCL: how to replay and free it */
  sim_nodes_t *child;                   /* a graph launched into the capturing stream */
  void (*host_fn)(void *);              /* N_HOST: the function and its argument */
  void *host_data;
} sim_node_t;

/* The records of a graph, shared by the graph and every executable instantiated from it (neither
 * can change them: sim/ has no graph-editing API), freed with the last reference. */
struct sim_nodes {
  _Atomic int refs;
  size_t n, cap;
  sim_node_t *v;
  struct sim_userobj_ref *uobjs; /* user objects the graph retains (under sim_graph_lock) */
  struct CUgraphNode_st *
      *handles; /* node handles handed out so far, by record (under sim_graph_lock) */
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

static inline struct CUgraph_st *sim_graph_resolve(struct CUgraph_st *g) {
  return g && g->magic == GRAPH_MAGIC ? g : NULL;
}
static inline struct CUgraphExec_st *sim_graph_exec_resolve(struct CUgraphExec_st *x) {
  return x && x->magic == EXEC_MAGIC ? x : NULL;
}

/* ---- records (sim_cuda_graph.c) ------------------------------------------------------------- */
/* Guards captures, the records they append to, and graphs' node handles and user objects. */
extern pthread_mutex_t sim_graph_lock SIM_HIDDEN;
/* Drops a reference to a graph's records; the last one frees them (and what they hold). */
void sim_graph_nodes_release(sim_nodes_t *g);
/* Makes room for one more record. Returns 0 when out of memory. */
int sim_graph_nodes_grow(sim_nodes_t *g);
/* A zeroed graph, executable or node handle, never returned to malloc. NULL when out of memory. */
void *sim_graph_handle_alloc(size_t size);
/* Replays the records on `s`, in order. */
cudaError_t sim_graph_replay(const sim_nodes_t *g, struct CUstream_st *s);
cudaError_t sim_graph_instantiate(struct CUgraphExec_st **exec_p, struct CUgraph_st *graph);
cudaError_t sim_graph_destroy(struct CUgraph_st *graph);
cudaError_t sim_graph_exec_destroy(struct CUgraphExec_st *exec);
cudaError_t sim_graph_get_nodes(struct CUgraph_st *graph, cudaGraphNode_t *nodes, size_t *num);
cudaError_t sim_graph_node_deps(struct CUgraphNode_st *node, cudaGraphNode_t *deps,
                                cudaGraphEdgeData *edges, size_t *num);
cudaError_t sim_graph_retain_user_object(struct CUgraph_st *graph, cudaUserObject_t obj,
                                         unsigned count, unsigned flags);

/* ---- captures (sim_cuda_capture.c) ---------------------------------------------------------- */
/* Captures in progress: the lock-free "no capture" test. */
extern _Atomic int sim_capture_nactive SIM_HIDDEN;
cudaError_t sim_capture_begin(struct CUstream_st *s, int mode);
cudaError_t sim_capture_end(struct CUstream_st *s, struct CUgraph_st **graph_p);
/* Capture status of a stream (cudaStreamIsCapturing, cudaStreamGetCaptureInfo). */
cudaError_t sim_capture_info(struct CUstream_st *s, enum cudaStreamCaptureStatus *status,
                             unsigned long long *id_p, struct CUgraph_st **graph_p);
cudaError_t sim_capture_update_deps(struct CUstream_st *s, cudaGraphNode_t *deps, size_t num,
                                    unsigned flags);
/* The calling thread's capture mode (cudaStreamCaptureModeGlobal until it exchanges it). */
extern _Thread_local int sim_capture_tl_mode SIM_HIDDEN;
/* cudaThreadExchangeStreamCaptureMode: swaps the calling thread's mode with *mode. */
static inline cudaError_t sim_capture_exchange_mode(int *mode) {
  if (!mode || (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
                *mode != cudaStreamCaptureModeRelaxed))
    return cudaErrorInvalidValue;
  int old = sim_capture_tl_mode;
  sim_capture_tl_mode = *mode;
  *mode = old;
  return cudaSuccess;
}
/* A graph launched into a capturing stream: a child graph, replayed with its parent. Takes a
 * reference to `child` when recorded. */
cudaError_t sim_capture_add_graph(struct sim_capture *cap, struct CUstream_st *s,
                                  sim_nodes_t *child);

#endif
