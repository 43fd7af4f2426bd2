"""The oneDNN backend: conv, dense/matmul, pooling, layer_norm, softmax and elementwise regions
run by Intel's oneDNN (``libdnnl.so.3``, through its C API in cffi's ABI mode).

Two backends share it: ``dnnl`` computes in float32 (results within float32 rounding of relvm's),
``dnnl_bf16`` multiplies in bfloat16 -- conv activations and weights, matmul operands -- with
float32 accumulation and float32 everywhere else: about 2x faster on CPUs with AVX512_BF16 or
AMX, results within bfloat16's rounding (the user asks for it by name, as OpenVINO's bf16
inference precision).

Importing this package registers the backend and loads nothing native: :func:`available` and
the runtime load the library on first use. ``patterns.py`` says what it takes, ``compile.py``
turns a region into a JSON artifact, ``runtime.py`` and ``prims.py`` run one.
"""

from __future__ import annotations

from ..external import Backend, register
from . import cost
from .compile import compile_region
from .lib import available, available_bf16
from .patterns import PATTERNS


def make_kernel(artifact: bytes, constants=None):
    """See :func:`relvm.backends.dnnl.runtime.make_kernel` (imported here on first use)."""
    from .runtime import make_kernel as make
    return make(artifact, constants)


def worth(region) -> bool:
    """See :func:`relvm.backends.dnnl.cost.worth`: measured facts, not guesses."""
    return cost.worth(region)


def compile_bf16(region) -> bytes:
    """A region's artifact for ``dnnl_bf16``: :func:`compile_region` in precision "bf16"."""
    return compile_region(region, precision="bf16")


def worth_bf16(region) -> bool:
    """See :func:`relvm.backends.dnnl.cost.worth_bf16`."""
    return cost.worth_bf16(region)


BACKEND = register(Backend("dnnl", PATTERNS, compile_region, make_kernel, available,
                           worth=worth))
BACKEND_BF16 = register(Backend("dnnl_bf16", PATTERNS, compile_bf16, make_kernel,
                                available_bf16, worth=worth_bf16))

__all__ = ["BACKEND", "BACKEND_BF16", "available", "available_bf16", "compile_bf16",
           "compile_region", "make_kernel", "worth", "worth_bf16"]
