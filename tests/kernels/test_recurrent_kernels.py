"""The C nn.lstm, nn.gru and nn.rnn against the references (ONNX semantics)."""

import numpy as np
import pytest

TOL = dict(rtol=1e-4, atol=1e-5)


def _inputs(rand, op, seq, batch, width, hidden, dirs, lens=None, broadcast_state=False):
    g = {"nn.lstm": 4, "nn.gru": 3, "nn.rnn": 1}[op]
    ins = [rand((seq, batch, width)), rand((dirs, g * hidden, width), "float32", -0.5, 0.5),
           rand((dirs, g * hidden, hidden), "float32", -0.5, 0.5),
           rand((dirs, 2 * g * hidden), "float32", -0.5, 0.5),
           np.array(lens if lens is not None else [], np.int32)]
    sb = 1 if broadcast_state else batch
    ins.append(rand((dirs, sb, hidden)))
    if op == "nn.lstm":
        ins += [rand((dirs, sb, hidden)), rand((dirs, 3 * hidden), "float32", -0.5, 0.5)]
    return ins


@pytest.mark.parametrize("op", ["nn.lstm", "nn.gru", "nn.rnn"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("seq,batch,width,hidden,lens", [
    (5, 3, 4, 6, None), (1, 1, 1, 1, None), (7, 4, 3, 5, [7, 3, 0, 5]), (0, 2, 3, 4, None),
    (6, 2, 8, 16, [2, 6])], ids=str)
def test_recurrent(check, rand, op, direction, seq, batch, width, hidden, lens):
    dirs = 2 if direction == "bidirectional" else 1
    ins = _inputs(rand, op, seq, batch, width, hidden, dirs, lens)
    check(op, {"hidden_size": hidden, "direction": direction}, ins, **TOL)


@pytest.mark.parametrize("op", ["nn.lstm", "nn.gru", "nn.rnn"])
def test_recurrent_options(check, rand, op):
    ins = _inputs(rand, op, 4, 3, 5, 6, 2, broadcast_state=True)
    acts = {"nn.lstm": ["hardsigmoid", "softsign", "elu", "sigmoid", "scaledtanh", "affine"],
            "nn.gru": ["hardsigmoid", "softplus", "leakyrelu", "thresholdedrelu"],
            "nn.rnn": ["relu", "scaledtanh"]}[op]
    attrs = {"hidden_size": 6, "direction": "bidirectional", "clip": 0.7, "activations": acts,
             "activation_alpha": [0.3] * len(acts), "activation_beta": [0.4] * len(acts)}
    if op != "nn.rnn":
        attrs["input_forget" if op == "nn.lstm" else "linear_before_reset"] = True
    check(op, attrs, ins, **TOL)
    check(op, {"hidden_size": 6, "direction": "bidirectional", "activations": acts}, ins, **TOL)


def test_gru_linear_before_reset_both_ways(check, rand):
    ins = _inputs(rand, "nn.gru", 5, 2, 3, 4, 1)
    for lbr in (False, True):
        check("nn.gru", {"hidden_size": 4, "linear_before_reset": lbr}, ins, **TOL)


@pytest.mark.parametrize("lbr", [False, True])
def test_gru_weights_packed_by_the_call_stay_inside_scratch(check, rand, lbr):
    """Weights that are not the VM's constants are packed into the call's scratch: a GRU's R_h
    is packed alone too, with or without linear_before_reset, and its room must be carved for
    it (it was not with linear_before_reset: the packing wrote past the scratch; the sanitizer
    stage poisons scratch past each request, so this reports there)."""
    ins = _inputs(rand, "nn.gru", 5, 3, 4, 6, 1, lens=[5, 2, 4])
    check("nn.gru", {"hidden_size": 6, "linear_before_reset": lbr}, ins, **TOL)


def test_sequence_lens_out_of_range_is_an_error(c_kernel, rand):
    ins = _inputs(rand, "nn.gru", 3, 2, 3, 4, 1, lens=[4, 1])
    kernel = c_kernel("nn.gru", {"hidden_size": 4}, [a.dtype.name for a in ins],
                      ["float32", "float32"])
    with pytest.raises(ValueError, match="must lie in"):
        kernel(*ins, np.empty((3, 1, 2, 4), np.float32), np.empty((1, 2, 4), np.float32))


@pytest.mark.parametrize("op,lbr", [("nn.lstm", False), ("nn.gru", False), ("nn.gru", True),
                                    ("nn.rnn", False)])
@pytest.mark.parametrize("nthreads", [1, 2, 3])
def test_large_batches_run_a_chunk_of_rows_per_thread(check, rand, op, lbr, nthreads):
    """On several threads a batch of 16 rows or more runs each step as a chunk of rows per
    thread (its product, its gates, its second product for a GRU without linear_before_reset):
    chunks of uneven size, sequences ending at different steps, both directions."""
    import relvm

    before = relvm.get_num_threads()
    relvm.set_num_threads(nthreads)
    try:
        for batch in (16, 37):
            lens = [(7 * i) % 9 + 1 for i in range(batch)]
            ins = _inputs(rand, op, 9, batch, 5, 12, 2, lens)
            attrs = {"hidden_size": 12, "direction": "bidirectional"}
            if op == "nn.gru":
                attrs["linear_before_reset"] = lbr
            else:
                attrs["clip"] = 2.5
            check(op, attrs, ins, **TOL)
    finally:
        relvm.set_num_threads(before)


def test_rnn_weights_packed_by_the_call(check, rand):
    """A simple RNN whose weights are not the VM's constants packs them per call (one gate)."""
    ins = _inputs(rand, "nn.rnn", 6, 3, 4, 5, 2, lens=[6, 1, 3])
    check("nn.rnn", {"hidden_size": 5, "direction": "bidirectional"}, ins, **TOL)
