/* Task objects reused per thread. NCCL takes its per-call tasks from memory pools; sim/ did a
 * calloc and a free per call, and glibc's cost for that pair depended on the heap's layout: a run
 * with a plugin loaded at startup and one without could differ by 200 instructions per call in
 * malloc_consolidate alone, which bench/hotpath then counted for or against the shim. A thread keeps
 * up to POOL_MAX finished tasks and hands them back zeroed; the rest are freed. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sim_nccl.h"

#define POOL_MAX 16

static _Thread_local sim_task_t *pool;
static _Thread_local int pool_count;
static _Thread_local int pool_armed; /* the thread's key value is set */
static pthread_key_t pool_key;       /* its destructor frees an exiting thread's pool */
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static int pool_key_ok;

static void pool_drain(void *unused) {
  (void)unused;
  while (pool) {
    sim_task_t *next = pool->next;
    free(pool);
    pool = next;
  }
  pool_count = 0;
  pool_armed = 0;
}

static void pool_key_create(void) { pool_key_ok = pthread_key_create(&pool_key, pool_drain) == 0; }

sim_task_t *sim_task_new(void) {
  sim_task_t *t = pool;
  if (!t) return calloc(1, sizeof *t);
  pool = t->next;
  pool_count--;
  memset(t, 0, sizeof *t);
  return t;
}

void sim_task_free(sim_task_t *t) {
  if (!t) return;
  free(t->scratch);
  if (!pool_armed) { /* the first task this thread keeps: arrange for its pool's release */
    pthread_once(&pool_once, pool_key_create);
    pool_armed = pool_key_ok && pthread_setspecific(pool_key, (void *)1) == 0;
  }
  if (!pool_armed || pool_count >= POOL_MAX) {
    free(t);
    return;
  }
  t->next = pool;
  pool = t;
  pool_count++;
}
