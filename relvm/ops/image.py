"""``image.resize2d``: resize the spatial axes of channels-first data -- ``(N, C, W)``,
``(N, C, H, W)`` or ``(N, C, D, H, W)`` -- with ONNX Resize's semantics (the name is the 2-d
case's, which came first; files and programs spell it so).

Output size: ``size`` (static ints, one per spatial axis) when given, else ``floor(in * scale)``
per axis, as ONNX Runtime computes it (the float32 product: ``0.7 * 10`` is 7), exactly over the
simplest fraction the float32 scale stands for (7/10), so a symbolic ``h`` gives ``h*2`` for
``scale=2`` and ``(h*7)/10`` for 0.7. ``dyn.resize2d`` takes
the sizes as a run-time int64 tensor instead (Resize's ``sizes`` computed from shapes): its
result's dims are the values type inference knows for them, else fresh dims bound when it runs.

Interpolation is separable, axis by axis (D, then H, then W), as ONNX defines it: each output
position ``y`` maps to a source coordinate ``x`` by ``coordinate_transformation_mode`` with the
axis' scale (``scale`` when given, else ``out / in``) and its integer output length, then reads
its neighbours with weights:

- ``nearest_neighbor``: the input at ``x`` rounded by ``rounding_method``, clamped to the axis.
- ``linear``: the two inputs around ``x``; ``cubic``: the four, Keys' kernel with ``cubic_alpha``.
  Neighbours past the edge repeat the edge pixel, or with ``cubic_exclude`` get weight 0 (the
  rest renormalized). With ``antialias`` a downscaling axis stretches the kernel by ``1/scale``.
- ``tf_crop_and_resize`` maps into ``roi`` (starts of every spatial axis, then ends: fractions of
  the axis) and writes ``extrapolation_value`` where ``x`` falls outside the input.

An axis whose scale is 1, whose size is unchanged and whose roi is the whole axis is copied.
Source coordinates are computed in float32, operation by operation as ONNX Runtime computes them
(so a coordinate that is an integer in exact arithmetic rounds the same way); the weights and the
sums in float64, and the result rounds once to the output dtype (integers: to nearest).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from ..ir import dims as D
from ..ir.types import TensorType
from .common import (FLOATS, NUMERIC, check_dtype, check_rank, differ, fmt_shape, np_dtype,
                     require, tensor_arg)
from .registry import (BOOL, DTYPE_OR_EMPTY, FLOAT, INT, INTS, OPAQUE, OPT_INTS, AttrKind,
                       OpTypeError, attr, choice, register)


def _floats(v: Any) -> tuple[float, ...]:
    if not isinstance(v, (list, tuple)):
        raise ValueError
    return tuple(FLOAT.convert(x) for x in v)


OPT_FLOATS = AttrKind("a list of numbers or None", lambda v: None if v is None else _floats(v))

METHODS = ("nearest_neighbor", "linear", "cubic")
MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn",
         "tf_crop_and_resize", "half_pixel_symmetric")
ROUNDING = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def scale_fraction(scale: float) -> Fraction:
    """The simplest fraction that rounds to ``scale``'s float32, e.g. 7/10 for 0.7.

    ONNX Runtime sizes an axis ``trunc(float32(scale * in))``: the float32 product rounds
    ``0.7f * 10`` (6.9999999) up to 7, where the exact product of the float's value floors to
    6. Scaling by the simplest fraction the float stands for gives ONNX Runtime's (and
    PyTorch's) sizes at every size a tensor has, and stays exact over a symbolic dim.
    """
    f32 = np.float32(scale)
    exact = Fraction(float(f32))
    if exact.denominator == 1:
        return exact
    # Continued-fraction convergents, simplest first; the float's own value is the last.
    a, b = exact.numerator, exact.denominator
    h0, h1, k0, k1 = 0, 1, 1, 0
    while b:
        q = a // b
        a, b = b, a - q * b
        h0, h1 = h1, q * h1 + h0
        k0, k1 = k1, q * k1 + k0
        if np.float32(h1 / k1) == f32:
            return Fraction(h1, k1)
    return exact


def scaled_dim(size: D.Dim, scale: float) -> D.Dim:
    """ONNX Runtime's ``floor(size * scale)`` (see :func:`scale_fraction`), for a symbolic or
    concrete ``size``."""
    if scale < 0:
        raise OpTypeError(f"scale {scale} must not be negative")
    q = scale_fraction(scale)
    return D.floordiv(size * q.numerator, q.denominator)


def spatial_axes(data: TensorType) -> int:
    """How many spatial axes channels-first ``data`` has (1 to 3); an OpTypeError otherwise."""
    if not 3 <= data.ndim <= 5:
        raise OpTypeError(f"data must be (N, C, W), (N, C, H, W) or (N, C, D, H, W), got "
                          f"{fmt_shape(data.shape)}")
    return data.ndim - 2


def _check_attrs(attrs, k: int) -> None:
    for name, n in (("size", k), ("scale", k), ("roi", 2 * k)):
        v = attrs.get(name)
        if v is not None and len(v) != n:
            raise OpTypeError(f"{name} must have {n} entries for {k} spatial axes, got {list(v)}")
    size, scale = attrs.get("size"), attrs.get("scale")
    if size is not None and min(size, default=0) < 0:
        raise OpTypeError(f"size must not be negative, got {list(size)}")
    if scale is not None and min(scale, default=1) <= 0:
        raise OpTypeError(f"scale must be positive, got {list(scale)}")
    if attrs.coordinate_transformation_mode == "tf_crop_and_resize" and attrs.roi is None:
        raise OpTypeError("coordinate_transformation_mode='tf_crop_and_resize' needs roi")
    if attrs.antialias and attrs.method == "nearest_neighbor":
        raise OpTypeError("antialias applies to linear and cubic, not nearest_neighbor")


def out_size(attrs, shape) -> tuple[D.Dim, ...]:
    """The spatial sizes of the result of resize2d (``size``, else ``floor(in * scale)``)."""
    if attrs.size is not None:
        return tuple(attrs.size)
    return tuple(scaled_dim(d, s) for d, s in zip(shape[2:], attrs.scale))


def _check_data(attrs, data: TensorType) -> int:
    k = spatial_axes(data)
    if attrs.method == "nearest_neighbor":
        check_dtype(data, "data", NUMERIC, "a numeric dtype")
    else:
        check_dtype(data, "data", FLOATS, "a float dtype")
    _check_attrs(attrs, k)
    return k


def _resize2d_type(attrs, d):
    data = tensor_arg(d, "data")
    _check_data(attrs, data)
    if attrs.size is None and attrs.scale is None:
        raise OpTypeError("give size or scale")
    return TensorType(data.shape[:2] + out_size(attrs, data.shape), attrs.out_dtype or data.dtype)


# --- the reference: per-axis taps, as ONNX's reference computes them ------------------------------

def _source_coords(mode: str, y: np.ndarray, scale: float, n_in: int, n_out: int,
                   roi: tuple[float, float]) -> tuple[np.ndarray, np.ndarray | None]:
    """The source coordinate of each output position, and (tf_crop_and_resize) which lie outside.

    As the operator's text defines them, and ONNX Runtime and PyTorch compute them: the modes
    that divide by a length divide by the *integer* output length ``n_out`` (``length_resized``),
    never by the fractional ``n_in * scale`` (onnx's reference evaluator does, and is off by up to
    the whole output's scale when the product is not an integer); only half_pixel_symmetric's
    adjustment compares the two. Computed in float32, operation by operation as ONNX Runtime
    does, so a coordinate that is an integer in exact arithmetic rounds the same way there
    (nearest-neighbour picks that pixel).
    """
    f = np.float32
    y = y.astype(f)
    s = f(scale)
    length = f(n_out)
    outside = None
    half = f(0.5)
    if mode == "align_corners":
        x = np.zeros(n_out, f) if n_out == 1 else y * f(n_in - 1) / (length - f(1))
    elif mode == "asymmetric":
        x = y / s
    elif mode == "tf_crop_and_resize":
        start, end = f(roi[0]), f(roi[1])
        if n_out == 1:
            x = np.full(n_out, half * (start + end) * f(n_in - 1), f)
        else:
            x = start * f(n_in - 1) + y * (end - start) * f(n_in - 1) / (length - f(1))
        outside = (x < 0) | (x > n_in - 1)
    elif mode == "pytorch_half_pixel":
        x = np.zeros(n_out, f) if n_out == 1 else (y + half) / s - half
    elif mode == "half_pixel":
        x = (y + half) / s - half
    elif mode == "half_pixel_symmetric":
        offset = f(n_in) / f(2) * (f(1) - length / f(s * f(n_in)))
        x = offset + (y + half) / s - half
    else:  # tf_half_pixel_for_nn
        x = (y + half) / s
    return x.astype(np.float64), outside


def _nearest_coeffs(ratio: float, rounding: str) -> list[float]:
    if float(ratio).is_integer():
        return [0.0, 1.0]
    up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
          "floor": False, "ceil": True}[rounding]
    return [0.0, 1.0] if up else [1.0, 0.0]


def _cubic_coeffs(ratio: float, a: float) -> list[float]:
    r, s = ratio, 1 - ratio
    return [((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
            ((a + 2) * r - (a + 3)) * r * r + 1,
            ((a + 2) * s - (a + 3)) * s * s + 1,
            ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a]


def _cubic_antialias(ratio: float, scale: float, a: float) -> list[float]:
    scale = min(scale, 1.0)

    def keys(x: float) -> float:
        x = abs(x)
        if x <= 1:
            return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
        if x < 2:
            return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a
        return 0.0

    start = int(math.floor(-2 / scale) + 1)
    c = [keys(scale * (i - ratio)) for i in range(start, 2 - start)]
    return [v / sum(c) for v in c]


def _linear_antialias(ratio: float, scale: float) -> list[float]:
    scale = min(scale, 1.0)
    start = int(math.floor(-1 / scale) + 1)
    args = (np.arange(start, start + 2 - 2 * start) - ratio) * scale
    c = np.clip(1 - np.abs(args), 0, 1)
    return list(c / c.sum())


def _coeffs(attrs, ratio: float, scale: float) -> list[float]:
    if attrs.method == "nearest_neighbor":
        return _nearest_coeffs(ratio, attrs.rounding_method)
    if attrs.method == "linear":
        return _linear_antialias(ratio, scale) if attrs.antialias else [1 - ratio, ratio]
    if attrs.antialias:
        return _cubic_antialias(ratio, scale, attrs.cubic_alpha)
    return _cubic_coeffs(ratio, attrs.cubic_alpha)


def axis_scale(attrs, k: int, n_in: int, n_out: int) -> float:
    """Spatial axis ``k``'s scale: the given one, else ``out / in`` (ONNX Resize's sizes)."""
    scale = attrs.get("scale")
    return scale[k] if scale is not None else (n_out / n_in if n_in else 1.0)


def axis_roi(attrs, k: int) -> tuple[float, float]:
    """Spatial axis ``k``'s roi (start, end): ``roi`` holds every axis' start, then every end."""
    if attrs.roi is None:
        return 0.0, 1.0
    return attrs.roi[k], attrs.roi[k + len(attrs.roi) // 2]


def axis_taps(attrs, axis: int, n_in: int, n_out: int):
    """(indices, weights, outside) of one axis: each output reads ``n`` clamped input positions.

    ``indices`` and ``weights`` are ``(n_out, n)``; ``outside`` is None or a bool ``(n_out,)``
    marking positions that take ``extrapolation_value``. The C kernel computes the same taps.
    """
    k = axis - 2
    scale = axis_scale(attrs, k, n_in, n_out)
    roi = axis_roi(attrs, k)
    y = np.arange(n_out, dtype=np.float64)
    x, outside = _source_coords(attrs.coordinate_transformation_mode, y, scale, n_in, n_out, roi)
    floor = np.floor(x)
    ratios = np.where(x == floor, 1.0, x - floor)
    weights = np.array([_coeffs(attrs, float(r), scale) for r in ratios]).reshape(n_out, -1)
    n = weights.shape[1]
    # The n inputs nearest x, ties to the smaller index (in edge-padded coordinates).
    pad = (n + 1) // 2
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        offset = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    index = (p + offset)[:, None] + np.arange(n)[None, :] - pad
    if attrs.cubic_exclude:
        weights = np.where((index < 0) | (index >= n_in), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    index = np.clip(index, 0, max(n_in - 1, 0))
    if attrs.method == "nearest_neighbor":
        # One tap, the selected input: the neighbour weighted 0 takes no part (0 * inf would
        # make NaN), as ONNX's Resize selects; the C kernel then gathers.
        pick = weights.argmax(axis=1)
        rows = np.arange(n_out)
        if np.all(weights[rows, pick] == 1.0) and np.all(weights.sum(axis=1) == 1.0):
            return index[rows, pick][:, None], np.ones((n_out, 1)), outside
    return index, weights, outside


def identity_axis(attrs, k: int, n_in: int, n_out: int) -> bool:
    """Whether spatial axis ``k`` is copied as it is (scale 1, same size, the whole roi)."""
    start, end = axis_roi(attrs, k)
    whole = math.isclose(start, 0.0) and math.isclose(end, 1.0)
    return math.isclose(axis_scale(attrs, k, n_in, n_out), 1.0) and n_in == n_out and whole


def _resize_axis(attrs, x: np.ndarray, axis: int, n_out: int) -> np.ndarray:
    n_in = x.shape[axis]
    if identity_axis(attrs, axis - 2, n_in, n_out):
        return x
    shape = list(x.shape)
    shape[axis] = n_out
    if n_out == 0 or n_in == 0:
        return np.full(shape, attrs.extrapolation_value if n_out else 0.0)
    index, weights, outside = axis_taps(attrs, axis, n_in, n_out)
    taps = np.take(x, index, axis=axis)  # (..., n_out, n, ...)
    wshape = (1,) * axis + weights.shape + (1,) * (x.ndim - axis - 1)
    out = (taps * weights.reshape(wshape)).sum(axis=axis + 1)
    if outside is not None and outside.any():
        mask = outside.reshape((1,) * axis + (n_out,) + (1,) * (x.ndim - axis - 1))
        out = np.where(mask, attrs.extrapolation_value, out)
    return out


def resize_to(attrs, x: np.ndarray, sizes) -> np.ndarray:
    """``x`` resized to spatial ``sizes``: axis by axis in float64, rounded once."""
    out = x.astype(np.float64)
    for axis, n_out in enumerate(sizes, start=2):
        out = _resize_axis(attrs, out, axis, int(n_out))
    dtype = np_dtype(attrs.out_dtype or x.dtype.name)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        out = np.clip(np.round(out), info.min, info.max)
    return np.asarray(out).astype(dtype)


def _resize2d_ref(attrs, x):
    if attrs.size is None and attrs.scale is None:
        raise ValueError("image.resize2d: give size or scale")
    return resize_to(attrs, x, out_size(attrs, x.shape))


#: The attributes of both resize ops but the sizes: how positions map and what is read.
SAMPLING_ATTRS = [
    attr("layout", choice("NCHW"), "NCHW"),
    attr("method", choice(*METHODS), "nearest_neighbor"),
    attr("coordinate_transformation_mode", choice(*MODES), "half_pixel"),
    attr("rounding_method", choice(*ROUNDING), "round_prefer_floor"),
    attr("cubic_alpha", FLOAT, -0.75), attr("cubic_exclude", INT, 0),
    attr("extrapolation_value", FLOAT, 0.0), attr("antialias", BOOL, False),
    attr("out_dtype", DTYPE_OR_EMPTY, "")]


register("image.resize2d", inputs=("data",), infer=_resize2d_type, reference=_resize2d_ref,
         pattern=OPAQUE,
         attrs=[attr("size", OPT_INTS, None), attr("scale", OPT_FLOATS, None),
                attr("roi", OPT_FLOATS, None), *SAMPLING_ATTRS],
         doc="resize the 1 to 3 spatial axes of (N, C, ...) data (nearest, linear, cubic) as "
             "ONNX Resize does")


# --- dyn.resize2d: sizes computed at run time --------------------------------------------------

def _dyn_resize2d_type(attrs, d, sizes):
    data, s = tensor_arg(d, "data"), tensor_arg(sizes, "sizes")
    k = _check_data(attrs, data)
    check_rank(s, "sizes", 1)
    check_dtype(s, "sizes", ("int64",), "dtype int64")
    if differ(s.shape[0], k):
        raise OpTypeError(f"sizes {fmt_shape(s.shape)} must hold one size per spatial axis ({k})")
    return TensorType(data.shape[:2] + tuple(D.fresh() for _ in range(k)),
                      attrs.out_dtype or data.dtype)


def _dyn_resize2d_ref(attrs, x, sizes):
    sizes = [int(v) for v in np.asarray(sizes).reshape(-1)]
    require(len(sizes) == x.ndim - 2 and min(sizes, default=0) >= 0,
            f"dyn.resize2d: sizes {sizes} must be {x.ndim - 2} non-negative sizes")
    return resize_to(attrs, x, sizes)


register("dyn.resize2d", inputs=("data", "sizes"), infer=_dyn_resize2d_type,
         reference=_dyn_resize2d_ref, pattern=OPAQUE, data_dependent=True, shape_inputs=(1,),
         attrs=[attr("roi", OPT_FLOATS, None), *SAMPLING_ATTRS],
         doc="image.resize2d to spatial sizes given as a run-time 1-d int64 tensor (ONNX Resize's "
             "sizes computed from shapes)")


# --- col2im ---------------------------------------------------------------------------------------

def col2im_geometry(attrs, k: int) -> tuple:
    """(dilations, pads (begins then ends), strides), each with its default, checked."""
    dil = attrs.dilations or (1,) * k
    pads = attrs.pads or (0,) * (2 * k)
    strides = attrs.strides or (1,) * k
    if len(attrs.block_shape) != k or len(dil) != k or len(pads) != 2 * k or len(strides) != k:
        raise OpTypeError(f"block_shape {list(attrs.block_shape)}, dilations {list(dil)}, pads "
                          f"{list(pads)} and strides {list(strides)} must give {k} spatial axes "
                          "(pads twice), as image_shape does")
    if min(attrs.block_shape + dil + strides, default=1) < 1 or min(pads, default=0) < 0:
        raise OpTypeError("block_shape, dilations and strides must be positive, pads not "
                          "negative")
    return dil, pads, strides


def col2im_blocks(attrs) -> tuple[int, ...]:
    """The number of sliding blocks along each spatial axis."""
    k = len(attrs.image_shape)
    dil, pads, strides = col2im_geometry(attrs, k)
    out = []
    for i, (size, b) in enumerate(zip(attrs.image_shape, attrs.block_shape)):
        span = size + pads[i] + pads[i + k] - (dil[i] * (b - 1) + 1)
        if span < 0:
            raise OpTypeError(f"block {list(attrs.block_shape)} does not fit in the padded "
                              f"image {list(attrs.image_shape)}")
        out.append(span // strides[i] + 1)
    return tuple(out)


def _col2im_type(attrs, data):
    from .transform import _exact_div

    t = tensor_arg(data, "data")
    check_dtype(t, "data", FLOATS, "a float dtype")
    if t.ndim != 3:
        raise OpTypeError(f"data must be (N, C * prod(block_shape), L), got "
                          f"{fmt_shape(t.shape)}")
    if not attrs.image_shape:
        raise OpTypeError("image_shape must give at least one spatial size")
    blocks = col2im_blocks(attrs)
    count = math.prod(blocks)
    if differ(t.shape[2], count):
        raise OpTypeError(f"data's last dim {D.dim_str(t.shape[2])} must be the number of "
                          f"blocks, {count} ({' x '.join(map(str, blocks))})")
    c = _exact_div(t.shape[1], math.prod(attrs.block_shape), "data's dim 1 over the block size")
    return TensorType((t.shape[0], c) + tuple(attrs.image_shape), t.dtype)


def _col2im_ref(attrs, x):
    blocks, k = col2im_blocks(attrs), len(attrs.image_shape)
    dil, pads, strides = col2im_geometry(attrs, k)
    kk = math.prod(attrs.block_shape)
    require(x.shape[1] % kk == 0 and x.shape[2] == math.prod(blocks),
            f"image.col2im: data {x.shape} is not (N, C * {kk}, {math.prod(blocks)})")
    n, c = x.shape[0], x.shape[1] // kk
    padded = np.zeros((n, c) + tuple(s + pads[i] + pads[i + k]
                                     for i, s in enumerate(attrs.image_shape)), x.dtype)
    cols = x.reshape((n, c) + tuple(attrs.block_shape) + blocks)
    for offset in np.ndindex(*attrs.block_shape):
        where = tuple(slice(o * d, o * d + (b - 1) * s + 1, s)
                      for o, d, s, b in zip(offset, dil, strides, blocks))
        padded[(slice(None), slice(None)) + where] += cols[(slice(None), slice(None)) + offset]
    inner = tuple(slice(pads[i], pads[i] + s) for i, s in enumerate(attrs.image_shape))
    return np.ascontiguousarray(padded[(slice(None), slice(None)) + inner])


register("image.col2im", inputs=("data",), infer=_col2im_type, reference=_col2im_ref,
         pattern=OPAQUE,
         attrs=[attr("image_shape", INTS, required=True), attr("block_shape", INTS,
                                                               required=True),
                attr("dilations", OPT_INTS, None), attr("pads", OPT_INTS, None),
                attr("strides", OPT_INTS, None)],
         doc="ONNX Col2Im: (N, C * prod(block_shape), L) sliding blocks summed back into an image "
             "(N, C, *image_shape), with dilations, pads (begins, then ends) and strides")
