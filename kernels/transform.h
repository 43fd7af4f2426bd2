/* Data movement: strided copies (transpose, slice, broadcast, concatenate, split, pad), take,
 * fills, and the value-dependent ops arange and argwhere. Movement kernels work on elements of
 * `itemsize` bytes (1, 2, 4 or 8), whatever their dtype. */
#ifndef RELVM_TRANSFORM_H
#define RELVM_TRANSFORM_H
#include <stdint.h>

/* dst = src over a loop nest of ndim >= 1 dims (shape); src and dst step by their own strides
 * in elements (src's may be negative, or 0 to repeat a value). */
int relvm_copy_strided(int itemsize, int ndim, const int64_t *shape, const void *src,
                       const int64_t *src_strides, void *dst, const int64_t *dst_strides);

/* dst = src broadcast to dst's shape (ndim dims, contiguous): src's dims (src_ndim of them,
 * its leading ones missing) each 1 or dst's. The nest is planned here from the two shapes, so
 * a call on shapes never seen before plans nothing in Python. RELVM_UNSUPPORTED where src does
 * not broadcast to dst's shape. */
int relvm_broadcast_copy(int itemsize, int ndim, const int64_t *shape, const void *src,
                         int src_ndim, const int64_t *src_shape, void *dst);

/* dst = src with its axes permuted: dst (contiguous) has src's dim perm[d] as its dim d. The
 * nest is planned here from src's shape. RELVM_UNSUPPORTED for a perm that is not one. */
int relvm_transpose(int itemsize, int ndim, const int64_t *src_shape, const int64_t *perm,
                    const void *src, void *dst);

/* memcpy for the reshape-like ops, on the thread pool for large copies. */
void relvm_copy(void *dst, const void *src, int64_t nbytes);

/* bitcast: y = x's n bytes, as they are (to_bool 0), or each byte made 0 or 1 (to_bool 1: the
 * result is bool, whose only bytes are 0 and 1). */
void relvm_bitcast(int to_bool, int64_t n, const void *x, void *y);

/* dst[i] = *value for i < n. */
int relvm_fill(int itemsize, void *dst, int64_t n, const void *value);

/* Indices outside [0, len): CLIP clamps, WRAP takes them modulo len, FAST refuses them,
 * FROM_END counts [-len, 0) from the end (ONNX's Gather) and refuses the rest. */
enum relvm_take_mode { RELVM_TAKE_CLIP, RELVM_TAKE_WRAP, RELVM_TAKE_FAST, RELVM_TAKE_FROM_END };

/* take with x seen as (batch, outer, axis_len, inner), int32/int64 indices as (batch, count)
 * and out as (batch, outer, count, inner). clip clamps an index into [0, axis_len), wrap takes
 * it modulo axis_len; fast returns RELVM_BAD_INDEX for one outside (out is then unspecified). */
int relvm_take(int itemsize, int index_dtype, int mode, int64_t batch, int64_t outer,
               int64_t axis_len, int64_t inner, int64_t count, const void *x,
               const void *indices, void *out);

/* dst (contiguous, ndim dims of shape) gets src at coordinates (maps[0][i0], maps[1][i1], ...)
 * read through src_strides (elements); maps lie end to end, shape[d] entries for dim d, and an
 * entry -1 writes *fill instead (used by pad). */
int relvm_gather(int itemsize, int ndim, const int64_t *shape, const void *src,
                 const int64_t *src_strides, const int64_t *maps, const void *fill, void *dst);

/* out[i] = i * step + start for i < n, computed in `dtype` (integers wrap), as the reference. */
int relvm_arange(int dtype, void *out, int64_t n, const void *start, const void *step);

/* Writes the coordinates of x's non-zero elements (NaN counts; -0.0 does not), row-major, as
 * int32 rows of ndim into out, at most max_rows of them; returns how many x holds. */
int64_t relvm_argwhere(int dtype, int ndim, const int64_t *shape, const void *x, int32_t *out,
                       int64_t max_rows);
#endif
