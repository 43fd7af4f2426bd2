/* image.resize2d. Two passes, as the reference: rows into a float64 buffer (planes, oh, w),
 * then columns into the output, so each output rounds once. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "relvm_config.h"
#include "internal/types.h"
#include "resize.h"
#include "threads.h"

static inline double load_as_double(int dtype, const void *x, int64_t i) {
    switch (dtype) {
    case RELVM_FLOAT32: return ((const f32 *)x)[i];
    case RELVM_FLOAT64: return ((const f64 *)x)[i];
    case RELVM_INT64: return (double)((const i64 *)x)[i];
    case RELVM_INT32: return ((const i32 *)x)[i];
    case RELVM_INT8: return ((const i8 *)x)[i];
    default: return ((const u8 *)x)[i];
    }
}

/* NaN (a NaN fill value) has no integer: 0, rather than C's undefined conversion. */
static inline double clamp_round(double v, double lo, double hi) {
    if (v != v) return 0.0;
    v = rint(v); /* half to even, as np.round */
    return v < lo ? lo : (v > hi ? hi : v);
}

static inline void store_from_double(int dtype, void *y, int64_t i, double v) {
    switch (dtype) {
    case RELVM_FLOAT32: ((f32 *)y)[i] = (f32)v; return;
    case RELVM_FLOAT64: ((f64 *)y)[i] = v; return;
    case RELVM_INT64: /* past +-2^63 the double is the clamped bound */
        ((i64 *)y)[i] = v >= 9223372036854775807.0 ? INT64_MAX
                        : (i64)clamp_round(v, -9223372036854775808.0, 9223372036854775807.0);
        return;
    case RELVM_INT32: ((i32 *)y)[i] = (i32)clamp_round(v, INT32_MIN, INT32_MAX); return;
    case RELVM_INT8: ((i8 *)y)[i] = (i8)clamp_round(v, INT8_MIN, INT8_MAX); return;
    default: ((u8 *)y)[i] = (u8)clamp_round(v, 0, UINT8_MAX); return;
    }
}

/* One output position of an axis from a strided line of doubles-to-be. */
static inline double resample(const struct relvm_resize_axis *a, int64_t o, double fill,
                              int dtype, const void *line, int64_t base, int64_t stride) {
    if (a->outside && a->outside[o]) return fill;
    double v = 0.0;
    for (int64_t k = 0; k < a->taps; ++k) {
        const int64_t at = base + a->index[o * a->taps + k] * stride;
        v += a->weight[o * a->taps + k] * load_as_double(dtype, line, at);
    }
    return v;
}

struct resize_job {
    int dtype, out_dtype;
    int64_t h, w, oh, ow;
    const struct relvm_resize_axis *rows, *cols;
    double fill;
    const void *x;
    double *mid; /* (planes, oh, w) */
    void *y;
};

/* Pass 1, row r = (plane, oy) of mid: every column from the input rows the taps name. */
static void rows_pass(void *ctx, int64_t begin, int64_t end) {
    const struct resize_job *j = ctx;
    for (int64_t r = begin; r < end; ++r) {
        const int64_t p = r / j->oh, oy = r % j->oh;
        double *out = j->mid + r * j->w;
        for (int64_t x = 0; x < j->w; ++x) {
            const int64_t base = p * j->h * j->w + x;
            out[x] = j->rows->taps ? resample(j->rows, oy, j->fill, j->dtype, j->x, base, j->w)
                                   : load_as_double(j->dtype, j->x, base + oy * j->w);
        }
    }
}

/* Pass 2, row r = (plane, oy) of y: every output column from mid's row. */
static void cols_pass(void *ctx, int64_t begin, int64_t end) {
    const struct resize_job *j = ctx;
    for (int64_t r = begin; r < end; ++r) {
        const double *in = j->mid + r * j->w;
        for (int64_t ox = 0; ox < j->ow; ++ox) {
            const double v = j->cols->taps
                ? resample(j->cols, ox, j->fill, RELVM_FLOAT64, in, 0, 1) : in[ox];
            store_from_double(j->out_dtype, j->y, r * j->ow + ox, v);
        }
    }
}

/* Whether an axis only selects: each output position copies one input (one tap of weight 1,
 * never the fill), or the axis is copied as it is. */
static int selects(const struct relvm_resize_axis *a, int64_t n) {
    if (!a->taps) return 1;
    if (a->taps != 1) return 0;
    for (int64_t o = 0; o < n; ++o)
        if (a->weight[o] != 1.0 || (a->outside && a->outside[o])) return 0;
    return 1;
}

/* Where output position o of a selecting axis reads. */
static inline int64_t selected(const struct relvm_resize_axis *a, int64_t o) {
    return a->taps ? a->index[o] : o;
}

/* Nearest-neighbour resampling (both axes select) where the dtype stays and every value is
 * exact in float64 (so the two passes would give it back bit for bit): a gather, row by row,
 * with no float64 buffer -- an FPN's 2x upsample ran ~6 ns an element through the passes. */
struct gather_job {
    int64_t h, w, oh, ow;
    const struct relvm_resize_axis *rows, *cols;
    const char *x;
    char *y;
};

#define GATHER(NAME, T)                                                                       \
    static void NAME(void *ctx, int64_t begin, int64_t end) {                                 \
        const struct gather_job *j = ctx;                                                     \
        for (int64_t r = begin; r < end; ++r) {                                               \
            const int64_t p = r / j->oh, oy = r % j->oh;                                      \
            const T *in = (const T *)j->x + (p * j->h + selected(j->rows, oy)) * j->w;        \
            T *out = (T *)j->y + r * j->ow;                                                   \
            if (!j->cols->taps) {                                                             \
                for (int64_t ox = 0; ox < j->ow; ++ox) out[ox] = in[ox];                      \
                continue;                                                                     \
            }                                                                                 \
            const int64_t *ix = j->cols->index;                                               \
            for (int64_t ox = 0; ox < j->ow; ++ox) out[ox] = in[ix[ox]];                      \
        }                                                                                     \
    }
GATHER(gather_1, uint8_t)
GATHER(gather_4, uint32_t)
GATHER(gather_8, uint64_t)

static int numeric(int dtype) {
    return dtype == RELVM_FLOAT32 || dtype == RELVM_FLOAT64 || dtype == RELVM_INT64 ||
           dtype == RELVM_INT32 || dtype == RELVM_INT8 || dtype == RELVM_UINT8;
}

RELVM_EXPORT int relvm_resize2d(int dtype, int out_dtype, int64_t planes, int64_t h, int64_t w,
                                int64_t oh, int64_t ow, const struct relvm_resize_axis *rows,
                                const struct relvm_resize_axis *cols, double fill,
                                const void *x, void *y) {
    if (!numeric(dtype) || !numeric(out_dtype) || planes < 0 || h < 0 || w < 0 || oh < 0 ||
        ow < 0 || rows->taps < 0 || cols->taps < 0)
        return RELVM_UNSUPPORTED;
    if (planes * oh * ow == 0) return RELVM_OK;
    if ((!rows->taps && oh != h) || (!cols->taps && ow != w)) return RELVM_UNSUPPORTED;
    const int exact = dtype == RELVM_FLOAT32 || dtype == RELVM_FLOAT64 || dtype == RELVM_INT32 ||
                      dtype == RELVM_INT8 || dtype == RELVM_UINT8; /* int64: not in float64 */
    if (exact && out_dtype == dtype && selects(rows, oh) && selects(cols, ow)) {
        struct gather_job g = {h, w, oh, ow, rows, cols, x, y};
        const int size = dtype == RELVM_FLOAT64 ? 8 : dtype == RELVM_FLOAT32 ||
                                                          dtype == RELVM_INT32 ? 4 : 1;
        relvm_parallel_for(planes * oh, relvm_max64(1, RELVM_GRAIN / relvm_max64(1, ow)),
                           size == 8 ? gather_8 : size == 4 ? gather_4 : gather_1, &g);
        return RELVM_OK;
    }
    double *mid = malloc((size_t)(planes * oh * (w > 0 ? w : 1)) * sizeof(double));
    if (!mid) return RELVM_NO_MEMORY;
    struct resize_job j = {dtype, out_dtype, h, w, oh, ow, rows, cols, fill, x, mid, y};
    const int64_t grain = relvm_max64(1, RELVM_GRAIN / relvm_max64(1, w + ow));
    relvm_parallel_for(planes * oh, grain, rows_pass, &j);
    relvm_parallel_for(planes * oh, grain, cols_pass, &j);
    free(mid);
    return RELVM_OK;
}
