"""Sliding windows over the spatial dims of NCHW tensors, shared by convolution (``conv.py``,
``conv_transpose.py``) and pooling (``pool.py``): attribute forms, output lengths (symbolic at
type inference, concrete at run time) and the taps of each window (the NumPy references).

``padding`` takes 1, 2 or 4 ints as Relay does: every side; (top/bottom, left/right); (top,
left, bottom, right). ``strides``, ``dilation``, ``pool_size`` take 1 or 2 ints.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..ir import dims as D
from ..ir.dims import Dim
from ..ir.types import TensorType
from .common import fmt_shape, require
from .registry import OpTypeError


def pair(v: int | Sequence[int], name: str, least: int) -> tuple[int, int]:
    """A 2-D window parameter from 1 or 2 ints, each at least ``least``."""
    out = (v,) if isinstance(v, int) else tuple(v)
    if len(out) == 1:
        out = out * 2
    if len(out) != 2 or min(out) < least:
        raise OpTypeError(f"{name} must be 1 or 2 ints >= {least}, got {v}")
    return out  # type: ignore[return-value]


def pad_pairs(v: int | Sequence[int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """Relay's padding -> ((top, bottom), (left, right))."""
    p = (v,) if isinstance(v, int) else tuple(v)
    if len(p) not in (1, 2, 4) or min(p) < 0:
        raise OpTypeError(f"padding must be 1, 2 or 4 ints >= 0, got {v}")
    if len(p) == 1:
        return (p[0], p[0]), (p[0], p[0])
    if len(p) == 2:
        return (p[0], p[0]), (p[1], p[1])
    return (p[0], p[2]), (p[1], p[3])


def window_len(size: Dim, kernel: Dim, stride: int, dilation: int, pad: tuple[int, int],
                ceil_mode: bool = False) -> Dim:
    """Number of windows along one axis (symbolic in ``size`` and ``kernel``).

    With ``ceil_mode`` PyTorch rounds the count up, then drops the last window if it starts at or
    past ``size + before`` (in the bottom/right padding). Both candidates are
    ``(size + c) // stride`` for constants ``c``, and the min or max of two such floors is the
    floor with the min or max constant; so the rule is one floor division for every ``size``,
    which keeps symbolic dims free of ``min``/``max`` atoms.
    """
    before, after = pad
    span = size + before + after - (dilation * (kernel - 1) + 1)
    if not ceil_mode:
        return span // stride + 1
    assert isinstance(kernel, int), "ceil_mode is only for pools, whose kernel is static"
    rounded_up = before + after - (dilation * (kernel - 1) + 1) + stride - 1
    starts_inside = before - 1  # (size + this) // stride: the last start in input or top pad
    if rounded_up <= starts_inside:
        offset = rounded_up  # the rounded-up last window never starts in the bottom padding
    else:
        # It may start in the bottom padding: drop it (only it), never going below round-down.
        offset = max(rounded_up - stride, starts_inside)
    return (size + offset) // stride + 1


def spatial_out(data: TensorType, kernel: tuple[Dim, Dim], strides, dilation, padding,
                 ceil_mode: bool, what: str) -> tuple[Dim, Dim]:
    """Output (H, W) of a 2-D window op, refusing a window that provably cannot fit."""
    out = []
    for size, k, s, d, p in zip(data.shape[2:], kernel, strides, dilation, pad_pairs(padding)):
        room = size + p[0] + p[1] - (d * (k - 1) + 1)
        if not D.at_most(0, room):
            raise OpTypeError(f"{what} {tuple(kernel)} with dilation {tuple(dilation)} does not "
                              f"fit in the padded input: data {fmt_shape(data.shape)}, padding "
                              f"{list(padding) if not isinstance(padding, int) else padding}")
        out.append(window_len(size, k, s, d, p, ceil_mode))
    return out[0], out[1]


def tap_index(out_len: int, kernel: int, stride: int, dilation: int) -> np.ndarray:
    """(out_len, kernel): the padded-input row (or column) each tap of each window reads."""
    return np.arange(out_len)[:, None] * stride + np.arange(kernel)[None, :] * dilation


def window_taps(x: np.ndarray, pads, value, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """(N, C, OH, OW, KH, KW): every tap of every window of ``x`` padded with ``value``.

    Pads at the bottom/right as far as the windows reach (ceil_mode reads past ``pads``).
    """
    (top, _), (left, _) = pads
    extra_h = max(0, int(rows.max(initial=0)) + 1 - top - x.shape[2])
    extra_w = max(0, int(cols.max(initial=0)) + 1 - left - x.shape[3])
    xp = np.pad(x, ((0, 0), (0, 0), (top, extra_h), (left, extra_w)), constant_values=value)
    return xp[:, :, rows[:, None, :, None], cols[None, :, None, :]]


def runtime_out(x: np.ndarray, kernel, strides, dilation, pads, ceil_mode, what) -> tuple:
    """Output (H, W) for a concrete input; the window must fit (a symbolic H was unchecked)."""
    out = []
    for size, k, s, d, p in zip(x.shape[2:], kernel, strides, dilation, pads):
        require(size + p[0] + p[1] >= d * (k - 1) + 1,
                 f"{what} {tuple(kernel)} does not fit in the padded input {x.shape}")
        out.append(window_len(size, k, s, d, p, ceil_mode))
    return tuple(out)


# --- conv2d ---------------------------------------------------------------------------------------
