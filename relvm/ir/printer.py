"""IR to text, in TVM Relay's ``astext`` format: the inverse of ``relvm.frontend.parser``.

``parse(print_module(m), constants=module_constants(m)) == m`` for every well-formed module, and
printing is idempotent. The layout:

- Every Call, Tuple, TupleGetItem, If, nested Function (and a Let that is not a block's tail) is
  bound once as ``%N = ...;``, children before parents, ``N`` fresh per global function and
  never a Var's name. A block's result and a let's value are written in place instead when that
  is their only use.
- Each bound node goes in the innermost block holding all its uses (as TVM's ToANormalForm
  does): a node only an if-branch or a ``fn`` body uses is printed there, never hoisted out
  where it would run eagerly (a recursive call under a base case must stay under it).
- A chain of Lets prints as ``let %x: T = value;`` lines of one block. A Let used anywhere else
  prints as a block in braces, ``%N = { let %x = ...; %x };``.
- A Var prints as its name unless another Var of that name is in scope there; then it gets the
  first free ``name_1``, ``name_2``, ... (equality is up to renaming, so this round-trips).
- Scalar constants print as literals (``1f``, ``3i64``, ``True``) that re-parse to identical bits;
  other constants, and non-finite scalars, as ``meta[relay.Constant][k]``.

Everything is iterative except the nesting of blocks (branches, closures), so chains of any
length print without recursion limits.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from typing import Any, Iterable

import numpy as np

from .. import dtypes
from . import dims as D
from .nodes import (Call, Constant, Expr, Function, GlobalVar, If, IONames, Let, Module, Tuple,
                    TupleGetItem, Var, children, post_order)

VERSION_HEADER = '#[version = "0.0.5"]'
INDENT = "  "


def print_module(module: Module) -> str:
    """The text of ``module``: the version header, then each ``def`` in order.

    Examples
    --------
    >>> import relvm
    >>> m = relvm.parse("def @main(%x: Tensor[(n), float32]) { nn.relu(add(%x, 1f)) }")
    >>> print(print_module(m), end="")
    #[version = "0.0.5"]
    def @main(%x: Tensor[(n), float32]) {
      %0 = add(%x, 1f);
      nn.relu(%0)
    }
    """
    meta = _MetaTable(module.functions.values())
    lines = [VERSION_HEADER]
    for name, func in module.functions.items():
        lines += _Printer(func, meta).function_lines(func, f"def @{name}",
                                                     _io_attrs(func, module.io_names.get(name))
                                                     + [f"{k}={attr_text(v)}"
                                                        for k, v in func.attrs.items()])
    return "\n".join(lines) + "\n"


def meta_constants(module: Module) -> dict[int, np.ndarray]:
    """The arrays :func:`print_module` writes as ``meta[relay.Constant][k]``, by ``k``: pass
    them to ``relvm.parse(text, constants=...)`` to read the text back.

    >>> text = print_module(m)
    >>> relvm.parse(text, constants=meta_constants(m)) == m
    True
    """
    table = _MetaTable(module.functions.values())
    return {k: a for k, a in table.arrays.items() if a is not None}


def _io_attrs(func: Function, names: IONames | None) -> list[str]:
    """A def's ``input_names=[...]``, ``output_names=[...]`` (only those that say something)."""
    if names is None:
        return []
    out = []
    if any(p.name in names.inputs for p in func.params):
        out.append("input_names=" + attr_text([names.input_name(p.name) for p in func.params]))
    if names.outputs:
        out.append("output_names=" + attr_text(list(names.outputs)))
    return out


def print_expr(expr: Expr) -> str:
    """The text of one expression: its bindings, then its value (free Vars print by name)."""
    return "\n".join(_Printer(expr, _MetaTable([expr])).block_lines(_ROOT, expr))


def module_constants(module: Module) -> list[np.ndarray | None]:
    """The arrays printed as ``meta[relay.Constant][k]``, at index ``k``.

    Pass them back to ``relvm.parse(text, constants=...)``. Unused indices hold None.
    """
    arrays = _MetaTable(module.functions.values()).arrays
    return [arrays.get(k) for k in range(max(arrays, default=-1) + 1)]


# --- literals and attributes --------------------------------------------------------------------

#: dtype -> literal suffix: the inverse of the parser's LITERAL_SUFFIXES.
_SUFFIXES = {"float32": "f", "float16": "f16", "float64": "f64", "int32": "", "int64": "i64",
             "int8": "i8", "uint8": "u8", "int16": "i16", "uint16": "u16", "uint32": "u32",
             "uint64": "u64"}


def _float_text(value: np.floating) -> str:
    """The shortest text that reads back as exactly ``value`` in its own precision."""
    positional = np.format_float_positional(value, unique=True, trim="-")
    scientific = np.format_float_scientific(value, unique=True, trim="-")
    return positional if len(positional) <= len(scientific) else scientific


def literal_text(data: np.ndarray | None) -> str | None:
    """``data`` as a literal (``1f``, ``-3i64``, ``True``), or None if it has no literal form."""
    if data is None or data.ndim != 0:
        return None
    dtype = dtypes.from_numpy(data.dtype)
    value = data[()]
    if dtype == "bool":
        return "True" if value else "False"
    if dtype in dtypes.FLOAT_DTYPES:
        return _float_text(value) + _SUFFIXES[dtype] if np.isfinite(value) else None
    if dtype in _SUFFIXES:
        return str(int(value)) + _SUFFIXES[dtype]
    return None


def attr_text(value: Any) -> str:
    """An attribute value as the parser reads it: ``[1, n*2]``, ``"NCHW"``, ``1e-05``, ``None``."""
    if value is None:
        return "None"
    if isinstance(value, (bool, np.bool_)):
        return "True" if value else "False"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if math.isnan(f):
            return "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return repr(f)  # the shortest text that reads back as the same double
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(attr_text(v) for v in value) + "]"
    if isinstance(value, (D.DimExpr, D.Sym)):  # a symbolic dim of a shape attribute
        return D.dim_str(D.as_expr(value))
    raise TypeError(f"cannot print attribute value {value!r}")


def _same_array(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is b:
        return True
    if a is None or b is None:
        return False
    return (a.dtype == b.dtype and a.shape == b.shape
            and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f")))


class _MetaTable:
    """The meta index of each constant that prints as ``meta[relay.Constant][k]``.

    A constant keeps its own ``meta_index`` unless a different array already holds it; the
    others take the lowest free index in order of first appearance.
    """

    def __init__(self, roots: Iterable[Expr]):
        self.arrays: dict[int, np.ndarray | None] = {}
        self.index: dict[int, int] = {}
        pending: list[Constant] = []
        for root in roots:
            for node in post_order(root, into_functions=True):
                if isinstance(node, Constant) and literal_text(node.data) is None:
                    if not self.claim(node, node.meta_index):
                        pending.append(node)
        free = 0
        for node in pending:
            same = next((k for k, a in self.arrays.items()
                         if a is node.data and a is not None), None)
            if same is None:
                while free in self.arrays:
                    free += 1
                same = free
            self.claim(node, same)

    def claim(self, node: Constant, k: int | None) -> bool:
        if k is None or (k in self.arrays and not _same_array(self.arrays[k], node.data)):
            return False
        self.arrays.setdefault(k, node.data)
        self.index[id(node)] = k
        return True

    def text(self, node: Constant) -> str:
        literal = literal_text(node.data)
        if literal is not None:
            return literal
        return f"meta[relay.Constant][{self.index[id(node)]}]"


# --- layout: which block each node prints in ------------------------------------------------

#: The outermost block. Other blocks are ``(id(owner), k)``: an If's branch k, a Function's
#: body (k = 0), or the braces of a Let that is not a block's tail (k = 0).
_ROOT: tuple = ("root",)


def _operands(node: Expr) -> tuple[Expr, ...]:
    if isinstance(node, Function):
        return (node.body,)
    return children(node)


def _is_atom(node: Expr) -> bool:
    return isinstance(node, (Var, GlobalVar, Constant))


class _Layout:
    """For one printed root: each node's home block, use counts, and the spine Lets."""

    def __init__(self, root: Expr):
        self.nodes = list(post_order(root, into_functions=True))
        self.uses: Counter[int] = Counter(id(k) for n in self.nodes for k in _operands(n))
        self.uses[id(root)] += 1
        self.statement_uses: Counter[int] = Counter({id(root): 1})  # as a tail or a let value
        self.tail_uses: Counter[int] = Counter({id(root): 1})
        self.home: dict[int, tuple] = {id(root): _ROOT}
        self.parent: dict[tuple, tuple | None] = {_ROOT: None}
        self.depth: dict[tuple, int] = {_ROOT: 0}
        self.spine: set[int] = set()
        # Users before the nodes they use, so each node's uses are all known when it is reached.
        for node in reversed(self.nodes):
            self.place_operands(node)

    def place_operands(self, node: Expr) -> None:
        block = self.home[id(node)]
        if isinstance(node, Let):
            if self.uses[id(node)] == 1 and self.tail_uses[id(node)] == 1:
                self.spine.add(id(node))
                inner = block
            else:
                inner = self.new_block(node, 0, block)
            self.use(node.value, inner, statement=True)
            self.use(node.body, inner, statement=True, tail=True)
        elif isinstance(node, If):
            self.use(node.cond, block)
            self.use(node.then_branch, self.new_block(node, 0, block), statement=True, tail=True)
            self.use(node.else_branch, self.new_block(node, 1, block), statement=True, tail=True)
        elif isinstance(node, Function):
            self.use(node.body, self.new_block(node, 0, block), statement=True, tail=True)
        else:
            for kid in children(node):
                self.use(kid, block)

    def new_block(self, owner: Expr, k: int, parent: tuple) -> tuple:
        block = (id(owner), k)
        self.parent[block] = parent
        self.depth[block] = self.depth[parent] + 1
        return block

    def use(self, node: Expr, block: tuple, statement: bool = False, tail: bool = False) -> None:
        known = self.home.get(id(node))
        self.home[id(node)] = block if known is None else self.common_block(known, block)
        self.statement_uses[id(node)] += statement
        self.tail_uses[id(node)] += tail

    def common_block(self, a: tuple, b: tuple) -> tuple:
        while self.depth[a] > self.depth[b]:
            a = self.parent[a]
        while self.depth[b] > self.depth[a]:
            b = self.parent[b]
        while a != b:
            a, b = self.parent[a], self.parent[b]
        return a

    def within(self, block: tuple, outer: tuple) -> bool:
        """True if ``block`` is ``outer`` or nested inside it."""
        while self.depth[block] > self.depth[outer]:
            block = self.parent[block]
        return block == outer

    def inline(self, node: Expr) -> bool:
        """Written in place (a block's result or a let's value used nowhere else)."""
        return self.uses[id(node)] == 1 and self.statement_uses[id(node)] == 1

    def is_spine(self, node: Expr, block: tuple) -> bool:
        """A Let printed as a ``let`` line of ``block``."""
        return isinstance(node, Let) and (id(node) in self.spine or block == (id(node), 0))


# --- the printer ----------------------------------------------------------------------------

def _sanitize(name: str) -> str:
    """A name the grammar's ``%name`` accepts."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name) or "v"


def _all_vars(nodes: Iterable[Expr]) -> Iterable[Var]:
    """Every Var among ``nodes``, bound by them (lets, parameters) or used."""
    for node in nodes:
        if isinstance(node, Var):
            yield node
        elif isinstance(node, Let):
            yield node.var
        elif isinstance(node, Function):
            yield from node.params


def _wrap(prefix: str, lines: list[str], suffix: str) -> list[str]:
    out = list(lines)
    out[0] = prefix + out[0]
    out[-1] = out[-1] + suffix
    return out


def _indent(lines: list[str]) -> list[str]:
    return [INDENT + line for line in lines]


class _Printer:
    """Prints one global function (or one expression) and the closures inside it."""

    def __init__(self, root: Expr, meta: _MetaTable):
        self.layout = _Layout(root)
        self.meta = meta
        self.names: dict[int, str] = {}  # id(node) -> "%3" or "%x"
        self.scopes: list[set[str]] = []  # Var names visible where printing is
        self.taken = {_sanitize(v.name) for v in _all_vars(self.layout.nodes)}
        self.next_number = 0

    # --- names ----------------------------------------------------------------------------------
    def declare(self, var: Var) -> str:
        base = name = _sanitize(var.name)
        k = 0
        # A renamed Var also avoids every other Var's own name, so it cannot capture one.
        while any(name in scope for scope in self.scopes) or (k and name in self.taken):
            k += 1
            name = f"{base}_{k}"
        self.scopes[-1].add(name)
        self.names[id(var)] = "%" + name
        return "%" + name

    def number(self) -> str:
        while str(self.next_number) in self.taken:
            self.next_number += 1
        self.next_number += 1
        return f"%{self.next_number - 1}"

    def ref(self, node: Expr) -> str:
        """How an operand is written: its binding's name, or the atom itself."""
        if id(node) in self.names:
            return self.names[id(node)]
        if isinstance(node, Var):  # free: not bound anywhere in what is printed
            return "%" + _sanitize(node.name)
        if isinstance(node, GlobalVar):
            return "@" + node.name
        if isinstance(node, Constant):
            return self.meta.text(node)
        raise AssertionError(f"operand {node!r} was never bound")

    # --- blocks -----------------------------------------------------------------------------------
    def function_lines(self, func: Function, head: str, attrs: list[str] = ()) -> list[str]:
        """``head(%x: T, ...) -> R {``, the body, ``}``; ``head`` is ``def @f`` or ``fn ``."""
        self.scopes.append(set())
        params = []
        for p in func.params:
            name = self.declare(p)
            params.append(name + (f": {p.type_annotation}" if p.type_annotation else ""))
        params += attrs
        ret = f" -> {func.ret_type}" if func.ret_type is not None else ""
        body = self.block_lines((id(func), 0), func.body)
        self.scopes.pop()
        return [f"{head}({', '.join(params)}){ret} {{", *_indent(body), "}"]

    def block_lines(self, block: tuple, root: Expr) -> list[str]:
        """The lines of one block: bindings and lets, then its result."""
        self.scopes.append(set())
        lines: list[str] = []
        node = root
        while self.layout.is_spine(node, block):
            self.bind_dependencies(node.value, block, lines)
            value = self.statement(node.value)
            var = self.declare(node.var)  # after the value: it cannot see its own name
            annotation = f": {node.var.type_annotation}" if node.var.type_annotation else ""
            lines += _wrap(f"let {var}{annotation} = ", value, ";")
            node = node.body
        self.bind_dependencies(node, block, lines)
        lines += self.statement(node)
        self.scopes.pop()
        return lines

    def statement(self, node: Expr) -> list[str]:
        if self.layout.inline(node):
            return self.expr_lines(node)
        return [self.ref(node)]

    def bind_dependencies(self, root: Expr, block: tuple, lines: list[str]) -> None:
        """Bind, in post-order, every node of ``block`` that ``root`` needs and is unbound.

        The walk passes through nodes of inner blocks (branches, closures) to find what they
        use from this block, but binds only this block's nodes; inner ones print inside.
        """
        layout = self.layout
        visited: set[int] = set()
        stack: list[tuple[Expr, bool]] = [(root, False)]
        while stack:
            node, ready = stack.pop()
            if ready:
                if layout.home[id(node)] == block and not layout.inline(node):
                    self.bind(node, lines)
                continue
            if id(node) in visited or id(node) in self.names or _is_atom(node):
                continue
            if not layout.within(layout.home[id(node)], block):
                continue  # an enclosing block's node: bound there already
            visited.add(id(node))
            stack.append((node, True))
            stack.extend((kid, False) for kid in reversed(_operands(node)))

    def bind(self, node: Expr, lines: list[str]) -> None:
        text = self.expr_lines(node)
        name = self.number()  # after the text: nodes inside it are numbered first
        lines += _wrap(f"{name} = ", text, ";")
        self.names[id(node)] = name

    # --- expressions ------------------------------------------------------------------------------
    def expr_lines(self, node: Expr) -> list[str]:
        """The text of ``node`` itself, its operands written by reference."""
        if isinstance(node, Call):
            return [self.call_text(node)]
        if isinstance(node, Tuple):
            fields = [self.ref(f) for f in node.fields]
            return ["(" + ", ".join(fields) + ("," if len(fields) == 1 else "") + ")"]
        if isinstance(node, TupleGetItem):
            return [f"{self.ref(node.tuple_value)}.{node.index}"]
        if isinstance(node, If):
            key = id(node)
            return [f"if ({self.ref(node.cond)}) {{",
                    *_indent(self.block_lines((key, 0), node.then_branch)),
                    "} else {",
                    *_indent(self.block_lines((key, 1), node.else_branch)),
                    "}"]
        if isinstance(node, Function):
            return self.function_lines(node, "fn ")
        if isinstance(node, Let):
            return ["{", *_indent(self.block_lines((id(node), 0), node)), "}"]
        return [self.ref(node)]

    def call_text(self, call: Call) -> str:
        args = [self.ref(a) for a in call.args]
        if isinstance(call.op, Expr):
            return f"{self.ref(call.op)}({', '.join(args)})"
        args += [f"{k}={attr_text(v)}" for k, v in call.op.non_default_attrs(call.attrs).items()]
        return f"{call.op.name}({', '.join(args)})"
