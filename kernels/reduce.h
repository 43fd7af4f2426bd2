/* Reductions over any set of axes: sum, prod, mean, max, min, argmax, argmin. */
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
#endif
