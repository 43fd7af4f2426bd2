"""Loading and calling generated fused kernels (the run-time half of compiler/codegen_c.py).

An executable built with generated kernels carries them as one shared library. It is loaded
with cffi's ABI mode (``ffi.dlopen``) only after its section's checksum and architecture have
been checked by the file reader; nothing else from a file is ever executed.

A fused kernel entry's ``attrs["plan"]`` says how to lay out the loop: for each operand, which
kernel input it reads (-1: the anchor's result), how it broadcasts, and whether it is contiguous
along the inner loop. At call time the shapes give ``rows``, ``cols`` and per-operand row
strides; the ``relvm_fused_ctx`` is cached per shape so repeated calls pay only the C call.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import RelvmFormatError

MAX_OPERANDS = 16
MAX_ROW_DIMS = 8

#: The context every generated kernel receives; mirrored in the generated C prelude.
FUSED_CDEF = f"""
typedef struct {{
    int64_t rows;
    int64_t cols;
    int64_t row_ndim;
    int64_t row_dims[{MAX_ROW_DIMS}];
    int64_t row_strides[{MAX_OPERANDS}][{MAX_ROW_DIMS}];
    const void *inputs[{MAX_OPERANDS}];
    void *out;
}} relvm_fused_ctx;
"""


class FusedLibrary:
    """A loaded library of generated kernels: ``symbol(name)`` gives a cffi function."""

    def __init__(self, data: bytes, symbols: Sequence[str]):
        from cffi import FFI

        self.ffi = FFI()
        self.ffi.cdef(FUSED_CDEF + "".join(
            f"void {s}(void *ctx, int64_t row_begin, int64_t row_end);\n" for s in symbols))
        # dlopen needs a path: write the bytes to a private temporary file, load, then unlink.
        fd, path = tempfile.mkstemp(prefix="relvm-kernels-", suffix=".so")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            self.lib = self.ffi.dlopen(path)
        except OSError as e:
            raise RelvmFormatError(f"the kernel library does not load on this machine: {e}",
                                   section="kernels") from None
        finally:
            os.unlink(path)

    def symbol(self, name: str):
        try:
            return getattr(self.lib, name)
        except AttributeError:
            raise RelvmFormatError(f"the kernel library has no kernel {name}",
                                   section="kernels") from None


def _row_strides(view: tuple[int, ...], out_shape: tuple[int, ...], row_ndim: int) -> list[int]:
    """Element strides of an operand over the output's row dims (0 where it broadcasts)."""
    strides, step = [0] * len(view), 1
    for d in range(len(view) - 1, -1, -1):
        strides[d] = 0 if view[d] == 1 and out_shape[d] != 1 else step
        step *= view[d]
    return strides[:row_ndim]


def make_fused_kernel(plan: dict, library: FusedLibrary, n_inputs: int,
                      anchor: Callable[..., None] | None, anchor_args: Sequence[int],
                      anchor_dtype: str | None, pool: tuple | None) -> Callable:
    """A DPS kernel ``kernel(*inputs, out)`` running the plan's generated loop.

    ``pool`` is ``(ffi, lib)`` of relvm._kernels, whose ``relvm_parallel_for`` spreads the rows
    over relvm's thread pool; without it the loop runs on the calling thread.
    """
    ffi = library.ffi
    fn = library.symbol(plan["symbol"])
    pool_fn = None
    if pool is not None:
        pool_ffi, pool_lib = pool
        pool_fn = pool_ffi.cast("relvm_range_fn", int(ffi.cast("uintptr_t", fn)))
        parallel_for = pool_lib.relvm_parallel_for
    col_dims = int(plan["col_dims"])
    operands = [(int(i), str(dt), int(ones), bool(contig)) for i, dt, ones, contig in
                plan["operands"]]
    contexts: dict[tuple, Any] = {}
    pool_ctx: dict[tuple, Any] = {}  # the same contexts as the pool's ``void *``
    scratch: list[np.ndarray] = []

    def context(arrays: Sequence[np.ndarray], out: np.ndarray, anchor_out: np.ndarray):
        key = tuple(a.shape for a in arrays) + (out.shape,)
        ctx = contexts.get(key)
        if ctx is None:
            ctx = ffi.new("relvm_fused_ctx *")
            shape = out.shape
            row_ndim = len(shape) - col_dims
            ctx.row_ndim = row_ndim
            ctx.rows = int(np.prod(shape[:row_ndim], dtype=np.int64))
            ctx.cols = int(np.prod(shape[row_ndim:], dtype=np.int64))
            for d in range(row_ndim):
                ctx.row_dims[d] = shape[d]
            for k, (i, _, ones, _) in enumerate(operands):
                a = anchor_out if i < 0 else arrays[i]
                view = a.shape + (1,) * ones
                view = (1,) * (len(shape) - len(view)) + view
                for d, s in enumerate(_row_strides(view, shape, row_ndim)):
                    ctx.row_strides[k][d] = s
            if len(contexts) > 64:
                contexts.clear()
                pool_ctx.clear()
            contexts[key] = ctx
            if pool is not None:
                pool_ctx[key] = pool_ffi.cast("void *", int(ffi.cast("uintptr_t", ctx)))
        return ctx, key

    def pointers(ctx, arrays, out, anchor_out) -> None:
        """Pointers change from call to call even when shapes do not."""
        for k, (i, _, _, _) in enumerate(operands):
            a = anchor_out if i < 0 else arrays[i]
            ctx.inputs[k] = ffi.cast("const void *", a.ctypes.data)
        ctx.out = ffi.cast("void *", out.ctypes.data)

    def kernel(*args: np.ndarray) -> None:
        arrays, out = args[:n_inputs], args[n_inputs]
        anchor_out = out
        if anchor is not None:
            if anchor_dtype is not None and np.dtype(anchor_dtype) != out.dtype:
                if not scratch or scratch[0].shape != out.shape:
                    scratch[:] = [np.empty(out.shape, anchor_dtype)]
                anchor_out = scratch[0]
            anchor(*[arrays[i] for i in anchor_args], anchor_out)
        ctx, key = context(arrays, out, anchor_out)
        pointers(ctx, arrays, out, anchor_out)
        rows = ctx.rows
        if pool_fn is not None and rows > 1:
            parallel_for(rows, max(1, 16384 // max(ctx.cols, 1)), pool_fn, pool_ctx[key])
        else:
            fn(ctx, 0, rows)
    return kernel
