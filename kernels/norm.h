/* Softmax and normalizations over one axis. The data is seen as (outer, len, inner): the axis
 * has length len and stride inner. */
#ifndef RELVM_NORM_H
#define RELVM_NORM_H
#include <stdint.h>

/* y = softmax(x) (or log_softmax with take_log) along the axis, stable (max subtracted first). */
int relvm_softmax(int dtype, int take_log, int64_t outer, int64_t len, int64_t inner, const void *x,
                  void *y);

/* y = (x - mean) / sqrt(var + eps) along the axis (biased var), times gamma when scale, plus
 * beta when center; gamma/beta have len elements. */
int relvm_layer_norm(int dtype, int64_t outer, int64_t len, int64_t inner, const void *x,
                     const void *gamma, const void *beta, void *y, double eps, int scale,
                     int center);

/* RMS norm of rows rows of len contiguous elements: y = x / sqrt(mean(x^2) + eps) * gamma,
 * gamma repeated along the row (its gamma_len elements divide len). */
int relvm_rms_norm(int dtype, int64_t rows, int64_t len, int64_t gamma_len, const void *x,
                   const void *gamma, void *y, double eps);

/* Group norm of (batch, channels, spatial) data: each of groups groups of channels / groups
 * consecutive channels is normalized by its own mean and (biased) variance, then channel c is
 * scaled by gamma[c] when scale and shifted by beta[c] when center. Instance norm is groups ==
 * channels. */
int relvm_group_norm(int dtype, int64_t batch, int64_t groups, int64_t channels, int64_t spatial,
                     const void *x, const void *gamma, const void *beta, void *y, double eps,
                     int scale, int center);

/* Along the axis: y = x / norm, norm = sum |x| (mode 1) or sqrt(sum x^2) (mode 2), 0 where the
 * norm is 0 (ONNX LpNormalization); or mode 0, y = (x - mean) / sqrt(var + eps) (biased var,
 * ONNX MeanVarianceNormalization). */
int relvm_axis_norm(int dtype, int mode, int64_t outer, int64_t len, int64_t inner, const void *x,
                    void *y, double eps);

/* Inference batch norm: channel c of the axis (length len) gets
 * (x - mean[c]) / sqrt(var[c] + eps), times gamma[c] when scale, plus beta[c] when center. */
int relvm_batch_norm(int dtype, int64_t outer, int64_t len, int64_t inner, const void *x,
                     const void *gamma, const void *beta, const void *mean, const void *var,
                     void *y, double eps, int scale, int center);
#endif
