"""Linear algebra on batches of matrices: ``linalg.det`` (ONNX Det).

``linalg.det`` is the determinant of each square matrix in the last two axes of ``data``
(``(..., M, M)`` -> ``(...)``), by LU factorization with partial pivoting (the largest entry of
a column as pivot, as LAPACK and Eigen pivot), accumulated in float64 and rounded once to the
dtype: float32 results are as close as the LU of a float32 LAPACK call or closer. An empty
matrix (M = 0) has determinant 1; a singular one 0 (or whatever its rounding leaves).
"""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from .common import check_dtype, differ, fmt_shape, require, tensor_arg
from .registry import OPAQUE, OpTypeError, register


def _det_type(attrs, data):
    t = tensor_arg(data, "data")
    check_dtype(t, "data", ("float32", "float64", "float16"), "a float dtype")
    if t.ndim < 2 or differ(t.shape[-1], t.shape[-2]):
        raise OpTypeError(f"data must hold square matrices in its last two axes (..., M, M), "
                          f"got {fmt_shape(t.shape)}")
    return TensorType(t.shape[:-2], t.dtype)


def _det_ref(attrs, x):
    require(x.ndim >= 2 and x.shape[-1] == x.shape[-2],
            f"linalg.det: data {x.shape} does not hold square matrices")
    with np.errstate(all="ignore"):
        out = np.linalg.det(x.astype(np.float64)) if x.shape[-1] else np.ones(x.shape[:-2])
    return np.asarray(out).astype(x.dtype)


register("linalg.det", inputs=("data",), infer=_det_type, reference=_det_ref, pattern=OPAQUE,
         doc="the determinant of each square matrix in the last two axes, (..., M, M) -> (...), "
             "by LU with partial pivoting in float64")
