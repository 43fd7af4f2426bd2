"""Constant, Dropout (inference) and If."""

from __future__ import annotations

import numpy as np

from ...ir.nodes import If
from ...passes.type_infer import _Mismatch, join
from .converters import converter, make_tuple
from .importer import BranchesDiffer, Node, both_branches
from .values import Value


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

