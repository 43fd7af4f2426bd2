/* Elementwise kernels over contiguous arrays: unary math, clip, leaky_relu, cast. */
#ifndef RELVM_ELEMENTWISE_H
#define RELVM_ELEMENTWISE_H
#include <stdint.h>

enum relvm_unary_op {
    RELVM_RELU, RELVM_SIGMOID, RELVM_TANH, RELVM_EXP, RELVM_LOG, RELVM_SQRT, RELVM_RSQRT,
    RELVM_ERF, RELVM_FLOOR, RELVM_CEIL, RELVM_ROUND, RELVM_NEGATIVE, RELVM_ABS, RELVM_SIGN,
    RELVM_LOGICAL_NOT, RELVM_SIN, RELVM_COS, RELVM_TAN, RELVM_ASIN, RELVM_ACOS, RELVM_ATAN,
    RELVM_SINH, RELVM_COSH, RELVM_ASINH, RELVM_ACOSH, RELVM_ATANH, RELVM_BITWISE_NOT,
    RELVM_NUM_UNARY
};

/* 1 if relvm_unary implements (op, dtype). */
int relvm_unary_supported(int op, int dtype);

/* out[i] = op(x[i]) over n contiguous elements of `dtype`; out may alias x. */
int relvm_unary(int op, int dtype, const void *x, void *out, int64_t n);

/* out[i] = min(max(x[i], lo), hi), NaN kept. Float dtypes read lo/hi, integer ones ilo/ihi
 * (the bounds already rounded into the dtype, as the reference does; uint64's as the int64_t
 * of the same bits). */
int relvm_clip(int dtype, const void *x, void *out, int64_t n, double lo, double hi, int64_t ilo,
               int64_t ihi);

/* out[i] = x[i] > 0 ? x[i] : alpha * x[i] (float dtypes). */
int relvm_leaky_relu(int dtype, const void *x, void *out, int64_t n, double alpha);

/* out[i] = x[i] converted from dtype `from` to `to`: float to int truncates toward zero and
 * gives 0 for NaN, inf and values outside the int range (its ends rounded to the float type),
 * the int minimum for the one value past it that rounding makes (2^31 in float32 for int32);
 * int to int wraps; anything to bool is x != 0. */
int relvm_cast(int from, int to, const void *x, void *out, int64_t n);
#endif
