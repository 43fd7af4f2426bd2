/* Depthwise conv2d (one input channel per group): too little reuse for a GEMM, so a direct loop
 * over each output plane, register-blocked: eight output pixels of a row are one vector that
 * takes every tap of the window before it is stored.
 *
 * Each input plane is copied once into a zero-bordered scratch plane (per thread) whose rows
 * are split into `sw` column phases (columns c with c % sw == 0, then 1, ...), as the GEMM path
 * does: tap (i, j) of output column ox reads padded column ox * sw + j * dw, which is phase
 * (j * dw) % sw at index ox + (j * dw) / sw, so the eight pixels of a vector read eight
 * consecutive floats whatever the stride. Rows are padded to whole vectors, so no loop has a
 * remainder: a row is computed in vectors into a small buffer, then its ow pixels copied out.
 * A finished plane takes its bias, relu and post (a fused kernel's block form) while it is in
 * cache. */
#include <string.h>
#include "relvm_config.h"
#include "conv.h"
#include "internal/conv_shared.h"
#include "internal/types.h"
#include "threads.h"

#define DW_VW 8 /* floats per vector */
#define DW_U 4  /* vectors computed together */

typedef float dw_vec __attribute__((vector_size(DW_VW * 4)));
typedef float dw_uvec __attribute__((vector_size(DW_VW * 4), aligned(4)));
typedef int32_t dw_mask __attribute__((vector_size(DW_VW * 4)));

/* The padded plane: `rows` rows of `sw` phases of `phase` floats each. */
struct dw_geometry {
    int64_t rows, phase, row, vectors; /* vectors: of DW_VW outputs, per output row */
};

static struct dw_geometry dw_geometry(const struct relvm_conv2d_shape *s) {
    struct dw_geometry g;
    g.vectors = (s->ow + DW_VW - 1) / DW_VW;
    /* Rows and columns the windows reach (with every vector's padding columns), past the
     * input and its top/left padding. */
    g.rows = relvm_max64(s->pt + s->h, (s->oh - 1) * s->sh + (s->kh - 1) * s->dh + 1);
    const int64_t cols = relvm_max64(s->pl + s->w, (g.vectors * DW_VW - 1) * s->sw +
                                                       (s->kw - 1) * s->dw + 1);
    g.phase = (cols + s->sw - 1) / s->sw;
    g.row = g.phase * s->sw;
    return g;
}

/* Input plane x into buf, zero-bordered and split into column phases: phase p holds the
 * padded columns c = p, p + sw, ..., read from x with a stride of sw (a stride-2 read
 * vectorizes). */
static RELVM_VECTORIZE void pad_plane(const struct relvm_conv2d_shape *s, struct dw_geometry g,
                                      const float *x, float *buf) {
    memset(buf, 0, (size_t)(g.rows * g.row) * sizeof(float));
    const int64_t sw = s->sw;
    for (int64_t iy = 0; iy < s->h; ++iy) {
        float *row = buf + (iy + s->pt) * g.row;
        const float *src = x + iy * s->w;
        if (sw == 1) {
            memcpy(row + s->pl, src, (size_t)s->w * sizeof(float));
            continue;
        }
        for (int64_t p = 0; p < sw; ++p) {
            /* The first input column whose padded column is in phase p, and its index there. */
            const int64_t first = ((p - s->pl) % sw + sw) % sw, at = (first + s->pl) / sw;
            float *dst = row + p * g.phase + at;
            const float *from = src + first;
            const int64_t count = first < s->w ? (s->w - first + sw - 1) / sw : 0;
            if (sw == 2)
                for (int64_t t = 0; t < count; ++t) dst[t] = from[2 * t];
            else
                for (int64_t t = 0; t < count; ++t) dst[t] = from[t * sw];
        }
    }
}

/* Where tap column j reads in a padded row, for output column 0: its phase and index. */
static void tap_offsets(const struct relvm_conv2d_shape *s, struct dw_geometry g, int64_t *off) {
    for (int64_t j = 0; j < s->kw; ++j) {
        const int64_t c = j * s->dw;
        off[j] = c % s->sw * g.phase + c / s->sw;
    }
}

/* One output plane from its padded input plane p and its kh x kw taps k (off: tap_offsets).
 * Inlined with constant kh and kw for the common windows, so the taps unroll and their
 * weights stay in registers across the plane. */
static inline __attribute__((always_inline)) void dw_plane_of(
    const struct relvm_conv2d_shape *s, struct dw_geometry g, const float *p, const float *k,
    const int64_t *off, float bias, int relu, float *y, float *out, const int64_t kh,
    const int64_t kw) {
    /* The plane's vectors (oh rows of g.vectors), DW_U at a time, so DW_U independent chains
     * of multiply-adds hide their latency, each starting from the bias and stored through
     * relu: straight into y when its rows are whole vectors, else into `out` (rows of whole
     * vectors), then each row's ow pixels copied to y. */
    const int64_t jobs = s->oh * g.vectors, width = g.vectors * DW_VW;
    float *dst = width == s->ow ? y : out;
    for (int64_t t = 0; t < jobs; t += DW_U) {
        const float *base[DW_U];
        for (int u = 0; u < DW_U; ++u) {
            const int64_t job = t + u < jobs ? t + u : jobs - 1; /* past the end: done twice */
            const int64_t oy = job / g.vectors, v = job - oy * g.vectors;
            base[u] = p + oy * s->sh * g.row + v * DW_VW;
        }
        dw_vec acc[DW_U];
        for (int u = 0; u < DW_U; ++u) acc[u] = bias + (dw_vec){0};
        for (int64_t i = 0; i < kh; ++i) {
            const int64_t down = i * s->dh * g.row;
            for (int64_t j = 0; j < kw; ++j) {
                const float wv = k[i * kw + j];
                for (int u = 0; u < DW_U; ++u)
                    acc[u] += wv * *(const dw_uvec *)(base[u] + down + off[j]);
            }
        }
        for (int u = 0; u < DW_U && t + u < jobs; ++u) {
            if (relu) /* lanes below 0 cleared; NaN is not below 0, and stays */
                acc[u] = (dw_vec)((dw_mask)acc[u] & ~(dw_mask)(acc[u] < 0));
            *(dw_uvec *)(dst + (t + u) * DW_VW) = acc[u];
        }
    }
    if (dst == out)
        for (int64_t oy = 0; oy < s->oh; ++oy)
            memcpy(y + oy * s->ow, out + oy * width, (size_t)s->ow * sizeof(float));
}

static inline __attribute__((always_inline)) void dw_plane_any(
    const struct relvm_conv2d_shape *s, struct dw_geometry g, const float *p, const float *k,
    const int64_t *off, float bias, int relu, float *y, float *out) {
    if (s->kh == 3 && s->kw == 3) dw_plane_of(s, g, p, k, off, bias, relu, y, out, 3, 3);
    else if (s->kh == 5 && s->kw == 5) dw_plane_of(s, g, p, k, off, bias, relu, y, out, 5, 5);
    else if (s->kh == 7 && s->kw == 7) dw_plane_of(s, g, p, k, off, bias, relu, y, out, 7, 7);
    else dw_plane_of(s, g, p, k, off, bias, relu, y, out, s->kh, s->kw);
}

/* The taps are multiply-adds: AVX2 machines need FMA (RELVM_ISA_VERSIONS). */
RELVM_ISA_VERSIONS(static, dw_plane,
                   (const struct relvm_conv2d_shape *s, struct dw_geometry g, const float *p,
                    const float *k, const int64_t *off, float bias, int relu, float *y,
                    float *out),
                   dw_plane_any(s, g, p, k, off, bias, relu, y, out))

struct depthwise {
    const struct relvm_conv2d_shape *s;
    const float *x, *w;
    float *y;
    struct dw_geometry g;
    const float *bias; /* per output channel, or NULL */
    int relu;
    relvm_block_fn *post;
    void *post_ctx;
    _Atomic int failed; /* a thread could not get its scratch plane */
};


/* Item q is input plane (n, g); it feeds output channels g * mult ... g * mult + mult - 1. */
static void depthwise_planes(void *ctx, int64_t begin, int64_t end) {
    struct depthwise *j = ctx;
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t mult = s->oc / s->groups, plane = j->g.rows * j->g.row;
    const int64_t row = s->oh * j->g.vectors * DW_VW;
    /* The padded plane, the output plane in whole vectors, then the tap offsets (int64s, two
     * floats each, from a 64-byte boundary: plane + row may be odd). */
    const int64_t off_at = (plane + row + 15) / 16 * 16;
    float *buf = relvm_conv_scratch_floats((size_t)(off_at + 2 * s->kw));
    if (!buf) {
        j->failed = 1;
        return;
    }
    int64_t *off = (int64_t *)(void *)(buf + off_at);
    tap_offsets(s, j->g, off);
    for (int64_t q = begin; q < end; ++q) {
        const int64_t n = q / s->c, g = q % s->c;
        pad_plane(s, j->g, j->x + q * s->h * s->w, buf);
        for (int64_t m = 0; m < mult; ++m) {
            const int64_t o = g * mult + m;
            float *y = j->y + (n * s->oc + o) * s->oh * s->ow;
            dw_plane(s, j->g, buf, j->w + o * s->kh * s->kw, off, j->bias ? j->bias[o] : 0.0f,
                     j->relu, y, buf + plane);
            if (j->post) /* the fused rest of the plane, while it is in cache */
                j->post(j->post_ctx, (n * s->oc + o) * s->oh * s->ow, 1, s->oh * s->ow,
                        s->oh * s->ow);
        }
    }
}

int depthwise_conv(const struct relvm_conv2d_shape *s, const float *x, const float *w,
                   float *y, const float *bias, int relu, relvm_block_fn *post, void *post_ctx) {
    struct depthwise j = {s, x, w, y, dw_geometry(s), bias, relu, post, post_ctx, 0};
    const int64_t work = relvm_max64(1, s->oc / s->groups * s->oh * s->ow * s->kh * s->kw);
    relvm_parallel_for(s->n * s->c, relvm_max64(1, RELVM_GRAIN / work), depthwise_planes, &j);
    return j.failed ? RELVM_NO_MEMORY : RELVM_OK;
}
