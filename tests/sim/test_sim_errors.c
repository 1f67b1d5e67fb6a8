/* sim/'s answers to bad use, as NCCL gives them: the error code, and a ncclGetLastError text that
 * names what was wrong. Ranks are threads of this process (one per rank), so the tests are
 * in-process. Covered: bad arguments, ranks that disagree on a collective, a destroyed
 * communicator, send/receive sizes that differ, a peer that aborted, and the queries. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ah_check.h"

/* Two ranks as threads: each runs fn(rank, comm, arg) on its communicator and keeps the result. */
typedef ncclResult_t (*rank_fn)(int rank, ncclComm_t comm);
typedef struct {
  int rank;
  ncclUniqueId id;
  rank_fn fn;
  ncclResult_t res;
  char last[512];
  ncclComm_t comm;
} rank_arg_t;

static void *rank_main(void *p) {
  rank_arg_t *a = p;
  cudaSetDevice(a->rank);
  a->res = ncclCommInitRank(&a->comm, 2, a->id, a->rank);
  if (a->res == ncclSuccess) a->res = a->fn(a->rank, a->comm);
  snprintf(a->last, sizeof a->last, "%s", ncclGetLastError(a->comm));
  return NULL;
}

static void run_pair(rank_fn fn, rank_arg_t args[2]) {
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    memset(&args[r], 0, sizeof args[r]);
    args[r].rank = r;
    args[r].id = id;
    args[r].fn = fn;
    ck_assert_int_eq(pthread_create(&th[r], NULL, rank_main, &args[r]), 0);
  }
  for (int r = 0; r < 2; r++) ck_assert_int_eq(pthread_join(th[r], NULL), 0);
}

static float buf_a[64], buf_b[64];

START_TEST(test_bad_arguments) {
  ncclComm_t comm;
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(&comm, 4, id, 4), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "rank 4 is out of range"));
  ck_assert_int_eq(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "nranks"));
  ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  ck_assert_int_eq(ncclAllReduce(buf_a, buf_b, 4, (ncclDataType_t)99, ncclSum, comm, NULL),
                   ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "data type 99"));
  ck_assert_int_eq(ncclAllReduce(buf_a, buf_b, 4, ncclFloat, (ncclRedOp_t)77, comm, NULL),
                   ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "reduction operation 77"));
  ck_assert_int_eq(ncclBroadcast(buf_a, buf_b, 4, ncclFloat, 3, comm, NULL), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "root 3"));
  ck_assert_int_eq(ncclAllReduce(NULL, buf_b, 4, ncclFloat, ncclSum, comm, NULL),
                   ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "send buffer"));
  int v = 0;
  ck_assert_int_eq(ncclGetVersion(&v), ncclSuccess);
  ck_assert_int_eq(v, 22809);
  ck_assert_int_eq(ncclCommCount(comm, &v), ncclSuccess);
  ck_assert_int_eq(v, 1);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
  /* A destroyed communicator. */
  ck_assert_int_eq(ncclAllReduce(buf_a, buf_b, 4, ncclFloat, ncclSum, comm, NULL),
                   ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "destroyed"));
  ck_assert_int_eq(ncclCommDestroy(comm), ncclInvalidArgument);
  ck_assert_str_eq(ncclGetErrorString(ncclInvalidUsage), ncclGetErrorString(ncclInvalidUsage));
}
END_TEST

static ncclResult_t mismatched_counts(int rank, ncclComm_t comm) {
  return ncclAllReduce(buf_a, buf_b, rank == 0 ? 16 : 17, ncclFloat, ncclSum, comm, NULL);
}

START_TEST(test_mismatched_counts) {
  rank_arg_t args[2];
  run_pair(mismatched_counts, args);
  for (int r = 0; r < 2; r++) {
    ck_assert_int_eq(args[r].res, ncclInvalidUsage);
    ck_assert_msg(strstr(args[r].last, "16") && strstr(args[r].last, "17"),
                  "rank %d: the text should name both counts: %s", r, args[r].last);
    ncclCommDestroy(args[r].comm);
  }
}
END_TEST

static ncclResult_t mismatched_p2p(int rank, ncclComm_t comm) {
  static float s[64], d[64];
  ncclResult_t res = ncclGroupStart();
  if (rank == 0) res = ncclSend(s, 10, ncclFloat, 1, comm, NULL);
  else res = ncclRecv(d, 12, ncclFloat, 0, comm, NULL);
  ncclResult_t end = ncclGroupEnd();
  return res != ncclSuccess ? res : end;
}

START_TEST(test_mismatched_sendrecv) {
  rank_arg_t args[2];
  run_pair(mismatched_p2p, args);
  ck_assert_int_eq(args[1].res, ncclInvalidUsage);
  ck_assert_msg(strstr(args[1].last, "48 bytes") && strstr(args[1].last, "40 bytes"),
                "the receiver's text should name both sizes: %s", args[1].last);
  for (int r = 0; r < 2; r++) ncclCommAbort(args[r].comm);
}
END_TEST

static ncclResult_t one_aborts(int rank, ncclComm_t comm) {
  if (rank == 1) return ncclCommAbort(comm);
  return ncclAllReduce(buf_a, buf_b, 8, ncclFloat, ncclSum, comm, NULL);
}

START_TEST(test_peer_aborted) {
  rank_arg_t args[2];
  run_pair(one_aborts, args);
  ck_assert_int_eq(args[1].res, ncclSuccess);
  ck_assert_int_eq(args[0].res, ncclRemoteError);
  ck_assert_msg(strstr(args[0].last, "rank 1") && strstr(args[0].last, "abort"),
                "the survivor's text should name the aborted rank: %s", args[0].last);
  ncclResult_t async = ncclSuccess;
  ck_assert_int_eq(ncclCommGetAsyncError(args[0].comm, &async), ncclSuccess);
  ck_assert_int_ne(async, ncclSuccess);
  ncclCommAbort(args[0].comm);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {test_bad_arguments, test_mismatched_counts,
                                test_mismatched_sendrecv, test_peer_aborted};
  return ah_check_main("sim_errors", (ah_check_case_t){.name = "errors", .timeout = 30}, tests,
                       AH_CHECK_COUNT(tests));
}
