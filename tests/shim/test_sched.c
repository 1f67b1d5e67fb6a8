/* Unit tests of tuner/ah_sched.c: contiguity, lookups, the forever segment and its cut, replays,
 * capacity, and lock-free readers racing a writer. */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "ah_check.h"
#include "ah_sched.h"

static ah_segment_t seg_make(uint64_t first, uint64_t count, int algo) {
  ah_segment_t s;
  memset(&s, 0, sizeof s);
  s.first = first;
  s.count = count;
  s.config.algo = (int8_t)algo;
  s.config.proto = 2;
  s.config.ndims = 1;
  s.config.res[0] = (int64_t)first; /* lets readers check they got the right segment */
  s.source = AH_SOURCE_TUNED;
  return s;
}

START_TEST(test_empty) {
  ah_sched_t *s = ah_sched_create();
  ck_assert_ptr_nonnull(s);
  ah_segment_t out;
  ck_assert_int_eq(ah_sched_lookup(s, 0, &out), 0);
  ck_assert_uint_eq(ah_sched_horizon(s), 0);
  ah_segment_t bad = seg_make(5, 3, 1);
  ck_assert_int_eq(ah_sched_append(s, &bad), -1); /* must start at the horizon, 0 */
  ck_assert_uint_eq(ah_sched_horizon(s), 0);
  ah_sched_destroy(s);
}
END_TEST

START_TEST(test_contiguous) {
  ah_sched_t *s = ah_sched_create();
  ah_segment_t a = seg_make(0, 10, 0), b = seg_make(10, 5, 1), out;
  ck_assert_int_eq(ah_sched_append(s, &a), 0);
  ck_assert_uint_eq(ah_sched_horizon(s), 10);
  ah_segment_t gap = seg_make(11, 5, 1);
  ck_assert_int_eq(ah_sched_append(s, &gap), -1);
  ck_assert_int_eq(ah_sched_append(s, &b), 0);
  ck_assert_uint_eq(ah_sched_horizon(s), 15);
  ck_assert_int_eq(ah_sched_lookup(s, 0, &out), 1);
  ck_assert_int_eq(out.config.algo, 0);
  ck_assert_int_eq(ah_sched_lookup(s, 9, &out), 1);
  ck_assert_uint_eq(out.first, 0);
  ck_assert_int_eq(ah_sched_lookup(s, 10, &out), 1);
  ck_assert_int_eq(out.config.algo, 1);
  ck_assert_int_eq(ah_sched_lookup(s, 14, &out), 1);
  ck_assert_int_eq(ah_sched_lookup(s, 15, &out), 0);
  /* a replay is a no-op; an overlapping different segment is refused */
  ck_assert_int_eq(ah_sched_append(s, &a), 0);
  ah_segment_t other = seg_make(0, 10, 4);
  ck_assert_int_eq(ah_sched_append(s, &other), -1);
  ck_assert_uint_eq(ah_sched_horizon(s), 15);
  ah_sched_destroy(s);
}
END_TEST

START_TEST(test_forever_and_cut) {
  ah_sched_t *s = ah_sched_create();
  ah_segment_t a = seg_make(0, 4, 0), f = seg_make(4, AH_SCHED_FOREVER, 1), out;
  ck_assert_int_eq(ah_sched_append(s, &a), 0);
  ck_assert_int_eq(ah_sched_append(s, &f), 0);
  ck_assert_uint_eq(ah_sched_horizon(s), UINT64_MAX);
  ck_assert_int_eq(ah_sched_lookup(s, 1000000000ull, &out), 1);
  ck_assert_int_eq(out.config.algo, 1);
  ck_assert_uint_eq(out.count, AH_SCHED_FOREVER);
  ck_assert_int_eq(ah_sched_append(s, &f), 0); /* replay */
  ah_segment_t early = seg_make(4, 3, 2);
  ck_assert_int_eq(ah_sched_append(s, &early), -1); /* cannot cut at or before the start */
  ah_segment_t cut = seg_make(100, 8, 2);
  ck_assert_int_eq(ah_sched_append(s, &cut), 0);
  ck_assert_uint_eq(ah_sched_horizon(s), 108);
  ck_assert_int_eq(ah_sched_lookup(s, 99, &out), 1);
  ck_assert_int_eq(out.config.algo, 1);
  ck_assert_uint_eq(out.count, 96); /* the forever segment now ends at the cut */
  ck_assert_int_eq(ah_sched_lookup(s, 100, &out), 1);
  ck_assert_int_eq(out.config.algo, 2);
  ck_assert_int_eq(ah_sched_lookup(s, 108, &out), 0);
  ck_assert_int_eq(ah_sched_append(s, &f), 0); /* the original forever segment replays cleanly */
  ck_assert_uint_eq(ah_sched_horizon(s), 108);
  ah_sched_destroy(s);
}
END_TEST

static void count_seg(void *arg, const ah_segment_t *seg) {
  uint64_t *n = arg;
  ck_assert_uint_eq(seg->first, n[1]);
  n[1] += seg->count;
  n[0]++;
}

START_TEST(test_capacity_and_foreach) {
  ah_sched_t *s = ah_sched_create();
  int ok = 0;
  for (uint64_t i = 0; i < 5000; i++) {
    ah_segment_t g = seg_make(i, 1, (int)(i % 7));
    if (ah_sched_append(s, &g) != 0) break;
    ok++;
  }
  ck_assert_int_eq(ok, 4096); /* documented capacity; the next append fails cleanly */
  ck_assert_uint_eq(ah_sched_horizon(s), 4096);
  ah_segment_t out;
  for (uint64_t i = 0; i < 4096; i += 37) {
    ck_assert_int_eq(ah_sched_lookup(s, i, &out), 1);
    ck_assert_uint_eq(out.first, i);
    ck_assert_int_eq(out.config.algo, (int)(i % 7));
  }
  uint64_t n[2] = {0, 0};
  ah_sched_foreach(s, count_seg, n);
  ck_assert_uint_eq(n[0], 4096);
  ah_sched_destroy(s);
}
END_TEST

#define RACE_READERS 2
#define RACE_SEGMENTS 4000
#define RACE_PHASE 1000 /* appends between two waits for the readers */

typedef struct {
  ah_sched_t *s;
  _Atomic int stop;
  _Atomic long bad;
  _Atomic long reads[RACE_READERS]; /* lookups each reader has finished */
} race_t;

typedef struct {
  race_t *r;
  int id;
} reader_arg_t;

static void *reader(void *arg) {
  race_t *r = ((reader_arg_t *)arg)->r;
  int id = ((reader_arg_t *)arg)->id;
  unsigned seed = 7u + (unsigned)id;
  while (!atomic_load(&r->stop)) {
    uint64_t h = ah_sched_horizon(r->s);
    if (h == 0) continue;
    uint64_t i = (uint64_t)rand_r(&seed) % h;
    ah_segment_t out;
    if (!ah_sched_lookup(r->s, i, &out) || i < out.first || i >= out.first + out.count ||
        out.config.res[0] != (int64_t)out.first)
      atomic_fetch_add(&r->bad, 1);
    atomic_fetch_add(&r->reads[id], 1);
  }
  return NULL;
}

/* Returns once every reader has finished a lookup after this call began: the readers provably run
 * between the writer's phases, however the threads are scheduled (a handshake, not a sleep). */
static void wait_for_readers(race_t *r) {
  long before[RACE_READERS];
  for (int k = 0; k < RACE_READERS; k++) before[k] = atomic_load(&r->reads[k]);
  for (int k = 0; k < RACE_READERS; k++)
    while (atomic_load(&r->reads[k]) <= before[k]) sched_yield();
}

START_TEST(test_readers_race_writer) {
  race_t r = {.s = ah_sched_create()};
  pthread_t th[RACE_READERS];
  reader_arg_t args[RACE_READERS];
  for (int k = 0; k < RACE_READERS; k++) {
    args[k] = (reader_arg_t){&r, k};
    ck_assert_int_eq(pthread_create(&th[k], NULL, reader, &args[k]), 0);
  }
  uint64_t first = 0;
  for (int i = 0; i < RACE_SEGMENTS; i++) {
    ah_segment_t g = seg_make(first, 1 + (uint64_t)(i % 5), i % 7);
    ck_assert_int_eq(ah_sched_append(r.s, &g), 0);
    first += g.count;
    if ((i + 1) % RACE_PHASE == 0) wait_for_readers(&r);
  }
  atomic_store(&r.stop, 1);
  for (int k = 0; k < RACE_READERS; k++) pthread_join(th[k], NULL);
  ck_assert_int_eq(atomic_load(&r.bad), 0);
  for (int k = 0; k < RACE_READERS; k++) /* one lookup at least after each phase */
    ck_assert_int_ge(atomic_load(&r.reads[k]), RACE_SEGMENTS / RACE_PHASE);
  ah_sched_destroy(r.s);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {test_empty, test_contiguous, test_forever_and_cut,
                                test_capacity_and_foreach, test_readers_race_writer};
  return ah_check_main("ah_sched", (ah_check_case_t){.name = "sched", .timeout = 60}, tests,
                       AH_CHECK_COUNT(tests));
}
