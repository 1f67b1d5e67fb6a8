/* Straggler detection (coordinator/ah_coord_straggler.c): a rank consistently late in one key's
 * calls is flagged once, with its figures, and cleared when it is on time again; jitter of every
 * rank, one very late call, a rank late in half its calls, keys judged apart, calls some rank never
 * reports; a rank turning late mid-job, named by one audit's calls where sparse samples would take
 * hundreds of calls; and the SAMPLES and AUDIT wire forms refusing what no rank or hub would send. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ah_check.h"
#include "ah_rand.h"
#include "ah_config.h"
#include "ah_coord_audit.h"
#include "ah_coord_straggler.h"

#define N 16
enum { RS = AH_FUNC_REDUCESCATTER, AG = AH_FUNC_ALLGATHER };

/* One synchronous call of `coll` #index: every rank arrives at its own time (arrive[r] us after
 * the first), the call takes `t` us once the last arrived; each rank measures from its arrival. */
static void call(ah_strag_t *s, int coll, uint64_t index, double t, const double *arrive) {
  double last = 0;
  for (int r = 0; r < N; r++) last = arrive[r] > last ? arrive[r] : last;
  for (int r = 0; r < N; r++) {
    ah_health_sample_t x = {(uint8_t)coll, 20, index, (float)(last - arrive[r] + t)};
    ah_strag_add(s, (uint32_t)r, &x, 1000);
  }
}

/* Arrivals jittered uniformly within +-j us, with rank `late` (-1: none) `by` us later. */
static void arrivals(double *a, double j, int late, double by) {
  for (int r = 0; r < N; r++) a[r] = 50 + j * (2 * uniform() - 1) + (r == late ? by : 0);
}

START_TEST(a_late_rank_is_flagged_once_with_its_figures) {
  ah_strag_t *s = ah_strag_new(N, 20);
  ck_assert_ptr_nonnull(s);
  double a[N];
  ah_strag_event_t ev;
  int flags = 0;
  for (uint64_t i = 0; i < 40; i++) {
    arrivals(a, 5, 7, 60); /* late by 60 us in a 100 us call */
    call(s, RS, i, 100, a);
    while (ah_strag_next(s, &ev)) {
      ck_assert_uint_eq(ev.rank, 7);
      ck_assert_int_eq(ev.flagged, 1);
      ck_assert_uint_eq(ev.index, AH_STRAG_MIN - 1); /* as soon as it may be */
      ck_assert_int_eq(ev.st.late_calls, AH_STRAG_MIN);
      ck_assert_msg(ev.st.late_p50 > 0.3 && ev.st.late_p50 < 0.45, "p50 %g", ev.st.late_p50);
      ck_assert_msg(ev.st.wait_share > 0.3, "wait share %g", ev.st.wait_share);
      flags++;
    }
  }
  ck_assert_int_eq(flags, 1);
  ah_strag_stats_t st;
  ah_strag_stats(s, 7, &st);
  ck_assert_int_eq(st.flagged, 1);
  ck_assert_int_eq(st.calls, AH_STRAG_WINDOW);
  ah_strag_stats(s, 3, &st);
  ck_assert_int_eq(st.flagged, 0);
  ck_assert_msg(fabs(st.late_p50) < 0.1 && st.wait_share < 0.01, "rank 3: p50 %g wait %g",
                st.late_p50, st.wait_share);
  char text[AH_HEALTH_TEXT];
  ev = (ah_strag_event_t){.rank = 7, .flagged = 1, .coll = RS, .bin = 20, .index = 11};
  ah_strag_stats(s, 7, &ev.st);
  ah_strag_text(0xabcull, &ev, "n1 pid 42 gpu 3", text);
  ck_assert_msg(strstr(text,
                       "straggler on comm 0000000000000abc: rank 7 (n1 pid 42 gpu 3) late in 16 "
                       "of its last 16 sampled calls by ") &&
                    strstr(text, "reducescatter"),
                "%s", text);
  ah_strag_free(s);
}
END_TEST

START_TEST(jitter_one_late_call_and_half_late_are_not_stragglers) {
  ah_strag_t *s = ah_strag_new(N, 20);
  double a[N];
  ah_strag_event_t ev;
  for (uint64_t i = 0; i < 2000; i++) {
    arrivals(a, 15, -1, 0);     /* every rank within +-15 us of a 100 us call */
    if (i == 500) a[4] += 500;  /* one very late call */
    if (i % 2 == 0) a[9] += 60; /* late in every other call */
    call(s, RS, i, 100, a);
    ck_assert_msg(!ah_strag_next(s, &ev), "call %llu flagged rank %u (p50 %g)",
                  (unsigned long long)i, ev.rank, ev.st.late_p50);
  }
  ck_assert_uint_eq(ah_strag_judged(s), 2000);
  ah_strag_free(s);
}
END_TEST

START_TEST(jitter_larger_than_the_threshold_is_not_a_straggler) {
  /* short calls after long compute: every rank's arrival jitter (+-40 us) is most of a 60 us call,
   * so any rank is often "late by 20%" — but never beyond the call's own spread */
  ah_strag_t *s = ah_strag_new(N, 20);
  double a[N];
  ah_strag_event_t ev;
  for (uint64_t i = 0; i < 5000; i++) {
    arrivals(a, 40, -1, 0);
    call(s, RS, i, 60, a);
    ck_assert_msg(!ah_strag_next(s, &ev), "call %llu flagged rank %u (p50 %g, late in %d of %d)",
                  (unsigned long long)i, ev.rank, ev.st.late_p50, ev.st.late_calls, ev.st.calls);
  }
  /* and a rank late by 200 us, far beyond that jitter, is still named */
  int named = 0;
  for (uint64_t i = 5000; i < 5016; i++) {
    arrivals(a, 40, 11, 200);
    call(s, RS, i, 60, a);
    while (ah_strag_next(s, &ev)) named += ev.rank == 11 && ev.flagged;
  }
  ck_assert_int_eq(named, 1);
  ah_strag_free(s);
}
END_TEST

START_TEST(keys_are_judged_apart_and_a_recovered_rank_is_cleared) {
  ah_strag_t *s = ah_strag_new(N, 20);
  double a[N];
  ah_strag_event_t ev;
  int flagged = 0, cleared = 0;
  for (uint64_t i = 0; i < 80; i++) {
    /* rank 2 is late in the reduce-scatters (after its compute), on time in the all-gathers, then
     * recovers from call 40 */
    arrivals(a, 5, i < 40 ? 2 : -1, 50);
    call(s, RS, i, 100, a);
    arrivals(a, 5, -1, 0);
    call(s, AG, i, 100, a);
    while (ah_strag_next(s, &ev)) {
      ck_assert_uint_eq(ev.rank, 2);
      if (ev.flagged) {
        flagged++;
        ck_assert_int_eq(ev.coll, RS);
      } else {
        cleared++;
        ck_assert_uint_ge(ev.index, 40);
      }
    }
  }
  ck_assert_int_eq(flagged, 1);
  ck_assert_int_eq(cleared, 1);
  ah_strag_stats_t st;
  ah_strag_stats(s, 2, &st);
  ck_assert_int_eq(st.flagged, 0);
  ah_strag_free(s);
}
END_TEST

START_TEST(calls_a_rank_never_reports_are_dropped) {
  ah_strag_t *s = ah_strag_new(N, 20);
  /* ranks 0..14 report twice as many calls as there are pending slots, rank 15 none: the slots
   * turn over, nothing is judged */
  const uint64_t calls = 2 * AH_STRAG_PENDING;
  for (uint64_t i = 0; i < calls; i++)
    for (uint32_t r = 0; r + 1 < N; r++) {
      ah_health_sample_t x = {RS, 20, i, r == 3 ? 10.0f : 100.0f};
      ah_strag_add(s, r, &x, 1000 + i);
    }
  ck_assert_uint_eq(ah_strag_judged(s), 0);
  ck_assert_uint_eq(ah_strag_dropped(s), calls - AH_STRAG_PENDING);
  /* aged out: a later call finds every old slot expired */
  ah_health_sample_t x = {AG, 20, 0, 5.0f};
  ah_strag_add(s, 0, &x, 1000 + calls + AH_STRAG_MAX_AGE_NS + 1);
  ck_assert_uint_eq(ah_strag_dropped(s), calls);
  /* a duplicate and out-of-range input are ignored */
  ah_strag_add(s, 0, &x, 2 * AH_STRAG_MAX_AGE_NS);
  ah_strag_add(s, N, &x, 2 * AH_STRAG_MAX_AGE_NS);
  x.us = NAN;
  ah_strag_add(s, 1, &x, 2 * AH_STRAG_MAX_AGE_NS);
  ck_assert_uint_eq(ah_strag_judged(s), 0);
  ck_assert_ptr_null(ah_strag_new(N, 0));
  ck_assert_ptr_null(ah_strag_new(0, 20));
  ah_strag_free(s);
}
END_TEST

START_TEST(samples_roundtrip_and_refusals) {
  ah_health_sample_t x[3] = {{RS, 20, 7, 12.5f}, {AG, 21, 1ull << 40, 0.0f}, {RS, 20, 8, 99.0f}};
  uint8_t w[AH_HEALTH_SAMPLES_BYTES], bad[AH_HEALTH_SAMPLES_BYTES];
  ah_health_samples_pack(5, x, 3, w);
  ah_health_sample_t back[AH_HEALTH_SAMPLES];
  uint32_t rank = 0;
  char err[160];
  ck_assert_int_eq(ah_health_samples_unpack(w, &rank, back, err, sizeof err), 3);
  ck_assert_uint_eq(rank, 5);
  for (int i = 0; i < 3; i++) {
    ck_assert_uint_eq(back[i].coll, x[i].coll);
    ck_assert_uint_eq(back[i].bin, x[i].bin);
    ck_assert_uint_eq(back[i].index, x[i].index);
    ck_assert(back[i].us == x[i].us);
  }
  memcpy(bad, w, sizeof bad);
  bad[4] = AH_HEALTH_SAMPLES + 1;
  ck_assert_int_eq(ah_health_samples_unpack(bad, &rank, back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "17 samples"), "%s", err);
  memcpy(bad, w, sizeof bad);
  bad[5 + AH_HEALTH_SAMPLE_BYTES * 4 + 2] = 1; /* an unused slot */
  ck_assert_int_eq(ah_health_samples_unpack(bad, &rank, back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "unused slot 4"), "%s", err);
  ah_health_sample_t neg = {RS, 20, 1, -3.0f};
  ah_health_samples_pack(0, &neg, 1, bad);
  ck_assert_int_eq(ah_health_samples_unpack(bad, &rank, back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "duration -3"), "%s", err);
  ah_health_sample_t oob = {AH_NUM_COLLS, 20, 1, 3.0f};
  ah_health_samples_pack(0, &oob, 1, bad);
  ck_assert_int_eq(ah_health_samples_unpack(bad, &rank, back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "out of range"), "%s", err);
}
END_TEST

/* A rank that turns late after a key's first calls: the sparse samples (one in 64) of the next
 * 200 calls leave the window mostly on time, so no one is named; the calls of one audit (24 in a
 * row, ah_coord_audit.h) name it at once. */
START_TEST(a_late_straggler_is_named_by_one_audit) {
  ah_strag_t *s = ah_strag_new(N, 20);
  double a[N];
  for (uint64_t i = 0; i < 16; i++) { /* the first 16 calls, all timed: on time */
    arrivals(a, 5, -1, 0);
    call(s, RS, i, 100, a);
  }
  for (uint64_t i = 64; i < 256; i += 64) { /* rank 9 late by 60 us from here: 3 sparse samples */
    arrivals(a, 5, 9, 60);
    call(s, RS, i, 100, a);
  }
  ah_strag_event_t ev;
  ck_assert_int_eq(ah_strag_next(s, &ev), 0);
  /* the audit: every rank times calls 300..323 */
  ah_health_rec_t rec = {.rank = 0, .nkeys = 2};
  rec.keys[0] = (ah_health_key_t){RS, 20, 298};
  rec.keys[1] = (ah_health_key_t){AG, 20, 5}; /* still in its first 16 calls: timed already */
  const ah_health_rec_t *recs[2] = {&rec, NULL};
  ah_audit_t au;
  ck_assert_int_eq(ah_audit_pick(recs, 2, &au), 1);
  ck_assert_uint_eq(au.keys[0].coll, RS);
  ck_assert_uint_eq(au.keys[0].from, 298 + AH_AUDIT_LEAD);
  for (uint64_t i = au.keys[0].from; i < au.keys[0].from + au.calls; i++) {
    arrivals(a, 5, 9, 60);
    call(s, RS, i, 100, a);
  }
  ck_assert_int_eq(ah_strag_next(s, &ev), 1);
  ck_assert_uint_eq(ev.rank, 9);
  ck_assert_int_eq(ev.flagged, 1);
  ck_assert_uint_ge(ev.index, au.keys[0].from);
  ck_assert_uint_lt(ev.index, au.keys[0].from + au.calls);
  ck_assert_int_eq(ah_strag_next(s, &ev), 0);
  ah_strag_free(s);
}
END_TEST

/* The audit chooses the busiest keys, by the furthest rank's count, and its wire form round-trips
 * and refuses what no hub would send. */
START_TEST(audit_picks_busiest_keys_and_roundtrips) {
  ah_health_rec_t r0 = {.rank = 0, .nkeys = 6}, r1 = {.rank = 1, .nkeys = 1};
  for (int i = 0; i < 6; i++) r0.keys[i] = (ah_health_key_t){RS, (uint8_t)(10 + i), 100u * (i + 1)};
  r1.keys[0] = (ah_health_key_t){RS, 10, 5000}; /* rank 1 is further along in bin 10 */
  const ah_health_rec_t *recs[3] = {&r0, NULL, &r1};
  ah_audit_t a;
  ck_assert_int_eq(ah_audit_pick(recs, 3, &a), AH_AUDIT_KEYS);
  ck_assert_uint_eq(a.calls, AH_AUDIT_CALLS);
  ck_assert_uint_eq(a.keys[0].bin, 10);
  ck_assert_uint_eq(a.keys[0].from, 5000 + AH_AUDIT_LEAD);
  ck_assert_uint_eq(a.keys[1].bin, 15);
  ck_assert_uint_eq(a.keys[2].bin, 14);
  ck_assert_uint_eq(a.keys[3].bin, 13);
  uint8_t w[AH_AUDIT_BYTES], bad[AH_AUDIT_BYTES];
  ah_audit_pack(&a, w);
  ah_audit_t back;
  char err[160];
  ck_assert_int_eq(ah_audit_unpack(w, &back, err, sizeof err), 0);
  ck_assert_int_eq(memcmp(&back, &a, sizeof a), 0);
  memcpy(bad, w, sizeof bad);
  bad[0] = bad[1] = 0;
  ck_assert_int_eq(ah_audit_unpack(bad, &back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "audit of 0 calls"), "%s", err);
  memcpy(bad, w, sizeof bad);
  bad[2] = AH_AUDIT_KEYS + 1;
  ck_assert_int_eq(ah_audit_unpack(bad, &back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "5 keys"), "%s", err);
  memcpy(bad, w, sizeof bad);
  bad[3] = AH_NUM_COLLS;
  ck_assert_int_eq(ah_audit_unpack(bad, &back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "out of range"), "%s", err);
  a.nkeys = 1;
  ah_audit_pack(&a, w);
  w[3 + 10 + 5] = 1; /* an unused entry */
  ck_assert_int_eq(ah_audit_unpack(w, &back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "unused entry 1"), "%s", err);
  const ah_health_rec_t *none[2] = {NULL, NULL};
  ck_assert_int_eq(ah_audit_pick(none, 2, &a), 0);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {
      a_late_rank_is_flagged_once_with_its_figures,
      jitter_one_late_call_and_half_late_are_not_stragglers,
      jitter_larger_than_the_threshold_is_not_a_straggler,
      keys_are_judged_apart_and_a_recovered_rank_is_cleared,
      calls_a_rank_never_reports_are_dropped,
      samples_roundtrip_and_refusals,
      a_late_straggler_is_named_by_one_audit,
      audit_picks_busiest_keys_and_roundtrips,
  };
  return ah_check_main("coord_straggler", (ah_check_case_t){.name = "straggler", .timeout = 10},
                       tests, AH_CHECK_COUNT(tests));
}
