/* test_ha_ib.c: unit tests of the HA layer's InfiniBand addresses (rdma/ah_ha_ib.c): every unicast
 * LID makes an address that reads back to it and no two LIDs share one, and real GIDs — a RoCEv2
 * IPv4-mapped one, an IB port's fe80::GUID — read as no LID. */
#include <check.h>
#include <string.h>

#include "ah_check.h"
#include "ah_ha_ib.h"

START_TEST(every_lid_reads_back) {
  uint8_t a[16], prev[16] = {0};
  for (uint32_t lid = 1; lid < 0xC000; lid++) {
    ah_ha_ib_lid_addr((uint16_t)lid, a);
    ck_assert_uint_eq(ah_ha_ib_addr_lid(a), lid);
    ck_assert_int_ne(memcmp(a, prev, 16), 0);
    ck_assert_uint_eq(a[0], 0xfe); /* link-local, as every IB GID */
    ck_assert_uint_eq(a[1], 0x80);
    memcpy(prev, a, 16);
  }
  ah_ha_ib_lid_addr(0x1234, a);
  ck_assert_uint_eq(a[14], 0x12);
  ck_assert_uint_eq(a[15], 0x34);
}
END_TEST

START_TEST(real_gids_are_no_lid) {
  const uint8_t roce[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 1, 13};
  const uint8_t ib[16] = {0xfe, 0x80, 0,    0,    0, 0,    0,    0,
                          0x00, 0x02, 0xc9, 0x03, 0, 0x0a, 0x0b, 0x0c};
  const uint8_t zero[16] = {0};
  ck_assert_uint_eq(ah_ha_ib_addr_lid(roce), 0);
  ck_assert_uint_eq(ah_ha_ib_addr_lid(ib), 0);
  ck_assert_uint_eq(ah_ha_ib_addr_lid(zero), 0);
  /* one byte off the LID form is not it */
  uint8_t a[16];
  ah_ha_ib_lid_addr(7, a);
  a[9] = 0;
  ck_assert_uint_eq(ah_ha_ib_addr_lid(a), 0);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {every_lid_reads_back, real_gids_are_no_lid};
  return ah_check_main("ha_ib", (ah_check_case_t){.name = "ha_ib", .timeout = 30}, tests,
                       AH_CHECK_COUNT(tests));
}
