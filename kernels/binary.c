/* Binary kernels. Semantics follow relvm/ops/elementwise.py: integers wrap (computed in the
 * unsigned type); integer divide truncates toward zero and gives 0 for a zero divisor (never a
 * SIGFPE, INT_MIN / -1 wraps); mod and floor_mod of an integer by 0 (or by -1) give 0;
 * maximum/minimum propagate NaN and pick as NumPy does. */
#include <math.h>
#include "relvm_config.h"
#include "binary.h"
#include "internal/nest.h"
#include "internal/types.h"

/* A row: n elements, each input stepping by sa / sb elements (0 broadcasts one value). */
typedef void (*binary_fn)(const void *a, int64_t sa, const void *b, int64_t sb, void *out,
                          int64_t n);

/* Separate loops for the stride patterns so each one vectorizes. */
#define BINARY(NAME, T, OT, EXPR)                                                             \
    static RELVM_VECTORIZE void NAME(const void *a_, int64_t sa, const void *b_, int64_t sb,  \
                                     void *o_, int64_t n) {                                   \
        const T *a = a_, *b = b_;                                                             \
        OT *o = o_;                                                                           \
        if (sa == 1 && sb == 1) {                                                             \
            for (int64_t i = 0; i < n; ++i) {                                                 \
                const T x = a[i], y = b[i];                                                   \
                o[i] = (OT)(EXPR);                                                            \
            }                                                                                 \
        } else if (sa == 1 && sb == 0) {                                                      \
            const T y = b[0];                                                                 \
            for (int64_t i = 0; i < n; ++i) {                                                 \
                const T x = a[i];                                                             \
                o[i] = (OT)(EXPR);                                                            \
            }                                                                                 \
        } else if (sa == 0 && sb == 1) {                                                      \
            const T x = a[0];                                                                 \
            for (int64_t i = 0; i < n; ++i) {                                                 \
                const T y = b[i];                                                             \
                o[i] = (OT)(EXPR);                                                            \
            }                                                                                 \
        } else {                                                                              \
            for (int64_t i = 0; i < n; ++i) {                                                 \
                const T x = a[i * sa], y = b[i * sb];                                         \
                o[i] = (OT)(EXPR);                                                            \
            }                                                                                 \
        }                                                                                     \
    }

#define COMPARISONS(S, T)                                                                     \
    BINARY(equal_##S, T, u8, x == y)                                                          \
    BINARY(not_equal_##S, T, u8, x != y)                                                      \
    BINARY(less_##S, T, u8, x < y)                                                            \
    BINARY(less_equal_##S, T, u8, x <= y)                                                     \
    BINARY(greater_##S, T, u8, x > y)                                                         \
    BINARY(greater_equal_##S, T, u8, x >= y)

/* NumPy's picks: (x >= y || isnan(x)) ? x : y, so NaN in either input wins. */
#define FLOAT_BINARY(S, T, POW, FMOD)                                                         \
    BINARY(add_##S, T, T, x + y)                                                              \
    BINARY(subtract_##S, T, T, x - y)                                                         \
    BINARY(multiply_##S, T, T, x * y)                                                         \
    BINARY(divide_##S, T, T, x / y)                                                           \
    BINARY(pow_any_##S, T, T, POW(x, y))                                                      \
    BINARY(maximum_##S, T, T, ((x >= y) | (x != x)) ? x : y) /* `|`, not `||`: vectorizes */  \
    BINARY(minimum_##S, T, T, ((x <= y) | (x != x)) ? x : y)                                  \
    BINARY(mod_##S, T, T, FMOD(x, y))                                                         \
    /* floored: the truncated remainder moved into the divisor's sign (r and y differ in      \
     * sign, so r + y cannot overflow); NaN for y == 0, as NumPy. */                          \
    BINARY(floor_mod_##S, T, T,                                                               \
           (FMOD(x, y) != 0 && (FMOD(x, y) < 0) != (y < 0)) ? FMOD(x, y) + y : FMOD(x, y))    \
    COMPARISONS(S, T)                                                                         \
    /* x ** 2 is common (variance); x * x is the correctly rounded square, as pow's is. */    \
    static void power_##S(const void *a, int64_t sa, const void *b, int64_t sb, void *o,      \
                          int64_t n) {                                                        \
        if (sb == 0 && *(const T *)b == 2) multiply_##S(a, sa, a, sa, o, n);                  \
        else pow_any_##S(a, sa, b, sb, o, n);                                                 \
    }

FLOAT_BINARY(f32, f32, powf, fmodf)
FLOAT_BINARY(f64, f64, pow, fmod)

/* UT: the unsigned type arithmetic wraps in. 16-bit operands take uint32_t: a uint16_t
 * promotes to int, where 65535 * 65535 overflows (the 8-bit products fit in an int). */
#define WRAPPING(S, T, UT)                                                                    \
    BINARY(add_##S, T, T, (UT)x + (UT)y)                                                      \
    BINARY(subtract_##S, T, T, (UT)x - (UT)y)                                                 \
    BINARY(multiply_##S, T, T, (UT)x * (UT)y)                                                 \
    BINARY(maximum_##S, T, T, x >= y ? x : y)                                                 \
    BINARY(minimum_##S, T, T, x <= y ? x : y)                                                 \
    COMPARISONS(S, T)

WRAPPING(i64, i64, uint64_t)
WRAPPING(i32, i32, uint32_t)
WRAPPING(i8, i8, uint8_t)
WRAPPING(u8, u8, uint8_t)
WRAPPING(i16, i16, uint32_t)
WRAPPING(u16, u16, uint32_t)
WRAPPING(u32, u32, uint32_t)
WRAPPING(u64, u64, uint64_t)
BINARY(divide_i64, i64, i64, y == 0 ? 0 : (y == -1 ? (i64)(0 - (uint64_t)x) : x / y))
BINARY(divide_i32, i32, i32, y == 0 ? 0 : (y == -1 ? (i32)(0 - (uint32_t)x) : x / y))
/* Promoted to int: -128 / -1 and -32768 / -1 cannot trap (the result wraps back). */
BINARY(divide_i8, i8, i8, y == 0 ? 0 : x / y)
BINARY(divide_i16, i16, i16, y == 0 ? 0 : x / y)
#define UNSIGNED_DIVIDE(S, T) BINARY(divide_##S, T, T, y == 0 ? 0 : x / y)
UNSIGNED_DIVIDE(u8, u8)
UNSIGNED_DIVIDE(u16, u16)
UNSIGNED_DIVIDE(u32, u32)
UNSIGNED_DIVIDE(u64, u64)
/* The remainder of x / y, 0 for y of 0 or -1 (INT_MIN % -1 traps); floored: moved into y's
 * sign. Narrow types are promoted to int. */
#define INT_REMAINDERS(S, T)                                                                  \
    BINARY(mod_##S, T, T, (y == 0 || y == -1) ? 0 : x % y)                                    \
    BINARY(floor_mod_##S, T, T,                                                               \
           (y == 0 || y == -1) ? 0 : (x % y != 0 && (x % y < 0) != (y < 0)) ? x % y + y : x % y)
INT_REMAINDERS(i64, i64)
INT_REMAINDERS(i32, i32)
INT_REMAINDERS(i8, i8)
INT_REMAINDERS(i16, i16)
/* Unsigned: both remainders are x % y (never negative), 0 for y of 0. */
#define UNSIGNED_REMAINDERS(S, T)                                                             \
    BINARY(mod_##S, T, T, y == 0 ? 0 : x % y)                                                 \
    BINARY(floor_mod_##S, T, T, y == 0 ? 0 : x % y)
UNSIGNED_REMAINDERS(u8, u8)
UNSIGNED_REMAINDERS(u16, u16)
UNSIGNED_REMAINDERS(u32, u32)
UNSIGNED_REMAINDERS(u64, u64)
#define BITWISE(S, T)                                                                         \
    BINARY(bitwise_and_##S, T, T, x & y)                                                      \
    BINARY(bitwise_or_##S, T, T, x | y)                                                       \
    BINARY(bitwise_xor_##S, T, T, x ^ y)
BITWISE(i64, i64)
BITWISE(i32, i32)
BITWISE(i8, i8)
BITWISE(u8, u8)
BITWISE(i16, i16)
BITWISE(u16, u16)
BITWISE(u32, u32)
BITWISE(u64, u64)
/* Shifts (ONNX BitShift): left in the unsigned type UT (wraps; uint32_t for the 16-bit types,
 * as above); right arithmetic for signed x; a count outside [0, bits) shifts every bit out: 0,
 * or -1 for a negative x shifted right. Unsigned counts are never negative (GCC refuses a
 * test its type decides under -Werror). */
#define SHIFTS(S, T, UT, BITS)                                                                \
    BINARY(left_shift_##S, T, T, (y < 0 || y >= BITS) ? 0 : (T)((UT)x << y))                  \
    BINARY(right_shift_##S, T, T, (y < 0 || y >= BITS) ? (x < 0 ? -1 : 0) : x >> y)
#define UNSIGNED_SHIFTS(S, T, UT, BITS)                                                       \
    BINARY(left_shift_##S, T, T, y >= BITS ? 0 : (T)((UT)x << y))                             \
    BINARY(right_shift_##S, T, T, y >= BITS ? 0 : x >> y)
SHIFTS(i64, i64, uint64_t, 64)
SHIFTS(i32, i32, uint32_t, 32)
SHIFTS(i8, i8, uint8_t, 8)
SHIFTS(i16, i16, uint32_t, 16)
UNSIGNED_SHIFTS(u8, u8, uint8_t, 8)
UNSIGNED_SHIFTS(u16, u16, uint32_t, 16)
UNSIGNED_SHIFTS(u32, u32, uint32_t, 32)
UNSIGNED_SHIFTS(u64, u64, uint64_t, 64)
COMPARISONS(b8, u8)
COMPARISONS(f16, f16) /* _Float16 compares exactly, as float (IsNaN is x != x) */
BINARY(logical_and_b8, u8, u8, x && y)
BINARY(logical_or_b8, u8, u8, x || y)

#define FLOATS_OF(OP) {[RELVM_FLOAT32] = OP##_f32, [RELVM_FLOAT64] = OP##_f64}
#define NUMBERS_OF(OP)                                                                        \
    {[RELVM_FLOAT32] = OP##_f32, [RELVM_FLOAT64] = OP##_f64, RELVM_INT_ENTRIES(OP)}
#define INTS_OF(OP) {RELVM_INT_ENTRIES(OP)}
#define ALL_OF(OP)                                                                            \
    {[RELVM_FLOAT32] = OP##_f32, [RELVM_FLOAT64] = OP##_f64, [RELVM_FLOAT16] = OP##_f16,      \
     RELVM_INT_ENTRIES(OP), [RELVM_BOOL] = OP##_b8}

static const binary_fn binary_table[RELVM_NUM_BINARY][RELVM_NUM_DTYPES] = {
    [RELVM_ADD] = NUMBERS_OF(add),
    [RELVM_SUBTRACT] = NUMBERS_OF(subtract),
    [RELVM_MULTIPLY] = NUMBERS_OF(multiply),
    [RELVM_DIVIDE] = NUMBERS_OF(divide),
    [RELVM_POWER] = FLOATS_OF(power),
    [RELVM_MAXIMUM] = NUMBERS_OF(maximum),
    [RELVM_MINIMUM] = NUMBERS_OF(minimum),
    [RELVM_MOD] = NUMBERS_OF(mod),
    [RELVM_FLOOR_MOD] = NUMBERS_OF(floor_mod),
    [RELVM_BITWISE_AND] = INTS_OF(bitwise_and),
    [RELVM_BITWISE_OR] = INTS_OF(bitwise_or),
    [RELVM_BITWISE_XOR] = INTS_OF(bitwise_xor),
    [RELVM_LEFT_SHIFT] = INTS_OF(left_shift),
    [RELVM_RIGHT_SHIFT] = INTS_OF(right_shift),
    [RELVM_EQUAL] = ALL_OF(equal),
    [RELVM_NOT_EQUAL] = ALL_OF(not_equal),
    [RELVM_LESS] = ALL_OF(less),
    [RELVM_LESS_EQUAL] = ALL_OF(less_equal),
    [RELVM_GREATER] = ALL_OF(greater),
    [RELVM_GREATER_EQUAL] = ALL_OF(greater_equal),
    [RELVM_LOGICAL_AND] = {[RELVM_BOOL] = logical_and_b8},
    [RELVM_LOGICAL_OR] = {[RELVM_BOOL] = logical_or_b8},
};

RELVM_EXPORT int relvm_binary_supported(int op, int dtype) {
    return op >= 0 && op < RELVM_NUM_BINARY && dtype >= 0 && dtype < RELVM_NUM_DTYPES &&
           binary_table[op][dtype];
}

static int is_comparison(int op) { return op >= RELVM_EQUAL; }

struct binary_job {
    binary_fn fn;
    int64_t sa, sb; /* innermost strides in elements */
};

static void binary_row(void *ctx, char *const *p, int64_t n) {
    const struct binary_job *j = ctx;
    j->fn(p[0], j->sa, p[1], j->sb, p[2], n);
}

static int valid_nest(int ndim, const int64_t *shape) {
    if (ndim < 1 || ndim > NEST_MAX_DIMS) return 0;
    for (int d = 0; d < ndim; ++d)
        if (shape[d] < 0) return 0;
    return 1;
}

RELVM_EXPORT int relvm_binary(int op, int dtype, int ndim, const int64_t *shape, const void *a,
                              const int64_t *a_strides, const void *b, const int64_t *b_strides,
                              void *out) {
    if (!relvm_binary_supported(op, dtype) || !valid_nest(ndim, shape)) return RELVM_UNSUPPORTED;
    const int64_t size = relvm_itemsize[dtype];
    struct nest t = {.ndim = ndim, .nops = 3};
    for (int d = 0; d < ndim; ++d) t.shape[d] = shape[d];
    nest_operand(&t, 0, a, size, a_strides);
    nest_operand(&t, 1, b, size, b_strides);
    nest_operand(&t, 2, out, is_comparison(op) ? 1 : size, NULL);
    struct binary_job j = {binary_table[op][dtype], a_strides[ndim - 1], b_strides[ndim - 1]};
    nest_run(&t, binary_row, &j, op == RELVM_POWER ? RELVM_GRAIN_HEAVY : RELVM_GRAIN);
    return RELVM_OK;
}

RELVM_EXPORT int relvm_binary_bcast(int op, int dtype, int ndim_out, const int64_t *out_shape,
                                    const void *a, int ndim_a, const int64_t *a_shape,
                                    const void *b, int ndim_b, const int64_t *b_shape, void *out) {
    const int ndims[2] = {ndim_a, ndim_b};
    const int64_t *const shapes[2] = {a_shape, b_shape};
    int ndim;
    int64_t shape[NEST_MAX_DIMS], strides[3][NEST_MAX_DIMS];
    if (nest_broadcast(2, ndims, shapes, ndim_out, out_shape, 1, &ndim, shape, strides))
        return RELVM_UNSUPPORTED;
    return relvm_binary(op, dtype, ndim, shape, a, strides[0], b, strides[1], out);
}

struct flat_job {
    binary_fn fn;
    const char *a, *b;
    char *out;
    int64_t sa, sb, size, osize;
};

static void flat_range(void *ctx, int64_t begin, int64_t end) {
    const struct flat_job *j = ctx;
    j->fn(j->a + begin * j->sa * j->size, j->sa, j->b + begin * j->sb * j->size, j->sb,
          j->out + begin * j->osize, end - begin);
}

static int unit_or_zero(int64_t s) { return s == 0 || s == 1; }

RELVM_EXPORT int relvm_binary_flat(int op, int dtype, const void *a, int64_t sa, const void *b,
                                   int64_t sb, void *out, int64_t n) {
    if (!relvm_binary_supported(op, dtype) || n < 0 || !unit_or_zero(sa) || !unit_or_zero(sb))
        return RELVM_UNSUPPORTED;
    const int64_t size = relvm_itemsize[dtype];
    struct flat_job j = {binary_table[op][dtype], a, b, out, sa, sb, size,
                         is_comparison(op) ? 1 : size};
    relvm_parallel_for(n, op == RELVM_POWER ? RELVM_GRAIN_HEAVY : RELVM_GRAIN, flat_range, &j);
    return RELVM_OK;
}

/* --- where ---------------------------------------------------------------------------------- */

struct where_job {
    int itemsize;
    int64_t sc, sx, sy;
};

#define WHERE(NAME, T)                                                                        \
    static RELVM_VECTORIZE void NAME(const struct where_job *j, const u8 *c, const T *x,      \
                                     const T *y, T *o, int64_t n) {                           \
        if (j->sc == 1 && j->sx == 1 && j->sy == 1) {                                         \
            for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? x[i] : y[i];                        \
            return;                                                                           \
        }                                                                                     \
        for (int64_t i = 0; i < n; ++i) o[i] = c[i * j->sc] ? x[i * j->sx] : y[i * j->sy];    \
    }

WHERE(where_1, uint8_t)
WHERE(where_2, uint16_t)
WHERE(where_4, uint32_t)
WHERE(where_8, uint64_t)

static void where_row(void *ctx, char *const *p, int64_t n) {
    const struct where_job *j = ctx;
    const u8 *c = (const u8 *)p[0];
    const void *x = p[1], *y = p[2];
    void *o = p[3];
    switch (j->itemsize) {
    case 1: where_1(j, c, x, y, o, n); break;
    case 2: where_2(j, c, x, y, o, n); break;
    case 4: where_4(j, c, x, y, o, n); break;
    default: where_8(j, c, x, y, o, n);
    }
}

RELVM_EXPORT int relvm_where(int itemsize, int ndim, const int64_t *shape, const void *cond,
                             const int64_t *c_strides, const void *x, const int64_t *x_strides,
                             const void *y, const int64_t *y_strides, void *out) {
    if ((itemsize != 1 && itemsize != 2 && itemsize != 4 && itemsize != 8) ||
        !valid_nest(ndim, shape))
        return RELVM_UNSUPPORTED;
    struct nest t = {.ndim = ndim, .nops = 4};
    for (int d = 0; d < ndim; ++d) t.shape[d] = shape[d];
    nest_operand(&t, 0, cond, 1, c_strides);
    nest_operand(&t, 1, x, itemsize, x_strides);
    nest_operand(&t, 2, y, itemsize, y_strides);
    nest_operand(&t, 3, out, itemsize, NULL);
    struct where_job j = {itemsize, c_strides[ndim - 1], x_strides[ndim - 1], y_strides[ndim - 1]};
    nest_run(&t, where_row, &j, RELVM_GRAIN);
    return RELVM_OK;
}

RELVM_EXPORT int relvm_where_bcast(int itemsize, int ndim_out, const int64_t *out_shape,
                                   const void *cond, int ndim_c, const int64_t *c_shape,
                                   const void *x, int ndim_x, const int64_t *x_shape,
                                   const void *y, int ndim_y, const int64_t *y_shape, void *out) {
    const int ndims[3] = {ndim_c, ndim_x, ndim_y};
    const int64_t *const shapes[3] = {c_shape, x_shape, y_shape};
    int ndim;
    int64_t shape[NEST_MAX_DIMS], strides[4][NEST_MAX_DIMS];
    if (nest_broadcast(3, ndims, shapes, ndim_out, out_shape, 1, &ndim, shape, strides))
        return RELVM_UNSUPPORTED;
    return relvm_where(itemsize, ndim, shape, cond, strides[0], x, strides[1], y, strides[2],
                       out);
}
