/* real_nccl_init: calls the real libnccl's ncclGetUniqueId and ncclCommInitRank (one rank) and
 * prints each result code with NCCL's error string and last-error text. On a machine without a GPU
 * the init fails; run with and without libautoha.so preloaded, the output must be identical. */
#include <stdio.h>
#include <string.h>

#include <nccl.h>

int main(void) {
  int version = 0;
  ncclResult_t v = ncclGetVersion(&version);
  printf("ncclGetVersion: %d (%s) version=%d\n", (int)v, ncclGetErrorString(v), version);
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  ncclResult_t r = ncclGetUniqueId(&id);
  printf("ncclGetUniqueId: %d (%s)\n", (int)r, ncclGetErrorString(r));
  ncclComm_t comm = NULL;
  ncclResult_t i = ncclCommInitRank(&comm, 1, id, 0);
  printf("ncclCommInitRank: %d (%s) last='%s'\n", (int)i, ncclGetErrorString(i),
         ncclGetLastError(NULL));
  if (i == ncclSuccess) {
    ncclResult_t d = ncclCommDestroy(comm);
    printf("ncclCommDestroy: %d (%s)\n", (int)d, ncclGetErrorString(d));
  }
  return 0;
}
