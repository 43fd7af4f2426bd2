/* Pooling. Semantics follow relvm/ops/nn.py: padding is never a max candidate, averages
 * accumulate in float64 and round once, ceil_mode windows may run past the bottom padding
 * (those taps count for nothing, even with count_include_pad). */
#include <math.h>
#include "relvm_config.h"
#include "internal/types.h"
#include "internal/vmath.h"
#include "pool.h"
#include "threads.h"

/* Taps i in [lo, hi) of window `o` land inside [0, size) at o * stride + i * dilation - pad. */
static inline void taps_inside(int64_t o, int64_t stride, int64_t dilation, int64_t pad,
                               int64_t kernel, int64_t size, int64_t *lo, int64_t *hi) {
    const int64_t start = o * stride - pad;
    int64_t first = start >= 0 ? 0 : (-start + dilation - 1) / dilation;
    int64_t end = size - start <= 0 ? 0 : (size - start + dilation - 1) / dilation;
    *lo = first < kernel ? first : kernel;
    *hi = end < kernel ? end : kernel;
    if (*hi < *lo) *hi = *lo;
}

/* Taps of window `o` inside the padded extent [0, padded), in padded coordinates. */
static inline int64_t taps_in_padded(int64_t o, int64_t stride, int64_t dilation,
                                     int64_t kernel, int64_t padded) {
    const int64_t start = o * stride;
    if (start >= padded) return 0;
    const int64_t n = (padded - start + dilation - 1) / dilation;
    return n < kernel ? n : kernel;
}

struct pool_job {
    const struct relvm_pool2d_shape *s;
    const char *x;
    char *y;
};

#define POOLS(S, T)                                                                           \
    static void max_plane_##S(const struct relvm_pool2d_shape *s, const T *x, T *y) {         \
        for (int64_t oy = 0; oy < s->oh; ++oy) {                                              \
            int64_t ilo, ihi;                                                                 \
            taps_inside(oy, s->sh, s->dh, s->pt, s->kh, s->h, &ilo, &ihi);                    \
            for (int64_t ox = 0; ox < s->ow; ++ox) {                                          \
                int64_t jlo, jhi;                                                             \
                taps_inside(ox, s->sw, s->dw, s->pl, s->kw, s->w, &jlo, &jhi);                \
                T m = (T)-INFINITY;                                                           \
                for (int64_t i = ilo; i < ihi; ++i) {                                         \
                    const T *row = x + (oy * s->sh + i * s->dh - s->pt) * s->w;               \
                    for (int64_t j = jlo; j < jhi; ++j) {                                     \
                        const T v = row[ox * s->sw + j * s->dw - s->pl];                      \
                        m = (v > m || v != v) ? v : m; /* once NaN, m stays NaN */            \
                    }                                                                         \
                }                                                                             \
                y[oy * s->ow + ox] = m;                                                       \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    static void avg_plane_##S(const struct relvm_pool2d_shape *s, const T *x, T *y) {         \
        for (int64_t oy = 0; oy < s->oh; ++oy) {                                              \
            int64_t ilo, ihi;                                                                 \
            taps_inside(oy, s->sh, s->dh, s->pt, s->kh, s->h, &ilo, &ihi);                    \
            const int64_t rows = s->count_include_pad                                         \
                ? taps_in_padded(oy, s->sh, s->dh, s->kh, s->pt + s->h + s->pb) : ihi - ilo;  \
            for (int64_t ox = 0; ox < s->ow; ++ox) {                                          \
                int64_t jlo, jhi;                                                             \
                taps_inside(ox, s->sw, s->dw, s->pl, s->kw, s->w, &jlo, &jhi);                \
                const int64_t cols = s->count_include_pad                                     \
                    ? taps_in_padded(ox, s->sw, s->dw, s->kw, s->pl + s->w + s->pr)           \
                    : jhi - jlo;                                                              \
                double total = 0.0;                                                           \
                for (int64_t i = ilo; i < ihi; ++i) {                                         \
                    const T *row = x + (oy * s->sh + i * s->dh - s->pt) * s->w;               \
                    for (int64_t j = jlo; j < jhi; ++j)                                       \
                        total += (double)row[ox * s->sw + j * s->dw - s->pl];                 \
                }                                                                             \
                const int inside = ihi > ilo && jhi > jlo;                                    \
                y[oy * s->ow + ox] = inside ? (T)(total / (double)(rows * cols)) : (T)0;      \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    static void max_planes_##S(void *ctx, int64_t begin, int64_t end) {                      \
        const struct pool_job *j = ctx;                                                       \
        const int64_t in = j->s->h * j->s->w, out = j->s->oh * j->s->ow;                      \
        for (int64_t p = begin; p < end; ++p)                                                 \
            max_plane_##S(j->s, (const T *)j->x + p * in, (T *)j->y + p * out);               \
    }                                                                                         \
                                                                                              \
    static void avg_planes_##S(void *ctx, int64_t begin, int64_t end) {                       \
        const struct pool_job *j = ctx;                                                       \
        const int64_t in = j->s->h * j->s->w, out = j->s->oh * j->s->ow;                      \
        for (int64_t p = begin; p < end; ++p)                                                 \
            avg_plane_##S(j->s, (const T *)j->x + p * in, (T *)j->y + p * out);               \
    }                                                                                         \
                                                                                              \
    static RELVM_VECTORIZE void global_##S(int is_max, int64_t size, const T *x, T *y) {      \
        if (is_max) {                                                                         \
            *y = vm_max_##S(x, size);                                                         \
            return;                                                                           \
        }                                                                                     \
        *y = (T)(vm_sum_##S(x, size) / (double)size); /* 0 / 0: NaN, the empty mean */        \
    }

POOLS(f32, f32)
POOLS(f64, f64)

static int valid_pool(int dtype, const struct relvm_pool2d_shape *s) {
    return (dtype == RELVM_FLOAT32 || dtype == RELVM_FLOAT64) && s->planes >= 0 && s->h >= 0 &&
           s->w >= 0 && s->oh >= 0 && s->ow >= 0 && s->kh >= 1 && s->kw >= 1 && s->sh >= 1 &&
           s->sw >= 1 && s->dh >= 1 && s->dw >= 1 && s->pt >= 0 && s->pl >= 0 && s->pb >= 0 &&
           s->pr >= 0;
}

static int run_pool(int dtype, const struct relvm_pool2d_shape *s, const void *x, void *y,
                    relvm_range_fn f32_fn, relvm_range_fn f64_fn) {
    if (!valid_pool(dtype, s)) return RELVM_UNSUPPORTED;
    struct pool_job j = {s, x, y};
    const int64_t work = relvm_max64(1, s->oh * s->ow * s->kh * s->kw);
    relvm_parallel_for(s->planes, relvm_max64(1, RELVM_GRAIN / work),
                       dtype == RELVM_FLOAT32 ? f32_fn : f64_fn, &j);
    return RELVM_OK;
}

RELVM_EXPORT int relvm_max_pool2d(int dtype, const struct relvm_pool2d_shape *s, const void *x,
                                  void *y) {
    return run_pool(dtype, s, x, y, max_planes_f32, max_planes_f64);
}

RELVM_EXPORT int relvm_avg_pool2d(int dtype, const struct relvm_pool2d_shape *s, const void *x,
                                  void *y) {
    return run_pool(dtype, s, x, y, avg_planes_f32, avg_planes_f64);
}

struct global_job {
    int dtype, is_max;
    int64_t size;
    const char *x;
    char *y;
};

static void global_planes(void *ctx, int64_t begin, int64_t end) {
    const struct global_job *j = ctx;
    for (int64_t p = begin; p < end; ++p) {
        if (j->dtype == RELVM_FLOAT32)
            global_f32(j->is_max, j->size, (const f32 *)j->x + p * j->size, (f32 *)j->y + p);
        else
            global_f64(j->is_max, j->size, (const f64 *)j->x + p * j->size, (f64 *)j->y + p);
    }
}

RELVM_EXPORT int relvm_global_pool2d(int dtype, int is_max, int64_t planes, int64_t size,
                                     const void *x, void *y) {
    if ((dtype != RELVM_FLOAT32 && dtype != RELVM_FLOAT64) || planes < 0 || size < 0)
        return RELVM_UNSUPPORTED;
    struct global_job j = {dtype, is_max, size, x, y};
    relvm_parallel_for(planes, relvm_max64(1, RELVM_GRAIN / relvm_max64(1, size)),
                       global_planes, &j);
    return RELVM_OK;
}
