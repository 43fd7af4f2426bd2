"""The state behind :func:`relvm.testing.strategies.programs`: values, params, blocks, constraints.

A generated program is written as text while it is built. Each value in scope carries its
symbolic shape (a tuple of dims from :mod:`relvm.ir.dims`), its dtype and how exactly it was
computed, so the op forms (``_forms.py``) only choose operands and attributes that type-check.
Result types come from the op registry's own type relations.

Two kinds of facts are recorded for the assignments of symbolic dims:

* each symbol's *lower bound* (0 unless an op needs more), and
* *constraints* an assignment must meet: a dim at least some value, two dims that broadcast.

Dims that only exist at run time (argwhere's row count) are *opaque*: no constraint may
mention them, so forms that would need one decline.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from hypothesis import strategies as st

from ..ir import dims as D
from ..ir.dims import Dim
from ..ir.printer import attr_text
from ..ir.types import TensorType, TupleType, Type
from ..ops.registry import OPS, AttrError, OpTypeError

#: A value counts as computed exactly (the same bits in every backend) while its inputs went
#: through at most this many multiplicative ops: inputs are multiples of 1/4 in [-2, 2], so
#: sums and products stay exactly representable in float32 and accumulation order is moot.
EXACT_DEPTH = 2

_uids = itertools.count(10**9)
_REF = re.compile(r"%[A-Za-z0-9_]+(?:\.[0-9]+)?")  # far from the uids of D.fresh()


def sym_key(s: D.Sym) -> str:
    """The key of a symbol in a dims assignment: its name, or ``?<uid>`` when anonymous."""
    return f"?{s.uid}" if s.anonymous else s.name


def new_anonymous() -> D.Sym:
    """A fresh anonymous symbol (printed ``?``)."""
    uid = next(_uids)
    return D.Sym(f"?{uid}", anonymous=True, uid=uid)


def evaluate(dim: Dim, env: Mapping[str, int]) -> int:
    """``dim`` under an assignment keyed by :func:`sym_key`."""
    return D.evaluate(dim, {s: env[sym_key(s)] for s in D.free_symbols(dim)})


# --- values ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Value:
    """A tensor in scope: the text that names it, its symbolic shape and dtype.

    ``depth`` is the number of multiplicative ops between the inputs and this value, or None
    once a transcendental op, a division or a mean made it inexact.
    """

    ref: str
    shape: tuple[Dim, ...]
    dtype: str
    depth: int | None = 0

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def type(self) -> TensorType:
        return TensorType(self.shape, self.dtype)

    @property
    def exact(self) -> bool:
        return self.depth is not None and self.depth <= EXACT_DEPTH


def deeper(*values: Value, by: int = 0) -> int | None:
    """The depth of a result computed from ``values`` by ``by`` more multiplicative ops."""
    if any(v.depth is None for v in values):
        return None
    return max((v.depth for v in values), default=0) + by


@dataclass(frozen=True)
class Param:
    """A function parameter: a tensor (or a bool scalar) the caller passes in."""

    name: str
    shape: tuple[Dim, ...]
    dtype: str
    positive: bool = False  # inputs drawn > 0 (variances)

    def type_text(self) -> str:
        return str(TensorType(self.shape, self.dtype))


# --- constraints on assignments -------------------------------------------------------------


@dataclass(frozen=True)
class AtLeast:
    """``dim >= least`` for the assignment."""

    dim: Dim
    least: int

    def holds(self, env: Mapping[str, int]) -> bool:
        return evaluate(self.dim, env) >= self.least

    def substitute(self, mapping: Mapping[D.Sym, Dim]) -> "AtLeast":
        return AtLeast(D.substitute(self.dim, mapping), self.least)

    def symbols(self) -> set[D.Sym]:
        return D.free_symbols(self.dim)


@dataclass(frozen=True)
class Broadcastable:
    """``a`` and ``b`` are equal or one of them is 1 (NumPy broadcasting)."""

    a: Dim
    b: Dim

    def holds(self, env: Mapping[str, int]) -> bool:
        x, y = evaluate(self.a, env), evaluate(self.b, env)
        return x == y or 1 in (x, y)

    def substitute(self, mapping: Mapping[D.Sym, Dim]) -> "Broadcastable":
        return Broadcastable(D.substitute(self.a, mapping), D.substitute(self.b, mapping))

    def symbols(self) -> set[D.Sym]:
        return D.free_symbols(self.a) | D.free_symbols(self.b)


Constraint = Any  # AtLeast | Broadcastable


def holds(constraint: Constraint, env: Mapping[str, int]) -> bool:
    """True if ``constraint`` holds; a dim that cannot be evaluated there fails it."""
    try:
        return constraint.holds(env)
    except (ValueError, ZeroDivisionError, KeyError):
        return False


# --- types from the registry ----------------------------------------------------------------


def infer(op: str, attrs: Mapping[str, Any], *args: Type) -> Type | None:
    """The result type of ``op`` on ``args``, or None if the op's type relation refuses them."""
    entry = OPS[op]
    try:
        return entry.infer(entry.make_attrs(dict(attrs)), *args)
    except (OpTypeError, AttrError):
        return None


def call_text(op: str, args: Sequence[str], attrs: Mapping[str, Any] | None = None) -> str:
    """``op(a, b, key=value)`` with the attributes printed as the parser reads them."""
    parts = list(args) + [f"{k}={attr_text(v)}" for k, v in (attrs or {}).items()]
    return f"{op}({', '.join(parts)})"


# --- functions and blocks -------------------------------------------------------------------


@dataclass
class Config:
    """What a program may contain; see :func:`relvm.testing.strategies.programs`."""

    forms: tuple[str, ...]
    max_ops: int
    max_value: int
    symbols: tuple[str, ...]
    dtypes: tuple[str, ...]


@dataclass
class Func:
    """One global function being generated: its params, binding counter and constraints."""

    name: str
    symbols: tuple[D.Sym, ...]          # symbols new params may use
    is_main: bool
    params: list[Param] = field(default_factory=list)
    #: Params the helper's generated body added (weights): a call site must supply them.
    extra: list[Param] = field(default_factory=list)
    counter: itertools.count = field(default_factory=itertools.count)
    used: set[str] = field(default_factory=set)  # refs read by some binding
    constraints: list[Constraint] = field(default_factory=list)
    lower: dict[D.Sym, int] = field(default_factory=dict)
    opaque: set[D.Sym] = field(default_factory=set)
    used_symbols: list[D.Sym] = field(default_factory=list)


class Gen:
    """The program being generated: the draw function, options, and the functions so far."""

    def __init__(self, draw: Callable, config: Config):
        self.draw = draw
        self.config = config
        self.helper: "Helper | None" = None
        self.forms_used: set[str] = set()
        self.accumulates = False  # a dense/conv/reduction: compare with a looser tolerance

    def pick(self, options: Sequence[Any]) -> Any:
        return self.draw(st.sampled_from(list(options)))

    def coin(self, p_true: float = 0.5) -> bool:
        # Shrinks toward False (the draw toward 0): the simpler program lacks the option.
        return self.draw(st.integers(0, 99)) >= 100 - 100 * p_true

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))


@dataclass
class Helper:
    """The second global function and the values it was generated for."""

    func: Func
    data_params: list[Param]
    result: Value
    text: str


class Block:
    """A block of bindings (a function body or an ``if`` branch) and the values it can see."""

    def __init__(self, gen: Gen, func: Func, scope: list[Value] | None = None, indent: int = 1):
        self.gen = gen
        self.func = func
        self.scope: list[Value] = list(scope or [])
        self.lines: list[str] = []
        self.indent = indent

    # --- emitting ---------------------------------------------------------------------------
    def bind(self, expr: str, shape: Sequence[Dim], dtype: str, depth: int | None) -> Value:
        """Bind ``expr`` (as ``%N = ...`` or, sometimes, ``let %vN = ...``) and scope it."""
        self.func.used.update(_REF.findall(expr))
        n = next(self.func.counter)
        ref = f"%v{n}" if self.gen.coin(0.1) else f"%{n}"
        keyword = "let " if ref.startswith("%v") else ""
        self.lines.append(f"{'  ' * self.indent}{keyword}{ref} = {expr};")
        value = Value(ref, tuple(shape), dtype, depth)
        self.note(value)
        self.scope.append(value)
        return value

    def bind_tuple(self, expr: str, fields: Sequence[TensorType], depths: Sequence[int | None],
                   keep: Sequence[int] | None = None) -> list[Value]:
        """Bind a tuple-valued ``expr``; fields (those in ``keep``) enter scope as ``%N.i``."""
        self.func.used.update(_REF.findall(expr))
        n = next(self.func.counter)
        self.lines.append(f"{'  ' * self.indent}%{n} = {expr};")
        out = []
        for i, (t, depth) in enumerate(zip(fields, depths)):
            if keep is not None and i not in keep:
                continue
            value = Value(f"%{n}.{i}", t.shape, t.dtype, depth)
            self.note(value)
            self.scope.append(value)
            out.append(value)
        return out

    def note(self, value: Value) -> None:
        """Every dim of a value must be >= 0 under an assignment (a check of the generator)."""
        for d in value.shape:
            if not isinstance(d, int) and self.evaluable(d):
                self.func.constraints.append(AtLeast(d, 0))

    # --- choosing operands ------------------------------------------------------------------
    def leaves(self) -> list[Value]:
        """Values bound here that nothing reads yet (what the result should include, or the
        interpreter and the VM would skip them as dead code)."""
        params = {"%" + p.name for p in self.func.params + self.func.extra}
        return [v for v in self.scope if v.ref not in self.func.used and v.ref not in params]

    def values(self, pred: Callable[[Value], bool] = lambda v: True) -> list[Value]:
        return [v for v in self.scope if pred(v)]

    def choose(self, pred: Callable[[Value], bool] = lambda v: True) -> Value | None:
        """A value in scope satisfying ``pred`` (drawn), or None if there is none."""
        options = self.values(pred)
        return self.gen.pick(options) if options else None

    # --- dims -------------------------------------------------------------------------------
    def evaluable(self, d: Dim) -> bool:
        """True if ``d`` has a value under every assignment (no run-time-only symbols)."""
        return not (D.free_symbols(d) & self.func.opaque)

    def require(self, d: Dim, least: int) -> bool:
        """Record ``d >= least``; False (and nothing recorded) if ``d`` cannot reach it."""
        if isinstance(d, int):
            return d >= least
        if not self.evaluable(d) or not self._reachable(d, least):
            return False
        self._raise_bounds(d, least)
        self.func.constraints.append(AtLeast(d, least))
        return True

    def require_broadcast(self, a: Dim, b: Dim) -> bool:
        """Record that ``a`` and ``b`` broadcast at run time (one of them a bare symbol)."""
        bare = [d for d in (a, b) if bare_symbol(d) is not None]
        if not bare or not self.evaluable(a) or not self.evaluable(b):
            return False
        self.func.constraints.append(Broadcastable(a, b))
        return True

    def _reachable(self, d: Dim, least: int) -> bool:
        env = {sym_key(s): self.gen.config.max_value for s in D.free_symbols(d)}
        try:
            return evaluate(d, env) >= least
        except (ValueError, ZeroDivisionError):
            return False

    def _raise_bounds(self, d: Dim, least: int) -> None:
        """Raise the lower bounds of ``d``'s symbols until ``d`` reaches ``least`` (dims grow
        with their symbols for every op the generator uses)."""
        syms = D.free_symbols(d)
        lower = self.func.lower
        for floor in range(self.gen.config.max_value + 1):
            env = {sym_key(s): max(lower.get(s, 0), floor) for s in syms}
            try:
                if evaluate(d, env) >= least:
                    break
            except (ValueError, ZeroDivisionError):
                continue
        for s in syms:
            lower[s] = max(lower.get(s, 0), floor)

    def new_dim(self, allow_new_symbol: bool = True) -> Dim:
        """A dim for a new param: small static, or a symbol of this function."""
        func = self.func
        symbols = [D.as_expr(s) for s in func.used_symbols]
        if allow_new_symbol:
            symbols += [D.as_expr(s) for s in func.symbols if s not in func.used_symbols][:1]
        d = self.gen.pick(symbols if symbols and self.gen.coin(0.5) else [3, 1, 2, 4])
        sym = bare_symbol(d)
        if sym is not None and sym not in func.used_symbols:
            func.used_symbols.append(sym)
        return d

    # --- params -----------------------------------------------------------------------------
    def new_param(self, shape: Sequence[Dim], dtype: str, prefix: str = "w",
                  positive: bool = False) -> Value | None:
        """A new parameter of ``shape`` (a weight, a bias); None if a dim has no known value."""
        if not all(self.evaluable(d) for d in shape):
            return None
        func = self.func
        name = f"{prefix}{len(func.params) + len(func.extra)}"
        param = Param(name, tuple(shape), dtype, positive)
        (func.params if func.is_main else func.extra).append(param)
        value = Value("%" + name, param.shape, dtype, 0)
        self.scope.append(value)
        return value


def bare_symbol(d: Dim) -> D.Sym | None:
    """The symbol if ``d`` is exactly one named or anonymous symbol, else None."""
    if isinstance(d, int) or len(d.terms) != 1:
        return None
    (mono, coeff), = d.terms
    if coeff == 1 and len(mono) == 1 and isinstance(mono[0], D.Sym):
        return mono[0]
    return None



def tuple_fields(t: Type | None) -> tuple[TensorType, ...] | None:
    """The tensor fields of a tuple type, or None."""
    if isinstance(t, TupleType) and all(isinstance(f, TensorType) for f in t.fields):
        return t.fields  # type: ignore[return-value]
    return None
