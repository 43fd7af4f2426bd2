"""C kernels for the ops whose values are shapes or decide shapes: shape_of, arange, argwhere
(dyn.reshape is a copy, in transform.py); and guard. The VM has already sized each output from the input
values; the kernels fill it and check the size agrees."""

from __future__ import annotations

import numpy as np

from . import first_output, kernel
from .common import (ALL, CODE, NUMBERS, attrs_of, check_rank, int64s, library, np_dtype,
                     shape_error)


@kernel("shape_of", dtypes=ALL)
def make_shape_of(entry):
    name = entry.name

    def run(x, out):
        if out.shape != (x.ndim,):
            raise shape_error(f"{name}: wrong output shape", data=x.shape, output=out.shape)
        out[...] = x.shape
    return run


@kernel("arange", dtypes=NUMBERS, dtype_of=first_output)
def make_arange(entry):
    ffi, lib = library()
    dtype = np_dtype(entry.outputs[0])
    dt, arange, ptr = CODE[entry.outputs[0]], lib.relvm_arange, ffi.from_buffer

    def run(start, stop, step, out):
        # As the reference: the inputs take the result dtype first.
        a, s = np.asarray(start).astype(dtype), np.asarray(step).astype(dtype)
        if out.ndim != 1:
            raise shape_error("arange: the output must be 1-d", output=out.shape)
        arange(dt, ptr(out), out.shape[0], ptr(a), ptr(s))
    return run


@kernel("argwhere", dtypes=ALL)
def make_argwhere(entry):
    ffi, lib = library()
    dt, argwhere, ptr, name = CODE[entry.inputs[0]], lib.relvm_argwhere, ffi.from_buffer, entry.name

    def run(cond, out):
        check_rank(cond.ndim, name)
        if out.ndim != 2 or out.shape[1] != cond.ndim:
            raise shape_error(f"{name}: wrong output shape", condition=cond.shape,
                              output=out.shape)
        rows = out.shape[0]
        found = argwhere(dt, cond.ndim, int64s(cond.shape), ptr(cond),
                         ffi.cast("int32_t *", ptr(out)), rows)
        if found != rows:
            raise ValueError(f"{name}: the condition has {found} non-zero entries, but the "
                             f"output has room for {rows}")
    return run


@kernel("guard", dtypes=ALL)
def make_guard(entry):
    message = attrs_of(entry).message

    def run(x, condition, out):
        if not condition[()]:
            raise ValueError(message)
        if out.shape != x.shape:
            raise shape_error("guard: wrong output shape", data=x.shape, output=out.shape)
        out[...] = x
    return run
