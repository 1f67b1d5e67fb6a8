/* Unit tests of sim/'s CUDA runtime and driver stand-ins, through their public entry points in
 * libncclsim.so: devices, virtual stream clocks and events, CUDA's legacy-stream ordering, error
 * codes and last-error behaviour, the driver API over the same objects, the nvcc launch entry
 * points, and the unique-id rendezvous of ncclsim.h. The test runs with NCCLSIM_DEVICES=6 and
 * NCCLSIM_TIMEOUT_S=1 (set by CTest). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ah_check.h"
#include "ncclsim.h"

/* nvcc's launch entry points have no C prototypes in the public headers. */
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st *stream);
cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                       void *stream);

static float elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = -1;
  ck_assert_int_eq(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
  return ms;
}

START_TEST(test_devices) {
  int n = 0, d = -1;
  ck_assert_int_eq(cudaGetDeviceCount(&n), cudaSuccess);
  ck_assert_int_eq(n, 6);
  ck_assert_int_eq(cudaGetDevice(&d), cudaSuccess);
  ck_assert_int_eq(d, 0);
  ck_assert_int_eq(cudaSetDevice(6), cudaErrorInvalidDevice);
  ck_assert_int_eq(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  ck_assert_int_eq(cudaGetLastError(), cudaErrorInvalidDevice);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess); /* cleared */
  ck_assert_int_eq(cudaSetDevice(5), cudaSuccess);
  ck_assert_int_eq(cudaGetDevice(&d), cudaSuccess);
  ck_assert_int_eq(d, 5);
  struct cudaDeviceProp p;
  ck_assert_int_eq(cudaGetDeviceProperties(&p, 5), cudaSuccess);
  ck_assert_int_eq(p.major, 9);
  ck_assert_int_gt(p.multiProcessorCount, 0);
  ck_assert_ptr_nonnull(strstr(p.name, "ncclsim"));
  int sms = 0;
  ck_assert_int_eq(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 5), cudaSuccess);
  ck_assert_int_eq(sms, p.multiProcessorCount);
  ck_assert_str_eq(cudaGetErrorString(cudaErrorInvalidDevice), "invalid device ordinal");
  ck_assert_str_eq(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue");
}
END_TEST

START_TEST(test_stream_clock) {
  cudaStream_t s;
  cudaEvent_t e0, e1, e2;
  ck_assert_int_eq(cudaStreamCreate(&s), cudaSuccess);
  ck_assert_int_eq(cudaEventCreate(&e0), cudaSuccess);
  ck_assert_int_eq(cudaEventCreate(&e1), cudaSuccess);
  ck_assert_int_eq(cudaEventCreate(&e2), cudaSuccess);
  ck_assert_int_eq(cudaEventRecord(e0, s), cudaSuccess);
  ck_assert_int_eq(ncclsimStreamAddCompute(s, 250.0), cudaSuccess);
  ck_assert_int_eq(cudaEventRecord(e1, s), cudaSuccess);
  ck_assert_float_eq(elapsed(e0, e1), 0.25f);
  /* A copy takes its modelled time: 2 us + bytes / 25 GB/s host to device. */
  static char host[1 << 20], *dev;
  ck_assert_int_eq(cudaMalloc((void **)&dev, sizeof host), cudaSuccess);
  memset(host, 7, sizeof host);
  ck_assert_int_eq(cudaMemcpyAsync(dev, host, sizeof host, cudaMemcpyHostToDevice, s), cudaSuccess);
  ck_assert_int_eq(cudaEventRecord(e2, s), cudaSuccess);
  ck_assert_double_eq_tol(elapsed(e1, e2), (2.0 + (1 << 20) / 25e3) / 1000.0, 1e-6);
  ck_assert_int_eq(dev[12345], 7); /* the data moved */
  /* Elapsed time does not depend on wall time. */
  usleep(20000);
  ck_assert_float_eq(elapsed(e0, e1), 0.25f);
  /* Another stream waits for an event: its clock jumps to the event's time. */
  cudaStream_t t;
  ck_assert_int_eq(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking), cudaSuccess);
  double before = ncclsimStreamTime(t);
  ck_assert_int_eq(cudaStreamWaitEvent(t, e2, 0), cudaSuccess);
  ck_assert_double_ge(ncclsimStreamTime(t), ncclsimStreamTime(s));
  ck_assert_double_le(before, ncclsimStreamTime(t));
  ck_assert_int_eq(ncclsimStreamAddCompute(s, -1), cudaErrorInvalidValue);
  ck_assert_int_eq(ncclsimStreamSetInterference(s, 1.0), cudaErrorInvalidValue);
  ck_assert_int_eq(ncclsimStreamSetInterference(s, 0.3), cudaSuccess);
  cudaFree(dev);
  cudaStreamDestroy(t);
  cudaStreamDestroy(s);
}
END_TEST

/* CUDA's legacy default stream waits for the blocking streams of its device, and they wait for it;
 * non-blocking streams are independent of it. */
START_TEST(test_legacy_stream_order) {
  cudaStream_t blocking, nonblocking;
  ck_assert_int_eq(cudaSetDevice(1), cudaSuccess);
  ck_assert_int_eq(cudaStreamCreate(&blocking), cudaSuccess);
  ck_assert_int_eq(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking), cudaSuccess);
  double base = ncclsimStreamTime(NULL);
  ck_assert_int_eq(ncclsimStreamAddCompute(blocking, 1000), cudaSuccess);
  ck_assert_double_ge(ncclsimStreamTime(NULL), base + 1000);        /* legacy waits */
  ck_assert_double_lt(ncclsimStreamTime(nonblocking), base + 1000); /* non-blocking does not */
  ck_assert_int_eq(ncclsimStreamAddCompute(NULL, 500), cudaSuccess);
  ck_assert_double_ge(ncclsimStreamTime(blocking), base + 1500); /* and back */
  ck_assert_double_lt(ncclsimStreamTime(nonblocking), base + 1000);
  /* Other devices are unaffected. */
  ck_assert_int_eq(cudaSetDevice(2), cudaSuccess);
  ck_assert_double_lt(ncclsimStreamTime(NULL), base + 1000);
}
END_TEST

START_TEST(test_errors) {
  cudaStream_t s;
  cudaEvent_t a, b, nt;
  ck_assert_int_eq(cudaStreamCreate(&s), cudaSuccess);
  ck_assert_int_eq(cudaEventCreate(&a), cudaSuccess);
  ck_assert_int_eq(cudaEventCreate(&b), cudaSuccess);
  ck_assert_int_eq(cudaEventCreateWithFlags(&nt, cudaEventDisableTiming), cudaSuccess);
  float ms;
  ck_assert_int_eq(cudaEventElapsedTime(&ms, a, b),
                   cudaErrorInvalidResourceHandle); /* unrecorded */
  ck_assert_int_eq(cudaEventRecord(a, s), cudaSuccess);
  ck_assert_int_eq(cudaEventRecord(nt, s), cudaSuccess);
  ck_assert_int_eq(cudaEventElapsedTime(&ms, a, nt), cudaErrorInvalidResourceHandle);
  ck_assert_int_eq(cudaEventQuery(a), cudaSuccess);
  ck_assert_int_eq(cudaStreamDestroy(s), cudaSuccess);
  ck_assert_int_eq(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle); /* stale handle */
  ck_assert_int_eq(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
  ck_assert_int_eq(cudaStreamDestroy(NULL), cudaErrorInvalidResourceHandle);
  ck_assert_int_eq(cudaEventDestroy(b), cudaSuccess);
  ck_assert_int_eq(cudaEventRecord(b, NULL), cudaErrorInvalidResourceHandle);
  ck_assert_int_eq(cudaMemcpy(NULL, NULL, 0, (enum cudaMemcpyKind)9),
                   cudaErrorInvalidMemcpyDirection);
  ck_assert_int_eq(cudaGetLastError(), cudaErrorInvalidMemcpyDirection);
  void *p = (void *)1;
  ck_assert_int_eq(cudaMalloc(&p, 0), cudaSuccess);
  ck_assert_ptr_null(p);
}
END_TEST

START_TEST(test_driver) {
  ck_assert_int_eq(cuInit(0), CUDA_SUCCESS);
  int v = 0, n = 0;
  ck_assert_int_eq(cuDriverGetVersion(&v), CUDA_SUCCESS);
  ck_assert_int_ge(v, 12000);
  ck_assert_int_eq(cuDeviceGetCount(&n), CUDA_SUCCESS);
  ck_assert_int_eq(n, 6);
  CUdevice dev;
  ck_assert_int_eq(cuDeviceGet(&dev, 6), CUDA_ERROR_INVALID_DEVICE);
  ck_assert_int_eq(cuDeviceGet(&dev, 3), CUDA_SUCCESS);
  CUcontext ctx = NULL, cur = NULL;
  ck_assert_int_eq(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
  ck_assert_int_eq(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  ck_assert_int_eq(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  ck_assert_ptr_eq(cur, ctx);
  int d = -1;
  ck_assert_int_eq(cudaGetDevice(&d), cudaSuccess); /* the runtime sees the driver's context */
  ck_assert_int_eq(d, 3);
  ck_assert_int_eq(cuCtxSetCurrent((CUcontext)&d), CUDA_ERROR_INVALID_CONTEXT);
  /* Driver events on a runtime stream, as the autoha shim times collectives. */
  cudaStream_t s;
  ck_assert_int_eq(cudaStreamCreate(&s), cudaSuccess);
  CUevent a, b;
  ck_assert_int_eq(cuEventCreate(&a, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ck_assert_int_eq(cuEventCreate(&b, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ck_assert_int_eq(cuEventRecord(a, s), CUDA_SUCCESS);
  ncclsimStreamAddCompute(s, 40);
  ck_assert_int_eq(cuEventRecord(b, s), CUDA_SUCCESS);
  ck_assert_int_eq(cuEventQuery(b), CUDA_SUCCESS);
  float ms = 0;
  ck_assert_int_eq(cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
  ck_assert_float_eq(ms, 0.04f);
  /* cuGetProcAddress hands out the newest version of a name. */
  void *fn = NULL;
  ck_assert_int_eq(cuGetProcAddress("cuEventElapsedTime", &fn, 12000, 0, NULL), CUDA_SUCCESS);
  ck_assert_ptr_eq(fn, (void *)cuEventElapsedTime);
  ck_assert_int_eq(cuGetProcAddress("cuNoSuchThing", &fn, 12000, 0, NULL), CUDA_ERROR_NOT_FOUND);
  const char *str = NULL;
  ck_assert_int_eq(cuGetErrorString(CUDA_ERROR_INVALID_HANDLE, &str), CUDA_SUCCESS);
  ck_assert_str_eq(str, "invalid resource handle");
  ck_assert_int_eq(cuEventDestroy(a), CUDA_SUCCESS);
  ck_assert_int_eq(cuEventDestroy(a), CUDA_ERROR_INVALID_HANDLE);
  ck_assert_int_eq(cuStreamDestroy(s), CUDA_SUCCESS);
}
END_TEST

START_TEST(test_launch_entry_points) {
  dim3 g = {4, 2, 1}, b = {128, 1, 1}, g2, b2;
  size_t shm = 0;
  cudaStream_t st = NULL;
  ck_assert_uint_eq(__cudaPushCallConfiguration(g, b, 512, NULL), 0);
  ck_assert_int_eq(__cudaPopCallConfiguration(&g2, &b2, &shm, &st), cudaSuccess);
  ck_assert_uint_eq(g2.x, 4);
  ck_assert_uint_eq(b2.x, 128);
  ck_assert_uint_eq(shm, 512);
  ck_assert_int_eq(__cudaPopCallConfiguration(&g2, &b2, &shm, &st), cudaErrorInvalidConfiguration);
  static int fake_kernel;
  dim3 big = {2048, 1, 1};
  ck_assert_int_eq(cudaLaunchKernel(&fake_kernel, g, b, NULL, 0, NULL), cudaSuccess);
  ck_assert_int_eq(cudaLaunchKernel(&fake_kernel, g, big, NULL, 0, NULL),
                   cudaErrorInvalidConfiguration);
  ck_assert_int_eq(cudaGetLastError(), cudaErrorInvalidConfiguration);
}
END_TEST

START_TEST(test_rendezvous) {
  char dir[] = "/tmp/sim-rdzv-test-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  unsetenv("NCCLSIM_RDZV");
  ncclUniqueId id, got;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclsimExchangeUniqueId("t", 1, &id), -1); /* no folder */
  setenv("NCCLSIM_RDZV", dir, 1);
  ck_assert_int_eq(ncclsimExchangeUniqueId("a/b", 1, &id), -1); /* bad tag */
  ck_assert_int_eq(ncclsimExchangeUniqueId("t", 1, &id), 0);
  ck_assert_int_eq(ncclsimExchangeUniqueId("t", 1, &id), -1); /* a second root */
  memset(&got, 0, sizeof got);
  ck_assert_int_eq(ncclsimExchangeUniqueId("t", 0, &got), 0);
  ck_assert_mem_eq(&got, &id, sizeof id);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ck_assert_int_eq(ncclsimExchangeUniqueId("never", 0, &got), -1); /* NCCLSIM_TIMEOUT_S=1 */
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double waited = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
  ck_assert_double_ge(waited, 0.9);
  ck_assert_double_lt(waited, 5);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {test_devices,   test_stream_clock, test_legacy_stream_order,
                                test_errors,    test_driver,       test_launch_entry_points,
                                test_rendezvous};
  return ah_check_main("sim_cuda", (ah_check_case_t){.name = "cuda", .timeout = 30}, tests,
                       AH_CHECK_COUNT(tests));
}
