/* Unit tests of sim/'s stream capture and CUDA graphs, through libncclsim.so's exported entry
 * points: captured work is recorded, not done, and each graph launch does it again on the launch
 * stream; CUDA's rules for calls made during a capture (the prohibited call fails with CUDA's error
 * and invalidates the capture; relaxed mode allows it; thread-local mode only constrains its own
 * thread; EndCapture from the wrong thread, the legacy stream's implicit dependency, captured
 * events, unjoined forks); the driver API and cuGetProcAddress; an NCCL call captured and
 * replayed. Each case runs in its own process (Check's fork mode), so captures never leak between
 * cases. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ah_check.h"
#include "ncclsim.h"

#define N 1024

static cudaStream_t new_stream(unsigned flags) {
  cudaStream_t s;
  ck_assert_int_eq(cudaStreamCreateWithFlags(&s, flags), cudaSuccess);
  return s;
}

static enum cudaStreamCaptureStatus status_of(cudaStream_t s) {
  enum cudaStreamCaptureStatus st = (enum cudaStreamCaptureStatus) - 1;
  ck_assert_int_eq(cudaStreamIsCapturing(s, &st), cudaSuccess);
  return st;
}

START_TEST(test_capture_and_replay) {
  cudaStream_t s = new_stream(cudaStreamNonBlocking);
  static int a[N], b[N];
  for (int i = 0; i < N; i++) a[i] = i;
  memset(b, 0, sizeof b);
  double t0 = ncclsimStreamTime(s);
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusActive);
  ck_assert_int_eq(cudaMemcpyAsync(b, a, sizeof a, cudaMemcpyDeviceToDevice, s), cudaSuccess);
  ck_assert_int_eq(ncclsimStreamAddCompute(s, 100.0), cudaSuccess);
  ck_assert_int_eq(b[5], 0);                     /* recorded, not done */
  ck_assert_double_eq(ncclsimStreamTime(s), t0); /* and no time taken */
  enum cudaStreamCaptureStatus st;
  unsigned long long id = 0;
  cudaGraph_t during = NULL, g = NULL;
  ck_assert_int_eq(cudaStreamGetCaptureInfo(s, &st, &id, &during, NULL, NULL, NULL), cudaSuccess);
  ck_assert_int_eq(st, cudaStreamCaptureStatusActive);
  ck_assert_uint_ne(id, 0);
  ck_assert_ptr_nonnull(during);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
  ck_assert_ptr_eq(g, during);
  ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusNone);
  cudaGraphExec_t x;
  ck_assert_int_eq(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
  ck_assert_int_eq(cudaGraphDestroy(g), cudaSuccess); /* the executable keeps its own copy */
  for (int k = 1; k <= 3; k++) {
    a[7] = 1000 * k;
    double before = ncclsimStreamTime(s);
    ck_assert_int_eq(cudaGraphLaunch(x, s), cudaSuccess);
    ck_assert_int_eq(b[7], 1000 * k); /* data moves again at every launch */
    ck_assert_int_eq(b[N - 1], N - 1);
    ck_assert_double_gt(ncclsimStreamTime(s) - before, 100.0); /* compute + the copy */
  }
  ck_assert_int_eq(cudaGraphExecDestroy(x), cudaSuccess);
  ck_assert_int_eq(cudaGraphLaunch(x, s), cudaErrorInvalidResourceHandle); /* stale handle */
  ck_assert_int_eq(cudaGraphDestroy(g), cudaErrorInvalidValue);
}
END_TEST

START_TEST(test_sync_on_capturing_stream) {
  cudaStream_t s = new_stream(0);
  static int a[N], b[N];
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ck_assert_int_eq(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusInvalidated);
  ck_assert_int_eq(cudaMemcpyAsync(b, a, sizeof a, cudaMemcpyDeviceToDevice, s),
                   cudaErrorStreamCaptureInvalidated);
  cudaGraph_t g = (cudaGraph_t)&g;
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  ck_assert_ptr_null(g);
  ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusNone);
  ck_assert_int_eq(cudaStreamSynchronize(s), cudaSuccess); /* usable again */
  ck_assert_str_eq(cudaGetErrorName(cudaErrorStreamCaptureInvalidated),
                   "cudaErrorStreamCaptureInvalidated");
  /* the driver's query of a capturing stream, and of the device */
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ck_assert_int_eq(cuStreamQuery(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusInvalidated);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ck_assert_int_eq(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  /* rules of begin and end */
  ck_assert_int_eq(cudaStreamBeginCapture(NULL, cudaStreamCaptureModeGlobal),
                   cudaErrorStreamCaptureUnsupported);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaErrorIllegalState);
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
  ck_assert_ptr_nonnull(g);
  ck_assert_int_eq(cudaGraphDestroy(g), cudaSuccess);
}
END_TEST

START_TEST(test_captured_event) {
  cudaStream_t s = new_stream(cudaStreamNonBlocking);
  cudaEvent_t e, plain;
  ck_assert_int_eq(cudaEventCreate(&e), cudaSuccess);
  ck_assert_int_eq(cudaEventCreate(&plain), cudaSuccess);
  ck_assert_int_eq(cudaEventRecord(plain, s), cudaSuccess);
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ck_assert_int_eq(cudaEventRecord(e, s), cudaSuccess);
  ck_assert_int_eq(cudaEventQuery(plain), cudaSuccess); /* relaxed: an eager event may be queried */
  ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusActive);
  ck_assert_int_eq(cudaEventQuery(e), cudaErrorCapturedEvent); /* not even in relaxed mode */
  ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusInvalidated);
  cudaGraph_t g;
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  ck_assert_int_eq(cuEventSynchronize(e),
                   CUDA_ERROR_CAPTURED_EVENT); /* last recorded in a capture */
  /* a replay records it for real: then it may be queried */
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ck_assert_int_eq(ncclsimStreamAddCompute(s, 50.0), cudaSuccess);
  ck_assert_int_eq(cudaEventRecord(e, s), cudaSuccess);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
  cudaGraphExec_t x;
  ck_assert_int_eq(cudaGraphInstantiateWithFlags(&x, g, 0), cudaSuccess);
  ck_assert_int_eq(cudaEventSynchronize(e), cudaErrorCapturedEvent);
  ck_assert_int_eq(cudaEventRecord(plain, s), cudaSuccess);
  ck_assert_int_eq(cudaGraphLaunch(x, s), cudaSuccess);
  ck_assert_int_eq(cudaEventSynchronize(e), cudaSuccess);
  float ms = 0;
  ck_assert_int_eq(cudaEventElapsedTime(&ms, plain, e), cudaSuccess);
  ck_assert_float_eq_tol(ms, 0.05f, 1e-4f);
}
END_TEST

START_TEST(test_global_mode_same_thread) {
  cudaStream_t s = new_stream(cudaStreamNonBlocking);
  void *p = NULL;
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ck_assert_int_eq(cudaMalloc(&p, 64), cudaErrorStreamCaptureUnsupported);
  ck_assert_int_eq(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
  ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusInvalidated);
  cudaGraph_t g;
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  /* thread-local capture, own thread in global mode: still prohibited */
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ck_assert_int_eq(cudaEventQuery(NULL), cudaErrorInvalidResourceHandle); /* bad handle first */
  cudaEvent_t e;
  ck_assert_int_eq(cudaEventCreate(&e), cudaSuccess);
  ck_assert_int_eq(cudaEventQuery(e), cudaErrorStreamCaptureUnsupported);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
}
END_TEST

START_TEST(test_relaxed_mode_allows) {
  cudaStream_t s = new_stream(cudaStreamNonBlocking);
  void *p = NULL;
  cudaGraph_t g;
  /* a capture begun in relaxed mode */
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ck_assert_int_eq(cudaMalloc(&p, 64), cudaSuccess);
  ck_assert_int_eq(cudaFree(p), cudaSuccess);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
  ck_assert_int_eq(cudaGraphDestroy(g), cudaSuccess);
  /* a global capture, the thread switched to relaxed */
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
  ck_assert_int_eq(cudaThreadExchangeStreamCaptureMode(&m), cudaSuccess);
  ck_assert_int_eq(m, cudaStreamCaptureModeGlobal); /* the previous mode: the default */
  ck_assert_int_eq(cudaMalloc(&p, 64), cudaSuccess);
  ck_assert_int_eq(cudaFree(p), cudaSuccess);
  ck_assert_int_eq(cudaThreadExchangeStreamCaptureMode(&m), cudaSuccess);
  ck_assert_int_eq(m, cudaStreamCaptureModeRelaxed);
  ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusActive);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
  ck_assert_int_eq(cudaGraphDestroy(g), cudaSuccess);
}
END_TEST

/* ---- other threads --------------------------------------------------------------------------- */

typedef struct {
  int mode; /* the thread's capture interaction mode */
  cudaError_t malloc_r, query_r;
  cudaStream_t end_stream;
  cudaError_t end_r;
} other_t;

static void *other_main(void *arg) {
  other_t *o = arg;
  enum cudaStreamCaptureMode m = (enum cudaStreamCaptureMode)o->mode;
  cudaThreadExchangeStreamCaptureMode(&m);
  void *p = NULL;
  o->malloc_r = cudaMalloc(&p, 64);
  if (o->malloc_r == cudaSuccess) cudaFree(p);
  cudaEvent_t e;
  cudaEventCreate(&e);
  o->query_r = cudaEventQuery(e);
  if (o->end_stream) {
    cudaGraph_t g;
    o->end_r = cudaStreamEndCapture(o->end_stream, &g);
  }
  return NULL;
}

static other_t run_other(int mode, cudaStream_t end_stream) {
  other_t o = {mode, -1, -1, end_stream, -1};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, other_main, &o), 0);
  pthread_join(th, NULL);
  return o;
}

START_TEST(test_other_threads) {
  cudaStream_t s = new_stream(cudaStreamNonBlocking);
  cudaGraph_t g;
  /* thread-local capture: another thread in global mode is not constrained */
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  other_t o = run_other(cudaStreamCaptureModeGlobal, NULL);
  ck_assert_int_eq(o.malloc_r, cudaSuccess);
  ck_assert_int_eq(o.query_r, cudaSuccess);
  ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusActive);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
  /* global capture: another thread in thread-local mode is not constrained either */
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  o = run_other(cudaStreamCaptureModeThreadLocal, NULL);
  ck_assert_int_eq(o.malloc_r, cudaSuccess);
  o = run_other(cudaStreamCaptureModeRelaxed, NULL);
  ck_assert_int_eq(o.query_r, cudaSuccess);
  ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusActive);
  /* but one in global mode is, and its unsafe call invalidates this thread's capture */
  o = run_other(cudaStreamCaptureModeGlobal, NULL);
  ck_assert_int_eq(o.malloc_r, cudaErrorStreamCaptureUnsupported);
  ck_assert_int_eq(o.query_r, cudaErrorStreamCaptureUnsupported);
  ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusInvalidated);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
}
END_TEST

START_TEST(test_end_from_another_thread) {
  cudaStream_t s = new_stream(cudaStreamNonBlocking);
  cudaGraph_t g;
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  other_t o = run_other(cudaStreamCaptureModeRelaxed, s);
  ck_assert_int_eq(o.end_r, cudaErrorStreamCaptureWrongThread);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  o = run_other(cudaStreamCaptureModeRelaxed, s); /* relaxed captures may end anywhere */
  ck_assert_int_eq(o.end_r, cudaSuccess);
  ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusNone);
}
END_TEST

START_TEST(test_legacy_stream_implicit) {
  cudaStream_t s = new_stream(0); /* blocking: the legacy stream is ordered with it */
  static int a[N], b[N];
  enum cudaStreamCaptureStatus st;
  cudaGraph_t g;
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ck_assert_int_eq(cudaStreamIsCapturing(NULL, &st), cudaErrorStreamCaptureImplicit);
  ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusActive); /* the query invalidates nothing */
  ck_assert_int_eq(cudaMemcpyAsync(b, a, sizeof a, cudaMemcpyDeviceToDevice, NULL),
                   cudaErrorStreamCaptureImplicit);
  ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusInvalidated);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  /* a non-blocking stream's capture leaves the legacy stream alone */
  cudaStream_t nb = new_stream(cudaStreamNonBlocking);
  ck_assert_int_eq(cudaStreamBeginCapture(nb, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ck_assert_int_eq(cudaMemcpyAsync(b, a, sizeof a, cudaMemcpyDeviceToDevice, NULL), cudaSuccess);
  ck_assert_int_eq(cudaStreamEndCapture(nb, &g), cudaSuccess);
}
END_TEST

START_TEST(test_fork_join) {
  cudaStream_t s = new_stream(cudaStreamNonBlocking), side = new_stream(cudaStreamNonBlocking);
  cudaEvent_t fork, join, plain;
  cudaEventCreate(&fork);
  cudaEventCreate(&join);
  cudaEventCreate(&plain);
  static int a[N], b[N], c[N];
  for (int i = 0; i < N; i++) a[i] = i + 1;
  cudaGraph_t g;
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ck_assert_int_eq(cudaEventRecord(fork, s), cudaSuccess);
  ck_assert_int_eq(cudaStreamWaitEvent(side, fork, 0), cudaSuccess); /* side joins the capture */
  ck_assert_int_eq(status_of(side), cudaStreamCaptureStatusActive);
  ck_assert_int_eq(cudaMemcpyAsync(b, a, sizeof a, cudaMemcpyDeviceToDevice, side), cudaSuccess);
  ck_assert_int_eq(cudaEventRecord(join, side), cudaSuccess);
  ck_assert_int_eq(cudaStreamWaitEvent(s, join, 0), cudaSuccess);
  ck_assert_int_eq(cudaMemcpyAsync(c, b, sizeof b, cudaMemcpyDeviceToDevice, s), cudaSuccess);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
  ck_assert_int_eq(status_of(side), cudaStreamCaptureStatusNone);
  cudaGraphExec_t x;
  ck_assert_int_eq(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
  ck_assert_int_eq(cudaGraphLaunch(x, s), cudaSuccess);
  ck_assert_int_eq(c[N - 1], N);
  /* a fork never joined back */
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ck_assert_int_eq(cudaEventRecord(fork, s), cudaSuccess);
  ck_assert_int_eq(cudaStreamWaitEvent(side, fork, 0), cudaSuccess);
  ck_assert_int_eq(cudaMemcpyAsync(b, a, sizeof a, cudaMemcpyDeviceToDevice, side), cudaSuccess);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureUnjoined);
  ck_assert_int_eq(status_of(side), cudaStreamCaptureStatusNone);
  /* waiting on an uncaptured event needs cudaEventWaitExternal */
  ck_assert_int_eq(cudaEventRecord(plain, side), cudaSuccess);
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ck_assert_int_eq(cudaStreamWaitEvent(s, plain, cudaEventWaitExternal), cudaSuccess);
  ck_assert_int_eq(cudaStreamWaitEvent(s, plain, 0), cudaErrorStreamCaptureIsolation);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
}
END_TEST

START_TEST(test_driver_api) {
  CUstream s;
  ck_assert_int_eq(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  void *begin = NULL, *v2 = NULL;
  ck_assert_int_eq(cuGetProcAddress("cuStreamBeginCapture", &begin, 13000, 0, NULL), CUDA_SUCCESS);
  ck_assert_ptr_eq(begin, (void *)cuStreamBeginCapture); /* cuda.h maps the name to _v2 */
  ck_assert_int_eq(cuGetProcAddress("cuGraphLaunch", &v2, 13000, 0, NULL), CUDA_SUCCESS);
  ck_assert_ptr_eq(v2, (void *)cuGraphLaunch);
  ck_assert_int_eq(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  CUstreamCaptureStatus st;
  cuuint64_t id = 0;
  ck_assert_int_eq(cuStreamGetCaptureInfo(s, &st, &id, NULL, NULL, NULL, NULL), CUDA_SUCCESS);
  ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ck_assert_uint_ne(id, 0);
  static int a[N], b[N];
  a[3] = 33;
  ck_assert_int_eq(cudaMemcpyAsync(b, a, sizeof a, cudaMemcpyDeviceToDevice, s), cudaSuccess);
  ck_assert_int_eq(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph g;
  ck_assert_int_eq(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  const char *name = NULL;
  ck_assert_int_eq(cuGetErrorName(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, &name), CUDA_SUCCESS);
  ck_assert_str_eq(name, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED");
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  ck_assert_int_eq(cuThreadExchangeStreamCaptureMode(&m), CUDA_SUCCESS);
  ck_assert_int_eq(m, CU_STREAM_CAPTURE_MODE_GLOBAL);
  ck_assert_int_eq(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ck_assert_int_eq(cudaMemcpyAsync(b, a, sizeof a, cudaMemcpyDeviceToDevice, s), cudaSuccess);
  ck_assert_int_eq(cuCtxSynchronize(),
                   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); /* never in capture */
  ck_assert_int_eq(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  ck_assert_int_eq(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ck_assert_int_eq(cudaMemcpyAsync(b, a, sizeof a, cudaMemcpyDeviceToDevice, s), cudaSuccess);
  ck_assert_int_eq(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  CUgraphExec x;
  ck_assert_int_eq(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
  ck_assert_int_eq(b[3], 0);
  ck_assert_int_eq(cuGraphLaunch(x, s), CUDA_SUCCESS);
  ck_assert_int_eq(b[3], 33);
  ck_assert_int_eq(cuGraphExecDestroy(x), CUDA_SUCCESS);
  ck_assert_int_eq(cuGraphDestroy(g), CUDA_SUCCESS);
  ck_assert_int_eq(cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
}
END_TEST

/* A one-rank communicator: the AllReduce is recorded at capture and run by each launch. */
START_TEST(test_nccl_captured) {
  ncclComm_t comm;
  int dev = 0;
  ck_assert_int_eq(ncclCommInitAll(&comm, 1, &dev), ncclSuccess);
  cudaStream_t s = new_stream(cudaStreamNonBlocking);
  static float in[N], out[N];
  for (int i = 0; i < N; i++) in[i] = (float)i;
  cudaGraph_t g;
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ck_assert_int_eq(ncclAllReduce(in, out, N, ncclFloat, ncclSum, comm, s), ncclSuccess);
  ck_assert_float_eq(out[9], 0.0f);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
  cudaGraphExec_t x;
  ck_assert_int_eq(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
  for (int k = 1; k <= 5; k++) {
    in[9] = (float)(100 * k);
    double before = ncclsimStreamTime(s);
    ck_assert_int_eq(cudaGraphLaunch(x, s), cudaSuccess);
    ck_assert_float_eq(out[9], (float)(100 * k));
    ck_assert_double_gt(ncclsimStreamTime(s), before);
  }
  /* an invalidated capture: NCCL's launch fails with a CUDA error */
  ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ck_assert_int_eq(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  ck_assert_int_eq(ncclAllReduce(in, out, N, ncclFloat, ncclSum, comm, s), ncclUnhandledCudaError);
  ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
  ck_assert_int_eq(cudaGraphLaunch(x, s), cudaErrorLaunchFailure); /* its communicator is gone */
}
END_TEST

int main(void) {
  const TTest *const tests[] = {test_capture_and_replay,
                                test_sync_on_capturing_stream,
                                test_captured_event,
                                test_global_mode_same_thread,
                                test_relaxed_mode_allows,
                                test_other_threads,
                                test_end_from_another_thread,
                                test_legacy_stream_implicit,
                                test_fork_join,
                                test_driver_api,
                                test_nccl_captured};
  return ah_check_main("sim_graph", (ah_check_case_t){.name = "capture", .timeout = 30}, tests,
                       AH_CHECK_COUNT(tests));
}
