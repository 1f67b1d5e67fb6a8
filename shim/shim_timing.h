/* The timing bracket around a wrapped collective or an outermost group's end, inline: every call
 * of a job passes through it, and a call that times nothing (a settled key between samples) should
 * cost a few thread-local stores and the capture check. What it opens and closes is explained in
 * shim_timing.c, which holds the parts that touch CUDA events. */
#ifndef AH_SHIM_TIMING_H
#define AH_SHIM_TIMING_H

#include "shim_internal.h"
#include "shim_real.h"

/* Records the bracket's end event and harvests (the bracket timed something). Leaves errno
 * unchanged. */
void ah_timing_close(CUstream stream);

/* Whether `stream` is being captured. A stream the driver cannot answer for (the legacy stream
 * while a blocking stream captures answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) counts as captured:
 * recording an event there would break the user's capture. */
static inline int ah_timing_capturing(CUstream stream) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = ah_cuda.StreamIsCapturing(stream, &st);
  if (r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_INVALID_VALUE)
    return 0; /* NCCL will fail it */
  return r != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Opens a bracket (only the outermost of nested ones counts): notes its stream and whether it is
 * captured, and harvests what earlier brackets timed. */
static inline void ah_timing_begin(cudaStream_t stream) {
  ah_thread_t *t = &ah_thread;
  if (t->timing_depth++ > 0) return;
  t->stream = (CUstream)stream;
  t->open_record = NULL;
  t->unusual.captured = (unsigned char)ah_timing_capturing((CUstream)stream);
  if (t->records_pending) ah_timing_harvest();
}

/* Closes the bracket opened by the matching ah_timing_begin. Leaves errno unchanged. */
static inline void ah_timing_end(cudaStream_t stream) {
  ah_thread_t *t = &ah_thread;
  if (t->timing_depth == 0 || --t->timing_depth > 0) return;
  t->unusual.captured = 0;
  if (t->open_record) ah_timing_close((CUstream)stream);
}

#endif
