/* conv2d_transpose: OpenBLAS's sgemm gives every input pixel's contribution through every tap
 * (W^T x), then col2im adds them into the output. */
#include <string.h>
#include "relvm_config.h"
#include "blas.h"
#include "conv.h"
#include "internal/conv_shared.h"
#include "internal/types.h"
#include "threads.h"

/* Outputs ox in [*lo, *hi) read inside [0, size) at ox * stride + offset; the rest read padding. */
static inline void inside_range(int64_t offset, int64_t stride, int64_t size, int64_t count,
                                int64_t *lo, int64_t *hi) {
    int64_t first = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
    int64_t end = size - offset <= 0 ? 0 : (size - offset + stride - 1) / stride;
    if (first > count) first = count;
    if (end > count) end = count;
    if (end < first) end = first;
    *lo = first;
    *hi = end;
}

struct col2im {
    const struct relvm_conv2d_shape *s;
    const float *col; /* (opg * kh * kw) x (h * w) */
    float *y;         /* the group's first output channel */
};

/* Output channel o gathers its rows (o, i, j) of col: channels never share a write. */
static void col2im_channels(void *ctx, int64_t begin, int64_t end) {
    const struct col2im *j = ctx;
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t plane = s->h * s->w;
    for (int64_t o = begin; o < end; ++o) {
        float *out = j->y + o * s->oh * s->ow;
        memset(out, 0, (size_t)(s->oh * s->ow) * sizeof(float));
        for (int64_t i = 0; i < s->kh; ++i) {
            int64_t ylo, yhi;
            inside_range(i * s->dh - s->pt, s->sh, s->oh, s->h, &ylo, &yhi);
            for (int64_t jj = 0; jj < s->kw; ++jj) {
                const int64_t offset = jj * s->dw - s->pl;
                int64_t xlo, xhi;
                inside_range(offset, s->sw, s->ow, s->w, &xlo, &xhi);
                const float *col = j->col + ((o * s->kh + i) * s->kw + jj) * plane;
                for (int64_t y = ylo; y < yhi; ++y) {
                    float *row = out + (y * s->sh + i * s->dh - s->pt) * s->ow + offset;
                    const float *src = col + y * s->w;
                    if (s->sw == 1) {
                        for (int64_t x = xlo; x < xhi; ++x) row[x] += src[x];
                    } else {
                        for (int64_t x = xlo; x < xhi; ++x) row[x * s->sw] += src[x];
                    }
                }
            }
        }
    }
}

static int conv_transpose_f32(const struct relvm_conv2d_shape *s, const float *x,
                              const float *w, float *y) {
    const int64_t icg = s->c / s->groups, ocg = s->oc / s->groups;
    const int64_t rows = ocg * s->kh * s->kw, plane = s->h * s->w;
    float *col = relvm_conv_scratch_floats((size_t)(rows * plane));
    if (!col) return RELVM_NO_MEMORY;
    for (int64_t n = 0; n < s->n; ++n) {
        for (int64_t g = 0; g < s->groups; ++g) {
            /* col = W_g^T x_g: W_g is stored icg x rows. */
            relvm_sgemm_batch(1, 0, 1, rows, plane, icg, w + g * icg * rows, 0,
                              x + (n * s->c + g * icg) * plane, 0, col);
            struct col2im j = {s, col, y + (n * s->oc + g * ocg) * s->oh * s->ow};
            const int64_t work = relvm_max64(1, s->kh * s->kw * plane);
            relvm_parallel_for(ocg, relvm_max64(1, RELVM_GRAIN / work), col2im_channels, &j);
        }
    }
    return RELVM_OK;
}

RELVM_EXPORT int relvm_conv2d_transpose(int dtype, const struct relvm_conv2d_shape *s,
                                        const void *x, const void *w, void *y) {
    if (dtype != RELVM_FLOAT32 || !valid_shape(s)) return RELVM_UNSUPPORTED;
    const int64_t total = s->n * s->oc * s->oh * s->ow;
    if (total == 0) return RELVM_OK;
    if (s->c == 0 || s->h * s->w == 0) { /* nothing to scatter: all zeros */
        memset(y, 0, (size_t)total * sizeof(float));
        return RELVM_OK;
    }
    if (!relvm_blas_ready()) return RELVM_NO_BLAS;
    const int64_t rows = s->oc / s->groups * s->kh * s->kw;
    if (rows > INT32_MAX || s->h * s->w > INT32_MAX || s->c > INT32_MAX) return RELVM_TOO_LARGE;
    return conv_transpose_f32(s, x, w, y);
}

/* --- conv3d_transpose: a direct gather, one output channel plane per task ------------------- */

struct conv3d_t_job {
    int f64;
    const struct relvm_conv3d_transpose_shape *s;
    const void *x, *w;
    void *y;
};

static double load3(int f64, const void *p, int64_t i) {
    return f64 ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

/* The taps t of one axis that read an input inside it for output o: their input indices. */
static int axis_taps(const struct relvm_conv3d_transpose_shape *s, int a, int64_t o,
                     int64_t *taps, int64_t *inputs) {
    int count = 0;
    for (int64_t t = 0; t < s->k[a]; ++t) {
        int64_t at = o + s->pad[a] - t * s->dilation[a];
        if (at < 0 || at % s->stride[a]) continue;
        int64_t i = at / s->stride[a];
        if (i >= s->in[a]) continue;
        taps[count] = t;
        inputs[count++] = i;
    }
    return count;
}

static void conv3d_t_planes(void *ctx, int64_t begin, int64_t end) {
    const struct conv3d_t_job *j = ctx;
    const struct relvm_conv3d_transpose_shape *s = j->s;
    int64_t cg = s->c / s->groups, ocg = s->oc / s->groups;
    int64_t in_plane = s->in[0] * s->in[1] * s->in[2], taps = s->k[0] * s->k[1] * s->k[2];
    int64_t out_plane = s->out[0] * s->out[1] * s->out[2];
    int64_t td[64], id[64], th[64], ih[64], tw[64], iw[64];
    for (int64_t plane = begin; plane < end; ++plane) {
        int64_t b = plane / s->oc, oc = plane % s->oc, g = oc / ocg, o = oc % ocg;
        int64_t p = 0;
        for (int64_t od = 0; od < s->out[0]; ++od) {
            int nd = axis_taps(s, 0, od, td, id);
            for (int64_t oh = 0; oh < s->out[1]; ++oh) {
                int nh = axis_taps(s, 1, oh, th, ih);
                for (int64_t ow = 0; ow < s->out[2]; ++ow, ++p) {
                    int nw = axis_taps(s, 2, ow, tw, iw);
                    double sum = 0.0;
                    for (int64_t ci = 0; ci < cg; ++ci) {
                        int64_t c = g * cg + ci;
                        int64_t xb = (b * s->c + c) * in_plane, wb = (c * ocg + o) * taps;
                        for (int u = 0; u < nd; ++u)
                            for (int v = 0; v < nh; ++v)
                                for (int q = 0; q < nw; ++q) {
                                    int64_t xi = (id[u] * s->in[1] + ih[v]) * s->in[2] + iw[q];
                                    int64_t wi = (td[u] * s->k[1] + th[v]) * s->k[2] + tw[q];
                                    sum += load3(j->f64, j->x, xb + xi) *
                                           load3(j->f64, j->w, wb + wi);
                                }
                    }
                    int64_t at = plane * out_plane + p;
                    if (j->f64) ((double *)j->y)[at] = sum;
                    else ((float *)j->y)[at] = (float)sum;
                }
            }
        }
    }
}

RELVM_EXPORT int relvm_conv3d_transpose(int dtype, const struct relvm_conv3d_transpose_shape *s,
                                        const void *x, const void *w, void *y) {
    if ((dtype != RELVM_FLOAT32 && dtype != RELVM_FLOAT64) || s->groups < 1 || s->n < 0 ||
        s->c < 0 || s->oc < 0 || s->c % s->groups || s->oc % s->groups)
        return RELVM_UNSUPPORTED;
    for (int a = 0; a < 3; ++a)
        if (s->k[a] < 0 || s->k[a] > 64 || s->stride[a] < 1 || s->dilation[a] < 1 ||
            s->pad[a] < 0 || s->in[a] < 0 || s->out[a] < 0)
            return RELVM_UNSUPPORTED;
    struct conv3d_t_job j = {dtype == RELVM_FLOAT64, s, x, w, y};
    int64_t planes = s->n * s->oc;
    if (planes > 0) relvm_parallel_for(planes, 1, conv3d_t_planes, &j);
    return RELVM_OK;
}
