"""Pooling: nn.max_pool2d, nn.avg_pool2d and the global pools, over NCHW.

The window attributes are those of ``window.py``. Semantics (see also ``nn.py``):

* ``max_unpool`` (ONNX MaxUnpool, any number of spatial axes) writes each element of data to the
  position its index gives in the flattened unpooled tensor, of spatial size ``(in - 1) *
  stride - pad_begin - pad_end + kernel``, every other element 0. With ``output_size`` that
  tensor then sits at the start of each axis of a larger one of that size, zeros after (onnx's
  reference; ONNX Runtime indexes the larger tensor instead). An index outside the unpooled
  tensor is an error when the program runs, naming it; of several values sent to one
  position, the last in data's order stays (as in ONNX Runtime).
* With ``ceil_mode`` the output follows PyTorch: it grows by one where the last window would be
  partial, but every window must start inside the input or its top/left padding.
* ``max_pool2d`` ignores padding; a window that covers no input gives -inf.
  ``max_pool2d_with_argmax`` also gives, per output, the int64 position of its maximum in the
  flattened input as ONNX MaxPool's Indices output defines it: ``(n*C + c)*H*W`` plus ``h*W +
  w`` (``storage_order`` 0, row-major) or ``h + w*H`` (1, column-major); the first of equal
  maxima in the window's row-major order wins, as in ONNX Runtime, and a NaN wins as the value
  does (a window covering no input: -inf and -1). ``avg_pool2d``
  divides by the taps inside the padded input (``count_include_pad``) or inside the input
  (not); a window covering no input gives 0, as PyTorch's CPU kernel does.
"""

from __future__ import annotations

import numpy as np

from ..ir import dims as D
from ..ir.types import TensorType, TupleType
from .common import FLOATS, check_dtype, check_rank, differ, fmt_shape, require, tensor_arg
from .registry import (BOOL, INT_OR_INTS, INTS, OPAQUE, OPT_INTS, OpTypeError, attr, choice,
                       register)
from .transform import ZERO_OR_ONE
from .window import pad_pairs, pair, runtime_out, spatial_out, tap_index, window_taps

_FLOAT = (FLOATS, "a float dtype")


def pool_geometry(attrs):
    return (pair(attrs.pool_size, "pool_size", 1), pair(attrs.strides, "strides", 1),
            pair(attrs.dilation, "dilation", 1), pad_pairs(attrs.padding))


def _pool_type(attrs, d):
    data = tensor_arg(d, "data")
    check_dtype(data, "data", *_FLOAT)
    check_rank(data, "data", 4)
    kernel, strides, dilation, _ = pool_geometry(attrs)
    oh, ow = spatial_out(data, kernel, strides, dilation, attrs.padding, attrs.ceil_mode,
                          "pool_size")
    return TensorType(data.shape[:2] + (oh, ow), data.dtype)


def _pool_taps(attrs, x: np.ndarray, value):
    """The windows' taps of ``x`` padded with ``value``, and the per-axis tap indices."""
    kernel, strides, dilation, pads = pool_geometry(attrs)
    oh, ow = runtime_out(x, kernel, strides, dilation, pads, attrs.ceil_mode, "pool_size")
    rows = tap_index(oh, kernel[0], strides[0], dilation[0])
    cols = tap_index(ow, kernel[1], strides[1], dilation[1])
    return window_taps(x, pads, value, rows, cols), (rows, cols), pads


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


def _argmax_type(attrs, d):
    out = _pool_type(attrs, d)
    return TupleType((out, TensorType(out.shape, "int64")))


def _max_pool2d_argmax_ref(attrs, x):
    taps, (rows, cols), ((top, _), (left, _)) = _pool_taps(attrs, x, -np.inf)
    n, c, oh, ow, kh, kw = taps.shape
    flat = taps.reshape(n, c, oh, ow, kh * kw)
    best = np.argmax(flat, axis=-1)  # the first maximum
    values = np.take_along_axis(flat, best[..., None], -1)[..., 0]
    h = rows[np.arange(oh)[:, None], best // kw] - top
    w = cols[np.arange(ow)[None, :], best % kw] - left
    height, width = x.shape[2:]
    inside = (h >= 0) & (h < height) & (w >= 0) & (w < width)
    within = h * width + w if attrs.storage_order == 0 else h + w * height
    plane = (np.arange(n * c) * height * width).reshape(n, c, 1, 1)
    index = np.where(inside, plane + within, -1).astype(np.int64)
    return np.where(inside, values, -np.inf).astype(x.dtype), index


register("nn.max_pool2d_with_argmax", inputs=("data",), infer=_argmax_type,
         reference=_max_pool2d_argmax_ref, pattern=OPAQUE,
         attrs=_POOL_ATTRS + [attr("storage_order", ZERO_OR_ONE, 0)],
         doc="2-D max pooling over NCHW and the int64 position of each maximum in the "
             "flattened input (ONNX MaxPool's Indices; storage_order 1: column-major H, W)")
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


# --- max_unpool ---------------------------------------------------------------------------------


def unpool_sizes(attrs, spatial) -> tuple:
    """The unpooled spatial sizes, ``(in - 1) * stride - pads + kernel`` (symbolic in the
    input's)."""
    k = len(spatial)
    strides = attrs.strides or (1,) * k
    pads = attrs.pads or (0,) * (2 * k)
    if len(attrs.kernel_shape) != k or len(strides) != k or len(pads) != 2 * k:
        raise OpTypeError(f"kernel_shape {list(attrs.kernel_shape)}, strides {list(strides)} "
                          f"and pads {list(pads)} must give {k} spatial axes (pads twice)")
    return tuple((d - 1) * s - pads[i] - pads[i + k] + kk
                 for i, (d, s, kk) in enumerate(zip(spatial, strides, attrs.kernel_shape)))


def unpool_out_sizes(attrs, spatial) -> tuple:
    """The result's spatial sizes: ``output_size``, or the unpooled ones."""
    if attrs.output_size is None:
        return unpool_sizes(attrs, spatial)
    if len(attrs.output_size) != len(spatial):
        raise OpTypeError(f"output_size {list(attrs.output_size)} must give {len(spatial)} "
                          "spatial sizes")
    return tuple(attrs.output_size)


def _unpool_type(attrs, data, indices):
    t, i = tensor_arg(data, "data"), tensor_arg(indices, "indices")
    if t.ndim < 3:
        raise OpTypeError(f"data must be (N, C, spatial...) of rank 3 or more, got "
                          f"{fmt_shape(t.shape)}")
    check_dtype(i, "indices", ("int64",), "dtype int64")
    if i.ndim != t.ndim or any(differ(a, b) for a, b in zip(t.shape, i.shape)):
        raise OpTypeError(f"indices {fmt_shape(i.shape)} must have data's shape "
                          f"{fmt_shape(t.shape)}")
    unpooled = unpool_sizes(attrs, t.shape[2:])
    out = unpool_out_sizes(attrs, t.shape[2:])
    for u, o in zip(unpooled, out):
        if not D.at_most(u, o):
            raise OpTypeError(f"output_size {list(out)} is smaller than the unpooled size "
                              f"{list(unpooled)}")
    return TensorType(t.shape[:2] + out, t.dtype)


def _unpool_ref(attrs, x, index):
    require(index.shape == x.shape, f"nn.max_unpool: indices {index.shape} must have data's "
            f"shape {x.shape}")
    shape = x.shape[:2] + unpool_sizes(attrs, x.shape[2:])
    out_shape = x.shape[:2] + unpool_out_sizes(attrs, x.shape[2:])
    require(all(0 <= d <= o for d, o in zip(shape, out_shape)),
            f"nn.max_unpool: the unpooled shape {shape} is negative or past output_size "
            f"{out_shape}")
    out = np.zeros(int(np.prod(shape)), x.dtype)
    flat = index.reshape(-1)
    bad = (flat < 0) | (flat >= out.size)
    if bad.any():
        raise ValueError(f"nn.max_unpool: index {flat[bad][0]} is out of range for an unpooled "
                         f"tensor of {out.size} elements {shape}")
    out[flat] = x.reshape(-1)  # NumPy: the last of repeated indices stays
    result = np.zeros(out_shape, x.dtype)
    result[tuple(slice(0, d) for d in shape)] = out.reshape(shape)
    return result


register("nn.max_unpool", inputs=("data", "indices"), infer=_unpool_type, reference=_unpool_ref,
         pattern=OPAQUE,
         attrs=[attr("kernel_shape", INTS, required=True), attr("strides", OPT_INTS, None),
                attr("pads", OPT_INTS, None), attr("output_size", OPT_INTS, None)],
         doc="ONNX MaxUnpool: data scattered to the flattened positions indices give in an "
             "(N, C, (in-1)*stride - pads + kernel) tensor of zeros, placed at the start of an "
             "output_size one if given")
