/* nn.deform_conv2d: deformable convolution, as ONNX DeformConv (relvm/ops/deform_conv.py gives
 * the rules). */
#ifndef RELVM_DEFORM_CONV_H
#define RELVM_DEFORM_CONV_H
#include <stdint.h>

struct relvm_deform_shape {
    int64_t n, c, h, w;         /* data */
    int64_t oc, kh, kw;         /* weight (oc, c / groups, kh, kw) */
    int64_t oh, ow;             /* output */
    int64_t sh, sw, dh, dw, pt, pl; /* strides, dilations, top and left padding */
    int64_t groups, offset_groups;
    int has_mask;               /* mask (n, offset_groups * kh * kw, oh, ow), else one scalar */
};

/* y (n, oc, oh, ow) from x, w, offset (n, offset_groups * kh * kw * 2, oh, ow) and mask, all
 * of dtype (float32 or float64). Each image's taps are sampled into columns (float64), then
 * multiplied by the group's weights; sums in float64. RELVM_UNSUPPORTED for a shape that does
 * not agree, RELVM_NO_MEMORY. */
int relvm_deform_conv2d(int dtype, const struct relvm_deform_shape *s, const void *x,
                        const void *w, const void *offset, const void *mask, void *y);
#endif
