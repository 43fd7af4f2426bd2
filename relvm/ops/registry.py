"""The op registry: one entry per primitive op, from which every later stage reads.

An entry (:class:`Op`) gives the op's Relay name, its inputs, its attribute schema (names, kinds,
defaults), its type relation (argument types and attrs -> result type, over symbolic dims), its
NumPy reference implementation (the living definition of what the op computes, and the oracle of
every test), and its fusion pattern.

Type relations raise :class:`OpTypeError` with a message that names the op's inputs; type
inference adds the op name and the source location.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .. import dtypes
from ..ir.limits import fits_int64
from ..ir.nodes import Attrs
from ..ir.types import Type

# Fusion patterns, in TVM's order of "fusability".
ELEMWISE = "elemwise"      # out[i] = f(in[i])
BROADCAST = "broadcast"    # elementwise with NumPy broadcasting
INJECTIVE = "injective"    # each output element reads one input element (reshape, transpose)
REDUCE = "reduce"          # reductions
OUT_FUSABLE = "out_fusable"  # dense/conv/matmul: elementwise epilogues fuse into them
OPAQUE = "opaque"          # never fused

PATTERNS = (ELEMWISE, BROADCAST, INJECTIVE, REDUCE, OUT_FUSABLE, OPAQUE)


class OpTypeError(Exception):
    """Raised by a type relation; type inference turns it into a located RelvmTypeError."""


class AttrError(Exception):
    """Raised for an unknown attribute or a value of the wrong kind; ``attr`` names it."""

    def __init__(self, message: str, attr: str | None = None):
        super().__init__(message)
        self.attr = attr


# --- attribute kinds ----------------------------------------------------------------------------

@dataclass(frozen=True)
class AttrKind:
    """A kind of attribute value: ``convert`` returns the normalized value or raises ValueError."""

    name: str  # for messages: "an int", "a list of ints"
    convert: Callable[[Any], Any]


class _OutOfRange(ValueError):
    """A value of the right kind past relvm's limits; the message says which."""


def _show(v: Any) -> str:
    """``repr(v)`` for a message, cut to its ends if long (an int of 10,000 digits, a list)."""
    try:
        text = repr(v)
    except ValueError:  # an int past Python's digit limit for str()
        return "a number too long to print"
    return text if len(text) <= 60 else f"{text[:40]}...{text[-12:]} ({len(text)} characters)"


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError
    if not fits_int64(v):
        raise _OutOfRange(f"{_show(v)} is past int64, the range of integer attributes")
    return v


def _float(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError
    try:
        return float(v)
    except OverflowError:
        raise _OutOfRange(f"{_show(v)} is past the range of a float64") from None


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError
    return v


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError
    return v


def _ints(v: Any) -> tuple[int, ...]:
    if not isinstance(v, (list, tuple)):
        raise ValueError
    return tuple(_int(x) for x in v)


def _floats(v: Any) -> tuple[float, ...]:
    if not isinstance(v, (list, tuple)):
        raise ValueError
    return tuple(_float(x) for x in v)


def _optional(f: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else f(v)


def _int_or_ints(v: Any) -> int | tuple[int, ...]:
    return _ints(v) if isinstance(v, (list, tuple)) else _int(v)


def _dtype(v: Any) -> str:
    if not dtypes.is_dtype(v):
        raise ValueError
    return v


def _dtype_or_empty(v: Any) -> str:
    return "" if v == "" else _dtype(v)


def _nested_ints(v: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(v, (list, tuple)):
        raise ValueError
    return tuple(_ints(x) for x in v)


def choice(*options: str) -> AttrKind:
    """A string attribute restricted to ``options`` (e.g. layouts relvm implements)."""
    def convert(v: Any) -> str:
        if v not in options:
            raise ValueError
        return v
    return AttrKind("one of " + ", ".join(repr(o) for o in options), convert)


INT = AttrKind("an int", _int)
FLOAT = AttrKind("a number", _float)
BOOL = AttrKind("a bool", _bool)
STR = AttrKind("a string", _str)
DTYPE = AttrKind("a dtype name (" + ", ".join(dtypes.DTYPES) + ")", _dtype)
DTYPE_OR_EMPTY = AttrKind('a dtype name or ""', _dtype_or_empty)
OPT_INT = AttrKind("an int or None", _optional(_int))
OPT_FLOAT = AttrKind("a number or None", _optional(_float))
INTS = AttrKind("a list of ints", _ints)
FLOAT_LIST = AttrKind("a list of numbers", _floats)
OPT_INTS = AttrKind("a list of ints or None", _optional(_ints))
INT_OR_INTS = AttrKind("an int or a list of ints", _int_or_ints)
OPT_INT_OR_INTS = AttrKind("an int, a list of ints or None", _optional(_int_or_ints))
NESTED_INTS = AttrKind("a list of lists of ints", _nested_ints)


@dataclass(frozen=True)
class AttrSpec:
    name: str
    kind: AttrKind
    default: Any = None
    required: bool = False


def attr(name: str, kind: AttrKind, default: Any = None, required: bool = False) -> AttrSpec:
    """Declare one attribute of an op."""
    return AttrSpec(name, kind, default, required)


# --- ops ----------------------------------------------------------------------------------------

@dataclass(eq=False)
class Op:
    """A primitive op. Ops are singletons: compare them with ``is``."""

    name: str
    inputs: tuple[str, ...]
    attrs: tuple[AttrSpec, ...]
    infer: Callable[..., Type]
    reference: Callable[..., Any]
    pattern: str
    doc: str
    #: True when the output shape depends on input *values* (argwhere, arange, dyn.reshape).
    data_dependent: bool = False
    #: Inputs of a data-dependent op whose values decide the output shape.
    shape_inputs: tuple[int, ...] = field(default=())
    #: ``entry_attrs(attrs, *arg_types) -> dict``: the attributes a kernel entry of a call
    #: records, when its argument types fix one that its dtypes and ranks alone do not (a loaded
    #: file's entries are checked by those alone): gather_nd's index_rank. None: the call's.
    entry_attrs: Callable[..., dict] | None = None

    def __repr__(self) -> str:
        return f"Op({self.name})"

    @property
    def attr_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attrs)

    def make_attrs(self, given: Mapping[str, Any] | None = None) -> Attrs:
        """Validate ``given`` against the schema and fill in defaults.

        Raises AttrError naming the attribute; an unknown name suggests the closest one.
        """
        given = dict(given or {})
        specs = {a.name: a for a in self.attrs}
        for k in given:
            if k not in specs:
                near = difflib.get_close_matches(k, list(specs), n=1)
                hint = f"; did you mean {near[0]!r}?" if near else (
                    f"; it takes {', '.join(specs)}" if specs else "; it takes none")
                raise AttrError(f"{self.name} has no attribute {k!r}{hint}", k)
        out: dict[str, Any] = {}
        for a in self.attrs:
            if a.name not in given:
                if a.required:
                    raise AttrError(f"{self.name} needs attribute {a.name!r} ({a.kind.name})",
                                    a.name)
                out[a.name] = a.default
                continue
            v = given[a.name]
            try:
                out[a.name] = a.kind.convert(v)
            except _OutOfRange as e:
                raise AttrError(f"{self.name}: attribute {a.name!r} is out of range: {e}",
                                a.name) from None
            except (ValueError, TypeError):
                raise AttrError(f"{self.name}: attribute {a.name!r} expects {a.kind.name}, "
                                f"got {_show(v)}", a.name) from None
        return Attrs(out)

    def non_default_attrs(self, attrs: Attrs) -> dict[str, Any]:
        """The attributes that differ from their defaults (what the printer writes)."""
        return {a.name: attrs[a.name] for a in self.attrs
                if a.name in attrs and (a.required or attrs[a.name] != a.default)}


OPS: dict[str, Op] = {}


def register(name: str, *, inputs: Sequence[str], infer: Callable[..., Type],
             reference: Callable[..., Any], pattern: str, doc: str,
             attrs: Sequence[AttrSpec] = (), data_dependent: bool = False,
             shape_inputs: Sequence[int] = (), entry_attrs: Callable[..., dict] | None = None
             ) -> Op:
    """Add an op to the registry. ``infer(attrs, *arg_types)`` and ``reference(attrs, *arrays)``."""
    assert name not in OPS, f"op {name} registered twice"
    assert pattern in PATTERNS, pattern
    op = Op(name, tuple(inputs), tuple(attrs), infer, reference, pattern, doc,
            data_dependent, tuple(shape_inputs), entry_attrs)
    OPS[name] = op
    return op


def get_op(name: str) -> Op:
    """The op called ``name``. Raises KeyError with the nearest names as a hint."""
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(unknown_op_message(name)) from None


def unknown_op_message(name: str) -> str:
    near = difflib.get_close_matches(name, list(OPS), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    return f"unknown op {name!r}{hint}"
