"""Channels last: a CNN's convs, and the ops around them, run on NHWC data.

ONNX models are NCHW, where a conv's vectors run along a row of pixels: a 14- or 7-pixel row
fills a vector badly, and the small planes of a CNN's later layers go through transposes into
and out of pixel-major panels, every layer. With channels last (``nn.conv2d`` with
``data_layout="NHWC"``, ``kernels/conv_nhwc.c``) the vectors run along channels instead,
whatever the plane's size: a depthwise conv reads a vector of channels per tap, a 1x1 conv is
one GEMM reading its input in place, a 3x3 conv one GEMM step per tap reading it in place.

Which convs (``channels_last_convs``): those that suit NHWC -- float32, at least
:data:`MIN_CHANNELS` input channels (a mobile model's first conv on its RGB image, 3 -> 16 or
32 channels, runs faster NCHW: its output is transposed once instead; one writing
:data:`WIDE_STEM` channels or more, a ResNet's, faster NHWC, its RGB image transposed), output channels that fill vectors of channels
(:data:`NARROW`: 24 channels a group would leave a quarter of AVX-512's lanes empty, and an
OCR model's 96 -> 24 convs over 120 x 160 ran 1.1-1.25x slower NHWC), depthwise convs of at
least :data:`MIN_DEPTHWISE` channels -- in the regions, the connected runs of ops a region may
take (such convs, bias adds, elementwise and broadcast ops, concatenations and slices along
the channels, global average pools; ``_nhwc_form`` lists them), that hold a depthwise conv or at least two convs; a conv over one
pixel (a squeeze-and-excitation block's) always suits, both layouts being one. Measured
NHWC/NCHW (Intel Xeon, AVX-512, one thread): depthwise convs 0.4-0.8, 3x3 convs of 64-512
channels 0.84-0.98, 1x1 convs 0.6-1.0; whole models ResNet-18 0.83, ResNet-50 0.88,
MobileNetV2 0.84, MobileNetV3-Large 0.86, EfficientNet-B0 0.92, PP-OCR det 1.08.

Then it rewrites each function body once, children first, keeping for each value the NHWC
version it has made of it (if any):

- a taken conv becomes an NHWC conv of the NHWC version of its input (made by a ``transpose``
  when the input has none);
- an elementwise op (``relu``, ``clip``, ``sigmoid``, ...) or a broadcast op (``add``,
  ``multiply``, ...) of which an operand has an NHWC version follows it into NHWC: its other
  rank-4 operands are transposed (a residual from outside the chain; the same permutation of
  both operands broadcasts alike, so an SE block's (n, c, 1, 1) scale is one too), its
  constants are transposed here, and an operand of fewer dims is grown to four
  (``expand_dims``, as broadcasting reads it) and transposed; ``nn.bias_add`` along the
  channels, ``nn.global_avg_pool2d`` (a ``mean`` over H and W), a ``strided_slice`` whose
  bounds are all given (its axes moved) and ``concatenate`` along the channels (of which a
  part has an NHWC version) follow their operands too;
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
from ..errors import RelvmError
from ..ops.indexing import slice_specs
from ..ops.registry import BROADCAST, ELEMWISE, OPS, Op
from .rewrite import Rewriter, rewrite_module

#: A conv reading fewer input channels than this stays NCHW (see the docstring), unless it
#: writes at least WIDE_STEM channels a group: a ResNet's 7x7 3 -> 64 stem ran NHWC (its RGB
#: input transposed first) in 0.91-0.96 of the model's time, a MobileNet's or EfficientNet's
#: 3x3 3 -> 16 / 32 one in 1.03-1.19 (AMD Zen 4, AVX-512, 1 and 2 threads).
MIN_CHANNELS = 4  # (input channels, all groups together)
WIDE_STEM = 64

#: Channels in the widest vector a kernel runs (AVX-512's 16 floats). A GEMM-form conv with
#: fewer than NARROW output channels a group that are not a multiple of it (8, 12, 24) would
#: run its vectors of channels a quarter to a half empty, and stays NCHW (vectors along a row
#: of pixels); so does a depthwise conv of fewer than MIN_DEPTHWISE channels.
VECTOR, NARROW, MIN_DEPTHWISE = 16, 32, 8

TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def _tensor4(e: Expr, dtype: str | None = None) -> bool:
    t = e.checked_type
    return isinstance(t, TensorType) and t.ndim == 4 and (dtype is None or t.dtype == dtype)


def _transpose(x: Expr, axes: tuple[int, ...], span) -> Call:
    return Call(OPS["transpose"], (x,), OPS["transpose"].make_attrs({"axes": axes}), span=span)


def _suits_nhwc(conv: Call) -> bool:
    """Whether a float32 NCHW conv runs well on NHWC data (see NARROW and MIN_CHANNELS)."""
    a = conv.attrs
    if (a.data_layout != "NCHW" or a.out_layout not in ("", "NCHW")
            or not _tensor4(conv.args[0], "float32") or not _tensor4(conv, "float32")):
        return False
    c, o = conv.args[0].checked_type.shape[1], conv.checked_type.shape[1]
    if not (isinstance(c, int) and isinstance(o, int)) or c < 1:
        return False
    if c < MIN_CHANNELS:
        return o // a.groups >= WIDE_STEM
    if tuple(conv.args[0].checked_type.shape[2:]) == (1, 1):
        return True  # one pixel (a squeeze-and-excitation block's): the layouts are one
    if a.groups == c and o == c:
        return c >= MIN_DEPTHWISE
    ocg = o // a.groups
    return ocg >= NARROW or ocg % VECTOR == 0


def _nhwc_form(call: Call) -> tuple[Op, dict] | None:
    """The op and attrs ``call`` (an op call of an NCHW rank-4 value) becomes on NHWC data, or
    None where it cannot follow its operands there: the one list of what a region may take
    (``_flexible``) and of what the rewrite makes of it (``_ChannelsLast._nhwc_version``)."""
    op, attrs = call.op, call.attrs
    if op is OPS["nn.conv2d"]:
        return (op, {**dict(attrs), "data_layout": "NHWC", "out_layout": ""}) \
            if _suits_nhwc(call) else None
    if op in (OPS["nn.bias_add"], OPS["concatenate"]):  # along the channels only
        return (op, {**dict(attrs), "axis": 3}) if attrs.axis % 4 == 1 else None
    if op is OPS["nn.global_avg_pool2d"]:
        return OPS["mean"], {"axis": [1, 2], "keepdims": True}
    if op is OPS["strided_slice"]:  # (a YOLO block's halves of its channels)
        sliced = _nhwc_slice(call)
        return None if sliced is None else (op, sliced)
    if (op.pattern in (ELEMWISE, BROADCAST) and not op.data_dependent
            and not any(k in attrs for k in ("axis", "axes", "layout"))):
        return op, dict(attrs)
    return None


def _flexible(e: Expr) -> bool:
    """An op call a channels-last region may take (one _nhwc_form has a form for)."""
    return (isinstance(e, Call) and isinstance(e.op, Op) and _tensor4(e)
            and _nhwc_form(e) is not None)


_NHWC_AXIS = {0: 0, 1: 3, 2: 1, 3: 2}  # an NCHW axis's place in NHWC


def _nhwc_slice(call: Call) -> dict | None:
    """The attrs of ``call`` (a strided_slice of an NCHW tensor) slicing the NHWC tensor alike,
    or None where a bound is left to its default (no integer stands for it in every mode)."""
    try:
        specs = slice_specs(call.attrs, call.args[0].checked_type.shape)
    except RelvmError:
        return None
    if any(b is None or e is None for _, b, e, _ in specs):
        return None
    return {"begin": [b for _, b, _, _ in specs], "end": [e for _, _, e, _ in specs],
            "strides": [st for _, _, _, st in specs],
            "axes": [_NHWC_AXIS[a] for a, _, _, _ in specs], "slice_mode": call.attrs.slice_mode}


def _depthwise(e: Call) -> bool:
    return e.attrs.groups > 1 and e.attrs.groups == e.args[0].checked_type.shape[1]


def channels_last_convs(module: Module) -> set[int]:
    """ids of the convs that go channels last: those that suit NHWC (_suits_nhwc) in the
    regions -- connected runs of ops a region may take (such convs, their epilogues, residual
    adds, concatenations, pools) -- that hold a depthwise conv or two convs at least. A lone
    dense conv between NCHW ops stays as it is: its gain would not pay for the transposes
    into and out of its region."""
    parent: dict[int, int] = {}

    def find(a: int) -> int:
        while parent.setdefault(a, a) != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    convs = []
    for fn in module.functions.values():
        for n in post_order(fn.body, into_functions=True):
            if not _flexible(n):
                continue
            if n.op is OPS["nn.conv2d"]:
                convs.append(n)
            args = n.args[0].fields if n.op is OPS["concatenate"] and isinstance(
                n.args[0], Tuple) else n.args
            for a in args:
                if _flexible(a):
                    parent[find(id(n))] = find(id(a))
    count: dict[int, int] = {}
    for c in convs:
        root = find(id(c))
        count[root] = count.get(root, 0) + (2 if _depthwise(c) else 1)
    return {id(c) for c in convs if count[find(id(c))] >= 2}


class _ChannelsLast(Rewriter):
    def __init__(self, convs: set[int]) -> None:
        super().__init__()
        self.convs = convs  # ids of the convs to rewrite (channels_last_convs)
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
        args = call.args
        form = _nhwc_form(call) if _tensor4(call) else None
        if form is None:
            return None
        op, attrs = form[0], form[0].make_attrs(form[1])
        if op is OPS["nn.conv2d"]:
            if id(call) not in self.convs:  # (channels_last_convs: the region's worth it)
                return None
            return Call(op, (self.to_nhwc(args[0]), self(args[1])), attrs, span=call.span)
        if call.op in (OPS["nn.bias_add"], OPS["nn.global_avg_pool2d"], OPS["strided_slice"]):
            if id(args[0]) not in self.nhwc:  # (follows its data; a bias stays as it is)
                return None
            return Call(op, (self.nhwc[id(args[0])],) + tuple(self(a) for a in args[1:]),
                        attrs, span=call.span)
        if op is OPS["concatenate"]:
            fields = args[0]
            if (not isinstance(fields, Tuple)
                    or not any(id(f) in self.nhwc for f in fields.fields)
                    or not all(_tensor4(f) for f in fields.fields)):
                return None
            joined = Tuple(tuple(self.to_nhwc(f) for f in fields.fields), span=fields.span)
            return Call(op, (joined,), attrs, span=call.span)
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
        return Call(op, tuple(operands), attrs, span=call.span)


def channels_last(module):
    """The module with its float32 convs and the ops around them on NHWC data (see above).
    Needs types (run after inference); the result needs inference again."""
    return rewrite_module(module, _ChannelsLast, convs=channels_last_convs(module))
