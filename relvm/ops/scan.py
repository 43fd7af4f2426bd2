"""Ops that read a tensor in order along an axis: ``cumsum``, ``cumprod``, ``topk`` and
``dyn.topk``, ``unique``; and ``trilu``, which keeps one triangle of the last two axes.

Semantics fixed here, which the kernels (``kernels/scan.c``) follow:

* ``cumsum`` and ``cumprod`` run along ``axis`` forward, or from the end with ``reverse``;
  ``exclusive`` leaves the element itself out (the first result is 0, or 1). Integers wrap;
  floats accumulate in their own dtype, in order (as ONNX Runtime does).
* ``topk`` returns the ``k`` largest (or, with ``largest=0``, smallest) entries along ``axis``
  and their int64 indices, always in order (best first; ``sorted=0`` in ONNX allows any
  order). Equal values keep their index order, lower first; NaN counts as larger than every
  number. ``dyn.topk`` takes k as a scalar tensor: its result's length along the axis is known
  only when the program runs, and a k below 0 or past the axis is a run-time error.
* ``unique`` returns the distinct entries of data (``axis`` None: flattened) or its distinct
  slices along ``axis``, with the int64 index of each one's first occurrence, the position of
  each entry (or slice) among them, and their counts. Values compare as numbers, every NaN
  equal to every other (-0.0 equals 0.0; the first occurrence is the one kept). ``sorted``
  orders them ascending (slices lexicographically, NaN last), else by first occurrence. How
  many there are is known only when the program runs.
* ``trilu`` keeps the entries of the last two axes with ``j - i >= k`` (``upper``) or
  ``j - i <= k`` (lower) and zeroes the others; ``k`` is a scalar int64 tensor (Relay's
  ``trilu``), so it may come from the running program.
"""

from __future__ import annotations

import numpy as np

from ..ir import dims as D
from ..ir.types import TensorType, TupleType
from .common import (NUMERIC, check_dtype, check_rank, fmt_shape, normalize_axis, tensor_arg)
from .registry import BOOL, INJECTIVE, INT, OPAQUE, OPT_INT, OpTypeError, attr, register
from .transform import INDEX_DTYPES, at_run_time

# --- cumsum and cumprod ----------------------------------------------------------------------


def _cumulative_type(attrs, data):
    t = tensor_arg(data, "data")
    check_dtype(t, "data", NUMERIC, "a numeric dtype")
    if t.ndim == 0:
        raise OpTypeError("data must have rank 1 or more (the axis to accumulate along)")
    normalize_axis(attrs.axis, t.ndim)
    return t


def _cumulative(ufunc, identity: int):
    def reference(attrs, x):
        axis = at_run_time(normalize_axis, attrs.axis, x.ndim)
        y = np.flip(x, axis) if attrs.reverse else x
        with np.errstate(over="ignore", invalid="ignore"):
            out = ufunc.accumulate(y, axis=axis, dtype=x.dtype)
            # exclusive: shifted by one, the identity first and the last total dropped
            if attrs.exclusive and x.shape[axis]:
                head = np.full_like(np.take(out, [0], axis=axis), identity)
                out = np.concatenate([head, np.delete(out, -1, axis=axis)], axis=axis)
        return np.ascontiguousarray(np.flip(out, axis) if attrs.reverse else out)
    return reference


_CUMULATIVE_ATTRS = [attr("axis", INT, 0), attr("exclusive", BOOL, False),
                     attr("reverse", BOOL, False)]
register("cumsum", inputs=("data",), infer=_cumulative_type, pattern=OPAQUE,
         reference=_cumulative(np.add, 0), attrs=_CUMULATIVE_ATTRS,
         doc="running sums along axis (exclusive: without the element itself; reverse: from "
             "the end); integers wrap")
register("cumprod", inputs=("data",), infer=_cumulative_type, pattern=OPAQUE,
         reference=_cumulative(np.multiply, 1), attrs=_CUMULATIVE_ATTRS,
         doc="running products along axis (exclusive, reverse as cumsum's); integers wrap")

# --- topk ------------------------------------------------------------------------------------


def _topk_data(attrs, data) -> tuple[TensorType, int]:
    t = tensor_arg(data, "data")
    check_dtype(t, "data", NUMERIC, "a numeric dtype")
    if t.ndim == 0:
        raise OpTypeError("data must have rank 1 or more (the axis to pick along)")
    return t, normalize_axis(attrs.axis, t.ndim)


def _topk_result(t: TensorType, axis: int, k: D.Dim) -> TupleType:
    shape = t.shape[:axis] + (k,) + t.shape[axis + 1:]
    return TupleType((TensorType(shape, t.dtype), TensorType(shape, "int64")))


def _topk_type(attrs, data):
    t, axis = _topk_data(attrs, data)
    k, dim = attrs.k, t.shape[axis]
    if k < 0 or not D.at_most(k, dim):
        raise OpTypeError(f"k {k} must be in [0, {D.dim_str(dim)}], the length of axis {axis} "
                          f"of data {fmt_shape(t.shape)}")
    return _topk_result(t, axis, k)


def _dyn_topk_type(attrs, data, k):
    t, axis = _topk_data(attrs, data)
    kt = tensor_arg(k, "k")
    check_rank(kt, "k", 0)
    check_dtype(kt, "k", INDEX_DTYPES, "dtype int32 or int64")
    return _topk_result(t, axis, D.fresh())


def topk_order(x: np.ndarray, axis: int, largest: bool) -> np.ndarray:
    """The indices that order ``x`` along ``axis`` best first: equal values in index order,
    NaN larger than every number."""
    if largest:  # descending and stable: the stable ascending order of the reversed axis
        n = x.shape[axis]
        return n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    return np.argsort(x, axis=axis, kind="stable")


def _topk_pick(attrs, x, k: int):
    axis = at_run_time(normalize_axis, attrs.axis, x.ndim)
    if not 0 <= k <= x.shape[axis]:
        raise ValueError(f"topk: k {k} must be in [0, {x.shape[axis]}], the length of axis "
                         f"{axis} of data {x.shape}")
    index = np.take(topk_order(x, axis, attrs.largest), np.arange(k), axis=axis)
    return np.take_along_axis(x, index, axis), index.astype(np.int64)


_TOPK_ATTRS = [attr("axis", INT, -1), attr("largest", BOOL, True)]
register("topk", inputs=("data",), infer=_topk_type, pattern=OPAQUE,
         reference=lambda attrs, x: _topk_pick(attrs, x, attrs.k),
         attrs=[attr("k", INT, required=True)] + _TOPK_ATTRS,
         doc="(values, int64 indices) of the k largest (or smallest) entries along axis, best "
             "first, equal values in index order, NaN largest")
register("dyn.topk", inputs=("data", "k"), infer=_dyn_topk_type, pattern=OPAQUE,
         reference=lambda attrs, x, k: _topk_pick(attrs, x, int(np.asarray(k).item())),
         attrs=_TOPK_ATTRS, data_dependent=True, shape_inputs=(1,),
         doc="topk with k a scalar tensor: the result's length along axis is k's value")

# --- unique ----------------------------------------------------------------------------------


def _unique_type(attrs, data):
    t = tensor_arg(data, "data")
    u = D.fresh()
    if attrs.axis is None:
        count: D.Dim = 1
        for d in t.shape:
            count = count * d
        values, inverse = TensorType((u,), t.dtype), TensorType((count,), "int64")
    else:
        if t.ndim == 0:
            raise OpTypeError("data must have rank 1 or more to take slices along an axis")
        axis = normalize_axis(attrs.axis, t.ndim)
        values = TensorType(t.shape[:axis] + (u,) + t.shape[axis + 1:], t.dtype)
        inverse = TensorType((t.shape[axis],), "int64")
    index = TensorType((u,), "int64")
    return TupleType((values, index, inverse, index))


def _unique_rows(x: np.ndarray, axis: int | None) -> np.ndarray:
    """x as (rows, columns): one row per entry, or per slice along axis."""
    if axis is None:
        return x.reshape(-1, 1)
    return np.moveaxis(x, axis, 0).reshape(x.shape[axis], x.size // max(x.shape[axis], 1))


def _unique_ref(attrs, x):
    axis = None if attrs.axis is None else at_run_time(normalize_axis, attrs.axis, x.ndim)
    rows = _unique_rows(x, axis)
    n = rows.shape[0]
    # Lexicographic and stable: the last key is the primary one; NaN sorts last.
    order = np.lexsort(rows.T[::-1]) if n and rows.shape[1] else np.arange(n)
    ordered = rows[order]
    with np.errstate(invalid="ignore"):
        same = (ordered[1:] == ordered[:-1])
        if rows.dtype.kind == "f":
            same |= np.isnan(ordered[1:]) & np.isnan(ordered[:-1])
    starts = np.concatenate([[True], ~same.all(axis=1)]) if n else np.zeros(0, bool)
    group = np.cumsum(starts) - 1  # per sorted row, its group
    first = order[starts]  # stable: the first occurrence of each group
    if not attrs.sorted:  # groups by first occurrence
        rank = np.empty(len(first), np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(len(first))
        group, first = rank[group], np.sort(first)
    inverse = np.empty(n, np.int64)
    inverse[order] = group
    counts = np.bincount(inverse, minlength=len(first)).astype(np.int64)
    values = x.reshape(-1)[first] if axis is None else np.take(x, first, axis=axis)
    return (np.ascontiguousarray(values), first.astype(np.int64), inverse, counts)


register("unique", inputs=("data",), infer=_unique_type, reference=_unique_ref,
         pattern=OPAQUE, data_dependent=True, shape_inputs=(0,),
         attrs=[attr("axis", OPT_INT, None), attr("sorted", BOOL, True)],
         doc="(distinct entries or slices along axis, int64 first indices, inverse indices, "
             "counts): NaN equal to NaN; sorted ascending or by first occurrence")

# --- trilu -----------------------------------------------------------------------------------


def _trilu_type(attrs, data, k):
    t, kt = tensor_arg(data, "data"), tensor_arg(k, "k")
    if t.ndim < 2:
        raise OpTypeError(f"data {fmt_shape(t.shape)} must have rank 2 or more")
    check_rank(kt, "k", 0)
    check_dtype(kt, "k", ("int64",), "dtype int64")
    return t


def trilu_mask(rows: int, cols: int, k: int, upper: bool) -> np.ndarray:
    """True where trilu keeps an entry of a (rows, cols) matrix."""
    offset = np.arange(cols)[None, :] - np.arange(rows)[:, None]  # j - i
    return offset >= k if upper else offset <= k


def _trilu_ref(attrs, x, k):
    keep = trilu_mask(x.shape[-2], x.shape[-1], int(np.asarray(k).item()), attrs.upper)
    return np.where(keep, x, np.zeros((), x.dtype)).astype(x.dtype, copy=False)


register("trilu", inputs=("data", "k"), infer=_trilu_type, reference=_trilu_ref,
         pattern=INJECTIVE, attrs=[attr("upper", BOOL, True)],
         doc="the upper (j - i >= k) or lower (j - i <= k) triangle of the last two axes, "
             "zeros elsewhere; k a scalar int64 tensor")
