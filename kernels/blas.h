/* OpenBLAS from the scipy-openblas32 wheel, opened at run time (no link-time dependency). */
#ifndef RELVM_BLAS_H
#define RELVM_BLAS_H
#include <stdint.h>

/* Open the library at `path` and bind its GEMMs. Returns RELVM_OK or RELVM_NO_BLAS.
 * With `use_pool` and a library of the version relvm was built against, OpenBLAS runs its
 * threads on relvm's pool (see threads.h). */
int relvm_blas_open(const char *path, int use_pool);
/* 1 once relvm_blas_open succeeded. */
int relvm_blas_ready(void);
/* 1 when OpenBLAS runs on relvm's pool, 0 when it runs its own threads. */
int relvm_blas_uses_pool(void);
/* The OpenBLAS configuration string ("OpenBLAS 0.3.x DYNAMIC_ARCH ..."), or "" if not open. */
const char *relvm_blas_config(void);
/* How many threads OpenBLAS may use. */
void relvm_blas_set_threads(int k);

/* Row-major C[b] = op(A[b]) x op(B[b]) for b < batch (C is m x n, contiguous); a stride of 0
 * reuses one matrix for every b. One row or column goes to gemv. Dims must fit in 32 bits.
 * Only after relvm_blas_open succeeded. */
void relvm_sgemm_batch(int trans_a, int trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                       const float *a, int64_t stride_a, const float *b, int64_t stride_b,
                       float *c);
void relvm_dgemm_batch(int trans_a, int trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                       const double *a, int64_t stride_a, const double *b, int64_t stride_b,
                       double *c);
#endif
