/* Reductions over any set of axes: sum, prod, mean, max, min, argmax, argmin; logsumexp. */
#ifndef RELVM_REDUCE_H
#define RELVM_REDUCE_H
#include <stdint.h>

enum relvm_reduce_op {
    RELVM_SUM, RELVM_PROD, RELVM_MEAN, RELVM_MAX, RELVM_MIN, RELVM_ARGMAX, RELVM_ARGMIN,
    RELVM_NUM_REDUCE
};

/* 1 if relvm_reduce implements (op, dtype). */
int relvm_reduce_supported(int op, int dtype);

/* out[o] = op over x's reduced positions, for each kept position o (row-major). The kept dims
 * (shapes and x's strides in elements) give the positions of out, which is contiguous; the
 * reduced dims, in x's axis order, give the positions folded (argmax counts them row-major).
 * argmax/argmin write int32, the others x's dtype. max/min/argmax/argmin need at least one
 * reduced position (the Python side checks). */
int relvm_reduce(int op, int dtype, int select_last, const void *x, void *out, int nkept,
                 const int64_t *kept_shape, const int64_t *kept_strides, int nred,
                 const int64_t *red_shape, const int64_t *red_strides);

/* out[o] = m + log(sum(exp(x - m))) over x's reduced positions, m their maximum, in double (so
 * no exp overflows): m itself when m is infinite, NaN if any position is NaN, -inf for none.
 * float32, float64 or float16 x and out; the dims as relvm_reduce's. */
int relvm_logsumexp(int dtype, const void *x, void *out, int nkept, const int64_t *kept_shape,
                    const int64_t *kept_strides, int nred, const int64_t *red_shape,
                    const int64_t *red_strides);
#endif
