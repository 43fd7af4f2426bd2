/* Pooling over regions of interest (relvm/ops/roi.py gives the rules; these kernels follow
 * them number for number): ONNX RoiAlign and MaxRoiPool as ONNX Runtime computes them. */
#ifndef RELVM_ROI_H
#define RELVM_ROI_H
#include <stdint.h>

/* y (rois, channels, out_h, out_w) from x (n, channels, height, width) of dtype float32 or
 * float64 (relvm_dtype codes; roi (rois, 4) [x1, y1, x2, y2] of the same dtype, batch (rois)
 * int64). mode_max: the max of each sample's weighted corners, else the samples' average;
 * half_pixel: coordinates less 0.5, else rois of at least one pixel; sampling_ratio 0: an
 * adaptive grid of ceil(roi / out) per axis, at most max_grid. Each roi's sampling positions
 * and weights are computed once for all its channels (per sample up to 4096 samples, else per
 * axis); threaded over rois.
 * RELVM_BAD_INDEX for a batch index outside [0, n), RELVM_TOO_LARGE for an adaptive grid that
 * is not finite or above max_grid: *bad_roi is that roi (batch indices are checked first, then
 * grids, each in roi order). RELVM_NO_MEMORY; RELVM_UNSUPPORTED for another dtype or a
 * negative size. */
int relvm_roi_align(int dtype, int mode_max, int half_pixel, int64_t n, int64_t channels,
                    int64_t height, int64_t width, int64_t rois, int64_t out_h, int64_t out_w,
                    int64_t sampling_ratio, float spatial_scale, int64_t max_grid,
                    const void *x, const void *roi, const int64_t *batch, void *y,
                    int64_t *bad_roi);

/* y (rois, channels, pooled_h, pooled_w) from x (n, channels, height, width) and roi
 * (rois, 5) [batch, x1, y1, x2, y2], all float32: each bin of the rounded roi's pixels (its
 * coordinates clamped to +-clamp, NaN to clamp) pooled by max, an empty bin 0. Threaded over
 * rois. RELVM_BAD_INDEX for a batch (truncated) outside [0, n) or NaN, *bad_roi its roi;
 * RELVM_NO_MEMORY; RELVM_UNSUPPORTED for a negative size. */
int relvm_max_roi_pool(int64_t n, int64_t channels, int64_t height, int64_t width, int64_t rois,
                       int64_t pooled_h, int64_t pooled_w, float spatial_scale, int64_t clamp,
                       const float *x, const float *roi, float *y, int64_t *bad_roi);
#endif
