"""Neural-network ops: dense and matmuls, bias_add, normalization, softmax, pad, dropout.

Convolution and pooling live in ``conv.py``.

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
from .common import (FLOATS, NUMERIC, acc_dtype, check_dtype, check_rank, differ, fmt_shape,
                     normalize_axis, np_dtype, out_dtype, require, same_dtype, tensor_arg)
from .registry import (BOOL, BROADCAST, DTYPE_OR_EMPTY, FLOAT, INJECTIVE, INT, NESTED_INTS,
                       OPAQUE, OPT_INT, OUT_FUSABLE, OpTypeError, attr, choice, register)

_FLOAT = (FLOATS, "a float dtype")
_NUMBER = (NUMERIC, "a numeric dtype")


# --- dense and matmuls ----------------------------------------------------------------------------

def _check_units(attrs, units: Dim, name: str, t: TensorType) -> Dim:
    """The output width: ``attrs.units`` when given (it must match the weight), else ``units``."""
    if attrs.units is None:
        return units
    if differ(attrs.units, units):
        raise OpTypeError(f"units={attrs.units} but {name} {fmt_shape(t.shape)} gives {units}")
    return attrs.units


def _dense_type(attrs, d, w):
    data, weight = tensor_arg(d, "data"), tensor_arg(w, "weight")
    dtype = same_dtype(("data", data), ("weight", weight))
    check_dtype(data, "data", *_NUMBER)
    check_rank(weight, "weight", 2)
    if data.ndim < 1:
        raise OpTypeError(f"data must have rank >= 1, got {fmt_shape(data.shape)}")
    if differ(data.shape[-1], weight.shape[1]):
        raise OpTypeError(f"inner dims differ: data {fmt_shape(data.shape)} vs "
                          f"weight {fmt_shape(weight.shape)}")
    units = _check_units(attrs, weight.shape[0], "weight", weight)
    return TensorType(data.shape[:-1] + (units,), out_dtype(attrs, dtype))


def _matmul_ref(a: np.ndarray, b: np.ndarray, out_dtype: str) -> np.ndarray:
    require(a.shape[-1] == b.shape[-2],
             f"inner dims differ: {a.shape[-1]} vs {b.shape[-2]} (shapes {a.shape}, {b.shape})")
    acc = acc_dtype(a.dtype)
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
    if differ(k, k2):
        raise _inner_mismatch(a, b, attrs)
    units = _check_units(attrs, n, "tensor_b", b)
    return TensorType((m, units), out_dtype(attrs, dtype))


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
    if a.ndim < 3 or b.ndim != a.ndim:
        raise OpTypeError(f"tensor_a and tensor_b must have one rank of at least 3, got "
                          f"{fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
    sa, sb = _transposed(a, attrs.transpose_a), _transposed(b, attrs.transpose_b)
    (m, k), (k2, n) = sa[-2:], sb[-2:]
    if differ(k, k2):
        raise _inner_mismatch(a, b, attrs)
    try:
        batch = tuple(D.broadcast(p, q) for p, q in zip(sa[:-2], sb[:-2]))
    except ValueError:
        raise OpTypeError(f"batch dims do not broadcast: tensor_a {fmt_shape(a.shape)} vs "
                          f"tensor_b {fmt_shape(b.shape)}") from None
    return TensorType(batch + (m, n), out_dtype(attrs, dtype))


def _batch_matmul_ref(attrs, a, b):
    require(a.ndim == b.ndim >= 3, f"tensor_a and tensor_b must have one rank of at least 3: "
                                   f"{a.shape} vs {b.shape}")
    require(all(p == q or 1 in (p, q) for p, q in zip(a.shape[:-2], b.shape[:-2])),
            f"batch dims do not broadcast: {a.shape} vs {b.shape}")
    return _matmul_family_ref(attrs, a, b)


register("nn.batch_matmul", inputs=("tensor_a", "tensor_b"), infer=_batch_matmul_type,
         reference=_batch_matmul_ref, pattern=OUT_FUSABLE,
         attrs=_MATMUL_ATTRS + [attr("transpose_b", BOOL, True)],
         doc="batched matrix product (..., M, K) x (..., N, K) -> (..., M, N): both of one rank "
             "of at least 3, the batch dims broadcast as NumPy's (a dim of 1 is reused)")


# --- bias_add -------------------------------------------------------------------------------------

def _bias_add_type(attrs, d, b):
    data, bias = tensor_arg(d, "data"), tensor_arg(b, "bias")
    same_dtype(("data", data), ("bias", bias))
    check_dtype(data, "data", *_NUMBER)
    check_rank(bias, "bias", 1)
    axis = normalize_axis(attrs.axis, data.ndim)
    if differ(bias.shape[0], data.shape[axis]):
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
    require(bias.shape[0] == data.shape[axis],
             f"bias length {bias.shape[0]} differs from data axis {axis} ({data.shape})")
    return (data + _along_axis(bias, axis, data.ndim)).astype(data.dtype)


register("nn.bias_add", inputs=("data", "bias"), infer=_bias_add_type, reference=_bias_add_ref,
         pattern=BROADCAST, attrs=[attr("axis", INT, 1)],
         doc="add a 1-D bias along one axis of data")


# --- normalization and softmax -----------------------------------------------------------------

def _check_channel_params(data: TensorType, axis: int, named: Sequence[tuple[str, TensorType]]):
    """Each named tensor must be 1-D with data's length along ``axis`` and data's dtype."""
    same_dtype(("data", data), *named)
    for name, t in named:
        check_rank(t, name, 1)
        if differ(t.shape[0], data.shape[axis]):
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
        require(v.shape == (x.shape[axis],), f"{name} {v.shape} does not match data axis "
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
    # Biased variance, as Relay and PyTorch use; an empty axis gives NaN (0 / 0, quietly).
    count = x.shape[axis]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = x64.sum(axis=axis, keepdims=True) / count
        var = ((x64 - mean) ** 2).sum(axis=axis, keepdims=True) / count
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
    if mode == "constant" or max(width) == 0:
        return
    if (mode == "edge" and not D.at_most(1, size)) or (mode == "reflect" and
                                                        not D.at_most(max(width) + 1, size)):
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
        require(ok, f"pad_mode={attrs.pad_mode!r} cannot pad axis {axis} of {x.shape} by "
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
