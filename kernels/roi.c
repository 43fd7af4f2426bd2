/* RoiAlign and MaxRoiPool (roi.h). ONNX Runtime's CPU kernels step for step, in the data's
 * dtype: a sample's position, which pixels it reads and its weights are decided by roundings
 * (the truncation of a position, a comparison with the image's edge), so no product is
 * contracted into a sum here (a fused multiply-add rounds once where ONNX Runtime rounds
 * twice), and sums and maxima go in ONNX Runtime's order.
 *
 * RoiAlign's bilinear weights are separable: each roi's samples are computed once per axis
 * (the rows a sample reads and their weights, along y; the columns, along x). From those, a
 * roi of at most TAPS_MAX samples tabulates each sample's four pixels and weights once for all
 * its channels, as ONNX Runtime's pre_calc does; a larger one (an adaptive grid over a large
 * roi, which would hold millions of samples) forms the same products as each channel reads
 * them, so its tables grow with out_h * grid_h + out_w * grid_w, not their product. */
#include "roi.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal/types.h"
#include "relvm_config.h"
#include "threads.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* --- RoiAlign ------------------------------------------------------------------------------ */

struct roi_align_job {
    int dtype, mode_max, half_pixel;
    int64_t n, channels, height, width, out_h, out_w, sampling_ratio, max_grid;
    float spatial_scale;
    const void *x, *roi;
    const int64_t *batch;
    void *y;
    int64_t table; /* samples per axis table that every roi fits in */
    int failed;    /* RELVM_NO_MEMORY in some task (atomic) */
};

/* Samples of a roi whose four taps each (positions and weights) are tabulated once for all
 * channels, as ONNX Runtime's pre_calc does; a roi of more samples (an adaptive grid over a
 * large roi) forms each sample's weights from its axes' as each channel reads them. */
#define TAPS_MAX 4096

/* std::max(a, b) as ONNX Runtime's max mode calls it: b if a < b, else a (NaN a wins). */
#define STD_MAX(a, b) ((a) < (b) ? (b) : (a))

/* One axis' samples of every bin: the pixels read before and after, their weights (h for the
 * one before, l after); empty: the sample reads nothing. */
#define ROI_ALIGN(T, SFX, CEIL)                                                                \
    struct sample_##SFX {                                                                      \
        int64_t low, high;                                                                     \
        T l, h;                                                                                \
        int empty;                                                                             \
    };                                                                                         \
    struct taps_##SFX { /* a sample's four pixels and weights (0 and 0 for an empty one) */    \
        int64_t pos[4];                                                                        \
        T w[4];                                                                                \
    };                                                                                         \
                                                                                               \
    /* One bin's value from its samples' four weighted pixels t[0..3] (ONNX Runtime's order). */ \
    static inline T pool_##SFX(int mode_max, T acc, int first, const T *t) {                   \
        if (mode_max) {                                                                        \
            const T m = STD_MAX(STD_MAX(STD_MAX(t[0], t[1]), t[2]), t[3]);                     \
            return first ? m : STD_MAX(acc, m);                                                \
        }                                                                                      \
        return acc + (((t[0] + t[1]) + t[2]) + t[3]);                                          \
    }                                                                                          \
                                                                                               \
    /* A roi's geometry along x (axis 0) and y (axis 1): start, bin size, roi size. */         \
    static void geometry_##SFX(const struct roi_align_job *j, int64_t k, T *start, T *bin,     \
                               T *size) {                                                      \
        const T *r = (const T *)j->roi + 4 * k;                                                \
        const T scale = (T)j->spatial_scale, offset = j->half_pixel ? (T)0.5 : (T)0;          \
        const int64_t out[2] = {j->out_w, j->out_h};                                           \
        for (int a = 0; a < 2; ++a) {                                                          \
            start[a] = r[a] * scale - offset;                                                  \
            T s = (r[a + 2] * scale - offset) - start[a];                                      \
            if (!j->half_pixel) s = STD_MAX(s, (T)1);                                          \
            size[a] = s;                                                                       \
            bin[a] = s / (T)out[a];                                                            \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    /* Samples per bin along an axis of roi size s and out bins; -1: not finite or too many. */ \
    static int64_t grid_##SFX(const struct roi_align_job *j, T s, int64_t out) {               \
        if (j->sampling_ratio > 0) return j->sampling_ratio;                                   \
        const T g = CEIL(s / (T)out);                                                          \
        if (!isfinite(g) || g > (T)j->max_grid) return -1;                                    \
        return g > 0 ? (int64_t)g : 0;                                                         \
    }                                                                                          \
                                                                                               \
    static void axis_##SFX(T start, T bin, int64_t out, int64_t grid, int64_t size,            \
                           struct sample_##SFX *s) {                                           \
        for (int64_t p = 0; p < out; ++p)                                                      \
            for (int64_t i = 0; i < grid; ++i, ++s) {                                          \
                T v = (start + (T)p * bin) + (T)((float)i + 0.5f) * bin / (T)grid;             \
                s->empty = !((double)v >= -1.0 && (double)v <= (double)size);                  \
                if (s->empty || v <= 0) v = 0;                                                 \
                s->low = (int64_t)v;                                                           \
                if (s->low >= size - 1) {                                                      \
                    s->low = s->high = size - 1;                                               \
                    v = (T)s->low;                                                             \
                } else {                                                                       \
                    s->high = s->low + 1;                                                      \
                }                                                                              \
                s->l = v - (T)s->low;                                                          \
                s->h = (T)1 - s->l;                                                            \
            }                                                                                  \
    }                                                                                          \
                                                                                               \
    /* Every sample's taps from the axes' tables, bin by bin, row-major within a bin. */      \
    static void tabulate_##SFX(const struct sample_##SFX *ys, const struct sample_##SFX *xs,   \
                               int64_t oh, int64_t ow, int64_t gh, int64_t gw, int64_t width,  \
                               struct taps_##SFX *t) {                                         \
        for (int64_t ph = 0; ph < oh; ++ph)                                                    \
            for (int64_t pw = 0; pw < ow; ++pw)                                                \
                for (int64_t iy = 0; iy < gh; ++iy)                                            \
                    for (int64_t ix = 0; ix < gw; ++ix, ++t) {                                 \
                        const struct sample_##SFX *sy = ys + ph * gh + iy;                     \
                        const struct sample_##SFX *sx = xs + pw * gw + ix;                     \
                        if (sy->empty | sx->empty) {                                           \
                            memset(t, 0, sizeof *t);                                           \
                            continue;                                                          \
                        }                                                                      \
                        const int64_t r0 = sy->low * width, r1 = sy->high * width;             \
                        t->pos[0] = r0 + sx->low;                                              \
                        t->pos[1] = r0 + sx->high;                                             \
                        t->pos[2] = r1 + sx->low;                                              \
                        t->pos[3] = r1 + sx->high;                                             \
                        t->w[0] = sy->h * sx->h;                                               \
                        t->w[1] = sy->h * sx->l;                                               \
                        t->w[2] = sy->l * sx->h;                                               \
                        t->w[3] = sy->l * sx->l;                                               \
                    }                                                                          \
    }                                                                                          \
                                                                                               \
    /* Roi k over every channel: its axes' tables in ys and xs, its taps in taps when they    \
     * fit (TAPS_MAX). */                                                                      \
    static void roi_##SFX(const struct roi_align_job *j, int64_t k, struct sample_##SFX *ys,   \
                          struct sample_##SFX *xs, struct taps_##SFX *taps) {                  \
        const int64_t oh = j->out_h, ow = j->out_w, width = j->width, plane = j->height * width; \
        T start[2], bin[2], size[2];                                                           \
        geometry_##SFX(j, k, start, bin, size);                                                \
        const int64_t gh = grid_##SFX(j, size[1], oh), gw = grid_##SFX(j, size[0], ow);        \
        T *y = (T *)j->y + k * j->channels * oh * ow;                                          \
        if (gh <= 0 || gw <= 0) { /* no samples (checked before: never -1 here) */             \
            memset(y, 0, (size_t)(j->channels * oh * ow) * sizeof(T));                         \
            return;                                                                            \
        }                                                                                      \
        axis_##SFX(start[1], bin[1], oh, gh, j->height, ys);                                   \
        axis_##SFX(start[0], bin[0], ow, gw, width, xs);                                       \
        const int64_t samples = gh * gw, mode_max = j->mode_max;                               \
        const T count = (T)samples;                                                            \
        const T *x = (const T *)j->x + j->batch[k] * j->channels * plane;                      \
        if (oh * ow * samples <= TAPS_MAX) {                                                   \
            tabulate_##SFX(ys, xs, oh, ow, gh, gw, width, taps);                               \
            for (int64_t c = 0; c < j->channels; ++c, x += plane) {                            \
                const struct taps_##SFX *t = taps;                                             \
                for (int64_t b = 0; b < oh * ow; ++b, ++y) {                                   \
                    T acc = 0;                                                                 \
                    for (int64_t s = 0; s < samples; ++s, ++t) {                               \
                        const T v[4] = {t->w[0] * x[t->pos[0]], t->w[1] * x[t->pos[1]],        \
                                        t->w[2] * x[t->pos[2]], t->w[3] * x[t->pos[3]]};       \
                        acc = pool_##SFX(mode_max, acc, s == 0, v);                            \
                    }                                                                          \
                    *y = mode_max ? acc : acc / count;                                         \
                }                                                                              \
            }                                                                                  \
            return;                                                                            \
        }                                                                                      \
        for (int64_t c = 0; c < j->channels; ++c, x += plane) {                                \
            for (int64_t ph = 0; ph < oh; ++ph)                                                \
                for (int64_t pw = 0; pw < ow; ++pw, ++y) {                                     \
                    T acc = 0;                                                                 \
                    for (int64_t iy = 0; iy < gh; ++iy) {                                      \
                        const struct sample_##SFX *sy = ys + ph * gh + iy;                     \
                        const T *r0 = x + sy->low * width, *r1 = x + sy->high * width;         \
                        for (int64_t ix = 0; ix < gw; ++ix) {                                  \
                            const struct sample_##SFX *sx = xs + pw * gw + ix;                 \
                            T v[4];                                                            \
                            if (sy->empty | sx->empty) { /* weights 0 at position 0 */         \
                                v[0] = v[1] = v[2] = v[3] = (T)0 * x[0];                       \
                            } else {                                                           \
                                v[0] = (sy->h * sx->h) * r0[sx->low];                          \
                                v[1] = (sy->h * sx->l) * r0[sx->high];                         \
                                v[2] = (sy->l * sx->h) * r1[sx->low];                          \
                                v[3] = (sy->l * sx->l) * r1[sx->high];                         \
                            }                                                                  \
                            acc = pool_##SFX(mode_max, acc, (iy | ix) == 0, v);                \
                        }                                                                      \
                    }                                                                          \
                    *y = mode_max ? acc : acc / count;                                         \
                }                                                                              \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    /* Rois [begin, end), with tables for the largest roi's grids. */                          \
    static void rois_##SFX(void *ctx, int64_t begin, int64_t end) {                            \
        struct roi_align_job *j = ctx;                                                         \
        struct sample_##SFX *ys = malloc((size_t)j->table * sizeof *ys),                       \
                            *xs = malloc((size_t)j->table * sizeof *xs);                       \
        struct taps_##SFX *taps = malloc(TAPS_MAX * sizeof *taps);                             \
        if (ys && xs && taps)                                                                  \
            for (int64_t k = begin; k < end; ++k) roi_##SFX(j, k, ys, xs, taps);               \
        else                                                                                   \
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);                                 \
        free(ys);                                                                              \
        free(xs);                                                                              \
        free(taps);                                                                            \
    }                                                                                          \
                                                                                               \
    /* Every roi's grids checked; the largest table in *table. -1 or the first bad roi. */     \
    static int64_t check_grids_##SFX(const struct roi_align_job *j, int64_t rois,              \
                                     int64_t *table) {                                         \
        *table = 1;                                                                            \
        for (int64_t k = 0; k < rois; ++k) {                                                   \
            T start[2], bin[2], size[2];                                                       \
            geometry_##SFX(j, k, start, bin, size);                                            \
            const int64_t gh = grid_##SFX(j, size[1], j->out_h);                               \
            if (gh < 0) return k;                                                              \
            const int64_t gw = grid_##SFX(j, size[0], j->out_w);                               \
            if (gw < 0) return k;                                                              \
            *table = relvm_max64(*table, relvm_max64(gh * j->out_h, gw * j->out_w));           \
        }                                                                                      \
        return -1;                                                                             \
    }

ROI_ALIGN(f32, f32, ceilf)
ROI_ALIGN(f64, f64, ceil)

RELVM_EXPORT int relvm_roi_align(int dtype, int mode_max, int half_pixel, int64_t n,
                                 int64_t channels, int64_t height, int64_t width, int64_t rois,
                                 int64_t out_h, int64_t out_w, int64_t sampling_ratio,
                                 float spatial_scale, int64_t max_grid, const void *x,
                                 const void *roi, const int64_t *batch, void *y,
                                 int64_t *bad_roi) {
    if ((dtype != RELVM_FLOAT32 && dtype != RELVM_FLOAT64) || n < 0 || channels < 0 ||
        height < 0 || width < 0 || rois < 0 || out_h < 0 || out_w < 0 || sampling_ratio < 0 ||
        max_grid < 1)
        return RELVM_UNSUPPORTED;
    for (int64_t k = 0; k < rois; ++k)
        if (batch[k] < 0 || batch[k] >= n) {
            *bad_roi = k;
            return RELVM_BAD_INDEX;
        }
    const int64_t total = rois * channels * out_h * out_w;
    if (total == 0) return RELVM_OK;
    if (height == 0 || width == 0) { /* no pixel to read */
        memset(y, 0, (size_t)total * (size_t)relvm_itemsize[dtype]);
        return RELVM_OK;
    }
    struct roi_align_job j = {dtype,  mode_max != 0, half_pixel != 0, n,     channels,
                              height, width,         out_h,           out_w, sampling_ratio,
                              max_grid, spatial_scale, x,             roi,   batch,
                              y,      0,             0};
    const int f64 = dtype == RELVM_FLOAT64;
    const int64_t bad = f64 ? check_grids_f64(&j, rois, &j.table)
                            : check_grids_f32(&j, rois, &j.table);
    if (bad >= 0) {
        *bad_roi = bad;
        return RELVM_TOO_LARGE;
    }
    /* A roi costs about 20 operations a sample of each output element (4 samples a bin on
     * a typical adaptive grid). */
    const int64_t per_roi = relvm_max64(1, channels * out_h * out_w * 4);
    relvm_parallel_for(rois, relvm_max64(1, RELVM_GRAIN_HEAVY / per_roi), f64 ? rois_f64 : rois_f32,
                       &j);
    return __atomic_load_n(&j.failed, __ATOMIC_RELAXED) ? RELVM_NO_MEMORY : RELVM_OK;
}

/* --- MaxRoiPool ---------------------------------------------------------------------------- */

struct max_roi_pool_job {
    int64_t channels, height, width, pooled_h, pooled_w, clamp;
    float spatial_scale;
    const float *x, *roi;
    float *y;
    int failed;
};

/* round(v * scale) in float32, halves away from 0; clamped to +-clamp, NaN to clamp. */
static int64_t rounded_corner(float v, float scale, int64_t clamp) {
    const float s = v * scale;
    if (s != s) return clamp;
    const float r = roundf(s);
    if (r > (float)clamp) return clamp;
    if (r < -(float)clamp) return -clamp;
    return (int64_t)r;
}

/* Bins [start, end) of one axis: the roi from lo to hi over `size` pixels, in `bins` bins. */
static void pool_bins(int64_t lo, int64_t hi, int64_t bins, int64_t size, int64_t *start,
                      int64_t *end) {
    const float bin = (float)relvm_max64(hi - lo + 1, 1) / (float)bins;
    for (int64_t p = 0; p < bins; ++p) {
        start[p] = relvm_min64(relvm_max64((int64_t)floorf((float)p * bin) + lo, 0), size);
        end[p] = relvm_min64(relvm_max64((int64_t)ceilf((float)(p + 1) * bin) + lo, 0), size);
    }
}

static void max_roi_pool_one(const struct max_roi_pool_job *j, int64_t k, int64_t *bins) {
    const float *r = j->roi + 5 * k;
    const int64_t ph = j->pooled_h, pw = j->pooled_w, width = j->width;
    int64_t *hs = bins, *he = bins + ph, *ws = he + ph, *we = ws + pw;
    pool_bins(rounded_corner(r[2], j->spatial_scale, j->clamp),
              rounded_corner(r[4], j->spatial_scale, j->clamp), ph, j->height, hs, he);
    pool_bins(rounded_corner(r[1], j->spatial_scale, j->clamp),
              rounded_corner(r[3], j->spatial_scale, j->clamp), pw, width, ws, we);
    const float *x = j->x + (int64_t)truncf(r[0]) * j->channels * j->height * width;
    float *y = j->y + k * j->channels * ph * pw;
    for (int64_t c = 0; c < j->channels; ++c, x += j->height * width)
        for (int64_t i = 0; i < ph; ++i)
            for (int64_t q = 0; q < pw; ++q, ++y) {
                if (he[i] <= hs[i] || we[q] <= ws[q]) {
                    *y = 0.0f;
                    continue;
                }
                float best = -3.40282347e+38f; /* the lowest float */
                for (int64_t h = hs[i]; h < he[i]; ++h)
                    for (int64_t w = ws[q]; w < we[q]; ++w) {
                        const float v = x[h * width + w];
                        best = v < best ? best : v;
                    }
                *y = best;
            }
}

static void max_roi_pool_rois(void *ctx, int64_t begin, int64_t end) {
    struct max_roi_pool_job *j = ctx;
    int64_t *bins = malloc((size_t)(2 * (j->pooled_h + j->pooled_w)) * sizeof *bins);
    if (!bins) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t k = begin; k < end; ++k) max_roi_pool_one(j, k, bins);
    free(bins);
}

RELVM_EXPORT int relvm_max_roi_pool(int64_t n, int64_t channels, int64_t height, int64_t width,
                                    int64_t rois, int64_t pooled_h, int64_t pooled_w,
                                    float spatial_scale, int64_t clamp, const float *x,
                                    const float *roi, float *y, int64_t *bad_roi) {
    if (n < 0 || channels < 0 || height < 0 || width < 0 || rois < 0 || pooled_h < 1 ||
        pooled_w < 1 || clamp < 1 || clamp > ((int64_t)1 << 40))
        return RELVM_UNSUPPORTED;
    for (int64_t k = 0; k < rois; ++k) {
        const float b = roi[5 * k];
        if (!(isfinite(b) && truncf(b) >= 0.0f && truncf(b) < (float)n)) {
            *bad_roi = k;
            return RELVM_BAD_INDEX;
        }
    }
    if (rois * channels == 0) return RELVM_OK;
    struct max_roi_pool_job j = {channels, height, width, pooled_h, pooled_w, clamp,
                                 spatial_scale, x, roi, y, 0};
    const int64_t per_roi = relvm_max64(1, channels * pooled_h * pooled_w * 4);
    relvm_parallel_for(rois, relvm_max64(1, RELVM_GRAIN / per_roi), max_roi_pool_rois, &j);
    return __atomic_load_n(&j.failed, __ATOMIC_RELAXED) ? RELVM_NO_MEMORY : RELVM_OK;
}
