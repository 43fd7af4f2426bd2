/* Pooling over NCHW data: max_pool2d, avg_pool2d and the global pools. */
#ifndef RELVM_POOL_H
#define RELVM_POOL_H
#include <stdint.h>

/* One pooling call: `planes` = n * c images of h x w giving oh x ow; window kh x kw with
 * strides sh/sw and dilation dh/dw; padding pt/pl/pb/pr (top, left, bottom, right). The Python
 * side computes oh/ow with the reference's ceil_mode rule. */
struct relvm_pool2d_shape {
    int64_t planes, h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, count_include_pad;
};

/* Max over the taps inside the input (padding never wins); -inf for a window with none.
 * NaN propagates. float32 and float64. */
int relvm_max_pool2d(int dtype, const struct relvm_pool2d_shape *s, const void *x, void *y);

/* relvm_max_pool2d and, in idx, the position of each maximum in the flattened input: plane
 * p's offset p * h * w plus row * w + col (column_major 0) or row + col * h (1); the first of
 * equal maxima in the window's row-major order, a NaN winning as it does in y; -1 (and -inf)
 * for a window covering no input. */
int relvm_max_pool2d_argmax(int dtype, const struct relvm_pool2d_shape *s, int column_major,
                            const void *x, void *y, int64_t *idx);

/* MaxUnpool: y (planes, out[0], ..., out[k-1]) = 0, then for i < count in order, x[i] written
 * where idx[i] points in a (planes, unpooled[0], ..., unpooled[k-1]) tensor, that tensor lying
 * at the start of each axis of y (unpooled[a] <= out[a]); elements of itemsize bytes (1, 2, 4
 * or 8), 1 <= k <= 8. An index outside the unpooled tensor: RELVM_BAD_INDEX with *bad = i. */
int relvm_max_unpool(int itemsize, int64_t count, const void *x, const int64_t *idx,
                     int64_t planes, int k, const int64_t *unpooled, const int64_t *out, void *y,
                     int64_t *bad);

/* Sum of the taps inside the input over the count of taps inside the padded input
 * (count_include_pad) or inside the input; 0 for a window covering no input. */
int relvm_avg_pool2d(int dtype, const struct relvm_pool2d_shape *s, const void *x, void *y);

/* y[p] = max or mean of the `size` contiguous elements of plane p (mean of none is NaN). */
int relvm_global_pool2d(int dtype, int is_max, int64_t planes, int64_t size, const void *x,
                        void *y);
#endif
