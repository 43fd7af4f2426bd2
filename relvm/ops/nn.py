"""Neural-network ops: dense and matmuls, conv2d, pooling, normalization, softmax, pad, dropout.

Only the NCHW data and OIHW kernel layouts are implemented. Relay's layout attributes are
accepted (Relay's printer always writes them), and any other layout is an attribute error.

Semantics fixed here, which the kernels follow:

* Products accumulate in float64 for float inputs. Integer inputs accumulate in int64 and the
  result is cast to ``out_dtype``, which wraps exactly as accumulating in that dtype would.
  ``out_dtype=""`` means the input dtype; it must be of the same kind (float or integer).
* ``padding`` takes 1, 2 or 4 ints as Relay does: every side; (top/bottom, left/right);
  (top, left, bottom, right). ``strides``, ``dilation``, ``pool_size`` take 1 or 2 ints.
* Pooling with ``ceil_mode`` follows PyTorch: the output grows by one where the last window
  would be partial, but every window must start inside the input or its top/left padding.
* ``max_pool2d`` ignores padding; a window that covers no input gives -inf. ``avg_pool2d``
  divides by the taps inside the padded input (``count_include_pad``) or inside the input
  (not); a window covering no input gives 0, as PyTorch's CPU kernel does.
* Softmax and the norms compute in float64 and round once to the input dtype.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..ir import dims as D
from ..ir.dims import Dim
from ..ir.types import TensorType, TupleType
from .common import (FLOATS, NUMERIC, check_dtype, check_rank, fmt_shape, normalize_axis,
                     np_dtype, same_dtype, tensor_arg)
from .registry import (BOOL, BROADCAST, DTYPE_OR_EMPTY, FLOAT, INJECTIVE, INT, INT_OR_INTS,
                       NESTED_INTS, OPAQUE, OPT_INT, OPT_INT_OR_INTS, OUT_FUSABLE, OpTypeError,
                       attr, choice, register)

_FLOAT = (FLOATS, "a float dtype")
_NUMBER = (NUMERIC, "a numeric dtype")


def _require(ok: bool, message: str) -> None:
    """A run-time shape check in a reference: the VM raises the same error."""
    if not ok:
        raise ValueError(message)


def _acc_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dtype.kind == "f" else np.dtype(np.int64)


def _out_dtype(attrs, dtype: str) -> str:
    """``out_dtype``, defaulting to the input dtype; a float/int switch is refused."""
    out = attrs.out_dtype or dtype
    if (out in FLOATS) != (dtype in FLOATS):
        raise OpTypeError(f"out_dtype {out} does not suit {dtype} inputs")
    return out


def _differ(a: Dim, b: Dim) -> bool:
    """True only when ``a`` and ``b`` provably differ; unknowns are left to the VM."""
    return D.prove_equal(a, b) is False


# --- dense and matmuls ----------------------------------------------------------------------------

def _check_units(attrs, units: Dim, name: str, t: TensorType) -> Dim:
    """The output width: ``attrs.units`` when given (it must match the weight), else ``units``."""
    if attrs.units is None:
        return units
    if _differ(attrs.units, units):
        raise OpTypeError(f"units={attrs.units} but {name} {fmt_shape(t.shape)} gives {units}")
    return attrs.units


def _dense_type(attrs, d, w):
    data, weight = tensor_arg(d, "data"), tensor_arg(w, "weight")
    dtype = same_dtype(("data", data), ("weight", weight))
    check_dtype(data, "data", *_NUMBER)
    check_rank(weight, "weight", 2)
    if data.ndim < 1:
        raise OpTypeError(f"data must have rank >= 1, got {fmt_shape(data.shape)}")
    if _differ(data.shape[-1], weight.shape[1]):
        raise OpTypeError(f"inner dims differ: data {fmt_shape(data.shape)} vs "
                          f"weight {fmt_shape(weight.shape)}")
    units = _check_units(attrs, weight.shape[0], "weight", weight)
    return TensorType(data.shape[:-1] + (units,), _out_dtype(attrs, dtype))


def _matmul_ref(a: np.ndarray, b: np.ndarray, out_dtype: str) -> np.ndarray:
    _require(a.shape[-1] == b.shape[-2],
             f"inner dims differ: {a.shape[-1]} vs {b.shape[-2]} (shapes {a.shape}, {b.shape})")
    acc = _acc_dtype(a.dtype)
    return np.matmul(a.astype(acc), b.astype(acc)).astype(np_dtype(out_dtype))


def _dense_ref(attrs, data, weight):
    out_dtype = attrs.out_dtype or data.dtype.name
    return _matmul_ref(data, weight.T, out_dtype)


register("nn.dense", inputs=("data", "weight"), infer=_dense_type, reference=_dense_ref,
         pattern=OUT_FUSABLE,
         attrs=[attr("units", OPT_INT), attr("out_dtype", DTYPE_OR_EMPTY, "")],
         doc="data (..., K) times weight (U, K) transposed -> (..., U)")


_MATMUL_ATTRS = [attr("out_dtype", DTYPE_OR_EMPTY, ""), attr("transpose_a", BOOL, False)]


def _transposed(t: TensorType, flag: bool) -> tuple[Dim, ...]:
    """The shape of ``t`` with its last two dims swapped when ``flag`` is set."""
    return t.shape[:-2] + (t.shape[-1], t.shape[-2]) if flag else t.shape


def _inner_mismatch(a: TensorType, b: TensorType, attrs) -> OpTypeError:
    return OpTypeError(f"inner dims differ: tensor_a {fmt_shape(a.shape)} vs tensor_b "
                       f"{fmt_shape(b.shape)} (transpose_a={attrs.transpose_a}, "
                       f"transpose_b={attrs.transpose_b})")


def _matmul_type(attrs, x, y):
    a, b = tensor_arg(x, "tensor_a"), tensor_arg(y, "tensor_b")
    dtype = same_dtype(("tensor_a", a), ("tensor_b", b))
    check_dtype(a, "tensor_a", *_NUMBER)
    check_rank(a, "tensor_a", 2)
    check_rank(b, "tensor_b", 2)
    (m, k), (k2, n) = _transposed(a, attrs.transpose_a), _transposed(b, attrs.transpose_b)
    if _differ(k, k2):
        raise _inner_mismatch(a, b, attrs)
    units = _check_units(attrs, n, "tensor_b", b)
    return TensorType((m, units), _out_dtype(attrs, dtype))


def _matmul_family_ref(attrs, a, b):
    a = np.swapaxes(a, -1, -2) if attrs.transpose_a else a
    b = np.swapaxes(b, -1, -2) if attrs.transpose_b else b
    return _matmul_ref(a, b, attrs.out_dtype or a.dtype.name)


register("nn.matmul", inputs=("tensor_a", "tensor_b"), infer=_matmul_type,
         reference=_matmul_family_ref, pattern=OUT_FUSABLE,
         attrs=[attr("units", OPT_INT)] + _MATMUL_ATTRS + [attr("transpose_b", BOOL, False)],
         doc="2-D matrix product, either operand optionally transposed")


def _batch_matmul_type(attrs, x, y):
    a, b = tensor_arg(x, "tensor_a"), tensor_arg(y, "tensor_b")
    dtype = same_dtype(("tensor_a", a), ("tensor_b", b))
    check_dtype(a, "tensor_a", *_NUMBER)
    check_rank(a, "tensor_a", 3)
    check_rank(b, "tensor_b", 3)
    (batch_a, m, k), (batch_b, k2, n) = (_transposed(a, attrs.transpose_a),
                                         _transposed(b, attrs.transpose_b))
    if _differ(k, k2):
        raise _inner_mismatch(a, b, attrs)
    try:
        batch = D.broadcast(batch_a, batch_b)
    except ValueError:
        raise OpTypeError(f"batch dims do not broadcast: tensor_a {fmt_shape(a.shape)} vs "
                          f"tensor_b {fmt_shape(b.shape)}") from None
    return TensorType((batch, m, n), _out_dtype(attrs, dtype))


def _batch_matmul_ref(attrs, a, b):
    _require(a.shape[0] == b.shape[0] or 1 in (a.shape[0], b.shape[0]),
             f"batch dims do not broadcast: {a.shape} vs {b.shape}")
    return _matmul_family_ref(attrs, a, b)


register("nn.batch_matmul", inputs=("tensor_a", "tensor_b"), infer=_batch_matmul_type,
         reference=_batch_matmul_ref, pattern=OUT_FUSABLE,
         attrs=_MATMUL_ATTRS + [attr("transpose_b", BOOL, True)],
         doc="batched matrix product (B, M, K) x (B, N, K) -> (B, M, N); batch 1 broadcasts")


# --- bias_add -------------------------------------------------------------------------------------

def _bias_add_type(attrs, d, b):
    data, bias = tensor_arg(d, "data"), tensor_arg(b, "bias")
    same_dtype(("data", data), ("bias", bias))
    check_dtype(data, "data", *_NUMBER)
    check_rank(bias, "bias", 1)
    axis = normalize_axis(attrs.axis, data.ndim)
    if _differ(bias.shape[0], data.shape[axis]):
        raise OpTypeError(f"bias length differs from data axis {attrs.axis}: data "
                          f"{fmt_shape(data.shape)} vs bias {fmt_shape(bias.shape)}")
    return data


def _along_axis(v: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """A 1-D ``v`` reshaped to broadcast along ``axis`` of a rank-``ndim`` tensor."""
    shape = [1] * ndim
    shape[axis] = v.shape[0]
    return v.reshape(shape)


def _bias_add_ref(attrs, data, bias):
    axis = normalize_axis(attrs.axis, data.ndim)
    _require(bias.shape[0] == data.shape[axis],
             f"bias length {bias.shape[0]} differs from data axis {axis} ({data.shape})")
    return (data + _along_axis(bias, axis, data.ndim)).astype(data.dtype)


register("nn.bias_add", inputs=("data", "bias"), infer=_bias_add_type, reference=_bias_add_ref,
         pattern=BROADCAST, attrs=[attr("axis", INT, 1)],
         doc="add a 1-D bias along one axis of data")


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
        _require(size + p[0] + p[1] >= d * (k - 1) + 1,
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
    if _differ(data.shape[1], in_c * g):
        raise OpTypeError(f"input channels differ: data {fmt_shape(data.shape)} vs weight "
                          f"{fmt_shape(weight.shape)} with groups={g}")
    if _differ(D.mod(out_c, g), 0):
        raise OpTypeError(f"output channels of weight {fmt_shape(weight.shape)} are not a "
                          f"multiple of groups={g}")
    if attrs.channels is not None and _differ(attrs.channels, out_c):
        raise OpTypeError(f"channels={attrs.channels} but weight {fmt_shape(weight.shape)} "
                          f"has {D.dim_str(out_c)}")
    if attrs.kernel_size is not None:
        ks = _pair(attrs.kernel_size, "kernel_size", 1)
        if _differ(ks[0], kh) or _differ(ks[1], kw):
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
    return TensorType((data.shape[0], weight.shape[0], oh, ow), _out_dtype(attrs, dtype))


def _conv2d_ref(attrs, x, w):
    strides, dilation, pads = _conv2d_geometry(attrs)
    g, (n, c) = attrs.groups, x.shape[:2]
    out_c, in_c, kh, kw = w.shape
    _require(c == in_c * g, f"input channels differ: data {x.shape} vs weight {w.shape} "
                            f"with groups={g}")
    oh, ow = _runtime_out(x, (kh, kw), strides, dilation, pads, False, "kernel")
    acc = _acc_dtype(x.dtype)
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
        _require(x.shape[0] * x.shape[1] == 0, f"global_max_pool2d of an empty image {x.shape}")
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


# --- normalization and softmax -----------------------------------------------------------------

def _check_channel_params(data: TensorType, axis: int, named: Sequence[tuple[str, TensorType]]):
    """Each named tensor must be 1-D with data's length along ``axis`` and data's dtype."""
    same_dtype(("data", data), *named)
    for name, t in named:
        check_rank(t, name, 1)
        if _differ(t.shape[0], data.shape[axis]):
            raise OpTypeError(f"{name} length differs from data axis {axis}: data "
                              f"{fmt_shape(data.shape)} vs {name} {fmt_shape(t.shape)}")


_BN_PARAMS = ("gamma", "beta", "moving_mean", "moving_var")


def _batch_norm_type(attrs, d, *params):
    data = tensor_arg(d, "data")
    check_dtype(data, "data", *_FLOAT)
    axis = normalize_axis(attrs.axis, data.ndim)
    named = [(n, tensor_arg(t, n)) for n, t in zip(_BN_PARAMS, params)]
    _check_channel_params(data, axis, named)
    channel = TensorType((data.shape[axis],), data.dtype)
    return TupleType((data, channel, channel))


def _normalize(x, mean, var, gamma, beta, attrs) -> np.ndarray:
    """(x - mean) / sqrt(var + epsilon), scaled and shifted as ``scale``/``center`` say."""
    y = (x - mean) / np.sqrt(var + attrs.epsilon)
    if attrs.scale:
        y = y * gamma
    if attrs.center:
        y = y + beta
    return y


def _batch_norm_ref(attrs, x, gamma, beta, mean, var):
    axis = normalize_axis(attrs.axis, x.ndim)
    for name, v in zip(_BN_PARAMS, (gamma, beta, mean, var)):
        _require(v.shape == (x.shape[axis],), f"{name} {v.shape} does not match data axis "
                                              f"{axis} of {x.shape}")
    col = [_along_axis(v.astype(np.float64), axis, x.ndim) for v in (mean, var, gamma, beta)]
    y = _normalize(x.astype(np.float64), *col, attrs).astype(x.dtype)
    return y, mean.copy(), var.copy()


register("nn.batch_norm", inputs=("data",) + _BN_PARAMS, infer=_batch_norm_type,
         reference=_batch_norm_ref, pattern=OPAQUE,
         attrs=[attr("axis", INT, 1), attr("epsilon", FLOAT, 1e-5), attr("center", BOOL, True),
                attr("scale", BOOL, True)],
         doc="inference batch norm; returns (out, moving_mean, moving_var) as Relay does")


def _layer_norm_type(attrs, d, g, b):
    data = tensor_arg(d, "data")
    check_dtype(data, "data", *_FLOAT)
    axis = normalize_axis(attrs.axis, data.ndim)
    _check_channel_params(data, axis, [("gamma", tensor_arg(g, "gamma")),
                                       ("beta", tensor_arg(b, "beta"))])
    return data


def _layer_norm_ref(attrs, x, gamma, beta):
    axis = normalize_axis(attrs.axis, x.ndim)
    x64 = x.astype(np.float64)
    # Biased variance, as Relay and PyTorch use; an empty axis gives NaN.
    mean = x64.mean(axis=axis, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axis, keepdims=True)
    params = [_along_axis(v.astype(np.float64), axis, x.ndim) for v in (gamma, beta)]
    return _normalize(x64, mean, var, *params, attrs).astype(x.dtype)


register("nn.layer_norm", inputs=("data", "gamma", "beta"), infer=_layer_norm_type,
         reference=_layer_norm_ref, pattern=OPAQUE,
         attrs=[attr("axis", INT, -1), attr("epsilon", FLOAT, 1e-5), attr("center", BOOL, True),
                attr("scale", BOOL, True)],
         doc="normalize along one axis, then scale by gamma and shift by beta")


def _softmax_type(attrs, d):
    data = tensor_arg(d, "data")
    check_dtype(data, "data", *_FLOAT)
    normalize_axis(attrs.axis, data.ndim)
    return data


def _shifted(x: np.ndarray, axis: int) -> np.ndarray:
    """x minus its max along ``axis``, so exp cannot overflow (empty axes stay empty)."""
    x64 = x.astype(np.float64)
    return x64 - x64.max(axis=axis, keepdims=True, initial=-np.inf)


def _softmax_ref(attrs, x):
    e = np.exp(_shifted(x, attrs.axis))
    return (e / e.sum(axis=attrs.axis, keepdims=True)).astype(x.dtype)


def _log_softmax_ref(attrs, x):
    s = _shifted(x, attrs.axis)
    with np.errstate(divide="ignore"):  # log(0) only arises for an empty axis
        return (s - np.log(np.exp(s).sum(axis=attrs.axis, keepdims=True))).astype(x.dtype)


register("nn.softmax", inputs=("data",), infer=_softmax_type, reference=_softmax_ref,
         pattern=OPAQUE, attrs=[attr("axis", INT, -1)], doc="exp(x) / sum(exp(x)) along axis")
register("nn.log_softmax", inputs=("data",), infer=_softmax_type, reference=_log_softmax_ref,
         pattern=OPAQUE, attrs=[attr("axis", INT, -1)], doc="log of softmax, computed stably")


# --- reshaping: batch_flatten, pad ------------------------------------------------------------

def _batch_flatten_type(attrs, d):
    data = tensor_arg(d, "data")
    if data.ndim < 1:
        raise OpTypeError(f"data must have rank >= 1, got {fmt_shape(data.shape)}")
    rest: Dim = 1
    for dim in data.shape[1:]:
        rest = rest * dim
    return TensorType((data.shape[0], rest), data.dtype)


register("nn.batch_flatten", inputs=("data",), infer=_batch_flatten_type,
         reference=lambda attrs, x: x.reshape(x.shape[0], math.prod(x.shape[1:])),
         pattern=INJECTIVE, doc="(N, a, b, ...) -> (N, a*b*...)")


def _pad_widths(attrs, data: TensorType) -> tuple[tuple[int, int], ...]:
    widths = attrs.pad_width
    if len(widths) != data.ndim or any(len(w) != 2 for w in widths):
        raise OpTypeError(f"pad_width must give (before, after) for each of the {data.ndim} "
                          f"axes of data {fmt_shape(data.shape)}, got {[list(w) for w in widths]}")
    if any(min(w) < 0 for w in widths):
        raise OpTypeError(f"pad_width must not be negative, got {[list(w) for w in widths]}")
    return widths


def _check_pad_source(mode: str, size: Dim, width: tuple[int, int], axis: int, data) -> None:
    """``edge`` needs a non-empty axis and ``reflect`` pads shorter than the axis (if padded)."""
    if mode == "constant" or max(width) == 0 or not D.is_static(size):
        return
    if (mode == "edge" and size < 1) or (mode == "reflect" and max(width) >= size):
        raise OpTypeError(f"pad_mode={mode!r} cannot pad axis {axis} of data "
                          f"{fmt_shape(data.shape)} by {list(width)}")


def _pad_type(attrs, d, v):
    data, value = tensor_arg(d, "data"), tensor_arg(v, "pad_value")
    same_dtype(("data", data), ("pad_value", value))
    if value.ndim != 0:
        raise OpTypeError(f"pad_value must be a scalar, got {fmt_shape(value.shape)}")
    widths = _pad_widths(attrs, data)
    for axis, (size, w) in enumerate(zip(data.shape, widths)):
        _check_pad_source(attrs.pad_mode, size, w, axis, data)
    return TensorType(tuple(s + b + a for s, (b, a) in zip(data.shape, widths)), data.dtype)


def _pad_ref(attrs, x, value):
    widths = attrs.pad_width
    if attrs.pad_mode == "constant":
        return np.pad(x, widths, constant_values=value[()])
    for axis, (size, w) in enumerate(zip(x.shape, widths)):
        ok = max(w) == 0 or (size >= 1 if attrs.pad_mode == "edge" else max(w) < size)
        _require(ok, f"pad_mode={attrs.pad_mode!r} cannot pad axis {axis} of {x.shape} by "
                     f"{list(w)}")
    return np.pad(x, widths, mode=attrs.pad_mode)


register("nn.pad", inputs=("data", "pad_value"), infer=_pad_type, reference=_pad_ref,
         pattern=INJECTIVE,
         attrs=[attr("pad_width", NESTED_INTS, required=True),
                attr("pad_mode", choice("constant", "edge", "reflect"), "constant")],
         doc="pad each axis by (before, after): constant, edge or reflect")


# --- dropout --------------------------------------------------------------------------------------

def _dropout_type(attrs, d):
    data = tensor_arg(d, "data")
    check_dtype(data, "data", *_FLOAT)
    return TupleType((data, data))


register("nn.dropout", inputs=("data",), infer=_dropout_type,
         reference=lambda attrs, x: (x.copy(), np.ones_like(x)), pattern=OPAQUE,
         attrs=[attr("rate", FLOAT, 0.5)],
         doc="inference identity; returns (out, mask) as Relay does")
