"""Integer products of quantized tensors: ``nn.matmul_integer`` and ``nn.conv2d_integer``
(ONNX MatMulInteger and ConvInteger; the importer builds QLinearMatMul and QLinearConv from them
and an elementwise requantizing epilogue, and QuantizeLinear and DequantizeLinear of
elementwise ops alone).

Each operand is int8 or uint8 (the two may differ), with a zero point of its own dtype, and the
result is int32::

    out = sum over k of (a - a_zero_point) * (b - b_zero_point)

computed exactly and wrapped into int32, as ONNX allows ("the accumulation may overflow if and
only if in 32 bits"): every product fits in 17 bits, so only the sum can wrap, and the C kernels
sum in 32-bit registers with the same wrap-around. Zero points broadcast:

- ``nn.matmul_integer``: ``a_zero_point`` is a scalar or a vector along a's rows (length 1 or
  M), ``b_zero_point`` a scalar or a vector along b's columns (1 or N);
- ``nn.conv2d_integer``: ``data_zero_point`` is a scalar, ``weight_zero_point`` a scalar or a
  vector along the output channels (1 or OC). Padding holds the data's zero point, so it adds
  nothing, as ONNX specifies.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from .common import (broadcast_shapes, cannot_broadcast_to, check_dtype, check_rank, differ,
                     fmt_shape, require, tensor_arg)
from .conv import check_conv_channels, conv2d_geometry, conv2d_sums
from .registry import INT, INT_OR_INTS, OUT_FUSABLE, OpTypeError, attr, register
from .window import spatial_out

#: The dtypes of quantized operands.
QUANTIZED = ("int8", "uint8")
_QUANTIZED = (QUANTIZED, "dtype int8 or uint8")


def _operand(t, name: str) -> TensorType:
    x = tensor_arg(t, name)
    check_dtype(x, name, *_QUANTIZED)
    return x


def _zero_point(t, name: str, of: TensorType, of_name: str, length, along: str,
                vector: bool = True) -> TensorType:
    """A zero point of ``of``'s dtype: a scalar, or (``vector``) one entry per ``along``
    (``length`` of them) or a single one."""
    zp = tensor_arg(t, name)
    if zp.dtype != of.dtype:
        raise OpTypeError(f"{name} must have the dtype of {of_name} ({of.dtype}), got {zp.dtype}")
    if zp.ndim > (1 if vector else 0):
        raise OpTypeError(f"{name} must be a scalar{' or a vector' if vector else ''}, got "
                          f"{fmt_shape(zp.shape)}")
    if zp.ndim == 1 and cannot_broadcast_to(zp.shape[0], length):
        raise OpTypeError(f"{name} {fmt_shape(zp.shape)} must have 1 entry or one per {along} "
                          f"({length})")
    return zp


def _zero_point_ref(zp: np.ndarray, length: int, name: str, along: str) -> np.ndarray:
    """``zp`` as int64, 1-d (a scalar as one entry), checked as the type relation checks it."""
    z = np.asarray(zp, np.int64).reshape(-1)
    require(z.size in (1, length), f"{name} has {z.size} entries; it needs 1 or one per "
                                   f"{along} ({length})")
    return z


def wrap_int32(values: np.ndarray) -> np.ndarray:
    """int64 sums wrapped into int32, as 32-bit accumulation wraps."""
    return values.astype(np.int64).astype(np.int32)


# --- nn.matmul_integer ----------------------------------------------------------------------------

def _matmul_integer_type(attrs, a_t, b_t, za_t, zb_t):
    a, b = _operand(a_t, "a"), _operand(b_t, "b")
    if a.ndim < 2 or b.ndim < 2:
        raise OpTypeError(f"a and b must have rank 2 or more, got {fmt_shape(a.shape)} and "
                          f"{fmt_shape(b.shape)}")
    (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
    if differ(k, k2):
        raise OpTypeError(f"inner dims differ: a {fmt_shape(a.shape)} vs b {fmt_shape(b.shape)}")
    batch = broadcast_shapes(("a's batch dims", a.shape[:-2]), ("b's", b.shape[:-2]))
    _zero_point(za_t, "a_zero_point", a, "a", m, "row of a")
    _zero_point(zb_t, "b_zero_point", b, "b", n, "column of b")
    return TensorType(batch + (m, n), "int32")


def _matmul_integer_ref(attrs, a, b, za, zb):
    require(a.ndim >= 2 and b.ndim >= 2, f"a and b must have rank 2 or more: {a.shape}, "
                                         f"{b.shape}")
    require(a.shape[-1] == b.shape[-2], f"inner dims differ: {a.shape} vs {b.shape}")
    m, n = a.shape[-2], b.shape[-1]
    za = _zero_point_ref(za, m, "a_zero_point", "row of a")
    zb = _zero_point_ref(zb, n, "b_zero_point", "column of b")
    lead = max(a.ndim, b.ndim) - 2
    ba, bb = (1,) * (lead - a.ndim + 2) + a.shape[:-2], (1,) * (lead - b.ndim + 2) + b.shape[:-2]
    require(all(p == q or 1 in (p, q) for p, q in zip(ba, bb)),
            f"batch dims do not broadcast: {a.shape} vs {b.shape}")
    # Exact in int64: |each product| < 2**16 and K < 2**47.
    out = np.matmul(a.astype(np.int64) - za[:, None], b.astype(np.int64) - zb[None, :])
    return wrap_int32(out)


register("nn.matmul_integer", inputs=("a", "b", "a_zero_point", "b_zero_point"),
         infer=_matmul_integer_type, reference=_matmul_integer_ref, pattern=OUT_FUSABLE,
         doc="int32 product of int8/uint8 matrices less their zero points, (..., M, K) x "
             "(..., K, N) -> (..., M, N), batch dims broadcast as NumPy's (ONNX MatMulInteger); "
             "a_zero_point a scalar or one per row, b_zero_point a scalar or one per column; "
             "exact, wrapping in int32")


# --- nn.conv2d_integer ----------------------------------------------------------------------------

_CONV_ATTRS = [attr("strides", INT_OR_INTS, (1, 1)), attr("padding", INT_OR_INTS, (0, 0)),
               attr("dilation", INT_OR_INTS, (1, 1)), attr("groups", INT, 1)]


def _conv2d_integer_type(attrs, x_t, w_t, zx_t, zw_t):
    data, weight = _operand(x_t, "data"), _operand(w_t, "weight")
    check_rank(data, "data", 4)
    check_rank(weight, "weight", 4)
    check_conv_channels(attrs.groups, data, weight)
    strides, dilation, _ = conv2d_geometry(attrs)
    oh, ow = spatial_out(data, weight.shape[2:], strides, dilation, attrs.padding, False,
                         "kernel")
    _zero_point(zx_t, "data_zero_point", data, "data", 1, "tensor", vector=False)
    _zero_point(zw_t, "weight_zero_point", weight, "weight", weight.shape[0], "output channel")
    return TensorType((data.shape[0], weight.shape[0], oh, ow), "int32")


def _conv2d_integer_ref(attrs, x, w, zx, zw):
    require(x.ndim == 4 and w.ndim == 4, f"data and weight must be 4-d: {x.shape}, {w.shape}")
    zx = _zero_point_ref(zx, 1, "data_zero_point", "tensor")
    zw = _zero_point_ref(zw, w.shape[0], "weight_zero_point", "output channel")
    # The zero points subtracted first, so the zero padding stands for the data's zero point.
    sums = conv2d_sums(attrs, x.astype(np.int64) - zx[0],
                       w.astype(np.int64) - zw.reshape(-1, 1, 1, 1))
    return wrap_int32(sums)


register("nn.conv2d_integer", inputs=("data", "weight", "data_zero_point", "weight_zero_point"),
         infer=_conv2d_integer_type, reference=_conv2d_integer_ref, pattern=OUT_FUSABLE,
         attrs=_CONV_ATTRS,
         doc="int32 2-D convolution of int8/uint8 NCHW data and OIHW weight less their zero "
             "points (ONNX ConvInteger), with groups and dilation; padding holds the data's zero "
             "point; weight_zero_point a scalar or one per output channel; exact, wrapping in "
             "int32")
