"""Symbolic values: the dims a small integer tensor holds when it is computed from shapes.

Models compute shapes with tensors -- ``shape_of``, ``take``, ``concatenate``, arithmetic -- and
feed them to the ops whose result shape depends on values: ``arange`` (position ids up to the
sequence length) and ``dyn.reshape`` (a view's target shape). A static build folds those
computations into constants. For a symbolic build, type inference carries each such tensor's
value as an object array of dims -- ``shape_of(x)`` of an ``x: [batch, sequence, 384]`` holds
``[batch, sequence, 384]`` -- through the rules below, and gives ``arange`` and ``dyn.reshape``
exact result dims instead of fresh ``?``s. Later stages then see the shapes a static build
sees: elementwise chains fuse into their producers, buffers are pooled, calls are replayed.

Only int64 and bool tensors of at most :data:`MAX_ELEMENTS` elements carry values (shape
arithmetic is int64; an int32 could wrap where a dim does not). Entries are ints, DimExprs (of
int64 tensors) and bools. Each rule is exact for every value of the dims it accepts and gives
no value for anything it cannot decide (a comparison that depends on the dims). A few rules
are exact under a condition on the dims, which the value carries as an assumption (``dims.
assume``): an integer ``divide`` of ``frames - 1`` by 2 is ``(frames - 1)/2`` if ``frames >= 1``
(truncation and floor differ below 0). Whoever relies on the value -- a type refined from it --
records its assumptions, and the program checks them when it runs; a value that relies on one
is never folded into a constant. A value is therefore a proof, and the kernels that compute
the tensor at run time compute exactly it.

Examples
--------
>>> mod = relvm.parse('def @main(%x: Tensor[(b, n), float32]) { arange(0i64, '
...                   'take(shape_of(%x, dtype="int64"), 1i64, axis=0), 1i64) }')
>>> known(mod["main"].body.args[1])
Known(value=array(n, dtype=object), assumed=())
>>> str(mod["main"].checked_type.ret)
'Tensor[(n), int64]'
"""

from __future__ import annotations

import contextvars
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from ..ir import dims as D
from ..ir.nodes import Constant, Expr, Tuple, TupleGetItem
from ..ir.types import TensorType, TupleType, Type
from .fused import FusedOp
from .registry import OPS, Op, OpTypeError
from .transform import _NewShape
from .reduce import reduced_axes

#: The most elements a tensor with a symbolic value may have (a shape has at most 64 dims).
MAX_ELEMENTS = 64
#: Dtypes whose tensors carry values.
DTYPES = ("int64", "bool")

Value = np.ndarray  # dtype object: ints, DimExprs, bools


class _Unknown(Exception):
    """A rule met an entry it cannot decide: the result has no symbolic value."""


def sym_array(items: Sequence[Any], shape: tuple[int, ...] | None = None) -> Value:
    """An object array of dims (1-d by default; ``shape=()`` for a scalar)."""
    out = np.empty(len(items), dtype=object)
    for i, d in enumerate(items):
        out[i] = D.as_expr(d) if isinstance(d, D.Sym) else d
    return out.reshape(shape if shape is not None else (len(items),))


def is_static(v: Value) -> bool:
    """True when every entry is a number (the value can be a constant)."""
    return all(isinstance(x, (int, bool)) for x in v.flat)


def same(a: Value | None, b: Value | None) -> bool:
    """True if both are known and equal for every value of the dims."""
    if not isinstance(a, np.ndarray) or not isinstance(b, np.ndarray) or a.shape != b.shape:
        return False
    for x, y in zip(a.flat, b.flat):
        if isinstance(x, bool) != isinstance(y, bool):
            return False
        if (x != y) if isinstance(x, bool) else D.prove_equal(x, y) is not True:
            return False
    return True


def as_array(v: Value, dtype: str) -> np.ndarray:
    """A static value as an ordinary array of ``dtype``."""
    return np.array(v.tolist(), dtype=np.dtype(dtype)).reshape(v.shape)


def _carries(t: Type | None) -> bool:
    return (isinstance(t, TensorType) and t.dtype in DTYPES and t.is_static
            and int(np.prod(t.shape, dtype=np.int64)) <= MAX_ELEMENTS)


def constant_value(data: np.ndarray | None) -> Value | None:
    """The value of a constant, if it is a small int64 or bool tensor."""
    if data is None or data.dtype.name not in DTYPES or data.size > MAX_ELEMENTS:
        return None
    out = np.empty(data.shape, dtype=object)
    for i, x in np.ndenumerate(data):
        out[i] = bool(x) if data.dtype == np.bool_ else int(x)
    return out


class Known(NamedTuple):
    """What type inference knows of a value (``Expr.shape_value``): an object array (a tuple
    of them, or of None, for a tuple) and the assumptions it holds under."""

    value: Value | tuple
    assumed: tuple = ()


def known(e: Expr) -> Known | None:
    """What is known of ``e``'s value: a constant's, a tuple's fields', else what type
    inference recorded (``Expr.shape_value``)."""
    if isinstance(e, Constant):
        v = constant_value(e.data)
        return None if v is None else Known(v)
    if isinstance(e, Tuple):
        fields = [known(f) for f in e.fields]
        if all(f is None for f in fields):
            return None
        return Known(tuple(None if f is None else f.value for f in fields),
                     _union(f.assumed for f in fields if f is not None))
    if isinstance(e, TupleGetItem):
        k = known(e.tuple_value)
        if k is None or not isinstance(k.value, tuple) or e.index >= len(k.value) \
                or k.value[e.index] is None:
            return None
        return Known(k.value[e.index], k.assumed)
    return e.shape_value


def value_of(e: Expr) -> Value | tuple | None:
    """``e``'s value, or None (an assumed one too: for equality, not for folding)."""
    k = known(e)
    return None if k is None else k.value


def _union(groups) -> tuple:
    out: list = []
    for g in groups:
        out.extend(a for a in g if a not in out)
    return tuple(out)


_conditions: contextvars.ContextVar[list | None] = contextvars.ContextVar("conditions",
                                                                          default=None)


def _assuming(kind: str, a: D.Dim, b: D.Dim) -> None:
    """A rule's value holds if ``a`` and ``b`` are equal: the value carries it."""
    found = _conditions.get()
    if found is None:
        raise _Unknown
    found.append((kind, a, b))


# --- deciding facts about dims -------------------------------------------------------------------

def _less(a, b) -> bool:
    """``a < b`` for every value of the dims, or _Unknown."""
    if isinstance(a, int) and isinstance(b, int):
        return a < b
    if D.prove_nonnegative(b - a - 1):
        return True
    if D.prove_nonnegative(a - b):
        return False
    raise _Unknown


def _equal(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) == bool(b)
    proof = D.prove_equal(a, b)
    if proof is None:
        if D.prove_nonnegative(a - b - 1) or D.prove_nonnegative(b - a - 1):
            return False
        raise _Unknown
    return proof


def _nonzero(a) -> bool:
    if isinstance(a, (bool, int)):
        return bool(a)
    return not _equal(a, 0)


def _trunc_divide(a, b):
    """Integer ``divide``: truncated toward zero, 0 for a zero divisor (the C kernels')."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            return 0
        q = abs(a) // abs(b)
        return q if (a < 0) == (b < 0) else -q
    if isinstance(b, int) and b > 0:
        if not D.prove_nonnegative(a):
            # Truncation is the floor only from 0 up: a ``frames - 1`` is assumed >= 0.
            _assuming("equal", a, D.dim_max(a, 0))
        return D.floordiv(a, b)
    raise _Unknown


def _remainder(floored: bool):
    def rule(a, b):
        if isinstance(a, int) and isinstance(b, int):
            if b == 0:
                return 0
            r = a - b * _trunc_divide(a, b)
            return r + b if floored and r and (r < 0) != (b < 0) else r
        if isinstance(b, int) and b > 0:
            if not D.prove_nonnegative(a):  # the remainders agree from 0 up
                _assuming("equal", a, D.dim_max(a, 0))
            return D.mod(a, b)
        raise _Unknown
    return rule


def _abs(a):
    if D.prove_nonnegative(a):
        return a
    if D.prove_nonnegative(-a):
        return -a
    raise _Unknown


def _elementwise(fn: Callable, arity: int):
    """A rule applying ``fn`` to every entry, NumPy-broadcast."""
    ufunc = np.frompyfunc(fn, arity, 1)

    def rule(attrs, types, *values):
        if any(v is None for v in values):
            return None
        return np.asarray(ufunc(*values), dtype=object)
    return rule


def _where(attrs, types, cond, x, y):
    if cond is None or x is None or y is None:
        return None
    return np.asarray(np.where(np.asarray(cond.tolist(), dtype=bool), x, y), dtype=object)


def _cast(attrs, types, data):
    if data is None:
        return None
    source = types[0].dtype
    if attrs.dtype == source:
        return data
    if attrs.dtype == "int64" and source == "bool":
        return _elementwise(int, 1)(attrs, types, data)
    if attrs.dtype == "bool" and source == "int64":
        return _elementwise(_nonzero, 1)(attrs, types, data)
    return None


def _reduction(fn):
    def rule(attrs, types, data):
        if data is None:
            return None
        axes = reduced_axes(attrs, data.ndim)
        return np.asarray(fn(data, axis=axes, keepdims=attrs.keepdims), dtype=object)
    return rule


def _shape_of(attrs, types, data):
    t = types[0]
    if attrs.dtype != "int64" or not isinstance(t, TensorType):
        return None
    return sym_array(list(t.shape))


def _structural(name: str, index_inputs: tuple[int, ...] = ()):
    """A rule running the op's NumPy reference on the object array: it only moves entries.
    Inputs listed in ``index_inputs`` must be static (they are indices)."""
    def rule(attrs, types, *values):
        if any(v is None for v in values):
            return None
        args = list(values)
        for i in index_inputs:
            if not is_static(args[i]):
                return None
            args[i] = as_array(args[i], "int64")
        try:
            out = OPS[name].reference(attrs, *args)
        except (ValueError, IndexError, TypeError):
            return None  # the kernel reports it when the program runs
        return out if isinstance(out, tuple) else np.asarray(out, dtype=object)
    return rule


def _concatenate(attrs, types, fields):
    if not isinstance(fields, tuple) or any(f is None for f in fields):
        return None
    return _structural("concatenate")(attrs, types, fields)


def _filled(shape: tuple, fill) -> Value | None:
    if fill is None or fill.ndim:
        return None
    out = np.empty(shape, dtype=object)
    out.fill(fill[()])
    return out


def _full(attrs, types, fill):
    if fill is None or (attrs.dtype or types[0].dtype) != types[0].dtype:
        return None
    return _filled(tuple(attrs.shape), fill)


def _full_like(attrs, types, data, fill):
    if types[0].dtype != types[1].dtype:
        return None
    return _filled(tuple(types[0].shape), fill)


def _like(value: int):
    return lambda attrs, types, data: _filled(tuple(types[0].shape), sym_array([value], ()))


def _arange(attrs, types, start, stop, step):
    length = _arange_length(attrs, types, start, stop, step)
    if not isinstance(length, int) or length > MAX_ELEMENTS:
        return None
    return sym_array([start[()] + i * step[()] for i in range(length)])


def _dyn_reshape(attrs, types, data, newshape):
    shape = _newshape(attrs, types, newshape, _assuming)
    if data is None or shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return data.reshape(shape)


#: op name -> rule(attrs, arg types, *arg values) -> value or None. Values are None where
#: unknown; a rule raising _Unknown means the same.
RULES: dict[str, Callable] = {
    "shape_of": _shape_of,
    "add": _elementwise(lambda a, b: a + b, 2),
    "subtract": _elementwise(lambda a, b: a - b, 2),
    "multiply": _elementwise(lambda a, b: a * b, 2),
    "divide": _elementwise(_trunc_divide, 2),
    "mod": _elementwise(_remainder(False), 2),
    "floor_mod": _elementwise(_remainder(True), 2),
    "minimum": _elementwise(D.dim_min, 2),
    "maximum": _elementwise(D.dim_max, 2),
    "negative": _elementwise(lambda a: -a, 1),
    "abs": _elementwise(_abs, 1),
    "equal": _elementwise(_equal, 2),
    "not_equal": _elementwise(lambda a, b: not _equal(a, b), 2),
    "less": _elementwise(_less, 2),
    "less_equal": _elementwise(lambda a, b: not _less(b, a), 2),
    "greater": _elementwise(lambda a, b: _less(b, a), 2),
    "greater_equal": _elementwise(lambda a, b: not _less(a, b), 2),
    "logical_and": _elementwise(lambda a, b: bool(a) and bool(b), 2),
    "logical_or": _elementwise(lambda a, b: bool(a) or bool(b), 2),
    "logical_not": _elementwise(lambda a: not a, 1),
    "where": _where,
    "cast": _cast,
    "sum": _reduction(np.sum),
    "prod": _reduction(np.prod),
    "take": _structural("take", index_inputs=(1,)),
    "strided_slice": _structural("strided_slice"),
    "expand_dims": _structural("expand_dims"),
    "squeeze": _structural("squeeze"),
    "reshape": _structural("reshape"),
    "transpose": _structural("transpose"),
    "broadcast_to": _structural("broadcast_to"),
    "split": _structural("split"),
    "concatenate": _concatenate,
    "full": _full,
    "full_like": _full_like,
    "zeros_like": _like(0),
    "ones_like": _like(1),
    "arange": _arange,
    "dyn.reshape": _dyn_reshape,
}


def infer(op: Op, attrs, args: Sequence[Expr], result: Type) -> Known | None:
    """What is known of the value of ``op(args)``, of type ``result`` (None: nothing)."""
    if not isinstance(op, FusedOp) and op.name not in RULES:
        return None  # most ops: no work at all
    ins = [known(a) for a in args]
    types = [a.checked_type for a in args]
    found: list = []
    token = _conditions.set(found)
    try:
        value = _evaluate(op, attrs, types, [None if k is None else k.value for k in ins],
                          result)
    finally:
        _conditions.reset(token)
    if value is None:
        return None
    return Known(value, _union([k.assumed for k in ins if k is not None] + [found]))


def _evaluate(op: Op, attrs, arg_types: Sequence[Type], arg_values: Sequence[Any],
              result: Type) -> Value | tuple | None:
    if isinstance(op, FusedOp):
        return _evaluate_steps(op, arg_types, arg_values)
    rule = RULES.get(op.name)
    if rule is None:
        return None
    fields = result.fields if isinstance(result, TupleType) else (result,)
    if not all(_carries(t) for t in fields):
        return None
    try:
        out = rule(attrs, list(arg_types), *arg_values)
    except (_Unknown, ZeroDivisionError):
        return None
    if out is None:
        return None
    outs = out if isinstance(out, tuple) else (out,)
    if len(outs) != len(fields) or any(o.shape != t.shape for o, t in zip(outs, fields)):
        return None
    if any(t.dtype == "int64" and any(isinstance(x, bool) for x in o.flat)
           for o, t in zip(outs, fields)):
        return None  # a rule gave bools where ints belong: never trust it
    return out


def _evaluate_steps(op: FusedOp, arg_types, arg_values):
    """A fused op's value: each step's, in order (the fusion pass fuses shape arithmetic)."""
    types: list = []
    values: list = []
    for s in op.steps:
        args = [(arg_types[i], arg_values[i]) if kind == "in" else (types[i], values[i])
                for kind, i in s.args]
        try:
            t = s.op.infer(s.attrs, *[a for a, _ in args])
        except (OpTypeError, ValueError, TypeError):
            return None
        types.append(t)
        values.append(_evaluate(s.op, s.attrs, [a for a, _ in args], [v for _, v in args], t))
    return values[-1] if values else None


# --- exact result types of data-dependent ops -----------------------------------------------------

def _arange_length(attrs, types, start, stop, step) -> D.Dim | None:
    if any(v is None or v.ndim for v in (start, stop, step)):
        return None
    if (attrs.dtype or types[0].dtype) != "int64" or types[0].dtype != "int64":
        return None  # a float arange's length depends on rounding
    a, b, s = start[()], stop[()], step[()]
    if not isinstance(s, int) or s == 0:
        return None
    span = b - a if s > 0 else a - b
    if isinstance(span, int):
        return max(0, -(-span // abs(s)))
    if D.prove_nonnegative(span):
        return D.ceildiv(span, abs(s))
    if D.prove_nonnegative(-span):
        return 0
    return None


def _vanishes_with(t: D.Dim, d: D.Dim) -> bool:
    """True when ``d`` is 0 whenever ``t`` is: ``t`` is one product of symbols, each of which
    divides every term of ``d`` (``batch`` and ``batch*sequence``)."""
    if isinstance(t, int) or len(t.terms) != 1:
        return False
    mono, coeff = t.terms[0]
    if coeff <= 0 or not all(isinstance(a, D.Sym) for a in mono):
        return False
    if isinstance(d, int):
        return d == 0
    return all(all(a in m for a in mono) for m, _ in d.terms)


def _expanded(data: tuple, target) -> tuple[D.Dim, ...] | None:
    """dyn.broadcast_to's result shape from a symbolic target shape, or None. Where a pair of
    dims is not provably equal or 1, the result is their broadcast, assumed (and checked when
    the program runs) to exist."""
    if target is None or target.ndim != 1:
        return None
    dims = target.tolist()
    if any(isinstance(d, int) and d < 0 for d in dims):
        return None  # dyn.broadcast_to refuses it at run time
    rank = max(len(dims), len(data))
    a = (1,) * (rank - len(data)) + tuple(data)
    b = (1,) * (rank - len(dims)) + tuple(dims)
    try:
        return tuple(D.broadcast(p, q) for p, q in zip(a, b))
    except ValueError:
        return None  # provably does not broadcast: refused at run time


def _newshape(attrs, types, newshape, assume=D.assume) -> tuple[D.Dim, ...] | None:
    """dyn.reshape's result shape from a symbolic newshape, or None.

    An entry that is a dim is a size. Without ``allowzero`` a 0 copies the input's dim (and
    past the input's rank is an error), so a symbolic entry is a size outright only where that
    makes no difference: it equals the input dim there, it is never 0, or the input dim is 0
    whenever it is. Anywhere else the entry is assumed not to be 0, which the program checks
    when it runs (``newshape [batch, sequence, 768]`` of a ``[batch*sequence, 768]`` input:
    a sequence of 0 is refused by name; dyn.reshape would have copied the 768).
    """
    if newshape is None or newshape.ndim != 1:
        return None
    ishape = types[0].shape
    walk = _NewShape(ishape, f"cannot reshape data {D.shape_str(ishape)} into newshape "
                             f"{D.shape_str(newshape.tolist())}")
    try:
        for i, t in enumerate(newshape.tolist()):
            if isinstance(t, int):
                if t < -1:
                    return None  # dyn.reshape refuses it at run time
                if t > 0 or (t == 0 and attrs.allowzero):
                    walk.literal(t)
                elif t == 0:
                    walk.emit(walk.next_input(0), used=True)
                else:
                    walk.infer_here()
                continue
            here = ishape[i] if i < len(ishape) else None
            if not attrs.allowzero and here is not None and D.prove_equal(t, here):
                walk.emit(walk.next_input(0), used=True)
            else:
                if not (attrs.allowzero or D.prove_nonnegative(t - 1) or (
                        here is not None and _vanishes_with(t, here))):
                    assume("equal", t, D.dim_max(t, 1))
                walk.literal(t)
        return walk.finish()
    except OpTypeError:
        return None  # provably wrong: dyn.reshape reports it when the program runs


def refine(op: Op, attrs, args: Sequence[Expr], inferred: Type) -> Type:
    """The result type of a data-dependent op with the dims its inputs' values decide, or
    ``inferred`` (fresh ``?``s) when they do not. The assumptions of the values it relies on
    are recorded (``dims.assume``) for the caller to check."""
    if not isinstance(inferred, TensorType):
        return inferred
    ins = [known(a) for a in args]
    values = [None if k is None else k.value for k in ins]
    types = [a.checked_type for a in args]
    if op.name == "arange":
        n = _arange_length(attrs, types, *values)
        if n is None:
            return inferred
        refined = TensorType((n,), inferred.dtype)
    elif op.name == "dyn.reshape":
        shape = _newshape(attrs, types, values[1])
        if shape is None:
            return inferred
        refined = TensorType(shape, inferred.dtype)
    elif op.name == "dyn.broadcast_to":
        shape = _expanded(types[0].shape, values[1])
        if shape is None:
            return inferred
        refined = TensorType(shape, inferred.dtype)
    elif op.name == "dyn.resize2d":
        sizes = values[1]
        if sizes is None or sizes.ndim != 1 or sizes.shape[0] != inferred.ndim - 2 or \
                any(isinstance(d, int) and d < 0 for d in sizes.tolist()):
            return inferred
        refined = TensorType(inferred.shape[:2] + tuple(sizes.tolist()), inferred.dtype)
    else:
        return inferred
    for k in ins:
        for kind, a, b in () if k is None else k.assumed:
            D.assume(kind, a, b)
    return refined
