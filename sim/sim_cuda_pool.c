/* Stream-ordered memory pools: each device's default pool (cudaDeviceGetDefaultMemPool), its
 * attributes and access (cudaMemPoolGet/SetAttribute, cudaMemPoolSetAccess, cudaMemPoolTrimTo),
 * and the graph-memory attributes (cudaDeviceGet/SetGraphMemAttribute).
 *
 * The key choice: sim/'s pool caches nothing. cudaMallocAsync allocates at once and cudaFreeAsync
 * returns the memory at once, so the pool's reserved memory always equals its used memory, and
 * trimming has nothing to release. The counters are true: every cudaMallocAsync/cudaFreeAsync is
 * counted (sim_pool_note_*). Graph memory nodes are refused at capture (sim_cuda_runtime.c), so
 * graph memory is always 0. Access set for other devices is recorded and always honoured: every
 * device's memory is host memory here. */
#include <pthread.h>
#include <stdlib.h>

#include "sim_cuda.h"

#define POOL_MAGIC 0x504f4f4cu

struct CUmemPoolHandle_st {
  uint32_t magic;
  int device;
  int reuse[3]; /* cudaMemPoolReuse* (1..3), all on by default as in CUDA */
  uint64_t release_threshold;
  uint64_t used, used_high, reserved_high;
  int access[SIM_MAX_DEVICES]; /* cudaMemAccessFlags granted to each device */
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUmemPoolHandle_st pools[SIM_MAX_DEVICES];

/* One live cudaMallocAsync allocation: what its free gives back to which pool. */
struct pool_alloc {
  void *p;
  size_t size;
  int device;
  struct pool_alloc *next;
};
static struct pool_alloc *live;

static struct CUmemPoolHandle_st *pool_of(int device) {
  struct CUmemPoolHandle_st *p = &pools[device];
  if (p->magic != POOL_MAGIC) { /* under pool_lock */
    p->magic = POOL_MAGIC;
    p->device = device;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    p->access[device] = cudaMemAccessFlagsProtReadWrite;
  }
  return p;
}

static struct CUmemPoolHandle_st *pool_resolve(cudaMemPool_t h) {
  for (int d = 0; d < SIM_MAX_DEVICES; d++)
    if (h == &pools[d] && pools[d].magic == POOL_MAGIC) return h;
  return NULL;
}

void sim_pool_note_alloc(void *p, size_t size, int device) {
  struct pool_alloc *a = malloc(sizeof *a);
  if (!p || !a || device < 0 || device >= SIM_MAX_DEVICES) {
    free(a);
    return;
  }
  pthread_mutex_lock(&pool_lock);
  struct CUmemPoolHandle_st *pool = pool_of(device);
  *a = (struct pool_alloc){p, size, device, live};
  live = a;
  pool->used += size;
  if (pool->used > pool->used_high) pool->used_high = pool->used;
  if (pool->used > pool->reserved_high) pool->reserved_high = pool->used;
  pthread_mutex_unlock(&pool_lock);
}

void sim_pool_note_free(void *p) {
  pthread_mutex_lock(&pool_lock);
  for (struct pool_alloc **pp = &live; *pp; pp = &(*pp)->next) {
    if ((*pp)->p != p) continue;
    struct pool_alloc *a = *pp;
    *pp = a->next;
    pool_of(a->device)->used -= a->size;
    free(a);
    break;
  }
  pthread_mutex_unlock(&pool_lock);
}

static cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess) sim_cuda_set_last_error(e);
  return e;
}

SIM_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device) {
  if (!memPool) return ret(cudaErrorInvalidValue);
  if (device < 0 || device >= sim_device_count()) return ret(cudaErrorInvalidDevice);
  pthread_mutex_lock(&pool_lock);
  *memPool = pool_of(device);
  pthread_mutex_unlock(&pool_lock);
  return cudaSuccess;
}

SIM_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                            void *value) {
  struct CUmemPoolHandle_st *p = pool_resolve(memPool);
  if (!p || !value) return ret(cudaErrorInvalidValue);
  cudaError_t r = cudaSuccess;
  pthread_mutex_lock(&pool_lock);
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies: *(int *)value = p->reuse[attr - 1]; break;
    case cudaMemPoolAttrReleaseThreshold: *(uint64_t *)value = p->release_threshold; break;
    case cudaMemPoolAttrReservedMemCurrent: /* nothing cached: reserved is what is in use */
    case cudaMemPoolAttrUsedMemCurrent: *(uint64_t *)value = p->used; break;
    case cudaMemPoolAttrReservedMemHigh: *(uint64_t *)value = p->reserved_high; break;
    case cudaMemPoolAttrUsedMemHigh: *(uint64_t *)value = p->used_high; break;
    default: r = cudaErrorInvalidValue;
  }
  pthread_mutex_unlock(&pool_lock);
  return ret(r);
}

SIM_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                            void *value) {
  struct CUmemPoolHandle_st *p = pool_resolve(memPool);
  if (!p || !value) return ret(cudaErrorInvalidValue);
  cudaError_t r = cudaSuccess;
  pthread_mutex_lock(&pool_lock);
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies: p->reuse[attr - 1] = *(int *)value != 0; break;
    case cudaMemPoolAttrReleaseThreshold: p->release_threshold = *(uint64_t *)value; break;
    /* The high-water marks may only be reset, to the current value, by writing 0. */
    case cudaMemPoolAttrReservedMemHigh:
      if (*(uint64_t *)value != 0) r = cudaErrorInvalidValue;
      else p->reserved_high = p->used;
      break;
    case cudaMemPoolAttrUsedMemHigh:
      if (*(uint64_t *)value != 0) r = cudaErrorInvalidValue;
      else p->used_high = p->used;
      break;
    default: r = cudaErrorInvalidValue; /* the current values are read-only */
  }
  pthread_mutex_unlock(&pool_lock);
  return ret(r);
}

SIM_API cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool,
                                         const struct cudaMemAccessDesc *descList, size_t count) {
  struct CUmemPoolHandle_st *p = pool_resolve(memPool);
  if (!p || (count && !descList)) return ret(cudaErrorInvalidValue);
  int n = sim_device_count();
  for (size_t i = 0; i < count; i++) { /* all checked before any is applied */
    const struct cudaMemAccessDesc *d = &descList[i];
    if (d->location.type != cudaMemLocationTypeDevice) return ret(cudaErrorInvalidValue);
    if (d->location.id < 0 || d->location.id >= n) return ret(cudaErrorInvalidDevice);
    if (d->flags != cudaMemAccessFlagsProtNone && d->flags != cudaMemAccessFlagsProtRead &&
        d->flags != cudaMemAccessFlagsProtReadWrite)
      return ret(cudaErrorInvalidValue);
    /* The owning device always keeps read-write access. */
    if (d->location.id == p->device && d->flags != cudaMemAccessFlagsProtReadWrite)
      return ret(cudaErrorInvalidDevice);
  }
  pthread_mutex_lock(&pool_lock);
  for (size_t i = 0; i < count; i++) p->access[descList[i].location.id] = descList[i].flags;
  pthread_mutex_unlock(&pool_lock);
  return cudaSuccess;
}

SIM_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep) {
  (void)minBytesToKeep; /* the pool caches nothing, so there is nothing to release */
  return ret(pool_resolve(memPool) ? cudaSuccess : cudaErrorInvalidValue);
}

/* Graph memory: always 0, because captures refuse stream-ordered allocations. */
SIM_API cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr,
                                                   void *value) {
  if (device < 0 || device >= sim_device_count()) return ret(cudaErrorInvalidDevice);
  if (!value || (int)attr < cudaGraphMemAttrUsedMemCurrent ||
      (int)attr > cudaGraphMemAttrReservedMemHigh)
    return ret(cudaErrorInvalidValue);
  *(uint64_t *)value = 0;
  return cudaSuccess;
}

SIM_API cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr,
                                                   void *value) {
  if (device < 0 || device >= sim_device_count()) return ret(cudaErrorInvalidDevice);
  if (!value || (attr != cudaGraphMemAttrUsedMemHigh && attr != cudaGraphMemAttrReservedMemHigh) ||
      *(uint64_t *)value != 0)
    return ret(cudaErrorInvalidValue); /* only the high-water marks, and only reset to 0 */
  return cudaSuccess;
}
