/* Timing of collectives with CUDA events on the caller's stream, through the driver API (loaded
 * with dlopen, so any CUDA runtime works), harvested with cuEventQuery on later calls so the caller
 * never waits for the GPU.
 *
 * A wrapped call (a lone collective, or an outermost ncclGroupEnd) opens a bracket. The start event
 * is recorded lazily, by the first decision inside the bracket that wants a time — getCollInfo runs
 * at launch planning, before NCCL enqueues its kernels, on the caller's thread for blocking
 * communicators — and the end event when the wrapped call returns. So a call whose decisions do
 * not want a time (a converged key between samples: see ah_shim_decide) touches no CUDA function
 * at all: no driver lock, no allocation.
 *
 * Attribution: a lone collective gets its own duration. A group is timed as a whole on the first
 * stream a collective of the group used; its duration is shared among the group's timed buckets in
 * proportion to their bytes. Decisions made on other threads (NCCL's own, for non-blocking
 * communicators) are not timed. Each thread's ring of event pairs is allocated and all its events
 * created at its first timed call, so after that nothing allocates; a thread's exit releases it.
 *
 * CUDA graphs: a bracket whose stream is being captured (cuStreamIsCapturing, legal during a
 * capture) records no event — an event recorded in a capture may never be queried — and its
 * decisions are told so (ah_thread.unusual.captured). The harvest's queries of earlier events run with the
 * thread's capture mode exchanged to relaxed: in the global mode a query from any thread while some
 * thread captures would invalidate that capture (CUDA's "potentially unsafe" calls). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "shim_decide.h"
#include "shim_internal.h"
#include "shim_real.h"
#include "shim_timing.h"

#define RING 64
#define DECISIONS 16

typedef struct {
  CUevent start, end;
  int n;
  struct {
    ah_shim_rankkey_t *ck;
    uint64_t index;
    int source;
    uint32_t gen;
    size_t nbytes;
  } d[DECISIONS];
} record_t;

typedef struct {
  record_t ring[RING];
  int head, count; /* oldest pending record, number pending */
  unsigned long dropped;
} thread_timing_t;

static AH_TLS_HOT thread_timing_t *tt; /* the bracket's own state is in ah_thread (shim_thread.h) */

/* Moves finished records' durations into their keys, oldest first, without waiting. */
static void harvest(void) {
  thread_timing_t *t = tt;
  if (!t || t->count == 0) return;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  int exchanged = ah_cuda.ThreadExchangeStreamCaptureMode &&
                  ah_cuda.ThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
  while (t->count > 0) {
    record_t *r = &t->ring[t->head];
    CUresult q = ah_cuda.EventQuery(r->end);
    if (q == CUDA_ERROR_NOT_READY) break; /* not finished: later */
    float ms = 0;
    if (q == CUDA_SUCCESS && ah_cuda.EventElapsedTime(&ms, r->start, r->end) == CUDA_SUCCESS &&
        r->n > 0) {
      size_t total = 0;
      for (int i = 0; i < r->n; i++) total += r->d[i].nbytes;
      for (int i = 0; i < r->n; i++) {
        double share = total ? (double)r->d[i].nbytes / (double)total : 1.0 / r->n;
        ah_shim_record_time(r->d[i].ck, r->d[i].index, r->d[i].source, r->d[i].gen,
                            (double)ms * 1000.0 * share, r->d[i].nbytes);
      }
    }
    t->head = (t->head + 1) % RING;
    t->count--;
  }
  ah_thread.records_pending = t->count;
  if (exchanged) ah_cuda.ThreadExchangeStreamCaptureMode(&mode); /* the thread's own mode back */
}

/* A record's pair of events; 0 (and none) when the driver cannot make them. */
static int events_create(record_t *r) {
  if (ah_cuda.EventCreate(&r->start, CU_EVENT_DEFAULT) == CUDA_SUCCESS) {
    if (ah_cuda.EventCreate(&r->end, CU_EVENT_DEFAULT) == CUDA_SUCCESS) return 1;
    ah_cuda.EventDestroy(r->start);
  }
  r->start = r->end = NULL;
  return 0;
}

/* An exiting thread's ring: its events destroyed (the driver frees one still pending once it
 * completes) and its memory freed, so that a job whose threads come and go, each issuing a few
 * collectives, does not keep 128 events per thread it ever had. Its pending times are dropped. The
 * key's destructor stays valid: the shim is linked -z nodelete (a tuner plugin NCCL dlcloses stays
 * loaded). */
static pthread_key_t ring_key;
static pthread_once_t ring_once = PTHREAD_ONCE_INIT;
static int ring_key_ok;

static void ring_release(void *ring) {
  thread_timing_t *t = ring;
  for (int i = 0; i < RING; i++) {
    if (t->ring[i].start) ah_cuda.EventDestroy(t->ring[i].start);
    if (t->ring[i].end) ah_cuda.EventDestroy(t->ring[i].end);
  }
  free(t);
  tt = NULL; /* the exiting thread's own */
  ah_thread.records_pending = 0;
}

static void ring_key_create(void) {
  ring_key_ok = pthread_key_create(&ring_key, ring_release) == 0;
}

/* The thread's ring, its events all made now, at its first timed call (one of a key's first
 * calls, all timed): a job's later sampled calls then create nothing. A pair the driver refuses now
 * is tried again when its record is next used. */
static thread_timing_t *ring_create(void) {
  thread_timing_t *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  for (int i = 0; i < RING; i++)
    if (!events_create(&t->ring[i])) break;
  pthread_once(&ring_once, ring_key_create);
  if (ring_key_ok) (void)pthread_setspecific(ring_key, t);
  return t;
}

/* Opens the bracket's record: records the start event. Returns NULL when timing is unavailable. */
static record_t *record_open(void) {
  if (!ah_shim_cuda_init() || ah_thread.unusual.captured) return NULL;
  if (!tt && !(tt = ring_create())) return NULL;
  if (tt->count == RING) { /* the GPU is far behind: skip timing this call rather than wait */
    tt->dropped++;
    return NULL;
  }
  record_t *r = &tt->ring[(tt->head + tt->count) % RING];
  if (!r->start && !events_create(r)) return NULL;
  if (ah_cuda.EventRecord(r->start, ah_thread.stream) != CUDA_SUCCESS) return NULL;
  r->n = 0;
  return r;
}

void ah_timing_note(ah_shim_rankkey_t *ck, uint64_t index, int source, uint32_t gen,
                    size_t bytes_per_rank) {
  if (ah_thread.timing_depth == 0) return; /* not inside a wrapped call of this thread */
  record_t *r = ah_thread.open_record;
  if (!r && !(r = ah_thread.open_record = record_open())) return;
  if (r->n == DECISIONS) return;
  r->d[r->n].ck = ck;
  r->d[r->n].index = index;
  r->d[r->n].source = source;
  r->d[r->n].gen = gen;
  r->d[r->n].nbytes = bytes_per_rank;
  r->n++;
}

cudaStream_t ah_timing_stream(void) {
  return ah_thread.timing_depth > 0 ? (cudaStream_t)ah_thread.stream : NULL;
}

void ah_timing_close(CUstream stream) {
  int saved = errno; /* a guest leaves errno as the real call left it */
  record_t *r = ah_thread.open_record;
  ah_thread.open_record = NULL;
  if (ah_cuda.EventRecord(r->end, stream) == CUDA_SUCCESS) {
    tt->count++;
    harvest();
  }
  errno = saved;
}

void ah_timing_harvest(void) {
  int saved = errno;
  if (ah_cuda.loaded) harvest();
  errno = saved;
}
