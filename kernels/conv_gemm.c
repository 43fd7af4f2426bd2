/* conv2d on relvm's GEMM (pgemm.c): the weights times the unrolled input, a (c/g * kh * kw) x
 * (oh * ow) matrix that is never built. Each thread copies its image into a zero-bordered,
 * phase-split buffer (a pointwise conv reads its input as it is), and the GEMM reads the
 * unrolled rows there in place, or from 32-pixel panels packed from it when output rows are not
 * whole vectors, with the bias and clamp applied in registers (and, for a mean, each tile's rows
 * summed instead of stored). The job and its steps are also what conv_pair.c drives. Depthwise
 * convs go to conv_depthwise.c. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "relvm_config.h"
#include "conv.h"
#include "internal/conv_shared.h"
#include "internal/pgemm_panel.h"
#include "internal/scratch.h"
#include "internal/transpose.h"
#include "internal/types.h"
#include "threads.h"

/* --- the unrolled input, panel by panel from the padded image ------------------------------ */

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

/* Whether the GEMM reads the image in place (weights packed by row blocks, relvm_conv2d's
 * form 1): when output rows are whole vectors, or for a pointwise conv, whose output pixels
 * read consecutive floats across rows too (then only a last, partial panel is packed). */
static int reads_in_place(const struct relvm_conv2d_shape *s, int width) {
    return s->ow % width == 0 || is_pointwise(s);
}

/* Whether a conv whose output rows are not whole vectors can still read its padded image in
 * place, on a grid: with stride 1, output pixel (oy, ox) reads tap (i, j) at padded position
 * oy * rs + ox + off, so numbering outputs t = oy * rs + ox (a grid as wide as a padded row, of
 * which the first ow columns are the output) makes every panel of 32 consecutive t one run of
 * the image per k row, whatever ow is. The rs - ow columns a row computes and drops cost less
 * than packing (a 56-wide 3x3 conv: 2 of 58). Not for pointwise convs (read in place already)
 * or the mean (its sums would take the dropped columns). */
static int grid_in_place(const struct relvm_conv2d_shape *s, int width) {
    return s->sh == 1 && s->sw == 1 && !reads_in_place(s, width) && s->oh * s->ow > 0;
}

/* A conv with one input channel per group takes the depthwise loop, unless it is one plain
 * conv of a single input channel whose window is large (an STFT front end's 1 x 256 taps):
 * that is a GEMM of k = its taps, which the depthwise loop would run tap by tap. */
static int is_depthwise(const struct relvm_conv2d_shape *s) {
    return s->c == s->groups && (s->groups > 1 || s->kh * s->kw <= 49);
}

/* The transposed form: each image's unrolled input (pixels x k) times the weights packed as a
 * dense layer's (k x 32-channel panels), the output stored transposed into y. It pays where
 * the output planes are small: the usual form's 32-pixel panels run mostly empty on 1 x 3
 * pixels (a VAD's encoder) or a quarter empty on a pointwise conv over 7 x 7 (a CNN's last
 * stage), while the transposed form's panels are 32 output channels, which layers have in
 * multiples of 32 or more. Chosen when it does a sixteenth fewer multiply-adds, the unrolled
 * image fits CONV_UNROLLED_BYTES, and unrolling is cheap: a pointwise conv's is a transpose of
 * its input, any other conv's a gather of k taps per pixel, which costs more than the usual
 * form's row copies once there are a panel's worth of pixels (a 3 x 3 conv over 14 x 14 ran
 * 1.3x slower transposed). */
#define CONV_UNROLLED_BYTES (4 << 20)

static int is_transposed(const struct relvm_conv2d_shape *s) {
    const int64_t plane = s->oh * s->ow, ocg = s->oc / s->groups;
    const int64_t k = s->c / s->groups * s->kh * s->kw;
    if (plane == 0 || ocg == 0 || k == 0 || is_depthwise(s)) return 0;
    const int64_t usual = ocg * ((plane + PG_PANEL - 1) / PG_PANEL * PG_PANEL);
    const int64_t transposed = plane * ((ocg + PG_PANEL - 1) / PG_PANEL * PG_PANEL);
    return transposed * 16 < usual * 15 && plane * k * 4 <= CONV_UNROLLED_BYTES &&
           (is_pointwise(s) || plane < PG_PANEL);
}

/* The direct form (conv_direct_tasks): the transposed form's orientation, output pixels by
 * 32-channel panels of the weights, with the pixels' taps read in place. For a window (a
 * pointwise conv's pixels are no run of the padded image) whose group's output channels fill
 * their panels to within a sixteenth (YOLO's 80-channel heads would compute 96), and whose k
 * is at least DIRECT_MIN_K: each output is then transposed from the form's pixel-major sums
 * into y, which a short k does not pay for (a 3 x 3 conv of 32 channels over 80 x 80 and a
 * 7 x 7 stem of 3 channels ran 1.1x slower direct; 64 channels and more, 0.82-0.96x). With
 * AVX2 or SSE2 vectors (8 or 4 floats), output rows of whole vectors are read in place by the
 * usual form with nothing dropped, and it keeps them: with AVX2's tiles of 6 pixels the
 * direct form ran 3x3 convs of 64 channels over 56 x 56 and 80 x 80 1.04-1.12x slower, and
 * those over 20 x 20 and 7 x 7 and strided ones 0.94-0.98x. */
#define DIRECT_MIN_K 512

/* A pointwise conv of a small plane (one the transposed form takes) whose input channels are
 * at least twice its output channels: the direct form reads its input planes as they are, where
 * the transposed form transposes them first (576 -> 96 channels over 14 x 14: 0.63 and 0.79 of
 * the time on 1 and 2 threads; 960 -> 160 over 7 x 7, 0.95 and 0.90), and it transposes its
 * output instead, which costs more than it saves when the output has the more channels
 * (512 -> 2048 over 7 x 7: 1.07). The whole band is one run of each input plane. */
static int pointwise_direct(const struct relvm_conv2d_shape *s) {
    return is_pointwise(s) && is_transposed(s) && 2 * (s->oc / s->groups) <= s->c / s->groups;
}

static int is_direct(const struct relvm_conv2d_shape *s) {
    const int64_t ocg = s->oc / s->groups, k = s->c / s->groups * s->kh * s->kw;
    const int64_t filled = (ocg + PG_PANEL - 1) / PG_PANEL * PG_PANEL;
    int width;
    relvm_pgemm_ipanel_kernel(&width);
    return !is_depthwise(s) && (s->kh * s->kw > 1 || pointwise_direct(s)) &&
           s->oh * s->ow > 0 && ocg > 0 && ocg * 16 >= filled * 15 && k >= DIRECT_MIN_K &&
           (width >= 16 || !reads_in_place(s, width));
}

static struct padded_image padded_geometry(const struct relvm_conv2d_shape *s) {
    struct padded_image p;
    p.data = NULL;
    int64_t pw;
    conv_padded_extent(s, &p.ph, &pw);
    p.pws = (pw + s->sw - 1) / s->sw;
    p.rs = p.pws * s->sw;
    p.plane = p.ph * p.rs;
    return p;
}

/* Where padded column `col` of a row is stored: phase col % sw, index col / sw. */
static inline int64_t phase_at(const struct relvm_conv2d_shape *s, struct padded_image p,
                               int64_t col) {
    return col % s->sw * p.pws + col / s->sw;
}

struct border_columns border_columns(const struct relvm_conv2d_shape *s,
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
void zero_outer_rows(const struct relvm_conv2d_shape *s, int64_t channels,
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
void zero_borders(const struct relvm_conv2d_shape *s, int64_t channels,
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

/* Input rows [iy0, iy1) of the image's channels into p's interior, split into phases (the
 * borders are zero_borders'). */
static RELVM_VECTORIZE void pad_image(const struct relvm_conv2d_shape *s, const float *x,
                                      int64_t channels, struct padded_image p, int64_t iy0,
                                      int64_t iy1) {
    if (s->sw == 2) {
        /* Input column ix is padded column ix + pl. */
        const int64_t even_at = phase_at(s, p, s->pl), odd_at = phase_at(s, p, s->pl + 1);
        for (int64_t ci = 0; ci < channels; ++ci)
            for (int64_t iy = iy0; iy < iy1; ++iy) {
                float *row = p.data + ci * p.plane + (iy + s->pt) * p.rs;
                deinterleave_row(x + (ci * s->h + iy) * s->w, s->w, row + even_at,
                                 row + odd_at);
            }
        return;
    }
    if (s->sw == 1) {
        for (int64_t ci = 0; ci < channels; ++ci)
            for (int64_t iy = iy0; iy < iy1; ++iy)
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
            for (int64_t iy = iy0; iy < iy1; ++iy) {
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

typedef float pack_vec __attribute__((vector_size(64), aligned(4)));

/* One panel of the unrolled input, packed: row k holds, for each of the panel's pixels, the
 * value its tap reads (runs of consecutive floats of the padded image), zeros past the last
 * pixel. For output rows too short or ragged for whole vectors (see conv_pgemm_tasks). A run
 * is copied in whole vectors of 16 floats, reading and writing past its end: what it writes
 * there the next run (or row, or the zeros) overwrites, up to 16 floats past the panel (its
 * scratch has room), and it reads past the run only where `limit` (the end of the image's
 * readable floats) allows, else element by element. */
static RELVM_VECTORIZE void pack_panel(const float *image, const float *limit, int64_t k,
                                       const int64_t *off, const int64_t *run_base,
                                       const struct pixel_runs *r, float *panel) {
    const int64_t npix = r->at[r->count - 1] + r->len[r->count - 1];
    for (int64_t row = 0; row < k; ++row) {
        float *dst = panel + row * PG_PANEL;
        for (int64_t q = 0; q < r->count; ++q) {
            const float *src = image + run_base[q] + off[row];
            float *out = dst + r->at[q];
            const int64_t len = r->len[q], whole = (len + 15) / 16 * 16;
            if (limit - src >= whole) {
                for (int64_t t = 0; t < whole; t += 16)
                    *(pack_vec *)(out + t) = *(const pack_vec *)(src + t);
            } else {
                for (int64_t t = 0; t < len; ++t) out[t] = src[t];
            }
        }
        for (int64_t q = npix; q < PG_PANEL; ++q) dst[q] = 0.0f;
    }
}

/* Which padded image this thread's scratch holds, and which of its rows: threads pad the
 * images they work on, a band of rows at a time, as their panels reach them. */
static _Thread_local struct {
    uint64_t call;
    int64_t image; /* n * groups + g */
    float *scratch;
    int64_t lo, hi; /* padded rows [lo, hi) hold the image */
} padded_for;

static _Atomic uint64_t conv_calls;

/* A chunk of a group's output channels: at most CONV_CHUNK_ROWS of them (so a thread writes
 * that many output rows at a time, sequential streams the caches keep up with; 96 channels of
 * a pointwise conv's 32-pixel panels were 96 streams), whose weights (rows x k floats) stay
 * within CONV_CHUNK_BYTES, a share of L2. */
#define CONV_CHUNK_ROWS 48
#define CONV_CHUNK_BYTES (256 << 10)

/* Output channels per chunk: balanced chunks of whole register tiles (all channels when they
 * are few). Depends on ocg, k and the instruction set only, so weights packed once
 * (pack_weights, chunk by chunk) serve every call. */
static int64_t conv_chunk_rows(int64_t ocg, int64_t k) {
    const int64_t tile = relvm_pgemm_tile_rows(), row_bytes = relvm_max64(1, k) * 4;
    const int64_t cap = relvm_max64(tile, relvm_min64(CONV_CHUNK_ROWS,
                                                      CONV_CHUNK_BYTES / row_bytes) / tile * tile);
    if (ocg <= cap) return relvm_max64(1, ocg);
    const int64_t chunks = (ocg + cap - 1) / cap, even = (ocg + chunks - 1) / chunks;
    return (even + tile - 1) / tile * tile;
}

struct conv_pgemm conv_job(const struct relvm_conv2d_shape *s, const float *x,
                           const float *w, const float *wpacked, float *y,
                           const float *bias, const float *clamp) {
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
    j.e.clamp = clamp != NULL;
    j.e.lo = clamp ? clamp[0] : 0.0f;
    j.e.hi = clamp ? clamp[1] : 0.0f;
    j.fn = relvm_pgemm_panel_kernel();
    j.ifn = reads_in_place(s, width) ? ifn : NULL;
    j.width = width;
    j.padded = padded_geometry(s);
    j.panels = (plane + PG_PANEL - 1) / PG_PANEL;
    j.k = s->c / s->groups * s->kh * s->kw;
    /* Chunks where the panels are read in place: a packed panel is packed into cache for all
     * the channels at once (a chunk each, it ran 1.3x slower; packing every panel ahead for the
     * chunks to share ran slower too). */
    j.wchunk_rows = relvm_max64(1, conv_chunk_rows(s->oc / s->groups, j.k));
    j.chunk_rows = j.ifn ? j.wchunk_rows : relvm_max64(1, s->oc / s->groups);
    j.chunks = (s->oc / s->groups + j.chunk_rows - 1) / j.chunk_rows;
    j.pointwise = is_pointwise(s);
    j.call = atomic_fetch_add(&conv_calls, 1) + 1;
    return j;
}

void conv_use_grid(struct conv_pgemm *j, int mean) {
    const struct relvm_conv2d_shape *s = j->s;
    if (mean || j->next || !grid_in_place(s, j->width)) return;
    int width;
    j->ifn = relvm_pgemm_ipanel_kernel(&width);
    j->grid = (s->oh - 1) * j->padded.rs + s->ow;
    j->panels = (j->grid + PG_PANEL - 1) / PG_PANEL;
    j->chunk_rows = relvm_max64(1, conv_chunk_rows(s->oc / s->groups, j->k));
    j->chunks = (s->oc / s->groups + j->chunk_rows - 1) / j->chunk_rows;
}

/* Floats of scratch a thread needs for one panel of j: packing space and, when the panel goes
 * onward, a staging tile. Multiples of 16, so what follows stays 64-byte aligned. */
/* Floats for packing a panel (16 past it: pack_panel's overrun), where any is packed: every
 * panel not read in place, or a pointwise conv's last, partial one. */
static int64_t packing_scratch(const struct conv_pgemm *j) {
    return !j->ifn || j->s->ow % j->width != 0 ? j->k * PG_PANEL + 16 : 0;
}

int64_t panel_scratch(const struct conv_pgemm *j) {
    if (j->grid) return j->chunk_rows * PG_PANEL; /* a chunk's rows of a panel, staged */
    const int64_t packing = packing_scratch(j);
    const int64_t staging = j->next ? j->s->oc / j->s->groups * PG_PANEL : 0;
    return packing + staging;
}

int64_t padded_scratch(const struct conv_pgemm *j) {
    if (j->pointwise) return 0;
    /* On the grid, a last panel's vectors read up to PG_PANEL floats past the image. */
    const int64_t slack = j->grid ? PG_PANEL : 0;
    return (j->s->c / j->s->groups * j->padded.plane + slack + 15) / 16 * 16;
}

/* Padded rows [*lo, *hi) of j's input, which panels [q0, q1) read: from the first output
 * row of the panels to one past their last (the in-place kernels' vectors run on past a row's
 * end into positions whose results are dropped). */
void panel_padded_rows(const struct conv_pgemm *j, int64_t q0, int64_t q1, int64_t *lo,
                       int64_t *hi) {
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t width = j->grid ? j->padded.rs : s->ow;
    const int64_t count = j->grid ? j->grid : s->oh * s->ow;
    const int64_t end = relvm_min64(q1 * PG_PANEL, count);
    *lo = *hi = 0;
    if (width <= 0 || end <= q0 * PG_PANEL) return;
    const int64_t first = q0 * PG_PANEL / width, last = (end - 1) / width + 1;
    *lo = relvm_min64(first * s->sh, j->padded.ph);
    *hi = relvm_min64(last * s->sh + (s->kh - 1) * s->dh + 1, j->padded.ph);
}

/* Input rows of the image that padded rows [lo, hi) hold, into the padded image. */
static void pad_rows(const struct conv_pgemm *j, const float *x, struct padded_image p,
                     int64_t lo, int64_t hi) {
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t iy0 = relvm_max64(0, lo - s->pt), iy1 = relvm_min64(s->h, hi - s->pt);
    if (iy1 > iy0) pad_image(s, x, s->c / s->groups, p, iy0, iy1);
}

/* The padded channels of image `image` (n * groups + g) with at least rows [lo, hi) filled (a
 * pointwise conv's input as it is): each thread pads the bands of rows its panels read, as it
 * reaches them, so on several threads no thread copies the whole image, and a band is read
 * while it is still in cache (a 3 x 3 conv of 16 channels over 160 x 160, stride 2, spent a
 * third of its time padding on two threads). Rows outside [lo, hi) may hold anything. */
const float *padded_input(const struct conv_pgemm *j, int64_t image, float *buf, int64_t lo,
                          int64_t hi) {
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t icg = s->c / s->groups, g = image % s->groups, n = image / s->groups;
    const float *x = j->x + (n * s->c + g * icg) * s->h * s->w;
    if (j->pointwise) return x;
    struct padded_image p = j->padded;
    p.data = buf;
    if (padded_for.call != j->call || padded_for.scratch != buf) {
        /* Borders once a call (every image of the call has the same geometry). */
        zero_borders(s, icg, p);
        padded_for.call = j->call;
        padded_for.scratch = buf;
        padded_for.image = -1;
    }
    if (padded_for.image != image) {
        padded_for.image = image;
        padded_for.lo = padded_for.hi = 0;
    }
    if (hi <= lo || (padded_for.lo <= lo && hi <= padded_for.hi)) return buf;
    /* Bands of a thread's share of the image at least (the whole image on one thread): padded
     * a row or two per panel, interleaved with the panels, a 3 x 3 conv of 64 channels over
     * 56 x 56 ran 3% slower. */
    const int64_t threads = relvm_max64(1, relvm_threads_get());
    hi = relvm_max64(hi, relvm_min64(lo + (j->padded.ph + threads - 1) / threads, j->padded.ph));
    if (hi < padded_for.lo || lo > padded_for.hi || padded_for.hi <= padded_for.lo) {
        pad_rows(j, x, p, lo, hi); /* apart from the rows held: these instead */
        padded_for.lo = lo;
        padded_for.hi = hi;
        return buf;
    }
    if (lo < padded_for.lo) pad_rows(j, x, p, lo, padded_for.lo);
    if (hi > padded_for.hi) pad_rows(j, x, p, padded_for.hi, hi);
    padded_for.lo = relvm_min64(lo, padded_for.lo);
    padded_for.hi = relvm_max64(hi, padded_for.hi);
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

/* `rows` rows of n <= PG_PANEL floats from the staging tile (rows PG_PANEL apart) to y (rows
 * `ld` apart), in a loop GCC vectorizes: a call to memcpy per row cost more than the copy. */
static RELVM_VECTORIZE void copy_run(float *y, int64_t ld, const float *stage, int64_t rows,
                                     int64_t n) {
    for (int64_t row = 0; row < rows; ++row) {
        float *to = y + row * ld;
        const float *from = stage + row * PG_PANEL;
#pragma GCC ivdep
        for (int64_t t = 0; t < n; ++t) to[t] = from[t];
    }
}

/* Panel q of the grid (grid_in_place) of image `image` (n * groups + g) from its padded input
 * `in`, through the output channels of chunks [c0, c1): each chunk's rows computed into `stage`
 * (PG_PANEL floats a row), then each run of the panel's positions that are output pixels (a
 * row's first ow columns) copied to y, and the fused post run over it. */
static void conv_grid_panel(const struct conv_pgemm *j, int64_t image, int64_t q, int64_t c0,
                            int64_t c1, const float *in, float *stage, int run_post) {
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t ocg = s->oc / s->groups, plane = s->oh * s->ow, rs = j->padded.rs;
    const int64_t g = image % s->groups, n = image / s->groups;
    const int64_t t0 = q * PG_PANEL, count = relvm_min64(PG_PANEL, j->grid - t0);
    const float *bases[PG_PANEL];
    for (int64_t v = 0; v * j->width < PG_PANEL; ++v) bases[v] = in + t0 + v * j->width;
    /* The runs of output pixels: position a of the panel, pixel p of the plane, len pixels. */
    int64_t at[PG_PANEL], pixel[PG_PANEL], len[PG_PANEL], runs = 0;
    for (int64_t oy = t0 / rs, ox = t0 - oy * rs, a = 0; a < count; ++oy, ox = 0) {
        const int64_t here = relvm_min64(rs - ox, count - a); /* positions on this grid row */
        if (ox < s->ow) {
            at[runs] = a;
            pixel[runs] = oy * s->ow + ox;
            len[runs++] = relvm_min64(here, s->ow - ox);
        }
        a += here;
    }
    struct pg_epilogue e = j->e; /* the group's rows: bias from its first row */
    if (e.row_bias) e.row_bias += g * ocg;
    e.next_panel = PG_PANEL; /* the next task's panel */
    float *yg = j->y + (n * s->oc + g * ocg) * plane;
    for (int64_t c = c0; c < c1; ++c) {
        const int64_t r0 = c * j->chunk_rows, rows = relvm_min64(j->chunk_rows, ocg - r0);
        j->ifn(rows, j->k, j->wpacked + (g * ocg + r0) * j->k, 0, bases, j->off, stage,
               PG_PANEL, count, &e, r0, 0);
        for (int64_t r = 0; r < runs; ++r) {
            copy_run(yg + r0 * plane + pixel[r], plane, stage + at[r], rows, len[r]);
            if (j->post && run_post)
                j->post(j->post_ctx, (n * s->oc + g * ocg + r0) * plane + pixel[r], rows, len[r],
                        plane);
        }
    }
}

/* Panel q of image `image` (n * groups + g) from its padded input `in`, through the output
 * channels of chunks [c0, c1): into y, or into `sums` (the mean's partial sums for this panel,
 * every channel of the group), or (every chunk) through `stage` into the next conv's padded
 * input `onward` (image n's first channel). `scratch` is panel_scratch(j) floats. The fused
 * post runs over what is stored in y unless `run_post` is 0 (the caller runs it). */
static void panel_rows(const struct conv_pgemm *j, int64_t image, int64_t q, int64_t c0,
                       int64_t c1, const float *in, float *scratch, float *sums, float *onward,
                       int run_post) {
    if (j->grid) { /* never with sums or onward (conv_use_grid) */
        conv_grid_panel(j, image, q, c0, c1, in, scratch, run_post);
        return;
    }
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t ocg = s->oc / s->groups, plane = s->oh * s->ow;
    const int64_t g = image % s->groups, n = image / s->groups;
    const int64_t p0 = q * PG_PANEL, npix = relvm_min64(PG_PANEL, plane - p0);
    float *packed = scratch, *stage = scratch + packing_scratch(j);
    /* In place: the panel's pixels are whole vectors along output rows, or (a pointwise conv,
     * its output rows ragged) along the image, the panel whole. */
    const int in_place = j->ifn && (npix == PG_PANEL || s->ow % j->width == 0);
    float *yg = j->y + (n * s->oc + g * ocg) * plane + p0;
    int64_t ldc = plane;
    struct pg_epilogue e = j->e; /* the group's rows: bias and sums from its first row */
    if (e.row_bias) e.row_bias += g * ocg;
    if (sums) {
        e.row_sums = sums;
        yg = NULL; /* nothing is stored */
    } else if (onward) {
        yg = stage;
        ldc = PG_PANEL;
    }
    if (in_place) e.next_panel = PG_PANEL * s->sw; /* the next panel's, along a row */
    struct pixel_runs runs;
    if (!in_place || onward) panel_runs(s, p0, npix, &runs);
    const float *bases[PG_PANEL];
    if (in_place) {
        const int64_t oy0 = p0 / s->ow, ox0 = p0 - oy0 * s->ow; /* one division a panel */
        for (int64_t v = 0; v * j->width < PG_PANEL; ++v) {
            int64_t oy = oy0, ox = ox0 + relvm_min64(v * j->width, npix - j->width);
            for (; ox >= s->ow; ox -= s->ow) ++oy;
            bases[v] = in + oy * s->sh * j->padded.rs + ox;
        }
    } else {
        int64_t run_base[PG_PANEL];
        for (int64_t r = 0; r < runs.count; ++r)
            run_base[r] = runs.oy[r] * s->sh * j->padded.rs + runs.ox[r];
        /* `in` holds the group's channels, padded (or a pointwise conv's input as it is). */
        pack_panel(in, in + s->c / s->groups * j->padded.plane, j->k, j->off, run_base, &runs,
                   packed);
    }
    for (int64_t c = c0; c < c1; ++c) {
        const int64_t r0 = c * j->chunk_rows, rows = relvm_min64(j->chunk_rows, ocg - r0);
        float *yc = yg ? yg + r0 * ldc : NULL;
        if (sums) memset(sums + r0, 0, (size_t)rows * sizeof(float));
        if (in_place)
            j->ifn(rows, j->k, j->wpacked + (g * ocg + r0) * j->k, 0, bases, j->off, yc, ldc,
                   npix, &e, r0, 0);
        else /* the rows in the chunks the weights were packed in (r0 starts one) */
            for (int64_t w0 = r0; w0 < r0 + rows; w0 += j->wchunk_rows)
                j->fn(relvm_min64(j->wchunk_rows, r0 + rows - w0), j->k,
                      j->wpacked + (g * ocg + w0) * j->k, PG_A_PACKED, packed,
                      yc ? yc + (w0 - r0) * ldc : NULL, ldc, npix, &e, w0, 0);
        if (j->post && run_post && !sums && !onward)
            j->post(j->post_ctx, (n * s->oc + g * ocg + r0) * plane + p0, rows, npix, plane);
    }
    if (onward)
        store_onward(j->next, j->onward, &j->edges, stage, ocg, &runs,
                     onward + g * ocg * j->onward.plane);
}

void conv_panel_rows(const struct conv_pgemm *j, int64_t image, int64_t q, int64_t c0,
                     int64_t c1, const float *in, float *scratch, float *sums, float *onward) {
    panel_rows(j, image, q, c0, c1, in, scratch, sums, onward, 1);
}

/* The first output pixel of panel q (q = j->panels: the plane's end). On the grid, position
 * t is pixel (t / rs, t % rs) when t % rs < ow, and the dropped columns past a row's end are
 * no pixels: consecutive panels cover consecutive pixels there too. */
static int64_t panel_pixel(const struct conv_pgemm *j, int64_t q) {
    const struct relvm_conv2d_shape *s = j->s;
    if (!j->grid) return relvm_min64(q * PG_PANEL, s->oh * s->ow);
    const int64_t t = relvm_min64(q * PG_PANEL, j->grid), rs = j->padded.rs;
    return t / rs * s->ow + relvm_min64(t % rs, s->ow);
}

/* Pixels a deferred post covers at most: per call the generated loop pays a start per row,
 * which over one 32-pixel panel cost a third of a SiLU; 256 pixels of a chunk's rows are
 * still in cache (L2) when it runs. */
#define POST_PIXELS 256

/* A run of consecutive panels of one chunk of one image whose post has not run yet. */
struct pending_post {
    int64_t image, chunk, p0, p1;
};

static void run_pending(const struct conv_pgemm *j, const struct pending_post *pp) {
    if (pp->p1 <= pp->p0) return;
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t ocg = s->oc / s->groups, plane = s->oh * s->ow;
    const int64_t g = pp->image % s->groups, n = pp->image / s->groups;
    const int64_t r0 = pp->chunk * j->chunk_rows, rows = relvm_min64(j->chunk_rows, ocg - r0);
    j->post(j->post_ctx, (n * s->oc + g * ocg + r0) * plane + pp->p0, rows, pp->p1 - pp->p0,
            plane);
}

/* Task t: image t / (chunks * panels) (n * groups + g), then chunk, then panel, so a thread
 * runs its chunk's weights over consecutive panels while they are in cache. */
static void conv_pgemm_tasks(void *ctx, int64_t begin, int64_t end) {
    struct conv_pgemm *j = ctx;
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t ocg = s->oc / s->groups, per_panel = panel_scratch(j);
    float *scratch = relvm_scratch_floats((size_t)(per_panel + padded_scratch(j)));
    if (!scratch) {
        j->failed = 1;
        return;
    }
    const int64_t per_image = j->chunks * j->panels;
    const int defer = j->post && !j->sums; /* the post of consecutive panels runs once */
    struct pending_post pp = {-1, -1, 0, 0};
    for (int64_t t = begin; t < end; ++t) {
        const int64_t image = t / per_image, c = t % per_image / j->panels, q = t % j->panels;
        int64_t lo, hi;
        panel_padded_rows(j, q, q + 1, &lo, &hi);
        const float *in = padded_input(j, image, scratch + per_panel, lo, hi);
        float *sums = j->sums ? j->sums + (image * j->panels + q) * ocg : NULL;
        panel_rows(j, image, q, c, c + 1, in, scratch, sums, NULL, !defer);
        if (!defer) continue;
        const int64_t p0 = panel_pixel(j, q), p1 = panel_pixel(j, q + 1);
        if (image != pp.image || c != pp.chunk || p0 != pp.p1 || pp.p1 - pp.p0 >= POST_PIXELS) {
            run_pending(j, &pp);
            pp = (struct pending_post){image, c, p0, p0};
        }
        pp.p1 = p1;
    }
    if (defer) run_pending(j, &pp);
}

/* Each group's weights (oc x k) as the GEMM reads them, in place or from packed panels, chunk
 * by chunk (a chunk's rows packed as a matrix of their own, where conv_panel_rows finds
 * them). */
static void pack_weights(const struct relvm_conv2d_shape *s, int64_t k, const float *w,
                         float *packed) {
    const int64_t ocg = s->oc / s->groups, chunk = conv_chunk_rows(ocg, k);
    for (int64_t g = 0; g < s->groups; ++g)
        for (int64_t r0 = 0; r0 < ocg; r0 += chunk) {
            const int64_t at = (g * ocg + r0) * k;
            relvm_pgemm_pack_rows(relvm_min64(chunk, ocg - r0), k, w + at, k, packed + at);
        }
}

/* Sets up what j's tasks share: the unrolled offsets, the packed weights (unless the caller
 * packed them, or the transposed form, which needs the offsets only) and, with `mean`, the
 * partial sums. */
int conv_prepare(struct conv_pgemm *j, int mean) {
    const struct relvm_conv2d_shape *s = j->s;
    int64_t *off = malloc((size_t)relvm_max64(1, j->k) * sizeof(int64_t));
    const int64_t tasks = s->n * s->groups * j->panels, ocg = s->oc / s->groups;
    float *sums = mean ? malloc((size_t)relvm_max64(1, tasks * ocg) * sizeof(float)) : NULL;
    const int pack = !j->offsets_only && !j->wpacked;
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
void conv_finish_mean(const struct conv_pgemm *j) {
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

void conv_release(struct conv_pgemm *j) {
    free((void *)j->off);
    free(j->sums);
    free(j->wowned);
}

static void conv_run(struct conv_pgemm *j) {
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t fmas = relvm_max64(1, j->chunk_rows * PG_PANEL * relvm_max64(1, j->k));
    relvm_parallel_for(s->n * s->groups * j->chunks * j->panels,
                       relvm_max64(1, PG_GRAIN_FMAS / fmas), conv_pgemm_tasks, j);
}

/* --- the transposed form (is_transposed) ---------------------------------------------------- */

/* Floats of a group's weights packed as dense-layer panels: k x 32 output channels each. */
static int64_t panels_size(const struct relvm_conv2d_shape *s) {
    const int64_t ocg = s->oc / s->groups, k = s->c / s->groups * s->kh * s->kw;
    return (ocg + PG_PANEL - 1) / PG_PANEL * PG_PANEL * k;
}

static void pack_panels(const struct relvm_conv2d_shape *s, const float *w, float *packed) {
    const int64_t ocg = s->oc / s->groups, k = s->c / s->groups * s->kh * s->kw;
    for (int64_t g = 0; g < s->groups; ++g)
        relvm_pgemm_pack(1, k, ocg, w + g * ocg * k, packed + g * panels_size(s));
}

/* Which image this thread's scratch holds unrolled (pixels x k). */
static _Thread_local struct {
    uint64_t call;
    int64_t image;
    float *scratch;
} unrolled_for;

struct conv_transposed {
    struct conv_pgemm j; /* the geometry, offsets and padded images of the usual form */
    const float *panels; /* each group's weights, pack_panels */
    const float *bias;
    int mean;
    /* The direct form (conv_direct_tasks): output rows per band, and bands per plane; 0: the
     * transposed form. */
    int64_t band_rows, bands;
};

/* Image `image`'s unrolled input (pixels x k: row px holds what output pixel px's taps read),
 * packed as relvm_pgemm_pack_rows packs a matrix, which the GEMM reads through one pointer and
 * every panel of output channels reuses: block by block of the GEMM's row blocks of pixels, k
 * columns of the block's pixels each. A pointwise conv's pixels are its input's columns
 * (relvm_pgemm_pack_columns: column p of a block is a run of channel p's plane). */
static void unroll(const struct conv_pgemm *j, const float *in, float *u) {
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t plane = s->oh * s->ow, k = j->k, tile = relvm_pgemm_tile_rows();
    if (j->pointwise) {
        relvm_pgemm_pack_columns(plane, k, in, plane, u);
        return;
    }
    const int64_t blocks = (plane + tile - 1) / tile;
    for (int64_t blk = 0, px0 = 0; blk < blocks; ++blk) {
        const int64_t rows = pg_block_rows(plane - px0, blocks - blk);
        const float *base[PG_PANEL]; /* rows <= the tile's rows */
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t oy = (px0 + r) / s->ow, ox = (px0 + r) % s->ow;
            base[r] = in + oy * s->sh * j->padded.rs + ox;
        }
        for (int64_t p = 0; p < k; ++p, u += rows)
            for (int64_t r = 0; r < rows; ++r) u[r] = base[r][j->off[p]];
        px0 += rows;
    }
}

/* Channels [ch0, ch0 + cols) of y at pixels [p0, p0 + npix) of their planes, from c (pixel-major,
 * PG_PANEL floats a pixel), and the fused post over them; or, for a mean (c then holds every
 * pixel of the planes), each channel's mean. What the transposed and direct forms finish with. */
static void store_pixel_major(const struct conv_transposed *tj, const float *c, int64_t ch0,
                              int64_t cols, int64_t p0, int64_t npix) {
    const struct conv_pgemm *j = &tj->j;
    const int64_t plane = j->s->oh * j->s->ow;
    if (tj->mean) {
        for (int64_t ch = 0; ch < cols; ++ch) {
            float total = 0.0f;
            for (int64_t px = 0; px < plane; ++px) total += c[px * PG_PANEL + ch];
            j->y[ch0 + ch] = total / (float)plane;
        }
        return;
    }
    relvm_transpose_f32(npix, cols, c, PG_PANEL, j->y + ch0 * plane + p0, plane);
    if (j->post) j->post(j->post_ctx, ch0 * plane + p0, cols, npix, plane);
}

/* Task t: image t / panels (n * groups + g), 32 output channels t % panels. */
static void conv_transposed_tasks(void *ctx, int64_t begin, int64_t end) {
    struct conv_transposed *tj = ctx;
    struct conv_pgemm *j = &tj->j;
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t plane = s->oh * s->ow, ocg = s->oc / s->groups;
    const int64_t panels = (ocg + PG_PANEL - 1) / PG_PANEL;
    const int64_t unrolled = (plane * j->k + 15) / 16 * 16, stage = plane * PG_PANEL;
    float *scratch =
        relvm_scratch_floats((size_t)(unrolled + stage + padded_scratch(j)));
    if (!scratch) {
        j->failed = 1;
        return;
    }
    float *u = scratch, *c = scratch + unrolled, *padded = c + stage;
    for (int64_t t = begin; t < end; ++t) {
        const int64_t image = t / panels, q = t % panels;
        const int64_t g = image % s->groups, n = image / s->groups;
        if (unrolled_for.call != j->call || unrolled_for.image != image ||
            unrolled_for.scratch != u) {
            unroll(j, padded_input(j, image, padded, 0, j->padded.ph), u);
            unrolled_for.call = j->call;
            unrolled_for.image = image;
            unrolled_for.scratch = u;
        }
        const int64_t col0 = q * PG_PANEL, cols = relvm_min64(PG_PANEL, ocg - col0);
        const struct pg_epilogue e = {NULL, tj->bias ? tj->bias + g * ocg : NULL, j->e.clamp,
                                      j->e.lo, j->e.hi, NULL, j->k * PG_PANEL};
        j->fn(plane, j->k, u, PG_A_PACKED, tj->panels + g * panels_size(s) + q * j->k * PG_PANEL,
              c, PG_PANEL, cols, &e, 0, col0);
        /* C (pixels x channels) into y's planes, or their means */
        store_pixel_major(tj, c, n * s->oc + g * ocg + col0, cols, 0, plane);
    }
}

/* --- the direct form (is_direct) -------------------------------------------------------------
 * Output pixels times the weights packed as the transposed form's panels (k x 32 output
 * channels), the pixels read in place: along an output row, the taps of consecutive pixels are
 * consecutive floats of the padded image (phase-split by the column stride), so a tile of
 * consecutive pixels reads each k step through one pointer (relvm_pgemm_apanel_kernel). No
 * pixel is computed and dropped: the usual form's grid computes rs - ow columns of every row
 * for nothing (2 of 9 at 7 x 7, 2 of 16 at 14 x 14) and its 32-pixel panels run part empty on
 * small planes, while here a row is tiles of at most the kernel's rows of pixels. A task is a
 * band of output rows of one image against one panel; k runs in blocks of DIRECT_KC taps over
 * the band's rows, so a block's weights (DIRECT_KC x 32 floats, 18 KB) and the band's partial
 * sums (its pixels x 32 floats) stay in L1 while every tile reuses them, where whole-k tiles
 * streamed the panel from L2 for each tile (on this machine's busy L2, 1.2-1.5x slower). The
 * band's sums are then transposed into y's planes, and the fused post runs over them. */
#define DIRECT_KC 144
#define DIRECT_BAND_PIXELS 64 /* a band: whole output rows, at least this many pixels */

static void conv_direct_tasks(void *ctx, int64_t begin, int64_t end) {
    struct conv_transposed *tj = ctx;
    struct conv_pgemm *j = &tj->j;
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t ocg = s->oc / s->groups, k = j->k;
    const int64_t panels = (ocg + PG_PANEL - 1) / PG_PANEL, bands = tj->bands;
    const int64_t stage = (tj->band_rows * s->ow * PG_PANEL + 15) / 16 * 16;
    float *scratch = relvm_scratch_floats((size_t)(stage + padded_scratch(j)));
    if (!scratch) {
        j->failed = 1;
        return;
    }
    float *c = scratch, *padded = scratch + stage;
    pg_apanel_fn *apanel = relvm_pgemm_apanel_kernel();
    const int64_t rs = j->padded.rs;
    for (int64_t t = begin; t < end; ++t) {
        const int64_t image = t / (panels * bands), q = t / bands % panels, b = t % bands;
        const int64_t g = image % s->groups, n = image / s->groups;
        const int64_t oy0 = b * tj->band_rows, oy1 = relvm_min64(s->oh, oy0 + tj->band_rows);
        const int64_t lo = oy0 * s->sh;
        const int64_t hi = relvm_min64(j->padded.ph, (oy1 - 1) * s->sh + (s->kh - 1) * s->dh + 1);
        const float *in = padded_input(j, image, padded, lo, hi);
        const int64_t col0 = q * PG_PANEL, cols = relvm_min64(PG_PANEL, ocg - col0);
        const struct pg_epilogue e = {NULL, tj->bias ? tj->bias + g * ocg : NULL, j->e.clamp,
                                      j->e.lo, j->e.hi, NULL, 0};
        const float *panel = tj->panels + g * panels_size(s) + q * k * PG_PANEL;
        for (int64_t p0 = 0; p0 < k;) {
            const int64_t kb = k - p0 <= DIRECT_KC + DIRECT_KC / 2 ? k - p0 : DIRECT_KC;
            const int part = kb == k ? 0 : p0 == 0 ? 1 : p0 + kb == k ? 3 : 2;
            if (j->pointwise) /* the band's pixels are one run of each input plane */
                apanel((oy1 - oy0) * s->ow, kb, in + oy0 * s->ow, j->off + p0,
                       panel + p0 * PG_PANEL, c, PG_PANEL, cols, &e, 0, col0, part);
            else
                for (int64_t oy = oy0; oy < oy1; ++oy)
                    apanel(s->ow, kb, in + oy * s->sh * rs, j->off + p0, panel + p0 * PG_PANEL,
                           c + (oy - oy0) * s->ow * PG_PANEL, PG_PANEL, cols, &e, 0, col0, part);
            p0 += kb;
        }
        /* a mean has one band a plane (conv_transposed) */
        store_pixel_major(tj, c, n * s->oc + g * ocg + col0, cols, oy0 * s->ow,
                          (oy1 - oy0) * s->ow);
    }
}

/* The transposed form, or (`direct`) the direct form: both read the weights as dense panels. */
static int conv_transposed(const struct relvm_conv2d_shape *s, const float *x, const float *w,
                           const float *wpanels, float *y, const float *bias, const float *clamp,
                           int mean, relvm_block_fn *post, void *post_ctx, int direct) {
    struct conv_transposed tj = {conv_job(s, x, w, NULL, y, NULL, clamp), wpanels, bias, mean,
                                 0, 0};
    if (direct) {
        tj.band_rows = mean ? s->oh
                            : relvm_min64(s->oh, (DIRECT_BAND_PIXELS + s->ow - 1) / s->ow);
        tj.bands = (s->oh + tj.band_rows - 1) / tj.band_rows;
    }
    struct conv_pgemm *j = &tj.j;
    j->ifn = NULL;
    j->offsets_only = 1; /* no weights packed for the usual form */
    j->post = post;
    j->post_ctx = post_ctx;
    float *owned = NULL;
    /* The GEMM loads whole aligned vectors of a panel: weights packed elsewhere than on a
     * 64-byte boundary (the VM's packings are) are packed again here. */
    if (!wpanels || (uintptr_t)wpanels % 64 != 0) {
        /* 64-byte aligned: the GEMM loads whole vectors of a packed panel. */
        const size_t bytes = (size_t)relvm_max64(1, s->groups * panels_size(s)) * sizeof(float);
        owned = aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!owned) return RELVM_NO_MEMORY;
        pack_panels(s, w, owned);
        tj.panels = owned;
    }
    if (conv_prepare(j, 0) != RELVM_OK) {
        free(owned);
        return RELVM_NO_MEMORY;
    }
    const int64_t panels = (s->oc / s->groups + PG_PANEL - 1) / PG_PANEL;
    if (direct) {
        const int64_t fmas = relvm_max64(1, tj.band_rows * s->ow * PG_PANEL * j->k);
        relvm_parallel_for(s->n * s->groups * panels * tj.bands,
                           relvm_max64(1, PG_GRAIN_FMAS / fmas), conv_direct_tasks, &tj);
    } else {
        const int64_t fmas = relvm_max64(1, s->oh * s->ow * PG_PANEL * relvm_max64(1, j->k));
        relvm_parallel_for(s->n * s->groups * panels, relvm_max64(1, PG_GRAIN_FMAS / fmas),
                           conv_transposed_tasks, &tj);
    }
    conv_release(j);
    free(owned);
    return j->failed ? RELVM_NO_MEMORY : RELVM_OK;
}

/* --- 1 x 1 convs with a stride ---------------------------------------------------------------
 * A 1 x 1 conv with a stride and no top or left padding reads only every sh-th row and sw-th
 * column of its input (ResNet's downsampling shortcuts). Its padded image would copy all of
 * the input to use a quarter of it; instead it runs as the pointwise conv of that subsampled
 * input (zero where a bottom or right padding reaches past the image), which the GEMM reads in
 * place. The weights' form is the pointwise conv's (relvm_conv2d_weights_form). */

static int is_strided_pointwise(const struct relvm_conv2d_shape *s) {
    return s->kh == 1 && s->kw == 1 && s->pt == 0 && s->pl == 0 && (s->sh > 1 || s->sw > 1);
}

/* The conv that runs for s: the subsampled pointwise conv of a strided 1 x 1 one, else s. */
static struct relvm_conv2d_shape run_shape(const struct relvm_conv2d_shape *s) {
    struct relvm_conv2d_shape t = *s;
    if (is_strided_pointwise(s)) {
        t.h = s->oh;
        t.w = s->ow;
        t.sh = t.sw = 1;
        t.dh = t.dw = 1;
    }
    return t;
}

struct subsample_job {
    const struct relvm_conv2d_shape *s;
    const float *x;
    float *out;
};

/* Planes [begin, end) of x subsampled: out's pixel (oy, ox) is x's (oy * sh, ox * sw). */
static void subsample_planes(void *ctx, int64_t begin, int64_t end) {
    const struct subsample_job *j = ctx;
    const struct relvm_conv2d_shape *s = j->s;
    for (int64_t q = begin; q < end; ++q) {
        const float *plane = j->x + q * s->h * s->w;
        float *to = j->out + q * s->oh * s->ow;
        for (int64_t oy = 0; oy < s->oh; ++oy, to += s->ow) {
            const int64_t iy = oy * s->sh;
            for (int64_t ox = 0; ox < s->ow; ++ox) {
                const int64_t ix = ox * s->sw;
                to[ox] = iy < s->h && ix < s->w ? plane[iy * s->w + ix] : 0.0f;
            }
        }
    }
}

static int conv_pgemm_shape(const struct relvm_conv2d_shape *s, const float *x, const float *w,
                            const float *wpacked, float *y, const float *bias, const float *clamp,
                            int mean, relvm_block_fn *post, void *post_ctx);

static int conv_pgemm(const struct relvm_conv2d_shape *s, const float *x, const float *w,
                      const float *wpacked, float *y, const float *bias, const float *clamp,
                      int mean, relvm_block_fn *post, void *post_ctx) {
    if (!is_strided_pointwise(s))
        return conv_pgemm_shape(s, x, w, wpacked, y, bias, clamp, mean, post, post_ctx);
    const struct relvm_conv2d_shape t = run_shape(s);
    const int64_t planes = s->n * s->c, plane = s->oh * s->ow;
    float *sub = malloc((size_t)relvm_max64(1, planes * plane) * sizeof(float));
    if (!sub) return RELVM_NO_MEMORY;
    struct subsample_job j = {s, x, sub};
    relvm_parallel_for(planes, relvm_max64(1, RELVM_GRAIN / relvm_max64(1, plane)),
                       subsample_planes, &j);
    const int status = conv_pgemm_shape(&t, sub, w, wpacked, y, bias, clamp, mean, post,
                                        post_ctx);
    free(sub);
    return status;
}

/* y = epilogue(conv(x, w)), or with `mean`, y (n x oc) = the mean of that over each output
 * plane: each task sums its panel's pixels per channel (nothing else is stored), then the
 * partial sums are added up here. */
static int conv_pgemm_shape(const struct relvm_conv2d_shape *s, const float *x, const float *w,
                            const float *wpacked, float *y, const float *bias, const float *clamp,
                            int mean, relvm_block_fn *post, void *post_ctx) {
    if (is_direct(s))
        return conv_transposed(s, x, w, wpacked, y, bias, clamp, mean, post, post_ctx, 1);
    if (is_transposed(s))
        return conv_transposed(s, x, w, wpacked, y, bias, clamp, mean, post, post_ctx, 0);
    struct conv_pgemm j = conv_job(s, x, w, wpacked, y, bias, clamp);
    j.post = post;
    j.post_ctx = post_ctx;
    conv_use_grid(&j, mean);
    if (conv_prepare(&j, mean) != RELVM_OK) return RELVM_NO_MEMORY;
    conv_run(&j);
    if (mean && !j.failed) conv_finish_mean(&j);
    conv_release(&j);
    return j.failed ? RELVM_NO_MEMORY : RELVM_OK;
}

/* --- the entry points, and what the other conv sources share from here -------------------- */

/* One scratch buffer per thread for every conv source, as when they were one file (each source
 * that includes scratch.h has a buffer of its own): a thread keeps one, as large as the largest
 * conv it ran needed. */
float *relvm_conv_scratch_floats(size_t count) {
    return relvm_scratch_floats(count);
}

int valid_shape(const struct relvm_conv2d_shape *s) {
    return s->n >= 0 && s->c >= 0 && s->h >= 0 && s->w >= 0 && s->oc >= 0 && s->kh >= 1 &&
           s->kw >= 1 && s->oh >= 0 && s->ow >= 0 && s->sh >= 1 && s->sw >= 1 && s->pt >= 0 &&
           s->pl >= 0 && s->dh >= 1 && s->dw >= 1 && s->groups >= 1 && s->c % s->groups == 0 &&
           s->oc % s->groups == 0;
}

/* The epilogue over a finished output, for the paths that do not apply it per tile. */
static void epilogue_planes(const struct relvm_conv2d_shape *s, float *y, const float *bias,
                            const float *clamp) {
    if (!bias && !clamp) return;
    const int64_t plane = s->oh * s->ow;
    for (int64_t q = 0; q < s->n * s->oc; ++q) {
        const float b = bias ? bias[q % s->oc] : 0.0f;
        float *p = y + q * plane;
        for (int64_t i = 0; i < plane; ++i) {
            float v = p[i] + b;
            if (clamp) { /* as the GEMM's epilogue: NaN compares false and stays */
                v = v < clamp[0] ? clamp[0] : v;
                v = v > clamp[1] ? clamp[1] : v;
            }
            p[i] = v;
        }
    }
}

RELVM_EXPORT int relvm_conv2d(int dtype, const struct relvm_conv2d_shape *s, const void *x,
                              const void *w, void *y, const void *bias, const float *clamp,
                              const void *wpacked, relvm_block_fn *post, void *post_ctx) {
    if (dtype != RELVM_FLOAT32 || !valid_shape(s)) return RELVM_UNSUPPORTED;
    const int64_t total = s->n * s->oc * s->oh * s->ow;
    if (total == 0) return RELVM_OK;
    if (s->c == 0) { /* no input channels: every output sums nothing */
        memset(y, 0, (size_t)total * sizeof(float));
        epilogue_planes(s, y, bias, clamp);
        if (post) post(post_ctx, 0, 1, total, total);
        return RELVM_OK;
    }
    if (is_depthwise(s)) return depthwise_conv(s, x, w, y, bias, clamp, post, post_ctx);
    return conv_pgemm(s, x, w, wpacked, y, bias, clamp, 0, post, post_ctx);
}

RELVM_EXPORT int relvm_conv2d_mean(int dtype, const struct relvm_conv2d_shape *s, const void *x,
                                   const void *w, void *y, const void *bias, const float *clamp,
                                   const void *wpacked) {
    /* The GEMM path only: depthwise convs and convs of no input channels are the caller's. */
    if (dtype != RELVM_FLOAT32 || !valid_shape(s) || s->c == 0 || is_depthwise(s))
        return RELVM_UNSUPPORTED;
    if (s->n * s->oc == 0) return RELVM_OK;
    if (s->oh * s->ow == 0) { /* the mean of nothing */
        for (int64_t i = 0; i < s->n * s->oc; ++i) ((float *)y)[i] = __builtin_nanf("");
        return RELVM_OK;
    }
    return conv_pgemm(s, x, w, wpacked, y, bias, clamp, 1, NULL, NULL);
}

RELVM_EXPORT int relvm_conv2d_weights_form(const struct relvm_conv2d_shape *s) {
    if (!valid_shape(s) || s->c == 0 || is_depthwise(s)) return 0;
    const struct relvm_conv2d_shape t = run_shape(s);
    return is_direct(&t) || is_transposed(&t) ? 2 : 1;
}

RELVM_EXPORT int64_t relvm_conv2d_packed_size(const struct relvm_conv2d_shape *s) {
    switch (relvm_conv2d_weights_form(s)) {
    case 1: return s->oc * (s->c / s->groups) * s->kh * s->kw;
    case 2: return s->groups * panels_size(s);
    default: return 0;
    }
}

RELVM_EXPORT void relvm_conv2d_pack_weights(const struct relvm_conv2d_shape *s, const void *w,
                                            void *packed) {
    switch (relvm_conv2d_weights_form(s)) {
    case 1: pack_weights(s, s->c / s->groups * s->kh * s->kw, w, packed); break;
    case 2: pack_panels(s, w, packed); break;
    default: break;
    }
}
