/* The entry points of stream capture and CUDA graphs, for the runtime (cudaStreamBeginCapture,
 * cudaGraphLaunch, ...) and the driver (their cuStream and cuGraph twins, and their cuGetProcAddress
 * entries): each checks its handles, calls capture (sim_cuda_capture.c) or the graph's records
 * (sim_cuda_graph.c) and returns the error in its API's codes, the runtime also recording it as the
 * thread's last error. Graph editing, conditional nodes and capturing into a graph are refused. */
#include <stdatomic.h>

#include "sim_graph_records.h"

static cudaError_t stream_or_error(cudaStream_t h, struct CUstream_st **s_p) {
  *s_p = sim_stream_resolve(h);
  return *s_p ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

static cudaError_t graph_launch(struct CUgraphExec_st *exec, cudaStream_t stream) {
  struct CUgraphExec_st *x = sim_graph_exec_resolve(exec);
  if (!x) return cudaErrorInvalidResourceHandle;
  struct CUstream_st *s;
  cudaError_t r = stream_or_error(stream, &s);
  if (r != cudaSuccess) return r;
  struct sim_capture *cap;
  if ((r = sim_capture_enqueue(s, &cap)) != cudaSuccess) return r;
  if (cap)
    return sim_capture_add_graph(cap, s, x->nodes); /* a child graph, replayed with its parent */
  sim_nodes_t *nodes = x->nodes; /* held for the replay: another thread may destroy the exec */
  atomic_fetch_add(&nodes->refs, 1);
  r = sim_graph_replay(nodes, s);
  sim_graph_nodes_release(nodes);
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
  return rt(r != cudaSuccess ? r : sim_capture_begin(s, (int)mode));
}

SIM_API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph) {
  struct CUstream_st *s;
  cudaError_t r = stream_or_error(stream, &s);
  return rt(r != cudaSuccess ? r : sim_capture_end(s, pGraph));
}

SIM_API cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                          enum cudaStreamCaptureStatus *pCaptureStatus) {
  struct CUstream_st *s;
  cudaError_t r = stream_or_error(stream, &s);
  return rt(r != cudaSuccess ? r : sim_capture_info(s, pCaptureStatus, NULL, NULL));
}

/* CUDA 13's signature; CUDA 12's runtime had the 6-argument _v2 and the 7-argument _v3 (below).
 * sim/ records no node handles, so the dependency set reads as empty. */
SIM_API cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
                                             enum cudaStreamCaptureStatus *captureStatus_out,
                                             unsigned long long *id_out, cudaGraph_t *graph_out,
                                             const cudaGraphNode_t **dependencies_out,
                                             const cudaGraphEdgeData **edgeData_out,
                                             size_t *numDependencies_out) {
  struct CUstream_st *s;
  cudaError_t r = stream_or_error(stream, &s);
  if (r == cudaSuccess) r = sim_capture_info(s, captureStatus_out, id_out, graph_out);
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
SIM_API cudaError_t cudaStreamGetCaptureInfo_v2(cudaStream_t stream,
                                                enum cudaStreamCaptureStatus *status,
                                                unsigned long long *id_out, cudaGraph_t *graph_out,
                                                const cudaGraphNode_t **deps_out,
                                                size_t *ndeps_out) {
  return cudaStreamGetCaptureInfo(stream, status, id_out, graph_out, deps_out, NULL, ndeps_out);
}
SIM_API cudaError_t cudaStreamGetCaptureInfo_v3(cudaStream_t stream,
                                                enum cudaStreamCaptureStatus *status,
                                                unsigned long long *id_out, cudaGraph_t *graph_out,
                                                const cudaGraphNode_t **deps_out,
                                                const cudaGraphEdgeData **edge_out,
                                                size_t *ndeps_out) {
  return cudaStreamGetCaptureInfo(stream, status, id_out, graph_out, deps_out, edge_out, ndeps_out);
}

SIM_API cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  return rt(sim_capture_exchange_mode((int *)mode));
}

SIM_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                         unsigned long long flags) {
  return rt(sim_graph_instantiate(pGraphExec, graph));
}
SIM_API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                  unsigned long long flags) {
  return rt(sim_graph_instantiate(pGraphExec, graph));
}
SIM_API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return rt(graph_launch(graphExec, stream));
}
SIM_API cudaError_t cudaGraphDestroy(cudaGraph_t graph) { return rt(sim_graph_destroy(graph)); }
SIM_API cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes) {
  return rt(sim_graph_get_nodes(graph, nodes, numNodes));
}
SIM_API cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node,
                                                 cudaGraphNode_t *pDependencies,
                                                 cudaGraphEdgeData *edgeData,
                                                 size_t *pNumDependencies) {
  return rt(sim_graph_node_deps(node, pDependencies, edgeData, pNumDependencies));
}
SIM_API cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t object,
                                              unsigned int count, unsigned int flags) {
  return rt(sim_graph_retain_user_object(graph, object, count, flags));
}
SIM_API cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream,
                                                        cudaGraphNode_t *dependencies,
                                                        const cudaGraphEdgeData *dependencyData,
                                                        size_t numDependencies,
                                                        unsigned int flags) {
  struct CUstream_st *s;
  cudaError_t r = stream_or_error(stream, &s);
  return rt(r != cudaSuccess ? r
                             : sim_capture_update_deps(s, dependencies, numDependencies, flags));
}
/* Graphs are built only by capture in sim/: editing one, conditional nodes and capturing into an
 * existing graph are refused with CUDA's "not supported". */
SIM_API cudaError_t cudaGraphAddNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                     const cudaGraphNode_t *pDependencies,
                                     const cudaGraphEdgeData *dependencyData,
                                     size_t numDependencies,
                                     struct cudaGraphNodeParams *nodeParams) {
  return rt(cudaErrorNotSupported);
}
SIM_API cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle *pHandle_out,
                                                     cudaGraph_t graph,
                                                     unsigned int defaultLaunchValue,
                                                     unsigned int flags) {
  return rt(cudaErrorNotSupported);
}
SIM_API cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                  const cudaGraphNode_t *dependencies,
                                                  const cudaGraphEdgeData *dependencyData,
                                                  size_t numDependencies,
                                                  enum cudaStreamCaptureMode mode) {
  return rt(cudaErrorNotSupported);
}
SIM_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  return rt(sim_graph_exec_destroy(graphExec));
}

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
CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *status,
                                cuuint64_t *id_out);
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *status,
                                   cuuint64_t *id_out, CUgraph *graph_out,
                                   const CUgraphNode **deps_out, size_t *ndeps_out);
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
  return r != CUDA_SUCCESS ? r : cu(sim_capture_begin(s, (int)mode));
}
SIM_API CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
  struct CUstream_st *s;
  CUresult r = cu_stream(hStream, &s);
  return r != CUDA_SUCCESS ? r : cu(sim_capture_end(s, phGraph));
}
SIM_API CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
  /* Asked by the autoha shim before every collective: with no capture anywhere, a live handle is
   * answered without resolving it (same answer, a few instructions). */
  if (captureStatus && atomic_load_explicit(&sim_capture_nactive, memory_order_acquire) == 0 &&
      (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD ||
       hStream->magic == SIM_STREAM_MAGIC)) {
    *captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  }
  struct CUstream_st *s;
  CUresult r = cu_stream(hStream, &s);
  return r != CUDA_SUCCESS
             ? r
             : cu(sim_capture_info(s, (enum cudaStreamCaptureStatus *)captureStatus, NULL, NULL));
}
SIM_API CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *status,
                                           cuuint64_t *id_out, CUgraph *graph_out,
                                           const CUgraphNode **deps_out,
                                           const CUgraphEdgeData **edge_out, size_t *ndeps_out) {
  struct CUstream_st *s;
  CUresult r = cu_stream(hStream, &s);
  unsigned long long id = 0;
  if (r == CUDA_SUCCESS)
    r = cu(sim_capture_info(s, (enum cudaStreamCaptureStatus *)status, &id, graph_out));
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
SIM_API CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *status,
                                        cuuint64_t *id_out) {
  return cuStreamGetCaptureInfo_v3(hStream, status, id_out, NULL, NULL, NULL, NULL);
}
SIM_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  return cu(sim_capture_exchange_mode((int *)mode));
}
SIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             unsigned long long flags) {
  return cu(sim_graph_instantiate(phGraphExec, hGraph));
}
SIM_API CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                       CUgraphNode *phErrorNode, char *logBuffer,
                                       size_t bufferSize) {
  if (phErrorNode) *phErrorNode = NULL;
  if (logBuffer && bufferSize) logBuffer[0] = 0;
  return cu(sim_graph_instantiate(phGraphExec, hGraph));
}
SIM_API CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                    CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize) {
  return cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}
SIM_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  return cu(graph_launch(hGraphExec, hStream));
}
SIM_API CUresult cuGraphDestroy(CUgraph hGraph) { return cu(sim_graph_destroy(hGraph)); }
SIM_API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  return cu(sim_graph_exec_destroy(hGraphExec));
}

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
