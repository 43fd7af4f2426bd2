"""The op registry and every op's definition. Importing this package registers all ops."""

from . import (conv, dynamic, elementwise, gather_scatter, indexing, nn,  # noqa: F401
               pool, reduce, transform)  # (registration)
# ops the ONNX importer needs
from . import (attention, conv_transpose, grid_sample, image, lists, norm,  # noqa: F401
               quantized, recurrent, scan)
from .registry import OPS, Op, get_op

__all__ = ["OPS", "Op", "get_op"]
