/* Binary elementwise kernels and where, with NumPy broadcasting. */
#ifndef RELVM_BINARY_H
#define RELVM_BINARY_H
#include <stdint.h>

enum relvm_binary_op {
    RELVM_ADD, RELVM_SUBTRACT, RELVM_MULTIPLY, RELVM_DIVIDE, RELVM_POWER, RELVM_MAXIMUM,
    RELVM_MINIMUM, RELVM_MOD, RELVM_FLOOR_MOD, RELVM_BITWISE_AND, RELVM_BITWISE_OR,
    RELVM_BITWISE_XOR, RELVM_LEFT_SHIFT, RELVM_RIGHT_SHIFT, RELVM_EQUAL, RELVM_NOT_EQUAL,
    RELVM_LESS, RELVM_LESS_EQUAL, RELVM_GREATER, RELVM_GREATER_EQUAL, RELVM_LOGICAL_AND,
    RELVM_LOGICAL_OR, RELVM_NUM_BINARY
};

/* 1 if relvm_binary implements (op, dtype). */
int relvm_binary_supported(int op, int dtype);

/* out = a op b over a loop nest of ndim >= 1 dims (shape). Each input steps by its own strides
 * (in elements, 0 where it broadcasts, innermost stride 0 or 1); out is contiguous, of dtype
 * bool for comparisons. The Python side merges dims first, so most calls have ndim 1 or 2. */
int relvm_binary(int op, int dtype, int ndim, const int64_t *shape, const void *a,
                 const int64_t *a_strides, const void *b, const int64_t *b_strides, void *out);

/* out = a op b over n contiguous output elements, each input stepping by sa / sb elements: 1
 * (contiguous, the output's shape) or 0 (one value, a 0-d tensor). relvm_binary without a loop
 * nest, for the common cases (a residual add, x + 1), which then skip all shape planning. */
int relvm_binary_flat(int op, int dtype, const void *a, int64_t sa, const void *b, int64_t sb,
                      void *out, int64_t n);

/* relvm_binary with NumPy broadcasting planned here from the operands' shapes (a of ndim_a
 * dims, b of ndim_b, out contiguous of ndim_out): what a call on shapes not seen before runs.
 * RELVM_UNSUPPORTED where a and b do not broadcast to exactly out's shape. */
int relvm_binary_bcast(int op, int dtype, int ndim_out, const int64_t *out_shape, const void *a,
                       int ndim_a, const int64_t *a_shape, const void *b, int ndim_b,
                       const int64_t *b_shape, void *out);

/* out = cond ? x : y over a loop nest as relvm_binary's; cond is bool, x, y and out have
 * `itemsize` bytes (1, 2, 4 or 8) per element: where moves elements, whatever their dtype. */
int relvm_where(int itemsize, int ndim, const int64_t *shape, const void *cond,
                const int64_t *c_strides, const void *x, const int64_t *x_strides, const void *y,
                const int64_t *y_strides, void *out);

/* relvm_where with the broadcast planned here from the operands' shapes (relvm_binary_bcast). */
int relvm_where_bcast(int itemsize, int ndim_out, const int64_t *out_shape, const void *cond,
                      int ndim_c, const int64_t *c_shape, const void *x, int ndim_x,
                      const int64_t *x_shape, const void *y, int ndim_y, const int64_t *y_shape,
                      void *out);
#endif
