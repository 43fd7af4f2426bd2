"""What the C kernel builders share: the library, dtype codes, errors and shape plans."""

from __future__ import annotations

import math
from typing import Any, Hashable, Sequence

import numpy as np

from ... import dtypes
from ...ir.nodes import Attrs
from ...ops.registry import OPS
from ..native import load

#: dtype name -> the code kernels/relvm_config.h gives it (relvm.dtypes order).
CODE = {name: i for i, name in enumerate(dtypes.DTYPES)}
ITEMSIZE = {name: dt.itemsize for name, dt in dtypes.DTYPES.items()}

FLOATS = ("float32", "float64")
#: Every integer dtype: the kernels declared on INTEGERS or NUMBERS implement each one (a
#: kernel with fewer names its own tuple).
INTEGERS = ("int64", "int32", "int8", "uint8", "int16", "uint16", "uint32", "uint64")
NUMBERS = FLOATS + INTEGERS
ALL = tuple(dtypes.DTYPES)

MAX_DIMS = 64  # NEST_MAX_DIMS in kernels/internal/nest.h
PLAN_CACHE_SIZE = 256  # shapes remembered per kernel; dynamic dims make more, rarely

#: RELVM_UNSUPPORTED (relvm_config.h): what a kernel returns for arguments it does not take.
UNSUPPORTED = -1
_STATUS = {UNSUPPORTED: "arguments the kernel does not support", -2: "out of memory",
           -3: "an index out of range", -4: "OpenBLAS is not loaded",
           -5: "dims too large for BLAS (2**31 or more)"}


def library() -> tuple[Any, Any]:
    """``(ffi, lib)``; ImportError when relvm._kernels is not built."""
    return load()


def attrs_of(entry) -> Attrs:
    """The entry's attributes as the op references read them: lists as tuples, defaults filled."""
    given = {k: _freeze(v) for k, v in entry.attrs.items()}
    for spec in OPS[entry.op].attrs:
        given.setdefault(spec.name, spec.default)
    return Attrs(given)


def _freeze(v: Any) -> Any:
    return tuple(_freeze(x) for x in v) if isinstance(v, list) else v


def check(status: int, what: str) -> None:
    """Raise for a kernel's non-zero status; ``what`` names the op and the shapes."""
    if status == 0:
        return
    reason = _STATUS.get(status, f"status {status}")
    if status == -2:
        raise MemoryError(f"{what}: {reason}")
    raise ValueError(f"{what}: {reason}")


def int64s(values: Sequence[int]) -> Any:
    """A C ``int64_t[]`` holding ``values`` (never empty: C reads the first entry at least)."""
    ffi, _ = library()
    return ffi.new("int64_t[]", [int(v) for v in values] or [0])


def shape_args(*shapes: Sequence[int]) -> tuple:
    """``(ndim, int64_t[] dims)`` for each shape, flattened: how the kernels that plan in C
    take their operands' shapes. Made once per shape set (kernels keep them by shape), so a
    call on shapes seen before converts nothing."""
    out: list = []
    for s in shapes:
        out += [len(s), int64s(s)]
    return tuple(out)


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of ``shape``."""
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def merge_dims(shape: Sequence[int], strides: Sequence[Sequence[int]]
               ) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """A loop nest with fewer, longer dims that visits the same elements in the same order.

    Drops dims of size 1 and merges each dim into the one before it where every operand's
    strides line up (a contiguous run, or a broadcast along both). Always at least one dim.
    """
    dims: list[tuple[int, list[int]]] = []
    for d, n in enumerate(shape):
        if n == 1:
            continue
        st = [s[d] for s in strides]
        if dims and all(prev == cur * n for prev, cur in zip(dims[-1][1], st)):
            dims[-1] = (dims[-1][0] * n, st)
        else:
            dims.append((n, st))
    if not dims:
        return (1,), [(1,) for _ in strides]
    return (tuple(n for n, _ in dims),
            [tuple(st[i] for _, st in dims) for i in range(len(strides))])


def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides that read a contiguous ``shape`` broadcast to ``out_shape`` (0 repeats)."""
    lead = len(out_shape) - len(shape)
    own = contiguous_strides(shape)
    return tuple(0 if d < lead or shape[d - lead] == 1 else own[d - lead]
                 for d in range(len(out_shape)))


def check_rank(ndim: int, what: str) -> None:
    if ndim > MAX_DIMS:
        raise ValueError(f"{what}: rank {ndim} is over the C kernels' limit of {MAX_DIMS}")


def shape_error(what: str, **shapes: Any) -> ValueError:
    listed = ", ".join(f"{k} {tuple(v)}" for k, v in shapes.items())
    return ValueError(f"{what}: {listed}")


def remember(cache: dict, key: Hashable, plan: Any) -> Any:
    """Store ``plan`` for ``key`` and return it; a full cache is emptied first, so shapes that
    keep changing (dynamic dims) cannot grow it without bound.

    Kernels look plans up inline (``cache.get(key)``): a hit, the per-call fast path, skips every
    shape computation and check.
    """
    if len(cache) >= PLAN_CACHE_SIZE:
        cache.clear()
    cache[key] = plan
    return plan


def prod(values: Sequence[int]) -> int:
    return math.prod(values)


def np_dtype(name: str) -> np.dtype:
    return dtypes.to_numpy(name)
