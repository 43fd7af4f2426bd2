"""Einsum, decomposed at import into transpose, reshape, trilu, sum and nn.batch_matmul.

Any equation ONNX allows: explicit (``ij,jk->ik``) or implicit output (the labels that occur once,
in alphabetical order, after the ellipsis), an ellipsis (``...``) standing for the leading dims
each operand has beyond its letters (broadcast as NumPy's, right-aligned), and a label repeated
within an operand (``ii->i``: its diagonal). The operands are contracted left to right:

1. a repeated label becomes one axis: the two axes moved last, everything off their diagonal
   zeroed (``trilu`` upper then lower, k = 0), the last one summed away;
2. a label no later operand and not the output needs is summed away at once;
3. two operands become one ``nn.batch_matmul``: the labels both keep are its batch dims, the
   labels both have but nothing later needs its K (merged into one axis), each operand's own
   kept labels its M and N -- all but the last of them as batch dims where the other operand
   has a 1, so no dim is ever split again and symbolic dims stay exact;
4. the last operand is transposed into the output's order.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from .converters import converter
from .importer import Node

LETTERS = set(string.ascii_letters)


@dataclass
class Operand:
    """An IR expression and the label of each of its axes."""

    expr: object
    labels: list[str]


def parse(n: Node, equation: str, ranks: list[int]) -> tuple[list[list[str]], list[str]]:
    """The labels of each input and of the output; an ellipsis becomes labels ``.0``, ``.1``...
    (right-aligned across operands, as broadcasting aligns dims)."""
    text = equation.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise n.fail(f"equation {equation!r} has {len(terms)} operands, the node {len(ranks)} "
                     "inputs")
    letters = [_letters(n, equation, t) for t in terms]
    extra = []
    for term, labels, rank in zip(terms, letters, ranks):
        count = rank - sum(1 for x in labels if x != "...")
        if count < 0 or ("..." not in labels and count):
            raise n.fail(f"operand {term!r} of {equation!r} does not fit an input of rank {rank}")
        extra.append(count)
    width = max(extra, default=0)
    ellipsis = [f".{i}" for i in range(width)]
    inputs = [_expand(labels, ellipsis[width - e:]) for labels, e in zip(letters, extra)]
    if arrow:
        out = _expand(_letters(n, equation, rhs), ellipsis)
        if len(set(out)) != len(out):
            raise n.fail(f"the output of {equation!r} repeats a label")
        missing = sorted(set(out) - {x for labels in inputs for x in labels})
        if missing:
            raise n.fail(f"output labels {missing} of {equation!r} are in no operand")
    else:
        counts: dict[str, int] = {}
        for labels in inputs:
            for x in labels:
                counts[x] = counts.get(x, 0) + 1
        out = ellipsis + sorted(x for x, c in counts.items() if c == 1 and x in LETTERS)
    return inputs, out


def _letters(n: Node, equation: str, term: str) -> list[str]:
    parts = term.split("...")
    if len(parts) > 2:
        raise n.fail(f"{term!r} in {equation!r} has more than one ellipsis")
    bad = sorted({c for c in "".join(parts) if c not in LETTERS})
    if bad:
        raise n.fail(f"equation {equation!r} holds {bad}: labels are letters")
    return list(parts[0]) + (["...", *parts[1]] if len(parts) == 2 else [])


def _expand(labels: list[str], ellipsis: list[str]) -> list[str]:
    if "..." not in labels:
        return labels
    at = labels.index("...")
    return labels[:at] + ellipsis + labels[at + 1:]


def _transpose(n: Node, op: Operand, order: list[str]) -> Operand:
    if order == op.labels:
        return op
    axes = [op.labels.index(x) for x in order]
    return Operand(n.call("transpose", op.expr, axes=axes), list(order))


def _sum(n: Node, op: Operand, drop: set[str]) -> Operand:
    axes = [i for i, x in enumerate(op.labels) if x in drop]
    if not axes:
        return op
    return Operand(n.call("sum", op.expr, axis=axes, keepdims=False),
                   [x for x in op.labels if x not in drop])


def _diagonals(n: Node, op: Operand) -> Operand:
    """Each label repeated within ``op`` made one axis: its diagonal."""
    while len(set(op.labels)) != len(op.labels):
        label = next(x for x in op.labels if op.labels.count(x) > 1)
        first = op.labels.index(label)
        second = op.labels.index(label, first + 1)
        rest = [i for i in range(len(op.labels)) if i not in (first, second)]
        x = op.expr
        if len(op.labels) != 2 or (first, second) != (0, 1):
            x = n.call("transpose", x, axes=rest + [first, second])
        zero = n.constant(0, "int64")
        x = n.call("trilu", n.call("trilu", x, zero, upper=True), zero, upper=False)
        x = n.call("sum", x, axis=[-1], keepdims=False)
        op = Operand(x, [op.labels[i] for i in rest] + [label])
    return op


def _merge_last(n: Node, x, lead: int, count: int):
    """Merge the ``count`` axes after the first ``lead`` into one (a new 1 for none)."""
    if count == 0:
        return n.call("expand_dims", x, axis=lead)
    for _ in range(count - 1):
        x = n.call("reshape", x, newshape=[0] * lead + [-3, -2])
    return x


def _contract(n: Node, a: Operand, b: Operand, keep: set[str]) -> Operand:
    """``a`` and ``b`` as one operand holding the labels of either that ``keep`` has."""
    batch = [x for x in a.labels if x in b.labels and x in keep]
    inner = [x for x in a.labels if x in b.labels and x not in keep]
    a_own = [x for x in a.labels if x not in b.labels]
    b_own = [x for x in b.labels if x not in a.labels]
    a_rest, a_m = a_own[:-1], a_own[-1:]
    b_rest, b_n = b_own[:-1], b_own[-1:]
    # A: (batch, a_rest, 1 per b_rest, M, K); B: (batch, 1 per a_rest, b_rest, K, N).
    lead = len(batch) + len(a_rest) + len(b_rest)
    x = _transpose(n, a, batch + a_rest + a_m + inner).expr
    x = _merge_last(n, x, len(batch) + len(a_rest) + len(a_m), len(inner))
    if not a_m:
        x = n.call("expand_dims", x, axis=len(batch) + len(a_rest))
    if b_rest:
        x = n.call("expand_dims", x, axis=len(batch) + len(a_rest), num_newaxis=len(b_rest))
    y = _transpose(n, b, batch + b_rest + inner + b_n).expr
    y = _merge_last(n, y, len(batch) + len(b_rest), len(inner))
    if not b_n:
        y = n.call("expand_dims", y, axis=len(batch) + len(b_rest) + 1)
    if a_rest:
        y = n.call("expand_dims", y, axis=len(batch), num_newaxis=len(a_rest))
    if lead == 0:  # batch_matmul wants a batch dim
        x, y = n.call("expand_dims", x, axis=0), n.call("expand_dims", y, axis=0)
    z = n.call("nn.batch_matmul", x, y, transpose_b=False)
    # z: (1 if lead == 0, batch, a_rest, b_rest, M, N); the M and N that were 1s go.
    at = lead + (1 if lead == 0 else 0)
    squeeze = ([0] if lead == 0 else []) + [at + i for i, part in enumerate((a_m, b_n))
                                            if not part]
    if squeeze:
        z = n.call("squeeze", z, axis=squeeze)
    labels = batch + a_rest + b_rest + a_m + b_n
    return Operand(z, labels)


@converter("Einsum")
def einsum(n: Node):
    count = len(n.inputs)
    if count == 0:
        raise n.fail("Einsum needs at least one input")
    dtype = n.dtype(0)
    if any(n.dtype(i) != dtype for i in range(count)):
        raise n.fail(f"inputs differ in dtype: {[n.dtype(i) for i in range(count)]}")
    if dtype == "bool":
        raise n.fail("Einsum needs numeric inputs, got bool")
    equation = str(n.required("equation"))
    inputs, out = parse(n, equation, [n.rank(i) for i in range(count)])
    inner = "float32" if dtype == "float16" else dtype
    ops = []
    for i, labels in enumerate(inputs):
        x = n.x(i) if inner == dtype else n.call("cast", n.x(i), dtype=inner)
        ops.append(_diagonals(n, Operand(x, list(labels))))
    result = ops[0]
    for k in range(count):
        later = {x for op in ops[k + 1:] for x in op.labels} | set(out)
        if k == 0:
            result = _sum(n, result, set(result.labels) - later)
            continue
        other = _sum(n, ops[k], set(ops[k].labels) - later - set(result.labels))
        result = _sum(n, result, set(result.labels) - later - set(other.labels))
        result = _contract(n, result, other, later)
    result = _sum(n, result, set(result.labels) - set(out))
    y = _transpose(n, result, out).expr
    return y if inner == dtype else n.call("cast", y, dtype=dtype)
