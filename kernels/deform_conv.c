/* nn.deform_conv2d. Per image and group of output channels: the taps of every output pixel are
 * sampled bilinearly at their offset positions (zeros outside the image) and weighed by the
 * mask into a column matrix (c / groups * kh * kw rows, oh * ow columns, float64), which the
 * group's weights then multiply. Images run on the thread pool. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "relvm_config.h"
#include "deform_conv.h"
#include "threads.h"

struct deform_job {
    int f64;
    const struct relvm_deform_shape *s;
    const void *x, *w, *offset, *mask;
    void *y;
    int failed;
};

static double load(int f64, const void *p, int64_t i) {
    return f64 ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

/* The plane at (py, px), bilinear, pixels outside reading 0; NaN positions give NaN. */
static double sample(int f64, const void *x, int64_t plane, int64_t h, int64_t w, double py,
                     double px) {
    if (isnan(py) || isnan(px)) return NAN;
    if (!(py > -1.0 && py < (double)h && px > -1.0 && px < (double)w)) return 0.0;
    double fy = floor(py), fx = floor(px);
    int64_t y0 = (int64_t)fy, x0 = (int64_t)fx;
    double ty = py - fy, tx = px - fx, sum = 0.0;
    for (int dy = 0; dy < 2; ++dy) {
        int64_t yy = y0 + dy;
        if (yy < 0 || yy >= h) continue;
        double wy = dy ? ty : 1.0 - ty;
        for (int dx = 0; dx < 2; ++dx) {
            int64_t xx = x0 + dx;
            if (xx < 0 || xx >= w) continue;
            sum += wy * (dx ? tx : 1.0 - tx) * load(f64, x, plane + yy * w + xx);
        }
    }
    return sum;
}

static void deform_images(void *ctx, int64_t begin, int64_t end) {
    struct deform_job *j = ctx;
    const struct relvm_deform_shape *s = j->s;
    int64_t cg = s->c / s->groups, ocg = s->oc / s->groups, taps = s->kh * s->kw;
    int64_t pixels = s->oh * s->ow, rows = cg * taps, per_og = s->c / s->offset_groups;
    double *cols = malloc((size_t)(rows * pixels > 0 ? rows * pixels : 1) * sizeof(double));
    if (!cols) {
        j->failed = 1;
        return;
    }
    for (int64_t b = begin; b < end; ++b) {
        for (int64_t g = 0; g < s->groups; ++g) {
            for (int64_t ci = 0; ci < cg; ++ci) {
                int64_t ch = g * cg + ci, og = ch / per_og;
                int64_t plane = (b * s->c + ch) * s->h * s->w;
                for (int64_t t = 0; t < taps; ++t) {
                    int64_t i = t / s->kw, k = t % s->kw;
                    int64_t oy_ch = ((b * s->offset_groups + og) * taps + t) * 2;
                    int64_t m_ch = (b * s->offset_groups + og) * taps + t;
                    double *row = cols + (ci * taps + t) * pixels;
                    for (int64_t p = 0; p < pixels; ++p) {
                        int64_t oy = p / s->ow, ox = p % s->ow;
                        /* In double: products of large strides or dilations never wrap. */
                        double py = (double)oy * (double)s->sh - (double)s->pt +
                                    (double)i * (double)s->dh +
                                    load(j->f64, j->offset, oy_ch * pixels + p);
                        double px = (double)ox * (double)s->sw - (double)s->pl +
                                    (double)k * (double)s->dw +
                                    load(j->f64, j->offset, (oy_ch + 1) * pixels + p);
                        double m = s->has_mask ? load(j->f64, j->mask, m_ch * pixels + p)
                                               : load(j->f64, j->mask, 0);
                        row[p] = sample(j->f64, j->x, plane, s->h, s->w, py, px) * m;
                    }
                }
            }
            for (int64_t o = 0; o < ocg; ++o) {
                int64_t oc = g * ocg + o;
                for (int64_t p = 0; p < pixels; ++p) {
                    double sum = 0.0;
                    for (int64_t r = 0; r < rows; ++r)
                        sum += load(j->f64, j->w, oc * rows + r) * cols[r * pixels + p];
                    int64_t at = (b * s->oc + oc) * pixels + p;
                    if (j->f64) ((double *)j->y)[at] = sum;
                    else ((float *)j->y)[at] = (float)sum;
                }
            }
        }
    }
    free(cols);
}

RELVM_EXPORT int relvm_deform_conv2d(int dtype, const struct relvm_deform_shape *s,
                                     const void *x, const void *w, const void *offset,
                                     const void *mask, void *y) {
    if ((dtype != RELVM_FLOAT32 && dtype != RELVM_FLOAT64) || s->groups < 1 ||
        s->offset_groups < 1 || s->c % s->groups || s->oc % s->groups ||
        s->c % s->offset_groups || s->n < 0 || s->oh < 0 || s->ow < 0 || s->kh < 0 ||
        s->kw < 0)
        return RELVM_UNSUPPORTED;
    struct deform_job j = {dtype == RELVM_FLOAT64, s, x, w, offset, mask, y, 0};
    if (s->n > 0 && s->oc > 0) relvm_parallel_for(s->n, 1, deform_images, &j);
    return j.failed ? RELVM_NO_MEMORY : RELVM_OK;
}
