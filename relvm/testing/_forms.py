"""The op forms of generated programs: each picks operands in scope and attributes that
type-check, binds one op call, and returns True; or returns False when nothing in scope fits.

A form's signature is ``form(gen, block) -> bool``. Result types come from the registry's type
relations (:func:`_gen.infer`); what a form adds is the choice of operands and attributes, and
the constraints on dims that only hold for some assignments (windows that must fit, axes that
must not be empty for ``max``).
"""

from __future__ import annotations

from typing import Sequence

from ..ir import dims as D
from ..ir.dims import Dim
from ..ir.types import TensorType
from ._gen import Block, Gen, Value, bare_symbol, call_text, deeper, infer, tuple_fields

FLOATS = ("float32", "float64")
HUGE = 2**31 - 1  # Relay's "to the end" in strided_slice

_SUFFIX = {"float32": "f", "float64": "f64", "int32": "", "int64": "i64"}


def literal(value: float | int | bool, dtype: str) -> str:
    """A scalar literal of ``dtype``: ``2f``, ``-1``, ``0.5f64``, ``True``."""
    if dtype == "bool":
        return "True" if value else "False"
    if dtype in FLOATS:
        return f"{float(value)!r}{_SUFFIX[dtype]}"
    return f"{int(value)}{_SUFFIX[dtype]}"


def _numeric(v: Value) -> bool:
    return v.dtype != "bool"


def _is_float(v: Value) -> bool:
    return v.dtype in FLOATS


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _axis(gen: Gen, ndim: int) -> int:
    """An axis in [0, ndim), sometimes written negative."""
    a = gen.integer(0, ndim - 1)
    return a - ndim if gen.coin(0.2) else a


def operand(gen: Gen, block: Block, pred, rank: int, dtype: str = "float32") -> Value | None:
    """A value in scope satisfying ``pred``; if there is none, a new input of ``rank``."""
    v = block.choose(pred)
    if v is None:
        v = block.new_param([block.new_dim() for _ in range(rank)], dtype, prefix="p")
    return v if v is not None and pred(v) else None


# --- broadcasting -------------------------------------------------------------------------------


def broadcast_pairs(a: Sequence[Dim], b: Sequence[Dim]) -> list[tuple[Dim, Dim]] | None:
    """Dim pairs whose broadcast is only decided at run time; None if provably incompatible."""
    pairs = []
    for x, y in zip(reversed(a), reversed(b)):
        if D.prove_equal(x, y) or x == 1 or y == 1:
            continue
        if isinstance(x, int) and isinstance(y, int):
            return None
        pairs.append((x, y))
    return pairs


def _fits_into(small: Sequence[Dim], big: Sequence[Dim]) -> bool:
    """True if broadcasting ``small`` against ``big`` gives ``big`` for every assignment."""
    return len(small) <= len(big) and all(
        y == 1 or D.prove_equal(x, y) for x, y in zip(reversed(big), reversed(small)))


def _runtime_ok(block: Block, pairs: list[tuple[Dim, Dim]]) -> bool:
    """Run-time broadcasting is generated in @main only, against a bare symbol."""
    return block.func.is_main and all(
        (bare_symbol(x) or bare_symbol(y)) and block.evaluable(x) and block.evaluable(y)
        for x, y in pairs)


def partner(gen: Gen, block: Block, a: Value, same_shape: bool = False,
            pred=lambda v: True) -> Value | None:
    """A value of ``a``'s dtype that broadcasts with it (recording the run-time conditions).

    With ``same_shape`` the broadcast result must be ``a``'s shape (for ``if`` branches).
    """
    options = []
    for v in block.values(lambda v: v.dtype == a.dtype and pred(v)):
        pairs = broadcast_pairs(a.shape, v.shape)
        if pairs is None or (pairs and not _runtime_ok(block, pairs)):
            continue
        if same_shape and not (pairs == [] and _fits_into(v.shape, a.shape)):
            continue
        options.append((v, pairs))
    if not options:
        return None
    v, pairs = gen.pick(options)
    for x, y in pairs:
        if not block.require_broadcast(x, y):
            return None
    return v


# --- elementwise ----------------------------------------------------------------------------------

_BINARY = {"float": ("add", "subtract", "multiply", "maximum", "minimum", "divide"),
           "int": ("add", "subtract", "multiply", "maximum", "minimum", "divide"),
           "bool": ("logical_and", "logical_or")}


def _kind(dtype: str) -> str:
    return "bool" if dtype == "bool" else ("float" if dtype in FLOATS else "int")


def binary(gen: Gen, block: Block, a: Value | None = None, same_shape: bool = False) -> bool:
    """``add(a, b)`` and friends; ``b`` is a value that broadcasts with ``a``, or a literal."""
    a = a or block.choose()
    op = gen.pick(_BINARY[_kind(a.dtype)])
    b = None if op == "divide" or gen.coin(0.25) else partner(gen, block, a, same_shape)
    if b is None:
        value = {"divide": gen.pick([2, 4, -2]), "multiply": gen.pick([2, -1, 3])}.get(op, 1)
        rhs, rhs_type, rhs_depth = literal(value, a.dtype), TensorType((), a.dtype), 0
    else:
        rhs, rhs_type, rhs_depth = b.ref, b.type, b.depth
    args, types = [a.ref, rhs], [a.type, rhs_type]
    if gen.coin(0.2) and not same_shape:
        args, types = args[::-1], types[::-1]
    t = infer(op, {}, *types)
    if t is None:
        return False
    # Division is by a power of two only, so it stays exact.
    depth = None if a.depth is None or rhs_depth is None else (
        max(a.depth, rhs_depth) + (1 if op == "multiply" else 0))
    block.bind(call_text(op, args), t.shape, t.dtype, depth)
    return True


# name -> (dtypes kind, text template, exact): {x} is the operand.
_UNARY = {
    "nn.relu": ("num", "nn.relu({x})", True),
    "negative": ("num", "negative({x})", True),
    "abs": ("num", "abs({x})", True),
    "clip": ("num", "clip({x}, a_min=-1.0, a_max=1.5)", True),
    "nn.leaky_relu": ("float", "nn.leaky_relu({x}, alpha=0.25)", True),
    "full_like": ("num", "full_like({x}, {two})", True),
    "zeros_like": ("any", "zeros_like({x})", True),
    "ones_like": ("num", "ones_like({x})", True),
    "sigmoid": ("float", "sigmoid({x})", False),
    "tanh": ("float", "tanh({x})", False),
    "exp": ("float", "exp({x})", False),
    "sqrt": ("float", "sqrt(abs({x}))", False),
    "rsqrt": ("float", "rsqrt(add(abs({x}), {one}))", False),
    "log": ("float", "log(add(abs({x}), {one}))", False),
    "erf": ("float", "erf({x})", False),
    "power": ("float", "power(add(abs({x}), {one}), 1.5{s})", False),
    # Discontinuous: only on values every backend computes to the same bits.
    "floor": ("exact-float", "floor(multiply({x}, 0.5{s}))", True),
    "ceil": ("exact-float", "ceil({x})", True),
    "round": ("exact-float", "round({x})", True),
    "sign": ("exact-num", "sign({x})", True),
    "logical_not": ("bool", "logical_not({x})", True),
}


def _unary_fits(kind: str, v: Value) -> bool:
    if kind == "any":
        return True
    if kind == "bool":
        return v.dtype == "bool"
    if kind.startswith("exact-") and not v.exact:
        return False
    return _is_float(v) if kind.endswith("float") else _numeric(v)


def unary(gen: Gen, block: Block, v: Value | None = None) -> bool:
    """One elementwise op of one operand (``nn.relu``, ``exp``, ``round``, ...)."""
    v = v or block.choose()
    names = [n for n, (kind, _, _) in _UNARY.items() if _unary_fits(kind, v)]
    name = gen.pick(names)
    _, template, exact = _UNARY[name]
    text = template.format(x=v.ref, one=literal(1, v.dtype) if v.dtype != "bool" else "",
                           two=literal(2, v.dtype) if v.dtype != "bool" else "",
                           s=_SUFFIX.get(v.dtype, ""))
    block.bind(text, v.shape, v.dtype, v.depth if exact else None)
    return True


_COMPARE = ("greater", "less", "equal", "not_equal", "greater_equal", "less_equal")


def compare(gen: Gen, block: Block) -> bool:
    """A comparison of exactly computed values (a near-tie must not flip between backends)."""
    a = block.choose(lambda v: _numeric(v) and v.exact)
    if a is None:
        return False
    op = gen.pick(_COMPARE)
    b = None if gen.coin(0.4) else partner(gen, block, a, pred=lambda v: v.exact)
    rhs, rhs_type = (b.ref, b.type) if b else (literal(0, a.dtype), TensorType((), a.dtype))
    t = infer(op, {}, a.type, rhs_type)
    if t is None:
        return False
    block.bind(call_text(op, [a.ref, rhs]), t.shape, t.dtype, 0)
    return True


def where(gen: Gen, block: Block) -> bool:
    """``where(cond, x, y)`` with all three broadcasting statically."""
    cond = block.choose(lambda v: v.dtype == "bool")
    if cond is None:
        if not compare(gen, block):
            return False
        cond = block.scope[-1]
    x = block.choose(lambda v: _numeric(v) and broadcast_pairs(cond.shape, v.shape) == [])
    if x is None:
        return False
    y = None if gen.coin(0.3) else block.choose(
        lambda v: v.dtype == x.dtype and broadcast_pairs(cond.shape, v.shape) == []
        and broadcast_pairs(x.shape, v.shape) == [])
    y_ref, y_type, y_depth = (y.ref, y.type, y.depth) if y else (
        literal(0, x.dtype), TensorType((), x.dtype), 0)
    t = infer("where", {}, cond.type, x.type, y_type)
    if t is None:
        return False
    depth = None if x.depth is None or y_depth is None else max(x.depth, y_depth)
    block.bind(call_text("where", [cond.ref, x.ref, y_ref]), t.shape, t.dtype, depth)
    return True


def cast(gen: Gen, block: Block) -> bool:
    """``cast`` between float32, float64, int32 and bool (float to int on exact values only)."""
    v = block.choose()
    targets = {"float32": ["float64"] + (["int32"] if v.exact else []),
               "float64": ["float32"], "int32": ["float32", "int64"],
               "int64": ["int32"], "bool": ["float32", "int32"]}[v.dtype]
    dtype = gen.pick(targets)
    block.bind(call_text("cast", [v.ref], {"dtype": dtype}), v.shape, dtype, v.depth)
    return True


# --- dense and matmuls --------------------------------------------------------------------------


def _matmul_operand(v: Value) -> bool:
    return v.dtype in ("float32", "int32")


def dense(gen: Gen, block: Block) -> bool:
    """``nn.dense(x, w)`` with a new weight param (U, K); U may be a symbol."""
    x = operand(gen, block, lambda v: _matmul_operand(v) and 1 <= v.ndim <= 3
                and block.evaluable(v.shape[-1]), 2)
    if x is None:
        return False
    units = block.new_dim()
    w = block.new_param((units, x.shape[-1]), x.dtype)
    attrs = {"units": units} if isinstance(units, int) and gen.coin(0.5) else {}
    return _bind_product(gen, block, "nn.dense", [x, w], attrs)


def _bind_product(gen: Gen, block: Block, op: str, args: list[Value | None], attrs) -> bool:
    if any(a is None for a in args):
        return False
    t = infer(op, attrs, *(a.type for a in args))
    if t is None:
        return False
    gen.accumulates = True
    block.bind(call_text(op, [a.ref for a in args], attrs), t.shape, t.dtype,
               deeper(*args, by=1))
    return True


def matmul(gen: Gen, block: Block) -> bool:
    """``nn.matmul(a, b)`` with either side transposed; b is a value in scope or a new param."""
    a = operand(gen, block, lambda v: _matmul_operand(v) and v.ndim == 2, 2)
    if a is None:
        return False
    ta, tb = gen.coin(0.3), gen.coin(0.3)
    k = a.shape[0] if ta else a.shape[1]
    inner = 1 if tb else 0
    b = block.choose(lambda v: v.dtype == a.dtype and v.ndim == 2
                     and D.prove_equal(v.shape[inner], k) is True) if gen.coin(0.5) else None
    if b is None and block.evaluable(k):
        n = block.new_dim()
        b = block.new_param((n, k) if tb else (k, n), a.dtype)
    attrs = {k2: v for k2, v in (("transpose_a", ta), ("transpose_b", tb)) if v}
    return _bind_product(gen, block, "nn.matmul", [a, b], attrs)


def batch_matmul(gen: Gen, block: Block) -> bool:
    """``nn.batch_matmul(a, b)``: (..., M, K) of rank 3 or 4 by a new (..., N, K) param (or
    (..., K, N)) whose batch dims are a's or 1 (reused for every item)."""
    rank = 3 if gen.coin(0.6) else 4
    a = operand(gen, block, lambda v: _matmul_operand(v) and v.ndim == rank
                and all(block.evaluable(d) for d in v.shape), rank)
    if a is None:
        return False
    ta, tb = gen.coin(0.2), not gen.coin(0.3)
    k = a.shape[-2] if ta else a.shape[-1]
    batch = tuple(1 if gen.coin(0.3) else d for d in a.shape[:-2])
    n = block.new_dim()
    b = block.new_param(batch + ((n, k) if tb else (k, n)), a.dtype)
    attrs = {k2: v for k2, v in (("transpose_a", ta), ("transpose_b", tb))
             if v != (k2 == "transpose_b")}
    return _bind_product(gen, block, "nn.batch_matmul", [a, b], attrs)


# --- windows: conv2d and pooling ----------------------------------------------------------------


def _padding(gen: Gen, most: tuple[int, int]) -> tuple[object, tuple[int, int, int, int]]:
    """A Relay padding attribute (1, 2 or 4 ints) and its (top, left, bottom, right)."""
    form = gen.integer(0, 3)
    if form == 0:
        return None, (0, 0, 0, 0)
    if form == 1:
        p = gen.integer(0, min(most))
        return [p], (p, p, p, p)
    if form == 2:
        p, q = gen.integer(0, most[0]), gen.integer(0, most[1])
        return [p, q], (p, q, p, q)
    pads = [gen.integer(0, most[i % 2]) for i in range(4)]
    return pads, tuple(pads)  # type: ignore[return-value]


def _window_fits(block: Block, x: Value, kernel, dilation, pads) -> bool:
    """Record that each spatial dim plus its padding holds the dilated kernel."""
    for axis, k, d, before, after in ((2, kernel[0], dilation[0], pads[0], pads[2]),
                                      (3, kernel[1], dilation[1], pads[1], pads[3])):
        need = d * (k - 1) + 1 - before - after
        if need > 0 and not block.require(x.shape[axis], need):
            return False
    return True


def _spatial(v: Value) -> bool:
    return v.ndim == 4 and _is_float(v)


def conv2d(gen: Gen, block: Block) -> bool:
    """``nn.conv2d`` with random kernel, strides, padding, dilation and groups."""
    x = operand(gen, block, lambda v: _spatial(v) and v.dtype == "float32"
                and block.evaluable(v.shape[1]), 4)
    if x is None:
        return False
    c = x.shape[1]
    groups = gen.pick(divisors(c)) if isinstance(c, int) and c > 0 else 1
    out = groups * gen.integer(1, 2) if groups > 1 else block.new_dim()
    kernel = (gen.integer(1, 3), gen.integer(1, 3))
    dilation = (gen.pick([1, 2]), 1) if gen.coin(0.2) else (1, 1)
    padding, pads = _padding(gen, (1, 1))
    if not _window_fits(block, x, kernel, dilation, pads):
        return False
    w = block.new_param((out, D.floordiv(c, groups), *kernel), x.dtype)
    attrs: dict = {}
    if gen.coin(0.6):
        attrs["strides"] = [gen.integer(1, 2), gen.integer(1, 2)]
    if padding is not None:
        attrs["padding"] = padding
    if dilation != (1, 1):
        attrs["dilation"] = list(dilation)
    if groups > 1:
        attrs["groups"] = groups
    if isinstance(out, int) and gen.coin(0.3):
        attrs.update(channels=out, kernel_size=list(kernel))
    return _bind_product(gen, block, "nn.conv2d", [x, w], attrs)


def conv2d_transpose(gen: Gen, block: Block) -> bool:
    """``nn.conv2d_transpose`` (IOHW weight) with strides, padding, output_padding, groups."""
    x = operand(gen, block, lambda v: _spatial(v) and v.dtype == "float32"
                and block.evaluable(v.shape[1]), 4)
    if x is None or not (block.require(x.shape[2], 1) and block.require(x.shape[3], 1)):
        return False
    c = x.shape[1]
    groups = gen.pick(divisors(c)) if isinstance(c, int) and c > 0 else 1
    per_group = gen.integer(1, 2) if groups > 1 else block.new_dim()
    kernel = (gen.integer(1, 3), gen.integer(1, 3))
    strides = [gen.integer(1, 2), gen.integer(1, 2)]
    padding, _ = _padding(gen, (1, 1))
    w = block.new_param((c, per_group, *kernel), x.dtype)
    attrs: dict = {"strides": strides}
    if padding is not None:
        attrs["padding"] = padding
    if gen.coin(0.3):
        attrs["output_padding"] = [gen.integer(0, s - 1) for s in strides]
    if groups > 1:
        attrs["groups"] = groups
    t = infer("nn.conv2d_transpose", attrs, x.type, w.type) if w is not None else None
    if t is None or not all(block.require(d, 1) for d in t.shape[2:]):
        return False
    gen.accumulates = True
    block.bind(call_text("nn.conv2d_transpose", [x.ref, w.ref], attrs), t.shape, t.dtype,
               deeper(x, w, by=1))
    return True


_RESIZE_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel",
                 "tf_half_pixel_for_nn", "half_pixel_symmetric")


def resize2d(gen: Gen, block: Block) -> bool:
    """``image.resize2d`` by a scale (symbolic sizes stay symbolic) or to a static size."""
    x = operand(gen, block, lambda v: v.ndim == 4 and _numeric(v), 4)
    if x is None or not (block.require(x.shape[2], 1) and block.require(x.shape[3], 1)):
        return False
    method = gen.pick(["nearest_neighbor", "linear", "cubic"] if _is_float(x)
                      else ["nearest_neighbor"])
    attrs: dict = {"method": method}
    if gen.coin(0.3):
        attrs["size"] = [gen.integer(1, 5), gen.integer(1, 5)]
    else:
        attrs["scale"] = [gen.pick([2.0, 0.5, 1.5, 1.0, 3.0]), gen.pick([2.0, 0.5, 1.5, 1.0])]
    mode = gen.pick(_RESIZE_MODES)
    if mode != "half_pixel":
        attrs["coordinate_transformation_mode"] = mode
    if method == "nearest_neighbor" and gen.coin(0.5):
        attrs["rounding_method"] = gen.pick(["round_prefer_ceil", "floor", "ceil"])
    t = infer("image.resize2d", attrs, x.type)
    if t is None:
        return False
    block.bind(call_text("image.resize2d", [x.ref], attrs), t.shape, t.dtype,
               x.depth if method == "nearest_neighbor" else None)
    return True


def pool2d(gen: Gen, block: Block) -> bool:
    """``nn.max_pool2d``/``nn.avg_pool2d`` (with ceil_mode) and the global pools."""
    x = operand(gen, block, _spatial, 4)
    if x is None:
        return False
    op = gen.pick(["nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d",
                   "nn.global_max_pool2d"])
    attrs: dict = {}
    if op.startswith("nn.global"):
        if op == "nn.global_max_pool2d" and not (block.require(x.shape[2], 1)
                                                  and block.require(x.shape[3], 1)):
            return False
    else:
        kernel = (gen.integer(1, 3), gen.integer(1, 3))
        padding, pads = _padding(gen, (kernel[0] // 2, kernel[1] // 2))
        if not _window_fits(block, x, kernel, (1, 1), pads):
            return False
        attrs["pool_size"] = list(kernel)
        if gen.coin(0.5):
            attrs["strides"] = [gen.integer(1, 2), gen.integer(1, 2)]
        if padding is not None:
            attrs["padding"] = padding
        if gen.coin(0.3):
            attrs["ceil_mode"] = True
        if op == "nn.avg_pool2d" and gen.coin(0.5):
            attrs["count_include_pad"] = True
    t = infer(op, attrs, x.type)
    if t is None:
        return False
    block.bind(call_text(op, [x.ref], attrs), t.shape, t.dtype,
               x.depth if "max" in op else None)
    return True


# --- normalization ------------------------------------------------------------------------------


def softmax(gen: Gen, block: Block) -> bool:
    """``nn.softmax``/``nn.log_softmax`` along a random axis."""
    x = operand(gen, block, lambda v: _is_float(v) and v.ndim >= 1, 2)
    if x is None:
        return False
    op = gen.pick(["nn.softmax", "nn.log_softmax"])
    attrs = {"axis": _axis(gen, x.ndim)}
    block.bind(call_text(op, [x.ref], attrs), x.shape, x.dtype, None)
    return True


def _channel_params(block: Block, x: Value, axis: int, names: Sequence[str]) -> list | None:
    length = x.shape[axis]
    params = [block.new_param((length,), x.dtype, prefix=n, positive=n == "var")
              for n in names]
    return None if any(p is None for p in params) else params


def norm(gen: Gen, block: Block) -> bool:
    """``nn.layer_norm``, ``nn.batch_norm`` (field 0) or ``nn.bias_add``, with new params."""
    x = operand(gen, block, lambda v: _is_float(v) and v.ndim >= 1, 2)
    if x is None:
        return False
    op = gen.pick(["nn.bias_add", "nn.layer_norm", "nn.batch_norm"])
    axis = _axis(gen, x.ndim)
    names = {"nn.bias_add": ["bias"], "nn.layer_norm": ["gamma", "beta"],
             "nn.batch_norm": ["gamma", "beta", "mean", "var"]}[op]
    params = _channel_params(block, x, axis, names)
    if params is None:
        return False
    attrs = {"axis": axis}
    text = call_text(op, [x.ref] + [p.ref for p in params], attrs)
    depth = x.depth if op == "nn.bias_add" else None
    if op == "nn.batch_norm":
        t = tuple_fields(infer(op, attrs, x.type, *(p.type for p in params)))
        if t is None:
            return False
        block.bind_tuple(text, t, [depth] * 3, keep=[0] if gen.coin(0.7) else None)
    else:
        block.bind(text, x.shape, x.dtype, depth)
    return True


def dropout(gen: Gen, block: Block) -> bool:
    """``nn.dropout``: a (result, mask) tuple; the result is the input."""
    x = operand(gen, block, _is_float, 2)
    if x is None:
        return False
    block.bind_tuple(call_text("nn.dropout", [x.ref], {"rate": 0.5}), [x.type, x.type],
                     [x.depth, 0], keep=[0])
    return True


def pad(gen: Gen, block: Block) -> bool:
    """``nn.pad`` in constant, edge or reflect mode."""
    x = block.choose(lambda v: _numeric(v) and v.ndim >= 1)
    if x is None:
        return False
    mode = gen.pick(["constant", "edge", "reflect"])
    # A static axis pads by less than its length (reflect) or not at all when empty (edge).
    most = [2 if not isinstance(d, int) or mode == "constant" else
            min(2, d - 1 if mode == "reflect" else 2 * d) for d in x.shape]
    widths = [[gen.integer(0, max(m, 0)), gen.integer(0, max(m, 0))] for m in most]
    for d, w in zip(x.shape, widths):
        if mode != "constant" and max(w) and not block.require(
                d, 1 if mode == "edge" else max(w) + 1):
            return False
    attrs = {"pad_width": widths} | ({"pad_mode": mode} if mode != "constant" else {})
    t = infer("nn.pad", attrs, x.type, TensorType((), x.dtype))
    if t is None:
        return False
    block.bind(call_text("nn.pad", [x.ref, literal(0, x.dtype)], attrs), t.shape, t.dtype,
               x.depth)
    return True
