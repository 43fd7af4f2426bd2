/* Linear algebra on batches of matrices (relvm/ops/linalg.py): determinants. */
#ifndef RELVM_LINALG_H
#define RELVM_LINALG_H
#include <stdint.h>

/* out[b] = det of the b-th (m, m) matrix of x, for b < batch: LU with partial pivoting in
 * float64, rounded once to the dtype (float32 or float64; else RELVM_UNSUPPORTED). */
int relvm_det(int dtype, int64_t batch, int64_t m, const void *x, void *out);
#endif
