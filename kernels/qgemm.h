/* Integer products of quantized tensors (relvm/ops/quantized.py): nn.matmul_integer and
 * nn.conv2d_integer. Operands are int8 or uint8 (a dtype code each, relvm_config.h), each with
 * a zero point of its own dtype; results are int32, exact, wrapping in int32:
 *     c[i][j] = sum over k of (a[i][k] - za[i]) * (b[k][j] - zb[j]).
 * A zero point given with a count of 1 is one value for all; otherwise it has one value per
 * row of a (per column of b; per output channel of a conv).
 *
 * One GEMM serves both: a tile of 8 rows x 48 columns of c is summed in 32-bit registers over
 * all of k, with AVX-512 VNNI where the CPU has it (vpdpbusd: four unsigned-by-signed byte
 * products added to each 32-bit lane, exact), else AVX2 (vpmaddwd of the bytes widened to
 * int16, exact), else portable C. Its operands are
 * packed with a to unsigned and b to signed bytes (x ^ 0x80 moves a value by 128 between the
 * two; the zero points move with it), and the zero points are applied once per tile from the
 * packed rows' and columns' sums:
 *     sum (a - za)(b - zb) = sum a b - za * sum b - zb * (sum a - k * za). */
#ifndef RELVM_QGEMM_H
#define RELVM_QGEMM_H
#include <stdint.h>
#include "conv.h"

/* Bytes relvm_qgemm_pack_b writes for a (k x n) b. */
int64_t relvm_qgemm_packed_b_size(int64_t k, int64_t n);

/* b (k x n, row-major, int8 or uint8 `dtype`) into `packed` (relvm_qgemm_packed_b_size bytes,
 * 64-byte aligned): 16-column panels, each its columns' sums then its bytes. */
void relvm_qgemm_pack_b(int dtype, int64_t k, int64_t n, const void *b, void *packed);

/* c[i] = a[i] x b[i] less the zero points, for i < batch: a[i] is m x k, b[i] k x n, c[i]
 * m x n, all row-major, c contiguous; stride_a / stride_b are elements between batch items, 0
 * to reuse one matrix. `packed_b`: b as relvm_qgemm_pack_b packs it (a constant, packed once;
 * only with stride_b 0), or NULL. a_zp_count is 1 or m (a zero point per row of each a[i]),
 * b_zp_count 1 or n. Returns RELVM_OK, RELVM_UNSUPPORTED (a dtype other than int8/uint8, a bad
 * count or negative size) or RELVM_NO_MEMORY. */
int relvm_matmul_integer(int a_dtype, int b_dtype, int64_t batch, int64_t m, int64_t n,
                         int64_t k, const void *a, int64_t stride_a, const void *b,
                         int64_t stride_b, const void *packed_b, const void *a_zero_point,
                         int64_t a_zp_count, const void *b_zero_point, int64_t b_zp_count,
                         void *c);

/* Bytes relvm_conv2d_integer_pack_weights writes for s (0 for a depthwise conv, which reads
 * its weights as they are). */
int64_t relvm_conv2d_integer_packed_size(const struct relvm_conv2d_shape *s);

/* w (oc, c / groups, kh, kw; `dtype` int8 or uint8) packed as relvm_conv2d_integer reads it. */
void relvm_conv2d_integer_pack_weights(const struct relvm_conv2d_shape *s, int dtype,
                                       const void *w, void *packed);

/* y (n, oc, oh, ow) int32 = the convolution of x (n, c, h, w) with w (oc, c / groups, kh, kw),
 * both less their zero points (x_zero_point one value; w_zero_point w_zp_count values, 1 or
 * oc), the padding holding x's zero point. A depthwise conv (one input channel per group) runs
 * a direct loop; the others a GEMM per image and group: the weights (packed_w as
 * relvm_conv2d_integer_pack_weights packs them, or NULL to pack them here) times the image
 * unrolled a band of pixels at a time from a channels-last copy, straight into packed panels.
 * Returns as relvm_matmul_integer. */
int relvm_conv2d_integer(const struct relvm_conv2d_shape *s, int x_dtype, int w_dtype,
                         const void *x, const void *w, const void *packed_w,
                         const void *x_zero_point, const void *w_zero_point,
                         int64_t w_zp_count, void *y);

/* The instruction set of the integer GEMM on this CPU: "avx512vnni", "avx2" or "portable" (or
 * a lesser one where RELVM_PGEMM_ISA asks for avx2 or sse2, as for the float GEMM). */
const char *relvm_qgemm_isa(void);
#endif
