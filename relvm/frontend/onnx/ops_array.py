"""Ops that rearrange or count a tensor's entries: Tile, OneHot, NonZero.

Tile and OneHot are broadcasts of existing ops (fused into one generated loop); NonZero is
``argwhere``, whose row count the VM learns when the program runs.
"""

from __future__ import annotations

import numpy as np

from ...ir import dims as D
from .converters import converter, norm_axis, scalar
from .importer import Node


def _static_ints(n: Node, i: int, what: str) -> list[int]:
    """Input ``i``'s values, which must be known at import (constants, or dims that are)."""
    sym = n.sym(i)
    if sym is not None and any(not isinstance(d, (int, np.integer)) for d in sym.reshape(-1)):
        raise n.fail(f"input {i} ({what}) holds symbolic values {D.shape_str(list(sym))}; "
                     "relvm needs them known when the model is imported")
    return n.ints(i, what)


# --- Tile: x as (1, d0, 1, d1, ...) broadcast against (r0, 1, r1, 1, ...), pairs merged --------

@converter("Tile")
def tile(n: Node):
    rank, dtype = n.rank(0), n.dtype(0)
    repeats = _static_ints(n, 1, "repeats")
    if len(repeats) != rank:
        raise n.fail(f"repeats {repeats} must have one entry per axis of the input (rank {rank})")
    if any(r < 0 for r in repeats):
        raise n.fail(f"repeats {repeats} must not be negative")
    x = n.x(0)
    grown = [a for a, r in enumerate(repeats) if r != 1]
    if not grown:
        return n.value(0)
    for a in reversed(grown):  # a 1 before each grown axis
        x = n.call("expand_dims", x, axis=a)
    counts: list[int] = []
    codes: list[int] = []
    for a in range(rank):
        if repeats[a] != 1:
            counts += [repeats[a], 1]
            codes.append(-3)  # merge (repeat, dim)
        else:
            counts.append(1)
            codes.append(0)
    fill = False if dtype == "bool" else 0
    copies = n.call("full", scalar(n, fill, dtype), shape=counts, dtype=dtype)
    x = n.call("logical_or" if dtype == "bool" else "add", x, copies)
    return n.call("reshape", x, newshape=codes)


# --- OneHot: (indices wrapped into [0, depth)) == arange(depth) along axis ---------------------

@converter("OneHot")
def one_hot(n: Node):
    depth_values = np.asarray(n.const(1, "depth")).reshape(-1)
    if depth_values.size != 1:
        raise n.fail(f"depth must hold one value, got {depth_values.size}")
    depth = int(depth_values[0])
    if depth < 1:
        raise n.fail(f"depth must be positive, got {depth}")
    values_shape = n.shape(2)
    # A symbolic length is checked when the program runs (the reshape of each half to a scalar).
    if len(values_shape) != 1 or isinstance(values_shape[0], int) and values_shape[0] != 2:
        raise n.fail(f"values must be [off_value, on_value], got shape {D.shape_str(values_shape)}")
    rank = n.rank(0) + 1
    axis = norm_axis(n, int(n.attr("axis", -1)), rank)
    idx, idx_dtype = n.x(0), n.dtype(0)
    if idx_dtype == "bool":
        raise n.fail("indices must be numeric, got bool")
    if idx_dtype != "int64":
        idx = n.call("cast", idx, dtype="int64")  # floats truncate, as ONNX Runtime's do
    # A negative index counts from the end once; anything else outside [0, depth) matches no
    # position, and its row is all off_value.
    negative = n.call("less", idx, scalar(n, 0, "int64"))
    idx = n.call("where", negative, n.call("add", idx, scalar(n, depth, "int64")), idx)
    idx = n.call("expand_dims", idx, axis=axis)
    positions = n.constant(np.arange(depth, dtype=np.int64).reshape(
        (depth,) + (1,) * (rank - 1 - axis)))
    hot = n.call("equal", idx, positions)
    values = n.x(2)
    off = n.call("reshape", n.call("strided_slice", values, begin=[0], end=[1]), newshape=[])
    on = n.call("reshape", n.call("strided_slice", values, begin=[1], end=[2]), newshape=[])
    return n.call("where", hot, on, off)


# --- NonZero: argwhere's rows, as ONNX's (rank, count) int64 --------------------------------------

@converter("NonZero")
def non_zero(n: Node):
    x = n.x(0)
    if n.rank(0) == 0:  # a scalar is a 1-element vector here, as in ONNX Runtime
        x = n.call("reshape", x, newshape=[1])
    rows = n.call("argwhere", x)
    return n.call("cast", n.call("transpose", rows, axes=[1, 0]), dtype="int64")
