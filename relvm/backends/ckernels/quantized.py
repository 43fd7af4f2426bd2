"""C kernels for the integer products of quantized tensors (``kernels/qgemm.c``):
nn.matmul_integer and nn.conv2d_integer, int8/uint8 operands in any mix, int32 results.

A constant operand is packed once per VM (see :class:`~.packed.PackedWeights`): matmul's b
when one matrix serves every batch item, conv's weights. Other operands are packed by each call
(the integer GEMM always reads packed bytes; packing costs a k-th of the product or less).
"""

from __future__ import annotations

from ...ops import conv as conv_ops
from ...ops import window
from ...ops.quantized import QUANTIZED
from . import kernel
from .common import CODE, attrs_of, check, library, prod, remember, shape_error
from .linalg import _batch_dims, _same_windows, _Shape
from .packed import PackedWeights


def _quantized_entry(entry) -> bool:
    """int8/uint8 operands, each zero point of its operand's dtype, an int32 result."""
    a, b, za, zb = entry.inputs
    return (a in QUANTIZED and b in QUANTIZED and za == a and zb == b
            and entry.outputs == ("int32",))


def _zero_point_count(shape, length: int, name: str, along: str) -> int:
    count = prod(shape)
    if len(shape) > 1 or count not in (1, length):
        raise ValueError(f"{name} has {count} entries; it needs 1 or one per {along} "
                         f"({length})")
    return count


def _bytes_as_floats(size: int) -> int:
    """PackedWeights counts float32s: enough of them for ``size`` bytes."""
    return -(-int(size) // 4)


# --- nn.matmul_integer ----------------------------------------------------------------------------

def _matmul_plan(a, b, za, zb, out):
    """(batch, m, n, k, stride_a, stride_b, za count, zb count, shared, outer): one C call over
    the innermost run of batch dims the strides describe, at each (offset_a, offset_b,
    offset_out) of ``outer`` (elements); ``shared``: one b for every batch item."""
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        raise ValueError(f"inner dims differ: a {a} vs b {b}")
    m, k, n = a[-2], a[-1], b[-1]
    rank = max(len(a), len(b)) - 2
    ba = (1,) * (rank - len(a) + 2) + a[:-2]
    bb = (1,) * (rank - len(b) + 2) + b[:-2]
    if any(p != q and 1 not in (p, q) for p, q in zip(ba, bb)):
        raise ValueError(f"batch dims do not broadcast: {a} vs {b}")
    batch = tuple(0 if 0 in (p, q) else max(p, q) for p, q in zip(ba, bb))
    if out != batch + (m, n):
        raise shape_error("nn.matmul_integer: wrong output shape", a=a, b=b, output=out)
    za_count = _zero_point_count(za, m, "a_zero_point", "row of a")
    zb_count = _zero_point_count(zb, n, "b_zero_point", "column of b")
    shared = all(d == 1 for d in bb)
    if 0 in batch:
        return (0, m, n, k, 0, 0, za_count, zb_count, shared, ())
    dims = _batch_dims(batch, ba, bb, m * k, k * n, m * n)
    if not dims:
        return (1, m, n, k, 0, 0, za_count, zb_count, shared, ())
    (size, sa, sb, _), outer = dims[-1], dims[:-1]
    offsets = [(0, 0, 0)]
    for d_size, da, db, dc in outer:
        offsets = [(oa + i * da, ob + i * db, oc + i * dc) for oa, ob, oc in offsets
                   for i in range(d_size)]
    return (size, m, n, k, sa, sb, za_count, zb_count, shared,
            () if offsets == [(0, 0, 0)] else tuple(offsets))


@kernel("nn.matmul_integer", dtypes=QUANTIZED, accepts=_quantized_entry, with_constants=True)
def make_matmul_integer(entry, constants):
    ffi, lib = library()
    a_code, b_code = CODE[entry.inputs[0]], CODE[entry.inputs[1]]
    fn, ptr, null, name, plans = lib.relvm_matmul_integer, ffi.from_buffer, ffi.NULL, entry.name, {}
    weights = PackedWeights(
        constants, f"matmul_integer_{entry.inputs[1]}",
        lambda k, n: _bytes_as_floats(lib.relvm_qgemm_packed_b_size(k, n)),
        lambda k, n, w, out: lib.relvm_qgemm_pack_b(b_code, k, n, w, out),
        lambda k, n: (k, n))

    def run(a, b, za, zb, out):
        key = (a.shape, b.shape, za.shape, zb.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, _matmul_plan(*key))
        batch, m, n, k, sa, sb, za_count, zb_count, shared, outer = plan
        packed = weights.get(b, k, n) if shared and m and n and k else None
        pb, pza, pzb = ptr(b), ptr(za), ptr(zb)
        if not outer:
            status = fn(a_code, b_code, batch, m, n, k, ptr(a), sa, pb, sb,
                        null if packed is None else packed, pza, za_count, pzb, zb_count,
                        ptr(out))
        else:  # batch dims that no one stride steps through: a call per outer position
            pa, pc = ptr(a), ptr(out)
            for oa, ob, oc in outer:
                status = fn(a_code, b_code, batch, m, n, k, pa + oa, sa, pb + ob, sb,
                            null if packed is None else packed, pza, za_count, pzb, zb_count,
                            pc + 4 * oc)
                if status:
                    break
        if status:
            check(status, f"{name} {key}")
    return run


# --- nn.conv2d_integer ----------------------------------------------------------------------------

def _conv_plan(ffi, attrs, x, w, zx, zw, out):
    """The C geometry struct for these shapes, checked as the reference checks them."""
    strides, dilation, pads = conv_ops.conv2d_geometry(attrs)
    g = attrs.groups
    if len(x) != 4 or len(w) != 4:
        raise shape_error("nn.conv2d_integer needs 4-d data and weight", data=x, weight=w)
    n, c, h, wd = x
    oc, ic, kh, kw = w
    if c != ic * g or oc % g:
        raise ValueError(f"input channels differ: data {x} vs weight {w} with groups={g}")
    oh, ow = window.runtime_out(_Shape(x), (kh, kw), strides, dilation, pads, False, "kernel")
    if out != (n, oc, oh, ow):
        raise shape_error("nn.conv2d_integer: wrong output shape", data=x, weight=w,
                          output=out)
    _zero_point_count(zx, 1, "data_zero_point", "tensor")
    zw_count = _zero_point_count(zw, oc, "weight_zero_point", "output channel")
    (sh, dh), (sw, dw) = (_same_windows(size, k, st, d, p) for size, k, st, d, p in
                          zip((h, wd), (kh, kw), strides, dilation, pads))
    return ffi.new("struct relvm_conv2d_shape *", dict(
        n=n, c=c, h=h, w=wd, oc=oc, kh=kh, kw=kw, oh=oh, ow=ow, sh=sh, sw=sw,
        pt=pads[0][0], pl=pads[1][0], dh=dh, dw=dw, groups=g)), zw_count


@kernel("nn.conv2d_integer", dtypes=QUANTIZED, accepts=_quantized_entry, with_constants=True)
def make_conv2d_integer(entry, constants):
    ffi, lib = library()
    attrs = attrs_of(entry)
    x_code, w_code = CODE[entry.inputs[0]], CODE[entry.inputs[1]]
    fn, ptr, null, name, plans = lib.relvm_conv2d_integer, ffi.from_buffer, ffi.NULL, entry.name, {}
    weights = PackedWeights(
        constants, f"conv2d_integer_{entry.inputs[1]}",
        lambda s: _bytes_as_floats(lib.relvm_conv2d_integer_packed_size(s)),
        lambda s, w, out: lib.relvm_conv2d_integer_pack_weights(s, w_code, w, out),
        lambda s: (s.oc, s.c, s.groups, s.kh, s.kw))

    def run(x, w, zx, zw, out):
        key = (x.shape, w.shape, zx.shape, zw.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, _conv_plan(ffi, attrs, *key))
        shape, zw_count = plan
        packed = weights.get(w, shape)
        status = fn(shape, x_code, w_code, ptr(x), ptr(w), null if packed is None else packed,
                    ptr(zx), ptr(zw), zw_count, ptr(out))
        if status:
            check(status, f"{name} {key}")
    return run
