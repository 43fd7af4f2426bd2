"""One oneDNN primitive per artifact prim, for concrete shapes (runtime half of ``compile.py``).

Each builder checks the shapes it is given (an artifact may lie), computes its result's shape,
makes the primitive descriptor and queues the primitive (and any reorder) on the plan.
"""

from __future__ import annotations

from ...errors import RelvmKernelError
from . import lib as L
from .runtime import _Plan, _spread, _view, _window_len

_NCHW = ("perm", (0, 3, 1, 2))


def _shape(plan: _Plan, ref) -> list[int]:
    return plan.k_values[ref]["shape"]


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise RelvmKernelError(f"dnnl: {what}")


class _Dst:
    """Where prim ``j`` writes: in the activation layout (``act``: convs, pools and what
    follows them in it) or plain; a region output in the activation layout is reordered into
    the caller's array by :meth:`done`."""

    def __init__(self, plan: _Plan, j: int, shape, view, act: bool = False):
        self.plan, self.j, self.shape, self.view = plan, j, list(shape), view
        self.out = plan.k.output_of.get(j)
        dims, strides = _view(shape, view)
        self.plain = plan.md(dims, strides)
        self.md = plan.act_md(dims) if act else self.plain
        self.act = act and not plan.lib.dnnl_memory_desc_equal(self.md, self.plain)
        self.pending = None

    def memory(self):
        """The dst memory; records the value; a reorder is queued by :meth:`done`."""
        plan = self.plan
        record: dict = {"shape": self.shape}
        if not self.act:
            if self.out is not None:
                record["bind"] = self.out
            else:
                record["address"] = plan.buffer(self.plain)
            plan.k_values[("prim", self.j)] = record
            return plan.memory(self.plain, record.get("address"), record.get("bind"))
        address = plan.buffer(self.md)
        record["act"] = {self.view: (self.md, address, None)}
        mem = plan.memory(self.md, address)
        if self.out is not None:
            record["bind"] = self.out
            self.pending = (self.md, mem, self.plain, plan.memory(self.plain, None, self.out))
        plan.k_values[("prim", self.j)] = record
        return mem

    def chosen(self, md):
        """The memory of a dst the primitive chose (``md``), reordered into this value's
        layout by :meth:`done`; the value itself is recorded as :meth:`memory` does."""
        to = self.memory()
        if self.plan.lib.dnnl_memory_desc_equal(md, self.md):
            return to
        mem = self.plan.memory(md, self.plan.buffer(md))
        self.first = (md, mem, self.md, to)
        return mem

    def done(self) -> None:
        if getattr(self, "first", None):
            self.plan.reorder(*self.first)
        if self.pending:
            self.plan.reorder(*self.pending)


def _jit_pd(plan: _Plan, call: str, make, variants: list) -> tuple[object, object]:
    """The first of ``variants`` (arguments to ``make``) for which oneDNN has a jit kernel,
    and that variant; the last one when none has (its ``ref`` impl is recorded, tests fail)."""
    for k, variant in enumerate(variants):
        pd = _pd(plan, call, lambda out: make(out, *variant))
        if k == len(variants) - 1 or not plan.impl(pd).startswith("ref"):
            return pd, variant
        plan.lib.dnnl_primitive_desc_destroy(pd)


def _pd(plan: _Plan, call: str, make) -> object:
    pd = plan.ffi.new("dnnl_primitive_desc_t *")
    plan.L.check(call, make(pd))
    return pd[0]


def conv(plan: _Plan, j: int, p: dict) -> None:
    view = _NCHW if p["nhwc"] else None
    src_shape, w_shape = _shape(plan, p["src"]), _shape(plan, p["weights"])
    _need(len(src_shape) == 4 and len(w_shape) == 4, "conv2d takes 4-d data and weight")
    (n, c, h, w), _ = _view(src_shape, view)
    o, i, kh, kw = w_shape
    g = p["groups"]
    _need(c == i * g and o % g == 0, f"conv2d channels: data {src_shape}, weight {w_shape}, "
                                     f"groups {g}")
    out = []
    for size, k, s, d, pl, pr in zip((h, w), (kh, kw), p["strides"], p["dilates"], p["pad_l"],
                                      p["pad_r"]):
        span = size + pl + pr - ((k - 1) * (d + 1) + 1)
        _need(span >= 0, f"conv2d window {w_shape} does not fit data {src_shape}")
        out.append(span // s + 1)
    dst_shape = [n, out[0], out[1], o] if p["nhwc"] else [n, o, out[0], out[1]]
    w_view_shape = [g, o // g, i, kh, kw] if g > 1 else w_shape
    attr, po_args = plan.attr(p["post_ops"], dst_shape, view, act=True)
    # Weights computed in the region are reordered into the layout the conv chooses at each
    # call: no jit conv reads plain OIHW weights with NHWC data.
    act_type = plan.k.act_type  # bf16 regions round weights (and activations) to bfloat16
    w_md = plan.md(w_view_shape, dtype=act_type)
    bias_md = plan.md([o], [1]) if p["bias"] is not None else plan.ffi.NULL
    dst = _Dst(plan, j, dst_shape, view, act=True)
    ffi = plan.ffi
    dims = [ffi.new("dnnl_dims_t", p[k]) for k in ("strides", "dilates", "pad_l", "pad_r")]
    src_md, src = plan.act(p["src"], view)
    logical = _view(dst_shape, view)[0]
    # The region's layout first; else (a blocked layout's 3-channel stem, say) oneDNN's choice
    # with reorders around the conv.
    pd, (chosen_src, _) = _jit_pd(
        plan, "dnnl_convolution_forward_primitive_desc_create",
        lambda out, s_md, d_md: plan.lib.dnnl_convolution_forward_primitive_desc_create(
            out, plan.L.engine, L.FORWARD_INFERENCE, L.CONVOLUTION_DIRECT, s_md, w_md,
            bias_md, d_md, *dims, attr),
        [(src_md, dst.md), (plan.md(_view(src_shape, view)[0], dtype=act_type),
                            plan.md(logical, dtype=act_type))])
    if chosen_src is not src_md:
        src = plan.source(p["src"], view, plan.query(pd, L.QUERY_SRC_MD))
    w_const = plan.k.is_constant(p["weights"])
    wanted_w = plan.query(pd, L.QUERY_WEIGHTS_MD)
    if w_const:
        weights = plan.weights(p["weights"], None if g == 1 else ("reshape", w_view_shape),
                               wanted_w)
    else:
        weights = plan.source(p["weights"], ("reshape", w_view_shape), wanted_w)
    args = [(L.ARG_SRC, src), (L.ARG_WEIGHTS, weights)]
    if p["bias"] is not None:
        _need(_shape(plan, p["bias"]) == [o], f"conv2d bias must be ({o},)")
        args.append((L.ARG_BIAS, plan.plain(p["bias"])[1]))
    args.append((L.ARG_DST, dst.chosen(plan.query(pd, L.QUERY_DST_MD))))
    plan.add(pd, args + po_args)
    dst.done()


def matmul(plan: _Plan, j: int, p: dict) -> None:
    a, b = _shape(plan, p["src"]), _shape(plan, p["weights"])
    if p["flatten"]:  # dense: data (..., K) times weight (N, K) transposed
        _need(len(a) >= 1 and len(b) == 2 and a[-1] == b[1], f"dense shapes {a} x {b}")
        dst_shape, a_view, b_view, out_view = a[:-1] + [b[0]], "flatten", "swap", "flatten"
    else:
        _need(len(a) == len(b) >= 2, f"matmul ranks differ: {a} x {b}")
        a_view = "swap" if p["trans_a"] else None
        b_view = "swap" if p["trans_b"] else None
        (ad, _), (bd, _) = _view(a, a_view), _view(b, b_view)
        _need(ad[-1] == bd[-2], f"matmul inner dims differ: {a} x {b} (transposed: "
                                f"{p['trans_a']}, {p['trans_b']})")
        batch = []
        for x, y in zip(ad[:-2], bd[:-2]):
            _need(x == y or 1 in (x, y), f"matmul batch dims do not broadcast: {a} x {b}")
            batch.append(y if x == 1 else x)
        dst_shape, out_view = batch + [ad[-2], bd[-1]], None
    attr, po_args = plan.attr(p["post_ops"], dst_shape, out_view)
    # bf16 regions multiply bfloat16 copies of both operands (float32 accumulation and dst).
    act_type = plan.k.act_type
    src_md = plan.md(*_view(a, a_view), dtype=act_type)
    w_const = plan.k.is_constant(p["weights"])
    w_dims, w_strides = _view(b, b_view)
    dst = _Dst(plan, j, dst_shape, out_view)
    rank = len(_view(dst_shape, out_view)[0])
    bias_args, bias_md = [], plan.ffi.NULL
    if p["bias"] is not None:
        bias = _spread(_shape(plan, p["bias"]), rank, rank - 1)
        _need(bias[-1] == _view(dst_shape, out_view)[0][-1], "matmul bias length")
        bias_md = plan.md(*_view(bias, None))
        bias_args = [(L.ARG_BIAS, plan.memory(bias_md, plan.k_values[p["bias"]].get("address"),
                                              plan.k_values[p["bias"]].get("bind")))]
    # Weights computed in the region (attention's K and V) are read in place when a jit
    # kernel takes their strides, else reordered at each call into the layout it chooses
    # (brgemm matmul has no kernel for a batch-broadcast transposed B with a binary post-op).
    variants = [(plan.md(w_dims, dtype=act_type),)]
    if not w_const and act_type == L.F32:
        variants.insert(0, (plan.md(w_dims, w_strides),))
    pd, _ = _jit_pd(plan, "dnnl_matmul_primitive_desc_create",
                    lambda out, w_md: plan.lib.dnnl_matmul_primitive_desc_create(
                        out, plan.L.engine, src_md, w_md, bias_md, dst.md, attr), variants)
    src = plan.source(p["src"], a_view, src_md)  # in place, or converted at each call
    wanted_w = plan.query(pd, L.QUERY_WEIGHTS_MD)
    if w_const:
        weights = plan.weights(p["weights"], b_view, wanted_w)
    else:
        weights = plan.source(p["weights"], b_view, wanted_w)
    plan.add(pd, [(L.ARG_SRC, src), (L.ARG_WEIGHTS, weights)] + bias_args
             + [(L.ARG_DST, dst.memory())] + po_args)
    dst.done()


def pool(plan: _Plan, j: int, p: dict) -> None:
    shape = _shape(plan, p["src"])
    _need(len(shape) == 4, f"pooling takes 4-d NCHW data, got {shape}")
    n, c, h, w = shape
    if p["global"]:
        _need(h > 0 and w > 0, f"global pooling of an empty image {shape}")
        kernel, strides, dil, pl, pr = [h, w], [1, 1], [0, 0], [0, 0], [0, 0]
        out = [1, 1]
    else:
        kernel, strides, dil, pl = p["kernel"], p["strides"], p["dilates"], p["pad_l"]
        out, pr = [], []
        for size, k, s, d, a, b in zip((h, w), kernel, strides, dil, pl, p["pad_r"]):
            _need(size + a + b >= (k - 1) * (d + 1) + 1,
                  f"pool window {kernel} does not fit data {shape}")
            o = _window_len(size, k, s, d + 1, a, b, p["ceil_mode"])
            out.append(o)
            # ceil_mode's last window reaches past the explicit padding: oneDNN pads further
            pr.append(max(b, (o - 1) * s + (k - 1) * (d + 1) + 1 - size - a))
    dst_shape = [n, c] + out
    # A pool after a conv reads the conv's layout: jit pools take NHWC and plain alike.
    act = plan.is_act(p["src"])
    src_md, src = plan.act(p["src"]) if act else plan.plain(p["src"])
    dst = _Dst(plan, j, dst_shape, None, act=act)
    attr, _ = plan.attr([], dst_shape, None)
    ffi = plan.ffi
    dims = [ffi.new("dnnl_dims_t", v) for v in (strides, kernel, dil, pl, pr)]
    pd = _pd(plan, "dnnl_pooling_forward_primitive_desc_create",
             lambda o: plan.lib.dnnl_pooling_forward_primitive_desc_create(
                 o, plan.L.engine, L.FORWARD_INFERENCE, L.POOLING[p["alg"]], src_md, dst.md,
                 *dims, attr))
    plan.add(pd, [(L.ARG_SRC, src), (L.ARG_DST, dst.memory())])
    dst.done()


def layer_norm(plan: _Plan, j: int, p: dict) -> None:
    shape = _shape(plan, p["src"])
    _need(len(shape) >= 1, "layer_norm of a scalar")
    src_md, src = plan.plain(p["src"])
    dst = _Dst(plan, j, shape, None)
    flags, args = 0, []
    for key, flag, arg in (("scale", L.USE_SCALE, L.ARG_SCALE),
                           ("shift", L.USE_SHIFT, L.ARG_SHIFT)):
        if p[key] is not None:
            _need(_shape(plan, p[key]) == shape[-1:], f"layer_norm {key} must be "
                                                      f"({shape[-1]},)")
            flags |= flag
            args.append((arg, plan.plain(p[key])[1]))
    attr, _ = plan.attr([], shape, None)
    pd = _pd(plan, "dnnl_layer_normalization_forward_primitive_desc_create",
             lambda o: plan.lib.dnnl_layer_normalization_forward_primitive_desc_create(
                 o, plan.L.engine, L.FORWARD_INFERENCE, src_md, dst.md, plan.ffi.NULL,
                 p["epsilon"], flags, attr))
    plan.add(pd, [(L.ARG_SRC, src), (L.ARG_DST, dst.memory())] + args)
    dst.done()


def softmax(plan: _Plan, j: int, p: dict) -> None:
    shape = _shape(plan, p["src"])
    _need(p["axis"] < max(len(shape), 1), f"softmax axis {p['axis']} of {shape}")
    src_md, src = plan.plain(p["src"])
    dst = _Dst(plan, j, shape, None)
    attr, _ = plan.attr([], shape, None)
    pd = _pd(plan, "dnnl_softmax_forward_primitive_desc_create",
             lambda o: plan.lib.dnnl_softmax_forward_primitive_desc_create(
                 o, plan.L.engine, L.FORWARD_INFERENCE, L.SOFTMAX_ACCURATE, src_md, dst.md,
                 p["axis"], attr))
    plan.add(pd, [(L.ARG_SRC, src), (L.ARG_DST, dst.memory())])
    dst.done()


def eltwise(plan: _Plan, j: int, p: dict) -> None:
    shape = _shape(plan, p["src"])
    # An eltwise on a conv's result stays in its layout (eltwise is layout-blind).
    act = plan.is_act(p["src"])
    src_md, src = plan.act(p["src"]) if act else plan.plain(p["src"])
    dst = _Dst(plan, j, shape, None, act=act)
    attr, _ = plan.attr([], shape, None)
    pd = _pd(plan, "dnnl_eltwise_forward_primitive_desc_create",
             lambda o: plan.lib.dnnl_eltwise_forward_primitive_desc_create(
                 o, plan.L.engine, L.FORWARD_INFERENCE, L.ELTWISE[p["alg"]], src_md, dst.md,
                 p["alpha"], p["beta"], attr))
    plan.add(pd, [(L.ARG_SRC, src), (L.ARG_DST, dst.memory())])
    dst.done()


def binary(plan: _Plan, j: int, p: dict) -> None:
    shape = _shape(plan, p["src0"])
    act = plan.is_act(p["src0"])
    src0_md, src0 = plan.act(p["src0"]) if act else plan.plain(p["src0"])
    src1_md, src1 = plan.operand(p["src1"], shape, p["along"], None, act=act)
    dst = _Dst(plan, j, shape, None, act=act)
    negate = [{"op": "eltwise", "alg": "linear", "alpha": -1.0, "beta": 0.0}]
    attr, _ = plan.attr(negate if p["negate"] else [], shape, None)
    pd = _pd(plan, "dnnl_binary_primitive_desc_create",
             lambda o: plan.lib.dnnl_binary_primitive_desc_create(
                 o, plan.L.engine, L.BINARY[p["alg"]], src0_md, src1_md, dst.md, attr))
    plan.add(pd, [(L.ARG_SRC, src0), (L.ARG_SRC_1, src1), (L.ARG_DST, dst.memory())])
    dst.done()


BUILDERS = {"conv": conv, "matmul": matmul, "pool": pool, "layer_norm": layer_norm,
            "softmax": softmax, "eltwise": eltwise, "binary": binary}
