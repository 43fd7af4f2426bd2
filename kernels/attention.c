/* Attention's softmax and rotary embeddings: one pass over the data each, on the thread pool.
 *
 * The softmax takes the raw scores of Q K^T and applies, per element and in one walk, the
 * scale, the softcap, the bias (a mask, broadcast over batch, heads and queries) and the frame mask
 * (causal, sliding windows, valid keys) that would otherwise each be a tensor of
 * (batch, heads, q, kv) written and read again. Sums are float64, as the references. */
#include <math.h>
#include "relvm_config.h"
#include "internal/types.h"
#include "internal/vmath.h"
#include "attention.h"
#include "threads.h"

struct softmax_job {
    const struct relvm_attention_shape *s;
    const char *scores, *bias;
    const int64_t *positions;
    char *y;
};

/* The bias of key j before the scores: -inf where any mask says so. */
static inline double key_bias(const struct relvm_attention_shape *s, const void *bias_row,
                              int is_f32, int64_t j, int64_t frame, int64_t valid) {
    const int64_t d = frame - j;
    if (j >= valid || (s->causal && d < 0) || (s->left >= 0 && d > s->left)
        || (s->right >= 0 && -d > s->right))
        return -INFINITY;
    if (!s->has_bias) return 0.0;
    const int64_t at = s->bias_len < 0 ? 0 : j;
    if (s->bias_len >= 0 && j >= s->bias_len) return -INFINITY;
    return is_f32 ? (double)((const f32 *)bias_row)[at] : ((const f64 *)bias_row)[at];
}

#define ATTENTION_SOFTMAX(S, T, EXP)                                                          \
    /* y = exp(y - m) and its sum, in vmath.h's lanes (vectorizes, as softmax's row) */       \
    static RELVM_VECTORIZE double exp_sum_##S(int64_t n, T m, T *y) {                         \
        double part[VM_LANES] = {0}, sum = 0.0;                                               \
        int64_t j = 0;                                                                        \
        for (; j + VM_LANES <= n; j += VM_LANES)                                              \
            for (int l = 0; l < VM_LANES; ++l) {                                              \
                const T e = EXP(y[j + l] - m);                                                \
                y[j + l] = e;                                                                 \
                part[l] += (double)e;                                                         \
            }                                                                                 \
        for (; j < n; ++j) {                                                                  \
            y[j] = EXP(y[j] - m);                                                             \
            sum += (double)y[j];                                                              \
        }                                                                                     \
        for (int l = 0; l < VM_LANES; ++l) sum += part[l];                                    \
        return sum;                                                                           \
    }                                                                                         \
                                                                                              \
    static RELVM_VECTORIZE void times_##S(int64_t n, T scale, T *y) {                         \
        for (int64_t j = 0; j < n; ++j) y[j] *= scale;                                        \
    }                                                                                         \
                                                                                              \
    static void attention_row_##S(const struct relvm_attention_shape *s, const T *x,          \
                                  const T *bias, int64_t frame, int64_t valid, T *y) {        \
        const int64_t kv = s->kv;                                                             \
        int open = 0;                                                                         \
        T m = (T)-INFINITY;                                                                   \
        for (int64_t j = 0; j < kv; ++j) {                                                    \
            const double b = key_bias(s, bias, sizeof(T) == 4, j, frame, valid);              \
            double v = (double)x[j] * s->scale;                                               \
            if (s->softcap > 0) v = s->softcap * tanh(v / s->softcap);                        \
            const T t = (T)(v + b);                                                           \
            y[j] = t;                                                                         \
            open |= b != -INFINITY;                                                           \
            m = ((t > m) | (t != t)) ? t : m;                                                    \
        }                                                                                     \
        if (s->logits) return;                                                                \
        if (!open) { /* no key to attend: zeros, as ONNX says */                              \
            for (int64_t j = 0; j < kv; ++j) y[j] = (T)0;                                     \
            return;                                                                           \
        }                                                                                     \
        times_##S(kv, (T)(1.0 / exp_sum_##S(kv, m, y)), y);                                   \
    }                                                                                         \
                                                                                              \
    static void attention_range_##S(void *ctx, int64_t begin, int64_t end) {                  \
        const struct softmax_job *job = ctx;                                                  \
        const struct relvm_attention_shape *s = job->s;                                       \
        for (int64_t r = begin; r < end; ++r) {                                               \
            const int64_t i = r % s->q, h = r / s->q % s->heads, b = r / s->q / s->heads;     \
            const int64_t *pos = job->positions + b * s->positions_batch;                     \
            const T *bias = (const T *)job->bias;                                             \
            if (s->has_bias)                                                                  \
                bias += b * s->bias_batch + h * s->bias_head + i * s->bias_row;               \
            attention_row_##S(s, (const T *)job->scores + r * s->kv, bias, i + pos[0],        \
                              pos[1], (T *)job->y + r * s->kv);                               \
        }                                                                                     \
    }

ATTENTION_SOFTMAX(f32, f32, vm_expf)
ATTENTION_SOFTMAX(f64, f64, exp)

static int is_float(int dtype) { return dtype == RELVM_FLOAT32 || dtype == RELVM_FLOAT64; }

RELVM_EXPORT int relvm_attention_softmax(int dtype, const struct relvm_attention_shape *s,
                                         const void *scores, const void *bias,
                                         const int64_t *positions, void *y) {
    if (!is_float(dtype) || s->batch < 0 || s->heads < 0 || s->q < 0 || s->kv < 0
        || s->bias_len > s->kv)
        return RELVM_UNSUPPORTED;
    const int64_t rows = s->batch * s->heads * s->q;
    if (rows == 0 || s->kv == 0) return RELVM_OK;
    struct softmax_job job = {.s = s, .scores = scores, .bias = bias, .positions = positions,
                              .y = y};
    relvm_parallel_for(rows, relvm_max64(1, RELVM_GRAIN_HEAVY / s->kv),
                       dtype == RELVM_FLOAT32 ? attention_range_f32 : attention_range_f64, &job);
    return RELVM_OK;
}

/* --- rotary embedding ------------------------------------------------------------------------ */

struct rotary_job {
    const struct relvm_rotary_shape *s;
    const char *x, *cos, *sin;
    char *y;
};

#define ROTARY(S, T)                                                                          \
    static RELVM_VECTORIZE void rotary_vector_##S(const struct relvm_rotary_shape *s,         \
                                                  const T *x, const T *c, const T *sn, T *y) {\
        const int64_t half = s->rotary / 2;                                                   \
        const int64_t step = s->interleaved ? 2 : 1, other = s->interleaved ? 1 : half;       \
        for (int64_t k = 0; k < half; ++k) {                                                  \
            const T a = x[k * step], b = x[k * step + other];                                 \
            y[k * step] = c[k] * a - sn[k] * b;                                               \
            y[k * step + other] = sn[k] * a + c[k] * b;                                       \
        }                                                                                     \
        for (int64_t k = s->rotary; k < s->head; ++k) y[k] = x[k];                            \
    }                                                                                         \
                                                                                              \
    static void rotary_range_##S(void *ctx, int64_t begin, int64_t end) {                     \
        const struct rotary_job *job = ctx;                                                   \
        const struct relvm_rotary_shape *s = job->s;                                          \
        const int64_t half = s->rotary / 2;                                                   \
        for (int64_t r = begin; r < end; ++r) { /* r = (b, seq, head) */                      \
            const int64_t h = r % s->heads, q = r / s->heads % s->seq, b = r / s->heads / s->seq;\
            const int64_t at = b * s->stride_batch + q * s->stride_seq + h * s->stride_head;  \
            const int64_t table = (b * s->cos_batch + q) * half;                              \
            rotary_vector_##S(s, (const T *)job->x + at, (const T *)job->cos + table,         \
                              (const T *)job->sin + table, (T *)job->y + at);                 \
        }                                                                                     \
    }

ROTARY(f32, f32)
ROTARY(f64, f64)

RELVM_EXPORT int relvm_rotary_embedding(int dtype, const struct relvm_rotary_shape *s,
                                        const void *x, const void *cos, const void *sin, void *y) {
    if (!is_float(dtype) || s->batch < 0 || s->seq < 0 || s->heads < 0 || s->rotary < 0
        || s->rotary % 2 || s->rotary > s->head)
        return RELVM_UNSUPPORTED;
    const int64_t vectors = s->batch * s->seq * s->heads;
    if (vectors == 0 || s->head == 0) return RELVM_OK;
    struct rotary_job job = {.s = s, .x = x, .cos = cos, .sin = sin, .y = y};
    relvm_parallel_for(vectors, relvm_max64(1, RELVM_GRAIN / s->head),
                       dtype == RELVM_FLOAT32 ? rotary_range_f32 : rotary_range_f64, &job);
    return RELVM_OK;
}
