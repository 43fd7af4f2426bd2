"""Indexing ops: strided_slice and take.

Where Relay, NumPy and the symbolic dims part ways, relvm decides:

- ``strided_slice`` slices as Python does: a slice whose begin is past its end is empty (Relay
  rejects it at compile time). On a symbolic dim an index at or beyond +-(2**31 - 1) means "to the
  end" (or the start); such dims are assumed smaller than that. With ``slice_mode="size"`` each
  ``end`` is a size: that many elements from the normalized begin (all the rest when negative),
  strides ignored, as in Relay.
- ``take``: ``clip`` clamps to [0, dim - 1] (a negative index becomes 0, as in TVM), ``wrap`` takes
  the index modulo dim, ``fast`` requires in-range indices (the reference raises; kernels need not
  check).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..ir import dims as D
from ..ir.dims import Dim
from ..ir.types import TensorType
from .common import check_dtype, differ, fmt_shape, normalize_axis, tensor_arg
from .registry import INJECTIVE, INT, INTS, OPT_INT, OPT_INTS, OpTypeError, attr, choice, register
from .transform import INDEX_DTYPES, at_run_time

# --- strided_slice ------------------------------------------------------------------------------

#: On a symbolic dim, an index at or beyond this magnitude means "to the end" (or the start):
#: Relay spells "to the end" as INT32_MAX or INT64_MAX.
_HUGE = 2**31 - 1

# A slice bound on an axis of size d, walked forward: ("start", p) is min(p, d), p >= 0;
# ("end", q) is max(d + q, 0), q <= 0. A backward (negative-stride) slice is measured in mirrored
# coordinates (position x becomes d - 1 - x), where it walks forward too.
_START = ("start", 0)
_END = ("end", 0)


def _forward_bound(i: int | None, default: tuple[str, int]) -> tuple[str, int]:
    if i is None:
        return default
    if i >= _HUGE:
        return _END
    if i <= -_HUGE:
        return _START
    return ("start", i) if i >= 0 else ("end", i)


def _backward_bound(i: int | None, default: tuple[str, int]) -> tuple[str, int]:
    """A bound of a negative-stride slice, in mirrored coordinates."""
    if i is None:
        return default
    if i >= _HUGE:
        return _START
    if i <= -_HUGE:
        return _END
    return ("end", -i - 1) if i >= 0 else ("start", -i - 1)


def _at_least_0(x: Dim) -> Dim:
    """max(x, 0), without the max when x cannot be negative (symbols are non-negative)."""
    if isinstance(x, int):
        return max(x, 0)
    if all(c > 0 and all(isinstance(a, D.Sym) for a in m) for m, c in x.terms):
        return x
    return D.dim_max(x, 0)


def _forward_len(d: Dim, lo: tuple[str, int], hi: tuple[str, int]) -> Dim:
    """How many positions lie in [lo, hi) on an axis of symbolic size d, clamped as Python is."""
    (lo_kind, b), (hi_kind, e) = lo, hi
    if lo_kind == "start" and hi_kind == "start":
        return 0 if e <= b else D.dim_min(_at_least_0(d - b), e - b)
    if lo_kind == "start":
        return _at_least_0(d + e - b)
    if hi_kind == "end":
        return 0 if e <= b else D.dim_min(_at_least_0(d + e), e - b)
    if b == 0:
        return 0  # begins at the end
    return _at_least_0(D.dim_min(e, d) - _at_least_0(d + b))


def _symbolic_slice_len(d: Dim, b: int | None, e: int | None, s: int, mode: str) -> Dim:
    if mode == "size":
        avail = _forward_len(d, _forward_bound(b, _START), _END)
        return avail if e is None or e < 0 or e >= _HUGE else D.dim_min(e, avail)
    bound = _forward_bound if s > 0 else _backward_bound
    n = _forward_len(d, bound(b, _START), bound(e, _END))
    return n if abs(s) == 1 else D.ceildiv(n, abs(s))


def _static_slice(d: int, b: int | None, e: int | None, s: int, mode: str) -> slice:
    """The NumPy slice for one axis of static size d."""
    if mode == "size":
        start = slice(b, None).indices(d)[0]
        return slice(start, d if e is None or e < 0 else min(start + e, d))
    start, stop, step = slice(b, e, s).indices(d)
    # indices() gives -1 for "before the first element"; as a slice bound -1 means the last.
    if start < 0:  # so a backward slice that starts before the first element is empty
        return slice(0, 0)
    return slice(start, None if stop < 0 else stop, step)


def _slice_len(d: Dim, b: int | None, e: int | None, s: int, mode: str) -> Dim:
    if isinstance(d, int):
        return len(range(d)[_static_slice(d, b, e, s, mode)])
    return _symbolic_slice_len(d, b, e, s, mode)


def slice_specs(attrs, shape: Sequence[Dim]) -> list[tuple[int, int | None, int | None, int]]:
    """(axis, begin, end, stride) per sliced axis; None stands for the whole-axis default."""
    begin, end, strides = attrs.begin, attrs.end, attrs.strides or ()
    ndim = len(shape)
    if attrs.axes is not None:
        axes = [normalize_axis(a, ndim, "axes entry") for a in attrs.axes]
        if len(set(axes)) != len(axes):
            raise OpTypeError(f"axes {list(attrs.axes)} repeats an axis")
        if len(begin) != len(axes) or len(end) != len(axes) or len(strides) > len(axes):
            raise OpTypeError(f"begin {list(begin)}, end {list(end)} and strides "
                              f"{list(strides)} need one entry per axis in axes {list(attrs.axes)}")
    else:
        axes = list(range(ndim))
        if max(len(begin), len(end), len(strides)) > ndim:
            raise OpTypeError(f"begin {list(begin)}, end {list(end)} and strides "
                              f"{list(strides)} have more entries than data {fmt_shape(shape)} "
                              "has axes")
    specs = []
    for k, axis in enumerate(axes):
        # Relay ignores strides in size mode; missing entries select the whole axis.
        s = strides[k] if k < len(strides) and attrs.slice_mode == "end" else 1
        if s == 0:
            raise OpTypeError(f"strides {list(strides)} has a zero stride")
        specs.append((axis, begin[k] if k < len(begin) else None,
                      end[k] if k < len(end) else None, s))
    return specs


def _strided_slice_type(attrs, data):
    t = tensor_arg(data, "data")
    shape = list(t.shape)
    for axis, b, e, s in slice_specs(attrs, t.shape):
        shape[axis] = _slice_len(t.shape[axis], b, e, s, attrs.slice_mode)
    return TensorType(tuple(shape), t.dtype)


def _strided_slice_ref(attrs, x):
    index = [slice(None)] * x.ndim
    for axis, b, e, s in at_run_time(slice_specs, attrs, x.shape):
        index[axis] = _static_slice(x.shape[axis], b, e, s, attrs.slice_mode)
    return x[tuple(index)].copy()


register("strided_slice", inputs=("data",), infer=_strided_slice_type,
         reference=_strided_slice_ref, pattern=INJECTIVE,
         doc="data[begin:end:strides] per axis, with Python's clamping of indices",
         attrs=[attr("begin", INTS, required=True), attr("end", INTS, required=True),
                attr("strides", OPT_INTS, None), attr("axes", OPT_INTS, None),
                attr("slice_mode", choice("end", "size"), "end")])

# --- take ---------------------------------------------------------------------------------------


def _take_axes(attrs, data_shape: Sequence[Dim], indices_shape: Sequence[Dim]) -> tuple[int, int]:
    """The normalized (axis, batch_dims) of a take with an axis, checked against both shapes."""
    if not data_shape:
        raise OpTypeError(f"cannot take along axis {attrs.axis} of a rank-0 data")
    axis = normalize_axis(attrs.axis, len(data_shape))
    bdims = attrs.batch_dims + len(indices_shape) if attrs.batch_dims < 0 else attrs.batch_dims
    if not 0 <= bdims <= min(axis, len(indices_shape)):
        raise OpTypeError(f"batch_dims {attrs.batch_dims} must be in [0, min(axis {axis}, rank "
                          f"{len(indices_shape)} of indices)]")
    for i in range(bdims):
        if differ(data_shape[i], indices_shape[i]):
            raise OpTypeError(f"data {fmt_shape(data_shape)} and indices "
                              f"{fmt_shape(indices_shape)} differ in batch dim {i}")
    return axis, bdims


def _take_type(attrs, data, indices):
    x, idx = tensor_arg(data, "data"), tensor_arg(indices, "indices")
    check_dtype(idx, "indices", INDEX_DTYPES, "dtype int32 or int64")
    if attrs.axis is None:
        return TensorType(idx.shape, x.dtype)
    axis, bdims = _take_axes(attrs, x.shape, idx.shape)
    return TensorType(x.shape[:axis] + idx.shape[bdims:] + x.shape[axis + 1:], x.dtype)


def _in_range_indices(idx: np.ndarray, dim: int, mode: str) -> np.ndarray:
    """``idx`` mapped into [0, dim) as ``mode`` says, as int64."""
    idx = np.asarray(idx, np.int64)
    if idx.size == 0:
        return idx
    if dim == 0:
        raise ValueError("take: cannot take from an axis of size 0")
    if mode == "clip":
        return np.clip(idx, 0, dim - 1)
    if mode == "wrap":
        return np.mod(idx, dim)
    bad = (idx < (-dim if mode == "from_end" else 0)) | (idx >= dim)
    if bad.any():
        raise ValueError(f"take(mode={mode!r}): index {idx[bad].flat[0]} is out of range for "
                         f"an axis of size {dim}")
    return np.where(idx < 0, idx + dim, idx)


def _batched_take(x: np.ndarray, idx: np.ndarray, axis: int, bdims: int) -> np.ndarray:
    """take with the first ``bdims`` axes of data and indices walked in step."""
    out = np.empty(x.shape[:axis] + idx.shape[bdims:] + x.shape[axis + 1:], x.dtype)
    batch = math.prod(x.shape[:bdims])
    xs = x.reshape((batch,) + x.shape[bdims:])
    ids = idx.reshape((batch,) + idx.shape[bdims:])
    outs = out.reshape((batch,) + out.shape[bdims:])  # a view: out is fresh and contiguous
    for i in range(batch):
        outs[i] = np.take(xs[i], ids[i], axis=axis - bdims)
    return out


def _take_ref(attrs, x, indices):
    if attrs.axis is None:
        x, axis, bdims = x.reshape(-1), 0, 0
    else:
        axis, bdims = at_run_time(_take_axes, attrs, x.shape, indices.shape)
    idx = _in_range_indices(indices, x.shape[axis], attrs.mode)
    if bdims:
        return _batched_take(x, idx, axis, bdims)
    return np.asarray(np.take(x, idx, axis=axis))


register("take", inputs=("data", "indices"), infer=_take_type, reference=_take_ref,
         pattern=INJECTIVE, doc="gather entries of data along axis (flattened when None)",
         attrs=[attr("axis", OPT_INT, None), attr("batch_dims", INT, 0),
                attr("mode", choice("clip", "wrap", "fast", "from_end"), "clip")])
