"""Pooling over regions of interest: ``vision.roi_align`` (ONNX RoiAlign) and
``vision.max_roi_pool`` (ONNX MaxRoiPool), as ONNX Runtime's CPU kernels compute them.

Semantics fixed here, which the C kernels (``kernels/roi.c``) follow number for number:

``vision.roi_align(data, rois, batch_indices)``: data ``(N, C, H, W)``, rois ``(R, 4)`` of
data's dtype (float32 or float64), each ``[x1, y1, x2, y2]``, batch_indices ``(R,)`` int64;
the result is ``(R, C, output_height, output_width)``. Op by op in data's dtype, as ONNX
Runtime: a roi starts at ``x1 * s - o`` and ends at ``x2 * s - o`` (``s`` the spatial_scale
rounded to float32, ``o`` 0.5 for ``half_pixel``, 0 for ``output_half_pixel``, ONNX's opset 10
behaviour); with ``output_half_pixel`` its size is at least 1 (``max(size, 1)``; a NaN size
stays NaN). A bin is ``size / output`` wide; it is sampled on a grid of ``sampling_ratio``
points per axis, or, when that is 0, ``ceil(size / output)`` (none when that is 0 or less;
below 0, an inverted ``half_pixel`` roi, ONNX Runtime fails on an integer overflow).
Sample ``i`` of bin ``p`` lies at ``(start + p * bin) + (i + 0.5) * bin / grid``. A sample
with ``y < -1``, ``y > H``, ``x < -1``, ``x > W`` (or a NaN coordinate) reads nothing: its
four weights and positions are 0 (it still counts, and reads ``0 * data[0]``). Otherwise a
coordinate at or below 0 is 0; ``low = trunc(y)``, ``high = low + 1``, except that from
``H - 1`` on both are ``H - 1`` and ``y`` is ``H - 1``; ``ly = y - low``, ``hy = 1 - ly``; the
four weights are ``hy * hx``, ``hy * lx``, ``ly * hx``, ``ly * lx`` for the pixels
``(low_y, low_x)``, ``(low_y, high_x)``, ``(high_y, low_x)``, ``(high_y, high_x)``.
``avg`` adds each sample's ``((t1 + t2) + t3) + t4`` (``tk`` a weight times its pixel) in the
grid's row-major order and divides by the sample count (at least 1); ``max`` (ONNX Runtime's
rule, not the interpolated value's maximum) takes each sample's ``max(max(max(t1, t2), t3),
t4)`` and the maximum of those, ``max(a, b)`` being ``b if a < b else a`` (C++'s std::max);
a bin without samples is 0. Where ONNX Runtime's behaviour is undefined relvm gives: data with
no pixel (H or W 0) gives 0; an adaptive grid that is not finite or above ``MAX_GRID`` per axis
(a NaN or astronomically large roi) is a run-time error. A batch index outside ``[0, N)`` is a
run-time error, as in ONNX Runtime.

``vision.max_roi_pool(data, rois)``: data ``(N, C, H, W)`` and rois ``(R, 5)`` float32 (ONNX
Runtime's only dtype), each ``[batch, x1, y1, x2, y2]``; the result is ``(R, C, ph, pw)``
(``pooled_shape``). The batch is ``trunc(batch)`` (outside ``[0, N)`` or NaN: a run-time
error); each coordinate is ``round(c * s)`` in float32, halves away from 0 (relvm clamps it to
``[-2**30, 2**30]``, NaN to ``2**30``, where ONNX Runtime's int conversion is undefined). The
roi is ``max(y2 - y1 + 1, 1)`` pixels high, a bin ``roi / ph`` (float32); bin ``p`` covers
rows ``floor(p * bin)`` to ``ceil((p + 1) * bin)`` (excluded) from ``y1``, clipped to
``[0, H]``. An empty bin is 0; otherwise ``best`` starts at the lowest float and each pixel,
row by row, makes it ``best if pixel < best else pixel`` (ONNX Runtime's ``std::max(pixel,
best)``): the largest pixel, except that a NaN pixel restarts it (NaN if the bin's last pixel
is NaN, else the largest pixel after its last NaN).
"""

from __future__ import annotations

import numpy as np

from ..ir import dims as D
from ..ir.types import TensorType
from .common import check_dtype, differ, fmt_shape, require, tensor_arg
from .registry import FLOAT, INT, INTS, OPAQUE, OpTypeError, attr, choice, register

MODES = ("avg", "max")
COORDINATES = ("half_pixel", "output_half_pixel")
#: Largest adaptive sampling grid per axis and bin: ``ceil(roi / output)`` above it (a roi of
#: more than a million pixels per output bin) is refused rather than looped over.
MAX_GRID = 1 << 20
#: MaxRoiPool's rounded roi coordinates are clamped to +-CLAMP (NaN to CLAMP).
CLAMP = 1 << 30


# --- types ---------------------------------------------------------------------------------------

def _num_rois(*dims):
    """The first static dim of ``dims`` (the others are assumed equal to it), else the first."""
    return next((d for d in dims if D.is_static(d)), dims[0])


def _check_data(data) -> TensorType:
    x = tensor_arg(data, "data")
    if x.ndim != 4:
        raise OpTypeError(f"data must be (N, C, H, W), got {fmt_shape(x.shape)}")
    return x


def _roi_align_type(attrs, data, rois, batch_indices):
    x = _check_data(data)
    check_dtype(x, "data", ("float32", "float64"), "dtype float32 or float64")
    r, b = tensor_arg(rois, "rois"), tensor_arg(batch_indices, "batch_indices")
    if r.ndim != 2 or differ(r.shape[1], 4):
        raise OpTypeError(f"rois must have shape (num_rois, 4), got {fmt_shape(r.shape)}")
    if r.dtype != x.dtype:
        raise OpTypeError(f"rois must have data's dtype {x.dtype}, got {r.dtype}")
    check_dtype(b, "batch_indices", ("int64",), "dtype int64")
    if b.ndim != 1:
        raise OpTypeError(f"batch_indices must have shape (num_rois,), got {fmt_shape(b.shape)}")
    if differ(b.shape[0], r.shape[0]):
        raise OpTypeError(f"batch_indices {fmt_shape(b.shape)} and rois {fmt_shape(r.shape)} "
                          "differ in their roi count")
    for name in ("output_height", "output_width", "sampling_ratio"):
        if attrs[name] < 0:
            raise OpTypeError(f"{name} must be 0 or more, got {attrs[name]}")
    return TensorType((_num_rois(r.shape[0], b.shape[0]), x.shape[1], attrs.output_height,
                       attrs.output_width), x.dtype)


def _max_roi_pool_type(attrs, data, rois):
    x = _check_data(data)
    check_dtype(x, "data", ("float32",), "dtype float32")
    r = tensor_arg(rois, "rois")
    if r.ndim != 2 or differ(r.shape[1], 5):
        raise OpTypeError(f"rois must have shape (num_rois, 5), got {fmt_shape(r.shape)}")
    check_dtype(r, "rois", ("float32",), "dtype float32")
    if len(attrs.pooled_shape) != 2 or min(attrs.pooled_shape) < 1:
        raise OpTypeError(f"pooled_shape must be two sizes of 1 or more, got "
                          f"{list(attrs.pooled_shape)}")
    return TensorType((r.shape[0], x.shape[1]) + tuple(attrs.pooled_shape), x.dtype)


# --- vision.roi_align's reference ----------------------------------------------------------------

def check_batch_indices(op: str, indices: np.ndarray, batch: int) -> None:
    """The run-time error of a batch index outside ``[0, batch)``, naming the first."""
    bad = np.flatnonzero((indices < 0) | (indices >= batch))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{op}: batch index {indices[i]} of roi {i} is out of range "
                         f"[0, {batch})")


def grid_size(op: str, roi: int, size, out: int, sampling_ratio: int) -> int:
    """Samples per bin along one axis: ``sampling_ratio``, or ``ceil(size / out)``."""
    if sampling_ratio > 0:
        return sampling_ratio
    with np.errstate(all="ignore"):
        g = np.ceil(size / type(size)(out))
    if not np.isfinite(g) or g > MAX_GRID:
        raise ValueError(f"{op}: roi {roi} is {float(size)} pixels across {out} bins: an "
                         f"adaptive sampling grid past relvm's limit of {MAX_GRID} per axis")
    return max(int(g), 0)


def axis_samples(start, bin_size, out: int, grid: int, size: int):
    """One axis' samples of every bin, ``(out, grid)`` each: ``low``, ``high``, ``l``, ``h``,
    ``empty`` -- as ONNX Runtime's pre_calc computes them, op by op in ``start``'s dtype."""
    f = type(start)
    p = np.arange(out).astype(f)[:, None]
    i = (np.arange(grid) + 0.5).astype(np.float32).astype(f)[None, :]
    with np.errstate(all="ignore"):
        y = (start + p * bin_size) + i * bin_size / f(max(grid, 1))
        empty = ~((y >= -1) & (y <= size))  # NaN reads nothing too
        y = np.where(empty | (y <= 0), f(0), y).astype(f)
        low = y.astype(np.int64)
        last = low >= size - 1
        low = np.where(last, size - 1, low)
        high = np.where(last, size - 1, low + 1)
        y = np.where(last, low.astype(f), y).astype(f)
        l = (y - low.astype(f)).astype(f)
        h = (f(1) - l).astype(f)
    return low, high, l, h, empty


def _std_max(a, b):
    return np.where(a < b, b, a)


def roi_geometry(attrs, roi: np.ndarray, k: int):
    """Roi ``k``'s ``(x1, y1, bin_w, bin_h, grid_h, grid_w)``, in ``roi``'s dtype; a ValueError
    for an adaptive grid past ``MAX_GRID``."""
    f = roi.dtype.type
    oh, ow = attrs.output_height, attrs.output_width
    scale = f(np.float32(attrs.spatial_scale))
    offset = f(0.5) if attrs.coordinate_transformation_mode == "half_pixel" else f(0)
    with np.errstate(all="ignore"):
        x1, y1, x2, y2 = (f(v * scale - offset) for v in roi)
        roi_w, roi_h = f(x2 - x1), f(y2 - y1)
        if offset == 0:
            roi_w, roi_h = (f(1) if s < 1 else s for s in (roi_w, roi_h))
        bin_h, bin_w = f(roi_h / f(oh)), f(roi_w / f(ow))
    gh = grid_size("vision.roi_align", k, roi_h, oh, attrs.sampling_ratio)
    gw = grid_size("vision.roi_align", k, roi_w, ow, attrs.sampling_ratio)
    return x1, y1, bin_w, bin_h, gh, gw


def _roi_align_one(attrs, x: np.ndarray, roi: np.ndarray, k: int) -> np.ndarray:
    """One roi's ``(C, oh, ow)`` over one image ``x`` ``(C, H, W)``."""
    f = x.dtype.type
    c, height, width = x.shape
    oh, ow = attrs.output_height, attrs.output_width
    x1, y1, bin_w, bin_h, gh, gw = roi_geometry(attrs, roi, k)
    out = np.zeros((c, oh, ow), x.dtype)
    if gh == 0 or gw == 0:
        return out
    ylo, yhi, ly, hy, yempty = axis_samples(y1, bin_h, oh, gh, height)
    xlo, xhi, lx, hx, xempty = axis_samples(x1, bin_w, ow, gw, width)

    def bins(a, b):  # (oh, gh) and (ow, gw) -> (oh, ow, gh * gw), samples row-major
        return (a[:, None, :, None] + b[None, :, None, :]).reshape(oh, ow, gh * gw)

    empty = bins(yempty, xempty)
    flat = x.reshape(c, -1)
    with np.errstate(all="ignore"):
        taps = []
        for rows, wy in ((ylo, hy), (yhi, ly)):
            for cols, wx in ((xlo, hx), (xhi, lx)):
                w = (wy[:, None, :, None] * wx[None, :, None, :]).reshape(oh, ow, gh * gw)
                w = np.where(empty, f(0), w).astype(f)
                pos = np.where(empty, 0, bins(rows * width, cols))
                taps.append(w * flat[:, pos])
        if attrs.mode == "avg":
            s = ((taps[0] + taps[1]) + taps[2]) + taps[3]
            # the samples added one after another: cumsum sums sequentially, not pairwise
            return (np.cumsum(s, axis=-1, dtype=f)[..., -1] / f(gh * gw)).astype(f)
        m = _std_max(_std_max(_std_max(taps[0], taps[1]), taps[2]), taps[3])
        # max(acc, m) over the samples keeps a NaN first sample and skips later NaNs
        return np.where(np.isnan(m[..., 0]), m[..., 0], np.fmax.reduce(m, axis=-1)).astype(f)


def _roi_align_ref(attrs, data, rois, batch_indices):
    op = "vision.roi_align"
    require(data.ndim == 4, f"{op}: data must be (N, C, H, W), got {data.shape}")
    require(rois.ndim == 2 and rois.shape[1] == 4,
            f"{op}: rois must be (num_rois, 4), got {rois.shape}")
    require(batch_indices.shape == rois.shape[:1],
            f"{op}: batch_indices {batch_indices.shape} and rois {rois.shape} differ in their "
            "roi count")
    n, c, height, width = data.shape
    check_batch_indices(op, batch_indices, n)
    out = np.zeros((rois.shape[0], c, attrs.output_height, attrs.output_width), data.dtype)
    if out.size == 0 or height == 0 or width == 0:
        return out
    for k in range(rois.shape[0]):
        out[k] = _roi_align_one(attrs, data[batch_indices[k]], rois[k], k)
    return out


register("vision.roi_align", inputs=("data", "rois", "batch_indices"),
         infer=_roi_align_type, reference=_roi_align_ref, pattern=OPAQUE,
         attrs=[attr("mode", choice(*MODES), "avg"), attr("output_height", INT, 1),
                attr("output_width", INT, 1), attr("sampling_ratio", INT, 0),
                attr("spatial_scale", FLOAT, 1.0),
                attr("coordinate_transformation_mode", choice(*COORDINATES), "half_pixel")],
         doc="ONNX RoiAlign as ONNX Runtime computes it: (N, C, H, W) data, (R, 4) rois "
             "[x1, y1, x2, y2] and (R,) int64 batch indices -> (R, C, output_height, "
             "output_width), bilinear samples averaged (avg) or ONNX Runtime's max of each "
             "sample's weighted corners (max)")


# --- vision.max_roi_pool's reference -------------------------------------------------------------

def max_roi_pool_batch(op: str, value, k: int, batch: int) -> int:
    """Roi ``k``'s batch index: ``trunc(value)``, which must lie in ``[0, batch)``."""
    if not (np.isfinite(value) and 0 <= np.trunc(value) < batch):
        raise ValueError(f"{op}: batch index {float(value)} of roi {k} is out of range "
                         f"[0, {batch})")
    return int(np.trunc(value))


def rounded_corner(value: np.float32, scale: np.float32) -> int:
    """``round(value * scale)`` in float32, halves away from 0, clamped to +-CLAMP."""
    with np.errstate(all="ignore"):
        v = np.float32(value * scale)
    if np.isnan(v):
        return CLAMP
    r = np.trunc(v + np.copysign(0.5, v)) if abs(v) < 2 ** 23 else v  # past 2**23: integers
    return int(min(max(float(r), -CLAMP), CLAMP))


def _max_roi_pool_ref(attrs, data, rois):
    op = "vision.max_roi_pool"
    require(data.ndim == 4, f"{op}: data must be (N, C, H, W), got {data.shape}")
    require(rois.ndim == 2 and rois.shape[1] == 5,
            f"{op}: rois must be (num_rois, 5), got {rois.shape}")
    n, c, height, width = data.shape
    ph, pw = attrs.pooled_shape
    f, scale = np.float32, np.float32(attrs.spatial_scale)
    out = np.zeros((rois.shape[0], c, ph, pw), np.float32)
    batches = [max_roi_pool_batch(op, roi[0], k, n) for k, roi in enumerate(rois)]
    if out.size == 0:
        return out
    for k, (b, roi) in enumerate(zip(batches, rois)):
        x1, y1, x2, y2 = (rounded_corner(v, scale) for v in roi[1:])
        bins = []
        for lo, hi, p, size in ((y1, y2, ph, height), (x1, x2, pw, width)):
            bin_size = f(f(max(hi - lo + 1, 1)) / f(p))
            i = np.arange(p)
            start = np.floor(i.astype(f) * bin_size).astype(np.int64) + lo
            end = np.ceil((i + 1).astype(f) * bin_size).astype(np.int64) + lo
            bins.append((np.clip(start, 0, size), np.clip(end, 0, size)))
        for i in range(ph):
            for j in range(pw):
                (h0, h1), (w0, w1) = (bins[0][0][i], bins[0][1][i]), (bins[1][0][j],
                                                                      bins[1][1][j])
                if h1 <= h0 or w1 <= w0:
                    continue
                best = np.full(c, np.finfo(np.float32).min, np.float32)
                for pixel in data[b, :, h0:h1, w0:w1].reshape(c, -1).T:
                    best = np.where(pixel < best, best, pixel)
                out[k, :, i, j] = best
    return out


register("vision.max_roi_pool", inputs=("data", "rois"), infer=_max_roi_pool_type,
         reference=_max_roi_pool_ref, pattern=OPAQUE,
         attrs=[attr("pooled_shape", INTS, required=True), attr("spatial_scale", FLOAT, 1.0)],
         doc="ONNX MaxRoiPool as ONNX Runtime computes it: (N, C, H, W) float32 data and "
             "(R, 5) rois [batch, x1, y1, x2, y2] -> (R, C, ph, pw), the maximum of each bin "
             "of the rounded roi (0 for an empty bin)")
