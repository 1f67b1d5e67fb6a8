/* ah_coord_client_wait.c: a thread waiting for news of the hub sleeps until it comes, not for a
 * fixed nap. The shim's rank that reaches a call with no decision yet looks for it (its schedule,
 * its process's ring) and then sleeps here; it is woken when bytes for its process arrive, so the
 * decision reaches it when it reaches the host, not at the end of a nap that doubles up to 500 us.
 * A rank waiting at its first call for the hub's verdict sleeps here too.
 *
 * The word slept on is a futex: in the process's ring behind a host relay (shared by the relay's
 * process and this one: the relay puts the bytes, so the relay wakes it), else in the client (the
 * I/O thread delivers, so it wakes it). A delivered segment or verdict bumps it in either case. Either side bumps the word whenever it has news and makes
 * the wake-up system call only when a thread sleeps, so nobody pays a system call for a process
 * whose ranks are not waiting — which is why a segment still rings no doorbell (docs/coordinator.md
 * "Host relay").
 *
 * No lost wake-up: the sleeper counts itself in (waiters), then looks at the word and the ring's
 * indices; the waker publishes its news (the ring's head, the bumped word), then looks at waiters.
 * With a full fence between each side's store and load, one of them sees the other: either the
 * sleeper sees the news and does not sleep, or the waker sees the sleeper and wakes it. Every sleep
 * is bounded by the caller's timeout anyway, so a wake-up lost to anything else costs one nap. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ah_coord_client_internal.h"

static void futex_wake_all(_Atomic uint32_t *w, int shared) {
  (void)syscall(SYS_futex, (uint32_t *)w, shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, INT_MAX, NULL,
                NULL, 0);
}

/* Sleeps while *w holds v, at most us microseconds (a signal or a spurious wake-up returns early). */
static void futex_sleep(_Atomic uint32_t *w, uint32_t v, long us, int shared) {
  struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
  (void)syscall(SYS_futex, (uint32_t *)w, shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE, v, &ts, NULL,
                0);
}

void ah_coord_client_sleep_us(long us) {
  struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

uint64_t ah_coord_wait_ticket(ah_coord_t *c) {
  if (!c) return 0;
  pthread_mutex_lock(&c->rmu); /* the ring is replaced and unmapped under it */
  uint32_t w = atomic_load(c->ring ? &c->ring->wake : &c->wake);
  uint64_t t = (uint64_t)c->ring_gen << 32 | w;
  pthread_mutex_unlock(&c->rmu);
  return t;
}

void ah_coord_wait(ah_coord_t *c, uint64_t ticket, long timeout_us) {
  if (timeout_us <= 0) return;
  /* Not alive: the hub is gone, or this is a forked child sharing its parent's ring, which must
   * not count itself among the parent's sleepers. The caller's pace is kept. */
  if (!c || !atomic_load(&c->alive)) {
    ah_coord_client_sleep_us(timeout_us);
    return;
  }
  pthread_mutex_lock(&c->rmu);
  if ((uint32_t)(ticket >> 32) != c->ring_gen) { /* the connection changed since: look again */
    pthread_mutex_unlock(&c->rmu);
    return;
  }
  client_ring_t *r = c->ring;
  _Atomic uint32_t *word = r ? &r->wake : &c->wake, *waiters = r ? &r->waiters : &c->nwait;
  if (r)
    atomic_fetch_add(&c->ring_pins, 1); /* ah_coord_client_ring_set unmaps it only after we leave */
  atomic_fetch_add(waiters, 1);
  atomic_thread_fence(memory_order_seq_cst);
  int news = atomic_load(word) != (uint32_t)ticket ||
             (r && atomic_load(&r->head) != atomic_load_explicit(&r->tail, memory_order_relaxed));
  pthread_mutex_unlock(&c->rmu);
  if (!news) futex_sleep(word, (uint32_t)ticket, timeout_us, r != NULL);
  atomic_fetch_sub(waiters, 1);
  if (r) atomic_fetch_sub(&c->ring_pins, 1);
}

void ah_coord_client_notify(ah_coord_t *c) {
  client_ring_t *r = c->ring;
  _Atomic uint32_t *word = r ? &r->wake : &c->wake, *waiters = r ? &r->waiters : &c->nwait;
  atomic_fetch_add(word, 1);
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load(waiters) != 0) futex_wake_all(word, r != NULL);
}

/* Note that waiters is the local process's to write and a faulty one could leave it high: the relay
 * then makes one wake-up call per put for nobody, which costs it time, never correctness. */
void ah_coord_client_ring_wake(client_ring_t *r) {
  atomic_thread_fence(memory_order_seq_cst); /* the head stored before waiters is read */
  if (atomic_load_explicit(&r->waiters, memory_order_relaxed) == 0) return;
  atomic_fetch_add(&r->wake, 1);
  futex_wake_all(&r->wake, 1);
}

void ah_coord_client_ring_set(ah_coord_t *c, client_ring_t *ring) {
  pthread_mutex_lock(&c->rmu);
  client_ring_t *old = c->ring;
  c->ring = ring;
  c->ring_gen++;
  c->rlen = 0; /* a partial frame of the last connection must not prefix the next one's */
  pthread_mutex_unlock(&c->rmu);
  if (!old) return;
  /* Its sleepers wake (their word moved) and leave; no new one can take it (c->ring moved on). */
  atomic_fetch_add(&old->wake, 1);
  futex_wake_all(&old->wake, 1);
  while (atomic_load(&c->ring_pins) != 0) ah_coord_client_sleep_us(50);
  munmap(old,
         sizeof *old); /* as ah_coord_client_ring_unmap, which the relay's side of the file owns */
}
