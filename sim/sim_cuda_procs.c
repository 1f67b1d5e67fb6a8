/* The driver's entry points by name: cuGetProcAddress (and cudaGetDriverEntryPointByVersion, the
 * runtime's way to it, which PyTorch's DriverAPI uses) looks a name up in the driver's table below,
 * then in capture's and graphs' (sim_cuda_graph_api.c) and virtual memory's (sim_cuda_vmm.c). It sits
 * above every file whose entry points it hands out. */
#include <string.h>

#include "sim_cuda.h"
#include "sim_graph.h"

#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

#define PROC(name, fn)                                                                             \
  { name, (void *)(fn) }
static const struct {
  const char *name;
  void *fn;
} procs[] = {
    /* Base names resolve to the newest version, as libcuda does for a current cudaVersion. */
    PROC("cuInit", cuInit),
    PROC("cuDriverGetVersion", cuDriverGetVersion),
    PROC("cuGetErrorString", cuGetErrorString),
    PROC("cuGetErrorName", cuGetErrorName),
    PROC("cuDeviceGet", cuDeviceGet),
    PROC("cuDeviceGetCount", cuDeviceGetCount),
    PROC("cuDeviceGetName", cuDeviceGetName),
    PROC("cuDeviceGetAttribute", cuDeviceGetAttribute),
    PROC("cuDeviceTotalMem", cuDeviceTotalMem_v2),
    PROC("cuDeviceGetUuid", cuDeviceGetUuid),
    PROC("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain),
    PROC("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2),
    PROC("cuDevicePrimaryCtxGetState", cuDevicePrimaryCtxGetState),
    PROC("cuCtxGetCurrent", cuCtxGetCurrent),
    PROC("cuCtxSetCurrent", cuCtxSetCurrent),
    PROC("cuCtxGetDevice", cuCtxGetDevice),
    PROC("cuCtxSynchronize", cuCtxSynchronize),
    PROC("cuCtxPushCurrent", cuCtxPushCurrent_v2),
    PROC("cuCtxPopCurrent", cuCtxPopCurrent_v2),
    PROC("cuStreamCreate", cuStreamCreate),
    PROC("cuStreamCreateWithPriority", cuStreamCreateWithPriority),
    PROC("cuStreamDestroy", cuStreamDestroy_v2),
    PROC("cuStreamSynchronize", cuStreamSynchronize),
    PROC("cuStreamQuery", cuStreamQuery),
    PROC("cuStreamWaitEvent", cuStreamWaitEvent),
    PROC("cuStreamGetCtx", cuStreamGetCtx),
    PROC("cuEventCreate", cuEventCreate),
    PROC("cuEventRecord", cuEventRecord),
    PROC("cuEventRecordWithFlags", cuEventRecordWithFlags),
    PROC("cuEventQuery", cuEventQuery),
    PROC("cuEventSynchronize", cuEventSynchronize),
    PROC("cuEventElapsedTime", cuEventElapsedTime_v2),
    PROC("cuEventDestroy", cuEventDestroy_v2),
    PROC("cuGetProcAddress", cuGetProcAddress_v2),
};

SIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *symbolStatus) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++)
    if (strcmp(procs[i].name, symbol) == 0) {
      *pfn = procs[i].fn;
      if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  for (const sim_proc_t *tables[] = {sim_graph_procs, sim_vmm_procs}, **t = tables; t < tables + 2;
       t++)
    for (const sim_proc_t *p = *t; p->name; p++) /* capture and graphs, virtual memory */
      if (strcmp(p->name, symbol) == 0) {
        *pfn = p->fn;
        if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
      }
  *pfn = NULL;
  if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}

/* The runtime's way to the driver's entry points (PyTorch's DriverAPI uses it): the same table as
 * cuGetProcAddress. A name sim/ does not provide answers cudaSuccess with *funcPtr NULL and
 * cudaDriverEntryPointSymbolNotFound, as CUDA does for a symbol the driver lacks. */
SIM_API cudaError_t cudaGetDriverEntryPointByVersion(
    const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus) {
  if (!symbol || !funcPtr) {
    sim_cuda_set_last_error(cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  CUdriverProcAddressQueryResult st;
  CUresult r = cuGetProcAddress_v2(symbol, funcPtr, (int)cudaVersion, flags, &st);
  if (driverStatus)
    *driverStatus =
        r == CUDA_SUCCESS ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}
