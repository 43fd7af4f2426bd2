/* relvm's own float32 GEMM: weights packed once into column panels, a register-tiled inner
 * kernel per ISA (AVX-512, AVX2, SSE2), and an epilogue (bias, relu) applied to each tile
 * while it is still in registers. Serves float32 nn.dense (constant weights) and nn.conv2d. */
#ifndef RELVM_PGEMM_H
#define RELVM_PGEMM_H
#include <stdint.h>

/* Floats a packed (k x n) B needs: ceil(n / 32) panels of k x 32, zero-padded. */
int64_t relvm_pgemm_packed_size(int64_t k, int64_t n);

/* Pack op(B) (k x n; stored n x k when trans_b, as nn.dense weights are) into `packed`, which
 * must hold relvm_pgemm_packed_size(k, n) floats and be 64-byte aligned. */
void relvm_pgemm_pack(int trans_b, int64_t k, int64_t n, const void *b, void *packed);

/* C (m x n, row stride ldc) = A (m x k, row stride lda) x B, B packed as above; then, while
 * each tile is in registers, + bias (NULL: none; one float per row of C with bias_per_row,
 * else per column) and, with relu, max(., 0) (NaN stays NaN). Runs on relvm's thread pool.
 * Returns RELVM_OK, or RELVM_UNSUPPORTED for negative sizes. */
int relvm_pgemm(int64_t m, int64_t n, int64_t k, const void *a, int64_t lda, const void *packed,
                void *c, int64_t ldc, const void *bias, int bias_per_row, int relu);

/* The instruction set the inner kernel uses on this CPU: "avx512f", "avx2" or "sse2" (the
 * best the CPU has, or less if the environment variable RELVM_PGEMM_ISA says avx2 or sse2). */
const char *relvm_pgemm_isa(void);
#endif
