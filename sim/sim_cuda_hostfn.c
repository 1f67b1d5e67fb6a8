/* Host work in stream order: cudaLaunchHostFunc and cudaStreamAddCallback.
 *
 * Work on sim/ is done when it is issued, so by the time a host function is enqueued everything
 * before it on the stream has finished: the function is called at once, on the calling thread
 * (CUDA calls it on a thread of its own; either way it must not call CUDA). In a capture,
 * cudaLaunchHostFunc becomes a host node, called at each replay; cudaStreamAddCallback is refused
 * there, as in CUDA. */
#include "sim_cuda.h"
#include "sim_graph.h"

static cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess) sim_cuda_set_last_error(e);
  return e;
}

SIM_API cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData) {
  struct CUstream_st *s = sim_stream_resolve(stream);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  if (!fn) return ret(cudaErrorInvalidValue);
  struct sim_capture *cap;
  cudaError_t r = sim_capture_enqueue(s, &cap);
  if (r != cudaSuccess) return ret(r);
  if (cap) return ret(sim_capture_add_host(cap, s, fn, userData));
  fn(userData);
  return cudaSuccess;
}

SIM_API cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                          void *userData, unsigned int flags) {
  struct CUstream_st *s = sim_stream_resolve(stream);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  if (!callback || flags != 0) return ret(cudaErrorInvalidValue);
  struct sim_capture *cap;
  cudaError_t r = sim_capture_enqueue(s, &cap);
  if (r != cudaSuccess) return ret(r);
  if (cap) return ret(cudaErrorStreamCaptureUnsupported);
  callback(stream, cudaSuccess, userData);
  return cudaSuccess;
}
