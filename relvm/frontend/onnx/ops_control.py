"""Constant, Dropout (inference), If, Loop and Scan."""

from __future__ import annotations

import numpy as np

from ...ir.nodes import If
from ...ir.types import TensorType
from ...passes.type_infer import _Mismatch, join
from .converters import converter, make_tuple, norm_axis
from .importer import BranchesDiffer, Node, both_branches
from .loops import build_loop, scalar_of
from .values import Scope, Value


@converter("Constant")
def constant(n: Node):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in n.attrs:
            v = n.attr(key)
            if key in ("value_float", "value_floats"):
                v = np.asarray(v, np.float32)
            elif key in ("value_int", "value_ints"):
                v = np.asarray(v, np.int64)
            return Value(n.outputs[0], const=np.asarray(v))
    raise n.fail(f"only tensor, float and int values are supported, not "
                 f"{', '.join(sorted(n.attrs)) or 'none'}")


@converter("Dropout")
def dropout(n: Node):
    training = False
    if n.has(2):
        training = bool(np.asarray(n.const(2, "training_mode")).reshape(-1)[0])
    ratio = float(n.attr("ratio", 0.5))
    if n.has(1):
        ratio = float(np.asarray(n.const(1, "ratio")).reshape(-1)[0])
    if training and ratio != 0:
        raise n.fail("training_mode with a non-zero ratio drops at random; relvm imports "
                     "inference graphs")
    outs = [n.value(0)]
    if n.wants(1):
        outs.append(n.call("cast", n.call("ones_like", n.x(0)), dtype="bool"))
    return outs


@converter("If")
def if_(n: Node):
    then_graph, else_graph = n.required("then_branch"), n.required("else_branch")
    cond = n.known(0)
    if cond is not None:  # decided at import: only the taken branch is converted
        return n.imp.convert_subgraph(then_graph if bool(np.asarray(cond).reshape(-1)[0])
                                      else else_graph, n.scope)
    c = n.x(0)
    if n.rank(0) != 0:
        c = n.call("reshape", c, newshape=[])
    if n.dtype(0) != "bool":
        raise n.fail(f"the condition must be bool, got {n.dtype(0)}")
    values, failures = both_branches(
        lambda b: n.imp.convert_subgraph((then_graph, else_graph)[b], n.scope))
    if failures[0] or failures[1]:
        # One branch cannot run (a silero-vad file's 8 kHz branch once its chunk is fixed at
        # 512 samples: its LSTM would read a rank-5 value): the other runs, guarded.
        good = 1 if failures[0] else 0
        return n.imp.guard_branch(n, c, good, values[good], failures[1 - good])
    lengths = _sequence_lengths(n, values)
    branches = []
    for vals in values:
        exprs = [n.imp.expr(e, n) for v in vals for e in (v.seq if v.seq is not None else [v])]
        branches.append(exprs[0] if len(exprs) == 1 else make_tuple(exprs))
    try:
        t = join(branches[0].checked_type, branches[1].checked_type)
    except _Mismatch as e:  # the walker converts the rest of the graph once per branch
        raise BranchesDiffer(n, c, values[0], values[1], str(e)) from None
    node = If(c, branches[0], branches[1])
    node.with_type(t)
    count = sum(1 if k is None else k for k in lengths)
    fields = [node] if count == 1 else [n.field(node, i) for i in range(count)]
    outs: list = []
    for k, v in zip(lengths, values[0]):
        if k is None:
            outs.append(fields.pop(0))
        else:  # a sequence: its elements, each chosen by the condition
            outs.append(Value(v.name, seq=[Value(v.name, expr=fields.pop(0)) for _ in range(k)],
                              dtype=v.dtype))
    return outs


def _sequence_lengths(n: Node, values: list) -> list:
    """Per output: the length of a sequence both branches make as long (each element is then
    chosen on its own), else None; a sequence whose length differs between the branches, or
    is known in one only, becomes an IR list in both (``values`` updated)."""
    out = []
    for i, (a, b) in enumerate(zip(*values)):
        if a.seq is not None and b.seq is not None and len(a.seq) == len(b.seq):
            out.append(len(a.seq))
            continue
        for branch, v in enumerate((a, b)):
            if v.seq is not None:
                values[branch][i] = Value(v.name, expr=n.imp.expr(v, n))
        out.append(None)
    return out



# --- loops (loops.py: a loop is a recursive global function) ----------------------------------

def _body_scope(n: Node, graph, values: list[Expr], outer: Scope) -> Scope:
    """The scope of one iteration of ``graph``: its inputs bound to ``values`` (each reshaped
    to the input's declared rank where that differs: an iteration number declared ``[1]``),
    its initializers bound, names of ``outer`` reached through the loop's frame."""
    from onnx import numpy_helper

    scope = Scope(n.imp.frames[-1].scope(outer))
    if len(graph.input) != len(values):
        raise n.fail(f"the body takes {len(graph.input)} inputs; the node gives it "
                     f"{len(values)}")
    for vi, e in zip(graph.input, values):
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape") \
                and isinstance(e.checked_type, TensorType) and e.checked_type.ndim == 0 \
                and len(tt.shape.dim) > 0:
            e = n.call("reshape", e, newshape=[1] * len(tt.shape.dim))
        scope.bind(vi.name, Value(vi.name, expr=e))
    for t in graph.initializer:
        scope.bind(t.name, Value(t.name, const=numpy_helper.to_array(t)))
    return scope


def _body_outputs(n: Node, graph, scope: Scope) -> list[Expr]:
    values = n.imp.convert_nodes(list(graph.node), 0, scope, [o.name for o in graph.output])
    return [n.imp.expr(v, n) for v in values]


def _check_tensor_io(n: Node, graph, sequences: bool = False) -> None:
    """Optional values are refused; sequences too unless ``sequences`` (a Loop carries them
    as lists)."""
    for vi in list(graph.input) + list(graph.output):
        if vi.type.HasField("optional_type"):
            raise n.fail(f"the body's {vi.name!r} is an optional value; relvm's values are "
                         "tensors, tuples and lists")
        if vi.type.HasField("sequence_type") and not sequences:
            raise n.fail(f"the body's {vi.name!r} is a sequence; a {n.op_type}'s body takes "
                         "and makes tensors")


@converter("Loop")
def loop(n: Node):
    graph = n.required("body")
    _check_tensor_io(n, graph, sequences=True)
    carried = [n.x(k) for k in range(2, len(n.inputs))]
    if len(graph.input) != 2 + len(carried):
        raise n.fail(f"the body takes {len(graph.input)} inputs: the iteration number, the "
                     f"condition and {len(graph.input) - 2} loop-carried values; the node "
                     f"gives {len(carried)}")
    count = scalar_of(n, n.x(0), "int64", "the trip count M") if n.has(0) else None
    cond = scalar_of(n, n.x(1), "bool", "the condition") if n.has(1) else None
    scans = len(graph.output) - 1 - len(carried)
    if scans < 0:
        raise n.fail(f"the body has {len(graph.output)} outputs, fewer than the condition "
                     f"and {len(carried)} loop-carried values")

    def body(i, c, vs, _inv, _m):
        scope = _body_scope(n, graph, [i, c] + vs, n.scope)
        outs = _body_outputs(n, graph, scope)
        return outs[0], outs[1:1 + len(vs)], outs[1 + len(vs):]

    # The list types the body declares for its carried sequences (one declared without a
    # shape holds tensors of any rank: ONNX's test_loop13_seq feeds a sequence declared of
    # scalars, and the body inserts vectors).
    declared = [n.imp.list_type(vi) if vi.type.HasField("sequence_type") else None
                for vi in graph.input[2:]]
    return build_loop(n, count=count, cond=cond, carried=carried, invariants=[],
                      scan_reverse=[False] * scans, body=body, declared=declared)


@converter("Scan")
def scan(n: Node):
    graph = n.required("body")
    _check_tensor_io(n, graph)
    m = int(n.required("num_scan_inputs"))
    first = 1 if n.opset < 9 else 0  # opset 8: sequence_lens, then a batch axis everywhere
    states = [n.x(k) for k in range(first, len(n.inputs) - m)]
    xs = [n.x(k) for k in range(len(n.inputs) - m, len(n.inputs))]
    if m < 1 or not xs:
        raise n.fail(f"num_scan_inputs is {m}; a Scan needs at least one scan input")
    outputs = len(graph.output) - len(states)
    if len(graph.input) != len(states) + m or outputs < 0:
        raise n.fail(f"the body takes {len(graph.input)} inputs and gives {len(graph.output)} "
                     f"outputs; the node has {len(states)} states and {m} scan inputs")
    if n.opset >= 9:
        return _scan(n, graph, n.scope, states, xs,
                     _ints(n, "scan_input_axes", m, 0), _ints(n, "scan_input_directions", m, 0),
                     _ints(n, "scan_output_axes", outputs, 0),
                     _ints(n, "scan_output_directions", outputs, 0))
    return _scan_batched(n, graph, states, xs, _ints(n, "directions", m, 0), outputs)


def _ints(n: Node, name: str, count: int, default: int) -> list[int]:
    values = [int(v) for v in n.attr(name, [default] * count)]
    if len(values) != count:
        raise n.fail(f"{name} has {len(values)} entries, for {count} tensors")
    return values


def _length(n: Node, x: Expr, axis: int) -> Expr:
    d = x.checked_type.shape[axis]
    if isinstance(d, int):
        return n.constant(np.int64(d))
    return n.call("take", n.call("shape_of", x, dtype="int64"), n.constant(np.int64(axis)),
                  axis=0)


def _scan(n: Node, graph, outer: Scope, states: list[Expr], xs: list[Expr], in_axes: list[int],
          in_dirs: list[int], out_axes: list[int], out_dirs: list[int]) -> list[Expr]:
    """Scan's results where ``outer`` is: the loop runs over the scan axis of ``xs``, the body
    reading slice ``i`` (``length - 1 - i`` in reverse) of each."""
    axes = [norm_axis(n, a, x.checked_type.ndim, "scan_input_axes") for a, x in zip(in_axes, xs)]
    count = _length(n, xs[0], axes[0])

    def body(i, _c, vs, ws, length):
        index = i
        slices = []
        for w, a, d in zip(ws, axes, in_dirs):
            index = n.call("subtract", n.call("subtract", length, n.constant(np.int64(1))), i) \
                if d else i
            slices.append(n.call("take", w, index, axis=a))
        scope = _body_scope(n, graph, vs + slices, outer)
        outs = _body_outputs(n, graph, scope)
        return None, outs[:len(vs)], outs[len(vs):]

    results = build_loop(n, count=count, cond=None, carried=states, invariants=xs,
                         scan_reverse=[bool(d) for d in out_dirs], body=body)
    out = results[:len(states)]
    for y, a in zip(results[len(states):], out_axes):
        rank = y.checked_type.ndim
        a = norm_axis(n, a, rank, "scan_output_axes")
        if a != 0:
            y = n.call("transpose", y, axes=list(range(1, a + 1)) + [0] + list(range(a + 1, rank)))
        out.append(y)
    return out


def _scan_batched(n: Node, graph, states: list[Expr], xs: list[Expr], dirs: list[int],
                  outputs: int) -> list[Expr]:
    """Scan of opset 8: every input has a leading batch axis; a loop over the batch runs the
    scan of each item (its states and scan outputs stacked along the batch)."""
    for k, x in enumerate(xs):
        if x.checked_type.ndim < 2:
            raise n.fail(f"scan input {k} is {x.checked_type}; opset 8 scan inputs are "
                         "(batch, sequence, ...)")
    if n.has(0):
        lens = n.known(0)
        t = xs[0].checked_type.shape[1]
        if lens is None or not isinstance(t, int) or not np.all(np.asarray(lens) == t):
            raise n.fail("sequence_lens: relvm scans every batch item over the whole sequence; "
                         "lengths that differ from it (or are known only at run time) are not "
                         "supported")
    batch = _length(n, (states + xs)[0], 0)

    def body(b, _c, _vs, ws, _m):
        items = [n.call("take", w, b, axis=0) for w in ws]
        via = n.imp.frames[-1].scope(n.scope)
        outs = _scan(n, graph, via, items[:len(states)], items[len(states):],
                     [0] * len(xs), dirs, [0] * outputs, [0] * outputs)
        return None, [], outs

    return build_loop(n, count=batch, cond=None, carried=[], invariants=states + xs,
                      scan_reverse=[False] * (len(states) + outputs), body=body)
