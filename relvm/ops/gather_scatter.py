"""Gather and scatter by index tensors: ``gather``, ``gather_nd``, ``scatter_elements`` and
``scatter_nd``, Relay's ops (ONNX's GatherElements, GatherND, ScatterElements, ScatterND).

Relay leaves indices outside an axis undefined; relvm gives them ONNX's meaning everywhere
(references and kernels alike):

- A negative index counts from the end of its axis, once: -1 is the last entry, -dim the first.
  Any other index outside [0, dim) is an error when the program runs ("index 7 is out of range
  for axis 1 of size 5"), never a read or a write outside the tensor.
- ``gather_nd`` and ``scatter_nd`` take Relay's layout: the index tuples lie along the *first*
  axis of ``indices``, (M, Y_0, ..., Y_{K-1}); ONNX's lie along the last (the importer
  transposes them). gather_nd's M must be static, or given as ``index_rank`` (it decides the
  result's rank; kernel entries record it); scatter_nd's follows from the ranks.
- ``gather`` and ``scatter_elements`` take ``indices`` of the data's rank; along the other axes
  an index tensor may be shorter than the data (it then addresses the leading part).
- A scatter writes its updates in row-major order of ``indices``. With ``update``, when several
  updates hit one element the last one wins (ONNX leaves that order undefined; ONNX Runtime's
  CPU kernels also apply them in order); ``add``, ``mul``, ``min`` and ``max`` combine the
  element with each update in that order. Integers wrap; on bool, add and max are "or", mul
  and min "and" (NumPy's ufuncs); min and max propagate NaN.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..ir import dims as D
from ..ir.dims import Dim
from ..ir.types import TensorType
from .common import check_dtype, differ, fmt_shape, normalize_axis, same_dtype, tensor_arg
from .registry import (BOOL, INJECTIVE, INT, OPAQUE, OPT_INT, OpTypeError, attr, choice,
                       register)
from .transform import INDEX_DTYPES, at_run_time

#: What a scatter does with an element and an update (Relay's names; ONNX says "none" for
#: update). The order is kernels/gather.h's enum.
REDUCTIONS = ("update", "add", "mul", "min", "max")


def wrap_indices(indices: np.ndarray, dim: int, what: str, axis: int) -> np.ndarray:
    """``indices`` as int64 in [0, dim): a negative index counts from the end once; any other
    index outside the axis raises ValueError naming it."""
    idx = np.asarray(indices, np.int64)
    wrapped = np.where(idx < 0, idx + dim, idx)
    bad = (wrapped < 0) | (wrapped >= dim)
    if bad.any():
        raise ValueError(f"{what}: index {idx[bad].flat[0]} is out of range for axis {axis} of "
                         f"size {dim}")
    return wrapped


def _index_tensor(t, name: str = "indices") -> TensorType:
    idx = tensor_arg(t, name)
    check_dtype(idx, name, INDEX_DTYPES, "dtype int32 or int64")
    return idx


# --- gather and scatter_elements: one index per element, along one axis --------------------------

def _elements_axis(attrs, data: Sequence[Dim], indices: Sequence[Dim], what: str) -> int:
    """The normalized axis, with indices of data's rank and no longer than data off the axis."""
    if len(indices) != len(data):
        raise OpTypeError(f"indices {fmt_shape(indices)} must have the rank of data "
                          f"{fmt_shape(data)}")
    if not data:
        raise OpTypeError(f"cannot {what} along an axis of rank-0 data")
    axis = normalize_axis(attrs.axis, len(data))
    for d, (n, i) in enumerate(zip(data, indices)):
        if d != axis and not D.at_most(i, n):
            raise OpTypeError(f"indices {fmt_shape(indices)} are longer than data "
                              f"{fmt_shape(data)} along axis {d}")
    return axis


def _gather_type(attrs, data, indices):
    x, idx = tensor_arg(data, "data"), _index_tensor(indices)
    _elements_axis(attrs, x.shape, idx.shape, "gather")
    return TensorType(idx.shape, x.dtype)


def element_targets(x_shape: Sequence[int], idx: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
    """Per entry of ``idx`` (already in range), the coordinates in data it addresses."""
    grid = np.indices(idx.shape, sparse=True)
    return tuple(idx if d == axis else grid[d] for d in range(len(x_shape)))


def _gather_ref(attrs, x, indices):
    axis = at_run_time(_elements_axis, attrs, x.shape, indices.shape, "gather")
    idx = wrap_indices(indices, x.shape[axis], "gather", axis)
    return x[element_targets(x.shape, idx, axis)]


register("gather", inputs=("data", "indices"), infer=_gather_type, reference=_gather_ref,
         pattern=INJECTIVE, attrs=[attr("axis", INT, 0)],
         doc="out[..., i, ...] = data[..., indices[..., i, ...], ...] along axis (ONNX "
             "GatherElements)")


def _scatter_elements_type(attrs, data, indices, updates):
    x, idx, upd = tensor_arg(data, "data"), _index_tensor(indices), tensor_arg(updates, "updates")
    same_dtype(("data", x), ("updates", upd))
    _elements_axis(attrs, x.shape, idx.shape, "scatter")
    if upd.ndim != idx.ndim or any(differ(u, i) for u, i in zip(upd.shape, idx.shape)):
        raise OpTypeError(f"updates {fmt_shape(upd.shape)} must have the shape of indices "
                          f"{fmt_shape(idx.shape)}")
    return x


def combine(table: np.ndarray, rows: np.ndarray, values: np.ndarray, reduction: str) -> None:
    """``table[rows[k]]`` combined with ``values[k]``, for k in order (rows 1-d, in range)."""
    if reduction == "update":
        # The last update of a row wins: keep each row's last one only.
        _, from_end = np.unique(rows[::-1], return_index=True)
        last = rows.size - 1 - from_end
        table[rows[last]] = values[last]
        return
    ufunc = {"add": np.add, "mul": np.multiply, "min": np.minimum, "max": np.maximum}[reduction]
    ufunc.at(table, rows, values)  # unbuffered: in order, each update seeing the ones before


def _scatter_elements_ref(attrs, x, indices, updates):
    axis = at_run_time(_elements_axis, attrs, x.shape, indices.shape, "scatter")
    if updates.shape != indices.shape:
        raise ValueError(f"scatter_elements: updates {updates.shape} must have the shape of "
                         f"indices {indices.shape}")
    idx = wrap_indices(indices, x.shape[axis], "scatter_elements", axis)
    out = x.copy()
    at = [np.broadcast_to(c, idx.shape) for c in element_targets(x.shape, idx, axis)]
    rows = np.ravel_multi_index(at, x.shape).reshape(-1)
    combine(out.reshape(-1), rows, updates.reshape(-1), attrs.reduction)
    return out


register("scatter_elements", inputs=("data", "indices", "updates"),
         infer=_scatter_elements_type, reference=_scatter_elements_ref, pattern=OPAQUE,
         attrs=[attr("axis", INT, 0), attr("reduction", choice(*REDUCTIONS), "update")],
         doc="data with data[..., indices[..., i, ...], ...] = updates[..., i, ...] along axis, "
             "or combined by reduction, in order (ONNX ScatterElements)")

# --- gather_nd and scatter_nd: index tuples along indices' first axis ----------------------------


def _tuple_length(attrs, indices: Sequence[Dim]) -> int:
    """M, the length of each index tuple (indices' first dim), which must be static."""
    if not indices:
        raise OpTypeError("indices must have rank 1 or more (the index tuples along axis 0)")
    m = indices[0]
    index_rank = attrs.get("index_rank")
    if index_rank is not None:
        if differ(m, index_rank):
            raise OpTypeError(f"index_rank {index_rank} differs from indices' first dim "
                              f"{fmt_shape(indices[:1])}")
        m = index_rank
    if not isinstance(m, int):
        raise OpTypeError(f"indices {fmt_shape(indices)} need a static first dim (the length "
                          "of each index tuple decides the result's rank)")
    return m


def _gather_nd_dims(attrs, data: Sequence[Dim], indices: Sequence[Dim]) -> tuple[int, int]:
    """(M, batch_dims), checked against both shapes."""
    m, b = _tuple_length(attrs, indices), attrs.batch_dims
    if b < 0 or b > len(indices) - 1:
        raise OpTypeError(f"batch_dims {b} must be in [0, {len(indices) - 1}] for indices "
                          f"{fmt_shape(indices)}")
    if b + m > len(data):
        raise OpTypeError(f"index tuples of length {m} after {b} batch dims do not fit data "
                          f"{fmt_shape(data)}")
    for i in range(b):
        if differ(data[i], indices[1 + i]):
            raise OpTypeError(f"data {fmt_shape(data)} and indices {fmt_shape(indices)} differ "
                              f"in batch dim {i}")
    return m, b


def _gather_nd_type(attrs, data, indices):
    x, idx = tensor_arg(data, "data"), _index_tensor(indices)
    m, b = _gather_nd_dims(attrs, x.shape, idx.shape)
    return TensorType(tuple(idx.shape[1:]) + tuple(x.shape[b + m:]), x.dtype)


def tuple_rows(x_shape: Sequence[int], indices: np.ndarray, m: int, b: int,
               what: str) -> np.ndarray:
    """The rows of data seen as (prod(x_shape[:b + m]), rest...) that the index tuples
    address, as int64 of shape (batch, count); each component checked against its axis."""
    batch = math.prod(x_shape[:b])
    count = math.prod(indices.shape[1 + b:])
    comps = np.asarray(indices, np.int64).reshape(m, batch, count)
    rows = np.repeat(np.arange(batch, dtype=np.int64)[:, None], count, axis=1)
    for j in range(m):
        dim = x_shape[b + j]
        rows = rows * dim + wrap_indices(comps[j], dim, what, b + j)
    return rows


def _gather_nd_ref(attrs, x, indices):
    m, b = at_run_time(_gather_nd_dims, attrs, x.shape, indices.shape)
    rows = tuple_rows(x.shape, indices, m, b, "gather_nd")
    table = x.reshape((math.prod(x.shape[:b + m]),) + x.shape[b + m:])
    return table[rows.reshape(-1)].reshape(indices.shape[1:] + x.shape[b + m:])


def _gather_nd_entry_attrs(attrs, data, indices) -> dict:
    """The call's attrs with index_rank set: an entry's dtypes and ranks do not show M."""
    return dict(attrs, index_rank=_tuple_length(attrs, tensor_arg(indices, "indices").shape))


register("gather_nd", inputs=("data", "indices"), infer=_gather_nd_type, reference=_gather_nd_ref,
         pattern=INJECTIVE, attrs=[attr("batch_dims", INT, 0), attr("index_rank", OPT_INT, None)],
         entry_attrs=_gather_nd_entry_attrs,
         doc="out[y..., :] = data[b..., indices[:, b..., y...], :]: index tuples along indices' "
             "first axis (ONNX GatherND with its last axis moved first)")


def _scatter_nd_m(attrs, data: Sequence[Dim], indices: Sequence[Dim],
                  updates: Sequence[Dim]) -> int:
    """M, from indices' first dim or else from the ranks (updates have indices' dims but the
    first, then data's past M), checked against every shape."""
    if not indices:
        raise OpTypeError("indices must have rank 1 or more (the index tuples along axis 0)")
    m = indices[0]
    if not isinstance(m, int):
        m = len(indices) - 1 + len(data) - len(updates)
        if m < 0 or differ(indices[0], m):
            raise OpTypeError(f"indices {fmt_shape(indices)} and updates {fmt_shape(updates)} "
                              f"do not fit data {fmt_shape(data)}")
    if m > len(data):
        raise OpTypeError(f"index tuples of length {m} do not fit data {fmt_shape(data)}")
    want = tuple(indices[1:]) + tuple(data[m:])
    if len(updates) != len(want) or any(differ(u, w) for u, w in zip(updates, want)):
        raise OpTypeError(f"updates {fmt_shape(updates)} must have shape {fmt_shape(want)} "
                          f"(indices {fmt_shape(indices)} without the first dim, then data "
                          f"{fmt_shape(data)} past the first {m} dims)")
    return m


def _scatter_nd_type(attrs, data, indices, updates):
    x, idx, upd = tensor_arg(data, "data"), _index_tensor(indices), tensor_arg(updates, "updates")
    same_dtype(("data", x), ("updates", upd))
    _scatter_nd_m(attrs, x.shape, idx.shape, upd.shape)
    return x


def _scatter_nd_ref(attrs, x, indices, updates):
    m = at_run_time(_scatter_nd_m, attrs, x.shape, indices.shape, updates.shape)
    rows = tuple_rows(x.shape, indices, m, 0, "scatter_nd").reshape(-1)
    out = x.copy()
    table = out.reshape((math.prod(x.shape[:m]),) + x.shape[m:])
    combine(table, rows, updates.reshape((rows.size,) + x.shape[m:]), attrs.mode)
    return out


register("scatter_nd", inputs=("data", "indices", "updates"), infer=_scatter_nd_type,
         reference=_scatter_nd_ref, pattern=OPAQUE,
         attrs=[attr("mode", choice(*REDUCTIONS), "update")],
         doc="data with data[indices[:, y...], :] = updates[y..., :], or combined by mode, in "
             "order: index tuples along indices' first axis (ONNX ScatterND, its last axis "
             "moved first)")


# --- tensor_scatter -------------------------------------------------------------------------------
# ONNX TensorScatter (opset 24): a KV cache's update. The result is a new tensor: data with, for
# every batch b (axis 0) and every position i along ``axis`` of update, update's slice i written
# at position write_indices[b] + i of data's axis (``circular``: modulo the axis' length). In
# linear mode a position outside the axis is an error when the program runs, naming it.


def _tensor_scatter_type(attrs, data, update, write_indices):
    t, u, w = (tensor_arg(x, name) for x, name in ((data, "data"), (update, "update"),
                                                 (write_indices, "write_indices")))
    same_dtype(("data", t), ("update", u))
    if t.ndim < 2:
        raise OpTypeError(f"data must have rank 2 or more (batch, ..., sequence, ...), got "
                          f"{fmt_shape(t.shape)}")
    axis = normalize_axis(attrs.axis, t.ndim)
    if axis == 0:
        raise OpTypeError("axis must not be 0, the batch axis")
    if u.ndim != t.ndim or any(differ(a, b) for i, (a, b) in enumerate(zip(t.shape, u.shape))
                               if i != axis):
        raise OpTypeError(f"update {fmt_shape(u.shape)} must have data's shape "
                          f"{fmt_shape(t.shape)} but along axis {axis}")
    if not D.at_most(u.shape[axis], t.shape[axis]):
        raise OpTypeError(f"update's length {u.shape[axis]} along axis {axis} is past data's "
                          f"{t.shape[axis]}")
    check_dtype(w, "write_indices", ("int64",), "dtype int64")
    if w.ndim > 1 or (w.ndim == 1 and differ(w.shape[0], t.shape[0])):
        raise OpTypeError(f"write_indices must be a scalar or one index per batch "
                          f"({fmt_shape(t.shape[:1])}), got {fmt_shape(w.shape)}")
    return t


def _tensor_scatter_ref(attrs, x, update, write_indices):
    axis = at_run_time(normalize_axis, attrs.axis, x.ndim)
    length, count = x.shape[axis], update.shape[axis]
    starts = np.broadcast_to(np.asarray(write_indices, np.int64).reshape(-1), (x.shape[0],))
    out = x.copy()
    for b in range(x.shape[0]):
        positions = starts[b] + np.arange(count)
        if attrs.circular:
            positions = positions % length if length else positions
        bad = (positions < 0) | (positions >= length)
        if bad.any():
            raise ValueError(f"tensor_scatter: index {positions[bad][0]} (write_indices[{b}] "
                             f"{starts[b]} + {int(np.argmax(bad))}) is out of range for axis "
                             f"{axis} of size {length}")
        np.moveaxis(out[b], axis - 1, 0)[positions] = np.moveaxis(update[b], axis - 1, 0)
    return out


register("tensor_scatter", inputs=("data", "update", "write_indices"),
         infer=_tensor_scatter_type, reference=_tensor_scatter_ref, pattern=OPAQUE,
         attrs=[attr("axis", INT, -2), attr("circular", BOOL, False)],
         doc="ONNX TensorScatter: a copy of data with update's slices along axis written from "
             "write_indices[b] on, per batch b (circular: modulo the axis' length)")
