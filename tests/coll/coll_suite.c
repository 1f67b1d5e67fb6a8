/* The collective suite and communicator set-up shared by the process driver (coll_rank.c) and the
 * threaded Check cases (test_coll.c), so every configuration runs exactly the same checks. */
#include <stdio.h>
#include <string.h>

#include "coll_suite.h"

int coll_suite_run(const coll_comms_t *a, const coll_comms_t *b, int large, coll_tally_t *tally) {
  for (int grouped = a->nlocal > 1 ? 1 : 0; grouped < 2; grouped++)
    for (int coll = 0; coll < COLL_NCOLLS; coll++)
      if (coll_matrix_run(a, coll, grouped, tally) != 0) return -1;
  if (coll_grouped_run(a, b, tally) != 0) return -1;
  if (large && coll_large_run(a, a->nlocal > 1, tally) != 0) return -1;
  return tally->mismatches || tally->errors ? -1 : 0;
}

int coll_comms_init_rank(int nranks, int rank, int dev, ncclUniqueId id, int grouped,
                         coll_comms_t *a, coll_comms_t *b) {
  memset(a, 0, sizeof *a);
  memset(b, 0, sizeof *b);
  a->nranks = b->nranks = nranks;
  a->nlocal = b->nlocal = 1;
  a->rank[0] = b->rank[0] = rank;
  a->dev[0] = b->dev[0] = dev;
  if (cudaSetDevice(dev) != cudaSuccess) {
    fprintf(stderr, "coll rank %d: cudaSetDevice(%d) failed\n", rank, dev);
    return -1;
  }
  ncclResult_t res = grouped ? ncclGroupStart() : ncclSuccess;
  if (res == ncclSuccess) res = ncclCommInitRank(&a->comm[0], nranks, id, rank);
  if (grouped) {
    ncclResult_t end = ncclGroupEnd();
    if (res == ncclSuccess) res = end;
  }
  if (res != ncclSuccess) {
    coll_report_nccl("coll", "ncclCommInitRank", res, NULL);
    return -1;
  }
  /* The split child keeps the parent's numbering (key = rank, one colour). */
  res = ncclCommSplit(a->comm[0], 0, rank, &b->comm[0], NULL);
  if (res != ncclSuccess) {
    coll_report_nccl("coll", "ncclCommSplit", res, a->comm[0]);
    return -1;
  }
  return coll_comms_streams(a) == 0 && coll_comms_streams(b) == 0 ? 0 : -1;
}

int coll_comms_init_all(int n, coll_comms_t *a, coll_comms_t *b) {
  memset(a, 0, sizeof *a);
  memset(b, 0, sizeof *b);
  if (n > COLL_MAX_LOCAL) return -1;
  a->nranks = b->nranks = a->nlocal = b->nlocal = n;
  for (int r = 0; r < n; r++) a->rank[r] = b->rank[r] = a->dev[r] = b->dev[r] = r;
  ncclResult_t res = ncclCommInitAll(a->comm, n, NULL);
  if (res != ncclSuccess) {
    coll_report_nccl("coll", "ncclCommInitAll", res, NULL);
    return -1;
  }
  ncclUniqueId id;
  res = ncclGetUniqueId(&id);
  if (res == ncclSuccess) res = ncclGroupStart();
  for (int r = 0; r < n && res == ncclSuccess; r++) {
    if (cudaSetDevice(r) != cudaSuccess) return -1;
    res = ncclCommInitRank(&b->comm[r], n, id, r);
  }
  ncclResult_t end = ncclGroupEnd();
  if (res == ncclSuccess) res = end;
  if (res != ncclSuccess) {
    coll_report_nccl("coll", "grouped ncclCommInitRank", res, NULL);
    return -1;
  }
  return coll_comms_streams(a) == 0 && coll_comms_streams(b) == 0 ? 0 : -1;
}
