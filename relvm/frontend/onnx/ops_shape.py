"""Shape and layout ops, and the symbolic evaluation of shape computations.

Shapes in ONNX are tensors (``Shape`` → ``Gather`` → ``Concat`` → ``Reshape``). Where their
values are expressions over the graph's dims, the importer keeps them symbolic, so
``Reshape(x, Concat(Shape(x)[0:1], [200]))`` becomes ``reshape(%x, newshape=[0, 200])`` and keeps
``x``'s batch dim. Where a value is only known at run time, the data-dependent forms run instead
(``dyn.reshape``; ``arange`` + ``take`` for a slice; ``arange`` + ``dyn.reshape`` for a fill).
"""

from __future__ import annotations

import numpy as np

from ...ir import dims as D
from .converters import (converter, flatten2d, make_tuple, norm_axes, norm_axis, prod, scalar,
                         symbolic)
from .importer import Node
from .values import sym_array

#: A slice bound at or beyond this magnitude means "to the end" (relvm's strided_slice rule).
HUGE = 2**31 - 1
_INT_DTYPES = ("int64", "int32")


def _clamp(v: int) -> int:
    return max(-HUGE, min(HUGE, int(v)))


# --- symbolic evaluation ------------------------------------------------------------------------

def _symbolic_inputs(n: Node, indices) -> list | None:
    """The inputs as dim arrays, if all are known or symbolic and at least one is symbolic."""
    if not all(n.has(i) for i in indices):
        return None
    arrays = [n.sym(i) for i in indices]
    if any(a is None for a in arrays):
        return None
    if not any(n.value(i).sym is not None for i in indices):
        return None
    return arrays


def _dtype_of(n: Node, i: int) -> str:
    v = n.value(i)
    return v.dtype if v.sym is not None else n.dtype(i)


def _shape_slice(n: Node, rank: int) -> tuple[int, int]:
    start, end = int(n.attr("start", 0)), n.attr("end")
    end = rank if end is None else int(end)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return start, max(start, end)


@symbolic("Shape")
def shape_symbolic(n: Node):
    dims = n.shape(0)
    start, end = _shape_slice(n, len(dims))
    return [(sym_array(list(dims[start:end])), "int64")]


@converter("Shape")
def shape(n: Node):
    rank = n.rank(0)
    out = n.call("shape_of", n.x(0), dtype="int64")
    start, end = _shape_slice(n, rank)
    if (start, end) != (0, rank):
        out = n.call("strided_slice", out, begin=[start], end=[end])
    return out


@symbolic("Size")
def size_symbolic(n: Node):
    return [(sym_array([prod(n.shape(0))], ()), "int64")]


@converter("Size")
def size(n: Node):
    return n.call("prod", n.call("shape_of", n.x(0), dtype="int64"))


@symbolic("Gather")
def gather_symbolic(n: Node):
    if n.value(0).sym is None or n.known(1) is None:
        return None
    data = n.value(0).sym
    axis = norm_axis(n, int(n.attr("axis", 0)), data.ndim)
    idx = np.asarray(n.known(1)).astype(np.int64)
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return [(np.take(data, idx, axis=axis), n.value(0).dtype)]


@converter("Gather")
def gather(n: Node):
    axis = norm_axis(n, int(n.attr("axis", 0)), n.rank(0))
    return n.call("take", n.x(0), n.x(1), axis=axis, mode="from_end")


@symbolic("Concat")
def concat_symbolic(n: Node):
    arrays = _symbolic_inputs(n, range(len(n.inputs)))
    if arrays is None or any(a.ndim != 1 for a in arrays):
        return None
    return [(np.concatenate(arrays), _dtype_of(n, 0))]


@converter("Concat")
def concat(n: Node):
    rank = n.rank(0)
    axis = norm_axis(n, int(n.required("axis")), rank)
    parts = [n.x(i) for i in range(len(n.inputs)) if n.has(i)]
    if len(parts) == 1:
        return parts[0]
    return n.call("concatenate", make_tuple(parts), axis=axis)


def _unsqueeze_axes(n: Node) -> list[int]:
    axes = n.attr("axes") if "axes" in n.attrs else n.ints(1, "axes")
    return sorted(norm_axes(n, axes, n.rank(0) + len(axes)))


@symbolic("Unsqueeze")
def unsqueeze_symbolic(n: Node):
    if n.value(0).sym is None or ("axes" not in n.attrs and n.known(1) is None):
        return None
    data = n.value(0).sym
    for a in _unsqueeze_axes(n):
        data = np.expand_dims(data, a)
    return [(data, n.value(0).dtype)]


@converter("Unsqueeze")
def unsqueeze(n: Node):
    x = n.x(0)
    for a in _unsqueeze_axes(n):
        x = n.call("expand_dims", x, axis=a)
    return x


def _squeeze_axes(n: Node) -> list[int] | None:
    if "axes" in n.attrs:
        axes = n.attr("axes")
    elif n.has(1):
        axes = n.ints(1, "axes")
    else:
        return None
    return norm_axes(n, axes, n.rank(0))


@symbolic("Squeeze")
def squeeze_symbolic(n: Node):
    if n.value(0).sym is None or (n.has(1) and n.known(1) is None):
        return None
    data = n.value(0).sym
    axes = _squeeze_axes(n)
    axes = [i for i, d in enumerate(data.shape) if d == 1] if axes is None else axes
    return [(np.squeeze(data, axis=tuple(axes)), n.value(0).dtype)]


@converter("Squeeze")
def squeeze(n: Node):
    axes = _squeeze_axes(n)
    shape = n.shape(0)
    if axes is not None or all(isinstance(d, int) for d in shape):
        return n.call("squeeze", n.x(0), axis=axes)
    # Without axes over symbolic dims: the dims that are 1 go, and a dim not known to be 1 is
    # taken to stay -- checked when it runs, since a 1 there would change the result's rank.
    axes = [i for i, d in enumerate(shape) if D.prove_equal(d, 1) is True]
    x = n.x(0)
    unsure = [i for i, d in enumerate(shape) if D.prove_equal(d, 1) is None]
    if unsure:
        ok = None
        for i in unsure:
            kept = n.call("not_equal", dim_scalar(n, x, i), scalar(n, 1, "int64"))
            ok = kept if ok is None else n.call("logical_and", ok, kept)
        x = n.call("guard", x, ok, message=f"{n.describe()}: Squeeze without axes: a dim of "
                   f"the input {D.shape_str(shape)} taken to stay is 1 when it runs, which "
                   "would change the result's rank (give the axes)")
    return n.call("squeeze", x, axis=axes) if axes else x


@symbolic("Identity")
def identity_symbolic(n: Node):
    v = n.value(0)
    return [(v.sym, v.dtype)] if v.sym is not None else None


@converter("Identity")
def identity(n: Node):
    return n.value(0)


@symbolic("Cast")
def cast_symbolic(n: Node):
    from .importer import ONNX_DTYPES

    dtype = ONNX_DTYPES.get(int(n.required("to")))
    if n.value(0).sym is None or dtype not in _INT_DTYPES:
        return None
    return [(n.value(0).sym, dtype)]


def _trunc_div(a, b):
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError
        q = abs(a) // abs(b)
        return q if (a < 0) == (b < 0) else -q
    if isinstance(b, int) and b > 0 and D.prove_nonnegative(a):
        return D.floordiv(a, b)  # floor is truncation for a non-negative dividend
    # ``frames - 1`` may be -1: type inference's values assume it is not (ops/values.py), and
    # the program checks that when it runs.
    raise ZeroDivisionError


_ARITH = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
          "Div": _trunc_div, "Max": D.dim_max, "Min": D.dim_min}


@symbolic(*_ARITH)
def arith_symbolic(n: Node):
    arrays = _symbolic_inputs(n, range(len(n.inputs)))
    if arrays is None or _dtype_of(n, 0) not in _INT_DTYPES:
        return None
    fn = np.frompyfunc(_ARITH[n.op_type], 2, 1)
    try:
        out = arrays[0]
        for a in arrays[1:]:
            out = np.asarray(fn(out, a), dtype=object)
    except ZeroDivisionError:
        return None
    return [(_simplified(out), _dtype_of(n, 0))]


def _simplified(arr: np.ndarray) -> np.ndarray:
    out = np.empty(arr.shape, dtype=object)
    for i, d in np.ndenumerate(arr):
        out[i] = int(d) if isinstance(d, (int, np.integer)) else d
    return out


# --- reshape, flatten, transpose --------------------------------------------------------------

def reshape_codes(ishape, target, allowzero: bool) -> tuple[list[int], int] | None:
    """Relay reshape codes (and its allowzero) for an ONNX target of ints and symbolic dims.

    A symbolic entry equal to the input dim at its position copies it (code 0); one other
    unknown entry becomes -1. None when more than one entry is unknown.
    """
    literal_zero = bool(allowzero) and any(isinstance(t, int) and t == 0 for t in target)
    codes: list[int | None] = []
    for i, t in enumerate(target):
        if isinstance(t, int):
            if t < -1:
                return None
            codes.append(t)
        elif not literal_zero and i < len(ishape) and D.prove_equal(t, ishape[i]):
            codes.append(0)
        else:
            codes.append(None)
    if codes.count(None) + codes.count(-1) > 1:
        return None
    return [-1 if c is None else c for c in codes], int(literal_zero)


@symbolic("Reshape")
def reshape_symbolic(n: Node):
    if n.value(0).sym is None or n.known(1) is None:
        return None
    data = n.value(0).sym
    shape = [int(s) for s in n.known(1)]
    shape = [data.shape[i] if s == 0 and not n.attr("allowzero", 0) else s
             for i, s in enumerate(shape)]
    return [(data.reshape(shape), n.value(0).dtype)]


@converter("Reshape")
def reshape(n: Node):
    x = n.x(0)
    allowzero = int(n.attr("allowzero", 0))
    target = list(n.attr("shape")) if n.opset < 5 else n.sym(1)
    if target is not None:
        if np.ndim(target) != 1:
            raise n.fail("the shape input must be 1-d")
        found = reshape_codes(n.shape(0), list(target), allowzero)
        if found is not None:
            codes, zero = found
            return n.call("reshape", x, newshape=codes, allowzero=zero)
    return n.call("dyn.reshape", x, n.x(1), allowzero=allowzero)


@converter("Flatten")
def flatten(n: Node):
    rank = n.rank(0)
    axis = int(n.attr("axis", 1))
    if not -rank <= axis <= rank:
        raise n.fail(f"axis {axis} is out of range for rank {rank}")
    return flatten2d(n, n.x(0), axis + rank if axis < 0 else axis)


@converter("Transpose")
def transpose(n: Node):
    perm = n.attr("perm")
    rank = n.rank(0)
    axes = list(range(rank))[::-1] if perm is None else norm_axes(n, perm, rank, "perm")
    if axes == list(range(rank)):
        return n.value(0)
    return n.call("transpose", n.x(0), axes=axes)


# --- split, slice ------------------------------------------------------------------------------

@converter("Split")
def split(n: Node):
    rank = n.rank(0)
    axis = norm_axis(n, int(n.attr("axis", 0)), rank)
    count = len(n.outputs)
    dim = n.shape(0)[axis]
    if n.has(1) and n.known(1) is None:
        return _split_at_run_time(n, axis, count)
    if n.has(1):
        sizes = n.ints(1, "split")
    elif "split" in n.attrs:
        sizes = list(n.attr("split"))
    elif "num_outputs" in n.attrs and isinstance(dim, int):
        chunk = -(-dim // int(n.attr("num_outputs")))
        sizes = [min(chunk, max(dim - k * chunk, 0)) for k in range(int(n.attr("num_outputs")))]
    elif "num_outputs" in n.attrs:
        return _uneven_split(n, n.x(0), axis, int(n.attr("num_outputs")))
    else:
        sizes = None
    x = n.x(0)
    if sizes is None:
        if count == 1:
            return [x]
        parts = n.call("split", x, indices_or_sections=count, axis=axis)
        return [n.field(parts, i) for i in range(count)]
    if len(sizes) != count:
        raise n.fail(f"split {sizes} gives {len(sizes)} parts for {count} outputs")
    if count == 1:
        return [x]
    bounds = np.cumsum([0] + sizes).tolist()
    if all(s > 0 for s in sizes):
        parts = n.call("split", x, indices_or_sections=bounds[1:-1], axis=axis)
        return [n.field(parts, i) for i in range(count)]
    return [n.call("strided_slice", x, begin=[lo], end=[hi], axes=[axis])
            for lo, hi in zip(bounds[:-1], bounds[1:])]


def _split_at_run_time(n: Node, axis: int, count: int):
    """Split by sizes known only as dims (``[h, 0]``) or at run time: each part is a slice
    between running sums of the sizes, static where a bound is a number or the axis length."""
    x, dim = n.x(0), n.shape(0)[axis]
    sizes = n.sym(1)
    if n.rank(1) != 1 or n.shape(1)[0] != count:
        raise n.fail(f"split {D.shape_str(n.shape(1))} must hold one size per output "
                     f"({count})")
    ends = None if sizes is None else [sum(list(sizes)[:k + 1], 0) for k in range(count)]
    run_ends = None

    def running_sums():
        sizes_t = n.x(1)
        if n.dtype(1) != "int64":
            sizes_t = n.call("cast", sizes_t, dtype="int64")
        return sizes_t, n.call("cumsum", sizes_t, axis=0)

    if ends is None or D.prove_equal(ends[-1], dim) is not True or \
            not all(D.prove_nonnegative(d) if not isinstance(d, int) else d >= 0
                    for d in sizes):
        # ONNX's rule, checked when it runs: sizes of at least 0 that fill the axis
        sizes_t, run_ends = running_sums()
        total = n.call("take", run_ends, scalar(n, count - 1, "int64"), axis=0)
        ok = n.call("logical_and",
                    n.call("equal", total, dim_scalar(n, x, axis)),
                    n.call("greater_equal", n.call("min", sizes_t), scalar(n, 0, "int64")))
        x = n.call("guard", x, ok, message=f"{n.describe()}: the split sizes must be at "
                                           "least 0 and add up to the axis length")
    parts = []
    for k in range(count):
        lo = 0 if k == 0 else (None if ends is None else _static_bound(ends[k - 1], dim, 1, False))
        hi = None if ends is None else _static_bound(ends[k], dim, 1, True)
        if lo is not None and hi is not None:
            parts.append(n.call("strided_slice", x, begin=[lo], end=[hi], axes=[axis]))
            continue
        if run_ends is None:  # the running sums of the sizes, at run time
            _, run_ends = running_sums()
        start = scalar(n, 0, "int64") if k == 0 else n.call(
            "take", run_ends, scalar(n, k - 1, "int64"), axis=0)
        end = n.call("take", run_ends, scalar(n, k, "int64"), axis=0)
        parts.append(dynamic_slice(n, x, axis, start, end, 1))
    return parts


def _uneven_split(n: Node, x, axis: int, count: int):
    """Split a symbolic dim d into parts of ceil(d / count) (the last one shorter)."""
    chunk = n.call("divide", n.call("add", dim_scalar(n, x, axis), scalar(n, count - 1, "int64")),
                   scalar(n, count, "int64"))
    bounds = [n.call("multiply", chunk, scalar(n, k, "int64")) for k in range(count)]
    bounds.append(scalar(n, HUGE, "int64"))
    return [dynamic_slice(n, x, axis, lo, hi, 1) for lo, hi in zip(bounds[:-1], bounds[1:])]


def _static_bound(v, dim, step: int, is_end: bool) -> int | None:
    """A slice bound as an int for strided_slice, or None if it is only known at run time."""
    if isinstance(v, (int, np.integer)):
        v = int(v)
        if step < 0 and not is_end and v < -1:
            # ONNX clamps a start before the first element to it, where Python's slice is empty.
            if v <= -HUGE or (isinstance(dim, int) and v < -dim):
                return 0
            if not isinstance(dim, int):
                return None  # whether it is before the first element is known at run time
        return _clamp(v)
    if D.prove_equal(v, dim) and not (is_end and step < 0):
        return HUGE  # the axis length: "to the end" (or, going backwards, from the last)
    return None


def _slice_inputs(n: Node):
    """(starts, ends, axes, steps): starts and ends as dim arrays or None if run-time."""
    if n.opset < 10:
        starts, ends = list(n.attr("starts")), list(n.attr("ends"))
        axes = list(n.attr("axes", range(len(starts))))
        return starts, ends, axes, [1] * len(starts)
    starts, ends = n.sym(1), n.sym(2)
    count = n.rank(1) and n.shape(1)[0]
    if not isinstance(count, int):
        raise n.fail(f"starts {D.shape_str(n.shape(1))} must have a static length")
    axes = n.ints(3, "axes") if n.has(3) else list(range(count))
    steps = n.ints(4, "steps") if n.has(4) else [1] * count
    return (None if starts is None else list(starts), None if ends is None else list(ends),
            axes, steps)


@converter("Slice")
def slice_(n: Node):
    shape = n.shape(0)
    starts, ends, axes, steps = _slice_inputs(n)
    axes = norm_axes(n, axes, len(shape))
    if any(s == 0 for s in steps):
        raise n.fail(f"steps {steps} holds a zero")
    static, dynamic = ([], [], [], []), []
    for k, (axis, step) in enumerate(zip(axes, steps)):
        b = None if starts is None else _static_bound(starts[k], shape[axis], step, False)
        e = None if ends is None else _static_bound(ends[k], shape[axis], step, True)
        if b is None or e is None:
            dynamic.append((k, axis, step))
            continue
        for lst, v in zip(static, (b, e, _clamp(step), axis)):
            lst.append(v)
    x = n.x(0)
    if static[0]:
        begin, end, strides, sliced = static
        x = n.call("strided_slice", x, begin=begin, end=end, strides=strides, axes=sliced)
    for k, axis, step in dynamic:
        x = _dynamic_slice(n, x, k, axis, step)
    return x


def _index_scalar(n: Node, i: int, k: int):
    v = n.x(i)
    if n.dtype(i) != "int64":
        v = n.call("cast", v, dtype="int64")
    return n.call("take", v, scalar(n, k, "int64"), axis=0)


def _clamped(n: Node, v, dim, lo, hi):
    """ONNX's slice index rule: a negative index counts from the end; then clamp to [lo, hi]."""
    zero = scalar(n, 0, "int64")
    v = n.call("where", n.call("less", v, zero), n.call("add", v, dim), v)
    return n.call("minimum", n.call("maximum", v, lo), hi)


def dim_scalar(n: Node, x, axis: int):
    """Dim ``axis`` of ``x`` at run time, as an int64 scalar."""
    return n.call("take", n.call("shape_of", x, dtype="int64"), scalar(n, axis, "int64"), axis=0)


def dynamic_slice(n: Node, x, axis: int, start, end, step: int):
    """``x`` sliced along ``axis`` by run-time int64 scalars: take(x, arange(start, end, step)).

    ``start`` and ``end`` follow ONNX's rule (negative counts from the end, then clamped).
    """
    dim = dim_scalar(n, x, axis)
    if step > 0:
        zero = scalar(n, 0, "int64")
        start, end = _clamped(n, start, dim, zero, dim), _clamped(n, end, dim, zero, dim)
    else:
        last = n.call("subtract", dim, scalar(n, 1, "int64"))
        start = _clamped(n, start, dim, scalar(n, 0, "int64"), last)
        end = _clamped(n, end, dim, scalar(n, -1, "int64"), last)
    index = n.call("arange", start, end, scalar(n, step, "int64"))
    return n.call("take", x, index, axis=axis, mode="fast")


def _dynamic_slice(n: Node, x, k: int, axis: int, step: int):
    return dynamic_slice(n, x, axis, _index_scalar(n, 1, k), _index_scalar(n, 2, k), step)


@symbolic("Slice")
def slice_symbolic(n: Node):
    if n.value(0).sym is None or n.value(0).sym.ndim != 1:
        return None
    if n.opset >= 10 and not all(n.known(i) is not None for i in range(1, len(n.inputs))
                                 if n.has(i)):
        return None
    starts, ends, axes, steps = _slice_inputs(n)
    data = n.value(0).sym
    if norm_axes(n, axes, 1) != [0]:
        return None
    return [(data[slice(int(starts[0]), int(ends[0]), int(steps[0]))], n.value(0).dtype)]


# --- filling and broadcasting ------------------------------------------------------------------

def _dims_of(n: Node, i: int) -> list | None:
    target = n.sym(i)
    if target is None:
        return None
    if target.ndim != 1:
        raise n.fail(f"input {i} must be a 1-d shape")
    return list(target)


def filled(n: Node, shape_input: int, fill, dtype: str):
    """A tensor of the shape held by input ``shape_input``, every element ``fill``."""
    dims = _dims_of(n, shape_input)
    value = scalar(n, fill, dtype)
    if dims is not None and all(isinstance(d, int) for d in dims):
        return n.call("full", value, shape=[int(d) for d in dims], dtype=dtype)
    shape = n.x(shape_input)
    if n.dtype(shape_input) != "int64":
        shape = n.call("cast", shape, dtype="int64")
    return filled_at_run_time(n, shape, value, dtype)


def filled_at_run_time(n: Node, shape, value, dtype: str):
    """A tensor of the shape a run-time 1-d int64 tensor holds, every element ``value`` (a
    scalar of ``dtype``): the scalar broadcast to it -- its dims exact where type inference
    knows the shape's value."""
    return n.call("dyn.broadcast_to", value, shape)


@converter("ConstantOfShape")
def constant_of_shape(n: Node):
    value = n.attr("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    from ... import dtypes

    dtype = dtypes.from_numpy(value.dtype)
    if dtype is None:
        raise n.fail(f"value of dtype {value.dtype} is not supported")
    return filled(n, 0, value[0], dtype)


@converter("Expand")
def expand(n: Node):
    x, xshape = n.x(0), n.shape(0)
    dims = _dims_of(n, 1)
    if dims is not None:
        rank = max(len(dims), len(xshape))
        a = (1,) * (rank - len(xshape)) + tuple(xshape)
        b = (1,) * (rank - len(dims)) + tuple(dims)
        if len(dims) <= len(xshape) and all(D.prove_equal(t, 1) or D.prove_equal(t, s)
                                            for t, s in zip(b, a)):
            return n.value(0)  # nothing grows
        if all(isinstance(d, int) for d in a + b):
            try:
                out = [D.broadcast(p, q) for p, q in zip(a, b)]
            except ValueError:
                raise n.fail(f"cannot expand {D.shape_str(xshape)} to {list(dims)}") from None
            return n.call("broadcast_to", x, shape=out)
    shape = n.x(1)
    if n.dtype(1) != "int64":
        shape = n.call("cast", shape, dtype="int64")
    return n.call("dyn.broadcast_to", x, shape)


@converter("Range")
def range_(n: Node):
    return n.call("arange", *[_scalar_input(n, i) for i in range(3)])


def _scalar_input(n: Node, i: int):
    v = n.x(i)
    if n.rank(i):
        v = n.call("reshape", v, newshape=[])
    return v


# --- pad ---------------------------------------------------------------------------------------

@converter("Pad")
def pad(n: Node):
    rank, dtype = n.rank(0), n.dtype(0)
    mode = n.attr("mode", "constant")
    if n.opset < 11:
        pads, value = list(n.attr("pads")), n.constant(np.asarray(n.attr("value", 0.0), dtype))
    else:
        value = _scalar_input(n, 2) if n.has(2) else scalar(n, 0, dtype)
    axes = list(range(rank))
    if n.has(3):
        axes = norm_axes(n, n.ints(3, "axes"), rank)
    if n.opset >= 11 and n.known(1) is None:
        return _pad_at_run_time(n, axes, mode, value)
    if n.opset >= 11:
        pads = n.ints(1, "pads")
    if len(pads) != 2 * len(axes):
        raise n.fail(f"pads {pads} must hold two entries per axis ({len(axes)} axes)")
    widths = [[0, 0] for _ in range(rank)]
    for k, a in enumerate(axes):
        widths[a] = [pads[k], pads[k + len(axes)]]
    x = n.x(0)
    if any(min(w) < 0 for w in widths):  # negative pads crop
        crop = [(a, -min(b, 0), min(e, 0) or HUGE) for a, (b, e) in enumerate(widths)
                if min(b, e) < 0]
        x = n.call("strided_slice", x, begin=[c[1] for c in crop], end=[c[2] for c in crop],
                   axes=[c[0] for c in crop])
        widths = [[max(b, 0), max(e, 0)] for b, e in widths]
    if not any(max(w) for w in widths):
        return x
    if mode == "wrap":
        return _wrap_pad(n, x, widths)
    if mode not in ("constant", "edge", "reflect"):
        raise n.fail(f"mode {mode!r} is not supported")
    if mode != "constant":
        value = scalar(n, 0, dtype)
    return n.call("nn.pad", x, value, pad_width=widths, pad_mode=mode)


def _pad_at_run_time(n: Node, axes: list[int], mode: str, value):
    """Padding by widths computed at run time (``[0, kv - q]``, "pad to a multiple of 8" from
    shapes). Constant mode concatenates a block of ``value`` before and after along each axis
    whose width is not a number; edge, reflect and wrap gather along it, from indices
    ``-before .. size + after`` clamped, reflected or wrapped into the axis. Dims are exact
    where the width is known as a dim expression; numbers pad as usual."""
    rank = n.rank(0)
    if n.rank(1) != 1 or n.shape(1)[0] != 2 * len(axes):
        raise n.fail(f"pads {D.shape_str(n.shape(1))} must hold two entries per axis "
                     f"({len(axes)} axes)")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise n.fail(f"mode {mode!r} is not supported")
    known = n.sym(1)
    pads_t = n.x(1)
    if n.dtype(1) != "int64":
        pads_t = n.call("cast", pads_t, dtype="int64")
    x = n.x(0)
    static = [[0, 0] for _ in range(rank)]
    for k, axis in enumerate(axes):
        widths, computed = [], False
        for side, at in enumerate((k, k + len(axes))):
            w = None if known is None else known[at]
            if isinstance(w, (int, np.integer)) and w >= 0:
                static[axis][side] = int(w)
                widths.append(scalar(n, int(w), "int64"))
                continue
            width = n.call("take", pads_t, scalar(n, at, "int64"), axis=0)
            if w is None or not D.prove_nonnegative(w):
                at_least_0 = n.call("greater_equal", width, scalar(n, 0, "int64"))
                width = n.call("guard", width, at_least_0,
                               message=f"{n.describe()}: a pad width computed at run time "
                                       "is negative (cropping by a computed width is not "
                                       "supported)")
            widths.append(width)
            computed = True
            if mode == "constant":
                x = pad_by(n, x, axis, side == 0, width, value)
        if mode != "constant" and computed:
            x = _gather_pad(n, x, axis, mode, *widths)
            static[axis] = [0, 0]
    if not any(max(w) for w in static):
        return x
    if mode == "wrap":
        return _wrap_pad(n, x, static)
    if mode != "constant":
        value = scalar(n, 0, n.dtype(0))
    return n.call("nn.pad", x, value, pad_width=static, pad_mode=mode)


def _gather_pad(n: Node, x, axis: int, mode: str, before, after):
    """``x`` padded along ``axis`` in edge, reflect or wrap mode by run-time int64 scalars: one
    gather of the indices ``-before .. size + after`` mapped into the axis."""
    i64 = lambda v: scalar(n, v, "int64")  # noqa: E731
    size = dim_scalar(n, x, axis)
    index = n.call("arange", n.call("negative", before), n.call("add", size, after), i64(1))
    if mode == "edge":
        return n.call("take", x, index, axis=axis, mode="clip")
    if mode == "wrap":
        return n.call("take", x, index, axis=axis, mode="wrap")
    for width in (before, after):  # reflect: as the static pad, widths shorter than the axis
        x = n.call("guard", x, n.call("less", width, size),
                   message=f"{n.describe()}: a reflect pad width computed at run time is not "
                           "shorter than the axis it pads")
    period = n.call("maximum", n.call("multiply", i64(2), n.call("subtract", size, i64(1))),
                    i64(1))
    folded = n.call("floor_mod", index, period)
    index = n.call("minimum", folded, n.call("subtract", period, folded))
    return n.call("take", x, index, axis=axis, mode="fast")


def pad_by(n: Node, x, axis: int, before: bool, width, value):
    """``x`` with a block of ``value`` (a scalar of x's dtype), ``width`` long (a non-negative
    run-time int64 scalar), concatenated before or after it along ``axis``. The block's dims
    are exact where type inference knows the width's value as a dim expression."""
    dims = n.call("shape_of", x, dtype="int64")
    block_shape = n.call("concatenate", make_tuple([
        n.call("strided_slice", dims, begin=[0], end=[axis], axes=[0]),
        n.call("reshape", width, newshape=[1]),
        n.call("strided_slice", dims, begin=[axis + 1], end=[HUGE], axes=[0])]), axis=0)
    block = filled_at_run_time(n, block_shape, value, x.checked_type.dtype)
    return n.call("concatenate", make_tuple([block, x] if before else [x, block]), axis=axis)


def fit_at_run_time(n: Node, x, axis: int, target, *, smaller_first: bool, split_pad: bool):
    """Axis ``axis`` of ``x`` (a size known when it runs) made ``target`` long -- an int, the
    result's dim, or a run-time int64 scalar: an excess is cropped, split with the smaller half
    first (or the larger), then a shortfall padded with zeros, split with the smaller half
    first (``split_pad``) or all at the end."""
    i64 = lambda v: scalar(n, v, "int64")  # noqa: E731
    full = dim_scalar(n, x, axis)
    size = i64(target) if isinstance(target, int) else target
    excess = n.call("subtract", full, size)
    crop = n.call("maximum", excess, i64(0))
    half = n.call("divide", crop, i64(2))
    begin = half if smaller_first else n.call("subtract", crop, half)
    x = dynamic_slice(n, x, axis, begin, n.call("add", begin, n.call("minimum", full, size)), 1)
    dtype = x.checked_type.dtype
    zero = scalar(n, False if dtype == "bool" else 0, dtype)
    short = n.call("maximum", n.call("negative", excess), i64(0))
    if split_pad:
        before = n.call("divide", short, i64(2))
        x = pad_by(n, x, axis, True, before, zero)
        short = n.call("subtract", short, before)
    x = pad_by(n, x, axis, False, short, zero)
    if not isinstance(target, int):
        return x
    return n.call("reshape", x, newshape=[target if a == axis else 0
                                          for a in range(x.checked_type.ndim)])


def _wrap_pad(n: Node, x, widths):
    for axis, (before, after) in enumerate(widths):
        if not before and not after:
            continue
        parts = []
        if before:
            parts.append(n.call("strided_slice", x, begin=[-before], end=[HUGE], axes=[axis]))
        parts.append(x)
        if after:
            parts.append(n.call("strided_slice", x, begin=[0], end=[after], axes=[axis]))
        x = n.call("concatenate", make_tuple(parts), axis=axis)
    return x
