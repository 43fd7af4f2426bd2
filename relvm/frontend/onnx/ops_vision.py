"""Ops added for issue 19's remaining coverage: NonMaxSuppression, Det, Col2Im,
TensorScatter; and for issue 46: RoiAlign, MaxRoiPool."""

from __future__ import annotations

import numpy as np

from .converters import converter, scalar
from .importer import Node


def _one_value(n: Node, i: int, dtype: str, default):
    """Input i as a tensor of one element of ``dtype`` (a constant ``default`` when absent)."""
    if not n.has(i):
        return scalar(n, default, dtype)
    if n.dtype(i) != dtype:
        raise n.fail(f"input {i} must have dtype {dtype}, got {n.dtype(i)}")
    return n.x(i)


@converter("NonMaxSuppression")
def non_max_suppression(n: Node):
    """``vision.non_max_suppression`` (its kept rows first, then padding), then its first
    ``count`` rows: a result of run-time length."""
    center = int(n.attr("center_point_box", 0))
    if center not in (0, 1):
        raise n.fail(f"center_point_box must be 0 or 1, got {center}")
    for i, what in ((0, "boxes"), (1, "scores")):
        if n.dtype(i) != "float32":
            raise n.fail(f"{what} must be float32, got {n.dtype(i)}")
    out = n.call("vision.non_max_suppression", n.x(0), n.x(1),
                 _one_value(n, 2, "int64", 0), _one_value(n, 3, "float32", 0.0),
                 _one_value(n, 4, "float32", -np.inf), center_point_box=bool(center))
    rows = n.call("arange", scalar(n, 0, "int64"), n.field(out, 1), scalar(n, 1, "int64"))
    return n.call("take", n.field(out, 0), rows, axis=0)


@converter("Det")
def det(n: Node):
    """``linalg.det``, which checks the shape."""
    if n.dtype(0) not in ("float32", "float64", "float16"):
        raise n.fail(f"input must be a float tensor, got {n.dtype(0)}")
    if n.rank(0) < 2:
        raise n.fail(f"input must have rank 2 or more (..., M, M), got rank {n.rank(0)}")
    return n.call("linalg.det", n.x(0))


@converter("Col2Im")
def col2im(n: Node):
    """``image.col2im``: image_shape and block_shape decide the result's rank and shape, so
    they must be known at import."""
    from .ops_array import _static_ints

    if n.dtype(0) not in ("float32", "float64", "float16"):
        raise n.fail(f"input must be a float tensor, got {n.dtype(0)}")
    image = _static_ints(n, 1, "image_shape")
    block = _static_ints(n, 2, "block_shape")
    k = len(image)
    if len(block) != k:
        raise n.fail(f"block_shape {block} and image_shape {image} differ in length")
    attrs = {name: [int(v) for v in n.attr(name)] for name in ("dilations", "pads", "strides")
             if n.attr(name) is not None}
    return n.call("image.col2im", n.x(0), image_shape=image, block_shape=block, **attrs)


@converter("TensorScatter")
def tensor_scatter(n: Node):
    """``tensor_scatter``, a new tensor (ONNX allows the update in place; relvm's values are
    never aliased); no write_indices means 0 for every batch."""
    mode = n.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise n.fail(f"mode must be 'linear' or 'circular', got {mode!r}")
    if n.has(2) and n.dtype(2) != "int64":
        raise n.fail(f"write_indices must be int64, got {n.dtype(2)}")
    starts = n.x(2) if n.has(2) else scalar(n, 0, "int64")
    return n.call("tensor_scatter", n.x(0), n.x(1), starts, axis=int(n.attr("axis", -2)),
                  circular=mode == "circular")


@converter("RoiAlign")
def roi_align(n: Node):
    """``vision.roi_align``: opset 16's coordinate_transformation_mode, whose default is
    half_pixel; before it, ONNX Runtime computes as output_half_pixel."""
    mode = str(n.attr("mode", "avg")).lower()  # ONNX Runtime lowers it too
    if mode not in ("avg", "max"):
        raise n.fail(f"mode must be 'avg' or 'max', got {mode!r}")
    coordinates = n.attr("coordinate_transformation_mode",
                         "half_pixel" if n.opset >= 16 else "output_half_pixel")
    if coordinates not in ("half_pixel", "output_half_pixel"):
        raise n.fail("coordinate_transformation_mode must be 'half_pixel' or "
                     f"'output_half_pixel', got {coordinates!r}")
    if n.dtype(0) not in ("float32", "float64"):
        raise n.fail(f"X must be float32 or float64, got {n.dtype(0)}")
    sizes = {k: int(n.attr(k, d)) for k, d in
             (("output_height", 1), ("output_width", 1), ("sampling_ratio", 0))}
    for k, v in sizes.items():
        if v < 0:
            raise n.fail(f"{k} must be 0 or more, got {v}")
    return n.call("vision.roi_align", n.x(0), n.x(1), n.x(2), mode=mode,
                  spatial_scale=float(n.attr("spatial_scale", 1.0)),
                  coordinate_transformation_mode=coordinates, **sizes)


@converter("MaxRoiPool")
def max_roi_pool(n: Node):
    """``vision.max_roi_pool`` (float32: the one dtype ONNX Runtime computes it in)."""
    pooled = n.attr("pooled_shape")
    if pooled is None or len(pooled) != 2 or min(int(v) for v in pooled) < 1:
        raise n.fail(f"pooled_shape must be two sizes of 1 or more, got {pooled}")
    if n.dtype(0) != "float32":
        raise n.fail(f"X must be float32 (as in ONNX Runtime), got {n.dtype(0)}")
    return n.call("vision.max_roi_pool", n.x(0), n.x(1), pooled_shape=[int(v) for v in pooled],
                  spatial_scale=float(n.attr("spatial_scale", 1.0)))
