/* relvm's own float32 GEMM: weights packed once into column panels, a register-tiled inner
 * kernel per ISA (AVX-512, AVX2, SSE2), and an epilogue (bias, clamp) applied to each tile
 * while it is still in registers. Serves float32 nn.dense (constant weights), nn.conv2d, the
 * recurrent layers, and (relvm_pgemm_batch, B packed as it goes) float32 nn.matmul and
 * nn.batch_matmul through relvm_gemm. */
#ifndef RELVM_PGEMM_H
#define RELVM_PGEMM_H
#include <stdint.h>

/* An elementwise epilogue over a block of a finished output, run by the thread that computed
 * the block while it is in cache (a fused kernel's generated `_block` function): `rows` runs
 * of `cols` elements, `ld` apart, the first at element `offset` of the output. */
typedef void relvm_block_fn(void *ctx, int64_t offset, int64_t rows, int64_t cols, int64_t ld);

/* Floats a packed (k x n) B needs: ceil(n / 32) panels of k x 32, zero-padded. */
int64_t relvm_pgemm_packed_size(int64_t k, int64_t n);

/* Pack op(B) (k x n; stored n x k when trans_b, as nn.dense weights are) into `packed`, which
 * must hold relvm_pgemm_packed_size(k, n) floats and be 64-byte aligned. */
void relvm_pgemm_pack(int trans_b, int64_t k, int64_t n, const void *b, void *packed);

/* C (m x n, row stride ldc) = A (m x k, row stride lda) x B, B packed as above; then, while
 * each tile is in registers, + bias (NULL: none; one float per row of C with bias_per_row,
 * else per column) and, with `clamp` (else NULL), each value clamped to [clamp[0], clamp[1]]
 * (max with the first, then min with the second; NaN stays NaN: relu is {0, inf}, relu6
 * {0, 6}); then, with `post` (else NULL),
 * post(post_ctx, ...) over each finished block of C (offsets counted from C's start). Runs
 * on relvm's thread pool. Returns RELVM_OK, or RELVM_UNSUPPORTED for negative sizes. */
int relvm_pgemm(int64_t m, int64_t n, int64_t k, const void *a, int64_t lda, const void *packed,
                void *c, int64_t ldc, const void *bias, int bias_per_row, const float *clamp,
                relvm_block_fn *post, void *post_ctx);

/* c[i] = op(a[i]) x op(b[i]) for i < batch, float32, on the same inner kernel, for products
 * whose B changes from call to call (attention's Q K^T and P V): each thread packs the panel
 * of B it works on. op(a) is m x k (a stored k x m when trans_a), op(b) k x n (stored n x k
 * when trans_b), c m x n and contiguous; stride_a / stride_b are floats between batch items,
 * 0 to reuse one matrix. Returns RELVM_OK, RELVM_UNSUPPORTED for negative sizes, or
 * RELVM_NO_MEMORY. */
int relvm_pgemm_batch(int trans_a, int trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                      const void *a, int64_t stride_a, const void *b, int64_t stride_b, void *c);

/* The instruction set the inner kernel uses on this CPU: "avx512f", "avx2" or "sse2" (the
 * best the CPU has, or less if the environment variable RELVM_PGEMM_ISA says avx2 or sse2). */
const char *relvm_pgemm_isa(void);
#endif
