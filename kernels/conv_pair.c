/* Two convs in a row in one call (relvm_conv2d_pair). The first conv runs conv_gemm.c's job
 * with its output going onward: each tile lands straight in the second conv's padded,
 * phase-split input, so the intermediate is never stored and never padded. */
#include <stdlib.h>
#include "relvm_config.h"
#include "conv.h"
#include "internal/conv_shared.h"
#include "internal/pgemm_panel.h"
#include "internal/types.h"
#include "threads.h"

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
    /* b's output rows: panels of pixels, or of b's grid (rows rs wide) */
    const int64_t width = b->grid ? b->padded.rs : sb->ow;
    const int64_t count = b->grid ? b->grid : sb->oh * sb->ow;
    const int64_t first = q0 * PG_PANEL / width;
    const int64_t last = (relvm_min64(q1 * PG_PANEL, count) - 1) / width;
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
    /* b's padded input: every channel, and on b's grid the floats a last panel reads past it */
    const int64_t pad_a = padded_scratch(a);
    const int64_t pad_b = (b->s->c * b->padded.plane + (b->grid ? PG_PANEL : 0) + 15) / 16 * 16;
    float *scratch = relvm_conv_scratch_floats((size_t)(per_panel + pad_a + pad_b));
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
            int64_t rlo, rhi;
            panel_padded_rows(a, from, hi, &rlo, &rhi);
            const float *in = padded_input(a, image, scratch + per_panel, rlo, rhi);
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
                     const float *x, const float *wa, const float *bias_a, const float *clamp_a,
                     const float *wb, float *y, const float *bias_b, const float *clamp_b, int mean,
                     const float *wpacked_a, const float *wpacked_b) {
    struct conv_pgemm a = conv_job(sa, x, wa, wpacked_a, NULL, bias_a, clamp_a);
    struct conv_pgemm b = conv_job(sb, NULL, wb, wpacked_b, y, bias_b, clamp_b);
    conv_use_grid(&b, mean); /* b reads its padded input in place on its grid where it can */
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

/* Runs the pair as two convs, a's output in a buffer of its own (each conv in its own form,
 * wpacked_a and wpacked_b packed for it). */
static int conv_pair_split(const struct relvm_conv2d_shape *sa,
                           const struct relvm_conv2d_shape *sb, const float *x, const float *wa,
                           const float *bias_a, const float *clamp_a, const float *wb, float *y,
                           const float *bias_b, const float *clamp_b, int mean,
                           const float *wpacked_a, const float *wpacked_b) {
    const size_t floats = (size_t)(sa->n * sa->oc * sa->oh * sa->ow);
    float *mid = malloc(relvm_max64(1, (int64_t)floats) * sizeof(float));
    if (!mid) return RELVM_NO_MEMORY;
    int status = relvm_conv2d(RELVM_FLOAT32, sa, x, wa, mid, bias_a, clamp_a, wpacked_a, NULL,
                              NULL);
    if (status == RELVM_OK)
        status = mean ? relvm_conv2d_mean(RELVM_FLOAT32, sb, mid, wb, y, bias_b, clamp_b,
                                          wpacked_b)
                      : relvm_conv2d(RELVM_FLOAT32, sb, mid, wb, y, bias_b, clamp_b, wpacked_b,
                                     NULL, NULL);
    free(mid);
    return status;
}

RELVM_EXPORT int relvm_conv2d_pair(int dtype, const struct relvm_conv2d_shape *a,
                                   const struct relvm_conv2d_shape *b, const void *x,
                                   const void *wa, const void *bias_a, const float *clamp_a,
                                   const void *wb, void *y, const void *bias_b,
                                   const float *clamp_b, int mean, const void *wpacked_a,
                                   const void *wpacked_b) {
    /* Both on the GEMM path (no depthwise conv, input channels on both), b reading a's output. */
    if (dtype != RELVM_FLOAT32 || !valid_shape(a) || !valid_shape(b) || a->c == 0 ||
        b->c == 0 || (a->groups > 1 && a->c == a->groups) ||
        (b->groups > 1 && b->c == b->groups) || b->n != a->n || b->c != a->oc ||
        b->h != a->oh || b->w != a->ow)
        return RELVM_UNSUPPORTED;
    if (a->h * a->w == 0 || b->h * b->w == 0 || b->oh * b->ow == 0) return RELVM_UNSUPPORTED;
    if (b->n * b->oc == 0) return RELVM_OK;
    /* A conv with a small output plane runs better transposed, which a pair cannot (its first
     * conv's tiles are pixel panels of the second's input): then two convs (ResNet-50's last
     * stage at 7 x 7, 0.97 of the time at batch 1). */
    if (relvm_conv2d_weights_form(a) == 2 || relvm_conv2d_weights_form(b) == 2)
        return conv_pair_split(a, b, x, wa, bias_a, clamp_a, wb, y, bias_b, clamp_b, mean,
                               wpacked_a, wpacked_b);
    return conv_pair(a, b, x, wa, bias_a, clamp_a, wb, y, bias_b, clamp_b, mean, wpacked_a,
                     wpacked_b);
}
