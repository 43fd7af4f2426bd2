"""The IR ops added for ONNX import: nn.conv2d_transpose, image.resize2d, nn.lstm, nn.gru, nn.rnn.

Their type relations over symbolic dims, their text round trip and type errors, and the
conventions of the recurrent ops' references. ``test_new_ops_vs_ort.py`` checks the references
against ONNX Runtime.
"""

from __future__ import annotations


import numpy as np
import pytest

import relvm
from relvm.testing.reference import evaluate

TYPES = [
    ("def @main(%x: Tensor[(n, 4, h, w), float32], %w: Tensor[(4, 3, 3, 3), float32]) {"
     " nn.conv2d_transpose(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1], output_padding=[1, 1],"
     " groups=2) }", "Tensor[(n, 6, h*2, w*2), float32]"),
    ("def @main(%x: Tensor[(n, 3, h, w), float32]) { image.resize2d(%x, scale=[2.0, 0.5]) }",
     "Tensor[(n, 3, h*2, w/2), float32]"),
    ("def @main(%x: Tensor[(n, 3, h, w), float32]) { image.resize2d(%x, size=[7, 9],"
     " method=\"cubic\", coordinate_transformation_mode=\"align_corners\") }",
     "Tensor[(n, 3, 7, 9), float32]"),
    ("def @main(%x: Tensor[(s, b, 5), float32], %w: Tensor[(2, 12, 5), float32],"
     " %r: Tensor[(2, 12, 3), float32], %bias: Tensor[(2, 24), float32],"
     " %lens: Tensor[(0), int32], %h: Tensor[(2, 1, 3), float32], %c: Tensor[(2, b, 3), float32],"
     " %p: Tensor[(2, 9), float32]) { nn.lstm(%x, %w, %r, %bias, %lens, %h, %c, %p,"
     " hidden_size=3, direction=\"bidirectional\", activations=[\"sigmoid\", \"tanh\", \"relu\","
     " \"hardsigmoid\", \"tanh\", \"tanh\"], clip=2.5) }",
     "(Tensor[(s, 2, b, 3), float32], Tensor[(2, b, 3), float32], Tensor[(2, b, 3), float32])"),
    ("def @main(%x: Tensor[(s, b, 5), float32], %w: Tensor[(1, 9, 5), float32],"
     " %r: Tensor[(1, 9, 3), float32], %bias: Tensor[(1, 18), float32],"
     " %lens: Tensor[(b), int32], %h: Tensor[(1, b, 3), float32]) { nn.gru(%x, %w, %r, %bias,"
     " %lens, %h, hidden_size=3, linear_before_reset=True) }",
     "(Tensor[(s, 1, b, 3), float32], Tensor[(1, b, 3), float32])"),
    ("def @main(%x: Tensor[(s, b, 5), float32], %w: Tensor[(2, 3, 5), float32],"
     " %r: Tensor[(2, 3, 3), float32], %bias: Tensor[(2, 6), float32],"
     " %lens: Tensor[(0), int32], %h: Tensor[(2, 1, 3), float32]) { nn.rnn(%x, %w, %r, %bias,"
     " %lens, %h, hidden_size=3, direction=\"bidirectional\", activations=[\"relu\", \"tanh\"]) }",
     "(Tensor[(s, 2, b, 3), float32], Tensor[(2, b, 3), float32])"),
]


@pytest.mark.parametrize("text, result", TYPES)
def test_type_over_symbolic_dims_and_text_round_trip(text, result):
    mod = relvm.parse(text)
    assert str(mod["main"].checked_type.ret) == result
    assert relvm.parse(relvm.print_module(mod)) == mod


@pytest.mark.parametrize("text, message", [
    ("def @main(%x: Tensor[(1, 4, 5, 5), float32], %w: Tensor[(3, 2, 3, 3), float32]) {"
     " nn.conv2d_transpose(%x, %w) }", "input channels differ"),
    ("def @main(%x: Tensor[(1, 3, 5, 5), float32]) { image.resize2d(%x) }", "give size or scale"),
    ("def @main(%x: Tensor[(1, 3, 5, 5), float32]) { image.resize2d(%x, size=[2, 2],"
     " coordinate_transformation_mode=\"tf_crop_and_resize\") }", "needs roi"),
    ("def @main(%x: Tensor[(4, 2, 5), float32], %w: Tensor[(1, 12, 6), float32],"
     " %r: Tensor[(1, 12, 3), float32], %b: Tensor[(1, 24), float32], %l: Tensor[(0), int32],"
     " %h: Tensor[(1, 2, 3), float32], %c: Tensor[(1, 2, 3), float32],"
     " %p: Tensor[(1, 9), float32]) { nn.lstm(%x, %w, %r, %b, %l, %h, %c, %p, hidden_size=3) }",
     "weight_ih"),
    ("def @main(%x: Tensor[(4, 2, 5), float32], %w: Tensor[(1, 3, 5), float32],"
     " %r: Tensor[(1, 3, 3), float32], %b: Tensor[(1, 6), float32], %l: Tensor[(0), int32],"
     " %h: Tensor[(1, 2, 3), float32]) { nn.rnn(%x, %w, %r, %b, %l, %h, hidden_size=3,"
     " activations=[\"tanh\", \"tanh\"]) }",
     r"activations must have 1 entries \(1 per direction\)"),
])
def test_type_errors(text, message):
    with pytest.raises(relvm.RelvmTypeError, match=message):
        relvm.parse(text)


def test_lstm_reference_honours_sequence_lengths():
    rng = np.random.default_rng(0)
    text = TYPES[4][0]
    mod = relvm.parse(text)
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    args = [x] + [rng.standard_normal(s).astype(np.float32) for s in ((1, 9, 5), (1, 9, 3), (1, 18))]
    lens = np.array([4, 2, 0], np.int32)
    h0 = rng.standard_normal((1, 3, 3)).astype(np.float32)
    y, h = evaluate(mod, *args, lens, h0)
    assert not y[2:, :, 1].any() and not y[:, :, 2].any()  # past each sequence's end: zeros
    np.testing.assert_array_equal(h[0, 1], y[1, 0, 1])     # the last state is the last step's
    np.testing.assert_array_equal(h[0, 2], h0[0, 2])       # an empty sequence keeps h0
