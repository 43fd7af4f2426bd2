/* Depthwise conv2d (one input channel per group): too little reuse for a GEMM, so direct loops
 * in one of two forms: each output plane on a "wide grid" (here), or, for small planes with one
 * output channel per input channel, a vector of channels per output pixel (the channel-blocked
 * form, further down).
 *
 * Each input plane is copied once into a zero-bordered scratch plane (per thread), split into
 * sh x sw phase planes of R rows and C columns: padded pixel (r, c) goes to phase plane
 * (r % sh, c % sw) at (r / sh, c / sw). Output pixel (oy, ox)'s tap (i, j) reads padded pixel
 * (oy * sh + i * dh, ox * sw + j * dw), which is phase plane ((i * dh) % sh, (j * dw) % sw) at
 * (oy + (i * dh) / sh, ox + (j * dw) / sw). So if outputs are numbered t = oy * C + ox -- a
 * grid C wide, of which the first ow columns are the output -- tap (i, j) of every output reads
 * the scratch at t + off[i][j]: one offset per tap, whatever the stride or dilation, and the
 * outputs of a plane are one contiguous run of vectors (internal/dw_taps.h), with only
 * C - ow columns per row computed and dropped: for a 56 x 56 plane and a 3 x 3 window, 2 of the
 * grid's 58 columns, where rows done one by one in vectors of 16 would waste 8 of every 64
 * lanes (and run in short loops of four vectors).
 * The grid's rows are then copied to y (or, when C == ow, the grid is y). A finished plane takes
 * its bias and clamp in the loop, and post (a fused kernel's block form) while it is in cache.
 * The inner loop is compiled for AVX-512, AVX2 and SSE2 and chosen with the GEMM's (pgemm.c,
 * RELVM_PGEMM_ISA). */
#include <string.h>
#include "relvm_config.h"
#include "conv.h"
#include "internal/conv_shared.h"
#include "internal/pgemm_panel.h"
#include "internal/transpose.h"
#include "internal/types.h"
#include "threads.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define DW_MULTI_ISA 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")
#define DW_SUFFIX avx512
#define DW_VW 16
#include "internal/dw_taps.h"
#undef DW_SUFFIX
#undef DW_VW
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define DW_SUFFIX avx2
#define DW_VW 8
#include "internal/dw_taps.h"
#undef DW_SUFFIX
#undef DW_VW
#pragma GCC pop_options
#endif

#define DW_SUFFIX base
#define DW_VW 4
#include "internal/dw_taps.h"
#undef DW_SUFFIX
#undef DW_VW

#define DW_SLACK 16 /* floats past the phase planes that a last, partial vector may read */

typedef void dw_taps_fn(const float *p, const int64_t *off, const float *k, int64_t taps,
                        float bias, const float *clamp, float *out, int64_t count);
typedef void dw_rows_fn(float *y, const float *grid, int64_t C, int64_t ow, int64_t oh);
typedef void dw_pixels_fn(const float *p, const int64_t *off, const float *wv, int64_t taps,
                          const float *bias, const float *clamp, int64_t oh, int64_t ow,
                          int64_t row_step, int64_t col_step, float *out);

/* The loops of the GEMM's instruction set (RELVM_PGEMM_ISA lowers both), and its floats per
 * vector: the channels of a block in the channel-blocked form. */
struct dw_kernels {
    dw_taps_fn *taps;
    dw_rows_fn *rows;
    dw_pixels_fn *pixels;
    int width;
};

static struct dw_kernels dw_kernels(void) {
    int width = 4;
    relvm_pgemm_ipanel_kernel(&width);
#ifdef DW_MULTI_ISA
    if (width == 16) return (struct dw_kernels){taps_avx512, rows_avx512, pixels_avx512, 16};
    if (width == 8) return (struct dw_kernels){taps_avx2, rows_avx2, pixels_avx2, 8};
#endif
    return (struct dw_kernels){taps_base, rows_base, pixels_base, 4};
}

/* The scratch plane: sh x sw phase planes of R x C floats; the output grid is C wide. */
struct dw_geometry {
    int64_t R, C, phase, plane; /* phase: R * C floats; plane: every phase plane + slack */
    int64_t count;              /* outputs on the grid: (oh - 1) * C + ow */
};

static struct dw_geometry dw_geometry(const struct relvm_conv2d_shape *s) {
    struct dw_geometry g;
    int64_t rows, cols;
    conv_padded_extent(s, &rows, &cols);
    g.R = (rows + s->sh - 1) / s->sh;
    g.C = (cols + s->sw - 1) / s->sw;
    g.phase = g.R * g.C;
    g.plane = s->sh * s->sw * g.phase + DW_SLACK;
    g.count = (s->oh - 1) * g.C + s->ow;
    return g;
}

/* n floats from `from` to `to`, in 4-float vectors: the rows copied here are short (7 to 112
 * floats), where a call to memcpy costs more than the copy. */
static inline void copy_floats(float *to, const float *from, int64_t n) {
    typedef float v4 __attribute__((vector_size(16), aligned(4)));
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) *(v4 *)(to + t) = *(const v4 *)(from + t);
    for (; t < n; ++t) to[t] = from[t];
}

/* Input plane x into buf as phase planes (dw_geometry). Only the cells pixels land on are
 * written: they are the same for every plane of a call, so the rest (the zero border) is
 * cleared once per task (dw_clear). Padded row r = iy + pt is row r / sh of the phase planes
 * (r % sh, *); along it, phase b holds the padded columns c = b, b + sw, ..., read from x with
 * a stride of sw. */
static RELVM_VECTORIZE void pad_plane(const struct relvm_conv2d_shape *s, struct dw_geometry g,
                                      const float *x, float *buf) {
    const int64_t sh = s->sh, sw = s->sw;
    if (sw == 2) { /* a row's even input columns to phase pl % 2, its odd ones to the other */
        for (int64_t iy = 0; iy < s->h; ++iy) {
            const int64_t r = iy + s->pt;
            float *row = buf + r % sh * sw * g.phase + r / sh * g.C;
            deinterleave_row(x + iy * s->w, s->w, row + s->pl % 2 * g.phase + s->pl / 2,
                             row + (s->pl + 1) % 2 * g.phase + (s->pl + 1) / 2);
        }
        return;
    }
    for (int64_t b = 0; b < sw; ++b) {
        /* The first input column whose padded column is in phase b, its index there, and how
         * many of a row's pixels the phase holds. */
        const int64_t first = ((b - s->pl) % sw + sw) % sw, at = (first + s->pl) / sw;
        const int64_t count = first < s->w ? (s->w - first + sw - 1) / sw : 0;
        for (int64_t iy = 0; iy < s->h; ++iy) {
            const int64_t r = iy + s->pt;
            float *dst = buf + (r % sh * sw + b) * g.phase + r / sh * g.C + at;
            const float *from = x + iy * s->w + first;
            if (sw == 1)
                copy_floats(dst, from, count);
            else
                for (int64_t t = 0; t < count; ++t) dst[t] = from[t * sw];
        }
    }
}

/* Where tap (i, j) reads in the scratch, for output 0 of the grid. */
static void tap_offsets(const struct relvm_conv2d_shape *s, struct dw_geometry g, int64_t *off) {
    for (int64_t i = 0; i < s->kh; ++i)
        for (int64_t j = 0; j < s->kw; ++j) {
            const int64_t r = i * s->dh, c = j * s->dw;
            off[i * s->kw + j] = (r % s->sh * s->sw + c % s->sw) * g.phase + r / s->sh * g.C +
                                 c / s->sw;
        }
}

struct depthwise {
    const struct relvm_conv2d_shape *s;
    const float *x, *w;
    float *y;
    struct dw_geometry g;
    const float *bias; /* per output channel, or NULL */
    const float *clamp;
    relvm_block_fn *post;
    void *post_ctx;
    _Atomic int failed; /* a thread could not get its scratch plane */
};


/* Item q is input plane (n, g); it feeds output channels g * mult ... g * mult + mult - 1. */
static void depthwise_planes(void *ctx, int64_t begin, int64_t end) {
    struct depthwise *j = ctx;
    const struct relvm_conv2d_shape *s = j->s;
    const struct dw_geometry g = j->g;
    const int64_t mult = s->oc / s->groups, taps = s->kh * s->kw, opixels = s->oh * s->ow;
    /* The grid in one run, then its rows copied to y (the grid is y when C == ow). The C - ow
     * columns computed and dropped per row are fewer than a row's last, partial vector would
     * waste where rows are computed one by one, and the run keeps four independent chains of
     * multiply-adds busy where a row of one or two vectors would not. */
    const struct dw_kernels kernels = dw_kernels();
    const int use_grid = g.C != s->ow;
    /* The scratch plane, the output grid (if used), then the tap offsets (int64s, two floats
     * each, from a 64-byte boundary). */
    const int64_t grid = use_grid ? (g.count + 15) / 16 * 16 : 0;
    const int64_t off_at = (g.plane + grid + 15) / 16 * 16;
    float *buf = relvm_conv_scratch_floats((size_t)(off_at + 2 * taps));
    if (!buf) {
        j->failed = 1;
        return;
    }
    int64_t *off = (int64_t *)(void *)(buf + off_at);
    tap_offsets(s, g, off);
    memset(buf, 0, (size_t)g.plane * sizeof(float)); /* the border, which no plane writes */
    for (int64_t q = begin; q < end; ++q) {
        const int64_t n = q / s->c, c = q % s->c;
        pad_plane(s, g, j->x + q * s->h * s->w, buf);
        for (int64_t m = 0; m < mult; ++m) {
            const int64_t o = c * mult + m;
            float *y = j->y + (n * s->oc + o) * opixels;
            const float *k = j->w + o * taps;
            const float bias = j->bias ? j->bias[o] : 0.0f;
            float *out = use_grid ? buf + g.plane : y;
            kernels.taps(buf, off, k, taps, bias, j->clamp, out, g.count);
            if (use_grid) kernels.rows(y, out, g.C, s->ow, s->oh);
            if (j->post) /* the fused rest of the plane, while it is in cache */
                j->post(j->post_ctx, (n * s->oc + o) * opixels, 1, opixels, opixels);
        }
    }
}

/* --- the channel-blocked form ----------------------------------------------------------------
 * For small planes, where a plane's own loops cost more than its multiply-adds (a 7 x 7 plane is
 * 49 outputs), a block of `width` channels (one vector) is done at once: the block's planes are
 * transposed to pixel-major (each pixel `width` floats) straight into the interior of a
 * zero-bordered padded image (relvm_transpose_f32_runs: a copy of the transposed plane into
 * the image, row by row, had cost half as much as the transpose), every output pixel is one
 * vector of the block's channels (the taps' weights one vector each), and the result is
 * transposed back to the block's planes. Channel multipliers other than 1 take the wide
 * grid. */

/* Planes take the blocked form up to a padded image of 32 x 32 pixels (64 KB for a block of 16
 * channels), or 64 x 64 with a stride (where the wide grid's phase planes cost more to fill). At
 * 56 x 56 and stride 1, and at 112 x 112, the wide grid was faster (AVX-512). */
#define DW_BLOCKED_PIXELS 1024
#define DW_BLOCKED_PIXELS_STRIDED 4096

static int use_blocked(const struct relvm_conv2d_shape *s) {
    int64_t rows, cols;
    conv_padded_extent(s, &rows, &cols);
    const int strided = s->sh > 1 || s->sw > 1;
    return s->oc == s->c &&
           rows * cols <= (strided ? DW_BLOCKED_PIXELS_STRIDED : DW_BLOCKED_PIXELS);
}

/* Item q is block q % blocks of image q / blocks: channels b * width ... */
static void depthwise_blocks(void *ctx, int64_t begin, int64_t end) {
    struct depthwise *j = ctx;
    const struct relvm_conv2d_shape *s = j->s;
    const struct dw_kernels kernels = dw_kernels();
    const int64_t L = kernels.width, taps = s->kh * s->kw, opixels = s->oh * s->ow;
    const int64_t ipixels = s->h * s->w, blocks = (s->c + L - 1) / L;
    int64_t rows, cols; /* the padded image's: no stride phases, a pixel is a whole vector */
    conv_padded_extent(s, &rows, &cols);
    /* The padded image, the block's output pixel-major, the taps' weights and the bias (a
     * vector each), then the tap offsets (int64s). */
    const int64_t padded = rows * cols * L, out = opixels * L;
    const int64_t wv_at = padded + out, off_at = wv_at + (taps + 1) * L;
    float *buf = relvm_conv_scratch_floats((size_t)(off_at + 2 * taps));
    if (!buf) {
        j->failed = 1;
        return;
    }
    float *image = buf, *result = buf + padded, *wv = buf + wv_at;
    float *bias = wv + taps * L;
    int64_t *off = (int64_t *)(void *)(buf + off_at);
    for (int64_t i = 0; i < s->kh; ++i)
        for (int64_t t = 0; t < s->kw; ++t)
            off[i * s->kw + t] = (i * s->dh * cols + t * s->dw) * L;
    memset(image, 0, (size_t)padded * sizeof(float)); /* the border, which no block writes */
    for (int64_t q = begin; q < end; ++q) {
        const int64_t n = q / blocks, c0 = q % blocks * L, lanes = relvm_min64(L, s->c - c0);
        const int64_t first = n * s->c + c0; /* the block's first plane, in x and in y */
        if (lanes < L) /* the lanes past the channels: zeros, not what an earlier block left */
            memset(image, 0, (size_t)padded * sizeof(float));
        /* the block's planes transposed straight into the image's interior, row after row */
        relvm_transpose_f32_runs(lanes, ipixels, j->x + first * ipixels, ipixels,
                                 image + (s->pt * cols + s->pl) * L, L, s->w, cols - s->w);
        for (int64_t t = 0; t < taps; ++t)
            for (int64_t l = 0; l < L; ++l)
                wv[t * L + l] = l < lanes ? j->w[(c0 + l) * taps + t] : 0.0f;
        for (int64_t l = 0; l < L; ++l) bias[l] = j->bias && l < lanes ? j->bias[c0 + l] : 0.0f;
        kernels.pixels(image, off, wv, taps, bias, j->clamp, s->oh, s->ow, s->sh * cols * L,
                       s->sw * L, result);
        float *y = j->y + first * opixels;
        relvm_transpose_f32(opixels, lanes, result, L, y, opixels);
        if (j->post) /* the fused rest of the block's planes, while they are in cache */
            j->post(j->post_ctx, first * opixels, lanes, opixels, opixels);
    }
}

int depthwise_conv(const struct relvm_conv2d_shape *s, const float *x, const float *w,
                   float *y, const float *bias, const float *clamp, relvm_block_fn *post,
                   void *post_ctx) {
    if (s->oh == 0 || s->ow == 0 || s->n * s->c == 0) return RELVM_OK;
    struct depthwise j = {s, x, w, y, dw_geometry(s), bias, clamp, post, post_ctx, 0};
    const int64_t work = relvm_max64(1, s->oc / s->groups * s->oh * s->ow * s->kh * s->kw);
    if (use_blocked(s)) {
        const int64_t L = dw_kernels().width, blocks = (s->c + L - 1) / L;
        relvm_parallel_for(s->n * blocks, relvm_max64(1, RELVM_GRAIN / (work * L)),
                           depthwise_blocks, &j);
    } else {
        relvm_parallel_for(s->n * s->c, relvm_max64(1, RELVM_GRAIN / work), depthwise_planes,
                           &j);
    }
    return j.failed ? RELVM_NO_MEMORY : RELVM_OK;
}
