/* image.resize2d: separable resampling of the H and W axes of NCHW data. */
#ifndef RELVM_RESIZE_H
#define RELVM_RESIZE_H
#include <stdint.h>

/* The taps of one axis: output position o reads inputs index[o * taps + k] with weights
 * weight[o * taps + k], or takes the fill value where outside[o] (outside may be NULL).
 * taps == 0 copies the axis (its size unchanged). The Python side computes them with the
 * reference's own rule (relvm.ops.image.axis_taps). */
struct relvm_resize_axis {
    int64_t taps;
    const int64_t *index;
    const double *weight;
    const uint8_t *outside;
};

/* y (planes, oh, ow) = x (planes, h, w) resampled along H, then W, in float64, rounded once to
 * out_dtype (integers: to nearest, ties to even, then clamped to the dtype's range). */
int relvm_resize2d(int dtype, int out_dtype, int64_t planes, int64_t h, int64_t w, int64_t oh,
                   int64_t ow, const struct relvm_resize_axis *rows,
                   const struct relvm_resize_axis *cols, double fill, const void *x, void *y);
#endif
