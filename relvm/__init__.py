"""relvm: a bytecode virtual machine for dynamic-shape neural network inference.

>>> import relvm
>>> mod = relvm.parse('''
... def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32] {
...   add(%x, 1f)
... }''')
>>> print(mod["main"].checked_type)
fn (Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32]

The front end (parser, type inference, compiler) is imported on first use, so a process that only
loads and runs executables never imports lark or the compiler.
"""

from __future__ import annotations

from typing import Any

from .errors import (RelvmCompileError, RelvmError, RelvmFormatError, RelvmInputError,
                     RelvmKernelError, RelvmRuntimeError, RelvmSyntaxError, RelvmTrustError,
                     RelvmOverloadedError, RelvmDeadlineError,
                     RelvmTypeError)

from .runtime import Executable, VirtualMachine
from .runtime.file.loader import load, load_bytes
from .runtime.threads import get_num_threads, set_num_threads
from .session import InferenceSession, IOBinding, NodeArg, RunOptions, SessionOptions

__version__ = "0.5.0"


def parse(text: str, constants: Any = None, *, source_name: str | None = None):
    """Parse Relay text into a type-checked :class:`relvm.ir.Module`.

    Parameters
    ----------
    text : str
        The program, in TVM Relay's text format (``#[version = "0.0.5"]``) with named symbolic
        dims such as ``Tensor[(n, 784), float32]``.
    constants : sequence or mapping of array_like, optional
        Values for ``meta[relay.Constant][k]`` references: a list indexed by ``k``, or a dict.

    Returns
    -------
    Module
        Every expression carries its inferred ``checked_type``.

    Raises
    ------
    RelvmSyntaxError
        Malformed text, an unknown name or op; the message has the line, column and a caret.
    RelvmTypeError
        A shape, dtype or attribute mismatch, located the same way.

    Examples
    --------
    >>> import relvm
    >>> m = relvm.parse("def @main(%a: Tensor[(n), float32]) { nn.relu(%a) }")
    >>> str(m["main"].body.checked_type)
    'Tensor[(n), float32]'
    """
    from .frontend.parser import parse as _parse

    return _parse(text, constants=constants, source_name=source_name)


def build(module, params=None, *, upper_bounds=None, backend: str = "c", fuse: bool = True,
          channels_last: bool = True, targets=(), external_fallback: bool = False):
    """Compile a module into an Executable; see :func:`relvm.compiler.build`."""
    from .compiler import build as _build

    return _build(module, params, upper_bounds=upper_bounds, backend=backend, fuse=fuse,
                  channels_last=channels_last, targets=targets,
                  external_fallback=external_fallback)


def partition(module, targets, *, params=None):
    """Regions of ``module`` for external backends (``"dnnl"``, or registered ones), highest
    priority first; see :func:`relvm.passes.partition.partition`.

    ``params`` (weights of ``@main`` by name) are bound as constants first, as
    :func:`build` does, so that the backends' patterns and cost models see them as weights.

    Examples
    --------
    >>> part = relvm.partition(relvm.parse(text), ["dnnl"], params=weights)
    >>> print(part)                      # def @dnnl_0(..., Compiler="dnnl", ...)
    >>> exe = relvm.build(part)
    """
    from .compiler import bind_weights
    from .passes.partition import partition as _partition

    return _partition(bind_weights(module, params) if params else module, targets)


def print_module(module) -> str:
    """The Relay text of a module; ``parse(print_module(m)) == m``."""
    from .ir.printer import print_module as _print

    return _print(module)


__all__ = ["parse", "print_module", "build", "partition", "load", "load_bytes", "Executable", "VirtualMachine",
           "InferenceSession", "SessionOptions", "RunOptions", "NodeArg", "IOBinding",
           "set_num_threads", "get_num_threads",
           "RelvmError", "RelvmSyntaxError", "RelvmTypeError", "RelvmCompileError",
           "RelvmFormatError", "RelvmInputError", "RelvmKernelError", "RelvmRuntimeError", "RelvmTrustError",
           "RelvmOverloadedError", "RelvmDeadlineError"]
