"""Kernel backends: how an executable's kernel table becomes callables (see runtime/vm/kernels.py)."""
