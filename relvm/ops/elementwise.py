"""Elementwise ops: unary math, binary arithmetic and comparison with broadcasting, ``where``.

Semantics where NumPy and C disagree are fixed here, and the kernels follow the reference:
integer ``divide`` truncates toward zero and gives 0 for a zero divisor; ``round`` rounds half to
even; ``sign`` of NaN is NaN; ``rsqrt(x) = 1 / sqrt(x)``.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.types import TensorType
from .common import (ALL_DTYPES, FLOATS, INTEGERS, NUMERIC, broadcast_shapes, check_dtype,
                     np_dtype, same_dtype, tensor_arg)
from .registry import BROADCAST, DTYPE, ELEMWISE, FLOAT, OpTypeError, attr, register

# --- unary --------------------------------------------------------------------------------------

_erf = np.frompyfunc(math.erf, 1, 1)


def _quiet(fn, x):
    """``fn(x)`` without NumPy's warnings: outside a function's domain the result is NaN (or
    an infinity), as C's."""
    with np.errstate(all="ignore"):
        return fn(x)


def _unary_type(allowed: tuple[str, ...], what: str):
    def infer(attrs, x):
        t = tensor_arg(x, "data")
        check_dtype(t, "data", allowed, what)
        return t
    return infer


def _unary(name: str, fn, allowed: tuple[str, ...], what: str, doc: str) -> None:
    register(name, inputs=("data",), infer=_unary_type(allowed, what),
             reference=lambda attrs, x: np.asarray(fn(x)).astype(x.dtype, copy=False),
             pattern=ELEMWISE, doc=doc)


_F = (FLOATS, "a float dtype")
_N = (NUMERIC, "a numeric dtype")

_unary("nn.relu", lambda x: np.maximum(x, x.dtype.type(0)), *_N, "max(x, 0)")
_unary("sigmoid", lambda x: 1 / (1 + np.exp(-x)), *_F, "1 / (1 + exp(-x))")
_unary("tanh", np.tanh, *_F, "hyperbolic tangent")
_unary("exp", np.exp, *_F, "e to the x")
_unary("log", np.log, *_F, "natural logarithm")
_unary("sqrt", np.sqrt, *_F, "square root")
_unary("rsqrt", lambda x: 1 / np.sqrt(x), *_F, "1 / sqrt(x)")
_unary("erf", lambda x: np.asarray(_erf(x.astype(np.float64)), np.float64), *_F,
       "Gauss error function")
_unary("floor", np.floor, *_F, "round toward -inf")
_unary("ceil", np.ceil, *_F, "round toward +inf")
_unary("round", np.round, *_F, "round half to even")
_unary("negative", np.negative, *_N, "-x")
_unary("abs", np.abs, *_N, "|x|")
_unary("sign", np.sign, *_N, "-1, 0 or 1 (NaN stays NaN)")

#: Trigonometric and hyperbolic functions and their inverses (C's libm names).
TRIGONOMETRIC = ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
                 "atanh")
for _name in TRIGONOMETRIC:
    _fn = getattr(np, "arc" + _name[1:] if _name.startswith("a") else _name)
    _doc = (f"inverse of {_name[1:]} (NaN outside its domain)" if _name.startswith("a")
            else f"{_name}(x), radians" if len(_name) == 3 else f"hyperbolic {_name[:-1]}")
    _unary(_name, lambda x, fn=_fn: _quiet(fn, x), *_F, _doc)


_unary("bitwise_not", np.invert, INTEGERS, "an integer dtype", "~x, every bit flipped")


def _logical_not_type(attrs, x):
    t = tensor_arg(x, "data")
    check_dtype(t, "data", ("bool",), "dtype bool")
    return t


register("logical_not", inputs=("data",), infer=_logical_not_type,
         reference=lambda attrs, x: np.asarray(np.logical_not(x)), pattern=ELEMWISE, doc="not x (bool)")


def clip_bounds(a_min: float, a_max: float, dtype: str) -> tuple:
    """clip's bounds as values of ``dtype``: what the reference, the C kernel and generated code
    all compare with.

    A float dtype rounds them to its precision (past its range: an infinity). An integer dtype
    takes ``ceil(a_min)`` and ``floor(a_max)``, each clamped into its range (an infinite bound
    becomes the range's end). NaN bounds are the type relation's to refuse for integers.
    """
    dt = np.dtype(dtype)
    if dt.kind == "f":
        with np.errstate(over="ignore"):
            return dt.type(a_min), dt.type(a_max)
    info = np.iinfo(dt)

    def clamp(v: float, rounded) -> int:
        if math.isinf(v):
            return info.max if v > 0 else info.min
        return min(max(rounded(v), info.min), info.max)
    return dt.type(clamp(a_min, math.ceil)), dt.type(clamp(a_max, math.floor))


def _clip_ref(attrs, x):
    lo, hi = clip_bounds(attrs.a_min, attrs.a_max, x.dtype.name)
    # minimum(maximum(x, lo), hi), as ONNX and np.clip: with a_min > a_max every element is
    # a_max; NaN in x or in a bound propagates. asarray: a rank-0 input gives a NumPy scalar.
    return np.asarray(np.minimum(np.maximum(x, lo), hi), x.dtype)


def _clip_type(attrs, x):
    t = tensor_arg(x, "data")
    check_dtype(t, "data", NUMERIC, "a numeric dtype")
    if t.dtype not in FLOATS:
        for name in ("a_min", "a_max"):
            if math.isnan(attrs[name]):
                raise OpTypeError(f"{name} is nan, which {t.dtype} data cannot be compared with")
    return t


register("clip", inputs=("data",), infer=_clip_type, reference=_clip_ref, pattern=ELEMWISE,
         attrs=[attr("a_min", FLOAT, required=True), attr("a_max", FLOAT, required=True)],
         doc="min(max(x, a_min), a_max): a_max where a_min > a_max; NaN propagates")


def _leaky_relu_type(attrs, x):
    t = tensor_arg(x, "data")
    check_dtype(t, "data", FLOATS, "a float dtype")
    return t


register("nn.leaky_relu", inputs=("data",), infer=_leaky_relu_type,
         reference=lambda attrs, x: np.where(x > 0, x, x * x.dtype.type(attrs.alpha)).astype(x.dtype),
         pattern=ELEMWISE, attrs=[attr("alpha", FLOAT, 0.25)], doc="x if x > 0 else alpha * x")


def _cast_type(attrs, x):
    t = tensor_arg(x, "data")
    return TensorType(t.shape, attrs.dtype)


def _cast_ref(attrs, x):
    target = np_dtype(attrs.dtype)
    if x.dtype.kind == "f" and target.kind in "iu":
        return _float_to_int(x, target)
    return x.astype(target)


def _float_to_int(x: np.ndarray, target: np.dtype) -> np.ndarray:
    """Float to int: truncated toward zero (C semantics); NaN, infinities and values outside
    [min, max] give 0, with min and max rounded to x's float type first (float32's int32 max
    is 2^31). A value at that rounded-up max, one past the int range, gives the int minimum, as
    x86 and NumPy's cast do (stated here: NumPy's own cast of it is undefined)."""
    info = np.iinfo(target)
    with np.errstate(invalid="ignore", over="ignore"):
        lo, hi = x.dtype.type(info.min), x.dtype.type(info.max)
        ok = np.isfinite(x) & (x >= lo) & (x <= hi)
        t = np.trunc(np.where(ok, x, 0)).astype(np.float64)
        past = t >= float(info.max) + 1.0  # a power of two: exact in float64
        return np.where(past, info.min, np.where(ok, t, 0)).astype(target)


register("cast", inputs=("data",), infer=_cast_type, reference=_cast_ref, pattern=ELEMWISE,
         attrs=[attr("dtype", DTYPE, required=True)], doc="convert to another dtype")

# --- binary with broadcasting -------------------------------------------------------------------


def _binary_type(allowed: tuple[str, ...], what: str, out_dtype: str | None):
    def infer(attrs, a, b):
        lhs, rhs = tensor_arg(a, "lhs"), tensor_arg(b, "rhs")
        dtype = same_dtype(("lhs", lhs), ("rhs", rhs))
        check_dtype(lhs, "lhs", allowed, what)
        shape = broadcast_shapes(("lhs", lhs.shape), ("rhs", rhs.shape))
        return TensorType(shape, out_dtype or dtype)
    return infer


def _binary(name: str, fn, allowed, what: str, out_dtype: str | None, doc: str) -> None:
    def reference(attrs, a, b):
        out = np.asarray(fn(a, b))
        return out.astype(out_dtype or a.dtype, copy=False)
    register(name, inputs=("lhs", "rhs"), infer=_binary_type(allowed, what, out_dtype),
             reference=reference, pattern=BROADCAST, doc=doc)


def _divide(a, b):
    if a.dtype.kind == "u":  # in its own type: uint64 past 2^63 does not fit int64
        return np.where(b == 0, 0, a // np.where(b == 0, 1, b).astype(b.dtype))
    if a.dtype.kind == "i":
        safe = np.where(b == 0, 1, b)
        q = np.abs(a.astype(np.int64)) // np.abs(safe.astype(np.int64))
        q = np.where((a < 0) != (safe < 0), -q, q)
        return np.where(b == 0, 0, q)
    return a / b


def _integer_safe(fn):
    """``fn`` (a remainder) with 0 where an integer divisor is 0, as C's kernels give."""
    def remainder(a, b):
        with np.errstate(divide="ignore", invalid="ignore"):
            out = fn(a, b)
        if a.dtype.kind in "iu":
            out = np.where(b == 0, 0, out)
        return out
    return remainder


_binary("add", np.add, *_N, None, "a + b")
_binary("subtract", np.subtract, *_N, None, "a - b")
_binary("multiply", np.multiply, *_N, None, "a * b")
_binary("divide", _divide, *_N, None, "a / b (integers: truncated, 0 for a zero divisor)")
_binary("power", np.power, *_F, None, "a ** b")
_binary("mod", _integer_safe(np.fmod), *_N, None,
        "remainder of truncated division, the sign of a (C's fmod and %); 0 for an integer b "
        "of 0")
_binary("floor_mod", _integer_safe(np.mod), *_N, None,
        "remainder of floored division, the sign of b (Python's %); 0 for an integer b of 0")
_binary("maximum", np.maximum, *_N, None, "elementwise max (NaN propagates)")
_binary("minimum", np.minimum, *_N, None, "elementwise min (NaN propagates)")
for _name, _fn, _doc in [("equal", np.equal, "a == b"), ("not_equal", np.not_equal, "a != b"),
                         ("less", np.less, "a < b"), ("less_equal", np.less_equal, "a <= b"),
                         ("greater", np.greater, "a > b"),
                         ("greater_equal", np.greater_equal, "a >= b")]:
    _binary(_name, _fn, ALL_DTYPES, "a dtype", "bool", _doc)
_binary("bitwise_and", np.bitwise_and, INTEGERS, "an integer dtype", None, "a & b")
_binary("bitwise_or", np.bitwise_or, INTEGERS, "an integer dtype", None, "a | b")
_binary("bitwise_xor", np.bitwise_xor, INTEGERS, "an integer dtype", None, "a ^ b")


def _left_shift(a, b):
    """a << b, wrapping (in the unsigned type); 0 for a count outside [0, bits) (C leaves
    those undefined), as ONNX's BitShift."""
    bits = a.dtype.itemsize * 8
    a, b = np.broadcast_arrays(a, b)
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    count = np.clip(b, 0, bits - 1).astype(unsigned)
    shifted = np.left_shift(a.astype(unsigned), count).astype(a.dtype)
    return np.where((b < 0) | (b >= bits), 0, shifted)


def _right_shift(a, b):
    """a >> b, arithmetic for signed a; for a count outside [0, bits) every bit is shifted out:
    -1 for a negative a, else 0."""
    bits = a.dtype.itemsize * 8
    a, b = np.broadcast_arrays(a, b)
    shifted = np.right_shift(a, np.clip(b, 0, bits - 1).astype(a.dtype))
    # Unsigned: 0 alone (int64's -1 beside uint64 would promote both to float64).
    gone = 0 if a.dtype.kind == "u" else np.where(a < 0, -1, 0).astype(a.dtype)
    return np.where((b < 0) | (b >= bits), gone, shifted)


_binary("left_shift", _left_shift, INTEGERS, "an integer dtype", None,
        "a << b, wrapping; 0 for b < 0 or b >= the bit width")
_binary("right_shift", _right_shift, INTEGERS, "an integer dtype", None,
        "a >> b (arithmetic for signed a); for b < 0 or b >= the bit width, -1 or 0")
_binary("logical_and", np.logical_and, ("bool",), "dtype bool", "bool", "a and b (bool)")
_binary("logical_or", np.logical_or, ("bool",), "dtype bool", "bool", "a or b (bool)")


def _where_type(attrs, c, a, b):
    cond, lhs, rhs = tensor_arg(c, "condition"), tensor_arg(a, "x"), tensor_arg(b, "y")
    check_dtype(cond, "condition", ("bool",), "dtype bool")
    dtype = same_dtype(("x", lhs), ("y", rhs))
    shape = broadcast_shapes(("condition", cond.shape), ("x", lhs.shape), ("y", rhs.shape))
    return TensorType(shape, dtype)


register("where", inputs=("condition", "x", "y"), infer=_where_type,
         reference=lambda attrs, c, a, b: np.where(c, a, b).astype(a.dtype, copy=False),
         pattern=BROADCAST, doc="x where condition else y, with broadcasting")
