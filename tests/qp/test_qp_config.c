/* test_qp_config.c: the per-communicator traffic class (ncclConfig_t.trafficClass, NCCL 2.26+)
 * that the shim puts into the config it passes to the real ncclCommInitRankConfig
 * (ah_shim_qp_config_tc, shim/shim_verbs.c), linked from the shim's own objects. CTest runs it with
 * AUTOHA_QP_TC=dscp=26 (argv "set") and without it ("unset"). */
#include <check.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "shim_verbs.h"

static int tc_set;

START_TEST(config_traffic_class) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER, before, copy;
  memcpy(&before, &cfg, sizeof cfg);
  ncclConfig_t *out = ah_shim_qp_config_tc(&cfg, &copy);
  ck_assert_msg(memcmp(&cfg, &before, sizeof cfg) == 0, "the application's config was written");
  if (!tc_set) {
    ck_assert_ptr_eq(out, &cfg);
    ck_assert_ptr_null(ah_shim_qp_config_tc(NULL, &copy));
    return;
  }
  ck_assert_ptr_eq(out, &copy);
  ck_assert_int_eq(copy.trafficClass, 26 << 2);
  copy.trafficClass = cfg.trafficClass;
  ck_assert_msg(memcmp(&copy, &cfg, sizeof cfg) == 0, "fields other than trafficClass changed");

  /* the application chose a class: it stays */
  cfg.trafficClass = 5;
  ck_assert_ptr_eq(ah_shim_qp_config_tc(&cfg, &copy), &cfg);
  /* a config from a header older than 2.26 has no such field */
  cfg.trafficClass = NCCL_CONFIG_UNDEF_INT;
  cfg.version = NCCL_VERSION(2, 21, 5);
  ck_assert_ptr_eq(ah_shim_qp_config_tc(&cfg, &copy), &cfg);
  /* a bad magic: not ours to interpret */
  cfg.version = NCCL_VERSION_CODE;
  cfg.magic = 0;
  ck_assert_ptr_eq(ah_shim_qp_config_tc(&cfg, &copy), &cfg);
  /* NULL (NCCL's defaults): a default config carrying the class */
  out = ah_shim_qp_config_tc(NULL, &copy);
  ck_assert_ptr_eq(out, &copy);
  ck_assert_int_eq(copy.trafficClass, 26 << 2);
  ck_assert_uint_eq(copy.magic, 0xcafebeef);
  ck_assert_int_eq(copy.blocking, INT_MIN);
}
END_TEST

int main(int argc, char **argv) {
  tc_set = argc > 1 && strcmp(argv[1], "set") == 0;
  Suite *s = suite_create("qp_config");
  TCase *tc = tcase_create(tc_set ? "set" : "unset");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, config_traffic_class);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
