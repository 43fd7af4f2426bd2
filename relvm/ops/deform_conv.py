"""``nn.deform_conv2d``: deformable convolution, as ONNX DeformConv (2-D).

``data`` is ``(N, C, H, W)``, ``weight`` ``(OC, C / groups, kh, kw)``, ``offset``
``(N, offset_groups * kh * kw * 2, oh, ow)`` and ``mask`` ``(N, offset_groups * kh * kw, oh,
ow)``, or a scalar that weighs every tap alike (ONNX's missing mask is 1). The output is
``(N, OC, oh, ow)``, ``oh`` and ``ow`` as a conv2d's with the same kernel, strides, padding
(1, 2 or 4 ints) and dilation.

Tap ``(i, j)`` of output pixel ``(y, x)`` reads input channel ``c`` at the position
``(y * sh - top + i * dh + offset_h, x * sw - left + j * dw + offset_w)``, the offsets those of
``c``'s offset group (input channels split into ``offset_groups`` consecutive groups) at
channels ``((g * kh + i) * kw + j) * 2`` (h) and ``+ 1`` (w) of ``offset``; the value there is
interpolated bilinearly from the four pixels around it, a pixel outside the image reading 0,
then multiplied by the mask at channel ``(g * kh + i) * kw + j``. The products with the weights
are summed as a grouped conv2d's (``groups``). Sums in float64, rounded once to data's dtype.
"""

from __future__ import annotations

import numpy as np

from ..ir import dims as D
from ..ir.types import TensorType
from .common import FLOATS, check_dtype, check_rank, differ, fmt_shape, require, tensor_arg
from .registry import INT, INT_OR_INTS, OPAQUE, OpTypeError, attr, register
from .window import pad_pairs, pair, window_len


def _geometry(attrs):
    if attrs.groups < 1 or attrs.offset_groups < 1:
        raise OpTypeError(f"groups and offset_groups must be >= 1, got {attrs.groups} and "
                          f"{attrs.offset_groups}")
    return (pair(attrs.strides, "strides", 1), pair(attrs.dilation, "dilation", 1),
            pad_pairs(attrs.padding))


def _deform_type(attrs, d, w, o, m):
    data, weight = tensor_arg(d, "data"), tensor_arg(w, "weight")
    offset, mask = tensor_arg(o, "offset"), tensor_arg(m, "mask")
    check_dtype(data, "data", FLOATS, "a float dtype")
    for name, t in (("weight", weight), ("offset", offset), ("mask", mask)):
        if t.dtype != data.dtype:
            raise OpTypeError(f"{name} has dtype {t.dtype}, data {data.dtype}")
    check_rank(data, "data", 4)
    check_rank(weight, "weight", 4)
    check_rank(offset, "offset", 4)
    if mask.ndim not in (0, 4):
        raise OpTypeError(f"mask must be (N, offset_groups*kh*kw, oh, ow) or a scalar, got "
                          f"{fmt_shape(mask.shape)}")
    strides, dilation, pads = _geometry(attrs)
    g, og = attrs.groups, attrs.offset_groups
    oc, cg, kh, kw = weight.shape
    c = data.shape[1]
    if differ(cg * g, c):
        raise OpTypeError(f"weight {fmt_shape(weight.shape)} with groups={g} needs "
                          f"{D.dim_str(cg * g)} input channels, data {fmt_shape(data.shape)}")
    if differ(D.mod(oc, g), 0):
        raise OpTypeError(f"output channels {D.dim_str(oc)} are not a multiple of groups={g}")
    if differ(D.mod(c, og), 0):
        raise OpTypeError(f"input channels {D.dim_str(c)} are not a multiple of "
                          f"offset_groups={og}")
    out = []
    for size, k, s, dl, p in zip(data.shape[2:], (kh, kw), strides, dilation, pads):
        room = size + p[0] + p[1] - (dl * (k - 1) + 1)
        out.append(window_len(size, k, s, dl, p))
        if not D.at_most(0, room):
            raise OpTypeError(f"the kernel does not fit in the padded input: data "
                              f"{fmt_shape(data.shape)}, weight {fmt_shape(weight.shape)}")
    want = (data.shape[0], og * kh * kw * 2, out[0], out[1])
    if any(differ(a, b) for a, b in zip(offset.shape, want)):
        raise OpTypeError(f"offset must be {fmt_shape(want)}, got {fmt_shape(offset.shape)}")
    if mask.ndim == 4:
        want = (data.shape[0], og * kh * kw, out[0], out[1])
        if any(differ(a, b) for a, b in zip(mask.shape, want)):
            raise OpTypeError(f"mask must be {fmt_shape(want)}, got {fmt_shape(mask.shape)}")
    return TensorType((data.shape[0], oc, out[0], out[1]), data.dtype)


def _bilinear(plane: np.ndarray, py: np.ndarray, px: np.ndarray) -> np.ndarray:
    """``plane`` (H, W) at float positions, pixels outside reading 0."""
    h, w = plane.shape
    y0, x0 = np.floor(py), np.floor(px)
    out = np.zeros(py.shape)
    for dy in (0, 1):
        for dx in (0, 1):
            yy, xx = y0 + dy, x0 + dx
            weight = (1 - np.abs(py - yy)) * (1 - np.abs(px - xx))
            inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            yi = np.where(inside, yy, 0).astype(np.int64)
            xi = np.where(inside, xx, 0).astype(np.int64)
            out += np.where(inside, plane[yi, xi] * weight, 0.0) if h and w else 0.0
    return np.where(np.isnan(py) | np.isnan(px), np.nan, out)  # a NaN offset samples NaN


def _deform_ref(attrs, x, w, offset, mask):
    strides, dilation, pads = _geometry(attrs)
    (top, _), (left, _) = pads
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    g, og = attrs.groups, attrs.offset_groups
    require(cg * g == c and oc % g == 0 and c % og == 0,
            f"nn.deform_conv2d: data {x.shape}, weight {w.shape}, groups={g}, "
            f"offset_groups={og} do not agree")
    require(all(size + p[0] + p[1] >= dl * (k - 1) + 1 for size, k, dl, p in
                zip((h, wd), (kh, kw), dilation, pads)),
            f"nn.deform_conv2d: the kernel does not fit in the padded input {x.shape}")
    oh, ow = (window_len(size, k, s, dl, p) for size, k, s, dl, p in
              zip((h, wd), (kh, kw), strides, dilation, pads))
    require(offset.shape == (n, og * kh * kw * 2, oh, ow),
            f"nn.deform_conv2d: offset {offset.shape} does not fit the kernel")
    off = offset.astype(np.float64).reshape(n, og, kh, kw, 2, oh, ow)
    msk = np.broadcast_to(mask.astype(np.float64), (n, og * kh * kw, oh, ow)) \
        if mask.ndim == 0 else mask.astype(np.float64)
    require(msk.shape == (n, og * kh * kw, oh, ow), f"nn.deform_conv2d: mask {mask.shape} does "
                                                    "not fit the kernel")
    msk = msk.reshape(n, og, kh, kw, oh, ow)
    base_y = (np.arange(oh) * strides[0] - top)[:, None]
    base_x = (np.arange(ow) * strides[1] - left)[None, :]
    cols = np.zeros((n, c, kh, kw, oh, ow))
    xs = x.astype(np.float64)
    for b in range(n):
        for ch in range(c):
            grp = ch // (c // og)
            for i in range(kh):
                for j in range(kw):
                    py = base_y + i * dilation[0] + off[b, grp, i, j, 0]
                    px = base_x + j * dilation[1] + off[b, grp, i, j, 1]
                    cols[b, ch, i, j] = _bilinear(xs[b, ch], py, px) * msk[b, grp, i, j]
    cols = cols.reshape(n, g, cg * kh * kw, oh * ow)
    ws = w.astype(np.float64).reshape(g, oc // g, cg * kh * kw)
    y = np.einsum("gok,ngkp->ngop", ws, cols)
    return y.reshape(n, oc, oh, ow).astype(x.dtype)


register("nn.deform_conv2d", inputs=("data", "weight", "offset", "mask"), infer=_deform_type,
         reference=_deform_ref, pattern=OPAQUE,
         attrs=[attr("strides", INT_OR_INTS, (1, 1)), attr("padding", INT_OR_INTS, (0, 0)),
                attr("dilation", INT_OR_INTS, (1, 1)), attr("groups", INT, 1),
                attr("offset_groups", INT, 1)],
         doc="deformable 2-D convolution (ONNX DeformConv): each tap read bilinearly at its "
             "offset position (zeros outside), weighed by the mask, with groups and offset "
             "groups")
