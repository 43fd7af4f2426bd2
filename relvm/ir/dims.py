"""Symbolic dimensions: integer expressions over named and anonymous shape symbols.

A dimension (``Dim``) is either a Python ``int`` or a :class:`DimExpr`. A ``DimExpr`` is kept in
one canonical form -- a sum of monomials with integer coefficients over *atoms* -- so two
expressions that are equal as polynomials compare equal and print the same:

>>> n = Sym("n")
>>> (n * 12) // 4
n*3
>>> n + 1 - 1
n

Atoms are symbols (:class:`Sym`), floor divisions and remainders that did not simplify, and the
run-time-only ``max``/``min``/broadcast of two dims. Symbols stand for non-negative integers.
Anonymous symbols (the ``?`` of the text format, and dims only known at run time, like the length
of an ``argwhere`` result) print as ``?``; so does any expression containing one.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from typing import Callable, Iterable, Iterator, Mapping, Union

Dim = Union[int, "DimExpr"]

#: The most terms one dim may have, and atoms in one of its monomials. A program's dims are short
#: sums (``n*3 + 2``); the bounds stop a written product of sums from growing exponentially
#: (``(a+b)*(c+d)*...``). Part of relvm's limits (``relvm.ir.limits``).
MAX_TERMS = 256
MAX_DEGREE = 64


class DimTooLarge(ValueError):
    """A dim past ``MAX_TERMS`` or ``MAX_DEGREE``."""

_anon_ids = itertools.count(1)


class Atom:
    """A factor of a monomial. Subclasses define ``key`` (canonical string) and ``text``."""

    __slots__ = ("key",)
    key: str

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Atom):
            return self.key == other.key
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return self.key

    # Subclasses override these three.
    def text(self) -> str:
        raise NotImplementedError

    def is_expressible(self) -> bool:
        """True if the text format can spell this atom (no anonymous parts)."""
        raise NotImplementedError

    def children(self) -> tuple[Dim, ...]:
        return ()


class Sym(Atom):
    """A shape symbol. Named symbols are equal by name; anonymous ones only to themselves."""

    __slots__ = ("name", "anonymous", "uid")

    def __init__(self, name: str, anonymous: bool = False, uid: int = 0):
        self.name = name
        self.anonymous = anonymous
        self.uid = uid
        self.key = f"?#{uid}" if anonymous else name

    def text(self) -> str:
        return "?" if self.anonymous else self.name

    def is_expressible(self) -> bool:
        return not self.anonymous

    # A Sym is usable directly in arithmetic: Sym("n") * 2 == DimExpr n*2.
    def __add__(self, o): return as_expr(self) + o
    def __radd__(self, o): return o + as_expr(self)
    def __sub__(self, o): return as_expr(self) - o
    def __rsub__(self, o): return o - as_expr(self)
    def __mul__(self, o): return as_expr(self) * o
    def __rmul__(self, o): return o * as_expr(self)
    def __neg__(self): return -as_expr(self)
    def __floordiv__(self, o): return floordiv(self, o)
    def __mod__(self, o): return mod(self, o)


#: The ``?`` of a type annotation as parsed. Type inference replaces every occurrence in a
#: function's parameters with a fresh anonymous symbol, so two ``?`` are never assumed equal.
ANY = Sym("?", anonymous=True, uid=0)


def fresh(hint: str = "?") -> Sym:
    """A new anonymous symbol (prints as ``?``)."""
    return Sym(hint, anonymous=True, uid=next(_anon_ids))


class _Binary(Atom):
    """An atom combining two dims that did not simplify: floordiv, mod, max, min, broadcast."""

    __slots__ = ("a", "b")
    op = ""

    def __init__(self, a: Dim, b: Dim):
        self.a = a
        self.b = b
        self.key = f"{self.op}({dim_key(a)},{dim_key(b)})"

    def children(self) -> tuple[Dim, ...]:
        return (self.a, self.b)

    def is_expressible(self) -> bool:
        return is_expressible(self.a) and is_expressible(self.b)


class FloorDivAtom(_Binary):
    __slots__ = ()
    op = "div"

    def text(self) -> str:
        return f"{_paren(self.a)}/{_paren(self.b)}"


class ModAtom(_Binary):
    __slots__ = ()
    op = "mod"

    def text(self) -> str:
        return f"{_paren(self.a)}%{_paren(self.b)}"


class MaxAtom(_Binary):
    __slots__ = ()
    op = "max"

    def text(self) -> str:
        return f"max({dim_str(self.a)}, {dim_str(self.b)})"


class MinAtom(_Binary):
    __slots__ = ()
    op = "min"

    def text(self) -> str:
        return f"min({dim_str(self.a)}, {dim_str(self.b)})"


class BroadcastAtom(_Binary):
    """NumPy's broadcast of two dims neither of which is known to be 1 or equal to the other.

    At run time it is ``a`` if ``a == b`` or ``b == 1``, ``b`` if ``a == 1``, and an error otherwise.
    """

    __slots__ = ()
    op = "bcast"

    def text(self) -> str:
        return "?"

    def is_expressible(self) -> bool:
        return False


Monomial = tuple  # tuple[Atom, ...], sorted by key; () is the constant monomial


class DimExpr:
    """A canonical polynomial over atoms. Immutable; build it through arithmetic on Syms."""

    __slots__ = ("terms", "_key")

    def __init__(self, terms: tuple[tuple[Monomial, int], ...]):
        self.terms = terms
        self._key: str | None = None

    # --- identity -------------------------------------------------------------------------
    @property
    def key(self) -> str:
        if self._key is None:
            self._key = "+".join(
                f"{c}*" + "*".join(a.key for a in m) if m else str(c) for m, c in self.terms
            )
        return self._key

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DimExpr):
            return self.key == other.key
        if isinstance(other, Sym):
            return self.key == as_expr(other).key
        return False

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return dim_str(self)

    # --- arithmetic -----------------------------------------------------------------------
    def __add__(self, other: object) -> Dim:
        o = _coerce(other)
        if o is None:
            return NotImplemented
        return _from_dict(_merge(_as_dict(self), _as_dict(o), 1))

    def __radd__(self, other: object) -> Dim:
        return self.__add__(other)

    def __sub__(self, other: object) -> Dim:
        o = _coerce(other)
        if o is None:
            return NotImplemented
        return _from_dict(_merge(_as_dict(self), _as_dict(o), -1))

    def __rsub__(self, other: object) -> Dim:
        o = _coerce(other)
        if o is None:
            return NotImplemented
        return _from_dict(_merge(_as_dict(o), _as_dict(self), -1))

    def __neg__(self) -> Dim:
        return _from_dict({m: -c for m, c in self.terms})

    def __mul__(self, other: object) -> Dim:
        o = _coerce(other)
        if o is None:
            return NotImplemented
        out: dict[Monomial, int] = {}
        left, right = _as_dict(self), _as_dict(o)
        if len(left) * len(right) > MAX_TERMS * MAX_TERMS:
            raise DimTooLarge(f"a product of dims with {len(left)} and {len(right)} terms is "
                              f"over relvm's limit of {MAX_TERMS} terms")
        for m1, c1 in left.items():
            for m2, c2 in right.items():
                if len(m1) + len(m2) > MAX_DEGREE:
                    raise DimTooLarge(f"a product of more than {MAX_DEGREE} dims in one term "
                                      "is over relvm's limit")
                m = tuple(sorted(m1 + m2, key=lambda a: a.key))
                out[m] = out.get(m, 0) + c1 * c2
        return _from_dict(out)

    def __rmul__(self, other: object) -> Dim:
        return self.__mul__(other)

    def __floordiv__(self, other: object) -> Dim:
        return floordiv(self, other)

    def __rfloordiv__(self, other: object) -> Dim:
        return floordiv(other, self)

    def __mod__(self, other: object) -> Dim:
        return mod(self, other)

    def __rmod__(self, other: object) -> Dim:
        return mod(other, self)


# --- canonical-form helpers -------------------------------------------------------------------

def _coerce(x: object) -> Dim | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, Sym):
        return as_expr(x)
    if isinstance(x, DimExpr):
        return x
    return None


def as_expr(x: Dim | Atom) -> DimExpr:
    """Wrap an int or atom as a DimExpr (no simplification to int)."""
    if isinstance(x, DimExpr):
        return x
    if isinstance(x, Atom):
        return DimExpr((((x,), 1),))
    return DimExpr(((((), int(x)),) if x else ()))


def _as_dict(x: Dim) -> dict[Monomial, int]:
    if isinstance(x, int):
        return {(): x} if x else {}
    return dict(x.terms)


def _merge(a: dict, b: dict, sign: int) -> dict:
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, 0) + sign * c
    return out


def _mono_key(m: Monomial) -> tuple:
    # Higher degree first, then by atom keys; the constant monomial last.
    return (0 if m else 1, -len(m), tuple(a.key for a in m))


def _from_dict(d: Mapping[Monomial, int]) -> Dim:
    if len(d) > MAX_TERMS and sum(1 for c in d.values() if c) > MAX_TERMS:
        raise DimTooLarge(f"a dim of more than {MAX_TERMS} terms is over relvm's limit")
    terms = tuple(sorted(((m, c) for m, c in d.items() if c), key=lambda t: _mono_key(t[0])))
    if not terms:
        return 0
    if len(terms) == 1 and terms[0][0] == ():
        return terms[0][1]
    return DimExpr(terms)


def _atom_dim(atom: Atom) -> DimExpr:
    return DimExpr((((atom,), 1),))


# --- operations that may not stay polynomial --------------------------------------------------

def _single_term(x: Dim) -> tuple[Monomial, int] | None:
    d = _as_dict(x)
    return next(iter(d.items())) if len(d) == 1 else None


def _exact_divide(num: Dim, den: Dim) -> Dim | None:
    """num / den when den is a single term dividing every term of num exactly; else None."""
    t = _single_term(den)
    if t is None:
        return None
    dm, dc = t
    out: dict[Monomial, int] = {}
    for m, c in _as_dict(num).items():
        rest = list(m)
        for a in dm:
            if a not in rest:
                return None
            rest.remove(a)
        if c % dc:
            return None
        out[tuple(rest)] = out.get(tuple(rest), 0) + c // dc
    return _from_dict(out)


def floordiv(a: Dim | Sym, b: Dim | Sym) -> Dim:
    """Floor division, simplified where it is exact for every value of the symbols."""
    a = _coerce(a)
    b = _coerce(b)
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("dimension divided by zero")
        return a // b
    if b == 1:
        return a
    exact = _exact_divide(a, b)
    if exact is not None:
        return exact
    if isinstance(b, int) and b > 0:
        # a = b*q + r with every coefficient of r in [0, b): floor(a/b) = q + floor(r/b).
        q: dict[Monomial, int] = {}
        r: dict[Monomial, int] = {}
        for m, c in _as_dict(a).items():
            qc, rc = divmod(c, b)
            if qc:
                q[m] = qc
            if rc:
                r[m] = rc
        rest = _from_dict(r)
        if isinstance(rest, int):
            return _from_dict(q) + rest // b
        if len(d := _as_dict(rest)) == 1:
            (m, c), = d.items()
            if len(m) == 1 and isinstance(m[0], FloorDivAtom) and c == 1 \
                    and isinstance(m[0].b, int) and m[0].b > 0:
                # (x / c1) / c2 == x / (c1*c2) for positive divisors.
                return _from_dict(q) + floordiv(m[0].a, m[0].b * b)
        return _from_dict(q) + _atom_dim(FloorDivAtom(rest, b))
    return _atom_dim(FloorDivAtom(a, b))


def ceildiv(a: Dim, b: Dim) -> Dim:
    """Ceiling division ``ceil(a / b)`` for positive ``b``."""
    return floordiv(a + b - 1, b)


def mod(a: Dim | Sym, b: Dim | Sym) -> Dim:
    """Remainder with the sign of the divisor (Python's ``%``), simplified where exact."""
    a = _coerce(a)
    b = _coerce(b)
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("dimension modulo zero")
        return a % b
    if b == 1 or _exact_divide(a, b) is not None:
        return 0
    if isinstance(b, int) and b > 0:
        r = _from_dict({m: c % b for m, c in _as_dict(a).items()})
        if isinstance(r, int):
            return r % b
        return _atom_dim(ModAtom(r, b))
    return _atom_dim(ModAtom(a, b))


def dim_max(a: Dim | Sym, b: Dim | Sym) -> Dim:
    return _extreme(MaxAtom, _coerce(a), _coerce(b))


def dim_min(a: Dim | Sym, b: Dim | Sym) -> Dim:
    return _extreme(MinAtom, _coerce(a), _coerce(b))


def _extreme(kind: type, a: Dim, b: Dim) -> Dim:
    """max (``MaxAtom``) or min of ``a`` and ``b``: nested ones are flattened and an operand
    that another provably bounds is dropped, so ``max(max(x, y), x)`` is ``max(x, y)`` (memory
    planning takes the max of every size a buffer holds)."""
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b) if kind is MaxAtom else min(a, b)
    sign = 1 if kind is MaxAtom else -1
    kept: list[Dim] = []
    for x in _operands(kind, a) + _operands(kind, b):
        if any(prove_nonnegative(sign * (y - x)) for y in kept):
            continue  # y is at least as extreme as x, for every value
        kept = [y for y in kept if not prove_nonnegative(sign * (x - y))] + [x]
    kept.sort(key=dim_key)
    out = kept[0]
    for x in kept[1:]:
        out = _atom_dim(kind(*sorted((out, x), key=dim_key)))
    return out


def _operands(kind: type, x: Dim) -> list[Dim]:
    """The operands of a max (min) ``x``, nested ones flattened; ``[x]`` for anything else."""
    t = None if isinstance(x, int) else _single_term(x)
    if t is None or t[1] != 1 or len(t[0]) != 1 or not isinstance(t[0][0], kind):
        return [x]
    return [o for ch in t[0][0].children() for o in _operands(kind, ch)]


def broadcast(a: Dim | Sym, b: Dim | Sym) -> Dim:
    """NumPy broadcasting of two dims, symbolically.

    Raises ValueError when both are known and incompatible. Where the answer depends on run-time
    values the result is a broadcast atom that the VM evaluates (and checks) when it runs.
    """
    a, b = _coerce(a), _coerce(b)
    if prove_equal(a, b):
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, int) and isinstance(b, int):
        raise ValueError(f"dims {a} and {b} do not broadcast")
    assume("broadcast", a, b)
    if isinstance(a, int):
        return a  # b must be 1 or a at run time; a is the answer either way
    if isinstance(b, int):
        return b
    if _capped(b, a):
        return a
    if _capped(a, b):
        return b
    return _atom_dim(BroadcastAtom(*sorted((a, b), key=dim_key)))


def _capped(x: Dim, y: Dim) -> bool:
    """True if ``x`` is ``min(y, k)`` for a number ``k >= 1`` (a slice of a table of ``k``
    positions up to a length ``y``). Broadcasting ``y`` against it gives ``y`` whenever the
    two broadcast at all: ``x`` is 1 (the result is ``y``), or ``y`` is 1 (so is ``x``), or
    they are equal."""
    t = _single_term(x)
    if t is None or t[1] != 1 or len(t[0]) != 1 or not isinstance(t[0][0], MinAtom):
        return False
    p, q = t[0][0].children()
    return any(isinstance(k, int) and k >= 1 and prove_equal(other, y)
               for k, other in ((p, q), (q, p)))


# --- queries ------------------------------------------------------------------------------------

def dim_key(x: Dim) -> str:
    if isinstance(x, int):
        return str(x)
    return x.key


def is_static(x: Dim) -> bool:
    return isinstance(x, int)


def prove_equal(a: Dim, b: Dim) -> bool | None:
    """True if equal for every symbol value, False if never equal, None if it depends."""
    diff = _coerce(a) - _coerce(b)
    if isinstance(diff, int):
        return diff == 0
    return None


# --- assumptions: what type inference accepted without proof ----------------------------------------

#: ``("equal", a, b)``: a == b; ``("broadcast", a, b)``: a and b broadcast (equal, or one is 1);
#: ``("le", a, b)``: a <= b (an index within a length, a window within its padded input).
Assumption = tuple
_assumed: contextvars.ContextVar[list | None] = contextvars.ContextVar("assumed", default=None)


@contextlib.contextmanager
def assumptions() -> Iterator[list[Assumption]]:
    """Collect the assumptions made while the block runs (type relations call :func:`assume`).

    Type inference accepts dims it cannot compare (``k`` vs ``16``) and records each such
    assumption; the compiler checks every one at run time, before anything relies on it.
    """
    found: list[Assumption] = []
    token = _assumed.set(found)
    try:
        yield found
    finally:
        _assumed.reset(token)


def assume(kind: str, a: Dim, b: Dim) -> None:
    """Record that inference went on assuming ``a`` and ``b`` are equal (``kind`` "equal") or
    broadcast ("broadcast"); nothing to record when it is provable either way."""
    found = _assumed.get()
    if found is None or prove_equal(a, b) is not None:
        return
    if kind == "broadcast" and (a == 1 or b == 1):
        return
    found.append((kind, a, b))


#: The dim-program statement (``runtime/bytecode/dimprog.py``) that checks each assumption kind.
ASSUMPTION_STATEMENTS = {"equal": "check", "broadcast": "broadcast", "le": "le"}


def equal_or_assumed(a: Dim, b: Dim) -> bool:
    """False when ``a`` and ``b`` provably differ; else True, recording the assumption that
    they are equal when that depends on run-time values."""
    proof = prove_equal(a, b)
    if proof is None:
        assume("equal", a, b)
    return proof is not False


def at_most(a: Dim, b: Dim) -> bool:
    """False when ``a > b`` for every value of the symbols; else True, recording the assumption
    ``a <= b`` when that depends on run-time values. Relations use it for every bound a kernel's
    memory accesses rely on (gather's indices no longer than its data, a window within its
    padded input), so that it is checked at run time, not skipped for symbolic dims."""
    a, b = _coerce(a), _coerce(b)
    if prove_nonnegative(b - a):
        return True
    if prove_nonnegative(a - b - 1):
        return False
    found = _assumed.get()
    if found is not None:
        found.append(("le", a, b))
    return True


def prove_nonnegative(x: Dim) -> bool:
    """True if ``x >= 0`` for every value of its symbols (which are dims: never negative).

    Sufficient, not complete: every coefficient non-negative and every atom provably
    non-negative (``n*65536 - n*128`` is, ``n - 1`` is not).
    """
    if isinstance(x, int):
        return x >= 0
    return all(c >= 0 and all(_atom_nonnegative(a) for a in m) for m, c in x.terms)


def _atom_nonnegative(a: Atom) -> bool:
    if isinstance(a, Sym):
        return True
    x, y = a.children()
    if isinstance(a, (FloorDivAtom, ModAtom)):
        return prove_nonnegative(x) and isinstance(y, int) and y > 0 or (
            prove_nonnegative(x) and prove_nonnegative(y))
    if isinstance(a, MaxAtom):  # max(x, y) >= x and >= y
        return prove_nonnegative(x) or prove_nonnegative(y)
    return prove_nonnegative(x) and prove_nonnegative(y)


def upper_bound(x: Dim, bounds: Mapping[Sym, int]) -> int | None:
    """The largest value ``x`` takes with each symbol in ``[0, bounds[symbol]]``, or None when
    a symbol has no bound (interval arithmetic: never below the true maximum)."""
    interval = _interval(_coerce(x), bounds)
    return None if interval is None else interval[1]


def _interval(x: Dim, bounds: Mapping[Sym, int]) -> tuple[int, int] | None:
    if isinstance(x, int):
        return (x, x)
    lo = hi = 0
    for mono, c in x.terms:
        term = (c, c)
        for a in mono:
            iv = _atom_interval(a, bounds)
            if iv is None:
                return None
            products = [term[0] * iv[0], term[0] * iv[1], term[1] * iv[0], term[1] * iv[1]]
            term = (min(products), max(products))
        lo, hi = lo + term[0], hi + term[1]
    return (lo, hi)


def _atom_interval(a: Atom, bounds: Mapping[Sym, int]) -> tuple[int, int] | None:
    if isinstance(a, Sym):
        return (0, bounds[a]) if a in bounds else None
    x, y = (_interval(ch, bounds) for ch in a.children())
    if x is None or y is None:
        return None
    if isinstance(a, FloorDivAtom):
        if y[0] <= 0:
            return None
        q = [x[0] // y[0], x[0] // y[1], x[1] // y[0], x[1] // y[1]]
        return (min(q), max(q))
    if isinstance(a, ModAtom):
        if y[0] <= 0:
            return None
        return (0, min(y[1] - 1, x[1]) if x[0] >= 0 else y[1] - 1)
    if isinstance(a, MaxAtom):
        return (max(x[0], y[0]), max(x[1], y[1]))
    if isinstance(a, MinAtom):
        return (min(x[0], y[0]), min(x[1], y[1]))
    return (min(x[0], y[0]), max(x[1], y[1]))  # broadcast: one side or the other


def atoms(x: Dim) -> Iterable[Atom]:
    """Every atom in ``x``, recursively (atoms of atoms too)."""
    if isinstance(x, int):
        return
    for m, _ in x.terms:
        for a in m:
            yield a
            for ch in a.children():
                yield from atoms(ch)


def free_symbols(x: Dim) -> set[Sym]:
    return {a for a in atoms(x) if isinstance(a, Sym)}


def is_expressible(x: Dim) -> bool:
    """True if the text format can spell ``x`` (it contains no anonymous or run-time-only part)."""
    if isinstance(x, int):
        return True
    return all(a.is_expressible() for m, _ in x.terms for a in m)


def _apply_atom(atom: Atom, f) -> Dim:
    """Rebuild ``atom`` with ``f`` applied to each Sym; re-simplifies the result."""
    if isinstance(atom, Sym):
        return f(atom)
    a, b = (map_symbols(ch, f) for ch in atom.children())
    if isinstance(atom, FloorDivAtom):
        return floordiv(a, b)
    if isinstance(atom, ModAtom):
        return mod(a, b)
    if isinstance(atom, MaxAtom):
        return dim_max(a, b)
    if isinstance(atom, MinAtom):
        return dim_min(a, b)
    if isinstance(atom, BroadcastAtom):
        return broadcast(a, b)
    raise AssertionError(f"unknown atom {atom!r}")


class NotInProgram(ValueError):
    """A symbol a dim program cannot read (:func:`program_expr`); its text is the message."""


def program_expr(d: Dim, known: Callable[[Dim], tuple | None]) -> tuple:
    """``d`` as a dim-program expression (``runtime/bytecode/dimprog.py``'s grammar).

    ``known(x)`` gives the expression of a dim the program already has -- a slot, an operand's
    shape -- or None; every symbol of ``d`` must be one (else :class:`NotInProgram`). The
    compiler states a function's dims over its slots with it, the VM a kernel's operand
    relation over the operands' shapes.
    """
    if isinstance(d, int):
        return ("const", d)
    whole = known(d)
    if whole is not None:
        return whole
    total: tuple | None = None
    for mono, coeff in d.terms:
        term: tuple = ("const", coeff)
        for atom in mono:
            if isinstance(atom, Sym):
                factor = known(as_expr(atom))
                if factor is None:
                    raise NotInProgram(atom.text())
            else:
                a, b = atom.children()
                factor = (_PROGRAM_OPS[type(atom)], program_expr(a, known),
                          program_expr(b, known))
            term = factor if term == ("const", 1) else ("mul", term, factor)
        total = term if total is None else ("add", total, term)
    return total if total is not None else ("const", 0)


_PROGRAM_OPS = {FloorDivAtom: "floordiv", ModAtom: "mod", MaxAtom: "max", MinAtom: "min",
                BroadcastAtom: "bcast"}


def map_symbols(x: Dim, f) -> Dim:
    """Replace each symbol ``s`` in ``x`` by ``f(s)`` (a Dim) and re-simplify."""
    if isinstance(x, int):
        return x
    total: Dim = 0
    for m, c in x.terms:
        term: Dim = c
        for a in m:
            term = _coerce(term) * _coerce(_apply_atom(a, f))
        total = _coerce(total) + _coerce(term)
    return total


def substitute(x: Dim, mapping: Mapping[Sym, Dim]) -> Dim:
    return map_symbols(x, lambda s: mapping.get(s, s))


def evaluate(x: Dim, env: Mapping[Sym, int]) -> int:
    """The value of ``x`` given a value for each of its symbols. Raises KeyError/ValueError."""
    if isinstance(x, int):
        return x
    total = 0
    for m, c in x.terms:
        term = c
        for a in m:
            term *= _eval_atom(a, env)
        total += term
    return total


def _eval_atom(a: Atom, env: Mapping[Sym, int]) -> int:
    if isinstance(a, Sym):
        return env[a]
    x, y = (evaluate(ch, env) for ch in a.children())
    if isinstance(a, FloorDivAtom):
        return x // y
    if isinstance(a, ModAtom):
        return x % y
    if isinstance(a, MaxAtom):
        return max(x, y)
    if isinstance(a, MinAtom):
        return min(x, y)
    if isinstance(a, BroadcastAtom):
        if x == y or y == 1:
            return x
        if x == 1:
            return y
        raise ValueError(f"dims {x} and {y} do not broadcast")
    raise AssertionError(f"unknown atom {a!r}")


# --- printing -------------------------------------------------------------------------------------

def _mono_str(m: Monomial, c: int, negated: bool = False) -> str:
    """A monomial as the grammar reads it back: ``*``, ``/`` and ``%`` share one precedence
    level and group to the left, and unary minus binds tighter than all three, so a floordiv or
    mod with anything before it -- a factor or the minus -- keeps its parentheses (``n*(m/2)``,
    not ``n*m/2``; ``-(n/2)``, not ``-n/2``, which reads as ``(-n)/2``)."""
    sign = "-" if negated else ""
    if not m:
        return f"{sign}{c}"
    body = "*".join(f"({a.text()})" if isinstance(a, (FloorDivAtom, ModAtom)) and (i or negated)
                    else a.text() for i, a in enumerate(m))
    return sign + (body if c == 1 else f"{body}*{c}")


def dim_str(x: Dim) -> str:
    """Text form: ``n*2 + 1``; ``?`` when the dim involves anything anonymous. The parser reads
    the text back to the same value for every assignment of the symbols."""
    if isinstance(x, int):
        return str(x)
    if not is_expressible(x):
        return "?"
    out = ""
    for i, (m, c) in enumerate(x.terms):
        if i == 0:
            out = _mono_str(m, abs(c), negated=c < 0)
        else:
            out = f"{out} {'-' if c < 0 else '+'} {_mono_str(m, abs(c))}"
    return out


def _paren(x: Dim) -> str:
    s = dim_str(x)
    if isinstance(x, int) and x >= 0:
        return s
    if isinstance(x, DimExpr) and len(x.terms) == 1 and x.terms[0][1] == 1 and len(x.terms[0][0]) == 1:
        return s
    return f"({s})"


def shape_str(shape: Iterable[Dim]) -> str:
    """``(n, 784)``; a 1-d shape prints as Relay printed it, ``(n)``."""
    return "(" + ", ".join(dim_str(d) for d in shape) + ")"
