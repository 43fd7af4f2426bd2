"""``nn.conv2d_transpose``: the gradient of conv2d with respect to its input, as Relay defines it.

NCHW data and IOHW weight ``(C_in, C_out / groups, kH, kW)`` (ONNX's ConvTranspose layout).
Each output dim is ``(in - 1) * stride + dilation * (k - 1) + 1 + output_padding - before -
after``: the full scatter of every input pixel through the kernel, grown by ``output_padding``
at the bottom/right (with zeros where no tap lands), then cropped by ``padding`` (1, 2 or 4 ints,
as conv2d takes them). Products accumulate in float64 and round once to the output dtype.
"""

from __future__ import annotations

import numpy as np

from ..ir import dims as D
from ..ir.types import TensorType
from .common import (FLOATS, acc_dtype, check_dtype, check_rank, differ, fmt_shape, np_dtype,
                     out_dtype, require, same_dtype, tensor_arg)
from .conv import check_kernel_size
from .window import pad_pairs, pair
from .registry import (DTYPE_OR_EMPTY, INT, INT_OR_INTS, OPAQUE, OPT_INT, OPT_INT_OR_INTS,
                       OUT_FUSABLE, OpTypeError, attr, choice, register)


def _geometry(attrs):
    strides = pair(attrs.strides, "strides", 1)
    dilation = pair(attrs.dilation, "dilation", 1)
    out_pad = pair(attrs.output_padding, "output_padding", 0)
    return strides, dilation, out_pad, pad_pairs(attrs.padding)


def _out_len(size, k, s, d, o, pad):
    return (size - 1) * s + d * (k - 1) + 1 + o - pad[0] - pad[1]


def _check_channels(data, weight, g: int, layout: str):
    """The weight's input channels (its first dim) are data's, a multiple of ``g``."""
    if g < 1:
        raise OpTypeError(f"groups must be >= 1, got {g}")
    in_c = weight.shape[0]
    if differ(data.shape[1], in_c):
        raise OpTypeError(f"input channels differ: data {fmt_shape(data.shape)} vs weight "
                          f"{fmt_shape(weight.shape)} ({layout})")
    if differ(D.mod(in_c, g), 0):
        raise OpTypeError(f"input channels of weight {fmt_shape(weight.shape)} are not a "
                          f"multiple of groups={g}")


def _out_dims(attrs, data, kernel, strides, dilation, out_pad, pads) -> list:
    """The spatial dims of the result, one per kernel dim; an error where padding crops all."""
    out = []
    for size, k, s, dl, o, p in zip(data.shape[2:], kernel, strides, dilation, out_pad, pads):
        n = _out_len(size, k, s, dl, o, p)
        if not D.at_most(0, n):
            raise OpTypeError(f"padding {attrs.padding} crops more than the output of data "
                              f"{fmt_shape(data.shape)} holds")
        out.append(n)
    return out


def _operands(d, w, rank: int):
    """A transposed conv's data and weight, both float tensors of ``rank``, and their dtype."""
    data, weight = tensor_arg(d, "data"), tensor_arg(w, "weight")
    dtype = same_dtype(("data", data), ("weight", weight))
    check_dtype(data, "data", FLOATS, "a float dtype")
    check_rank(data, "data", rank)
    check_rank(weight, "weight", rank)
    return data, weight, dtype


def _conv2d_transpose_type(attrs, d, w):
    data, weight, dtype = _operands(d, w, 4)
    g = attrs.groups
    _check_channels(data, weight, g, "IOHW")
    _, out_per_group, kh, kw = weight.shape
    out_c = out_per_group * g
    if attrs.channels is not None and differ(attrs.channels, out_c):
        raise OpTypeError(f"channels={attrs.channels} but weight {fmt_shape(weight.shape)} with "
                          f"groups={g} gives {D.dim_str(out_c)}")
    check_kernel_size(attrs, weight, kh, kw)
    out = _out_dims(attrs, data, (kh, kw), *_geometry(attrs))
    return TensorType((data.shape[0], out_c, out[0], out[1]), out_dtype(attrs, dtype))


def _conv2d_transpose_ref(attrs, x, w):
    strides, dilation, out_pad, pads = _geometry(attrs)
    g = attrs.groups
    n, c, h, wd = x.shape
    in_c, opg, kh, kw = w.shape
    require(c == in_c and in_c % g == 0,
             f"input channels differ: data {x.shape} vs weight {w.shape} with groups={g}")
    acc = acc_dtype(x.dtype)
    xs = x.astype(acc).reshape(n, g, in_c // g, h, wd)
    ws = w.astype(acc).reshape(g, in_c // g, opg, kh, kw)
    full_h = max((h - 1) * strides[0] + dilation[0] * (kh - 1) + 1, 0) + out_pad[0]
    full_w = max((wd - 1) * strides[1] + dilation[1] * (kw - 1) + 1, 0) + out_pad[1]
    full = np.zeros((n, g, opg, full_h, full_w), acc)
    if h and wd:
        for i in range(kh):
            for j in range(kw):
                rows = slice(i * dilation[0], i * dilation[0] + (h - 1) * strides[0] + 1,
                             strides[0])
                cols = slice(j * dilation[1], j * dilation[1] + (wd - 1) * strides[1] + 1,
                             strides[1])
                full[:, :, :, rows, cols] += np.einsum("ngchw,gco->ngohw", xs, ws[..., i, j])
    (top, bottom), (left, right) = pads
    oh = _out_len(h, kh, strides[0], dilation[0], out_pad[0], pads[0])
    ow = _out_len(wd, kw, strides[1], dilation[1], out_pad[1], pads[1])
    require(oh >= 0 and ow >= 0, f"padding {attrs.padding} crops more than the output holds")
    out = full[:, :, :, top:top + oh, left:left + ow]
    return out.reshape(n, g * opg, oh, ow).astype(np_dtype(attrs.out_dtype or x.dtype.name))


register("nn.conv2d_transpose", inputs=("data", "weight"), infer=_conv2d_transpose_type,
         reference=_conv2d_transpose_ref, pattern=OUT_FUSABLE,
         attrs=[
             attr("strides", INT_OR_INTS, (1, 1)), attr("padding", INT_OR_INTS, (0, 0)),
             attr("dilation", INT_OR_INTS, (1, 1)), attr("groups", INT, 1),
             attr("output_padding", INT_OR_INTS, (0, 0)),
             attr("channels", OPT_INT), attr("kernel_size", OPT_INT_OR_INTS),
             attr("data_layout", choice("NCHW"), "NCHW"),
             attr("kernel_layout", choice("IOHW"), "IOHW"),
             attr("out_layout", choice("", "NCHW"), ""), attr("out_dtype", DTYPE_OR_EMPTY, "")],
         doc="2-D transposed convolution, NCHW data and IOHW weight, with groups, dilation and "
             "output_padding")


# --- nn.conv3d_transpose --------------------------------------------------------------------------

def _triple(v, name: str, least: int) -> tuple[int, int, int]:
    out = (v,) if isinstance(v, int) else tuple(v)
    if len(out) == 1:
        out = out * 3
    if len(out) != 3 or min(out) < least:
        raise OpTypeError(f"{name} must be 1 or 3 ints >= {least}, got {v}")
    return out  # type: ignore[return-value]


def geometry3d(attrs):
    """strides, dilation, output_padding and ((before, after) per axis) of a 3-d transposed
    conv; ``padding`` is 1 int, 3 (both sides) or 6 (the three befores, then the afters)."""
    p = (attrs.padding,) if isinstance(attrs.padding, int) else tuple(attrs.padding)
    if len(p) not in (1, 3, 6) or min(p) < 0:
        raise OpTypeError(f"padding must be 1, 3 or 6 ints >= 0, got {attrs.padding}")
    p = p * 3 if len(p) == 1 else p
    pads = tuple(zip(p[:3], p[3:])) if len(p) == 6 else tuple((v, v) for v in p)
    if attrs.groups < 1:
        raise OpTypeError(f"groups must be >= 1, got {attrs.groups}")
    return (_triple(attrs.strides, "strides", 1), _triple(attrs.dilation, "dilation", 1),
            _triple(attrs.output_padding, "output_padding", 0), pads)


def _conv3d_transpose_type(attrs, d, w):
    data, weight, dtype = _operands(d, w, 5)
    geometry = geometry3d(attrs)
    g = attrs.groups
    _check_channels(data, weight, g, "IODHW")
    out = _out_dims(attrs, data, weight.shape[2:], *geometry)
    return TensorType((data.shape[0], weight.shape[1] * g, *out), dtype)


def _conv3d_transpose_ref(attrs, x, w):
    strides, dilation, out_pad, pads = geometry3d(attrs)
    g = attrs.groups
    n, c = x.shape[:2]
    in_c, opg = w.shape[:2]
    require(c == in_c and in_c % g == 0,
            f"input channels differ: data {x.shape} vs weight {w.shape} with groups={g}")
    size, kern = x.shape[2:], w.shape[2:]
    outs = [_out_len(*a) for a in zip(size, kern, strides, dilation, out_pad, pads)]
    require(min(outs) >= 0, f"padding {attrs.padding} crops more than the output holds")
    full = [max((i - 1) * s + dl * (k - 1) + 1, 0) + o
            for i, k, s, dl, o in zip(size, kern, strides, dilation, out_pad)]
    xs = x.astype(np.float64).reshape(n, g, in_c // g, *size)
    ws = w.astype(np.float64).reshape(g, in_c // g, opg, *kern)
    acc = np.zeros((n, g, opg, *full))
    if min(size) > 0:
        for tap in np.ndindex(*kern):
            where = tuple(slice(t * dl, t * dl + (i - 1) * s + 1, s)
                          for t, dl, i, s in zip(tap, dilation, size, strides))
            acc[(slice(None),) * 3 + where] += np.einsum("ngcdhw,gco->ngodhw", xs,
                                                         ws[(Ellipsis,) + tap])
    crop = tuple(slice(p[0], p[0] + o) for p, o in zip(pads, outs))
    return acc[(slice(None),) * 3 + crop].reshape(n, g * opg, *outs).astype(x.dtype)


register("nn.conv3d_transpose", inputs=("data", "weight"), infer=_conv3d_transpose_type,
         reference=_conv3d_transpose_ref, pattern=OPAQUE,
         attrs=[attr("strides", INT_OR_INTS, (1, 1, 1)), attr("padding", INT_OR_INTS, (0, 0, 0)),
                attr("dilation", INT_OR_INTS, (1, 1, 1)), attr("groups", INT, 1),
                attr("output_padding", INT_OR_INTS, (0, 0, 0))],
         doc="3-D transposed convolution, NCDHW data and IODHW weight, with groups, dilation "
             "and output_padding (padding: 1, 3 or 6 ints)")
