/* Depthwise conv2d (one input channel per group): too little reuse for a GEMM, so a direct loop
 * that vectorizes along output rows. */
#include <string.h>
#include "relvm_config.h"
#include "conv.h"
#include "internal/conv_shared.h"
#include "internal/types.h"
#include "threads.h"

/* Each input plane is copied once into a zero-bordered scratch plane (per thread), so the
 * loops below read every tap without bounds checks; the common 3x3 kernels are unrolled so
 * GCC vectorizes along the output row. */
struct padded {
    const float *data;
    int64_t width; /* row stride */
};

static struct padded pad_plane(const struct relvm_conv2d_shape *s, const float *x, float *buf,
                               int64_t ph, int64_t pw) {
    memset(buf, 0, (size_t)(ph * pw) * sizeof(float));
    for (int64_t iy = 0; iy < s->h; ++iy)
        memcpy(buf + (iy + s->pt) * pw + s->pl, x + iy * s->w, (size_t)s->w * sizeof(float));
    struct padded p = {buf, pw};
    return p;
}

static RELVM_VECTORIZE void dw3x3_s1(const float *r0, const float *r1, const float *r2,
                                     const float *k, float *y, int64_t n) {
    for (int64_t ox = 0; ox < n; ++ox)
        y[ox] = k[0] * r0[ox] + k[1] * r0[ox + 1] + k[2] * r0[ox + 2] + k[3] * r1[ox] +
                k[4] * r1[ox + 1] + k[5] * r1[ox + 2] + k[6] * r2[ox] + k[7] * r2[ox + 1] +
                k[8] * r2[ox + 2];
}

static RELVM_VECTORIZE void dw3x3_s2(const float *r0, const float *r1, const float *r2,
                                     const float *k, float *y, int64_t n) {
    for (int64_t ox = 0; ox < n; ++ox) {
        const int64_t c = 2 * ox;
        y[ox] = k[0] * r0[c] + k[1] * r0[c + 1] + k[2] * r0[c + 2] + k[3] * r1[c] +
                k[4] * r1[c + 1] + k[5] * r1[c + 2] + k[6] * r2[c] + k[7] * r2[c + 1] +
                k[8] * r2[c + 2];
    }
}

static RELVM_VECTORIZE void dw_any(const struct relvm_conv2d_shape *s, struct padded p,
                                   const float *k, float *y, int64_t oy) {
    for (int64_t ox = 0; ox < s->ow; ++ox) y[ox] = 0.0f;
    for (int64_t i = 0; i < s->kh; ++i) {
        const float *row = p.data + (oy * s->sh + i * s->dh) * p.width;
        for (int64_t j = 0; j < s->kw; ++j) {
            const float wv = k[i * s->kw + j], *src = row + j * s->dw;
            if (s->sw == 1) {
                for (int64_t ox = 0; ox < s->ow; ++ox) y[ox] += wv * src[ox];
            } else {
                for (int64_t ox = 0; ox < s->ow; ++ox) y[ox] += wv * src[ox * s->sw];
            }
        }
    }
}

static void depthwise_plane(const struct relvm_conv2d_shape *s, struct padded p,
                            const float *k, float *y) {
    const int three = s->kh == 3 && s->kw == 3 && s->dh == 1 && s->dw == 1;
    for (int64_t oy = 0; oy < s->oh; ++oy) {
        const float *r0 = p.data + oy * s->sh * p.width;
        float *yr = y + oy * s->ow;
        if (three && s->sw == 1) dw3x3_s1(r0, r0 + p.width, r0 + 2 * p.width, k, yr, s->ow);
        else if (three && s->sw == 2) dw3x3_s2(r0, r0 + p.width, r0 + 2 * p.width, k, yr, s->ow);
        else dw_any(s, p, k, yr, oy);
    }
}

struct depthwise {
    const struct relvm_conv2d_shape *s;
    const float *x, *w;
    float *y;
    int64_t ph, pw; /* the padded plane: every tap of every window inside it */
    const float *bias; /* per output channel, or NULL */
    int relu;
    relvm_block_fn *post;
    void *post_ctx;
    _Atomic int failed; /* a thread could not get its scratch plane */
};

/* A finished output plane's epilogue, while it is in cache: + bias, relu, then post. */
static RELVM_VECTORIZE void plane_epilogue(const struct depthwise *j, int64_t n, int64_t o,
                                           float *y) {
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t plane = s->oh * s->ow;
    if (j->bias || j->relu) {
        const float b = j->bias ? j->bias[o] : 0.0f;
        for (int64_t i = 0; i < plane; ++i) {
            const float v = y[i] + b;
            y[i] = j->relu && v < 0 ? 0.0f : v;
        }
    }
    if (j->post) j->post(j->post_ctx, (n * s->oc + o) * plane, 1, plane, plane);
}

/* Item q is input plane (n, g); it feeds output channels g * mult ... g * mult + mult - 1. */
static void depthwise_planes(void *ctx, int64_t begin, int64_t end) {
    struct depthwise *j = ctx;
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t mult = s->oc / s->groups;
    float *buf = relvm_conv_scratch_floats((size_t)(j->ph * j->pw));
    if (!buf) {
        j->failed = 1;
        return;
    }
    for (int64_t q = begin; q < end; ++q) {
        const int64_t n = q / s->c, g = q % s->c;
        const struct padded p = pad_plane(s, j->x + q * s->h * s->w, buf, j->ph, j->pw);
        for (int64_t m = 0; m < mult; ++m) {
            const int64_t o = g * mult + m;
            float *y = j->y + (n * s->oc + o) * s->oh * s->ow;
            depthwise_plane(s, p, j->w + o * s->kh * s->kw, y);
            plane_epilogue(j, n, o, y);
        }
    }
}

int depthwise_conv(const struct relvm_conv2d_shape *s, const float *x, const float *w,
                   float *y, const float *bias, int relu, relvm_block_fn *post, void *post_ctx) {
    /* Rows and columns the windows reach, past the input and its top/left padding. */
    const int64_t ph = relvm_max64(s->pt + s->h, (s->oh - 1) * s->sh + (s->kh - 1) * s->dh + 1);
    const int64_t pw = relvm_max64(s->pl + s->w, (s->ow - 1) * s->sw + (s->kw - 1) * s->dw + 1);
    struct depthwise j = {s, x, w, y, ph, pw, bias, relu, post, post_ctx, 0};
    const int64_t work = relvm_max64(1, s->oc / s->groups * s->oh * s->ow * s->kh * s->kw);
    relvm_parallel_for(s->n * s->c, relvm_max64(1, RELVM_GRAIN / work), depthwise_planes, &j);
    return j.failed ? RELVM_NO_MEMORY : RELVM_OK;
}
