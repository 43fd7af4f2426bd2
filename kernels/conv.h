/* nn.conv2d over NCHW data and OIHW weights. */
#ifndef RELVM_CONV_H
#define RELVM_CONV_H
#include <stdint.h>
#include "pgemm.h"

/* The geometry of one conv2d call: data (n, c, h, w), weight (oc, c / groups, kh, kw), output
 * (n, oc, oh, ow); strides sh/sw, top/left padding pt/pl (bottom/right are implied by oh/ow),
 * dilation dh/dw. The Python side computes oh/ow with the reference's rule. */
struct relvm_conv2d_shape {
    int64_t n, c, h, w, oc, kh, kw, oh, ow, sh, sw, pt, pl, dh, dw, groups;
};

/* y = conv2d(x, w) for float32, then + bias (one float per output channel; NULL: none) and,
 * with `clamp` (else NULL), each value clamped to [clamp[0], clamp[1]] as relvm_pgemm does
 * (relu is {0, inf}). Depthwise convs (one input channel per group) run a direct loop; the
 * rest run relvm's GEMM (pgemm.h) on the unrolled input without building it: the GEMM reads a
 * zero-bordered copy of each image in place, or 32-pixel panels packed from it, with the bias
 * and clamp applied in registers; or, for small output planes, the unrolled image (pixels x k)
 * times the weights packed as a dense layer's, stored transposed. `wpacked` is w as
 * relvm_conv2d_pack_weights packs it for s (a constant weight, packed once), or NULL: w is
 * packed on each call where the GEMM needs it. With `post` (else NULL), post(post_ctx, ...)
 * runs over each finished block of y after the bias and clamp (pgemm.h's relvm_block_fn;
 * offsets from y's start), while the block is in cache. */
int relvm_conv2d(int dtype, const struct relvm_conv2d_shape *s, const void *x, const void *w,
                 void *y, const void *bias, const float *clamp, const void *wpacked,
                 relvm_block_fn *post, void *post_ctx);

/* How s's conv reads its weights: 0 as they are (a depthwise conv, or none on the GEMM: pass
 * NULL for wpacked), 1 packed by row blocks of the GEMM's tile (in chunks of output channels;
 * whether the GEMM reads its image in place or from packed panels), 2 packed as a dense
 * layer's panels (small output planes: the GEMM then runs transposed, pixels x channels; read
 * in place only from a 64-byte boundary, else copied by each call). Weights packed for one
 * form serve every conv of the same weights and form. */
int relvm_conv2d_weights_form(const struct relvm_conv2d_shape *s);

/* Floats relvm_conv2d_pack_weights writes for s: the weights laid out as the GEMM path reads
 * them on this CPU; 0 when s's conv reads w as it is (then pass NULL for wpacked). */
int64_t relvm_conv2d_packed_size(const struct relvm_conv2d_shape *s);

/* w (oc, c / groups, kh, kw) into `packed`, relvm_conv2d_packed_size(s) floats. */
void relvm_conv2d_pack_weights(const struct relvm_conv2d_shape *s, const void *w,
                               void *packed);

/* The same conv with its epilogue, then global_avg_pool2d: y (n, oc) is the mean over each
 * output plane, and the full output is never stored. Float32 convs on the GEMM path only:
 * RELVM_UNSUPPORTED for depthwise convs and convs without input channels. */
int relvm_conv2d_mean(int dtype, const struct relvm_conv2d_shape *s, const void *x,
                      const void *w, void *y, const void *bias, const float *clamp,
                      const void *wpacked);

/* Two convs in a row, the first one's output never stored:
 * y = conv_b(epilogue_a(conv_a(x, wa)), wb), then b's epilogue (bias_b, clamp_b) and, with
 * mean, b's output averaged over each plane as in relvm_conv2d_mean (y is then n x oc). The
 * first conv writes each tile straight into the second's padded input. Each thread takes an
 * image, or a band of an image's rows (when there are fewer images than threads, or the image
 * is large), through both convs while it is in cache. wpacked_a and wpacked_b are as for
 * relvm_conv2d. Float32 on the GEMM path only: RELVM_UNSUPPORTED for depthwise convs, convs
 * without input channels or with empty planes, and shapes where b does not read a's output
 * (b->c != a->oc, ...). */
int relvm_conv2d_pair(int dtype, const struct relvm_conv2d_shape *a,
                      const struct relvm_conv2d_shape *b, const void *x, const void *wa,
                      const void *bias_a, const float *clamp_a, const void *wb, void *y,
                      const void *bias_b, const float *clamp_b, int mean, const void *wpacked_a,
                      const void *wpacked_b);

/* nn.conv2d over NHWC data (conv_nhwc.c): x (n, h, w, c), y (n, oh, ow, oc), w OIHW (oc,
 * c / groups, kh, kw) as for relvm_conv2d, with the same geometry struct, bias, clamp and post
 * (each finished block of y: a row of output pixels by a panel of its channels, offsets from
 * y's start). Output channels are the vectors: depthwise convs (one input channel per group,
 * as many output channels) run a vector of channels per output pixel, the rest relvm's GEMM
 * with A read in place. `wpacked` is w as relvm_conv2d_nhwc_pack_weights packs it for s (a
 * constant weight, packed once), or NULL: w is packed by the call. */
int relvm_conv2d_nhwc(int dtype, const struct relvm_conv2d_shape *s, const void *x,
                      const void *w, void *y, const void *bias, const float *clamp,
                      const void *wpacked, relvm_block_fn *post, void *post_ctx);

/* Floats relvm_conv2d_nhwc_pack_weights writes for s (0 for a conv without input channels). */
int64_t relvm_conv2d_nhwc_packed_size(const struct relvm_conv2d_shape *s);

/* w (oc, c / groups, kh, kw) into `packed` (64-byte aligned), as relvm_conv2d_nhwc reads it. */
void relvm_conv2d_nhwc_pack_weights(const struct relvm_conv2d_shape *s, const void *w,
                                    void *packed);

/* y = conv2d_transpose(x, w) for float32, with w in IOHW layout (c, oc / groups, kh, kw) and
 * the same geometry struct: c/h/w describe the data, oc/oh/ow the output, pt/pl the crop at the
 * top/left. sgemm gives every input pixel's contribution through every tap (W^T x), then col2im
 * scatters them into the output. */
int relvm_conv2d_transpose(int dtype, const struct relvm_conv2d_shape *s, const void *x,
                           const void *w, void *y);

/* nn.conv3d_transpose's geometry: data (n, c, in[0..2]), weight IODHW (c, oc / groups,
 * k[0..2]), output (n, oc, out[0..2]); along axis a, output o reads input i through tap t where
 * o + pad[a] = i * stride[a] + t * dilation[a] (pad: the crop before each axis). */
struct relvm_conv3d_transpose_shape {
    int64_t n, c, oc, groups;
    int64_t in[3], k[3], out[3], stride[3], dilation[3], pad[3];
};

/* y = conv3d_transpose(x, w) for float32 or float64 (dtype): each output voxel gathers the
 * input voxels and taps that land on it, summed in float64. RELVM_UNSUPPORTED for a geometry
 * that does not agree. */
int relvm_conv3d_transpose(int dtype, const struct relvm_conv3d_transpose_shape *s,
                           const void *x, const void *w, void *y);
#endif
