/* The driver's virtual memory management (cuMemCreate, cuMemAddressReserve, cuMemMap, cuMemSetAccess,
 * cuMemUnmap, cuMemRelease, cuMemAddressFree, granularity, properties, fd export and import,
 * cuMemRetainAllocationHandle), cuMemGetAddressRange, and the two stream-ordered writes torch
 * fetches with them (cuMemsetD32Async, cuStreamWriteValue32). PyTorch's expandable segments
 * (PYTORCH_CUDA_ALLOCATOR_CONF=expandable_segments:True) and its DriverAPI need every one.
 *
 * The key choice: the driver's objects map onto the kernel's. A physical allocation is a memfd; a
 * reserved range is an anonymous PROT_NONE mapping; cuMemMap maps the memfd over it (MAP_FIXED),
 * still PROT_NONE, and cuMemSetAccess opens it (mprotect) — so memory touched before its access is
 * set faults, as it does on a GPU. Processes share an allocation by passing the exported fd, as
 * with CUDA. Devices share one address space here, so the access of all listed devices is granted
 * together (the widest). Each mapping is recorded like a cudaMalloc allocation (kind SIM_MEM_VMM),
 * so pointer queries and NCCL see device memory; cudaFree and cudaIpcGetMemHandle refuse it, as
 * CUDA does. Granularity is 2 MiB, as on an H100. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim_cuda.h"
#include "sim_graph.h"

#define GRAN (2u << 20)
#define VMM_MAGIC 0x564d4d48u

struct vmm_handle {
  uint32_t magic;
  int fd;
  size_t size;
  CUmemAllocationProp prop;
  int refs;                /* handles (create, import, retain) and mappings; under vmm_lock */
  struct vmm_handle *next; /* every handle ever made: a stale one reads as dead, none leaks */
};

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vmm_handle *handles;
static struct {
  uintptr_t base;
  size_t size;
} * resv; /* reserved ranges */
static size_t nresv, cap_resv;

static struct vmm_handle *resolve(CUmemGenericAllocationHandle h) { /* under vmm_lock */
  for (struct vmm_handle *v = handles; v; v = v->next)
    if ((CUmemGenericAllocationHandle)(uintptr_t)v == h) return v->magic == VMM_MAGIC ? v : NULL;
  return NULL;
}

static void drop(struct vmm_handle *v) { /* under vmm_lock */
  if (--v->refs > 0) return;
  close(v->fd);
  v->fd = -1;
  v->magic = 0;
}

static CUresult new_handle(int fd, size_t size, const CUmemAllocationProp *prop,
                           CUmemGenericAllocationHandle *out) {
  struct vmm_handle *v = calloc(1, sizeof *v);
  if (!v) return CUDA_ERROR_OUT_OF_MEMORY;
  v->magic = VMM_MAGIC;
  v->fd = fd;
  v->size = size;
  v->prop = *prop;
  v->refs = 1;
  pthread_mutex_lock(&vmm_lock);
  v->next = handles;
  handles = v;
  pthread_mutex_unlock(&vmm_lock);
  *out = (CUmemGenericAllocationHandle)(uintptr_t)v;
  return CUDA_SUCCESS;
}

/* A pinned allocation on a device of this process: the only kind sim/ has. */
static CUresult check_prop(const CUmemAllocationProp *prop) {
  if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
  if (prop->location.id < 0 || prop->location.id >= sim_device_count())
    return CUDA_ERROR_INVALID_DEVICE;
  if (prop->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_NOT_SUPPORTED; /* Win32 and fabric handles */
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option) {
  if (!granularity || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                       option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = check_prop(prop);
  if (r == CUDA_SUCCESS) *granularity = GRAN;
  return r;
}

SIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags) {
  if (!handle || flags || size == 0 || size % GRAN) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = check_prop(prop);
  if (r != CUDA_SUCCESS) return r;
  char name[64];
  snprintf(name, sizeof name, "ncclsim-vmm-dev%d", prop->location.id); /* read back at import */
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, (off_t)size) != 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  r = new_handle(fd, size, prop, handle);
  if (r != CUDA_SUCCESS) close(fd);
  return r;
}

SIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  pthread_mutex_lock(&vmm_lock);
  struct vmm_handle *v = resolve(handle);
  if (v) drop(v); /* the memory stays while a mapping holds it */
  pthread_mutex_unlock(&vmm_lock);
  return v ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags) {
  if (!ptr || flags || size == 0 || size % GRAN || (alignment & (alignment - 1)))
    return CUDA_ERROR_INVALID_VALUE;
  size_t align = alignment > GRAN ? alignment : GRAN;
  /* Over-reserve, then trim to the alignment (addr is a hint, as in CUDA). */
  char *q = mmap((void *)(uintptr_t)addr, size + align, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (q == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  uintptr_t base = ((uintptr_t)q + align - 1) & ~(uintptr_t)(align - 1);
  if (base > (uintptr_t)q) munmap(q, base - (uintptr_t)q);
  munmap((void *)(base + size), (uintptr_t)q + size + align - (base + size));
  pthread_mutex_lock(&vmm_lock);
  if (nresv == cap_resv) {
    size_t cap = cap_resv ? 2 * cap_resv : 16;
    void *grown = realloc(resv, cap * sizeof *resv);
    if (!grown) {
      pthread_mutex_unlock(&vmm_lock);
      munmap((void *)base, size);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    resv = grown;
    cap_resv = cap;
  }
  resv[nresv].base = base;
  resv[nresv++].size = size;
  pthread_mutex_unlock(&vmm_lock);
  *ptr = (CUdeviceptr)base;
  return CUDA_SUCCESS;
}

/* Whether [p, p+size) lies in one reserved range (under vmm_lock). */
static int reserved(uintptr_t p, size_t size) {
  for (size_t i = 0; i < nresv; i++)
    if (p >= resv[i].base && p + size <= resv[i].base + resv[i].size) return 1;
  return 0;
}

/* Whether any granule of [p, p+size) is mapped. */
static int any_mapped(uintptr_t p, size_t size) {
  sim_alloc_t a;
  for (uintptr_t g = p; g < p + size; g += GRAN)
    if (sim_mem_find((const void *)g, &a)) return 1;
  return 0;
}

SIM_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  pthread_mutex_lock(&vmm_lock);
  size_t i = 0;
  while (i < nresv && !(resv[i].base == (uintptr_t)ptr && resv[i].size == size)) i++;
  CUresult r = i == nresv                         ? CUDA_ERROR_INVALID_VALUE
               : any_mapped((uintptr_t)ptr, size) ? CUDA_ERROR_INVALID_VALUE /* unmap first */
                                                  : CUDA_SUCCESS;
  if (r == CUDA_SUCCESS) {
    munmap((void *)(uintptr_t)ptr, size);
    resv[i] = resv[--nresv];
  }
  pthread_mutex_unlock(&vmm_lock);
  return r;
}

SIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags) {
  uintptr_t p = (uintptr_t)ptr;
  if (flags || offset || size == 0 || size % GRAN || p % GRAN) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&vmm_lock);
  struct vmm_handle *v = resolve(handle);
  CUresult r = !v ? CUDA_ERROR_INVALID_HANDLE
               : size > v->size || !reserved(p, size) || any_mapped(p, size)
                   ? CUDA_ERROR_INVALID_VALUE
                   : CUDA_SUCCESS;
  if (r == CUDA_SUCCESS &&
      mmap((void *)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, v->fd, 0) == MAP_FAILED)
    r = CUDA_ERROR_OUT_OF_MEMORY;
  if (r == CUDA_SUCCESS) {
    sim_alloc_t a = {p, size, size, SIM_MEM_VMM, v->prop.location.id, -1, (uint64_t)handle, 0};
    if (sim_mem_record(&a) != cudaSuccess) {
      mmap((void *)p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
           0);
      r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      v->refs++;
    }
  }
  pthread_mutex_unlock(&vmm_lock);
  return r;
}

SIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  uintptr_t p = (uintptr_t)ptr, end = p + size;
  if (size == 0 || size % GRAN || p % GRAN) return CUDA_ERROR_INVALID_VALUE;
  sim_alloc_t a;
  /* The range must be made of whole mappings: checked before anything is undone. */
  for (uintptr_t cur = p; cur < end; cur += a.size)
    if (!sim_mem_find((const void *)cur, &a) || a.kind != SIM_MEM_VMM || a.base != cur ||
        cur + a.size > end)
      return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&vmm_lock);
  for (uintptr_t cur = p; cur < end; cur += a.size) {
    if (!sim_mem_take((const void *)cur, SIM_MEM_VMM, &a)) break;
    struct vmm_handle *v = resolve((CUmemGenericAllocationHandle)a.serial);
    if (v) drop(v);
  }
  /* Back to reserved, inaccessible address space. */
  mmap((void *)p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  pthread_mutex_unlock(&vmm_lock);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count) {
  uintptr_t p = (uintptr_t)ptr;
  if (!desc || count == 0 || size == 0 || size % GRAN || p % GRAN) return CUDA_ERROR_INVALID_VALUE;
  int prot = PROT_NONE;
  for (size_t i = 0; i < count; i++) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
    if (desc[i].location.id < 0 || desc[i].location.id >= sim_device_count())
      return CUDA_ERROR_INVALID_DEVICE;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) prot = PROT_READ | PROT_WRITE;
    else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ) prot |= PROT_READ;
    else if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE) return CUDA_ERROR_INVALID_VALUE;
  }
  sim_alloc_t a;
  for (uintptr_t g = p; g < p + size; g += GRAN) /* every granule must be mapped */
    if (!sim_mem_find((const void *)g, &a) || a.kind != SIM_MEM_VMM)
      return CUDA_ERROR_INVALID_VALUE;
  return mprotect((void *)p, size, prot) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemExportToShareableHandle(void *shareableHandle,
                                              CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags) {
  if (!shareableHandle || flags) return CUDA_ERROR_INVALID_VALUE;
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  pthread_mutex_lock(&vmm_lock);
  struct vmm_handle *v = resolve(handle);
  CUresult r = !v ? CUDA_ERROR_INVALID_HANDLE
               : !(v->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
                   ? CUDA_ERROR_INVALID_VALUE
                   : CUDA_SUCCESS;
  int fd = r == CUDA_SUCCESS ? dup(v->fd) : -1;
  pthread_mutex_unlock(&vmm_lock);
  if (r == CUDA_SUCCESS && fd < 0) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (r == CUDA_SUCCESS) *(int *)shareableHandle = fd;
  return r;
}

SIM_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                void *osHandle,
                                                CUmemAllocationHandleType shHandleType) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  int fd = (int)(intptr_t)osHandle;
  struct stat st;
  char link[64], target[256];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  int dev = -1;
  if (n > 0) {
    target[n] = 0;
    if (sscanf(target, "/memfd:ncclsim-vmm-dev%d", &dev) != 1) dev = -1;
  }
  /* Only what cuMemCreate exported: a sim/ allocation with its device in the name. */
  if (dev < 0 || fstat(fd, &st) != 0 || st.st_size <= 0 || st.st_size % GRAN)
    return CUDA_ERROR_INVALID_VALUE;
  int own = dup(fd);
  if (own < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  CUresult r = new_handle(own, (size_t)st.st_size, &prop, handle);
  if (r != CUDA_SUCCESS) close(own);
  return r;
}

SIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
  sim_alloc_t a;
  if (!handle || !sim_mem_find(addr, &a) || a.kind != SIM_MEM_VMM) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&vmm_lock);
  struct vmm_handle *v = resolve((CUmemGenericAllocationHandle)a.serial);
  if (v) v->refs++;
  pthread_mutex_unlock(&vmm_lock);
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *handle = (CUmemGenericAllocationHandle)a.serial;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                        CUmemGenericAllocationHandle handle) {
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&vmm_lock);
  struct vmm_handle *v = resolve(handle);
  if (v) *prop = v->prop;
  pthread_mutex_unlock(&vmm_lock);
  return v ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* The allocation (or mapping) holding dptr, of any kind sim/ records. */
SIM_API CUresult cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
  sim_alloc_t a;
  if (!sim_mem_find((const void *)(uintptr_t)dptr, &a)) return CUDA_ERROR_NOT_FOUND;
  if (pbase) *pbase = (CUdeviceptr)a.base;
  if (psize) *psize = a.size;
  return CUDA_SUCCESS;
}

/* Fills n 32-bit words in stream order (recorded in a capture, as a memset would be). */
static CUresult set32(CUdeviceptr dst, uint32_t value, size_t n, CUstream hStream) {
  struct CUstream_st *s = sim_stream_resolve(hStream);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if ((uintptr_t)dst % 4) return CUDA_ERROR_INVALID_VALUE;
  struct sim_capture *cap;
  cudaError_t e = sim_capture_enqueue(s, &cap);
  if (e != cudaSuccess) return sim_cuda_to_cu(e);
  if (n == 0) return CUDA_SUCCESS;
  if (!dst) return CUDA_ERROR_INVALID_VALUE;
  if (cap) return sim_cuda_to_cu(sim_capture_add_set32(cap, s, (void *)(uintptr_t)dst, value, n));
  sim_fill32((void *)(uintptr_t)dst, value, n);
  sim_stream_advance(s, sim_copy_time_us(4 * n, cudaMemcpyDeviceToDevice));
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                  CUstream hStream) {
  return set32(dstDevice, ui, N, hStream);
}

SIM_API CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                      unsigned int flags) {
  if (flags & ~(unsigned)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) return CUDA_ERROR_INVALID_VALUE;
  return set32(addr, value, 1, stream);
}

const sim_proc_t sim_vmm_procs[] = {
    {"cuMemGetAllocationGranularity", (void *)cuMemGetAllocationGranularity},
    {"cuMemCreate", (void *)cuMemCreate},
    {"cuMemRelease", (void *)cuMemRelease},
    {"cuMemAddressReserve", (void *)cuMemAddressReserve},
    {"cuMemAddressFree", (void *)cuMemAddressFree},
    {"cuMemMap", (void *)cuMemMap},
    {"cuMemUnmap", (void *)cuMemUnmap},
    {"cuMemSetAccess", (void *)cuMemSetAccess},
    {"cuMemExportToShareableHandle", (void *)cuMemExportToShareableHandle},
    {"cuMemImportFromShareableHandle", (void *)cuMemImportFromShareableHandle},
    {"cuMemRetainAllocationHandle", (void *)cuMemRetainAllocationHandle},
    {"cuMemGetAllocationPropertiesFromHandle", (void *)cuMemGetAllocationPropertiesFromHandle},
    {"cuMemGetAddressRange", (void *)cuMemGetAddressRange},
    {"cuMemsetD32Async", (void *)cuMemsetD32Async},
    {"cuStreamWriteValue32", (void *)cuStreamWriteValue32},
    {"cuPointerGetAttribute", (void *)cuPointerGetAttribute},
    {NULL, NULL},
};
