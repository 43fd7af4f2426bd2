"""The IR: immutable expression nodes, functions and modules.

Expressions compare by identity (the same node may be shared, making a DAG, exactly as the text
format's ``%0 = ...`` graph bindings do). :func:`structural_equal` compares two programs up to the
renaming of bound variables; ``Module.__eq__`` uses it, so ``parse(print(m)) == m``.

Each node carries an optional ``span`` (line, column in the source text) and a ``checked_type``
that type inference fills in once, with the ``shape_value`` of a small integer tensor computed
from shapes (``relvm.ops.values``); none of them takes part in equality.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Union

import numpy as np

from .types import Type

if TYPE_CHECKING:  # pragma: no cover
    from ..ops.registry import Op


@dataclass(frozen=True)
class Span:
    line: int
    column: int


class Expr:
    """Base of every expression node."""

    __slots__ = ()
    span: Optional[Span]
    checked_type: Optional[Type]
    #: What type inference assumed here without proof (``dims.Assumption``s: ``k`` equals
    #: ``16``, ``n`` broadcasts against ``4``); the compiler checks each at run time.
    assumed: tuple = ()
    #: What type inference knows of the node's value when it is a small int64 or bool tensor
    #: computed from shapes: a ``relvm.ops.values.Known`` (an object array of dims,
    #: ``[batch, sequence, 384]``, and the assumptions it holds under); None when unknown.
    shape_value: Any = None

    def with_type(self, t: Type) -> None:
        """Record the inferred type (type inference calls this once per node)."""
        object.__setattr__(self, "checked_type", t)

    def with_value(self, v: Any) -> None:
        """Record the symbolic value (type inference calls this once per node)."""
        object.__setattr__(self, "shape_value", v)

    def with_assumed(self, found: list) -> None:
        """Record what inference assumed at this node (once per inference run)."""
        object.__setattr__(self, "assumed", tuple(found))

    def __str__(self) -> str:
        from .printer import print_expr

        return print_expr(self)


def _meta(**kw: Any) -> Any:
    return field(default=None, compare=False, repr=False, kw_only=True, **kw)


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """A local variable: a function parameter or a ``let`` binding, ``%name``."""

    name: str
    type_annotation: Optional[Type] = None
    span: Optional[Span] = _meta()
    checked_type: Optional[Type] = _meta()

    def __repr__(self) -> str:
        return f"Var(%{self.name})"


@dataclass(frozen=True, eq=False)
class GlobalVar(Expr):
    """A reference to a module-level function, ``@name``."""

    name: str
    span: Optional[Span] = _meta()
    checked_type: Optional[Type] = _meta()

    def __repr__(self) -> str:
        return f"GlobalVar(@{self.name})"


@dataclass(frozen=True, eq=False)
class Constant(Expr):
    """A tensor value. Scalars print as literals (``1f``); others as ``meta[relay.Constant][k]``.

    ``data`` is None only for a ``meta[relay.Constant][k]`` reference that was not bound when
    parsing; type inference reports it.
    """

    data: Optional[np.ndarray]
    meta_index: Optional[int] = None
    span: Optional[Span] = _meta()
    checked_type: Optional[Type] = _meta()

    def __repr__(self) -> str:
        if self.data is None:
            return f"Constant(meta[{self.meta_index}] unbound)"
        return f"Constant({self.data.dtype}{list(self.data.shape)})"


class Attrs(Mapping[str, Any]):
    """An op call's keyword attributes: an immutable mapping, also readable as attributes."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] | None = None):
        object.__setattr__(self, "_items", dict(items or {}))

    def __getitem__(self, k: str) -> Any:
        return self._items[k]

    def __getattr__(self, k: str) -> Any:
        try:
            return self._items[k]
        except KeyError:
            raise AttributeError(k) from None

    def __setattr__(self, k: str, v: Any) -> None:
        raise AttributeError("Attrs are immutable")

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Attrs) and self._items == other._items

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._items.items(), key=lambda kv: kv[0])))

    def __repr__(self) -> str:
        return f"Attrs({self._items!r})"


@dataclass(frozen=True, eq=False)
class Call(Expr):
    """``op(args, attr=value, ...)``: ``op`` is a registry Op, a GlobalVar, or a closure value."""

    op: Union["Op", Expr]
    args: tuple[Expr, ...]
    attrs: Attrs = field(default_factory=Attrs)
    span: Optional[Span] = _meta()
    checked_type: Optional[Type] = _meta()


@dataclass(frozen=True, eq=False)
class Let(Expr):
    """``let %var = value; body``."""

    var: Var
    value: Expr
    body: Expr
    span: Optional[Span] = _meta()
    checked_type: Optional[Type] = _meta()


@dataclass(frozen=True, eq=False)
class Tuple(Expr):
    """``(a, b, ...)``."""

    fields: tuple[Expr, ...]
    span: Optional[Span] = _meta()
    checked_type: Optional[Type] = _meta()


@dataclass(frozen=True, eq=False)
class TupleGetItem(Expr):
    """``%t.0``."""

    tuple_value: Expr
    index: int
    span: Optional[Span] = _meta()
    checked_type: Optional[Type] = _meta()


@dataclass(frozen=True, eq=False)
class If(Expr):
    """``if (cond) { then } else { else }``; ``cond`` is a scalar bool tensor."""

    cond: Expr
    then_branch: Expr
    else_branch: Expr
    span: Optional[Span] = _meta()
    checked_type: Optional[Type] = _meta()


@dataclass(frozen=True, eq=False)
class Function(Expr):
    """``fn (%p: T, ...) -> R { body }``; a global function when held by a Module."""

    params: tuple[Var, ...]
    body: Expr
    ret_type: Optional[Type] = None
    span: Optional[Span] = _meta()
    checked_type: Optional[Type] = _meta()
    #: Function attributes, as TVM prints them after the parameters: a region for an external
    #: backend has ``Compiler="dnnl"`` and ``global_symbol="dnnl_0"`` (``passes/partition.py``).
    attrs: Attrs = field(default_factory=lambda: Attrs(), kw_only=True)


@dataclass(frozen=True)
class IONames:
    """A function's inputs and outputs as the model named them (ONNX's ``input.1``), where the
    IR's names differ (``%input_1``) or the IR has none (outputs).

    ``inputs`` maps a parameter's IR name to its original name (parameters not listed keep
    theirs); ``outputs`` names the function's results, tuple fields flattened in order (empty:
    ``output0``, ``output1``, ...). Metadata only: passes, types and results ignore it; the
    printer writes it as ``input_names=[...]``/``output_names=[...]`` after the parameters.
    """

    inputs: Mapping[str, str] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()

    def input_name(self, ir_name: str) -> str:
        return self.inputs.get(ir_name, ir_name)


class Module:
    """An ordered collection of global functions, by name (without the ``@``).

    ``source`` keeps the text the module was parsed from, so later errors can quote it.
    ``io_names`` holds, per function name, the original names of its inputs and outputs
    (:class:`IONames`; from ONNX import, or the text's ``input_names``/``output_names``).
    """

    def __init__(self, functions: Mapping[str, Function], source: str | None = None,
                 io_names: Mapping[str, IONames] | None = None):
        self.functions: dict[str, Function] = dict(functions)
        self.source = source
        self.io_names: dict[str, IONames] = {k: v for k, v in (io_names or {}).items()
                                             if k in self.functions}

    def __getitem__(self, name: str) -> Function:
        return self.functions[name]

    def __contains__(self, name: object) -> bool:
        return name in self.functions

    def __iter__(self) -> Iterator[str]:
        return iter(self.functions)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Module):
            return NotImplemented
        return list(self.functions) == list(other.functions) and all(
            structural_equal(self.functions[k], other.functions[k]) for k in self.functions
        )

    __hash__ = None  # type: ignore[assignment]

    def __str__(self) -> str:
        from .printer import print_module

        return print_module(self)

    def __repr__(self) -> str:
        return f"Module({', '.join('@' + k for k in self.functions)})"


# --- traversal --------------------------------------------------------------------------------

def children(e: Expr) -> tuple[Expr, ...]:
    """Direct sub-expressions in evaluation order (a Function's body is not included)."""
    if isinstance(e, Call):
        return ((e.op,) if isinstance(e.op, Expr) else ()) + e.args
    if isinstance(e, Let):
        return (e.value, e.body)
    if isinstance(e, Tuple):
        return e.fields
    if isinstance(e, TupleGetItem):
        return (e.tuple_value,)
    if isinstance(e, If):
        return (e.cond, e.then_branch, e.else_branch)
    return ()


def post_order(root: Expr, into_functions: bool = False) -> Iterator[Expr]:
    """Every node reachable from ``root`` once, children before parents; iterative.

    With ``into_functions`` the bodies of nested function literals are walked too (before the
    Function node itself).
    """
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            yield node
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        kids = children(node)
        if into_functions and isinstance(node, Function):
            kids = kids + (node.body,)
        for k in reversed(kids):
            if id(k) not in seen:
                stack.append((k, False))


# --- structural equality ----------------------------------------------------------------------

def _constant_equal(a: Constant, b: Constant) -> bool:
    if a.data is None or b.data is None:
        return a.data is None and b.data is None and a.meta_index == b.meta_index
    return (a.data.dtype == b.data.dtype and a.data.shape == b.data.shape
            and bool(np.array_equal(a.data, b.data, equal_nan=a.data.dtype.kind == "f")))


def structural_equal(a: Expr, b: Expr) -> bool:
    """True if ``a`` and ``b`` are the same program up to renaming bound variables.

    Iterative, so arbitrarily deep programs compare without recursion limits.
    """
    var_map: dict[int, int] = {}
    var_back: dict[int, int] = {}
    done: set[tuple[int, int]] = set()
    stack: list[tuple[Expr, Expr]] = [(a, b)]
    while stack:
        x, y = stack.pop()
        if (id(x), id(y)) in done:
            continue
        done.add((id(x), id(y)))
        if type(x) is not type(y):
            return False
        if isinstance(x, Var):
            if var_map.get(id(x), id(y)) != id(y) or var_back.get(id(y), id(x)) != id(x):
                return False
            if x.type_annotation != y.type_annotation:
                return False
            var_map[id(x)] = id(y)
            var_back[id(y)] = id(x)
            continue
        if isinstance(x, GlobalVar):
            if x.name != y.name:
                return False
            continue
        if isinstance(x, Constant):
            if not _constant_equal(x, y):
                return False
            continue
        if isinstance(x, Call):
            if isinstance(x.op, Expr) != isinstance(y.op, Expr):
                return False
            if not isinstance(x.op, Expr) and x.op is not y.op:
                return False
            if x.attrs != y.attrs or len(x.args) != len(y.args):
                return False
        elif isinstance(x, Tuple):
            if len(x.fields) != len(y.fields):
                return False
        elif isinstance(x, TupleGetItem):
            if x.index != y.index:
                return False
        elif isinstance(x, Let):
            var_map[id(x.var)] = id(y.var)
            var_back[id(y.var)] = id(x.var)
            if x.var.type_annotation != y.var.type_annotation:
                return False
        elif isinstance(x, Function):
            if len(x.params) != len(y.params) or x.ret_type != y.ret_type \
                    or x.attrs != y.attrs:
                return False
            for p, q in zip(x.params, y.params):
                if p.type_annotation != q.type_annotation:
                    return False
                var_map[id(p)] = id(q)
                var_back[id(q)] = id(p)
            stack.append((x.body, y.body))
        for cx, cy in zip(children(x), children(y)):
            stack.append((cx, cy))
    return True
