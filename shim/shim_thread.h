/* The state the shim keeps per thread on a collective's path, in one block.
 *
 * A thread-local of a shared library is reached through its offset in the GOT (initial-exec: one
 * load in each function that touches it, then %fs-relative accesses). A settled call's path — the
 * collective's wrapper, the group's end with its timing bracket, the tuner's short path — touches
 * a dozen of them; kept in one block they cost that load once per function. Each field is written
 * only by the file named beside it, or by the inline functions of its header (shim_timing.h's
 * bracket, run inside shim_nccl.c's wrappers). */
#ifndef AH_SHIM_THREAD_H
#define AH_SHIM_THREAD_H

#include <cuda.h>
#include <cuda_runtime_api.h>

/* Thread-locals read on every call use the initial-exec model (a load off the thread pointer, no
 * __tls_get_addr call): the shim is preloaded, so its TLS is static. Kept small, so that a dlopen
 * of the shim as a plain tuner plugin still fits glibc's static-TLS surplus. */
#define AH_TLS_HOT _Thread_local __attribute__((tls_model("initial-exec")))

struct ah_comm;

typedef struct {
  /* shim_nccl.c: groups and wrapped collectives */
  int group_depth;           /* groups opened while the shim was enabled */
  int group_has_stream;      /* a collective of the open group named its stream */
  int coll_depth;            /* nesting of wrapped collectives (ncclBcast -> ncclBroadcast) */
  cudaStream_t group_stream; /* the first stream a collective of the open group used */
  /* The decisions' unusual cases, either of which sends a decision down the full path: one test
   * of `any` on the short path. */
  union {
    struct {
      unsigned char captured;   /* shim_timing.c: the open bracket's stream is being captured */
      unsigned char simulating; /* shim_decide.c: inside ncclGroupSimulateEnd */
    };
    unsigned short any;
  } unusual;
  /* shim_timing.c: the timing bracket */
  int timing_depth;    /* nesting of brackets (a wrapped call inside another) */
  int records_pending; /* records wait to be harvested */
  CUstream stream;     /* the stream of the open (or latest) bracket */
  void *open_record;   /* the record of the bracket's call (NULL: nothing timed yet) */
  /* shim_decide.c */
  struct ah_comm *chunk_comm; /* whose v6 chunk is remembered (NULL: none) */
  /* shim_comm.c */
  int comm_pending; /* this thread pushed or shared pending communicator entries */
} ah_thread_t;

extern AH_TLS_HOT ah_thread_t ah_thread;

#endif
