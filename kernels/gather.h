/* Gather and scatter by index tensors (relvm/ops/gather_scatter.py): gather (ONNX
 * GatherElements), gather_nd, scatter_elements and scatter_nd. Indices are int32 or int64
 * (index_dtype, a relvm_dtype code). A negative index counts from the end of its axis, once;
 * any other index outside its axis makes the kernel return RELVM_BAD_INDEX without reading or
 * writing through it (the output is then unspecified). Gathers move elements of `itemsize`
 * bytes (1, 2, 4 or 8), whatever their dtype; scatters combine values of `dtype`. */
#ifndef RELVM_GATHER_H
#define RELVM_GATHER_H
#include <stdint.h>

/* How a scatter combines an element with an update: update (the update replaces it), add,
 * mul, min, max. Integers wrap; on bool add and max are "or", mul and min "and"; min and max
 * propagate NaN. Updates are applied in row-major order of the indices. */
enum relvm_scatter_reduction {
    RELVM_SCATTER_UPDATE, RELVM_SCATTER_ADD, RELVM_SCATTER_MUL, RELVM_SCATTER_MIN,
    RELVM_SCATTER_MAX, RELVM_NUM_SCATTER
};

/* One index per element, along one axis. indices (and updates, and gather's out) are
 * contiguous of shape (outer, count, inner); entry (o, c, k) with index i (wrapped into
 * [0, axis_len)) addresses data element
 *     outer_offsets[o] + i * axis_stride + inner_offsets[k]
 * where a NULL outer_offsets stands for o * outer_stride and a NULL inner_offsets for k. */
int relvm_gather_elements(int itemsize, int index_dtype, int64_t outer, int64_t count,
                          int64_t inner, int64_t axis_len, int64_t axis_stride,
                          int64_t outer_stride, const int64_t *outer_offsets,
                          const int64_t *inner_offsets, const void *data, const void *indices,
                          void *out);

/* out (n elements, data's) = data, then each update combined into the element its index
 * addresses (as relvm_gather_elements'), in row-major order of indices. */
int relvm_scatter_elements(int dtype, int reduction, int index_dtype, int64_t n, int64_t outer,
                           int64_t count, int64_t inner, int64_t axis_len, int64_t axis_stride,
                           int64_t outer_stride, const int64_t *outer_offsets,
                           const int64_t *inner_offsets, const void *data, const void *indices,
                           const void *updates, void *out);

/* data as (batch, dims[0], ..., dims[m-1], slice), indices as (m, batch, count) (the index
 * tuples along the first axis) and out as (batch, count, slice): each out slice is the data
 * slice its tuple addresses in its batch. m may be 0 (each slice is the whole batch entry). */
int relvm_gather_nd(int itemsize, int index_dtype, int64_t batch, int64_t count, int m,
                    const int64_t *dims, int64_t slice, const void *data, const void *indices,
                    void *out);

/* data and out as (dims[0], ..., dims[m-1], slice), indices as (m, count), updates as
 * (count, slice): out = data, then each update slice combined into the slice its tuple
 * addresses, tuples in order. */
int relvm_scatter_nd(int dtype, int reduction, int index_dtype, int64_t count, int m,
                     const int64_t *dims, int64_t slice, const void *data, const void *indices,
                     const void *updates, void *out);
/* TensorScatter: out = x (batch, mid, length, inner) with update (batch, mid, count, inner)
 * written along the length axis from starts[b] on (starts[0] for every b when nstarts is 1),
 * modulo length when circular; elements of itemsize bytes. A position outside [0, length):
 * RELVM_BAD_INDEX with *bad_batch and *bad_pos (the offset within update) set. */
int relvm_tensor_scatter(int itemsize, int circular, int64_t batch, int64_t mid, int64_t length,
                         int64_t count, int64_t inner, const int64_t *starts, int64_t nstarts,
                         const void *x, const void *update, void *out, int64_t *bad_batch,
                         int64_t *bad_pos);
#endif
