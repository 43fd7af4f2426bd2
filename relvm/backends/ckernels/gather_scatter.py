"""C kernels for gather, gather_nd, scatter_elements and scatter_nd (``kernels/gather.c``).

Gathers move elements of 1, 2, 4 or 8 bytes, so they cover every dtype; scatters combine values
of each dtype. A bad index makes the kernel return RELVM_BAD_INDEX; the error then names it as
the reference does (``ops.gather_scatter.wrap_indices``).
"""

from __future__ import annotations

import numpy as np

from ...ops import gather_scatter as ops
from ...ops.transform import at_run_time
from . import kernel
from .common import (ALL, CODE, ITEMSIZE, attrs_of, check, contiguous_strides, int64s, library,
                     prod, remember, shape_error)

_INDEXED = lambda e: e.inputs[1] in ("int32", "int64")  # noqa: E731
#: reduction/mode -> enum relvm_scatter_reduction (kernels/gather.h)
_REDUCTION = {name: i for i, name in enumerate(ops.REDUCTIONS)}
_BAD_INDEX = -3


def _raise_bad_index(check_indices, status: int, what: str) -> None:
    """After a kernel's status: re-check the indices for the reference's error naming the bad
    index (it raises), else the generic error for the status."""
    if status == _BAD_INDEX:
        check_indices()
    check(status, what)


# --- gather and scatter_elements ----------------------------------------------------------------

def _elements_plan(attrs, x, idx, what: str):
    """(outer, count, inner, axis_len, axis_stride, outer_stride, outer_offsets, inner_offsets):
    indices as (outer, count, inner) around the axis, and where each entry lies in data. The
    offset tables are made only where indices are shorter than data off the axis."""
    ffi, _ = library()
    axis = at_run_time(ops._elements_axis, attrs, x, idx, what)
    strides = contiguous_strides(x)
    outer, count, inner = prod(idx[:axis]), idx[axis], prod(idx[axis + 1:])
    outer_table = inner_table = ffi.NULL
    if idx[axis + 1:] != x[axis + 1:]:
        inner_table = _offsets(idx[axis + 1:], strides[axis + 1:])
    if idx[:axis] != x[:axis]:
        outer_table = _offsets(idx[:axis], strides[:axis])
    return (outer, count, inner, x[axis], strides[axis], x[axis] * strides[axis], outer_table,
            inner_table, axis)


def _offsets(shape, strides):
    """Element offsets of every position of ``shape`` (row-major) under ``strides``."""
    grid = np.indices(shape, dtype=np.int64).reshape(len(shape), -1)
    return int64s((np.asarray(strides, np.int64) @ grid).tolist() if len(shape) else [0])


@kernel("gather", dtypes=ALL, accepts=_INDEXED)
def make_gather(entry):
    ffi, lib = library()
    attrs = attrs_of(entry)
    size, index_dt = ITEMSIZE[entry.inputs[0]], CODE[entry.inputs[1]]
    gather, ptr, plans = lib.relvm_gather_elements, ffi.from_buffer, {}

    def run(x, indices, out):
        key = (x.shape, indices.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, _elements_plan(attrs, *key, "gather"))
        if out.shape != indices.shape:
            raise shape_error("gather: wrong output shape", indices=indices.shape,
                              output=out.shape)
        status = gather(size, index_dt, *plan[:-1], ptr(x), ptr(indices), ptr(out))
        if status:
            _raise_bad_index(lambda: ops.wrap_indices(indices, plan[3], "gather", plan[-1]),
                             status, f"gather {key}")
    return run


@kernel("scatter_elements", dtypes=ALL, accepts=_INDEXED)
def make_scatter_elements(entry):
    ffi, lib = library()
    attrs = attrs_of(entry)
    dt, index_dt = CODE[entry.inputs[0]], CODE[entry.inputs[1]]
    reduction = _REDUCTION[attrs.reduction]
    scatter, ptr, plans = lib.relvm_scatter_elements, ffi.from_buffer, {}

    def run(x, indices, updates, out):
        key = (x.shape, indices.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, _elements_plan(attrs, *key, "scatter"))
        if updates.shape != indices.shape or out.shape != x.shape:
            raise shape_error("scatter_elements: wrong shapes", indices=indices.shape,
                              updates=updates.shape, data=x.shape, output=out.shape)
        status = scatter(dt, reduction, index_dt, x.size, *plan[:-1], ptr(x), ptr(indices),
                         ptr(updates), ptr(out))
        if status:
            _raise_bad_index(lambda: ops.wrap_indices(indices, plan[3], "scatter_elements",
                                                      plan[-1]), status, f"scatter_elements {key}")
    return run


# --- gather_nd and scatter_nd -------------------------------------------------------------------

def _check_tuples(x, indices, m: int, b: int, what: str) -> None:
    ops.tuple_rows(x.shape, indices, m, b, what)  # raises naming the first bad index


@kernel("gather_nd", dtypes=ALL, accepts=_INDEXED)
def make_gather_nd(entry):
    ffi, lib = library()
    attrs = attrs_of(entry)
    size, index_dt = ITEMSIZE[entry.inputs[0]], CODE[entry.inputs[1]]
    gather, ptr, plans = lib.relvm_gather_nd, ffi.from_buffer, {}

    def plan_of(x, idx, out):
        m, b = at_run_time(ops._gather_nd_dims, attrs, x, idx)
        if out != idx[1:] + x[b + m:]:
            raise shape_error("gather_nd: wrong output shape", data=x, indices=idx, output=out)
        return (prod(x[:b]), prod(idx[1 + b:]), m, int64s(x[b:b + m]), prod(x[b + m:])), (m, b)

    def run(x, indices, out):
        key = (x.shape, indices.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, plan_of(*key))
        args, (m, b) = plan
        status = gather(size, index_dt, *args, ptr(x), ptr(indices), ptr(out))
        if status:
            _raise_bad_index(lambda: _check_tuples(x, indices, m, b, "gather_nd"), status,
                             f"gather_nd {key}")
    return run


@kernel("scatter_nd", dtypes=ALL, accepts=_INDEXED)
def make_scatter_nd(entry):
    ffi, lib = library()
    attrs = attrs_of(entry)
    dt, index_dt = CODE[entry.inputs[0]], CODE[entry.inputs[1]]
    mode = _REDUCTION[attrs.mode]
    scatter, ptr, plans = lib.relvm_scatter_nd, ffi.from_buffer, {}

    def plan_of(x, idx, upd, out):
        m = at_run_time(ops._scatter_nd_m, attrs, x, idx, upd)
        if out != x:
            raise shape_error("scatter_nd: wrong output shape", data=x, output=out)
        return (prod(idx[1:]), m, int64s(x[:m]), prod(x[m:])), m

    def run(x, indices, updates, out):
        key = (x.shape, indices.shape, updates.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, plan_of(*key))
        args, m = plan
        status = scatter(dt, mode, index_dt, *args, ptr(x), ptr(indices), ptr(updates), ptr(out))
        if status:
            _raise_bad_index(lambda: _check_tuples(x, indices, m, 0, "scatter_nd"), status,
                             f"scatter_nd {key}")
    return run


@kernel("tensor_scatter", dtypes=ALL, accepts=lambda e: e.inputs[1:] == (e.inputs[0], "int64"))
def make_tensor_scatter(entry):
    ffi, lib = library()
    attrs, size, name = attrs_of(entry), ITEMSIZE[entry.inputs[0]], entry.name
    ptr, scatter, circular = ffi.from_buffer, lib.relvm_tensor_scatter, int(attrs.circular)

    def run(x, update, write_indices, out):
        axis = at_run_time(ops.normalize_axis, attrs.axis, x.ndim)
        if update.ndim != x.ndim or out.shape != x.shape or axis == 0 or any(
                a != b for i, (a, b) in enumerate(zip(x.shape, update.shape)) if i != axis) \
                or write_indices.size not in (1, x.shape[0]) or write_indices.ndim > 1:
            raise shape_error(f"{name}: update must have data's shape but along axis {axis}, "
                              "write_indices one index or one per batch", data=x.shape,
                              update=update.shape, write_indices=write_indices.shape)
        starts = np.ascontiguousarray(write_indices, np.int64).reshape(-1)
        if starts.size == 0:
            starts = np.zeros(1, np.int64)  # no batches: nothing is read
        bad_b, bad_i = ffi.new("int64_t *"), ffi.new("int64_t *")
        status = scatter(size, circular, x.shape[0], prod(x.shape[1:axis]), x.shape[axis],
                         update.shape[axis], prod(x.shape[axis + 1:]),
                         ffi.cast("int64_t *", ptr(starts)), starts.size, ptr(x), ptr(update),
                         ptr(out), bad_b, bad_i)
        if status == -3:
            b, i = bad_b[0], bad_i[0]
            start = int(starts[0 if starts.size == 1 else b])
            raise ValueError(f"{name}: index {start + i} (write_indices[{b}] {start} + {i}) is "
                             f"out of range for axis {axis} of size {x.shape[axis]}")
        check(status, f"{name} of {x.shape}")
    return run
