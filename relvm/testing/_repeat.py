"""Repeated chains of generated programs: one elementwise chain applied at several places of a
program, to values of other ranks, broadcasts and operand positions (see ``_forms.py``).

Fusion makes each place one fused kernel with the same steps, so a compiler that gave two
such kernels one identity (the same generated loop for a 4-d and a 3-d value, for ``x - y``
with ``y`` of shape ``(n, 4)`` and ``(4,)``, for a scalar first or second) would run one
place's code on another's shapes. The places differ in:

* the rank of the value the chain starts from (an input, a value in scope, or the product of
  a dense or conv2d: an epilogue after an anchor),
* the shape of each tensor operand: the value's own shape, a suffix of it (none: a scalar),
  some dims 1, or one channel axis (a bias: ``(u,)``, ``(1, u)``, ``(c, 1, 1)``, ``(n, 1)``),
* which side of a binary op that operand (or a literal: ``x - 1`` beside ``1 - x``) is on.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.dims import Dim
from ..ir.types import TensorType
from ._forms import _UNARY as _FORMS_UNARY
from ._forms import FLOATS, _bind_product, _window_fits, literal
from ._gen import Block, Gen, Value, call_text, infer

#: Elementwise ops a chain applies to its value alone: name -> (kinds, template, exact), taken
#: from the forms' table (those whose template needs nothing but the value, on float and num).
_UNARY = {k: _FORMS_UNARY[k] for k in ("nn.relu", "negative", "abs", "clip", "nn.leaky_relu",
                                       "sigmoid", "tanh")}
_BINARY = ("add", "subtract", "multiply", "maximum", "minimum")


@dataclass(frozen=True)
class Link:
    """One op of a chain on its value ``x``.

    ``other`` is None (a unary op), ``"literal"`` (``op(x, value)``), ``"tensor"`` (``op(x,
    y)``, ``y`` a new input of a shape drawn at each place), ``"bias"`` (``nn.bias_add`` of a
    new input along axis ``value``) or ``"input"`` (``op(x, c)``, ``c`` the chain's first
    value: swish is ``sigmoid`` then ``multiply`` by the input). ``swap`` puts the other
    operand first; each place may flip it.
    """

    op: str
    other: str | None = None
    value: int = 1  # the literal, or the bias axis
    swap: bool = False


def _draw_chain(gen: Gen, dtype: str) -> list[Link]:
    """Two or three links (one op alone is not fused), at least one of them with a tensor
    operand (whose broadcast is what differs between places); or swish."""
    floating = dtype in FLOATS
    unary = [n for n, (kind, _, _) in _UNARY.items() if floating or kind == "num"]
    tensor = Link(gen.pick(_BINARY), "tensor", swap=gen.coin(0.3))
    if floating and gen.coin(0.2):  # swish, maybe then an operand
        swish = [Link("sigmoid"), Link("multiply", "input", swap=gen.coin(0.5))]
        return swish + ([tensor] if gen.coin(0.5) else [])
    chain = []
    for _ in range(gen.integer(1, 2)):
        kind = gen.integer(0, 3 if floating else 2)
        if kind == 0:
            chain.append(Link(gen.pick(unary)))
        elif kind == 1:
            chain.append(Link(gen.pick(_BINARY), "literal", gen.pick([1, 2, -1]), gen.coin(0.4)))
        elif kind == 2:
            chain.append(Link(gen.pick(_BINARY), "tensor", swap=gen.coin(0.3)))
        else:
            chain.append(Link("nn.bias_add", "bias", gen.pick([1, -1])))
    chain.insert(gen.integer(0, len(chain)), tensor)
    return chain


#: How a tensor operand broadcasts into the value: each place prefers one no other place used.
_PATTERNS = ("same", "suffix", "ones", "channel", "scalar")


def _operand_shape(gen: Gen, shape: tuple[Dim, ...], used: set) -> tuple[Dim, ...]:
    """A shape that broadcasts into ``shape`` without changing it."""
    n = len(shape)
    pattern = gen.pick([p for p in _PATTERNS if p not in used] or _PATTERNS)
    used.add(pattern)
    if pattern == "same" or not n:
        return shape
    if pattern == "scalar":
        return ()
    if pattern == "channel":  # (u,), (1, u), (c, 1, 1), (n, 1)
        axis = gen.integer(0, n - 1)
        lead = gen.integer(0, axis)
        return (1,) * lead + (shape[axis],) + (1,) * (n - axis - 1)
    if pattern == "suffix":
        return shape[gen.integer(1, n):] or shape[-1:]
    ones = [1 if gen.coin(0.5) else d for d in shape]
    ones[gen.integer(0, n - 1)] = 1
    return tuple(ones[gen.integer(0, n - 1):])


def _start(gen: Gen, block: Block, dtype: str, anchor: str | None, ranks: set) -> Value | None:
    """The value a place's chain starts from, preferably of a rank no other place has."""
    if anchor == "dense":
        rank = gen.pick([r for r in (2, 3, 1) if r not in ranks] or [2])
        x = block.new_param([block.new_dim() for _ in range(rank)], dtype, prefix="p")
        if x is None:  # a dim of @f's that only exists at run time
            return None
        w = block.new_param((block.new_dim(), x.shape[-1]), dtype)
        if not _bind_product(gen, block, "nn.dense", [x, w], {}):
            return None
        return block.scope[-1]
    if anchor == "conv2d":
        x = block.new_param([block.new_dim() for _ in range(4)], dtype, prefix="p")
        k = gen.pick([1, 3])
        pads = (k // 2,) * 4
        if x is None or not _window_fits(block, x, (k, k), (1, 1), pads):
            return None
        w = block.new_param((block.new_dim(), x.shape[1], k, k), dtype)
        attrs = {"padding": [k // 2]} if k > 1 else {}
        if not _bind_product(gen, block, "nn.conv2d", [x, w], attrs):
            return None
        return block.scope[-1]
    fresh = [r for r in (1, 2, 3, 4, 0) if r not in ranks]
    if gen.coin(0.4):
        v = block.choose(lambda v: v.dtype == dtype and v.ndim not in ranks)
        if v is not None:
            return v
    rank = gen.pick(fresh or [2])
    return block.new_param([block.new_dim() for _ in range(rank)], dtype, prefix="p")


def _apply(gen: Gen, block: Block, link: Link, x: Value, start: Value, used: set
           ) -> Value | None:
    """Bind ``link`` on ``x`` at one place; None if its operand cannot be made."""
    if link.other is None:
        _, template, exact = _UNARY[link.op]
        return block.bind(template.format(x=x.ref), x.shape, x.dtype, x.depth if exact else None)
    swap = link.swap != gen.coin(0.3)
    attrs: dict = {}
    if link.other == "literal":
        other = literal(link.value, x.dtype)
        other_type, depth = TensorType((), x.dtype), 0
    elif link.other == "input":
        other, other_type, depth = start.ref, start.type, start.depth
    else:
        if link.other == "bias":
            if not -x.ndim <= link.value < x.ndim:
                return None
            attrs = {"axis": link.value}
            shape, swap = (x.shape[link.value],), False
        else:
            shape = _operand_shape(gen, x.shape, used)
        y = block.new_param(shape, x.dtype, prefix="b")
        if y is None:
            return None
        other, other_type, depth = y.ref, y.type, y.depth
    args, types = [x.ref, other], [x.type, other_type]
    if swap:
        args, types = args[::-1], types[::-1]
    t = infer(link.op, attrs, *types)
    if t is None or t.shape != x.shape:
        return None
    depth = None if x.depth is None or depth is None else (
        max(x.depth, depth) + (1 if link.op == "multiply" else 0))
    return block.bind(call_text(link.op, args, attrs), t.shape, t.dtype, depth)


def _anchor_chain(gen: Gen, anchor: str) -> list[Link]:
    """What follows a dense or conv2d: the epilogue the kernel library applies in registers
    (``[bias_add] [relu]`` along the channel axis), or a bias of any broadcast and a chain."""
    bias_add = Link("nn.bias_add", "bias", 1 if anchor == "conv2d" else -1)
    if gen.coin(0.5):
        return [[bias_add, Link("nn.relu")], [bias_add], [Link("nn.relu")]][gen.integer(0, 2)]
    return [bias_add if gen.coin(0.5) else Link("add", "tensor")] + _draw_chain(gen, "float32")


def _conv_tail(gen: Gen, block: Block, tail: str, x: Value) -> None:
    """After a conv's chain: its global average pool, or a second conv with a bias (and relu):
    the kernel library runs a conv with its pool, or two convs, as one kernel."""
    if tail == "pool":
        block.bind(call_text("nn.global_avg_pool2d", [x.ref]), (*x.shape[:2], 1, 1), x.dtype,
                   None)
        return
    k = 1 if tail == "pointwise" else 3
    w = block.new_param((block.new_dim(), x.shape[1], k, k), x.dtype)
    attrs = {"padding": [1]} if k > 1 else {}
    if _bind_product(gen, block, "nn.conv2d", [x, w], attrs):
        y = block.scope[-1]
        b = block.new_param((y.shape[1],), y.dtype, prefix="b")
        if b is not None:
            block.bind(call_text("nn.bias_add", [y.ref, b.ref]), y.shape, y.dtype, y.depth)


def repeated_chain(gen: Gen, block: Block) -> bool:
    """One elementwise chain at three places of other ranks, operand broadcasts and operand
    positions; each place starts at an input or value in scope, or (all places of one chain
    alike) after a dense or conv2d, maybe followed by a pool or a second conv. Three places
    catch kernels shared by mistake more often than two (the first place's kernel is the one
    the others would wrongly run)."""
    dtype = gen.pick(gen.config.dtypes)
    anchor = tail = None
    if dtype == "float32" and gen.coin(0.4):
        anchor = gen.pick(["dense", "conv2d"])
    chain = _draw_chain(gen, dtype) if anchor is None else _anchor_chain(gen, anchor)
    if anchor == "conv2d" and gen.coin(0.6):
        tail = gen.pick(["pool", "conv", "pointwise"])
    ranks: set[int] = set()
    patterns: list[set] = [set() for _ in chain]  # per link, the broadcasts places used
    bound = False
    for _ in range(3):
        start = _start(gen, block, dtype, anchor, ranks)
        if start is None:
            continue
        ranks.add(start.ndim)
        x = start
        for link, used in zip(chain, patterns):
            x = _apply(gen, block, link, x, start, used) or x
        if tail is not None:
            _conv_tail(gen, block, tail, x)
        bound = bound or x is not start or anchor is not None
    return bound
