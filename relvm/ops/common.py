"""Helpers shared by the type relations and references of every op module."""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from .. import dtypes
from ..ir import dims as D
from ..ir.dims import Dim
from ..ir.limits import MAX_RANK
from ..ir.types import TensorType, TupleType, Type
from .registry import OpTypeError


def fmt_shape(shape: Iterable[Dim]) -> str:
    return D.shape_str(shape)


def tensor_arg(t: Type, name: str) -> TensorType:
    """``t`` as a TensorType, or an OpTypeError naming the input."""
    if not isinstance(t, TensorType):
        raise OpTypeError(f"{name} must be a tensor, got {t}")
    return t


def tuple_arg(t: Type, name: str) -> tuple[TensorType, ...]:
    """``t`` as a tuple of tensors, or an OpTypeError naming the input."""
    if not isinstance(t, TupleType) or not all(isinstance(f, TensorType) for f in t.fields):
        raise OpTypeError(f"{name} must be a tuple of tensors, got {t}")
    return t.fields  # type: ignore[return-value]


def check_dtype(t: TensorType, name: str, allowed: Iterable[str], what: str) -> None:
    """Require ``t.dtype`` in ``allowed``; ``what`` describes the set ("a float dtype")."""
    if t.dtype not in allowed:
        raise OpTypeError(f"{name} must have {what}, got {t.dtype}")


def same_dtype(*named: tuple[str, TensorType]) -> str:
    """The common dtype of the named tensors, or an OpTypeError listing them."""
    first = named[0][1].dtype
    if any(t.dtype != first for _, t in named):
        desc = " vs ".join(f"{n} {t.dtype}" for n, t in named)
        raise OpTypeError(f"dtypes differ: {desc}")
    return first


def check_result_rank(ndim: int) -> None:
    """Refuse a result rank past relvm's limit before building a shape that long."""
    if ndim > MAX_RANK:
        raise OpTypeError(f"the result would have rank {ndim}; relvm's limit is {MAX_RANK}")


def check_rank(t: TensorType, name: str, ndim: int) -> None:
    if t.ndim != ndim:
        raise OpTypeError(f"{name} must have rank {ndim}, got {fmt_shape(t.shape)}")


def broadcast_shapes(*named: tuple[str, Sequence[Dim]]) -> tuple[Dim, ...]:
    """NumPy broadcasting over symbolic shapes, with an error naming both operands."""
    out: tuple[Dim, ...] = ()
    out_name = named[0][0]
    for name, shape in named:
        rank = max(len(out), len(shape))
        a = (1,) * (rank - len(out)) + tuple(out)
        b = (1,) * (rank - len(shape)) + tuple(shape)
        try:
            out = tuple(D.broadcast(x, y) for x, y in zip(a, b))
        except ValueError:
            prev = named[0][1] if len(named) == 2 else out
            raise OpTypeError(f"shapes do not broadcast: {out_name} {fmt_shape(prev)} vs "
                              f"{name} {fmt_shape(shape)}") from None
        out_name = "result" if name != named[0][0] else out_name
    return out


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """``axis`` in [0, ndim), accepting negatives as NumPy does."""
    if not -ndim <= axis < max(ndim, 1) or (ndim == 0 and axis not in (0, -1)):
        raise OpTypeError(f"{what} {axis} is out of range for rank {ndim}")
    return axis + ndim if axis < 0 else axis


def normalize_axes(axes: int | Sequence[int] | None, ndim: int, what: str = "axis") -> tuple[int, ...]:
    """A sorted tuple of distinct axes; None means all."""
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, int):
        axes = (axes,)
    out = tuple(normalize_axis(a, ndim, what) for a in axes)
    if len(set(out)) != len(out):
        raise OpTypeError(f"{what} {list(axes)} repeats an axis")
    return tuple(sorted(out))


def require(ok: bool, message: str) -> None:
    """A run-time shape check in a reference: the VM raises the same error."""
    if not ok:
        raise ValueError(message)


def acc_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dtype.kind == "f" else np.dtype(np.int64)


def out_dtype(attrs, dtype: str) -> str:
    """``out_dtype``, defaulting to the input dtype; a float/int switch is refused."""
    out = attrs.out_dtype or dtype
    if (out in FLOATS) != (dtype in FLOATS):
        raise OpTypeError(f"out_dtype {out} does not suit {dtype} inputs")
    return out


def differ(a: Dim, b: Dim) -> bool:
    """True only when ``a`` and ``b`` provably differ. When it depends on run-time values the
    relation goes on assuming they are equal, and records it (``dims.assume``): the compiler
    checks every such assumption when the program runs."""
    return not D.equal_or_assumed(a, b)


def cannot_broadcast_to(d: Dim, want: Dim) -> bool:
    """True only when ``d`` provably is neither 1 nor ``want``; else the relation goes on
    assuming it is one of them, and records that exactly (``broadcast(d, want) == want``: a
    ``want`` that is 1 at run time lets no other ``d`` through)."""
    if D.prove_equal(want, 1) is True:
        return not D.equal_or_assumed(d, 1)
    one, same = D.prove_equal(d, 1), D.prove_equal(d, want)
    if one is True or same is True:
        return False
    if one is False:
        return not D.equal_or_assumed(d, want)
    if same is False:
        return not D.equal_or_assumed(d, 1)
    D.assume("equal", D.broadcast(d, want), want)
    return False


def np_dtype(name: str) -> np.dtype:
    return dtypes.to_numpy(name)


NUMERIC = tuple(d for d in dtypes.DTYPES if d != "bool")
FLOATS = tuple(dtypes.FLOAT_DTYPES)
INTEGERS = tuple(dtypes.INT_DTYPES)
ALL_DTYPES = tuple(dtypes.DTYPES)
