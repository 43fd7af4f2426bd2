/* Ops that read a tensor in order along an axis (relvm/ops/scan.py): cumsum and cumprod, topk;
 * and trilu. The axis is seen as (outer, n, inner): data contiguous, element (o, i, j) at
 * (o * n + i) * inner + j. */
#ifndef RELVM_SCAN_H
#define RELVM_SCAN_H
#include <stdint.h>

enum relvm_cumulative_op { RELVM_CUMSUM, RELVM_CUMPROD, RELVM_NUM_CUMULATIVE };

/* 1 if relvm_cumulative implements (op, dtype). */
int relvm_cumulative_supported(int op, int dtype);

/* out = running sums (or products) of x along the axis, forward or from the end (reverse);
 * exclusive leaves each element out of its own result. Integers wrap; floats accumulate in
 * their dtype, in order. out and x have the same shape and do not overlap. */
int relvm_cumulative(int op, int dtype, int exclusive, int reverse, int64_t outer, int64_t n,
                     int64_t inner, const void *x, void *out);

/* values and indices (outer, k, inner) = the k best entries of each line of x along the axis,
 * best first: the largest (or smallest) values, equal values in index order, NaN larger than
 * every number. Numeric dtypes but float16 and bool; 0 <= k <= n (else RELVM_BAD_INDEX). */
int relvm_topk(int dtype, int largest, int64_t outer, int64_t n, int64_t inner, int64_t k,
               const void *x, void *values, int64_t *indices);

/* The u distinct rows of x, row i being the entries (o, i, j) for every o and j in row-major
 * order (a flattened tensor is outer = inner = 1), compared as numbers, every NaN equal to every
 * other: values (outer, u, inner) holds them, ascending (lexicographically, NaN last) when
 * sorted, else by first occurrence; first[p] the index of unique p's first row, counts[p] how
 * many rows it has, inverse[i] the unique of row i. u must be their number (else
 * RELVM_BAD_INDEX, nothing past u written); every dtype but float16 (bool as uint8). */
int relvm_unique(int dtype, int sorted, int64_t outer, int64_t n, int64_t inner, const void *x,
                 int64_t u, void *values, int64_t *first, int64_t *inverse, int64_t *counts);

/* out = x where j - i >= k (upper) or j - i <= k (lower) in each of `batch` (rows, cols)
 * matrices, zero bytes elsewhere; elements of `itemsize` bytes (1, 2, 4 or 8). */
int relvm_trilu(int itemsize, int upper, int64_t k, int64_t batch, int64_t rows, int64_t cols,
                const void *x, void *out);
#endif
