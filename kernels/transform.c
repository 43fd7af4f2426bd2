/* Data movement kernels. */
#include <stdatomic.h>
#include <string.h>
#include "relvm_config.h"
#include "internal/nest.h"
#include "internal/types.h"
#include "threads.h"
#include "transform.h"
#include "internal/transpose.h"

static int valid_itemsize(int itemsize) {
    return itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8;
}

static int valid_shape(int ndim, const int64_t *shape) {
    if (ndim < 1 || ndim > NEST_MAX_DIMS) return 0;
    for (int d = 0; d < ndim; ++d)
        if (shape[d] < 0) return 0;
    return 1;
}

/* --- strided copies ------------------------------------------------------------------------ */

struct copy_job {
    int itemsize;
    int64_t src_step, dst_step; /* innermost strides, elements */
    /* Tiled 2-D blocks (see relvm_copy_strided): rows x cols, src row step 1. */
    int64_t rows, cols, src_col_step, dst_row_step;
};

#define COPY_ROW(NAME, T)                                                                     \
    static void NAME(const T *src, int64_t ss, T *dst, int64_t ds, int64_t n) {               \
        for (int64_t i = 0; i < n; ++i) dst[i * ds] = src[i * ss];                            \
    }
COPY_ROW(copy_row_1, uint8_t)
COPY_ROW(copy_row_2, uint16_t)
COPY_ROW(copy_row_4, uint32_t)
COPY_ROW(copy_row_8, uint64_t)

static void copy_row(void *ctx, char *const *p, int64_t n) {
    const struct copy_job *j = ctx;
    if (j->src_step == 1 && j->dst_step == 1) {
        memcpy(p[1], p[0], (size_t)(n * j->itemsize));
        return;
    }
    const void *src = p[0];
    void *dst = p[1];
    switch (j->itemsize) {
    case 1: copy_row_1(src, j->src_step, dst, j->dst_step, n); break;
    case 2: copy_row_2(src, j->src_step, dst, j->dst_step, n); break;
    case 4: copy_row_4(src, j->src_step, dst, j->dst_step, n); break;
    default: copy_row_8(src, j->src_step, dst, j->dst_step, n);
    }
}

/* A transposing block: dst[r][c] = src[r + c * src_col_step], dst contiguous along c. Walking
 * 32 x 32 tiles keeps both sides' cache lines in use. */
#define TILE 32
#define COPY_BLOCK(NAME, T)                                                                   \
    static void NAME(const struct copy_job *j, const T *src, T *dst) {                        \
        for (int64_t r0 = 0; r0 < j->rows; r0 += TILE)                                        \
            for (int64_t c0 = 0; c0 < j->cols; c0 += TILE) {                                  \
                const int64_t r1 = relvm_min64(r0 + TILE, j->rows);                           \
                const int64_t c1 = relvm_min64(c0 + TILE, j->cols);                           \
                for (int64_t r = r0; r < r1; ++r)                                             \
                    for (int64_t c = c0; c < c1; ++c)                                         \
                        dst[r * j->dst_row_step + c] = src[r + c * j->src_col_step];          \
            }                                                                                 \
    }
COPY_BLOCK(copy_block_1, uint8_t)
COPY_BLOCK(copy_block_2, uint16_t)
COPY_BLOCK(copy_block_8, uint64_t)

/* A transpose onto a short last dim of 4-byte items (2-7 of them, its rows contiguous: an RGB
 * image going channels last, NCHW -> NHWC): dst row r interleaves item r of each of the `cols`
 * source rows. A count fixed per loop lets GCC vectorize the interleaving stores: through the
 * element-wise nest (a step per row of 3) 1 x 3 x 224 x 224 took 427 us on AMD Zen 4, this way
 * 13 (and 8 x 8 tiles would be mostly edges). Rows [r0, r1). */
#define INTERLEAVE(N)                                                                           \
    RELVM_VECTORIZE static void interleave_##N(int64_t r0, int64_t r1,                         \
                                               const float *restrict src, int64_t step,        \
                                               float *restrict dst) {                          \
        for (int64_t r = r0; r < r1; ++r)                                                       \
            for (int c = 0; c < N; ++c) dst[r * N + c] = src[r + c * step];                     \
    }
INTERLEAVE(2)
INTERLEAVE(3)
INTERLEAVE(4)
INTERLEAVE(5)
INTERLEAVE(6)
INTERLEAVE(7)

static void interleave_rows(const struct copy_job *j, const float *src, float *dst, int64_t r0,
                            int64_t r1) {
    const int64_t step = j->src_col_step;
    switch (j->cols) {
    case 2: interleave_2(r0, r1, src, step, dst); break;
    case 3: interleave_3(r0, r1, src, step, dst); break;
    case 4: interleave_4(r0, r1, src, step, dst); break;
    case 5: interleave_5(r0, r1, src, step, dst); break;
    case 6: interleave_6(r0, r1, src, step, dst); break;
    default: interleave_7(r0, r1, src, step, dst);
    }
}

/* 4-byte items (float32, the NCHW <-> NHWC transposes around channels-last convs): rows
 * [r0, r1) of the block in 32 x 32 tiles, each in 8 x 8 vector transposes
 * (relvm_transpose_f32: out[c][r] = in[r][c], here in = src with rows c, out = dst with rows r).
 * The scalar tiles ran at 5-9 GB/s. */
static void copy_block_4_rows(const struct copy_job *j, const float *src, float *dst, int64_t r0,
                              int64_t r1) {
    if (j->cols < 8) { /* onto a short last dim: interleaved instead of tiled */
        interleave_rows(j, src, dst, r0, r1);
        return;
    }
    for (int64_t r = r0; r < r1; r += TILE)
        for (int64_t c = 0; c < j->cols; c += TILE)
            relvm_transpose_f32(relvm_min64(TILE, j->cols - c), relvm_min64(TILE, r1 - r),
                                src + r + c * j->src_col_step, j->src_col_step,
                                dst + r * j->dst_row_step + c, j->dst_row_step);
}

static void copy_block(void *ctx, char *const *p, int64_t n) {
    const struct copy_job *j = ctx;
    (void)n; /* the nest's innermost dim is a placeholder of length 1 */
    switch (j->itemsize) {
    case 1: copy_block_1(j, (const uint8_t *)p[0], (uint8_t *)p[1]); break;
    case 2: copy_block_2(j, (const uint16_t *)p[0], (uint16_t *)p[1]); break;
    case 4: copy_block_4_rows(j, (const float *)p[0], (float *)p[1], 0, j->rows); break;
    default: copy_block_8(j, (const uint64_t *)p[0], (uint64_t *)p[1]);
    }
}

/* One block of 4-byte items split across the threads by TILE x TILE tiles, row-major. */
struct one_block {
    const struct copy_job *j;
    const float *src;
    float *dst;
};

/* Task t: tile row t / col_tiles, tile column t % col_tiles (TILE x TILE). */
static void copy_one_block(void *ctx, int64_t begin, int64_t end) {
    const struct one_block *b = ctx;
    const struct copy_job *j = b->j;
    if (j->cols < 8) { /* one column of tiles: rows of TILE x TILE tiles, interleaved */
        interleave_rows(j, b->src, b->dst, begin * TILE,
                        relvm_min64(end * TILE, j->rows));
        return;
    }
    const int64_t col_tiles = (j->cols + TILE - 1) / TILE;
    for (int64_t t = begin; t < end; ++t) {
        const int64_t r = t / col_tiles * TILE, c = t % col_tiles * TILE;
        relvm_transpose_f32(relvm_min64(TILE, j->cols - c), relvm_min64(TILE, j->rows - r),
                            b->src + r + c * j->src_col_step, j->src_col_step,
                            b->dst + r * j->dst_row_step + c, j->dst_row_step);
    }
}

RELVM_EXPORT int relvm_copy_strided(int itemsize, int ndim, const int64_t *shape,
                                    const void *src, const int64_t *src_strides, void *dst,
                                    const int64_t *dst_strides) {
    if (!valid_itemsize(itemsize) || !valid_shape(ndim, shape)) return RELVM_UNSUPPORTED;
    const int last = ndim - 1;
    struct copy_job j = {itemsize, src_strides[last], dst_strides[last], 0, 0, 0, 0};
    struct nest t = {.ndim = ndim, .nops = 2};
    for (int d = 0; d < ndim; ++d) t.shape[d] = shape[d];
    /* A transpose of the last two dims (src contiguous along the second-last, dst along the
     * last) copies tile by tile, or onto a short last dim (2-7 4-byte items, dst rows
     * contiguous) interleaved; the nest then walks the other dims with a dummy inner dim. */
    if (ndim >= 2 && src_strides[last - 1] == 1 && dst_strides[last] == 1 &&
        src_strides[last] != 1 && shape[last - 1] >= 8 &&
        (shape[last] >= 8 || (itemsize == 4 && shape[last] >= 2 &&
                              dst_strides[last - 1] == shape[last]))) {
        j.rows = shape[last - 1];
        j.cols = shape[last];
        j.src_col_step = src_strides[last];
        j.dst_row_step = dst_strides[last - 1];
        t.shape[last - 1] = 1;
        t.shape[last] = 1;
        int64_t outer = 1;
        for (int d = 0; d < last - 1; ++d) outer *= shape[d];
        if (outer == 1 && itemsize == 4) { /* one block (one image): its rows split */
            struct one_block b = {&j, src, dst};
            const int64_t tiles = (j.rows + TILE - 1) / TILE * ((j.cols + TILE - 1) / TILE);
            relvm_parallel_for(tiles, RELVM_GRAIN / (TILE * TILE), copy_one_block, &b);
            return RELVM_OK;
        }
        nest_operand(&t, 0, src, itemsize, src_strides);
        nest_operand(&t, 1, dst, itemsize, dst_strides);
        nest_run(&t, copy_block, &j, RELVM_GRAIN / (j.rows * j.cols) + 1);
        return RELVM_OK;
    }
    nest_operand(&t, 0, src, itemsize, src_strides);
    nest_operand(&t, 1, dst, itemsize, dst_strides);
    nest_run(&t, copy_row, &j, RELVM_GRAIN);
    return RELVM_OK;
}

RELVM_EXPORT int relvm_broadcast_copy(int itemsize, int ndim, const int64_t *shape,
                                      const void *src, int src_ndim, const int64_t *src_shape,
                                      void *dst) {
    const int64_t *const shapes[1] = {src_shape};
    int nd;
    int64_t merged[NEST_MAX_DIMS], strides[2][NEST_MAX_DIMS];
    if (nest_broadcast(1, &src_ndim, shapes, ndim, shape, 0, &nd, merged, strides))
        return RELVM_UNSUPPORTED;
    return relvm_copy_strided(itemsize, nd, merged, src, strides[0], dst, strides[1]);
}

RELVM_EXPORT int relvm_transpose(int itemsize, int ndim, const int64_t *src_shape,
                                 const int64_t *perm, const void *src, void *dst) {
    if (ndim < 0 || ndim > NEST_MAX_DIMS) return RELVM_UNSUPPORTED;
    int64_t own[NEST_MAX_DIMS], shape[NEST_MAX_DIMS], st[2][NEST_MAX_DIMS];
    int seen[NEST_MAX_DIMS] = {0};
    int64_t run = 1;
    for (int d = ndim - 1; d >= 0; --d) {
        if (src_shape[d] < 0) return RELVM_UNSUPPORTED;
        own[d] = run;
        run *= src_shape[d];
    }
    run = 1;
    for (int d = ndim - 1; d >= 0; --d) {
        const int64_t a = perm[d];
        if (a < 0 || a >= ndim || seen[a]) return RELVM_UNSUPPORTED;
        seen[a] = 1;
        shape[d] = src_shape[a];
        st[0][d] = own[a];
        st[1][d] = run;
        run *= shape[d];
    }
    int nd;
    int64_t merged[NEST_MAX_DIMS], strides[2][NEST_MAX_DIMS];
    nest_merge(2, ndim, shape, st, &nd, merged, strides);
    return relvm_copy_strided(itemsize, nd, merged, src, strides[0], dst, strides[1]);
}

/* --- relvm_transpose_f32 (internal/transpose.h) ------------------------------------------- */

typedef float tr_vec __attribute__((vector_size(32), aligned(4)));
typedef int32_t tr_mask __attribute__((vector_size(32)));

/* The 8 x 8 block at in (rows ldi apart), transposed to the rows to[0..7]: pairs of rows
 * interleaved, then pairs of pairs, then the 4-float halves swapped across. */
static inline __attribute__((always_inline)) void transpose_8x8_to(const float *in, int64_t ldi,
                                                                   float *const *to) {
    const tr_mask lo = {0, 8, 1, 9, 4, 12, 5, 13}, hi = {2, 10, 3, 11, 6, 14, 7, 15};
    const tr_mask lo2 = {0, 1, 8, 9, 4, 5, 12, 13}, hi2 = {2, 3, 10, 11, 6, 7, 14, 15};
    const tr_mask first = {0, 1, 2, 3, 8, 9, 10, 11}, second = {4, 5, 6, 7, 12, 13, 14, 15};
    tr_vec r[8], t[8], u[8];
    for (int i = 0; i < 8; ++i) r[i] = *(const tr_vec *)(in + i * ldi);
    for (int i = 0; i < 8; i += 2) {
        t[i] = __builtin_shuffle(r[i], r[i + 1], lo);
        t[i + 1] = __builtin_shuffle(r[i], r[i + 1], hi);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = __builtin_shuffle(t[i], t[i + 2], lo2);
        u[i + 1] = __builtin_shuffle(t[i], t[i + 2], hi2);
        u[i + 2] = __builtin_shuffle(t[i + 1], t[i + 3], lo2);
        u[i + 3] = __builtin_shuffle(t[i + 1], t[i + 3], hi2);
    }
    for (int i = 0; i < 4; ++i) {
        *(tr_vec *)to[i] = __builtin_shuffle(u[i], u[i + 4], first);
        *(tr_vec *)to[i + 4] = __builtin_shuffle(u[i], u[i + 4], second);
    }
}

/* ... to out's rows ldo apart. */
static inline __attribute__((always_inline)) void transpose_8x8(const float *in, int64_t ldi,
                                                                float *out, int64_t ldo) {
    float *to[8];
    for (int i = 0; i < 8; ++i) to[i] = out + i * ldo;
    transpose_8x8_to(in, ldi, to);
}

RELVM_VECTORIZE void relvm_transpose_f32(int64_t rows, int64_t cols, const float *in,
                                         int64_t ldi, float *out, int64_t ldo) {
    const int64_t rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
    for (int64_t r = 0; r < rows8; r += 8) {
        for (int64_t c = 0; c < cols8; c += 8)
            transpose_8x8(in + r * ldi + c, ldi, out + c * ldo + r, ldo);
        for (int64_t c = cols8; c < cols; ++c)
            for (int64_t i = r; i < r + 8; ++i) out[c * ldo + i] = in[i * ldi + c];
    }
    for (int64_t r = rows8; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) out[c * ldo + r] = in[r * ldi + c];
}

/* Out row c's place in relvm_transpose_f32_runs: (c + c / run * gap) rows from out. The blocks
 * walk c up by one row at a time, so the run and the row in it are counted, not divided. */
struct run_cursor {
    int64_t at, left; /* c's row of out, and rows left in c's run (c included) */
};

static inline void cursor_step(struct run_cursor *k, int64_t run, int64_t gap) {
    ++k->at;
    if (--k->left == 0) {
        k->at += gap;
        k->left = run;
    }
}

RELVM_VECTORIZE void relvm_transpose_f32_runs(int64_t rows, int64_t cols, const float *in,
                                              int64_t ldi, float *out, int64_t ldo, int64_t run,
                                              int64_t gap) {
    const int64_t rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
    if (run <= 0) return;
    for (int64_t r = 0; r < rows8; r += 8) {
        struct run_cursor k = {0, run};
        for (int64_t c = 0; c < cols8; c += 8) {
            float *to[8];
            for (int i = 0; i < 8; ++i, cursor_step(&k, run, gap)) to[i] = out + k.at * ldo + r;
            transpose_8x8_to(in + r * ldi + c, ldi, to);
        }
        for (int64_t c = cols8; c < cols; ++c, cursor_step(&k, run, gap))
            for (int64_t i = r; i < r + 8; ++i) out[k.at * ldo + i] = in[i * ldi + c];
    }
    for (int64_t r = rows8; r < rows; ++r) {
        struct run_cursor k = {0, run};
        for (int64_t c = 0; c < cols; ++c, cursor_step(&k, run, gap))
            out[k.at * ldo + r] = in[r * ldi + c];
    }
}

struct bytes_job {
    char *dst;
    const char *src;
};

static void copy_bytes(void *ctx, int64_t begin, int64_t end) {
    const struct bytes_job *j = ctx;
    memcpy(j->dst + begin, j->src + begin, (size_t)(end - begin));
}

RELVM_EXPORT void relvm_copy(void *dst, const void *src, int64_t nbytes) {
    struct bytes_job j = {dst, src};
    if (nbytes > 0) relvm_parallel_for(nbytes, (int64_t)1 << 20, copy_bytes, &j);
}

static void bool_bytes(void *ctx, int64_t begin, int64_t end) {
    const struct bytes_job *j = ctx;
    const uint8_t *x = (const uint8_t *)j->src;
    uint8_t *y = (uint8_t *)j->dst;
    for (int64_t i = begin; i < end; ++i) y[i] = x[i] != 0;
}

RELVM_EXPORT void relvm_bitcast(int to_bool, int64_t n, const void *x, void *y) {
    if (!to_bool) {
        relvm_copy(y, x, n);
        return;
    }
    struct bytes_job j = {y, x};
    if (n > 0) relvm_parallel_for(n, (int64_t)1 << 20, bool_bytes, &j);
}

#define FILL(NAME, T)                                                                         \
    static RELVM_VECTORIZE void NAME(T *dst, int64_t n, T v) {                                \
        for (int64_t i = 0; i < n; ++i) dst[i] = v;                                           \
    }
FILL(fill_1, uint8_t)
FILL(fill_2, uint16_t)
FILL(fill_4, uint32_t)
FILL(fill_8, uint64_t)

static void fill_any(int itemsize, void *dst, int64_t n, const void *value) {
    switch (itemsize) {
    case 1: fill_1(dst, n, *(const uint8_t *)value); break;
    case 2: { uint16_t v; memcpy(&v, value, 2); fill_2(dst, n, v); break; }
    case 4: { uint32_t v; memcpy(&v, value, 4); fill_4(dst, n, v); break; }
    default: { uint64_t v; memcpy(&v, value, 8); fill_8(dst, n, v); }
    }
}

RELVM_EXPORT int relvm_fill(int itemsize, void *dst, int64_t n, const void *value) {
    if (!valid_itemsize(itemsize) || n < 0) return RELVM_UNSUPPORTED;
    fill_any(itemsize, dst, n, value);
    return RELVM_OK;
}

/* --- take ----------------------------------------------------------------------------------- */

struct take_job {
    int itemsize, index_dtype, mode;
    int64_t outer, axis_len, inner, count;
    const char *x, *indices;
    char *out;
    _Atomic int bad; /* set by any chunk that met an out-of-range index in fast mode */
};

static inline int64_t index_at(const struct take_job *j, int64_t i) {
    return j->index_dtype == RELVM_INT64 ? ((const i64 *)(const void *)j->indices)[i]
                                         : ((const i32 *)(const void *)j->indices)[i];
}

/* Row r of the (batch * outer) rows of out: count slices of inner elements each. */
static void take_rows(void *ctx, int64_t begin, int64_t end) {
    struct take_job *j = ctx;
    const int64_t slice = j->inner * j->itemsize, len = j->axis_len;
    for (int64_t r = begin; r < end; ++r) {
        const int64_t b = r / j->outer;
        const char *x = j->x + r * len * slice;
        char *out = j->out + r * j->count * slice;
        for (int64_t c = 0; c < j->count; ++c) {
            int64_t i = index_at(j, b * j->count + c);
            if (i < 0 || i >= len) {
                if (j->mode == RELVM_TAKE_CLIP) i = i < 0 ? 0 : len - 1;
                else if (j->mode == RELVM_TAKE_WRAP) i = (i % len + len) % len;
                else if (j->mode == RELVM_TAKE_FROM_END && i < 0 && i >= -len) i += len;
                else {
                    j->bad = 1;
                    return;
                }
            }
            if (j->itemsize == 4 && j->inner == 1)
                ((uint32_t *)(void *)out)[c] = ((const uint32_t *)(const void *)x)[i];
            else
                memcpy(out + c * slice, x + i * slice, (size_t)slice);
        }
    }
}

RELVM_EXPORT int relvm_take(int itemsize, int index_dtype, int mode, int64_t batch,
                            int64_t outer, int64_t axis_len, int64_t inner, int64_t count,
                            const void *x, const void *indices, void *out) {
    if (!valid_itemsize(itemsize) || (index_dtype != RELVM_INT32 && index_dtype != RELVM_INT64) ||
        mode < RELVM_TAKE_CLIP || mode > RELVM_TAKE_FROM_END || batch < 0 || outer < 0 ||
        axis_len < 0 || inner < 0 || count < 0)
        return RELVM_UNSUPPORTED;
    if (batch * outer * count * inner == 0) return RELVM_OK;
    if (axis_len == 0) return RELVM_BAD_INDEX;
    struct take_job j = {itemsize, index_dtype, mode, outer, axis_len, inner, count,
                         x, indices, out, 0};
    relvm_parallel_for(batch * outer, relvm_max64(1, RELVM_GRAIN / (count * inner)), take_rows,
                       &j);
    return j.bad ? RELVM_BAD_INDEX : RELVM_OK;
}

/* --- gather (pad) --------------------------------------------------------------------------- */

struct gather_job {
    int itemsize, ndim;
    const int64_t *shape, *src_strides, *maps;
    int64_t map_start[NEST_MAX_DIMS]; /* where dim d's map begins in maps */
    const char *src, *fill;
    char *dst;
};

static void gather_rows(void *ctx, int64_t begin, int64_t end) {
    const struct gather_job *j = ctx;
    const int last = j->ndim - 1;
    const int64_t n = j->shape[last], size = j->itemsize;
    const int64_t *inner_map = j->maps + j->map_start[last];
    for (int64_t r = begin; r < end; ++r) {
        int64_t off = 0, p = r;
        int outside = 0;
        for (int d = last - 1; d >= 0; --d) {
            const int64_t at = j->maps[j->map_start[d] + p % j->shape[d]];
            p /= j->shape[d];
            if (at < 0) outside = 1;
            off += at * j->src_strides[d];
        }
        char *dst = j->dst + r * n * size;
        for (int64_t i = 0; i < n; ++i) {
            const int64_t at = inner_map[i];
            const char *from = j->fill;
            if (!outside && at >= 0) from = j->src + (off + at * j->src_strides[last]) * size;
            memcpy(dst + i * size, from, (size_t)size);
        }
    }
}

RELVM_EXPORT int relvm_gather(int itemsize, int ndim, const int64_t *shape, const void *src,
                              const int64_t *src_strides, const int64_t *maps, const void *fill,
                              void *dst) {
    if (!valid_itemsize(itemsize) || !valid_shape(ndim, shape)) return RELVM_UNSUPPORTED;
    struct gather_job j = {itemsize, ndim, shape, src_strides, maps, {0}, src, fill, dst};
    int64_t rows = 1;
    for (int d = 1; d < ndim; ++d) j.map_start[d] = j.map_start[d - 1] + shape[d - 1];
    for (int d = 0; d < ndim - 1; ++d) rows *= shape[d];
    if (rows * shape[ndim - 1] == 0) return RELVM_OK;
    relvm_parallel_for(rows, relvm_max64(1, RELVM_GRAIN / shape[ndim - 1]), gather_rows, &j);
    return RELVM_OK;
}

/* --- arange and argwhere -------------------------------------------------------------------- */

#define ARANGE_FLOAT(T)                                                                       \
    do {                                                                                      \
        const T a = *(const T *)start, s = *(const T *)step;                                  \
        T *o = out;                                                                           \
        for (int64_t i = 0; i < n; ++i) o[i] = (T)i * s + a;                                  \
    } while (0)
#define ARANGE_INT(T, UT)                                                                     \
    do {                                                                                      \
        const UT a = (UT) * (const T *)start, s = (UT) * (const T *)step;                     \
        T *o = out;                                                                           \
        for (int64_t i = 0; i < n; ++i) o[i] = (T)((UT)i * s + a);                            \
    } while (0)

RELVM_EXPORT int relvm_arange(int dtype, void *out, int64_t n, const void *start,
                              const void *step) {
    switch (dtype) {
    case RELVM_FLOAT32: ARANGE_FLOAT(f32); return RELVM_OK;
    case RELVM_FLOAT64: ARANGE_FLOAT(f64); return RELVM_OK;
    case RELVM_INT64: ARANGE_INT(i64, uint64_t); return RELVM_OK;
    case RELVM_INT32: ARANGE_INT(i32, uint32_t); return RELVM_OK;
    case RELVM_INT8: ARANGE_INT(i8, uint8_t); return RELVM_OK;
    case RELVM_UINT8: ARANGE_INT(u8, uint8_t); return RELVM_OK;
    case RELVM_INT16: ARANGE_INT(i16, uint32_t); return RELVM_OK; /* uint16_t would promote */
    case RELVM_UINT16: ARANGE_INT(u16, uint32_t); return RELVM_OK;
    case RELVM_UINT32: ARANGE_INT(u32, uint32_t); return RELVM_OK;
    case RELVM_UINT64: ARANGE_INT(u64, uint64_t); return RELVM_OK;
    default: return RELVM_UNSUPPORTED;
    }
}

static inline int nonzero(int dtype, const char *x, int64_t i) {
    switch (dtype) {
    case RELVM_FLOAT32: return ((const f32 *)(const void *)x)[i] != 0; /* NaN != 0 */
    case RELVM_FLOAT64: return ((const f64 *)(const void *)x)[i] != 0;
    case RELVM_FLOAT16: return (((const uint16_t *)(const void *)x)[i] & 0x7fff) != 0;
    default: /* integers and bool: any bit set, whatever the signedness */
        switch (relvm_itemsize[dtype]) {
        case 1: return ((const u8 *)(const void *)x)[i] != 0;
        case 2: return ((const u16 *)(const void *)x)[i] != 0;
        case 4: return ((const u32 *)(const void *)x)[i] != 0;
        default: return ((const u64 *)(const void *)x)[i] != 0;
        }
    }
}

RELVM_EXPORT int64_t relvm_argwhere(int dtype, int ndim, const int64_t *shape, const void *x,
                                    int32_t *out, int64_t max_rows) {
    if (dtype < 0 || dtype >= RELVM_NUM_DTYPES || ndim < 0 || ndim > NEST_MAX_DIMS) return -1;
    int64_t total = 1, found = 0;
    for (int d = 0; d < ndim; ++d) total *= shape[d];
    int64_t idx[NEST_MAX_DIMS] = {0};
    for (int64_t i = 0; i < total; ++i) {
        if (nonzero(dtype, x, i)) {
            if (found < max_rows)
                for (int d = 0; d < ndim; ++d) out[found * ndim + d] = (int32_t)idx[d];
            ++found;
        }
        for (int d = ndim - 1; d >= 0; --d) { /* the coordinates of element i + 1 */
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
    return found;
}
