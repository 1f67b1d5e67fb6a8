/* Element-wise reduction kernels for every NCCL data type and reduction operator, used by the
 * collectives of sim/. Arithmetic follows what NCCL's device code computes: integers wrap, half and
 * bfloat16 are rounded after every operation, fp8 is computed in half precision and converted back
 * saturating to the largest finite value, and ncclAvg is a sum divided by nranks for integers and a
 * sum of inputs pre-multiplied by 1/nranks for floating types. */
#ifndef SIM_REDUCE_H
#define SIM_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include <nccl.h>

/* Size in bytes of one element, or 0 for a type this NCCL version does not know. */
size_t sim_dtype_size(ncclDataType_t dt);
const char *sim_dtype_name(ncclDataType_t dt);
const char *sim_redop_name(ncclRedOp_t op);

/* Starts an accumulator from the first rank's input: acc = src, or src * (1/nranks) for ncclAvg
 * on floating types. */
void sim_reduce_first(void *acc, const void *src, size_t n, ncclDataType_t dt, ncclRedOp_t op,
                      int nranks);
/* Folds one more rank's input into the accumulator (same pre-multiplication rule). */
void sim_reduce_accum(void *acc, const void *src, size_t n, ncclDataType_t dt, ncclRedOp_t op,
                      int nranks);
/* Finishes the accumulator: integer ncclAvg divides by nranks; otherwise nothing. */
void sim_reduce_finish(void *acc, size_t n, ncclDataType_t dt, ncclRedOp_t op, int nranks);

/* PreMulSum: acc = src * scalar (first) or acc + src * scalar, where `scalar` points to one element
 * of type dt. Integers wrap; narrow floats round the product and the sum as ncclAvg's
 * pre-multiplication does (ncclAvg on floating types is PreMulSum with 1/nranks). */
void sim_reduce_premul(void *acc, const void *src, size_t n, ncclDataType_t dt, const void *scalar,
                       int first);

/* Conversions used by the kernels, exposed for tests. Rounding is to nearest even; fp8 saturates
 * finite values to the largest finite value of the format, as NCCL's __NV_SATFINITE does. */
float sim_half_to_float(uint16_t h);
uint16_t sim_float_to_half(double f);
float sim_bf16_to_float(uint16_t b);
uint16_t sim_float_to_bf16(double f);
float sim_e4m3_to_float(uint8_t v);
uint8_t sim_float_to_e4m3(double f);
float sim_e5m2_to_float(uint8_t v);
uint8_t sim_float_to_e5m2(double f);

#endif
