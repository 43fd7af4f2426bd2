/* image.grid_sample. The output points are cut into blocks; a block's taps (per axis: which
 * pixels each point reads, with which weights) are computed once from the grid and used for
 * every channel, so the grid is read and its positions computed once per point, not once per
 * point and channel.
 *
 * Positions are rounded op by op as relvm's reference (and ONNX's) computes them: floor, the
 * rounding of nearest and the reflections decide which pixel a point reads, so a fused
 * multiply-add that rounded once where the reference rounds twice could read another pixel.
 * Hence no contraction in this file. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "relvm_config.h"
#include "internal/types.h"
#include "grid_sample.h"
#include "threads.h"

#define BLOCK 64   /* output points whose taps are computed together */
#define AXES 3     /* data of fewer spatial axes has leading axes of one tap of weight 1 */
#define MAX_TAPS 4 /* per axis: nearest 1, linear 2, cubic 4 */

/* How a point samples: every tap reads a pixel, some read 0 (zeros padding), or NaN. */
enum { INSIDE, EDGE, NOT_A_NUMBER };

struct job {
    int dtype, grid_f64, method, padding, align, rank, taps;
    int64_t batch, channels, points, plane;
    int64_t size[AXES], stride[AXES]; /* the data's axes, the innermost last */
    const void *x, *grid;
    void *y;
};

struct block {
    int64_t off[AXES][MAX_TAPS][BLOCK]; /* element offset in the plane of each axis' tap */
    double w[AXES][MAX_TAPS][BLOCK];
    uint8_t outside[AXES][BLOCK];       /* bit t: tap t of the axis reads 0 */
    uint8_t how[BLOCK];
};

/* Pixel position of normalized coordinate g on an axis of size pixels, in the grid's dtype. */
static float position_f32(float g, int64_t size, int align) {
    return align ? (g + 1.0f) / 2.0f * (float)(size - 1) : ((g + 1.0f) * (float)size - 1.0f) / 2.0f;
}

static double position_f64(double g, int64_t size, int align) {
    return align ? (g + 1.0) / 2.0 * (double)(size - 1) : ((g + 1.0) * (double)size - 1.0) / 2.0;
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
static void cubic_weights(double t, double *w) {
    const double a = -0.75, s = 1.0 - t, t1 = t + 1.0, s1 = s + 1.0;
    w[0] = ((a * t1 - 5.0 * a) * t1 + 8.0 * a) * t1 - 4.0 * a;
    w[1] = ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0;
    w[2] = ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0;
    w[3] = ((a * s1 - 5.0 * a) * s1 + 8.0 * a) * s1 - 4.0 * a;
}

/* The taps of axis a for position x (already in the grid's dtype): offsets and weights of point
 * p of the block. Returns the bits of the taps that read 0, or -1 for a NaN position. */
static int axis_taps(const struct job *j, int a, double x, struct block *b, int p) {
    const int64_t size = j->size[a];
    const double lo = j->align ? 0.0 : -0.5, hi = j->align ? (double)size - 1.0 : size - 0.5;
    if (j->method == RELVM_GRID_NEAREST) x = nearbyint(x);
    if (x < lo || x > hi) {
        if (j->padding == RELVM_GRID_BORDER) {
            x = x < 0.0 ? 0.0 : ((double)size - 1.0 < x ? (double)size - 1.0 : x);
        } else if (j->padding == RELVM_GRID_REFLECTION) {
            x = reflect(x, lo, hi);
            if (!j->grid_f64) x = (float)x;
        }
    }
    if (x != x) return -1;
    /* A few pixels past the axis every tap reads 0 (zeros padding; other paddings are inside):
     * clamping there keeps the integer conversions defined, for infinite positions too. */
    x = x < -5.0 ? -5.0 : ((double)size + 4.0 < x ? (double)size + 4.0 : x);
    int64_t first;
    double *w = &b->w[a][0][p];
    if (j->method == RELVM_GRID_NEAREST) {
        first = (int64_t)x;
        w[0] = 1.0;
    } else {
        const double f = floor(x), t = x - f;
        first = (int64_t)f;
        if (j->method == RELVM_GRID_LINEAR) {
            w[0] = 1.0 - t;
            w[BLOCK] = t;
        } else {
            double c[4];
            cubic_weights(t, c);
            for (int k = 0; k < 4; ++k) w[k * BLOCK] = c[k];
            first -= 1;
        }
    }
    int outside = 0;
    for (int k = 0; k < j->taps; ++k) {
        int64_t i = first + k;
        if (i < 0 || i >= size) {
            if (j->padding == RELVM_GRID_ZEROS) {
                outside |= 1 << k;
                i = 0;
            } else if (j->padding == RELVM_GRID_BORDER) {
                i = i < 0 ? 0 : size - 1;
            } else {
                i = (int64_t)reflect((double)i, lo, hi);
            }
        }
        b->off[a][k][p] = i * j->stride[a];
    }
    return outside;
}

/* The taps of the block of `count` points from point p0 of batch entry n. */
static void block_taps(const struct job *j, int64_t n, int64_t p0, int count, struct block *b) {
    const int lead = AXES - j->rank;
    for (int a = 0; a < lead; ++a)
        for (int p = 0; p < count; ++p) {
            b->off[a][0][p] = 0;
            b->w[a][0][p] = 1.0;
            b->outside[a][p] = 0;
        }
    for (int p = 0; p < count; ++p) {
        const int64_t at = (n * j->points + p0 + p) * j->rank;
        int how = INSIDE;
        for (int a = lead; a < AXES; ++a) {
            const int64_t c = at + (AXES - 1 - a); /* the grid gives the innermost axis first */
            const double x = j->grid_f64
                ? position_f64(((const f64 *)j->grid)[c], j->size[a], j->align)
                : position_f32(((const f32 *)j->grid)[c], j->size[a], j->align);
            const int outside = axis_taps(j, a, x, b, p);
            if (outside < 0) {
                how = NOT_A_NUMBER;
                break;
            }
            b->outside[a][p] = (uint8_t)outside;
            if (outside) how = EDGE;
        }
        b->how[p] = (uint8_t)how;
    }
}

/* One point of one plane: the taps' weighted sum, the innermost axis first (N-linear, N-cubic
 * as the reference nests them); with `edge`, taps that read 0 are left out. n0, n1, n2 are the
 * taps of each axis, constants where this is inlined. */
#define SAMPLE(T)                                                                              \
    static inline __attribute__((always_inline)) double sample_##T(                           \
        const T *x, const struct block *b, int p, int n0, int n1, int n2, int edge) {          \
        double acc = 0.0;                                                                      \
        for (int i = 0; i < n0; ++i) {                                                         \
            if (edge && (b->outside[0][p] >> i & 1)) continue;                                \
            double mid = 0.0;                                                                  \
            for (int k = 0; k < n1; ++k) {                                                     \
                if (edge && (b->outside[1][p] >> k & 1)) continue;                            \
                const T *row = x + b->off[0][i][p] + b->off[1][k][p];                          \
                double in = 0.0;                                                               \
                for (int m = 0; m < n2; ++m) {                                                 \
                    if (edge && (b->outside[2][p] >> m & 1)) continue;                        \
                    in += b->w[2][m][p] * (double)row[b->off[2][m][p]];                        \
                }                                                                              \
                mid += b->w[1][k][p] * in;                                                     \
            }                                                                                  \
            acc += b->w[0][i][p] * mid;                                                        \
        }                                                                                      \
        return acc;                                                                            \
    }

/* Every channel of a block; nearest copies the pixel it reads. */
#define EVALUATE(T)                                                                            \
    SAMPLE(T)                                                                                  \
    static inline __attribute__((always_inline)) void evaluate_##T(                           \
        const struct job *j, const struct block *b, int64_t n, int64_t p0, int count, int n0,  \
        int n1, int n2) {                                                                      \
        for (int64_t c = 0; c < j->channels; ++c) {                                            \
            const int64_t plane = n * j->channels + c;                                         \
            const T *x = (const T *)j->x + plane * j->plane;                                   \
            T *y = (T *)j->y + plane * j->points + p0;                                         \
            for (int p = 0; p < count; ++p) {                                                  \
                if (b->how[p] == NOT_A_NUMBER) {                                               \
                    y[p] = (T)NAN;                                                             \
                } else if (n0 * n1 * n2 == 1) {                                                \
                    const int out = b->outside[0][p] | b->outside[1][p] | b->outside[2][p];    \
                    y[p] = out ? (T)0 : x[b->off[0][0][p] + b->off[1][0][p] + b->off[2][0][p]]; \
                } else if (b->how[p] == INSIDE) {                                              \
                    y[p] = (T)sample_##T(x, b, p, n0, n1, n2, 0);                              \
                } else {                                                                       \
                    y[p] = (T)sample_##T(x, b, p, n0, n1, n2, 1);                              \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    /* The same with the taps per axis as constants, for each rank and method. */              \
    static void evaluate_any_##T(const struct job *j, const struct block *b, int64_t n,        \
                                 int64_t p0, int count) {                                      \
        const int t = j->taps;                                                                 \
        switch (j->rank * 8 + t) {                                                             \
        case 8 + 1: case 16 + 1: case 24 + 1: evaluate_##T(j, b, n, p0, count, 1, 1, 1); break; \
        case 8 + 2: evaluate_##T(j, b, n, p0, count, 1, 1, 2); break;                          \
        case 16 + 2: evaluate_##T(j, b, n, p0, count, 1, 2, 2); break;                         \
        case 24 + 2: evaluate_##T(j, b, n, p0, count, 2, 2, 2); break;                         \
        case 8 + 4: evaluate_##T(j, b, n, p0, count, 1, 1, 4); break;                          \
        case 16 + 4: evaluate_##T(j, b, n, p0, count, 1, 4, 4); break;                         \
        default: evaluate_##T(j, b, n, p0, count, 4, 4, 4); break;                             \
        }                                                                                      \
    }
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
        block_taps(j, n, p0, count, &b);
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
    struct job j = {dtype, grid_dtype == RELVM_FLOAT64, method, padding, align_corners != 0,
                    rank, method == RELVM_GRID_NEAREST ? 1 : method == RELVM_GRID_LINEAR ? 2 : 4,
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
