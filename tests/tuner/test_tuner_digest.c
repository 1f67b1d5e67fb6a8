/* Unit tests of settings/ah_digest.c: the settings digest ranks compare at join. Settings that make a
 * rank choose alike digest alike (whatever the spelling of the override); any difference in mode,
 * rules or profile entries shows in its own part; the description names the parts. */
#include <check.h>
#include <string.h>

#include "ah_check.h"
#include "ah_digest.h"
#include "ah_override.h"

static void settings_with(ah_settings_t *s, int mode, const char *override) {
  char err[512];
  memset(s, 0, sizeof *s);
  s->mode = mode;
  ck_assert_int_eq(ah_override_parse(override, &s->override, err, sizeof err), 0);
}

/* settings_with, and the digest of those settings without a profile into d. */
static void digest_with(ah_settings_t *s, int mode, const char *override, ah_digest_t *d) {
  settings_with(s, mode, override);
  ah_digest_settings(s, NULL, d);
}

START_TEST(equal_settings_digest_alike) {
  ah_settings_t a, b;
  ah_digest_t da, db;
  digest_with(&a, AH_MODE_FIXED, "allreduce@1M-64M:algo=ring,proto=simple;allgather:nchannels=8",
              &da);
  digest_with(&b, AH_MODE_FIXED,
              " allreduce@1m-64m: algo=RING ,proto=simple ;; allgather:nchannels=8;", &db);
  ck_assert_int_eq(memcmp(&da, &db, sizeof da), 0);
}
END_TEST

START_TEST(each_difference_shows_in_its_part) {
  ah_settings_t a, b;
  ah_digest_t da, db;
  digest_with(&a, AH_MODE_TUNE, "allgather:nchannels=8", &da);
  digest_with(&b, AH_MODE_FIXED, "allgather:nchannels=8", &db);
  ck_assert(da.part[AH_DIGEST_MODE] != db.part[AH_DIGEST_MODE]);
  ck_assert(da.part[AH_DIGEST_OVERRIDE] == db.part[AH_DIGEST_OVERRIDE]);
  ck_assert(da.part[AH_DIGEST_PROFILE] == db.part[AH_DIGEST_PROFILE]);

  digest_with(&b, AH_MODE_TUNE, "allgather:nchannels=4", &db);
  ck_assert(da.part[AH_DIGEST_MODE] == db.part[AH_DIGEST_MODE]);
  ck_assert(da.part[AH_DIGEST_OVERRIDE] != db.part[AH_DIGEST_OVERRIDE]);

  /* a profile, and the same profile with one entry's configuration changed */
  ah_profile_entry_t e[2];
  memset(e, 0, sizeof e);
  e[0] = (ah_profile_entry_t){
      .nranks = 16, .nnodes = 2, .coll = AH_FUNC_ALLREDUCE, .bin = 20, .us = 100};
  e[1] = (ah_profile_entry_t){
      .nranks = 16, .nnodes = 2, .coll = AH_FUNC_ALLGATHER, .bin = 16, .us = 9};
  e[0].cfg = (ah_config_t){.algo = AH_ALGO_RING, .proto = AH_PROTO_SIMPLE, .ndims = 1, .res = {8}};
  e[1].cfg = (ah_config_t){.algo = AH_ALGO_RING, .proto = AH_PROTO_LL, .ndims = 0};
  ah_profile_t p = {.nentries = 2, .entries = e};
  ah_digest_t dp, dq, dn;
  ah_digest_settings(&a, &p, &dp);
  ah_digest_settings(&a, NULL, &dn);
  ck_assert(dp.part[AH_DIGEST_PROFILE] != dn.part[AH_DIGEST_PROFILE]); /* a profile vs none */
  e[0].us = 50; /* a measured time is not a choice */
  ah_digest_settings(&a, &p, &dq);
  ck_assert(dp.part[AH_DIGEST_PROFILE] == dq.part[AH_DIGEST_PROFILE]);
  e[0].cfg.res[0] = 16;
  ah_digest_settings(&a, &p, &dq);
  ck_assert(dp.part[AH_DIGEST_PROFILE] != dq.part[AH_DIGEST_PROFILE]);
  ck_assert(dp.part[AH_DIGEST_MODE] == dq.part[AH_DIGEST_MODE]);
}
END_TEST

START_TEST(describe_names_the_parts) {
  char buf[160];
  ck_assert_str_eq(ah_digest_describe(1u << AH_DIGEST_MODE, buf, sizeof buf), "AUTOHA_MODE");
  ck_assert_str_eq(
      ah_digest_describe((1u << AH_DIGEST_OVERRIDE) | (1u << AH_DIGEST_PROFILE), buf, sizeof buf),
      "AUTOHA_OVERRIDE, AUTOHA_PROFILE (the loaded profile)");
  ck_assert_str_eq(ah_digest_describe(0, buf, sizeof buf), "settings");
  ck_assert_str_eq(ah_digest_describe(7, buf, 12), "AUTOHA_MODE"); /* truncated, still a string */
}
END_TEST

int main(void) {
  const TTest *const tests[] = {equal_settings_digest_alike, each_difference_shows_in_its_part,
                                describe_names_the_parts};
  return ah_check_main("tuner_digest", (ah_check_case_t){.name = "digest", .timeout = 30}, tests,
                       AH_CHECK_COUNT(tests));
}
