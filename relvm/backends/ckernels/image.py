"""C kernels of the image ops: image.resize2d (its taps come from the reference's own rule,
axis_taps, computed once per shape; C does the two weighted passes) and image.grid_sample (C
computes each point's taps from the grid, once for every channel)."""

from __future__ import annotations

import numpy as np

from ...ops import image as image_ops
from . import kernel
from .common import (CODE, FLOATS, attrs_of, check, int64s, library, prod, remember,
                     shape_error)


def _axis(ffi, attrs, axis: int, n_in: int, n_out: int, keep: list):
    """The C description of one axis; ``keep`` holds the arrays it points into."""
    a = ffi.new("struct relvm_resize_axis *")
    if n_out == 0 or image_ops._identity_axis(attrs, axis - 2, n_in, n_out):
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


def _plan(ffi, attrs, x, out):
    if len(x) != 4:
        raise shape_error("image.resize2d needs 4-d NCHW data", data=x)
    oh, ow = (int(d) for d in image_ops._out_size(attrs, x))
    if out != x[:2] + (oh, ow):
        raise shape_error("image.resize2d: wrong output shape", data=x, output=out)
    keep: list = []
    rows = _axis(ffi, attrs, 2, x[2], oh, keep)
    cols = _axis(ffi, attrs, 3, x[3], ow, keep)
    return (x[0] * x[1], x[2], x[3], oh, ow, rows, cols), keep


#: kernels/resize.c loads and stores these; the 16-bit and wider unsigned types are not there
#: yet (no model resizes them), so the build refuses them by name.
RESIZE_DTYPES = ("float32", "float64", "int64", "int32", "int8", "uint8")


@kernel("image.resize2d", dtypes=RESIZE_DTYPES, accepts=lambda e: e.outputs[0] in RESIZE_DTYPES)
def make_resize2d(entry):
    ffi, lib = library()
    attrs = attrs_of(entry)
    src, dst = CODE[entry.inputs[0]], CODE[entry.outputs[0]]
    fill = float(attrs.extrapolation_value)
    resize, ptr, name, plans = lib.relvm_resize2d, ffi.from_buffer, entry.name, {}

    def run(x, out):
        key = (x.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, _plan(ffi, attrs, *key))
        args, _ = plan
        status = resize(src, dst, *args, fill, ptr(x), ptr(out))
        if status:
            check(status, f"{name} {key}")
    return run


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
