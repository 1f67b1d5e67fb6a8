/* Kernels and __device__ variables as the runtime knows them: function attributes
 * (cudaFuncGetAttributes, cudaFuncSetAttribute, cudaKernelSetAttributeForDevice), occupancy
 * (cudaOccupancyMaxActiveBlocksPerMultiprocessor[WithFlags]) and symbols (cudaGetSymbolAddress,
 * cudaMemcpyToSymbol).
 *
 * The key choices. A kernel is known when its host stub was registered (__cudaRegisterFunction);
 * anything else is cudaErrorInvalidDeviceFunction, as in CUDA. Device code is never inspected (it
 * never runs), so a kernel reports no registers, no static shared, constant or local memory, and
 * the thread limit it was compiled with (__launch_bounds__, else 1024); what a program sets is
 * kept and read back. Occupancy follows the simulated H100-class SM: at most 2048 threads and 32
 * blocks per SM, 228 KiB of shared memory with 1 KiB reserved per block (registers, unknown, do
 * not limit it). A __device__ variable lives in its host shadow, since device memory is host
 * memory here: its symbol address is the shadow's address. */
#include <pthread.h>
#include <string.h>

#define HASH_NONFATAL_OOM 1 /* a refused add leaves the item unrecorded, never exit() */
#include <uthash.h>

#include "sim_cuda.h"
#include "sim_graph.h"

typedef struct {
  const void *key;
  int thread_limit;
  int attrs[cudaFuncAttributeMax]; /* values set through cudaFuncSetAttribute */
  size_t size;                     /* variables: bytes */
  UT_hash_handle hh;
} sim_sym_t;

static pthread_mutex_t sym_lock = PTHREAD_MUTEX_INITIALIZER;
static sim_sym_t *funcs, *vars;

static void add(sim_sym_t **table, const void *key, int thread_limit, size_t size) {
  sim_sym_t *e;
  pthread_mutex_lock(&sym_lock);
  HASH_FIND_PTR(*table, &key, e);
  if (!e && (e = calloc(1, sizeof *e)) != NULL) {
    e->key = key;
    e->attrs[cudaFuncAttributeMaxDynamicSharedMemorySize] = 48 << 10; /* CUDA's default */
    e->attrs[cudaFuncAttributePreferredSharedMemoryCarveout] = -1;
    HASH_ADD_PTR(*table, key, e);
    if (!e->hh.tbl) free(e), e = NULL;
  }
  if (e) {
    e->thread_limit = thread_limit > 0 && thread_limit <= 1024 ? thread_limit : 1024;
    e->size = size;
  }
  pthread_mutex_unlock(&sym_lock);
}

void sim_func_register(const void *host_fun, int thread_limit) {
  if (host_fun) add(&funcs, host_fun, thread_limit, 0);
}
void sim_symbol_register(const void *host_var, size_t size) {
  if (host_var) add(&vars, host_var, 0, size);
}

/* Copies the record of a registered kernel or variable; 0 when `key` is not one. */
static int find(sim_sym_t *table, const void *key, sim_sym_t *out) {
  sim_sym_t *e;
  pthread_mutex_lock(&sym_lock);
  HASH_FIND_PTR(table, &key, e);
  if (e) *out = *e;
  pthread_mutex_unlock(&sym_lock);
  return e != NULL;
}

int sim_occupancy_blocks(int threads, size_t shmem) {
  if (threads <= 0 || threads > 1024 || shmem > (227u << 10)) return 0;
  int warps = (threads + 31) / 32;
  int by_threads = 64 / warps; /* 2048 threads = 64 warps per SM */
  int by_shmem = (int)((228u << 10) / (shmem + (1u << 10)));
  int n = by_threads < 32 ? by_threads : 32;
  return by_shmem < n ? by_shmem : n;
}

static cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess) sim_cuda_set_last_error(e);
  return e;
}

SIM_API cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func) {
  sim_sym_t f;
  if (!attr) return ret(cudaErrorInvalidValue);
  if (!func || !find(funcs, func, &f)) return ret(cudaErrorInvalidDeviceFunction);
  memset(attr, 0, sizeof *attr);
  attr->maxThreadsPerBlock = f.thread_limit;
  attr->ptxVersion = attr->binaryVersion = SIM_GPU_CC_MAJOR * 10 + SIM_GPU_CC_MINOR;
  attr->maxDynamicSharedSizeBytes = f.attrs[cudaFuncAttributeMaxDynamicSharedMemorySize];
  attr->preferredShmemCarveout = f.attrs[cudaFuncAttributePreferredSharedMemoryCarveout];
  attr->clusterDimMustBeSet = f.attrs[cudaFuncAttributeClusterDimMustBeSet];
  attr->requiredClusterWidth = f.attrs[cudaFuncAttributeRequiredClusterWidth];
  attr->requiredClusterHeight = f.attrs[cudaFuncAttributeRequiredClusterHeight];
  attr->requiredClusterDepth = f.attrs[cudaFuncAttributeRequiredClusterDepth];
  attr->nonPortableClusterSizeAllowed = f.attrs[cudaFuncAttributeNonPortableClusterSizeAllowed];
  attr->clusterSchedulingPolicyPreference =
      f.attrs[cudaFuncAttributeClusterSchedulingPolicyPreference];
  return cudaSuccess;
}

/* Checks a value against what the simulated device accepts, then keeps it. */
static cudaError_t set_attr(const void *func, int attr, int value) {
  sim_sym_t f;
  if (!func || !find(funcs, func, &f)) return cudaErrorInvalidDeviceFunction;
  switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
      if (value < 0 || value > sim_device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin, 0))
        return cudaErrorInvalidValue;
      break;
    case cudaFuncAttributePreferredSharedMemoryCarveout:
      if (value < -1 || value > 100) return cudaErrorInvalidValue;
      break;
    case cudaFuncAttributeClusterDimMustBeSet: return cudaErrorInvalidValue; /* read-only */
    case cudaFuncAttributeRequiredClusterWidth:
    case cudaFuncAttributeRequiredClusterHeight:
    case cudaFuncAttributeRequiredClusterDepth:
      if (value < 0 || value > 8) return cudaErrorInvalidValue;
      break;
    case cudaFuncAttributeNonPortableClusterSizeAllowed:
    case cudaFuncAttributeClusterSchedulingPolicyPreference:
      if (value < 0 || value > 2) return cudaErrorInvalidValue;
      break;
    default: return cudaErrorInvalidValue;
  }
  sim_sym_t *e;
  pthread_mutex_lock(&sym_lock);
  HASH_FIND_PTR(funcs, &func, e);
  if (e) e->attrs[attr] = value;
  pthread_mutex_unlock(&sym_lock);
  return cudaSuccess;
}

SIM_API cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
  return ret(set_attr(func, (int)attr, value));
}

/* A cudaKernel_t of a registered kernel is its host stub (__cudaGetKernel). Devices are identical
 * here, so a value set for one device holds for all. */
SIM_API cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t kernel,
                                                    enum cudaFuncAttribute attr, int value,
                                                    int device) {
  if (device < 0 || device >= sim_device_count()) return ret(cudaErrorInvalidDevice);
  return ret(set_attr((const void *)kernel, (int)attr, value));
}

SIM_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int *numBlocks, const void *func, int blockSize, size_t dynamicSMemSize, unsigned int flags) {
  sim_sym_t f;
  if (!numBlocks || blockSize <= 0 || (flags & ~1u)) return ret(cudaErrorInvalidValue);
  if (!func || !find(funcs, func, &f)) return ret(cudaErrorInvalidDeviceFunction);
  *numBlocks = blockSize > f.thread_limit ? 0 : sim_occupancy_blocks(blockSize, dynamicSMemSize);
  return cudaSuccess;
}

SIM_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func,
                                                                  int blockSize,
                                                                  size_t dynamicSMemSize) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
                                                                dynamicSMemSize, 0);
}

SIM_API cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol) {
  sim_sym_t v;
  if (!devPtr) return ret(cudaErrorInvalidValue);
  if (!symbol || !find(vars, symbol, &v)) return ret(cudaErrorInvalidSymbol);
  *devPtr = (void *)symbol;
  return cudaSuccess;
}

/* A synchronous copy into the variable (its host shadow). */
SIM_API cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count,
                                       size_t offset, enum cudaMemcpyKind kind) {
  sim_sym_t v;
  if (!symbol || !find(vars, symbol, &v)) return ret(cudaErrorInvalidSymbol);
  if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice &&
      kind != cudaMemcpyDefault)
    return ret(cudaErrorInvalidMemcpyDirection);
  if (offset > v.size || count > v.size - offset || (count && !src))
    return ret(cudaErrorInvalidValue);
  cudaError_t r = sim_capture_check_unsafe();
  if (r != cudaSuccess) return ret(r);
  memmove((char *)symbol + offset, src, count);
  sim_stream_advance(
      sim_stream_resolve(NULL),
      sim_copy_time_us(count, kind == cudaMemcpyHostToDevice ? cudaMemcpyHostToDevice
                                                             : cudaMemcpyDeviceToDevice));
  return cudaSuccess;
}
