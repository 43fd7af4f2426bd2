"""Resolve an executable's kernel table to callables, through the backend it was built for.

A kernel is called in destination-passing style: ``kernel(*inputs, *outputs)`` writes its
results into the preallocated output arrays and returns nothing. Backends live in
``relvm/backends``; each exposes ``make_kernel(entry) -> callable``.
"""

from __future__ import annotations

import importlib
from typing import Callable

from ..errors import RelvmFormatError
from .executable import Executable

#: Backend name -> module. Names are stored in executables: never rename one.
BACKENDS = {"numpy": "relvm.backends.numpy_ref"}


def resolve_kernels(exe: Executable) -> list[Callable]:
    module_name = BACKENDS.get(exe.backend)
    if module_name is None:
        raise RelvmFormatError(f"unknown kernel backend {exe.backend!r}; this relvm knows "
                               + ", ".join(BACKENDS), section="kernels")
    backend = importlib.import_module(module_name)
    return [backend.make_kernel(entry) for entry in exe.kernels]
