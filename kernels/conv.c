/* conv2d. The GEMM path multiplies the weights by the unrolled input (im2col, a
 * (c/g * kh * kw) x (oh * ow) matrix) on relvm's GEMM (pgemm.c), with the bias and relu applied
 * in registers, but never builds that matrix: each thread copies its image into a zero-bordered,
 * phase-split buffer (a pointwise conv reads its input as it is), and the GEMM reads the unrolled
 * rows there in place, or from 32-pixel panels packed from it when output rows are not whole
 * vectors. Depthwise convs have too little reuse for a GEMM, so they run a direct loop that
 * vectorizes along output rows. conv2d_transpose uses OpenBLAS (W^T x), then col2im. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "relvm_config.h"
#include "blas.h"
#include "conv.h"
#include "internal/pgemm_panel.h"
#include "internal/scratch.h"
#include "internal/types.h"
#include "threads.h"

/* --- window bounds -------------------------------------------------------------------------- */

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

/* --- im2col panel by panel, straight into relvm's GEMM ------------------------------------ */

/* The output pixels of one 32-pixel panel, as runs along output rows. */
struct pixel_runs {
    int64_t count;
    int64_t oy[PG_PANEL], ox[PG_PANEL], len[PG_PANEL], at[PG_PANEL];
};

static void panel_runs(const struct relvm_conv2d_shape *s, int64_t p0, int64_t npix,
                       struct pixel_runs *r) {
    r->count = 0;
    int64_t oy = p0 / s->ow, ox = p0 - oy * s->ow; /* then each run starts a row */
    for (int64_t q = 0; q < npix; ox = 0, ++oy) {
        const int64_t len = relvm_min64(s->ow - ox, npix - q);
        r->oy[r->count] = oy;
        r->ox[r->count] = ox;
        r->len[r->count] = len;
        r->at[r->count] = q;
        ++r->count;
        q += len;
    }
}

static int is_pointwise(const struct relvm_conv2d_shape *s) {
    return s->kh == 1 && s->kw == 1 && s->sh == 1 && s->sw == 1 && s->pt == 0 && s->pl == 0 &&
           s->oh == s->h && s->ow == s->w;
}

/* The image (its group's channels) copied once into a zero-bordered buffer, each padded row
 * split into sw phases (columns c with c % sw == 0, then 1, ...), so the pixels of an output row
 * read consecutive floats for every tap, whatever the stride: tap (i, j) of output column ox
 * reads padded column ox * sw + j * dw, which is phase (j * dw) % sw, index ox + (j * dw) / sw. */
struct padded_image {
    float *data;
    int64_t ph;    /* rows: every row the windows reach, past the top padding */
    int64_t pws;   /* floats per phase of a row */
    int64_t rs;    /* floats per row: sw * pws */
    int64_t plane; /* floats per channel: ph * rs */
};

static struct padded_image padded_geometry(const struct relvm_conv2d_shape *s) {
    struct padded_image p;
    p.data = NULL;
    p.ph = relvm_max64(s->pt + s->h, (s->oh - 1) * s->sh + (s->kh - 1) * s->dh + 1);
    const int64_t pw = relvm_max64(s->pl + s->w, (s->ow - 1) * s->sw + (s->kw - 1) * s->dw + 1);
    p.pws = (pw + s->sw - 1) / s->sw;
    p.rs = p.pws * s->sw;
    p.plane = p.ph * p.rs;
    return p;
}

typedef float deint_vec __attribute__((vector_size(64), aligned(4)));
typedef int32_t deint_mask __attribute__((vector_size(64)));

/* Stride 2: a row's even columns go to one phase and its odd columns to the other, 32 input
 * floats (two vectors, two shuffles) at a time. */
static inline __attribute__((always_inline)) void deinterleave_row(const float *from, int64_t w,
                                                                   float *even, float *odd) {
    const deint_mask evens = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    const deint_mask odds = evens + 1;
    int64_t t = 0;
    for (; t + 32 <= w; t += 32) {
        const deint_vec v0 = *(const deint_vec *)(from + t);
        const deint_vec v1 = *(const deint_vec *)(from + t + 16);
        *(deint_vec *)(even + t / 2) = __builtin_shuffle(v0, v1, evens);
        *(deint_vec *)(odd + t / 2) = __builtin_shuffle(v0, v1, odds);
    }
    for (; t < w; ++t) (t % 2 ? odd : even)[t / 2] = from[t];
}

/* Where padded column `col` of a row is stored: phase col % sw, index col / sw. */
static inline int64_t phase_at(const struct relvm_conv2d_shape *s, struct padded_image p,
                               int64_t col) {
    return col % s->sw * p.pws + col / s->sw;
}

/* The border columns of a padded row (those no input pixel lands on), as positions in the
 * row's phase layout: left ones first, then right ones. Found once per call (no division per
 * element); `count` is -1 for borders of more than 64 columns (whole rows are cleared then). */
struct border_columns {
    int64_t at[64];
    int64_t left, count;
};

static struct border_columns border_columns(const struct relvm_conv2d_shape *s,
                                            struct padded_image p) {
    struct border_columns b;
    b.left = relvm_min64(s->pl, p.rs);
    b.count = p.rs - s->w > 64 ? -1 : 0;
    const int64_t right = s->pl + s->w;
    for (int64_t col = 0; col < p.rs && b.count >= 0; ++col)
        if (col < s->pl || col >= right) b.at[b.count++] = phase_at(s, p, col);
    return b;
}

/* Zero the rows above and below the image (no input row lands there). */
static void zero_outer_rows(const struct relvm_conv2d_shape *s, int64_t channels,
                            struct padded_image p) {
    const int64_t bottom = s->pt + s->h;
    for (int64_t ci = 0; ci < channels; ++ci) {
        float *plane = p.data + ci * p.plane;
        memset(plane, 0, (size_t)(s->pt * p.rs) * sizeof(float));
        memset(plane + bottom * p.rs, 0, (size_t)((p.ph - bottom) * p.rs) * sizeof(float));
    }
}

/* Zero what no input pixel lands on: the rows above and below the image and, in the others,
 * the border columns (the interior is the writer's). */
static void zero_borders(const struct relvm_conv2d_shape *s, int64_t channels,
                         struct padded_image p) {
    const struct border_columns b = border_columns(s, p);
    zero_outer_rows(s, channels, p);
    for (int64_t ci = 0; ci < channels; ++ci) {
        float *plane = p.data + ci * p.plane;
        if (b.count < 0) { /* wide borders: whole rows, the interior written again after */
            memset(plane + s->pt * p.rs, 0, (size_t)(s->h * p.rs) * sizeof(float));
            continue;
        }
        for (int64_t iy = s->pt; iy < s->pt + s->h; ++iy) {
            float *row = plane + iy * p.rs;
            for (int64_t i = 0; i < b.count; ++i) row[b.at[i]] = 0.0f;
        }
    }
}

/* The image's channels into p's interior, split into phases (the borders are zero_borders'). */
static RELVM_VECTORIZE void pad_image(const struct relvm_conv2d_shape *s, const float *x,
                                      int64_t channels, struct padded_image p) {
    if (s->sw == 2) {
        /* Input column ix is padded column ix + pl. */
        const int64_t even_at = phase_at(s, p, s->pl), odd_at = phase_at(s, p, s->pl + 1);
        for (int64_t ci = 0; ci < channels; ++ci)
            for (int64_t iy = 0; iy < s->h; ++iy) {
                float *row = p.data + ci * p.plane + (iy + s->pt) * p.rs;
                deinterleave_row(x + (ci * s->h + iy) * s->w, s->w, row + even_at,
                                 row + odd_at);
            }
        return;
    }
    if (s->sw == 1) {
        for (int64_t ci = 0; ci < channels; ++ci)
            for (int64_t iy = 0; iy < s->h; ++iy)
                memcpy(p.data + ci * p.plane + (iy + s->pt) * p.rs + s->pl,
                       x + (ci * s->h + iy) * s->w, (size_t)s->w * sizeof(float));
        return;
    }
    /* Phase by phase: the input columns ix with (ix + pl) % sw == phase. */
    for (int64_t phase = 0; phase < s->sw; ++phase) {
        const int64_t first = ((phase - s->pl) % s->sw + s->sw) % s->sw;
        const int64_t count = first < s->w ? (s->w - first + s->sw - 1) / s->sw : 0;
        const int64_t at = phase_at(s, p, first + s->pl);
        for (int64_t ci = 0; ci < channels; ++ci)
            for (int64_t iy = 0; iy < s->h; ++iy) {
                float *dst = p.data + ci * p.plane + (iy + s->pt) * p.rs + at;
                const float *from = x + (ci * s->h + iy) * s->w + first;
                if (s->sw == 2) { /* a constant stride vectorizes */
                    for (int64_t t = 0; t < count; ++t) dst[t] = from[2 * t];
                } else {
                    for (int64_t t = 0; t < count; ++t) dst[t] = from[t * s->sw];
                }
            }
    }
}

/* Where row k = (ci, i, j) of the unrolled input starts, relative to an output pixel's base
 * (oy * sh * rs + ox): one entry per row, the same for every image and panel. */
static void unrolled_offsets(const struct relvm_conv2d_shape *s, struct padded_image p,
                             int64_t channels, int64_t *off) {
    const int64_t taps = s->kh * s->kw;
    if (channels == 0) return;
    for (int64_t i = 0; i < s->kh; ++i) /* the first channel's taps, then the others' from them */
        for (int64_t j = 0; j < s->kw; ++j)
            off[i * s->kw + j] = i * s->dh * p.rs + phase_at(s, p, j * s->dw);
    for (int64_t ci = 1; ci < channels; ++ci)
        for (int64_t t = 0; t < taps; ++t) off[ci * taps + t] = ci * p.plane + off[t];
}

/* One panel of the unrolled input, packed: row k holds, for each of the panel's pixels, the
 * value its tap reads (runs of consecutive floats of the padded image), zeros past the last
 * pixel. For output rows too short or ragged for whole vectors (see conv_pgemm_tasks). */
static RELVM_VECTORIZE void pack_panel(const float *image, int64_t k, const int64_t *off,
                                       const int64_t *run_base, const struct pixel_runs *r,
                                       float *panel) {
    const int64_t npix = r->at[r->count - 1] + r->len[r->count - 1];
    for (int64_t row = 0; row < k; ++row) {
        float *dst = panel + row * PG_PANEL;
        for (int64_t q = 0; q < r->count; ++q) {
            const float *src = image + run_base[q] + off[row];
            float *out = dst + r->at[q];
            /* Whole and half panel rows (output rows of 32 or 16 pixels) are fixed-size
             * copies: a vector or two. */
            if (r->len[q] == PG_PANEL) memcpy(out, src, PG_PANEL * sizeof(float));
            else if (r->len[q] == PG_PANEL / 2) memcpy(out, src, PG_PANEL / 2 * sizeof(float));
            else for (int64_t t = 0; t < r->len[q]; ++t) out[t] = src[t];
        }
        for (int64_t q = npix; q < PG_PANEL; ++q) dst[q] = 0.0f;
    }
}

struct conv_pgemm {
    const struct relvm_conv2d_shape *s;
    const float *x, *w;
    float *y;
    struct pg_epilogue e;
    pg_panel_fn *fn;
    pg_ipanel_fn *ifn; /* NULL: output rows are not whole vectors, so panels are packed */
    int width;         /* floats per vector of ifn */
    const int64_t *off;
    /* With ifn: each group's weights packed for it (relvm_pgemm_pack_rows), given by the caller
     * or packed for this call into `wowned`. */
    const float *wpacked;
    float *wowned;
    struct padded_image padded; /* geometry only */
    int64_t panels, k;
    int pointwise;  /* 1x1, stride 1, no padding: the input is read as it is */
    float *sums;    /* the mean's partial sums, ocg per task (image, group, panel); or NULL */
    /* Set when the output feeds a next conv (conv pairs): each panel is stored into that
     * conv's padded input (geometry `onward`; conv_panel is told where) instead of y. */
    const struct relvm_conv2d_shape *next;
    struct padded_image onward; /* geometry only */
    struct border_columns edges; /* onward's border columns, written with each row's ends */
    uint64_t call; /* tells this call's padded images from an earlier call's */
    _Atomic int failed; /* a thread could not get its scratch */
};

/* Which padded image this thread's scratch holds (threads pad the images they work on). */
static _Thread_local struct {
    uint64_t call;
    int64_t image; /* n * groups + g */
    float *scratch;
} padded_for;

static _Atomic uint64_t conv_calls;

static struct conv_pgemm conv_job(const struct relvm_conv2d_shape *s, const float *x,
                                  const float *w, const float *wpacked, float *y,
                                  const float *bias, int relu) {
    int width;
    pg_ipanel_fn *ifn = relvm_pgemm_ipanel_kernel(&width);
    const int64_t plane = s->oh * s->ow;
    struct conv_pgemm j = {0};
    j.s = s;
    j.x = x;
    j.w = w;
    j.wpacked = wpacked;
    j.y = y;
    j.e.row_bias = bias;
    j.e.relu = relu;
    j.fn = relvm_pgemm_panel_kernel();
    j.ifn = s->ow % width == 0 ? ifn : NULL;
    j.width = width;
    j.padded = padded_geometry(s);
    j.panels = (plane + PG_PANEL - 1) / PG_PANEL;
    j.k = s->c / s->groups * s->kh * s->kw;
    j.pointwise = is_pointwise(s);
    j.call = atomic_fetch_add(&conv_calls, 1) + 1;
    return j;
}

/* Floats of scratch a thread needs for one panel of j: packing space and, when the panel goes
 * onward, a staging tile. Multiples of 16, so what follows stays 64-byte aligned. */
static int64_t panel_scratch(const struct conv_pgemm *j) {
    const int64_t packing = j->ifn ? 0 : j->k * PG_PANEL;
    const int64_t staging = j->next ? j->s->oc / j->s->groups * PG_PANEL : 0;
    return packing + staging;
}

static int64_t padded_scratch(const struct conv_pgemm *j) {
    if (j->pointwise) return 0;
    return (j->s->c / j->s->groups * j->padded.plane + 15) / 16 * 16;
}

/* The padded channels of image `image` (n * groups + g): a pointwise conv's input as it is,
 * else padded into buf once per call. */
static const float *padded_input(const struct conv_pgemm *j, int64_t image, float *buf) {
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t icg = s->c / s->groups, g = image % s->groups, n = image / s->groups;
    const float *x = j->x + (n * s->c + g * icg) * s->h * s->w;
    if (j->pointwise) return x;
    if (padded_for.call != j->call || padded_for.image != image || padded_for.scratch != buf) {
        struct padded_image p = j->padded;
        p.data = buf;
        /* Borders once a call (every image of the call has the same geometry), then the image. */
        if (padded_for.call != j->call || padded_for.scratch != buf) zero_borders(s, icg, p);
        pad_image(s, x, icg, p);
        padded_for.call = j->call;
        padded_for.image = image;
        padded_for.scratch = buf;
    }
    return buf;
}

/* A finished panel (rows of PG_PANEL floats, one per channel) into the next conv's padded
 * input, where `image` is its first channel's plane: each run of pixels along an output row
 * lands on a row of the padded image, split into the next conv's column phases. A run that
 * starts or ends a row also zeroes the row's border columns there (`edges`, unless they are
 * too wide: then the caller zeroes them), in cache lines the run writes anyway. */
static RELVM_VECTORIZE void store_onward(const struct relvm_conv2d_shape *next,
                                         struct padded_image p,
                                         const struct border_columns *edges, const float *tile,
                                         int64_t channels, const struct pixel_runs *r,
                                         float *image) {
    for (int64_t q = 0; q < r->count; ++q) {
        const int64_t col = r->ox[q] + next->pl, len = r->len[q];
        float *row = image + (r->oy[q] + next->pt) * p.rs;
        const float *src = tile + r->at[q];
        if (edges->count >= 0) {
            const int64_t from = r->ox[q] == 0 ? 0 : edges->left;
            const int64_t to = r->ox[q] + len == next->w ? edges->count : edges->left;
            for (int64_t i = from; i < to; ++i)
                for (int64_t ch = 0, at = edges->at[i]; ch < channels; ++ch)
                    row[ch * p.plane + at] = 0.0f;
        }
        if (next->sw == 1) {
            for (int64_t ch = 0; ch < channels; ++ch)
                memcpy(row + ch * p.plane + col, src + ch * PG_PANEL, (size_t)len * sizeof(float));
        } else if (next->sw == 2) {
            const int64_t even = phase_at(next, p, col), odd = phase_at(next, p, col + 1);
            for (int64_t ch = 0; ch < channels; ++ch)
                deinterleave_row(src + ch * PG_PANEL, len, row + ch * p.plane + even,
                                 row + ch * p.plane + odd);
        } else {
            for (int64_t ch = 0; ch < channels; ++ch)
                for (int64_t t = 0; t < len; ++t)
                    row[ch * p.plane + phase_at(next, p, col + t)] = src[ch * PG_PANEL + t];
        }
    }
}

/* Panel q of image `image` (n * groups + g) from its padded input `in`: into y, or into
 * `sums` (the mean's partial sums for this panel), or through `stage` into the next conv's
 * padded input `onward` (image n's first channel). `scratch` is panel_scratch(j) floats. */
static void conv_panel(const struct conv_pgemm *j, int64_t image, int64_t q, const float *in,
                       float *scratch, float *sums, float *onward) {
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t ocg = s->oc / s->groups, plane = s->oh * s->ow;
    const int64_t g = image % s->groups, n = image / s->groups;
    const int64_t p0 = q * PG_PANEL, npix = relvm_min64(PG_PANEL, plane - p0);
    const float *wg = j->w + g * ocg * j->k;
    float *packed = scratch, *stage = scratch + (j->ifn ? 0 : j->k * PG_PANEL);
    float *yg = j->y + (n * s->oc + g * ocg) * plane + p0;
    int64_t ldc = plane;
    struct pg_epilogue e = j->e; /* the group's rows: bias and sums from its first row */
    if (e.row_bias) e.row_bias += g * ocg;
    if (sums) {
        e.row_sums = sums;
        memset(sums, 0, (size_t)ocg * sizeof(float));
        yg = NULL; /* nothing is stored */
    } else if (onward) {
        yg = stage;
        ldc = PG_PANEL;
    }
    struct pixel_runs runs;
    if (!j->ifn || onward) panel_runs(s, p0, npix, &runs);
    if (j->ifn) { /* whole vectors along output rows: read the padded image in place */
        const float *bases[PG_PANEL];
        const int64_t oy0 = p0 / s->ow, ox0 = p0 - oy0 * s->ow; /* one division a panel */
        for (int64_t v = 0; v * j->width < PG_PANEL; ++v) {
            int64_t oy = oy0, ox = ox0 + relvm_min64(v * j->width, npix - j->width);
            for (; ox >= s->ow; ox -= s->ow) ++oy;
            bases[v] = in + oy * s->sh * j->padded.rs + ox;
        }
        j->ifn(ocg, j->k, j->wpacked + g * ocg * j->k, 0, bases, j->off, yg, ldc, npix, &e, 0,
               0);
    } else {
        int64_t run_base[PG_PANEL];
        for (int64_t r = 0; r < runs.count; ++r)
            run_base[r] = runs.oy[r] * s->sh * j->padded.rs + runs.ox[r];
        pack_panel(in, j->k, j->off, run_base, &runs, packed);
        j->fn(ocg, j->k, wg, j->k, packed, yg, ldc, npix, &e, 0, 0);
    }
    if (onward)
        store_onward(j->next, j->onward, &j->edges, stage, ocg, &runs,
                     onward + g * ocg * j->onward.plane);
}

/* Task t: image t / panels (n * groups + g), panel t % panels. */
static void conv_pgemm_tasks(void *ctx, int64_t begin, int64_t end) {
    struct conv_pgemm *j = ctx;
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t ocg = s->oc / s->groups, per_panel = panel_scratch(j);
    float *scratch = relvm_scratch_floats((size_t)(per_panel + padded_scratch(j)));
    if (!scratch) {
        j->failed = 1;
        return;
    }
    for (int64_t t = begin; t < end; ++t) {
        const int64_t q = t % j->panels, image = t / j->panels;
        const float *in = padded_input(j, image, scratch + per_panel);
        conv_panel(j, image, q, in, scratch, j->sums ? j->sums + t * ocg : NULL, NULL);
    }
}

/* Each group's weights (oc x k) as the indirect kernel reads them. */
static void pack_weights(const struct relvm_conv2d_shape *s, int64_t k, const float *w,
                         float *packed) {
    const int64_t ocg = s->oc / s->groups;
    for (int64_t g = 0; g < s->groups; ++g)
        relvm_pgemm_pack_rows(ocg, k, w + g * ocg * k, k, packed + g * ocg * k);
}

/* Sets up what j's tasks share: the unrolled offsets, the packed weights (for ifn, unless the
 * caller packed them) and, with `mean`, the partial sums. */
static int conv_prepare(struct conv_pgemm *j, int mean) {
    const struct relvm_conv2d_shape *s = j->s;
    int64_t *off = malloc((size_t)relvm_max64(1, j->k) * sizeof(int64_t));
    const int64_t tasks = s->n * s->groups * j->panels, ocg = s->oc / s->groups;
    float *sums = mean ? malloc((size_t)relvm_max64(1, tasks * ocg) * sizeof(float)) : NULL;
    const int pack = j->ifn && !j->wpacked;
    float *wowned = pack ? malloc((size_t)relvm_max64(1, s->oc * j->k) * sizeof(float)) : NULL;
    if (!off || (mean && !sums) || (pack && !wowned)) {
        free(off);
        free(sums);
        free(wowned);
        return RELVM_NO_MEMORY;
    }
    unrolled_offsets(s, j->padded, s->c / s->groups, off);
    if (pack) {
        pack_weights(s, j->k, j->w, wowned);
        j->wpacked = wowned;
    }
    j->off = off;
    j->sums = sums;
    j->wowned = wowned;
    return RELVM_OK;
}

/* y (n x oc) = the mean over each output plane, from the tasks' partial sums. */
static void conv_finish_mean(const struct conv_pgemm *j) {
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t ocg = s->oc / s->groups, plane = s->oh * s->ow;
    for (int64_t image = 0; image < s->n * s->groups; ++image)
        for (int64_t r = 0; r < ocg; ++r) {
            float total = 0.0f;
            for (int64_t q = 0; q < j->panels; ++q)
                total += j->sums[(image * j->panels + q) * ocg + r];
            j->y[image * ocg + r] = total / (float)plane;
        }
}

static void conv_release(struct conv_pgemm *j) {
    free((void *)j->off);
    free(j->sums);
    free(j->wowned);
}

static void conv_run(struct conv_pgemm *j) {
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t fmas = relvm_max64(1, s->oc / s->groups * PG_PANEL * relvm_max64(1, j->k));
    relvm_parallel_for(s->n * s->groups * j->panels, relvm_max64(1, PG_GRAIN_FMAS / fmas),
                       conv_pgemm_tasks, j);
}

/* y = epilogue(conv(x, w)), or with `mean`, y (n x oc) = the mean of that over each output
 * plane: each task sums its panel's pixels per channel (nothing else is stored), then the
 * partial sums are added up here. */
static int conv_pgemm(const struct relvm_conv2d_shape *s, const float *x, const float *w,
                      const float *wpacked, float *y, const float *bias, int relu, int mean) {
    struct conv_pgemm j = conv_job(s, x, w, wpacked, y, bias, relu);
    if (conv_prepare(&j, mean) != RELVM_OK) return RELVM_NO_MEMORY;
    conv_run(&j);
    if (mean && !j.failed) conv_finish_mean(&j);
    conv_release(&j);
    return j.failed ? RELVM_NO_MEMORY : RELVM_OK;
}

/* --- two convs in a row ------------------------------------------------------------------- */

/* Item i is band i % bands of image i / bands: a run of b's panels, taken through both convs on
 * one thread. The thread computes the rows of a's output those panels read straight into b's
 * padded input in its own scratch, where they stay in cache and are never stored whole; then
 * b's panels. Rows a neighbouring band also reads are computed by both, so threads never wait
 * for each other or read each other's writes. */
struct conv_pair {
    struct conv_pgemm *a, *b;
    int64_t bands;
    _Atomic int failed;
};

/* a's panels [*lo, *hi) cover every row of a's output (b's input) that b's panels [q0, q1)
 * read. */
static void pair_rows(const struct conv_pgemm *a, const struct conv_pgemm *b, int64_t q0,
                      int64_t q1, int64_t *lo, int64_t *hi) {
    const struct relvm_conv2d_shape *sa = a->s, *sb = b->s;
    const int64_t first = q0 * PG_PANEL / sb->ow;
    const int64_t last = (relvm_min64(q1 * PG_PANEL, sb->oh * sb->ow) - 1) / sb->ow;
    const int64_t top = relvm_max64(0, first * sb->sh - sb->pt);
    const int64_t end = relvm_min64(sa->oh, last * sb->sh - sb->pt + (sb->kh - 1) * sb->dh + 1);
    *lo = *hi = 0;
    if (end > top) {
        *lo = top * sa->ow / PG_PANEL;
        *hi = (end * sa->ow + PG_PANEL - 1) / PG_PANEL;
    }
}

/* Whose borders this thread's b input has zeroed (a thread may run several chunks of items). */
static _Thread_local struct {
    uint64_t call;
    float *scratch;
} mid_borders_for;

static void conv_pair_items(void *ctx, int64_t begin, int64_t end) {
    struct conv_pair *pr = ctx;
    struct conv_pgemm *a = pr->a, *b = pr->b;
    const int64_t per_panel = relvm_max64(panel_scratch(a), panel_scratch(b));
    const int64_t pad_a = padded_scratch(a), pad_b = b->s->c * b->padded.plane;
    float *scratch = relvm_scratch_floats((size_t)(per_panel + pad_a + pad_b));
    if (!scratch) {
        pr->failed = 1;
        return;
    }
    struct padded_image mid = b->padded;
    mid.data = scratch + per_panel + pad_a;
    if (mid_borders_for.call != b->call || mid_borders_for.scratch != mid.data) {
        /* Once a call: the items write the rest (with the border columns, see store_onward). */
        if (a->edges.count >= 0) zero_outer_rows(b->s, b->s->c, mid);
        else zero_borders(b->s, b->s->c, mid);
        mid_borders_for.call = b->call;
        mid_borders_for.scratch = mid.data;
    }
    const int64_t ocg_b = b->s->oc / b->s->groups;
    int64_t held = -1, held_lo = 0, held_hi = 0; /* mid holds a's panels [held_lo, held_hi) */
    for (int64_t i = begin; i < end; ++i) {
        const int64_t n = i / pr->bands, band = i % pr->bands;
        const int64_t q0 = b->panels * band / pr->bands, q1 = b->panels * (band + 1) / pr->bands;
        int64_t lo, hi;
        pair_rows(a, b, q0, q1, &lo, &hi);
        int64_t from = lo; /* the next band of the image just done reuses its rows */
        if (held == n && held_lo <= lo && lo <= held_hi) {
            from = relvm_max64(lo, held_hi);
            held_hi = relvm_max64(hi, held_hi);
        } else {
            held = n;
            held_lo = lo;
            held_hi = hi;
        }
        for (int64_t g = 0; g < a->s->groups; ++g) {
            const int64_t image = n * a->s->groups + g;
            const float *in = padded_input(a, image, scratch + per_panel);
            for (int64_t q = from; q < hi; ++q)
                conv_panel(a, image, q, in, scratch, NULL, mid.data);
        }
        for (int64_t g = 0; g < b->s->groups; ++g) {
            const int64_t image = n * b->s->groups + g;
            const float *in = mid.data + g * (b->s->c / b->s->groups) * mid.plane;
            for (int64_t q = q0; q < q1; ++q) {
                const int64_t t = image * b->panels + q;
                conv_panel(b, image, q, in, scratch, b->sums ? b->sums + t * ocg_b : NULL,
                           NULL);
            }
        }
    }
}

/* A band's rows of b's padded input should stay within this many bytes (a share of L2). */
#define PAIR_BAND_BYTES (512 << 10)

static int64_t gcd64(int64_t x, int64_t y) {
    while (y) {
        const int64_t r = x % y;
        x = y;
        y = r;
    }
    return x;
}

/* Bands per image: enough that the items divide evenly among the threads (a batch of one
 * image runs on every thread), and that a band's rows of b's input fit in cache. */
static int64_t pair_bands(const struct conv_pgemm *b) {
    const struct relvm_conv2d_shape *s = b->s;
    const int64_t threads = relvm_threads_get();
    int64_t bands = threads / gcd64(s->n, threads);
    const int64_t image_bytes = s->c * b->padded.plane * (int64_t)sizeof(float);
    while (image_bytes / bands > PAIR_BAND_BYTES && bands * 2 <= b->panels) bands *= 2;
    return relvm_max64(1, relvm_min64(bands, b->panels));
}

static int conv_pair(const struct relvm_conv2d_shape *sa, const struct relvm_conv2d_shape *sb,
                     const float *x, const float *wa, const float *bias_a, int relu_a,
                     const float *wb, float *y, const float *bias_b, int relu_b, int mean,
                     const float *wpacked_a, const float *wpacked_b) {
    struct conv_pgemm a = conv_job(sa, x, wa, wpacked_a, NULL, bias_a, relu_a);
    struct conv_pgemm b = conv_job(sb, NULL, wb, wpacked_b, y, bias_b, relu_b);
    a.next = sb;
    a.onward = b.padded;
    a.edges = border_columns(sb, b.padded);
    int status = conv_prepare(&a, 0);
    if (status == RELVM_OK) status = conv_prepare(&b, mean);
    struct conv_pair pr = {&a, &b, pair_bands(&b), 0};
    if (status == RELVM_OK) {
        const int64_t fmas = relvm_max64(1, (sa->oc * sa->oh * sa->ow * a.k +
                                             sb->oc * sb->oh * sb->ow * b.k) / pr.bands);
        relvm_parallel_for(sa->n * pr.bands, relvm_max64(1, PG_GRAIN_FMAS / fmas),
                           conv_pair_items, &pr);
        if (pr.failed) status = RELVM_NO_MEMORY;
        else if (mean) conv_finish_mean(&b);
    }
    conv_release(&a);
    conv_release(&b);
    return status;
}

/* --- depthwise: one input channel per group ---------------------------------------------- */

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
    _Atomic int failed; /* a thread could not get its scratch plane */
};

/* Item q is input plane (n, g); it feeds output channels g * mult ... g * mult + mult - 1. */
static void depthwise_planes(void *ctx, int64_t begin, int64_t end) {
    struct depthwise *j = ctx;
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t mult = s->oc / s->groups;
    float *buf = relvm_scratch_floats((size_t)(j->ph * j->pw));
    if (!buf) {
        j->failed = 1;
        return;
    }
    for (int64_t q = begin; q < end; ++q) {
        const int64_t n = q / s->c, g = q % s->c;
        const struct padded p = pad_plane(s, j->x + q * s->h * s->w, buf, j->ph, j->pw);
        for (int64_t m = 0; m < mult; ++m) {
            const int64_t o = g * mult + m;
            depthwise_plane(s, p, j->w + o * s->kh * s->kw,
                            j->y + (n * s->oc + o) * s->oh * s->ow);
        }
    }
}

/* --- conv2d_transpose: sgemm, then col2im ------------------------------------------------- */

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
    float *col = relvm_scratch_floats((size_t)(rows * plane));
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

static int depthwise_conv(const struct relvm_conv2d_shape *s, const float *x, const float *w,
                          float *y) {
    /* Rows and columns the windows reach, past the input and its top/left padding. */
    const int64_t ph = relvm_max64(s->pt + s->h, (s->oh - 1) * s->sh + (s->kh - 1) * s->dh + 1);
    const int64_t pw = relvm_max64(s->pl + s->w, (s->ow - 1) * s->sw + (s->kw - 1) * s->dw + 1);
    struct depthwise j = {s, x, w, y, ph, pw, 0};
    const int64_t work = relvm_max64(1, s->oc / s->groups * s->oh * s->ow * s->kh * s->kw);
    relvm_parallel_for(s->n * s->c, relvm_max64(1, RELVM_GRAIN / work), depthwise_planes, &j);
    return j.failed ? RELVM_NO_MEMORY : RELVM_OK;
}

static int valid_shape(const struct relvm_conv2d_shape *s) {
    return s->n >= 0 && s->c >= 0 && s->h >= 0 && s->w >= 0 && s->oc >= 0 && s->kh >= 1 &&
           s->kw >= 1 && s->oh >= 0 && s->ow >= 0 && s->sh >= 1 && s->sw >= 1 && s->pt >= 0 &&
           s->pl >= 0 && s->dh >= 1 && s->dw >= 1 && s->groups >= 1 && s->c % s->groups == 0 &&
           s->oc % s->groups == 0;
}

/* The epilogue over a finished output, for the paths that do not apply it per tile. */
static void epilogue_planes(const struct relvm_conv2d_shape *s, float *y, const float *bias,
                            int relu) {
    if (!bias && !relu) return;
    const int64_t plane = s->oh * s->ow;
    for (int64_t q = 0; q < s->n * s->oc; ++q) {
        const float b = bias ? bias[q % s->oc] : 0.0f;
        float *p = y + q * plane;
        for (int64_t i = 0; i < plane; ++i) {
            const float v = p[i] + b;
            p[i] = relu && v < 0 ? 0.0f : v;
        }
    }
}

RELVM_EXPORT int relvm_conv2d(int dtype, const struct relvm_conv2d_shape *s, const void *x,
                              const void *w, void *y, const void *bias, int relu,
                              const void *wpacked) {
    if (dtype != RELVM_FLOAT32 || !valid_shape(s)) return RELVM_UNSUPPORTED;
    const int64_t total = s->n * s->oc * s->oh * s->ow;
    if (total == 0) return RELVM_OK;
    if (s->c == 0) { /* no input channels: every output sums nothing */
        memset(y, 0, (size_t)total * sizeof(float));
        epilogue_planes(s, y, bias, relu);
        return RELVM_OK;
    }
    if (s->c == s->groups) {
        const int status = depthwise_conv(s, x, w, y);
        if (status == RELVM_OK) epilogue_planes(s, y, bias, relu);
        return status;
    }
    return conv_pgemm(s, x, w, wpacked, y, bias, relu, 0);
}

RELVM_EXPORT int relvm_conv2d_mean(int dtype, const struct relvm_conv2d_shape *s, const void *x,
                                   const void *w, void *y, const void *bias, int relu,
                                   const void *wpacked) {
    /* The GEMM path only: depthwise convs and convs of no input channels are the caller's. */
    if (dtype != RELVM_FLOAT32 || !valid_shape(s) || s->c == 0 || s->c == s->groups)
        return RELVM_UNSUPPORTED;
    if (s->n * s->oc == 0) return RELVM_OK;
    if (s->oh * s->ow == 0) { /* the mean of nothing */
        for (int64_t i = 0; i < s->n * s->oc; ++i) ((float *)y)[i] = __builtin_nanf("");
        return RELVM_OK;
    }
    return conv_pgemm(s, x, w, wpacked, y, bias, relu, 1);
}

RELVM_EXPORT int relvm_conv2d_pair(int dtype, const struct relvm_conv2d_shape *a,
                                   const struct relvm_conv2d_shape *b, const void *x,
                                   const void *wa, const void *bias_a, int relu_a,
                                   const void *wb, void *y, const void *bias_b, int relu_b,
                                   int mean, const void *wpacked_a, const void *wpacked_b) {
    /* Both on the GEMM path (no depthwise conv, input channels on both), b reading a's output. */
    if (dtype != RELVM_FLOAT32 || !valid_shape(a) || !valid_shape(b) || a->c == 0 ||
        b->c == 0 || (a->groups > 1 && a->c == a->groups) ||
        (b->groups > 1 && b->c == b->groups) || b->n != a->n || b->c != a->oc ||
        b->h != a->oh || b->w != a->ow)
        return RELVM_UNSUPPORTED;
    if (a->h * a->w == 0 || b->h * b->w == 0 || b->oh * b->ow == 0) return RELVM_UNSUPPORTED;
    if (b->n * b->oc == 0) return RELVM_OK;
    return conv_pair(a, b, x, wa, bias_a, relu_a, wb, y, bias_b, relu_b, mean, wpacked_a,
                     wpacked_b);
}

RELVM_EXPORT int64_t relvm_conv2d_packed_size(const struct relvm_conv2d_shape *s) {
    if (!valid_shape(s) || s->c == 0 || s->c == s->groups) return 0;
    int width;
    relvm_pgemm_ipanel_kernel(&width);
    return s->ow % width == 0 ? s->oc * (s->c / s->groups) * s->kh * s->kw : 0;
}

RELVM_EXPORT void relvm_conv2d_pack_weights(const struct relvm_conv2d_shape *s, const void *w,
                                            void *packed) {
    if (relvm_conv2d_packed_size(s) > 0)
        pack_weights(s, s->c / s->groups * s->kh * s->kw, w, packed);
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
