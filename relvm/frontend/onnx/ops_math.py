"""Elementwise math, activations, comparisons, casts, reductions and softmax."""

from __future__ import annotations

import math

import numpy as np

from ...ir import dims as D
from .converters import converter, flatten2d, norm_axes, norm_axis, scalar
from .importer import ONNX_DTYPES, Node, onnx_type_name

_UNARY = {"Relu": "nn.relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
          "Sqrt": "sqrt", "Neg": "negative", "Abs": "abs", "Erf": "erf", "Ceil": "ceil",
          "Floor": "floor", "Not": "logical_not", "Sign": "sign", "Round": "round",
          "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan",
          "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh",
          "BitwiseNot": "bitwise_not"}

_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Equal": "equal",
           "Less": "less", "Greater": "greater", "LessOrEqual": "less_equal",
           "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or",
           "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}


@converter(*_UNARY)
def unary(n: Node):
    return n.call(_UNARY[n.op_type], n.x(0))


@converter(*_BINARY)
def binary(n: Node):
    return n.call(_BINARY[n.op_type], n.x(0), n.x(1))


@converter("Xor")
def xor(n: Node):
    if n.dtype(0) != "bool" or n.dtype(1) != "bool":
        raise n.fail(f"Xor needs bool inputs, got {n.dtype(0)} and {n.dtype(1)}")
    return n.call("not_equal", n.x(0), n.x(1))


@converter("BitShift")
def bit_shift(n: Node):
    direction = n.required("direction")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("LEFT", "RIGHT"):
        raise n.fail(f"direction must be LEFT or RIGHT, got {direction!r}")
    return n.call("left_shift" if direction == "LEFT" else "right_shift", n.x(0), n.x(1))


@converter("Reciprocal")
def reciprocal(n: Node):
    return n.call("divide", scalar(n, 1, n.dtype(0)), n.x(0))


@converter("Pow")
def pow_(n: Node):
    base, exponent = n.x(0), n.x(1)
    dtype = n.dtype(0)
    if dtype in ("float32", "float64", "float16"):
        if n.dtype(1) != dtype:
            exponent = n.call("cast", exponent, dtype=dtype)
        return n.call("power", base, exponent)
    # Integer bases: compute in float64 and truncate back, as ONNX Runtime does.
    out = n.call("power", n.call("cast", base, dtype="float64"),
                 n.call("cast", exponent, dtype="float64"))
    return n.call("cast", out, dtype=dtype)


@converter("Max", "Min", "Sum", "Mean")
def variadic(n: Node):
    op = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add"}[n.op_type]
    out = n.x(0)
    for i in range(1, len(n.inputs)):
        out = n.call(op, out, n.x(i))
    if n.op_type == "Mean" and len(n.inputs) > 1:
        out = n.call("divide", out, scalar(n, len(n.inputs), n.dtype(0)))
    return out


@converter("Where")
def where(n: Node):
    return n.call("where", n.x(0), n.x(1), n.x(2))


# IsNaN and IsInf are comparisons, exact and fused with what follows (every C kernel and the
# generated code keep IEEE comparisons: no -ffinite-math-only). x < x is false for every x,
# NaN included: "nothing is detected", in x's shape.
@converter("IsNaN")
def is_nan(n: Node):
    x = n.x(0)
    return n.call("not_equal", x, x)


@converter("IsInf")
def is_inf(n: Node):
    x, dtype = n.x(0), n.dtype(0)
    positive, negative = bool(n.attr("detect_positive", 1)), bool(n.attr("detect_negative", 1))
    if not dtype.startswith("float") or not (positive or negative):
        return n.call("less", x, x)
    if positive and negative:
        return n.call("equal", n.call("abs", x), scalar(n, math.inf, dtype))
    return n.call("equal", x, scalar(n, math.inf if positive else -math.inf, dtype))


# --- activations -----------------------------------------------------------------------------------

def _float_scalar(n: Node, value: float) -> object:
    return scalar(n, value, n.dtype(0))


@converter("LeakyRelu")
def leaky_relu(n: Node):
    return n.call("nn.leaky_relu", n.x(0), alpha=float(n.attr("alpha", 0.01)))


@converter("PRelu")
def prelu(n: Node):
    x = n.x(0)
    negative = n.call("less", x, _float_scalar(n, 0))
    return n.call("where", negative, n.call("multiply", x, n.x(1)), x)


def _hard_sigmoid(n: Node, x, alpha: float, beta: float):
    y = n.call("add", n.call("multiply", x, _float_scalar(n, alpha)), _float_scalar(n, beta))
    return n.call("clip", y, a_min=0.0, a_max=1.0)


@converter("HardSigmoid")
def hard_sigmoid(n: Node):
    return _hard_sigmoid(n, n.x(0), float(n.attr("alpha", 0.2)), float(n.attr("beta", 0.5)))


@converter("HardSwish")
def hard_swish(n: Node):
    x = n.x(0)
    return n.call("multiply", x, _hard_sigmoid(n, x, 1 / 6, 0.5))


@converter("Gelu")
def gelu(n: Node):
    x = n.x(0)
    half_x = n.call("multiply", x, _float_scalar(n, 0.5))
    if n.attr("approximate", "none") == "tanh":
        cube = n.call("multiply", n.call("multiply", x, x), x)
        inner = n.call("add", x, n.call("multiply", cube, _float_scalar(n, 0.044715)))
        inner = n.call("multiply", inner, _float_scalar(n, math.sqrt(2 / math.pi)))
        core = n.call("tanh", inner)
    else:
        core = n.call("erf", n.call("multiply", x, _float_scalar(n, 1 / math.sqrt(2))))
    return n.call("multiply", half_x, n.call("add", core, _float_scalar(n, 1)))


# The activations below are chains of elementwise ops, which the fusion pass makes one
# generated loop (exp and tanh in their vectorizable forms). float16 is computed in float32.

def _in_float(n: Node, what: str, body) -> object:
    """``body(x, c)`` on input 0, with ``c(value)`` a constant of the compute dtype; float16 is
    computed in float32 and cast back."""
    dtype = n.dtype(0)
    if dtype not in ("float32", "float64", "float16"):
        raise n.fail(f"{what} needs a float input, got {dtype}")
    inner = "float32" if dtype == "float16" else dtype
    x = n.x(0) if inner == dtype else n.call("cast", n.x(0), dtype=inner)
    y = body(x, lambda v: scalar(n, v, inner))
    return y if inner == dtype else n.call("cast", y, dtype=dtype)


def _expm1_scaled(n: Node, x, c, alpha: float):
    """alpha * (exp(x) - 1)."""
    return n.call("multiply", n.call("subtract", n.call("exp", x), c(1)), c(alpha))


def _elu(n: Node, x, c, alpha: float):
    return n.call("where", n.call("greater", x, c(0)), x, _expm1_scaled(n, x, c, alpha))


@converter("Elu")
def elu(n: Node):
    return _in_float(n, "Elu", lambda x, c: _elu(n, x, c, float(n.attr("alpha", 1.0))))


@converter("Selu")
def selu(n: Node):
    alpha = float(n.attr("alpha", 1.67326319217681884765625))
    gamma = float(n.attr("gamma", 1.05070102214813232421875))
    return _in_float(n, "Selu",
                     lambda x, c: n.call("multiply", _elu(n, x, c, alpha), c(gamma)))


@converter("Celu")
def celu(n: Node):
    alpha = float(n.attr("alpha", 1.0))
    if alpha == 0:
        raise n.fail("alpha must not be 0 (Celu divides by it)")

    def body(x, c):
        negative = _expm1_scaled(n, n.call("multiply", x, c(1 / alpha)), c, alpha)
        return n.call("add", n.call("maximum", x, c(0)), n.call("minimum", negative, c(0)))
    return _in_float(n, "Celu", body)


def _softplus(n: Node, x, c):
    """log(1 + exp(x)) as max(x, 0) + log(1 + exp(-|x|)): no overflow for large x."""
    tail = n.call("log", n.call("add", n.call("exp", n.call("negative", n.call("abs", x))), c(1)))
    return n.call("add", n.call("maximum", x, c(0)), tail)


@converter("Softplus")
def softplus(n: Node):
    return _in_float(n, "Softplus", lambda x, c: _softplus(n, x, c))


@converter("Mish")
def mish(n: Node):
    return _in_float(n, "Mish",
                     lambda x, c: n.call("multiply", x, n.call("tanh", _softplus(n, x, c))))


@converter("Softsign")
def softsign(n: Node):
    return _in_float(n, "Softsign", lambda x, c: n.call(
        "divide", x, n.call("add", n.call("abs", x), c(1))))


@converter("Swish")
def swish(n: Node):
    alpha = float(n.attr("alpha", 1.0))
    return _in_float(n, "Swish", lambda x, c: n.call(
        "multiply", x, n.call("sigmoid", n.call("multiply", x, c(alpha)))))


@converter("ThresholdedRelu")
def thresholded_relu(n: Node):
    alpha = float(n.attr("alpha", 1.0))
    return _in_float(n, "ThresholdedRelu", lambda x, c: n.call(
        "where", n.call("greater", x, c(alpha)), x, c(0)))


@converter("Shrink")
def shrink(n: Node):
    """x + bias below -lambd, x - bias above lambd, else 0. Integer inputs are computed in
    float64 and truncated back, as ONNX's reference does."""
    lambd, bias = float(n.attr("lambd", 0.5)), float(n.attr("bias", 0.0))
    dtype = n.dtype(0)
    if dtype == "bool":
        raise n.fail("Shrink needs a numeric input, got bool")
    inner = "float32" if dtype == "float16" else dtype if dtype.startswith("float") else "float64"
    x = n.x(0) if inner == dtype else n.call("cast", n.x(0), dtype=inner)

    def c(v):
        return scalar(n, v, inner)
    zero = c(0)
    above = n.call("where", n.call("greater", x, c(lambd)), n.call("subtract", x, c(bias)), zero)
    y = n.call("where", n.call("less", x, c(-lambd)), n.call("add", x, c(bias)), above)
    return y if inner == dtype else n.call("cast", y, dtype=dtype)


@converter("Mod")
def mod(n: Node):
    """fmod=1: the sign of the dividend (C's fmod); fmod=0: the divisor's (Python's %, NumPy's
    mod: -3 mod inf is inf). float16 is computed in float32."""
    dtype = n.dtype(0)
    if n.dtype(1) != dtype:
        raise n.fail(f"inputs differ in dtype: {dtype} and {n.dtype(1)}")
    fmod = int(n.attr("fmod", 0))
    if fmod not in (0, 1):
        raise n.fail(f"fmod must be 0 or 1, got {fmod}")
    if dtype == "bool":
        raise n.fail("Mod needs numeric inputs, got bool")
    a, b = n.x(0), n.x(1)
    if dtype == "float16":
        a, b = n.call("cast", a, dtype="float32"), n.call("cast", b, dtype="float32")
    y = n.call("mod" if fmod else "floor_mod", a, b)
    return n.call("cast", y, dtype=dtype) if dtype == "float16" else y


@converter("Clip")
def clip(n: Node):
    x, dtype = n.x(0), n.dtype(0)
    if n.opset < 11:
        lo = n.attr("min", -3.4028234663852886e38)
        hi = n.attr("max", 3.4028234663852886e38)
        return n.call("clip", x, a_min=float(lo), a_max=float(hi))
    bounds = []
    for i in (1, 2):
        if not n.has(i):
            bounds.append(None)
        elif n.known(i) is not None:
            bounds.append(float(np.asarray(n.known(i)).reshape(-1)[0]))
        else:
            bounds.append(n.x(i))
    if all(b is None or isinstance(b, float) for b in bounds):
        if dtype in ("float32", "float64", "float16"):
            lo, hi = -math.inf, math.inf
        else:
            info = np.iinfo(dtype)
            lo, hi = float(info.min), float(info.max)
        return n.call("clip", x, a_min=lo if bounds[0] is None else bounds[0],
                      a_max=hi if bounds[1] is None else bounds[1])
    out = x
    for b, op in zip(bounds, ("maximum", "minimum")):
        if b is None:
            continue
        b = b if not isinstance(b, float) else scalar(n, b, dtype)
        if b.checked_type.ndim:
            b = n.call("reshape", b, newshape=[])
        out = n.call(op, out, b)
    return out


# --- casts -----------------------------------------------------------------------------------------

def _target(n: Node, elem_type: int) -> str:
    dtype = ONNX_DTYPES.get(int(elem_type))
    if dtype is None:
        raise n.fail(f"cannot cast to {onnx_type_name(int(elem_type))}, which relvm does not "
                     "support")
    return dtype


@converter("Cast")
def cast(n: Node):
    dtype = _target(n, n.required("to"))
    if dtype == n.dtype(0):
        return n.value(0)
    return n.call("cast", n.x(0), dtype=dtype)


@converter("BitCast")
def bitcast(n: Node):
    """``bitcast``: the same bytes under a dtype of the same size."""
    to = int(n.required("to"))
    dtype = ONNX_DTYPES.get(to)
    if dtype is None:
        raise n.fail(f"cannot bitcast to {onnx_type_name(to)}, which relvm does not support")
    size, target = np.dtype(n.dtype(0)).itemsize, np.dtype(dtype).itemsize
    if size != target:
        raise n.fail(f"the input's {n.dtype(0)} ({size} bytes) and {dtype} ({target} bytes) "
                     "differ in size")
    if dtype == n.dtype(0):
        return n.value(0)
    return n.call("bitcast", n.x(0), dtype=dtype)


@converter("CastLike")
def cast_like(n: Node):
    dtype = n.dtype(1)
    if dtype == n.dtype(0):
        return n.value(0)
    return n.call("cast", n.x(0), dtype=dtype)


# --- reductions ------------------------------------------------------------------------------------

_REDUCE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
           "ReduceProd": "prod"}


def _reduce_axes(n: Node) -> tuple[list[int] | None, bool]:
    """(sorted axes, keepdims) of a Reduce* node; axes None for noop_with_empty_axes with none
    given. Axes come from the attribute (before opset 18, or 13 for ReduceSum) or the input."""
    rank = n.rank(0)
    if "axes" in n.attrs:
        axes = list(n.attr("axes"))
    elif n.has(1):
        axes = n.ints(1, "axes")
    else:
        axes = []
    if not axes:
        if n.attr("noop_with_empty_axes", 0):
            return None, True
        axes = list(range(rank))
    return sorted(norm_axes(n, axes, rank)), bool(n.attr("keepdims", 1))


@converter(*_REDUCE)
def reduce(n: Node):
    dtype = n.dtype(0)
    axes, keepdims = _reduce_axes(n)
    if axes is None:
        return n.value(0)
    op = _REDUCE[n.op_type]
    x = n.x(0)
    if op in ("max", "min") and any(n.shape(0)[a] == 0 for a in axes):
        return _empty_extreme(n, op, axes, keepdims)
    if dtype == "bool":
        if op not in ("max", "min"):
            raise n.fail(f"{n.op_type} of bool tensors is not supported")
        y = n.call(op, n.call("cast", x, dtype="uint8"), axis=axes, keepdims=keepdims)
        return n.call("cast", y, dtype="bool")
    return n.call(op, x, axis=axes, keepdims=keepdims)


# ReduceL1, L2, SumSquare and LogSum are sums of an elementwise op, then one on the result;
# LogSumExp is relvm's logsumexp (max-shifted, so stable). Over no axes (noop_with_empty_axes)
# each is its elementwise ops alone, as in ONNX Runtime: |x|, |x|, x*x, log(x), x.
_NORMS = ("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")


@converter(*_NORMS)
def reduce_norm(n: Node):
    dtype = n.dtype(0)
    if dtype == "bool":
        raise n.fail(f"{n.op_type} of bool tensors is not supported")
    axes, keepdims = _reduce_axes(n)
    x = n.x(0)
    # float16 is computed in float32; integers in their own dtype where the ops are exact
    # (|x|, x*x, sums wrap as ONNX Runtime's do), in float64 for sqrt/log/exp, then truncated.
    inner = "float32" if dtype == "float16" else dtype
    if inner != dtype:
        x = n.call("cast", x, dtype=inner)
    real = inner if inner.startswith("float") else "float64"
    op = n.op_type

    def total(y):
        return y if axes is None else n.call("sum", y, axis=axes, keepdims=keepdims)

    def as_real(y):
        return y if real == inner else n.call("cast", y, dtype=real)

    if op == "ReduceL1":
        y = total(n.call("abs", x))
    elif op == "ReduceSumSquare":
        y = total(n.call("multiply", x, x))
    elif op == "ReduceL2":
        y = n.call("abs", x) if axes is None else n.call("sqrt", as_real(
            total(n.call("multiply", x, x))))
    elif op == "ReduceLogSum":
        y = n.call("log", as_real(total(x)))
    elif axes is None:  # ReduceLogSumExp of one element is itself
        y = x
    else:
        y = n.call("logsumexp", as_real(x), axis=axes, keepdims=keepdims)
    return y if y.checked_type.dtype == dtype else n.call("cast", y, dtype=dtype)


def _empty_extreme(n: Node, op: str, axes: list[int], keepdims: bool):
    """max/min over an empty axis: ONNX's identity element (-inf, +inf, or the dtype's bound)."""
    shape = [1 if i in axes else d for i, d in enumerate(n.shape(0)) if keepdims or i not in axes]
    if not all(isinstance(d, int) for d in shape):
        raise n.fail(f"{n.op_type} over an empty axis needs the other dims static, got "
                     f"{D.shape_str(n.shape(0))}")
    dtype = n.dtype(0)
    if dtype == "bool":
        fill = op == "min"
    elif dtype.startswith("float"):
        fill = -math.inf if op == "max" else math.inf
    else:
        info = np.iinfo(dtype)
        fill = info.min if op == "max" else info.max
    return n.constant(np.full(shape, fill, dtype=dtype))


@converter("ArgMax", "ArgMin")
def arg_extreme(n: Node):
    axis = norm_axis(n, int(n.attr("axis", 0)), n.rank(0))
    op = "argmax" if n.op_type == "ArgMax" else "argmin"
    y = n.call(op, n.x(0), axis=[axis], keepdims=bool(n.attr("keepdims", 1)),
               select_last_index=bool(n.attr("select_last_index", 0)))
    return n.call("cast", y, dtype="int64")


# --- softmax -----------------------------------------------------------------------------------------

@converter("Softmax", "LogSoftmax")
def softmax(n: Node):
    op = "nn.softmax" if n.op_type == "Softmax" else "nn.log_softmax"
    rank = n.rank(0)
    x = n.x(0)
    if n.opset >= 13:
        return n.call(op, x, axis=norm_axis(n, int(n.attr("axis", -1)), rank))
    # Before opset 13 the input is seen as 2-D: (prod(shape[:axis]), prod(shape[axis:])).
    axis = norm_axis(n, int(n.attr("axis", 1)), rank)
    if axis == rank - 1:
        return n.call(op, x, axis=axis)
    y = n.call(op, flatten2d(n, x, axis), axis=1)
    return n.call("reshape_like", y, x)


@converter("Hardmax")
def hardmax(n: Node):
    """1 at the first maximum along axis, 0 elsewhere: argmax compared with each position."""
    rank, dtype = n.rank(0), n.dtype(0)
    x = n.x(0)
    if n.opset >= 13:
        axis = norm_axis(n, int(n.attr("axis", -1)), rank)
    else:  # seen as 2-D, (prod(shape[:axis]), prod(shape[axis:])), as Softmax before 13
        x, axis = flatten2d(n, x, norm_axis(n, int(n.attr("axis", 1)), rank)), 1
    shape = x.checked_type.shape
    top = n.call("argmax", x, axis=[axis], keepdims=True)
    if isinstance(shape[axis], int):
        positions = n.constant(np.arange(shape[axis], dtype=np.int32).reshape(
            (-1,) + (1,) * (len(shape) - 1 - axis)))
    else:  # 0, 1, 2... along the axis, in the input's shape
        ones = n.call("ones_like", n.call("cast", x, dtype="int32"))
        positions = n.call("subtract", n.call("cumsum", ones, axis=axis),
                           scalar(n, 1, "int32"))
    y = n.call("cast", n.call("equal", positions, top), dtype=dtype)
    return y if n.opset >= 13 else n.call("reshape_like", y, n.x(0))
