"""Builders of C kernels, one module per op family, all registered in :data:`BUILDERS`.

A builder turns a :class:`~relvm.runtime.executable.KernelEntry` into a closure that calls the
compiled library (``relvm._kernels``) in destination-passing style. Everything static (the C
function, dtype codes, attributes) is bound when the closure is made; per call it only reads
shapes, looks up a cached plan for them, takes the arrays' addresses and calls C.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ...runtime.executable import KernelEntry


@dataclass(frozen=True)
class Builder:
    """How the C backend makes one op's kernels, and for which dtypes."""

    make: Callable[[KernelEntry], Callable[..., None]]
    dtypes: frozenset[str]
    #: Which dtype of an entry ``dtypes`` is about (default: the first input's).
    dtype_of: Callable[[KernelEntry], str]
    #: Further conditions on an entry (an out_dtype, an index dtype), or None.
    accepts: Callable[[KernelEntry], bool] | None = None
    #: ``make(entry, constants)``: the builder is told which arrays are the VM's constants
    #: (a :class:`~relvm.runtime.kernels.Constants`, or None), e.g. to pack weights once.
    with_constants: bool = False


BUILDERS: dict[str, Builder] = {}


def first_input(entry: KernelEntry) -> str:
    return entry.inputs[0] if entry.inputs else entry.outputs[0]


def first_output(entry: KernelEntry) -> str:
    return entry.outputs[0]


def kernel(*ops: str, dtypes: Iterable[str], dtype_of=first_input, accepts=None,
           with_constants=False):
    """Register the decorated builder for ``ops`` on ``dtypes``."""
    def register(make):
        for op in ops:
            assert op not in BUILDERS, f"two C kernels for {op}"
            BUILDERS[op] = Builder(make, frozenset(dtypes), dtype_of, accepts, with_constants)
        return make
    return register


from . import (attention, dynamic, elementwise, gather_scatter, image,  # noqa: E402,F401
               linalg, nn, packed, quantized, recurrent, reduce, scan, signal,
               text, transform, vision)
