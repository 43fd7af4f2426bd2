/* Softmax and normalizations. The reference computes in float64 and rounds once; here sums and
 * statistics are float64 too, while float32 exps use the vectorized vm_expf (1 ulp).
 *
 * An axis with inner == 1 is a contiguous row, the common case (last axis), with loops that
 * vectorize. Otherwise each (outer, inner) position is a column read with stride inner;
 * neighbouring columns share cache lines, so the walk stays cache-friendly (a softmax takes
 * 256 neighbouring columns at once, each pass along their rows, so its exps vectorize too). */
#include <math.h>
#include "relvm_config.h"
#include "internal/types.h"
#include "internal/vmath.h"
#include "norm.h"
#include "threads.h"

struct axis_job {
    int take_log, scale, center, mode;
    int64_t len, inner;
    double eps;
    const char *x, *gamma, *beta, *mean, *var;
    char *y;
};

/* --- softmax -------------------------------------------------------------------------------- */

/* Columns a task of a softmax along a non-last axis takes at once. */
#define SOFTMAX_COLS 256

/* NaN anywhere makes the max NaN, and then the whole row NaN, as in the reference. */
#define SOFTMAX(S, T, EXP)                                                                    \
    static RELVM_VECTORIZE void softmax_row_##S(int take_log, int64_t len, const T *x, T *y) {\
        const T m = vm_max_##S(x, len);                                                       \
        /* exps and their sum in one pass, the sum in vmath.h's lanes */                      \
        double part[VM_LANES] = {0}, sum = 0.0;                                               \
        int64_t i = 0;                                                                        \
        for (; i + VM_LANES <= len; i += VM_LANES)                                            \
            for (int l = 0; l < VM_LANES; ++l) {                                              \
                const T e = EXP(x[i + l] - m);                                                \
                y[i + l] = e;                                                                 \
                part[l] += (double)e;                                                         \
            }                                                                                 \
        for (; i < len; ++i) {                                                                \
            y[i] = EXP(x[i] - m);                                                             \
            sum += (double)y[i];                                                              \
        }                                                                                     \
        for (int l = 0; l < VM_LANES; ++l) sum += part[l];                                    \
        if (take_log) {                                                                       \
            const double shift = (double)m + log(sum);                                        \
            for (int64_t k = 0; k < len; ++k) y[k] = (T)((double)x[k] - shift);               \
            return;                                                                           \
        }                                                                                     \
        const T scale = (T)(1.0 / sum);                                                       \
        for (int64_t k = 0; k < len; ++k) y[k] *= scale;                                      \
    }                                                                                         \
                                                                                              \
    /* Columns [0, cols) (cols <= SOFTMAX_COLS) of a (len, stride) view: each pass runs along  \
     * a row of the columns, which vectorizes (a column at a time read one float per cache    \
     * line and ran its exps one by one: YOLO's softmax over 16 bins of 4 x 2100 boxes took   \
     * 1.4 ms). */                                                                            \
    static RELVM_VECTORIZE void softmax_columns_##S(int take_log, int64_t len, int64_t stride,\
                                                    int64_t cols, const T *x, T *y) {         \
        T m[SOFTMAX_COLS];                                                                    \
        double sum[SOFTMAX_COLS];                                                             \
        for (int64_t c = 0; c < cols; ++c) {                                                  \
            m[c] = (T)-INFINITY;                                                              \
            sum[c] = 0.0;                                                                     \
        }                                                                                     \
        for (int64_t i = 0; i < len; ++i)                                                     \
            for (int64_t c = 0; c < cols; ++c) {                                              \
                const T v = x[i * stride + c];                                                \
                m[c] = (v > m[c] || v != v) ? v : m[c];                                       \
            }                                                                                 \
        for (int64_t i = 0; i < len; ++i)                                                     \
            for (int64_t c = 0; c < cols; ++c) {                                              \
                const T e = EXP(x[i * stride + c] - m[c]);                                    \
                if (!take_log) y[i * stride + c] = e;                                         \
                sum[c] += (double)e;                                                          \
            }                                                                                 \
        if (take_log) {                                                                       \
            for (int64_t c = 0; c < cols; ++c) sum[c] = (double)m[c] + log(sum[c]);           \
            for (int64_t i = 0; i < len; ++i)                                                 \
                for (int64_t c = 0; c < cols; ++c)                                            \
                    y[i * stride + c] = (T)((double)x[i * stride + c] - sum[c]);              \
            return;                                                                           \
        }                                                                                     \
        T scale[SOFTMAX_COLS];                                                                \
        for (int64_t c = 0; c < cols; ++c) scale[c] = (T)(1.0 / sum[c]);                      \
        for (int64_t i = 0; i < len; ++i)                                                     \
            for (int64_t c = 0; c < cols; ++c) y[i * stride + c] *= scale[c];                 \
    }                                                                                         \
                                                                                              \
    /* Item r: row r (inner == 1), or block r % blocks of SOFTMAX_COLS columns of outer       \
     * position r / blocks. */                                                                \
    static void softmax_range_##S(void *ctx, int64_t begin, int64_t end) {                    \
        const struct axis_job *j = ctx;                                                       \
        const T *x = (const T *)j->x;                                                         \
        T *y = (T *)j->y;                                                                     \
        const int64_t blocks = (j->inner + SOFTMAX_COLS - 1) / SOFTMAX_COLS;                  \
        for (int64_t r = begin; r < end; ++r) {                                               \
            if (j->inner == 1) {                                                              \
                softmax_row_##S(j->take_log, j->len, x + r * j->len, y + r * j->len);         \
                continue;                                                                     \
            }                                                                                 \
            const int64_t c0 = r % blocks * SOFTMAX_COLS;                                     \
            const int64_t at = r / blocks * j->len * j->inner + c0;                           \
            softmax_columns_##S(j->take_log, j->len, j->inner,                                \
                                relvm_min64(SOFTMAX_COLS, j->inner - c0), x + at, y + at);    \
        }                                                                                     \
    }

SOFTMAX(f32, f32, vm_expf)
SOFTMAX(f64, f64, exp)

/* Rows or columns of a (outer, len, inner) view: outer * inner of them, each len long. */
static int64_t lines(int64_t outer, int64_t inner) { return outer * inner; }

static int64_t grain_for(int64_t len, int64_t base) {
    return relvm_max64(1, base / relvm_max64(1, len));
}

static int is_float(int dtype) { return dtype == RELVM_FLOAT32 || dtype == RELVM_FLOAT64; }

static int valid_axis(int dtype, int64_t outer, int64_t len, int64_t inner) {
    return is_float(dtype) && outer >= 0 && len >= 0 && inner >= 1;
}

RELVM_EXPORT int relvm_softmax(int dtype, int take_log, int64_t outer, int64_t len, int64_t inner,
                               const void *x, void *y) {
    if (!valid_axis(dtype, outer, len, inner)) return RELVM_UNSUPPORTED;
    struct axis_job j = {.take_log = take_log, .len = len, .inner = inner, .x = x, .y = y};
    const int64_t blocks = (inner + SOFTMAX_COLS - 1) / SOFTMAX_COLS;
    const int64_t cols = inner == 1 ? 1 : relvm_min64(inner, SOFTMAX_COLS);
    relvm_parallel_for(inner == 1 ? outer : outer * blocks,
                       grain_for(len * cols, RELVM_GRAIN_HEAVY),
                       dtype == RELVM_FLOAT32 ? softmax_range_f32 : softmax_range_f64, &j);
    return RELVM_OK;
}

/* --- layer_norm ------------------------------------------------------------------------------ */

/* Two passes (mean, then the mean squared deviation) in float64, as the reference; a
 * contiguous line sums in vmath.h's lanes. */
#define LAYER_NORM(S, T)                                                                      \
    static RELVM_VECTORIZE void layer_norm_line_##S(const struct axis_job *j, int64_t stride, \
                                                    const T *x, T *y) {                       \
        const T *gamma = (const T *)j->gamma, *beta = (const T *)j->beta;                     \
        const int64_t len = j->len;                                                           \
        double mean = 0.0, var = 0.0;                                                         \
        if (stride == 1) {                                                                    \
            mean = vm_sum_##S(x, len) / (double)len;                                          \
            var = vm_sum_sq_dev_##S(x, len, mean);                                            \
        } else {                                                                              \
            for (int64_t i = 0; i < len; ++i) mean += (double)x[i * stride];                  \
            mean /= (double)len;                                                              \
            for (int64_t i = 0; i < len; ++i) {                                               \
                const double d = (double)x[i * stride] - mean;                                \
                var += d * d;                                                                 \
            }                                                                                 \
        }                                                                                     \
        const double rstd = 1.0 / sqrt(var / (double)len + j->eps);                           \
        for (int64_t i = 0; i < len; ++i) {                                                   \
            double v = ((double)x[i * stride] - mean) * rstd;                                 \
            if (j->scale) v *= (double)gamma[i];                                              \
            if (j->center) v += (double)beta[i];                                              \
            y[i * stride] = (T)v;                                                             \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    static void layer_norm_range_##S(void *ctx, int64_t begin, int64_t end) {                 \
        const struct axis_job *j = ctx;                                                       \
        for (int64_t r = begin; r < end; ++r) {                                               \
            const int64_t at = r / j->inner * j->len * j->inner + r % j->inner;               \
            layer_norm_line_##S(j, j->inner, (const T *)j->x + at, (T *)j->y + at);            \
        }                                                                                     \
    }

LAYER_NORM(f32, f32)
LAYER_NORM(f64, f64)

RELVM_EXPORT int relvm_layer_norm(int dtype, int64_t outer, int64_t len, int64_t inner,
                                  const void *x, const void *gamma, const void *beta, void *y,
                                  double eps, int scale, int center) {
    if (!valid_axis(dtype, outer, len, inner)) return RELVM_UNSUPPORTED;
    if (len == 0) return RELVM_OK; /* no elements to write */
    struct axis_job j = {.scale = scale, .center = center, .len = len, .inner = inner,
                         .eps = eps, .x = x, .gamma = gamma, .beta = beta, .y = y};
    relvm_parallel_for(lines(outer, inner), grain_for(len, RELVM_GRAIN),
                       dtype == RELVM_FLOAT32 ? layer_norm_range_f32 : layer_norm_range_f64, &j);
    return RELVM_OK;
}

/* --- rms_norm -------------------------------------------------------------------------------- */

/* One pass for the sum of squares (float64, in lanes), one to write. */
#define RMS_NORM(S, T)                                                                        \
    static RELVM_VECTORIZE void rms_norm_run_##S(int64_t n, double rms, const T *x,           \
                                                 const T *gamma, T *y) {                      \
        for (int64_t i = 0; i < n; ++i) y[i] = (T)((double)x[i] * rms * (double)gamma[i]);    \
    }                                                                                         \
                                                                                              \
    static void rms_norm_range_##S(void *ctx, int64_t begin, int64_t end) {                   \
        const struct axis_job *j = ctx;                                                       \
        const int64_t len = j->len, glen = j->inner;                                          \
        for (int64_t r = begin; r < end; ++r) {                                               \
            const T *x = (const T *)j->x + r * len;                                           \
            T *y = (T *)j->y + r * len;                                                       \
            const double rms = 1.0 / sqrt(vm_sum_sq_dev_##S(x, len, 0.0) / (double)len       \
                                          + j->eps);                                          \
            for (int64_t at = 0; at < len; at += glen)                                        \
                rms_norm_run_##S(glen, rms, x + at, (const T *)j->gamma, y + at);             \
        }                                                                                     \
    }

RMS_NORM(f32, f32)
RMS_NORM(f64, f64)

RELVM_EXPORT int relvm_rms_norm(int dtype, int64_t rows, int64_t len, int64_t gamma_len,
                                const void *x, const void *gamma, void *y, double eps) {
    if (!valid_axis(dtype, rows, len, 1)) return RELVM_UNSUPPORTED;
    if (len == 0 || rows == 0) return RELVM_OK;
    if (gamma_len < 1 || len % gamma_len) return RELVM_UNSUPPORTED;
    /* inner carries gamma's length: rms rows are always contiguous */
    struct axis_job j = {.len = len, .inner = gamma_len, .eps = eps, .x = x, .gamma = gamma,
                         .y = y};
    relvm_parallel_for(rows, grain_for(len, RELVM_GRAIN),
                       dtype == RELVM_FLOAT32 ? rms_norm_range_f32 : rms_norm_range_f64, &j);
    return RELVM_OK;
}

/* --- axis_norm: Lp and mean-variance ------------------------------------------------------- */

/* The statistics in one pass over the line (two for the variance), then one to write. */
#define AXIS_NORM(S, T)                                                                       \
    static void axis_norm_line_##S(const struct axis_job *j, int64_t stride, const T *x,      \
                                   T *y) {                                                    \
        const int64_t len = j->len;                                                           \
        double shift = 0.0, scale;                                                            \
        if (j->mode == 0) { /* mean and variance */                                           \
            double mean = 0.0, var = 0.0;                                                     \
            if (stride == 1) { /* a contiguous row: sums in vmath.h's lanes */                \
                mean = vm_sum_##S(x, len) / (double)len;                                      \
                var = vm_sum_sq_dev_##S(x, len, mean);                                        \
            } else {                                                                          \
                for (int64_t i = 0; i < len; ++i) mean += (double)x[i * stride];              \
                mean /= (double)len;                                                          \
                for (int64_t i = 0; i < len; ++i) {                                           \
                    const double d = (double)x[i * stride] - mean;                            \
                    var += d * d;                                                             \
                }                                                                             \
            }                                                                                 \
            shift = mean;                                                                     \
            scale = 1.0 / sqrt(var / (double)len + j->eps);                                   \
        } else {                                                                              \
            double norm = 0.0;                                                                \
            if (stride == 1 && j->mode == 2) {                                                \
                norm = vm_sum_sq_dev_##S(x, len, 0.0);                                        \
            } else {                                                                          \
                for (int64_t i = 0; i < len; ++i) {                                           \
                    const double v = (double)x[i * stride];                                   \
                    norm += j->mode == 1 ? fabs(v) : v * v;                                   \
                }                                                                             \
            }                                                                                 \
            if (j->mode == 2) norm = sqrt(norm);                                              \
            scale = norm == 0.0 ? 0.0 : 1.0 / norm;                                           \
        }                                                                                     \
        for (int64_t i = 0; i < len; ++i)                                                     \
            y[i * stride] = (T)(((double)x[i * stride] - shift) * scale);                     \
    }                                                                                         \
                                                                                              \
    static void axis_norm_range_##S(void *ctx, int64_t begin, int64_t end) {                  \
        const struct axis_job *j = ctx;                                                       \
        for (int64_t r = begin; r < end; ++r) {                                               \
            const int64_t at = r / j->inner * j->len * j->inner + r % j->inner;               \
            axis_norm_line_##S(j, j->inner, (const T *)j->x + at, (T *)j->y + at);            \
        }                                                                                     \
    }

AXIS_NORM(f32, f32)
AXIS_NORM(f64, f64)

RELVM_EXPORT int relvm_axis_norm(int dtype, int mode, int64_t outer, int64_t len, int64_t inner,
                                 const void *x, void *y, double eps) {
    if (!valid_axis(dtype, outer, len, inner) || mode < 0 || mode > 2) return RELVM_UNSUPPORTED;
    if (len == 0) return RELVM_OK;
    struct axis_job j = {.mode = mode, .len = len, .inner = inner, .eps = eps, .x = x,
                         .y = y};
    relvm_parallel_for(lines(outer, inner), grain_for(len, RELVM_GRAIN),
                       dtype == RELVM_FLOAT32 ? axis_norm_range_f32 : axis_norm_range_f64, &j);
    return RELVM_OK;
}

/* --- group_norm ------------------------------------------------------------------------------ */

/* A group is one contiguous run of (channels / groups) * spatial elements: its statistics in
 * two passes over the run (as layer_norm's), then one affine map per channel while writing. */
struct group_job {
    int64_t groups, per_group, spatial;
    double eps;
    int scale, center;
    const char *x, *gamma, *beta;
    char *y;
};

#define GROUP_NORM(S, T)                                                                      \
    static RELVM_VECTORIZE void group_norm_run_##S(int64_t n, double a, double b, const T *x, \
                                                   T *y) {                                    \
        for (int64_t i = 0; i < n; ++i) y[i] = (T)((double)x[i] * a + b);                     \
    }                                                                                         \
                                                                                              \
    static void group_norm_range_##S(void *ctx, int64_t begin, int64_t end) {                 \
        const struct group_job *j = ctx;                                                      \
        const T *gamma = (const T *)j->gamma, *beta = (const T *)j->beta;                     \
        const int64_t len = j->per_group * j->spatial;                                        \
        for (int64_t r = begin; r < end; ++r) {                                               \
            const T *x = (const T *)j->x + r * len;                                           \
            T *y = (T *)j->y + r * len;                                                       \
            const double mean = vm_sum_##S(x, len) / (double)len;                             \
            const double rstd = 1.0 / sqrt(vm_sum_sq_dev_##S(x, len, mean) / (double)len      \
                                           + j->eps);                                         \
            const int64_t first = (r % j->groups) * j->per_group;                             \
            for (int64_t c = 0; c < j->per_group; ++c) {                                      \
                const double a = j->scale ? rstd * (double)gamma[first + c] : rstd;           \
                const double b = (j->center ? (double)beta[first + c] : 0.0) - mean * a;      \
                group_norm_run_##S(j->spatial, a, b, x + c * j->spatial, y + c * j->spatial); \
            }                                                                                 \
        }                                                                                     \
    }

GROUP_NORM(f32, f32)
GROUP_NORM(f64, f64)

RELVM_EXPORT int relvm_group_norm(int dtype, int64_t batch, int64_t groups, int64_t channels,
                                  int64_t spatial, const void *x, const void *gamma,
                                  const void *beta, void *y, double eps, int scale, int center) {
    if (!is_float(dtype) || batch < 0 || groups < 1 || channels < 0 || spatial < 0
        || channels % groups)
        return RELVM_UNSUPPORTED;
    if (channels == 0 || spatial == 0) return RELVM_OK;
    struct group_job j = {.groups = groups, .per_group = channels / groups, .spatial = spatial,
                          .eps = eps, .scale = scale, .center = center, .x = x, .gamma = gamma,
                          .beta = beta, .y = y};
    relvm_parallel_for(batch * groups, grain_for(j.per_group * spatial, RELVM_GRAIN),
                       dtype == RELVM_FLOAT32 ? group_norm_range_f32 : group_norm_range_f64, &j);
    return RELVM_OK;
}

/* --- batch_norm ------------------------------------------------------------------------------ */

/* Run r is channel r % len of outer index r / len: inner contiguous elements, one affine map. */
#define BATCH_NORM(S, T)                                                                      \
    static RELVM_VECTORIZE void batch_norm_run_##S(int64_t inner, double mean, double scale,  \
                                                   double shift, const T *x, T *y) {          \
        for (int64_t i = 0; i < inner; ++i) y[i] = (T)(((double)x[i] - mean) * scale + shift); \
    }                                                                                         \
                                                                                              \
    static void batch_norm_range_##S(void *ctx, int64_t begin, int64_t end) {                 \
        const struct axis_job *j = ctx;                                                       \
        const T *gamma = (const T *)j->gamma, *beta = (const T *)j->beta;                     \
        const T *mean = (const T *)j->mean, *var = (const T *)j->var;                         \
        for (int64_t r = begin; r < end; ++r) {                                               \
            const int64_t c = r % j->len;                                                     \
            double scale = 1.0 / sqrt((double)var[c] + j->eps);                               \
            if (j->scale) scale *= (double)gamma[c];                                          \
            const double shift = j->center ? (double)beta[c] : 0.0;                           \
            batch_norm_run_##S(j->inner, (double)mean[c], scale, shift,                       \
                               (const T *)j->x + r * j->inner, (T *)j->y + r * j->inner);     \
        }                                                                                     \
    }

BATCH_NORM(f32, f32)
BATCH_NORM(f64, f64)

RELVM_EXPORT int relvm_batch_norm(int dtype, int64_t outer, int64_t len, int64_t inner,
                                  const void *x, const void *gamma, const void *beta,
                                  const void *mean, const void *var, void *y, double eps,
                                  int scale, int center) {
    if (!valid_axis(dtype, outer, len, inner)) return RELVM_UNSUPPORTED;
    struct axis_job j = {.scale = scale, .center = center, .len = len, .inner = inner,
                         .eps = eps, .x = x, .gamma = gamma, .beta = beta, .mean = mean,
                         .var = var, .y = y};
    relvm_parallel_for(outer * len, grain_for(inner, RELVM_GRAIN),
                       dtype == RELVM_FLOAT32 ? batch_norm_range_f32 : batch_norm_range_f64, &j);
    return RELVM_OK;
}
