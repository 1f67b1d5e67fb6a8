/* The extension API of ncclsim.h on streams: simulated compute issued on a stream (with
 * NCCLSIM_NOISE's jitter and a slow fault's factor, and recorded instead when the stream is
 * capturing), the interference a stream's compute adds, and a stream's virtual clock. It sits above
 * the device model (sim_device.c), stream capture (sim_cuda_capture.c), timing and faults. */
#include "ncclsim.h"
#include "sim_cuda.h"
#include "sim_graph.h"

SIM_API cudaError_t ncclsimStreamAddCompute(cudaStream_t stream, double us) {
  struct CUstream_st *s = sim_stream_resolve(stream);
  if (!s || !(us >= 0)) return cudaErrorInvalidValue;
  struct sim_capture *cap;
  cudaError_t r = sim_capture_enqueue(s, &cap);
  if (r != cudaSuccess) return r;
  us = sim_compute_jitter(us, s->device) * sim_fault_compute_factor(); /* NCCLSIM_FAULT=slow:... */
  if (cap) return sim_capture_add_compute(cap, s, us);
  sim_stream_advance(s, us);
  return cudaSuccess;
}

SIM_API cudaError_t ncclsimStreamSetInterference(cudaStream_t stream, double phi) {
  struct CUstream_st *s = sim_stream_resolve(stream);
  if (!s || !(phi >= 0 && phi < 1)) return cudaErrorInvalidValue;
  s->compute_phi = phi;
  return cudaSuccess;
}

SIM_API double ncclsimStreamTime(cudaStream_t stream) {
  struct CUstream_st *s = sim_stream_resolve(stream);
  return s ? sim_stream_time(s) : -1.0;
}
