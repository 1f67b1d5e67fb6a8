/* NCCL's one-sided RMA (ncclPutSignal, ncclSignal, ncclWaitSignal) and the host side of its device
 * API (ncclDevCommCreate/Destroy, ncclGetPeerDevicePointer, ncclGetLsaMultimemDevicePointer).
 *
 * Neither is modelled. One-sided puts need a peer's window mapped into this process, and sim/
 * registers windows on each rank alone; the device API exists for kernels, which sim/ does not
 * execute. Each call checks its arguments as NCCL does, then fails with ncclInvalidUsage and a
 * last-error text naming what sim/ lacks — never a success that moved nothing. */
#include "sim_nccl.h"

static ncclResult_t unmodelled(const char *fn, const char *what) {
  return sim_error(ncclInvalidUsage, "ncclsim: %s: %s is not modelled by sim/", fn, what);
}

static ncclResult_t check(ncclComm_t comm, int peer, const char *fn, int since) {
  ncclResult_t res = sim_nccl_since(fn, since);
  if (res != ncclSuccess) return res;
  if ((res = sim_comm_check(comm, fn)) != ncclSuccess) return res;
  if (peer < 0 || peer >= comm->nranks)
    return sim_error(ncclInvalidArgument, "ncclsim: %s: peer %d is out of range [0, %d)", fn, peer,
                     comm->nranks);
  return ncclSuccess;
}

SIM_NCCL_API(ncclResult_t, ncclPutSignal, const void *localbuff, size_t count,
             ncclDataType_t datatype, int peer, ncclWindow_t peerWin, size_t peerWinOffset,
             int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t res = check(comm, peer, "ncclPutSignal", SIM_SINCE_RMA);
  return res != ncclSuccess ? res : unmodelled("ncclPutSignal", "one-sided RMA");
}

SIM_NCCL_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags,
             ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t res = check(comm, peer, "ncclSignal", SIM_SINCE_RMA);
  return res != ncclSuccess ? res : unmodelled("ncclSignal", "one-sided RMA");
}

SIM_NCCL_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t *signalDescs,
             ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t res = check(comm, 0, "ncclWaitSignal", SIM_SINCE_RMA);
  if (res != ncclSuccess) return res;
  if (nDesc < 0 || (nDesc > 0 && !signalDescs))
    return sim_error(ncclInvalidArgument, "ncclsim: ncclWaitSignal: invalid descriptors");
  return unmodelled("ncclWaitSignal", "one-sided RMA");
}

SIM_API ncclResult_t ncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const *reqs,
                                       ncclDevComm_t *outDevComm) {
  ncclResult_t res = check(comm, 0, "ncclDevCommCreate", SIM_SINCE_DEVICE_API);
  if (res != ncclSuccess) return res;
  if (!reqs || !outDevComm)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclDevCommCreate: invalid argument");
  return unmodelled("ncclDevCommCreate", "the device API (kernels do not run on sim/)");
}

/* No device communicator can exist, so none can be destroyed. */
SIM_API ncclResult_t ncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const *devComm) {
  ncclResult_t res = check(comm, 0, "ncclDevCommDestroy", SIM_SINCE_DEVICE_API);
  if (res != ncclSuccess) return res;
  return sim_error(ncclInvalidArgument,
                   "ncclsim: ncclDevCommDestroy: %p is not a device "
                   "communicator of this communicator",
                   (const void *)devComm);
}

SIM_API ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset,
                                                     void **outPtr) {
  ncclResult_t res = sim_nccl_since("ncclGetLsaMultimemDevicePointer", SIM_SINCE_DEVICE_API);
  if (res != ncclSuccess) return res;
  if (!window || !outPtr)
    return sim_error(ncclInvalidArgument,
                     "ncclsim: ncclGetLsaMultimemDevicePointer: invalid argument");
  return unmodelled("ncclGetLsaMultimemDevicePointer", "multimem (NVLink SHARP)");
}

SIM_API ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer,
                                              void **outPtr) {
  ncclResult_t res = sim_nccl_since("ncclGetPeerDevicePointer", SIM_SINCE_DEVICE_API);
  if (res != ncclSuccess) return res;
  if (!window || !outPtr)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclGetPeerDevicePointer: invalid argument");
  return unmodelled("ncclGetPeerDevicePointer", "mapping a peer's window");
}
