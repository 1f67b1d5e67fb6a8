/* Element types for the collective tests: a table of NCCL's data types and conversions for the
 * narrow floating formats (half, bfloat16, fp8 e4m3/e5m2). One encoder parameterised by exponent
 * and mantissa width serves all four formats; it rounds in integer arithmetic on the scaled
 * significand, so its only floating step (a power-of-two scaling) is exact. */
#include <math.h>
#include <string.h>

#include "coll_types.h"

static const coll_type_t types[COLL_NTYPES] = {
    {ncclInt8, "int8", 1, 0, 1, 0},          {ncclUint8, "uint8", 1, 0, 0, 0},
    {ncclInt32, "int32", 4, 0, 1, 0},        {ncclUint32, "uint32", 4, 0, 0, 0},
    {ncclInt64, "int64", 8, 0, 1, 0},        {ncclUint64, "uint64", 8, 0, 0, 0},
    {ncclFloat16, "half", 2, 1, 1, 11},      {ncclFloat32, "float", 4, 1, 1, 24},
    {ncclFloat64, "double", 8, 1, 1, 53},    {ncclBfloat16, "bfloat16", 2, 1, 1, 8},
    {ncclFloat8e4m3, "fp8e4m3", 1, 1, 1, 4}, {ncclFloat8e5m2, "fp8e5m2", 1, 1, 1, 3},
};

const coll_type_t *coll_type_get(ncclDataType_t dt) {
  for (int i = 0; i < COLL_NTYPES; i++)
    if (types[i].dt == dt) return &types[i];
  return NULL;
}

const coll_type_t *coll_type_at(int i) { return &types[i]; }

const char *coll_op_name(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return "sum";
    case ncclProd: return "prod";
    case ncclMax: return "max";
    case ncclMin: return "min";
    case ncclAvg: return "avg";
    default: return "?";
  }
}

/* A binary floating format. `ieee` formats use the all-ones exponent for infinities and NaNs;
 * E4M3 (the OCP "FN" variant NCCL uses) has no infinity and one NaN mantissa (all ones). */
typedef struct {
  int ebits, mbits, ieee;
} fmt_t;

static const fmt_t F_HALF = {5, 10, 1}, F_BF16 = {8, 7, 1}, F_E4M3 = {4, 3, 0}, F_E5M2 = {5, 2, 1};

static uint32_t fmt_from_double(const fmt_t *f, double x) {
  uint32_t sign = signbit(x) ? 1u << (f->ebits + f->mbits) : 0u;
  uint32_t emax_field = f->ieee ? (1u << f->ebits) - 2 : (1u << f->ebits) - 1;
  uint32_t top_mant = (1u << f->mbits) - 1; /* largest mantissa field */
  uint32_t max_finite = (emax_field << f->mbits) | (f->ieee ? top_mant : top_mant - 1);
  uint32_t overflow = f->ieee ? ((emax_field + 1) << f->mbits) : max_finite;
  double a = fabs(x);
  if (a == 0) return sign;
  if (isinf(a)) return sign | overflow;
  int bias = (1 << (f->ebits - 1)) - 1, emin = 1 - bias, ex;
  frexp(a, &ex);
  int e = ex - 1 < emin ? emin : ex - 1; /* exponent of the leading bit, clamped for subnormals */
  uint64_t q = (uint64_t)nearbyint(ldexp(a, f->mbits - e)); /* significand in units of the ulp */
  if (q >> (f->mbits + 1)) { /* rounding carried into the next binade */
    q >>= 1;
    e++;
  }
  uint32_t bits;
  if (q >> f->mbits) { /* normal */
    long efield = e + bias;
    if (efield > (long)emax_field) return sign | overflow;
    bits = ((uint32_t)efield << f->mbits) | (uint32_t)(q & top_mant);
    if (bits > max_finite) return sign | overflow; /* E4M3: would be the NaN pattern */
  } else {
    bits = (uint32_t)q; /* subnormal: exponent field 0 */
  }
  return sign | bits;
}

static double fmt_to_double(const fmt_t *f, uint32_t bits) {
  uint32_t mmask = (1u << f->mbits) - 1, emask = (1u << f->ebits) - 1;
  uint32_t efield = (bits >> f->mbits) & emask, mant = bits & mmask;
  int neg = (bits >> (f->ebits + f->mbits)) & 1, bias = (1 << (f->ebits - 1)) - 1;
  double v;
  if (f->ieee && efield == emask) v = mant ? NAN : INFINITY;
  else if (!f->ieee && efield == emask && mant == mmask) v = NAN;
  else if (efield == 0) v = ldexp((double)mant, 1 - bias - f->mbits);
  else v = ldexp((double)(mant | (1u << f->mbits)), (int)efield - bias - f->mbits);
  return neg ? -v : v;
}

uint16_t coll_half_from_double(double x) { return (uint16_t)fmt_from_double(&F_HALF, x); }
double coll_half_to_double(uint16_t h) { return fmt_to_double(&F_HALF, h); }
uint16_t coll_bf16_from_double(double x) { return (uint16_t)fmt_from_double(&F_BF16, x); }
double coll_bf16_to_double(uint16_t b) { return fmt_to_double(&F_BF16, b); }
uint8_t coll_e4m3_from_double(double x) { return (uint8_t)fmt_from_double(&F_E4M3, x); }
double coll_e4m3_to_double(uint8_t v) { return fmt_to_double(&F_E4M3, v); }
uint8_t coll_e5m2_from_double(double x) { return (uint8_t)fmt_from_double(&F_E5M2, x); }
double coll_e5m2_to_double(uint8_t v) { return fmt_to_double(&F_E5M2, v); }

uint64_t coll_int_wrap(const coll_type_t *t, uint64_t v) {
  if (t->size == 8) return v;
  unsigned bits = (unsigned)t->size * 8;
  uint64_t mask = (1ull << bits) - 1;
  v &= mask;
  if (t->is_signed && (v >> (bits - 1))) v |= ~mask;
  return v;
}

coll_val_t coll_val_load(const coll_type_t *t, const void *buf, size_t idx) {
  const unsigned char *p = (const unsigned char *)buf + idx * t->size;
  coll_val_t v = {0, 0};
  uint8_t u8;
  uint16_t u16;
  uint32_t u32;
  uint64_t u64;
  float f32;
  switch (t->dt) {
    case ncclInt8:
    case ncclUint8: v.i = coll_int_wrap(t, *p); break;
    case ncclInt32:
    case ncclUint32:
      memcpy(&u32, p, 4);
      v.i = coll_int_wrap(t, u32);
      break;
    case ncclInt64:
    case ncclUint64:
      memcpy(&u64, p, 8);
      v.i = u64;
      break;
    case ncclFloat16:
      memcpy(&u16, p, 2);
      v.f = coll_half_to_double(u16);
      break;
    case ncclBfloat16:
      memcpy(&u16, p, 2);
      v.f = coll_bf16_to_double(u16);
      break;
    case ncclFloat32:
      memcpy(&f32, p, 4);
      v.f = f32;
      break;
    case ncclFloat64: memcpy(&v.f, p, 8); break;
    case ncclFloat8e4m3:
      u8 = *p;
      v.f = coll_e4m3_to_double(u8);
      break;
    case ncclFloat8e5m2:
      u8 = *p;
      v.f = coll_e5m2_to_double(u8);
      break;
    default: break;
  }
  return v;
}

void coll_val_store(const coll_type_t *t, void *buf, size_t idx, coll_val_t v) {
  unsigned char *p = (unsigned char *)buf + idx * t->size;
  uint16_t u16;
  uint32_t u32;
  float f32;
  switch (t->dt) {
    case ncclInt8:
    case ncclUint8: *p = (unsigned char)v.i; break;
    case ncclInt32:
    case ncclUint32:
      u32 = (uint32_t)v.i;
      memcpy(p, &u32, 4);
      break;
    case ncclInt64:
    case ncclUint64: memcpy(p, &v.i, 8); break;
    case ncclFloat16:
      u16 = coll_half_from_double(v.f);
      memcpy(p, &u16, 2);
      break;
    case ncclBfloat16:
      u16 = coll_bf16_from_double(v.f);
      memcpy(p, &u16, 2);
      break;
    case ncclFloat32:
      f32 = (float)v.f;
      memcpy(p, &f32, 4);
      break;
    case ncclFloat64: memcpy(p, &v.f, 8); break;
    case ncclFloat8e4m3: *p = coll_e4m3_from_double(v.f); break;
    case ncclFloat8e5m2: *p = coll_e5m2_from_double(v.f); break;
    default: break;
  }
}

int coll_val_nonfinite(const coll_type_t *t, const void *buf, size_t idx) {
  if (!t->is_float) return 0;
  return !isfinite(coll_val_load(t, buf, idx).f);
}
