"""The table of ONNX op converters, and helpers they share.

A converter takes a :class:`~.importer.Node` and returns the node's outputs: IR expressions (or
:class:`~.values.Value` s), one per ONNX output, in order. A *symbolic evaluator*, registered
for the few ops that compute shapes (Shape, Gather, Concat, arithmetic...), returns the outputs
as symbolic dims instead, or None when it does not apply; the converter then runs only if the
tensor itself is needed.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ...ir import dims as D
from ...ir.nodes import Expr, Tuple
from ...ir.types import TupleType
from .importer import Node

Converter = Callable[[Node], object]

CONVERTERS: dict[str, Converter] = {}
SYMBOLIC: dict[str, Callable[[Node], list | None]] = {}
#: ONNX op type -> how its converter composes it of relvm ops (listed in docs/ops.md)
COMPOSITIONS: dict[str, str] = {}


def converter(*op_types: str, composed: str | None = None
              ) -> Callable[[Converter], Converter]:
    """Register the decorated converter for ``op_types``; ``composed`` says which relvm ops it
    builds, when the op has none of its own."""
    def register(fn: Converter) -> Converter:
        for op in op_types:
            assert op not in CONVERTERS, op
            CONVERTERS[op] = fn
            if composed:
                COMPOSITIONS[op] = composed
        return fn
    return register


def symbolic(*op_types: str):
    def register(fn):
        for op in op_types:
            SYMBOLIC[op] = fn
        return fn
    return register


# --- helpers -----------------------------------------------------------------------------------

def make_tuple(fields: Sequence[Expr]) -> Tuple:
    t = Tuple(tuple(fields))
    t.with_type(TupleType(tuple(f.checked_type for f in fields)))
    return t


def norm_axis(n: Node, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise n.fail(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def norm_axes(n: Node, axes: Sequence[int], rank: int, what: str = "axes") -> list[int]:
    out = [norm_axis(n, int(a), rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise n.fail(f"{what} {list(axes)} repeats an axis")
    return out


def prod(dims) -> D.Dim:
    out: D.Dim = 1
    for d in dims:
        out = out * d
    return out


#: The most elements a converter builds into a constant of its own (a window, a grid of
#: coordinates, OneHot's positions): past it, a size read from the model is refused rather
#: than allocated at import.
MAX_MADE_CONSTANT = 2**26


def check_made_size(n: Node, count: int, what: str) -> None:
    if count > MAX_MADE_CONSTANT:
        raise n.fail(f"{what} would have {count} elements; relvm builds at most "
                     f"{MAX_MADE_CONSTANT} into a constant at import")


def scalar(n: Node, value, dtype: str) -> Expr:
    return n.constant(np.asarray(value).astype(dtype))


def merge_leading(n: Node, x: Expr, count: int) -> Expr:
    """Merge the first ``count`` dims of ``x`` into one (exact over symbolic dims)."""
    if count == 0:
        return n.call("expand_dims", x, axis=0)
    for _ in range(count - 1):
        x = n.call("reshape", x, newshape=[-3, -2])
    return x


def flatten2d(n: Node, x: Expr, axis: int) -> Expr:
    """ONNX Flatten: ``(prod(shape[:axis]), prod(shape[axis:]))``."""
    if axis == 0:
        return n.call("reshape", x, newshape=[1, -1])
    x = merge_leading(n, x, axis)
    return n.call("reshape", x, newshape=[0, -1])


from . import (ops_array, ops_attention, ops_control, ops_einsum, ops_index,  # noqa: E402,F401
               ops_layout, ops_math, ops_ml, ops_nn, ops_norm, ops_quant, ops_sequence,
               ops_shape, ops_signal, ops_text, ops_vision)  # (registration)
