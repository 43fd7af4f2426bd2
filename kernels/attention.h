/* The parts of attention around its two products (which run on relvm_gemm): the masked,
 * capped softmax of the scores, and rotary position embeddings. */
#ifndef RELVM_ATTENTION_H
#define RELVM_ATTENTION_H
#include <stdint.h>

/* Scores are (batch, heads, q, kv), contiguous. Key j is masked for query i of batch b when
 * the bias says so (-inf), when j >= positions[b][1] (the valid keys), or by the frame of
 * d = i + positions[b][0] - j (the query's position minus the key's): causal masks d < 0, a
 * left window d > left, a right window -d > right (each off when negative). */
struct relvm_attention_shape {
    int64_t batch, heads, q, kv;
    /* bias strides (elements) per batch, head and query (0 where broadcast); its rows hold
     * bias_len keys, the keys past them masked; bias_len -1: one value per row (no key axis);
     * no bias at all: has_bias 0 */
    int64_t bias_batch, bias_head, bias_row, bias_len;
    int64_t positions_batch; /* 2 when positions has a row per batch, 0 when one for all */
    int64_t left, right;
    int has_bias, causal, logits;
    double scale;   /* the scores are multiplied by it first */
    double softcap; /* > 0: scores become softcap * tanh(scores / softcap) before the bias */
};

/* y = softmax(capped scaled scores + bias) along kv, a row with every key masked all zeros; with
 * logits, y = capped scaled scores + bias (masked keys -inf) instead. */
int relvm_attention_softmax(int dtype, const struct relvm_attention_shape *s, const void *scores,
                            const void *bias, const int64_t *positions, void *y);

/* Rotary embedding of x (batch, seq, heads, head) in any order of the middle dims, given by
 * element strides (the head dim contiguous): the first rotary elements of each head vector are
 * rotated as rotary / 2 pairs -- (k, k + rotary / 2), or (2k, 2k + 1) when interleaved -- by the
 * angle whose cos and sin are cos[b][s][k], sin[b][s][k] ((cos_batch 0: one table for all);
 * the rest is copied. */
struct relvm_rotary_shape {
    int64_t batch, seq, heads, head, rotary;
    int64_t stride_batch, stride_seq, stride_head;
    int64_t cos_batch;
    int interleaved;
};

int relvm_rotary_embedding(int dtype, const struct relvm_rotary_shape *s, const void *x,
                           const void *cos, const void *sin, void *y);
#endif
