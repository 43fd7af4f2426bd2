/* A float32 matrix transpose for the kernels that change layout on the way into or out of the
 * GEMM (conv_gemm.c's transposed form): out[c * ldo + r] = in[r * ldi + c] for r < rows and
 * c < cols, 8 x 8 blocks at a time in eight 8-float vectors (24 shuffles per block), the edges
 * element by element. Defined in transform.c. Internal: not cdef. */
#ifndef RELVM_INTERNAL_TRANSPOSE_H
#define RELVM_INTERNAL_TRANSPOSE_H
#include <stdint.h>

void relvm_transpose_f32(int64_t rows, int64_t cols, const float *in, int64_t ldi, float *out,
                         int64_t ldo);

/* The same, with out's rows in runs: after every `run` rows, `gap` rows are skipped (left as
 * they are), so out row c is out + (c + c / run * gap) * ldo. A plane transposed into the
 * interior of a zero-bordered image (run: its width, gap: the border's columns per row). */
void relvm_transpose_f32_runs(int64_t rows, int64_t cols, const float *in, int64_t ldi,
                              float *out, int64_t ldo, int64_t run, int64_t gap);
#endif
