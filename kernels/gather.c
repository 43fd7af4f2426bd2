/* Gather and scatter by index tensors. Every index is checked before it is used; gathers run
 * on the pool by output rows. A scatter must apply the updates of one element in order, so it
 * splits the work by what the updates cannot cross: scatter_elements by positions off the axis
 * (an update only moves along the axis), scatter_nd by positions within the slices (each
 * thread applies every tuple, in order, to its part of the slices). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "relvm_config.h"
#include "gather.h"
#include "internal/types.h"
#include "threads.h"

static int valid_itemsize(int itemsize) {
    return itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8;
}

static int valid_index_dtype(int dtype) { return dtype == RELVM_INT32 || dtype == RELVM_INT64; }

static inline int64_t index_at(int index_dtype, const void *indices, int64_t i) {
    return index_dtype == RELVM_INT64 ? ((const i64 *)indices)[i] : ((const i32 *)indices)[i];
}

/* The index wrapped into [0, len) (negatives count from the end, once), or -1 if outside. */
static inline int64_t wrap(int64_t i, int64_t len) {
    if (i < 0) i += len;
    return i >= 0 && i < len ? i : -1;
}

/* dst[0] = src[0] for one element of `itemsize` bytes (a typed move, not a memcpy call). */
static inline void move(int itemsize, char *dst, const char *src) {
    switch (itemsize) {
    case 1: *dst = *src; break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    default: memcpy(dst, src, 8);
    }
}

/* --- combining an element with an update ---------------------------------------------------- */

/* NaN in either operand wins min and max, as in relvm's maximum/minimum. */
#define FLOAT_COMBINE(S, T, C)                                                                \
    static inline T combine_##S(int red, T a, T v) {                                          \
        const C x = (C)a, y = (C)v;                                                           \
        switch (red) {                                                                        \
        case RELVM_SCATTER_ADD: return (T)(x + y);                                            \
        case RELVM_SCATTER_MUL: return (T)(x * y);                                            \
        case RELVM_SCATTER_MIN: return (x <= y || x != x) ? a : v;                            \
        case RELVM_SCATTER_MAX: return (x >= y || x != x) ? a : v;                            \
        default: return v;                                                                    \
        }                                                                                     \
    }
/* Integer add and mul wrap: computed in the unsigned type UT (u8 promotes to int, which holds
 * 255 * 255). */
#define INT_COMBINE(S, T, UT)                                                                 \
    static inline T combine_##S(int red, T a, T v) {                                          \
        switch (red) {                                                                        \
        case RELVM_SCATTER_ADD: return (T)((UT)a + (UT)v);                                    \
        case RELVM_SCATTER_MUL: return (T)((UT)a * (UT)v);                                    \
        case RELVM_SCATTER_MIN: return a <= v ? a : v;                                        \
        case RELVM_SCATTER_MAX: return a >= v ? a : v;                                        \
        default: return v;                                                                    \
        }                                                                                     \
    }
FLOAT_COMBINE(f32, f32, f32)
FLOAT_COMBINE(f64, f64, f64)
FLOAT_COMBINE(f16, f16, f32) /* each result rounded to half, as NumPy's float16 ufuncs */
INT_COMBINE(i64, i64, uint64_t)
INT_COMBINE(i32, i32, uint32_t)
INT_COMBINE(i8, i8, uint8_t)
INT_COMBINE(u8, u8, uint32_t)
INT_COMBINE(i16, i16, uint32_t)
INT_COMBINE(u16, u16, uint32_t) /* uint16_t would promote to int, where 65535 * 65535 overflows */
INT_COMBINE(u32, u32, uint32_t)
INT_COMBINE(u64, u64, uint64_t)

static inline u8 combine_b8(int red, u8 a, u8 v) {
    switch (red) {
    case RELVM_SCATTER_ADD: case RELVM_SCATTER_MAX: return a | v;
    case RELVM_SCATTER_MUL: case RELVM_SCATTER_MIN: return a & v;
    default: return v;
    }
}

/* --- gather and scatter_elements ------------------------------------------------------------ */

struct elements_job {
    int itemsize, index_dtype, dtype, reduction;
    int64_t count, inner, axis_len, axis_stride, outer_stride, blocks;
    const int64_t *outer_offsets, *inner_offsets;
    const char *data, *indices, *updates;
    char *out;
    _Atomic int bad;
};

static inline int64_t outer_offset(const struct elements_job *j, int64_t o) {
    return j->outer_offsets ? j->outer_offsets[o] : o * j->outer_stride;
}

static inline int64_t inner_offset(const struct elements_job *j, int64_t k) {
    return j->inner_offsets ? j->inner_offsets[k] : k;
}

/* Rows [begin, end) of the (outer * count) rows of inner elements. */
static void gather_elements_rows(void *ctx, int64_t begin, int64_t end) {
    struct elements_job *j = ctx;
    const int64_t size = j->itemsize;
    for (int64_t r = begin; r < end; ++r) {
        const int64_t base = outer_offset(j, r / j->count);
        for (int64_t k = 0; k < j->inner; ++k) {
            const int64_t p = r * j->inner + k;
            const int64_t i = wrap(index_at(j->index_dtype, j->indices, p), j->axis_len);
            if (i < 0) {
                j->bad = 1;
                return;
            }
            move(size, j->out + p * size,
                 j->data + (base + i * j->axis_stride + inner_offset(j, k)) * size);
        }
    }
}

RELVM_EXPORT int relvm_gather_elements(int itemsize, int index_dtype, int64_t outer,
                                       int64_t count, int64_t inner, int64_t axis_len,
                                       int64_t axis_stride, int64_t outer_stride,
                                       const int64_t *outer_offsets,
                                       const int64_t *inner_offsets, const void *data,
                                       const void *indices, void *out) {
    if (!valid_itemsize(itemsize) || !valid_index_dtype(index_dtype) || outer < 0 ||
        count < 0 || inner < 0 || axis_len < 0)
        return RELVM_UNSUPPORTED;
    if (outer * count * inner == 0) return RELVM_OK;
    struct elements_job j = {itemsize, index_dtype, 0, 0, count, inner, axis_len, axis_stride,
                             outer_stride, 0, outer_offsets, inner_offsets, data, indices,
                             NULL, out, 0};
    relvm_parallel_for(outer * count, relvm_max64(1, RELVM_GRAIN / inner), gather_elements_rows,
                       &j);
    return j.bad ? RELVM_BAD_INDEX : RELVM_OK;
}

/* Inner positions per scatter unit: a unit is one outer position and a block of these. */
#define SCATTER_BLOCK 256

/* Units [begin, end): each applies, for c in order, the updates of its outer position and
 * inner block. Two units never address one element (they differ off the axis). */
#define SCATTER_ELEMENTS(S, T)                                                                \
    static void scatter_elements_##S(struct elements_job *j, int64_t begin, int64_t end) {    \
        T *out = (T *)(void *)j->out;                                                         \
        const T *upd = (const T *)(const void *)j->updates;                                   \
        for (int64_t u = begin; u < end; ++u) {                                               \
            const int64_t o = u / j->blocks, k0 = u % j->blocks * SCATTER_BLOCK;              \
            const int64_t k1 = relvm_min64(k0 + SCATTER_BLOCK, j->inner);                     \
            const int64_t base = outer_offset(j, o);                                          \
            for (int64_t c = 0; c < j->count; ++c) {                                          \
                const int64_t row = (o * j->count + c) * j->inner;                            \
                for (int64_t k = k0; k < k1; ++k) {                                           \
                    const int64_t i = wrap(index_at(j->index_dtype, j->indices, row + k),     \
                                           j->axis_len);                                      \
                    if (i < 0) {                                                              \
                        j->bad = 1;                                                           \
                        return;                                                               \
                    }                                                                         \
                    T *at = out + base + i * j->axis_stride + inner_offset(j, k);             \
                    *at = combine_##S(j->reduction, *at, upd[row + k]);                       \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }
SCATTER_ELEMENTS(f32, f32)
SCATTER_ELEMENTS(f64, f64)
SCATTER_ELEMENTS(f16, f16)
SCATTER_ELEMENTS(i64, i64)
SCATTER_ELEMENTS(i32, i32)
SCATTER_ELEMENTS(i8, i8)
SCATTER_ELEMENTS(u8, u8)
SCATTER_ELEMENTS(b8, u8)
SCATTER_ELEMENTS(i16, i16)
SCATTER_ELEMENTS(u16, u16)
SCATTER_ELEMENTS(u32, u32)
SCATTER_ELEMENTS(u64, u64)

static void scatter_elements_units(void *ctx, int64_t begin, int64_t end) {
    struct elements_job *j = ctx;
    switch (j->dtype) {
    case RELVM_FLOAT32: scatter_elements_f32(j, begin, end); break;
    case RELVM_FLOAT64: scatter_elements_f64(j, begin, end); break;
    case RELVM_FLOAT16: scatter_elements_f16(j, begin, end); break;
    case RELVM_INT64: scatter_elements_i64(j, begin, end); break;
    case RELVM_INT32: scatter_elements_i32(j, begin, end); break;
    case RELVM_INT8: scatter_elements_i8(j, begin, end); break;
    case RELVM_UINT8: scatter_elements_u8(j, begin, end); break;
    case RELVM_BOOL: scatter_elements_b8(j, begin, end); break;
    case RELVM_INT16: scatter_elements_i16(j, begin, end); break;
    case RELVM_UINT16: scatter_elements_u16(j, begin, end); break;
    case RELVM_UINT32: scatter_elements_u32(j, begin, end); break;
    case RELVM_UINT64: scatter_elements_u64(j, begin, end); break;
    default: break; /* valid_scatter checked the code */
    }
}

_Static_assert(RELVM_NUM_DTYPES == 12, "the scatters need a case for each dtype");

static int valid_scatter(int dtype, int reduction, int index_dtype) {
    return dtype >= 0 && dtype < RELVM_NUM_DTYPES && reduction >= 0 &&
           reduction < RELVM_NUM_SCATTER && valid_index_dtype(index_dtype);
}

RELVM_EXPORT int relvm_scatter_elements(int dtype, int reduction, int index_dtype, int64_t n,
                                        int64_t outer, int64_t count, int64_t inner,
                                        int64_t axis_len, int64_t axis_stride,
                                        int64_t outer_stride, const int64_t *outer_offsets,
                                        const int64_t *inner_offsets, const void *data,
                                        const void *indices, const void *updates, void *out) {
    if (!valid_scatter(dtype, reduction, index_dtype) || n < 0 || outer < 0 || count < 0 ||
        inner < 0 || axis_len < 0)
        return RELVM_UNSUPPORTED;
    if (n) memcpy(out, data, (size_t)(n * relvm_itemsize[dtype]));
    if (outer * count * inner == 0) return RELVM_OK;
    const int64_t blocks = (inner + SCATTER_BLOCK - 1) / SCATTER_BLOCK;
    struct elements_job j = {(int)relvm_itemsize[dtype], index_dtype, dtype, reduction, count,
                             inner, axis_len, axis_stride, outer_stride, blocks, outer_offsets,
                             inner_offsets, NULL, indices, updates, out, 0};
    const int64_t per_unit = count * relvm_min64(inner, SCATTER_BLOCK);
    relvm_parallel_for(outer * blocks, relvm_max64(1, RELVM_GRAIN / per_unit),
                       scatter_elements_units, &j);
    return j.bad ? RELVM_BAD_INDEX : RELVM_OK;
}

/* --- gather_nd and scatter_nd ---------------------------------------------------------------- */

struct nd_job {
    int itemsize, index_dtype, dtype, reduction, m;
    int64_t batch, count, slice;
    const int64_t *dims;
    const char *data, *indices, *updates;
    char *out;
    int64_t *rows;
    _Atomic int bad;
};

/* The data row (of `slice` elements) that tuple (b, c) addresses, or -1 for a bad index. */
static inline int64_t tuple_row(const struct nd_job *j, int64_t b, int64_t c) {
    const int64_t stride = j->batch * j->count; /* between a tuple's components */
    int64_t row = b;
    for (int q = 0; q < j->m; ++q) {
        const int64_t at = q * stride + b * j->count + c;
        const int64_t i = wrap(index_at(j->index_dtype, j->indices, at), j->dims[q]);
        if (i < 0) return -1;
        row = row * j->dims[q] + i;
    }
    return row;
}

static void gather_nd_tuples(void *ctx, int64_t begin, int64_t end) {
    struct nd_job *j = ctx;
    const int64_t bytes = j->slice * j->itemsize;
    for (int64_t t = begin; t < end; ++t) {
        const int64_t row = tuple_row(j, t / j->count, t % j->count);
        if (row < 0) {
            j->bad = 1;
            return;
        }
        if (bytes == j->itemsize) move(j->itemsize, j->out + t * bytes, j->data + row * bytes);
        else memcpy(j->out + t * bytes, j->data + row * bytes, (size_t)bytes);
    }
}

static int valid_dims(int m, const int64_t *dims) {
    if (m < 0 || m > 64) return 0;
    for (int q = 0; q < m; ++q)
        if (dims[q] < 0) return 0;
    return 1;
}

RELVM_EXPORT int relvm_gather_nd(int itemsize, int index_dtype, int64_t batch, int64_t count,
                                 int m, const int64_t *dims, int64_t slice, const void *data,
                                 const void *indices, void *out) {
    if (!valid_itemsize(itemsize) || !valid_index_dtype(index_dtype) || batch < 0 ||
        count < 0 || slice < 0 || !valid_dims(m, dims))
        return RELVM_UNSUPPORTED;
    if (batch * count == 0) return RELVM_OK; /* with empty slices, indices are still checked */
    struct nd_job j = {itemsize, index_dtype, 0, 0, m, batch, count, slice, dims, data, indices,
                       NULL, out, NULL, 0};
    relvm_parallel_for(batch * count, relvm_max64(1, RELVM_GRAIN / relvm_max64(slice, 1)),
                       gather_nd_tuples, &j);
    return j.bad ? RELVM_BAD_INDEX : RELVM_OK;
}

static void scatter_nd_rows(void *ctx, int64_t begin, int64_t end) {
    struct nd_job *j = ctx;
    for (int64_t c = begin; c < end; ++c) {
        j->rows[c] = tuple_row(j, 0, c);
        if (j->rows[c] < 0) j->bad = 1;
    }
}

/* Positions [begin, end) of every slice: tuples in order, so the last update wins. */
#define SCATTER_ND(S, T)                                                                      \
    static void scatter_nd_##S(const struct nd_job *j, int64_t begin, int64_t end) {          \
        T *out = (T *)(void *)j->out;                                                         \
        const T *upd = (const T *)(const void *)j->updates;                                   \
        for (int64_t c = 0; c < j->count; ++c) {                                              \
            T *to = out + j->rows[c] * j->slice;                                              \
            const T *from = upd + c * j->slice;                                               \
            for (int64_t s = begin; s < end; ++s)                                             \
                to[s] = combine_##S(j->reduction, to[s], from[s]);                            \
        }                                                                                     \
    }
SCATTER_ND(f32, f32)
SCATTER_ND(f64, f64)
SCATTER_ND(f16, f16)
SCATTER_ND(i64, i64)
SCATTER_ND(i32, i32)
SCATTER_ND(i8, i8)
SCATTER_ND(u8, u8)
SCATTER_ND(b8, u8)
SCATTER_ND(i16, i16)
SCATTER_ND(u16, u16)
SCATTER_ND(u32, u32)
SCATTER_ND(u64, u64)

static void scatter_nd_positions(void *ctx, int64_t begin, int64_t end) {
    const struct nd_job *j = ctx;
    switch (j->dtype) {
    case RELVM_FLOAT32: scatter_nd_f32(j, begin, end); break;
    case RELVM_FLOAT64: scatter_nd_f64(j, begin, end); break;
    case RELVM_FLOAT16: scatter_nd_f16(j, begin, end); break;
    case RELVM_INT64: scatter_nd_i64(j, begin, end); break;
    case RELVM_INT32: scatter_nd_i32(j, begin, end); break;
    case RELVM_INT8: scatter_nd_i8(j, begin, end); break;
    case RELVM_UINT8: scatter_nd_u8(j, begin, end); break;
    case RELVM_BOOL: scatter_nd_b8(j, begin, end); break;
    case RELVM_INT16: scatter_nd_i16(j, begin, end); break;
    case RELVM_UINT16: scatter_nd_u16(j, begin, end); break;
    case RELVM_UINT32: scatter_nd_u32(j, begin, end); break;
    case RELVM_UINT64: scatter_nd_u64(j, begin, end); break;
    default: break; /* valid_scatter checked the code */
    }
}

RELVM_EXPORT int relvm_scatter_nd(int dtype, int reduction, int index_dtype, int64_t count,
                                  int m, const int64_t *dims, int64_t slice, const void *data,
                                  const void *indices, const void *updates, void *out) {
    if (!valid_scatter(dtype, reduction, index_dtype) || count < 0 || slice < 0 ||
        !valid_dims(m, dims))
        return RELVM_UNSUPPORTED;
    int64_t n = slice;
    for (int q = 0; q < m; ++q) n *= dims[q];
    if (n) memcpy(out, data, (size_t)(n * relvm_itemsize[dtype]));
    if (count == 0) return RELVM_OK;
    int64_t *rows = malloc((size_t)count * sizeof *rows);
    if (!rows) return RELVM_NO_MEMORY;
    struct nd_job j = {(int)relvm_itemsize[dtype], index_dtype, dtype, reduction, m, 1, count,
                       slice, dims, data, indices, updates, out, rows, 0};
    relvm_parallel_for(count, RELVM_GRAIN, scatter_nd_rows, &j);
    if (!j.bad && slice)
        relvm_parallel_for(slice, relvm_max64(1, RELVM_GRAIN / count), scatter_nd_positions, &j);
    free(rows);
    return j.bad ? RELVM_BAD_INDEX : RELVM_OK;
}

/* Position i of an update written from start along an axis of length: 0 when outside it (in
 * *p the position), without overflowing for any start. */
static int scatter_position(int64_t start, int64_t i, int64_t length, int circular, int64_t *p) {
    if (circular && length > 0) {
        *p = (((start % length) + length) % length + i % length) % length;
        return 1;
    }
    if (start < 0 || start >= length || i >= length - start) {
        *p = start < 0 || start >= length ? start : start + i;
        return 0;
    }
    *p = start + i;
    return 1;
}

RELVM_EXPORT int relvm_tensor_scatter(int itemsize, int circular, int64_t batch, int64_t mid,
                                      int64_t length, int64_t count, int64_t inner,
                                      const int64_t *starts, int64_t nstarts, const void *x,
                                      const void *update, void *out, int64_t *bad_batch,
                                      int64_t *bad_pos) {
    if (itemsize < 1 || batch < 0 || mid < 0 || length < 0 || count < 0 || inner < 0 ||
        (nstarts != 1 && nstarts != batch))
        return RELVM_UNSUPPORTED;
    int64_t p;
    for (int64_t b = 0; b < batch; ++b) /* checked before anything is written */
        for (int64_t i = 0; i < count; ++i)
            if (!scatter_position(starts[nstarts == 1 ? 0 : b], i, length, circular, &p)) {
                *bad_batch = b;
                *bad_pos = i;
                return RELVM_BAD_INDEX;
            }
    const size_t row = (size_t)(inner * itemsize);
    memcpy(out, x, (size_t)(batch * mid * length) * row);
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t m = 0; m < mid; ++m)
            for (int64_t i = 0; i < count; ++i) {
                scatter_position(starts[nstarts == 1 ? 0 : b], i, length, circular, &p);
                memcpy((char *)out + ((b * mid + m) * length + p) * (int64_t)row,
                       (const char *)update + ((b * mid + m) * count + i) * (int64_t)row, row);
            }
    return RELVM_OK;
}
