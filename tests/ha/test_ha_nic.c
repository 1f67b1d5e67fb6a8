/* test_ha_nic.c: unit tests of AUTOHA_HA=nic's pure logic (rdma/ah_ha_nic.c): which NIC backs
 * which (the neighbour i^1 among NCCL_IB_HCA's devices), and the key translation table that turns
 * a memory key of one key space into the key of the same memory on the backup NIC. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "ah_check.h"
#include "ah_ha_nic.h"

static const char *const eight[] = {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3",
                                    "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"};

START_TEST(backup_is_the_neighbour) {
  for (int i = 0; i < 8; i++) ck_assert_int_eq(ah_ha_nic_backup(eight, 8, eight[i], NULL), i ^ 1);
  ck_assert_int_eq(ah_ha_nic_backup(eight, 8, "mlx5_4", ""), 5);
  /* an odd count: the last is backed by the first */
  ck_assert_int_eq(ah_ha_nic_backup(eight, 3, "mlx5_2", NULL), 0);
  ck_assert_int_eq(ah_ha_nic_backup(eight, 3, "mlx5_1", NULL), 0);
  /* one NIC, or a name that is not there: no backup */
  ck_assert_int_eq(ah_ha_nic_backup(eight, 1, "mlx5_0", NULL), -1);
  ck_assert_int_eq(ah_ha_nic_backup(eight, 8, "mlx5_9", NULL), -1);
  ck_assert_int_eq(ah_ha_nic_backup(NULL, 0, "mlx5_0", NULL), -1);
}
END_TEST

START_TEST(backup_within_nccl_ib_hca) {
  /* the pairs are formed among the devices NCCL may use, in the order given */
  ck_assert_int_eq(ah_ha_nic_backup(eight, 8, "mlx5_0", "mlx5_0,mlx5_2,mlx5_4,mlx5_6"), 2);
  ck_assert_int_eq(ah_ha_nic_backup(eight, 8, "mlx5_6", "mlx5_0:1,mlx5_2:1,mlx5_4:1,mlx5_6:1"), 4);
  /* prefix match (NCCL's), and exact with '=' */
  ck_assert_int_eq(ah_ha_nic_backup(eight, 8, "mlx5_3", "mlx5"), 2);
  ck_assert_int_eq(ah_ha_nic_backup(eight, 8, "mlx5_1", "=mlx5_1,mlx5_5"), 5);
  ck_assert_int_eq(ah_ha_nic_backup(eight, 8, "mlx5_1", "=mlx5_1,mlx5"),
                   -1); /* exact: mlx5 names none */
  /* exclusion: without mlx5_1, mlx5_0 pairs with mlx5_2 */
  ck_assert_int_eq(ah_ha_nic_backup(eight, 8, "mlx5_0", "^mlx5_1"), 2);
  ck_assert_int_eq(ah_ha_nic_backup(eight, 8, "mlx5_7", "^mlx5_1"),
                   0); /* 7 candidates: the last wraps */
  /* a primary outside the list is backed as if appended to it */
  ck_assert_int_eq(ah_ha_nic_backup(eight, 8, "mlx5_5", "mlx5_0,mlx5_2"), 0);
  ck_assert_int_eq(ah_ha_nic_backup(eight, 8, "mlx5_5", "mlx5_0,mlx5_2,mlx5_4"), 4);
}
END_TEST

static ah_ha_keyspace_t space(int a, int b) {
  ah_ha_keyspace_t s;
  memset(&s, 0, sizeof s);
  s.b[0] = (uint8_t)a;
  s.b[15] = (uint8_t)b;
  return s;
}

START_TEST(keys_translate_per_space) {
  ah_ha_keys_t *t = ah_ha_keys_new();
  ck_assert_ptr_nonnull(t);
  ah_ha_keyspace_t a = space(1, 0), b = space(1, 1), c = space(2, 0);
  uint32_t to = 7;
  ck_assert_int_eq(ah_ha_keys_get(t, &a, 0x100, &to), -1);
  ck_assert_uint_eq(to, 7); /* a miss leaves the output alone */
  /* the same key number in two spaces (two contexts, two processes) maps apart */
  ck_assert_int_eq(ah_ha_keys_put(t, &a, 0x100, 0xa100), 0);
  ck_assert_int_eq(ah_ha_keys_put(t, &b, 0x100, 0xb100), 0);
  ck_assert_int_eq(ah_ha_keys_get(t, &a, 0x100, &to), 0);
  ck_assert_uint_eq(to, 0xa100);
  ck_assert_int_eq(ah_ha_keys_get(t, &b, 0x100, &to), 0);
  ck_assert_uint_eq(to, 0xb100);
  ck_assert_int_eq(ah_ha_keys_get(t, &c, 0x100, &to), -1);
  ck_assert_int_eq(ah_ha_keys_get(t, &a, 0x101, &to), -1);
  /* a re-registration under the same key replaces the mapping */
  ck_assert_int_eq(ah_ha_keys_put(t, &a, 0x100, 0xa200), 0);
  ck_assert_int_eq(ah_ha_keys_get(t, &a, 0x100, &to), 0);
  ck_assert_uint_eq(to, 0xa200);
  ck_assert_uint_eq(ah_ha_keys_count(t), 2);
  /* deregistration forgets one key; a second delete finds nothing */
  ck_assert_int_eq(ah_ha_keys_del(t, &a, 0x100), 1);
  ck_assert_int_eq(ah_ha_keys_del(t, &a, 0x100), 0);
  ck_assert_int_eq(ah_ha_keys_get(t, &a, 0x100, &to), -1);
  ck_assert_int_eq(ah_ha_keys_get(t, &b, 0x100, &to), 0);
  ah_ha_keys_free(t);
}
END_TEST

START_TEST(keys_many_and_by_space) {
  ah_ha_keys_t *t = ah_ha_keys_new();
  ck_assert_ptr_nonnull(t);
  ah_ha_keyspace_t s[4] = {space(1, 0), space(2, 0), space(3, 0), space(3, 1)};
  for (int k = 0; k < 4; k++)
    for (uint32_t i = 0; i < 5000; i++)
      ck_assert_int_eq(ah_ha_keys_put(t, &s[k], i << 8 | 0x5a, i * 4 + (uint32_t)k), 0);
  ck_assert_uint_eq(ah_ha_keys_count(t), 20000);
  for (int k = 0; k < 4; k++)
    for (uint32_t i = 0; i < 5000; i += 97) {
      uint32_t to = 0;
      ck_assert_int_eq(ah_ha_keys_get(t, &s[k], i << 8 | 0x5a, &to), 0);
      ck_assert_uint_eq(to, i * 4 + (uint32_t)k);
    }
  /* a peer's keys go together, nobody else's */
  ck_assert_int_eq(ah_ha_keys_del_space(t, &s[2]), 5000);
  ck_assert_uint_eq(ah_ha_keys_count(t), 15000);
  uint32_t to = 0;
  ck_assert_int_eq(ah_ha_keys_get(t, &s[2], 0x5a, &to), -1);
  ck_assert_int_eq(ah_ha_keys_get(t, &s[3], 0x5a, &to), 0);
  ck_assert_uint_eq(to, 3);
  ah_ha_keys_free(t);
  ah_ha_keys_free(NULL);
  ck_assert_uint_eq(ah_ha_keys_count(NULL), 0);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {backup_is_the_neighbour, backup_within_nccl_ib_hca,
                                keys_translate_per_space, keys_many_and_by_space};
  return ah_check_main("ha_nic", (ah_check_case_t){.name = "ha_nic", .timeout = 60}, tests,
                       AH_CHECK_COUNT(tests));
}
