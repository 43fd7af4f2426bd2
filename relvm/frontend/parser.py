"""Relay text to typed IR.

:func:`parse` runs the LALR parser (:mod:`relvm.frontend.grammar`), walks lark's tree top-down
with one method per grammar alias, building IR nodes while it resolves names in lexical scopes,
and finally type-checks the module (:mod:`relvm.passes.type_infer`).

How names resolve:

- ``%0 = e;`` (a graph binding) names the node ``e`` itself: every use of ``%0`` is that node,
  so a body is a DAG and no Let is made.
- ``let %x = e;`` makes a Let whose body is the rest of the block. ``%x`` is visible after the
  binding, not inside ``e``.
- Parameters are Vars. A block, a branch and a ``fn`` body each open a scope; inner names shadow
  outer ones, and ``fn`` bodies see the enclosing scopes (closures).
- ``@f`` may be used before ``def @f``; unknown globals are reported once all are defined.

Every node gets ``span=Span(line, column)`` of its first token. All uses of a Var share one node,
so a Var's span is where it is bound (its parameter or ``let``).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from typing import Any, Mapping

import numpy as np
from lark import Token, Tree
from lark.visitors import Interpreter

from .. import dtypes
from .._stack import run_with_deep_stack
from ..errors import RelvmError, RelvmSyntaxError, RelvmTypeError
from ..ir import dims as D
from ..ir.limits import MAX_DEPTH, MAX_NESTING, MAX_SYNTAX_DEPTH, deepest_node
from ..ir.nodes import (Attrs, Call, Constant, Expr, Function, GlobalVar, If, IONames, Let, Module,
                        Span, Tuple, TupleGetItem, Var)
from ..ir.types import FuncType, ListType, TensorType, TupleType, Type
from ..ops import OPS
from ..ops.registry import AttrError, unknown_op_message
from ..passes.type_infer import infer_module
from .grammar import parse_tree


def parse(text: str, constants: Any = None, source_name: str | None = None) -> Module:
    """Parse Relay text into a type-checked :class:`~relvm.ir.nodes.Module`.

    Parameters
    ----------
    text : str
        One or more ``def @name(...) { ... }``, optionally after ``#[version = "0.0.5"]``.
    constants : sequence or mapping of array_like, optional
        Values of ``meta[relay.Constant][k]``: a list indexed by ``k`` or a dict ``k -> array``.
        A reference left unbound becomes ``Constant(None, meta_index=k)``, which type
        inference reports.
    source_name : str, optional
        A file name to prefix error messages with.

    Returns
    -------
    Module
        Functions in order of definition; every node has its ``span`` and ``checked_type``.

    Raises
    ------
    RelvmSyntaxError
        Malformed text, an unknown name, op, dtype or global, a duplicate definition, nesting
        past relvm's limits (``relvm.ir.limits``).
    RelvmTypeError
        A bad attribute, the wrong number of op inputs, a type error, a type past relvm's
        limits (rank, size), or ``text`` that is not a str.

    Examples
    --------
    >>> m = parse("def @main(%x: Tensor[(n), float32]) { nn.relu(%x) }")
    >>> str(m["main"].checked_type)
    'fn (Tensor[(n), float32]) -> Tensor[(n), float32]'
    """
    if not isinstance(text, str):
        raise RelvmTypeError(f"parse takes the program as a str, not {type(text).__name__}"
                             + (" (decode it first)" if isinstance(text, bytes) else ""))
    try:
        check_nesting(text)
        tree = parse_tree(text)
        table = _constant_table(constants)

        def build() -> Module:
            builder = _Builder(text, table)
            module = Module(builder.visit(tree), source=text, io_names=builder.io_names)
            check_depth(module)
            return infer_module(module)
        # The tree walk, dims and checks recurse per level of nesting: a deep program gets a
        # deep stack (the limits above keep it within it).
        module = build() if _tree_depth(tree, text) <= _SHALLOW else run_with_deep_stack(build)
    except (RelvmSyntaxError, RelvmTypeError) as e:
        if source_name:
            raise type(e)(f"{source_name}: {e.message}", e.line, e.column, text) from None
        raise
    return module


def _constant_table(constants: Any) -> dict[int, np.ndarray]:
    """``constants`` as ``{k: array}``; entries that are None stay unbound."""
    if constants is None:
        return {}
    if isinstance(constants, np.ndarray):
        raise RelvmTypeError("constants must be a list or a dict of arrays indexed like "
                             "meta[relay.Constant][k], not a single array")
    items = constants.items() if isinstance(constants, Mapping) else enumerate(constants)
    try:
        return {int(k): np.asarray(v) for k, v in items if v is not None}
    except (TypeError, ValueError):
        raise RelvmTypeError("constants must be a list of arrays, or a dict from int index k "
                             "(as in meta[relay.Constant][k]) to array") from None


# --- nesting --------------------------------------------------------------------------------

#: What the bracket scan reads: comments, strings and the metadata tail (skipped), brackets.
_BRACKETS = re.compile(r'//[^\n]*|/\*[\s\S]*?(?:\*/|\Z)|"(?:[^"\\\n]|\\.)*"'
                       r'|#\[metadata\][\s\S]*|[(\[{]|[)\]}]')
_OPENING = "([{"
#: Trees no deeper than this are walked on the caller's stack.
_SHALLOW = 100


def check_nesting(text: str) -> None:
    """Refuse brackets nested past ``MAX_NESTING`` before the parser spends time on them."""
    depth = 0
    for m in _BRACKETS.finditer(text):
        c = m.group()
        if c in _OPENING:
            depth += 1
            if depth > MAX_NESTING:
                line = text.count("\n", 0, m.start()) + 1
                column = m.start() - text.rfind("\n", 0, m.start())
                raise RelvmSyntaxError(f"brackets nested more than {MAX_NESTING} deep "
                                       "(relvm's limit)", line, column, text)
        elif c in ")]}":
            depth = max(depth - 1, 0)


def _tree_depth(tree: Tree, text: str) -> int:
    """The depth of lark's tree; past ``MAX_SYNTAX_DEPTH`` (chains of operators or projections
    without brackets: ``n+1+1+...``) a syntax error at the deepest point."""
    deepest = 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_SYNTAX_DEPTH:
            span = _span(node) or _first_token_span(node)
            raise RelvmSyntaxError(f"the program's syntax nests more than {MAX_SYNTAX_DEPTH} "
                                   "levels deep (relvm's limit)",
                                   span.line if span else None, span.column if span else None,
                                   text)
        deepest = max(deepest, depth)
        stack.extend((c, depth + 1) for c in node.children if isinstance(c, Tree))
    return deepest


def _first_token_span(tree: Tree) -> Span | None:
    for token in tree.scan_values(lambda v: isinstance(v, Token)):
        return _span(token)
    return None


def check_depth(module: Module) -> None:
    """Refuse IR nested past ``MAX_DEPTH`` (a let chain, a graph-form chain of calls)."""
    for fn in module.functions.values():
        node = deepest_node(fn.body, MAX_DEPTH)
        if node is not None:
            span = node.span
            raise RelvmSyntaxError(f"the program nests expressions more than {MAX_DEPTH} "
                                   "deep (a chain of lets or calls; relvm's limit)",
                                   span.line if span else None,
                                   span.column if span else None, module.source)


# --- literals ---------------------------------------------------------------------------------

_NUMBER = re.compile(r"(?P<digits>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
                     r"(?P<suffix>[A-Za-z][A-Za-z0-9]*)?")

#: Literal suffix -> dtype. Relay writes a float32 as ``1f`` and an int32 with no suffix.
LITERAL_SUFFIXES = {"f": "float32", "f32": "float32", "f16": "float16", "f64": "float64",
                    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8",
                    "u16": "uint16", "u32": "uint32", "u64": "uint64"}


def _split_number(text: str) -> tuple[str, str | None, bool]:
    """(digits, dtype named by the suffix or None, written with a fraction or exponent)."""
    m = _NUMBER.fullmatch(text)
    assert m, text  # the NUMBER token guarantees the shape
    digits, suffix = m["digits"], m["suffix"]
    if suffix is not None and suffix not in LITERAL_SUFFIXES:
        raise ValueError(f"unknown literal suffix {suffix!r} in {text}; relvm knows "
                         + ", ".join(LITERAL_SUFFIXES))
    return digits, LITERAL_SUFFIXES.get(suffix), "." in digits or "e" in digits.lower()


def _shortened(text: str) -> str:
    """A numeral for a message: hundreds of digits are cut to their ends."""
    return text if len(text) <= 30 else f"{text[:12]}...{text[-6:]} ({len(text)} characters)"


def scalar_literal(text: str, negative: bool = False) -> np.ndarray:
    """The 0-d array a literal such as ``2``, ``0.5f``, ``3i64`` denotes (negated if asked).

    Raises ValueError, with a message, for unknown suffixes and out-of-range values.
    """
    digits, dtype, fractional = _split_number(text)
    dtype = dtype or ("float32" if fractional else "int32")
    sign = "-" if negative else ""
    if dtype in dtypes.FLOAT_DTYPES:
        # Through a double: correctly rounded for float32 and float16 (53 >= 2 * 24 + 2 bits).
        value = -float(digits) if negative else float(digits)
        with np.errstate(over="ignore"):
            array = np.array(value, dtype=dtype)
        if not np.isfinite(array):
            raise ValueError(f"literal {sign}{_shortened(text)} is out of range for {dtype}")
        return array
    if fractional:
        raise ValueError(f"integer literal {sign}{text} cannot have a fraction or an exponent; "
                         f"write a float as {sign}{digits}f")
    value = -int(digits) if negative else int(digits)
    info = np.iinfo(dtype)
    if not info.min <= value <= info.max:
        hint = "; add a suffix such as i64" if dtype == "int32" else ""
        raise ValueError(f"literal {sign}{_shortened(text)} is out of range for {dtype} "
                         f"({info.min}..{info.max}){hint}")
    return np.array(value, dtype=dtype)


def attr_number(text: str) -> int | float:
    """An attribute's number: a float if written with a fraction, exponent or float suffix.

    The suffix only says int or float: ``epsilon=1e-05f`` is the double 1e-05, as in TVM.
    """
    digits, dtype, fractional = _split_number(text)
    if dtype in dtypes.FLOAT_DTYPES or (dtype is None and fractional):
        value = float(digits)
        if math.isinf(value):
            raise ValueError(f"number {_shortened(text)} is out of range for a float64 "
                             "attribute; write inf for infinity")
        return value
    if fractional:
        raise ValueError(f"integer {text} cannot have a fraction or an exponent")
    return int(digits)


# --- the tree walker --------------------------------------------------------------------------

def _span(node: Tree | Token | None) -> Span | None:
    if isinstance(node, Token):
        return Span(node.line, node.column) if node.line else None
    if node is None or node.meta.empty:
        return None
    return Span(node.meta.line, node.meta.column)


class _Scope:
    """The names bound in one block or parameter list: name -> Var or bound node."""

    __slots__ = ("names", "parent")

    def __init__(self, parent: "_Scope | None" = None):
        self.names: dict[str, Expr] = {}
        self.parent = parent

    def lookup(self, name: str) -> Expr | None:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        return None

    def visible(self) -> list[str]:
        out: dict[str, None] = {}
        scope: _Scope | None = self
        while scope is not None:
            out.update(dict.fromkeys(scope.names))
            scope = scope.parent
        return list(out)


def _dim_arithmetic(method):
    """A dim method whose arithmetic past relvm's limits (``D.MAX_TERMS``) is a syntax error
    where it is written."""
    def checked(self, tree: Tree):
        try:
            return method(self, tree)
        except D.DimTooLarge as e:
            raise self.error(str(e), tree) from None
    checked.__name__ = method.__name__
    return checked


#: The function attributes a def may carry after its parameters (TVM prints others; relvm
#: reads only these): the model's own names of its inputs and outputs (``IONames``), and which
#: external backend compiles a region and under what symbol (``passes/partition.py``).
IO_ATTRS = ("input_names", "output_names")
REGION_ATTRS = ("Compiler", "global_symbol")
FUNCTION_ATTRS = IO_ATTRS + REGION_ATTRS


class _Builder(Interpreter):
    """Builds IR from lark's tree; one method per rule alias of ``grammar/relay.lark``."""

    def __init__(self, text: str, constants: dict[int, np.ndarray]):
        self.text = text
        self.constants = constants
        self.scope = _Scope()
        self.global_uses: list[GlobalVar] = []
        self.in_attribute = False  # inside an attribute value, where numbers may be floats
        self.io_names: dict[str, IONames] = {}  # per def, from input_names/output_names

    # --- errors -------------------------------------------------------------------------------
    def error(self, message: str, where: Tree | Token | Span | None,
              cls: type[RelvmError] = RelvmSyntaxError) -> RelvmError:
        span = where if isinstance(where, Span) else _span(where)
        return cls(message, span.line if span else None, span.column if span else None,
                   self.text)

    def checked(self, convert, token: Token, *args: Any, where: Tree | Token | None = None):
        """``convert(token, *args)``, its ValueError turned into a syntax error at the token."""
        try:
            return convert(str(token), *args)
        except ValueError as e:
            raise self.error(str(e), where or token) from None

    # --- module and functions -------------------------------------------------------------------
    def start(self, tree: Tree) -> dict[str, Function]:
        functions: dict[str, Function] = {}
        for child in tree.children:
            if isinstance(child, Token):  # the version header
                continue
            name_token, func = self.visit(child)
            name = name_token[1:]
            if name in functions:
                first = functions[name].span
                raise self.error(f"@{name} is defined twice (first at line {first.line})",
                                 name_token)
            functions[name] = func
        self.check_globals(functions)
        return functions

    def check_globals(self, functions: Mapping[str, Function]) -> None:
        for use in self.global_uses:
            if use.name not in functions:
                near = difflib.get_close_matches(use.name, list(functions), n=3)
                hint = "; did you mean " + ", ".join("@" + n for n in near) + "?" if near else ""
                raise self.error(f"unknown global function @{use.name}{hint}", use.span)

    def definition(self, tree: Tree) -> tuple[Token, Function]:
        name_token, param_list, ret, body = tree.children
        self.scope = _Scope()
        params = self.params(param_list, str(name_token))
        names = self.io_names_of(param_list, params)
        if names is not None:
            self.io_names[str(name_token)[1:]] = names
        ret_type = self.visit(ret) if ret is not None else None
        func = Function(params, self.visit(body), ret_type, span=_span(tree),
                        attrs=self.region_attrs(param_list, name_token))
        return name_token, func

    def region_attrs(self, tree: Tree, name_token: Token) -> Attrs:
        """A def's ``Compiler="dnnl"`` and ``global_symbol="dnnl_0"``: both or neither."""
        given = {str(c.children[0]): (c.children[0], self.attribute(c.children[1]))
                 for c in tree.children if c.data == "func_attr"
                 and str(c.children[0]) in REGION_ATTRS}
        for name, (token, value) in given.items():
            if not isinstance(value, str) or not value:
                raise self.error(f"{name} must be a non-empty string", token)
        if given and len(given) != len(REGION_ATTRS):
            missing = next(a for a in REGION_ATTRS if a not in given)
            raise self.error(f"a region function needs {missing} too (Compiler and "
                             "global_symbol go together)", name_token)
        return Attrs({name: value for name, (_, value) in given.items()})

    def io_names_of(self, tree: Tree, params: tuple[Var, ...]) -> IONames | None:
        """A def's ``input_names=[...]`` (one per parameter) and ``output_names=[...]``."""
        attrs = {str(c.children[0]): (c.children[0], self.attribute(c.children[1]))
                 for c in tree.children if c.data == "func_attr"}
        for name, (token, _) in attrs.items():
            if name not in FUNCTION_ATTRS:
                raise self.error(f"unknown function attribute {name}; relvm reads "
                                 + ", ".join(FUNCTION_ATTRS), token)
        attrs = {k: v for k, v in attrs.items() if k in IO_ATTRS}
        if not attrs:
            return None
        for name, (token, value) in attrs.items():
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise self.error(f"{name} must be a list of strings", token)
        inputs: dict[str, str] = {}
        if "input_names" in attrs:
            token, given = attrs["input_names"]
            if len(given) != len(params):
                raise self.error(f"input_names has {len(given)} names for {len(params)} "
                                 "parameters", token)
            inputs = {p.name: g for p, g in zip(params, given) if g != p.name}
        return IONames(inputs, tuple(attrs.get("output_names", (None, ()))[1]))

    def params(self, tree: Tree, owner: str) -> tuple[Var, ...]:
        out: list[Var] = []
        for param in tree.children:
            if param.data == "func_attr":
                if owner == "fn":
                    raise self.error("function attributes are only read on a def",
                                     param.children[0])
                continue
            if any(c.data == "func_attr" for c in tree.children[:tree.children.index(param)]):
                raise self.error("parameter after function attributes; attributes come last",
                                 param.children[0])
            token, annotation = param.children
            name = token[1:]
            if annotation is None:
                raise self.error(f"parameter %{name} of {owner} needs a type annotation, "
                                 f"like %{name}: Tensor[(n), float32]", token)
            if any(p.name == name for p in out):
                raise self.error(f"parameter %{name} of {owner} is declared twice", token)
            var = Var(name, self.visit(annotation), span=_span(token))
            self.scope.names[name] = var
            out.append(var)
        return tuple(out)

    def block(self, tree: Tree) -> Expr:
        self.scope = _Scope(self.scope)
        lets: list[tuple[Var, Expr, Span | None]] = []
        for statement in tree.children[:-1]:
            if statement.data == "graph_binding":
                token, value = statement.children
                self.scope.names[token[1:]] = self.visit(value)
                continue
            token, annotation, value = statement.children
            declared = self.visit(annotation) if annotation is not None else None
            bound = self.visit(value)  # before binding: the value cannot see its own name
            var = Var(token[1:], declared, span=_span(token))
            self.scope.names[var.name] = var
            lets.append((var, bound, _span(statement)))
        result = self.visit(tree.children[-1])
        self.scope = self.scope.parent
        # Built from the tail, so thousands of lets need no recursion.
        for var, value, span in reversed(lets):
            result = Let(var, value, result, span=span)
        return result

    # --- expressions ----------------------------------------------------------------------------
    def if_expr(self, tree: Tree) -> If:
        cond, then_block, else_block = tree.children
        return If(self.visit(cond), self.visit(then_block), self.visit(else_block),
                  span=_span(tree))

    def fn_expr(self, tree: Tree) -> Function:
        param_list, ret, body = tree.children
        self.scope = _Scope(self.scope)
        params = self.params(param_list, "fn")
        ret_type = self.visit(ret) if ret is not None else None
        func = Function(params, self.visit(body), ret_type, span=_span(tree))
        self.scope = self.scope.parent
        return func

    def block_expr(self, tree: Tree) -> Expr:
        return self.visit(tree.children[0])

    def projection(self, tree: Tree) -> TupleGetItem:
        value, index = tree.children
        position = self.integer(Token.new_borrow_pos("NUMBER", index[1:], index), "a field")
        return TupleGetItem(self.visit(value), position, span=_span(tree))

    def func_call(self, tree: Tree) -> Call:
        callee, arg_list = tree.children
        func = self.visit(callee)
        args, attrs = self.call_args(arg_list)
        if attrs:
            first = next(iter(attrs.values()))[0]
            raise self.error("only op calls take attributes; a function or closure takes "
                             "positional arguments only", first)
        return Call(func, tuple(args), span=_span(tree))

    def op_call(self, tree: Tree) -> Call:
        name, arg_list = tree.children
        op = OPS.get(str(name))
        if op is None:
            raise self.error(unknown_op_message(str(name)), name)
        args, given = self.call_args(arg_list)
        if len(args) != len(op.inputs):
            inputs = ", ".join(op.inputs) or "none"
            raise self.error(f"{op.name} takes {len(op.inputs)} input(s) ({inputs}), "
                             f"got {len(args)}", name, RelvmTypeError)
        try:
            attrs = op.make_attrs({k: value for k, (_, value) in given.items()})
        except AttrError as e:
            where, value = given.get(e.attr, (name, None))
            hint = f' (strings are written in double quotes: "{value}")' \
                if isinstance(value, D.DimExpr) else ""
            raise self.error(str(e) + hint, where, RelvmTypeError) from None
        return Call(op, tuple(args), attrs, span=_span(tree))

    def call_args(self, tree: Tree) -> tuple[list[Expr], dict[str, tuple[Token, Any]]]:
        """Positional arguments, and keyword attributes as name -> (name token, value)."""
        args: list[Expr] = []
        attrs: dict[str, tuple[Token, Any]] = {}
        for child in tree.children:
            if child.data == "keyword":
                name, value = child.children
                if name in attrs:
                    raise self.error(f"attribute {name!s} is given twice", name)
                attrs[str(name)] = (name, self.attribute(value))
            elif attrs:
                raise self.error("positional argument after attributes; attributes come last",
                                 child)
            else:
                args.append(self.visit(child))
        return args, attrs

    def local(self, tree: Tree) -> Expr:
        token = tree.children[0]
        found = self.scope.lookup(token[1:])
        if found is None:
            raise self.error(f"unknown variable {token}{self.near_names(token[1:])}", token)
        return found

    def near_names(self, name: str) -> str:
        visible = self.scope.visible()
        near = difflib.get_close_matches(name, visible, n=3)
        if near:
            return "; did you mean " + ", ".join("%" + n for n in near) + "?"
        if not visible:
            return "; no variables are in scope here"
        listed = ", ".join("%" + n for n in visible[:8])
        return f"; in scope: {listed}" + (", ..." if len(visible) > 8 else "")

    def global_ref(self, tree: Tree) -> GlobalVar:
        use = GlobalVar(tree.children[0][1:], span=_span(tree))
        self.global_uses.append(use)
        return use

    def literal(self, tree: Tree) -> Constant:
        return Constant(self.checked(scalar_literal, tree.children[0]), span=_span(tree))

    def negative_literal(self, tree: Tree) -> Constant:
        data = self.checked(scalar_literal, tree.children[0], True, where=tree)
        return Constant(data, span=_span(tree))

    def true(self, tree: Tree) -> Constant:
        return Constant(np.array(True), span=_span(tree))

    def false(self, tree: Tree) -> Constant:
        return Constant(np.array(False), span=_span(tree))

    def meta_ref(self, tree: Tree) -> Constant:
        kind, index_token = tree.children
        if kind != "relay.Constant":
            raise self.error(f"only meta[relay.Constant][k] is supported, not meta[{kind}]", kind)
        index = self.integer(index_token, "a constant index")
        return Constant(self.constants.get(index), meta_index=index, span=_span(tree))

    def tuple_expr(self, tree: Tree) -> Tuple:
        return Tuple(tuple(self.visit(field) for field in tree.children), span=_span(tree))

    # --- attribute values -------------------------------------------------------------------------
    # Numbers and symbols in attributes come through the dim methods below, which read a NUMBER
    # as an int or a float there, and the names inf and nan as floats.
    def attribute(self, tree: Tree) -> Any:
        self.in_attribute = True
        try:
            return self.visit(tree)
        finally:
            self.in_attribute = False

    def attr_string(self, tree: Tree) -> str:
        try:
            return json.loads(tree.children[0])
        except ValueError:
            raise self.error("invalid escape in string", tree) from None

    def attr_true(self, tree: Tree) -> bool:
        return True

    def attr_false(self, tree: Tree) -> bool:
        return False

    def attr_none(self, tree: Tree) -> None:
        return None

    def attr_list(self, tree: Tree) -> list:
        return [self.visit(item) for item in tree.children]

    # --- types ----------------------------------------------------------------------------------
    def scalar_type(self, tree: Tree) -> TensorType:
        return TensorType((), self.dtype(tree.children[0]))

    def tensor_type(self, tree: Tree) -> TensorType:
        shape, dtype = tree.children
        return TensorType(self.visit(shape), self.dtype(dtype))

    def tuple_type(self, tree: Tree) -> TupleType:
        return TupleType(tuple(self.visit(field) for field in tree.children))

    def list_type(self, tree: Tree) -> ListType:
        elem = self.visit(tree.children[0])
        if not isinstance(elem, TensorType):
            raise self.error(f"a list holds tensors, not {elem}", tree)
        return ListType(elem)

    def any_rank_list_type(self, tree: Tree) -> ListType:
        return ListType(TensorType((), self.dtype(tree.children[0])), ranked=False)

    def func_type(self, tree: Tree) -> FuncType:
        types: list[Type] = [self.visit(t) for t in tree.children]
        return FuncType(tuple(types[:-1]), types[-1])

    def shape(self, tree: Tree) -> tuple[D.Dim, ...]:
        dims = []
        for child in tree.children:
            dim = self.visit(child)
            if isinstance(dim, int) and dim < 0:
                raise self.error(f"dimension {dim} is negative", child)
            dims.append(dim)
        return tuple(dims)

    def dtype(self, token: Token) -> str:
        if not dtypes.is_dtype(str(token)):
            near = difflib.get_close_matches(str(token), list(dtypes.DTYPES), n=1)
            hint = f"did you mean {near[0]}? " if near else ""
            raise self.error(f"unknown dtype '{token}'; {hint}relvm supports "
                             + ", ".join(dtypes.DTYPES), token)
        return str(token)

    def integer(self, token: Token, what: str) -> int:
        if not token.isdigit():
            raise self.error(f"expected an integer for {what}, got {token}", token)
        if len(token) > 18:  # beyond int64, and beyond any real shape
            raise self.error(f"{_shortened(str(token))} is too large for {what}", token)
        return int(token)

    # Dims: ints and DimExprs, through the canonical arithmetic of relvm.ir.dims.
    def dim_int(self, tree: Tree) -> int | float:
        if self.in_attribute:
            return self.checked(attr_number, tree.children[0])
        return self.integer(tree.children[0], "a dimension")

    def dim_any(self, tree: Tree) -> D.Dim:
        return D.as_expr(D.ANY)

    def dim_symbol(self, tree: Tree) -> D.Dim | float:
        name = tree.children[0]
        if self.in_attribute and name in ("inf", "nan"):
            return float(name)
        if "." in name:
            raise self.error(f"a dimension name cannot contain '.': {name}", name)
        return D.as_expr(D.Sym(str(name)))

    @_dim_arithmetic
    def dim_neg(self, tree: Tree) -> D.Dim | float:
        value = self.visit(tree.children[0])
        return -value if isinstance(value, (int, float)) else 0 - value

    @_dim_arithmetic
    def dim_call(self, tree: Tree) -> D.Dim:
        name = tree.children[0]
        functions = {"max": D.dim_max, "min": D.dim_min}
        if name not in functions:
            raise self.error(f"unknown dimension function {name}; expected max or min", name)
        return functions[str(name)](*self.dim_operands(tree, 1))

    @_dim_arithmetic
    def dim_add(self, tree: Tree) -> D.Dim:
        a, b = self.dim_operands(tree)
        return a + b

    @_dim_arithmetic
    def dim_sub(self, tree: Tree) -> D.Dim:
        a, b = self.dim_operands(tree)
        return a - b

    @_dim_arithmetic
    def dim_mul(self, tree: Tree) -> D.Dim:
        a, b = self.dim_operands(tree)
        return a * b

    @_dim_arithmetic
    def dim_div(self, tree: Tree) -> D.Dim:
        return self.divide(tree, D.floordiv)

    @_dim_arithmetic
    def dim_mod(self, tree: Tree) -> D.Dim:
        return self.divide(tree, D.mod)

    def divide(self, tree: Tree, op) -> D.Dim:
        a, b = self.dim_operands(tree)
        if b == 0:
            raise self.error("dimension divided by zero", tree)
        return op(a, b)

    def dim_operands(self, tree: Tree, skip: int = 0) -> list[D.Dim]:
        """The operands of dim arithmetic; floats (in attributes) take no part in it."""
        operands = [self.visit(c) for c in tree.children[skip:]]
        if any(isinstance(x, float) for x in operands):
            raise self.error("arithmetic in attributes is for integers and dims only", tree)
        return operands

