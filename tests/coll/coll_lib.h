/* coll_lib.h: runs NCCL collectives with generated inputs and checks every output element against
 * a reference computed here, using only the public NCCL and CUDA runtime APIs.
 *
 * Inputs are a pure function of (case seed, rank, element index), so every rank computes the
 * reference for the whole communicator without exchanging anything. Values are chosen per type and
 * operator so the exact result does not depend on the order in which NCCL reduces (the
 * opening comment of coll_lib.c says how). */
#ifndef COLL_LIB_H
#define COLL_LIB_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "coll_types.h"

enum {
  COLL_ALLREDUCE,
  COLL_BROADCAST,
  COLL_BCAST,
  COLL_REDUCE,
  COLL_ALLGATHER,
  COLL_REDUCESCATTER,
  COLL_SENDRECV,
  COLL_NCOLLS
};

#define COLL_MAX_LOCAL 8

/* The ranks of one communicator that the calling thread drives: one for a rank per process or per
 * thread, all of them for ncclCommInitAll driven from one thread (calls then always go in a group). */
typedef struct {
  int nranks;
  int nlocal;
  ncclComm_t comm[COLL_MAX_LOCAL];
  int rank[COLL_MAX_LOCAL];
  int dev[COLL_MAX_LOCAL];
  cudaStream_t stream[COLL_MAX_LOCAL];
} coll_comms_t;

typedef struct {
  int coll;
  ncclDataType_t dt;
  ncclRedOp_t op; /* reducing collectives only */
  size_t count;   /* NCCL's count: per rank for AllGather and ReduceScatter */
  int root;       /* Broadcast, Bcast, Reduce */
  int inplace;
  uint64_t seed;
} coll_case_t;

/* One collective in flight: a case on a communicator, with device buffers per local rank. */
typedef struct {
  coll_case_t c;
  const coll_comms_t *cs;
  void *dsend[COLL_MAX_LOCAL];
  void *drecv[COLL_MAX_LOCAL];
  void *dbase[COLL_MAX_LOCAL]; /* what was allocated (in place: one buffer) */
  void *dbase2[COLL_MAX_LOCAL];
} coll_op_t;

/* Tallies of a run. `errors` counts NCCL or CUDA calls that failed (the run stops at the first). */
typedef struct {
  long cases, mismatches, errors;
  int printed;
} coll_tally_t;

const char *coll_name(int coll);
int coll_reduces(int coll);

/* Creates the streams of a comm set on its devices. Returns 0, or -1 with a message on stderr. */
int coll_comms_streams(coll_comms_t *cs);
void coll_comms_release(coll_comms_t *cs, int destroy);

/* Runs ops[0..nops) on their communicators in one ncclGroupStart/End when `grouped` (always when a
 * comm set drives several ranks), else one call at a time; then checks every output element and
 * that out-of-place inputs are unchanged. Adds to `tally`. Returns 0, or -1 when a NCCL or CUDA
 * call failed (the message, with ncclGetLastError's text, is on stderr). */
int coll_ops_run(coll_op_t *ops, int nops, int grouped, coll_tally_t *tally);

/* Runs one case on a comm set (see coll_ops_run). */
int coll_case_run(const coll_comms_t *cs, const coll_case_t *c, int grouped, coll_tally_t *tally);

/* Runs collective `coll` over every data type x reduction operator (if it reduces) x in place and
 * out of place, with counts that are not multiples of the rank count and roots that rotate.
 * Returns 0, or -1 when a call failed. */
int coll_matrix_run(const coll_comms_t *cs, int coll, int grouped, coll_tally_t *tally);

/* Runs every data type, each in one group holding every collective on `a` and three more on `b`
 * (a second communicator over the same ranks). Returns 0, or -1 when a call failed. */
int coll_grouped_run(const coll_comms_t *a, const coll_comms_t *b, coll_tally_t *tally);

/* Runs collectives large enough to span many internal chunks (3M-element int32 AllReduce, ...)
 * and zero-count calls. Returns 0, or -1 when a call failed. */
int coll_large_run(const coll_comms_t *cs, int grouped, coll_tally_t *tally);

/* Prints a one-line NCCL failure to stderr: "<who>: NCCL error <code> (<string>) in <what>: <last>". */
void coll_report_nccl(const char *who, const char *what, ncclResult_t res, ncclComm_t comm);

#endif
