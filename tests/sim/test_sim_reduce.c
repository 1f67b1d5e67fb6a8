/* Reduction kernels and narrow-float conversions of sim/: known bit patterns, rounding to nearest
 * even, saturation of fp8, wrapping integer arithmetic and NCCL's ncclAvg rules. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ah_check.h"
#include "sim_reduce.h"

START_TEST(half_known_patterns) {
  ck_assert_uint_eq(sim_float_to_half(1.0), 0x3c00);
  ck_assert_uint_eq(sim_float_to_half(-2.0), 0xc000);
  ck_assert_uint_eq(sim_float_to_half(65504.0), 0x7bff);
  ck_assert_uint_eq(sim_float_to_half(65520.0), 0x7c00);               /* rounds to infinity */
  ck_assert_uint_eq(sim_float_to_half(5.960464477539063e-08), 0x0001); /* smallest subnormal */
  ck_assert_uint_eq(sim_float_to_half(1.0 + 1.0 / 2048), 0x3c00);      /* tie goes to even */
  ck_assert_uint_eq(sim_float_to_half(1.0 + 3.0 / 2048), 0x3c02);
  ck_assert(isnan(sim_half_to_float(0x7e00)));
  ck_assert_float_eq(sim_half_to_float(0x3555), 0.333251953125f);
}
END_TEST

START_TEST(bf16_and_fp8_patterns) {
  ck_assert_uint_eq(sim_float_to_bf16(1.0), 0x3f80);
  ck_assert_uint_eq(sim_float_to_bf16(3.0), 0x4040);
  ck_assert_float_eq(sim_bf16_to_float(0xc2f7), -123.5f);
  ck_assert_uint_eq(sim_float_to_e4m3(448.0), 0x7e);
  ck_assert_uint_eq(sim_float_to_e4m3(1000.0), 0x7e); /* saturates, never NaN */
  ck_assert_uint_eq(sim_float_to_e4m3(-1.0), 0xb8);
  ck_assert(isnan(sim_e4m3_to_float(0x7f)));
  ck_assert_float_eq(sim_e4m3_to_float(0x01), 0.001953125f); /* 2^-9 */
  ck_assert_uint_eq(sim_float_to_e5m2(57344.0), 0x7b);
  ck_assert_uint_eq(sim_float_to_e5m2(1e6), 0x7b);
  ck_assert_float_eq(sim_e5m2_to_float(0x3c), 1.0f);
}
END_TEST

START_TEST(every_e4m3_and_e5m2_roundtrips) {
  for (int v = 0; v < 256; v++) {
    float f4 = sim_e4m3_to_float((uint8_t)v), f5 = sim_e5m2_to_float((uint8_t)v);
    if (!isnan(f4) && !(v == 0x80)) ck_assert_uint_eq(sim_float_to_e4m3(f4), (unsigned)v);
    if (!isnan(f5) && !isinf(f5) && !(v == 0x80))
      ck_assert_uint_eq(sim_float_to_e5m2(f5), (unsigned)v);
  }
}
END_TEST

static void reduce3(void *acc, const void *a, const void *b, const void *c, size_t n,
                    ncclDataType_t dt, ncclRedOp_t op) {
  sim_reduce_first(acc, a, n, dt, op, 3);
  sim_reduce_accum(acc, b, n, dt, op, 3);
  sim_reduce_accum(acc, c, n, dt, op, 3);
  sim_reduce_finish(acc, n, dt, op, 3);
}

START_TEST(integer_ops_wrap_and_average) {
  int8_t a[2] = {100, -7}, b[2] = {100, 2}, c[2] = {100, 3}, r[2];
  reduce3(r, a, b, c, 2, ncclInt8, ncclSum);
  ck_assert_int_eq(r[0], (int8_t)44); /* 300 wraps to 44 */
  ck_assert_int_eq(r[1], -2);
  reduce3(r, a, b, c, 2, ncclInt8, ncclProd);
  ck_assert_int_eq(r[1], -42);
  reduce3(r, a, b, c, 2, ncclInt8, ncclMax);
  ck_assert_int_eq(r[1], 3);
  reduce3(r, a, b, c, 2, ncclInt8, ncclMin);
  ck_assert_int_eq(r[1], -7);
  int32_t x[1] = {7}, y[1] = {8}, z[1] = {-1}, q[1];
  reduce3(q, x, y, z, 1, ncclInt32, ncclAvg);
  ck_assert_int_eq(q[0], 4); /* (7 + 8 - 1) / 3 truncated */
  uint64_t u[1] = {UINT64_MAX}, v[1] = {2}, w[1] = {0}, s[1];
  reduce3(s, u, v, w, 1, ncclUint64, ncclSum);
  ck_assert_uint_eq(s[0], 1);
}
END_TEST

START_TEST(float_avg_premultiplies) {
  float a[1] = {3}, b[1] = {6}, c[1] = {9}, r[1];
  reduce3(r, a, b, c, 1, ncclFloat32, ncclAvg);
  float s = (float)(1.0 / 3);
  ck_assert_float_eq(r[0], a[0] * s + b[0] * s + c[0] * s);
  uint16_t h[3] = {sim_float_to_half(1.0), sim_float_to_half(2.0), sim_float_to_half(2048.0)};
  uint16_t hr[1];
  reduce3(hr, &h[0], &h[1], &h[2], 1, ncclFloat16, ncclSum);
  ck_assert_float_eq(sim_half_to_float(hr[0]), 2052.0f); /* 2051 ties; the even mantissa is 2052 */
  uint8_t e[3] = {sim_float_to_e4m3(256), sim_float_to_e4m3(256), sim_float_to_e4m3(1)}, er[1];
  reduce3(er, &e[0], &e[1], &e[2], 1, ncclFloat8e4m3, ncclSum);
  ck_assert_float_eq(sim_e4m3_to_float(er[0]), 448.0f); /* saturates */
}
END_TEST

START_TEST(type_sizes) {
  ck_assert_uint_eq(sim_dtype_size(ncclFloat16), 2);
  ck_assert_uint_eq(sim_dtype_size(ncclFloat8e5m2), 1);
  ck_assert_uint_eq(sim_dtype_size(ncclUint64), 8);
  ck_assert_uint_eq(sim_dtype_size((ncclDataType_t)99), 0);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {
      half_known_patterns,          bf16_and_fp8_patterns,   every_e4m3_and_e5m2_roundtrips,
      integer_ops_wrap_and_average, float_avg_premultiplies, type_sizes};
  return ah_check_main("sim_reduce", (ah_check_case_t){.name = "kernels", .timeout = 30}, tests,
                       AH_CHECK_COUNT(tests));
}
