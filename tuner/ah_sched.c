/* The schedule of one key (see ah_sched.h): committed segments in blocks that never move, so a
 * reader indexes them without a lock, published by a release store of the count.
 *
 * Segments live in blocks of BLOCK entries reached through a fixed table of block pointers; a
 * writer allocates a block before publishing the first segment in it, so a reader that loaded the
 * count (acquire) finds every block it needs. Cutting a forever segment short rewrites only its
 * count, with an atomic store that readers load atomically, so no reader sees a torn segment. */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ah_sched.h"

#define BLOCK 64
#define NBLOCKS 64 /* capacity: 4096 segments per key, far beyond any search budget */

typedef struct {
  ah_segment_t seg;
  uint64_t orig_count; /* count as appended (a cut forever segment keeps 0 here, for replays) */
} entry_t;

struct ah_sched {
  ah_sched_head_t head; /* first: ah_sched_published reads it inline */
  entry_t *_Atomic blocks[NBLOCKS];
  pthread_mutex_t wlock; /* writers only */
};

_Static_assert(offsetof(struct ah_sched, head) == 0,
               "ah_sched_published reads the head at offset 0");

ah_sched_t *ah_sched_create(void) {
  ah_sched_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  pthread_mutex_init(&s->wlock, NULL);
  return s;
}

void ah_sched_destroy(ah_sched_t *s) {
  if (!s) return;
  for (int i = 0; i < NBLOCKS; i++) free(atomic_load_explicit(&s->blocks[i], memory_order_relaxed));
  pthread_mutex_destroy(&s->wlock);
  free(s);
}

static entry_t *entry_at(const ah_sched_t *s, uint64_t i) {
  entry_t *b = atomic_load_explicit(&((ah_sched_t *)s)->blocks[i / BLOCK], memory_order_relaxed);
  return &b[i % BLOCK];
}

static uint64_t seg_count(const entry_t *e) {
  return __atomic_load_n(&e->seg.count, __ATOMIC_ACQUIRE);
}

/* Horizon given n published entries. */
static uint64_t horizon_of(const ah_sched_t *s, uint64_t n) {
  if (n == 0) return 0;
  const entry_t *last = entry_at(s, n - 1);
  uint64_t c = seg_count(last);
  return c == AH_SCHED_FOREVER ? UINT64_MAX : last->seg.first + c;
}

uint64_t ah_sched_horizon(const ah_sched_t *s) {
  return horizon_of(s, atomic_load_explicit(&((ah_sched_t *)s)->head.n, memory_order_acquire));
}

/* Field-wise, so padding never makes two equal configurations differ. */
static int same_content(const ah_segment_t *a, const ah_segment_t *b) {
  if (a->first != b->first || a->source != b->source || a->config.algo != b->config.algo ||
      a->config.proto != b->config.proto || a->config.ndims != b->config.ndims)
    return 0;
  for (int d = 0; d < a->config.ndims && d < AH_MAX_DIMS; d++)
    if (a->config.res[d] != b->config.res[d]) return 0;
  return 1;
}

/* Index of the entry covering `index` among the first n, or -1. */
static int64_t find(const ah_sched_t *s, uint64_t n, uint64_t index) {
  if (n == 0) return -1;
  const entry_t *last = entry_at(s, n - 1);
  if (index >= last->seg.first) { /* the common case: the newest segment (a converged key) */
    uint64_t c = seg_count(last);
    return c == AH_SCHED_FOREVER || index < last->seg.first + c ? (int64_t)(n - 1) : -1;
  }
  uint64_t lo = 0, hi = n - 1; /* invariant: entry lo starts at or before index, entry hi after */
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (entry_at(s, mid)->seg.first <= index) lo = mid;
    else hi = mid;
  }
  const entry_t *e = entry_at(s, lo);
  uint64_t c = seg_count(e);
  if (index < e->seg.first) return -1;
  return c == AH_SCHED_FOREVER || index < e->seg.first + c ? (int64_t)lo : -1;
}

int ah_sched_append(ah_sched_t *s, const ah_segment_t *seg) {
  int rc = -1;
  pthread_mutex_lock(&s->wlock);
  uint64_t n = atomic_load_explicit(&s->head.n, memory_order_relaxed);
  uint64_t h = horizon_of(s, n);
  /* A replay of a segment already committed (same start, config and source, as first sent). */
  if (n > 0 && seg->first < h) {
    int64_t i = find(s, n, seg->first);
    if (i >= 0) {
      const entry_t *e = entry_at(s, (uint64_t)i);
      if (same_content(&e->seg, seg) && e->orig_count == seg->count) rc = 0;
    }
    if (rc == 0 || h != UINT64_MAX) goto out_unlock;
  }
  if (n == (uint64_t)NBLOCKS * BLOCK) goto out_unlock;
  entry_t *cut = NULL;
  if (h == UINT64_MAX) { /* cutting the forever segment short: only strictly after its start */
    cut = entry_at(s, n - 1);
    if (seg->first <= cut->seg.first) goto out_unlock;
  } else if (seg->first != h) {
    goto out_unlock;
  }
  if (!atomic_load_explicit(&s->blocks[n / BLOCK], memory_order_relaxed)) {
    entry_t *b = calloc(BLOCK, sizeof *b);
    if (!b) goto out_unlock;
    atomic_store_explicit(&s->blocks[n / BLOCK], b, memory_order_release);
  }
  entry_t *e = entry_at(s, n);
  e->seg = *seg;
  e->orig_count = seg->count;
  if (cut) __atomic_store_n(&cut->seg.count, seg->first - cut->seg.first, __ATOMIC_RELEASE);
  atomic_store_explicit(&s->head.n, n + 1, memory_order_release);
  rc = 0;
out_unlock:
  pthread_mutex_unlock(&s->wlock);
  return rc;
}

int ah_sched_lookup(const ah_sched_t *s, uint64_t index, ah_segment_t *seg_p) {
  uint64_t n = atomic_load_explicit(&((ah_sched_t *)s)->head.n, memory_order_acquire);
  int64_t i = find(s, n, index);
  if (i < 0) return 0;
  const entry_t *e = entry_at(s, (uint64_t)i);
  *seg_p = e->seg;
  seg_p->count = seg_count(e);
  return 1;
}

void ah_sched_foreach(const ah_sched_t *s, void (*fn)(void *arg, const ah_segment_t *seg),
                      void *arg) {
  uint64_t n = atomic_load_explicit(&((ah_sched_t *)s)->head.n, memory_order_acquire);
  for (uint64_t i = 0; i < n; i++) {
    const entry_t *e = entry_at(s, i);
    ah_segment_t seg = e->seg;
    seg.count = seg_count(e);
    fn(arg, &seg);
  }
}
