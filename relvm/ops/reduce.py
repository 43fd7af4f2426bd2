"""Reductions: ``sum``, ``mean``, ``max``, ``min``, ``prod``, ``argmax``, ``argmin``, ``logsumexp``.

All take Relay's ``axis`` (None for every axis, an int, or a list), ``keepdims`` and ``exclude``
(reduce over every axis *not* listed; ignored when ``axis`` is None, as in Relay). ``axis=[]``
reduces nothing.

Semantics fixed here, which the kernels follow:

* Float sums, products and means accumulate in float64 and round once to the input dtype.
* Integer ``sum`` and ``prod`` wrap in the input dtype (as Relay accumulates in it).
* ``mean`` keeps the input dtype (Relay). For integers it is the exact mean truncated toward
  zero, like the integer ``divide``; an empty integer mean is 0, an empty float mean is NaN.
* An empty ``sum`` is 0 and an empty ``prod`` is 1. ``max``, ``min``, ``argmax`` and ``argmin``
  of an empty axis are a run-time error (unless the result itself is empty).
* ``max``/``min`` propagate NaN; ``argmax``/``argmin`` return the first NaN, like NumPy, or
  the last one with ``select_last_index``. Over several axes, ``argmax`` indexes the reduced
  axes flattened in row-major order. The index dtype is int32, as Relay's.
* ``logsumexp`` (float dtypes) is ``m + log(sum(exp(x - m)))`` with ``m`` the maximum, in
  float64, so no exp overflows; it is ``m`` itself when ``m`` is infinite (all ``-inf``, or
  an ``inf``), NaN if any value is NaN, and ``-inf`` over an empty axis.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..ir.dims import Dim
from ..ir.types import TensorType
from .common import FLOATS, NUMERIC, check_dtype, normalize_axes, tensor_arg
from .registry import BOOL, OPT_INT_OR_INTS, REDUCE, attr, register


def reduced_axes(attrs, ndim: int) -> tuple[int, ...]:
    """The sorted axes a reduction with these attrs folds, for a rank-``ndim`` input."""
    if attrs.axis is None:
        return tuple(range(ndim))
    listed = normalize_axes(attrs.axis, ndim)
    if attrs.exclude:
        return tuple(a for a in range(ndim) if a not in listed)
    return listed


def reduced_shape(shape: Sequence[Dim], axes: tuple[int, ...], keepdims: bool) -> tuple[Dim, ...]:
    """``shape`` with ``axes`` dropped, or set to 1 with ``keepdims``."""
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes)


def _reduce_type(index_dtype: str | None, allowed=NUMERIC, what="a numeric dtype"):
    def infer(attrs, d):
        data = tensor_arg(d, "data")
        check_dtype(data, "data", allowed, what)
        shape = reduced_shape(data.shape, reduced_axes(attrs, data.ndim), attrs.keepdims)
        return TensorType(shape, index_dtype or data.dtype)
    return infer


def _acc_dtype(dtype: np.dtype) -> np.dtype:
    # 64-bit accumulation then a cast back wraps exactly as accumulating in the dtype would;
    # unsigned in uint64, so a uint64 mean divides the sum of its own values.
    if dtype.kind == "f":
        return np.dtype(np.float64)
    return np.dtype(np.uint64) if dtype.kind == "u" else np.dtype(np.int64)


def _folding(fn):
    """A sum-like reference: ``fn`` accumulates in the wide dtype, the result is cast back."""
    def reference(attrs, x):
        axes = reduced_axes(attrs, x.ndim)
        out = fn(x, axis=axes, keepdims=attrs.keepdims, dtype=_acc_dtype(x.dtype))
        return np.asarray(out).astype(x.dtype)
    return reference


def _mean_ref(attrs, x):
    axes = reduced_axes(attrs, x.ndim)
    count = math.prod(x.shape[a] for a in axes)
    total = np.asarray(np.sum(x, axis=axes, keepdims=attrs.keepdims, dtype=_acc_dtype(x.dtype)))
    if x.dtype.kind == "f":
        mean = total / count if count else np.full_like(total, np.nan)
    elif count:
        # Truncate toward zero, as the integer divide does (floor division would round down).
        mean = np.sign(total) * (np.abs(total) // count)
    else:
        mean = np.zeros_like(total)
    return np.asarray(mean).astype(x.dtype)


def _require_nonempty(x: np.ndarray, axes: tuple[int, ...], name: str) -> bool:
    """False if the result is empty anyway; raises if a non-empty result reduces nothing."""
    if all(x.shape[a] for a in axes):
        return True
    if any(x.shape[a] == 0 for a in range(x.ndim) if a not in axes):
        return False
    raise ValueError(f"{name} over an empty axis: data shape {x.shape}, axes {list(axes)}")


def _extreme(fn, name: str):
    """A max/min reference; the empty-axis check replaces NumPy's own error."""
    def reference(attrs, x):
        axes = reduced_axes(attrs, x.ndim)
        if not _require_nonempty(x, axes, name):
            return np.empty(reduced_shape(x.shape, axes, attrs.keepdims), x.dtype)
        return np.asarray(fn(x, axis=axes, keepdims=attrs.keepdims)).astype(x.dtype)
    return reference


def _arg_extreme(fn, name: str):
    """An argmax/argmin reference over any set of axes."""
    def reference(attrs, x):
        axes = reduced_axes(attrs, x.ndim)
        out_shape = reduced_shape(x.shape, axes, attrs.keepdims)
        if not _require_nonempty(x, axes, name):
            return np.empty(out_shape, np.int32)
        kept = [a for a in range(x.ndim) if a not in axes]
        length = math.prod(x.shape[a] for a in axes)
        # Move the reduced axes last and flatten them: one index per kept position.
        rows = np.transpose(x, kept + list(axes)).reshape([x.shape[a] for a in kept] + [length])
        if attrs.select_last_index:
            index = length - 1 - fn(rows[..., ::-1], axis=-1)
        else:
            index = fn(rows, axis=-1)
        return np.asarray(index).astype(np.int32).reshape(out_shape)
    return reference


_ATTRS = [attr("axis", OPT_INT_OR_INTS), attr("keepdims", BOOL, False),
          attr("exclude", BOOL, False)]


def _register(name: str, reference, doc: str, index: bool = False) -> None:
    attrs = _ATTRS + [attr("select_last_index", BOOL, False)] if index else _ATTRS
    register(name, inputs=("data",), infer=_reduce_type("int32" if index else None),
             reference=reference, pattern=REDUCE, attrs=attrs, doc=doc)


_register("sum", _folding(np.sum), "sum over axes (integers wrap)")
_register("prod", _folding(np.prod), "product over axes (integers wrap)")
_register("mean", _mean_ref, "mean over axes, in the input dtype")
_register("max", _extreme(np.max, "max"), "maximum over axes (NaN propagates)")
_register("min", _extreme(np.min, "min"), "minimum over axes (NaN propagates)")
_register("argmax", _arg_extreme(np.argmax, "argmax"), "int32 index of the maximum", index=True)
_register("argmin", _arg_extreme(np.argmin, "argmin"), "int32 index of the minimum", index=True)


def _logsumexp_ref(attrs, x):
    axes = reduced_axes(attrs, x.ndim)
    wide = x.astype(np.float64)
    # np.max propagates NaN; initial=-inf gives -inf over an empty axis.
    m = np.max(wide, axis=axes, keepdims=True, initial=-np.inf)
    shift = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        total = np.log(np.sum(np.exp(wide - shift), axis=axes, keepdims=True)) + shift
    out = np.where(np.isfinite(m), total, m)
    return out.reshape(reduced_shape(x.shape, axes, attrs.keepdims)).astype(x.dtype)


register("logsumexp", inputs=("data",), infer=_reduce_type(None, FLOATS, "a float dtype"),
         reference=_logsumexp_ref, pattern=REDUCE, attrs=_ATTRS,
         doc="log(sum(exp(x))) over axes, shifted by the maximum (no overflow)")
