// Compiled by run_torch_basics.sh against the NCCL headers of the torch venv's nvidia-nccl-cu13
// wheel (2.30.7): each prototype in sim/sim_nccl_230.h that differs from NCCL's — nccl.h, and
// nccl_device/core.h for the device API's host side — is a conflicting declaration, an error.
#include <cstddef>

#include <nccl.h>
#include <nccl_device/core.h>
extern "C" {
#include "sim_nccl_230.h"
}
static_assert(NCCL_VERSION_CODE >= 23000, "expected NCCL 2.30 headers");
// The types sim/ declares for itself when built against older headers, value by value.
static_assert(NCCL_SUSPEND_MEM == 0x01, "NCCL_SUSPEND_MEM");
static_assert(ncclStatGpuMemSuspend == 0 && ncclStatGpuMemSuspended == 1 && ncclStatGpuMemPersist == 2 &&
                  ncclStatGpuMemTotal == 3, "ncclCommMemStat_t");
static_assert(sizeof(ncclWaitSignalDesc_t) == 4 * sizeof(int) && offsetof(ncclWaitSignalDesc_t, opCnt) == 0 &&
                  offsetof(ncclWaitSignalDesc_t, peer) == 4 && offsetof(ncclWaitSignalDesc_t, sigIdx) == 8 &&
                  offsetof(ncclWaitSignalDesc_t, ctx) == 12, "ncclWaitSignalDesc_t");
int main() { return 0; }
