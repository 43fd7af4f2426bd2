/* LSTM, GRU and the simple RNN on relvm's GEMM. The input projection of every step is one product up front,
 * with the biases that only add (all of them but a GRU's recurrent hidden bias under
 * linear_before_reset) applied in its epilogue; each step then multiplies the hidden states of
 * the whole batch by the recurrent weights (one product; a GRU without linear_before_reset
 * needs a second for its hidden gate) and runs the gate math on whole rows of float32 values,
 * with the vectorizable exp and tanh of relvm_vmath.h (glibc's scalar ones made a small LSTM
 * cost more in its gates than in its products). Both weight matrices are read packed for the
 * GEMM: a constant weight is packed once by the caller, any other by each call. Working memory
 * is a per-thread buffer kept between calls. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "pgemm.h"
#include "recurrent.h"
#include "relvm_config.h"
#include "internal/scratch.h"
#include "internal/types.h"
#include "internal/vmath.h"
#include "threads.h"

/* v = act(clip(v)) over n floats: one loop per activation, so each vectorizes. */
static RELVM_VECTORIZE void activate(int64_t kind, float a, float b, int clip, float bound,
                                     float *v, int64_t n) {
    if (clip)
        for (int64_t j = 0; j < n; ++j) v[j] = v[j] < -bound ? -bound : (v[j] > bound ? bound : v[j]);
    switch (kind) {
    case RELVM_ACT_SIGMOID:
        for (int64_t j = 0; j < n; ++j) v[j] = vm_sigmoidf(v[j]);
        break;
    case RELVM_ACT_TANH:
        for (int64_t j = 0; j < n; ++j) v[j] = vm_tanhf(v[j]);
        break;
    case RELVM_ACT_RELU:
        for (int64_t j = 0; j < n; ++j) v[j] = v[j] < 0 ? 0.0f : v[j];
        break;
    case RELVM_ACT_AFFINE:
        for (int64_t j = 0; j < n; ++j) v[j] = a * v[j] + b;
        break;
    case RELVM_ACT_LEAKYRELU:
        for (int64_t j = 0; j < n; ++j) v[j] = v[j] >= 0 ? v[j] : a * v[j];
        break;
    case RELVM_ACT_THRESHOLDEDRELU:
        for (int64_t j = 0; j < n; ++j) v[j] = v[j] > a ? v[j] : 0.0f;
        break;
    case RELVM_ACT_SCALEDTANH:
        for (int64_t j = 0; j < n; ++j) v[j] = a * vm_tanhf(b * v[j]);
        break;
    case RELVM_ACT_HARDSIGMOID: /* NaN stays NaN, as in np.clip */
        for (int64_t j = 0; j < n; ++j) {
            const float t = a * v[j] + b;
            v[j] = t < 0 ? 0.0f : (t > 1 ? 1.0f : t);
        }
        break;
    case RELVM_ACT_ELU:
        for (int64_t j = 0; j < n; ++j) v[j] = v[j] >= 0 ? v[j] : a * (vm_expf(v[j]) - 1.0f);
        break;
    case RELVM_ACT_SOFTSIGN:
        for (int64_t j = 0; j < n; ++j) v[j] = v[j] / (1.0f + fabsf(v[j]));
        break;
    default: /* softplus, as log1p(exp(x)): exact where exp(x) overflows float32 too */
        for (int64_t j = 0; j < n; ++j) v[j] = (float)log1p(exp((double)v[j]));
        break;
    }
}

/* The cell's number of gates G: each direction's weights have G*H rows. */
static inline int64_t gates_of(const struct relvm_rnn *s) {
    return s->cell == RELVM_CELL_LSTM ? 4 : (s->cell == RELVM_CELL_GRU ? 3 : 1);
}

/* Whether s is a GRU (whose hidden gate needs the reset gate first). */
static inline int is_gru(const struct relvm_rnn *s) { return s->cell == RELVM_CELL_GRU; }

/* Gate group `which` (0: f, 1: g, 2: LSTM's h) of s applied to v; h is not clipped. */
static void gate(const struct relvm_rnn *s, int which, float *v, int64_t n) {
    activate(s->act[which], (float)s->alpha[which], (float)s->beta[which],
             which < 2 && s->has_clip, (float)s->clip, v, n);
}

/* The working memory of one direction, carved from one per-thread buffer (64-byte aligned
 * parts: the GEMM's packed operands need it). */
struct rnn_state {
    float *xw;      /* (seq * batch, G*H): x W^T + the biases that add */
    float *rec;     /* (batch, G*H): h R^T for the current step */
    float *h, *c;   /* (batch, H) states */
    float *rh;      /* GRU: (batch, H) reset * h, then its product with R_h */
    float *g;       /* (G*H) one row's gate values, one such row per row chunk */
    float *bias;    /* (G*H) the projection's bias */
    float *w_pack;  /* W packed for the GEMM, when the caller gave none */
    float *r_pack;  /* R likewise */
    float *rh_pack; /* GRU without linear_before_reset: R_h alone */
};

static size_t part(int64_t floats) { return ((size_t)floats + 15) / 16 * 16; }

/* Batch rows a thread's share of a step should have at least: with fewer, one product over
 * every row, split by panels of R, is faster than each thread reading all of R for its rows. */
#define RNN_ROWS_PER_THREAD 8

/* Row chunks each step runs on: one, or (several threads, a large batch) one per thread, each
 * its own product and gate math, so the gates do not run on one thread while the others wait. */
static int64_t row_chunks(const struct relvm_rnn *s) {
    const int64_t threads = relvm_threads_get();
    if (threads < 2 || s->batch < 2 * RNN_ROWS_PER_THREAD) return 1;
    return relvm_min64(threads, s->batch / RNN_ROWS_PER_THREAD);
}

static int carve(struct rnn_state *m, const struct relvm_rnn *s, int64_t gates, int pack_w,
                 int pack_r, int64_t chunks) {
    const int64_t H = s->hidden, GH = gates * H, bh = s->batch * H;
    const int second = is_gru(s) && !s->linear_before_reset;
    /* The packings as relvm_rnn_pack writes them (a GRU's R_h alone too, used or not). */
    int64_t w_floats, r_floats;
    relvm_rnn_packed_sizes(gates, s->input, H, &w_floats, &r_floats);
    const size_t sizes[9] = {
        part(s->seq * s->batch * GH), part(s->batch * GH), part(bh), part(bh), part(bh),
        (size_t)chunks * part(GH), part(GH), part(pack_w ? w_floats : 0),
        part(pack_r ? r_floats : 0)};
    size_t total = 0;
    for (int i = 0; i < 9; ++i) total += sizes[i];
    float *p = relvm_scratch_floats(total);
    if (!p) return RELVM_NO_MEMORY;
    float **parts[9] = {&m->xw, &m->rec, &m->h, &m->c, &m->rh, &m->g, &m->bias, &m->w_pack,
                        &m->r_pack};
    for (int i = 0; i < 9; ++i) {
        *parts[i] = p;
        p += sizes[i];
    }
    m->rh_pack = second && pack_r ? m->r_pack + relvm_pgemm_packed_size(H, GH) : NULL;
    return RELVM_OK;
}

/* Which step of sequence bi runs at loop step t (-1: none, the sequence is over). */
static inline int64_t step_of(const struct relvm_rnn *s, const int64_t *lens, int64_t bi,
                              int64_t t) {
    if (lens[bi] <= t) return -1;
    return s->reverse ? lens[bi] - 1 - t : t;
}

/* One LSTM row: gates i, o, f, c in g (projections and recurrent products, biased). */
static RELVM_VECTORIZE void lstm_row(const struct relvm_rnn *s, const float *xg,
                                     const float *rg, const float *p, float *g, float *h,
                                     float *c) {
    const int64_t H = s->hidden;
    float *in = g, *out = g + H, *forget = g + 2 * H, *cand = g + 3 * H;
    for (int64_t j = 0; j < 4 * H; ++j) g[j] = xg[j] + rg[j];
    for (int64_t j = 0; j < H; ++j) {
        in[j] += p[j] * c[j];
        forget[j] += p[2 * H + j] * c[j];
    }
    gate(s, 0, in, H);
    if (s->input_forget)
        for (int64_t j = 0; j < H; ++j) forget[j] = 1.0f - in[j];
    else
        gate(s, 0, forget, H);
    gate(s, 1, cand, H);
    for (int64_t j = 0; j < H; ++j) {
        c[j] = forget[j] * c[j] + in[j] * cand[j];
        out[j] += p[H + j] * c[j];
        cand[j] = c[j]; /* h = o * act_h(c) */
    }
    gate(s, 0, out, H);
    gate(s, 2, cand, H);
    for (int64_t j = 0; j < H; ++j) h[j] = out[j] * cand[j];
}

/* One simple RNN row: h = f(clip(projection + recurrent product)), biases in the projection. */
static RELVM_VECTORIZE void rnn_row(const struct relvm_rnn *s, const float *xg, const float *rg,
                                    float *h) {
    const int64_t H = s->hidden;
    for (int64_t j = 0; j < H; ++j) h[j] = xg[j] + rg[j];
    gate(s, 0, h, H);
}

/* GRU's first pass: z and r into g; with linear_before_reset also the new h (rb_h: the
 * recurrent hidden bias, which r multiplies). Otherwise leaves reset * h in rh for the
 * second product. */
static RELVM_VECTORIZE void gru_first(const struct relvm_rnn *s, const float *xg,
                                      const float *rg, const float *rb_h, float *g, float *h,
                                      float *rh) {
    const int64_t H = s->hidden;
    float *z = g, *reset = g + H, *cand = g + 2 * H;
    for (int64_t j = 0; j < 2 * H; ++j) g[j] = xg[j] + rg[j];
    gate(s, 0, g, 2 * H);
    if (s->linear_before_reset) {
        for (int64_t j = 0; j < H; ++j) cand[j] = xg[2 * H + j] + reset[j] * (rg[2 * H + j] + rb_h[j]);
        gate(s, 1, cand, H);
        for (int64_t j = 0; j < H; ++j) h[j] = (1.0f - z[j]) * cand[j] + z[j] * h[j];
    } else {
        for (int64_t j = 0; j < H; ++j) rh[j] = reset[j] * h[j];
    }
}

static RELVM_VECTORIZE void gru_second(const struct relvm_rnn *s, const float *xg,
                                       const float *rhr, float *g, float *h) {
    const int64_t H = s->hidden;
    const float *z = g;
    float *cand = g + 2 * H;
    for (int64_t j = 0; j < H; ++j) cand[j] = xg[2 * H + j] + rhr[j];
    gate(s, 1, cand, H);
    for (int64_t j = 0; j < H; ++j) h[j] = (1.0f - z[j]) * cand[j] + z[j] * h[j];
}

static void start_states(const struct relvm_rnn *s, struct rnn_state *m, const float *h0,
                         const float *c0) {
    const int64_t H = s->hidden;
    for (int64_t bi = 0; bi < s->batch; ++bi) {
        memcpy(m->h + bi * H, h0 + bi * s->h0_stride, (size_t)H * sizeof(float));
        if (c0) memcpy(m->c + bi * H, c0 + bi * s->c0_stride, (size_t)H * sizeof(float));
    }
}

/* The z and r rows of a GRU's GEMM need only the first 2H columns: a GRU step multiplies by
 * all of R when r applies after the product (linear_before_reset), else by R_z and R_r. */
static int64_t first_product_width(const struct relvm_rnn *s, int64_t GH) {
    return is_gru(s) && !s->linear_before_reset ? 2 * s->hidden : GH;
}

/* What one step shares with the threads that run its row chunks. */
struct rnn_step {
    const struct relvm_rnn *s;
    struct rnn_state *m;
    int64_t t, chunks;
    const float *r_pack, *rh_pack, *rb_h, *peephole;
    const int64_t *lens;
    float *y;
};

/* Step t for batch rows [b0, b1) of every sequence still running, with gate scratch g. Rows
 * read and write only their own rows of the state, so chunks of rows run at once. */
static void step_rows(const struct rnn_step *st, int64_t b0, int64_t b1, float *g) {
    const struct relvm_rnn *s = st->s;
    struct rnn_state *m = st->m;
    const int64_t H = s->hidden, GH = gates_of(s) * H, rows = b1 - b0;
    relvm_pgemm(rows, first_product_width(s, GH), H, m->h + b0 * H, H, st->r_pack,
                m->rec + b0 * GH, GH, NULL, 0, NULL, NULL, NULL);
    for (int64_t bi = b0; bi < b1; ++bi) {
        const int64_t at = step_of(s, st->lens, bi, st->t);
        if (at < 0) continue;
        const float *xg = m->xw + (at * s->batch + bi) * GH, *rg = m->rec + bi * GH;
        if (s->cell == RELVM_CELL_LSTM)
            lstm_row(s, xg, rg, st->peephole, g, m->h + bi * H, m->c + bi * H);
        else if (s->cell == RELVM_CELL_RNN)
            rnn_row(s, xg, rg, m->h + bi * H);
        else
            gru_first(s, xg, rg, st->rb_h, g, m->h + bi * H, m->rh + bi * H);
        if (is_gru(s) && !s->linear_before_reset) /* keep z for the second pass, in columns */
            memcpy(m->rec + bi * GH + 2 * H, g, (size_t)H * sizeof(float)); /* 2H.. of rec */
    }
    if (is_gru(s) && !s->linear_before_reset) {
        float *rhr = m->rec; /* (reset * h) R_h^T into columns 0..H of rec's rows */
        relvm_pgemm(rows, H, H, m->rh + b0 * H, H, st->rh_pack, rhr + b0 * GH, GH, NULL, 0,
                    NULL, NULL, NULL);
        for (int64_t bi = b0; bi < b1; ++bi) {
            const int64_t at = step_of(s, st->lens, bi, st->t);
            if (at < 0) continue;
            memcpy(g, m->rec + bi * GH + 2 * H, (size_t)H * sizeof(float)); /* z */
            gru_second(s, m->xw + (at * s->batch + bi) * GH, rhr + bi * GH, g, m->h + bi * H);
        }
    }
    for (int64_t bi = b0; bi < b1; ++bi) {
        const int64_t at = step_of(s, st->lens, bi, st->t);
        if (at < 0) continue;
        memcpy(st->y + ((at * s->dirs + s->dir) * s->batch + bi) * H, m->h + bi * H,
               (size_t)H * sizeof(float));
    }
}

static void step_chunks(void *ctx, int64_t begin, int64_t end) {
    const struct rnn_step *st = ctx;
    const int64_t batch = st->s->batch, gh = gates_of(st->s) * st->s->hidden;
    for (int64_t c = begin; c < end; ++c)
        step_rows(st, batch * c / st->chunks, batch * (c + 1) / st->chunks,
                  st->m->g + c * (int64_t)part(gh));
}

/* One step t for every sequence still running: one product over the batch (its panels split
 * among the threads) and the gate math row by row; or, on several threads with a large batch,
 * a chunk of rows per thread, each with its own product (on that thread alone) and gates. */
static void run_step(struct rnn_step *st, int64_t t) {
    st->t = t;
    if (st->chunks == 1) {
        step_rows(st, 0, st->s->batch, st->m->g);
        return;
    }
    relvm_parallel_for(st->chunks, 1, step_chunks, st);
}

static int valid_rnn(const struct relvm_rnn *s) {
    if (s->seq < 0 || s->batch < 0 || s->input < 0 || s->hidden < 1 || s->dirs < 1 ||
        s->dir < 0 || s->dir >= s->dirs || s->cell < RELVM_CELL_LSTM || s->cell > RELVM_CELL_RNN)
        return 0;
    for (int k = 0; k < 3; ++k)
        if (s->act[k] < RELVM_ACT_SIGMOID || s->act[k] > RELVM_ACT_SOFTPLUS) return 0;
    return 1;
}

RELVM_EXPORT int64_t relvm_rnn_packed_sizes(int64_t gates, int64_t input, int64_t hidden,
                                            int64_t *w_floats, int64_t *r_floats) {
    *w_floats = relvm_pgemm_packed_size(input, gates * hidden);
    *r_floats = relvm_pgemm_packed_size(hidden, gates * hidden) +
                (gates == 3 ? relvm_pgemm_packed_size(hidden, hidden) : 0);
    return *w_floats + *r_floats;
}

RELVM_EXPORT void relvm_rnn_pack(int64_t gates, int64_t input, int64_t hidden, const float *w,
                                 const float *r, float *w_pack, float *r_pack) {
    const int64_t GH = gates * hidden;
    if (w_pack) relvm_pgemm_pack(1, input, GH, w, w_pack);
    if (r_pack) {
        relvm_pgemm_pack(1, hidden, GH, r, r_pack);
        if (gates == 3) /* R_h alone, for a GRU's second product */
            relvm_pgemm_pack(1, hidden, hidden, r + 2 * hidden * hidden,
                             r_pack + relvm_pgemm_packed_size(hidden, GH));
    }
}

RELVM_EXPORT int relvm_rnn_direction(const struct relvm_rnn *s, const float *x, const float *w,
                                     const float *r, const float *b, const int64_t *lens,
                                     const float *h0, const float *c0, const float *peephole,
                                     float *y, float *h_last, float *c_last,
                                     const float *w_packed, const float *r_packed) {
    if (!valid_rnn(s) || (s->cell == RELVM_CELL_LSTM && (!c0 || !peephole || !c_last)))
        return RELVM_UNSUPPORTED;
    for (int64_t bi = 0; bi < s->batch; ++bi)
        if (lens[bi] < 0 || lens[bi] > s->seq) return RELVM_BAD_INDEX;
    const int64_t H = s->hidden, G = gates_of(s), GH = G * H, chunks = row_chunks(s);
    struct rnn_state m;
    if (carve(&m, s, G, !w_packed, !r_packed, chunks) != RELVM_OK) return RELVM_NO_MEMORY;
    if (!w_packed || !r_packed)
        relvm_rnn_pack(G, s->input, H, w, r, w_packed ? NULL : m.w_pack,
                       r_packed ? NULL : m.r_pack);
    const float *wp = w_packed ? w_packed : m.w_pack, *rp = r_packed ? r_packed : m.r_pack;
    const float *rhp = is_gru(s) ? rp + relvm_pgemm_packed_size(H, GH) : NULL;
    /* The projection's bias: input biases, and the recurrent ones that only add. */
    const int lbr = is_gru(s) && s->linear_before_reset;
    for (int64_t j = 0; j < GH; ++j)
        m.bias[j] = b[j] + (lbr && j >= 2 * H ? 0.0f : b[GH + j]);
    for (int64_t t = 0; t < s->seq; ++t) /* rows no step reaches stay 0 */
        for (int64_t bi = 0; bi < s->batch; ++bi)
            memset(y + ((t * s->dirs + s->dir) * s->batch + bi) * H, 0, (size_t)H * sizeof(float));
    if (s->seq * s->batch > 0)
        relvm_pgemm(s->seq * s->batch, GH, s->input, x, s->input, wp, m.xw, GH, m.bias, 0,
                    NULL, NULL, NULL);
    start_states(s, &m, h0, c0);
    struct rnn_step st = {s, &m, 0, chunks, rp, rhp, is_gru(s) ? b + GH + 2 * H : NULL,
                          peephole, lens, y};
    for (int64_t t = 0; t < s->seq; ++t) run_step(&st, t);
    memcpy(h_last, m.h, (size_t)(s->batch * H) * sizeof(float));
    if (c_last) memcpy(c_last, m.c, (size_t)(s->batch * H) * sizeof(float));
    return RELVM_OK;
}
