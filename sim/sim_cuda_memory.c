/* Where simulated memory comes from, and what CUDA says about a pointer: the allocation registry
 * behind cudaMalloc/cudaFree, cudaHostRegister, cudaPointerGetAttributes and peer access.
 *
 * The key choice: device memory is a shared-memory file (memfd) mapped into the process, one per
 * allocation, kept open for the allocation's life. The process uses it as ordinary memory, and
 * another process of the same job can map the same pages from /proc/<pid>/fd/<n>, which is what
 * makes cudaIpcGetMemHandle/OpenMemHandle real (sim_cuda_ipc.c). Host allocations stay in the heap.
 * Every allocation is recorded in one sorted table, so any interior pointer can be classified. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sim_cuda.h"

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static sim_alloc_t *allocs; /* sorted by base */
static size_t nallocs, cap_allocs;

/* Index of the first allocation whose base is > p (under mem_lock). */
static size_t upper_bound(uintptr_t p) {
  size_t lo = 0, hi = nallocs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (allocs[mid].base <= p) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int find_locked(uintptr_t p, size_t *ix_p) {
  size_t i = upper_bound(p);
  if (i == 0) return 0;
  const sim_alloc_t *a = &allocs[i - 1];
  if (p >= a->base + (a->size ? a->size : 1)) return 0;
  *ix_p = i - 1;
  return 1;
}

cudaError_t sim_mem_record(const sim_alloc_t *a) {
  pthread_mutex_lock(&mem_lock);
  if (nallocs == cap_allocs) {
    size_t cap = cap_allocs ? 2 * cap_allocs : 64;
    sim_alloc_t *grown = realloc(allocs, cap * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&mem_lock);
      return cudaErrorMemoryAllocation;
    }
    allocs = grown;
    cap_allocs = cap;
  }
  size_t i = upper_bound(a->base);
  memmove(&allocs[i + 1], &allocs[i], (nallocs - i) * sizeof *allocs);
  allocs[i] = *a;
  nallocs++;
  pthread_mutex_unlock(&mem_lock);
  return cudaSuccess;
}

int sim_mem_find(const void *p, sim_alloc_t *a_p) {
  size_t i;
  pthread_mutex_lock(&mem_lock);
  int found = find_locked((uintptr_t)p, &i);
  if (found) *a_p = allocs[i];
  pthread_mutex_unlock(&mem_lock);
  return found;
}

int sim_mem_take(const void *base, int kind, sim_alloc_t *a_p) {
  size_t i;
  int found = 0;
  pthread_mutex_lock(&mem_lock);
  if (find_locked((uintptr_t)base, &i) && allocs[i].base == (uintptr_t)base &&
      allocs[i].kind == kind) {
    *a_p = allocs[i];
    memmove(&allocs[i], &allocs[i + 1], (nallocs - i - 1) * sizeof *allocs);
    nallocs--;
    found = 1;
  }
  pthread_mutex_unlock(&mem_lock);
  return found;
}

int sim_mem_ipc_reopen(uint64_t serial, void **p_p) {
  int found = 0;
  pthread_mutex_lock(&mem_lock);
  for (size_t i = 0; i < nallocs && !found; i++) {
    if (allocs[i].kind != SIM_MEM_IPC || allocs[i].serial != serial) continue;
    allocs[i].refs++;
    *p_p = (void *)allocs[i].base;
    found = 1;
  }
  pthread_mutex_unlock(&mem_lock);
  return found;
}

/* Device allocations keep a descriptor each: allow as many as the hard limit permits. */
static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
}

static cudaError_t device_alloc(void **p, size_t size) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, raise_fd_limit);
  size_t page = (size_t)sysconf(_SC_PAGESIZE), len = (size + page - 1) / page * page;
  uint64_t serial = 0;
  if (getrandom(&serial, sizeof serial, 0) != (ssize_t)sizeof serial)
    return cudaErrorMemoryAllocation;
  char name[64];
  snprintf(name, sizeof name, "ncclsim-dev-%016llx", (unsigned long long)serial);
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return cudaErrorMemoryAllocation;
  void *q = MAP_FAILED;
  if (ftruncate(fd, (off_t)len) == 0)
    q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (q == MAP_FAILED) {
    close(fd);
    return cudaErrorMemoryAllocation;
  }
  sim_alloc_t a = {(uintptr_t)q, size, len, SIM_MEM_DEVICE, sim_device_current(), fd, serial, 0};
  if (sim_mem_record(&a) != cudaSuccess) {
    munmap(q, len);
    close(fd);
    return cudaErrorMemoryAllocation;
  }
  *p = q;
  return cudaSuccess;
}

cudaError_t sim_mem_alloc(void **p, size_t size, int kind) {
  if (!p) return cudaErrorInvalidValue;
  if (size == 0) {
    *p = NULL;
    return cudaSuccess;
  }
  if (kind == SIM_MEM_DEVICE) return device_alloc(p, size);
  void *q = NULL;
  if (posix_memalign(&q, 256, size) != 0) return cudaErrorMemoryAllocation;
  sim_alloc_t a = {(uintptr_t)q, size, size, kind, sim_device_current(), -1, 0, 0};
  if (sim_mem_record(&a) != cudaSuccess) {
    free(q);
    return cudaErrorMemoryAllocation;
  }
  *p = q;
  return cudaSuccess;
}

cudaError_t sim_mem_free(void *p, int host) {
  if (!p) return cudaSuccess;
  sim_alloc_t a;
  if (host ? !sim_mem_take(p, SIM_MEM_HOST, &a)
           : !sim_mem_take(p, SIM_MEM_DEVICE, &a) && !sim_mem_take(p, SIM_MEM_MANAGED, &a))
    return cudaErrorInvalidValue;
  if (a.fd >= 0) {
    munmap((void *)a.base, a.map_len);
    close(a.fd);
  } else {
    free((void *)a.base);
  }
  return cudaSuccess;
}

/* ---- entry points -------------------------------------------------------------------------- */

SIM_API cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
  if (!ptr || size == 0 ||
      (flags & ~(unsigned)(cudaHostRegisterPortable | cudaHostRegisterMapped |
                           cudaHostRegisterIoMemory | cudaHostRegisterReadOnly)))
    return sim_cuda_fail(cudaErrorInvalidValue);
  if (flags & cudaHostRegisterIoMemory)
    return sim_cuda_fail(cudaErrorNotSupported); /* no PCIe BARs here */
  sim_alloc_t a;
  pthread_mutex_lock(&mem_lock);
  size_t i = upper_bound((uintptr_t)ptr + size - 1);
  int overlap = i > 0 && allocs[i - 1].base + allocs[i - 1].size > (uintptr_t)ptr;
  pthread_mutex_unlock(&mem_lock);
  if (overlap) return sim_cuda_fail(cudaErrorHostMemoryAlreadyRegistered);
  a = (sim_alloc_t){(uintptr_t)ptr, size, size, SIM_MEM_REGISTERED, sim_device_current(), -1, 0, 0};
  return sim_cuda_fail(sim_mem_record(&a));
}

SIM_API cudaError_t cudaHostUnregister(void *ptr) {
  sim_alloc_t a;
  if (!ptr) return sim_cuda_fail(cudaErrorInvalidValue);
  if (!sim_mem_take(ptr, SIM_MEM_REGISTERED, &a))
    return sim_cuda_fail(cudaErrorHostMemoryNotRegistered);
  return cudaSuccess;
}

SIM_API cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags) {
  sim_alloc_t a;
  if (!pDevice || flags != 0) return sim_cuda_fail(cudaErrorInvalidValue);
  if (!sim_mem_find(pHost, &a) || (a.kind != SIM_MEM_HOST && a.kind != SIM_MEM_REGISTERED))
    return sim_cuda_fail(cudaErrorInvalidValue);
  *pDevice = pHost; /* unified addressing: the same address on host and device */
  return cudaSuccess;
}

SIM_API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
                                             const void *ptr) {
  if (!attributes) return sim_cuda_fail(cudaErrorInvalidValue);
  sim_alloc_t a;
  memset(attributes, 0, sizeof *attributes);
  if (!sim_mem_find(ptr, &a)) { /* CUDA 11+: plain host memory is not an error */
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
    return cudaSuccess;
  }
  attributes->device = a.device;
  switch (a.kind) {
    case SIM_MEM_DEVICE:
    case SIM_MEM_IPC:
    case SIM_MEM_VMM:
      attributes->type = cudaMemoryTypeDevice;
      attributes->devicePointer = (void *)ptr;
      break;
    case SIM_MEM_MANAGED:
      attributes->type = cudaMemoryTypeManaged;
      attributes->devicePointer = attributes->hostPointer = (void *)ptr;
      break;
    default: /* pinned or registered host memory */
      attributes->type = cudaMemoryTypeHost;
      attributes->devicePointer = attributes->hostPointer = (void *)ptr;
      break;
  }
  return cudaSuccess;
}

/* ---- peer access: every simulated GPU reaches every other, as on one NVLink switch ---------- */

static _Atomic uint64_t peer_enabled[SIM_MAX_DEVICES]; /* bit p of [d]: d has enabled access to p */

SIM_API cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice) {
  if (!canAccessPeer) return sim_cuda_fail(cudaErrorInvalidValue);
  int n = sim_device_count();
  if (device < 0 || device >= n || peerDevice < 0 || peerDevice >= n)
    return sim_cuda_fail(cudaErrorInvalidDevice);
  *canAccessPeer = device != peerDevice;
  return cudaSuccess;
}

SIM_API cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  int d = sim_device_current();
  if (flags != 0) return sim_cuda_fail(cudaErrorInvalidValue);
  if (peerDevice < 0 || peerDevice >= sim_device_count() || peerDevice == d)
    return sim_cuda_fail(cudaErrorInvalidDevice);
  uint64_t bit = 1ull << peerDevice;
  if (atomic_fetch_or(&peer_enabled[d], bit) & bit)
    return sim_cuda_fail(cudaErrorPeerAccessAlreadyEnabled);
  return cudaSuccess;
}

SIM_API cudaError_t cudaDeviceDisablePeerAccess(int peerDevice) {
  int d = sim_device_current();
  if (peerDevice < 0 || peerDevice >= sim_device_count() || peerDevice == d)
    return sim_cuda_fail(cudaErrorInvalidDevice);
  uint64_t bit = 1ull << peerDevice;
  if (!(atomic_fetch_and(&peer_enabled[d], ~bit) & bit))
    return sim_cuda_fail(cudaErrorPeerAccessNotEnabled);
  return cudaSuccess;
}

cudaError_t sim_cuda_fail(cudaError_t e) {
  if (e != cudaSuccess) sim_cuda_set_last_error(e);
  return e;
}

void sim_fill32(void *dst, uint32_t value, size_t n) {
  uint32_t *w = dst;
  for (size_t i = 0; i < n; i++)
    memcpy(&w[i], &value, sizeof value); /* dst may be unaligned for C */
}
