/* Timing of collectives with CUDA events on the caller's stream, through the driver API (loaded
 * with dlopen, so any CUDA runtime works). A wrapped call records a start and an end event; the
 * decisions getCollInfo made while the call ran are attached to that pair; finished pairs are
 * harvested with cuEventQuery on later calls, so the caller never waits for the GPU.
 *
 * Attribution: a lone collective gets its own duration. A group (ncclGroupStart/End) is timed as a
 * whole on the first stream a collective of the group used, from just before the launch at the
 * outermost ncclGroupEnd to just after; its duration is shared among the group's buckets in
 * proportion to their bytes. Each thread has a fixed ring of event pairs, created on first use, so
 * after warm-up no call allocates. */
#include <string.h>

#include "shim_decide.h"
#include "shim_internal.h"
#include "shim_real.h"

#define RING 128
#define DECISIONS 16

typedef struct {
  CUevent start, end;
  int n;
  struct {
    ah_ckey_t *ck;
    uint64_t index;
    int source;
    uint32_t gen;
    size_t nbytes;
  } d[DECISIONS];
} record_t;

static _Thread_local record_t ring[RING];
static _Thread_local int ring_head, ring_count; /* oldest pending record, number pending */
static _Thread_local record_t *open_rec;       /* the record of the call being issued */
static _Thread_local int depth;                /* nesting of wrapped calls (ncclBcast -> ncclBroadcast) */
static _Thread_local unsigned long dropped;

/* Moves finished records' durations into their keys, oldest first, without waiting. */
static void harvest(void) {
  while (ring_count > 0) {
    record_t *r = &ring[ring_head];
    if (ah_cuda.EventQuery(r->end) != CUDA_SUCCESS) return; /* not finished (or an error): later */
    float ms = 0;
    if (ah_cuda.EventElapsedTime(&ms, r->start, r->end) == CUDA_SUCCESS && r->n > 0) {
      size_t total = 0;
      for (int i = 0; i < r->n; i++) total += r->d[i].nbytes;
      for (int i = 0; i < r->n; i++) {
        double share = total ? (double)r->d[i].nbytes / (double)total : 1.0 / r->n;
        ah_shim_record_time(r->d[i].ck, r->d[i].index, r->d[i].source, r->d[i].gen,
                            ms * 1000.0 * share, r->d[i].nbytes);
      }
    }
    ring_head = (ring_head + 1) % RING;
    ring_count--;
  }
}

void ah_timing_begin(cudaStream_t stream) {
  if (depth++ > 0 || !ah_shim_cuda_init()) return;
  harvest();
  if (ring_count == RING) { /* the GPU is far behind: skip timing this call rather than wait */
    dropped++;
    return;
  }
  record_t *r = &ring[(ring_head + ring_count) % RING];
  if (!r->start && (ah_cuda.EventCreate(&r->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
                    ah_cuda.EventCreate(&r->end, CU_EVENT_DEFAULT) != CUDA_SUCCESS)) {
    r->start = r->end = NULL;
    return;
  }
  if (ah_cuda.EventRecord(r->start, (CUstream)stream) != CUDA_SUCCESS) return;
  r->n = 0;
  open_rec = r;
}

void ah_timing_note(ah_ckey_t *ck, uint64_t index, int source, uint32_t gen, size_t bytes_per_rank) {
  record_t *r = open_rec;
  if (!r || r->n == DECISIONS) return;
  r->d[r->n].ck = ck;
  r->d[r->n].index = index;
  r->d[r->n].source = source;
  r->d[r->n].gen = gen;
  r->d[r->n].nbytes = bytes_per_rank;
  r->n++;
}

void ah_timing_harvest(void) {
  if (ah_cuda.loaded) harvest();
}

void ah_timing_end(cudaStream_t stream) {
  if (depth == 0 || --depth > 0) return;
  record_t *r = open_rec;
  open_rec = NULL;
  if (!r) return;
  if (r->n == 0 || ah_cuda.EventRecord(r->end, (CUstream)stream) != CUDA_SUCCESS) return;
  ring_count++;
  harvest();
}
