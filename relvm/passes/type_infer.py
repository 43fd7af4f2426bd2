"""Type and shape inference over symbolic dims.

Every expression of every function gets a ``checked_type``. The rules:

- A named dim (``n``) is one symbol throughout a global function and the closures inside it:
  two parameters declared with ``n`` must agree at run time.
- Each ``?`` in an annotation becomes a fresh anonymous symbol, so nothing assumes two ``?`` equal,
  yet shapes derived from one (``x + 1``) stay linked to it.
- Op results come from the op's type relation (``relvm.ops``). Dims that cannot be compared
  statically (``n`` vs ``m``) are accepted and checked by the VM at run time; dims that provably
  differ are an error naming the op, both shapes and the source location.
- A call of a global function instantiates the callee's symbols from the argument dims, so a
  function over ``n`` can be called with ``m*2``. Recursive calls use the declared return type.
- The two branches of ``if`` join dim by dim; dims that differ become a fresh ``?``.
- A small int64 or bool tensor computed from shapes gets a ``shape_value`` (``ops/values.py``):
  ``shape_of(x)`` holds ``x``'s dims, arithmetic and indexing on such values follow. An
  ``arange`` or ``dyn.reshape`` whose shape inputs have values gets exact dims (``arange(0,
  take(shape_of(x), 1), 1)`` is ``[n]`` for an ``x`` of ``[b, n]``), where it would otherwise
  get fresh ``?``s -- except inside a closure, whose lowering knows only its own inputs' dims.
"""

from __future__ import annotations

from typing import Callable, Mapping

from ..errors import RelvmTypeError
from ..ir import dims as D
from ..ir.nodes import (Call, Constant, Expr, Function, GlobalVar, If, Let, Module, Tuple,
                        TupleGetItem, Var, post_order)
from ..ir.limits import type_problem
from ..ir.types import (FuncType, ListType, TensorType, TupleType, Type, map_type_dims,
                        type_symbols)
from .. import dtypes
from ..ops import values as V
from ..ops.registry import Op, OpTypeError


def infer_module(module: Module) -> Module:
    """Annotate every node of ``module`` with its ``checked_type`` (in place); returns it.

    Raises
    ------
    RelvmTypeError
        With the op or construct, the shapes involved, and the line and column.
    """
    _ModuleChecker(module).run()
    return module


def freshen(t: Type) -> Type:
    """Replace every ``?`` (``dims.ANY``) in ``t`` by a distinct fresh anonymous symbol."""
    def fresh_dim(d: D.Dim) -> D.Dim:
        if isinstance(d, int) or D.ANY not in D.free_symbols(d):
            return d
        return D.substitute(d, {D.ANY: D.as_expr(D.fresh())})
    return map_type_dims(t, fresh_dim)


# --- matching and joining types --------------------------------------------------------------

class _Mismatch(Exception):
    """A type mismatch found while matching; the caller adds what was being matched."""


def _bare_symbol(d: D.Dim) -> D.Sym | None:
    if isinstance(d, D.DimExpr) and len(d.terms) == 1:
        (mono, coeff), = d.terms
        if coeff == 1 and len(mono) == 1 and isinstance(mono[0], D.Sym):
            return mono[0]
    return None


def match(expected: Type, actual: Type, bindings: dict[D.Sym, D.Dim],
          bindable: Callable[[D.Sym], bool]) -> None:
    """Check ``actual`` against ``expected``, binding bindable symbols of ``expected``.

    Raises _Mismatch when the structure, rank or dtype differ, or a dim provably differs.
    Dims that cannot be decided statically are accepted (checked at run time).
    """
    if isinstance(expected, TensorType):
        if not isinstance(actual, TensorType):
            raise _Mismatch(f"expected {expected}, got {actual}")
        if expected.dtype != actual.dtype or expected.ndim != actual.ndim:
            raise _Mismatch(f"expected {expected}, got {actual}")
        deferred = []
        for e, a in zip(expected.shape, actual.shape):
            sym = _bare_symbol(e)
            if sym is not None and bindable(sym) and sym not in bindings:
                bindings[sym] = a
            else:
                deferred.append((e, a))
        for e, a in deferred:
            if not D.equal_or_assumed(D.substitute(e, bindings), a):
                raise _Mismatch(f"expected {_subst_type(expected, bindings)}, got {actual}")
        return
    if isinstance(expected, ListType):
        if not isinstance(actual, ListType) or not _list_fits(actual, expected):
            raise _Mismatch(f"expected {expected}, got {actual}")
        return
    if isinstance(expected, TupleType):
        if not isinstance(actual, TupleType) or len(expected.fields) != len(actual.fields):
            raise _Mismatch(f"expected {expected}, got {actual}")
        for e, a in zip(expected.fields, actual.fields):
            match(e, a, bindings, bindable)
        return
    if not isinstance(actual, FuncType) or len(expected.params) != len(actual.params):
        raise _Mismatch(f"expected {expected}, got {actual}")
    for e, a in zip(expected.params, actual.params):
        match(e, a, bindings, lambda s: False)
    match(expected.ret, actual.ret, bindings, lambda s: False)


def _subst_type(t: Type, bindings: Mapping[D.Sym, D.Dim]) -> Type:
    return map_type_dims(t, lambda d: D.substitute(d, bindings))


def _elem_fits(actual: TensorType, expected: TensorType) -> bool:
    """A list of ``actual`` elements is one of ``expected`` ones (a ``?`` takes any dim)."""
    return (actual.dtype == expected.dtype and actual.ndim == expected.ndim
            and all(not isinstance(e, int) or a == e
                    for a, e in zip(actual.shape, expected.shape)))


def _list_fits(actual: ListType, expected: ListType) -> bool:
    if not expected.ranked:
        return actual.elem.dtype == expected.elem.dtype
    return actual.ranked and _elem_fits(actual.elem, expected.elem)


def join_lists(a: ListType, b: ListType) -> ListType:
    """The list type holding the elements of both (same dtype and rank): unequal dims are ?;
    a list of unknown rank with any other is one of unknown rank."""
    if not (a.ranked and b.ranked):
        return ListType(a.elem, ranked=False)
    return ListType(TensorType(tuple(x if x == y else D.ANY
                                     for x, y in zip(a.elem.shape, b.elem.shape)), a.elem.dtype))


def refine(declared: Type, inferred: Type) -> Type:
    """``declared``, with each anonymous dim replaced by what ``inferred`` knows there.

    Both must already have matched.
    """
    if isinstance(declared, TensorType) and isinstance(inferred, TensorType):
        return TensorType(tuple(i if not D.is_expressible(d) else d
                                for d, i in zip(declared.shape, inferred.shape)), declared.dtype)
    if isinstance(declared, TupleType) and isinstance(inferred, TupleType):
        return TupleType(tuple(refine(d, i) for d, i in zip(declared.fields, inferred.fields)))
    return declared


def join(a: Type, b: Type) -> Type:
    """The type of a value that is either ``a`` or ``b`` (the branches of ``if``)."""
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        if a.dtype != b.dtype or a.ndim != b.ndim:
            raise _Mismatch(f"then-branch is {a}, else-branch is {b}")
        return TensorType(tuple(x if D.prove_equal(x, y) else D.fresh()
                                for x, y in zip(a.shape, b.shape)), a.dtype)
    if isinstance(a, TupleType) and isinstance(b, TupleType) and len(a.fields) == len(b.fields):
        return TupleType(tuple(join(x, y) for x, y in zip(a.fields, b.fields)))
    if isinstance(a, ListType) and isinstance(b, ListType):
        if a.elem.dtype != b.elem.dtype or (a.ranked and b.ranked and a.elem.ndim != b.elem.ndim):
            raise _Mismatch(f"then-branch is {a}, else-branch is {b}")
        return join_lists(a, b)
    if isinstance(a, FuncType) and isinstance(b, FuncType):
        try:
            match(a, b, {}, lambda s: False)
        except _Mismatch:
            raise _Mismatch(f"then-branch is {a}, else-branch is {b}") from None
        return a
    raise _Mismatch(f"then-branch is {a}, else-branch is {b}")


def instantiate(fn_type: FuncType, arg_types: list[Type],
                bindable: Callable[[D.Sym], bool]) -> Type:
    """The result type of calling a function of ``fn_type`` with ``arg_types``."""
    bindings: dict[D.Sym, D.Dim] = {}
    for i, (p, a) in enumerate(zip(fn_type.params, arg_types)):
        try:
            match(p, a, bindings, bindable)
        except _Mismatch as e:
            raise _Mismatch(f"argument {i}: {e}") from None
    # Symbols of the result that no argument determines are unknown at this call site.
    for s in type_symbols(fn_type.ret):
        if bindable(s) and s not in bindings:
            bindings[s] = D.as_expr(D.fresh())
    return _subst_type(fn_type.ret, bindings)


# --- the checker -------------------------------------------------------------------------------

class _ModuleChecker:
    def __init__(self, module: Module):
        self.module = module
        self.signatures: dict[str, FuncType] = {}
        self.in_progress: set[str] = set()

    def error(self, message: str, node: Expr | None) -> RelvmTypeError:
        span = getattr(node, "span", None)
        return RelvmTypeError(message, span.line if span else None,
                              span.column if span else None, self.module.source)

    def run(self) -> None:
        for name in self.module.functions:
            self.signature(name)

    def signature(self, name: str, use: Expr | None = None) -> FuncType:
        """The type of global ``name``, checking its body first if its return is unannotated."""
        if name in self.signatures:
            return self.signatures[name]
        func = self.module.functions.get(name)
        if func is None:
            raise self.error(f"unknown global function @{name}", use)
        if name in self.in_progress:
            if func.ret_type is not None:
                return FuncType(tuple(p.checked_type for p in func.params), freshen(func.ret_type))
            raise self.error(f"@{name} is called recursively, so its return type must be "
                             f"annotated: def @{name}(...) -> Type {{ ... }}", use or func)
        self.in_progress.add(name)
        sig = _FunctionChecker(self, func).run()
        func.with_type(sig)
        self.in_progress.discard(name)
        self.signatures[name] = sig
        return sig


class _FunctionChecker:
    """Checks one global function and the closures inside it."""

    def __init__(self, module_checker: _ModuleChecker, func: Function):
        self.mc = module_checker
        self.func = func
        self.let_of: dict[int, Let] = {}
        self.params: set[int] = set()
        #: ids of the nodes inside closures (values do not refine their types)
        self.in_closure: set[int] = set()

    def error(self, message: str, node: Expr | None) -> RelvmTypeError:
        return self.mc.error(message, node)

    def run(self) -> FuncType:
        nodes = list(post_order(self.func.body, into_functions=True))
        for fn in [self.func] + [n for n in nodes if isinstance(n, Function)]:
            for p in fn.params:
                if p.type_annotation is None:
                    raise self.error(f"parameter %{p.name} needs a type annotation", p)
                p.with_type(self.within_limits(freshen(p.type_annotation), p,
                                               f"parameter %{p.name} "))
                self.params.add(id(p))
        for n in nodes:
            if isinstance(n, Let):
                self.let_of[id(n.var)] = n
            elif isinstance(n, Function) and n is not self.func:
                self.in_closure.update(id(m) for m in post_order(n.body, into_functions=True))
        for n in nodes:
            with D.assumptions() as found:
                n.with_type(self.type_of(n))
            n.with_value(self.value_of(n))
            if isinstance(n, (Call, Let, Function)):
                n.with_assumed(found)
        with D.assumptions() as found:
            sig = self.function_type(self.func)
        self.func.with_assumed(found)
        return sig

    # One method per node kind; each returns the node's type.
    def type_of(self, node: Expr) -> Type:
        method = getattr(self, "visit_" + type(node).__name__)
        return method(node)

    def value_of(self, node: Expr):
        """The node's symbolic value (``ops/values.py``), once its type is known."""
        if isinstance(node, Call) and isinstance(node.op, Op):
            return V.infer(node.op, node.attrs, node.args, node.checked_type)
        if isinstance(node, Var):
            let = self.let_of.get(id(node))
            return None if let is None else V.known(let.value)
        if isinstance(node, Let):
            return V.known(node.body)
        if isinstance(node, (Constant, Tuple, TupleGetItem)):
            return V.known(node)
        return None

    def visit_Var(self, v: Var) -> Type:
        if id(v) in self.params:
            return v.checked_type
        let = self.let_of.get(id(v))
        if let is None:
            raise self.error(f"%{v.name} is not bound", v)
        if let.value.checked_type is None:
            raise self.error(f"%{v.name} is used in its own definition", v)
        value_type = let.value.checked_type
        if v.type_annotation is None:
            return value_type
        declared = freshen(v.type_annotation)
        try:
            match(declared, value_type, {}, lambda s: False)
        except _Mismatch as e:
            raise self.error(f"let %{v.name}: annotation does not match its value: {e}", let)
        return refine(declared, value_type)

    def visit_GlobalVar(self, g: GlobalVar) -> Type:
        return self.mc.signature(g.name, g)

    def visit_Constant(self, c: Constant) -> Type:
        if c.data is None:
            raise self.error(f"meta[relay.Constant][{c.meta_index}] is not bound: pass its value "
                             f"in relvm.parse(text, constants=[...])", c)
        dtype = dtypes.from_numpy(c.data.dtype)
        if dtype is None:
            raise self.error(f"constant has unsupported dtype {c.data.dtype}; relvm supports "
                             + ", ".join(dtypes.DTYPES), c)
        return TensorType(tuple(int(s) for s in c.data.shape), dtype)

    def visit_Call(self, call: Call) -> Type:
        arg_types = [a.checked_type for a in call.args]
        if isinstance(call.op, Op):
            return self.op_call(call, call.op, arg_types)
        callee = call.op.checked_type
        if not isinstance(callee, FuncType):
            raise self.error(f"cannot call a value of type {callee}", call)
        if len(callee.params) != len(arg_types):
            raise self.error(f"{self.callee_name(call)} takes {len(callee.params)} arguments, "
                             f"got {len(arg_types)}", call)
        # Globals capture nothing: all their symbols are theirs to instantiate. Closures share
        # their enclosing function's symbols -- its named ones, and the anonymous ones of what
        # they capture -- so only the anonymous symbols of their own parameters are bindable.
        if isinstance(call.op, GlobalVar):
            bindable = lambda s: True  # noqa: E731
        else:
            own = {s for p in callee.params for s in type_symbols(p) if s.anonymous}
            bindable = own.__contains__
        try:
            result = instantiate(callee, arg_types, bindable)
        except (_Mismatch, D.DimTooLarge) as e:  # D.DimTooLarge: the callee's dims substituted
            raise self.error(f"{self.callee_name(call)}: {e}", call) from None
        return self.within_limits(result, call, f"{self.callee_name(call)}: the result ")

    def within_limits(self, t: Type, node: Expr, prefix: str = "") -> Type:
        """``t``, or a RelvmTypeError at ``node`` if a tensor in it is past relvm's limits."""
        problem = type_problem(t)
        if problem:
            raise self.error(prefix + problem, node)
        return t

    @staticmethod
    def callee_name(call: Call) -> str:
        if isinstance(call.op, GlobalVar):
            return f"@{call.op.name}"
        if isinstance(call.op, Var):
            return f"%{call.op.name}"
        return "closure"

    def op_call(self, call: Call, op: Op, arg_types: list[Type]) -> Type:
        if len(arg_types) != len(op.inputs):
            raise self.error(f"{op.name} takes {len(op.inputs)} inputs "
                             f"({', '.join(op.inputs) or 'none'}), got {len(arg_types)}", call)
        try:
            result = op.infer(call.attrs, *arg_types)
        except OpTypeError as e:
            raise self.error(f"{op.name}: {e}", call) from None
        except (ValueError, TypeError, ZeroDivisionError, IndexError, KeyError) as e:
            raise self.error(f"{op.name}: cannot infer the result type: {e}", call) from None
        if op.data_dependent and id(call) not in self.in_closure:
            result = V.refine(op, call.attrs, call.args, result)
        return self.within_limits(result, call, f"{op.name}: the result ")

    def visit_Let(self, let: Let) -> Type:
        let.var.with_type(self.visit_Var(let.var))
        return let.body.checked_type

    def visit_Tuple(self, t: Tuple) -> Type:
        return TupleType(tuple(f.checked_type for f in t.fields))

    def visit_TupleGetItem(self, g: TupleGetItem) -> Type:
        t = g.tuple_value.checked_type
        if not isinstance(t, TupleType):
            raise self.error(f"cannot take field {g.index} of a non-tuple value of type {t}", g)
        if not 0 <= g.index < len(t.fields):
            raise self.error(f"tuple index {g.index} out of range for {t}", g)
        return t.fields[g.index]

    def visit_If(self, node: If) -> Type:
        c = node.cond.checked_type
        if not (isinstance(c, TensorType) and c.ndim == 0 and c.dtype == "bool"):
            raise self.error(f"if condition must be a scalar bool, got {c}", node)
        try:
            return join(node.then_branch.checked_type, node.else_branch.checked_type)
        except _Mismatch as e:
            raise self.error(f"if branches differ: {e}", node) from None

    def visit_Function(self, fn: Function) -> Type:
        return self.function_type(fn)

    def function_type(self, fn: Function) -> FuncType:
        body = fn.body.checked_type
        params = tuple(p.checked_type for p in fn.params)
        if fn.ret_type is None:
            return FuncType(params, body)
        declared = freshen(fn.ret_type)
        try:
            match(declared, body, {}, lambda s: False)
        except _Mismatch as e:
            what = f"@{self.func_name(fn)}" if fn is self.func else "fn"
            raise self.error(f"{what}: body does not match the declared return type: {e}",
                             fn.body) from None
        return FuncType(params, refine(declared, body))

    def func_name(self, fn: Function) -> str:
        for name, f in self.mc.module.functions.items():
            if f is fn:
                return name
        return "fn"
