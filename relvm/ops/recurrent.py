"""Recurrent layers over a whole sequence: ``nn.lstm``, ``nn.gru`` and ``nn.rnn``, with ONNX's
semantics.

Layout is ONNX's ``layout=0``: data ``(seq, batch, input)``; weights stacked per direction,
``weight_ih (dirs, G*H, input)``, ``weight_hh (dirs, G*H, H)``, ``bias (dirs, 2*G*H)`` (input
then recurrent biases), with gates in ONNX's order: LSTM ``i, o, f, c`` (G = 4), GRU ``z, r, h``
(G = 3); the simple RNN has one (G = 1: ``H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)``). ``dirs`` is 2 for ``direction="bidirectional"``, else 1. Results are ``Y (seq, dirs,
batch, H)`` and the last states ``Y_h`` (and LSTM's ``Y_c``), each ``(dirs, batch, H)``.

Conventions that keep the inputs fixed (the importer fills in absent ONNX inputs):

- ``sequence_lens`` is int32 ``(batch,)``, or empty ``(0,)`` for "every sequence is full". A
  sequence of length L runs steps ``0..L-1`` (the reverse direction runs them backwards from
  ``L-1``); its ``Y`` rows from ``L`` on are 0 and its last state is the state after step L-1.
- ``initial_h``/``initial_c`` are ``(dirs, batch, H)`` or ``(dirs, 1, H)`` (broadcast over the
  batch; zeros give ONNX's default). ``peephole`` is ``(dirs, 3*H)`` (``i, o, f``; zeros for none).
- ``activations`` names one function per gate group and direction (LSTM ``f, g, h``; GRU
  ``f, g``; RNN ``f``; None for ONNX's defaults: sigmoid and tanh, the RNN's tanh), lower case: sigmoid, tanh, relu, affine, leakyrelu, thresholdedrelu, scaledtanh,
  hardsigmoid, elu, softsign, softplus; ``activation_alpha``/``activation_beta`` hold one value
  per activation (each function's default where it takes none).
- ``clip`` (when set) clamps every gate's pre-activation to ``[-clip, clip]``; LSTM's
  ``input_forget`` couples the gates: ``f = 1 - i``. GRU's ``linear_before_reset`` applies the
  reset gate after the recurrent product of the hidden gate (``r * (H R_h^T + Rb_h)``).

Everything computes in float64 and rounds once to the input dtype.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..ir import dims as D
from ..ir.types import TensorType, TupleType
from .common import (FLOATS, check_dtype, check_rank, differ, fmt_shape, require, same_dtype,
                     tensor_arg)
from .image import OPT_FLOATS
from .registry import BOOL, INT, OPAQUE, OPT_FLOAT, AttrKind, OpTypeError, attr, choice, register

ACTIVATIONS: dict[str, Callable[[np.ndarray, float, float], np.ndarray]] = {
    "sigmoid": lambda x, a, b: 1 / (1 + np.exp(-x)),
    "tanh": lambda x, a, b: np.tanh(x),
    "relu": lambda x, a, b: np.maximum(x, 0),
    "affine": lambda x, a, b: a * x + b,
    "leakyrelu": lambda x, a, b: np.where(x >= 0, x, a * x),
    "thresholdedrelu": lambda x, a, b: np.where(x > a, x, 0.0),
    "scaledtanh": lambda x, a, b: a * np.tanh(b * x),
    "hardsigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "elu": lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1)),
    "softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "softplus": lambda x, a, b: np.log1p(np.exp(x)),
}

#: (alpha, beta) each activation uses when ONNX gives none.
ACTIVATION_DEFAULTS: dict[str, tuple[float, float]] = {
    "affine": (1.0, 0.0), "leakyrelu": (0.01, 0.0), "thresholdedrelu": (1.0, 0.0),
    "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, 0.0)}


def _names(v: Any) -> tuple[str, ...]:
    if not isinstance(v, (list, tuple)) or any(x not in ACTIVATIONS for x in v):
        raise ValueError
    return tuple(v)


OPT_ACTIVATION_NAMES = AttrKind("None or a list of activation names (" + ", ".join(ACTIVATIONS)
                                + ")", lambda v: None if v is None else _names(v))
DIRECTIONS = ("forward", "reverse", "bidirectional")


def _num_directions(attrs) -> int:
    return 2 if attrs.direction == "bidirectional" else 1


def _check_activations(attrs, per_direction: int) -> None:
    want = per_direction * _num_directions(attrs)
    for name in ("activations", "activation_alpha", "activation_beta"):
        v = attrs[name]
        if v is not None and len(v) != want:
            raise OpTypeError(f"{name} must have {want} entries ({per_direction} per direction), "
                              f"got {list(v)}")


def _check_dim(t: TensorType, name: str, axis: int, want: D.Dim, what: str) -> None:
    if differ(t.shape[axis], want):
        raise OpTypeError(f"{name} {fmt_shape(t.shape)} must have {what} {D.dim_str(want)} in "
                          f"dim {axis}")


def _recurrent_type(attrs, gates: int, per_direction: int, names: tuple[str, ...], args):
    named = {n: tensor_arg(t, n) for n, t in zip(names, args)}
    data = named["data"]
    check_dtype(data, "data", FLOATS, "a float dtype")
    check_rank(data, "data", 3)
    same_dtype(*[(n, t) for n, t in named.items() if n != "sequence_lens"])
    _check_activations(attrs, per_direction)
    hidden, dirs = attrs.hidden_size, _num_directions(attrs)
    if hidden < 1:
        raise OpTypeError(f"hidden_size must be positive, got {hidden}")
    seq, batch, width = data.shape
    shapes = {"weight_ih": (dirs, gates * hidden, width), "weight_hh": (dirs, gates * hidden, hidden),
              "bias": (dirs, 2 * gates * hidden), "peephole": (dirs, 3 * hidden)}
    for n, want in shapes.items():
        if n in named:
            check_rank(named[n], n, len(want))
            for axis, d in enumerate(want):
                _check_dim(named[n], n, axis, d, "size")
    lens = named["sequence_lens"]
    check_rank(lens, "sequence_lens", 1)
    check_dtype(lens, "sequence_lens", ("int32",), "dtype int32")
    for n in ("initial_h", "initial_c"):
        if n in named:
            t = named[n]
            check_rank(t, n, 3)
            _check_dim(t, n, 0, dirs, "size")
            _check_dim(t, n, 2, hidden, "size")
    state = TensorType((dirs, batch, hidden), data.dtype)
    y = TensorType((seq, dirs, batch, hidden), data.dtype)
    return TupleType((y,) + (state,) * (len([n for n in names if n.startswith("initial")])))


def _activation(attrs, index: int, defaults: tuple[str, ...]) -> Callable[[np.ndarray], np.ndarray]:
    names = attrs.activations or defaults * _num_directions(attrs)
    name = names[index]
    alpha, beta = ACTIVATION_DEFAULTS.get(name, (0.0, 0.0))
    if attrs.activation_alpha is not None:
        alpha = attrs.activation_alpha[index]
    if attrs.activation_beta is not None:
        beta = attrs.activation_beta[index]
    fn = ACTIVATIONS[name]
    return lambda x: fn(x, alpha, beta)


def _lengths(lens: np.ndarray, seq: int, batch: int) -> np.ndarray:
    if lens.size == 0:
        return np.full(batch, seq, np.int64)
    require(lens.shape == (batch,), f"sequence_lens {lens.shape} must be (batch,) = ({batch},)")
    require(bool(((lens >= 0) & (lens <= seq)).all()),
             f"sequence_lens {lens.tolist()} must lie in [0, {seq}]")
    return lens.astype(np.int64)


def _initial(v: np.ndarray, name: str, dirs: int, batch: int, hidden: int) -> np.ndarray:
    require(v.shape in ((dirs, batch, hidden), (dirs, 1, hidden)),
             f"{name} {v.shape} must be ({dirs}, {batch} or 1, {hidden})")
    return np.broadcast_to(v.astype(np.float64), (dirs, batch, hidden))


def _run_direction(step, x: np.ndarray, states: tuple, lengths: np.ndarray, reverse: bool):
    """Run ``step`` over the valid steps of each sequence; returns (Y, last states)."""
    seq, batch = x.shape[:2]
    hidden = states[0].shape[-1]
    y = np.zeros((seq, batch, hidden))
    for t in range(seq):
        # Forward: step t for every sequence longer than t. Reverse: step L-1-t of each.
        idx = np.where(lengths - 1 - t >= 0, lengths - 1 - t, 0) if reverse else np.full(batch, t)
        active = lengths > t
        if not active.any():
            continue
        xt = x[idx, np.arange(batch)]
        new = step(xt, *states)
        states = tuple(np.where(active[:, None], n, s) for n, s in zip(new, states))
        y[idx[active], np.arange(batch)[active]] = states[0][active]
    return y, states


def _recurrent_ref(attrs, step_for, x, w, r, b, lens, *states):
    dirs, hidden = _num_directions(attrs), attrs.hidden_size
    seq, batch, _ = x.shape
    lengths = _lengths(lens, seq, batch)
    starts = [_initial(s, n, dirs, batch, hidden) for s, n in zip(states, ("initial_h", "initial_c"))]
    xs = x.astype(np.float64)
    ys, lasts = [], []
    for d in range(dirs):
        reverse = attrs.direction == "reverse" or d == 1
        step = step_for(d, w[d].astype(np.float64), r[d].astype(np.float64),
                        b[d].astype(np.float64))
        y, last = _run_direction(step, xs, tuple(s[d] for s in starts), lengths, reverse)
        ys.append(y)
        lasts.append(last)
    out = np.stack(ys, axis=1).astype(x.dtype)
    return (out,) + tuple(np.stack([last[i] for last in lasts]).astype(x.dtype)
                          for i in range(len(states)))


def _clipped(attrs) -> Callable[[np.ndarray], np.ndarray]:
    if attrs.clip is None:
        return lambda g: g
    return lambda g: np.clip(g, -attrs.clip, attrs.clip)


# --- LSTM ------------------------------------------------------------------------------------------

_LSTM_DEFAULT = ("sigmoid", "tanh", "tanh")
_LSTM_INPUTS = ("data", "weight_ih", "weight_hh", "bias", "sequence_lens", "initial_h",
                "initial_c", "peephole")


def _lstm_type(attrs, *args):
    return _recurrent_type(attrs, 4, 3, _LSTM_INPUTS, args)


def _lstm_ref(attrs, x, w, r, b, lens, h0, c0, p):
    hidden = attrs.hidden_size
    clip = _clipped(attrs)
    peep = p.astype(np.float64)

    def step_for(d, wd, rd, bd):
        f, g, h = (_activation(attrs, 3 * d + k, _LSTM_DEFAULT) for k in range(3))
        p_i, p_o, p_f = np.split(peep[d], 3)
        bias = bd[:4 * hidden] + bd[4 * hidden:]

        def step(xt, ht, ct):
            gates = xt @ wd.T + ht @ rd.T + bias
            gi, go, gf, gc = np.split(gates, 4, axis=-1)
            i = f(clip(gi + p_i * ct))
            forget = 1 - i if attrs.input_forget else f(clip(gf + p_f * ct))
            c = forget * ct + i * g(clip(gc))
            o = f(clip(go + p_o * c))
            return o * h(c), c
        return step
    return _recurrent_ref(attrs, step_for, x, w, r, b, lens, h0, c0)


_COMMON_ATTRS = [attr("hidden_size", INT, required=True),
                 attr("direction", choice(*DIRECTIONS), "forward"),
                 attr("activation_alpha", OPT_FLOATS, None),
                 attr("activation_beta", OPT_FLOATS, None), attr("clip", OPT_FLOAT, None)]

register("nn.lstm", inputs=_LSTM_INPUTS, infer=_lstm_type, reference=_lstm_ref, pattern=OPAQUE,
         attrs=_COMMON_ATTRS + [
             attr("activations", OPT_ACTIVATION_NAMES, None),
             attr("input_forget", BOOL, False)],
         doc="LSTM over a sequence (ONNX semantics); returns (Y, Y_h, Y_c)")

# --- GRU -------------------------------------------------------------------------------------------

_GRU_DEFAULT = ("sigmoid", "tanh")
_GRU_INPUTS = ("data", "weight_ih", "weight_hh", "bias", "sequence_lens", "initial_h")


def _gru_type(attrs, *args):
    return _recurrent_type(attrs, 3, 2, _GRU_INPUTS, args)


def _gru_ref(attrs, x, w, r, b, lens, h0):
    hidden = attrs.hidden_size
    clip = _clipped(attrs)

    def step_for(d, wd, rd, bd):
        f, g = (_activation(attrs, 2 * d + k, _GRU_DEFAULT) for k in range(2))
        wb, rb = bd[:3 * hidden], bd[3 * hidden:]
        r_z, r_r, r_h = np.split(rd, 3)
        rb_z, rb_r, rb_h = np.split(rb, 3)

        def step(xt, ht):
            xz, xr, xh = np.split(xt @ wd.T + wb, 3, axis=-1)
            z = f(clip(xz + ht @ r_z.T + rb_z))
            reset = f(clip(xr + ht @ r_r.T + rb_r))
            if attrs.linear_before_reset:
                cand = g(clip(xh + reset * (ht @ r_h.T + rb_h)))
            else:
                cand = g(clip(xh + (reset * ht) @ r_h.T + rb_h))
            return ((1 - z) * cand + z * ht,)
        return step
    return _recurrent_ref(attrs, step_for, x, w, r, b, lens, h0)


register("nn.gru", inputs=_GRU_INPUTS, infer=_gru_type, reference=_gru_ref, pattern=OPAQUE,
         attrs=_COMMON_ATTRS + [
             attr("activations", OPT_ACTIVATION_NAMES, None),
             attr("linear_before_reset", BOOL, False)],
         doc="GRU over a sequence (ONNX semantics); returns (Y, Y_h)")

# --- RNN -------------------------------------------------------------------------------------------

_RNN_DEFAULT = ("tanh",)
_RNN_INPUTS = _GRU_INPUTS


def _rnn_type(attrs, *args):
    return _recurrent_type(attrs, 1, 1, _RNN_INPUTS, args)


def _rnn_ref(attrs, x, w, r, b, lens, h0):
    hidden = attrs.hidden_size
    clip = _clipped(attrs)

    def step_for(d, wd, rd, bd):
        f = _activation(attrs, d, _RNN_DEFAULT)
        bias = bd[:hidden] + bd[hidden:]

        def step(xt, ht):
            return (f(clip(xt @ wd.T + ht @ rd.T + bias)),)
        return step
    return _recurrent_ref(attrs, step_for, x, w, r, b, lens, h0)


register("nn.rnn", inputs=_RNN_INPUTS, infer=_rnn_type, reference=_rnn_ref, pattern=OPAQUE,
         attrs=_COMMON_ATTRS + [attr("activations", OPT_ACTIVATION_NAMES, None)],
         doc="simple RNN over a sequence (ONNX semantics: one activation, tanh by default); "
             "returns (Y, Y_h)")
