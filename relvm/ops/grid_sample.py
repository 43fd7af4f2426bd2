"""``image.grid_sample``: sample channels-first data at the points a grid gives, as ONNX GridSample.

``data`` is ``(N, C, *spatial)`` with 1 to 3 spatial dims (``(N, C, H, W)``, ``(N, C, D, H, W)``);
``grid`` is ``(N, *out, k)``, ``k`` the number of spatial dims, each point's coordinates
normalized to [-1, 1] and given innermost first (x, then y, then z: the reverse of the
data's axis order). The result is ``(N, C, *out)``, of data's dtype.

Each coordinate ``g`` of an axis of ``L`` pixels maps to a pixel position ``x`` (ONNX's
reference, ``onnx/reference/ops/op_grid_sample.py``, op by op in the grid's dtype):
``align_corners`` maps -1 and 1 to the centres of the edge pixels, ``x = (g + 1) / 2 * (L - 1)``;
otherwise to their outer edges, ``x = ((g + 1) * L - 1) / 2``. The axis spans ``[lo, hi]``:
``[0, L - 1]``, or ``[-0.5, L - 0.5]``. With ``nearest`` ``x`` is first rounded half to even. A
position outside ``[lo, hi]`` moves: ``border`` clamps it to ``[0, L - 1]`` (not for
``cubic``, below), ``reflection`` reflects it off ``lo`` and ``hi`` until it is inside (in
float64, then rounded to the grid's dtype), ``zeros`` leaves it. Then ``nearest`` reads pixel
``x``; ``linear`` the pixels ``floor(x)`` and ``floor(x) + 1`` with weights ``1 - t``, ``t``
(``t = x - floor(x)``), and ``cubic`` the four from ``floor(x) - 1`` with Keys' weights at
``A = -0.75``, axis by axis (N-linear, N-cubic: the innermost axis first). A pixel outside the
axis reads 0 (``zeros``), the nearest edge pixel (``border``) or its reflection off ``lo`` and
``hi`` (``reflection``). So ``cubic`` with ``border`` reads the four taps around the unclamped
position, each at the nearest edge pixel, as ONNX Runtime and PyTorch do (onnx's reference
evaluator clamps the position first, which reads other pixels past the edge).

Where ONNX's reference is silent or undefined, relvm gives: a NaN position (a NaN coordinate,
or an infinite one reflected) samples NaN; an infinite one under ``zeros`` reads nothing (0),
under ``border`` the edge pixel; an axis of one pixel with ``align_corners`` reflects everything
onto that pixel; data with an empty spatial axis reads 0 everywhere. Weights and sums are
computed in float64 and the result rounded once to data's dtype (the C kernel sums float32
data in float32, as ONNX's reference and ONNX Runtime do).
"""

from __future__ import annotations

import numpy as np

from ..ir import dims as D
from ..ir.types import TensorType
from .common import FLOATS, differ, fmt_shape, np_dtype, require, tensor_arg
from .registry import BOOL, OPAQUE, OpTypeError, attr, choice, register

METHODS = ("nearest", "linear", "cubic")
PADDING = ("zeros", "border", "reflection")
#: Keys' cubic convolution parameter, fixed by ONNX GridSample.
CUBIC_A = -0.75
#: Taps per axis of each method.
TAPS = {"nearest": 1, "linear": 2, "cubic": 4}


def _grid_sample_type(attrs, d, g):
    data = tensor_arg(d, "data")
    grid = tensor_arg(g, "grid")
    if not 3 <= data.ndim <= 5:
        raise OpTypeError("data must be (N, C) and 1 to 3 spatial dims (rank 3 to 5), got "
                          f"{fmt_shape(data.shape)}")
    if data.dtype not in FLOATS:
        raise OpTypeError(f"data must have a float dtype, got {data.dtype}")
    if grid.dtype not in FLOATS:
        raise OpTypeError(f"grid must have a float dtype, got {grid.dtype}")
    k = data.ndim - 2
    if grid.ndim != data.ndim:
        raise OpTypeError(f"grid must have rank {data.ndim} (N, {k} output dims, {k}) for data "
                          f"{fmt_shape(data.shape)}, got {fmt_shape(grid.shape)}")
    if differ(grid.shape[0], data.shape[0]):
        raise OpTypeError(f"grid's batch {D.dim_str(grid.shape[0])} differs from data's "
                          f"{D.dim_str(data.shape[0])}")
    if differ(grid.shape[-1], k):
        raise OpTypeError(f"grid's last dim must be {k} (a coordinate per spatial dim of data "
                          f"{fmt_shape(data.shape)}), got {D.dim_str(grid.shape[-1])}")
    batch = data.shape[0] if D.is_static(data.shape[0]) else grid.shape[0]
    return TensorType((batch, data.shape[1]) + tuple(grid.shape[1:-1]), data.dtype)


# --- the reference -------------------------------------------------------------------------------

def coordinate_dtype(grid_dtype: np.dtype) -> np.dtype:
    """The dtype positions are computed in: the grid's (float16 in float32, as the C build)."""
    return np.dtype(np.float64) if grid_dtype == np.float64 else np.dtype(np.float32)


def _positions(g: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    """Pixel positions of normalized coordinates ``g``, op by op in ``g``'s dtype."""
    t = g.dtype.type
    if align_corners:
        return (g + t(1)) / t(2) * t(size - 1)
    return ((g + t(1)) * t(size) - t(1)) / t(2)


def reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``x`` (float64) reflected off ``lo`` and ``hi`` until inside ``[lo, hi]``."""
    span = hi - lo
    below, above = x < lo, x > hi
    if span <= 0:
        return np.where(below | above, lo, x)
    dx = np.where(below, lo - x, x - hi)
    n = np.trunc(dx / span)
    r = dx - n * span
    even = np.fmod(n, 2) == 0
    return np.where(below, np.where(even, lo + r, hi - r),
                    np.where(above, np.where(even, hi - r, lo + r), x))


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    """Keys' weights of the taps at ``-1 - t``, ``-t``, ``1 - t``, ``2 - t`` from the position."""
    a = CUBIC_A
    near = [t, 1 - t]
    far = [t + 1, 2 - t]
    w_far = [((a * s - 5 * a) * s + 8 * a) * s - 4 * a for s in far]
    w_near = [((a + 2) * s - (a + 3)) * s * s + 1 for s in near]
    return [w_far[0], w_near[0], w_near[1], w_far[1]]


def axis_taps(attrs, g: np.ndarray, size: int):
    """The taps of one axis for coordinates ``g``: ``(index, weight, inside, nan)``.

    ``index``, ``weight`` and ``inside`` are ``g.shape + (taps,)``: the pixel each tap reads
    (clamped or reflected into the axis as ``padding_mode`` says), its weight, whether it reads a
    pixel (a ``zeros`` tap outside the axis reads 0); ``nan`` marks positions that sample NaN.
    """
    lo, hi = (0.0, size - 1.0) if attrs.align_corners else (-0.5, size - 0.5)
    n = TAPS[attrs.method]
    with np.errstate(invalid="ignore", over="ignore"):
        x = _positions(g, size, attrs.align_corners)
        if attrs.method == "nearest":
            x = np.rint(x)
        outside = (x < lo) | (x > hi)
        if attrs.padding_mode == "border" and n != 4:  # cubic clamps each tap instead
            x = np.where(outside, np.clip(x, 0, size - 1), x).astype(x.dtype)
        elif attrs.padding_mode == "reflection":
            x = np.where(outside, reflect(x.astype(np.float64), lo, hi), x).astype(x.dtype)
        nan = np.isnan(x)
        # Past a few pixels outside every tap reads 0 under zeros (an infinite position too).
        x = np.clip(np.where(nan, 0, x), -5.0, size + 4.0).astype(np.float64)
        if n == 1:
            first, weights = x, [np.ones_like(x)]
        else:
            first = np.floor(x)
            t = x - first
            weights = [1 - t, t] if n == 2 else _cubic_weights(t)
            if n == 4:
                first = first - 1
    index = first.astype(np.int64)[..., None] + np.arange(n)
    weight = np.stack(weights, axis=-1)
    inside = (index >= 0) & (index < size)
    if attrs.padding_mode == "border":
        index = np.clip(index, 0, size - 1)
    elif attrs.padding_mode == "reflection":
        index = reflect(index.astype(np.float64), lo, hi).astype(np.int64)
    if attrs.padding_mode != "zeros":
        inside = np.ones_like(inside)
    return np.where(inside, index, 0), weight, inside, nan


def _grid_sample_ref(attrs, data, grid):
    k = data.ndim - 2
    n, c = data.shape[:2]
    spatial, out = data.shape[2:], grid.shape[1:-1]
    require(grid.shape[0] == n, f"image.grid_sample: grid's batch {grid.shape[0]} differs from "
                                f"data's {n}")
    require(grid.shape[-1] == k, f"image.grid_sample: grid's last dim must be {k}, got "
                                 f"{grid.shape[-1]}")
    dtype = np_dtype(data.dtype.name)
    points = int(np.prod(out, dtype=np.int64))
    if n * c * points == 0 or 0 in spatial:
        return np.zeros((n, c) + out, dtype)
    g = grid.reshape(n, points, k).astype(coordinate_dtype(grid.dtype))
    # Axis a of data reads coordinate k-1-a: the grid gives x (the innermost axis) first.
    taps = [axis_taps(attrs, g[..., k - 1 - a], spatial[a]) for a in range(k)]
    nt = TAPS[attrs.method]
    strides = np.cumprod((1,) + spatial[::-1])[::-1][1:]
    flat, inside = np.zeros((n, points) + (nt,) * k, np.int64), True
    for a, (index, _, ok, _) in enumerate(taps):
        shape = (n, points) + (1,) * a + (nt,) + (1,) * (k - 1 - a)
        flat = flat + index.reshape(shape) * int(strides[a])
        inside = inside & ok.reshape(shape)
    values = np.take_along_axis(data.reshape(n, c, -1).astype(np.float64),
                                flat.reshape(n, 1, -1), axis=2).reshape((n, c) + flat.shape[1:])
    values = np.where(inside[:, None], values, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        for a in reversed(range(k)):  # the innermost axis first, as ONNX's reference
            w = taps[a][1].reshape((n, 1, points) + (1,) * a + (nt,))
            values = (values * w).sum(axis=-1)
    nan = np.logical_or.reduce([t[3] for t in taps])
    values = np.where(nan[:, None], np.nan, values)
    return values.reshape((n, c) + out).astype(dtype)


register("image.grid_sample", inputs=("data", "grid"), infer=_grid_sample_type,
         reference=_grid_sample_ref, pattern=OPAQUE,
         attrs=[attr("method", choice(*METHODS), "linear"),
                attr("padding_mode", choice(*PADDING), "zeros"),
                attr("align_corners", BOOL, False)],
         doc="sample (N, C, d1, ..., dk) data at the normalized points of an (N, o1, ..., ok, k) "
             "grid (nearest, N-linear, N-cubic; zeros, border or reflection padding; k = 1 to 3) "
             "as ONNX GridSample does")
