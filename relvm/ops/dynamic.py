"""Ops whose result shape depends on input *values*: ``arange``, ``argwhere``, ``dyn.reshape``,
``dyn.broadcast_to``;
``shape_of``, whose value is a shape but whose own shape is static; and ``guard``, whose value
decides whether the program may go on.

A data-dependent op's type gives each unknown dim a fresh anonymous symbol (printed ``?``), a new
one per use of the type relation, so no two such results are ever assumed equal. At run time the VM
learns the dims from the values of the inputs listed in ``shape_inputs``.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import dims as D
from ..ir.types import TensorType
from .common import (NUMERIC, check_dtype, check_rank, check_result_rank, fmt_shape, np_dtype,
                     same_dtype, tensor_arg)
from .registry import DTYPE_OR_EMPTY, OPAQUE, OPT_INT, STR, OpTypeError, attr, choice, register
from .transform import INDEX_DTYPES, ZERO_OR_ONE, at_run_time, infer_newshape


def _shape_of_type(attrs, data):
    return TensorType((tensor_arg(data, "data").ndim,), attrs.dtype)


register("shape_of", inputs=("data",), infer=_shape_of_type, pattern=OPAQUE,
         reference=lambda attrs, x: np.array(x.shape, np_dtype(attrs.dtype)),
         doc="the shape of data as a 1-d tensor",
         attrs=[attr("dtype", choice(*INDEX_DTYPES), "int32")])

# --- arange -------------------------------------------------------------------------------------


def _arange_type(attrs, start, stop, step):
    named = [(n, tensor_arg(t, n)) for n, t in (("start", start), ("stop", stop), ("step", step))]
    for name, t in named:
        check_rank(t, name, 0)
    dtype = same_dtype(*named)
    out = TensorType((D.fresh(),), attrs.dtype or dtype)
    check_dtype(out, "the result", NUMERIC, "a numeric dtype")
    return out


def arange_length(start, stop, step) -> int:
    """max(0, ceil((stop - start) / step)); exact for integers."""
    if step == 0:
        raise ValueError("arange: step must not be zero")
    if isinstance(start, int):
        return max(0, -((start - stop) // step))
    span = (stop - start) / step
    if not math.isfinite(span):
        raise ValueError(f"arange: [{start}, {stop}) in steps of {step} has no finite length")
    return max(0, math.ceil(span))


def _arange_ref(attrs, start, stop, step):
    dtype = np_dtype(attrs.dtype) if attrs.dtype else start.dtype
    # The inputs take the result dtype first (Relay's arange makes them constants of it), and
    # each element is start + i * step computed in that dtype.
    a, b, s = (np.asarray(v).astype(dtype) for v in (start, stop, step))
    n = arange_length(a.item(), b.item(), s.item())
    return (np.arange(n, dtype=dtype) * s + a).astype(dtype)


register("arange", inputs=("start", "stop", "step"), infer=_arange_type, reference=_arange_ref,
         pattern=OPAQUE, data_dependent=True, shape_inputs=(0, 1, 2),
         doc="start, start + step, ... up to stop (exclusive); scalars in, 1-d out",
         attrs=[attr("dtype", DTYPE_OR_EMPTY, "")])

# --- argwhere -----------------------------------------------------------------------------------


def _argwhere_type(attrs, condition):
    t = tensor_arg(condition, "condition")
    return TensorType((D.fresh(), t.ndim), "int32")


register("argwhere", inputs=("condition",), infer=_argwhere_type, pattern=OPAQUE,
         reference=lambda attrs, c: np.argwhere(c).astype(np.int32),
         data_dependent=True, shape_inputs=(0,),
         doc="the coordinates of the non-zero entries, one row each (int32)")

# --- dyn.reshape --------------------------------------------------------------------------------


def _dyn_reshape_type(attrs, data, newshape):
    t, s = tensor_arg(data, "data"), tensor_arg(newshape, "newshape")
    check_rank(s, "newshape", 1)
    check_dtype(s, "newshape", INDEX_DTYPES, "dtype int32 or int64")
    rank = s.shape[0]
    if not isinstance(rank, int):
        raise OpTypeError(f"newshape {fmt_shape(s.shape)} must have a static length: it is the "
                          "rank of the result")
    check_result_rank(rank)
    return TensorType(tuple(D.fresh() for _ in range(rank)), t.dtype)


def _dyn_reshape_ref(attrs, x, newshape):
    codes = [int(v) for v in newshape]
    # Only the codes that keep one output dim per entry: the result rank is newshape's length.
    bad = [c for c in codes if c < -1]
    if bad:
        raise ValueError(f"dyn.reshape: newshape {codes} holds {bad[0]}; only sizes, 0 and -1 "
                         "are allowed")
    return x.reshape(at_run_time(infer_newshape, x.shape, codes, attrs.allowzero)).copy()


register("dyn.reshape", inputs=("data", "newshape"), infer=_dyn_reshape_type,
         reference=_dyn_reshape_ref, pattern=OPAQUE, data_dependent=True, shape_inputs=(1,),
         doc="reshape to a shape given as a tensor (codes 0 and -1)",
         attrs=[attr("allowzero", ZERO_OR_ONE, 0)])


# --- dyn.broadcast_to: ONNX Expand to a shape computed at run time ------------------------------

def _dyn_broadcast_to_type(attrs, data, shape):
    t, s = tensor_arg(data, "data"), tensor_arg(shape, "shape")
    check_rank(s, "shape", 1)
    check_dtype(s, "shape", INDEX_DTYPES, "dtype int32 or int64")
    length = s.shape[0]
    if attrs.length is not None:  # a kernel entry's: its shape's length, recorded
        if not D.equal_or_assumed(length, attrs.length):
            raise OpTypeError(f"shape {fmt_shape(s.shape)} must have {attrs.length} entries")
        length = attrs.length
    if not isinstance(length, int):
        raise OpTypeError(f"shape {fmt_shape(s.shape)} must have a static length: with data's "
                          "rank it decides the rank of the result")
    rank = max(length, t.ndim)
    check_result_rank(rank)
    # A static dim of data other than 1 is the result's (the shape's entry must be 1 or it);
    # the rest are the shape's values, known when the program runs.
    own = (1,) * (rank - t.ndim) + tuple(t.shape)
    return TensorType(tuple(d if isinstance(d, int) and d != 1 else D.fresh() for d in own),
                      t.dtype)


def expanded_shape(data: tuple, target: list) -> tuple:
    """The result shape of broadcasting ``data`` and ``target`` together (NumPy's rule), or a
    ValueError naming both."""
    if min(target, default=0) < 0:
        raise ValueError(f"dyn.broadcast_to: shape {target} holds a negative size")
    try:
        return np.broadcast_shapes(tuple(data), tuple(target))
    except ValueError:
        raise ValueError(f"dyn.broadcast_to: data {tuple(data)} and shape {target} do not "
                         "broadcast") from None


def _dyn_broadcast_to_ref(attrs, x, shape):
    target = [int(v) for v in np.asarray(shape).reshape(-1)]
    return np.broadcast_to(x, expanded_shape(x.shape, target)).copy()


def _dyn_broadcast_to_entry_attrs(attrs, data, shape) -> dict:
    """The call's attrs with length set: an entry's ranks do not show the shape's length."""
    return dict(attrs, length=tensor_arg(shape, "shape").shape[0])


register("dyn.broadcast_to", inputs=("data", "shape"), infer=_dyn_broadcast_to_type,
         reference=_dyn_broadcast_to_ref, pattern=OPAQUE, data_dependent=True, shape_inputs=(1,),
         attrs=[attr("length", OPT_INT, None)], entry_attrs=_dyn_broadcast_to_entry_attrs,
         doc="broadcast data and a shape given as a run-time 1-d tensor together (ONNX Expand, "
             "ConstantOfShape of a scalar): one copy where a shape computed from shapes would "
             "otherwise build a tensor of zeros to add")


# --- guard --------------------------------------------------------------------------------------


def _guard_type(attrs, data, condition):
    t, c = tensor_arg(data, "data"), tensor_arg(condition, "condition")
    check_rank(c, "condition", 0)
    check_dtype(c, "condition", ("bool",), "dtype bool")
    return t


def _guard_ref(attrs, x, condition):
    if not bool(condition):
        raise ValueError(attrs.message)
    return x.copy()


register("guard", inputs=("data", "condition"), infer=_guard_type, reference=_guard_ref,
         pattern=OPAQUE,
         doc="data, when condition (a bool scalar) holds; otherwise the program stops with an "
             "error saying message (the ONNX importer guards the one branch of an If that "
             "converts when the other cannot run)",
         attrs=[attr("message", STR, required=True)])
