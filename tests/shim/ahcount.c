/* ahcount: a preloaded counting library for the hot-path test. Between ahcount_begin() and
 * ahcount_end() it counts every allocation (malloc, calloc, realloc, free, posix_memalign,
 * aligned_alloc, memalign) and every lock taken (pthread mutex, rwlock and spin locks, semaphores)
 * in the process, whoever calls them; the test compares the counts of one converged call with and
 * without libautoha.so (system calls are counted by strace between getppid() markers). */
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <malloc.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);

#define EXPORT __attribute__((visibility("default")))

void ahcount_begin(void);
void ahcount_end(void);
long ahcount_get(int which);

static _Atomic int on;
static _Atomic long counts[2]; /* 0 allocations, 1 locks */

EXPORT void ahcount_begin(void) {
  counts[0] = counts[1] = 0;
  atomic_store(&on, 1);
}
EXPORT void ahcount_end(void) { atomic_store(&on, 0); }
EXPORT long ahcount_get(int which) { return which == 0 || which == 1 ? counts[which] : -1; }

static void bump(int which) {
  if (atomic_load_explicit(&on, memory_order_relaxed)) atomic_fetch_add(&counts[which], 1);
}

EXPORT void *malloc(size_t n) {
  bump(0);
  return __libc_malloc(n);
}
EXPORT void *calloc(size_t a, size_t b) {
  bump(0);
  return __libc_calloc(a, b);
}
EXPORT void *realloc(void *p, size_t n) {
  bump(0);
  return __libc_realloc(p, n);
}
EXPORT void free(void *p) {
  if (p) bump(0);
  __libc_free(p);
}
EXPORT void *memalign(size_t a, size_t n) {
  bump(0);
  return __libc_memalign(a, n);
}
EXPORT void *aligned_alloc(size_t a, size_t n) {
  bump(0);
  return __libc_memalign(a, n);
}
EXPORT int posix_memalign(void **p, size_t a, size_t n) {
  bump(0);
  void *q = __libc_memalign(a, n);
  if (!q) return 12; /* ENOMEM */
  *p = q;
  return 0;
}

#define FORWARD(ret, name, params, args)                                                           \
  EXPORT ret name params {                                                                         \
    static ret(*real) params;                                                                      \
    if (!real) real = (ret(*) params)dlsym(RTLD_NEXT, #name);                                      \
    bump(1);                                                                                       \
    return real args;                                                                              \
  }
FORWARD(int, pthread_mutex_lock, (pthread_mutex_t * m), (m))
FORWARD(int, pthread_mutex_trylock, (pthread_mutex_t * m), (m))
FORWARD(int, pthread_rwlock_rdlock, (pthread_rwlock_t * l), (l))
FORWARD(int, pthread_rwlock_wrlock, (pthread_rwlock_t * l), (l))
FORWARD(int, pthread_spin_lock, (pthread_spinlock_t * l), (l))
FORWARD(int, sem_wait, (sem_t * s), (s))
