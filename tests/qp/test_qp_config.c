/* test_qp_config.c: the per-communicator traffic class (ncclConfig_t.trafficClass, NCCL 2.26+)
 * that the shim puts into the config it passes to the real ncclCommInitRankConfig
 * (ah_shim_qp_config_tc, rdma/rdma_verbs.c), linked from the shim's own objects. CTest runs it with
 * AUTOHA_QP_TC=dscp=26 (argv "set"), without it ("unset"), and with per-communicator rules
 * AUTOHA_QP_TC_COMM='name=dp*:dscp=10;ranks=2-8:dscp=46' on top of AUTOHA_QP_TC=dscp=26 ("rules"). */
#include <check.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ah_check.h"
#include "rdma.h"

static int tc_set;

START_TEST(config_comm_rules) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER, copy;
  cfg.commName = "dp-grad";
  ck_assert_ptr_eq(ah_shim_qp_config_tc(&cfg, 64, &copy), &copy);
  ck_assert_int_eq(copy.trafficClass, 10 << 2); /* by name, whatever the size */
  cfg.commName = "tp";
  ck_assert_ptr_eq(ah_shim_qp_config_tc(&cfg, 8, &copy), &copy);
  ck_assert_int_eq(copy.trafficClass, 46 << 2); /* by size */
  ck_assert_ptr_eq(ah_shim_qp_config_tc(&cfg, 64, &copy), &copy);
  ck_assert_int_eq(copy.trafficClass, 26 << 2); /* no rule: AUTOHA_QP_TC */
  ck_assert_ptr_eq(ah_shim_qp_config_tc(NULL, 4, &copy), &copy);
  ck_assert_int_eq(copy.trafficClass, 46 << 2);
}
END_TEST

START_TEST(config_traffic_class) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER, before, copy;
  memcpy(&before, &cfg, sizeof cfg);
  ncclConfig_t *out = ah_shim_qp_config_tc(&cfg, 16, &copy);
  ck_assert_msg(memcmp(&cfg, &before, sizeof cfg) == 0, "the application's config was written");
  if (!tc_set) {
    ck_assert_ptr_eq(out, &cfg);
    ck_assert_ptr_null(ah_shim_qp_config_tc(NULL, 16, &copy));
    return;
  }
  ck_assert_ptr_eq(out, &copy);
  ck_assert_int_eq(copy.trafficClass, 26 << 2);
  copy.trafficClass = cfg.trafficClass;
  ck_assert_msg(memcmp(&copy, &cfg, sizeof cfg) == 0, "fields other than trafficClass changed");

  /* the application chose a class: it stays */
  cfg.trafficClass = 5;
  ck_assert_ptr_eq(ah_shim_qp_config_tc(&cfg, 16, &copy), &cfg);
  /* a config from a header older than 2.26 has no such field */
  cfg.trafficClass = NCCL_CONFIG_UNDEF_INT;
  cfg.version = NCCL_VERSION(2, 21, 5);
  ck_assert_ptr_eq(ah_shim_qp_config_tc(&cfg, 16, &copy), &cfg);
  /* a bad magic: not ours to interpret */
  cfg.version = NCCL_VERSION_CODE;
  cfg.magic = 0;
  ck_assert_ptr_eq(ah_shim_qp_config_tc(&cfg, 16, &copy), &cfg);
  /* NULL (NCCL's defaults): a default config carrying the class */
  out = ah_shim_qp_config_tc(NULL, 16, &copy);
  ck_assert_ptr_eq(out, &copy);
  ck_assert_int_eq(copy.trafficClass, 26 << 2);
  ck_assert_uint_eq(copy.magic, 0xcafebeef);
  ck_assert_int_eq(copy.blocking, INT_MIN);
}
END_TEST

int main(int argc, char **argv) {
  tc_set = argc > 1 && strcmp(argv[1], "unset") != 0;
  Suite *s = suite_create("qp_config");
  TCase *tc = tcase_create(argc > 1 ? argv[1] : "unset");
  tcase_set_timeout(tc, 30);
  if (argc > 1 && strcmp(argv[1], "rules") == 0) tcase_add_test(tc, config_comm_rules);
  else tcase_add_test(tc, config_traffic_class);
  suite_add_tcase(s, tc);
  return ah_check_run(s);
}
