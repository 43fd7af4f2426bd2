"""The compiled kernel library ``relvm._kernels``, loaded once with OpenBLAS bound to it.

OpenBLAS comes from the ``scipy-openblas32`` wheel: its package tells where the shared library
is (``get_lib_dir()``), and the kernels open it there with ``dlopen`` (``kernels/blas.c``), so
nothing depends on paths from build time or on ``LD_LIBRARY_PATH``. When its version is the one
the kernels were compiled against, OpenBLAS runs its threads on relvm's pool; set
``RELVM_BLAS_POOL=0`` to leave OpenBLAS its own threads.

OpenBLAS still starts its own server threads when it loads, and they busy-wait for about 2**28
cycles after starting (and after ``set_num_threads``) before they sleep: on a machine with few
cores that steals a core from the pool's GEMM threads, whose jobs wait on each other, and a
product can take ten times longer. They never get work once OpenBLAS runs on relvm's pool, so
the loader sets ``OPENBLAS_THREAD_TIMEOUT=4`` (sleep at once) for the load, unless the user set
it, and restores the environment afterwards.

Raises ImportError (from :func:`load`) when the extension was not built; callers that can do
without (tests, the backend list) catch it.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from ..runtime import threads

_loaded: tuple[Any, Any] | None = None
_lock = threading.Lock()  # threads whose first kernels load at once open OpenBLAS once


def _use_pool() -> bool:
    return os.environ.get("RELVM_BLAS_POOL", "1") != "0"


def _import_openblas():
    """scipy_openblas32, whose import loads the library (with its idle threads quiet)."""
    quiet = (_use_pool() and "scipy_openblas32" not in sys.modules
             and "OPENBLAS_THREAD_TIMEOUT" not in os.environ)
    if quiet:
        os.environ["OPENBLAS_THREAD_TIMEOUT"] = "4"
    try:
        import scipy_openblas32
    finally:
        if quiet:
            del os.environ["OPENBLAS_THREAD_TIMEOUT"]
    return scipy_openblas32


def _openblas_path() -> str:
    try:
        scipy_openblas32 = _import_openblas()
    except ImportError:
        raise ImportError("relvm's C kernels need OpenBLAS from the scipy-openblas32 package: "
                          "pip install scipy-openblas32") from None
    lib_dir = scipy_openblas32.get_lib_dir()
    return os.path.join(lib_dir, scipy_openblas32.get_library(fullname=True))


def load() -> tuple[Any, Any]:
    """``(ffi, lib)`` of relvm._kernels, with OpenBLAS opened and the thread count applied."""
    global _loaded
    if _loaded is not None:
        return _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        from .. import _kernels  # noqa: F401  (ImportError when relvm was built without it)

        ffi, lib = _kernels.ffi, _kernels.lib
        path = _openblas_path()
        if lib.relvm_blas_open(path.encode(), int(_use_pool())) != 0:
            raise ImportError(f"relvm's C kernels could not open OpenBLAS at {path}")
        threads._bind(lib)
        _loaded = (ffi, lib)
    return _loaded


def available() -> bool:
    """True when the compiled kernels and OpenBLAS load."""
    try:
        load()
    except ImportError:
        return False
    return True


def blas_info() -> dict[str, Any]:
    """What OpenBLAS relvm uses: its configuration and whether it runs on relvm's pool."""
    ffi, lib = load()
    return {"config": ffi.string(lib.relvm_blas_config()).decode(),
            "uses_relvm_pool": bool(lib.relvm_blas_uses_pool()),
            "path": _openblas_path()}
