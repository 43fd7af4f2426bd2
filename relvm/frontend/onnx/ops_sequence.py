"""ONNX sequences (lists of tensors).

A sequence whose length is known at import -- made by SequenceConstruct, SequenceEmpty,
SequenceInsert, SequenceErase, SplitToSequence with a count known at import, SequenceMap over
such sequences -- is a :class:`~.values.Value` whose ``seq`` lists its elements' values: no IR
value is made for it. SequenceAt at a known position is that element, SequenceLength a
constant, ConcatFromSequence a ``concatenate`` (``new_axis``: each element ``expand_dims``
first, as ``stack``). This is what torch exports write (``unbind`` and ``stack``, a list built
in Python), and it fuses as any other tensor code.

Any other sequence -- a graph input, a SplitToSequence whose count is known only at run time
-- is an IR list (``List[Tensor[(?, 3), float32]]``, ``relvm/ops/lists.py``), and so is a known
one where a list is needed whole (a graph output, an argument of a run-time list op):
``list.construct`` of its elements. SequenceMap over a list is a recursive global function
(:func:`map_at_run_time`). Positions count from the end when negative; one out of
range is an import error naming the node and position, or at run time a RelvmRuntimeError.
"""

from __future__ import annotations

import numpy as np

from ...ir import dims as D
from ...ir.nodes import Call, Function, GlobalVar, If, Var
from ...ir.types import ListType, TensorType, TupleType
from .converters import converter, make_tuple, norm_axis
from .importer import ONNX_DTYPES, Node
from .values import Scope, Value


def elements(n: Node, i: int) -> list[Value]:
    """Input ``i``'s elements: it must be a sequence of known length."""
    v = n.value(i)
    if v.seq is None:
        raise n.fail(f"input {i} ({n.inputs[i]!r}) must be a sequence whose length is known "
                     "at import")
    return v.seq


def sequence(n: Node, items: list[Value], dtype: str | None) -> Value:
    dtypes = {d for d in (_dtype(n, v) for v in items) if d}
    if len(dtypes) > 1:
        raise n.fail(f"a sequence holds tensors of one element type, got {sorted(dtypes)}")
    return Value(n.outputs[0], seq=list(items), dtype=dtypes.pop() if dtypes else dtype)


def _dtype(n: Node, v: Value) -> str | None:
    if v.seq is not None:
        raise n.fail("a sequence cannot hold sequences")
    if v.const is not None:
        return n.imp.dtype_of(n, v.const)
    if v.sym is not None:
        return v.dtype
    return n.imp.expr(v, n).checked_type.dtype


def position(n: Node, i: int, length: int, inserting: bool = False) -> int:
    """Input ``i``, a position in a sequence of ``length`` (negative: from the end), as an index
    in ``[0, length)`` (``[0, length]`` when inserting)."""
    values = np.asarray(n.const(i, "position")).reshape(-1)
    if values.size != 1 or values.dtype.kind not in "iu":
        raise n.fail(f"position must be one integer, got {values.size} of {values.dtype}")
    p = int(values[0])
    high = length if inserting else length - 1
    if not -length <= p <= high:
        raise n.fail(f"position {p} is out of range for a sequence of length {length} "
                     f"(valid: {-length} to {high})")
    return p + length if p < 0 else p


def _elem_dtype(n: Node) -> str:
    code = int(n.attr("dtype", 1))
    if code not in ONNX_DTYPES:
        raise n.fail(f"dtype {code} is not an element type relvm has")
    return ONNX_DTYPES[code]


def static(n: Node, i: int) -> bool:
    """True if input ``i`` is a sequence of known length."""
    return n.value(i).seq is not None


def _runtime_list(v: Value) -> bool:
    return v.seq is None and v.expr is not None and isinstance(v.expr.checked_type, ListType)


def as_list(n: Node, i: int):
    """Input ``i`` as an IR list expression."""
    v = n.value(i)
    e = n.imp.expr(v, n)
    if not isinstance(e.checked_type, ListType):
        raise n.fail(f"input {i} ({n.inputs[i]!r}) must be a sequence, got {e.checked_type}")
    return e


def index_scalar(n: Node, i: int):
    """Input ``i``, a position, as an int64 scalar expression."""
    x = n.x(i)
    if n.rank(i) != 0:
        x = n.call("reshape", x, newshape=[])
    return x if n.dtype(i) == "int64" else n.call("cast", x, dtype="int64")


@converter("SequenceConstruct")
def sequence_construct(n: Node):
    return [sequence(n, [n.value(i) for i in range(len(n.inputs))], None)]


@converter("SequenceEmpty")
def sequence_empty(n: Node):
    return [Value(n.outputs[0], seq=[], dtype=_elem_dtype(n))]


@converter("SequenceInsert", composed="list.insert (a sequence of known length: none)")
def sequence_insert(n: Node):
    if static(n, 0) and (not n.has(2) or n.known(2) is not None):
        items = elements(n, 0)
        at = position(n, 2, len(items), inserting=True) if n.has(2) else len(items)
        return [sequence(n, items[:at] + [n.value(1)] + items[at:], n.value(0).dtype)]
    lst = as_list(n, 0)
    at = index_scalar(n, 2) if n.has(2) else n.call("list.length", lst)
    return [n.call("list.insert", lst, n.x(1), at)]


@converter("SequenceErase", composed="list.erase (a sequence of known length: none)")
def sequence_erase(n: Node):
    if static(n, 0) and (not n.has(1) or n.known(1) is not None):
        items = elements(n, 0)
        if not items:
            raise n.fail("cannot erase from an empty sequence")
        at = position(n, 1, len(items)) if n.has(1) else len(items) - 1
        return [sequence(n, items[:at] + items[at + 1:], n.value(0).dtype)]
    lst = as_list(n, 0)
    at = index_scalar(n, 1) if n.has(1) else n.constant(np.asarray(-1, np.int64))
    return [n.call("list.erase", lst, at)]


@converter("SequenceAt", composed="list.get (a sequence of known length: none)")
def sequence_at(n: Node):
    if static(n, 0) and n.known(1) is not None:
        items = elements(n, 0)
        return [items[position(n, 1, len(items))]]
    return [n.call("list.get", as_list(n, 0), index_scalar(n, 1))]


@converter("SequenceLength", composed="list.length (a sequence of known length: none)")
def sequence_length(n: Node):
    if static(n, 0):
        return [Value(n.outputs[0], const=np.asarray(len(elements(n, 0)), np.int64))]
    return [n.call("list.length", as_list(n, 0))]


@converter("ConcatFromSequence",
           composed="concatenate (stack: expand_dims, concatenate); list.concat at run time")
def concat_from_sequence(n: Node):
    new_axis = int(n.attr("new_axis", 0))
    if not static(n, 0):
        return [n.call("list.concat", as_list(n, 0), axis=int(n.required("axis")),
                       new_axis=bool(new_axis))]
    items = elements(n, 0)
    if not items:
        raise n.fail("cannot concatenate an empty sequence")
    parts = [n.imp.expr(v, n) for v in items]
    rank = parts[0].checked_type.ndim
    axis = norm_axis(n, int(n.required("axis")), rank + (1 if new_axis else 0))
    if new_axis:
        parts = [n.call("expand_dims", p, axis=axis) for p in parts]
    if len(parts) == 1:
        return [parts[0]]
    return [n.call("concatenate", make_tuple(parts), axis=axis)]


def split_sizes(n: Node, dim: D.Dim) -> list[int] | None:
    """SplitToSequence's part sizes when known at import (their count is the sequence's
    length): a 1-d ``split``, chunks of a scalar one, or parts of 1; None if they are known
    only at run time (a ``split`` fed then, a symbolic axis length)."""
    if n.has(1):
        split = n.known(1)
        if split is None:
            return None
        split = np.asarray(split)
        if split.dtype.kind not in "iu" or split.ndim > 1:
            raise n.fail(f"split must be an integer scalar or 1-d tensor, got {split.dtype} "
                         f"of rank {split.ndim}")
        sizes = [int(s) for s in split.reshape(-1)]
        if split.ndim == 1:
            if any(s < 0 for s in sizes):
                raise n.fail(f"split {sizes} must not be negative")
            if isinstance(dim, int) and sum(sizes) != dim:
                raise n.fail(f"split {sizes} sums to {sum(sizes)}, not the axis length {dim}")
            return sizes
        chunk = sizes[0]
        if chunk < 1:
            raise n.fail(f"split {chunk} must be positive")
    else:
        chunk = 1
    if not isinstance(dim, int):
        return None
    return [min(chunk, dim - k) for k in range(0, dim, chunk)]


@converter("SplitToSequence", composed="strided_slice per part; list.split at run time")
def split_to_sequence(n: Node):
    axis = norm_axis(n, int(n.attr("axis", 0)), n.rank(0))
    sizes = split_sizes(n, n.shape(0)[axis])
    keepdims = n.has(1) or bool(int(n.attr("keepdims", 1)))
    if sizes is None:
        split = n.x(1) if n.has(1) else n.constant(np.asarray(1, np.int64))
        return [n.call("list.split", n.x(0), split, axis=axis, keepdims=keepdims)]
    parts = _slices(n, n.x(0), axis, sizes)
    if not keepdims:
        parts = [n.call("squeeze", p, axis=[axis]) for p in parts]
    return [sequence(n, [Value(n.outputs[0], expr=p) for p in parts], n.dtype(0))]


def _slices(n: Node, x, axis: int, sizes: list[int]) -> list:
    out, start = [], 0
    for s in sizes:
        out.append(n.call("strided_slice", x, begin=[start], end=[start + s], axes=[axis]))
        start += s
    return out


@converter("SequenceMap")
def sequence_map(n: Node):
    """The body run once per element: sequence inputs give their k-th element, tensors
    themselves; each body output collected into a sequence."""
    body = n.required("body")
    if not static(n, 0) or any(_runtime_list(n.value(i)) for i in range(1, len(n.inputs))
                               if n.has(i)):
        return map_at_run_time(n, body)
    items = elements(n, 0)
    length = len(items)
    extra = [n.value(i) for i in range(1, len(n.inputs)) if n.has(i)]
    for i, v in enumerate(extra, 1):
        if v.seq is not None and len(v.seq) != length:
            raise n.fail(f"input {i} holds {len(v.seq)} tensors, input 0 {length}")
    if len(body.input) != 1 + len(extra):
        raise n.fail(f"the body takes {len(body.input)} inputs, the node gives "
                     f"{1 + len(extra)}")
    results: list[list[Value]] = [[] for _ in body.output]
    for k in range(length):
        feeds = [items[k]] + [v.seq[k] if v.seq is not None else v for v in extra]
        outs = n.imp.convert_subgraph(body, n.scope, dict(zip([i.name for i in body.input],
                                                              feeds)))
        for r, v in zip(results, outs):
            r.append(v)
    out = []
    for j, (r, o) in enumerate(zip(results, body.output)):
        t = o.type
        dtype = (ONNX_DTYPES.get(t.tensor_type.elem_type) if t.HasField("tensor_type")
                 else None)
        out.append(Value(n.outputs[j], seq=r, dtype=dtype or (r[0].dtype if r else None)))
    return out



# --- SequenceMap over lists: a recursive function -----------------------------------------------

def map_at_run_time(n: Node, body) -> list:
    """SequenceMap over sequences whose length is known only at run time, as a recursive global
    function ``@sequence_map_k(%i, %n, lists..., tensors..., captured..., results...)``: while
    ``%i < %n`` it runs the body on element ``%i`` of each list and calls itself with each
    output appended to its result list; then it returns the result lists. Values of the outer
    graph the body reads become parameters (known tensors stay constants)."""
    imp = n.imp
    name = f"sequence_map_{len(imp.functions)}"
    kinds, outer = [], []  # per input: "list" or "tensor"; its expression in the caller
    for i in range(len(n.inputs)):
        v = n.value(i)
        e = imp.expr(v, n)
        kinds.append("list" if isinstance(e.checked_type, ListType) else "tensor")
        outer.append(e)
    if len(body.input) != len(outer):
        raise n.fail(f"the body takes {len(body.input)} inputs, the node gives {len(outer)}")

    def var(label: str, t) -> Var:
        x = Var(imp.unique_var_name(f"{name}_{label}"), t)
        x.with_type(t)
        return x

    i, count = var("i", TensorType((), "int64")), var("n", TensorType((), "int64"))
    params = [var(f"in{k}", e.checked_type) for k, e in enumerate(outer)]
    captured: dict[str, tuple[Var, object]] = {}

    def capture(key: str) -> Value | None:
        v = n.scope.lookup(key)
        if v is None or v.const is not None:
            return None if v is None else Value(key, const=v.const)
        if key not in captured:
            e = imp.expr(v, n)
            captured[key] = (var(f"c{len(captured)}", e.checked_type), e)
        return Value(key, expr=captured[key][0])

    scope = Scope(None, capture)
    feeds = {}
    for k, (inp, p, kind) in enumerate(zip(body.input, params, kinds)):
        x = n.call("list.get", p, i) if kind == "list" else p
        feeds[inp.name] = Value(inp.name, expr=x)
    imp.in_function += 1
    try:
        outs = [imp.expr(v, n) for v in imp.convert_subgraph(body, scope, feeds)]
    finally:
        imp.in_function -= 1
    for k, o in enumerate(outs):
        if not isinstance(o.checked_type, TensorType):
            raise n.fail(f"the body's output {k} is {o.checked_type}, not a tensor")
    results = [var(f"out{k}", ListType(o.checked_type)) for k, o in enumerate(outs)]
    ret = TupleType(tuple(r.checked_type for r in results))
    caps = [c for c, _ in captured.values()]
    one = n.constant(np.asarray(1, np.int64))
    grown = [n.call("list.insert", r, o, n.call("list.length", r)) for r, o in zip(results, outs)]
    again = Call(GlobalVar(name), tuple([n.call("add", i, one), count] + params + caps + grown))
    again.with_type(ret)
    done = make_tuple(results)
    branch = If(n.call("less", i, count), again, done)
    branch.with_type(ret)
    imp.functions[name] = Function(tuple([i, count] + params + caps + results), branch,
                                   ret_type=ret)
    first = next(e for e, kind in zip(outer, kinds) if kind == "list")
    empties = [n.call("list.empty", dtype=t.elem.dtype,
                      shape=[d if isinstance(d, int) else -1 for d in t.elem.shape])
               for t in (r.checked_type for r in results)]
    call = Call(GlobalVar(name), tuple([n.constant(np.asarray(0, np.int64)),
                                        n.call("list.length", first)] + outer
                                       + [e for _, e in captured.values()] + empties))
    call.with_type(ret)
    return [n.field(call, k) for k in range(len(results))]
