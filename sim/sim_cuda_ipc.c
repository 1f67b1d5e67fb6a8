/* CUDA IPC between processes of one simulated job on one virtual node: cudaIpcGetMemHandle,
 * cudaIpcOpenMemHandle, cudaIpcCloseMemHandle. Device memory is a memfd kept open by its owner
 * (sim_cuda_memory.c), so a handle names the owner's pid and descriptor, and the importer maps the
 * same pages through /proc/<pid>/fd/<n>: stores on either side are seen by the other, as with real
 * IPC memory. The handle also carries the memfd's random serial (a freed and reused descriptor is
 * refused as stale), the virtual node and a hash of the job's shared-memory prefix (a handle from
 * another node or job is refused). Event handles are refused with cudaErrorNotSupported: an event
 * is a virtual clock of its own process, which another process cannot wait on. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sim_cuda.h"

#define IPC_MAGIC 0x49504353u

typedef struct {
  uint32_t magic;
  int32_t pid, fd, node;
  uint64_t serial, map_len, size, job;
  int32_t device;
} ipc_mem_t;
_Static_assert(sizeof(ipc_mem_t) <= sizeof(cudaIpcMemHandle_t), "IPC handle layout too large");

/* The job: ncclsim-run gives every job its own shared-memory prefix. */
static uint64_t job_hash(void) {
  const char *p = getenv("NCCLSIM_SHM_PREFIX");
  uint64_t h = 0xcbf29ce484222325ull;
  for (; p && *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
  return h;
}

SIM_API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr) {
  sim_alloc_t a;
  if (!handle || !devPtr) return sim_cuda_fail(cudaErrorInvalidValue);
  if (!sim_mem_find(devPtr, &a) || a.kind != SIM_MEM_DEVICE || a.base != (uintptr_t)devPtr)
    return sim_cuda_fail(cudaErrorInvalidValue); /* not the base of a cudaMalloc allocation */
  ipc_mem_t h = {IPC_MAGIC, (int32_t)getpid(), a.fd,    sim_node_id(), a.serial, a.map_len,
                 a.size,    job_hash(),        a.device};
  memset(handle, 0, sizeof *handle);
  memcpy(handle, &h, sizeof h);
  return cudaSuccess;
}

SIM_API cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle,
                                         unsigned int flags) {
  ipc_mem_t h;
  memcpy(&h, &handle, sizeof h);
  if (!devPtr || flags != cudaIpcMemLazyEnablePeerAccess)
    return sim_cuda_fail(cudaErrorInvalidValue);
  if (h.magic != IPC_MAGIC || h.node != sim_node_id() || h.job != job_hash())
    return sim_cuda_fail(cudaErrorInvalidResourceHandle);
  if (h.pid == (int32_t)getpid())
    return sim_cuda_fail(cudaErrorDeviceUninitialized);         /* as CUDA: not in the exporter */
  if (sim_mem_ipc_reopen(h.serial, devPtr)) return cudaSuccess; /* counted again, as in CUDA */
  char path[64], link[256], want[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
  ssize_t n = readlink(path, link, sizeof link - 1);
  if (n < 0) return sim_cuda_fail(cudaErrorMapBufferObjectFailed); /* the exporter is gone */
  link[n] = 0;
  snprintf(want, sizeof want, "/memfd:ncclsim-dev-%016llx ", (unsigned long long)h.serial);
  if (strncmp(link, want, strlen(want)) != 0)
    return sim_cuda_fail(cudaErrorInvalidResourceHandle); /* freed */
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return sim_cuda_fail(cudaErrorMapBufferObjectFailed);
  void *q = mmap(NULL, h.map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (q == MAP_FAILED) return sim_cuda_fail(cudaErrorMapBufferObjectFailed);
  sim_alloc_t a = {(uintptr_t)q, h.size, h.map_len, SIM_MEM_IPC, h.device, -1, h.serial, 1};
  if (sim_mem_record(&a) != cudaSuccess) {
    munmap(q, h.map_len);
    return sim_cuda_fail(cudaErrorMemoryAllocation);
  }
  *devPtr = q;
  return cudaSuccess;
}

SIM_API cudaError_t cudaIpcCloseMemHandle(void *devPtr) {
  sim_alloc_t a;
  if (!devPtr || !sim_mem_take(devPtr, SIM_MEM_IPC, &a))
    return sim_cuda_fail(cudaErrorInvalidValue);
  if (--a.refs > 0) return sim_cuda_fail(sim_mem_record(&a));
  munmap(devPtr, a.map_len);
  return cudaSuccess;
}

SIM_API cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *handle, cudaEvent_t event) {
  struct CUevent_st *e = sim_event_resolve(event);
  if (!handle) return sim_cuda_fail(cudaErrorInvalidValue);
  if (!e || !(e->flags & cudaEventInterprocess))
    return sim_cuda_fail(cudaErrorInvalidResourceHandle);
  return sim_cuda_fail(cudaErrorNotSupported);
}

SIM_API cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *event, cudaIpcEventHandle_t handle) {
  (void)handle;
  if (!event) return sim_cuda_fail(cudaErrorInvalidValue);
  return sim_cuda_fail(cudaErrorNotSupported);
}
