/* Internal interface of stream capture and CUDA graphs (sim_cuda_capture.c, sim_cuda_graph.c), used
 * by the runtime and driver stand-ins, the stream extension API (sim_stream_ext.c; the device model
 * reaches the event rules through its hooks, sim_cuda.h) and the NCCL stand-in (sim_nccl_graph.c).
 *
 * The key choice: a capture is a list of work records in issue order, and a graph launch replays
 * that list on the launch stream, doing the work again (copies move data, collectives run with the
 * configuration chosen at capture) and moving the launch stream's clock. CUDA's rules for what may
 * not happen while a capture is in progress are checked here, in one place, by every API entry
 * point that CUDA documents as affected. */
#ifndef SIM_GRAPH_H
#define SIM_GRAPH_H

#include "sim_internal.h"

struct sim_capture;
struct sim_graph_nccl; /* a captured NCCL group (sim_nccl_graph.c) */

/* ---- rules, for the API entry points ---------------------------------------------------------- */

/* A "potentially unsafe" call (CUDA's stream capture modes): allocation, freeing, synchronous
 * copies, synchronisation and queries. Returns cudaSuccess, or cudaErrorStreamCaptureUnsupported
 * after invalidating the captures that forbid it: the calling thread's own captures not begun in
 * relaxed mode (unless the thread's mode is relaxed) and, when the thread's mode is global, every
 * other thread's capture begun in global mode. One atomic load when no capture is in progress. */
cudaError_t sim_capture_check_unsafe(void);

/* Work is being issued on stream `s`. Returns cudaSuccess when it may proceed (eagerly, or to be
 * recorded when *cap_p is set), cudaErrorStreamCaptureInvalidated when s belongs to an
 * invalidated capture, or cudaErrorStreamCaptureImplicit (capture invalidated) when s is its
 * device's legacy default stream and a blocking stream of that device is capturing. */
cudaError_t sim_capture_enqueue(struct CUstream_st *s, struct sim_capture **cap_p);

/* Synchronising with or querying stream `s`: cudaErrorStreamCaptureUnsupported (capture
 * invalidated) when s is capturing, cudaErrorStreamCaptureImplicit for the legacy stream of a
 * device with a capturing blocking stream, else the unsafe-call rule. */
cudaError_t sim_capture_check_sync_stream(struct CUstream_st *s);
/* Synchronising a whole device: cudaErrorStreamCaptureUnsupported (captures invalidated) when any
 * stream of the device is capturing, else the unsafe-call rule. */
cudaError_t sim_capture_check_sync_device(int device);
/* Querying or synchronising an event: cudaErrorCapturedEvent (its capture, if still in progress,
 * invalidated) when the event was last recorded in a capture, else the unsafe-call rule when
 * `unsafe`. */
cudaError_t sim_capture_check_event(struct CUevent_st *e, int unsafe);

/* ---- recording (called after sim_capture_enqueue set *cap_p) --------------------------------- */
cudaError_t sim_capture_add_copy(struct sim_capture *cap, struct CUstream_st *s, void *dst,
                                 const void *src, size_t bytes, int kind);
cudaError_t sim_capture_add_set(struct sim_capture *cap, struct CUstream_st *s, void *dst,
                                int value, size_t bytes);
cudaError_t sim_capture_add_compute(struct sim_capture *cap, struct CUstream_st *s, double us);
cudaError_t sim_capture_add_kernel(struct sim_capture *cap, struct CUstream_st *s);
/* n 32-bit words set to `value` (cuMemsetD32Async, cuStreamWriteValue32). */
cudaError_t sim_capture_add_set32(struct sim_capture *cap, struct CUstream_st *s, void *dst,
                                  uint32_t value, size_t n);
/* A host function (cudaLaunchHostFunc) called again at each replay. */
cudaError_t sim_capture_add_host(struct sim_capture *cap, struct CUstream_st *s, void (*fn)(void *),
                                 void *data);
/* What a graph does with a captured NCCL group, given by the NCCL side (sim_nccl_graph.c) with
 * the group, so that graphs never call up into the NCCL stand-in. replay: replays the group on `s`
 * (every rank must replay it) and returns ncclSuccess (as an int, to keep nccl.h out of this
 * header) or the NCCL error, with the last-error text set; free: releases it with its graph. */
typedef struct {
  int (*replay)(struct sim_graph_nccl *g, struct CUstream_st *s);
  void (*free)(struct sim_graph_nccl *g);
} sim_graph_nccl_ops_t;
cudaError_t sim_capture_add_nccl(struct sim_capture *cap, struct CUstream_st *s,
                                 struct sim_graph_nccl *g, const sim_graph_nccl_ops_t *ops);

/* Records `e` on `s`, capturing or not; cudaEventRecord and cuEventRecord end here. */
cudaError_t sim_capture_event_record(struct CUevent_st *e, struct CUstream_st *s);
/* cudaStreamWaitEvent with capture's rules: a stream waiting on a captured event joins its
 * capture; a capturing stream may wait on an event of another capture (cudaErrorStreamCaptureMerge)
 * or on an uncaptured one only with cudaEventWaitExternal (else cudaErrorStreamCaptureIsolation). */
cudaError_t sim_capture_wait_event(struct CUstream_st *s, struct CUevent_st *e, unsigned flags);

/* Whether `cap` is still in progress and valid (NCCL's check before recording a group). */
int sim_capture_valid(struct sim_capture *cap);

/* ---- user objects (sim_cuda_userobj.c) ------------------------------------------------------- */
struct sim_userobj_ref; /* a list of references a graph holds */
/* Adds `count` references to `object` to *list: new ones, or the caller's own when `move`.
 * cudaErrorInvalidValue for a dead object or a zero count. */
cudaError_t sim_userobj_take(struct sim_userobj_ref **list, cudaUserObject_t object, unsigned count,
                             int move);
/* Releases every reference of a list (destructors of objects that lose their last run now). */
void sim_userobj_drop_all(struct sim_userobj_ref *list);

/* cuGetProcAddress entries of the capture and graph functions, ended by a NULL name. */
typedef struct {
  const char *name;
  void *fn;
} sim_proc_t;
extern const sim_proc_t sim_graph_procs[];
extern const sim_proc_t sim_vmm_procs[]; /* virtual memory management (sim_cuda_vmm.c) */

#endif
