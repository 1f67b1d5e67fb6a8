/* Which NCCL release introduced each newer entry point, and the refusal under an emulated version
 * that predates it. A program built against newer headers and run on an older libnccl would fail
 * to link or find the symbol missing; sim/ exports every function whatever NCCLSIM_VERSION says, so
 * it refuses the call instead, with ncclInvalidUsage and a text naming the introducing version. */
#include "sim_nccl.h"

ncclResult_t sim_nccl_since(const char *fn, int since) {
  int v = sim_nccl_version();
  if (v >= since) return ncclSuccess;
  return sim_error(ncclInvalidUsage,
                   "ncclsim: %s was introduced in NCCL %d.%d.%d; the emulated NCCL %d.%d.%d "
                   "(NCCLSIM_VERSION) does not have it",
                   fn, since / 10000, since / 100 % 100, since % 100, v / 10000, v / 100 % 100,
                   v % 100);
}

ncclResult_t sim_comm_entry(const struct ncclComm *comm, const char *fn, int since) {
  ncclResult_t res = sim_nccl_since(fn, since);
  if (res != ncclSuccess) return res;
  return sim_comm_live(comm, fn);
}
