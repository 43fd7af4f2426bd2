"""Layout, reduction and data-dependent forms of generated programs (see ``_forms.py``)."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from ..ir import dims as D
from ..ir.dims import Dim
from ..ir.types import TensorType, TupleType
from ._forms import HUGE, _axis, _numeric, divisors, literal
from ._gen import Block, Gen, Value, call_text, infer, tuple_fields


def _bind_op(block: Block, op: str, x: Value, attrs: dict, depth: int | None = -1) -> bool:
    """Bind ``op(x, **attrs)`` if it type-checks; the depth is ``x``'s unless given."""
    t = infer(op, attrs, x.type)
    if not isinstance(t, TensorType):
        return False
    block.bind(call_text(op, [x.ref], attrs), t.shape, t.dtype, x.depth if depth == -1 else depth)
    return True


# --- reshape ------------------------------------------------------------------------------------


def _static_part(shape) -> int:
    return math.prod(d for d in shape if isinstance(d, int))


def _split_code(gen: Gen, d: Dim) -> list[int] | None:
    """Codes ``-4, a, b`` splitting dim ``d`` (one of a, b may be -1), if it provably splits."""
    options = [f for f in (2, 3) if D.mod(d, f) == 0]
    if not options:
        return None
    f = gen.pick(options)
    rest = D.floordiv(d, f)
    second = rest if isinstance(rest, int) and gen.coin(0.5) else -1
    return [-4, f, second] if gen.coin(0.5) else [-4, -1, f]


def _walk_codes(gen: Gen, shape) -> list[int]:
    """Relay's reshape codes walked over the input dims: copy (0), merge (-3), split (-4),
    keep the rest (-2)."""
    codes: list[int] = []
    i = 0
    while i < len(shape):
        choice = gen.integer(0, 3)
        if choice == 1 and i + 1 < len(shape):
            codes.append(-3)
            i += 2
            continue
        if choice == 2 and (split := _split_code(gen, shape[i])) is not None:
            codes += split
        elif choice == 3:
            return codes + [-2]
        else:
            codes.append(0)
        i += 1
    return codes


def _newshape(gen: Gen, shape) -> list[int]:
    mode = gen.integer(0, 3)
    if mode == 0:
        return [-1]
    if mode == 1 and len(shape) >= 2:
        return [0, -1]
    static = _static_part(shape)
    if mode == 2 and static > 1:
        f = gen.pick([d for d in divisors(static) if d > 1])
        return [-1, f] if gen.coin(0.5) else [f, -1]
    return _walk_codes(gen, shape)


def reshape(gen: Gen, block: Block) -> bool:
    """``reshape`` with Relay's codes 0, -1, -2, -3, -4, or ``nn.batch_flatten``."""
    x = block.choose(lambda v: v.ndim >= 1)
    if x is None:
        return False
    if gen.coin(0.15):
        return _bind_op(block, "nn.batch_flatten", x, {})
    return _bind_op(block, "reshape", x, {"newshape": _newshape(gen, x.shape)})


def reshape_like(gen: Gen, block: Block) -> bool:
    """``reshape_like`` to a value of as many elements, or ``broadcast_to`` a static shape."""
    x = block.choose()
    if gen.coin(0.5) and all(isinstance(d, int) for d in x.shape):
        shape = [gen.pick([2, 3]) if d == 1 and gen.coin(0.5) else d for d in x.shape]
        shape = [gen.integer(1, 3) for _ in range(gen.integer(0, 1))] + shape
        return _bind_op(block, "broadcast_to", x, {"shape": shape})
    count = math.prod(x.shape) if x.shape else 1
    like = block.choose(lambda v: D.prove_equal(math.prod(v.shape) if v.shape else 1, count)
                        is True)
    t = infer("reshape_like", {}, x.type, like.type)
    if t is None:
        return False
    block.bind(call_text("reshape_like", [x.ref, like.ref]), t.shape, t.dtype, x.depth)
    return True


# --- axes ---------------------------------------------------------------------------------------


def transpose(gen: Gen, block: Block) -> bool:
    """``transpose`` by a random permutation (negative entries sometimes), or reversed."""
    x = block.choose(lambda v: v.ndim >= 1)
    if x is None:
        return False
    if gen.coin(0.2):
        return _bind_op(block, "transpose", x, {})
    perm = gen.draw(st.permutations(range(x.ndim)))
    axes = [a - x.ndim if gen.coin(0.15) else a for a in perm]
    return _bind_op(block, "transpose", x, {"axes": axes})


def expand_squeeze(gen: Gen, block: Block) -> bool:
    """``expand_dims`` anywhere, or ``squeeze`` of static size-1 axes."""
    x = block.choose()
    ones = [i for i, d in enumerate(x.shape) if d == 1]
    if ones and gen.coin(0.5):
        axes = sorted(gen.draw(st.sets(st.sampled_from(ones), min_size=1)))
        attrs = {} if all(isinstance(d, int) for d in x.shape) and gen.coin(0.3) else {
            "axis": axes}
        return _bind_op(block, "squeeze", x, attrs)
    attrs = {"axis": gen.integer(-x.ndim - 1, x.ndim)}
    if gen.coin(0.3):
        attrs["num_newaxis"] = gen.integer(0, 2)
    return _bind_op(block, "expand_dims", x, attrs)


# --- concatenate and split ----------------------------------------------------------------------


def _agrees_except(a: Value, b: Value, axis: int) -> bool:
    return a.dtype == b.dtype and a.ndim == b.ndim and all(
        i == axis or D.prove_equal(x, y) is True for i, (x, y) in enumerate(zip(a.shape, b.shape)))


def concatenate(gen: Gen, block: Block) -> bool:
    """``concatenate`` of a value with 1 or 2 others that agree off the axis."""
    a = block.choose(lambda v: v.ndim >= 1)
    if a is None:
        return False
    axis = _axis(gen, a.ndim)
    others = block.values(lambda v: _agrees_except(a, v, axis % a.ndim))
    fields = [a] + [gen.pick(others) for _ in range(gen.integer(1, 2))]
    t = infer("concatenate", {"axis": axis}, _tuple_type(fields))
    if t is None:
        return False
    refs = ", ".join(f.ref for f in fields)
    depth = None if any(f.depth is None for f in fields) else max(f.depth for f in fields)
    block.bind(f"concatenate(({refs}), axis={axis})", t.shape, t.dtype, depth)
    return True


def _tuple_type(fields) -> TupleType:
    return TupleType(tuple(f.type for f in fields))


def _split_spec(gen: Gen, block: Block, d: Dim):
    """``indices_or_sections`` for a dim: sections that divide it, or ascending indices."""
    if isinstance(d, int):
        if d >= 2 and gen.coin(0.5):
            cuts = sorted(gen.draw(st.sets(st.integers(1, d - 1), min_size=1, max_size=2)))
            return cuts
        return gen.pick(divisors(d)) if d >= 1 else 1
    sections = [k for k in (2, 3) if D.mod(d, k) == 0]
    if sections and gen.coin(0.5):
        return gen.pick(sections)
    cuts = sorted(gen.draw(st.sets(st.integers(1, 3), min_size=1, max_size=2)))
    return cuts if block.require(d, cuts[-1] + 1) else 1


def split(gen: Gen, block: Block) -> bool:
    """``split`` into sections or at indices; every piece enters scope as ``%N.i``."""
    x = block.choose(lambda v: v.ndim >= 1)
    if x is None:
        return False
    axis = _axis(gen, x.ndim)
    attrs = {"indices_or_sections": _split_spec(gen, block, x.shape[axis]), "axis": axis}
    fields = tuple_fields(infer("split", attrs, x.type))
    if fields is None:
        return False
    block.bind_tuple(call_text("split", [x.ref], attrs), fields, [x.depth] * len(fields))
    return True


# --- slicing and gathering ----------------------------------------------------------------------

_BEGINS = (0, 1, -1, 2, -2, -HUGE)
_ENDS = (HUGE, -1, 2, 3, 1, -2, 0, -HUGE)


def strided_slice(gen: Gen, block: Block) -> bool:
    """``strided_slice`` with negative, huge and backward bounds, on leading or listed axes."""
    x = block.choose(lambda v: v.ndim >= 1)
    if x is None:
        return False
    count = gen.integer(1, x.ndim)
    listed = gen.coin(0.4)
    axes = (sorted(gen.draw(st.sets(st.integers(0, x.ndim - 1), min_size=count,
                                    max_size=count))) if listed else list(range(count)))
    size_mode = gen.coin(0.15)
    attrs: dict = {"begin": [gen.pick(_BEGINS) for _ in axes]}
    if size_mode:
        attrs["end"] = [gen.pick([-1, 1, 2, 3]) for _ in axes]
        attrs["slice_mode"] = "size"
    else:
        attrs["end"] = [gen.pick(_ENDS) for _ in axes]
        strides = [gen.pick([1, 2, -1, -2]) if gen.coin(0.5) else 1 for _ in axes]
        if any(s != 1 for s in strides):
            attrs["strides"] = strides
    if listed:
        attrs["axes"] = axes
    return _bind_op(block, "strided_slice", x, attrs)


def take(gen: Gen, block: Block) -> bool:
    """``take`` of a literal index or a new int32 index param, clip or wrap mode."""
    x = block.choose(lambda v: v.ndim >= 1)
    if x is None:
        return False
    axis = _axis(gen, x.ndim) if gen.coin(0.8) else None
    sources = [x.shape[axis]] if axis is not None else list(x.shape)
    if not all(block.require(d, 1) for d in sources):
        return False
    if gen.coin(0.5):
        index, index_type = literal(gen.pick([0, 1, -1, 5]), "int32"), TensorType((), "int32")
    else:
        param = block.new_param((block.new_dim(),), "int32", prefix="i")
        index, index_type = param.ref, param.type
    attrs: dict = {} if axis is None else {"axis": axis}
    if gen.coin(0.5):
        attrs["mode"] = "wrap"
    t = infer("take", attrs, x.type, index_type)
    if t is None:
        return False
    block.bind(call_text("take", [x.ref, index], attrs), t.shape, t.dtype, x.depth)
    return True


# --- reductions ---------------------------------------------------------------------------------

_REDUCE = ("sum", "max", "min", "mean", "prod", "argmax", "argmin")


def _reduce_attrs(gen: Gen, ndim: int) -> tuple[dict, list[int]]:
    """Random ``axis`` (none, one, a list, maybe empty), ``keepdims``, ``exclude``; and the axes
    they reduce."""
    attrs: dict = {}
    form = gen.integer(0, 3) if ndim else 0
    if form == 0:
        axes = list(range(ndim))
    else:
        chosen = sorted(gen.draw(st.sets(st.integers(0, ndim - 1), min_size=int(form < 3),
                                         max_size=1 if form == 1 else ndim)))
        attrs["axis"] = _axis_text(gen, chosen[0], ndim) if form == 1 else chosen
        axes = chosen
        if gen.coin(0.2):
            attrs["exclude"] = True
            axes = [a for a in range(ndim) if a not in chosen]
    if gen.coin(0.3):
        attrs["keepdims"] = True
    return attrs, axes


def _axis_text(gen: Gen, axis: int, ndim: int) -> int:
    return axis - ndim if gen.coin(0.3) else axis


def reduce(gen: Gen, block: Block) -> bool:
    """``sum``, ``max``, ``mean``, ``argmax``, ... over random axes; max/min/arg* need non-empty
    reduced axes, and arg* an exactly computed input (ties must break the same way)."""
    x = block.choose(_numeric)
    if x is None:
        return False
    op = gen.pick([o for o in _REDUCE if x.exact or not o.startswith("arg")])
    attrs, axes = _reduce_attrs(gen, x.ndim)
    if op in ("max", "min", "argmax", "argmin") and not all(
            block.require(x.shape[a], 1) for a in axes):
        return False
    if op.startswith("arg") and gen.coin(0.3):
        attrs["select_last_index"] = True
    if op.startswith("arg"):
        depth = 0
    elif op == "prod" or (op == "mean" and x.dtype in ("float32", "float64")):
        depth = None
    else:
        depth = x.depth
    gen.accumulates = True
    return _bind_op(block, op, x, attrs, depth)


# --- constants and data-dependent shapes -------------------------------------------------------


def fill(gen: Gen, block: Block) -> bool:
    """``zeros``/``ones``/``full`` of a small static shape."""
    shape = [gen.integer(1, 3) for _ in range(gen.integer(0, 2))]
    dtype = gen.pick(["float32", "int32"])
    op = gen.pick(["zeros", "ones", "full"])
    attrs = {"shape": shape, "dtype": dtype}
    args = [literal(3, dtype)] if op == "full" else []
    block.bind(call_text(op, args, attrs), shape, dtype, 0)
    return True


def _opaque(block: Block, t: TensorType) -> TensorType:
    """Mark the run-time-only dims of a data-dependent result."""
    for d in t.shape:
        block.func.opaque.update(D.free_symbols(d))
    return t


def data_dependent(gen: Gen, block: Block) -> bool:
    """``argwhere`` (possibly empty), ``arange`` up to a symbolic dim, ``dyn.reshape``."""
    op = gen.pick(["argwhere", "arange", "dyn.reshape"])
    if op == "argwhere":
        c = block.choose(lambda v: v.dtype == "bool")
        if c is None:
            return False
        t = _opaque(block, infer("argwhere", {}, c.type))
        block.bind(call_text("argwhere", [c.ref]), t.shape, t.dtype, 0)
        return True
    x = block.choose(lambda v: v.ndim >= 1)
    if x is None:
        return False
    if op == "arange":
        stop = f"take(shape_of({x.ref}), {gen.integer(0, x.ndim - 1)})"
        step = gen.pick([1, 2])
        s = TensorType((), "int32")
        t = _opaque(block, infer("arange", {}, s, s, s))
        block.bind(call_text("arange", ["0", stop, str(step)]), t.shape, t.dtype, 0)
        return True
    count = math.prod(x.shape) if x.shape else 1
    y = block.choose(lambda v: D.prove_equal(math.prod(v.shape) if v.shape else 1, count) is True)
    # allowzero: a 0 in the shape is a size (by default it copies the input's dim, as in Relay).
    shape_type, attrs = TensorType((x.ndim,), "int32"), {"allowzero": 1}
    t = _opaque(block, infer("dyn.reshape", attrs, y.type, shape_type))
    block.bind(call_text("dyn.reshape", [y.ref, f"shape_of({x.ref})"], attrs), t.shape, t.dtype,
               y.depth)
    return True
