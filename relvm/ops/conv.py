"""Convolution and pooling: nn.conv2d, nn.max_pool2d, nn.avg_pool2d, the global pools.

Only the NCHW data and OIHW kernel layouts are implemented; Relay's layout attributes are
accepted and any other layout is an attribute error. Semantics (see also ``nn.py``):

* ``padding`` takes 1, 2 or 4 ints as Relay does: every side; (top/bottom, left/right);
  (top, left, bottom, right). ``strides``, ``dilation``, ``pool_size`` take 1 or 2 ints.
* Pooling with ``ceil_mode`` follows PyTorch: the output grows by one where the last window
  would be partial, but every window must start inside the input or its top/left padding.
* ``max_pool2d`` ignores padding; a window that covers no input gives -inf. ``avg_pool2d``
  divides by the taps inside the padded input (``count_include_pad``) or inside the input
  (not); a window covering no input gives 0, as PyTorch's CPU kernel does.
* Convolution accumulates in float64 and rounds once to the output dtype.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..ir import dims as D
from ..ir.dims import Dim
from ..ir.types import TensorType
from .common import (FLOATS, acc_dtype, check_dtype, check_rank, differ, fmt_shape, np_dtype,
                     out_dtype, require, same_dtype, tensor_arg)
from .registry import (BOOL, DTYPE_OR_EMPTY, INT, INT_OR_INTS, OPAQUE, OPT_INT, OPT_INT_OR_INTS,
                       OUT_FUSABLE, OpTypeError, attr, choice, register)

_FLOAT = (FLOATS, "a float dtype")


# --- sliding windows: shared by conv2d and the pools ------------------------------------------

def _pair(v: int | Sequence[int], name: str, least: int) -> tuple[int, int]:
    """A 2-D window parameter from 1 or 2 ints, each at least ``least``."""
    out = (v,) if isinstance(v, int) else tuple(v)
    if len(out) == 1:
        out = out * 2
    if len(out) != 2 or min(out) < least:
        raise OpTypeError(f"{name} must be 1 or 2 ints >= {least}, got {v}")
    return out  # type: ignore[return-value]


def _pads(v: int | Sequence[int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """Relay's padding -> ((top, bottom), (left, right))."""
    p = (v,) if isinstance(v, int) else tuple(v)
    if len(p) not in (1, 2, 4) or min(p) < 0:
        raise OpTypeError(f"padding must be 1, 2 or 4 ints >= 0, got {v}")
    if len(p) == 1:
        return (p[0], p[0]), (p[0], p[0])
    if len(p) == 2:
        return (p[0], p[0]), (p[1], p[1])
    return (p[0], p[2]), (p[1], p[3])


def _window_len(size: Dim, kernel: Dim, stride: int, dilation: int, pad: tuple[int, int],
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


def _spatial_out(data: TensorType, kernel: tuple[Dim, Dim], strides, dilation, padding,
                 ceil_mode: bool, what: str) -> tuple[Dim, Dim]:
    """Output (H, W) of a 2-D window op, refusing a window that provably cannot fit."""
    out = []
    for size, k, s, d, p in zip(data.shape[2:], kernel, strides, dilation, _pads(padding)):
        room = size + p[0] + p[1] - (d * (k - 1) + 1)
        if D.is_static(room) and room < 0:
            raise OpTypeError(f"{what} {tuple(kernel)} with dilation {tuple(dilation)} does not "
                              f"fit in the padded input: data {fmt_shape(data.shape)}, padding "
                              f"{list(padding) if not isinstance(padding, int) else padding}")
        out.append(_window_len(size, k, s, d, p, ceil_mode))
    return out[0], out[1]


def _tap_index(out_len: int, kernel: int, stride: int, dilation: int) -> np.ndarray:
    """(out_len, kernel): the padded-input row (or column) each tap of each window reads."""
    return np.arange(out_len)[:, None] * stride + np.arange(kernel)[None, :] * dilation


def _taps(x: np.ndarray, pads, value, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """(N, C, OH, OW, KH, KW): every tap of every window of ``x`` padded with ``value``.

    Pads at the bottom/right as far as the windows reach (ceil_mode reads past ``pads``).
    """
    (top, _), (left, _) = pads
    extra_h = max(0, int(rows.max(initial=0)) + 1 - top - x.shape[2])
    extra_w = max(0, int(cols.max(initial=0)) + 1 - left - x.shape[3])
    xp = np.pad(x, ((0, 0), (0, 0), (top, extra_h), (left, extra_w)), constant_values=value)
    return xp[:, :, rows[:, None, :, None], cols[None, :, None, :]]


def _runtime_out(x: np.ndarray, kernel, strides, dilation, pads, ceil_mode, what) -> tuple:
    """Output (H, W) for a concrete input; the window must fit (a symbolic H was unchecked)."""
    out = []
    for size, k, s, d, p in zip(x.shape[2:], kernel, strides, dilation, pads):
        require(size + p[0] + p[1] >= d * (k - 1) + 1,
                 f"{what} {tuple(kernel)} does not fit in the padded input {x.shape}")
        out.append(_window_len(size, k, s, d, p, ceil_mode))
    return tuple(out)


# --- conv2d ---------------------------------------------------------------------------------------

def _conv2d_geometry(attrs):
    return (_pair(attrs.strides, "strides", 1), _pair(attrs.dilation, "dilation", 1),
            _pads(attrs.padding))


def _check_conv_weight(attrs, data: TensorType, weight: TensorType) -> None:
    """Channels, groups, and the optional ``channels``/``kernel_size`` against the weight."""
    g = attrs.groups
    out_c, in_c, kh, kw = weight.shape
    if g < 1:
        raise OpTypeError(f"groups must be >= 1, got {g}")
    if differ(data.shape[1], in_c * g):
        raise OpTypeError(f"input channels differ: data {fmt_shape(data.shape)} vs weight "
                          f"{fmt_shape(weight.shape)} with groups={g}")
    if differ(D.mod(out_c, g), 0):
        raise OpTypeError(f"output channels of weight {fmt_shape(weight.shape)} are not a "
                          f"multiple of groups={g}")
    if attrs.channels is not None and differ(attrs.channels, out_c):
        raise OpTypeError(f"channels={attrs.channels} but weight {fmt_shape(weight.shape)} "
                          f"has {D.dim_str(out_c)}")
    check_kernel_size(attrs, weight, kh, kw)


def check_kernel_size(attrs, weight: TensorType, kh: Dim, kw: Dim) -> None:
    """The optional ``kernel_size`` attribute must agree with the weight's window."""
    if attrs.kernel_size is not None:
        ks = _pair(attrs.kernel_size, "kernel_size", 1)
        if differ(ks[0], kh) or differ(ks[1], kw):
            raise OpTypeError(f"kernel_size={list(ks)} but weight {fmt_shape(weight.shape)} "
                              f"has ({D.dim_str(kh)}, {D.dim_str(kw)})")


def _conv2d_type(attrs, d, w):
    data, weight = tensor_arg(d, "data"), tensor_arg(w, "weight")
    dtype = same_dtype(("data", data), ("weight", weight))
    check_dtype(data, "data", *_FLOAT)
    check_rank(data, "data", 4)
    check_rank(weight, "weight", 4)
    _check_conv_weight(attrs, data, weight)
    strides, dilation, _ = _conv2d_geometry(attrs)
    oh, ow = _spatial_out(data, weight.shape[2:], strides, dilation, attrs.padding, False,
                          "kernel")
    return TensorType((data.shape[0], weight.shape[0], oh, ow), out_dtype(attrs, dtype))


def _conv2d_ref(attrs, x, w):
    strides, dilation, pads = _conv2d_geometry(attrs)
    g, (n, c) = attrs.groups, x.shape[:2]
    out_c, in_c, kh, kw = w.shape
    require(c == in_c * g, f"input channels differ: data {x.shape} vs weight {w.shape} "
                            f"with groups={g}")
    oh, ow = _runtime_out(x, (kh, kw), strides, dilation, pads, False, "kernel")
    acc = acc_dtype(x.dtype)
    rows = _tap_index(oh, kh, strides[0], dilation[0])
    cols = _tap_index(ow, kw, strides[1], dilation[1])
    taps = _taps(x.astype(acc), pads, 0, rows, cols).reshape(n, g, in_c, oh, ow, kh, kw)
    weight = w.astype(acc).reshape(g, out_c // g, in_c, kh, kw)
    # Group g's output channels read only group g's input channels.
    out = np.einsum("ngchwij,gocij->ngohw", taps, weight)
    return out.reshape(n, out_c, oh, ow).astype(np_dtype(attrs.out_dtype or x.dtype.name))


register("nn.conv2d", inputs=("data", "weight"), infer=_conv2d_type, reference=_conv2d_ref,
         pattern=OUT_FUSABLE,
         attrs=[
             attr("strides", INT_OR_INTS, (1, 1)), attr("padding", INT_OR_INTS, (0, 0)),
             attr("dilation", INT_OR_INTS, (1, 1)), attr("groups", INT, 1),
             attr("channels", OPT_INT), attr("kernel_size", OPT_INT_OR_INTS),
             attr("data_layout", choice("NCHW"), "NCHW"),
             attr("kernel_layout", choice("OIHW"), "OIHW"),
             attr("out_layout", choice("", "NCHW"), ""), attr("out_dtype", DTYPE_OR_EMPTY, "")],
         doc="2-D convolution, NCHW data and OIHW weight, with groups and dilation")


# --- pooling --------------------------------------------------------------------------------------

def _pool_geometry(attrs):
    return (_pair(attrs.pool_size, "pool_size", 1), _pair(attrs.strides, "strides", 1),
            _pair(attrs.dilation, "dilation", 1), _pads(attrs.padding))


def _pool_type(attrs, d):
    data = tensor_arg(d, "data")
    check_dtype(data, "data", *_FLOAT)
    check_rank(data, "data", 4)
    kernel, strides, dilation, _ = _pool_geometry(attrs)
    oh, ow = _spatial_out(data, kernel, strides, dilation, attrs.padding, attrs.ceil_mode,
                          "pool_size")
    return TensorType(data.shape[:2] + (oh, ow), data.dtype)


def _pool_taps(attrs, x: np.ndarray, value):
    """The windows' taps of ``x`` padded with ``value``, and the per-axis tap indices."""
    kernel, strides, dilation, pads = _pool_geometry(attrs)
    oh, ow = _runtime_out(x, kernel, strides, dilation, pads, attrs.ceil_mode, "pool_size")
    rows = _tap_index(oh, kernel[0], strides[0], dilation[0])
    cols = _tap_index(ow, kernel[1], strides[1], dilation[1])
    return _taps(x, pads, value, rows, cols), (rows, cols), pads


def _max_pool2d_ref(attrs, x):
    taps, _, _ = _pool_taps(attrs, x, -np.inf)
    return taps.max(axis=(4, 5), initial=-np.inf).astype(x.dtype)


def _tap_count(index: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Per window, the number of taps whose padded-input position lies in [lo, hi)."""
    return ((index >= lo) & (index < hi)).sum(axis=1)


def _avg_pool2d_ref(attrs, x):
    taps, (rows, cols), ((top, bottom), (left, right)) = _pool_taps(attrs, x.astype(np.float64), 0)
    h, w = x.shape[2:]
    # Any window covering no input averages to 0; others divide by the taps that count.
    inside = _tap_count(rows, top, top + h)[:, None] * _tap_count(cols, left, left + w)[None, :]
    if attrs.count_include_pad:
        count = (_tap_count(rows, 0, top + h + bottom)[:, None]
                 * _tap_count(cols, 0, left + w + right)[None, :])
    else:
        count = inside
    total = taps.sum(axis=(4, 5))
    return np.where(inside > 0, total / np.maximum(count, 1), 0).astype(x.dtype)


_POOL_ATTRS = [attr("pool_size", INT_OR_INTS, (1, 1)), attr("strides", INT_OR_INTS, (1, 1)),
               attr("dilation", INT_OR_INTS, (1, 1)), attr("padding", INT_OR_INTS, (0, 0)),
               attr("layout", choice("NCHW"), "NCHW"), attr("out_layout", choice("", "NCHW"), ""),
               attr("ceil_mode", BOOL, False)]

register("nn.max_pool2d", inputs=("data",), infer=_pool_type, reference=_max_pool2d_ref,
         pattern=OPAQUE, attrs=_POOL_ATTRS, doc="2-D max pooling over NCHW (padding ignored)")
register("nn.avg_pool2d", inputs=("data",), infer=_pool_type, reference=_avg_pool2d_ref,
         pattern=OPAQUE, attrs=_POOL_ATTRS + [attr("count_include_pad", BOOL, False)],
         doc="2-D average pooling over NCHW")


def _global_pool_type(attrs, d):
    data = tensor_arg(d, "data")
    check_dtype(data, "data", *_FLOAT)
    check_rank(data, "data", 4)
    return TensorType(data.shape[:2] + (1, 1), data.dtype)


def _global_max_ref(attrs, x):
    if x.size == 0:
        require(x.shape[0] * x.shape[1] == 0, f"global_max_pool2d of an empty image {x.shape}")
        return np.empty(x.shape[:2] + (1, 1), x.dtype)
    return x.max(axis=(2, 3), keepdims=True)


def _global_avg_ref(attrs, x):
    total = x.astype(np.float64).sum(axis=(2, 3), keepdims=True)
    with np.errstate(invalid="ignore"):  # an empty image averages to NaN
        return (total / (x.shape[2] * x.shape[3])).astype(x.dtype)


_LAYOUT_ATTRS = [attr("layout", choice("NCHW"), "NCHW"), attr("out_layout", choice("", "NCHW"), "")]

register("nn.global_max_pool2d", inputs=("data",), infer=_global_pool_type,
         reference=_global_max_ref, pattern=OPAQUE, attrs=_LAYOUT_ATTRS,
         doc="max over H and W: (N, C, H, W) -> (N, C, 1, 1)")
register("nn.global_avg_pool2d", inputs=("data",), infer=_global_pool_type,
         reference=_global_avg_ref, pattern=OPAQUE, attrs=_LAYOUT_ATTRS,
         doc="mean over H and W: (N, C, H, W) -> (N, C, 1, 1)")
