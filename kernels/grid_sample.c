/* image.grid_sample. The output points are cut into blocks; a block's taps (which pixels each
 * point reads, with which weights) are computed once from the grid and used for every channel,
 * so the grid is read and its positions computed once per point, not once per point and
 * channel.
 *
 * Positions are rounded op by op as relvm's reference (and ONNX's) computes them: floor, the
 * rounding of nearest and the reflections decide which pixel a point reads, so a fused
 * multiply-add that rounded once where the reference rounds twice could read another pixel.
 * Hence no contraction where the taps are computed. Weights are float64; float32 data is
 * summed in float32, as ONNX's reference and ONNX Runtime sum it. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "relvm_config.h"
#include "internal/types.h"
#include "grid_sample.h"
#include "threads.h"

#define BLOCK 64     /* output points whose taps are computed together */
#define AXES 3       /* data of fewer spatial axes has leading axes of one tap of weight 1 */
#define AXIS_TAPS 4  /* per axis: nearest 1, linear 2, cubic 4 */
#define ROWS (AXIS_TAPS * AXIS_TAPS)
#define MAX_CHANNELS 4 /* channels evaluated together */

struct job {
    int dtype, grid_f64, method, padding, align, rank, taps;
    int64_t batch, channels, points, plane;
    int64_t size[AXES], stride[AXES]; /* the data's axes, the innermost last */
    const void *x, *grid;
    void *y;
};

/* The taps of one point along each axis. */
struct point_taps {
    int64_t off[AXES][AXIS_TAPS]; /* element offset in the plane */
    double w[AXES][AXIS_TAPS];
    int outside[AXES]; /* bit t: tap t reads 0 (zeros padding) */
};

/* A block's taps, as the channel loop reads them: the outer axes' taps combined into rows (an
 * offset and the product of their weights), and the innermost axis' taps, weights in the
 * data's dtype. A tap that reads 0 has offset 0 and weight 0 there, so the loop needs no test;
 * the points it would get wrong (0 times an infinite pixel is NaN, where the reference adds
 * nothing) are listed in `fix` with those whose position is NaN, and computed again. */
struct block {
    int64_t row[ROWS][BLOCK], col[AXIS_TAPS][BLOCK];
    f64 row_d[ROWS][BLOCK], col_d[AXIS_TAPS][BLOCK];
    f32 row_f[ROWS][BLOCK], col_f[AXIS_TAPS][BLOCK];
    uint16_t row_out[BLOCK];
    uint8_t col_out[BLOCK], nan[BLOCK], fix[BLOCK];
    int fixes;
};

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

/* Pixel position of normalized coordinate g on an axis of size pixels, in the grid's dtype. */
static float position_f32(float g, int64_t size, int align) {
    return align ? (g + 1.0f) / 2.0f * (float)(size - 1) : ((g + 1.0f) * (float)size - 1.0f) / 2.0f;
}

static double position_f64(double g, int64_t size, int align) {
    return align ? (g + 1.0) / 2.0 * (double)(size - 1) : ((g + 1.0) * (double)size - 1.0) / 2.0;
}

/* x rounded to the nearest integer, ties to even (np.rint), without a libm call. */
static inline double round_half_even(double x) {
    const double big = 4503599627370496.0; /* 2**52: past it every double is an integer */
    if (!(fabs(x) < big)) return x;        /* and NaN stays NaN */
    return copysign((fabs(x) + big) - big, x);
}

/* x reflected off lo and hi until it lies between them (NaN stays NaN). */
static double reflect(double x, double lo, double hi) {
    if (!(x < lo || x > hi)) return x;
    const double span = hi - lo;
    if (span <= 0) return lo; /* one pixel with align_corners: every position is that pixel */
    const int below = x < lo;
    const double dx = below ? lo - x : x - hi;
    const double n = trunc(dx / span), r = dx - n * span;
    return below == (fmod(n, 2.0) == 0.0) ? lo + r : hi - r;
}

/* Keys' cubic weights (A = -0.75) of the taps at floor(x) - 1 ... floor(x) + 2, t = x - floor. */
static inline void cubic_weights(double t, double *w) {
    const double a = -0.75, s = 1.0 - t, t1 = t + 1.0, s1 = s + 1.0;
    w[0] = ((a * t1 - 5.0 * a) * t1 + 8.0 * a) * t1 - 4.0 * a;
    w[1] = ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0;
    w[2] = ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0;
    w[3] = ((a * s1 - 5.0 * a) * s1 + 8.0 * a) * s1 - 4.0 * a;
}

/* The taps of axis a for position x (in the grid's dtype); method and padding are constants
 * where this is inlined. Returns the bits of the taps that read 0, or -1 for a NaN position. */
static inline __attribute__((always_inline)) int axis_taps(
    const struct job *j, int method, int padding, int a, double x, struct point_taps *pt) {
    const int64_t size = j->size[a];
    const double lo = j->align ? 0.0 : -0.5, hi = j->align ? (double)size - 1.0 : size - 0.5;
    if (method == RELVM_GRID_NEAREST) x = round_half_even(x);
    if (x < lo || x > hi) {
        /* border moves the position, but cubic clamps each tap instead (as ONNX Runtime and
         * PyTorch do: four taps around the position, each read at the nearest edge pixel) */
        if (padding == RELVM_GRID_BORDER && method != RELVM_GRID_CUBIC) {
            x = x < 0.0 ? 0.0 : ((double)size - 1.0 < x ? (double)size - 1.0 : x);
        } else if (padding == RELVM_GRID_REFLECTION) {
            x = reflect(x, lo, hi);
            if (!j->grid_f64) x = (float)x;
        }
    }
    if (x != x) return -1;
    /* A few pixels past the axis every tap reads 0 (zeros padding; other paddings are inside):
     * clamping there keeps the integer conversions defined, for infinite positions too. */
    x = x < -5.0 ? -5.0 : ((double)size + 4.0 < x ? (double)size + 4.0 : x);
    int64_t first = (int64_t)x; /* toward 0: the floor once corrected below 0 */
    double *w = pt->w[a];
    if (method == RELVM_GRID_NEAREST) {
        w[0] = 1.0;
    } else {
        if ((double)first > x) first -= 1;
        const double t = x - (double)first;
        if (method == RELVM_GRID_LINEAR) {
            w[0] = 1.0 - t;
            w[1] = t;
        } else {
            cubic_weights(t, w);
            first -= 1;
        }
    }
    const int taps = method == RELVM_GRID_NEAREST ? 1 : method == RELVM_GRID_LINEAR ? 2 : 4;
    int outside = 0;
    for (int k = 0; k < taps; ++k) {
        int64_t i = first + k;
        if (i < 0 || i >= size) {
            if (padding == RELVM_GRID_ZEROS) {
                outside |= 1 << k;
                i = 0;
            } else if (padding == RELVM_GRID_BORDER) {
                i = i < 0 ? 0 : size - 1;
            } else {
                i = (int64_t)reflect((double)i, lo, hi);
            }
        }
        pt->off[a][k] = i * j->stride[a];
    }
    return outside;
}

/* The taps of the block of `count` points from point p0 of batch entry n. */
static inline __attribute__((always_inline)) void block_taps(
    const struct job *j, int method, int padding, int64_t n, int64_t p0, int count,
    struct block *b) {
    const int lead = AXES - j->rank, t = j->taps, f32_weights = j->dtype == RELVM_FLOAT32;
    const int n0 = j->rank == 3 ? t : 1, n1 = j->rank >= 2 ? t : 1;
    struct point_taps pt;
    for (int a = 0; a < lead; ++a) {
        pt.off[a][0] = 0;
        pt.w[a][0] = 1.0;
        pt.outside[a] = 0;
    }
    b->fixes = 0;
    for (int p = 0; p < count; ++p) {
        const int64_t at = (n * j->points + p0 + p) * j->rank;
        int nan = 0;
        for (int a = lead; a < AXES && !nan; ++a) {
            const int64_t c = at + (AXES - 1 - a); /* the grid gives the innermost axis first */
            const double x = j->grid_f64
                ? position_f64(((const f64 *)j->grid)[c], j->size[a], j->align)
                : position_f32(((const f32 *)j->grid)[c], j->size[a], j->align);
            pt.outside[a] = axis_taps(j, method, padding, a, x, &pt);
            nan = pt.outside[a] < 0;
        }
        int row_out = 0, col_out = 0;
        for (int i = 0; i < n0; ++i)
            for (int k = 0; k < n1; ++k) {
                const int r = i * n1 + k;
                const int out = nan || (pt.outside[0] >> i & 1) || (pt.outside[1] >> k & 1);
                const double w = out ? 0.0 : pt.w[0][i] * pt.w[1][k];
                b->row[r][p] = out ? 0 : pt.off[0][i] + pt.off[1][k];
                if (f32_weights) b->row_f[r][p] = (f32)w; else b->row_d[r][p] = w;
                row_out |= out << r;
            }
        for (int m = 0; m < t; ++m) {
            const int out = nan || (pt.outside[2] >> m & 1);
            const double w = out ? 0.0 : pt.w[2][m];
            b->col[m][p] = out ? 0 : pt.off[2][m];
            if (f32_weights) b->col_f[m][p] = (f32)w; else b->col_d[m][p] = w;
            col_out |= out << m;
        }
        b->row_out[p] = (uint16_t)row_out;
        b->col_out[p] = (uint8_t)col_out;
        b->nan[p] = (uint8_t)nan;
        if (row_out || col_out) b->fix[b->fixes++] = (uint8_t)p;
    }
}

/* The same with the method and padding as constants. */
static void block_taps_any(const struct job *j, int64_t n, int64_t p0, int count,
                           struct block *b) {
    switch (j->method * 3 + j->padding) {
#define CASE(M, P) case M * 3 + P: block_taps(j, M, P, n, p0, count, b); break;
    CASE(RELVM_GRID_NEAREST, RELVM_GRID_ZEROS) CASE(RELVM_GRID_NEAREST, RELVM_GRID_BORDER)
    CASE(RELVM_GRID_NEAREST, RELVM_GRID_REFLECTION) CASE(RELVM_GRID_LINEAR, RELVM_GRID_ZEROS)
    CASE(RELVM_GRID_LINEAR, RELVM_GRID_BORDER) CASE(RELVM_GRID_LINEAR, RELVM_GRID_REFLECTION)
    CASE(RELVM_GRID_CUBIC, RELVM_GRID_ZEROS) CASE(RELVM_GRID_CUBIC, RELVM_GRID_BORDER)
    default: block_taps(j, RELVM_GRID_CUBIC, RELVM_GRID_REFLECTION, n, p0, count, b); break;
#undef CASE
    }
}

#if defined(__clang__)
#pragma clang fp contract(on)
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

/* The points listed in `fix` of one channel again, leaving out the taps that read 0. */
#define FIX(T)                                                                                 \
    static inline __attribute__((always_inline)) void fix_##T(                                \
        const struct block *b, const T *x, T *y, int rows, int cols) {                         \
        for (int f = 0; f < b->fixes; ++f) {                                                   \
            const int p = b->fix[f];                                                           \
            T acc = 0;                                                                         \
            for (int r = 0; r < rows; ++r) {                                                   \
                if (b->row_out[p] >> r & 1) continue;                                          \
                const T *line = x + b->row[r][p];                                              \
                T in = 0;                                                                      \
                for (int m = 0; m < cols; ++m)                                                 \
                    if (!(b->col_out[p] >> m & 1)) in += b->col_##T[m][p] * line[b->col[m][p]]; \
                acc += b->row_##T[r][p] * in;                                                  \
            }                                                                                  \
            y[p] = b->nan[p] ? (T)NAN : acc;                                                   \
        }                                                                                      \
    }

/* Channels c to c + k - 1 of a block, which share each load of the taps: for each point the
 * rows outside, the innermost axis inside (as the reference nests N-linear and N-cubic); then
 * the points listed in `fix`. rows, cols and k are constants where this is inlined; nearest
 * copies the pixel it reads. */
#define CHANNELS(T)                                                                            \
    static inline __attribute__((always_inline)) void channels_##T(                           \
        const struct job *j, const struct block *b, int64_t n, int64_t c, int64_t p0,          \
        int count, int rows, int cols, int k) {                                                \
        const int64_t plane = n * j->channels + c, xs = j->plane, ys = j->points;              \
        const T *x = (const T *)j->x + plane * xs;                                             \
        T *y = (T *)j->y + plane * ys + p0;                                                    \
        for (int p = 0; p < count; ++p) {                                                      \
            if (rows * cols == 1) {                                                            \
                const int64_t at = b->row[0][p] + b->col[0][p];                                \
                for (int i = 0; i < k; ++i) y[i * ys + p] = x[i * xs + at];                    \
                continue;                                                                      \
            }                                                                                  \
            T acc[MAX_CHANNELS], in[MAX_CHANNELS];                                             \
            for (int r = 0; r < rows; ++r) {                                                   \
                const T *line = x + b->row[r][p];                                              \
                for (int i = 0; i < k; ++i)                                                    \
                    in[i] = b->col_##T[0][p] * line[i * xs + b->col[0][p]];                    \
                for (int m = 1; m < cols; ++m)                                                 \
                    for (int i = 0; i < k; ++i)                                                \
                        in[i] += b->col_##T[m][p] * line[i * xs + b->col[m][p]];               \
                for (int i = 0; i < k; ++i)                                                    \
                    acc[i] = r ? acc[i] + b->row_##T[r][p] * in[i] : b->row_##T[r][p] * in[i]; \
            }                                                                                  \
            for (int i = 0; i < k; ++i) y[i * ys + p] = acc[i];                                \
        }                                                                                      \
        for (int i = 0; i < k; ++i) fix_##T(b, x + i * xs, y + i * ys, rows, cols);            \
    }

/* Every channel of a block, k at a time, then one at a time. */
#define EVALUATE(T)                                                                            \
    FIX(T)                                                                                     \
    CHANNELS(T)                                                                                \
    static inline __attribute__((always_inline)) void evaluate_##T(                           \
        const struct job *j, const struct block *b, int64_t n, int64_t p0, int count,          \
        int rows, int cols, int k) {                                                           \
        int64_t c = 0;                                                                         \
        for (; c + k <= j->channels; c += k) channels_##T(j, b, n, c, p0, count, rows, cols, k); \
        for (; c < j->channels; ++c) channels_##T(j, b, n, c, p0, count, rows, cols, 1);       \
    }                                                                                          \
    /* The same with the rows, columns and channels at a time of each rank and method as      \
     * constants: four channels share the taps' loads, two for cubic (its 16 or 64 taps      \
     * use the registers up). */                                                              \
    RELVM_VECTORIZE static void evaluate_any_##T(const struct job *j, const struct block *b,   \
                                                 int64_t n, int64_t p0, int count) {           \
        switch (j->rank * 8 + j->taps) {                                                       \
        case 8 + 2: evaluate_##T(j, b, n, p0, count, 1, 2, 4); break;                          \
        case 16 + 2: evaluate_##T(j, b, n, p0, count, 2, 2, 4); break;                         \
        case 24 + 2: evaluate_##T(j, b, n, p0, count, 4, 2, 4); break;                         \
        case 8 + 4: evaluate_##T(j, b, n, p0, count, 1, 4, 4); break;                          \
        case 16 + 4: evaluate_##T(j, b, n, p0, count, 4, 4, 2); break;                         \
        case 24 + 4: evaluate_##T(j, b, n, p0, count, 16, 4, 2); break;                        \
        default: evaluate_##T(j, b, n, p0, count, 1, 1, 4); break;                             \
        }                                                                                      \
    }
/* The block's weights by the data's dtype: row_f32 is row_f. */
#define row_f32 row_f
#define col_f32 col_f
#define row_f64 row_d
#define col_f64 col_d
EVALUATE(f32)
EVALUATE(f64)

/* Blocks [begin, end) of the (batch, blocks of points) range. */
static void sample_blocks(void *ctx, int64_t begin, int64_t end) {
    const struct job *j = ctx;
    const int64_t blocks = (j->points + BLOCK - 1) / BLOCK;
    struct block b;
    for (int64_t r = begin; r < end; ++r) {
        const int64_t n = r / blocks, p0 = (r % blocks) * BLOCK;
        const int count = (int)relvm_min64(BLOCK, j->points - p0);
        block_taps_any(j, n, p0, count, &b);
        if (j->dtype == RELVM_FLOAT32)
            evaluate_any_f32(j, &b, n, p0, count);
        else
            evaluate_any_f64(j, &b, n, p0, count);
    }
}

static int is_float(int dtype) { return dtype == RELVM_FLOAT32 || dtype == RELVM_FLOAT64; }

RELVM_EXPORT int relvm_grid_sample(int dtype, int grid_dtype, int method, int padding,
                                   int align_corners, int rank, int64_t batch, int64_t channels,
                                   const int64_t *in, int64_t points, const void *x,
                                   const void *grid, void *y) {
    if (!is_float(dtype) || !is_float(grid_dtype) || method < RELVM_GRID_NEAREST ||
        method > RELVM_GRID_CUBIC || padding < RELVM_GRID_ZEROS ||
        padding > RELVM_GRID_REFLECTION || rank < 1 || rank > AXES || batch < 0 ||
        channels < 0 || points < 0)
        return RELVM_UNSUPPORTED;
    struct job j = {dtype, grid_dtype == RELVM_FLOAT64, method, padding, align_corners != 0, rank,
                    method == RELVM_GRID_NEAREST ? 1 : method == RELVM_GRID_LINEAR ? 2 : 4,
                    batch, channels, points, 1, {1, 1, 1}, {0, 0, 0}, x, grid, y};
    for (int a = AXES - 1; a >= AXES - rank; --a) {
        const int64_t size = in[a - (AXES - rank)];
        if (size < 0) return RELVM_UNSUPPORTED;
        j.size[a] = size;
        j.stride[a] = j.plane;
        j.plane *= size;
    }
    const int64_t total = batch * channels * points;
    if (total == 0) return RELVM_OK;
    if (j.plane == 0) { /* no pixel to read: every tap reads 0 */
        memset(y, 0, (size_t)total * (size_t)relvm_itemsize[dtype]);
        return RELVM_OK;
    }
    const int64_t blocks = (points + BLOCK - 1) / BLOCK;
    const int64_t per_block = channels * BLOCK * j.taps;
    relvm_parallel_for(batch * blocks, relvm_max64(1, RELVM_GRAIN / relvm_max64(1, per_block)),
                       sample_blocks, &j);
    return RELVM_OK;
}
