"""C kernels for the elementwise ops: unary math, clip, leaky_relu, cast, binary ops with
broadcasting, where, and bias_add (an add whose bias broadcasts along one axis)."""

from __future__ import annotations

import numpy as np

from ...ops.common import normalize_axis
from ...ops.elementwise import TRIGONOMETRIC, clip_bounds
from ...ops.transform import at_run_time
from . import kernel
from .common import (ALL, CODE, attrs_of, FLOATS, INTEGERS, ITEMSIZE, NUMBERS, UNSUPPORTED,
                     broadcast_strides, check, check_rank,
                     contiguous_strides, int64s, library, merge_dims, np_dtype, remember,
                     shape_args, shape_error)

# op -> (the C enum constant, dtypes). kernels/elementwise.c's table must agree (a test checks).
UNARY = {
    "nn.relu": ("RELVM_RELU", NUMBERS), "sigmoid": ("RELVM_SIGMOID", FLOATS),
    "tanh": ("RELVM_TANH", FLOATS), "exp": ("RELVM_EXP", FLOATS), "log": ("RELVM_LOG", FLOATS),
    "sqrt": ("RELVM_SQRT", FLOATS), "rsqrt": ("RELVM_RSQRT", FLOATS),
    "erf": ("RELVM_ERF", FLOATS), "floor": ("RELVM_FLOOR", FLOATS),
    "ceil": ("RELVM_CEIL", FLOATS), "round": ("RELVM_ROUND", FLOATS),
    "negative": ("RELVM_NEGATIVE", NUMBERS), "abs": ("RELVM_ABS", NUMBERS + ("float16",)),
    "sign": ("RELVM_SIGN", NUMBERS), "logical_not": ("RELVM_LOGICAL_NOT", ("bool",)),
    **{op: (f"RELVM_{op.upper()}", FLOATS) for op in TRIGONOMETRIC},
    "bitwise_not": ("RELVM_BITWISE_NOT", INTEGERS),
}

_COMPARED = NUMBERS + ("float16", "bool")
BINARY = {
    "add": ("RELVM_ADD", NUMBERS), "subtract": ("RELVM_SUBTRACT", NUMBERS),
    "multiply": ("RELVM_MULTIPLY", NUMBERS), "divide": ("RELVM_DIVIDE", NUMBERS),
    "power": ("RELVM_POWER", FLOATS), "maximum": ("RELVM_MAXIMUM", NUMBERS),
    "minimum": ("RELVM_MINIMUM", NUMBERS), "mod": ("RELVM_MOD", NUMBERS),
    "floor_mod": ("RELVM_FLOOR_MOD", NUMBERS), "bitwise_and": ("RELVM_BITWISE_AND", INTEGERS),
    "bitwise_or": ("RELVM_BITWISE_OR", INTEGERS), "bitwise_xor": ("RELVM_BITWISE_XOR", INTEGERS),
    "left_shift": ("RELVM_LEFT_SHIFT", INTEGERS),
    "right_shift": ("RELVM_RIGHT_SHIFT", INTEGERS), "equal": ("RELVM_EQUAL", _COMPARED),
    "not_equal": ("RELVM_NOT_EQUAL", _COMPARED), "less": ("RELVM_LESS", _COMPARED),
    "less_equal": ("RELVM_LESS_EQUAL", _COMPARED), "greater": ("RELVM_GREATER", _COMPARED),
    "greater_equal": ("RELVM_GREATER_EQUAL", _COMPARED),
    "logical_and": ("RELVM_LOGICAL_AND", ("bool",)), "logical_or": ("RELVM_LOGICAL_OR", ("bool",)),
}


def _same_shape(x, out, name: str) -> None:
    if x.shape != out.shape:
        raise shape_error(f"{name}: the output does not match the input", input=x.shape,
                          output=out.shape)


# --- unary ------------------------------------------------------------------------------------

def make_unary(entry):
    ffi, lib = library()
    op, dt = getattr(lib, UNARY[entry.op][0]), CODE[entry.inputs[0]]
    unary, ptr, name = lib.relvm_unary, ffi.from_buffer, entry.name

    def run(x, out):
        n = out.size
        if x.size != n:  # the VM gives equal shapes; sizes are what C relies on
            _same_shape(x, out, name)
        unary(op, dt, ptr(x), ptr(out), n)
    return run


for _op, (_, _dtypes) in UNARY.items():
    kernel(_op, dtypes=_dtypes)(make_unary)


def _clip_bounds(attrs, dtype: np.dtype) -> tuple[float, float, int, int]:
    """The reference's bounds (``clip_bounds``), as relvm_clip takes them: float bounds for a
    float dtype, integer bounds for an integer one, as int64_t (uint64's past 2^63 as their
    bits, which C converts back)."""
    lo, hi = clip_bounds(attrs.a_min, attrs.a_max, dtype.name)
    if dtype.kind == "f":
        return float(lo), float(hi), 0, 0
    as_int64 = np.array([lo, hi], dtype).view(np.int64) if dtype.itemsize == 8 else (lo, hi)
    return 0.0, 0.0, int(as_int64[0]), int(as_int64[1])


@kernel("clip", dtypes=NUMBERS)
def make_clip(entry):
    ffi, lib = library()
    dt = CODE[entry.inputs[0]]
    lo, hi, ilo, ihi = _clip_bounds(attrs_of(entry), np_dtype(entry.inputs[0]))
    clip, ptr, name = lib.relvm_clip, ffi.from_buffer, entry.name

    def run(x, out):
        n = out.size
        if x.size != n:  # the VM gives equal shapes; sizes are what C relies on
            _same_shape(x, out, name)
        clip(dt, ptr(x), ptr(out), n, lo, hi, ilo, ihi)
    return run


@kernel("nn.leaky_relu", dtypes=FLOATS)
def make_leaky_relu(entry):
    ffi, lib = library()
    dt, alpha = CODE[entry.inputs[0]], float(attrs_of(entry).alpha)
    leaky, ptr, name = lib.relvm_leaky_relu, ffi.from_buffer, entry.name

    def run(x, out):
        n = out.size
        if x.size != n:  # the VM gives equal shapes; sizes are what C relies on
            _same_shape(x, out, name)
        leaky(dt, ptr(x), ptr(out), n, alpha)
    return run


@kernel("cast", dtypes=ALL)
def make_cast(entry):
    ffi, lib = library()
    src, dst = CODE[entry.inputs[0]], CODE[entry.outputs[0]]
    cast, ptr, name = lib.relvm_cast, ffi.from_buffer, entry.name

    def run(x, out):
        n = out.size
        if x.size != n:  # the VM gives equal shapes; sizes are what C relies on
            _same_shape(x, out, name)
        cast(src, dst, ptr(x), ptr(out), n)
    return run


# --- broadcasting ops -----------------------------------------------------------------------

def broadcast_plan(shapes, out_shape, name: str):
    """(ndim, shape, strides per input) of the merged loop nest writing ``out_shape``.

    The kernels plan in C from the shapes of each call (``relvm_binary_bcast``); this is the
    same plan in Python, which names the shapes when they do not broadcast."""
    try:
        want = np.broadcast_shapes(*shapes)
    except ValueError:
        want = None
    if want != tuple(out_shape):
        raise shape_error(f"{name}: the inputs do not broadcast to the output",
                          **{f"input{i}": s for i, s in enumerate(shapes)}, output=out_shape)
    check_rank(len(out_shape), name)
    strides = [broadcast_strides(s, out_shape) for s in shapes]
    shape, merged = merge_dims(out_shape, strides + [contiguous_strides(out_shape)])
    return (len(shape), int64s(shape)) + tuple(int64s(st) for st in merged[:-1])


def make_binary(entry):
    ffi, lib = library()
    op, dt = getattr(lib, BINARY[entry.op][0]), CODE[entry.inputs[0]]
    bcast, flat, ptr, name, seen = (lib.relvm_binary_bcast, lib.relvm_binary_flat,
                                    ffi.from_buffer, entry.name, {})

    def run(a, b, out):
        # Equal shapes, or one 0-d operand (x + 1): a flat loop, no broadcast plan.
        shape = out.shape
        if a.shape == shape:
            if b.shape == shape:
                flat(op, dt, ptr(a), 1, ptr(b), 1, ptr(out), out.size)
                return
            if not b.shape:
                flat(op, dt, ptr(a), 1, ptr(b), 0, ptr(out), out.size)
                return
        elif not a.shape and b.shape == shape:
            flat(op, dt, ptr(a), 0, ptr(b), 1, ptr(out), out.size)
            return
        # Broadcast: the C kernel plans the loop from the shapes (no plan per shape here).
        key = (a.shape, b.shape, shape)
        s = seen.get(key)
        if s is None:
            s = remember(seen, key, shape_args(shape, a.shape, b.shape))
        if not out.size or bcast(op, dt, s[0], s[1], ptr(a), s[2], s[3], ptr(b), s[4], s[5],
                                 ptr(out)):
            broadcast_plan((a.shape, b.shape), shape, name)  # which shapes do not fit
            if out.size:
                check(UNSUPPORTED, f"{name} {a.shape}, {b.shape} -> {shape}")
    return run


for _op, (_, _dtypes) in BINARY.items():
    kernel(_op, dtypes=_dtypes)(make_binary)


@kernel("where", dtypes=ALL, dtype_of=lambda entry: entry.inputs[1])
def make_where(entry):
    ffi, lib = library()
    size = ITEMSIZE[entry.inputs[1]]
    where, ptr, name, seen = lib.relvm_where_bcast, ffi.from_buffer, entry.name, {}

    def run(c, x, y, out):
        shape = out.shape
        key = (c.shape, x.shape, y.shape, shape)
        s = seen.get(key)
        if s is None:
            s = remember(seen, key, shape_args(shape, c.shape, x.shape, y.shape))
        if not out.size or where(size, s[0], s[1], ptr(c), s[2], s[3], ptr(x), s[4], s[5],
                                 ptr(y), s[6], s[7], ptr(out)):
            broadcast_plan((c.shape, x.shape, y.shape), shape, name)  # which do not fit
            if out.size:
                check(UNSUPPORTED, f"{name} {c.shape}, {x.shape}, {y.shape} -> {shape}")
    return run


def _bias_plan(attrs, data_shape, bias_shape, out_shape, name: str):
    axis = at_run_time(normalize_axis, attrs.axis, len(data_shape))
    if bias_shape != (data_shape[axis],):
        raise ValueError(f"bias length {bias_shape[0] if bias_shape else bias_shape} differs "
                         f"from data axis {axis} ({data_shape})")
    if out_shape != data_shape:
        raise shape_error(f"{name}: the output does not match data", data=data_shape,
                          output=out_shape)
    check_rank(len(data_shape), name)
    own = contiguous_strides(data_shape)
    along = tuple(1 if d == axis else 0 for d in range(len(data_shape)))
    shape, (sa, sb, _) = merge_dims(data_shape, [own, along, own])
    return len(shape), int64s(shape), int64s(sa), int64s(sb)


@kernel("nn.bias_add", dtypes=NUMBERS)
def make_bias_add(entry):
    ffi, lib = library()
    op, dt, attrs = lib.RELVM_ADD, CODE[entry.inputs[0]], attrs_of(entry)
    binary, ptr, name, plans = lib.relvm_binary, ffi.from_buffer, entry.name, {}

    def run(x, bias, out):
        key = (x.shape, bias.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, _bias_plan(attrs, *key, name))
        if out.size:
            ndim, shape, sa, sb = plan
            binary(op, dt, ndim, shape, ptr(x), sa, ptr(bias), sb, ptr(out))
    return run
