/* test_ha_beat.c: unit tests of a standby's heartbeat rule (rdma/ah_ha_beat.c,
 * AUTOHA_HA_HEARTBEAT_MISS): one missed round among hits is not death under 3/5, three within five
 * are, misses spread wider than the window never add up, and 1/1 (the default) dies at the first. */
#include <check.h>

#include "ah_check.h"
#include "ah_ha_beat.h"

START_TEST(one_miss_is_not_death) {
  ah_ha_beat_t b = {0};
  for (int i = 0; i < 10; i++) ck_assert_int_eq(ah_ha_beat_round(&b, 0, 5), 0);
  ck_assert_int_eq(ah_ha_beat_round(&b, 1, 5), 1);
  ck_assert(!ah_ha_beat_dead(&b, 3, 5));
  ck_assert_int_eq(ah_ha_beat_round(&b, 0, 5), 1);
  ck_assert(!ah_ha_beat_dead(&b, 3, 5));
  ck_assert_int_eq(ah_ha_beat_round(&b, 1, 5), 2);
  ck_assert(!ah_ha_beat_dead(&b, 3, 5));
  ck_assert_int_eq(ah_ha_beat_round(&b, 1, 5), 3); /* 3 of the last 5: dead */
  ck_assert(ah_ha_beat_dead(&b, 3, 5));
}
END_TEST

START_TEST(old_misses_drop_out) {
  ah_ha_beat_t b = {0};
  /* a miss every third round: never more than 2 in any 5 */
  for (int i = 0; i < 30; i++) {
    int n = ah_ha_beat_round(&b, i % 3 == 0, 5);
    ck_assert_int_le(n, 2);
    ck_assert(!ah_ha_beat_dead(&b, 3, 5));
  }
  /* five misses, then five hits: the window is clean again */
  for (int i = 0; i < 5; i++) ah_ha_beat_round(&b, 1, 5);
  ck_assert(ah_ha_beat_dead(&b, 5, 5));
  for (int i = 0; i < 5; i++) ah_ha_beat_round(&b, 0, 5);
  ck_assert_int_eq(ah_ha_beat_round(&b, 0, 5), 0);
  ck_assert(!ah_ha_beat_dead(&b, 1, 5));
}
END_TEST

START_TEST(default_and_widest) {
  ah_ha_beat_t b = {0};
  ah_ha_beat_round(&b, 0, 1);
  ck_assert(!ah_ha_beat_dead(&b, 1, 1));
  ck_assert_int_eq(ah_ha_beat_round(&b, 1, 1), 1); /* 1/1: the first miss */
  ck_assert(ah_ha_beat_dead(&b, 1, 1));
  /* the widest window counts all 32 rounds */
  ah_ha_beat_t w = {0};
  for (int i = 0; i < AH_HA_BEAT_MAX; i++) ah_ha_beat_round(&w, i < 16, AH_HA_BEAT_MAX);
  ck_assert_int_eq(ah_ha_beat_round(&w, 0, AH_HA_BEAT_MAX), 15); /* the oldest miss dropped */
  ck_assert(ah_ha_beat_dead(&w, 15, AH_HA_BEAT_MAX));
  ck_assert(!ah_ha_beat_dead(&w, 16, AH_HA_BEAT_MAX));
}
END_TEST

int main(void) {
  const TTest *const tests[] = {one_miss_is_not_death, old_misses_drop_out, default_and_widest};
  return ah_check_main("ha_beat", (ah_check_case_t){.name = "ha_beat", .timeout = 60}, tests,
                       AH_CHECK_COUNT(tests));
}
