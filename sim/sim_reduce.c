/* Reduction kernels over every NCCL data type (see sim_reduce.h for the arithmetic rules).
 * Narrow floating types go through one generic, correctly rounded encoder parameterised by the
 * format's exponent and mantissa widths, so half, bfloat16 and both fp8 formats share one rounding
 * path that the tests can check against known bit patterns. */
#include <math.h>
#include <string.h>

#include "sim_reduce.h"

/* A binary floating format: exponent bits, mantissa bits, whether the all-ones exponent encodes
 * infinities (IEEE) or ordinary numbers with a single NaN pattern (OCP E4M3 "FN"). */
typedef struct {
  int ebits, mbits, has_inf;
  double max_finite;
} fmt_t;

static const fmt_t FMT_HALF = {5, 10, 1, 65504.0};
static const fmt_t FMT_BF16 = {8, 7, 1, 3.3895313892515355e38};
static const fmt_t FMT_E4M3 = {4, 3, 0, 448.0};
static const fmt_t FMT_E5M2 = {5, 2, 1, 57344.0};

static int fmt_bias(const fmt_t *f) { return (1 << (f->ebits - 1)) - 1; }

/* Rounds x to the format (nearest even) and returns its bit pattern. Finite overflow becomes
 * infinity when `saturate` is 0 and the format has one, else the largest finite value. */
static uint32_t fmt_encode(const fmt_t *f, double x, int saturate) {
  uint32_t sign = signbit(x) ? 1u << (f->ebits + f->mbits) : 0;
  uint32_t emask = (1u << f->ebits) - 1;
  if (isnan(x))
    return f->has_inf ? (emask << f->mbits) | (1u << (f->mbits - 1))
                      : sign | (emask << f->mbits) | ((1u << f->mbits) - 1);
  double a = fabs(x);
  int bias = fmt_bias(f);
  int emin = 1 - bias;
  if (isinf(a)) {
    if (f->has_inf && !saturate) return sign | (emask << f->mbits);
    a = f->max_finite;
  }
  if (a == 0) return sign;
  int ex;
  frexp(a, &ex); /* a = m * 2^ex, m in [0.5, 1): leading bit is 2^(ex-1) */
  int e = ex - 1 < emin ? emin : ex - 1;
  double quantum = ldexp(1.0, e - f->mbits);
  double v = nearbyint(a / quantum) * quantum; /* default rounding mode: nearest even */
  if (v > f->max_finite) {
    if (f->has_inf && !saturate) return sign | (emask << f->mbits);
    v = f->max_finite;
  }
  if (v < ldexp(1.0, emin)) /* subnormal (or rounded to zero) */
    return sign | (uint32_t)(v / ldexp(1.0, emin - f->mbits));
  frexp(v, &ex);
  uint32_t efield = (uint32_t)(ex - 1 + bias);
  uint32_t mant = (uint32_t)((ldexp(v, -(ex - 1)) - 1.0) * (double)(1u << f->mbits));
  return sign | (efield << f->mbits) | mant;
}

static double fmt_decode(const fmt_t *f, uint32_t bits) {
  uint32_t emask = (1u << f->ebits) - 1, mmask = (1u << f->mbits) - 1;
  int neg = (bits >> (f->ebits + f->mbits)) & 1;
  uint32_t efield = (bits >> f->mbits) & emask, mant = bits & mmask;
  int bias = fmt_bias(f);
  double v;
  if (efield == emask && f->has_inf) v = mant ? NAN : INFINITY;
  else if (efield == emask && mant == mmask) v = NAN; /* E4M3: the one NaN pattern */
  else if (efield == 0) v = ldexp((double)mant, 1 - bias - f->mbits);
  else v = ldexp(1.0 + (double)mant / (double)(1u << f->mbits), (int)efield - bias);
  return neg ? -v : v;
}

float sim_half_to_float(uint16_t h) { return (float)fmt_decode(&FMT_HALF, h); }
uint16_t sim_float_to_half(double f) { return (uint16_t)fmt_encode(&FMT_HALF, f, 0); }
float sim_bf16_to_float(uint16_t b) { return (float)fmt_decode(&FMT_BF16, b); }
uint16_t sim_float_to_bf16(double f) { return (uint16_t)fmt_encode(&FMT_BF16, f, 0); }
float sim_e4m3_to_float(uint8_t v) { return (float)fmt_decode(&FMT_E4M3, v); }
uint8_t sim_float_to_e4m3(double f) { return (uint8_t)fmt_encode(&FMT_E4M3, f, 1); }
float sim_e5m2_to_float(uint8_t v) { return (float)fmt_decode(&FMT_E5M2, v); }
uint8_t sim_float_to_e5m2(double f) { return (uint8_t)fmt_encode(&FMT_E5M2, f, 1); }

size_t sim_dtype_size(ncclDataType_t dt) {
  switch (dt) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    default: return 0;
  }
}

const char *sim_dtype_name(ncclDataType_t dt) {
  static const char *names[] = {"int8", "uint8", "int32",  "uint32",   "int64",   "uint64",
                                "half", "float", "double", "bfloat16", "fp8e4m3", "fp8e5m2"};
  return (unsigned)dt < sizeof names / sizeof names[0] ? names[dt] : "unknown-type";
}

const char *sim_redop_name(ncclRedOp_t op) {
  static const char *names[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
  return (unsigned)op < sizeof names / sizeof names[0] ? names[op] : "unknown-op";
}

/* The cases of every kernel's switch on op after Sum, Avg and Prod: Max, and Min (the default). */
#define MAX_AND_MIN_CASES                                                                          \
  case ncclMax:                                                                                    \
    for (size_t i = 0; i < n; i++) acc[i] = src[i] > acc[i] ? src[i] : acc[i];                     \
    break;                                                                                         \
  default:                                                                                         \
    for (size_t i = 0; i < n; i++) acc[i] = src[i] < acc[i] ? src[i] : acc[i];                     \
    break;

/* ---- integer kernels: arithmetic on the unsigned type so overflow wraps without UB ---------- */

#define INT_KERNEL(NAME, T, UT)                                                                    \
  static void NAME(T *acc, const T *src, size_t n, ncclRedOp_t op) {                               \
    switch (op) {                                                                                  \
      case ncclSum:                                                                                \
      case ncclAvg:                                                                                \
        for (size_t i = 0; i < n; i++) acc[i] = (T)((UT)acc[i] + (UT)src[i]);                      \
        break;                                                                                     \
      case ncclProd:                                                                               \
        for (size_t i = 0; i < n; i++) acc[i] = (T)((UT)acc[i] * (UT)src[i]);                      \
        break;                                                                                     \
        MAX_AND_MIN_CASES                                                                          \
    }                                                                                              \
  }
/* uint8/int8 promote to int before multiplying; the cast back truncates as the device does. */
INT_KERNEL(k_i8, int8_t, unsigned)
INT_KERNEL(k_u8, uint8_t, unsigned)
INT_KERNEL(k_i32, int32_t, uint32_t)
INT_KERNEL(k_u32, uint32_t, uint32_t)
INT_KERNEL(k_i64, int64_t, uint64_t)
INT_KERNEL(k_u64, uint64_t, uint64_t)

#define FLOAT_KERNEL(NAME, T)                                                                      \
  static void NAME(T *acc, const T *src, size_t n, ncclRedOp_t op, T scale) {                      \
    switch (op) {                                                                                  \
      case ncclSum:                                                                                \
        for (size_t i = 0; i < n; i++) acc[i] = acc[i] + src[i];                                   \
        break;                                                                                     \
      case ncclAvg:                                                                                \
        for (size_t i = 0; i < n; i++) acc[i] = acc[i] + src[i] * scale;                           \
        break;                                                                                     \
      case ncclProd:                                                                               \
        for (size_t i = 0; i < n; i++) acc[i] = acc[i] * src[i];                                   \
        break;                                                                                     \
        MAX_AND_MIN_CASES                                                                          \
    }                                                                                              \
  }
FLOAT_KERNEL(k_f32, float)
FLOAT_KERNEL(k_f64, double)

/* Narrow floats: decode both operands, operate in double (exact for one operation on these
 * formats' ranges), round once to the operating precision. fp8 operates in half precision, as
 * NCCL's kernels do, then converts back saturating. */
static double narrow_get(ncclDataType_t dt, const void *p, size_t i) {
  switch (dt) {
    case ncclFloat16: return fmt_decode(&FMT_HALF, ((const uint16_t *)p)[i]);
    case ncclBfloat16: return fmt_decode(&FMT_BF16, ((const uint16_t *)p)[i]);
    case ncclFloat8e4m3: return fmt_decode(&FMT_E4M3, ((const uint8_t *)p)[i]);
    default: return fmt_decode(&FMT_E5M2, ((const uint8_t *)p)[i]);
  }
}

static void narrow_put(ncclDataType_t dt, void *p, size_t i, double v) {
  switch (dt) {
    case ncclFloat16: ((uint16_t *)p)[i] = (uint16_t)fmt_encode(&FMT_HALF, v, 0); break;
    case ncclBfloat16: ((uint16_t *)p)[i] = (uint16_t)fmt_encode(&FMT_BF16, v, 0); break;
    case ncclFloat8e4m3:
      ((uint8_t *)p)[i] =
          (uint8_t)fmt_encode(&FMT_E4M3, fmt_decode(&FMT_HALF, fmt_encode(&FMT_HALF, v, 0)), 1);
      break;
    default:
      ((uint8_t *)p)[i] =
          (uint8_t)fmt_encode(&FMT_E5M2, fmt_decode(&FMT_HALF, fmt_encode(&FMT_HALF, v, 0)), 1);
      break;
  }
}

/* The operating precision's rounding of a double: what one device operation yields. */
static double narrow_round(ncclDataType_t dt, double v) {
  if (dt == ncclBfloat16) return fmt_decode(&FMT_BF16, fmt_encode(&FMT_BF16, v, 0));
  return fmt_decode(&FMT_HALF, fmt_encode(&FMT_HALF, v, 0));
}

static void k_narrow(ncclDataType_t dt, void *acc, const void *src, size_t n, ncclRedOp_t op,
                     double scale, int first) {
  for (size_t i = 0; i < n; i++) {
    double s = narrow_get(dt, src, i);
    if (op == ncclAvg) s = narrow_round(dt, s * scale);
    double r;
    if (first) {
      r = s;
    } else {
      double a = narrow_get(dt, acc, i);
      switch (op) {
        case ncclSum:
        case ncclAvg: r = a + s; break;
        case ncclProd: r = a * s; break;
        case ncclMax: r = s > a ? s : a; break;
        default: r = s < a ? s : a; break;
      }
    }
    narrow_put(dt, acc, i, r);
  }
}

static int is_narrow(ncclDataType_t dt) {
  return dt == ncclFloat16 || dt == ncclBfloat16 || dt == ncclFloat8e4m3 || dt == ncclFloat8e5m2;
}

void sim_reduce_first(void *acc, const void *src, size_t n, ncclDataType_t dt, ncclRedOp_t op,
                      int nranks) {
  if (is_narrow(dt)) {
    k_narrow(dt, acc, src, n, op, narrow_round(dt, 1.0 / nranks), 1);
    return;
  }
  if (acc != src) memcpy(acc, src, n * sim_dtype_size(dt));
  if (op != ncclAvg) return;
  if (dt == ncclFloat32) {
    float s = (float)(1.0 / nranks), *a = acc;
    for (size_t i = 0; i < n; i++) a[i] *= s;
  } else if (dt == ncclFloat64) {
    double s = 1.0 / nranks, *a = acc;
    for (size_t i = 0; i < n; i++) a[i] *= s;
  }
}

void sim_reduce_accum(void *acc, const void *src, size_t n, ncclDataType_t dt, ncclRedOp_t op,
                      int nranks) {
  switch (dt) {
    case ncclInt8: k_i8(acc, src, n, op); break;
    case ncclUint8: k_u8(acc, src, n, op); break;
    case ncclInt32: k_i32(acc, src, n, op); break;
    case ncclUint32: k_u32(acc, src, n, op); break;
    case ncclInt64: k_i64(acc, src, n, op); break;
    case ncclUint64: k_u64(acc, src, n, op); break;
    case ncclFloat32: k_f32(acc, src, n, op, (float)(1.0 / nranks)); break;
    case ncclFloat64: k_f64(acc, src, n, op, 1.0 / nranks); break;
    default: k_narrow(dt, acc, src, n, op, narrow_round(dt, 1.0 / nranks), 0); break;
  }
}

#define INT_DIV(T)                                                                                 \
  do {                                                                                             \
    T *a = acc;                                                                                    \
    for (size_t i = 0; i < n; i++) a[i] = (T)(a[i] / (T)nranks);                                   \
  } while (0)

void sim_reduce_finish(void *acc, size_t n, ncclDataType_t dt, ncclRedOp_t op, int nranks) {
  if (op != ncclAvg) return;
  switch (dt) {
    case ncclInt8: INT_DIV(int8_t); break;
    case ncclUint8: INT_DIV(uint8_t); break;
    case ncclInt32: INT_DIV(int32_t); break;
    case ncclUint32: INT_DIV(uint32_t); break;
    case ncclInt64: INT_DIV(int64_t); break;
    case ncclUint64: INT_DIV(uint64_t); break;
    default: break; /* floating types were pre-multiplied */
  }
}

#define PREMUL(T, UT, CAST)                                                                        \
  do {                                                                                             \
    T *a = acc, s;                                                                                 \
    const T *x = src;                                                                              \
    memcpy(&s, scalar, sizeof s);                                                                  \
    for (size_t i = 0; i < n; i++) {                                                               \
      T p = (T)CAST((UT)x[i] * (UT)s);                                                             \
      a[i] = first ? p : (T)CAST((UT)a[i] + (UT)p);                                                \
    }                                                                                              \
  } while (0)

void sim_reduce_premul(void *acc, const void *src, size_t n, ncclDataType_t dt, const void *scalar,
                       int first) {
  switch (dt) {
    case ncclInt8: PREMUL(int8_t, unsigned, ); break;
    case ncclUint8: PREMUL(uint8_t, unsigned, ); break;
    case ncclInt32: PREMUL(int32_t, uint32_t, ); break;
    case ncclUint32: PREMUL(uint32_t, uint32_t, ); break;
    case ncclInt64: PREMUL(int64_t, uint64_t, ); break;
    case ncclUint64: PREMUL(uint64_t, uint64_t, ); break;
    case ncclFloat32: PREMUL(float, float, ); break;
    case ncclFloat64: PREMUL(double, double, ); break;
    default: k_narrow(dt, acc, src, n, ncclAvg, narrow_get(dt, scalar, 0), first); break;
  }
}
