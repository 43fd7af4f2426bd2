/* LSTM and GRU. The input projection of every step is one sgemm up front; each step then
 * multiplies the hidden states of the whole batch by the recurrent weights (one sgemm; a GRU
 * without linear_before_reset needs a second for its hidden gate) and runs the gate math in
 * float64, where the states live, as the reference computes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "blas.h"
#include "recurrent.h"
#include "relvm_config.h"

static double activate(int64_t kind, double x, double a, double b) {
    switch (kind) {
    case RELVM_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case RELVM_ACT_TANH: return tanh(x);
    case RELVM_ACT_RELU: return x < 0 ? 0.0 : x;
    case RELVM_ACT_AFFINE: return a * x + b;
    case RELVM_ACT_LEAKYRELU: return x >= 0 ? x : a * x;
    case RELVM_ACT_THRESHOLDEDRELU: return x > a ? x : 0.0;
    case RELVM_ACT_SCALEDTANH: return a * tanh(b * x);
    case RELVM_ACT_HARDSIGMOID: { /* NaN stays NaN, as in np.clip */
        const double v = a * x + b;
        return v < 0 ? 0.0 : (v > 1 ? 1.0 : v);
    }
    case RELVM_ACT_ELU: return x >= 0 ? x : a * (exp(x) - 1.0);
    case RELVM_ACT_SOFTSIGN: return x / (1.0 + fabs(x));
    default: return log1p(exp(x)); /* softplus */
    }
}

static inline double gate(const struct relvm_rnn *s, int which, double v) {
    if (s->has_clip) v = v < -s->clip ? -s->clip : (v > s->clip ? s->clip : v);
    return activate(s->act[which], v, s->alpha[which], s->beta[which]);
}

/* The working memory of one direction. */
struct rnn_state {
    float *xw;     /* (seq, batch, G*H): x W^T */
    float *rec;    /* (batch, G*H): h R^T for the current step */
    float *hf;     /* (batch, H): h as float32, the GEMM's operand */
    float *rh;     /* GRU: (batch, H) reset * h, then its product with R_h */
    double *h, *c; /* (batch, H) states */
    double *z;     /* GRU: (batch, H) update gate between the two passes */
};

static void free_state(struct rnn_state *m) {
    free(m->xw); free(m->rec); free(m->hf); free(m->rh); free(m->h); free(m->c); free(m->z);
}

static int alloc_state(struct rnn_state *m, const struct relvm_rnn *s, int64_t gates) {
    const size_t bh = (size_t)(s->batch * s->hidden) + 1;
    memset(m, 0, sizeof *m);
    m->xw = malloc(((size_t)(s->seq * s->batch * gates * s->hidden) + 1) * sizeof(float));
    m->rec = malloc(((size_t)(s->batch * gates * s->hidden) + 1) * sizeof(float));
    m->hf = malloc(bh * sizeof(float));
    m->rh = malloc(bh * sizeof(float));
    m->h = malloc(bh * sizeof(double));
    m->c = malloc(bh * sizeof(double));
    m->z = malloc(bh * sizeof(double));
    if (m->xw && m->rec && m->hf && m->rh && m->h && m->c && m->z) return RELVM_OK;
    free_state(m);
    return RELVM_NO_MEMORY;
}

/* Which step of sequence bi runs at loop step t (-1: none, the sequence is over). */
static inline int64_t step_of(const struct relvm_rnn *s, const int64_t *lens, int64_t bi,
                              int64_t t) {
    if (lens[bi] <= t) return -1;
    return s->reverse ? lens[bi] - 1 - t : t;
}

static void lstm_row(const struct relvm_rnn *s, const float *xg, const float *rg,
                     const float *b, const float *p, double *h, double *c) {
    const int64_t H = s->hidden, GH = 4 * H;
    for (int64_t j = 0; j < H; ++j) {
        double g[4];
        for (int k = 0; k < 4; ++k) /* i, o, f, c: input and recurrent products and biases */
            g[k] = (double)xg[k * H + j] + (double)rg[k * H + j] + (double)b[k * H + j] +
                   (double)b[GH + k * H + j];
        const double c_old = c[j];
        const double in = gate(s, 0, g[0] + (double)p[j] * c_old);
        const double forget =
            s->input_forget ? 1.0 - in : gate(s, 0, g[2] + (double)p[2 * H + j] * c_old);
        const double c_new = forget * c_old + in * gate(s, 1, g[3]);
        const double out = gate(s, 0, g[1] + (double)p[H + j] * c_new);
        c[j] = c_new;
        h[j] = out * activate(s->act[2], c_new, s->alpha[2], s->beta[2]);
    }
}

/* GRU's first pass: z and r; with linear_before_reset also the new h. Otherwise leaves
 * reset * h in rh for the second product. */
static void gru_first(const struct relvm_rnn *s, const float *xg, const float *rg,
                      const float *b, const double *h, double *z, float *rh, double *h_new) {
    const int64_t H = s->hidden, GH = 3 * H;
    for (int64_t j = 0; j < H; ++j) {
        z[j] = gate(s, 0, (double)xg[j] + (double)rg[j] + (double)b[j] + (double)b[GH + j]);
        const double reset = gate(s, 0, (double)xg[H + j] + (double)rg[H + j] +
                                            (double)b[H + j] + (double)b[GH + H + j]);
        if (s->linear_before_reset) {
            const double rec = (double)rg[2 * H + j] + (double)b[GH + 2 * H + j];
            const double cand =
                gate(s, 1, (double)xg[2 * H + j] + (double)b[2 * H + j] + reset * rec);
            h_new[j] = (1.0 - z[j]) * cand + z[j] * h[j];
        } else {
            rh[j] = (float)(reset * h[j]);
        }
    }
}

static void gru_second(const struct relvm_rnn *s, const float *xg, const float *rhr,
                       const float *b, const double *z, double *h) {
    const int64_t H = s->hidden, GH = 3 * H;
    for (int64_t j = 0; j < H; ++j) {
        const double cand = gate(s, 1, (double)xg[2 * H + j] + (double)b[2 * H + j] +
                                           (double)rhr[j] + (double)b[GH + 2 * H + j]);
        h[j] = (1.0 - z[j]) * cand + z[j] * h[j];
    }
}

static void start_states(const struct relvm_rnn *s, struct rnn_state *m, const float *h0,
                         const float *c0) {
    const int64_t H = s->hidden;
    for (int64_t bi = 0; bi < s->batch; ++bi)
        for (int64_t j = 0; j < H; ++j) {
            m->h[bi * H + j] = h0[bi * s->h0_stride + j];
            m->c[bi * H + j] = c0 ? c0[bi * s->c0_stride + j] : 0.0;
            m->hf[bi * H + j] = (float)m->h[bi * H + j];
        }
}

/* One step t for every sequence still running. */
static void run_step(const struct relvm_rnn *s, struct rnn_state *m, int64_t t,
                     const float *r, const float *b, const int64_t *lens, const float *peephole,
                     float *y) {
    const int64_t H = s->hidden, G = s->gru ? 3 : 4, GH = G * H;
    relvm_sgemm_batch(0, 1, 1, s->batch, GH, H, m->hf, 0, r, 0, m->rec);
    for (int64_t bi = 0; bi < s->batch; ++bi) {
        const int64_t at = step_of(s, lens, bi, t);
        if (at < 0) continue;
        const float *xg = m->xw + (at * s->batch + bi) * GH, *rg = m->rec + bi * GH;
        if (!s->gru) lstm_row(s, xg, rg, b, peephole, m->h + bi * H, m->c + bi * H);
        else gru_first(s, xg, rg, b, m->h + bi * H, m->z + bi * H, m->rh + bi * H, m->h + bi * H);
    }
    if (s->gru && !s->linear_before_reset) {
        float *rhr = m->rec; /* (batch, H): (reset * h) R_h^T, reusing the gate buffer */
        relvm_sgemm_batch(0, 1, 1, s->batch, H, H, m->rh, 0, r + 2 * H * H, 0, rhr);
        for (int64_t bi = 0; bi < s->batch; ++bi) {
            const int64_t at = step_of(s, lens, bi, t);
            if (at < 0) continue;
            gru_second(s, m->xw + (at * s->batch + bi) * GH, rhr + bi * H, b, m->z + bi * H,
                       m->h + bi * H);
        }
    }
    for (int64_t bi = 0; bi < s->batch; ++bi) {
        const int64_t at = step_of(s, lens, bi, t);
        if (at < 0) continue;
        float *row = y + ((at * s->dirs + s->dir) * s->batch + bi) * H;
        for (int64_t j = 0; j < H; ++j) row[j] = m->hf[bi * H + j] = (float)m->h[bi * H + j];
    }
}

static int valid_rnn(const struct relvm_rnn *s) {
    if (s->seq < 0 || s->batch < 0 || s->input < 0 || s->hidden < 1 || s->dirs < 1 ||
        s->dir < 0 || s->dir >= s->dirs)
        return 0;
    for (int k = 0; k < 3; ++k)
        if (s->act[k] < RELVM_ACT_SIGMOID || s->act[k] > RELVM_ACT_SOFTPLUS) return 0;
    return 1;
}

RELVM_EXPORT int relvm_rnn_direction(const struct relvm_rnn *s, const float *x, const float *w,
                                     const float *r, const float *b, const int64_t *lens,
                                     const float *h0, const float *c0, const float *peephole,
                                     float *y, float *h_last, float *c_last) {
    if (!valid_rnn(s) || (!s->gru && (!c0 || !peephole || !c_last))) return RELVM_UNSUPPORTED;
    for (int64_t bi = 0; bi < s->batch; ++bi)
        if (lens[bi] < 0 || lens[bi] > s->seq) return RELVM_BAD_INDEX;
    if (!relvm_blas_ready()) return RELVM_NO_BLAS;
    const int64_t H = s->hidden, G = s->gru ? 3 : 4;
    struct rnn_state m;
    if (alloc_state(&m, s, G) != RELVM_OK) return RELVM_NO_MEMORY;
    for (int64_t t = 0; t < s->seq; ++t) /* rows no step reaches stay 0 */
        for (int64_t bi = 0; bi < s->batch; ++bi)
            memset(y + ((t * s->dirs + s->dir) * s->batch + bi) * H, 0, (size_t)H * sizeof(float));
    if (s->seq * s->batch > 0)
        relvm_sgemm_batch(0, 1, 1, s->seq * s->batch, G * H, s->input, x, 0, w, 0, m.xw);
    start_states(s, &m, h0, c0);
    for (int64_t t = 0; t < s->seq; ++t) run_step(s, &m, t, r, b, lens, peephole, y);
    for (int64_t i = 0; i < s->batch * H; ++i) {
        h_last[i] = (float)m.h[i];
        if (c_last) c_last[i] = (float)m.c[i];
    }
    free_state(&m);
    return RELVM_OK;
}
