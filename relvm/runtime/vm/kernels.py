"""Resolve an executable's kernel table to callables, through the backend it was built for.

A kernel is called in destination-passing style: ``kernel(*inputs, *outputs)`` writes its
results into the preallocated output arrays and returns nothing. Backends live in
``relvm/backends``; each exposes ``make_kernel(entry) -> callable``.

Generated fused kernels come from the executable's own library only when its native code is
trusted (``Executable.native``: built in this process, signed by a key the user trusts, or
trusted by the caller). Otherwise the library's bytes are never loaded: the kernels are
generated again from their descriptions in the kernel table (steps and plan are data) and
compiled here when a C compiler is present, else each fused kernel runs its steps through the
backend's own kernels. :func:`native_path` says which, and why.

A loaded file's kernel entries were checked at load (``verify/kernelcheck.py``), but a backend may
still refuse one (an op or dtype it has no kernel for, attribute values it cannot run, a
library that lacks a kernel): whatever it raises becomes a RelvmKernelError naming the kernel,
so making a VM fails only within relvm's error family.
"""

from __future__ import annotations

import importlib
import threading
import warnings
from typing import Any, Callable, Sequence

import numpy as np

from ...errors import RelvmError, RelvmFormatError, RelvmKernelError
from ..executable import Executable, KernelEntry

_lock = threading.Lock()

#: Backend name -> module. Names are stored in executables: never rename one.
BACKENDS = {"numpy": "relvm.backends.numpy_ref", "c": "relvm.backends.c"}


class Constants:
    """The arrays a VM loads with LoadConst, as its kernels may ask: "is this array one of them?"

    A constant never changes while the VM lives, so a kernel may prepare it once (the C
    backend packs dense weights for its GEMM) and reuse the result whenever the same array
    comes back. Only the VM's own (read-only) array objects count, not copies or views.

    Each thread calling a VM has kernels of its own (they keep per-call state), but all share
    the VM's Constants, and with it what was prepared from them (:meth:`prepared`): threads do
    not each pack the weights again.
    """

    def __init__(self, arrays: Sequence[np.ndarray] = ()):
        self._ids = {id(a): a for a in arrays}
        self._prepared: dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def holds(self, array: np.ndarray) -> bool:
        return self._ids.get(id(array)) is array

    def prepared(self, array: np.ndarray, how: tuple, make: Callable[[], Any]) -> Any:
        """What ``make()`` prepares from constant ``array``, made once per VM for each ``how``
        (a hashable key naming everything the result depends on besides the array's values)
        and shared by every thread's kernels; a lock keeps two threads from making it twice."""
        assert self.holds(array)  # so its id is not reused while the VM lives
        key = (id(array),) + how
        got = self._prepared.get(key)
        if got is None:
            with self._lock:
                got = self._prepared.get(key)
                if got is None:
                    got = self._prepared[key] = make()
        return got


def resolve_kernels(exe: Executable, constants: Constants | None = None
                    ) -> list[Callable]:
    module_name = BACKENDS.get(exe.backend)
    if module_name is None:
        raise RelvmFormatError(f"unknown kernel backend {exe.backend!r}; this relvm knows "
                               + ", ".join(BACKENDS), section="kernels")
    backend = importlib.import_module(module_name)
    library = _generated_library(exe)
    direct = getattr(backend, "fused_kernel", None)
    kernels = []
    for k, entry in enumerate(exe.kernels):
        def generic(entry=entry) -> Callable:
            if library and _plan(entry):
                return _generated_kernel(entry, library, backend, constants)
            return backend.make_kernel(entry, constants)
        try:
            if entry.op == "external":
                kernels.append(_external_kernel(exe, entry, backend, constants))
                continue
            kernel = direct(entry, constants, generic) if direct and entry.op == "fused" \
                else None
            kernels.append(kernel or generic())
        except RelvmError:
            raise
        except Exception as e:  # a backend's own KeyError, cffi's CDefError, ...
            raise RelvmKernelError(f"kernel {entry.name!r}#{k} ({entry.op}) cannot be made: "
                                   f"{type(e).__name__}: {e}") from None
    return kernels


def _external_kernel(exe: Executable, entry: KernelEntry, backend, constants) -> Callable:
    """A region compiled by an external backend: its runtime's kernel over the artifact, or
    (the backend cannot run here, and the executable was loaded with ``external_fallback``)
    the region's steps on ``backend``'s own kernels."""
    from ...backends import external

    compiler, symbol = entry.attrs["compiler"], entry.attrs["symbol"]
    why = external.unavailable(compiler)
    if why is None:
        kernel = external.require(compiler).runtime(exe.externals[symbol].data, constants)
        return _named(kernel, entry.name)
    if not exe.external_fallback:
        raise RelvmKernelError(f"region {symbol!r}: {why} {external.FALLBACK_HINT}")
    from ...backends.ckernels.chain import make_chain

    region = entry.attrs["region"]
    steps = KernelEntry(entry.name, "fused",
                        {"steps": region["steps"], "outputs": region["outputs"]},
                        entry.inputs, entry.outputs)
    return _named(make_chain(steps, lambda step: backend.make_kernel(step, constants)),
                  entry.name)


def _named(kernel: Callable, name: str) -> Callable:
    try:
        kernel.__name__ = name
    except (AttributeError, TypeError):  # a callable object that keeps its own
        pass
    return kernel


def _plan(entry: KernelEntry) -> dict | None:
    return entry.attrs.get("plan") if entry.op == "fused" else None


def _generated_library(exe: Executable):
    """The executable's generated kernels, loaded once per Executable (shared by its VMs, and
    by every executable carrying the same library): the file's own library when its native
    code is trusted, else one generated and compiled here from the kernel table, else None
    (the backend then runs each fused kernel's steps)."""
    if not any(map(_plan, exe.kernels)):
        return None
    with _lock:
        if not hasattr(exe, "_generated"):
            exe._generated, exe._native_path = _library_for(exe)
            if not exe.native.trusted and exe.kernel_library:
                warnings.warn(_untrusted_warning(exe), UntrustedCodeWarning,
                              stacklevel=_caller_level())
    return exe._generated


class UntrustedCodeWarning(UserWarning):
    """An executable's native code was not run because it is not trusted (once per file)."""


def native_path(exe: Executable) -> str:
    """Where the executable's generated kernels come from, and why (``relvm inspect`` and
    ``vm.stats.native_code`` show it)."""
    if not any(map(_plan, exe.kernels)):
        return "no generated kernels"
    _generated_library(exe)
    return exe._native_path


def planned_path(exe: Executable) -> str:
    """What :func:`native_path` would say, found without loading or building anything (for
    ``relvm inspect``, which never runs a file's code)."""
    if not any(map(_plan, exe.kernels)):
        return "no generated kernels"
    if exe.native.trusted and exe.kernel_library:
        return f"the file's own kernels: {exe.native.why}"
    why = exe.native.why if exe.kernel_library else "the file carries no kernel library"
    from ...backends.toolchain import has_compiler

    if has_compiler():
        return f"generated here from the file's kernel descriptions: {why}"
    return f"relvm's library kernels, step by step: {why}, and there is no C compiler"


def _library_for(exe: Executable):
    """(the generated kernels' library or None, where they come from and why)."""
    from ...backends.fused import open_library

    if exe.native.trusted and exe.kernel_library:
        try:
            library = open_library(exe.kernel_library)
        except RelvmError:
            raise
        except Exception as e:  # whatever opening it raises
            raise RelvmFormatError(f"the kernel library cannot be opened: "
                                   f"{type(e).__name__}: {e}", section="kernels") from None
        return library, f"the file's own kernels: {exe.native.why}"
    why = exe.native.why if exe.kernel_library else "the file carries no kernel library"
    try:
        library = open_library(_compile_again(exe))
    except RelvmError as e:
        return None, (f"relvm's library kernels, step by step: {why}, and generating the "
                      f"kernels here failed ({_first_line(e)})")
    return library, f"generated here from the file's kernel descriptions: {why}"


def _compile_again(exe: Executable) -> bytes:
    """The generated kernels of ``exe``, made from their descriptions and compiled here."""
    from ...backends.fusedgen import PRELUDE, CannotGenerate, generate
    from ...backends.toolchain import compile_library

    sources = []
    for entry in exe.kernels:
        plan = _plan(entry)
        if not plan:
            continue
        steps = _checked_steps(entry)
        anchor = next((o[1] for o in plan["operands"] if o[0] < 0), None)
        rank = entry.output_ranks[0] if entry.output_ranks else None
        if rank is None:
            raise RelvmFormatError("the file predates recorded kernel ranks", section="meta")
        try:
            sources.append(generate(plan["symbol"], steps, plan, entry.inputs,
                                    entry.outputs[0], rank, anchor))
        except CannotGenerate as e:
            raise RelvmFormatError(f"kernel {entry.name!r}: {e}", section="meta") from None
    return compile_library(PRELUDE + "".join(sources))


def _checked_steps(entry: KernelEntry) -> list[dict]:
    """A fused entry's steps as the generator reads them, each op's attributes completed with
    its defaults. The verifier checked them against each op's schema at load, which accepts
    a missing attribute that has a default (a step changed to ``nn.leaky_relu`` without an
    ``alpha``); the generator reads them all."""
    from ...ops.registry import OPS

    return [dict(s, attrs={**{a.name: a.default for a in OPS[s["op"]].attrs}, **s["attrs"]})
            for s in entry.attrs["steps"]]


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _untrusted_warning(exe: Executable) -> str:
    instead = ("generated here from their descriptions" if exe._generated is not None
               else "run step by step on relvm's own kernels")
    how = (f"trust its signer: relvm trust add KEYFILE (key {exe.native.signer})"
           if exe.native.signer else "rebuild it yourself")
    return (f"relvm: not running the native code this executable carries ({exe.native.why}); "
            f"its kernels are {instead}. To run its own, {how}, or load it with "
            f"trust_native_code=True")


def _caller_level() -> int:
    """The stacklevel of the first frame outside relvm: a warning names the user's line."""
    import sys

    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("relvm."):
        frame, level = frame.f_back, level + 1
    return level


def _generated_kernel(entry: KernelEntry, library, backend, constants) -> Callable:
    """A fused kernel: the backend computes the anchor (dense, conv, ...), then the generated
    loop applies the rest in one pass over the output, on relvm's thread pool."""
    from ...backends.fused import make_fused_kernel

    plan = _plan(entry)
    steps = entry.attrs["steps"]
    first = steps[0]
    anchor = anchor_args = anchor_dtype = block = None
    if any(o[0] < 0 for o in plan["operands"]):
        anchor_dtype = next(o[1] for o in plan["operands"] if o[0] < 0)
        anchor_args = [i for _, i in first["args"]]
        anchor_entry = KernelEntry(first["op"], first["op"], first["attrs"],
                                   tuple(entry.inputs[i] for i in anchor_args), (anchor_dtype,))
        anchor = backend.make_kernel(anchor_entry, constants)
        block_anchor = getattr(backend, "block_anchor", None)
        if block_anchor is not None:  # the rest applied per block of the product, in cache
            def block(address: int, ctx: Callable, whole: Callable) -> Callable | None:
                return block_anchor(anchor_entry, constants, address, ctx, whole)
    thread_pool = getattr(backend, "thread_pool", None)
    pool = thread_pool() if thread_pool is not None else None
    kernel = make_fused_kernel(plan, library, len(entry.inputs), anchor, anchor_args or (),
                               anchor_dtype, pool, entry.outputs[0], entry.name, block)
    kernel.__name__ = entry.name
    return kernel
