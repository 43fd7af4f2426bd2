"""Kernel backends: how an executable's kernel table becomes callables (see runtime/kernels.py)."""
