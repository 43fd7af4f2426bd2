"""Convolution: nn.conv2d (NCHW or NHWC data, OIHW weight, groups and dilation).

``data_layout`` is ``"NCHW"`` (the default, ONNX's) or ``"NHWC"`` (channels last: data
``(N, H, W, C)`` and output ``(N, OH, OW, OC)``, what the channels-last pass,
``passes/layout.py``, turns conv chains into); the weight is OIHW either way, and
``out_layout`` is empty or the data's layout. Any other layout is an attribute error. The window
attributes are those of ``window.py``. Convolution accumulates in float64 and rounds once to the
output dtype.
"""

from __future__ import annotations

import numpy as np

from ..ir import dims as D
from ..ir.dims import Dim
from ..ir.types import TensorType
from .common import (FLOATS, acc_dtype, check_dtype, check_rank, differ, fmt_shape, np_dtype,
                     out_dtype, require, same_dtype, tensor_arg)
from .registry import (DTYPE_OR_EMPTY, INT, INT_OR_INTS, OPT_INT, OPT_INT_OR_INTS, OUT_FUSABLE,
                       OpTypeError, attr, choice, register)
from .window import pad_pairs, pair, runtime_out, spatial_out, tap_index, window_taps

_FLOAT = (FLOATS, "a float dtype")


def conv2d_geometry(attrs):
    return (pair(attrs.strides, "strides", 1), pair(attrs.dilation, "dilation", 1),
            pad_pairs(attrs.padding))


def _check_conv_weight(attrs, data: TensorType, weight: TensorType) -> None:
    """Channels, groups, and the optional ``channels``/``kernel_size`` against the weight."""
    check_conv_channels(attrs.groups, data, weight)
    out_c, _, kh, kw = weight.shape
    if attrs.channels is not None and differ(attrs.channels, out_c):
        raise OpTypeError(f"channels={attrs.channels} but weight {fmt_shape(weight.shape)} "
                          f"has {D.dim_str(out_c)}")
    check_kernel_size(attrs, weight, kh, kw)


def check_conv_channels(g: int, data: TensorType, weight: TensorType) -> None:
    """NCHW ``data``'s channels against OIHW ``weight`` in ``g`` groups."""
    out_c, in_c = weight.shape[:2]
    if g < 1:
        raise OpTypeError(f"groups must be >= 1, got {g}")
    if differ(data.shape[1], in_c * g):
        raise OpTypeError(f"input channels differ: data {fmt_shape(data.shape)} vs weight "
                          f"{fmt_shape(weight.shape)} with groups={g}")
    if differ(D.mod(out_c, g), 0):
        raise OpTypeError(f"output channels of weight {fmt_shape(weight.shape)} are not a "
                          f"multiple of groups={g}")


def check_kernel_size(attrs, weight: TensorType, kh: Dim, kw: Dim) -> None:
    """The optional ``kernel_size`` attribute must agree with the weight's window."""
    if attrs.kernel_size is not None:
        ks = pair(attrs.kernel_size, "kernel_size", 1)
        if differ(ks[0], kh) or differ(ks[1], kw):
            raise OpTypeError(f"kernel_size={list(ks)} but weight {fmt_shape(weight.shape)} "
                              f"has ({D.dim_str(kh)}, {D.dim_str(kw)})")


#: The axes of NHWC data in NCHW order, and back.
TO_NCHW, TO_NHWC = (0, 3, 1, 2), (0, 2, 3, 1)


def channels_last(attrs) -> bool:
    """Whether a conv's data and output are NHWC."""
    return attrs.data_layout == "NHWC"


def _check_out_layout(attrs) -> None:
    if attrs.out_layout not in ("", attrs.data_layout):
        raise OpTypeError(f"out_layout {attrs.out_layout!r} must be empty or the data layout "
                          f"{attrs.data_layout!r}")


def _conv2d_type(attrs, d, w):
    data, weight = tensor_arg(d, "data"), tensor_arg(w, "weight")
    dtype = same_dtype(("data", data), ("weight", weight))
    check_dtype(data, "data", *_FLOAT)
    check_rank(data, "data", 4)
    check_rank(weight, "weight", 4)
    _check_out_layout(attrs)
    nhwc = channels_last(attrs)
    if nhwc:  # the checks and the window rules read NCHW
        data = TensorType(tuple(data.shape[a] for a in TO_NCHW), data.dtype)
    _check_conv_weight(attrs, data, weight)
    strides, dilation, _ = conv2d_geometry(attrs)
    oh, ow = spatial_out(data, weight.shape[2:], strides, dilation, attrs.padding, False,
                          "kernel")
    n, oc = data.shape[0], weight.shape[0]
    return TensorType((n, oh, ow, oc) if nhwc else (n, oc, oh, ow), out_dtype(attrs, dtype))


def _conv2d_ref(attrs, x, w):
    if channels_last(attrs):
        return np.ascontiguousarray(_conv2d_nchw_ref(attrs, x.transpose(TO_NCHW), w)
                                    .transpose(TO_NHWC))
    return _conv2d_nchw_ref(attrs, x, w)


def _conv2d_nchw_ref(attrs, x, w):
    acc = acc_dtype(x.dtype)
    out = conv2d_sums(attrs, x.astype(acc), w.astype(acc))
    return out.astype(np_dtype(attrs.out_dtype or x.dtype.name))


def conv2d_sums(attrs, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """NCHW ``x`` convolved with OIHW ``w`` (zero padding) in their own (common) dtype, in
    which the products are summed: the references' accumulator."""
    strides, dilation, pads = conv2d_geometry(attrs)
    g, (n, c) = attrs.groups, x.shape[:2]
    out_c, in_c, kh, kw = w.shape
    require(c == in_c * g, f"input channels differ: data {x.shape} vs weight {w.shape} "
                            f"with groups={g}")
    oh, ow = runtime_out(x, (kh, kw), strides, dilation, pads, False, "kernel")
    rows = tap_index(oh, kh, strides[0], dilation[0])
    cols = tap_index(ow, kw, strides[1], dilation[1])
    taps = window_taps(x, pads, 0, rows, cols).reshape(n, g, in_c, oh, ow, kh, kw)
    weight = w.reshape(g, out_c // g, in_c, kh, kw)
    # Group g's output channels read only group g's input channels.
    out = np.einsum("ngchwij,gocij->ngohw", taps, weight)
    return out.reshape(n, out_c, oh, ow)


register("nn.conv2d", inputs=("data", "weight"), infer=_conv2d_type, reference=_conv2d_ref,
         pattern=OUT_FUSABLE,
         attrs=[
             attr("strides", INT_OR_INTS, (1, 1)), attr("padding", INT_OR_INTS, (0, 0)),
             attr("dilation", INT_OR_INTS, (1, 1)), attr("groups", INT, 1),
             attr("channels", OPT_INT), attr("kernel_size", OPT_INT_OR_INTS),
             attr("data_layout", choice("NCHW", "NHWC"), "NCHW"),
             attr("kernel_layout", choice("OIHW"), "OIHW"),
             attr("out_layout", choice("", "NCHW", "NHWC"), ""),
             attr("out_dtype", DTYPE_OR_EMPTY, "")],
         doc="2-D convolution, NCHW (or NHWC) data and OIHW weight, with groups and dilation")
