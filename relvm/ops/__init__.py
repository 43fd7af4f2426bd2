"""The op registry and every op's definition. Importing this package registers all ops."""

from . import dynamic, elementwise, nn, reduce, transform  # noqa: F401  (registration)
from .registry import OPS, Op, get_op

__all__ = ["OPS", "Op", "get_op"]
