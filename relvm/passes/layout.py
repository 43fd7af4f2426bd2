"""Channels last: the convs of mobile-style regions, and the ops around them, run on NHWC data.

ONNX models are NCHW, where a conv's vectors run along a row of pixels: a 14- or 7-pixel row
fills a vector badly, and the small planes of a CNN's later layers go through transposes into
and out of pixel-major panels, every layer. With channels last (``nn.conv2d`` with
``data_layout="NHWC"``, ``kernels/conv_nhwc.c``) the vectors run along channels instead,
whatever the plane's size: a depthwise conv reads a vector of channels per tap, a 1x1 conv is
one GEMM reading its input in place.

Which convs: the pass first finds regions, the connected runs of ops a region may take (convs,
bias adds, elementwise and broadcast ops, concatenations along the channels, global average
pools; ``regions_with_depthwise``), and takes the float32 convs of the regions that hold a
depthwise conv: there NHWC pays (depthwise convs in 0.4-0.6x the NCHW loop's time, the 1x1
convs around them 0.8-1.0x), while a region of dense 3x3 convs (a ResNet) ran no faster NHWC
and stays as it is.

Then it rewrites each function body once, children first, keeping for each value the NHWC
version it has made of it (if any):

- a taken conv becomes an NHWC conv of the NHWC version of its input (made by a ``transpose``
  when the input has none), unless it reads fewer than :data:`MIN_CHANNELS` channels (a model's
  first conv on its RGB image, which the NCHW kernel runs faster: its output is transposed once
  instead);
- an elementwise op (``relu``, ``clip``, ``sigmoid``, ...) or a broadcast op (``add``,
  ``multiply``, ...) of which an operand has an NHWC version follows it into NHWC: its other
  rank-4 operands are transposed (a residual from outside the chain; the same permutation of
  both operands broadcasts alike, so an SE block's (n, c, 1, 1) scale is one too), its
  constants are transposed here, and an operand of fewer dims is grown to four
  (``expand_dims``, as broadcasting reads it) and transposed; ``nn.bias_add`` along the
  channels, ``nn.global_avg_pool2d`` (a ``mean``
  over H and W) and ``concatenate`` along the channels (of which a part has an NHWC version)
  follow their operands too;
- anything else reads the NCHW value: ``transpose(v, (0, 3, 1, 2))`` of the NHWC one, made
  where it is first needed (once per value) and not at all where nothing needs it.

So a region runs NHWC from the transpose before its first conv to the transpose after its last
op, and the values in between exist only in NHWC. Results equal the NCHW build's up to the
order of float additions. ``relvm.build(..., channels_last=False)`` skips the pass.
"""

from __future__ import annotations

import numpy as np

from ..ir.nodes import Call, Constant, Expr, Module, Tuple, post_order
from ..ir.types import TensorType
from ..ops.registry import BROADCAST, ELEMWISE, OPS, Op
from .rewrite import Rewriter, rewrite_module

#: A conv reading fewer input channels per group than this stays NCHW (see the docstring).
MIN_CHANNELS = 4  # (input channels, all groups together)

TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def _tensor4(e: Expr, dtype: str | None = None) -> bool:
    t = e.checked_type
    return isinstance(t, TensorType) and t.ndim == 4 and (dtype is None or t.dtype == dtype)


def _transpose(x: Expr, axes: tuple[int, ...], span) -> Call:
    return Call(OPS["transpose"], (x,), OPS["transpose"].make_attrs({"axes": axes}), span=span)


def _flexible(e: Expr) -> bool:
    """An op call a channels-last region may take (what _nhwc_version may rewrite)."""
    if not (isinstance(e, Call) and isinstance(e.op, Op) and _tensor4(e)):
        return False
    op = e.op
    return (op in (OPS["nn.conv2d"], OPS["nn.bias_add"], OPS["nn.global_avg_pool2d"],
                   OPS["concatenate"])
            or (op.pattern in (ELEMWISE, BROADCAST) and not op.data_dependent))


def _depthwise(e: Expr) -> bool:
    if not (isinstance(e, Call) and e.op is OPS["nn.conv2d"] and _tensor4(e.args[0])):
        return False
    c = e.args[0].checked_type.shape[1]
    return isinstance(c, int) and c >= MIN_CHANNELS and e.attrs.groups == c \
        and e.attrs.data_layout == "NCHW"


def regions_with_depthwise(module: Module) -> set[int]:
    """ids of the convs in the regions that go channels last: the connected runs of ops a
    region may take (convs, their epilogues, residual adds, concatenations, pools) that hold
    a depthwise conv. A region of dense convs only stays NCHW: the NHWC kernel's gain is in
    depthwise convs (a vector of channels per tap: 0.4-0.6x the NCHW loop's time) and the 1x1
    convs around them (0.8-1.0x), while a 3x3 conv of 64-512 channels ran 0.9-1.15x (slower
    when memory is busy), not worth the transposes in and out."""
    parent: dict[int, int] = {}

    def find(a: int) -> int:
        while parent.setdefault(a, a) != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    convs, dw = [], set()
    for fn in module.functions.values():
        for n in post_order(fn.body, into_functions=True):
            if not _flexible(n):
                continue
            if n.op is OPS["nn.conv2d"]:
                convs.append(n)
                if _depthwise(n):
                    dw.add(id(n))
            args = n.args[0].fields if n.op is OPS["concatenate"] and isinstance(
                n.args[0], Tuple) else n.args
            for a in args:
                if _flexible(a):
                    parent[find(id(n))] = find(id(a))
    marked = {find(i) for i in dw}
    return {id(c) for c in convs if find(id(c)) in marked}


class _ChannelsLast(Rewriter):
    def __init__(self, convs: set[int]) -> None:
        super().__init__()
        self.convs = convs  # ids of the convs to rewrite (regions_with_depthwise)
        # id(expression of the input module) -> its NHWC version. The input module's
        # expressions live as long as the pass, so their ids stay theirs.
        self.nhwc: dict[int, Expr] = {}
        self.made: dict[int, Expr] = {}  # id(input expression) -> transpose to NHWC made of it

    def to_nhwc(self, e: Expr) -> Expr:
        """The NHWC version of input expression ``e`` (a rank-4 tensor), made if need be."""
        have = self.nhwc.get(id(e))
        if have is not None:
            return have
        made = self.made.get(id(e))
        if made is None:
            made = self.made[id(e)] = _transpose(self(e), TO_NHWC, getattr(e, "span", None))
        return made

    def visit_Call(self, call: Call) -> Expr:
        nchw = super().visit_Call(call)
        if not isinstance(call.op, Op):
            return nchw
        made = self._nhwc_version(call)
        if made is None:
            return nchw
        self.nhwc[id(call)] = made
        return _transpose(made, TO_NCHW, call.span)

    def _nhwc_version(self, call: Call) -> Expr | None:
        """The NHWC version of ``call`` (an op call of the input module), or None."""
        op, args = call.op, call.args
        if not _tensor4(call):
            return None
        if op is OPS["nn.conv2d"]:
            a = call.attrs
            if (id(call) not in self.convs or a.data_layout != "NCHW"
                    or a.out_layout not in ("", "NCHW")
                    or not _tensor4(args[0], "float32") or not _tensor4(call, "float32")):
                return None
            channels = args[0].checked_type.shape[1]
            if not isinstance(channels, int) or channels < MIN_CHANNELS:
                return None
            attrs = op.make_attrs({**dict(a), "data_layout": "NHWC", "out_layout": ""})
            return Call(op, (self.to_nhwc(args[0]), self(args[1])), attrs, span=call.span)
        if op is OPS["nn.bias_add"]:
            if call.attrs.axis % 4 != 1 or id(args[0]) not in self.nhwc:
                return None
            return Call(op, (self.nhwc[id(args[0])], self(args[1])),
                        op.make_attrs({"axis": 3}), span=call.span)
        if op is OPS["nn.global_avg_pool2d"]:
            if id(args[0]) not in self.nhwc:
                return None
            mean = OPS["mean"]
            return Call(mean, (self.nhwc[id(args[0])],),
                        mean.make_attrs({"axis": [1, 2], "keepdims": True}), span=call.span)
        if op is OPS["concatenate"]:
            fields = args[0]
            if (not isinstance(fields, Tuple) or call.attrs.axis % 4 != 1
                    or not any(id(f) in self.nhwc for f in fields.fields)
                    or not all(_tensor4(f) for f in fields.fields)):
                return None
            joined = Tuple(tuple(self.to_nhwc(f) for f in fields.fields), span=fields.span)
            return Call(op, (joined,), op.make_attrs({"axis": 3}), span=call.span)
        if (op.pattern not in (ELEMWISE, BROADCAST) or op.data_dependent
                or any(k in call.attrs for k in ("axis", "axes", "layout"))):
            return None
        if not any(id(x) in self.nhwc for x in args):
            return None
        operands = []
        for x in args:
            t = x.checked_type
            if isinstance(t, TensorType) and t.ndim == 4:
                # (the same permutation of both operands' axes broadcasts alike: an SE block's
                # (n, 1, 1, c) scale; a transpose if x has no NHWC version)
                operands.append(self.to_nhwc(x))
            elif isinstance(t, TensorType) and all(d == 1 for d in t.shape):
                operands.append(self(x))  # a scalar in any layout
            elif isinstance(x, Constant) and x.data is not None and x.data.ndim <= 4:
                data = x.data.reshape((1,) * (4 - x.data.ndim) + x.data.shape)
                operands.append(Constant(np.ascontiguousarray(data.transpose(TO_NHWC)),
                                         span=x.span))
            elif isinstance(t, TensorType) and 1 <= t.ndim < 4:
                # rank 4 (leading ones, as broadcasting reads it), then NHWC
                grown = Call(OPS["expand_dims"], (self(x),),
                             OPS["expand_dims"].make_attrs({"axis": 0, "num_newaxis": 4 - t.ndim}),
                             span=x.span)
                operands.append(_transpose(grown, TO_NHWC, x.span))
            else:
                return None
        return Call(op, tuple(operands), call.attrs, span=call.span)


def channels_last(module):
    """The module with its float32 convs and the ops around them on NHWC data (see above).
    Needs types (run after inference); the result needs inference again."""
    return rewrite_module(module, _ChannelsLast, convs=regions_with_depthwise(module))
