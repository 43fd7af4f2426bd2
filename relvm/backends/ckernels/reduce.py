"""C kernels for the reductions: sum, prod, mean, max, min, argmax, argmin and logsumexp over
any axes."""

from __future__ import annotations

from ...ops.reduce import reduced_axes, reduced_shape
from ...ops.transform import at_run_time
from . import kernel
from .common import CODE, NUMBERS, attrs_of, check, check_rank, contiguous_strides, int64s
from .common import library, remember, shape_error

# op -> the C enum constant (kernels/reduce.h).
REDUCE = {"sum": "RELVM_SUM", "prod": "RELVM_PROD", "mean": "RELVM_MEAN", "max": "RELVM_MAX",
          "min": "RELVM_MIN", "argmax": "RELVM_ARGMAX", "argmin": "RELVM_ARGMIN"}
_PICKS = ("max", "min", "argmax", "argmin")  # need a value to pick


def _groups(shape, strides, reduced) -> list[tuple[bool, int, int]]:
    """(is_reduced, size, stride) runs: neighbouring dims of one kind merged, size-1 dims gone.

    x is contiguous, so two neighbours always merge into one dim; merging keeps the row-major
    order argmax numbers the reduced positions in.
    """
    out: list[tuple[bool, int, int]] = []
    for d, (n, st) in enumerate(zip(shape, strides)):
        if n == 1:
            continue
        kind = d in reduced
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] * n, st)
        else:
            out.append((kind, n, st))
    return out


def _plan(op: str, attrs, x_shape, out_shape):
    check_rank(len(x_shape), op)
    axes = at_run_time(reduced_axes, attrs, len(x_shape))
    want = reduced_shape(x_shape, axes, attrs.keepdims)
    if tuple(want) != out_shape:
        raise shape_error(f"{op}: wrong output shape", data=x_shape, output=out_shape)
    count = 1
    for a in axes:
        count *= x_shape[a]
    if op in _PICKS and count == 0 and all(out_shape):
        raise ValueError(f"{op} over an empty axis: data shape {x_shape}, axes {list(axes)}")
    runs = _groups(x_shape, contiguous_strides(x_shape), set(axes))
    kept = [(n, st) for red, n, st in runs if not red]
    red = [(n, st) for is_red, n, st in runs if is_red]
    return (len(kept), int64s([n for n, _ in kept]), int64s([st for _, st in kept]),
            len(red), int64s([n for n, _ in red]), int64s([st for _, st in red]))


def make_reduce(entry):
    ffi, lib = library()
    op, dt = getattr(lib, REDUCE[entry.op]), CODE[entry.inputs[0]]
    attrs = attrs_of(entry)
    last = int(bool(attrs.get("select_last_index", False)))
    reduce, ptr, name, plans = lib.relvm_reduce, ffi.from_buffer, entry.op, {}

    def run(x, out):
        key = (x.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, _plan(name, attrs, *key))
        if out.size:
            nkept, kshape, kstrides, nred, rshape, rstrides = plan
            reduce(op, dt, last, ptr(x), ptr(out), nkept, kshape, kstrides, nred, rshape,
                   rstrides)
    return run


for _op in REDUCE:
    kernel(_op, dtypes=NUMBERS)(make_reduce)


@kernel("logsumexp", dtypes=("float32", "float64", "float16"))
def make_logsumexp(entry):
    ffi, lib = library()
    dt, attrs = CODE[entry.inputs[0]], attrs_of(entry)
    logsumexp, ptr, plans = lib.relvm_logsumexp, ffi.from_buffer, {}

    def run(x, out):
        key = (x.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, _plan("logsumexp", attrs, *key))
        if out.size:
            nkept, kshape, kstrides, nred, rshape, rstrides = plan
            check(logsumexp(dt, ptr(x), ptr(out), nkept, kshape, kstrides, nred, rshape,
                            rstrides), f"logsumexp {key}")
    return run
