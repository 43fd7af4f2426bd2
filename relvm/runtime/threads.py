"""How many threads relvm computes with: one count for its C kernels and for OpenBLAS.

The C kernels run on one thread pool, and OpenBLAS runs its GEMM jobs on that same pool (through
OpenBLAS's threads callback; see ``kernels/threads.c``), so kernels and BLAS together never keep
more than ``get_num_threads()`` threads busy. The count starts from ``OMP_NUM_THREADS`` when it is
set (as ONNX Runtime and PyTorch honour it), else every core this process may run on.

This module imports no compiled code: a count set before the kernels load is applied when they
do (``relvm.backends.native`` calls :func:`_bind`).
"""

from __future__ import annotations

import os
from typing import Any, Callable

_MAX = 256  # the pool's limit (kernels/threads.c)


def _initial_count() -> int:
    value = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if value.isdigit() and int(value) >= 1:
        return min(int(value), _MAX)
    try:
        return max(1, min(len(os.sched_getaffinity(0)), _MAX))
    except (AttributeError, OSError):
        return max(1, min(os.cpu_count() or 1, _MAX))


_count = _initial_count()
_lib: Any = None  # relvm._kernels' lib, once loaded
#: Called with the new count whenever it changes (external backends' own thread pools).
_listeners: list[Callable[[int], None]] = []


def set_num_threads(k: int) -> None:
    """Use ``k`` threads (the calling thread included) for kernels and BLAS.

    Parameters
    ----------
    k : int
        At least 1; at most 256.

    Examples
    --------
    >>> relvm.set_num_threads(1)   # single-threaded, e.g. to time one core
    >>> relvm.get_num_threads()
    1
    """
    global _count
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= _MAX:
        raise ValueError(f"set_num_threads expects an int in [1, {_MAX}], got {k!r}")
    _count = k
    if _lib is not None:
        _apply(_lib)
    for listener in list(_listeners):
        listener(k)


def get_num_threads() -> int:
    """The number of threads kernels and BLAS use (see :func:`set_num_threads`)."""
    return _count


def on_change(listener: Callable[[int], None]) -> None:
    """Call ``listener(k)`` now and whenever the count changes: how a library with threads of
    its own (an external backend's) follows :func:`set_num_threads`."""
    _listeners.append(listener)
    listener(_count)


def _apply(lib: Any) -> None:
    lib.relvm_threads_set(_count)
    lib.relvm_blas_set_threads(_count)


def _bind(lib: Any) -> None:
    """Called once the kernel library is loaded: from now on counts apply to it."""
    global _lib
    _lib = lib
    _apply(lib)
