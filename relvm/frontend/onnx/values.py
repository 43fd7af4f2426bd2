"""What the importer knows about each ONNX tensor name while it walks a graph.

A :class:`Value` is one or more of:

- ``const``: the tensor's value, known at import (initializers, Constant nodes, anything computed
  only from those). Known values fold: a node whose inputs are all known is evaluated at import.
- ``sym``: for small integer tensors computed from shapes (``Shape``, then Gather, Concat,
  arithmetic...), the value as an object array of symbolic dims, e.g. ``[n, 3, h*2]``. Converters
  use it where an attribute must be static (a reshape target becomes codes ``[0, 3, -1]``).
- an expression (``Expr``): the IR computing it at run time. For a ``sym`` value it is made only
  when something needs the tensor itself (``thunk`` converts the ONNX node then).
- ``seq``: an ONNX sequence whose length is known at import, as the list of its elements'
  values (``dtype`` gives the element type, for an empty one). SequenceAt, ConcatFromSequence...
  of such a sequence are plain tensor ops on its elements.

``Scope`` maps names to values; a subgraph's scope sees its parent's names (a loop body's
through its loop's function parameters).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ...ir import dims as D
from ...ir.nodes import Expr


class Value:
    """One ONNX tensor: its known value, symbolic value and/or IR expression."""

    __slots__ = ("name", "const", "sym", "dtype", "expr", "thunk", "initializer", "graph_input",
                 "seq")

    def __init__(self, name: str, *, const: np.ndarray | None = None, sym: np.ndarray | None = None,
                 dtype: str | None = None, expr: Expr | None = None,
                 thunk: Callable[[], Expr] | None = None, initializer: bool = False,
                 graph_input: str | None = None, seq: "list[Value] | None" = None):
        self.name = name
        self.const = const
        self.sym = sym
        self.dtype = dtype
        self.expr = expr
        self.thunk = thunk
        self.initializer = initializer
        #: the graph input this value is, unchanged (for "must be a constant" errors)
        self.graph_input = graph_input
        #: the elements of a sequence of known length
        self.seq = seq

    @classmethod
    def of_sym(cls, name: str, sym: np.ndarray, dtype: str, thunk: Callable[[], Expr]) -> "Value":
        """A symbolic value; if every entry is a number it is simply a known value."""
        if not isinstance(sym, np.ndarray):
            out = np.empty((), dtype=object)
            out[()] = sym
            sym = out
        if all(isinstance(d, int) for d in sym.flat):
            return cls(name, const=sym.astype(dtype))
        return cls(name, sym=sym, dtype=dtype, thunk=thunk)

    def __repr__(self) -> str:
        kind = ("const" if self.const is not None else "sym" if self.sym is not None
                else f"seq[{len(self.seq)}]" if self.seq is not None else "expr")
        return f"Value({self.name!r}, {kind})"


def as_sym(v: Value) -> np.ndarray | None:
    """The value's entries as an object array of dims (ints or DimExprs), if known at all."""
    if v.sym is not None:
        return v.sym
    if v.const is not None and v.const.dtype.kind in "iu":
        out = np.empty(v.const.shape, dtype=object)
        for i, x in np.ndenumerate(v.const):
            out[i] = int(x)
        return out
    return None


def sym_array(items: list, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """An object array of dims, 1-d by default (``shape=()`` for a scalar)."""
    out = np.empty(len(items), dtype=object)
    for i, d in enumerate(items):
        out[i] = D.as_expr(d) if isinstance(d, D.Sym) else d
    return out.reshape(shape if shape is not None else (len(items),))


class Scope:
    """Names visible in one graph; a subgraph's scope chains to its parent's."""

    def __init__(self, parent: "Scope | None" = None,
                 outer: "Callable[[str], Value | None] | None" = None):
        self.values: dict[str, Value] = {}
        self.parent = parent
        #: for the outermost scope of a function of its own (a loop body: ``loops.LoopFrame.
        #: capture_name``; SequenceMap's body over a list): how a name from outside the
        #: function is reached -- it becomes one of the function's parameters
        self.outer = outer

    def lookup(self, name: str) -> Value | None:
        scope: Scope | None = self
        while scope is not None:
            v = scope.values.get(name)
            if v is not None:
                return v
            if scope.outer is not None:
                return scope.outer(name)
            scope = scope.parent
        return None

    def bind(self, name: str, value: Value) -> None:
        self.values[name] = value
