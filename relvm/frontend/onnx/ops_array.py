"""Ops that rearrange, count or rank a tensor's entries: Tile, OneHot, NonZero, Trilu, CumSum,
CumProd, TopK, Unique, EyeLike, Compress, ReverseSequence.

Tile and OneHot are broadcasts of existing ops (fused into one generated loop); NonZero is
``argwhere``, whose row count the VM learns when the program runs; Trilu, CumSum, CumProd,
TopK and Unique are relvm ops of their own (``relvm/ops/scan.py``), TopK with a k known only at
run time ``dyn.topk``; the VM sizes the results of NonZero, Unique and such a TopK from the
data.
"""

from __future__ import annotations

import numpy as np

from ...ir import dims as D
from .converters import MAX_MADE_CONSTANT, check_made_size, converter, norm_axis, prod, scalar
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
    """Known depths make a constant of positions; a depth computed at run time (from a shape,
    as the legacy exporter writes ``F.one_hot(x, y.size(0))``) an ``arange`` of it, whose
    length is exact where the depth is known as a dim."""
    if n.known(1) is not None:
        depth_values = np.asarray(n.known(1)).reshape(-1)
        if depth_values.size != 1:
            raise n.fail(f"depth must hold one value, got {depth_values.size}")
        depth = int(depth_values[0])
        if depth < 1:
            raise n.fail(f"depth must be positive, got {depth}")
        check_made_size(n, depth, "depth's positions")
        depth_t = scalar(n, depth, "int64")
    else:
        if D.prove_equal(prod(n.shape(1)), 1) is False:
            raise n.fail(f"depth must hold one value, got shape {D.shape_str(n.shape(1))}")
        depth = None
        depth_t = n.x(1)
        if n.dtype(1) != "int64":
            depth_t = n.call("cast", depth_t, dtype="int64")
        depth_t = n.call("reshape", depth_t, newshape=[])
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
    if depth is None:  # checked on the indices, so the positions keep the depth's value
        idx = n.call("guard", idx, n.call("greater", depth_t, scalar(n, 0, "int64")),
                     message=f"{n.describe()}: depth computed at run time is not positive")
    negative = n.call("less", idx, scalar(n, 0, "int64"))
    idx = n.call("where", negative, n.call("add", idx, depth_t), idx)
    idx = n.call("expand_dims", idx, axis=axis)
    trailing = (1,) * (rank - 1 - axis)
    if depth is not None:
        positions = n.constant(np.arange(depth, dtype=np.int64).reshape((depth,) + trailing))
    else:
        positions = n.call("arange", scalar(n, 0, "int64"), depth_t, scalar(n, 1, "int64"))
        positions = n.call("reshape", positions, newshape=[-1, *trailing])
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


# --- Trilu, CumSum, CumProd, TopK: relvm's trilu, cumsum, cumprod, topk and dyn.topk -----------

def _scalar_int64(n: Node, i: int, what: str):
    """Input ``i``, one integer, as a 0-d int64 tensor."""
    shape = n.shape(i)
    if len(shape) > 1 or len(shape) == 1 and isinstance(shape[0], int) and shape[0] != 1:
        raise n.fail(f"{what} must hold one value, got shape {D.shape_str(shape)}")
    v = n.x(i)
    if n.dtype(i) != "int64":
        v = n.call("cast", v, dtype="int64")
    return n.call("reshape", v, newshape=[]) if shape else v


def _computed_in(n: Node, x, dtype: str):
    """(x in the dtype relvm's C kernels compute ``dtype`` in, a function casting back)."""
    if dtype != "float16":
        return x, lambda y: y
    return n.call("cast", x, dtype="float32"), lambda y: n.call("cast", y, dtype="float16")


@converter("Trilu")
def trilu(n: Node):
    if n.rank(0) < 2:
        raise n.fail(f"input must have rank 2 or more, got {D.shape_str(n.shape(0))}")
    k = _scalar_int64(n, 1, "k") if n.has(1) else scalar(n, 0, "int64")
    return n.call("trilu", n.x(0), k, upper=bool(n.attr("upper", 1)))


@converter("CumSum", "CumProd")
def cumulative(n: Node):
    dtype = n.dtype(0)
    if dtype == "bool":
        raise n.fail("input must be numeric, got bool")
    if n.rank(0) == 0:
        raise n.fail("input must have rank 1 or more")
    axis_values = _static_ints(n, 1, "axis")
    if len(axis_values) != 1:
        raise n.fail(f"axis must hold one value, got {axis_values}")
    axis = norm_axis(n, axis_values[0], n.rank(0))
    x, back = _computed_in(n, n.x(0), dtype)
    op = "cumsum" if n.op_type == "CumSum" else "cumprod"
    return back(n.call(op, x, axis=axis, exclusive=bool(n.attr("exclusive", 0)),
                       reverse=bool(n.attr("reverse", 0))))


@converter("TopK")
def top_k(n: Node):
    dtype, rank = n.dtype(0), n.rank(0)
    if dtype == "bool":
        raise n.fail("input must be numeric, got bool")
    if rank == 0:
        raise n.fail("input must have rank 1 or more")
    axis = norm_axis(n, int(n.attr("axis", -1)), rank)
    largest = bool(n.attr("largest", 1))
    x, back = _computed_in(n, n.x(0), dtype)
    if n.opset < 10:
        k = int(n.required("k"))
        pair = n.call("topk", x, k=k, axis=axis, largest=largest)
    else:
        sym = n.sym(1)
        if sym is not None and sym.size == 1 and isinstance(sym.reshape(-1)[0], (int, np.integer)):
            pair = n.call("topk", x, k=int(sym.reshape(-1)[0]), axis=axis, largest=largest)
        else:  # k known only when the program runs: its length along axis is a run-time dim
            pair = n.call("dyn.topk", x, _scalar_int64(n, 1, "k"), axis=axis, largest=largest)
    return [back(n.field(pair, 0)), n.field(pair, 1)]


@converter("Unique")
def unique(n: Node):
    dtype = n.dtype(0)
    axis = n.attr("axis")
    if axis is not None:
        axis = norm_axis(n, int(axis), n.rank(0))
    x, back = _computed_in(n, n.x(0), dtype)
    out = n.call("unique", x, axis=axis, sorted=bool(n.attr("sorted", 1)))
    return [back(n.field(out, 0))] + [n.field(out, i) for i in (1, 2, 3)]


@converter("EyeLike")
def eye_like(n: Node):
    shape = n.shape(0)
    if len(shape) != 2:
        raise n.fail(f"input must be 2-d, got {D.shape_str(shape)}")
    dtype = n.dtype(0) if n.attr("dtype") is None else _onnx_dtype(n, int(n.attr("dtype")))
    k = int(n.attr("k", 0))
    if all(isinstance(d, int) for d in shape) and shape[0] * shape[1] <= MAX_MADE_CONSTANT:
        return n.constant(np.eye(shape[0], shape[1], k, dtype=dtype))
    # Symbolic (or large) dims: ones in the input's shape, everything off diagonal k zeroed.
    ones = n.call("ones_like", n.x(0))
    ones = ones if n.dtype(0) == dtype else n.call("cast", ones, dtype=dtype)
    diagonal = scalar(n, k, "int64")
    return n.call("trilu", n.call("trilu", ones, diagonal, upper=True), diagonal, upper=False)


def _onnx_dtype(n: Node, elem_type: int) -> str:
    from .importer import ONNX_DTYPES, onnx_type_name

    dtype = ONNX_DTYPES.get(elem_type)
    if dtype is None:
        raise n.fail(f"dtype {onnx_type_name(elem_type)} is not one relvm has")
    return dtype


@converter("Compress")
def compress(n: Node):
    """The entries (or slices along axis) where condition is true: argwhere's rows, taken."""
    if n.dtype(1) != "bool" or n.rank(1) != 1:
        raise n.fail(f"condition must be a 1-d bool tensor, got {n.dtype(1)} "
                     f"{D.shape_str(n.shape(1))}")
    x, axis = n.x(0), n.attr("axis")
    if axis is None:
        x, axis = n.call("reshape", x, newshape=[-1]), 0
    else:
        axis = norm_axis(n, int(axis), n.rank(0))
    length, dim = n.shape(1)[0], x.checked_type.shape[axis]
    if isinstance(length, int) and isinstance(dim, int) and length > dim:
        raise n.fail(f"condition has {length} entries, more than axis {axis}'s {dim}")
    rows = n.call("reshape", n.call("argwhere", n.x(1)), newshape=[-1])
    return n.call("take", x, rows, axis=axis, mode="fast")  # a true entry past the axis: error


@converter("ReverseSequence")
def reverse_sequence(n: Node):
    """Each batch entry's first sequence_lens[b] steps reversed: a gather along the time axis
    with index len - 1 - t for t < len, t past it. A length past the time axis makes an index
    out of range: a run-time error naming it."""
    rank = n.rank(0)
    if rank < 2:
        raise n.fail(f"input must have rank 2 or more, got {D.shape_str(n.shape(0))}")
    time = norm_axis(n, int(n.attr("time_axis", 0)), rank, "time_axis")
    batch = norm_axis(n, int(n.attr("batch_axis", 1)), rank, "batch_axis")
    if {time, batch} != {0, 1}:
        raise n.fail(f"time_axis {time} and batch_axis {batch} must be 0 and 1")
    x, steps = n.x(0), n.shape(0)[time]
    lengths = n.x(1) if n.dtype(1) == "int64" else n.call("cast", n.x(1), dtype="int64")
    zeros = n.call("zeros_like", n.call("cast", x, dtype="int64"))  # x's shape, int64
    if isinstance(steps, int):
        t = n.constant(np.arange(steps, dtype=np.int64).reshape(
            (steps,) + (1,) * (rank - 1 - time)))
    else:  # 0, 1, 2... along the time axis
        ones = n.call("ones_like", zeros)
        t = n.call("subtract", n.call("cumsum", ones, axis=time), scalar(n, 1, "int64"))
    # lengths along the batch axis, broadcast against x
    length = n.call("reshape", lengths, newshape=[-1] + [1] * (rank - 1 - batch))
    t = n.call("add", t, zeros)
    reversed_ = n.call("subtract", n.call("subtract", length, scalar(n, 1, "int64")), t)
    index = n.call("where", n.call("less", t, length), reversed_, t)
    return n.call("gather", x, index, axis=time)
