/* Matrix products: nn.dense, nn.matmul, nn.batch_matmul (float32 nn.dense with constant
 * weights runs on pgemm.h instead). */
#ifndef RELVM_GEMM_H
#define RELVM_GEMM_H
#include <stdint.h>

/* c[i] = op(a[i]) x op(b[i]) for i < batch, row-major: op(a) is m x k (a stored k x m when
 * trans_a), op(b) is k x n (stored n x k when trans_b), c is m x n and contiguous. stride_a /
 * stride_b are elements between batch items, 0 to reuse one matrix. Floats need out_dtype ==
 * dtype: float32 runs on relvm's GEMM (relvm_pgemm_batch), float64 and matrix-vector
 * products on BLAS; integer dtypes accumulate in int64 and wrap into any integer out_dtype. */
int relvm_gemm(int dtype, int out_dtype, int trans_a, int trans_b, int64_t batch, int64_t m,
               int64_t n, int64_t k, const void *a, int64_t stride_a, const void *b,
               int64_t stride_b, void *c);
#endif
