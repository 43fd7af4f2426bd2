"""One error family for everything relvm raises on purpose.

Every error a user can provoke (bad IR text, a type mismatch, a bad input to a VM, a corrupted
executable file, a failing kernel) is a subclass of :class:`RelvmError`. Each subclass also
derives from the closest builtin (``ValueError``, ``TypeError``, ``RuntimeError``) so code that
catches builtins keeps working.

This module is imported by the runtime, so it must not import the front end or the compiler.
"""

from __future__ import annotations


class RelvmError(Exception):
    """Base class of every error relvm raises on purpose."""


def _caret_block(source: str | None, line: int | None, column: int | None) -> str:
    """The source line and a caret under ``column`` (both 1-based), or '' if unknown."""
    if not source or not line or line < 1:
        return ""
    lines = source.splitlines()
    if line > len(lines):
        return ""
    text = lines[line - 1].expandtabs(1)
    caret = " " * (max(column or 1, 1) - 1) + "^"
    return f"\n    {text}\n    {caret}"


class _Located(RelvmError):
    """An error about a place in IR text: carries ``line`` and ``column`` (1-based)."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None,
                 source: str | None = None):
        self.message = message
        self.line = line
        self.column = column
        where = f" at line {line}, column {column}" if line else ""
        super().__init__(message + where + _caret_block(source, line, column))


class RelvmSyntaxError(_Located, ValueError):
    """Malformed IR text. ``line``/``column`` locate it; the message shows a caret."""


class RelvmTypeError(_Located, TypeError):
    """A program that parses but does not type-check: a shape, dtype or attribute mismatch."""


class RelvmCompileError(RelvmError, ValueError):
    """A well-typed program the compiler cannot lower (for example a bad params mapping)."""


class RelvmFormatError(RelvmError, ValueError):
    """A corrupted, truncated or incompatible executable file. ``section`` names the part."""

    def __init__(self, message: str, section: str | None = None):
        self.section = section
        prefix = f"executable section {section!r}: " if section else "executable: "
        super().__init__(prefix + message)


class RelvmKernelError(RelvmError, RuntimeError):
    """A kernel that cannot be made: the backend has no kernel for an op and its dtypes, or
    relvm was installed without its compiled C kernels. Not a problem of the file."""


class RelvmInputError(RelvmError, ValueError):
    """An input or output array that does not match a function's signature."""


class RelvmRuntimeError(RelvmError, RuntimeError):
    """A failure while running bytecode: names the function, the pc and the instruction."""


class RelvmOverloadedError(RelvmError, RuntimeError):
    """A request the server cannot take now: its model's queue is full, or the server is
    shutting down (HTTP 503)."""


class RelvmDeadlineError(RelvmError, TimeoutError):
    """A request whose deadline passed before its model could run it (HTTP 504)."""


class RelvmTrustError(RelvmError, PermissionError):
    """A problem with signing keys or the trust store: an unreadable key file, a config or
    cache directory that others can write."""


def unknown_dims_message(where: str, fn_name: str, name: str, known: list[str]) -> str:
    """``where: @fn has no dim 'k' (its dims: n, m); did you mean n?`` -- a misspelled dim name
    given to the CLI (``--dims``, ``--upper-bound``) or to ``relvm.build(upper_bounds=...)``."""
    import difflib

    near = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {near[0]}?" if near else ""
    return (f"{where}: @{fn_name} has no dim {name!r} (its dims: {', '.join(known) or 'none'})"
            f"{hint}")
