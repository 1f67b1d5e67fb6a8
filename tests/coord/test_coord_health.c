/* Hang localisation from progress records (coordinator/ah_coord_health.c): each case the hub must
 * tell apart — a rank that never entered a call, a call whose GPU work never completed (on every
 * rank, on some, on a rank whose host went on), ranks that entered different calls, a rank that
 * never reported — named with its host, pid and GPU; and the record's wire form refusing what no
 * rank would send. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "ah_check.h"
#include "ah_coord_health.h"
#include "ah_config.h"

#define N 8
enum { RS = AH_FUNC_REDUCESCATTER, AG = AH_FUNC_ALLGATHER };

static ah_health_rec_t recs[N];
static ah_health_rank_t ranks[N];
static char text[AH_HEALTH_TEXT];

/* Every rank: entered `ag` all-gathers (bin 20) and `rs` reduce-scatters (bin 21), idle. */
static void setup_all(uint64_t ag, uint64_t rs) {
  static const char *hosts[N] = {"n0", "n0", "n1", "n1", "n2", "n2", "n3", "n3"};
  for (int r = 0; r < N; r++) {
    recs[r] = (ah_health_rec_t){.rank = (uint32_t)r,
                                .pid = 1000u + (uint32_t)r,
                                .gpu = (uint16_t)(r % 2),
                                .state = AH_HEALTH_IDLE,
                                .nkeys = 2};
    recs[r].keys[0] = (ah_health_key_t){AG, 20, ag};
    recs[r].keys[1] = (ah_health_key_t){RS, 21, rs};
    ranks[r] = (ah_health_rank_t){&recs[r], hosts[r]};
  }
}

static ah_finding_t finding;
static int classify(void) {
  int kind = ah_health_classify(0xabc, ranks, N, 12.0, &finding);
  memcpy(text, finding.text, sizeof text);
  return kind;
}

/* The records classify as `kind`, and the line holds `needle`. */
static void expect(int kind, const char *needle) {
  ck_assert_int_eq(classify(), kind);
  ck_assert_msg(strstr(text, needle), "no '%s' in: %s", needle, text);
}

START_TEST(same_calls_all_idle_is_no_hang) {
  setup_all(4, 4);
  ck_assert_int_eq(classify(), AH_FINDING_NONE);
}
END_TEST

START_TEST(same_calls_none_completed) {
  setup_all(4, 4);
  for (int r = 0; r < N; r++) recs[r].state = AH_HEALTH_BUSY;
  expect(AH_FINDING_INCOMPLETE, "every rank entered allgather 1M+ #3, none completed it in 12 s");
}
END_TEST

START_TEST(same_calls_all_busy_one_host_back_from_the_call) {
  /* rank 3's GPU stopped in the step's last call; its host returned and waits in a sync, while the
   * others' hosts wait inside that call (sim/'s collectives hold them until the data moved) */
  setup_all(4, 4);
  for (int r = 0; r < N; r++) {
    recs[r].state = AH_HEALTH_BUSY;
    recs[r].host = r == 3 ? AH_HEALTH_HOST_OUTSIDE : AH_HEALTH_HOST_IN_NCCL;
  }
  expect(AH_FINDING_INCOMPLETE,
         "the GPU of rank 3 (n1 pid 1003 gpu 1) stopped in allgather 1M+ #3");
  ck_assert_uint_eq(finding.nranks, 1);
  ck_assert_uint_eq(finding.ranks[0].rank, 3);
  for (int r = 0; r < N; r++) recs[r].host = AH_HEALTH_HOST_OUTSIDE; /* a GPU's hosts: all back */
  expect(AH_FINDING_INCOMPLETE, "none completed it");
  ck_assert_uint_eq(finding.nranks, 0); /* no one singled out */
}
END_TEST

START_TEST(same_calls_one_not_completed) {
  setup_all(4, 4);
  recs[5].state = AH_HEALTH_BUSY;
  expect(AH_FINDING_INCOMPLETE, "rank 5 (n2 pid 1005 gpu 1) did not complete");
  ck_assert_msg(strstr(text, "the other 7 did"), "%s", text);
}
END_TEST

START_TEST(a_stalled_host_never_entered_the_call) {
  setup_all(4, 4); /* the others entered reduce-scatter #4 and wait in it; rank 2 stopped before */
  for (int r = 0; r < N; r++)
    if (r != 2) recs[r].keys[1].entered = 5, recs[r].state = AH_HEALTH_BUSY;
  expect(AH_FINDING_MISSING,
         "rank 2 (n1 pid 1002 gpu 0) never entered reducescatter 2M+ #4, which "
         "rank 0 (n0 pid 1000 gpu 0),1 (n0 pid 1001 gpu 1) +5 more entered 12 s ago");
  /* its parts, for the event: the rank at fault with its place, the call */
  ck_assert_int_eq(finding.kind, AH_FINDING_MISSING);
  ck_assert_uint_eq(finding.nranks, 1);
  ck_assert_uint_eq(finding.ranks[0].rank, 2);
  ck_assert_uint_eq(finding.ranks[0].pid, 1002);
  ck_assert_uint_eq(finding.ranks[0].gpu, 0);
  ck_assert_str_eq(finding.ranks[0].host, "n1");
  ck_assert(finding.has_call && finding.coll == RS && finding.bin == 21 && finding.index == 4);
}
END_TEST

START_TEST(b_a_gpu_stopped_while_its_host_went_on) {
  setup_all(8, 8); /* rank 1's GPU hung in #7; its host queued on; the others wait inside #8 */
  for (int r = 0; r < N; r++) recs[r].state = AH_HEALTH_BUSY, recs[r].keys[1].entered = 9;
  for (int r = 0; r < N; r++) recs[r].host = AH_HEALTH_HOST_IN_NCCL;
  recs[1].keys[0].entered = 40;
  recs[1].keys[1].entered = 40;
  recs[1].host = AH_HEALTH_HOST_OUTSIDE; /* queued on, then waited for its GPU */
  expect(AH_FINDING_INCOMPLETE, "the GPU of rank 1 (n0 pid 1001 gpu 1) stopped");
  ck_assert_msg(
      strstr(text, "rank 0 (n0 pid 1000 gpu 0),2 (n1 pid 1002 gpu 0) +5 more wait for it"), "%s",
      text);
  ck_assert_uint_eq(finding.nranks, 1); /* the stopped GPU's rank, not the waiting ones */
  ck_assert_uint_eq(finding.ranks[0].rank, 1);
}
END_TEST

START_TEST(b_a_gpu_stopped_and_its_host_waits_for_it) {
  /* rank 5's GPU hung in its last call of a step and its host waits in a stream synchronisation;
   * the others completed that call, synchronised, and wait inside the next step's first call (on
   * real NCCL their hosts wait in their own next synchronisation: outside NCCL too) */
  setup_all(4, 4);
  for (int r = 0; r < N; r++) {
    recs[r].state = AH_HEALTH_BUSY;
    recs[r].host = AH_HEALTH_HOST_OUTSIDE;
    if (r != 5) recs[r].keys[0].entered = 5;
  }
  expect(AH_FINDING_INCOMPLETE,
         "the GPU of rank 5 (n2 pid 1005 gpu 1) stopped in its last call (its host waits for "
         "it); 7 ranks completed it and wait in allgather 1M+ #4; stalled 12 s");
  ck_assert_uint_eq(finding.nranks, 1); /* never the healthy 7 */
  ck_assert_uint_eq(finding.ranks[0].rank, 5);
  ck_assert(finding.has_call && finding.coll == AG && finding.index == 4);
  for (int r = 0; r < N; r++) /* as sim/ blocks them: inside the call; the same rank */
    if (r != 5) recs[r].host = AH_HEALTH_HOST_IN_NCCL;
  expect(AH_FINDING_INCOMPLETE, "the GPU of rank 5 (n2 pid 1005 gpu 1) stopped in its last call");
  ck_assert_uint_eq(finding.ranks[0].rank, 5);
}
END_TEST

START_TEST(b_behind_ranks_never_completed_what_the_front_completed) {
  setup_all(4, 4);
  for (int r = 0; r < N; r++)
    if (r != 6) recs[r].keys[1].entered = 5; /* 6 is busy in #3 while the others completed #4 */
  recs[6].state = AH_HEALTH_BUSY;
  expect(AH_FINDING_INCOMPLETE, "rank 6 (n3 pid 1006 gpu 0) did not complete reducescatter 2M+ #4");
}
END_TEST

START_TEST(b_one_gpu_of_a_thread_driving_several_stopped) {
  setup_all(4, 4); /* one thread drives ranks 4-7: 6's GPU hung in #3, the thread waits for it */
  for (int r = 0; r < 4; r++) recs[r].keys[1].entered = 5, recs[r].state = AH_HEALTH_BUSY;
  recs[6].state = AH_HEALTH_BUSY;
  expect(AH_FINDING_INCOMPLETE,
         "rank 6 (n3 pid 1006 gpu 0) did not complete its calls before reducescatter 2M+ #4, "
         "which rank 4 (n2 pid 1004 gpu 0),5 (n2 pid 1005 gpu 1) +1 more completed");
  ck_assert_uint_eq(finding.nranks, 1);
  ck_assert_uint_eq(finding.ranks[0].rank, 6);
}
END_TEST

START_TEST(c_ranks_entered_different_calls) {
  setup_all(4, 6); /* rank 3 issued its reduce-scatter #6 at half size: another bin */
  for (int r = 0; r < N; r++) recs[r].state = AH_HEALTH_BUSY;
  for (int r = 0; r < N; r++)
    if (r != 3) recs[r].keys[1].entered = 7;
  recs[3].keys[2] = (ah_health_key_t){RS, 20, 1};
  recs[3].nkeys = 3;
  expect(AH_FINDING_MISMATCH, "different calls");
  ck_assert_msg(strstr(text,
                       "rank 3 (n1 pid 1003 gpu 1) entered reducescatter 1M+ #0 where 7 others "
                       "entered reducescatter 2M+ #6"),
                "%s", text);
  ck_assert_uint_eq(finding.nranks, 1);
  ck_assert_uint_eq(finding.ranks[0].rank, 3);
  ck_assert(finding.has_call && finding.bin == 20 && finding.index == 0); /* the odd one's call */
}
END_TEST

START_TEST(a_rank_that_never_reported_is_named) {
  setup_all(4, 4);
  ranks[7].rec = NULL;
  expect(AH_FINDING_MISSING, "rank 7 (never reported) never entered");
  ck_assert_uint_eq(finding.nranks, 1);
  ck_assert_uint_eq(finding.ranks[0].rank, 7);
  ck_assert_str_eq(finding.ranks[0].host, ""); /* no place known */
}
END_TEST

START_TEST(record_roundtrip_and_refusals) {
  setup_all(3, 9);
  recs[0].state = AH_HEALTH_BUSY;
  recs[0].host = AH_HEALTH_HOST_OUTSIDE;
  recs[0].gpu = 300;
  uint8_t w[AH_HEALTH_REC_BYTES];
  ah_health_rec_pack(&recs[0], w);
  ah_health_rec_t back;
  char err[160];
  ck_assert_int_eq(ah_health_rec_unpack(w, &back, err, sizeof err), 0);
  ck_assert_uint_eq(back.pid, 1000);
  ck_assert_uint_eq(back.gpu, 300);
  ck_assert_uint_eq(back.state, AH_HEALTH_BUSY);
  ck_assert_uint_eq(back.host, AH_HEALTH_HOST_OUTSIDE);
  ck_assert_uint_eq(back.nkeys, 2);
  ck_assert_uint_eq(back.keys[1].entered, 9);
  uint8_t bad[AH_HEALTH_REC_BYTES];
  memcpy(bad, w, sizeof bad);
  bad[10] = 3;
  ck_assert_int_eq(ah_health_rec_unpack(bad, &back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "state 3"), "%s", err);
  bad[10] = AH_HEALTH_BUSY | 3 << 4; /* host 3 */
  ck_assert_int_eq(ah_health_rec_unpack(bad, &back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "host 3"), "%s", err);
  memcpy(bad, w, sizeof bad);
  bad[11] = AH_HEALTH_KEYS + 1;
  ck_assert_int_eq(ah_health_rec_unpack(bad, &back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "17 keys"), "%s", err);
  memcpy(bad, w, sizeof bad);
  bad[12 + 10 * 5 + 3] = 1; /* an unused slot */
  ck_assert_int_eq(ah_health_rec_unpack(bad, &back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "slot 5"), "%s", err);
  memcpy(bad, w, sizeof bad);
  bad[12] = AH_NUM_COLLS;
  ck_assert_int_eq(ah_health_rec_unpack(bad, &back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "out of range"), "%s", err);
}
END_TEST

START_TEST(finding_roundtrip_and_refusals) {
  setup_all(4, 4);
  for (int r = 0; r < N; r++)
    if (r != 2 && r != 5) recs[r].keys[1].entered = 5, recs[r].state = AH_HEALTH_BUSY;
  ck_assert_int_eq(classify(), AH_FINDING_MISSING);
  ck_assert_uint_eq(finding.nranks, 2);
  uint8_t w[AH_FINDING_BYTES], bad[AH_FINDING_BYTES];
  ah_finding_pack(&finding, w);
  ah_finding_t back;
  char err[160];
  ck_assert_int_eq(ah_finding_unpack(w, &back, err, sizeof err), 0);
  ck_assert_int_eq(back.kind, finding.kind);
  ck_assert_str_eq(back.text, finding.text);
  ck_assert_uint_eq(back.nranks, 2);
  ck_assert_uint_eq(back.ranks[1].rank, 5);
  ck_assert_uint_eq(back.ranks[1].pid, 1005);
  ck_assert_str_eq(back.ranks[1].host, "n2");
  ck_assert(back.has_call && back.coll == RS && back.index == 4);
  memcpy(bad, w, sizeof bad);
  bad[0] = AH_FINDING_LAST + 1;
  ck_assert_int_eq(ah_finding_unpack(bad, &back, err, sizeof err), -1);
  char beyond[32]; /* whatever the last kind is */
  snprintf(beyond, sizeof beyond, "kind %d", AH_FINDING_LAST + 1);
  ck_assert_msg(strstr(err, beyond), "%s", err);
  memcpy(bad, w, sizeof bad);
  bad[3] = '\n';
  ck_assert_int_eq(ah_finding_unpack(bad, &back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "unprintable"), "%s", err);
  memcpy(bad, w, sizeof bad);
  memset(bad + 1 + AH_HEALTH_TEXT + 4 + 10, 'x', AH_FINDING_HOST); /* a host without its NUL */
  ck_assert_int_eq(ah_finding_unpack(bad, &back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "rank 0's host"), "%s", err);
  memcpy(bad, w, sizeof bad);
  bad[AH_FINDING_BYTES - 10] = AH_NUM_COLLS; /* the call's collective (then bin u8, index u64) */
  ck_assert_int_eq(ah_finding_unpack(bad, &back, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "out of range"), "%s", err);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {
      same_calls_all_idle_is_no_hang,
      same_calls_none_completed,
      same_calls_all_busy_one_host_back_from_the_call,
      same_calls_one_not_completed,
      a_stalled_host_never_entered_the_call,
      b_a_gpu_stopped_while_its_host_went_on,
      b_a_gpu_stopped_and_its_host_waits_for_it,
      b_behind_ranks_never_completed_what_the_front_completed,
      b_one_gpu_of_a_thread_driving_several_stopped,
      c_ranks_entered_different_calls,
      a_rank_that_never_reported_is_named,
      record_roundtrip_and_refusals,
      finding_roundtrip_and_refusals,
  };
  return ah_check_main("coord_health", (ah_check_case_t){.name = "classify", .timeout = 10}, tests,
                       AH_CHECK_COUNT(tests));
}
