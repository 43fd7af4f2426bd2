/* Reductions without transposes. Semantics follow relvm/ops/reduce.py: float sums, products
 * and means accumulate in float64; integer sums and products wrap (an unsigned accumulator
 * wraps exactly as the reference's int64 one cast back does); integer mean truncates toward
 * zero; max/min propagate NaN; argmax/argmin take the first NaN (last with select_last).
 *
 * Two walks, chosen by which axis of x is contiguous. Row: x's last axis is reduced, so each
 * output folds contiguous runs. Column: x's last axis is kept, so up to LANES neighbouring
 * outputs are folded together, each reduced position adding a contiguous row of LANES values. */
#include <math.h>
#include "relvm_config.h"
#include "internal/nest.h"
#include "internal/types.h"
#include "internal/vmath.h"
#include "reduce.h"
#include "threads.h"

#define LANES 256

/* Running state of one output: the sum/product, or the best value so far and its index. */
#define STATE(S, ACC, BEST)                                                                   \
    struct state_##S {                                                                        \
        ACC acc;                                                                              \
        BEST best;                                                                            \
        int64_t index;                                                                        \
    };

/* The fold of one value v (at reduced position r) into state s, per op. */
#define FOLD(S, T, ACC, BEST, ISNAN)                                                          \
    static inline void fold_##S(int op, int last, struct state_##S *s, T x, int64_t r) {      \
        const BEST v = (BEST)x;                                                               \
        switch (op) {                                                                         \
        case RELVM_SUM: case RELVM_MEAN: s->acc += (ACC)x; return;                            \
        case RELVM_PROD: s->acc *= (ACC)x; return;                                            \
        case RELVM_MAX: /* NaN wins, and then stays */                                        \
            if ((v > s->best || ISNAN(v)) && !ISNAN(s->best)) s->best = v;                    \
            return;                                                                           \
        case RELVM_MIN:                                                                       \
            if ((v < s->best || ISNAN(v)) && !ISNAN(s->best)) s->best = v;                    \
            return;                                                                           \
        default: break;                                                                       \
        }                                                                                     \
        int take;                                                                             \
        if (s->index < 0) take = 1;                                                           \
        else if (ISNAN(s->best)) take = last && ISNAN(v);                                     \
        else if (ISNAN(v)) take = 1;                                                          \
        else if (op == RELVM_ARGMAX) take = last ? v >= s->best : v > s->best;                \
        else take = last ? v <= s->best : v < s->best;                                        \
        if (take) {                                                                           \
            s->best = v;                                                                      \
            s->index = r;                                                                     \
        }                                                                                     \
    }

#define FLOAT_ISNAN(v) ((v) != (v))
#define INT_ISNAN(v) 0

/* Start and finish: empty sums are 0, empty products 1, an empty float mean NaN. */
#define START_FINISH(S, T, ACC, BEST, LOWEST, HIGHEST, MEAN)                                  \
    static inline void start_##S(int op, struct state_##S *s) {                               \
        s->acc = (ACC)(op == RELVM_PROD ? 1 : 0);                                             \
        s->best = op == RELVM_MAX ? LOWEST : HIGHEST;                                         \
        s->index = -1;                                                                        \
    }                                                                                         \
    static inline void finish_##S(int op, const struct state_##S *s, int64_t count, char *out, \
                                  int64_t o) {                                                \
        T v;                                                                                  \
        switch (op) {                                                                         \
        case RELVM_ARGMAX: case RELVM_ARGMIN: ((i32 *)(void *)out)[o] = (i32)s->index; return; \
        case RELVM_MAX: case RELVM_MIN: v = (T)s->best; break;                                \
        case RELVM_MEAN: v = MEAN(T, s->acc, count); break;                                   \
        default: v = (T)s->acc;                                                               \
        }                                                                                     \
        ((T *)(void *)out)[o] = v;                                                            \
    }

#define FLOAT_MEAN(T, acc, count) ((count) ? (T)((double)(acc) / (double)(count)) : (T)NAN)
/* C's integer division truncates toward zero, as the reference's mean does. The accumulator
 * holds the sum modulo 2^64: signed for the signed types, as it is for uint64. */
#define INT_MEAN(T, acc, count) ((count) ? (T)((int64_t)(acc) / (count)) : (T)0)
#define UNSIGNED_MEAN(T, acc, count) ((count) ? (T)((acc) / (uint64_t)(count)) : (T)0)

#define FLOAT_SUM_RUN(S, T, ACC) vm_sum_##S(x, n)
#define INT_SUM_RUN(S, T, ACC) int_sum_##S(x, n)
#define FLOAT_EXTREME_RUN(S, T) vm_extreme_##S(x, n, is_max)
#define INT_EXTREME_RUN(S, T) int_extreme_##S(x, n, is_max)

#define INT_SUM(S, T)                                                                         \
    static inline uint64_t int_sum_##S(const T *x, int64_t n) {                               \
        uint64_t acc = 0;                                                                     \
        for (int64_t i = 0; i < n; ++i) acc += (uint64_t)x[i];                                \
        return acc;                                                                           \
    }
/* Integer max/min reductions vectorize as they are (no NaN, a total order). */
#define INT_EXTREME(S, T)                                                                     \
    static inline T int_extreme_##S(const T *x, int64_t n, int is_max) {                      \
        T best = x[0];                                                                        \
        if (is_max) for (int64_t i = 1; i < n; ++i) best = x[i] > best ? x[i] : best;         \
        else for (int64_t i = 1; i < n; ++i) best = x[i] < best ? x[i] : best;                \
        return best;                                                                          \
    }
INT_EXTREME(i64, i64)
INT_EXTREME(i32, i32)
INT_EXTREME(i8, i8)
INT_EXTREME(u8, u8)
INT_EXTREME(i16, i16)
INT_EXTREME(u16, u16)
INT_EXTREME(u32, u32)
INT_EXTREME(u64, u64)

INT_SUM(i64, i64)
INT_SUM(i32, i32)
INT_SUM(i8, i8)
INT_SUM(u8, u8)
INT_SUM(i16, i16)
INT_SUM(u16, u16)
INT_SUM(u32, u32)
INT_SUM(u64, u64)

#define REDUCER(S, T, ACC, BEST, ISNAN, LOWEST, HIGHEST, MEAN, SUM_RUN, EXTREME_RUN)         \
    STATE(S, ACC, BEST)                                                                       \
    FOLD(S, T, ACC, BEST, ISNAN)                                                              \
    START_FINISH(S, T, ACC, BEST, LOWEST, HIGHEST, MEAN)                                      \
    /* Contiguous sums get loops of their own, which vectorize (SUM_RUN: vmath.h's lanes for \
     * floats; integer addition is associative, so a plain loop vectorizes). */               \
    static RELVM_VECTORIZE ACC sum_run_##S(const T *x, int64_t n) { return SUM_RUN(S, T, ACC); } \
    static RELVM_VECTORIZE T extreme_run_##S(const T *x, int64_t n, int is_max) {             \
        return EXTREME_RUN(S, T);                                                             \
    }                                                                                         \
    static void fold_run_##S(int op, int last, struct state_##S *s, const T *x, int64_t n,    \
                             int64_t stride, int64_t r) {                                     \
        if (stride == 1 && (op == RELVM_SUM || op == RELVM_MEAN)) {                           \
            s->acc += sum_run_##S(x, n);                                                      \
            return;                                                                           \
        }                                                                                     \
        if (stride == 1 && (op == RELVM_MAX || op == RELVM_MIN)) {                            \
            fold_##S(op, last, s, extreme_run_##S(x, n, op == RELVM_MAX), r);                 \
            return;                                                                           \
        }                                                                                     \
        for (int64_t i = 0; i < n; ++i) fold_##S(op, last, s, x[i * stride], r + i);          \
    }                                                                                         \
    static RELVM_VECTORIZE void sum_lanes_##S(ACC *acc, const T *x, int64_t n) {              \
        for (int64_t i = 0; i < n; ++i) acc[i] += (ACC)x[i];                                  \
    }

REDUCER(f32, f32, double, double, FLOAT_ISNAN, -INFINITY, INFINITY, FLOAT_MEAN,
        FLOAT_SUM_RUN, FLOAT_EXTREME_RUN)
REDUCER(f64, f64, double, double, FLOAT_ISNAN, -INFINITY, INFINITY, FLOAT_MEAN,
        FLOAT_SUM_RUN, FLOAT_EXTREME_RUN)
/* The integer types up to 32 bits and int64: sums modulo 2^64, extremes and means in int64. */
#define INT_REDUCER(S)                                                                        \
    REDUCER(S, S, uint64_t, int64_t, INT_ISNAN, INT64_MIN, INT64_MAX, INT_MEAN, INT_SUM_RUN,    \
            INT_EXTREME_RUN)
INT_REDUCER(i64)
INT_REDUCER(i32)
INT_REDUCER(i8)
INT_REDUCER(u8)
INT_REDUCER(i16)
INT_REDUCER(u16)
INT_REDUCER(u32)
/* uint64 values past int64's range: its best is uint64_t, its mean unsigned. */
REDUCER(u64, u64, uint64_t, uint64_t, INT_ISNAN, 0, UINT64_MAX, UNSIGNED_MEAN,
        INT_SUM_RUN, INT_EXTREME_RUN)

struct reduce_job {
    int op, dtype, last, nkept, nred;
    int64_t kept_shape[NEST_MAX_DIMS], kept_stride[NEST_MAX_DIMS];
    int64_t red_shape[NEST_MAX_DIMS], red_stride[NEST_MAX_DIMS];
    int64_t count; /* reduced positions */
    int64_t lanes; /* column walk: the kept contiguous dim's length; 0 for the row walk */
    const char *x;
    char *out;
};

/* Offset (elements) of position `p` of the first `ndim` dims, row-major. */
static int64_t offset_of(int64_t p, int ndim, const int64_t *shape, const int64_t *stride) {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
        off += p % shape[d] * stride[d];
        p /= shape[d];
    }
    return off;
}

/* Row walk: output o folds runs along the last reduced dim (count/run of them). */
#define ROW_WALK(S, T)                                                                        \
    static void rows_##S(const struct reduce_job *j, int64_t begin, int64_t end) {            \
        const int inner = j->nred - 1;                                                        \
        const int64_t run = j->nred ? j->red_shape[inner] : 1;                                \
        const int64_t step = j->nred ? j->red_stride[inner] : 0;                              \
        const int64_t runs = run ? j->count / run : 0;                                        \
        for (int64_t o = begin; o < end; ++o) {                                               \
            const T *base = (const T *)(const void *)j->x +                                   \
                            offset_of(o, j->nkept, j->kept_shape, j->kept_stride);            \
            struct state_##S s;                                                               \
            start_##S(j->op, &s);                                                             \
            for (int64_t q = 0; q < runs; ++q) {                                              \
                const int64_t off = inner > 0                                                 \
                    ? offset_of(q, inner, j->red_shape, j->red_stride) : 0;                   \
                fold_run_##S(j->op, j->last, &s, base + off, run, step, q * run);             \
            }                                                                                 \
            finish_##S(j->op, &s, j->count, j->out, o);                                       \
        }                                                                                     \
    }

/* Column walk: unit u is lanes [t * LANES, ...) of kept row u / tiles, t = u % tiles. */
#define COLUMN_WALK(S, T)                                                                     \
    static void columns_##S(const struct reduce_job *j, int64_t begin, int64_t end) {         \
        const int64_t tiles = (j->lanes + LANES - 1) / LANES;                                 \
        struct state_##S s[LANES];                                                            \
        __typeof__(s[0].acc) acc[LANES];                                                      \
        const int fast = j->op == RELVM_SUM || j->op == RELVM_MEAN;                           \
        for (int64_t u = begin; u < end; ++u) {                                               \
            const int64_t row = u / tiles, first = u % tiles * LANES;                         \
            const int64_t n = relvm_min64(LANES, j->lanes - first);                           \
            const T *base = (const T *)(const void *)j->x + first +                           \
                            offset_of(row, j->nkept - 1, j->kept_shape, j->kept_stride);      \
            for (int64_t l = 0; l < n; ++l) {                                                 \
                start_##S(j->op, &s[l]);                                                      \
                acc[l] = 0;                                                                   \
            }                                                                                 \
            /* the reduced positions in order, their offset stepped (an odometer), not        \
             * divided out of r: per row of a channels-last global pool, the divisions had    \
             * cost more than the row's adds */                                               \
            int64_t at[NEST_MAX_DIMS] = {0}, off = 0;                                         \
            for (int64_t r = 0; r < j->count; ++r) {                                          \
                const T *x = base + off;                                                      \
                if (fast) sum_lanes_##S(acc, x, n);                                           \
                else for (int64_t l = 0; l < n; ++l) fold_##S(j->op, j->last, &s[l], x[l], r); \
                for (int d = j->nred - 1; d >= 0; --d) {                                      \
                    off += j->red_stride[d];                                                  \
                    if (++at[d] < j->red_shape[d]) break;                                     \
                    off -= at[d] * j->red_stride[d];                                          \
                    at[d] = 0;                                                                \
                }                                                                             \
            }                                                                                 \
            for (int64_t l = 0; l < n; ++l) {                                                 \
                if (fast) s[l].acc = acc[l];                                                  \
                finish_##S(j->op, &s[l], j->count, j->out, row * j->lanes + first + l);       \
            }                                                                                 \
        }                                                                                     \
    }

#define WALKS(S, T) ROW_WALK(S, T) COLUMN_WALK(S, T)
WALKS(f32, f32)
WALKS(f64, f64)
WALKS(i64, i64)
WALKS(i32, i32)
WALKS(i8, i8)
WALKS(u8, u8)
WALKS(i16, i16)
WALKS(u16, u16)
WALKS(u32, u32)
WALKS(u64, u64)

static void reduce_range(void *ctx, int64_t begin, int64_t end) {
    const struct reduce_job *j = ctx;
#define DISPATCH(S)                                                                           \
    if (j->lanes) columns_##S(j, begin, end);                                                 \
    else rows_##S(j, begin, end);                                                             \
    return;
    switch (j->dtype) {
    case RELVM_FLOAT32: DISPATCH(f32)
    case RELVM_FLOAT64: DISPATCH(f64)
    case RELVM_INT64: DISPATCH(i64)
    case RELVM_INT32: DISPATCH(i32)
    case RELVM_INT8: DISPATCH(i8)
    case RELVM_UINT8: DISPATCH(u8)
    case RELVM_INT16: DISPATCH(i16)
    case RELVM_UINT16: DISPATCH(u16)
    case RELVM_UINT32: DISPATCH(u32)
    case RELVM_UINT64: DISPATCH(u64)
    default: return; /* relvm_reduce_supported refused it */
    }
#undef DISPATCH
}

RELVM_EXPORT int relvm_reduce_supported(int op, int dtype) {
    if (op < 0 || op >= RELVM_NUM_REDUCE) return 0;
    switch (dtype) {
    case RELVM_FLOAT32: case RELVM_FLOAT64: case RELVM_INT64: case RELVM_INT32: case RELVM_INT8:
    case RELVM_UINT8: case RELVM_INT16: case RELVM_UINT16: case RELVM_UINT32: case RELVM_UINT64:
        return 1;
    default: return 0; /* float16, bool */
    }
}

static int copy_dims(int ndim, const int64_t *shape, const int64_t *strides, int64_t *shape_to,
                     int64_t *strides_to, int64_t *count) {
    if (ndim < 0 || ndim > NEST_MAX_DIMS) return 0;
    for (int d = 0; d < ndim; ++d) {
        if (shape[d] < 0) return 0;
        shape_to[d] = shape[d];
        strides_to[d] = strides[d];
        *count *= shape[d];
    }
    return 1;
}

RELVM_EXPORT int relvm_reduce(int op, int dtype, int select_last, const void *x, void *out,
                              int nkept, const int64_t *kept_shape, const int64_t *kept_strides,
                              int nred, const int64_t *red_shape, const int64_t *red_strides) {
    if (!relvm_reduce_supported(op, dtype)) return RELVM_UNSUPPORTED;
    struct reduce_job j = {0};
    int64_t outputs = 1;
    j.op = op;
    j.dtype = dtype;
    j.last = select_last;
    j.nkept = nkept;
    j.nred = nred;
    j.count = 1;
    j.x = x;
    j.out = out;
    if (!copy_dims(nkept, kept_shape, kept_strides, j.kept_shape, j.kept_stride, &outputs) ||
        !copy_dims(nred, red_shape, red_strides, j.red_shape, j.red_stride, &j.count))
        return RELVM_UNSUPPORTED;
    if (outputs == 0) return RELVM_OK;
    if (j.count == 0 && op != RELVM_SUM && op != RELVM_PROD && op != RELVM_MEAN)
        return RELVM_UNSUPPORTED; /* no value to pick */
    const int kept_contiguous = nkept > 0 && kept_strides[nkept - 1] == 1;
    const int red_contiguous = nred > 0 && red_strides[nred - 1] == 1;
    int64_t units = outputs;
    if (kept_contiguous && !red_contiguous) {
        j.lanes = kept_shape[nkept - 1];
        units = outputs / j.lanes * ((j.lanes + LANES - 1) / LANES);
    }
    const int64_t per_unit = relvm_max64(1, j.count * (j.lanes ? relvm_min64(j.lanes, LANES) : 1));
    relvm_parallel_for(units, relvm_max64(1, RELVM_GRAIN / per_unit), reduce_range, &j);
    return RELVM_OK;
}

/* --- logsumexp: per output, a pass for the maximum, then one summing exp(x - max) ------------ */

/* The result from the maximum m, whether a NaN was seen, and the sum of exp(x - m). */
static inline double lse_result(double m, int nan, double sum) {
    if (nan) return NAN;
    if (!(m > -INFINITY && m < INFINITY)) return m; /* all -inf (or none), or an inf */
    return m + log(sum);
}

static inline int lse_shifts(double m) { return m > -INFINITY && m < INFINITY; }

#define LSE_WALKS(S, T)                                                                       \
    static void lse_rows_##S(const struct reduce_job *j, int64_t begin, int64_t end) {        \
        const int inner = j->nred - 1;                                                        \
        const int64_t run = j->nred ? j->red_shape[inner] : 1;                                \
        const int64_t step = j->nred ? j->red_stride[inner] : 0;                              \
        const int64_t runs = run ? j->count / run : 0;                                        \
        for (int64_t o = begin; o < end; ++o) {                                               \
            const T *base = (const T *)(const void *)j->x +                                   \
                            offset_of(o, j->nkept, j->kept_shape, j->kept_stride);            \
            double m = -INFINITY, sum = 0;                                                    \
            int nan = 0;                                                                      \
            for (int64_t q = 0; q < runs; ++q) {                                              \
                const T *x = base + (inner > 0                                                \
                    ? offset_of(q, inner, j->red_shape, j->red_stride) : 0);                  \
                for (int64_t i = 0; i < run; ++i) {                                           \
                    const double v = (double)x[i * step];                                     \
                    if (v != v) nan = 1;                                                      \
                    else if (v > m) m = v;                                                    \
                }                                                                             \
            }                                                                                 \
            if (!nan && lse_shifts(m))                                                        \
                for (int64_t q = 0; q < runs; ++q) {                                          \
                    const T *x = base + (inner > 0                                            \
                        ? offset_of(q, inner, j->red_shape, j->red_stride) : 0);              \
                    for (int64_t i = 0; i < run; ++i) sum += exp((double)x[i * step] - m);    \
                }                                                                             \
            ((T *)(void *)j->out)[o] = (T)lse_result(m, nan, sum);                            \
        }                                                                                     \
    }                                                                                         \
    /* Up to LANES neighbouring outputs at once, as COLUMN_WALK. */                           \
    static void lse_columns_##S(const struct reduce_job *j, int64_t begin, int64_t end) {     \
        const int64_t tiles = (j->lanes + LANES - 1) / LANES;                                 \
        double m[LANES], sum[LANES];                                                          \
        int nan[LANES];                                                                       \
        for (int64_t u = begin; u < end; ++u) {                                               \
            const int64_t row = u / tiles, first = u % tiles * LANES;                         \
            const int64_t n = relvm_min64(LANES, j->lanes - first);                           \
            const T *base = (const T *)(const void *)j->x + first +                           \
                            offset_of(row, j->nkept - 1, j->kept_shape, j->kept_stride);      \
            for (int64_t l = 0; l < n; ++l) {                                                 \
                m[l] = -INFINITY;                                                             \
                sum[l] = 0;                                                                   \
                nan[l] = 0;                                                                   \
            }                                                                                 \
            for (int64_t r = 0; r < j->count; ++r) {                                          \
                const T *x = base + offset_of(r, j->nred, j->red_shape, j->red_stride);       \
                for (int64_t l = 0; l < n; ++l) {                                             \
                    const double v = (double)x[l];                                            \
                    if (v != v) nan[l] = 1;                                                   \
                    else if (v > m[l]) m[l] = v;                                              \
                }                                                                             \
            }                                                                                 \
            for (int64_t r = 0; r < j->count; ++r) {                                          \
                const T *x = base + offset_of(r, j->nred, j->red_shape, j->red_stride);       \
                for (int64_t l = 0; l < n; ++l)                                               \
                    if (!nan[l] && lse_shifts(m[l])) sum[l] += exp((double)x[l] - m[l]);      \
            }                                                                                 \
            for (int64_t l = 0; l < n; ++l)                                                   \
                ((T *)(void *)j->out)[row * j->lanes + first + l] =                           \
                    (T)lse_result(m[l], nan[l], sum[l]);                                      \
        }                                                                                     \
    }

LSE_WALKS(f32, f32)
LSE_WALKS(f64, f64)
LSE_WALKS(f16, f16)

static void lse_range(void *ctx, int64_t begin, int64_t end) {
    const struct reduce_job *j = ctx;
#define DISPATCH(S)                                                                           \
    if (j->lanes) lse_columns_##S(j, begin, end);                                             \
    else lse_rows_##S(j, begin, end);                                                         \
    return;
    switch (j->dtype) {
    case RELVM_FLOAT32: DISPATCH(f32)
    case RELVM_FLOAT64: DISPATCH(f64)
    default: DISPATCH(f16)
    }
#undef DISPATCH
}

RELVM_EXPORT int relvm_logsumexp(int dtype, const void *x, void *out, int nkept,
                                 const int64_t *kept_shape, const int64_t *kept_strides,
                                 int nred, const int64_t *red_shape,
                                 const int64_t *red_strides) {
    if (dtype != RELVM_FLOAT32 && dtype != RELVM_FLOAT64 && dtype != RELVM_FLOAT16)
        return RELVM_UNSUPPORTED;
    struct reduce_job j = {0};
    int64_t outputs = 1;
    j.dtype = dtype;
    j.nkept = nkept;
    j.nred = nred;
    j.count = 1;
    j.x = x;
    j.out = out;
    if (!copy_dims(nkept, kept_shape, kept_strides, j.kept_shape, j.kept_stride, &outputs) ||
        !copy_dims(nred, red_shape, red_strides, j.red_shape, j.red_stride, &j.count))
        return RELVM_UNSUPPORTED;
    if (outputs == 0) return RELVM_OK;
    int64_t units = outputs;
    if (nkept > 0 && kept_strides[nkept - 1] == 1 && !(nred > 0 && red_strides[nred - 1] == 1)) {
        j.lanes = kept_shape[nkept - 1];
        units = outputs / j.lanes * ((j.lanes + LANES - 1) / LANES);
    }
    /* Two passes and an exp per position: about as heavy per element as exp itself. */
    const int64_t lanes = j.lanes ? relvm_min64(j.lanes, LANES) : 1;
    const int64_t per_unit = relvm_max64(1, 2 * j.count * lanes);
    relvm_parallel_for(units, relvm_max64(1, RELVM_GRAIN_HEAVY / per_unit), lse_range, &j);
    return RELVM_OK;
}
