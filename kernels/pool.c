/* Pooling. Semantics follow relvm/ops/pool.py: padding is never a max candidate (a window
 * over none of the input is -inf), NaN propagates, averages accumulate in float64 and round
 * once to the dtype, ceil_mode windows may run past the bottom padding (those taps count for
 * nothing, even with count_include_pad).
 *
 * max_pool2d and avg_pool2d are separable. For each output row, a vertical pass reduces (max,
 * or a float64 sum) the window's input rows that lie inside the image into a per-thread row
 * buffer bordered by the identity (-inf for max, 0 for a sum) wherever windows reach padding
 * or past it; a horizontal pass then reduces each window's kw columns from that buffer with no
 * bounds checks. With stride sw > 1 the buffered row is split into sw column phases (padded
 * columns c = p, p + sw, ... in phase p), as the convs split their padded planes: tap j of
 * output column ox reads phase (j * dw) % sw at index ox + (j * dw) / sw, so every tap reads
 * consecutive elements and both passes vectorize, in blocks of 64 bytes with no scalar
 * remainder (POOL_BLOCKS), compiled for AVX-512, AVX2 and any x86-64 (RELVM_ISA_VERSIONS).
 * Taps that read only padding are left out, and only the input columns the others read are
 * kept (pool_geometry), so windows, strides and padding far larger than the image cost no
 * more than the image; where the taps that reach the input leave gaps no window bridges, a
 * direct loop over each window's taps inside the input runs instead. Items of the parallel
 * loop are planes, or bands of a plane's output rows when there are too few planes to keep
 * every thread busy. */
#include <math.h>
#include "relvm_config.h"
#include "internal/scratch.h"
#include "internal/types.h"
#include "internal/vmath.h"
#include "pool.h"
#include "threads.h"

/* Taps i in [lo, hi) of window `o` land inside [0, size) at o * stride + i * dilation - pad. */
static inline void taps_inside(int64_t o, int64_t stride, int64_t dilation, int64_t pad,
                               int64_t kernel, int64_t size, int64_t *lo, int64_t *hi) {
    const int64_t start = o * stride - pad;
    int64_t first = start >= 0 ? 0 : (-start + dilation - 1) / dilation;
    int64_t end = size - start <= 0 ? 0 : (size - start + dilation - 1) / dilation;
    *lo = first < kernel ? first : kernel;
    *hi = end < kernel ? end : kernel;
    if (*hi < *lo) *hi = *lo;
}

/* Taps of window `o` inside the padded extent [0, padded), in padded coordinates. */
static inline int64_t taps_in_padded(int64_t o, int64_t stride, int64_t dilation,
                                     int64_t kernel, int64_t padded) {
    const int64_t start = o * stride;
    if (start >= padded) return 0;
    const int64_t n = (padded - start + dilation - 1) / dilation;
    return n < kernel ? n : kernel;
}

/* Output rows whose vertical passes all run before their horizontal passes: a horizontal pass
 * reads its bordered row at other offsets than the vertical pass wrote it, and a load that
 * spans two stores still in flight waits for them (store forwarding fails); a group's other
 * rows give those stores time to land. */
#define POOL_GROUP 8

#define POOL_TAPS 5 /* taps per pass over a row: a 3x3 or 5x5 window's rows take one */

/* Where the horizontal pass reads, worked out once a call. Only taps that reach the input for
 * some output column take part (taps t_lo .. t_lo + taps - 1: the others read padding for
 * every window, which cannot change a max or a sum), and only the input columns they read are
 * kept (x_lo .. x_lo + cols - 1), so a window or a stride far larger than the image costs no
 * more than the image. In a bordered row, padded column t_lo * dw + c is at index c / sw of
 * phase c % sw; only the phases the taps read are kept (`phases`, each `phase` long), plus
 * one more that takes the columns of the others when the split writes them (`trash`). */
struct pool_geometry {
    int64_t t_lo, taps, x_lo, cols;
    int64_t shift;                       /* input column x_lo is padded column t_lo * dw + shift */
    int64_t phases, phase, trash, vtaps; /* vtaps: the most window rows inside the image */
};

/* How a call runs: every output the identity (no window covers any input, or there are no
 * outputs); the separable passes; or the direct loop over each window's taps inside the input,
 * for a geometry where the taps that reach the input for some output column are far more than
 * any one window has inside (a stride or padding much larger than the image leaves gaps the
 * bordered row would have to span). */
enum pool_path { POOL_IDENTITY, POOL_SEPARABLE, POOL_DIRECT };

static enum pool_path pool_geometry(const struct relvm_pool2d_shape *s, struct pool_geometry *g) {
    if (s->planes == 0 || s->oh == 0 || s->ow == 0 || s->h == 0 || s->w == 0)
        return POOL_IDENTITY;
    /* Tap t reaches the input for some output column ox when pl <= ox * sw + t * dw < pl + w. */
    const int64_t reach = s->pl - (s->ow - 1) * s->sw; /* t * dw >= reach for the last ox */
    const int64_t t_lo = reach > 0 ? (reach + s->dw - 1) / s->dw : 0;
    const int64_t t_hi = relvm_min64(s->kw, (s->pl + s->w + s->dw - 1) / s->dw);
    if (t_hi <= t_lo) return POOL_IDENTITY;
    if (t_hi - t_lo > 2 * relvm_min64(s->kw, (s->w + s->dw - 1) / s->dw) + POOL_TAPS)
        return POOL_DIRECT;
    const int64_t c0 = t_lo * s->dw, last = (s->ow - 1) * s->sw + (t_hi - 1) * s->dw;
    g->t_lo = t_lo;
    g->taps = t_hi - t_lo;
    g->x_lo = relvm_max64(0, c0 - s->pl);
    g->cols = relvm_min64(s->w, last + 1 - s->pl) - g->x_lo;
    g->shift = s->pl + g->x_lo - c0;
    /* The taps read phases k * dw % sw, k < taps: keep those up to the last. */
    g->phases = 1;
    for (int64_t k = 0; k < g->taps; ++k) g->phases = relvm_max64(g->phases, k * s->dw % s->sw + 1);
    g->phase = (last - c0 + 1 + s->sw - 1) / s->sw;
    g->trash = g->phases < s->sw;
    g->vtaps = relvm_max64(1, relvm_min64(s->kh, (s->h + s->dh - 1) / s->dh));
    return POOL_SEPARABLE;
}

/* What a thread keeps in its scratch, in bytes from its start, each part from a 64-byte
 * boundary. For a group of output rows: `bordered`, a bordered row each (`row` elements
 * apart); `lines`, the vertical passes' columns before they are split into phases (sw > 1;
 * `line` elements apart); an average's float64 window `sums` (ow each; only for windows
 * wider than POOL_TAPS). Then what every plane shares, worked out once a call: `voff` and
 * `hoff`, the taps' offsets in the vertical and the horizontal passes (vtaps and taps
 * int64s); `spans`, each output row's first input element inside the image and how many of
 * its window's rows are inside (oh pairs of int64s); `starts`, where input column x_lo + q,
 * q < sw, goes in a bordered row (sw int64s at most, see split); for an average, 1 / the tap
 * count of each window's rows (`rfactors`, oh doubles) and of its columns (`cfactors`, ow). */
struct pool_layout {
    struct pool_geometry g;
    int64_t row, line;
    int64_t bordered, lines, sums, voff, hoff, spans, starts, rfactors, cfactors, bytes;
};

static int64_t take(int64_t *at, int64_t bytes) {
    const int64_t here = *at;
    *at += (bytes + 63) / 64 * 64;
    return here;
}

/* `elem`: bytes per element of the bordered rows (the dtype's for max, 8 for a sum). */
static struct pool_layout pool_layout(const struct relvm_pool2d_shape *s,
                                      struct pool_geometry g, int64_t elem, int is_avg) {
    struct pool_layout l;
    l.g = g;
    const int64_t per_line = 64 / elem; /* elements per 64 bytes */
    l.row = ((g.phases + g.trash) * g.phase + per_line - 1) / per_line * per_line;
    l.line = (g.cols + per_line - 1) / per_line * per_line;
    int64_t at = 0;
    l.bordered = take(&at, POOL_GROUP * l.row * elem);
    l.lines = take(&at, s->sw > 1 ? POOL_GROUP * l.line * elem : 0);
    l.sums = take(&at, is_avg && g.taps > POOL_TAPS ? POOL_GROUP * s->ow * 8 : 0);
    l.voff = take(&at, g.vtaps * 8);
    l.hoff = take(&at, g.taps * 8);
    l.spans = take(&at, s->oh * 16);
    l.starts = take(&at, relvm_min64(s->sw, g.cols) * 8);
    l.rfactors = take(&at, is_avg ? s->oh * 8 : 0);
    l.cfactors = take(&at, is_avg ? s->ow * 8 : 0);
    l.bytes = at;
    return l;
}

struct pool_job {
    const struct relvm_pool2d_shape *s;
    const char *x;
    char *y;
    struct pool_layout at;
    int is_avg;
    int64_t bands;      /* items per plane: its output rows cut into this many bands */
    _Atomic int failed; /* a thread could not get its scratch */
};

#define POOL_AT(T, scratch, offset) ((T *)(void *)((scratch) + (offset)))

/* 1 / the taps of window o that count: inside the input, or inside the padded input with
 * count_include_pad (a window over no input sums to 0, and any factor keeps it 0). */
static double pool_factor(int64_t o, int64_t stride, int64_t dilation, int64_t pad,
                          int64_t kernel, int64_t size, int64_t padded, int64_t include_pad) {
    int64_t lo, hi;
    taps_inside(o, stride, dilation, pad, kernel, size, &lo, &hi);
    const int64_t n = include_pad ? taps_in_padded(o, stride, dilation, kernel, padded) : hi - lo;
    return hi > lo && n > 0 ? 1.0 / (double)n : 1.0;
}

/* This thread's scratch, with the bordered rows cleared to the identity and the geometry
 * written; NULL when memory runs out (the job is marked failed). */
static char *pool_scratch(struct pool_job *j, int64_t elem) {
    const struct relvm_pool2d_shape *s = j->s;
    const struct pool_layout *l = &j->at;
    const struct pool_geometry *g = &l->g;
    char *scratch = (char *)relvm_scratch_floats((size_t)(l->bytes / 4));
    if (!scratch) {
        j->failed = 1;
        return NULL;
    }
    const int64_t border = POOL_GROUP * l->row;
    f32 *rows32 = POOL_AT(f32, scratch, l->bordered);
    f64 *rows64 = POOL_AT(f64, scratch, l->bordered);
    if (j->is_avg)
        for (int64_t c = 0; c < border; ++c) rows64[c] = 0.0;
    else if (elem == 4)
        for (int64_t c = 0; c < border; ++c) rows32[c] = -INFINITY;
    else
        for (int64_t c = 0; c < border; ++c) rows64[c] = -INFINITY;
    /* Vertical taps are rows i * dh apart; horizontal tap t_lo + k reads padded column
     * t_lo * dw + k * dw of output column 0: phase c % sw, index c / sw. */
    int64_t *voff = POOL_AT(int64_t, scratch, l->voff);
    int64_t *hoff = POOL_AT(int64_t, scratch, l->hoff);
    for (int64_t i = 0; i < g->vtaps; ++i) voff[i] = i * s->dh * s->w;
    for (int64_t k = 0; k < g->taps; ++k) {
        const int64_t c = k * s->dw;
        hoff[k] = c % s->sw * g->phase + c / s->sw;
    }
    int64_t *spans = POOL_AT(int64_t, scratch, l->spans);
    for (int64_t oy = 0; oy < s->oh; ++oy) {
        int64_t ilo, ihi;
        taps_inside(oy, s->sh, s->dh, s->pt, s->kh, s->h, &ilo, &ihi);
        spans[2 * oy] = ihi > ilo ? (oy * s->sh + ilo * s->dh - s->pt) * s->w : 0;
        spans[2 * oy + 1] = ihi - ilo;
    }
    /* Input column x_lo + q is at `shift + q` from the row's first kept column: phase
     * (shift + q) % sw, unless the taps never read that phase (then the trash phase). */
    int64_t *starts = POOL_AT(int64_t, scratch, l->starts);
    for (int64_t q = 0; q < relvm_min64(s->sw, g->cols); ++q) {
        const int64_t c = g->shift + q, p = c % s->sw;
        starts[q] = (p < g->phases ? p : g->phases) * g->phase + c / s->sw;
    }
    f64 *rfactors = POOL_AT(f64, scratch, l->rfactors);
    f64 *cfactors = POOL_AT(f64, scratch, l->cfactors);
    for (int64_t oy = 0; j->is_avg && oy < s->oh; ++oy)
        rfactors[oy] = pool_factor(oy, s->sh, s->dh, s->pt, s->kh, s->h, s->pt + s->h + s->pb,
                                   s->count_include_pad);
    for (int64_t ox = 0; j->is_avg && ox < s->ow; ++ox)
        cfactors[ox] = pool_factor(ox, s->sw, s->dw, s->pl, s->kw, s->w, s->pl + s->w + s->pr,
                                   s->count_include_pad);
    return scratch;
}

/* Output rows [first, last) of item `item`'s band. */
static inline void band_rows(const struct pool_job *j, int64_t item, int64_t *first,
                             int64_t *last) {
    const int64_t band = item % j->bands;
    *first = band * j->s->oh / j->bands;
    *last = (band + 1) * j->s->oh / j->bands;
}

#define POOL_INLINE static inline __attribute__((always_inline))
#define POOL_MAX(m, v) ((v) > (m) || (v) != (v) ? (v) : (m)) /* once NaN, m stays NaN */
#define POOL_SUM(m, v) ((m) + (v))

/* STMT (which uses x) for x = 0 .. len-1, in blocks of LANES (a constant), each a loop of
 * constant length that vectorizes whole; the last, partial block is done as the block that
 * ends at len, overlapping the one before, so no element is left to a scalar loop (STMT must
 * give the same result when it runs twice for an x). Rows shorter than a block go by 4, the
 * same way. No iteration reads what another writes: ivdep spares GCC's checks of that. */
#define POOL_BLOCKS(x, len, LANES, STMT)                                                      \
    do {                                                                                      \
        const int64_t len_ = (len);                                                           \
        if (len_ >= (LANES))                                                                  \
            POOL_BLOCKS_OF(x, len_, LANES, STMT);                                             \
        else if (len_ >= 4)                                                                   \
            POOL_BLOCKS_OF(x, len_, 4, STMT);                                                 \
        else                                                                                  \
            for (int64_t x = 0; x < len_; ++x) STMT;                                          \
    } while (0)

#define POOL_BLOCKS_OF(x, len, LANES, STMT)                                                   \
    do {                                                                                      \
        for (int64_t b_ = 0; b_ < (len); b_ += (LANES)) {                                     \
            const int64_t at_ = b_ + (LANES) <= (len) ? b_ : (len) - (LANES);                 \
            _Pragma("GCC ivdep") _Pragma("GCC unroll 1")                                      \
            for (int l_ = 0; l_ < (LANES); ++l_) {                                            \
                const int64_t x = at_ + l_;                                                   \
                STMT;                                                                         \
            }                                                                                 \
        }                                                                                     \
    } while (0)

/* Tap i of a pass over n taps (folding dst in when `more`), written out POOL_TAPS times: GCC
 * kept a loop of them, even of none, for some n, and then left the x loop scalar. */
#define POOL_TAP(D, OP, i)                                                                    \
    if ((i) >= 1 - more && (i) < n) {                                                         \
        const D v = (D)src[o[(i)] + x];                                                       \
        m = OP(m, v);                                                                         \
    }

/* NAME(dst, src, off, n, len): dst[x] = OP over taps i < n of src[off[i] + x], for x < len,
 * in passes of up to POOL_TAPS taps (later passes fold dst in). Each pass is inlined with its
 * tap count and `more` constant, so the taps unroll, and runs in POOL_BLOCKS of 64 bytes of
 * src; but a sum that folds dst in (`more`: windows of over POOL_TAPS taps) would count an
 * element twice in overlapping blocks, so it goes one element at a time. One copy for each
 * instruction set (RELVM_ISA_VERSIONS), which each row's passes call. */
#define POOL_TAPS_OF(NAME, D, ST, OP, IDEMPOTENT)                                             \
    POOL_INLINE void NAME##_at(D *restrict dst, const ST *restrict src, const int64_t *o,     \
                               int64_t x, const int n, const int more) {                      \
        D m = more ? dst[x] : (D)src[o[0] + x];                                               \
        POOL_TAP(D, OP, 0) POOL_TAP(D, OP, 1) POOL_TAP(D, OP, 2) POOL_TAP(D, OP, 3)           \
        POOL_TAP(D, OP, 4)                                                                    \
        dst[x] = m;                                                                           \
    }                                                                                         \
    POOL_INLINE void NAME##_pass(D *restrict dst, const ST *restrict src,                     \
                                 const int64_t *restrict off, int64_t len, const int n,       \
                                 const int more) {                                            \
        int64_t o[POOL_TAPS];                                                                 \
        for (int i = 0; i < n; ++i) o[i] = off[i];                                            \
        if (IDEMPOTENT || !more)                                                              \
            POOL_BLOCKS(x, len, 64 / (int)sizeof(ST), NAME##_at(dst, src, o, x, n, more));    \
        else                                                                                  \
            for (int64_t x = 0; x < len; ++x) NAME##_at(dst, src, o, x, n, more);             \
    }                                                                                         \
    POOL_INLINE void NAME##_of(D *restrict dst, const ST *restrict src, const int64_t *off,   \
                               int64_t n, int64_t len) {                                      \
        for (int64_t i = 0; i < n; i += POOL_TAPS) {                                          \
            const int64_t *o = off + i;                                                       \
            switch (relvm_min64(n - i, POOL_TAPS) * 2 + (i > 0)) {                            \
            case 2: NAME##_pass(dst, src, o, len, 1, 0); break;                               \
            case 3: NAME##_pass(dst, src, o, len, 1, 1); break;                               \
            case 4: NAME##_pass(dst, src, o, len, 2, 0); break;                               \
            case 5: NAME##_pass(dst, src, o, len, 2, 1); break;                               \
            case 6: NAME##_pass(dst, src, o, len, 3, 0); break;                               \
            case 7: NAME##_pass(dst, src, o, len, 3, 1); break;                               \
            case 8: NAME##_pass(dst, src, o, len, 4, 0); break;                               \
            case 9: NAME##_pass(dst, src, o, len, 4, 1); break;                               \
            case 10: NAME##_pass(dst, src, o, len, 5, 0); break;                              \
            default: NAME##_pass(dst, src, o, len, 5, 1); break;                              \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    RELVM_ISA_VERSIONS(static, NAME,                                                          \
                       (D *restrict dst, const ST *restrict src, const int64_t *off,          \
                        int64_t n, int64_t len),                                              \
                       NAME##_of(dst, src, off, n, len))

POOL_TAPS_OF(max_taps_f32, f32, f32, POOL_MAX, 1)
POOL_TAPS_OF(max_taps_f64, f64, f64, POOL_MAX, 1)
POOL_TAPS_OF(sum_taps_f32, f64, f32, POOL_SUM, 0)
POOL_TAPS_OF(sum_taps_f64, f64, f64, POOL_SUM, 0)

/* split_S: a vertical pass's `line` (the w kept input columns) into the bordered row's
 * phases. Kept column u = sw * t + q is in phase (shift + q) % sw, at index t + (shift + q) /
 * sw there: `starts[q] + t` in the row. For sw 2 and 3 each t moves sw consecutive columns
 * (GCC vectorizes that as interleaved loads); the columns past the last whole group, and any
 * other stride, go one at a time.
 * scale_S: an average's output row, each window's sum times its rows' and columns' factors. */
#define POOL_ROW_HELPERS(S, T)                                                                \
    POOL_INLINE void split_##S##_by(const int64_t sw, const int64_t *starts,                  \
                                    const T *restrict line, T *restrict row, int64_t w) {     \
        const int64_t groups = w / sw;                                                        \
        if (sw <= 3)                                                                          \
            POOL_BLOCKS(t, groups, 64 / (int)sizeof(T), for (int64_t q = 0; q < sw; ++q)      \
                            row[starts[q] + t] = line[t * sw + q]);                           \
        else                                                                                  \
            for (int64_t t = 0; t < groups; ++t)                                              \
                for (int64_t q = 0; q < sw; ++q) row[starts[q] + t] = line[t * sw + q];       \
        for (int64_t q = 0; q < w - groups * sw; ++q)                                         \
            row[starts[q] + groups] = line[groups * sw + q];                                  \
    }                                                                                         \
    POOL_INLINE void split_##S##_of(int64_t sw, const int64_t *starts,                        \
                                    const T *restrict line, T *restrict row, int64_t w) {     \
        if (sw == 2)                                                                          \
            split_##S##_by(2, starts, line, row, w);                                          \
        else if (sw == 3)                                                                     \
            split_##S##_by(3, starts, line, row, w);                                          \
        else                                                                                  \
            split_##S##_by(sw, starts, line, row, w);                                         \
    }                                                                                         \
    RELVM_ISA_VERSIONS(static, split_##S,                                                     \
                       (int64_t sw, const int64_t *starts, const T *restrict line,            \
                        T *restrict row, int64_t w),                                          \
                       split_##S##_of(sw, starts, line, row, w))                              \
    RELVM_ISA_VERSIONS(static, scale_##S,                                                     \
                       (T *restrict out, const f64 *restrict sums,                            \
                        const f64 *restrict factors, f64 rfactor, int64_t ow),                \
                       POOL_BLOCKS(x, ow, 16, out[x] = (T)(sums[x] * rfactor * factors[x])))  \
                                                                                              \
    /* An average's horizontal pass over n <= POOL_TAPS taps, scaled into the output row. */  \
    POOL_INLINE void mean_taps_##S##_at(T *restrict out, const f64 *restrict src,             \
                                        const int64_t *o, const f64 *restrict factors,        \
                                        f64 rfactor, int64_t x, const int n) {                \
        const int more = 0;                                                                   \
        f64 m = src[o[0] + x];                                                                \
        POOL_TAP(f64, POOL_SUM, 1) POOL_TAP(f64, POOL_SUM, 2) POOL_TAP(f64, POOL_SUM, 3)      \
        POOL_TAP(f64, POOL_SUM, 4)                                                            \
        out[x] = (T)(m * rfactor * factors[x]);                                               \
    }                                                                                         \
    POOL_INLINE void mean_taps_##S##_pass(T *restrict out, const f64 *restrict src,           \
                                          const int64_t *restrict off,                        \
                                          const f64 *restrict factors, f64 rfactor,           \
                                          int64_t len, const int n) {                         \
        int64_t o[POOL_TAPS];                                                                 \
        for (int i = 0; i < n; ++i) o[i] = off[i];                                            \
        POOL_BLOCKS(x, len, 64 / (int)sizeof(T),                                              \
                    mean_taps_##S##_at(out, src, o, factors, rfactor, x, n));                 \
    }                                                                                         \
    POOL_INLINE void mean_taps_##S##_of(T *restrict out, const f64 *restrict src,             \
                                        const int64_t *off, int64_t n,                        \
                                        const f64 *restrict factors, f64 rfactor,             \
                                        int64_t len) {                                        \
        switch (n) {                                                                          \
        case 1: mean_taps_##S##_pass(out, src, off, factors, rfactor, len, 1); break;         \
        case 2: mean_taps_##S##_pass(out, src, off, factors, rfactor, len, 2); break;         \
        case 3: mean_taps_##S##_pass(out, src, off, factors, rfactor, len, 3); break;         \
        case 4: mean_taps_##S##_pass(out, src, off, factors, rfactor, len, 4); break;         \
        default: mean_taps_##S##_pass(out, src, off, factors, rfactor, len, 5); break;        \
        }                                                                                     \
    }                                                                                         \
    RELVM_ISA_VERSIONS(static, mean_taps_##S,                                                 \
                       (T *restrict out, const f64 *restrict src, const int64_t *off,         \
                        int64_t n, const f64 *restrict factors, f64 rfactor, int64_t len),    \
                       mean_taps_##S##_of(out, src, off, n, factors, rfactor, len))

POOL_ROW_HELPERS(f32, f32)
POOL_ROW_HELPERS(f64, f64)

/* The rows of one item, POOL_GROUP at a time: each row's vertical pass into its bordered row
 * (through its line and split when sw > 1), then each row's horizontal pass into the output
 * row: max, or a sum times 1 / the window's rows that count times 1 / its columns that count
 * (rounding those in float64 is far below float32's rounding; a division an output cost as
 * much as the rest). A row whose windows cover no input row is -inf (max) or 0. */
#define POOL_VERTICAL(TAPS, SPLIT, A)                                                         \
    do {                                                                                      \
        for (int64_t oy = g; oy < end_g; ++oy) {                                              \
            A *row = bordered + (oy - g) * l->row;                                            \
            A *line = s->sw == 1 ? row + l->g.shift : lines + (oy - g) * l->line;             \
            if (spans[2 * oy + 1])                                                            \
                TAPS(line, x + spans[2 * oy] + l->g.x_lo, voff, spans[2 * oy + 1], l->g.cols); \
        }                                                                                     \
        for (int64_t oy = g; oy < end_g && s->sw > 1; ++oy)                                   \
            if (spans[2 * oy + 1])                                                            \
                SPLIT(s->sw, starts, lines + (oy - g) * l->line, bordered + (oy - g) * l->row, \
                      l->g.cols);                                                             \
    } while (0)

/* The tap offsets, the rows' spans and the phase starts, from a task's scratch (both pools). */
#define POOL_OFFSETS(scratch)                                                                 \
    const int64_t *voff = POOL_AT(int64_t, scratch, l->voff);                                 \
    const int64_t *hoff = POOL_AT(int64_t, scratch, l->hoff);                                 \
    const int64_t *spans = POOL_AT(int64_t, scratch, l->spans);                               \
    const int64_t *starts = POOL_AT(int64_t, scratch, l->starts)

/* A task's items (a plane's band of output rows each), POOL_GROUP output rows at a time: the
 * block after T runs for rows [g, end_g) of plane x (input) and y (output), both of type T. */
#define POOL_WALK(T, ...)                                                                     \
    for (int64_t item = begin; item < end; ++item) {                                          \
        const int64_t p = item / j->bands;                                                    \
        const T *x = (const T *)(const void *)j->x + p * s->h * s->w;                         \
        T *y = (T *)(void *)j->y + p * s->oh * s->ow;                                         \
        int64_t first, last;                                                                  \
        band_rows(j, item, &first, &last);                                                    \
        for (int64_t g = first; g < last; g += POOL_GROUP) {                                  \
            const int64_t end_g = relvm_min64(last, g + POOL_GROUP);                          \
            __VA_ARGS__                                                                       \
        }                                                                                     \
    }

#define POOLS(S, T)                                                                           \
    static void max_items_##S(void *ctx, int64_t begin, int64_t end) {                        \
        struct pool_job *j = ctx;                                                             \
        const struct relvm_pool2d_shape *s = j->s;                                            \
        const struct pool_layout *l = &j->at;                                                 \
        char *scratch = pool_scratch(j, sizeof(T));                                           \
        if (!scratch) return;                                                                 \
        T *bordered = POOL_AT(T, scratch, l->bordered);                                       \
        T *lines = POOL_AT(T, scratch, l->lines);                                             \
        POOL_OFFSETS(scratch);                                                                \
        POOL_WALK(T, {                                                                        \
            POOL_VERTICAL(max_taps_##S, split_##S, T);                                        \
            for (int64_t oy = g; oy < end_g; ++oy) {                                          \
                T *out = y + oy * s->ow;                                                      \
                if (spans[2 * oy + 1])                                                        \
                    max_taps_##S(out, bordered + (oy - g) * l->row, hoff, l->g.taps, s->ow);  \
                else                                                                          \
                    for (int64_t ox = 0; ox < s->ow; ++ox) out[ox] = (T)-INFINITY;            \
            }                                                                                 \
        });                                                                                   \
    }                                                                                         \
                                                                                              \
    static void avg_items_##S(void *ctx, int64_t begin, int64_t end) {                        \
        struct pool_job *j = ctx;                                                             \
        const struct relvm_pool2d_shape *s = j->s;                                            \
        const struct pool_layout *l = &j->at;                                                 \
        char *scratch = pool_scratch(j, 8);                                                   \
        if (!scratch) return;                                                                 \
        f64 *bordered = POOL_AT(f64, scratch, l->bordered);                                   \
        f64 *lines = POOL_AT(f64, scratch, l->lines), *sums = POOL_AT(f64, scratch, l->sums); \
        const f64 *rfactors = POOL_AT(f64, scratch, l->rfactors);                             \
        const f64 *cfactors = POOL_AT(f64, scratch, l->cfactors);                             \
        POOL_OFFSETS(scratch);                                                                \
        POOL_WALK(T, {                                                                        \
            POOL_VERTICAL(sum_taps_##S, split_f64, f64);                                      \
            for (int64_t oy = g; oy < end_g; ++oy) {                                          \
                T *out = y + oy * s->ow;                                                      \
                const f64 *row = bordered + (oy - g) * l->row;                                \
                if (!spans[2 * oy + 1]) {                                                     \
                    for (int64_t ox = 0; ox < s->ow; ++ox) out[ox] = (T)0;                    \
                } else if (l->g.taps <= POOL_TAPS) {                                          \
                    mean_taps_##S(out, row, hoff, l->g.taps, cfactors, rfactors[oy], s->ow);  \
                } else {                                                                      \
                    sum_taps_f64(sums + (oy - g) * s->ow, row, hoff, l->g.taps, s->ow);       \
                    scale_##S(out, sums + (oy - g) * s->ow, cfactors, rfactors[oy], s->ow);   \
                }                                                                             \
            }                                                                                 \
        });                                                                                   \
    }                                                                                         \
                                                                                              \
    static RELVM_VECTORIZE void global_##S(int is_max, int64_t size, const T *x, T *y) {      \
        if (is_max) {                                                                         \
            *y = vm_max_##S(x, size);                                                         \
            return;                                                                           \
        }                                                                                     \
        *y = (T)(vm_sum_##S(x, size) / (double)size); /* 0 / 0: NaN, the empty mean */        \
    }

POOLS(f32, f32)
POOLS(f64, f64)

/* The direct loop (POOL_DIRECT): each window's taps inside the input, one at a time. */
#define POOL_DIRECT_OF(S, T)                                                                  \
    static void max_direct_##S(const struct relvm_pool2d_shape *s, const T *x, T *y) {        \
        for (int64_t oy = 0; oy < s->oh; ++oy) {                                              \
            int64_t ilo, ihi;                                                                 \
            taps_inside(oy, s->sh, s->dh, s->pt, s->kh, s->h, &ilo, &ihi);                    \
            for (int64_t ox = 0; ox < s->ow; ++ox) {                                          \
                int64_t jlo, jhi;                                                             \
                taps_inside(ox, s->sw, s->dw, s->pl, s->kw, s->w, &jlo, &jhi);                \
                T m = (T)-INFINITY;                                                           \
                for (int64_t i = ilo; i < ihi; ++i) {                                         \
                    const T *row = x + (oy * s->sh + i * s->dh - s->pt) * s->w;               \
                    for (int64_t t = jlo; t < jhi; ++t) {                                     \
                        const T v = row[ox * s->sw + t * s->dw - s->pl];                      \
                        m = POOL_MAX(m, v);                                                   \
                    }                                                                         \
                }                                                                             \
                y[oy * s->ow + ox] = m;                                                       \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    static void avg_direct_##S(const struct relvm_pool2d_shape *s, const T *x, T *y) {        \
        for (int64_t oy = 0; oy < s->oh; ++oy) {                                              \
            int64_t ilo, ihi;                                                                 \
            taps_inside(oy, s->sh, s->dh, s->pt, s->kh, s->h, &ilo, &ihi);                    \
            const f64 rfactor = pool_factor(oy, s->sh, s->dh, s->pt, s->kh, s->h,             \
                                            s->pt + s->h + s->pb, s->count_include_pad);      \
            for (int64_t ox = 0; ox < s->ow; ++ox) {                                          \
                int64_t jlo, jhi;                                                             \
                taps_inside(ox, s->sw, s->dw, s->pl, s->kw, s->w, &jlo, &jhi);                \
                f64 total = 0.0;                                                              \
                for (int64_t i = ilo; i < ihi; ++i) {                                         \
                    const T *row = x + (oy * s->sh + i * s->dh - s->pt) * s->w;               \
                    for (int64_t t = jlo; t < jhi; ++t)                                       \
                        total += (f64)row[ox * s->sw + t * s->dw - s->pl];                    \
                }                                                                             \
                const f64 cfactor = pool_factor(ox, s->sw, s->dw, s->pl, s->kw, s->w,         \
                                                s->pl + s->w + s->pr, s->count_include_pad);  \
                y[oy * s->ow + ox] = (T)(total * rfactor * cfactor);                          \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    static void direct_planes_##S(void *ctx, int64_t begin, int64_t end) {                    \
        const struct pool_job *j = ctx;                                                       \
        const int64_t in = j->s->h * j->s->w, out = j->s->oh * j->s->ow;                      \
        for (int64_t p = begin; p < end; ++p) {                                               \
            const T *x = (const T *)(const void *)j->x + p * in;                              \
            T *y = (T *)(void *)j->y + p * out;                                               \
            if (j->is_avg)                                                                    \
                avg_direct_##S(j->s, x, y);                                                   \
            else                                                                              \
                max_direct_##S(j->s, x, y);                                                   \
        }                                                                                     \
    }

POOL_DIRECT_OF(f32, f32)
POOL_DIRECT_OF(f64, f64)

static int valid_pool(int dtype, const struct relvm_pool2d_shape *s) {
    return (dtype == RELVM_FLOAT32 || dtype == RELVM_FLOAT64) && s->planes >= 0 && s->h >= 0 &&
           s->w >= 0 && s->oh >= 0 && s->ow >= 0 && s->kh >= 1 && s->kw >= 1 && s->sh >= 1 &&
           s->sw >= 1 && s->dh >= 1 && s->dw >= 1 && s->pt >= 0 && s->pl >= 0 && s->pb >= 0 &&
           s->pr >= 0;
}

/* Every output the identity: no window covers any input (or there are no outputs). */
static void fill_pool(int dtype, int is_avg, int64_t count, void *y) {
    for (int64_t i = 0; i < count; ++i) {
        if (dtype == RELVM_FLOAT32)
            ((f32 *)y)[i] = is_avg ? 0.0f : -INFINITY;
        else
            ((f64 *)y)[i] = is_avg ? 0.0 : -INFINITY;
    }
}

static int run_pool(int dtype, const struct relvm_pool2d_shape *s, const void *x, void *y,
                    int is_avg, relvm_range_fn f32_fn, relvm_range_fn f64_fn) {
    if (!valid_pool(dtype, s)) return RELVM_UNSUPPORTED;
    struct pool_geometry g;
    const enum pool_path path = pool_geometry(s, &g);
    if (path == POOL_IDENTITY) {
        fill_pool(dtype, is_avg, s->planes * s->oh * s->ow, y);
        return RELVM_OK;
    }
    if (path == POOL_DIRECT) {
        struct pool_job j = {.s = s, .x = x, .y = y, .is_avg = is_avg, .bands = 1};
        relvm_parallel_for(s->planes, 1,
                           dtype == RELVM_FLOAT32 ? direct_planes_f32 : direct_planes_f64, &j);
        return RELVM_OK;
    }
    const int64_t elem = is_avg || dtype == RELVM_FLOAT64 ? 8 : 4;
    struct pool_job j = {s, x, y, pool_layout(s, g, elem, is_avg), is_avg, 1, 0};
    /* Too few planes for the threads: cut each plane's output rows into bands, so that there
     * are about four items per thread. */
    const int64_t threads = relvm_threads_get();
    if (threads > 1 && s->planes < 4 * threads)
        j.bands = relvm_min64(s->oh, (4 * threads + s->planes - 1) / s->planes);
    const int64_t work = relvm_max64(1, s->oh / j.bands * (g.vtaps * g.cols + g.taps * s->ow));
    relvm_parallel_for(s->planes * j.bands, relvm_max64(1, RELVM_GRAIN / work),
                       dtype == RELVM_FLOAT32 ? f32_fn : f64_fn, &j);
    return j.failed ? RELVM_NO_MEMORY : RELVM_OK;
}

RELVM_EXPORT int relvm_max_pool2d(int dtype, const struct relvm_pool2d_shape *s, const void *x,
                                  void *y) {
    return run_pool(dtype, s, x, y, 0, max_items_f32, max_items_f64);
}

RELVM_EXPORT int relvm_avg_pool2d(int dtype, const struct relvm_pool2d_shape *s, const void *x,
                                  void *y) {
    return run_pool(dtype, s, x, y, 1, avg_items_f32, avg_items_f64);
}

struct global_job {
    int dtype, is_max;
    int64_t size;
    const char *x;
    char *y;
};

static void global_planes(void *ctx, int64_t begin, int64_t end) {
    const struct global_job *j = ctx;
    for (int64_t p = begin; p < end; ++p) {
        if (j->dtype == RELVM_FLOAT32)
            global_f32(j->is_max, j->size, (const f32 *)j->x + p * j->size, (f32 *)j->y + p);
        else
            global_f64(j->is_max, j->size, (const f64 *)j->x + p * j->size, (f64 *)j->y + p);
    }
}

RELVM_EXPORT int relvm_global_pool2d(int dtype, int is_max, int64_t planes, int64_t size,
                                     const void *x, void *y) {
    if ((dtype != RELVM_FLOAT32 && dtype != RELVM_FLOAT64) || planes < 0 || size < 0)
        return RELVM_UNSUPPORTED;
    struct global_job j = {dtype, is_max, size, x, y};
    relvm_parallel_for(planes, relvm_max64(1, RELVM_GRAIN / relvm_max64(1, size)),
                       global_planes, &j);
    return RELVM_OK;
}

struct argmax_job {
    const struct relvm_pool2d_shape *s;
    int dtype, column_major;
    const void *x;
    void *y;
    int64_t *idx;
};

#define ARGMAX_PLANES(T, SUFFIX)                                                              \
    static void argmax_planes_##SUFFIX(const struct argmax_job *j, int64_t begin,            \
                                       int64_t end) {                                        \
        const struct relvm_pool2d_shape *s = j->s;                                           \
        for (int64_t p = begin; p < end; ++p) {                                              \
            const T *x = (const T *)j->x + p * s->h * s->w;                                  \
            T *y = (T *)j->y + p * s->oh * s->ow;                                            \
            int64_t *idx = j->idx + p * s->oh * s->ow;                                       \
            for (int64_t oy = 0; oy < s->oh; ++oy)                                           \
                for (int64_t ox = 0; ox < s->ow; ++ox) {                                     \
                    T best = (T)-INFINITY;                                                   \
                    int64_t at = -1;                                                         \
                    for (int64_t ky = 0; ky < s->kh; ++ky) {                                 \
                        const int64_t r = oy * s->sh + ky * s->dh - s->pt;                   \
                        if (r < 0 || r >= s->h) continue;                                    \
                        for (int64_t kx = 0; kx < s->kw; ++kx) {                             \
                            const int64_t c = ox * s->sw + kx * s->dw - s->pl;               \
                            if (c < 0 || c >= s->w) continue;                                \
                            const T v = x[r * s->w + c];                                     \
                            if (at < 0 || v > best || (v != v && best == best)) {            \
                                best = v;                                                    \
                                at = j->column_major ? r + c * s->h : r * s->w + c;          \
                            }                                                                \
                        }                                                                    \
                    }                                                                        \
                    y[oy * s->ow + ox] = best;                                               \
                    idx[oy * s->ow + ox] = at < 0 ? -1 : p * s->h * s->w + at;               \
                }                                                                            \
        }                                                                                    \
    }

ARGMAX_PLANES(f32, f32)
ARGMAX_PLANES(f64, f64)

static void argmax_planes(void *ctx, int64_t begin, int64_t end) {
    const struct argmax_job *j = ctx;
    if (j->dtype == RELVM_FLOAT32)
        argmax_planes_f32(j, begin, end);
    else
        argmax_planes_f64(j, begin, end);
}

RELVM_EXPORT int relvm_max_pool2d_argmax(int dtype, const struct relvm_pool2d_shape *s,
                                         int column_major, const void *x, void *y,
                                         int64_t *idx) {
    if (!valid_pool(dtype, s)) return RELVM_UNSUPPORTED;
    struct argmax_job j = {s, dtype, column_major, x, y, idx};
    const int64_t work = relvm_max64(1, s->oh * s->ow * s->kh * s->kw);
    relvm_parallel_for(s->planes, relvm_max64(1, RELVM_GRAIN / work), argmax_planes, &j);
    return RELVM_OK;
}

/* Where flat index f of the unpooled tensor lies in y. */
static int64_t unpool_target(int64_t f, int k, const int64_t *unpooled, const int64_t *out,
                             int64_t plane_in, int64_t plane_out) {
    int64_t rest = f % plane_in, pos = 0, stride = 1;
    for (int a = k - 1; a >= 0; --a) {
        pos += rest % unpooled[a] * stride;
        rest /= unpooled[a];
        stride *= out[a];
    }
    return f / plane_in * plane_out + pos;
}

#define UNPOOL(T)                                                                             \
    {                                                                                         \
        const T *xs = x;                                                                      \
        T *ys = y;                                                                            \
        for (int64_t i = 0; i < planes * plane_out; ++i) ys[i] = 0;                           \
        for (int64_t i = 0; i < count; ++i) {                                                 \
            if (idx[i] < 0 || idx[i] >= planes * plane_in) {                                  \
                *bad = i;                                                                     \
                return RELVM_BAD_INDEX;                                                       \
            }                                                                                 \
            ys[same ? idx[i] : unpool_target(idx[i], k, unpooled, out, plane_in, plane_out)] = \
                xs[i];                                                                        \
        }                                                                                     \
        return RELVM_OK;                                                                      \
    }

RELVM_EXPORT int relvm_max_unpool(int itemsize, int64_t count, const void *x, const int64_t *idx,
                                  int64_t planes, int k, const int64_t *unpooled,
                                  const int64_t *out, void *y, int64_t *bad) {
    if (k < 1 || k > 8 || planes < 0 || count < 0) return RELVM_UNSUPPORTED;
    int64_t plane_in = 1, plane_out = 1;
    int same = 1;
    for (int a = 0; a < k; ++a) {
        if (unpooled[a] < 0 || unpooled[a] > out[a]) return RELVM_UNSUPPORTED;
        plane_in *= unpooled[a];
        plane_out *= out[a];
        same &= unpooled[a] == out[a];
    }
    switch (itemsize) {
    case 1: UNPOOL(uint8_t)
    case 2: UNPOOL(uint16_t)
    case 4: UNPOOL(uint32_t)
    case 8: UNPOOL(uint64_t)
    default: return RELVM_UNSUPPORTED;
    }
}
