/* coll_rank: one rank of the collective suite as a process, started by ncclsim-run (RANK,
 * WORLD_SIZE, LOCAL_RANK). Rank 0 creates the unique id and passes it on through sim/'s rendezvous,
 * as a real job would through MPI or torchrun. Exits 0 when every check on this rank passed.
 *
 *   ncclsim-run -n N -- coll_rank [--large] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_suite.h"
#include "ncclsim.h"

int main(int argc, char **argv) {
  int large = argc > 1 && strcmp(argv[1], "--large") == 0;
  const char *r = getenv("RANK"), *w = getenv("WORLD_SIZE"), *l = getenv("LOCAL_RANK");
  if (!r || !w) {
    fprintf(stderr, "coll_rank: RANK and WORLD_SIZE are not set: run under ncclsim-run\n");
    return 2;
  }
  int rank = atoi(r), n = atoi(w), dev = l ? atoi(l) : 0;
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) {
    coll_report_nccl("coll_rank", "ncclGetUniqueId", ncclSystemError, NULL);
    return 1;
  }
  if (ncclsimExchangeUniqueId("coll", rank == 0, &id) != 0) return 1;
  coll_comms_t a, b;
  coll_tally_t tally = {0, 0, 0, 0};
  int rc = coll_comms_init_rank(n, rank, dev, id, 0, &a, &b);
  if (rc == 0) rc = coll_suite_run(&a, &b, large, &tally);
  printf("coll_rank %d/%d: %ld cases, %ld mismatched elements, %ld failed calls: %s\n", rank, n,
         tally.cases, tally.mismatches, tally.errors, rc == 0 ? "OK" : "FAILED");
  coll_comms_release(&b, 1);
  coll_comms_release(&a, 1);
  return rc == 0 ? 0 : 1;
}
