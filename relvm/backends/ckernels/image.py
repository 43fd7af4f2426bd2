"""C kernels of the image ops: image.resize2d and dyn.resize2d (their taps come from the
reference's own rule, axis_taps, computed once per shape; C does the weighted passes) and
image.grid_sample (C computes each point's taps from the grid, once for every channel)."""

from __future__ import annotations

import numpy as np

from ...ops import image as image_ops
from . import kernel
from .common import (CODE, FLOATS, attrs_of, check, int64s, library, prod, remember,
                     shape_error)


def _axis(ffi, attrs, axis: int, n_in: int, n_out: int, keep: list):
    """The C description of one axis; ``keep`` holds the arrays it points into."""
    a = ffi.new("struct relvm_resize_axis *")
    if n_out == 0 or image_ops.identity_axis(attrs, axis - 2, n_in, n_out):
        return a  # taps 0: copied (or nothing to write)
    if n_in == 0:  # nothing to read: every position takes the fill value
        index, weights, outside = np.zeros((n_out, 1), np.int64), np.zeros((n_out, 1)), \
            np.ones(n_out, bool)
    else:
        index, weights, outside = image_ops.axis_taps(attrs, axis, n_in, n_out)
    arrays = [np.ascontiguousarray(index, np.int64), np.ascontiguousarray(weights, np.float64)]
    if outside is not None:
        arrays.append(np.ascontiguousarray(outside, np.uint8))
    keep += arrays
    a.taps = arrays[0].shape[1]
    a.index = ffi.cast("int64_t *", ffi.from_buffer(arrays[0]))
    a.weight = ffi.cast("double *", ffi.from_buffer(arrays[1]))
    if outside is not None:
        a.outside = ffi.cast("uint8_t *", ffi.from_buffer(arrays[2]))
    return a


def _plan(ffi, attrs, x: tuple, out: tuple):
    """The C calls that resize ``x`` into ``out``: one two-axis pass (planes, h, w) for 1 or 2
    spatial axes (1: h is 1, copied); for 3, D first over (planes, D, H*W) into a float64
    buffer, then H and W over (planes * OD, H, W), so every output rounds once."""
    if not 3 <= len(x) <= 5 or len(out) != len(x) or out[:2] != x[:2]:
        raise shape_error("resize2d needs (N, C, ...) data with 1 to 3 spatial axes and an "
                          "output of the same N and C", data=x, output=out)
    keep: list = []
    planes = x[0] * x[1]
    if len(x) == 3:
        one = ffi.new("struct relvm_resize_axis *")
        keep.append(one)
        return [(planes, 1, x[2], 1, out[2], one, _axis(ffi, attrs, 2, x[2], out[2], keep))], \
            keep, None
    rows = _axis(ffi, attrs, len(x) - 2, x[-2], out[-2], keep)
    cols = _axis(ffi, attrs, len(x) - 1, x[-1], out[-1], keep)
    if len(x) == 4:
        return [(planes, x[2], x[3], out[2], out[3], rows, cols)], keep, None
    depth = _axis(ffi, attrs, 2, x[2], out[2], keep)
    copy = ffi.new("struct relvm_resize_axis *")
    keep.append(copy)
    plane = x[3] * x[4]
    calls = [(planes, x[2], plane, out[2], plane, depth, copy),
             (planes * out[2], x[3], x[4], out[3], out[4], rows, cols)]
    return calls, keep, (planes, out[2], plane)


#: kernels/resize.c loads and stores these; the 16-bit and wider unsigned types are not there
#: yet (no model resizes them), so the build refuses them by name.
RESIZE_DTYPES = ("float32", "float64", "int64", "int32", "int8", "uint8")


def _resizer(entry, expect):
    """``run(x, out)``: ``x`` resized into ``out``, whose shape says the sizes; ``expect(x)``
    gives the spatial sizes an input shape must resize to (None: any), checked once a shape."""
    ffi, lib = library()
    attrs = attrs_of(entry)
    src, dst, mid = CODE[entry.inputs[0]], CODE[entry.outputs[0]], CODE["float64"]
    fill = float(attrs.extrapolation_value)
    resize, ptr, name, plans = lib.relvm_resize2d, ffi.from_buffer, entry.name, {}

    def make_plan(x: tuple, out: tuple):
        want = expect(attrs, x)
        if want is not None and (len(x) != len(out) or out[2:] != want):
            raise shape_error(f"{entry.op}: wrong output shape", data=x, output=out)
        return _plan(ffi, attrs, x, out)

    def run(x, out):
        key = (x.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, make_plan(*key))
        calls, _, middle = plan
        if middle is None:
            status = resize(src, dst, *calls[0], fill, ptr(x), ptr(out))
        else:  # D into a float64 buffer, then H and W from it
            buffer = np.empty(middle, np.float64)
            status = resize(src, mid, *calls[0], fill, ptr(x), ptr(buffer)) or \
                resize(mid, dst, *calls[1], fill, ptr(buffer), ptr(out))
        if status:
            check(status, f"{name} {key}")
    return run


def _accepts(e) -> bool:
    return e.outputs[0] in RESIZE_DTYPES


def _static_sizes(attrs, x: tuple):
    if not 3 <= len(x) <= 5:
        return None  # _plan says what is wrong
    return tuple(int(d) for d in image_ops.out_size(attrs, x))


@kernel("image.resize2d", dtypes=RESIZE_DTYPES, accepts=_accepts)
def make_resize2d(entry):
    return _resizer(entry, _static_sizes)


@kernel("dyn.resize2d", dtypes=RESIZE_DTYPES, accepts=_accepts)
def make_dyn_resize2d(entry):
    """The output was allocated from the sizes' values; they must still say its shape."""
    run = _resizer(entry, lambda attrs, x: None)

    def resize_to(x, sizes, out):
        if sizes.tolist() != list(out.shape[2:]):
            raise shape_error("dyn.resize2d: the output's spatial dims are not the sizes",
                              data=x.shape, sizes=sizes.tolist(), output=out.shape)
        run(x, out)
    return resize_to


def _grid_plan(x, grid, out):
    """The C arguments of image.grid_sample for these shapes (its checks run here, once)."""
    rank = len(x) - 2
    if not 1 <= rank <= 3 or len(grid) != len(x):
        raise shape_error("image.grid_sample needs (N, C, 1 to 3 spatial dims) data and a grid "
                          "of the same rank", data=x, grid=grid)
    if grid[0] != x[0] or grid[-1] != rank:
        raise shape_error(f"image.grid_sample: the grid must be (N, ..., {rank}) for this data",
                          data=x, grid=grid)
    if out != x[:2] + grid[1:-1]:
        raise shape_error("image.grid_sample: wrong output shape", data=x, grid=grid, output=out)
    spatial = int64s(x[2:])
    return (rank, x[0], x[1], spatial, prod(grid[1:-1])), spatial


@kernel("image.grid_sample", dtypes=FLOATS,
        accepts=lambda e: e.inputs[1] in FLOATS and e.outputs[0] == e.inputs[0])
def make_grid_sample(entry):
    ffi, lib = library()
    attrs = attrs_of(entry)
    codes = (CODE[entry.inputs[0]], CODE[entry.inputs[1]],
             getattr(lib, f"RELVM_GRID_{attrs.method.upper()}"),
             getattr(lib, f"RELVM_GRID_{attrs.padding_mode.upper()}"), int(attrs.align_corners))
    sample, ptr, name, plans = lib.relvm_grid_sample, ffi.from_buffer, entry.name, {}

    def run(x, grid, out):
        key = (x.shape, grid.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, _grid_plan(*key))
        args, _ = plan
        status = sample(*codes, *args, ptr(x), ptr(grid), ptr(out))
        if status:
            check(status, f"{name} {key}")
    return run


@kernel("image.col2im", dtypes=FLOATS)
def make_col2im(entry):
    ffi, lib = library()
    attrs, dt, name, col2im = attrs_of(entry), CODE[entry.inputs[0]], entry.name, lib.relvm_col2im
    k = len(attrs.image_shape)
    blocks = image_ops.col2im_blocks(attrs)
    dil, pads, strides = image_ops.col2im_geometry(attrs, k)
    kk, count = prod(attrs.block_shape), prod(blocks)
    args = [int64s(v) for v in (attrs.image_shape, attrs.block_shape, blocks, dil, pads[:k],
                                strides)]
    ptr = ffi.from_buffer

    def run(x, out):
        if x.ndim != 3 or x.shape[1] % kk or x.shape[2] != count or \
                out.shape != (x.shape[0], x.shape[1] // kk) + tuple(attrs.image_shape):
            raise shape_error(f"{name}: data must be (N, C * {kk}, {count})", data=x.shape,
                              output=out.shape)
        check(col2im(dt, out.shape[0] * out.shape[1], k, *args, ptr(x), ptr(out)),
              f"{name} of {x.shape}")
    return run
