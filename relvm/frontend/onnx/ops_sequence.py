"""ONNX sequences (lists of tensors) whose length is known at import.

SequenceConstruct, SequenceEmpty, SequenceInsert, SequenceErase, SplitToSequence with a count
known at import, and SequenceMap over such sequences make a :class:`~.values.Value` whose
``seq`` lists its elements' values: no IR value is a sequence. SequenceAt at a known position
is that element, SequenceLength a constant, ConcatFromSequence a ``concatenate`` (``new_axis``:
each element ``expand_dims`` first, as ``stack``). This is what torch exports write (``unbind``
and ``stack``, a list of tensors built in Python). Positions count from the end when negative;
one out of range is an import error naming the node and the position.
"""

from __future__ import annotations

import numpy as np

from ...ir import dims as D
from .converters import converter, make_tuple, norm_axis
from .importer import ONNX_DTYPES, Node
from .values import Value


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


@converter("SequenceConstruct")
def sequence_construct(n: Node):
    return [sequence(n, [n.value(i) for i in range(len(n.inputs))], None)]


@converter("SequenceEmpty")
def sequence_empty(n: Node):
    return [Value(n.outputs[0], seq=[], dtype=_elem_dtype(n))]


@converter("SequenceInsert")
def sequence_insert(n: Node):
    items = elements(n, 0)
    at = position(n, 2, len(items), inserting=True) if n.has(2) else len(items)
    return [sequence(n, items[:at] + [n.value(1)] + items[at:], n.value(0).dtype)]


@converter("SequenceErase")
def sequence_erase(n: Node):
    items = elements(n, 0)
    if not items:
        raise n.fail("cannot erase from an empty sequence")
    at = position(n, 1, len(items)) if n.has(1) else len(items) - 1
    return [sequence(n, items[:at] + items[at + 1:], n.value(0).dtype)]


@converter("SequenceAt")
def sequence_at(n: Node):
    items = elements(n, 0)
    return [items[position(n, 1, len(items))]]


@converter("SequenceLength")
def sequence_length(n: Node):
    return [Value(n.outputs[0], const=np.asarray(len(elements(n, 0)), np.int64))]


@converter("ConcatFromSequence", composed="concatenate (stack: expand_dims, concatenate)")
def concat_from_sequence(n: Node):
    items = elements(n, 0)
    if not items:
        raise n.fail("cannot concatenate an empty sequence")
    parts = [n.imp.expr(v, n) for v in items]
    new_axis = int(n.attr("new_axis", 0))
    rank = parts[0].checked_type.ndim
    axis = norm_axis(n, int(n.required("axis")), rank + (1 if new_axis else 0))
    if new_axis:
        parts = [n.call("expand_dims", p, axis=axis) for p in parts]
    if len(parts) == 1:
        return [parts[0]]
    return [n.call("concatenate", make_tuple(parts), axis=axis)]


def split_sizes(n: Node, dim: D.Dim) -> list[int]:
    """SplitToSequence's part sizes, which must be known at import (their count is the
    sequence's length): a 1-d ``split``, chunks of a scalar one, or parts of 1."""
    if n.has(1):
        split = np.asarray(n.const(1, "split"))
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
        raise n.fail(f"the axis length {D.shape_str([dim])} is symbolic: relvm needs the number "
                     "of parts known at import")
    return [min(chunk, dim - k) for k in range(0, dim, chunk)]


@converter("SplitToSequence")
def split_to_sequence(n: Node):
    axis = norm_axis(n, int(n.attr("axis", 0)), n.rank(0))
    sizes = split_sizes(n, n.shape(0)[axis])
    parts = _slices(n, n.x(0), axis, sizes)
    if not n.has(1) and not int(n.attr("keepdims", 1)):
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

