"""C kernels for the products: nn.dense (float32 on relvm's own GEMM, see ``packed.py``; other
dtypes on OpenBLAS or the integer loop), nn.matmul and nn.batch_matmul (``relvm_gemm``: relvm's
GEMM for float32, OpenBLAS for float64, the integer loop; batch dims broadcast),
nn.conv2d (relvm's GEMM reading a padded copy of each image, or a direct depthwise loop),
nn.conv2d_transpose (sgemm + col2im), nn.conv3d_transpose (a direct gather) and
nn.deform_conv2d (bilinear columns times the weights, a plain loop)."""

from __future__ import annotations

from ...ops import conv as conv_ops
from ...ops import window
from ...ops import conv_transpose as conv_transpose_ops
from ...ops import deform_conv as deform_ops
from ...ops.window import window_len
from . import kernel
from .common import (CODE, FLOATS, INTEGERS, ITEMSIZE, NUMBERS, attrs_of, check, library, prod,
                     remember)
from .common import shape_error


def _gemm_dtypes_ok(entry) -> bool:
    """BLAS computes floats in their own dtype; integers wrap into any integer out_dtype."""
    src, dst = entry.inputs[0], entry.outputs[0]
    return dst == src if src in FLOATS else dst in INTEGERS


def _inner_mismatch(a, b) -> ValueError:
    return ValueError(f"inner dims differ: {a[-1]} vs {b[-2]} (shapes {a}, {b})")


# A plan is (batch, m, n, k, stride_a, stride_b) for relvm_gemm, checked against the shapes.

def _dense_plan(x, w, out):
    if len(w) != 2 or not x or x[-1] != w[1]:
        raise ValueError(f"inner dims differ: data {x} vs weight {w}")
    if out != x[:-1] + (w[0],):
        raise shape_error("nn.dense: wrong output shape", data=x, weight=w, output=out)
    return 1, prod(x[:-1]), w[0], w[1], 0, 0


def _matmul_plan(attrs, a, b, out):
    (m, k) = (a[1], a[0]) if attrs.transpose_a else a
    (k2, n) = (b[1], b[0]) if attrs.transpose_b else b
    if k != k2:
        raise ValueError(f"inner dims differ: {k} vs {k2} (shapes {a}, {b})")
    if out != (m, n):
        raise shape_error("nn.matmul: wrong output shape", tensor_a=a, tensor_b=b, output=out)
    return 1, m, n, k, 0, 0


def _batch_matmul_plan(attrs, a, b, out):
    """(batch, m, n, k, stride_a, stride_b, *outer): one GEMM call over the innermost run of
    batch dims that the strides of a, b and the output describe (stride 0 where a dim of 1 is
    reused), repeated at each (offset_a, offset_b, offset_out) of ``outer`` (in elements) for
    the batch dims outside that run; no ``outer``: one call at the arrays' starts."""
    if len(a) != len(b) or len(a) < 3:
        raise ValueError(f"tensor_a and tensor_b must have one rank of at least 3: {a} vs {b}")
    m, k = (a[-1], a[-2]) if attrs.transpose_a else (a[-2], a[-1])
    k2, n = (b[-1], b[-2]) if attrs.transpose_b else (b[-2], b[-1])
    if k != k2:
        raise ValueError(f"inner dims differ: {k} vs {k2} (shapes {a}, {b})")
    if any(p != q and 1 not in (p, q) for p, q in zip(a[:-2], b[:-2])):
        raise ValueError(f"batch dims do not broadcast: {a} vs {b}")
    batch = tuple(0 if 0 in (p, q) else max(p, q) for p, q in zip(a[:-2], b[:-2]))
    if out != batch + (m, n):
        raise shape_error("nn.batch_matmul: wrong output shape", tensor_a=a, tensor_b=b,
                          output=out)
    if 0 in batch:
        return (0, m, n, k, 0, 0)
    dims = _batch_dims(batch, a[:-2], b[:-2], m * k, k * n, m * n)
    if not dims:
        return (1, m, n, k, 0, 0)
    (size, sa, sb, _), outer = dims[-1], dims[:-1]
    offsets = [(0, 0, 0)]
    for d_size, da, db, dc in outer:
        offsets = [(oa + i * da, ob + i * db, oc + i * dc) for oa, ob, oc in offsets
                   for i in range(d_size)]
    return (size, m, n, k, sa, sb) + (() if offsets == [(0, 0, 0)] else tuple(offsets))


def _batch_dims(batch, ba, bb, size_a, size_b, size_c) -> list[tuple[int, int, int, int]]:
    """The batch dims as (size, stride_a, stride_b, stride_out) in elements, outermost first:
    a reused dim of 1 has stride 0, dims of size 1 are dropped, and neighbours that step alike
    are merged into one."""
    dims = []
    for d in range(len(batch) - 1, -1, -1):
        dims.append((batch[d], size_a if ba[d] != 1 else 0, size_b if bb[d] != 1 else 0,
                     size_c))
        size_a, size_b, size_c = size_a * ba[d], size_b * bb[d], size_c * batch[d]
    merged: list[tuple[int, int, int, int]] = []
    for size, sa, sb, sc in reversed(dims):
        if size == 1:
            continue
        if merged:
            p_size, pa, pb, pc = merged[-1]
            if (pa, pb, pc) == (sa * size, sb * size, sc * size):
                merged[-1] = (p_size * size, sa, sb, sc)
                continue
        merged.append((size, sa, sb, sc))
    return merged


def _make_gemm(entry, plan_of, trans_a: bool, trans_b: bool):
    ffi, lib = library()
    src, dst = CODE[entry.inputs[0]], CODE[entry.outputs[0]]
    gemm, ptr, name, plans = lib.relvm_gemm, ffi.from_buffer, entry.name, {}
    ta, tb = int(trans_a), int(trans_b)
    size_in, size_out = ITEMSIZE[entry.inputs[0]], ITEMSIZE[entry.outputs[0]]

    def run(a, b, out):
        key = (a.shape, b.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, plan_of(*key))
        batch, m, n, k, sa, sb, *outer = plan
        if not outer:
            status = gemm(src, dst, ta, tb, batch, m, n, k, ptr(a), sa, ptr(b), sb, ptr(out))
        else:  # batch dims that no one stride steps through: a call per outer position
            pa, pb, pc = ptr(a), ptr(b), ptr(out)
            for oa, ob, oc in outer:
                status = gemm(src, dst, ta, tb, batch, m, n, k, pa + oa * size_in, sa,
                              pb + ob * size_in, sb, pc + oc * size_out)
                if status:
                    break
        if status:
            check(status, f"{name} {key}")
    return run


@kernel("nn.dense", dtypes=NUMBERS, accepts=_gemm_dtypes_ok, with_constants=True)
def make_dense(entry, constants):
    if entry.inputs[0] == "float32":  # relvm's own GEMM, the weights packed once
        from .packed import make_dense as make_packed

        return make_packed(entry, constants)
    return _make_gemm(entry, _dense_plan, False, True)


@kernel("nn.matmul", dtypes=NUMBERS, accepts=_gemm_dtypes_ok)
def make_matmul(entry):
    attrs = attrs_of(entry)
    return _make_gemm(entry, lambda a, b, out: _matmul_plan(attrs, a, b, out),
                      attrs.transpose_a, attrs.transpose_b)


@kernel("nn.batch_matmul", dtypes=NUMBERS, accepts=_gemm_dtypes_ok)
def make_batch_matmul(entry):
    attrs = attrs_of(entry)
    return _make_gemm(entry, lambda a, b, out: _batch_matmul_plan(attrs, a, b, out),
                      attrs.transpose_a, attrs.transpose_b)


# --- conv2d -------------------------------------------------------------------------------------

def _conv_plan(ffi, attrs, x, w, out, mean: bool = False, check_out: bool = True):
    """The C geometry struct for these shapes, checked as the reference checks them (with the
    reference's own shape rules, so both agree by construction). With ``mean``, ``out`` is the
    conv's output averaged over each plane: (n, oc, 1, 1). Without ``check_out``, ``out`` is
    not looked at (a conv pair's first conv, whose output is never stored)."""
    strides, dilation, pads = conv_ops.conv2d_geometry(attrs)
    g = attrs.groups
    if len(x) != 4 or len(w) != 4:
        raise shape_error("nn.conv2d needs 4-d data and weight", data=x, weight=w)
    nhwc = conv_ops.channels_last(attrs)
    if nhwc:  # (n, h, w, c): the same geometry struct, read by relvm_conv2d_nhwc
        n, h, wd, c = x
    else:
        n, c, h, wd = x
    oc, ic, kh, kw = w
    if c != ic * g or oc % g:
        raise ValueError(f"input channels differ: data {x} vs weight {w} with groups={g}")
    oh, ow = window.runtime_out(_Shape((n, c, h, wd)), (kh, kw), strides, dilation, pads, False,
                                "kernel")
    want = (n, oc, 1, 1) if mean else (n, oh, ow, oc) if nhwc else (n, oc, oh, ow)
    if check_out and out != want:
        raise shape_error("nn.conv2d: wrong output shape", data=x, weight=w, output=out)
    (sh, dh), (sw, dw) = (_same_windows(size, k, st, d, p) for size, k, st, d, p in
                          zip((h, wd), (kh, kw), strides, dilation, pads))
    # The C kernels copy the image into a zero-bordered buffer of this many floats (as
    # conv_gemm.c's padded_geometry lays it out); past MAX_PADDED its size would not even fit
    # their int64 arithmetic (only absurd padding gets near it).
    ph = max(pads[0][0] + h, (oh - 1) * sh + (kh - 1) * dh + 1)
    pw = max(pads[1][0] + wd, (ow - 1) * sw + (kw - 1) * dw + 1)
    if c * ph * (-(-pw // sw) * sw) > MAX_PADDED:
        raise ValueError(f"nn.conv2d: padding {pads} makes a padded image of {c} x {ph} x {pw}, "
                         f"over the {MAX_PADDED} floats the C kernels take")
    return ffi.new("struct relvm_conv2d_shape *", dict(
        n=n, c=c, h=h, w=wd, oc=oc, kh=kh, kw=kw, oh=oh, ow=ow, sh=sh, sw=sw,
        pt=pads[0][0], pl=pads[1][0], dh=dh, dw=dw, groups=g))


#: The largest padded image (floats) a conv plan gives the C kernels.
MAX_PADDED = 1 << 36


def _same_windows(size: int, k: int, stride: int, dilation: int, pad: tuple[int, int]
                  ) -> tuple[int, int]:
    """The smallest stride and dilation that give the same windows along one axis.

    A stride past the last window start only ever takes the first window, and a dilation of a
    one-tap kernel is unused; the C kernels split each row into ``stride`` phases (a loop per
    phase), so an attribute of 2**62 would run for ever, and products of such numbers
    overflow. ``_runtime_out`` checked that one window fits (``span >= 0``)."""
    dilation = 1 if k == 1 else dilation
    span = size + pad[0] + pad[1] - (dilation * (k - 1) + 1)  # where the last window may start
    return min(stride, span + 1), dilation


class _Shape:
    """Stands for an array where a reference helper only reads ``.shape``."""

    def __init__(self, shape):
        self.shape = shape


def _conv_dtypes_ok(entry) -> bool:
    return entry.outputs[0] == entry.inputs[0]


def _planned_conv(entry, c_function: str, make_plan, *extra):
    """A conv kernel: a shape plan per (data, weight, output) shape, then one C call (with
    ``extra`` C arguments after the arrays)."""
    ffi, lib = library()
    attrs, dt = attrs_of(entry), CODE[entry.inputs[0]]
    conv, ptr, name, plans = getattr(lib, c_function), ffi.from_buffer, entry.name, {}

    def run(x, w, out):
        key = (x.shape, w.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, make_plan(ffi, attrs, *key))
        status = conv(dt, plan, ptr(x), ptr(w), ptr(out), *extra)
        if status:
            check(status, f"{name} {key}")
    return run


@kernel("nn.conv2d", dtypes=("float32",), accepts=_conv_dtypes_ok, with_constants=True)
def make_conv2d(entry, constants):
    # packed.py's conv with no epilogue: constant weights packed once per VM, as a fused
    # conv's are (an unfused conv, e.g. one with no bias, packed them on every call).
    from .packed import make_conv2d as make_packed

    return make_packed(entry, constants)


# --- conv2d_transpose -----------------------------------------------------------------------------

def _conv_transpose_plan(ffi, attrs, x, w, out):
    strides, dilation, out_pad, pads = conv_transpose_ops._geometry(attrs)
    g = attrs.groups
    if len(x) != 4 or len(w) != 4:
        raise shape_error("nn.conv2d_transpose needs 4-d data and weight", data=x, weight=w)
    n, c, h, wd = x
    in_c, opg, kh, kw = w
    if c != in_c or in_c % g:
        raise ValueError(f"input channels differ: data {x} vs weight {w} with groups={g}")
    oh, ow = (conv_transpose_ops._out_len(size, k, s, d, o, p) for size, k, s, d, o, p in
              zip((h, wd), (kh, kw), strides, dilation, out_pad, pads))
    if oh < 0 or ow < 0:
        raise ValueError(f"padding {attrs.padding} crops more than the output holds")
    if out != (n, opg * g, oh, ow):
        raise shape_error("nn.conv2d_transpose: wrong output shape", data=x, weight=w,
                          output=out)
    return ffi.new("struct relvm_conv2d_shape *", dict(
        n=n, c=c, h=h, w=wd, oc=opg * g, kh=kh, kw=kw, oh=oh, ow=ow, sh=strides[0],
        sw=strides[1], pt=pads[0][0], pl=pads[1][0], dh=dilation[0], dw=dilation[1], groups=g))


@kernel("nn.conv2d_transpose", dtypes=("float32",), accepts=_conv_dtypes_ok)
def make_conv2d_transpose(entry):
    return _planned_conv(entry, "relvm_conv2d_transpose", _conv_transpose_plan)


# --- deform_conv2d --------------------------------------------------------------------------------

def _deform_plan(ffi, attrs, x, w, offset, mask, out):
    strides, dilation, pads = deform_ops._geometry(attrs)
    g, og = attrs.groups, attrs.offset_groups
    if len(x) != 4 or len(w) != 4 or len(offset) != 4 or len(mask) not in (0, 4):
        raise shape_error("nn.deform_conv2d needs 4-d data, weight and offset, and a 4-d or "
                          "scalar mask", data=x, weight=w, offset=offset, mask=mask)
    n, c, h, wd = x
    oc, cg, kh, kw = w
    if cg * g != c or oc % g or c % og:
        raise shape_error(f"nn.deform_conv2d: channels do not agree with groups={g}, "
                          f"offset_groups={og}", data=x, weight=w)
    rooms = [size + p[0] + p[1] - (d * (k - 1) + 1) for size, k, d, p in
             zip((h, wd), (kh, kw), dilation, pads)]
    oh, ow = (window_len(size, k, s, d, p) for size, k, s, d, p in
              zip((h, wd), (kh, kw), strides, dilation, pads))
    if min(rooms) < 0 or offset != (n, og * kh * kw * 2, oh, ow) or \
            (mask and mask != (n, og * kh * kw, oh, ow)) or out != (n, oc, oh, ow):
        raise shape_error("nn.deform_conv2d: the offset, mask or output does not fit the "
                          "kernel", data=x, weight=w, offset=offset, mask=mask, output=out)
    return ffi.new("struct relvm_deform_shape *", dict(
        n=n, c=c, h=h, w=wd, oc=oc, kh=kh, kw=kw, oh=oh, ow=ow, sh=strides[0], sw=strides[1],
        dh=dilation[0], dw=dilation[1], pt=pads[0][0], pl=pads[1][0], groups=g,
        offset_groups=og, has_mask=int(len(mask) == 4)))


@kernel("nn.deform_conv2d", dtypes=FLOATS,
        accepts=lambda e: len(set(e.inputs) | set(e.outputs)) == 1)
def make_deform_conv2d(entry):
    ffi, lib = library()
    attrs, dt = attrs_of(entry), CODE[entry.inputs[0]]
    conv, ptr, name, plans = lib.relvm_deform_conv2d, ffi.from_buffer, entry.name, {}

    def run(x, w, offset, mask, out):
        key = (x.shape, w.shape, offset.shape, mask.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, _deform_plan(ffi, attrs, *key))
        status = conv(dt, plan, ptr(x), ptr(w), ptr(offset), ptr(mask), ptr(out))
        if status:
            check(status, f"{name} {key}")
    return run


# --- conv3d_transpose -----------------------------------------------------------------------------

def _conv3d_transpose_plan(ffi, attrs, x, w, out):
    strides, dilation, out_pad, pads = conv_transpose_ops.geometry3d(attrs)
    g = attrs.groups
    if len(x) != 5 or len(w) != 5:
        raise shape_error("nn.conv3d_transpose needs 5-d data and weight", data=x, weight=w)
    if x[1] != w[0] or w[0] % g:
        raise ValueError(f"input channels differ: data {x} vs weight {w} with groups={g}")
    if max(w[2:]) > 64:
        raise shape_error("nn.conv3d_transpose: the C kernel takes at most 64 taps per axis",
                          weight=w)
    sizes = [conv_transpose_ops._out_len(*a)
             for a in zip(x[2:], w[2:], strides, dilation, out_pad, pads)]
    if min(sizes) < 0:
        raise ValueError(f"padding {attrs.padding} crops more than the output holds")
    if out != (x[0], w[1] * g, *sizes):
        raise shape_error("nn.conv3d_transpose: wrong output shape", data=x, weight=w,
                          output=out)
    if max([p[0] for p in pads] + [(k - 1) * d for k, d in zip(w[2:], dilation)]) >= 1 << 62:
        raise ValueError(f"nn.conv3d_transpose: padding {attrs.padding} or dilation "
                         f"{attrs.dilation} past the C kernel's range (2**62)")
    return ffi.new("struct relvm_conv3d_transpose_shape *", dict(
        n=x[0], c=x[1], oc=w[1] * g, groups=g, **{"in": list(x[2:])}, k=list(w[2:]),
        out=sizes, stride=list(strides), dilation=list(dilation), pad=[p[0] for p in pads]))


@kernel("nn.conv3d_transpose", dtypes=FLOATS, accepts=_conv_dtypes_ok)
def make_conv3d_transpose(entry):
    return _planned_conv(entry, "relvm_conv3d_transpose", _conv3d_transpose_plan)
@kernel("linalg.det", dtypes=FLOATS)
def make_det(entry):
    ffi, lib = library()
    dt, ptr, name, det = CODE[entry.inputs[0]], ffi.from_buffer, entry.name, lib.relvm_det

    def run(x, out):
        if x.ndim < 2 or x.shape[-1] != x.shape[-2] or out.shape != x.shape[:-2]:
            raise shape_error(f"{name}: data must hold square matrices, the output one "
                              "determinant each", data=x.shape, output=out.shape)
        check(det(dt, prod(x.shape[:-2]), x.shape[-1], ptr(x), ptr(out)), f"{name} of {x.shape}")
    return run
