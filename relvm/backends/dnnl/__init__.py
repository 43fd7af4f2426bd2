"""The oneDNN backend: conv, dense/matmul, pooling, layer_norm, softmax and elementwise regions
run by Intel's oneDNN (``libdnnl.so.3``, through its C API in cffi's ABI mode).

Importing this package registers the backend and loads nothing native: :func:`available` and
the runtime load the library on first use. ``patterns.py`` says what it takes, ``compile.py``
turns a region into a JSON artifact, ``runtime.py`` and ``prims.py`` run one.
"""

from __future__ import annotations

from ..external import Backend, register
from . import cost
from .compile import compile_region
from .lib import available
from .patterns import PATTERNS


def make_kernel(artifact: bytes, constants=None):
    """See :func:`relvm.backends.dnnl.runtime.make_kernel` (imported here on first use)."""
    from .runtime import make_kernel as make
    return make(artifact, constants)


def worth(region) -> bool:
    """See :func:`relvm.backends.dnnl.cost.worth`: measured facts, not guesses."""
    return cost.worth(region)


BACKEND = register(Backend("dnnl", PATTERNS, compile_region, make_kernel, available,
                           worth=worth))

__all__ = ["BACKEND", "available", "compile_region", "make_kernel", "worth"]
