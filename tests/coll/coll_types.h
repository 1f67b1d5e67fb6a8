/* coll_types.h: the element types of the collective tests, written from the formats' definitions
 * and independent of sim/, so a reference computed here checks sim/ rather than agrees with it.
 *
 * Every element is handled as a coll_val_t: integers as 64-bit two's complement (sign-extended from
 * the type's width), floating types as a double, which holds every half, bfloat16, fp8 and float
 * value exactly. */
#ifndef COLL_TYPES_H
#define COLL_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include <nccl.h>

/* Number of data types the tests cover: every type of NCCL 2.24+ (fp8 included). */
#define COLL_NTYPES 12
#define COLL_NOPS 5

typedef struct {
  ncclDataType_t dt;
  const char *name;
  size_t size; /* bytes per element */
  int is_float;
  int is_signed; /* integers only */
  int mant_bits; /* floating: significand bits including the implicit one */
} coll_type_t;

typedef struct {
  uint64_t i; /* integer types: the value, sign-extended for signed types */
  double f;   /* floating types */
} coll_val_t;

/* The type table entry for `dt`, or NULL for a type the tests do not know. */
const coll_type_t *coll_type_get(ncclDataType_t dt);
/* The i-th covered type (0 <= i < COLL_NTYPES). */
const coll_type_t *coll_type_at(int i);
const char *coll_op_name(ncclRedOp_t op);

/* Reads and writes element `idx` of a host buffer of type `t`. A floating value is rounded to the
 * type (nearest even); the tests only store values the type holds exactly. */
coll_val_t coll_val_load(const coll_type_t *t, const void *buf, size_t idx);
void coll_val_store(const coll_type_t *t, void *buf, size_t idx, coll_val_t v);
/* Integers: truncates v to the type's width and sign-extends it back (wrap-around arithmetic). */
uint64_t coll_int_wrap(const coll_type_t *t, uint64_t v);

/* Conversions between double and the narrow floating formats, as bit patterns. Rounding is to
 * nearest even; overflow gives infinity for half, bfloat16 and e5m2, and the largest finite value
 * (448) for e4m3, which has no infinity. NaN inputs are not supported (the tests never make one). */
uint16_t coll_half_from_double(double x);
double coll_half_to_double(uint16_t h);
uint16_t coll_bf16_from_double(double x);
double coll_bf16_to_double(uint16_t b);
uint8_t coll_e4m3_from_double(double x);
double coll_e4m3_to_double(uint8_t v);
uint8_t coll_e5m2_from_double(double x);
double coll_e5m2_to_double(uint8_t v);

/* 1 when the element at `idx` of `buf` is a NaN or an infinity of floating type t. */
int coll_val_nonfinite(const coll_type_t *t, const void *buf, size_t idx);

#endif
