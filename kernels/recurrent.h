/* nn.lstm, nn.gru and nn.rnn over a whole sequence, with ONNX's semantics (relvm/ops/recurrent.py). */
#ifndef RELVM_RECURRENT_H
#define RELVM_RECURRENT_H
#include <stdint.h>

/* The gate activations ONNX names, with their alpha/beta parameters. */
enum relvm_activation {
    RELVM_ACT_SIGMOID, RELVM_ACT_TANH, RELVM_ACT_RELU, RELVM_ACT_AFFINE, RELVM_ACT_LEAKYRELU,
    RELVM_ACT_THRESHOLDEDRELU, RELVM_ACT_SCALEDTANH, RELVM_ACT_HARDSIGMOID, RELVM_ACT_ELU,
    RELVM_ACT_SOFTSIGN, RELVM_ACT_SOFTPLUS
};

/* The cells: LSTM (G = 4 gates i, o, f, c), GRU (G = 3: z, r, h), the simple RNN (G = 1). */
enum relvm_cell { RELVM_CELL_LSTM, RELVM_CELL_GRU, RELVM_CELL_RNN };

/* One direction of a recurrent layer. x is (seq, batch, input); this direction's weights are
 * w (G*H, input), r (G*H, H), b (2*G*H) with G the cell's number of gates.
 * Initial states are (batch, H) rows h0_stride apart (0: one row for the whole batch). Y is
 * (seq, dirs, batch, H); this direction writes Y[:, dir]. */
struct relvm_rnn {
    int64_t seq, batch, input, hidden, dirs, dir;
    int64_t cell, reverse, input_forget, linear_before_reset;
    int64_t has_clip;
    double clip;
    int64_t act[3]; /* LSTM f, g, h; GRU f, g; RNN f */
    double alpha[3], beta[3];
    int64_t h0_stride, c0_stride;
};

/* Floats the packed forms of one direction's weights take (w_floats for W, r_floats for R);
 * returns their sum. */
int64_t relvm_rnn_packed_sizes(int64_t gates, int64_t input, int64_t hidden, int64_t *w_floats,
                               int64_t *r_floats);

/* Pack one direction's w (G*H, input) and r (G*H, H) as relvm_rnn_direction reads them, into
 * w_pack and r_pack (64-byte aligned, sizes from relvm_rnn_packed_sizes; NULL: skip). */
void relvm_rnn_pack(int64_t gates, int64_t input, int64_t hidden, const float *w, const float *r,
                    float *w_pack, float *r_pack);

/* Run one direction: sequence b runs lens[b] steps (backwards with reverse); Y rows past its
 * length are 0 and its last states are those after its last step. c0, peephole (3*H: i, o, f)
 * and c_last are LSTM's; NULL for the others. float32 throughout. w_packed / r_packed are w and r as
 * relvm_rnn_pack packs them (constant weights, packed once), or NULL to pack them here. */
int relvm_rnn_direction(const struct relvm_rnn *s, const float *x, const float *w,
                        const float *r, const float *b, const int64_t *lens, const float *h0,
                        const float *c0, const float *peephole, float *y, float *h_last,
                        float *c_last, const float *w_packed, const float *r_packed);
#endif
