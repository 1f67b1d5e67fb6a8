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
 * communicators) are not timed. Each thread's ring of event pairs is allocated and its events
 * created on first use, so after warm-up nothing allocates.
 *
 * CUDA graphs: a bracket whose stream is being captured (cuStreamIsCapturing, legal during a
 * capture) records no event — an event recorded in a capture may never be queried — and its
 * decisions are told so (ah_timing_captured). The harvest's queries of earlier events run with the
 * thread's capture mode exchanged to relaxed: in the global mode a query from any thread while some
 * thread captures would invalidate that capture (CUDA's "potentially unsafe" calls). */
#include <stdlib.h>
#include <string.h>

#include "shim_decide.h"
#include "shim_internal.h"
#include "shim_real.h"

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
  int head, count;      /* oldest pending record, number pending */
  unsigned long dropped;
} thread_timing_t;

static AH_TLS_HOT thread_timing_t *tt;
static AH_TLS_HOT record_t *open_rec;    /* the record of the call being issued */
static AH_TLS_HOT int depth;             /* nesting of wrapped calls (ncclBcast -> ncclBroadcast) */
AH_TLS_HOT CUstream ah_timing_cur_stream; /* stream of the open (or latest) bracket */

/* Whether `stream` is being captured. A stream the driver cannot answer for (the legacy stream
 * while a blocking stream captures answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) counts as captured:
 * recording an event there would break the user's capture. */
static int stream_capturing(CUstream stream) {
  if (!ah_cuda.StreamIsCapturing) return 0;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = ah_cuda.StreamIsCapturing(stream, &st);
  if (r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_INVALID_VALUE) return 0; /* NCCL will fail it */
  return r != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE;
}

AH_TLS_HOT int ah_timing_captured; /* the open bracket's stream is being captured (shim_internal.h) */

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
    if (q == CUDA_SUCCESS && ah_cuda.EventElapsedTime(&ms, r->start, r->end) == CUDA_SUCCESS && r->n > 0) {
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
  if (exchanged) ah_cuda.ThreadExchangeStreamCaptureMode(&mode); /* the thread's own mode back */
}

void ah_timing_begin(cudaStream_t stream) {
  if (depth++ > 0) return;
  ah_timing_cur_stream = (CUstream)stream;
  open_rec = NULL;
  if (__builtin_expect(!ah_cuda.StreamIsCapturing, 0)) (void)ah_shim_cuda_init();
  ah_timing_captured = stream_capturing(ah_timing_cur_stream);
  if (tt && tt->count > 0) harvest();
}

/* Opens the bracket's record: records the start event. Returns NULL when timing is unavailable. */
static record_t *record_open(void) {
  if (!ah_shim_cuda_init() || ah_timing_captured) return NULL;
  if (!tt && !(tt = calloc(1, sizeof *tt))) return NULL;
  if (tt->count == RING) { /* the GPU is far behind: skip timing this call rather than wait */
    tt->dropped++;
    return NULL;
  }
  record_t *r = &tt->ring[(tt->head + tt->count) % RING];
  if (!r->start && (ah_cuda.EventCreate(&r->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
                    ah_cuda.EventCreate(&r->end, CU_EVENT_DEFAULT) != CUDA_SUCCESS)) {
    r->start = r->end = NULL;
    return NULL;
  }
  if (ah_cuda.EventRecord(r->start, ah_timing_cur_stream) != CUDA_SUCCESS) return NULL;
  r->n = 0;
  return r;
}

void ah_timing_note(ah_shim_rankkey_t *ck, uint64_t index, int source, uint32_t gen, size_t bytes_per_rank) {
  if (depth == 0) return; /* not inside a wrapped call of this thread */
  record_t *r = open_rec;
  if (!r && !(r = open_rec = record_open())) return;
  if (r->n == DECISIONS) return;
  r->d[r->n].ck = ck;
  r->d[r->n].index = index;
  r->d[r->n].source = source;
  r->d[r->n].gen = gen;
  r->d[r->n].nbytes = bytes_per_rank;
  r->n++;
}

cudaStream_t ah_timing_stream(void) { return depth > 0 ? (cudaStream_t)ah_timing_cur_stream : NULL; }

void ah_timing_end(cudaStream_t stream) {
  if (depth == 0 || --depth > 0) return;
  ah_timing_captured = 0;
  record_t *r = open_rec;
  open_rec = NULL;
  if (!r) return;
  if (ah_cuda.EventRecord(r->end, (CUstream)stream) != CUDA_SUCCESS) return;
  tt->count++;
  harvest();
}

void ah_timing_harvest(void) {
  if (ah_cuda.loaded) harvest();
}
