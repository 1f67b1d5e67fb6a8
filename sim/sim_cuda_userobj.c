/* User objects (cudaUserObjectCreate, cudaUserObjectRetain/Release, and the references graphs hold
 * through cudaGraphRetainUserObject): a reference-counted pointer whose destructor runs when the
 * last reference goes. PyTorch ties buffers to captured graphs this way.
 *
 * A graph's references are released when its records are freed, that is when the graph and every
 * executable instantiated from it are gone (an executable holds the records it replays). The
 * destructor runs on the releasing thread; CUDA runs it on an internal thread, and both forbid it
 * to call CUDA. Handles are never freed, so a stale one reads as dead. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "sim_cuda.h"
#include "sim_graph.h"

#define UOBJ_MAGIC 0x554f424au

struct CUuserObject_st {
  _Atomic uint32_t magic;
  _Atomic long refs;
  void *ptr;
  cudaHostFn_t destroy;
  struct CUuserObject_st *next; /* every object ever created, so none is a leak */
};

static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUuserObject_st *all;

struct sim_userobj_ref {
  struct CUuserObject_st *obj;
  unsigned count;
  struct sim_userobj_ref *next;
};

static struct CUuserObject_st *resolve(cudaUserObject_t o) {
  return o && atomic_load(&o->magic) == UOBJ_MAGIC ? o : NULL;
}

static void release(struct CUuserObject_st *o, unsigned count) {
  if (atomic_fetch_sub(&o->refs, (long)count) != (long)count) return;
  atomic_store(&o->magic, 0);
  o->destroy(o->ptr);
}

static cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess) sim_cuda_set_last_error(e);
  return e;
}

SIM_API cudaError_t cudaUserObjectCreate(cudaUserObject_t *object_out, void *ptr,
                                         cudaHostFn_t destroy, unsigned int initialRefcount,
                                         unsigned int flags) {
  if (!object_out || !destroy || initialRefcount == 0 || flags != cudaUserObjectNoDestructorSync)
    return ret(cudaErrorInvalidValue);
  struct CUuserObject_st *o = calloc(1, sizeof *o);
  if (!o) return ret(cudaErrorMemoryAllocation);
  o->ptr = ptr;
  o->destroy = destroy;
  atomic_init(&o->refs, (long)initialRefcount);
  atomic_init(&o->magic, UOBJ_MAGIC);
  pthread_mutex_lock(&all_lock);
  o->next = all;
  all = o;
  pthread_mutex_unlock(&all_lock);
  *object_out = o;
  return cudaSuccess;
}

SIM_API cudaError_t cudaUserObjectRetain(cudaUserObject_t object, unsigned int count) {
  struct CUuserObject_st *o = resolve(object);
  if (!o || count == 0) return ret(cudaErrorInvalidValue);
  atomic_fetch_add(&o->refs, (long)count);
  return cudaSuccess;
}

SIM_API cudaError_t cudaUserObjectRelease(cudaUserObject_t object, unsigned int count) {
  struct CUuserObject_st *o = resolve(object);
  if (!o || count == 0 || atomic_load(&o->refs) < (long)count) return ret(cudaErrorInvalidValue);
  release(o, count);
  return cudaSuccess;
}

cudaError_t sim_userobj_take(struct sim_userobj_ref **list, cudaUserObject_t object, unsigned count,
                             int move) {
  struct CUuserObject_st *o = resolve(object);
  if (!o || count == 0) return cudaErrorInvalidValue;
  struct sim_userobj_ref *r = malloc(sizeof *r);
  if (!r) return cudaErrorMemoryAllocation;
  if (!move) atomic_fetch_add(&o->refs, (long)count);
  *r = (struct sim_userobj_ref){o, count, *list};
  *list = r;
  return cudaSuccess;
}

void sim_userobj_drop_all(struct sim_userobj_ref *list) {
  while (list) {
    struct sim_userobj_ref *next = list->next;
    release(list->obj, list->count);
    free(list);
    list = next;
  }
}
