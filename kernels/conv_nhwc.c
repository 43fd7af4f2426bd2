/* nn.conv2d over NHWC data (relvm_conv2d_nhwc, conv.h). Channels are the fastest axis, so an
 * output pixel's channels are one run of the output and a tap's input channels one run of the
 * input, whatever the plane's size: the vectors run along channels, never along a row of
 * pixels (no lanes lost to a 7- or 14-pixel row, no transposes in or out of pixel panels).
 *
 * - Depthwise form (one input channel per group, as many output channels): each output pixel
 *   a vector of channels at a time, bias + the taps' weights (packed tap-major, taps x C) times
 *   the pixels they read (internal/dw_nhwc.h), vectors no wider than the channels; the pixels
 *   whose taps read inside the image (in the window's rows that do, at the top and bottom
 *   rows) with the weights in registers over the row, four at a time; those at the left and
 *   right borders one by one over the part of the window inside the image (on a plane 3 rows
 *   high every row had been a border row: an OCR model's depthwise convs over 3 x 96 ran
 *   1.3-1.5x slower than NCHW), several vectors of channels at once.
 * - GEMM form (every other conv), output pixels x a group's output channels in panels of 32
 *   (the weights packed as GEMM panels, k tap-major), on relvm's GEMM tile (pgemm_tile.h):
 *   - a 1x1 conv of stride 1 and no padding is one GEMM over the pixels of all images, A the
 *     input itself, read in place;
 *   - with fewer than NHWC_GATHER_BELOW input channels a group (an RGB stem's 3), A gathered
 *     a band of output pixels at a time, each pixel's taps in a row (k = taps * icg), one GEMM
 *     per panel over the band;
 *   - otherwise, along an output row, pixel r's tap (i, j) reads its channels at a fixed offset
 *     plus r * sw * C, so each tap is a GEMM step whose A is the input itself (row stride
 *     sw * C), the taps of a row summed in its output (the tile's `part`; padding is a tap's
 *     shorter run of pixels); a task is a band of output rows, k in blocks of taps (or of a
 *     tap's channels) whose weights stay in L1 over the band's rows;
 * Tasks are chunks of pixels or bands of output rows by panel, panel by panel when the weights
 * are large (read once, fetched ahead) or chunk by chunk (each output pixel's channels written
 * together). The bias and clamp run in the tile's epilogue; `post` over each finished block
 * (whole rows of a chunk's channels where a task runs them all) while it is in cache. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "relvm_config.h"
#include "conv.h"
#include "internal/conv_shared.h"
#include "internal/pgemm_panel.h"
#include "internal/types.h"
#include "threads.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define DWN_MULTI_ISA 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")
#define DWN_SUFFIX avx512
#define DWN_VW 16
#include "internal/dw_nhwc.h"
#undef DWN_SUFFIX
#undef DWN_VW
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define DWN_SUFFIX avx2
#define DWN_VW 8
#include "internal/dw_nhwc.h"
#undef DWN_SUFFIX
#undef DWN_VW
#pragma GCC pop_options
#endif

#define DWN_SUFFIX base
#define DWN_VW 4
#include "internal/dw_nhwc.h"
#undef DWN_SUFFIX
#undef DWN_VW

typedef void dwn_inner_fn(int64_t count, const float *p, int64_t step, const int64_t *off,
                          const int64_t *woff, const float *wt, int64_t taps, int64_t C,
                          const float *bias, const float *clamp, float *out);

/* The depthwise loops for the GEMM's instruction set (RELVM_PGEMM_ISA chooses a lesser one for
 * both), and their vector width. */
struct dwn_kernels {
    dwn_inner_fn *inner; /* a row's pixels whose taps all read inside the image */
    dwn_inner_fn *few;   /* one to three pixels, their taps listed */
    int64_t width;
};

static struct dwn_kernels dwn_kernels(int64_t C) {
    int w = 4;
    relvm_pgemm_ipanel_kernel(&w);
#ifdef DWN_MULTI_ISA
    /* no wider than the channels: 8 channels run whole AVX2 vectors, not one float at a time */
    if (w == 16 && C >= 16) return (struct dwn_kernels){inner_avx512, few_avx512, 16};
    if (w >= 8 && C >= 8) return (struct dwn_kernels){inner_avx2, few_avx2, 8};
#endif
    (void)C;
    return (struct dwn_kernels){inner_base, few_base, 4};
}

static int nhwc_depthwise(const struct relvm_conv2d_shape *s) {
    return s->c > 0 && s->groups == s->c && s->oc == s->c;
}

static int64_t div_floor(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* The output columns [lo, hi) whose tap column j reads inside the image (0 <= ix < w). */
static void tap_columns(const struct relvm_conv2d_shape *s, int64_t j, int64_t *lo,
                        int64_t *hi) {
    const int64_t shift = j * s->dw - s->pl; /* ix = ox * sw + shift */
    *lo = relvm_max64(0, div_floor(-shift + s->sw - 1, s->sw));
    *hi = relvm_min64(s->ow, div_floor(s->w - 1 - shift, s->sw) + 1);
    if (*hi < *lo) *hi = *lo;
}

/* --- depthwise form --------------------------------------------------------------------- */

struct dwn_job {
    const struct relvm_conv2d_shape *s;
    const float *x, *wt, *bias, *clamp;
    float *y;
    relvm_block_fn *post;
    void *post_ctx;
    int64_t band; /* output rows per task */
    _Atomic int failed;
};

/* Channels fewer than a vector (C < 4): output row oy's pixels one channel at a time, each
 * over the taps that read inside the image. */
static void dwn_row_narrow(const struct relvm_conv2d_shape *s, const float *image,
                           const float *wt, const float *bias, const float *clamp, int64_t oy,
                           float *out) {
    const int64_t C = s->c;
    for (int64_t ox = 0; ox < s->ow; ++ox)
        for (int64_t c = 0; c < C; ++c) {
            float acc = bias ? bias[c] : 0.0f;
            for (int64_t i = 0; i < s->kh; ++i) {
                const int64_t iy = oy * s->sh - s->pt + i * s->dh;
                if (iy < 0 || iy >= s->h) continue;
                for (int64_t j = 0; j < s->kw; ++j) {
                    const int64_t ix = ox * s->sw - s->pl + j * s->dw;
                    if (ix < 0 || ix >= s->w) continue;
                    acc += wt[(i * s->kw + j) * C + c] * image[(iy * s->w + ix) * C + c];
                }
            }
            if (clamp) {
                if (acc < clamp[0]) acc = clamp[0];
                if (acc > clamp[1]) acc = clamp[1];
            }
            out[ox * C + c] = acc;
        }
}

/* Output pixel (oy, ox) at a border: over the part of the window that reads inside the image,
 * window rows [i0, i1) x the columns [j0, j1) that do (tables off and woff: taps long). */
static void dwn_border(const struct dwn_job *j, struct dwn_kernels k, const float *image,
                       int64_t oy, int64_t ox, int64_t i0, int64_t i1, int64_t *off,
                       int64_t *woff, float *out) {
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t C = s->c, iy0 = oy * s->sh - s->pt, ix0 = ox * s->sw - s->pl;
    int64_t j0 = 0, j1 = s->kw, nt = 0;
    while (j0 < s->kw && ix0 + j0 * s->dw < 0) ++j0;
    while (j1 > j0 && ix0 + (j1 - 1) * s->dw >= s->w) --j1;
    for (int64_t i = i0; i < i1; ++i)
        for (int64_t jj = j0; jj < j1; ++jj, ++nt) {
            off[nt] = ((iy0 + i * s->dh) * s->w + ix0 + jj * s->dw) * C;
            woff[nt] = (i * s->kw + jj) * C;
        }
    k.few(1, image, 0, off, woff, j->wt, nt, C, j->bias, j->clamp, out);
}

/* Item q is band q % bands of image q / bands. A row's pixels whose taps' columns all read
 * inside the image go through `inner` together (the window's rows that read inside, at the
 * top and bottom of the image); each pixel at the left and right borders alone through `few`,
 * over the part of the window that reads inside (a run of its rows x a run of its columns). */
static void dwn_tasks(void *ctx, int64_t begin, int64_t end) {
    struct dwn_job *j = ctx;
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t taps = s->kh * s->kw, C = s->c, bands = (s->oh + j->band - 1) / j->band;
    const struct dwn_kernels k = dwn_kernels(C);
    const int narrow = C < k.width;
    /* The output columns whose taps all read inside the image (on a row whose taps do). */
    int64_t xa = 0, xb = s->ow;
    for (int64_t jj = 0; jj < s->kw; ++jj) {
        int64_t lo, hi;
        tap_columns(s, jj, &lo, &hi);
        xa = relvm_max64(xa, lo);
        xb = relvm_min64(xb, hi);
    }
    xa = relvm_min64(xa, s->ow);
    xb = relvm_min64(relvm_max64(xb, xa), s->ow);
    /* The window's input offsets and weight offsets (int64s), tap-major; then a border
     * pixel's. */
    int64_t *off = (int64_t *)(void *)relvm_conv_scratch_floats((size_t)(8 * taps));
    if (!off) {
        j->failed = 1;
        return;
    }
    int64_t *woff = off + taps, *boff = woff + taps, *bwoff = boff + taps;
    for (int64_t i = 0; i < s->kh; ++i)
        for (int64_t jj = 0; jj < s->kw; ++jj) {
            off[i * s->kw + jj] = (i * s->dh * s->w + jj * s->dw) * C;
            woff[i * s->kw + jj] = (i * s->kw + jj) * C;
        }
    for (int64_t q = begin; q < end; ++q) {
        const int64_t n = q / bands, oy0 = q % bands * j->band;
        const int64_t oy1 = relvm_min64(s->oh, oy0 + j->band);
        const float *image = j->x + n * s->h * s->w * C;
        for (int64_t oy = oy0; oy < oy1; ++oy) {
            const int64_t at = ((n * s->oh + oy) * s->ow) * C, iy0 = oy * s->sh - s->pt;
            float *yrow = j->y + at;
            if (narrow) {
                dwn_row_narrow(s, image, j->wt, j->bias, j->clamp, oy, yrow);
                if (j->post) j->post(j->post_ctx, at, 1, s->ow * C, s->ow * C);
                continue;
            }
            /* the window's rows that read inside the image, [i0, i1): a run, whose taps are
             * a run of the tap-major weights, and whose offsets from row i0 are off's first */
            int64_t i0 = 0, i1 = s->kh;
            while (i0 < s->kh && iy0 + i0 * s->dh < 0) ++i0;
            while (i1 > i0 && iy0 + (i1 - 1) * s->dh >= s->h) --i1;
            const int64_t a = i1 > i0 ? xa : s->ow, b = i1 > i0 ? xb : s->ow;
            if (b > a) /* every tap of rows [i0, i1) reads inside */
                k.inner(b - a, image + ((iy0 + i0 * s->dh) * s->w + a * s->sw - s->pl) * C,
                        s->sw * C, off, woff, j->wt + i0 * s->kw * C, (i1 - i0) * s->kw, C,
                        j->bias, j->clamp, yrow + a * C);
            for (int64_t ox = 0; ox < a; ++ox) /* the left border (or the whole row) */
                dwn_border(j, k, image, oy, ox, i0, i1, boff, bwoff, yrow + ox * C);
            for (int64_t ox = b; ox < s->ow; ++ox) /* the right border */
                dwn_border(j, k, image, oy, ox, i0, i1, boff, bwoff, yrow + ox * C);
            if (j->post) j->post(j->post_ctx, at, 1, s->ow * C, s->ow * C);
        }
    }
}

/* w (C, 1, kh, kw) tap-major: packed[t * C + c] = w[c][t]. */
static void dwn_pack(const struct relvm_conv2d_shape *s, const float *w, float *packed) {
    const int64_t taps = s->kh * s->kw;
    for (int64_t c = 0; c < s->c; ++c)
        for (int64_t t = 0; t < taps; ++t) packed[t * s->c + c] = w[c * taps + t];
}

static int dwn_conv(const struct relvm_conv2d_shape *s, const float *x, const float *wt,
                    float *y, const float *bias, const float *clamp, relvm_block_fn *post,
                    void *post_ctx) {
    const int64_t row_work = relvm_max64(1, s->ow * s->c * s->kh * s->kw);
    const int64_t band = relvm_max64(1, relvm_min64(s->oh, RELVM_GRAIN / row_work));
    struct dwn_job j = {s, x, wt, bias, clamp, y, post, post_ctx, band, 0};
    const int64_t bands = (s->oh + band - 1) / band;
    relvm_parallel_for(s->n * bands, 1, dwn_tasks, &j);
    return j.failed ? RELVM_NO_MEMORY : RELVM_OK;
}

/* --- GEMM form -------------------------------------------------------------------------- */

struct nhwc_job {
    const struct relvm_conv2d_shape *s;
    const float *x, *wp, *bias, *clamp;
    float *y;
    relvm_block_fn *post;
    void *post_ctx;
    pg_rpanel_fn *fn;               /* the tile, A read in place */
    int64_t icg, ocg, taps, k;      /* k = taps * icg, one group's */
    int64_t panels;                 /* panels of 32 output channels per group */
    int flat;                       /* a 1x1 conv of stride 1, no padding: A is x itself */
    int gather;                     /* few input channels: A gathered a band at a time */
    int64_t chunk, chunks;          /* pixels (flat) or output rows (a band) per task */
    int panel_major;                /* tasks panel by panel (else chunk by chunk) */
    _Atomic int failed;
};

static int64_t nhwc_panels(const struct relvm_conv2d_shape *s) {
    return (s->oc / s->groups + PG_PANEL - 1) / PG_PANEL;
}

/* w (oc, icg, kh, kw) as GEMM panels: group g's panel q is taps * icg rows (tap-major, then
 * input channel) of PG_PANEL output channels, zero past the group's channels. */
static void nhwc_pack(const struct relvm_conv2d_shape *s, const float *w, float *packed) {
    const int64_t icg = s->c / s->groups, ocg = s->oc / s->groups, taps = s->kh * s->kw;
    const int64_t panels = nhwc_panels(s), k = taps * icg;
    for (int64_t g = 0; g < s->groups; ++g)
        for (int64_t q = 0; q < panels; ++q) {
            float *panel = packed + (g * panels + q) * k * PG_PANEL;
            for (int64_t t = 0; t < taps; ++t)
                for (int64_t ic = 0; ic < icg; ++ic) {
                    float *row = panel + (t * icg + ic) * PG_PANEL;
                    for (int64_t col = 0; col < PG_PANEL; ++col) {
                        const int64_t o = q * PG_PANEL + col;
                        row[col] = o < ocg ? w[((g * ocg + o) * icg + ic) * taps + t] : 0.0f;
                    }
                }
        }
}

/* The epilogue of group g's panels; with `fetch`, the tile fetches the next panel's rows as
 * it reads its own (weights from memory, a large model's, stream behind the arithmetic). */
static struct pg_epilogue nhwc_epilogue(const struct nhwc_job *j, int64_t g, int fetch) {
    const struct pg_epilogue e = {NULL, j->bias ? j->bias + g * j->ocg : NULL, j->clamp != NULL,
                                  j->clamp ? j->clamp[0] : 0.0f, j->clamp ? j->clamp[1] : 0.0f,
                                  NULL, fetch ? j->k * PG_PANEL : 0};
    return e;
}

/* Channels [c0, c0 + kc) of tap t of output row oy (image at the group's first channel)
 * against panel q: the tap's pixels, those whose tap reads inside the image, as one GEMM of
 * k = kc, with `part`. */
static void nhwc_tap(const struct nhwc_job *j, const struct pg_epilogue *e, const float *image,
                     int64_t oy, int64_t q, const float *panel, float *yrow, int64_t cols,
                     int64_t t, int64_t c0, int64_t kc, int part) {
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t i = t / s->kw, jj = t % s->kw, iy = oy * s->sh - s->pt + i * s->dh;
    if (iy < 0 || iy >= s->h) return;
    int64_t lo, hi;
    tap_columns(s, jj, &lo, &hi);
    if (lo >= hi) return;
    const int64_t ix = lo * s->sw - s->pl + jj * s->dw;
    j->fn(hi - lo, kc, image + (iy * s->w + ix) * s->c + c0, s->sw * s->c,
          panel + (t * j->icg + c0) * PG_PANEL, yrow + lo * s->oc, s->oc, cols, e, 0,
          q * PG_PANEL, part);
}

/* k in blocks of about NHWC_KC (as the NCHW direct form's): a block's weights (18 KB of a
 * panel) stay in L1 while the band's rows all use them, where a row's every tap in turn
 * streamed the whole panel (9 x 64 channels x 32 floats, 72 KB) from L2 for each row. A unit
 * is tap t's channels in block b of `blocks` (blocks > 1 when a tap alone holds more than a
 * block), and a block is `per` units (a 3x3 conv of 512 channels over 7 x 7 ran in 0.90 of
 * the time of whole-k rows; the other ResNet layers within 3% either way). */
#define NHWC_KC 144
#define NHWC_BAND_PIXELS 64 /* a band: whole output rows, at least this many pixels */
#define NHWC_BAND_ROWS 64   /* and at most this many rows */

struct nhwc_units {
    int64_t blocks, width, per; /* channel blocks per tap, their width, units per k block */
};

static struct nhwc_units nhwc_units(const struct nhwc_job *j) {
    struct nhwc_units u;
    u.blocks = (j->icg + NHWC_KC - 1) / NHWC_KC;
    u.width = (j->icg + u.blocks - 1) / u.blocks;
    u.per = u.blocks == 1 ? relvm_max64(1, NHWC_KC / j->icg) : 1;
    return u;
}

/* Output row oy's first and last units (tap * blocks + block): the first of a tap covering the
 * whole row starts the sums (part 1), the last of another such tap (or of the same tap's last
 * block) ends them with the epilogue (part 3); -1 where there is none: the row is then
 * cleared first, or its epilogue runs as a pass of k = 0 over the sums. */
static void nhwc_row_ends(const struct nhwc_job *j, const struct nhwc_units *u, int64_t oy,
                          int64_t *first, int64_t *last) {
    const struct relvm_conv2d_shape *s = j->s;
    int64_t f = -1, l = -1; /* taps covering the whole row */
    for (int64_t i = 0; i < s->kh; ++i) {
        const int64_t iy = oy * s->sh - s->pt + i * s->dh;
        if (iy < 0 || iy >= s->h) continue;
        for (int64_t jj = 0; jj < s->kw; ++jj) {
            int64_t lo, hi;
            tap_columns(s, jj, &lo, &hi);
            if (lo == 0 && hi == s->ow) {
                if (f < 0)
                    f = i * s->kw + jj;
                else
                    l = i * s->kw + jj;
            }
        }
    }
    *first = f < 0 ? -1 : f * u->blocks;
    *last = l >= 0 ? l * u->blocks + u->blocks - 1
                   : f >= 0 && u->blocks > 1 ? f * u->blocks + u->blocks - 1 : -1;
}

/* Output rows [oy0, oy1) of image n against panel q of group g, k block by k block, each
 * block over every row of the band (then the rows' epilogues and post). */
static void nhwc_band(const struct nhwc_job *j, const struct pg_epilogue *e, int64_t n,
                      int64_t oy0, int64_t oy1, int64_t g, int64_t q, const float *panel,
                      float *y, int64_t cols) {
    const struct relvm_conv2d_shape *s = j->s;
    const struct nhwc_units u = nhwc_units(j);
    const int64_t units = j->taps * u.blocks, rows = oy1 - oy0;
    const float *image = j->x + n * s->h * s->w * s->c + g * j->icg;
    int64_t first[NHWC_BAND_ROWS], last[NHWC_BAND_ROWS];
    const int single = units == 1;
    for (int64_t r = 0; r < rows; ++r) nhwc_row_ends(j, &u, oy0 + r, &first[r], &last[r]);
    for (int64_t u0 = 0; u0 < units; u0 += u.per) {
        const int64_t u1 = relvm_min64(units, u0 + u.per);
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t oy = oy0 + r;
            float *yrow = y + (n * s->oh + oy) * s->ow * s->oc;
            if (u0 == 0) {
                if (first[r] >= 0)
                    nhwc_tap(j, e, image, oy, q, panel, yrow, cols, first[r] / u.blocks, 0,
                             relvm_min64(u.width, j->icg), single ? 0 : 1);
                else
                    for (int64_t ox = 0; ox < s->ow; ++ox)
                        memset(yrow + ox * s->oc, 0, (size_t)cols * sizeof(float));
            }
            for (int64_t v = u0; v < u1; ++v) {
                if (v == first[r] || v == last[r]) continue;
                const int64_t c0 = v % u.blocks * u.width;
                nhwc_tap(j, e, image, oy, q, panel, yrow, cols, v / u.blocks, c0,
                         relvm_min64(u.width, j->icg - c0), 2);
            }
            if (u1 < units) continue;
            if (last[r] >= 0) {
                const int64_t c0 = last[r] % u.blocks * u.width;
                nhwc_tap(j, e, image, oy, q, panel, yrow, cols, last[r] / u.blocks, c0,
                         relvm_min64(u.width, j->icg - c0), 3);
            } else if (!(first[r] >= 0 && single)) { /* the epilogue: k = 0 from the sums */
                j->fn(s->ow, 0, image, s->sw * s->c, panel, yrow, s->oc, cols, e, 0,
                      q * PG_PANEL, 3);
            }
            if (j->post)
                j->post(j->post_ctx, yrow - j->y, s->ow, cols, s->oc);
        }
    }
}

/* Task t (not flat, rows read tap by tap): band t % chunks of panel t / chunks (panel-major)
 * or the reverse; a panel is (group, panel of the group). */
static void nhwc_band_tasks(void *ctx, int64_t begin, int64_t end) {
    struct nhwc_job *j = ctx;
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t all_panels = s->groups * j->panels;
    const int64_t bands = (s->oh + j->chunk - 1) / j->chunk;
    for (int64_t t = begin; t < end; ++t) {
        const int64_t chunk = j->panel_major ? t % j->chunks : t / all_panels;
        const int64_t gq = j->panel_major ? t / j->chunks : t % all_panels;
        const int64_t g = gq / j->panels, q = gq % j->panels;
        const int64_t cols = relvm_min64(PG_PANEL, j->ocg - q * PG_PANEL);
        const float *panel = j->wp + gq * j->k * PG_PANEL;
        const struct pg_epilogue e = nhwc_epilogue(j, g, chunk == 0 && gq + 1 < all_panels);
        const int64_t col = g * j->ocg + q * PG_PANEL;
        const int64_t n = chunk / bands, oy0 = chunk % bands * j->chunk;
        nhwc_band(j, &e, n, oy0, relvm_min64(s->oh, oy0 + j->chunk), g, q, panel, j->y + col,
                  cols);
    }
}

/* The flat GEMM (a 1x1 conv of stride 1, no padding: output pixels x input channels, all
 * images one run of pixels), A read in place. Task t: panel-major, panel t / chunks of chunk
 * t % chunks; chunk-major, every panel of chunk t / groups for group t % groups. (Packing A
 * per chunk first, relvm_pgemm_pack_rows, was faster for a k of 16-64 while the tile kept a
 * pointer per row of A; since it reads rows through four, in place ran those in 0.55-0.99 of
 * the time on every instruction set: 32 -> 16 channels over 112 x 112, 0.55.) */
static void nhwc_flat_tasks(void *ctx, int64_t begin, int64_t end) {
    struct nhwc_job *j = ctx;
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t all_panels = s->groups * j->panels, pixels = s->n * s->h * s->w;
    for (int64_t t = begin; t < end; ++t) {
        const int64_t chunk = j->panel_major ? t % j->chunks : t / s->groups;
        const int64_t first = j->panel_major ? t / j->chunks : t % s->groups * j->panels;
        const int64_t count = j->panel_major ? 1 : j->panels; /* panels this task runs */
        const int64_t g = first / j->panels;
        const int64_t p0 = chunk * j->chunk, m = relvm_min64(j->chunk, pixels - p0);
        const float *a = j->x + p0 * s->c + g * j->icg;
        for (int64_t gq = first; gq < first + count; ++gq) {
            const int64_t q = gq % j->panels, col = g * j->ocg + q * PG_PANEL;
            const int64_t cols = relvm_min64(PG_PANEL, j->ocg - q * PG_PANEL);
            const struct pg_epilogue e = nhwc_epilogue(j, g, chunk == 0 && gq + 1 < all_panels);
            const float *panel = j->wp + gq * j->k * PG_PANEL;
            float *y = j->y + p0 * s->oc + col;
            j->fn(m, j->k, a, s->c, panel, y, s->oc, cols, &e, 0, q * PG_PANEL, 0);
            if (j->post && count == 1) j->post(j->post_ctx, p0 * s->oc + col, m, cols, s->oc);
        }
        /* a chunk's every panel: the fused rest over whole rows of channels (a post call per
         * panel ran 32-float rows, and its loop's setup per row cost more than the SiLU) */
        if (j->post && count > 1)
            j->post(j->post_ctx, p0 * s->oc + g * j->ocg, m, j->ocg, s->oc);
    }
}

/* Few input channels a group (NHWC_GATHER_BELOW): a tap's k = icg is too short a GEMM step
 * to run alone (each one a pass over the tile's sums in C: an RGB stem's 3 channels, 9 passes
 * of k = 3), so A is gathered: a band's output pixels, each its taps' input channels in a row
 * of k = taps * icg (zeros where a tap reads padding), one GEMM over the band per panel.
 * Task t: band t, every group and panel (the band gathered once a group). On AMD Zen 4 a
 * ResNet's 7x7 3 -> 64 stem took 0.53 of the time tap by tap, a 3x3 3 -> 32 one 0.8; from 8
 * channels up the taps in place were as fast or faster (16 -> 16: 0.8 of the gathered time). */
#define NHWC_GATHER_BELOW 8

/* Pixels in a padded input row as the window reads it: the left padding, the row, and
 * whatever the last window reaches past it (the right padding). */
static int64_t nhwc_line_pixels(const struct relvm_conv2d_shape *s) {
    return relvm_max64(s->pl + s->w, (s->ow - 1) * s->sw + (s->kw - 1) * s->dw + 1);
}

/* Output row oy's pixels into A (a row of j->k floats each, tap-major then channel): the
 * input rows the window's rows read (the group's icg channels of each pixel) copied first into
 * `lines`, one each, with the padding's zeros at both ends (a row outside the image all
 * zeros); then pixel by pixel, window row by window row, its run of taps (kw * icg floats when
 * the taps are adjacent, dw = 1; else each tap's icg) copied out of them. The copies are whole
 * 16-float vectors written in increasing order, each run's last one reaching past it into the
 * next run, which overwrites that part next: so A and each line have 16 floats of slack. */
static void nhwc_gather_row(const struct nhwc_job *j, const float *image, int64_t oy,
                            float *a, float *lines) {
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t icg = j->icg, wide = nhwc_line_pixels(s), stride = wide * icg + 16;
    const int64_t run = s->dw == 1 ? s->kw * icg : icg, runs = s->dw == 1 ? 1 : s->kw;
    for (int64_t i = 0; i < s->kh; ++i) {
        const int64_t iy = oy * s->sh - s->pt + i * s->dh;
        float *line = lines + i * stride;
        if (iy < 0 || iy >= s->h) {
            memset(line, 0, (size_t)(wide * icg) * sizeof(float));
            continue;
        }
        memset(line, 0, (size_t)(s->pl * icg) * sizeof(float));
        const float *from = image + iy * s->w * s->c;
        float *to = line + s->pl * icg;
        if (icg == s->c) {
            memcpy(to, from, (size_t)(s->w * icg) * sizeof(float));
        } else {
            for (int64_t x = 0; x < s->w; ++x)
                memcpy(to + x * icg, from + x * s->c, (size_t)icg * sizeof(float));
        }
        memset(line + (s->pl + s->w) * icg, 0,
               (size_t)((wide - s->pl - s->w) * icg) * sizeof(float));
    }
    for (int64_t ox = 0; ox < s->ow; ++ox) {
        float *to = a + ox * j->k;
        for (int64_t i = 0; i < s->kh; ++i)
            for (int64_t r = 0; r < runs; ++r, to += run) {
                const float *from = lines + i * stride + (ox * s->sw + r * s->dw) * icg;
                for (int64_t c = 0; c < run; c += 16) /* (one 64-byte move, inlined) */
                    __builtin_memcpy(to + c, from + c, 16 * sizeof(float));
            }
    }
}

static void nhwc_gather_tasks(void *ctx, int64_t begin, int64_t end) {
    struct nhwc_job *j = ctx;
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t bands = (s->oh + j->chunk - 1) / j->chunk;
    const int64_t size = j->chunk * s->ow * j->k + 16; /* then the lines, see gather_row */
    float *a = relvm_conv_scratch_floats(
        (size_t)(size + s->kh * (nhwc_line_pixels(s) * j->icg + 16)));
    if (!a) {
        j->failed = 1;
        return;
    }
    float *lines = a + size;
    for (int64_t t = begin; t < end; ++t) {
        const int64_t n = t / bands, oy0 = t % bands * j->chunk;
        const int64_t oy1 = relvm_min64(s->oh, oy0 + j->chunk), m = (oy1 - oy0) * s->ow;
        const int64_t p0 = (n * s->oh + oy0) * s->ow; /* the band's first output pixel */
        for (int64_t g = 0; g < s->groups; ++g) {
            const float *image = j->x + n * s->h * s->w * s->c + g * j->icg;
            for (int64_t oy = oy0; oy < oy1; ++oy)
                nhwc_gather_row(j, image, oy, a + (oy - oy0) * s->ow * j->k, lines);
            for (int64_t q = 0; q < j->panels; ++q) {
                const int64_t gq = g * j->panels + q, col = g * j->ocg + q * PG_PANEL;
                const int64_t cols = relvm_min64(PG_PANEL, j->ocg - q * PG_PANEL);
                const struct pg_epilogue e = nhwc_epilogue(j, g, 0);
                j->fn(m, j->k, a, j->k, j->wp + gq * j->k * PG_PANEL, j->y + p0 * s->oc + col,
                      s->oc, cols, &e, 0, q * PG_PANEL, 0);
            }
            if (j->post) j->post(j->post_ctx, p0 * s->oc + g * j->ocg, m, j->ocg, s->oc);
        }
    }
}

static int nhwc_gemm(const struct relvm_conv2d_shape *s, const float *x, const float *wp,
                     float *y, const float *bias, const float *clamp, relvm_block_fn *post,
                     void *post_ctx) {
    struct nhwc_job j = {s, x, wp, bias, clamp, y, post, post_ctx, relvm_pgemm_rpanel_kernel(),
                         s->c / s->groups, s->oc / s->groups, s->kh * s->kw, 0, nhwc_panels(s),
                         0, 0, 0, 0, 0, 0};
    j.k = j.taps * j.icg;
    j.flat = s->kh == 1 && s->kw == 1 && s->sh == 1 && s->sw == 1 && s->pt == 0 &&
             s->pl == 0 && s->oh == s->h && s->ow == s->w;
    const int64_t tile = relvm_pgemm_tile_rows(), threads = relvm_threads_get();
    const int64_t k = relvm_max64(1, j.k), panels = s->groups * j.panels;
    const int64_t weight_bytes = panels * k * PG_PANEL * (int64_t)sizeof(float);
    if (j.flat) { /* A task's input (the A it streams) kept to about 128 KB, in whole tiles
                   * of pixels, and at least two chunks a thread, where there are pixels enough */
        const int64_t total = s->n * s->h * s->w, want = 2 * threads;
        const int64_t even = (total + want - 1) / want;
        const int64_t most =
            relvm_max64(4 * tile, (32 << 10) / relvm_max64(1, j.icg) / tile * tile);
        j.chunk = relvm_max64(tile, relvm_min64(most, (even + tile - 1) / tile * tile));
        j.chunks = (total + j.chunk - 1) / j.chunk;
    } else if ((j.gather = j.icg < NHWC_GATHER_BELOW)) {
        /* bands of about NHWC_BAND_PIXELS pixels (a gathered A of up to 64 x k floats), at
         * least two a thread where there are rows enough; a task: a band, every panel */
        const int64_t ow = relvm_max64(1, s->ow), want = 2 * threads;
        const int64_t even = (s->n * s->oh + want - 1) / want;
        j.chunk = relvm_max64(1, relvm_min64(even, (NHWC_BAND_PIXELS + ow - 1) / ow));
        j.chunks = s->n * ((s->oh + j.chunk - 1) / j.chunk);
        const int64_t fmas = relvm_max64(1, j.chunk * s->ow * PG_PANEL * k * panels);
        relvm_parallel_for(j.chunks, relvm_max64(1, PG_GRAIN_FMAS / fmas), nhwc_gather_tasks,
                           &j);
        return j.failed ? RELVM_NO_MEMORY : RELVM_OK;
    } else { /* bands of whole rows over which each k block's weights stay in L1 */
        const int64_t ow = relvm_max64(1, s->ow);
        j.chunk = relvm_min64(relvm_min64(s->oh, NHWC_BAND_ROWS),
                              relvm_max64(1, (NHWC_BAND_PIXELS + ow - 1) / ow));
        j.chunks = s->n * ((s->oh + j.chunk - 1) / j.chunk);
    }
    /* Panel by panel (each panel's weights read once, the input once per panel) when the
     * weights are large (from memory in a large model) or there are too few chunks to share
     * out; else chunk by chunk (the weights, in L2, once per chunk; each output pixel's
     * channels written together: a 1x1 conv of 64 -> 256 channels over 56 x 56 pixels ran 1.3x
     * slower panel by panel, its output written in 32-channel stripes). */
    j.panel_major = panels > 1 &&
                    (weight_bytes > (512 << 10) || j.chunks * s->groups < 2 * threads);
    const int64_t per = j.flat ? j.chunk : j.chunk * s->ow;
    const int64_t fmas = relvm_max64(1, per * PG_PANEL * k);
    const int64_t tasks = j.flat && !j.panel_major ? j.chunks * s->groups : j.chunks * panels;
    relvm_parallel_for(tasks, relvm_max64(1, PG_GRAIN_FMAS / fmas),
                       j.flat ? nhwc_flat_tasks : nhwc_band_tasks, &j);
    return j.failed ? RELVM_NO_MEMORY : RELVM_OK;
}

/* --- entry points ---------------------------------------------------------------------- */

RELVM_EXPORT int64_t relvm_conv2d_nhwc_packed_size(const struct relvm_conv2d_shape *s) {
    if (!valid_shape(s) || s->c == 0) return 0;
    if (nhwc_depthwise(s)) return s->kh * s->kw * s->c;
    return s->groups * nhwc_panels(s) * s->kh * s->kw * (s->c / s->groups) * PG_PANEL;
}

RELVM_EXPORT void relvm_conv2d_nhwc_pack_weights(const struct relvm_conv2d_shape *s,
                                                 const void *w, void *packed) {
    if (!valid_shape(s) || s->c == 0) return;
    if (nhwc_depthwise(s))
        dwn_pack(s, w, packed);
    else
        nhwc_pack(s, w, packed);
}

RELVM_EXPORT int relvm_conv2d_nhwc(int dtype, const struct relvm_conv2d_shape *s, const void *x,
                                   const void *w, void *y_, const void *bias_,
                                   const float *clamp, const void *wpacked,
                                   relvm_block_fn *post, void *post_ctx) {
    if (dtype != RELVM_FLOAT32 || !valid_shape(s)) return RELVM_UNSUPPORTED;
    float *y = y_;
    const float *bias = bias_;
    const int64_t pixels = s->n * s->oh * s->ow, total = pixels * s->oc;
    if (total == 0) return RELVM_OK;
    if (s->c == 0) { /* no input channels: every output is its bias, clamped */
        for (int64_t p = 0; p < pixels; ++p)
            for (int64_t o = 0; o < s->oc; ++o) {
                float v = bias ? bias[o] : 0.0f;
                if (clamp) {
                    if (v < clamp[0]) v = clamp[0];
                    if (v > clamp[1]) v = clamp[1];
                }
                y[p * s->oc + o] = v;
            }
        if (post) post(post_ctx, 0, 1, total, total);
        return RELVM_OK;
    }
    /* Weights that are not packed ahead (not a constant) are packed for this call. */
    float *own = NULL;
    if (!wpacked) {
        const int64_t size = relvm_conv2d_nhwc_packed_size(s);
        own = aligned_alloc(64, (size_t)((size * (int64_t)sizeof(float) + 63) / 64 * 64));
        if (!own) return RELVM_NO_MEMORY;
        relvm_conv2d_nhwc_pack_weights(s, w, own);
        wpacked = own;
    }
    const int status = nhwc_depthwise(s)
                           ? dwn_conv(s, x, wpacked, y, bias, clamp, post, post_ctx)
                           : nhwc_gemm(s, x, wpacked, y, bias, clamp, post, post_ctx);
    free(own);
    return status;
}
