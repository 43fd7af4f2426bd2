"""C kernels for pooling, softmax, the norms, and dropout."""

from __future__ import annotations

from ...ops import pool as pool_ops
from ...ops import window
from ...ops.common import normalize_axis
from ...ops.transform import at_run_time
from . import kernel
from .common import (ALL, CODE, FLOATS, ITEMSIZE, attrs_of, check, int64s, library, prod,
                     remember, shape_error)
from .linalg import _Shape


def _axis_split(shape, axis: int) -> tuple[int, int, int]:
    """(outer, len, inner): ``shape`` seen around ``axis``."""
    return prod(shape[:axis]), shape[axis], prod(shape[axis + 1:])


# --- pooling ------------------------------------------------------------------------------------

def _pool_plan(ffi, attrs, x, out, count_include_pad: bool):
    if len(x) != 4:
        raise shape_error("pooling needs 4-d NCHW data", data=x)
    kernel_hw, strides, dilation, pads = pool_ops.pool_geometry(attrs)
    oh, ow = window.runtime_out(_Shape(x), kernel_hw, strides, dilation, pads,
                                   attrs.ceil_mode, "pool_size")
    if out != x[:2] + (oh, ow):
        raise shape_error("pooling: wrong output shape", data=x, output=out)
    return ffi.new("struct relvm_pool2d_shape *", dict(
        planes=x[0] * x[1], h=x[2], w=x[3], oh=oh, ow=ow, kh=kernel_hw[0], kw=kernel_hw[1],
        sh=strides[0], sw=strides[1], dh=dilation[0], dw=dilation[1], pt=pads[0][0],
        pl=pads[1][0], pb=pads[0][1], pr=pads[1][1], count_include_pad=int(count_include_pad)))


def _make_pool(entry, c_name: str):
    ffi, lib = library()
    attrs, dt = attrs_of(entry), CODE[entry.inputs[0]]
    include_pad = bool(attrs.get("count_include_pad", False))
    pool, ptr, plans = getattr(lib, c_name), ffi.from_buffer, {}
    name = entry.name

    def run(x, out):
        key = (x.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, _pool_plan(ffi, attrs, *key, include_pad))
        check(pool(dt, plan, ptr(x), ptr(out)), name)
    return run


@kernel("nn.max_pool2d", dtypes=FLOATS)
def make_max_pool2d(entry):
    return _make_pool(entry, "relvm_max_pool2d")


@kernel("nn.max_pool2d_with_argmax", dtypes=FLOATS)
def make_max_pool2d_argmax(entry):
    ffi, lib = library()
    attrs, dt = attrs_of(entry), CODE[entry.inputs[0]]
    pool, ptr, plans, name = lib.relvm_max_pool2d_argmax, ffi.from_buffer, {}, entry.name
    column_major = int(attrs.storage_order)

    def run(x, out, index):
        key = (x.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, _pool_plan(ffi, attrs, *key, False))
        if index.shape != out.shape:
            raise shape_error(f"{name}: wrong index shape", output=out.shape, index=index.shape)
        check(pool(dt, plan, column_major, ptr(x), ptr(out), ffi.cast("int64_t *", ptr(index))),
              name)
    return run


@kernel("nn.max_unpool", dtypes=ALL, accepts=lambda e: e.inputs[1] == "int64")
def make_max_unpool(entry):
    ffi, lib = library()
    size, ptr, name, unpool = ITEMSIZE[entry.inputs[0]], ffi.from_buffer, entry.name, \
        lib.relvm_max_unpool
    attrs = attrs_of(entry)

    def run(x, index, out):
        unpooled = pool_ops.unpool_sizes(attrs, x.shape[2:])
        want = x.shape[:2] + pool_ops.unpool_out_sizes(attrs, x.shape[2:])
        if index.shape != x.shape or out.shape != want or x.ndim > 10:
            raise shape_error(f"{name}: wrong shapes", data=x.shape, indices=index.shape,
                              output=out.shape)
        if any(not 0 <= u <= o for u, o in zip(unpooled, want[2:])):
            raise ValueError(f"{name}: the unpooled size {list(unpooled)} is negative or past "
                             f"the output's {list(want[2:])}")
        bad = ffi.new("int64_t *")
        status = unpool(size, x.size, ptr(x), ffi.cast("int64_t *", ptr(index)),
                        x.shape[0] * x.shape[1], x.ndim - 2, int64s(unpooled),
                        int64s(want[2:]), ptr(out), bad)
        if status == -3:
            total = x.shape[0] * x.shape[1] * prod(unpooled)
            raise ValueError(f"{name}: index {int(index.reshape(-1)[bad[0]])} is out of range "
                             f"for an unpooled tensor of {total} elements "
                             f"{x.shape[:2] + unpooled}")
        check(status, f"{name} of {x.shape}")
    return run


@kernel("nn.avg_pool2d", dtypes=FLOATS)
def make_avg_pool2d(entry):
    return _make_pool(entry, "relvm_avg_pool2d")


def _make_global_pool(entry, is_max: bool):
    ffi, lib = library()
    dt, name = CODE[entry.inputs[0]], entry.name
    pool, ptr = lib.relvm_global_pool2d, ffi.from_buffer

    def run(x, out):
        if len(x.shape) != 4 or out.shape != x.shape[:2] + (1, 1):
            raise shape_error(f"{name}: wrong shapes", data=x.shape, output=out.shape)
        planes, size = x.shape[0] * x.shape[1], x.shape[2] * x.shape[3]
        if is_max and size == 0 and planes:
            raise ValueError(f"global_max_pool2d of an empty image {x.shape}")
        pool(dt, is_max, planes, size, ptr(x), ptr(out))
    return run


@kernel("nn.global_max_pool2d", dtypes=FLOATS)
def make_global_max_pool2d(entry):
    return _make_global_pool(entry, True)


@kernel("nn.global_avg_pool2d", dtypes=FLOATS)
def make_global_avg_pool2d(entry):
    return _make_global_pool(entry, False)


# --- softmax and the norms ----------------------------------------------------------------------

def _softmax(entry, take_log: int):
    ffi, lib = library()
    attrs, dt = attrs_of(entry), CODE[entry.inputs[0]]
    softmax, ptr, name, plans = lib.relvm_softmax, ffi.from_buffer, entry.name, {}

    def run(x, out):
        plan = plans.get(x.shape)
        if plan is None:
            axis = at_run_time(normalize_axis, attrs.axis, x.ndim)
            plan = remember(plans, x.shape, _axis_split(x.shape, axis))
        if x.shape != out.shape:
            raise shape_error(f"{name}: wrong output shape", data=x.shape, output=out.shape)
        softmax(dt, take_log, *plan, ptr(x), ptr(out))
    return run


@kernel("nn.softmax", dtypes=FLOATS)
def make_softmax(entry):
    return _softmax(entry, 0)


@kernel("nn.log_softmax", dtypes=FLOATS)
def make_log_softmax(entry):
    return _softmax(entry, 1)


def _param_check(params, names, x_shape, axis: int) -> None:
    for p, pname in zip(params, names):
        if p.shape != (x_shape[axis],):
            raise ValueError(f"{pname} {p.shape} does not match data axis {axis} of {x_shape}")


@kernel("nn.layer_norm", dtypes=FLOATS)
def make_layer_norm(entry):
    ffi, lib = library()
    attrs, dt = attrs_of(entry), CODE[entry.inputs[0]]
    eps, scale, center = float(attrs.epsilon), int(attrs.scale), int(attrs.center)
    norm, ptr, name, plans = lib.relvm_layer_norm, ffi.from_buffer, entry.name, {}

    def run(x, gamma, beta, out):
        key = (x.shape, gamma.shape, beta.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            axis = at_run_time(normalize_axis, attrs.axis, x.ndim)
            _param_check((gamma, beta), ("gamma", "beta"), x.shape, axis)
            if out.shape != x.shape:
                raise shape_error(f"{name}: wrong output shape", data=x.shape, output=out.shape)
            plan = remember(plans, key, _axis_split(x.shape, axis))
        norm(dt, *plan, ptr(x), ptr(gamma), ptr(beta), ptr(out), eps, scale, center)
    return run


@kernel("nn.batch_norm", dtypes=FLOATS)
def make_batch_norm(entry):
    ffi, lib = library()
    attrs, dt = attrs_of(entry), CODE[entry.inputs[0]]
    eps, scale, center = float(attrs.epsilon), int(attrs.scale), int(attrs.center)
    norm, copy, ptr, name, plans = (lib.relvm_batch_norm, lib.relvm_copy, ffi.from_buffer,
                                    entry.name, {})
    names = ("gamma", "beta", "moving_mean", "moving_var")

    def run(x, gamma, beta, mean, var, out, out_mean, out_var):
        key = (x.shape, gamma.shape, beta.shape, mean.shape, var.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            axis = at_run_time(normalize_axis, attrs.axis, x.ndim)
            _param_check((gamma, beta, mean, var), names, x.shape, axis)
            if out.shape != x.shape or out_mean.shape != mean.shape or out_var.shape != var.shape:
                raise shape_error(f"{name}: wrong output shapes", data=x.shape,
                                  output=out.shape)
            plan = remember(plans, key, _axis_split(x.shape, axis))
        norm(dt, *plan, ptr(x), ptr(gamma), ptr(beta), ptr(mean), ptr(var), ptr(out), eps,
             scale, center)
        copy(ptr(out_mean), ptr(mean), mean.nbytes)
        copy(ptr(out_var), ptr(var), var.nbytes)
    return run


@kernel("nn.dropout", dtypes=FLOATS)
def make_dropout(entry):
    """Inference dropout: the data unchanged, and a mask of ones."""
    ffi, lib = library()
    copy, fill, ptr, name = lib.relvm_copy, lib.relvm_fill, ffi.from_buffer, entry.name
    size = 4 if entry.inputs[0] == "float32" else 8
    one = ffi.new("double *", 1.0) if size == 8 else ffi.new("float *", 1.0)

    def run(x, out, mask):
        if out.shape != x.shape or mask.shape != x.shape:
            raise shape_error(f"{name}: wrong output shapes", data=x.shape, output=out.shape)
        copy(ptr(out), ptr(x), x.nbytes)
        check(fill(size, ptr(mask), mask.size, one), name)
    return run


# --- rms, group and instance norm ---------------------------------------------------------------

@kernel("nn.rms_norm", dtypes=FLOATS)
def make_rms_norm(entry):
    ffi, lib = library()
    attrs, dt = attrs_of(entry), CODE[entry.inputs[0]]
    eps, norm, ptr, name, plans = float(attrs.epsilon), lib.relvm_rms_norm, ffi.from_buffer, \
        entry.name, {}

    def run(x, gamma, out):
        key = (x.shape, gamma.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            axis = at_run_time(normalize_axis, attrs.axis, x.ndim)
            want = x.shape[axis:]
            if gamma.ndim > len(want) or gamma.shape != want[len(want) - gamma.ndim:] \
                    or out.shape != x.shape:
                raise shape_error(f"{name}: gamma must have the last normalized dims of data "
                                  f"from axis {attrs.axis}", data=x.shape, gamma=gamma.shape,
                                  output=out.shape)
            plan = remember(plans, key, (prod(x.shape[:axis]), prod(want), gamma.size))
        check(norm(dt, *plan, ptr(x), ptr(gamma), ptr(out), eps), name)
    return run


def _channel_norm(entry, groups_of):
    ffi, lib = library()
    attrs, dt = attrs_of(entry), CODE[entry.inputs[0]]
    eps, scale, center = float(attrs.epsilon), int(attrs.scale), int(attrs.center)
    norm, ptr, name, plans = lib.relvm_group_norm, ffi.from_buffer, entry.name, {}

    def run(x, gamma, beta, out):
        key = (x.shape, gamma.shape, beta.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            if x.ndim < 2 or out.shape != x.shape:
                raise shape_error(f"{name}: wrong shapes", data=x.shape, output=out.shape)
            _param_check((gamma, beta), ("gamma", "beta"), x.shape, 1)
            groups = groups_of(x.shape[1])
            if x.shape[1] % groups:
                raise ValueError(f"{name}: num_groups={groups} does not divide the "
                                 f"{x.shape[1]} channels of data {x.shape}")
            plan = remember(plans, key, (x.shape[0], groups, x.shape[1], prod(x.shape[2:])))
        check(norm(dt, *plan, ptr(x), ptr(gamma), ptr(beta), ptr(out), eps, scale, center),
              name)
    return run


@kernel("nn.group_norm", dtypes=FLOATS)
def make_group_norm(entry):
    groups = int(attrs_of(entry).num_groups)
    return _channel_norm(entry, lambda channels: groups)


@kernel("nn.instance_norm", dtypes=FLOATS)
def make_instance_norm(entry):
    return _channel_norm(entry, lambda channels: max(channels, 1))


def _axis_norm(entry, mode: int, eps: float):
    ffi, lib = library()
    attrs, dt = attrs_of(entry), CODE[entry.inputs[0]]
    norm, ptr, name, plans = lib.relvm_axis_norm, ffi.from_buffer, entry.name, {}

    def run(x, out):
        plan = plans.get(x.shape)
        if plan is None:
            if out.shape != x.shape:
                raise shape_error(f"{name}: wrong output shape", data=x.shape, output=out.shape)
            axis = at_run_time(normalize_axis, attrs.axis, x.ndim)
            plan = remember(plans, x.shape, _axis_split(x.shape, axis))
        check(norm(dt, mode, *plan, ptr(x), ptr(out), eps), name)
    return run


@kernel("nn.lp_norm", dtypes=FLOATS)
def make_lp_norm(entry):
    return _axis_norm(entry, int(attrs_of(entry).p), 0.0)


@kernel("nn.mean_variance_norm", dtypes=FLOATS)
def make_mean_variance_norm(entry):
    return _axis_norm(entry, 0, float(attrs_of(entry).epsilon))
