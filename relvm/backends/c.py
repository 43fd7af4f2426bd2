"""The C backend: kernels compiled from ``kernels/*.c`` into ``relvm._kernels``, called
through cffi in destination-passing style (``kernel(*inputs, *outputs)``).

float32 ``nn.dense`` (constant weights) and ``nn.conv2d`` run on relvm's own GEMM
(``kernels/pgemm.c``); the other matrix products go to OpenBLAS (``scipy-openblas32``);
everything else is relvm's own C, with vectorized loops and one thread pool shared with OpenBLAS
(see :mod:`relvm.runtime.threads`).
The NumPy references (:mod:`relvm.backends.numpy_ref`) define what each kernel computes.

:data:`SUPPORTED` lists the (op, dtype) pairs this backend has kernels for, and
:func:`supports` says whether it can run a given kernel entry; :func:`make_kernel` never falls
back to another backend: it raises for anything else. Fused entries (``op == "fused"``) run as a
chain of their steps' C kernels (:mod:`relvm.backends.ckernels.chain`).

Examples
--------
>>> from relvm.backends import c
>>> ("nn.dense", "float32") in c.SUPPORTED
True
"""

from __future__ import annotations

from typing import Callable

from ..errors import RelvmKernelError
from ..runtime.executable import KernelEntry
from .ckernels import BUILDERS, packed
from .ckernels.chain import make_chain

#: (op, dtype) pairs with a C kernel; the dtype is the op's data dtype (the first input's, or
#: the result's for ops such as zeros and arange that make data from attributes or scalars).
SUPPORTED: frozenset[tuple[str, str]] = frozenset(
    (op, dtype) for op, builder in BUILDERS.items() for dtype in builder.dtypes)


def supports(entry: KernelEntry) -> bool:
    """True when :func:`make_kernel` has a C kernel for ``entry`` (op, dtypes and attributes).

    A fused entry is supported when each of its steps is.
    """
    if entry.op == "fused":
        try:
            make_chain(entry, _checked_step)
        except RelvmKernelError:
            return False
        return True
    builder = BUILDERS.get(entry.op)
    if builder is None or builder.dtype_of(entry) not in builder.dtypes:
        return False
    return builder.accepts is None or builder.accepts(entry)


def make_kernel(entry: KernelEntry, constants=None) -> Callable[..., None]:
    """The C kernel for ``entry``: call it as ``kernel(*inputs, *outputs)``.

    ``constants`` (a :class:`~relvm.runtime.kernels.Constants`) tells which arrays are the VM's
    constants, so weights can be prepared once (dense weights are packed for relvm's GEMM).

    Raises
    ------
    RelvmKernelError
        When there is no C kernel for the entry's op and dtypes, or when relvm was installed
        without its compiled kernels.
    """
    if entry.op == "fused":
        def chain() -> Callable[..., None]:
            return make_chain(entry, lambda step: make_kernel(step, constants))
        kernel = fused_kernel(entry, constants, chain) or chain()
        kernel.__name__ = entry.name
        return kernel
    if not supports(entry):
        dtypes = ", ".join(entry.inputs) or "no inputs"
        raise RelvmKernelError(f"kernel {entry.name!r}: the c backend has no kernel for op "
                               f"{entry.op!r} on {dtypes} -> {', '.join(entry.outputs)}")
    builder = BUILDERS[entry.op]
    try:
        kernel = builder.make(entry, constants) if builder.with_constants else builder.make(entry)
    except ImportError as e:
        raise RelvmKernelError(f"kernel {entry.name!r}: the c backend is unavailable (relvm was "
                               f"installed without its compiled kernels?): {e}") from None
    kernel.__name__ = entry.name
    return kernel


def fused_kernel(entry: KernelEntry, constants, fallback: Callable[[], Callable]
                 ) -> Callable[..., None] | None:
    """One C call for a fused ``dense|conv2d -> [bias_add] -> [relu | clip]`` entry (the epilogue
    applied in registers by relvm's GEMM), or None for any other fused entry; ``fallback()``
    makes the generic kernel, for shapes the epilogue does not cover."""
    if not packed.supports(entry):
        return None
    try:
        kernel = packed.make_fused(entry, constants, fallback)
    except ImportError as e:
        raise RelvmKernelError(f"kernel {entry.name!r}: the c backend is unavailable (relvm was "
                               f"installed without its compiled kernels?): {e}") from None
    kernel.__name__ = entry.name
    return kernel


def block_anchor(entry: KernelEntry, constants, address: int, ctx: Callable[[], object],
                 whole: Callable[[], None]) -> Callable[..., None] | None:
    """The product ``entry`` (a fused entry's first step) running a generated kernel's block
    form (at ``address``; ``ctx()`` its context for the call under way) over each block of its
    output while it is in cache, or None for products without such a kernel here (see
    ``packed.block_anchor``; ``whole()`` applies it to the whole output instead)."""
    try:
        kernel = packed.block_anchor(entry, constants, packed.Post(address, ctx), whole)
    except ImportError as e:
        raise RelvmKernelError(f"kernel {entry.name!r}: the c backend is unavailable (relvm was "
                               f"installed without its compiled kernels?): {e}") from None
    return kernel


def _checked_step(entry: KernelEntry) -> Callable[..., None]:
    """For :func:`supports`: check a fused entry's step without building its kernel."""
    if not supports(entry):
        raise RelvmKernelError(f"no C kernel for step {entry.op}")
    return lambda *args: None


def thread_pool():
    """``(ffi, lib)`` of relvm._kernels, for generated kernels to run on relvm's thread pool."""
    from .native import load

    return load()
