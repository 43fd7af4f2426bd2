"""Loading and calling generated fused kernels (made by backends/fusedgen.py).

An executable built with generated kernels carries them as one shared library. It is loaded
with cffi's ABI mode (``ffi.dlopen``) only after its section's checksum and architecture have
been checked by the file reader; nothing else from a file is ever executed.

A fused kernel entry's ``attrs["plan"]`` says how to lay out the loop: for each operand, which
kernel input it reads (-1: the anchor's result), how it broadcasts, and whether it is contiguous
along the inner loop. At call time the shapes give ``rows``, ``cols`` and per-operand row
strides; the ``relvm_fused_ctx`` is cached per shape so repeated calls pay only the C call.

The generated code reads each operand with the element type it was compiled for, along the
inner loop or not, so a plan must say the same: each kernel also defines
``<symbol>_signature`` (:func:`signature`), which :func:`make_fused_kernel` compares with the
plan before using the kernel (libraries built before relvm wrote signatures have none: their
plans are trusted). And since the loop reads every operand through strides made from its
shape, the shapes are checked against the loop once per shape: an operand broadcasts to the
output over the row dims and, along ``cols``, matches it (contiguous) or is all ones.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import tempfile
import threading
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import RelvmFormatError

MAX_OPERANDS = 16
MAX_ROW_DIMS = 8
#: The name of a generated kernel: ASCII digits only (``\d`` would take other scripts' digits).
SYMBOL = re.compile(r"relvm_fused_[0-9]{1,9}")

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


def signature(operands: Sequence[tuple[str, bool]], out_dtype: str) -> str:
    """What a generated kernel was compiled for: each operand's dtype and whether it is read
    along the inner loop, then the output's dtype (``"float32/1 float32/0 -> float32"``)."""
    return " ".join(f"{dt}/{int(contiguous)}" for dt, contiguous in operands) + f" -> {out_dtype}"


class FusedLibrary:
    """A loaded library of generated kernels: ``symbol(name)`` gives a cffi function.

    Kernels are declared to cffi as they are first asked for, and only under names of the form
    ``relvm_fused_<digits>`` (``SYMBOL``): nothing else from a file reaches cffi's parser or the
    dynamic linker. ``symbols`` may declare some at once.
    """

    def __init__(self, data: bytes, symbols: Sequence[str] = ()):
        from cffi import FFI

        from .elf import defined_symbols

        #: What the library defines itself: the only names looked up in it (dlsym would also
        #: find the symbols of the libraries it links to, libc's ``system`` among them).
        self.defined = defined_symbols(data)
        self.ffi = FFI()
        self.ffi.cdef(FUSED_CDEF)
        self._declared: set[str] = set()
        self._lock = threading.Lock()
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
        for s in symbols:
            self._declare(s)

    def _declare(self, name: str) -> None:
        if name in self._declared:
            return
        if not isinstance(name, str) or not SYMBOL.fullmatch(name):
            raise RelvmFormatError(f"{name!r:.60} is not the name of a generated kernel "
                                   f"(relvm_fused_<digits>)", section="kernels")
        if name not in self.defined:
            raise RelvmFormatError(f"the kernel library does not define {name} itself",
                                   section="kernels")
        with self._lock:
            if name not in self._declared:
                self.ffi.cdef(f"void {name}(void *ctx, int64_t row_begin, int64_t row_end);\n"
                              f"extern const char {name}_signature[];\n")
                self._declared.add(name)

    def symbol(self, name: str):
        self._declare(name)
        try:
            return getattr(self.lib, name)
        except AttributeError:
            raise RelvmFormatError(f"the kernel library has no kernel {name}",
                                   section="kernels") from None

    def block(self, name: str):
        """Kernel ``name``'s form over blocks of a product's output (``<name>_block``, a
        ``relvm_block_fn``), or None where the library has none (a kernel that does not work in
        place over its anchor's result, or a library made before relvm wrote them)."""
        self._declare(name)
        block = f"{name}_block"
        if block not in self.defined:
            return None
        with self._lock:
            if block not in self._declared:
                self.ffi.cdef(f"void {block}(void *ctx, int64_t offset, int64_t rows, "
                              f"int64_t cols, int64_t ld);\n")
                self._declared.add(block)
        return getattr(self.lib, block)

    def signature(self, name: str) -> str | None:
        """What kernel ``name`` was compiled for (:func:`signature`), or None if the library
        predates signatures."""
        self._declare(name)
        if f"{name}_signature" not in self.defined:
            return None
        try:
            text = getattr(self.lib, f"{name}_signature")
        except (AttributeError, KeyError):  # cffi: KeyError for a missing variable
            return None
        return self.ffi.string(text, 1024).decode("ascii", "replace")


_opened: dict[bytes, FusedLibrary] = {}
_opened_lock = threading.Lock()


def open_library(data: bytes) -> FusedLibrary:
    """The library of generated kernels ``data``, opened once per process for each content:
    executables loaded again and again (or many with the same kernels) share one copy."""
    key = hashlib.sha256(data).digest()
    with _opened_lock:
        library = _opened.get(key)
        if library is None:
            library = _opened[key] = FusedLibrary(data)
    return library


def check_plan(plan: dict, library: FusedLibrary, out_dtype: str, name: str) -> None:
    """Refuse a plan that does not say what its kernel was compiled for."""
    compiled = library.signature(plan["symbol"])
    planned = signature([(dt, contiguous) for _, dt, _, contiguous in plan["operands"]],
                        out_dtype)
    if compiled is not None and compiled != planned:
        raise RelvmFormatError(f"kernel {name!r}: its plan ({planned}) is not what "
                               f"{plan['symbol']} was compiled for ({compiled})",
                               section="meta")


def _row_layout(name: str, operands: list, col_dims: int, arrays: Sequence[np.ndarray],
                out: np.ndarray, anchor_out: np.ndarray) -> tuple[int, int, list[list[int]]]:
    """The loop over ``out``: its rows, its columns and, per operand, its element strides over
    the output's row dims (0 where it broadcasts). Each operand must fit the loop the strides
    describe, or the loop reads past it: a ValueError says which does not. One pass per
    operand: a call with shapes not seen before (most calls, in real traffic) computes this."""
    shape = out.shape
    ndim = len(shape)
    row_ndim = ndim - col_dims
    if not 0 <= row_ndim <= MAX_ROW_DIMS:
        raise ValueError(f"{name}: an output of shape {shape} has {row_ndim} row dims; the "
                         f"loop takes 0..{MAX_ROW_DIMS}")
    rows, cols = math.prod(shape[:row_ndim]), math.prod(shape[row_ndim:])
    inner = shape[row_ndim:]
    layout = []
    for k, (i, _, ones, contiguous) in enumerate(operands):
        a = anchor_out if i < 0 else arrays[i]
        view = a.shape + (1,) * ones
        pad = ndim - len(view)
        if pad >= 0:
            view = (1,) * pad + view
            cols_fit = (view[row_ndim:] == inner if contiguous else
                        all(v == 1 for v in view[row_ndim:]))
        if pad < 0 or not cols_fit:
            _misfit(name, k, a, shape, col_dims, contiguous)
        strides = [0] * row_ndim
        step = cols if contiguous else 1
        for d in range(row_ndim - 1, -1, -1):
            v = view[d]
            if v == shape[d]:
                strides[d] = step
            elif v != 1:
                _misfit(name, k, a, shape, col_dims, contiguous)
            step *= v
        layout.append(strides)
    return rows, cols, layout


def _misfit(name: str, k: int, a: np.ndarray, shape: tuple, col_dims: int, contiguous: bool):
    raise ValueError(f"{name}: operand {k} of shape {a.shape} does not fit the loop over the "
                     f"output's shape {shape} ({col_dims} inner dims"
                     f"{', contiguous' if contiguous else ', broadcast'})")


def make_fused_kernel(plan: dict, library: FusedLibrary, n_inputs: int,
                      anchor: Callable[..., None] | None, anchor_args: Sequence[int],
                      anchor_dtype: str | None, pool: tuple | None,
                      out_dtype: str | None = None, name: str = "fused",
                      block_anchor: Callable | None = None) -> Callable:
    """A DPS kernel ``kernel(*inputs, out)`` running the plan's generated loop.

    ``pool`` is ``(ffi, lib)`` of relvm._kernels, whose ``relvm_parallel_for`` spreads the rows
    over relvm's thread pool; without it the loop runs on the calling thread. With
    ``out_dtype``, the plan is first checked against the kernel's signature.

    ``block_anchor(post_address, ctx, whole)``, where the backend has one, makes the anchor's
    product run the kernel's ``_block`` form over each block of its output while the block is
    in cache (``ctx()``: this call's loop context; ``whole()``: the loop over the whole
    output, for calls the product runs without it); None where it cannot. The kernel then
    makes one pass instead of two.
    """
    if out_dtype is not None:
        check_plan(plan, library, out_dtype, name)
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
            rows, cols, layout = _row_layout(name, operands, col_dims, arrays, out, anchor_out)
            ctx = ffi.new("relvm_fused_ctx *")
            shape = out.shape
            row_ndim = len(shape) - col_dims
            ctx.row_ndim = row_ndim
            ctx.rows = rows
            ctx.cols = cols
            ctx.row_dims[0:row_ndim] = shape[:row_ndim]
            for k, strides in enumerate(layout):
                ctx.row_strides[k][0:row_ndim] = strides
            if len(contexts) > 64:
                contexts.clear()
                pool_ctx.clear()
            contexts[key] = ctx
            if pool is not None:
                pool_ctx[key] = pool_ffi.cast("void *", int(ffi.cast("uintptr_t", ctx)))
        return ctx, key

    reads = [i for i, _, _, _ in operands]
    anchor_out_dtype = np.dtype(anchor_dtype) if anchor_dtype is not None else None
    address = ffi.from_buffer  # one cffi call an array (``a.ctypes.data`` made a ctypes object)

    def pointers(ctx, arrays, out, anchor_out) -> None:
        """Pointers change from call to call even when shapes do not."""
        inputs = ctx.inputs
        for k, i in enumerate(reads):
            inputs[k] = address(anchor_out if i < 0 else arrays[i])
        ctx.out = address(out)

    def loop(ctx, void) -> None:
        """The loop over ctx's rows, on the pool (``void``: ctx as the pool's pointer)."""
        rows = ctx.rows
        if pool_fn is not None and rows > 1:
            parallel_for(rows, max(1, 16384 // max(ctx.cols, 1)), pool_fn, void)
        else:
            fn(ctx, 0, rows)

    blocked = None  # the anchor's product with the rest applied block by block
    current: list[Any] = [None, None]  # this call's: the pool's void *, its context
    block_fn = (library.block(plan["symbol"]) if block_anchor is not None and anchor is not None
                and pool is not None else None)
    if block_fn is not None:
        blocked = block_anchor(int(ffi.cast("uintptr_t", block_fn)), lambda: current[0],
                               lambda: loop(current[1], current[0]))

    def kernel(*args: np.ndarray) -> None:
        arrays, out = args[:n_inputs], args[n_inputs]
        if blocked is not None and out.dtype == anchor_out_dtype:
            ctx, key = context(arrays, out, out)
            pointers(ctx, arrays, out, out)
            current[:] = [pool_ctx[key], ctx]
            blocked(*[arrays[i] for i in anchor_args], out)
            return
        anchor_out = out
        if anchor is not None:
            if anchor_dtype is not None and np.dtype(anchor_dtype) != out.dtype:
                if not scratch or scratch[0].shape != out.shape:
                    scratch[:] = [np.empty(out.shape, anchor_dtype)]
                anchor_out = scratch[0]
            anchor(*[arrays[i] for i in anchor_args], anchor_out)
        ctx, key = context(arrays, out, anchor_out)
        pointers(ctx, arrays, out, anchor_out)
        loop(ctx, pool_ctx.get(key))

    def bind(args: Sequence[np.ndarray], fixed: Sequence[bool]) -> Callable | None:
        """The call on ``args`` (inputs, then the output) as a replay makes it again (see
        ``runtime/vm/replay.py``): a loop context of its own with the shapes' fields and the
        fixed arrays' pointers set now, so a call sets only the others' (those it is given,
        in order) and calls the loop, or the product (bound too) that runs it per block. None
        for a product run apart from the loop (a scratch output, or none bound)."""
        arrays, out = args[:n_inputs], args[n_inputs]
        product = blocked is not None and out.dtype == anchor_out_dtype
        if anchor is not None and not product:
            return None
        shared, key = context(arrays, out, out)
        ctx = ffi.new("relvm_fused_ctx *")
        ffi.memmove(ctx, shared, ffi.sizeof("relvm_fused_ctx"))
        slots: dict[int, list] = {}  # arg index -> the context fields it fills
        for k, i in enumerate(reads):
            slots.setdefault(n_inputs if i < 0 else i, []).append(k)
        slots.setdefault(n_inputs, []).append(-1)
        inputs = ctx.inputs

        def place(fields: list, pointer) -> None:
            for k in fields:
                if k < 0:
                    ctx.out = pointer
                else:
                    inputs[k] = pointer
        keep = [a for a, f in zip(args, fixed) if f]  # alive while their pointers are held
        for i, fields in slots.items():
            if fixed[i]:
                place(fields, address(args[i]))
        varying = [(i, slots.get(i, [])) for i in range(len(args)) if not fixed[i]]
        void = (pool_ffi.cast("void *", int(ffi.cast("uintptr_t", ctx))) if pool is not None
                else None)
        if product:
            at = list(anchor_args) + [n_inputs]
            bind_product = getattr(blocked, "bind", None)
            run = bind_product and bind_product([args[i] for i in at], [fixed[i] for i in at],
                                                current=void)
            if run is None:
                return None
            given_at = {i: n for n, (i, _) in enumerate(varying)}
            order = [given_at[i] for i in at if not fixed[i]]
        else:
            def run(*_ignored: np.ndarray) -> None:
                loop(ctx, void)
            order = []

        def bound(*given: np.ndarray) -> None:
            for (_, fields), a in zip(varying, given):
                place(fields, address(a))
            run(*[given[n] for n in order])
        bound.keep = (ctx, keep)
        return bound

    kernel.in_product = blocked is not None  # the loop runs inside the product, per block
    kernel.bind = bind
    return kernel
