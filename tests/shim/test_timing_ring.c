/* Unit test of the timing ring's life (shim/shim_timing.c), in-process with the driver's event
 * functions replaced by counting stand-ins: a thread's first timed call makes all 64 event pairs of
 * its ring at once, later timed calls make none, and the thread's exit destroys every one of them
 * (a job whose threads come and go must not keep 128 events per thread it ever had). */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "ah_check.h"
#include "shim_internal.h"
#include "shim_real.h"
#include "shim_timing.h"

static atomic_int created, destroyed, recorded;
static atomic_uintptr_t next_event = 0x1000;

static CUresult fake_create(CUevent *e, unsigned int flags) {
  (void)flags;
  *e = (CUevent)atomic_fetch_add(&next_event, 16);
  atomic_fetch_add(&created, 1);
  return CUDA_SUCCESS;
}
static CUresult fake_destroy(CUevent e) {
  (void)e;
  atomic_fetch_add(&destroyed, 1);
  return CUDA_SUCCESS;
}
static CUresult fake_record(CUevent e, CUstream s) {
  (void)e, (void)s;
  atomic_fetch_add(&recorded, 1);
  return CUDA_SUCCESS;
}
static CUresult fake_query(CUevent e) { /* never finished: the records stay pending */
  (void)e;
  return CUDA_ERROR_NOT_READY;
}
static CUresult fake_elapsed(float *ms, CUevent a, CUevent b) {
  (void)a, (void)b;
  *ms = 1.0f;
  return CUDA_SUCCESS;
}
static CUresult fake_ctx(CUcontext *c) {
  *c = NULL;
  return CUDA_SUCCESS;
}
static CUresult fake_capturing(CUstream s, CUstreamCaptureStatus *st) {
  (void)s;
  *st = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

static void fake_driver(void) {
  (void)ah_shim_cuda_init(); /* its one-time resolution first, so that it cannot overwrite ours */
  ah_cuda.EventCreate = fake_create;
  ah_cuda.EventDestroy = fake_destroy;
  ah_cuda.EventRecord = fake_record;
  ah_cuda.EventQuery = fake_query;
  ah_cuda.EventElapsedTime = fake_elapsed;
  ah_cuda.CtxGetCurrent = fake_ctx;
  ah_cuda.StreamIsCapturing = fake_capturing;
  ah_cuda.ThreadExchangeStreamCaptureMode = NULL;
  ah_cuda.loaded = 1;
}

/* One wrapped call with one decision that wants a time, as a sampled collective makes. */
static void timed_call(ah_shim_rankkey_t *ck, uint64_t index) {
  cudaStream_t s = (cudaStream_t)(uintptr_t)0x5000;
  ah_timing_begin(s);
  ah_timing_note(ck, index, AH_SOURCE_DEFAULT, 0, 4096);
  ah_timing_end(s);
}

/* The counts while the thread still runs, read by the test's own thread: Check's assertions belong
 * there (outside its fork mode a failure on another thread would unwind the wrong stack). */
typedef struct {
  int created, destroyed, recorded;
} counts_t;

static void *three_timed_calls(void *arg) {
  static ah_shim_rankkey_t ck; /* only stored: no record finishes, so none is read */
  counts_t *seen = arg;
  for (uint64_t i = 0; i < 3; i++) timed_call(&ck, i);
  seen->created = atomic_load(&created);
  seen->destroyed = atomic_load(&destroyed);
  seen->recorded = atomic_load(&recorded);
  return NULL;
}

START_TEST(test_ring_made_once_and_released_at_thread_exit) {
  fake_driver();
  for (int round = 0; round < 2; round++) {
    atomic_store(&created, 0);
    atomic_store(&destroyed, 0);
    atomic_store(&recorded, 0);
    counts_t seen;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, three_timed_calls, &seen), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_int_eq(seen.created, 128); /* all at the first; none at the next two */
    ck_assert_int_eq(seen.destroyed, 0);
    ck_assert_int_eq(seen.recorded, 6);
    ck_assert_int_eq(atomic_load(&created), 128);
    ck_assert_int_eq(atomic_load(&destroyed), 128);
  }
}
END_TEST

int main(void) {
  const TTest *const tests[] = {
      test_ring_made_once_and_released_at_thread_exit,
  };
  return ah_check_main("timing_ring", (ah_check_case_t){.name = "ring", .timeout = 30}, tests,
                       AH_CHECK_COUNT(tests));
}
