/* What the conv sources share. conv_gemm.c runs a conv on relvm's GEMM from a padded copy of
 * each image; conv_pair.c drives that same job for two convs in a row, so the job, its padded
 * image and its steps are declared here (defined, and described, in conv_gemm.c). conv_gemm.c's
 * relvm_conv2d hands depthwise convs to conv_depthwise.c. Internal: not cdef. */
#ifndef RELVM_INTERNAL_CONV_SHARED_H
#define RELVM_INTERNAL_CONV_SHARED_H
#include <stddef.h>
#include <stdint.h>
#include "../conv.h"
#include "pgemm_panel.h"
#include "types.h"

/* The rows and columns of a padded image that the windows reach: the input and its top/left
 * padding, or as far as the last window's last tap, whichever is further. */
static inline void conv_padded_extent(const struct relvm_conv2d_shape *s, int64_t *rows,
                                      int64_t *cols) {
    *rows = relvm_max64(s->pt + s->h, (s->oh - 1) * s->sh + (s->kh - 1) * s->dh + 1);
    *cols = relvm_max64(s->pl + s->w, (s->ow - 1) * s->sw + (s->kw - 1) * s->dw + 1);
}

typedef float deint_vec __attribute__((vector_size(64), aligned(4)));
typedef int32_t deint_mask __attribute__((vector_size(64)));

/* Stride 2: a row's even columns go to one phase and its odd columns to the other, 32 input
 * floats (two vectors, two shuffles) at a time (the padded images of conv_gemm.c and the phase
 * planes of conv_depthwise.c; inlined into functions compiled per instruction set). */
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

/* The border columns of a padded row (those no input pixel lands on), as positions in the
 * row's phase layout: left ones first, then right ones. Found once per call (no division per
 * element); `count` is -1 for borders of more than 64 columns (whole rows are cleared then). */
struct border_columns {
    int64_t at[64];
    int64_t left, count;
};

/* One conv on relvm's GEMM: what its tasks share (conv_job, then conv_prepare). */
struct conv_pgemm {
    const struct relvm_conv2d_shape *s;
    const float *x, *w;
    float *y;
    struct pg_epilogue e;
    pg_panel_fn *fn;
    pg_ipanel_fn *ifn; /* NULL: output rows are not whole vectors, so panels are packed */
    int width;         /* floats per vector of ifn */
    const int64_t *off;
    /* Each group's weights packed by relvm_pgemm_pack_rows in chunks of wchunk_rows output
     * channels (conv_chunk_rows), given by the caller or packed for this call into `wowned`;
     * both the in-place kernel and the packed-panel one read them so. Not in the transposed
     * form (offsets_only), which packs its weights as dense panels. */
    const float *wpacked;
    float *wowned;
    int64_t wchunk_rows;
    int offsets_only;
    struct padded_image padded; /* geometry only */
    int64_t panels, k;
    /* Output channels (of a group) in chunks of chunk_rows (conv_chunk_rows, where panels are
     * read in place; else one chunk): a thread runs a chunk over consecutive panels, so its
     * weights stay in cache and its output rows are written as a few sequential streams. */
    int64_t chunks, chunk_rows;
    int pointwise;  /* 1x1, stride 1, no padding: the input is read as it is */
    /* The grid form (conv_gemm.c, grid_in_place): panels of 32 consecutive positions of a grid
     * as wide as a padded row, read in place whatever the output width; `grid` positions in
     * all, from which each panel's output pixels are copied to y. 0: not this form. */
    int64_t grid;
    float *sums;    /* the mean's partial sums, ocg per task (image, group, panel); or NULL */
    /* Set when the output feeds a next conv (conv pairs): each panel is stored into that
     * conv's padded input (geometry `onward`; conv_panel is told where) instead of y. */
    const struct relvm_conv2d_shape *next;
    struct padded_image onward; /* geometry only */
    struct border_columns edges; /* onward's border columns, written with each row's ends */
    uint64_t call; /* tells this call's padded images from an earlier call's */
    relvm_block_fn *post; /* run over each finished block of y (relvm_conv2d's post) */
    void *post_ctx;
    _Atomic int failed; /* a thread could not get its scratch */
};

/* s is a geometry the kernels take: no negative size, strides and dilations of 1 or more,
 * groups that divide both channel counts. */
int valid_shape(const struct relvm_conv2d_shape *s);

/* `count` floats (at least one) of this thread's scratch, or NULL when memory runs out. */
float *relvm_conv_scratch_floats(size_t count);

/* y = conv(x, w) + bias, then clamp and post, for a depthwise conv (s->c == s->groups), each
 * output plane finished while it is in cache (conv_depthwise.c). */
int depthwise_conv(const struct relvm_conv2d_shape *s, const float *x, const float *w,
                   float *y, const float *bias, const float *clamp, relvm_block_fn *post,
                   void *post_ctx);

/* The GEMM job's steps (conv_gemm.c). */
struct conv_pgemm conv_job(const struct relvm_conv2d_shape *s, const float *x,
                           const float *w, const float *wpacked, float *y,
                           const float *bias, const float *clamp);
/* Panels of j on the grid (conv_gemm.c, grid_in_place) where its geometry allows: not for the
 * mean (with `mean`) or a conv whose output goes onward (j->next). Before conv_prepare. */
void conv_use_grid(struct conv_pgemm *j, int mean);
int conv_prepare(struct conv_pgemm *j, int mean);
int64_t panel_scratch(const struct conv_pgemm *j);
int64_t padded_scratch(const struct conv_pgemm *j);
void panel_padded_rows(const struct conv_pgemm *j, int64_t q0, int64_t q1, int64_t *lo,
                       int64_t *hi);
const float *padded_input(const struct conv_pgemm *j, int64_t image, float *buf, int64_t lo,
                          int64_t hi);
void conv_panel_rows(const struct conv_pgemm *j, int64_t image, int64_t q, int64_t c0,
                     int64_t c1, const float *in, float *scratch, float *sums, float *onward);
/* Panel q of `image` through every output channel (chunks [0, j->chunks)). */
static inline void conv_panel(const struct conv_pgemm *j, int64_t image, int64_t q,
                              const float *in, float *scratch, float *sums, float *onward) {
    conv_panel_rows(j, image, q, 0, j->chunks, in, scratch, sums, onward);
}
void conv_finish_mean(const struct conv_pgemm *j);
void conv_release(struct conv_pgemm *j);

/* A padded image's borders (conv_gemm.c). */
struct border_columns border_columns(const struct relvm_conv2d_shape *s,
                                     struct padded_image p);
void zero_outer_rows(const struct relvm_conv2d_shape *s, int64_t channels,
                     struct padded_image p);
void zero_borders(const struct relvm_conv2d_shape *s, int64_t channels,
                  struct padded_image p);
#endif
