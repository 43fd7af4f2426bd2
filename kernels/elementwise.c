/* Elementwise kernels. Semantics follow relvm/ops/elementwise.py: integers wrap (computed in
 * the unsigned type, where C defines overflow), round is half to even, sign keeps NaN. */
#include <math.h>
#include <string.h>
#include "relvm_config.h"
#include "elementwise.h"
#include "internal/types.h"
#include "internal/vmath.h"
#include "threads.h"

/* --- unary -------------------------------------------------------------------------------- */

typedef void (*unary_fn)(const void *x, void *out, int64_t n);

#define UNARY(NAME, T, OT, EXPR)                                                              \
    static RELVM_VECTORIZE void NAME(const void *x_, void *o_, int64_t n) {                   \
        const T *xs = x_;                                                                     \
        OT *o = o_;                                                                           \
        for (int64_t i = 0; i < n; ++i) {                                                     \
            const T x = xs[i];                                                                \
            o[i] = (OT)(EXPR);                                                                \
        }                                                                                     \
    }

/* x < 0 is false for NaN, so NaN passes through as in NumPy's maximum(x, 0). */
#define FLOAT_UNARY(S, T, EXP, SIGMOID, TANH, ERF, LOG, SQRT, FLOOR, CEIL, RINT, FABS)        \
    UNARY(relu_##S, T, T, x < 0 ? (T)0 : x)                                                   \
    UNARY(sigmoid_##S, T, T, SIGMOID(x))                                                      \
    UNARY(tanh_##S, T, T, TANH(x))                                                            \
    UNARY(exp_##S, T, T, EXP(x))                                                              \
    UNARY(log_##S, T, T, LOG(x))                                                              \
    UNARY(sqrt_##S, T, T, SQRT(x))                                                            \
    UNARY(rsqrt_##S, T, T, (T)1 / SQRT(x))                                                    \
    UNARY(erf_##S, T, T, ERF(x))                                                              \
    UNARY(floor_##S, T, T, FLOOR(x))                                                          \
    UNARY(ceil_##S, T, T, CEIL(x))                                                            \
    UNARY(round_##S, T, T, RINT(x)) /* the default rounding mode: half to even */             \
    UNARY(negative_##S, T, T, -x)                                                             \
    UNARY(abs_##S, T, T, FABS(x))                                                             \
    UNARY(sign_##S, T, T, x > 0 ? (T)1 : (x < 0 ? (T)-1 : (x == 0 ? (T)0 : x)))

static inline double sigmoid_of(double x) { return 1.0 / (1.0 + exp(-x)); }

FLOAT_UNARY(f32, f32, vm_expf, vm_sigmoidf, vm_tanhf, vm_erff, logf, sqrtf, floorf, ceilf, rintf,
            fabsf)
FLOAT_UNARY(f64, f64, exp, sigmoid_of, tanh, erf, log, sqrt, floor, ceil, rint, fabs)

/* Trigonometric and hyperbolic functions: libm's, as the references are NumPy's (both within
 * an ulp or two of the exact value). */
#define TRIG_UNARY(S, T, F)                                                                   \
    UNARY(sin_##S, T, T, sin##F(x))                                                           \
    UNARY(cos_##S, T, T, cos##F(x))                                                           \
    UNARY(tan_##S, T, T, tan##F(x))                                                           \
    UNARY(asin_##S, T, T, asin##F(x))                                                         \
    UNARY(acos_##S, T, T, acos##F(x))                                                         \
    UNARY(atan_##S, T, T, atan##F(x))                                                         \
    UNARY(sinh_##S, T, T, sinh##F(x))                                                         \
    UNARY(cosh_##S, T, T, cosh##F(x))                                                         \
    UNARY(asinh_##S, T, T, asinh##F(x))                                                       \
    UNARY(acosh_##S, T, T, acosh##F(x))                                                       \
    UNARY(atanh_##S, T, T, atanh##F(x))

TRIG_UNARY(f32, f32, f)
TRIG_UNARY(f64, f64, )

#define SIGNED_UNARY(S, T, UT)                                                                \
    UNARY(relu_##S, T, T, x < 0 ? (T)0 : x)                                                   \
    UNARY(negative_##S, T, T, (T)(0 - (UT)x))                                                 \
    UNARY(abs_##S, T, T, x < 0 ? (T)(0 - (UT)x) : x)                                          \
    UNARY(sign_##S, T, T, (x > 0) - (x < 0))

SIGNED_UNARY(i64, i64, uint64_t)
SIGNED_UNARY(i32, i32, uint32_t)
SIGNED_UNARY(i8, i8, uint8_t)
SIGNED_UNARY(i16, i16, uint16_t)
/* Unsigned: never below 0 (GCC refuses a test its type decides under -Werror); -x wraps. */
#define UNSIGNED_UNARY(S, T)                                                                  \
    UNARY(relu_##S, T, T, x)                                                                  \
    UNARY(negative_##S, T, T, 0 - x)                                                          \
    UNARY(abs_##S, T, T, x)                                                                   \
    UNARY(sign_##S, T, T, x > 0)
UNSIGNED_UNARY(u8, u8)
UNSIGNED_UNARY(u16, u16)
UNSIGNED_UNARY(u32, u32)
UNSIGNED_UNARY(u64, u64)
UNARY(logical_not_b8, u8, u8, !x)
#define BITWISE_NOT(S, T) UNARY(bitwise_not_##S, T, T, ~x)
BITWISE_NOT(i64, i64)
BITWISE_NOT(i32, i32)
BITWISE_NOT(i8, i8)
BITWISE_NOT(u8, u8)
BITWISE_NOT(i16, i16)
BITWISE_NOT(u16, u16)
BITWISE_NOT(u32, u32)
BITWISE_NOT(u64, u64)
/* float16 |x|: its sign bit cleared (IsInf is |x| == inf). */
UNARY(abs_f16, uint16_t, uint16_t, x & 0x7fff)

#define FLOATS_OF(OP) {[RELVM_FLOAT32] = OP##_f32, [RELVM_FLOAT64] = OP##_f64}
#define NUMBERS_OF(OP)                                                                        \
    {[RELVM_FLOAT32] = OP##_f32, [RELVM_FLOAT64] = OP##_f64, RELVM_INT_ENTRIES(OP)}

static const unary_fn unary_table[RELVM_NUM_UNARY][RELVM_NUM_DTYPES] = {
    [RELVM_RELU] = NUMBERS_OF(relu),       [RELVM_SIGMOID] = FLOATS_OF(sigmoid),
    [RELVM_TANH] = FLOATS_OF(tanh),        [RELVM_EXP] = FLOATS_OF(exp),
    [RELVM_LOG] = FLOATS_OF(log),          [RELVM_SQRT] = FLOATS_OF(sqrt),
    [RELVM_RSQRT] = FLOATS_OF(rsqrt),      [RELVM_ERF] = FLOATS_OF(erf),
    [RELVM_FLOOR] = FLOATS_OF(floor),      [RELVM_CEIL] = FLOATS_OF(ceil),
    [RELVM_ROUND] = FLOATS_OF(round),      [RELVM_NEGATIVE] = NUMBERS_OF(negative),
    [RELVM_ABS] = {[RELVM_FLOAT32] = abs_f32, [RELVM_FLOAT64] = abs_f64,
                   [RELVM_FLOAT16] = abs_f16, RELVM_INT_ENTRIES(abs)},
    [RELVM_SIGN] = NUMBERS_OF(sign),
    [RELVM_LOGICAL_NOT] = {[RELVM_BOOL] = logical_not_b8},
    [RELVM_SIN] = FLOATS_OF(sin),          [RELVM_COS] = FLOATS_OF(cos),
    [RELVM_TAN] = FLOATS_OF(tan),          [RELVM_ASIN] = FLOATS_OF(asin),
    [RELVM_ACOS] = FLOATS_OF(acos),        [RELVM_ATAN] = FLOATS_OF(atan),
    [RELVM_SINH] = FLOATS_OF(sinh),        [RELVM_COSH] = FLOATS_OF(cosh),
    [RELVM_ASINH] = FLOATS_OF(asinh),      [RELVM_ACOSH] = FLOATS_OF(acosh),
    [RELVM_ATANH] = FLOATS_OF(atanh),
    [RELVM_BITWISE_NOT] = {RELVM_INT_ENTRIES(bitwise_not)},
};

/* Transcendental ops earn a thread sooner than a copy-like op does. */
static int64_t unary_grain(int op) {
    switch (op) {
    case RELVM_SIGMOID: case RELVM_TANH: case RELVM_EXP: case RELVM_LOG: case RELVM_ERF:
    case RELVM_SIN: case RELVM_COS: case RELVM_TAN: case RELVM_ASIN: case RELVM_ACOS:
    case RELVM_ATAN: case RELVM_SINH: case RELVM_COSH: case RELVM_ASINH: case RELVM_ACOSH:
    case RELVM_ATANH:
        return RELVM_GRAIN_HEAVY;
    default:
        return RELVM_GRAIN;
    }
}

static int valid_dtype(int dtype) { return dtype >= 0 && dtype < RELVM_NUM_DTYPES; }

RELVM_EXPORT int relvm_unary_supported(int op, int dtype) {
    return op >= 0 && op < RELVM_NUM_UNARY && valid_dtype(dtype) && unary_table[op][dtype];
}

/* A contiguous loop split among threads: fn(x + i, out + i, count) per chunk. */
struct flat {
    unary_fn fn;
    const char *x;
    char *out;
    int64_t xsize, osize;
};

static void flat_range(void *ctx, int64_t begin, int64_t end) {
    const struct flat *f = ctx;
    f->fn(f->x + begin * f->xsize, f->out + begin * f->osize, end - begin);
}

static void run_flat(unary_fn fn, const void *x, int64_t xsize, void *out, int64_t osize,
                     int64_t n, int64_t grain) {
    struct flat f = {fn, x, out, xsize, osize};
    relvm_parallel_for(n, grain, flat_range, &f);
}

RELVM_EXPORT int relvm_unary(int op, int dtype, const void *x, void *out, int64_t n) {
    if (!relvm_unary_supported(op, dtype)) return RELVM_UNSUPPORTED;
    const int64_t size = relvm_itemsize[dtype];
    run_flat(unary_table[op][dtype], x, size, out, size, n, unary_grain(op));
    return RELVM_OK;
}

/* --- clip and leaky_relu: unary ops with parameters ------------------------------------- */

struct params {
    double lo, hi, alpha; /* float bounds of clip; leaky_relu's slope */
    int64_t ilo, ihi;     /* integer bounds of clip */
};

/* min(max(x, lo), hi), as the reference computes it: with lo > hi every element is hi; a NaN
 * in x passes through (both comparisons fail for it), and a NaN bound makes every element NaN.
 * The bounds come already rounded to T (relvm/ops/elementwise.py: clip_bounds). Two selects an
 * element, no branch: the loop vectorizes (with `||` tests for NaN it ran element by element,
 * 5 ns each: 45% of a MobileNet head whose relu6 ran unfused). */
typedef void (*param_fn)(const struct params *p, const void *x, void *o, int64_t n);

#define CLIP_FLOAT(S, T)                                                                      \
    static RELVM_VECTORIZE void clip_##S(const struct params *p, const void *x_, void *o_,    \
                                         int64_t n) {                                         \
        const T *x = x_, lo = (T)p->lo, hi = (T)p->hi;                                        \
        T *o = o_;                                                                            \
        if (lo != lo || hi != hi) {                                                           \
            for (int64_t i = 0; i < n; ++i) o[i] = lo != lo ? lo : hi;                        \
            return;                                                                           \
        }                                                                                     \
        for (int64_t i = 0; i < n; ++i) {                                                     \
            const T m = x[i] < lo ? lo : x[i];                                                \
            o[i] = m > hi ? hi : m;                                                           \
        }                                                                                     \
    }
/* The integer bounds arrive as int64_t; uint64's above 2^63 as their bits (the conversion to
 * T is modular, so they come back exactly). */
#define CLIP_INT(S, T)                                                                        \
    static RELVM_VECTORIZE void clip_##S(const struct params *p, const void *x_, void *o_,    \
                                         int64_t n) {                                         \
        const T *x = x_, lo = (T)p->ilo, hi = (T)p->ihi;                                      \
        T *o = o_;                                                                            \
        for (int64_t i = 0; i < n; ++i) {                                                     \
            const T m = x[i] >= lo ? x[i] : lo;                                               \
            o[i] = m <= hi ? m : hi;                                                          \
        }                                                                                     \
    }
CLIP_FLOAT(f32, f32)
CLIP_FLOAT(f64, f64)
CLIP_INT(i64, i64)
CLIP_INT(i32, i32)
CLIP_INT(i8, i8)
CLIP_INT(u8, u8)
CLIP_INT(i16, i16)
CLIP_INT(u16, u16)
CLIP_INT(u32, u32)
CLIP_INT(u64, u64)

static const param_fn clip_table[RELVM_NUM_DTYPES] = {
    [RELVM_FLOAT32] = clip_f32, [RELVM_FLOAT64] = clip_f64, RELVM_INT_ENTRIES(clip)};

#define LEAKY(S, T)                                                                           \
    static RELVM_VECTORIZE void leaky_##S(const struct params *p, const void *x_, void *o_,   \
                                          int64_t n) {                                        \
        const T *x = x_, alpha = (T)p->alpha;                                                 \
        T *o = o_;                                                                            \
        for (int64_t i = 0; i < n; ++i) o[i] = x[i] > 0 ? x[i] : x[i] * alpha;                \
    }
LEAKY(f32, f32)
LEAKY(f64, f64)

struct param_job {
    const struct params *p;
    param_fn fn;
    int64_t size;
    const char *x;
    char *out;
};

static void param_range(void *ctx, int64_t begin, int64_t end) {
    const struct param_job *j = ctx;
    const int64_t off = begin * j->size;
    j->fn(j->p, j->x + off, j->out + off, end - begin);
}

RELVM_EXPORT int relvm_clip(int dtype, const void *x, void *out, int64_t n, double lo, double hi,
                            int64_t ilo, int64_t ihi) {
    if (!valid_dtype(dtype) || !clip_table[dtype]) return RELVM_UNSUPPORTED;
    const struct params p = {lo, hi, 0.0, ilo, ihi};
    struct param_job j = {&p, clip_table[dtype], relvm_itemsize[dtype], x, out};
    relvm_parallel_for(n, RELVM_GRAIN, param_range, &j);
    return RELVM_OK;
}

RELVM_EXPORT int relvm_leaky_relu(int dtype, const void *x, void *out, int64_t n, double alpha) {
    if (dtype != RELVM_FLOAT32 && dtype != RELVM_FLOAT64) return RELVM_UNSUPPORTED;
    const struct params p = {0.0, 0.0, alpha, 0, 0};
    struct param_job j = {&p, dtype == RELVM_FLOAT32 ? leaky_f32 : leaky_f64,
                          relvm_itemsize[dtype], x, out};
    relvm_parallel_for(n, RELVM_GRAIN, param_range, &j);
    return RELVM_OK;
}

/* --- cast ---------------------------------------------------------------------------------- */

/* Float to int as the reference: in range when lo <= v <= hi with the bounds rounded to the
 * float type (so float32's bound for int32 is 2^31), then truncated. A truncated value past
 * the int range (exactly the rounded-up bound) gives the int minimum, as x86 and NumPy do. */
static inline int64_t float_to_int(double v, double lo, double hi, double past, int64_t min) {
    if (!(v - v == 0) || !(v >= lo && v <= hi)) return 0;
    const double t = trunc(v);
    return t >= past ? min : (int64_t)t;
}

/* The same rule for uint64, whose range is past int64's: 2^64 (the rounded-up bound) gives 0. */
static inline uint64_t float_to_u64(double v, double hi) {
    if (!(v - v == 0) || !(v >= 0 && v <= hi)) return 0;
    const double t = trunc(v);
    return t >= 18446744073709551616.0 ? 0 : (uint64_t)t;
}

#define CAST_LOOP(FT, TT, EXPR)                                                               \
    do {                                                                                      \
        const FT *xs = x_;                                                                    \
        TT *o = o_;                                                                           \
        for (int64_t i = 0; i < n; ++i) {                                                     \
            const FT x = xs[i];                                                               \
            o[i] = (TT)(EXPR);                                                                \
        }                                                                                     \
    } while (0)

/* Float type FT to int type TT with range [MIN, MAX]; bounds computed once in FT. */
#define FLOAT_TO_INT(FT, TT, MIN, MAX)                                                        \
    do {                                                                                      \
        const double lo = (double)(FT)(double)(MIN), hi = (double)(FT)(double)(MAX);          \
        const double past = (double)(MAX) + 1.0;                                              \
        CAST_LOOP(FT, TT, float_to_int((double)x, lo, hi, past, (int64_t)(MIN)));             \
    } while (0)

#define FLOAT_TO_U64(FT)                                                                      \
    do {                                                                                      \
        const double hi = (double)(FT)(double)UINT64_MAX;                                     \
        CAST_LOOP(FT, u64, float_to_u64((double)x, hi));                                      \
    } while (0)

/* Every dtype code has its case: the static assertion below stops a new dtype from compiling
 * until it has them. relvm_cast checks the codes, so `default` is never taken. */
#define CAST_FROM_FLOAT(FT)                                                                   \
    switch (to) {                                                                             \
    case RELVM_FLOAT32: CAST_LOOP(FT, f32, x); return;                                        \
    case RELVM_FLOAT64: CAST_LOOP(FT, f64, x); return;                                        \
    case RELVM_FLOAT16: CAST_LOOP(FT, f16, x); return;                                        \
    case RELVM_INT64: FLOAT_TO_INT(FT, i64, INT64_MIN, INT64_MAX); return;                    \
    case RELVM_INT32: FLOAT_TO_INT(FT, i32, INT32_MIN, INT32_MAX); return;                    \
    case RELVM_INT8: FLOAT_TO_INT(FT, i8, INT8_MIN, INT8_MAX); return;                        \
    case RELVM_UINT8: FLOAT_TO_INT(FT, u8, 0, UINT8_MAX); return;                             \
    case RELVM_BOOL: CAST_LOOP(FT, u8, x != 0); return;                                       \
    case RELVM_INT16: FLOAT_TO_INT(FT, i16, INT16_MIN, INT16_MAX); return;                    \
    case RELVM_UINT16: FLOAT_TO_INT(FT, u16, 0, UINT16_MAX); return;                          \
    case RELVM_UINT32: FLOAT_TO_INT(FT, u32, 0, UINT32_MAX); return;                          \
    case RELVM_UINT64: FLOAT_TO_U64(FT); return;                                              \
    default: return;                                                                          \
    }

/* Integer to integer wraps (GCC defines the narrowing conversion as modular). */
#define CAST_FROM_INT(FT)                                                                     \
    switch (to) {                                                                             \
    case RELVM_FLOAT32: CAST_LOOP(FT, f32, x); return;                                        \
    case RELVM_FLOAT64: CAST_LOOP(FT, f64, x); return;                                        \
    case RELVM_FLOAT16: CAST_LOOP(FT, f16, x); return;                                        \
    case RELVM_INT64: CAST_LOOP(FT, i64, x); return;                                          \
    case RELVM_INT32: CAST_LOOP(FT, i32, x); return;                                          \
    case RELVM_INT8: CAST_LOOP(FT, i8, x); return;                                            \
    case RELVM_UINT8: CAST_LOOP(FT, u8, x); return;                                           \
    case RELVM_BOOL: CAST_LOOP(FT, u8, x != 0); return;                                       \
    case RELVM_INT16: CAST_LOOP(FT, i16, x); return;                                          \
    case RELVM_UINT16: CAST_LOOP(FT, u16, x); return;                                         \
    case RELVM_UINT32: CAST_LOOP(FT, u32, x); return;                                         \
    case RELVM_UINT64: CAST_LOOP(FT, u64, x); return;                                         \
    default: return;                                                                          \
    }

_Static_assert(RELVM_NUM_DTYPES == 12, "cast_chunk needs a case for each dtype");

static void cast_chunk(int from, int to, const void *x_, void *o_, int64_t n) {
    switch (from) {
    case RELVM_FLOAT32: CAST_FROM_FLOAT(f32)
    case RELVM_FLOAT64: CAST_FROM_FLOAT(f64)
    case RELVM_FLOAT16: CAST_FROM_FLOAT(f16)
    case RELVM_INT64: CAST_FROM_INT(i64)
    case RELVM_INT32: CAST_FROM_INT(i32)
    case RELVM_INT8: CAST_FROM_INT(i8)
    case RELVM_UINT8: CAST_FROM_INT(u8)
    case RELVM_BOOL: CAST_FROM_INT(u8) /* one byte, 0 or 1 */
    case RELVM_INT16: CAST_FROM_INT(i16)
    case RELVM_UINT16: CAST_FROM_INT(u16)
    case RELVM_UINT32: CAST_FROM_INT(u32)
    case RELVM_UINT64: CAST_FROM_INT(u64)
    default: return;
    }
}

struct cast_job {
    int from, to;
    const char *x;
    char *out;
};

static void cast_range(void *ctx, int64_t begin, int64_t end) {
    const struct cast_job *j = ctx;
    cast_chunk(j->from, j->to, j->x + begin * relvm_itemsize[j->from],
               j->out + begin * relvm_itemsize[j->to], end - begin);
}

RELVM_EXPORT int relvm_cast(int from, int to, const void *x, void *out, int64_t n) {
    if (!valid_dtype(from) || !valid_dtype(to)) return RELVM_UNSUPPORTED;
    if (from == to) {
        memmove(out, x, (size_t)(n * relvm_itemsize[from]));
        return RELVM_OK;
    }
    struct cast_job j = {from, to, x, out};
    relvm_parallel_for(n, RELVM_GRAIN, cast_range, &j);
    return RELVM_OK;
}
