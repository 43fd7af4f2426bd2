"""Ops of the ``ai.onnx.ml`` domain that are plain tensor computations: Binarizer (a
comparison) and ArrayFeatureExtractor (a gather along the last axis). Their converters are
registered as ``ai.onnx.ml::Op``."""

from __future__ import annotations

from .converters import converter, scalar
from .importer import Node

_ML = "ai.onnx.ml::"


@converter(_ML + "Binarizer", composed="cast(greater(X, threshold))")
def binarizer(n: Node):
    """1 where X is above ``threshold``, else 0 (NaN gives 0), in X's dtype."""
    dtype = n.dtype(0)
    if dtype not in ("float32", "float64", "int32", "int64"):
        raise n.fail(f"X must be float32, float64, int32 or int64, got {dtype}")
    above = n.call("greater", n.x(0), scalar(n, float(n.attr("threshold", 0.0)), dtype))
    return [n.call("cast", above, dtype=dtype)]


@converter(_ML + "ArrayFeatureExtractor", composed="take(X, Y, axis=-1)")
def array_feature_extractor(n: Node):
    """The entries of X's last axis at the indices Y (flattened): (..., len(Y)); a 1-d X gives
    (1, len(Y)). An index outside the axis is a run-time error, as in ONNX Runtime."""
    if n.dtype(1) != "int64":
        raise n.fail(f"Y must be int64, got {n.dtype(1)}")
    x, rank = n.x(0), n.rank(0)
    if rank == 0:
        raise n.fail("X must have at least one axis")
    if rank == 1:
        x = n.call("expand_dims", x, axis=0)
    index = n.call("reshape", n.x(1), newshape=[-1])
    return [n.call("take", x, index, axis=max(rank, 2) - 1, mode="fast")]
