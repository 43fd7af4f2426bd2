"""The reference interpreter: runs any typed module with each op's NumPy reference.

It is the oracle of every test: the VM, the compiled kernels, the saved executables and the
fuzzers are all compared against :func:`evaluate`. It favours being obviously right over speed:
it walks the IR directly, evaluates each shared node once per function activation, and evaluates
only the taken branch of ``if``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from .. import dtypes
from .._stack import run_with_deep_stack
from ..errors import RelvmInputError, RelvmRuntimeError
from ..ir import dims as D
from ..ir.nodes import (Call, Constant, Expr, Function, GlobalVar, If, Let, Module, Tuple,
                        TupleGetItem, Var)
from ..ir.types import ListType, TensorType, TupleType, Type
from ..ops.registry import Op

_MISSING = object()


@dataclass
class Closure:
    """A function value: a function literal with the environment it captured."""

    func: Function
    env: "_Env"


class _Env:
    """Variable bindings of one activation, chained to the enclosing one (for closures)."""

    __slots__ = ("values", "parent")

    def __init__(self, parent: "_Env | None" = None):
        self.values: dict[int, Any] = {}
        self.parent = parent

    def lookup(self, var: Var) -> Any:
        env: _Env | None = self
        while env is not None:
            v = env.values.get(id(var), _MISSING)
            if v is not _MISSING:
                return v
            env = env.parent
        raise RelvmRuntimeError(f"%{var.name} is not bound")


def evaluate(module: Module, *inputs: Any, params: Mapping[str, Any] | None = None,
             func: str = "main") -> Any:
    """Run ``func`` of a typed ``module`` with NumPy.

    Parameters
    ----------
    module : Module
        A module from :func:`relvm.parse` (type-checked).
    *inputs : array_like
        Values of the function's parameters that ``params`` does not bind, in order.
    params : mapping of str to array_like, optional
        Parameters bound by name (the weights, as ``relvm.build(..., params=...)`` takes them).
    func : str
        The global function to run.

    Returns
    -------
    numpy.ndarray, tuple or Closure
        Tuples nest as the result type does.

    Examples
    --------
    >>> m = relvm.parse("def @main(%x: Tensor[(n), float32]) { add(%x, 1f) }")
    >>> evaluate(m, np.zeros(3, "float32"))
    array([1., 1., 1.], dtype=float32)
    """
    if func not in module.functions:
        raise RelvmInputError(f"module has no function @{func}; it has "
                              + ", ".join("@" + k for k in module.functions))
    fn = module.functions[func]
    args = _bind_arguments(fn, func, inputs, params or {})
    interp = _Interpreter(module)
    return run_with_deep_stack(lambda: interp.call(fn, args, _Env()))


def _bind_arguments(fn: Function, name: str, inputs: Sequence[Any],
                    params: Mapping[str, Any]) -> list[Any]:
    unknown = set(params) - {p.name for p in fn.params}
    if unknown:
        raise RelvmInputError(f"@{name} has no parameter named {sorted(unknown)[0]!r}")
    free = [p for p in fn.params if p.name not in params]
    if len(inputs) != len(free):
        raise RelvmInputError(f"@{name} expects {len(free)} inputs "
                              f"({', '.join('%' + p.name for p in free)}), got {len(inputs)}")
    positional = iter(inputs)
    args = [params[p.name] if p.name in params else next(positional) for p in fn.params]
    symbols: dict[D.Sym, int] = {}
    return [_check_input(a, p, name, symbols) for a, p in zip(args, fn.params)]


def _check_input(value: Any, param: Var, fname: str, symbols: dict[D.Sym, int]) -> Any:
    t = param.checked_type or param.type_annotation
    if isinstance(t, TupleType):
        return tuple(_check_tensor(v, f, f"%{param.name}.{i}", fname, symbols)
                     for i, (v, f) in enumerate(zip(value, t.fields)))
    if isinstance(t, ListType):  # each element on its own: a ? dim is any
        if not isinstance(value, (list, tuple)):
            raise RelvmInputError(f"@{fname} input %{param.name}: expected a list of arrays")
        elem = t.elem if t.ranked else None
        return [_check_tensor(v, elem, f"%{param.name}[{i}]", fname, {})
                for i, v in enumerate(value)]
    return _check_tensor(value, t, f"%{param.name}", fname, symbols)


def _check_tensor(value: Any, t: Type, what: str, fname: str, symbols: dict[D.Sym, int]) -> Any:
    if not isinstance(t, TensorType):
        return value
    arr = np.asarray(value)
    if dtypes.from_numpy(arr.dtype) != t.dtype:
        raise RelvmInputError(f"@{fname} input {what}: expected dtype {t.dtype}, got {arr.dtype}")
    if arr.ndim != t.ndim:
        raise RelvmInputError(f"@{fname} input {what}: expected rank {t.ndim} {t}, "
                              f"got shape {arr.shape}")
    for i, (d, actual) in enumerate(zip(t.shape, arr.shape)):
        if isinstance(d, int):
            if d != actual:
                raise RelvmInputError(f"@{fname} input {what}: dim {i} expected {d}, got {actual}")
            continue
        sym = next(iter(D.free_symbols(d)), None)
        if sym is not None and D.as_expr(sym) == d and not sym.anonymous:
            seen = symbols.setdefault(sym, actual)
            if seen != actual:
                raise RelvmInputError(f"@{fname} input {what}: dim {i} is {sym.name}={seen} by an "
                                      f"earlier input, got {actual}")
    return arr


class _Interpreter:
    def __init__(self, module: Module):
        self.module = module

    def call(self, fn: Function, args: Sequence[Any], env: _Env) -> Any:
        frame = _Env(env)
        for p, a in zip(fn.params, args):
            frame.values[id(p)] = a
        return self.eval(fn.body, frame, {})

    def eval(self, node: Expr, env: _Env, memo: dict[int, Any]) -> Any:
        v = memo.get(id(node), _MISSING)
        if v is _MISSING:
            v = getattr(self, "eval_" + type(node).__name__)(node, env, memo)
            memo[id(node)] = v
        return v

    def eval_Var(self, v: Var, env: _Env, memo: dict) -> Any:
        return env.lookup(v)

    def eval_GlobalVar(self, g: GlobalVar, env: _Env, memo: dict) -> Any:
        return Closure(self.module.functions[g.name], _Env())

    def eval_Constant(self, c: Constant, env: _Env, memo: dict) -> Any:
        return c.data

    def eval_Tuple(self, t: Tuple, env: _Env, memo: dict) -> Any:
        return tuple(self.eval(f, env, memo) for f in t.fields)

    def eval_TupleGetItem(self, g: TupleGetItem, env: _Env, memo: dict) -> Any:
        return self.eval(g.tuple_value, env, memo)[g.index]

    def eval_Let(self, let: Let, env: _Env, memo: dict) -> Any:
        env.values[id(let.var)] = self.eval(let.value, env, memo)
        return self.eval(let.body, env, memo)

    def eval_If(self, node: If, env: _Env, memo: dict) -> Any:
        cond = self.eval(node.cond, env, memo)
        branch = node.then_branch if bool(np.asarray(cond)) else node.else_branch
        return self.eval(branch, env, memo)

    def eval_Function(self, fn: Function, env: _Env, memo: dict) -> Any:
        return Closure(fn, env)

    def eval_Call(self, call: Call, env: _Env, memo: dict) -> Any:
        args = [self.eval(a, env, memo) for a in call.args]
        if isinstance(call.op, Op):
            return self.apply_op(call, call.op, args)
        callee = self.eval(call.op, env, memo)
        return self.call(callee.func, args, callee.env)

    def apply_op(self, call: Call, op: Op, args: list[Any]) -> Any:
        with np.errstate(all="ignore"):
            out = op.reference(call.attrs, *args)
        _check_result(op, out, call.checked_type)
        return out


def _check_result(op: Op, out: Any, t: Type | None) -> None:
    """The reference must produce what the type relation promised (dtype and rank)."""
    if isinstance(t, TensorType):
        if not isinstance(out, np.ndarray) or dtypes.from_numpy(out.dtype) != t.dtype \
                or out.ndim != t.ndim:
            got = f"{out.dtype}{list(out.shape)}" if isinstance(out, np.ndarray) else type(out)
            raise AssertionError(f"{op.name} reference returned {got}, type says {t}")
        for d, s in zip(t.shape, out.shape):
            assert not isinstance(d, int) or d == s, f"{op.name}: {out.shape} vs {t}"
    elif isinstance(t, ListType):
        assert isinstance(out, list), f"{op.name}: {t}"
        for o in out:
            assert isinstance(o, np.ndarray) and dtypes.from_numpy(o.dtype) == t.elem.dtype \
                and (not t.ranked or o.ndim == t.elem.ndim), f"{op.name}: {o.shape} vs {t}"
    elif isinstance(t, TupleType):
        assert isinstance(out, tuple) and len(out) == len(t.fields), f"{op.name}: {t}"
        for o, f in zip(out, t.fields):
            _check_result(op, o, f)
