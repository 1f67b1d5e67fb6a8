/* NCCL's elastic communicator calls: ncclCommSuspend/Resume and ncclCommMemStats (modelled), and
 * ncclCommGetUniqueId/ncclCommGrow (refused).
 *
 * A suspended communicator refuses every operation (sim_comm_check) until it is resumed, as in
 * NCCL. sim/'s communicators hold no GPU memory — their staging is a host shared segment — so the
 * memory statistics are all 0 bytes, and only "suspended" carries information. Growing a
 * communicator (new ranks joining a live one) is not modelled: both calls fail with
 * ncclInvalidUsage and a last-error text that says so, instead of handing out an id no grow can use. */
#include "sim_nccl.h"

SIM_NCCL_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags) {
  ncclResult_t res = sim_comm_entry(comm, "ncclCommSuspend", SIM_SINCE_ELASTIC);
  if (res != ncclSuccess) return res;
  if (flags & ~NCCL_SUSPEND_MEM)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclCommSuspend: unknown flags 0x%x", flags);
  if (comm->suspended)
    return sim_error(ncclInvalidUsage,
                     "ncclsim: ncclCommSuspend: communicator %016llx is already "
                     "suspended",
                     (unsigned long long)comm->hash);
  comm->suspended = 1;
  return ncclSuccess;
}

SIM_NCCL_API(ncclResult_t, ncclCommResume, ncclComm_t comm) {
  ncclResult_t res = sim_comm_entry(comm, "ncclCommResume", SIM_SINCE_ELASTIC);
  if (res != ncclSuccess) return res;
  if (!comm->suspended)
    return sim_error(ncclInvalidUsage,
                     "ncclsim: ncclCommResume: communicator %016llx is not "
                     "suspended",
                     (unsigned long long)comm->hash);
  comm->suspended = 0;
  return ncclSuccess;
}

SIM_NCCL_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat,
             uint64_t *value) {
  ncclResult_t res = sim_comm_entry(comm, "ncclCommMemStats", SIM_SINCE_ELASTIC);
  if (res != ncclSuccess) return res;
  if (!value) return sim_error(ncclInvalidArgument, "ncclsim: ncclCommMemStats: value is NULL");
  switch (stat) {
    case ncclStatGpuMemSuspended: *value = comm->suspended ? 1 : 0; return ncclSuccess;
    case ncclStatGpuMemSuspend:
    case ncclStatGpuMemPersist:
    case ncclStatGpuMemTotal:
      *value = 0; /* no GPU memory: staging is host shared memory */
      return ncclSuccess;
  }
  return sim_error(ncclInvalidArgument, "ncclsim: ncclCommMemStats: unknown statistic %d",
                   (int)stat);
}

SIM_NCCL_API(ncclResult_t, ncclCommGetUniqueId, ncclComm_t comm, ncclUniqueId *uniqueId) {
  ncclResult_t res = sim_nccl_since("ncclCommGetUniqueId", SIM_SINCE_ELASTIC);
  if (res != ncclSuccess) return res;
  if (!sim_comm_usable(comm) || !uniqueId)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclCommGetUniqueId: invalid argument");
  return sim_error(ncclInvalidUsage,
                   "ncclsim: ncclCommGetUniqueId: growing a communicator is not "
                   "modelled by sim/");
}

SIM_NCCL_API(ncclResult_t, ncclCommGrow, ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId,
             int rank, ncclComm_t *newcomm, ncclConfig_t *config) {
  ncclResult_t res = sim_nccl_since("ncclCommGrow", SIM_SINCE_ELASTIC);
  if (res != ncclSuccess) return res;
  if (!newcomm) return sim_error(ncclInvalidArgument, "ncclsim: ncclCommGrow: newcomm is NULL");
  return sim_error(ncclInvalidUsage,
                   "ncclsim: ncclCommGrow: growing a communicator is not "
                   "modelled by sim/");
}
