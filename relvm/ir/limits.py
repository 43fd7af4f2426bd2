"""The largest programs relvm accepts, stated once.

Each limit is checked where a program first shows it -- the parser for text, the attribute
schema for attribute values, type inference for every type an annotation or an op gives -- so a
program past one is a located RelvmSyntaxError or RelvmTypeError at once, never a hang, a
MemoryError or an overflow in a later stage. ARCHITECTURE.md ("Limits") lists them.
"""

from __future__ import annotations

from typing import Iterable

from .. import dtypes
from . import dims as D
from .nodes import Expr, Function, children, post_order
from .types import FuncType, TensorType, TupleType, Type

#: Rank of any tensor: the C kernels' NEST_MAX_DIMS (kernels/internal/nest.h), which
#: ``relvm.backends.ckernels.common.MAX_DIMS`` and the file format's ``filemeta.MAX_RANK`` repeat
#: (a test keeps the four equal); NumPy's own limit is 64 as well.
MAX_RANK = 64

#: Bytes of a tensor, and the value of any dim. For a symbolic shape, the product of its static
#: dims and of the coefficients of its symbolic ones is bounded, so sizes the compiler derives
#: (memory slots, arena offsets: sums of such tensors) stay far inside int64. 2**48 bytes is
#: 256 TiB, past any machine relvm runs on.
MAX_TENSOR_BYTES = 2**48

#: Integer attributes and every integer inside a dim expression fit int64: what executables
#: store and the C kernels take.
MAX_INT = 2**63 - 1
MIN_INT = -2**63

#: Fields of a tuple an op makes from an attribute (``split(indices_or_sections=k)``).
MAX_FIELDS = 2**16

#: Brackets nested in program text: ( [ { of calls, tuples, types and blocks. The printer and
#: real programs nest a few levels; the parser's tree walk recurses per level.
MAX_NESTING = 256

#: Levels of the parser's syntax tree: brackets, and chains of operators or projections written
#: without them (``n+1+1+...``, ``%t.0.0.0``).
MAX_SYNTAX_DEPTH = 1024

#: Depth of the IR: the longest chain of nodes each an operand of the next (a let chain, or a
#: graph-form chain ``%1 = f(%0); %2 = f(%1); ...``). Compiler stages recurse per level on a
#: deep stack (``relvm._stack``), sized for this with room to spare.
MAX_DEPTH = 100_000


def fits_int64(v: int) -> bool:
    return MIN_INT <= v <= MAX_INT


def _ints(d: D.Dim) -> Iterable[int]:
    """Every integer written inside a dim: coefficients, and those of its atoms' operands.
    Each shared sub-expression is visited once: dims computed from shapes share operands, and
    a walk of them as a tree grew exponentially (a 12-layer BERT's import took 74 s)."""
    seen: set[int] = set()
    stack: list = [d]
    while stack:
        x = stack.pop()
        if isinstance(x, int):
            yield x
            continue
        if id(x) in seen:
            continue
        seen.add(id(x))
        for monomial, coeff in x.terms:
            yield coeff
            for atom in monomial:
                stack.extend(atom.children())


def _scale(d: D.Dim) -> int:
    """An upper bound on how much ``d`` multiplies a size by, per unit of its symbols."""
    if isinstance(d, int):
        return d
    return max(1, sum(abs(c) for _, c in d.terms))


def tensor_problem(t: TensorType) -> str | None:
    """What puts ``t`` past relvm's limits ("has rank 70; ..."), or None."""
    if t.ndim > MAX_RANK:
        return f"has rank {t.ndim}; relvm's limit is {MAX_RANK}"
    for d in t.shape:
        if isinstance(d, int) and not 0 <= d <= MAX_TENSOR_BYTES:
            return f"has dim {d}; relvm's limit is 0..2**48"
        if not all(fits_int64(v) for v in _ints(d)):
            return "has a dim holding an integer past int64"
    if any(d == 0 for d in t.shape):
        return None
    size = dtypes.to_numpy(t.dtype).itemsize
    for d in t.shape:
        size *= _scale(d)
        if size > MAX_TENSOR_BYTES:
            what = "" if t.is_static else " for every value of its symbols but 0"
            return (f"has shape {D.shape_str(t.shape)} of {t.dtype}: over 2**48 bytes, relvm's "
                    f"limit for a tensor{what}")
    return None


def type_problem(t: Type) -> str | None:
    """What makes any tensor inside ``t`` (a tuple's fields, a function's types) past the
    limits, or None."""
    if isinstance(t, TensorType):
        return tensor_problem(t)
    if isinstance(t, TupleType):
        if len(t.fields) > MAX_FIELDS:
            return f"has {len(t.fields)} fields; relvm's limit for a tuple is {MAX_FIELDS}"
        parts: Iterable[Type] = t.fields
    elif isinstance(t, FuncType):
        parts = (*t.params, t.ret)
    else:
        return None
    for p in parts:
        problem = type_problem(p)
        if problem:
            return problem
    return None


def deepest_node(root: Expr, limit: int = MAX_DEPTH) -> Expr | None:
    """A node of ``root`` with more than ``limit`` levels of operands below it, or None.

    Iterative: the depth of each node is one more than its deepest operand's (a function
    literal's body counts as its operand).
    """
    depth: dict[int, int] = {}
    for node in post_order(root, into_functions=True):
        kids = children(node) + ((node.body,) if isinstance(node, Function) else ())
        d = 1 + max((depth[id(k)] for k in kids), default=0)
        if d > limit:
            return node
        depth[id(node)] = d
    return None
