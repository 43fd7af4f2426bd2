"""Types of the IR: tensors with symbolic shapes, tuples, lists of tensors, functions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Union

from .. import dtypes
from . import dims as D
from .dims import Dim


@dataclass(frozen=True)
class TensorType:
    """``Tensor[(d0, d1, ...), dtype]``; a scalar is a rank-0 tensor (printed as its dtype)."""

    shape: tuple[Dim, ...]
    dtype: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(normalize_dim(d) for d in self.shape))
        assert dtypes.is_dtype(self.dtype), self.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    def __str__(self) -> str:
        if not self.shape:
            return self.dtype
        return f"Tensor[{D.shape_str(self.shape)}, {self.dtype}]"


@dataclass(frozen=True)
class TupleType:
    """``(T1, T2, ...)``."""

    fields: tuple["Type", ...]

    def __str__(self) -> str:
        if len(self.fields) == 1:
            return f"({self.fields[0]},)"
        return "(" + ", ".join(str(f) for f in self.fields) + ")"


@dataclass(frozen=True)
class ListType:
    """``List[Tensor[(?, 3), float32]]``: a list of tensors, its length known at run time.

    Every element has the element type's dtype and rank; a dim that is a number is that number
    in every element, any other dim is ``?`` (each element has its own). Lists carry ONNX
    sequences; ``list.get`` gives an element a fresh ``?`` for each ``?`` dim.
    """

    elem: TensorType
    #: False for a list whose tensors' rank is not known (an ONNX sequence input declared
    #: without shapes): ``List[Tensor[..., float32]]``, ``elem`` then a scalar of the dtype.
    #: Such a list can be passed on, measured, grown and shrunk, not read.
    ranked: bool = True

    def __post_init__(self) -> None:
        assert isinstance(self.elem, TensorType), self.elem
        shape = tuple(d if isinstance(d, int) else D.ANY for d in self.elem.shape)
        object.__setattr__(self, "elem", TensorType(shape if self.ranked else (),
                                                    self.elem.dtype))

    @property
    def rank_code(self) -> int:
        """The element rank, -1 when not known (as list instructions encode it)."""
        return self.elem.ndim if self.ranked else -1

    def __str__(self) -> str:
        if not self.ranked:
            return f"List[Tensor[..., {self.elem.dtype}]]"
        return f"List[{self.elem}]"


@dataclass(frozen=True)
class FuncType:
    """``fn (T1, T2) -> T3``."""

    params: tuple["Type", ...]
    ret: "Type"

    def __str__(self) -> str:
        return "fn (" + ", ".join(str(p) for p in self.params) + f") -> {self.ret}"


Type = Union[TensorType, TupleType, ListType, FuncType]


def normalize_dim(d: object) -> Dim:
    if isinstance(d, bool):
        raise TypeError(f"not a dimension: {d!r}")
    if isinstance(d, int):
        return d
    if isinstance(d, D.Sym):
        return D.as_expr(d)
    if isinstance(d, D.DimExpr):
        return d
    raise TypeError(f"not a dimension: {d!r}")


def scalar(dtype: str) -> TensorType:
    return TensorType((), dtype)


def map_type_dims(t: Type, f) -> Type:
    """Apply ``f`` to every dim of every tensor type inside ``t``."""
    if isinstance(t, TensorType):
        return TensorType(tuple(f(d) for d in t.shape), t.dtype)
    if isinstance(t, TupleType):
        return TupleType(tuple(map_type_dims(x, f) for x in t.fields))
    if isinstance(t, ListType):
        return t  # its dims are numbers or ``?``: no symbol to map
    return FuncType(tuple(map_type_dims(p, f) for p in t.params), map_type_dims(t.ret, f))


def type_symbols(t: Type) -> set[D.Sym]:
    """Every named or anonymous symbol appearing in ``t``."""
    out: set[D.Sym] = set()
    map_type_dims(t, lambda d: (out.update(D.free_symbols(d)), d)[1])
    return out


def tensor_types(t: Type) -> Iterable[TensorType]:
    """The tensor types of ``t`` flattened in field order (a tensor yields itself)."""
    if isinstance(t, TensorType):
        yield t
    elif isinstance(t, TupleType):
        for f in t.fields:
            yield from tensor_types(f)
