"""Window functions -- HannWindow, HammingWindow, BlackmanWindow -- made constants at import
(their length must be known then), computed in float64 as onnx's reference does and rounded
once to the output dtype."""

from __future__ import annotations

import numpy as np

from .converters import check_made_size, converter
from .importer import ONNX_DTYPES, Node

#: w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N the length (periodic) or length - 1.
_COEFFICIENTS = {"HannWindow": (0.5, 0.5, 0.0), "HammingWindow": (25 / 46, 21 / 46, 0.0),
                 "BlackmanWindow": (0.42, 0.5, 0.08)}


@converter(*_COEFFICIENTS)
def window(n: Node):
    size = np.asarray(n.const(0, "size")).reshape(-1)
    if size.size != 1 or int(size[0]) < 0:
        raise n.fail(f"size must be one non-negative integer, got {size.tolist()}")
    length = int(size[0])
    check_made_size(n, length, "the window")
    dtype = ONNX_DTYPES.get(int(n.attr("output_datatype", 1)))
    if dtype is None or dtype == "bool":
        raise n.fail(f"output_datatype {n.attr('output_datatype')} is not a dtype relvm has")
    span = length if n.attr("periodic", 1) else length - 1
    a0, a1, a2 = _COEFFICIENTS[n.op_type]
    with np.errstate(divide="ignore", invalid="ignore"):
        phase = 2 * np.pi * np.arange(length, dtype=np.float64) / span
        w = a0 - a1 * np.cos(phase) + a2 * np.cos(2 * phase)
    return n.constant(w.astype(dtype))
