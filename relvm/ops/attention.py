"""What attention needs around its two matrix products (``nn.batch_matmul``).

* ``nn.attention_softmax(scores, bias, positions)``: the probabilities of scaled dot-product
  attention from the scores Q K^T (batch, heads, q, kv), with every mask applied in the same
  pass: a ``scale`` (first), a softcap (``softcap * tanh(s / softcap)``, before the masks, as ONNX), an additive
  ``bias`` (a mask; ``-inf`` masks a key), and a frame of positions: ``positions`` holds one
  row per batch (or one for all) of (offset, valid): query i stands at position i + offset,
  keys from ``valid`` on are masked, and with d = i + offset - j, ``causal`` masks d < 0, a
  ``left_window`` of w >= 0 masks d > w and a ``right_window`` masks -d > w. The bias's
  leading dims broadcast over (batch, heads, q) as NumPy's; along its last axis it may be
  shorter than kv: the keys past it are masked (ONNX's padding of a short mask). A rank-0 bias
  is added to every score. A row whose every key is masked gives zeros (no key to attend),
  not NaN. With ``logits`` the op returns the capped, masked scores instead (masked keys
  ``-inf``). Sums in float64, rounded once.
* ``nn.rotary_embedding(data, cos, sin)``: rotary position embeddings of ``data`` (batch,
  heads, seq, head) with ``layout="BHSD"``, or (batch, seq, heads, head) with ``"BSHD"``: the
  first ``rotary_dim`` elements of each head vector (all when 0) are rotated as pairs -- (k,
  k + rotary_dim/2), or (2k, 2k + 1) when ``interleaved`` -- by the angles whose cosines and
  sines ``cos`` and ``sin`` (batch or 1, seq, rotary_dim/2) give; the rest is copied.

Both run in one pass over their data (``kernels/attention.c``).
"""

from __future__ import annotations

import numpy as np

from ..ir import dims as D
from .common import (FLOATS, cannot_broadcast_to, check_dtype, check_rank, differ, fmt_shape,
                     require, same_dtype, tensor_arg)
from .registry import BOOL, FLOAT, INT, OPAQUE, OpTypeError, attr, choice, register

_FLOAT = (FLOATS, "a float dtype")


def _broadcasts(d, want) -> bool:
    return not cannot_broadcast_to(d, want)


def _attention_softmax_type(attrs, s, b, p):
    scores, bias, positions = (tensor_arg(s, "scores"), tensor_arg(b, "bias"),
                               tensor_arg(p, "positions"))
    same_dtype(("scores", scores), ("bias", bias))
    check_dtype(scores, "scores", *_FLOAT)
    check_rank(scores, "scores", 4)
    if bias.ndim > 4:
        raise OpTypeError(f"bias must have rank <= 4, got {fmt_shape(bias.shape)}")
    lead = scores.shape[3 - max(bias.ndim - 1, 0):3] if bias.ndim else ()
    if bias.ndim and not all(_broadcasts(d, w) for d, w in zip(bias.shape[:-1], lead)):
        raise OpTypeError(f"bias {fmt_shape(bias.shape)} does not broadcast over the (batch, "
                          f"heads, q) of scores {fmt_shape(scores.shape)}")
    if bias.ndim and not D.at_most(bias.shape[-1], scores.shape[3]):
        raise OpTypeError(f"bias {fmt_shape(bias.shape)} has more keys than scores "
                          f"{fmt_shape(scores.shape)}")
    check_rank(positions, "positions", 2)
    if positions.dtype != "int64" or differ(positions.shape[1], 2) \
            or not _broadcasts(positions.shape[0], scores.shape[0]):
        raise OpTypeError(f"positions must be int64 (batch or 1, 2), got {positions.dtype} "
                          f"{fmt_shape(positions.shape)} for scores {fmt_shape(scores.shape)}")
    return scores


def frame_mask(attrs, q: int, kv: int, positions: np.ndarray) -> np.ndarray:
    """(batch or 1, 1, q, kv): True where the frame masks a key."""
    i = np.arange(q).reshape(1, q, 1)
    j = np.arange(kv).reshape(1, 1, kv)
    offset, valid = positions[:, 0].reshape(-1, 1, 1), positions[:, 1].reshape(-1, 1, 1)
    d = i + offset - j
    masked = j >= valid
    if attrs.causal:
        masked = masked | (d < 0)
    if attrs.left_window >= 0:
        masked = masked | (d > attrs.left_window)
    if attrs.right_window >= 0:
        masked = masked | (-d > attrs.right_window)
    return masked[:, None]


def _attention_softmax_ref(attrs, scores, bias, positions):
    b, _, q, kv = scores.shape
    require(positions.shape in ((1, 2), (b, 2)),
            f"positions {positions.shape} must be (1, 2) or ({b}, 2)")
    if bias.ndim:
        require(bias.shape[-1] <= kv, f"bias {bias.shape} has more keys than scores "
                                      f"{scores.shape}")
        pad = [(0, 0)] * (bias.ndim - 1) + [(0, kv - bias.shape[-1])]
        bias = np.pad(bias.astype(np.float64), pad, constant_values=-np.inf)
    bias = np.where(frame_mask(attrs, q, kv, positions), -np.inf, bias.astype(np.float64))
    try:
        bias = np.broadcast_to(bias, scores.shape)
    except ValueError:
        require(False, f"bias {bias.shape} does not broadcast to scores {scores.shape}")
    s = scores.astype(np.float64) * attrs.scale
    with np.errstate(invalid="ignore", over="ignore"):
        if attrs.softcap > 0:
            s = attrs.softcap * np.tanh(s / attrs.softcap)
        s = s + bias
        if attrs.logits:
            return s.astype(scores.dtype)
        m = s.max(axis=-1, keepdims=True, initial=-np.inf)
        e = np.exp(s - np.where(np.isneginf(m), 0.0, m))
        total = e.sum(axis=-1, keepdims=True)
        p = e / np.where(total == 0, 1.0, total)
    closed = np.isneginf(bias).all(axis=-1, keepdims=True)
    return np.where(closed, 0.0, p).astype(scores.dtype)


register("nn.attention_softmax", inputs=("scores", "bias", "positions"),
         infer=_attention_softmax_type, reference=_attention_softmax_ref, pattern=OPAQUE,
         attrs=[attr("scale", FLOAT, 1.0), attr("causal", BOOL, False),
                attr("left_window", INT, -1), attr("right_window", INT, -1),
                attr("softcap", FLOAT, 0.0), attr("logits", BOOL, False)],
         doc="softmax of attention scores (batch, heads, q, kv) after a scale, a softcap, an "
             "additive bias and a causal/window/valid-keys frame; rows with no key open give "
             "zeros")


_LAYOUTS = {"BHSD": (0, 2, 1), "BSHD": (0, 1, 2)}  # batch, seq, heads axes


def _rotary_type(attrs, d, c, s):
    data, cos, sin = tensor_arg(d, "data"), tensor_arg(c, "cos"), tensor_arg(s, "sin")
    same_dtype(("data", data), ("cos", cos), ("sin", sin))
    check_dtype(data, "data", *_FLOAT)
    check_rank(data, "data", 4)
    check_rank(cos, "cos", 3)
    check_rank(sin, "sin", 3)
    b, seq, _ = (data.shape[a] for a in _LAYOUTS[attrs.layout])
    head = data.shape[3]
    if attrs.rotary_dim < 0 or attrs.rotary_dim % 2:
        raise OpTypeError(f"rotary_dim must be even and not negative, got {attrs.rotary_dim}")
    rotary = attrs.rotary_dim or head
    if not D.at_most(rotary, head) or isinstance(head, int) and rotary % 2:
        raise OpTypeError(f"rotary_dim {rotary} must be even and at most the head size {head}")
    for name, t in (("cos", cos), ("sin", sin)):
        if not _broadcasts(t.shape[0], b) or differ(t.shape[1], seq) \
                or differ(t.shape[2] * 2, rotary):
            raise OpTypeError(f"{name} {fmt_shape(t.shape)} must be (batch or 1, seq, "
                              f"rotary_dim/2) for data {fmt_shape(data.shape)} "
                              f"({attrs.layout}, rotary_dim {D.dim_str(rotary)})")
    return data


def _rotary_ref(attrs, x, cos, sin):
    xs = x if attrs.layout == "BSHD" else np.swapaxes(x, 1, 2)  # (b, s, h, d)
    b, seq, _, head = xs.shape
    rotary = attrs.rotary_dim or head
    require(rotary <= head and rotary % 2 == 0,
            f"rotary_dim {rotary} must be even and at most the head size {head}")
    for name, t in (("cos", cos), ("sin", sin)):
        require(t.shape[0] in (1, b) and t.shape[1:] == (seq, rotary // 2),
                f"{name} {t.shape} must be ({b} or 1, {seq}, {rotary // 2})")
    c = cos.astype(np.float64)[:, :, None, :]
    s = sin.astype(np.float64)[:, :, None, :]
    x64 = xs.astype(np.float64)
    rot = x64[..., :rotary]
    if attrs.interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot[..., :rotary // 2], rot[..., rotary // 2:]
    real, imag = c * x1 - s * x2, s * x1 + c * x2
    out = x64.copy()
    if attrs.interleaved:
        out[..., 0:rotary:2], out[..., 1:rotary:2] = real, imag
    else:
        out[..., :rotary // 2], out[..., rotary // 2:rotary] = real, imag
    out = out if attrs.layout == "BSHD" else np.swapaxes(out, 1, 2)
    return np.ascontiguousarray(out).astype(x.dtype)


register("nn.rotary_embedding", inputs=("data", "cos", "sin"), infer=_rotary_type,
         reference=_rotary_ref, pattern=OPAQUE,
         attrs=[attr("interleaved", BOOL, False), attr("rotary_dim", INT, 0),
                attr("layout", choice(*_LAYOUTS), "BHSD")],
         doc="rotate pairs of the first rotary_dim elements of each head vector by the angles "
             "cos and sin (batch or 1, seq, rotary_dim/2) give")
