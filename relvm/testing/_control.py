"""Tuples, ``if``, calls to a second global function, and whole programs (see ``_forms.py``)."""

from __future__ import annotations

from typing import Callable, Sequence

from ..ir import dims as D
from ..ir.dims import Dim
from ..ir.types import TupleType
from . import _forms as F
from . import _layout as L
from . import _repeat as R
from ._gen import (AtLeast, Block, Config, Func, Gen, Helper, Param, Value, bare_symbol,
                   new_anonymous)

# --- tuples ---------------------------------------------------------------------------------------


def make_tuple(gen: Gen, block: Block) -> bool:
    """``%N = (%a, %b)``; later ops read the fields as ``%N.0``, ``%N.1``."""
    fields = [block.choose() for _ in range(gen.integer(1, 3))]
    refs = ", ".join(f.ref for f in fields) + ("," if len(fields) == 1 else "")
    block.bind_tuple(f"({refs})", [f.type for f in fields], [f.depth for f in fields])
    return True


# --- if -------------------------------------------------------------------------------------------


def _condition(gen: Gen, block: Block) -> str | None:
    """A bool scalar: a new bool param, a test of a symbolic dim, or of an exact sum."""
    choice = gen.integer(0, 2)
    if choice == 1:
        x = block.choose(lambda v: any(not isinstance(d, int) for d in v.shape))
        if x is not None:
            axis = next(i for i, d in enumerate(x.shape) if not isinstance(d, int))
            limit = gen.integer(1, gen.config.max_value)
            return f"less(take(shape_of({x.ref}), {axis}), {limit})"
    if choice == 2:
        x = block.choose(lambda v: v.exact and v.dtype in F.FLOATS)
        if x is not None:
            return f"greater(sum({x.ref}), {F.literal(0, x.dtype)})"
    param = block.new_param((), "bool", prefix="c")
    return param.ref if param is not None else None


def _branch(gen: Gen, block: Block, v: Value) -> Value:
    """One to two shape-preserving ops on ``v`` (or ``v`` itself): an ``if`` branch."""
    cur = v
    for _ in range(gen.integer(0, 2)):
        if gen.coin(0.5):
            F.unary(gen, block, cur)
        elif not F.binary(gen, block, cur, same_shape=True):
            continue
        cur = block.scope[-1]
    return cur


def if_else(gen: Gen, block: Block) -> bool:
    """``if (cond) { ... } else { ... }`` whose branches transform the same value."""
    v = block.choose()
    cond = _condition(gen, block)
    if cond is None:
        return False
    pad = "  " * block.indent
    text = [f"if ({cond}) {{"]
    results = []
    for i in range(2):
        inner = Block(gen, block.func, block.scope, block.indent + 1)
        result = _branch(gen, inner, v)
        results.append(result)
        text += inner.lines + [f"{pad}  {result.ref}", f"{pad}}} else {{" if i == 0 else f"{pad}}}"]
    depth = None if any(r.depth is None for r in results) else max(r.depth for r in results)
    block.bind("\n".join(text), v.shape, v.dtype, depth)
    return True


# --- calls to @f ----------------------------------------------------------------------------------

_HELPER_NAMES = (("a", "b", "c", "d", "e", "f", "g", "h"),
                 # The main function's names, meaning other dims here: symbols are per function.
                 ("m", "n", "k", "a", "b", "c", "d", "e"))


def _generalize(gen: Gen, d: Dim, table: dict, names: Sequence[str]) -> Dim:
    """A helper param dim for an argument dim: kept if static (often), else a helper symbol."""
    if isinstance(d, int) and gen.coin(0.6):
        return d
    key = D.dim_key(d)
    if key not in table:
        name = names[len(table)] if len(table) < len(names) else f"s{len(table)}"
        table[key] = (D.Sym(name), d)
    return D.as_expr(table[key][0])


def _helper_text(helper_func: Func, lines: list[str], result: Value, annotate: bool) -> str:
    params = ", ".join(f"%{p.name}: {p.type_text()}" for p in helper_func.params
                       + helper_func.extra)
    ret = f" -> {result.type}" if annotate else ""
    return "\n".join([f"def @f({params}){ret} {{"] + lines + [f"  {result.ref}", "}"])


def define_helper(gen: Gen, block: Block, args: list[Value]) -> tuple[Helper, dict] | None:
    """Generate ``@f`` over params shaped like ``args``; returns it and the symbol mapping."""
    table: dict = {}
    names = gen.pick(_HELPER_NAMES)
    shapes = [tuple(_generalize(gen, d, table, names) for d in a.shape) for a in args]
    func = Func("f", symbols=(), is_main=False)
    func.params = [Param(f"a{i}", s, a.dtype) for i, (s, a) in enumerate(zip(shapes, args))]
    func.used_symbols = [s for s, _ in table.values()]
    func.opaque = {s for s, d in table.values() if not block.evaluable(d)}
    inner = Block(gen, func, [Value("%" + p.name, p.shape, p.dtype, 0) for p in func.params])
    body(gen, inner, gen.integer(0, 3), [f for f in gen.config.forms if f != "call"])
    result = inner.scope[-1]
    text = _helper_text(func, inner.lines, result, gen.coin(0.3))
    mapping = {s: d for s, d in table.values()}
    return Helper(func, func.params, result, text), mapping


def _unify(pshape: Sequence[Dim], vshape: Sequence[Dim], mapping: dict) -> dict | None:
    """Extend ``mapping`` (helper symbol -> dim) so the param shape matches ``vshape``."""
    if len(pshape) != len(vshape):
        return None
    m = dict(mapping)
    for pd, vd in zip(pshape, vshape):
        sym = bare_symbol(pd)
        if sym is None:
            if D.prove_equal(pd, vd) is not True:
                return None
        elif sym in m:
            if D.prove_equal(m[sym], vd) is not True:
                return None
        else:
            m[sym] = vd
    return m


def _call(gen: Gen, block: Block, helper: Helper, args: list[Value], mapping: dict) -> bool:
    """Bind ``@f(args..., extra params...)`` with the helper's constraints carried over."""
    for c in helper.func.constraints:
        t = c.substitute(mapping)
        if isinstance(t, AtLeast):
            if not block.require(t.dim, t.least):
                return False
        else:
            block.func.constraints.append(t)
    # Run-time-only dims made inside @f are new ones at each call.
    internal = set().union(*(D.free_symbols(d) for d in helper.result.shape)) - set(mapping)
    mapping = dict(mapping) | {s: D.as_expr(new_anonymous()) for s in internal}
    for s in internal:
        block.func.opaque.update(D.free_symbols(mapping[s]))
    extra = []
    for p in helper.func.extra:
        v = block.new_param(tuple(D.substitute(d, mapping) for d in p.shape), p.dtype,
                            prefix=p.name.rstrip("0123456789"), positive=p.positive)
        if v is None:
            return False
        extra.append(v)
    shape = tuple(D.substitute(d, mapping) for d in helper.result.shape)
    depth = None if helper.result.depth is None or any(a.depth is None for a in args) else (
        helper.result.depth + max((a.depth for a in args), default=0))
    refs = ", ".join(v.ref for v in args + extra)
    block.bind(f"@f({refs})", shape, helper.result.dtype, depth)
    return True


def call(gen: Gen, block: Block) -> bool:
    """A call of the second global function ``@f``: defined here at its first use (over params
    shaped like the arguments), called again on any values its param types unify with."""
    if not block.func.is_main:
        return False
    if gen.helper is None:
        args = [block.choose() for _ in range(gen.integer(1, 2))]
        made = define_helper(gen, block, args)
        if made is None or not _call(gen, block, made[0], args, made[1]):
            return False
        gen.helper = made[0]
        return True
    mapping: dict = {}
    args = []
    for p in gen.helper.data_params:
        options = [(v, m) for v in block.values(lambda v: v.dtype == p.dtype)
                   if (m := _unify(p.shape, v.shape, mapping)) is not None]
        if not options:
            return False
        v, mapping = gen.pick(options)
        args.append(v)
    return _call(gen, block, gen.helper, args, mapping)


# --- bodies and programs --------------------------------------------------------------------------

FORMS: dict[str, Callable[[Gen, Block], bool]] = {
    "binary": F.binary, "unary": F.unary, "compare": F.compare, "where": F.where,
    "cast": F.cast, "dense": F.dense, "matmul": F.matmul, "batch_matmul": F.batch_matmul,
    "conv2d": F.conv2d, "conv2d_transpose": F.conv2d_transpose, "pool2d": F.pool2d,
    "resize2d": F.resize2d, "softmax": F.softmax, "norm": F.norm, "dropout": F.dropout,
    "pad": F.pad, "reshape": L.reshape, "reshape_like": L.reshape_like,
    "transpose": L.transpose, "expand_squeeze": L.expand_squeeze,
    "concatenate": L.concatenate, "split": L.split, "strided_slice": L.strided_slice,
    "take": L.take, "reduce": L.reduce, "fill": L.fill, "data_dependent": L.data_dependent,
    "tuple": make_tuple, "if": if_else, "call": call, "repeat": R.repeated_chain,
}


#: How often :func:`body` draws a form, relative to the others' 1: repeated chains find fused
#: kernels that wrongly share code, which other forms reach only by chance.
WEIGHTS = {"repeat": 4}


def body(gen: Gen, block: Block, count: int, forms: Sequence[str]) -> None:
    """``count`` forms drawn from ``forms``; one that does not fit becomes a unary op."""
    weighted = [f for f in forms for _ in range(WEIGHTS.get(f, 1))]
    for _ in range(count):
        name = gen.pick(weighted)
        if FORMS[name](gen, block):
            gen.forms_used.add(name)
        else:
            F.unary(gen, block)


def _param_dim(gen: Gen, block: Block) -> Dim:
    """A dim of an input: small static, a symbol, ``?``, or ``n*2``/``n + 1``."""
    used = block.func.used_symbols
    if gen.coin(0.06):
        return D.as_expr(new_anonymous())
    if used and gen.coin(0.08):
        s = gen.pick(used)
        return gen.pick([s * 2, s + 1])
    return block.new_dim()


def _data_param(gen: Gen, block: Block) -> None:
    rank = gen.pick([1, 2, 3, 4, 0])
    dtypes = gen.config.dtypes
    dtype = gen.pick(dtypes) if gen.coin(0.3) else dtypes[0]
    block.new_param([_param_dim(gen, block) for _ in range(rank)], dtype, prefix="p")


def _result(gen: Gen, block: Block) -> tuple[str, object]:
    """The function's result: every value nothing else reads (so no binding is dead code),
    as one value or a tuple; sometimes nested, or with an input or a repeated value."""
    fields = block.leaves() or [block.scope[-1]]
    if len(fields) == 1 and not gen.coin(0.2):
        return fields[0].ref, fields[0].type
    if gen.coin(0.2):
        fields.append(gen.pick(block.scope))
    if len(fields) >= 3 and gen.coin(0.3):
        inner = TupleType((fields[0].type, fields[1].type))
        rest = ", ".join(f.ref for f in fields[2:])
        t = TupleType((inner,) + tuple(f.type for f in fields[2:]))
        return f"(({fields[0].ref}, {fields[1].ref}), {rest})", t
    refs = ", ".join(f.ref for f in fields) + ("," if len(fields) == 1 else "")
    return f"({refs})", TupleType(tuple(f.type for f in fields))


def generate(gen: Gen) -> tuple[str, Func]:
    """The text of a whole program and its @main (params, constraints, bounds)."""
    config: Config = gen.config
    main = Func("main", symbols=tuple(D.Sym(s) for s in config.symbols), is_main=True)
    block = Block(gen, main)
    for _ in range(gen.integer(1, 3)):
        _data_param(gen, block)
    body(gen, block, gen.integer(1, config.max_ops), config.forms)
    result, result_type = _result(gen, block)
    params = ", ".join(f"%{p.name}: {p.type_text()}" for p in main.params)
    ret = f" -> {result_type}" if gen.coin(0.3) else ""
    lines = [f"def @main({params}){ret} {{"] + block.lines + [f"  {result}", "}"]
    text = "\n".join(([gen.helper.text] if gen.helper else []) + lines) + "\n"
    return text, main

