/* One rank of the tuner-plugin test job, started by ncclsim-run: creates a communicator, runs a
 * fixed sequence of collectives (a 4 MiB AllReduce, an AllGather, a 4 KiB AllReduce, then two
 * 4 MiB AllReduces in one group, which NCCL 2.22+ aggregates into one bucket), checks the first
 * result, and destroys the communicator. A failing call prints the call's index, its error code
 * and ncclGetLastError, and the rank exits 3, so the test can assert what sim/ reported.
 * SIMTUNER_JOB_PHI sets the communicator's interference. */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ncclsim.h"

static void report(int rank, int call, ncclResult_t r, ncclComm_t comm) {
  printf("rank %d call %d failed: %d %s\n", rank, call, (int)r, ncclGetLastError(comm));
  fflush(stdout);
}

int main(void) {
  const char *r = getenv("RANK"), *w = getenv("WORLD_SIZE"), *l = getenv("LOCAL_RANK");
  if (!r || !w || !l) {
    fprintf(stderr, "simtuner_job: run me under ncclsim-run\n");
    return 1;
  }
  int rank = atoi(r), world = atoi(w), local = atoi(l);
  cudaSetDevice(local);
  ncclUniqueId id;
  if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) return 1;
  if (ncclsimExchangeUniqueId("simtuner", rank == 0, &id) != 0) return 1;
  ncclComm_t comm;
  ncclResult_t res = ncclCommInitRank(&comm, world, id, rank);
  if (res != ncclSuccess) {
    printf("rank %d init failed: %d %s\n", rank, (int)res, ncclGetLastError(NULL));
    return 2;
  }
  const char *phi = getenv("SIMTUNER_JOB_PHI"); /* interference on the communicator */
  if (phi && ncclsimCommSetInterference(comm, atof(phi)) != ncclSuccess) return 1;
  cudaStream_t s;
  cudaStreamCreate(&s);
  size_t big = 1 << 20, ag = 64 * 1024, small = 1024;
  float *host = malloc(big * sizeof *host);
  float *a, *b, *c;
  cudaMalloc((void **)&a, big * sizeof *a);
  cudaMalloc((void **)&b, big * sizeof *b);
  cudaMalloc((void **)&c, big * sizeof *c * (world > 4 ? world : 4));
  if (!host || !a || !b || !c) return 1;
  for (size_t i = 0; i < big; i++) host[i] = (float)(rank + 1);
  cudaMemcpy(a, host, big * sizeof *a, cudaMemcpyHostToDevice);
  int rc = 0;
  if ((res = ncclAllReduce(a, b, big, ncclFloat, ncclSum, comm, s)) != ncclSuccess) {
    report(rank, 0, res, comm);
    rc = 3;
    goto done;
  }
  cudaStreamSynchronize(s);
  cudaMemcpy(host, b, big * sizeof *b, cudaMemcpyDeviceToHost);
  float want = (float)world * (world + 1) / 2;
  if (host[0] != want || host[big - 1] != want) {
    printf("rank %d call 0 wrong result %g (want %g)\n", rank, host[0], want);
    rc = 4;
    goto done;
  }
  if ((res = ncclAllGather(a, c, ag, ncclFloat, comm, s)) != ncclSuccess) {
    report(rank, 1, res, comm);
    rc = 3;
    goto done;
  }
  if ((res = ncclAllReduce(a, b, small, ncclFloat, ncclSum, comm, s)) != ncclSuccess) {
    report(rank, 2, res, comm);
    rc = 3;
    goto done;
  }
  ncclGroupStart();
  ncclResult_t r1 = ncclAllReduce(a, b, big, ncclFloat, ncclSum, comm, s);
  ncclResult_t r2 = ncclAllReduce(b, c, big, ncclFloat, ncclSum, comm, s);
  res = ncclGroupEnd();
  if (r1 != ncclSuccess || r2 != ncclSuccess || res != ncclSuccess) {
    report(rank, 3, res != ncclSuccess ? res : r1 != ncclSuccess ? r1 : r2, comm);
    rc = 3;
    goto done;
  }
  cudaStreamSynchronize(s);
  printf("rank %d ok vt=%.3f\n", rank, ncclsimStreamTime(s));
done:
  ncclCommDestroy(comm);
  cudaStreamDestroy(s);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  free(host);
  return rc;
}
