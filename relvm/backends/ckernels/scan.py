"""C kernels for cumsum and cumprod, topk and dyn.topk, and trilu (``kernels/scan.c``).

Each kernel sees its data as (outer, n, inner) around the axis; the shapes are checked against
the reference's rules (``ops.scan``) once per shape and the plan kept.
"""

from __future__ import annotations

import numpy as np

from ...ops.common import normalize_axis
from ...ops.transform import at_run_time
from . import kernel
from .common import (ALL, CODE, ITEMSIZE, NUMBERS, attrs_of, check, library, prod, remember,
                     shape_error)

#: op -> enum relvm_cumulative_op (kernels/scan.h)
CUMULATIVE = {"cumsum": "RELVM_CUMSUM", "cumprod": "RELVM_CUMPROD"}


def _around(shape, axis: int) -> tuple[int, int, int]:
    return prod(shape[:axis]), shape[axis], prod(shape[axis + 1:])


def make_cumulative(entry):
    ffi, lib = library()
    attrs = attrs_of(entry)
    op, dt, ptr, name = getattr(lib, CUMULATIVE[entry.op]), CODE[entry.inputs[0]], \
        ffi.from_buffer, entry.name
    run_c, exclusive, reverse = lib.relvm_cumulative, int(attrs.exclusive), int(attrs.reverse)
    plans: dict = {}

    def run(x, out):
        plan = plans.get(x.shape)
        if plan is None:
            axis = at_run_time(normalize_axis, attrs.axis, x.ndim)
            plan = remember(plans, x.shape, _around(x.shape, axis))
        if out.shape != x.shape:
            raise shape_error(f"{name}: the output does not match the input", data=x.shape,
                              output=out.shape)
        check(run_c(op, dt, exclusive, reverse, *plan, ptr(x), ptr(out)),
              f"{name} of {x.shape}")
    return run


for _op in CUMULATIVE:
    kernel(_op, dtypes=NUMBERS)(make_cumulative)


def _make_topk(entry, k_of):
    ffi, lib = library()
    attrs = attrs_of(entry)
    dt, ptr, name, topk = CODE[entry.inputs[0]], ffi.from_buffer, entry.name, lib.relvm_topk
    largest = int(attrs.largest)

    def run(x, k, values, indices):
        axis = at_run_time(normalize_axis, attrs.axis, x.ndim)
        k = k_of(k)
        if not 0 <= k <= x.shape[axis]:
            raise ValueError(f"{name}: k {k} must be in [0, {x.shape[axis]}], the length of "
                             f"axis {axis} of data {x.shape}")
        want = x.shape[:axis] + (k,) + x.shape[axis + 1:]
        if values.shape != want or indices.shape != want:
            raise shape_error(f"{name}: wrong output shapes", data=x.shape, values=values.shape,
                              indices=indices.shape)
        outer, n, inner = _around(x.shape, axis)
        check(topk(dt, largest, outer, n, inner, k, ptr(x), ptr(values),
                   ffi.cast("int64_t *", ptr(indices))), f"{name} of {x.shape}")
    return run


@kernel("topk", dtypes=NUMBERS)
def make_topk(entry):
    k = int(attrs_of(entry).k)
    run = _make_topk(entry, lambda _: k)
    return lambda x, values, indices: run(x, None, values, indices)


@kernel("dyn.topk", dtypes=NUMBERS, accepts=lambda e: e.inputs[1] in ("int32", "int64"))
def make_dyn_topk(entry):
    return _make_topk(entry, lambda k: int(np.asarray(k).item()))


@kernel("trilu", dtypes=ALL, accepts=lambda e: e.inputs[1] == "int64")
def make_trilu(entry):
    ffi, lib = library()
    size, ptr, trilu = ITEMSIZE[entry.inputs[0]], ffi.from_buffer, lib.relvm_trilu
    upper, name = int(attrs_of(entry).upper), entry.name

    def run(x, k, out):
        if x.ndim < 2 or out.shape != x.shape:
            raise shape_error(f"{name}: wrong shapes", data=x.shape, output=out.shape)
        rows, cols = x.shape[-2:]
        check(trilu(size, upper, int(np.asarray(k).item()), prod(x.shape[:-2]), rows, cols,
                    ptr(x), ptr(out)), f"{name} of {x.shape}")
    return run


@kernel("unique", dtypes=NUMBERS + ("bool",))
def make_unique(entry):
    ffi, lib = library()
    attrs = attrs_of(entry)
    dt, ptr, name, unique = CODE[entry.inputs[0]], ffi.from_buffer, entry.name, lib.relvm_unique
    sorted_ = int(attrs.sorted)

    def int64_ptr(a):
        return ffi.cast("int64_t *", ptr(a))

    def run(x, values, first, inverse, counts):
        if attrs.axis is None:
            outer, n, inner = 1, x.size, 1
        else:
            outer, n, inner = _around(x.shape, at_run_time(normalize_axis, attrs.axis, x.ndim))
        u = first.shape[0]
        if counts.shape != (u,) or inverse.shape != (n,) or values.size != outer * u * inner:
            raise shape_error(f"{name}: wrong output shapes", data=x.shape, values=values.shape,
                              indices=first.shape, inverse=inverse.shape, counts=counts.shape)
        status = unique(dt, sorted_, outer, n, inner, ptr(x), u, ptr(values), int64_ptr(first),
                        int64_ptr(inverse), int64_ptr(counts))
        if status == -3:
            raise ValueError(f"{name}: the data does not hold {u} distinct entries, the number "
                             "its outputs were sized for")
        check(status, f"{name} of {x.shape}")
    return run
