/* cumsum and cumprod, topk, unique, trilu: scan.h and relvm/ops/scan.py say what they compute. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "relvm_config.h"
#include "scan.h"
#include "threads.h"
#include "internal/types.h"

/* --- cumsum and cumprod ------------------------------------------------------------------- */

struct cumulative_job {
    void (*line)(const struct cumulative_job *j, int64_t o);
    int exclusive, reverse;
    int64_t n, inner;
    const void *x;
    void *out;
};

/* One (n, inner) block: row i of the block is row i - 1 (in the order of the walk) combined
 * with x's row, a loop over inner that vectorizes. AT is the type arithmetic runs in (the
 * unsigned type for integers, which wraps). */
#define CUMULATIVE(NAME, T, AT, OP, IDENTITY)                                                 \
    static void NAME(const struct cumulative_job *j, int64_t o) {                             \
        const int64_t n = j->n, inner = j->inner;                                             \
        const T *x = (const T *)j->x + o * n * inner;                                         \
        T *out = (T *)j->out + o * n * inner;                                                 \
        for (int64_t s = 0; s < n; ++s) {                                                     \
            const int64_t i = j->reverse ? n - 1 - s : s;                                     \
            const int64_t prev = j->reverse ? i + 1 : i - 1;                                  \
            T *row = out + i * inner;                                                         \
            if (s == 0) {                                                                     \
                for (int64_t c = 0; c < inner; ++c)                                           \
                    row[c] = j->exclusive ? (T)(IDENTITY) : x[i * inner + c];                 \
                continue;                                                                     \
            }                                                                                 \
            const T *before = out + prev * inner;                                             \
            const T *add = x + (j->exclusive ? prev : i) * inner;                             \
            for (int64_t c = 0; c < inner; ++c)                                               \
                row[c] = (T)((AT)before[c] OP (AT)add[c]);                                    \
        }                                                                                     \
    }

#define CUMULATIVES(S, T, AT)                                                                 \
    CUMULATIVE(cumsum_##S, T, AT, +, 0)                                                       \
    CUMULATIVE(cumprod_##S, T, AT, *, 1)

CUMULATIVES(f32, f32, f32)
CUMULATIVES(f64, f64, f64)
CUMULATIVES(i64, i64, uint64_t)
CUMULATIVES(i32, i32, uint32_t)
CUMULATIVES(i8, i8, uint32_t) /* promoted: the product of two uint8_t is an int, may overflow */
CUMULATIVES(u8, u8, uint32_t)
CUMULATIVES(i16, i16, uint32_t) /* uint16_t would promote to int, as uint8_t */
CUMULATIVES(u16, u16, uint32_t)
CUMULATIVES(u32, u32, uint32_t)
CUMULATIVES(u64, u64, uint64_t)

typedef void (*cumulative_fn)(const struct cumulative_job *, int64_t);
#define NUMBERS_OF(OP)                                                                        \
    {[RELVM_FLOAT32] = OP##_f32, [RELVM_FLOAT64] = OP##_f64, RELVM_INT_ENTRIES(OP)}
static const cumulative_fn cumulative_table[RELVM_NUM_CUMULATIVE][RELVM_NUM_DTYPES] = {
    [RELVM_CUMSUM] = NUMBERS_OF(cumsum),
    [RELVM_CUMPROD] = NUMBERS_OF(cumprod),
};

RELVM_EXPORT int relvm_cumulative_supported(int op, int dtype) {
    return op >= 0 && op < RELVM_NUM_CUMULATIVE && dtype >= 0 && dtype < RELVM_NUM_DTYPES &&
           cumulative_table[op][dtype];
}

static void cumulative_range(void *ctx, int64_t begin, int64_t end) {
    const struct cumulative_job *j = ctx;
    for (int64_t o = begin; o < end; ++o) j->line(j, o);
}

RELVM_EXPORT int relvm_cumulative(int op, int dtype, int exclusive, int reverse, int64_t outer,
                                  int64_t n, int64_t inner, const void *x, void *out) {
    if (!relvm_cumulative_supported(op, dtype) || outer < 0 || n < 0 || inner < 0)
        return RELVM_UNSUPPORTED;
    if (outer == 0 || n == 0 || inner == 0) return RELVM_OK;
    struct cumulative_job j = {cumulative_table[op][dtype], exclusive, reverse, n, inner, x, out};
    relvm_parallel_for(outer, relvm_max64(1, RELVM_GRAIN / (n * inner)), cumulative_range, &j);
    return RELVM_OK;
}

/* --- topk --------------------------------------------------------------------------------- */

struct topk_job {
    void (*line)(const struct topk_job *j, int64_t line, int64_t *scratch);
    int largest;
    int64_t n, inner, k;
    const void *x;
    void *values;
    int64_t *indices;
    int failed; /* set (atomically) by a thread that could not get its scratch */
};

/* Past this k, a line is merge-sorted whole; up to it, the best k are kept in order as the
 * line is read (k comparisons at most per entry, none for most). */
#define TOPK_INSERTION_MAX 32

/* BEFORE(a, b): value a ranks before value b (not for equal values: the index decides).
 * A NaN is larger than any number. */
#define TOPK(S, T, IS_NAN)                                                                    \
    static inline int before_##S(T a, T b, int largest) {                                     \
        if (largest) return (a > b) || (IS_NAN(a) && !IS_NAN(b));                             \
        return (a < b) || (IS_NAN(b) && !IS_NAN(a));                                          \
    }                                                                                         \
    static void topk_##S(const struct topk_job *j, int64_t line, int64_t *scratch) {          \
        const int64_t n = j->n, inner = j->inner, k = j->k;                                   \
        const int64_t o = line / inner, c = line % inner;                                     \
        const T *x = (const T *)j->x + o * n * inner + c;                                     \
        int64_t *best = scratch, count = 0;                                                   \
        if (k <= TOPK_INSERTION_MAX) {                                                        \
            for (int64_t i = 0; i < n; ++i) {                                                 \
                const T v = x[i * inner];                                                     \
                if (count == k && !before_##S(v, x[best[k - 1] * inner], j->largest))         \
                    continue;                                                                 \
                int64_t at = count < k ? count++ : k - 1;                                     \
                while (at > 0 && before_##S(v, x[best[at - 1] * inner], j->largest)) {        \
                    best[at] = best[at - 1];                                                  \
                    --at;                                                                     \
                }                                                                             \
                best[at] = i;                                                                 \
            }                                                                                 \
        } else { /* a stable merge sort of the indices, bottom up, between two buffers */     \
            int64_t *from = scratch, *to = scratch + n;                                       \
            for (int64_t i = 0; i < n; ++i) from[i] = i;                                      \
            for (int64_t width = 1; width < n; width *= 2) {                                  \
                for (int64_t lo = 0; lo < n; lo += 2 * width) {                               \
                    const int64_t mid = relvm_min64(lo + width, n);                           \
                    const int64_t hi = relvm_min64(lo + 2 * width, n);                        \
                    int64_t a = lo, b = mid, w = lo;                                          \
                    while (a < mid && b < hi)                                                 \
                        to[w++] = before_##S(x[from[b] * inner], x[from[a] * inner],          \
                                             j->largest) ? from[b++] : from[a++];             \
                    while (a < mid) to[w++] = from[a++];                                      \
                    while (b < hi) to[w++] = from[b++];                                       \
                }                                                                             \
                int64_t *t = from;                                                            \
                from = to;                                                                    \
                to = t;                                                                       \
            }                                                                                 \
            best = from;                                                                      \
        }                                                                                     \
        T *values = (T *)j->values + o * k * inner + c;                                       \
        int64_t *indices = j->indices + o * k * inner + c;                                    \
        for (int64_t r = 0; r < k; ++r) {                                                     \
            values[r * inner] = x[best[r] * inner];                                           \
            indices[r * inner] = best[r];                                                     \
        }                                                                                     \
    }

#define FLOAT_NAN(v) ((v) != (v))
#define NEVER_NAN(v) ((void)(v), 0)
TOPK(f32, f32, FLOAT_NAN)
TOPK(f64, f64, FLOAT_NAN)
TOPK(i64, i64, NEVER_NAN)
TOPK(i32, i32, NEVER_NAN)
TOPK(i8, i8, NEVER_NAN)
TOPK(u8, u8, NEVER_NAN)
TOPK(i16, i16, NEVER_NAN)
TOPK(u16, u16, NEVER_NAN)
TOPK(u32, u32, NEVER_NAN)
TOPK(u64, u64, NEVER_NAN)

typedef void (*topk_fn)(const struct topk_job *, int64_t, int64_t *);
static const topk_fn topk_table[RELVM_NUM_DTYPES] = NUMBERS_OF(topk);

static void topk_range(void *ctx, int64_t begin, int64_t end) {
    struct topk_job *j = ctx;
    /* the insertion buffer (k) or the sort's two (2n) */
    const int64_t need = j->k <= TOPK_INSERTION_MAX ? j->k : 2 * j->n;
    int64_t *scratch = malloc((size_t)relvm_max64(need, 1) * sizeof(int64_t));
    if (!scratch) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t line = begin; line < end; ++line) j->line(j, line, scratch);
    free(scratch);
}

RELVM_EXPORT int relvm_topk(int dtype, int largest, int64_t outer, int64_t n, int64_t inner,
                            int64_t k, const void *x, void *values, int64_t *indices) {
    if (dtype < 0 || dtype >= RELVM_NUM_DTYPES || !topk_table[dtype] || outer < 0 || n < 0 ||
        inner < 0)
        return RELVM_UNSUPPORTED;
    if (k < 0 || k > n) return RELVM_BAD_INDEX;
    if (k == 0 || outer == 0 || inner == 0) return RELVM_OK;
    if (n > INT64_MAX / 2 / (int64_t)sizeof(int64_t)) return RELVM_TOO_LARGE;
    struct topk_job j = {topk_table[dtype], largest, n, inner, k, x, values, indices, 0};
    const int64_t per_line = k <= TOPK_INSERTION_MAX ? n : n * 8;
    relvm_parallel_for(outer * inner, relvm_max64(1, RELVM_GRAIN / relvm_max64(per_line, 1)),
                       topk_range, &j);
    return j.failed ? RELVM_NO_MEMORY : RELVM_OK;
}

/* --- unique ------------------------------------------------------------------------------- */

/* -1, 0 or 1 as row a of x sorts before, with or after row b (NaN after every number). */
typedef int (*row_compare)(const void *x, int64_t outer, int64_t n, int64_t inner, int64_t a,
                           int64_t b);

#define ROW_COMPARE(S, T, IS_NAN)                                                             \
    static int compare_rows_##S(const void *x_, int64_t outer, int64_t n, int64_t inner,      \
                                int64_t a, int64_t b) {                                       \
        const T *x = x_;                                                                      \
        for (int64_t o = 0; o < outer; ++o) {                                                 \
            const T *ra = x + (o * n + a) * inner, *rb = x + (o * n + b) * inner;             \
            for (int64_t c = 0; c < inner; ++c) {                                             \
                const T p = ra[c], q = rb[c];                                                 \
                if (p < q) return -1;                                                         \
                if (p > q) return 1;                                                          \
                const int p_nan = IS_NAN(p), q_nan = IS_NAN(q);                               \
                if (p_nan != q_nan) return p_nan ? 1 : -1;                                    \
            }                                                                                 \
        }                                                                                     \
        return 0;                                                                             \
    }

ROW_COMPARE(f32, f32, FLOAT_NAN)
ROW_COMPARE(f64, f64, FLOAT_NAN)
ROW_COMPARE(i64, i64, NEVER_NAN)
ROW_COMPARE(i32, i32, NEVER_NAN)
ROW_COMPARE(i8, i8, NEVER_NAN)
ROW_COMPARE(u8, u8, NEVER_NAN)
ROW_COMPARE(i16, i16, NEVER_NAN)
ROW_COMPARE(u16, u16, NEVER_NAN)
ROW_COMPARE(u32, u32, NEVER_NAN)
ROW_COMPARE(u64, u64, NEVER_NAN)

static const row_compare row_compare_table[RELVM_NUM_DTYPES] = {
    [RELVM_FLOAT32] = compare_rows_f32, [RELVM_FLOAT64] = compare_rows_f64,
    RELVM_INT_ENTRIES(compare_rows), [RELVM_BOOL] = compare_rows_u8};

/* order[0..n) = the rows' indices sorted, stable (a bottom-up merge sort through tmp). */
static int64_t *sort_rows(row_compare cmp, const void *x, int64_t outer, int64_t n,
                          int64_t inner, int64_t *order, int64_t *tmp) {
    int64_t *from = order, *to = tmp;
    for (int64_t i = 0; i < n; ++i) from[i] = i;
    for (int64_t width = 1; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            const int64_t mid = relvm_min64(lo + width, n), hi = relvm_min64(lo + 2 * width, n);
            int64_t a = lo, b = mid, w = lo;
            while (a < mid && b < hi)
                to[w++] = cmp(x, outer, n, inner, from[b], from[a]) < 0 ? from[b++] : from[a++];
            while (a < mid) to[w++] = from[a++];
            while (b < hi) to[w++] = from[b++];
        }
        int64_t *t = from;
        from = to;
        to = t;
    }
    return from;
}

RELVM_EXPORT int relvm_unique(int dtype, int sorted, int64_t outer, int64_t n, int64_t inner,
                              const void *x, int64_t u, void *values, int64_t *first,
                              int64_t *inverse, int64_t *counts) {
    if (dtype < 0 || dtype >= RELVM_NUM_DTYPES || !row_compare_table[dtype] || outer < 0 ||
        n < 0 || inner < 0 || u < 0)
        return RELVM_UNSUPPORTED;
    if (n == 0) return u == 0 ? RELVM_OK : RELVM_BAD_INDEX;
    if (n > INT64_MAX / 4 / (int64_t)sizeof(int64_t)) return RELVM_TOO_LARGE;
    const row_compare cmp = row_compare_table[dtype];
    int64_t *scratch = malloc((size_t)n * 3 * sizeof(int64_t));
    if (!scratch) return RELVM_NO_MEMORY;
    int64_t *order = sort_rows(cmp, x, outer, n, inner, scratch, scratch + n);
    int64_t *group_first = order == scratch ? scratch + n : scratch; /* the free buffer */
    int64_t *rank = scratch + 2 * n;
    int64_t g = -1;
    for (int64_t s = 0; s < n; ++s) {
        const int64_t row = order[s];
        if (s == 0 || cmp(x, outer, n, inner, order[s - 1], row) != 0) {
            if (++g >= u) break;
            group_first[g] = row; /* stable: the first occurrence */
            counts[g] = 0;
        }
        inverse[row] = g;
        ++counts[g];
    }
    if (g + 1 != u) {
        free(scratch);
        return RELVM_BAD_INDEX;
    }
    if (sorted) {
        for (int64_t p = 0; p < u; ++p) rank[p] = p;
    } else { /* number the groups in the order their first rows come */
        for (int64_t p = 0; p < u; ++p) rank[p] = -1;
        int64_t next = 0;
        for (int64_t i = 0; i < n; ++i)
            if (rank[inverse[i]] < 0) rank[inverse[i]] = next++;
        int64_t *moved = order; /* the sort's order is no longer needed */
        for (int64_t p = 0; p < u; ++p) moved[rank[p]] = counts[p];
        memcpy(counts, moved, (size_t)u * sizeof(int64_t));
        for (int64_t i = 0; i < n; ++i) inverse[i] = rank[inverse[i]];
    }
    for (int64_t p = 0; p < u; ++p) first[rank[p]] = group_first[p];
    free(scratch);
    const size_t size = (size_t)relvm_itemsize[dtype], row = (size_t)inner * size;
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t p = 0; p < u; ++p)
            memcpy((char *)values + ((size_t)o * (size_t)u + (size_t)p) * row,
                   (const char *)x + ((size_t)o * (size_t)n + (size_t)first[p]) * row, row);
    return RELVM_OK;
}

/* --- trilu -------------------------------------------------------------------------------- */

RELVM_EXPORT int relvm_trilu(int itemsize, int upper, int64_t k, int64_t batch, int64_t rows,
                             int64_t cols, const void *x, void *out) {
    if (itemsize != 1 && itemsize != 2 && itemsize != 4 && itemsize != 8) return RELVM_UNSUPPORTED;
    if (batch < 0 || rows < 0 || cols < 0) return RELVM_UNSUPPORTED;
    /* Past these, k keeps or drops whole rows alike; clamped, i + k cannot overflow. */
    k = relvm_max64(relvm_min64(k, cols + 1), -rows - 1);
    const size_t row_bytes = (size_t)cols * (size_t)itemsize;
    for (int64_t b = 0; b < batch; ++b) {
        for (int64_t i = 0; i < rows; ++i) {
            const int64_t r = b * rows + i;
            const char *src = (const char *)x + (size_t)r * row_bytes;
            char *dst = (char *)out + (size_t)r * row_bytes;
            /* upper keeps columns [i + k, cols), lower [0, i + k + 1) */
            const int64_t edge = relvm_max64(0, relvm_min64(cols, upper ? i + k : i + k + 1));
            const size_t cut = (size_t)edge * (size_t)itemsize;
            if (upper) {
                memset(dst, 0, cut);
                memcpy(dst + cut, src + cut, row_bytes - cut);
            } else {
                memcpy(dst, src, cut);
                memset(dst + cut, 0, row_bytes - cut);
            }
        }
    }
    return RELVM_OK;
}
