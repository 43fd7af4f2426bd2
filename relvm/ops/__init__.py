"""The op registry and every op's definition. Importing this package registers all ops."""

from . import (conv, dynamic, elementwise, gather_scatter, indexing, nn,  # noqa: F401
               pool, reduce, transform)  # (registration)
# ops the ONNX importer needs
from . import (attention, conv_transpose, deform_conv, grid_sample, image,  # noqa: F401
               linalg, lists, norm, quantized, recurrent, roi, scan, signal, text,
               vision)
from .registry import OPS, Op, get_op

__all__ = ["OPS", "Op", "get_op"]
