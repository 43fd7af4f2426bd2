"""C kernels that move data: the reshape family (copies), transpose, concatenate, split,
strided_slice, take, broadcast_to, nn.pad and the fill ops. They work on elements of 1, 2, 4
or 8 bytes, so every dtype is covered."""

from __future__ import annotations

import numpy as np

from ...ops import indexing as indexing_ops
from ...ops import transform as transform_ops
from ...ops.common import normalize_axis
from ...ops.transform import at_run_time
from . import first_output, kernel
from .common import (ALL, CODE, ITEMSIZE, UNSUPPORTED, attrs_of, check, check_rank,
                     contiguous_strides, int64s, library, merge_dims, np_dtype, prod, remember,
                     shape_args, shape_error)


def _copy_plan(shape, src_strides, dst_strides, src_offset=0, dst_offset=0):
    """(ndim, shape, src strides, dst strides, src offset, dst offset) of a merged nest."""
    merged, (ss, ds) = merge_dims(shape, [src_strides, dst_strides])
    return len(merged), int64s(merged), int64s(ss), int64s(ds), src_offset, dst_offset


# --- copies: the reshape family ------------------------------------------------------------------

def make_copy(entry):
    """Reshape-like ops move no element: the output is the input's bytes, in order."""
    ffi, lib = library()
    copy, ptr, name = lib.relvm_copy, ffi.from_buffer, entry.name

    def run(x, *rest):
        out = rest[-1]
        if x.size != out.size:
            raise shape_error(f"{name}: element counts differ", data=x.shape, output=out.shape)
        copy(ptr(out), ptr(x), out.nbytes)
    return run


for _op in ("reshape", "reshape_like", "squeeze", "expand_dims", "nn.batch_flatten",
            "dyn.reshape"):
    kernel(_op, dtypes=ALL)(make_copy)


def _make_strided(entry, plan_of):
    """A kernel copying x into out along the nest ``plan_of(x.shape, out.shape)`` gives."""
    ffi, lib = library()
    size = ITEMSIZE[entry.inputs[0]]
    copy, ptr, plans = lib.relvm_copy_strided, ffi.from_buffer, {}

    def run(x, out):
        key = (x.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, plan_of(*key))
        if out.size:
            ndim, shape, ss, ds, offset, _ = plan
            copy(size, ndim, shape, ptr(x) + offset, ss, ptr(out), ds)
    return run


# --- transpose, strided_slice, broadcast_to -------------------------------------------------------

def _permutation(axes, ndim: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(reversed(range(ndim)))
    perm = tuple(at_run_time(normalize_axis, a, ndim, "axes entry") for a in axes)
    if sorted(perm) != list(range(ndim)):
        raise ValueError(f"axes {list(axes)} is not a permutation of the axes of a rank-{ndim} "
                         "tensor")
    return perm


@kernel("transpose", dtypes=ALL)
def make_transpose(entry):
    """The C kernel plans the copy from x's shape and the permutation, on every call."""
    ffi, lib = library()
    attrs, size = attrs_of(entry), ITEMSIZE[entry.inputs[0]]
    transpose, ptr, seen = lib.relvm_transpose, ffi.from_buffer, {}

    def run(x, out):
        shape = x.shape
        s = seen.get(shape)
        if s is None:  # the result's shape, and the C call's shape and permutation arrays
            check_rank(x.ndim, "transpose")
            perm = _permutation(attrs.axes, x.ndim)
            s = remember(seen, shape, (tuple(shape[a] for a in perm), x.ndim, int64s(shape),
                                       int64s(perm)))
        want, ndim, dims, perm = s
        if out.shape != want:
            raise shape_error("transpose: wrong output shape", data=shape, output=out.shape)
        if out.size and transpose(size, ndim, dims, perm, ptr(x), ptr(out)):
            check(UNSUPPORTED, f"transpose {shape}")
    return run


@kernel("strided_slice", dtypes=ALL)
def make_strided_slice(entry):
    attrs = attrs_of(entry)
    size = ITEMSIZE[entry.inputs[0]]

    def plan_of(x, out):
        check_rank(len(x), "strided_slice")
        own = contiguous_strides(x)
        steps, offset, want = list(own), 0, list(x)
        for axis, b, e, s in at_run_time(indexing_ops.slice_specs, attrs, x):
            start, stop, step = indexing_ops._static_slice(x[axis], b, e, s,
                                                           attrs.slice_mode).indices(x[axis])
            want[axis] = len(range(start, stop, step))
            if want[axis]:
                offset += start * own[axis]
            steps[axis] = own[axis] * step
        if tuple(want) != out:
            raise shape_error("strided_slice: wrong output shape", data=x, output=out)
        return _copy_plan(out, steps, contiguous_strides(out), offset * size)
    return _make_strided(entry, plan_of)


@kernel("broadcast_to", dtypes=ALL)
def make_broadcast_to(entry):
    """The C kernel plans the copy from x's and the output's shapes, on every call."""
    ffi, lib = library()
    size = ITEMSIZE[entry.inputs[0]]
    copy, ptr, seen = lib.relvm_broadcast_copy, ffi.from_buffer, {}

    def run(x, out):
        if out.size:
            key = (x.shape, out.shape)
            s = seen.get(key)
            if s is None:
                s = remember(seen, key, shape_args(out.shape, x.shape))
            if not copy(size, s[0], s[1], ptr(x), s[2], s[3], ptr(out)):
                return
        elif _broadcasts_to(x.shape, out.shape):
            return  # nothing to copy
        raise shape_error("broadcast_to: cannot broadcast", data=x.shape, output=out.shape)
    return run


def _broadcasts_to(shape: tuple, out: tuple) -> bool:
    try:
        return np.broadcast_shapes(shape, out) == out
    except ValueError:
        return False


@kernel("dyn.broadcast_to", dtypes=ALL)
def make_dyn_broadcast_to(entry):
    """broadcast_to's copy: the target's values made the output's shape (the program computed
    it from them, checked), so the kernel copies data into the output as broadcast_to does."""
    copy = make_broadcast_to(entry)

    def run(x, shape, out):
        copy(x, out)
    return run


# --- concatenate, split ---------------------------------------------------------------------------

def _pieces(whole, parts, axis: int, what: str):
    """Per part: its 2-D copy plan (rows, cols) against the whole, and its byte offset in it."""
    rows = prod(whole[:axis])
    inner = prod(whole[axis + 1:])
    out, at = [], 0
    for p in parts:
        if len(p) != len(whole) or p[:axis] != whole[:axis] or p[axis + 1:] != whole[axis + 1:]:
            raise shape_error(f"{what}: shapes differ outside axis {axis}", part=p, whole=whole)
        cols = p[axis] * inner
        out.append((at, rows, cols))
        at += cols
    if at != whole[axis] * inner:
        raise shape_error(f"{what}: the parts do not add up along axis {axis}", whole=whole)
    return out, at


@kernel("concatenate", dtypes=ALL)
def make_concatenate(entry):
    ffi, lib = library()
    attrs, size = attrs_of(entry), ITEMSIZE[entry.inputs[0]]
    copy, ptr, plans = lib.relvm_copy_strided, ffi.from_buffer, {}

    def plan_of(shapes, out):
        axis = at_run_time(normalize_axis, attrs.axis, len(out))
        pieces, total = _pieces(out, shapes, axis, "concatenate")
        # Part i fills columns [at, at + cols) of out seen as (rows, total).
        return [(i, int64s((rows, cols)), int64s((cols, 1)), int64s((total, 1)), at * size)
                for i, (at, rows, cols) in enumerate(pieces) if rows * cols]

    def run(*args):
        xs, out = args[:-1], args[-1]
        key = (tuple(x.shape for x in xs), out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, plan_of(*key))
        base = ptr(out)
        for i, shape, ss, ds, offset in plan:
            copy(size, 2, shape, ptr(xs[i]), ss, base + offset, ds)
    return run


@kernel("split", dtypes=ALL)
def make_split(entry):
    ffi, lib = library()
    attrs, size = attrs_of(entry), ITEMSIZE[entry.inputs[0]]
    copy, ptr, plans = lib.relvm_copy_strided, ffi.from_buffer, {}

    def plan_of(x, shapes):
        axis, _ = at_run_time(transform_ops._split_axis_sizes, attrs, x)
        pieces, total = _pieces(x, shapes, axis, "split")
        return [(i, int64s((rows, cols)), int64s((total, 1)), int64s((cols, 1)), at * size)
                for i, (at, rows, cols) in enumerate(pieces) if rows * cols]

    def run(x, *outs):
        key = (x.shape, tuple(o.shape for o in outs))
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, plan_of(*key))
        base = ptr(x)
        for i, shape, ss, ds, offset in plan:
            copy(size, 2, shape, base + offset, ss, ptr(outs[i]), ds)
    return run


# --- take ---------------------------------------------------------------------------------------

_TAKE_MODES = {"clip": 0, "wrap": 1, "fast": 2, "from_end": 3}  # enum relvm_take_mode


def _take_plan(attrs, x, idx, out):
    """(batch, outer, axis_len, inner, count): x as (batch, outer, axis_len, inner)."""
    if attrs.axis is None:
        axis, bdims, x = 0, 0, (prod(x),)
    else:
        axis, bdims = at_run_time(indexing_ops._take_axes, attrs, x, idx)
    if out != x[:axis] + idx[bdims:] + x[axis + 1:]:
        raise shape_error("take: wrong output shape", data=x, indices=idx, output=out)
    count = prod(idx[bdims:])
    if x[axis] == 0 and count and prod(out):
        raise ValueError("take: cannot take from an axis of size 0")
    return prod(x[:bdims]), prod(x[bdims:axis]), x[axis], prod(x[axis + 1:]), count


def _bad_index(indices: np.ndarray, dim: int, mode: str) -> ValueError:
    flat = indices.reshape(-1)
    bad = flat[(flat < (-dim if mode == "from_end" else 0)) | (flat >= dim)]
    return ValueError(f"take(mode={mode!r}): index {bad[0] if bad.size else '?'} is out of "
                      f"range for an axis of size {dim}")


@kernel("take", dtypes=ALL, accepts=lambda e: e.inputs[1] in ("int32", "int64"))
def make_take(entry):
    ffi, lib = library()
    attrs = attrs_of(entry)
    size, index_dt, mode = ITEMSIZE[entry.inputs[0]], CODE[entry.inputs[1]], _TAKE_MODES[attrs.mode]
    take, ptr, plans = lib.relvm_take, ffi.from_buffer, {}

    def run(x, indices, out):
        key = (x.shape, indices.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, _take_plan(attrs, *key))
        status = take(size, index_dt, mode, *plan, ptr(x), ptr(indices), ptr(out))
        if status == -3:
            raise _bad_index(indices, plan[2], attrs.mode)
        check(status, f"take {key}")
    return run


# --- pad ----------------------------------------------------------------------------------------

def _pad_plan(attrs, x, out, size: int):
    widths = attrs.pad_width
    if len(widths) != len(x) or any(len(w) != 2 for w in widths):
        raise ValueError(f"pad_width {[list(w) for w in widths]} does not fit data {x}")
    if out != tuple(n + b + a for n, (b, a) in zip(x, widths)):
        raise shape_error("nn.pad: wrong output shape", data=x, output=out)
    check_rank(len(x), "nn.pad")
    mode = attrs.pad_mode
    if mode == "constant":
        dst = contiguous_strides(out)
        offset = sum(b * s for (b, _), s in zip(widths, dst))
        return _copy_plan(x, contiguous_strides(x), dst, 0, offset * size)
    for axis, (n, w) in enumerate(zip(x, widths)):
        ok = max(w) == 0 or (n >= 1 if mode == "edge" else max(w) < n)
        if not ok:
            raise ValueError(f"pad_mode={mode!r} cannot pad axis {axis} of {x} by {list(w)}")
    # Each output coordinate's source coordinate, per axis: np.pad of a range says it exactly.
    maps = np.concatenate([np.pad(np.arange(n), w, mode=mode) for n, w in zip(x, widths)])
    return len(out), int64s(out), int64s(contiguous_strides(x)), int64s(maps.tolist())


@kernel("nn.pad", dtypes=ALL)
def make_pad(entry):
    ffi, lib = library()
    attrs, size = attrs_of(entry), ITEMSIZE[entry.inputs[0]]
    fill, copy, gather = lib.relvm_fill, lib.relvm_copy_strided, lib.relvm_gather
    ptr, plans, constant = ffi.from_buffer, {}, attrs.pad_mode == "constant"

    def run(x, value, out):
        key = (x.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, _pad_plan(attrs, *key, size))
        if not out.size:
            return
        if constant:
            fill(size, ptr(out), out.size, ptr(value))
            if x.size:
                ndim, shape, ss, ds, _, offset = plan
                copy(size, ndim, shape, ptr(x), ss, ptr(out) + offset, ds)
        else:
            ndim, shape, strides, maps = plan
            gather(size, ndim, shape, ptr(x), strides, maps, ptr(value), ptr(out))
    return run


# --- fills --------------------------------------------------------------------------------------

def _make_constant(entry, value: int, takes_data: bool):
    ffi, lib = library()
    dtype = entry.outputs[0]
    held = np.array(value, np_dtype(dtype))  # the value's bytes, in the output dtype
    fill, ptr = lib.relvm_fill, ffi.from_buffer
    size, bytes_ = ITEMSIZE[dtype], ptr(held)

    def run(*args):
        out = args[-1]
        if takes_data and args[0].shape != out.shape:
            raise shape_error(f"{entry.op}: wrong output shape", data=args[0].shape,
                              output=out.shape)
        fill(size, ptr(out), out.size, bytes_)
    run.held = held  # keeps the value's buffer alive with the kernel
    return run


@kernel("zeros", dtypes=ALL, dtype_of=first_output)
def make_zeros(entry):
    return _make_constant(entry, 0, False)


@kernel("ones", dtypes=ALL, dtype_of=first_output)
def make_ones(entry):
    return _make_constant(entry, 1, False)


@kernel("zeros_like", dtypes=ALL)
def make_zeros_like(entry):
    return _make_constant(entry, 0, True)


@kernel("ones_like", dtypes=ALL)
def make_ones_like(entry):
    return _make_constant(entry, 1, True)


def _make_full(entry, takes_data: bool):
    """The fill value converts as cast does (float to int truncates, NaN gives 0)."""
    ffi, lib = library()
    src, dst = CODE[entry.inputs[-1]], CODE[entry.outputs[0]]
    size = ITEMSIZE[entry.outputs[0]]
    cast, fill, ptr = lib.relvm_cast, lib.relvm_fill, ffi.from_buffer

    def run(*args):
        value, out = args[-2], args[-1]
        if value.size != 1 or (takes_data and args[0].shape != out.shape):
            raise shape_error(f"{entry.op}: wrong shapes", fill_value=value.shape,
                              output=out.shape)
        held = ffi.new("uint64_t *")
        cast(src, dst, ptr(value), held, 1)
        fill(size, ptr(out), out.size, held)
    return run


@kernel("full", dtypes=ALL, dtype_of=first_output)
def make_full(entry):
    return _make_full(entry, False)


@kernel("full_like", dtypes=ALL)
def make_full_like(entry):
    return _make_full(entry, True)


# --- bitcast -------------------------------------------------------------------------------------

@kernel("bitcast", dtypes=ALL)
def make_bitcast(entry):
    """A copy of the bytes (the VM's ReshapeTensor views keep their register's dtype, which the
    verifier proves, so a view under another dtype would need an opcode of its own); into bool,
    each byte made 0 or 1."""
    ffi, lib = library()
    bitcast, ptr, name = lib.relvm_bitcast, ffi.from_buffer, entry.name
    to_bool = int(entry.outputs[0] == "bool")
    if ITEMSIZE[entry.inputs[0]] != ITEMSIZE[entry.outputs[0]]:
        raise ValueError(f"{name}: {entry.inputs[0]} and {entry.outputs[0]} differ in size")

    def run(x, out):
        if x.shape != out.shape:
            raise shape_error(f"{name}: wrong output shape", data=x.shape, output=out.shape)
        bitcast(to_bool, out.nbytes, ptr(x), ptr(out))
    return run
