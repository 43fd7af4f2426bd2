"""Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
QLinearMatMul, ConvInteger and QLinearConv.

The integer products are relvm ops of their own (``nn.matmul_integer``, ``nn.conv2d_integer``:
int8/uint8 operands less their zero points, summed exactly in int32); the rest are chains of
elementwise ops, which fusion makes one loop each (QLinearMatMul's and QLinearConv's the
epilogue of their product). The rounding and saturation are ONNX Runtime's, step for step:

- quantizing divides in float32 (``x / scale``, never ``x * (1 / scale)``), rounds half to even,
  adds the zero point and clamps to the output dtype's range, NaN to its low end (as ONNX
  Runtime and onnx's reference give);
- requantizing an int32 sum multiplies ``float32(sum)`` by ``a_scale * b_scale / y_scale``
  (float32, in that order), then rounds, adds and clamps the same way;
- dequantizing is ``(x - zero_point) * scale`` in float32 (exact differences for int8 and
  uint8; int32 subtracts in int32), rounded once to a float16 output.

A float16 scale is widened to float32 where ONNX Runtime computes in float32; QuantizeLinear
divides in the precision the ONNX spec gives it (the scale's dtype, or ``precision``): a float16
quotient is the float32 quotient rounded to float16, which is exactly float16 division.
"""

from __future__ import annotations

import numpy as np

from ... import dtypes
from ...ir import dims as D
from .converters import converter, norm_axis, scalar
from .importer import ONNX_DTYPES, Node, onnx_type_name
from .ops_nn import _spatial, _to_2d, _windows
from .ops_shape import dim_scalar

#: The integer dtypes ONNX quantizes to, as far as relvm has them.
QUANTIZED = tuple(d for d in ("int8", "uint8", "int16", "uint16") if dtypes.is_dtype(d))
_FLOATS = ("float32", "float16")


def _range(dtype: str) -> tuple[int, int]:
    info = np.iinfo(dtypes.to_numpy(dtype))
    return int(info.min), int(info.max)


def _onnx_dtype(n: Node, attr: str) -> str | None:
    """A dtype attribute (an ONNX element type; 0 or absent: None) as relvm's name."""
    code = int(n.attr(attr, 0))
    if not code:
        return None
    dtype = ONNX_DTYPES.get(code)
    if dtype is None:
        raise n.fail(f"{attr} {onnx_type_name(code)} is not supported: relvm has no "
                     f"{onnx_type_name(code)} dtype")
    return dtype


def _require(n: Node, dtype: str, allowed, what: str) -> str:
    if dtype not in allowed:
        raise n.fail(f"{what} must be {' or '.join(allowed)}, got {dtype}")
    return dtype


def _float32(n: Node, x):
    return x if x.checked_type.dtype == "float32" else n.call("cast", x, dtype="float32")


def _one_value(n: Node, i: int, what: str):
    """Input ``i``, a scalar or a tensor of one value (a 1-element vector), as a scalar."""
    shape = n.shape(i)
    if len(shape) == 0:
        return n.x(i)
    if all(D.prove_equal(d, 1) is not False for d in shape):  # a symbolic dim: checked at run time
        return n.call("reshape", n.x(i), newshape=[])
    raise n.fail(f"{what} must be a scalar or hold one value, got shape {D.shape_str(shape)}")


def _saturate(n: Node, q, dtype: str):
    """float32 ``q`` (integers) clamped to ``dtype``'s range, NaN to its low end, and cast."""
    lo, hi = _range(dtype)
    low = scalar(n, lo, "float32")
    q = n.call("where", n.call("greater_equal", q, low), q, low)  # NaN compares false
    return n.call("cast", n.call("clip", q, a_min=float(lo), a_max=float(hi)), dtype=dtype)


# --- scales and zero points along an axis -------------------------------------------------

def _granularity(n: Node, x, param, what: str):
    """A scale or zero point shaped to broadcast against ``x``: a scalar as it is; a vector along
    ``axis`` (per-axis); with ``block_size``, a tensor of x's rank whose entries along ``axis``
    each serve ``block_size`` of x's (blocked: repeated by a gather)."""
    t = param.checked_type
    if t.ndim == 0:
        return param
    shape = x.checked_type.shape
    rank = len(shape)
    if rank == 0:
        raise n.fail(f"{what} must be a scalar for a scalar input, got shape "
                     f"{D.shape_str(t.shape)}")
    # A 1-d input has one axis, whatever `axis` says (ONNX: "the axis unnecessary"; quantized
    # biases come with the default 1).
    axis = 0 if rank == 1 else norm_axis(n, int(n.attr("axis", 1)), rank)
    block = int(n.attr("block_size", 0))
    if block < 0:
        raise n.fail(f"block_size must be positive, got {block}")
    if block == 0:
        if t.ndim != 1:
            raise n.fail(f"{what} must be a scalar or a vector along axis {axis} (or, with "
                         f"block_size, of the input's rank), got shape {D.shape_str(t.shape)}")
        trailing = rank - 1 - axis
        return n.call("expand_dims", param, axis=1, num_newaxis=trailing) if trailing else param
    if t.ndim != rank:
        raise n.fail(f"{what} {D.shape_str(t.shape)} must have the input's rank {rank} for "
                     f"blocked quantization")
    dim, blocks = shape[axis], t.shape[axis]
    if isinstance(dim, int) and isinstance(blocks, int) and blocks != -(-dim // block):
        raise n.fail(f"{what} {D.shape_str(t.shape)} has {blocks} blocks along axis {axis}; "
                     f"the input {D.shape_str(shape)} in blocks of {block} needs "
                     f"{-(-dim // block)}")
    if isinstance(dim, int):
        index = n.constant(np.arange(dim, dtype=np.int64) // block)
    else:  # a symbolic dim: the same gather, its positions made when the program runs
        positions = n.call("arange", scalar(n, 0, "int64"), dim_scalar(n, x, axis),
                           scalar(n, 1, "int64"))
        index = n.call("divide", positions, scalar(n, block, "int64"))
    return n.call("take", param, index, axis=axis)


# --- QuantizeLinear and DequantizeLinear ---------------------------------------------------------

@converter("DequantizeLinear", composed="(x - zero_point) * scale in float32 (int8/uint8: "
           "both cast, exact; int32: subtracted in int32), the scale and zero point a scalar, "
           "one per entry of `axis`, or blocked (a `take` repeating each block_size times); "
           "rounded once to a float16 output")
def dequantize_linear(n: Node):
    x, x_dtype = n.x(0), n.dtype(0)
    _require(n, x_dtype, QUANTIZED + ("int32",), "the input's dtype")
    scale_dtype = _require(n, n.dtype(1), _FLOATS, "x_scale's dtype")
    out = _require(n, _onnx_dtype(n, "output_dtype") or scale_dtype, _FLOATS, "output_dtype")
    if n.has(2):
        if n.dtype(2) != x_dtype:
            raise n.fail(f"x_zero_point's dtype {n.dtype(2)} differs from the input's {x_dtype}")
        zp = _granularity(n, x, n.x(2), "x_zero_point")
        if x_dtype == "int32":  # as ONNX Runtime: the difference in int32, then to float
            diff = n.call("cast", n.call("subtract", x, zp), dtype="float32")
        else:  # exact in float32
            diff = n.call("subtract", _float32(n, x), _float32(n, zp))
    else:
        diff = _float32(n, x)
    y = n.call("multiply", diff, _granularity(n, x, _float32(n, n.x(1)), "x_scale"))
    return n.call("cast", y, dtype=out) if out != "float32" else y


def _quantized_dtype(n: Node) -> str:
    """QuantizeLinear's output dtype: the zero point's, else output_dtype, else uint8."""
    given = _onnx_dtype(n, "output_dtype")
    if n.has(2):
        if given is not None and given != n.dtype(2):
            raise n.fail(f"output_dtype {given} differs from y_zero_point's dtype {n.dtype(2)}")
        given = n.dtype(2)
    return _require(n, given or "uint8", QUANTIZED, "the output dtype")


@converter("QuantizeLinear", composed="x / scale (float32 division; in float16 precision for "
           "a float16 scale or `precision`), `round` (half to even), + zero_point, clamped to "
           "the output's range (NaN to its low end, as ONNX Runtime), `cast`; scale and zero "
           "point as DequantizeLinear's")
def quantize_linear(n: Node):
    x = n.x(0)
    _require(n, n.dtype(0), _FLOATS + ("int32",), "the input's dtype")
    out = _quantized_dtype(n)
    scale_dtype = _require(n, n.dtype(1), _FLOATS, "y_scale's dtype")
    precision = _require(n, _onnx_dtype(n, "precision") or scale_dtype, _FLOATS, "precision")
    scale = _granularity(n, x, _float32(n, n.x(1)), "y_scale")
    q = n.call("divide", _float32(n, x), scale)
    if precision == "float16":  # float32 quotient rounded to float16: float16 division
        q = n.call("cast", n.call("cast", q, dtype="float16"), dtype="float32")
    q = n.call("round", q)
    if n.has(2):
        q = n.call("add", q, _float32(n, _granularity(n, x, n.x(2), "y_zero_point")))
    return _saturate(n, q, out)


@converter("DynamicQuantizeLinear", composed="`min` and `max` of x, each widened to take 0 in; "
           "scale = (max - min) / 255 (1 when both are 0, as ONNX Runtime); zero point = "
           "round(clamp(-min / scale, 0, 255)); then as QuantizeLinear to uint8")
def dynamic_quantize_linear(n: Node):
    _require(n, n.dtype(0), ("float32",), "the input's dtype")
    x = n.x(0)
    zero = scalar(n, 0.0, "float32")
    lo = n.call("minimum", n.call("min", x), zero)
    hi = n.call("maximum", n.call("max", x), zero)
    scale = n.call("divide", n.call("subtract", hi, lo), scalar(n, 255.0, "float32"))
    scale = n.call("where", n.call("equal", hi, lo), scalar(n, 1.0, "float32"), scale)
    zp = n.call("round", n.call("clip", n.call("negative", n.call("divide", lo, scale)),
                                a_min=0.0, a_max=255.0))
    y = _saturate(n, n.call("add", n.call("round", n.call("divide", x, scale)), zp), "uint8")
    return [y, scale, n.call("cast", zp, dtype="uint8")]


# --- integer products -----------------------------------------------------------------------------

def _per_row_or_column(n: Node, i: int, what: str, along_rows: bool):
    """A scale or zero point of a product's operand: a scalar, a vector (one per row of a,
    one per column of b), or ONNX's N-d form of one, (..., M, 1) for a and (..., 1, N) for b,
    when its batch dims are 1 (one vector shared by every batch item)."""
    shape = n.shape(i)
    if len(shape) <= 1:
        return n.x(i)
    unit = shape[-1] if along_rows else shape[-2]
    if all(D.prove_equal(d, 1) is True for d in shape[:-2]) and D.prove_equal(unit, 1) is True:
        return n.call("reshape", n.x(i), newshape=[-1])
    raise n.fail(f"{what} of shape {D.shape_str(shape)} is not supported: relvm takes a "
                 f"scalar or one value per {'row' if along_rows else 'column'}, shared by every "
                 f"batch item")


def _zero_point(n: Node, i: int, of: int, what: str, along_rows: bool):
    """The zero point of input ``of`` given as input ``i`` (0 when absent)."""
    if not n.has(i):
        return scalar(n, 0, n.dtype(of))
    return _per_row_or_column(n, i, what, along_rows)


def _products(n: Node, a_in: int, b_in: int, za, zb):
    """nn.matmul_integer of inputs a_in and b_in with NumPy's rule for 1-d operands, and how
    to undo it: (product, squeeze a's row, squeeze b's column)."""
    a, b = n.x(a_in), n.x(b_in)
    ra, rb = n.rank(a_in), n.rank(b_in)
    if ra == 0 or rb == 0:
        raise n.fail(f"{n.op_type} of a scalar")
    if ra == 1:
        a = n.call("expand_dims", a, axis=0)
    if rb == 1:
        b = n.call("expand_dims", b, axis=1)
    return n.call("nn.matmul_integer", a, b, za, zb), ra == 1, rb == 1


def _unsqueezed(n: Node, y, row: bool, col: bool):
    if row:
        y = n.call("squeeze", y, axis=[-1 if col else -2])
    if col:
        y = n.call("squeeze", y, axis=[-1])
    return y


@converter("MatMulInteger")
def matmul_integer(n: Node):
    za = _zero_point(n, 2, 0, "a_zero_point", along_rows=True)
    zb = _zero_point(n, 3, 1, "b_zero_point", along_rows=False)
    y, row, col = _products(n, 0, 1, za, zb)
    return _unsqueezed(n, y, row, col)


def _scale(n: Node, i: int, what: str, along_rows: bool | None = None):
    """A float32 scale: input ``i`` as it is, or (``along_rows`` True or False) as a product's
    operand's (see _per_row_or_column)."""
    _require(n, n.dtype(i), _FLOATS, f"{what}'s dtype")
    x = n.x(i) if along_rows is None else _per_row_or_column(n, i, what, along_rows)
    return _float32(n, x)


def _requantize(n: Node, acc, multiplier, zero_point, dtype: str):
    """int32 sums as ONNX Runtime requantizes them: round(float32(acc) * multiplier) + zero
    point, clamped to ``dtype``."""
    q = n.call("round", n.call("multiply", n.call("cast", acc, dtype="float32"), multiplier))
    return _saturate(n, n.call("add", q, _float32(n, zero_point)), dtype)


@converter("QLinearMatMul", composed="`nn.matmul_integer`, then float32(sums) * (a_scale * "
           "b_scale / y_scale) rounded half to even, + y_zero_point, clamped and cast (fused "
           "as the product's epilogue); scales and zero points per tensor, a's per row, b's "
           "per column")
def qlinear_matmul(n: Node):
    out = _require(n, n.dtype(7), QUANTIZED, "y_zero_point's dtype")
    za = _zero_point(n, 2, 0, "a_zero_point", along_rows=True)
    zb = _zero_point(n, 5, 3, "b_zero_point", along_rows=False)
    acc, row, col = _products(n, 0, 3, za, zb)
    a_scale = _scale(n, 1, "a_scale", along_rows=True)
    if a_scale.checked_type.ndim == 1:  # one per row of a: a column of the product
        a_scale = n.call("expand_dims", a_scale, axis=1)
    b_scale = _scale(n, 4, "b_scale", along_rows=False)
    _require(n, n.dtype(6), _FLOATS, "y_scale's dtype")
    y_scale = _float32(n, _one_value(n, 6, "y_scale"))
    multiplier = n.call("divide", n.call("multiply", a_scale, b_scale), y_scale)
    y = _requantize(n, acc, multiplier, _one_value(n, 7, "y_zero_point"), out)
    return _unsqueezed(n, y, row, col)


def _conv_integer(n: Node, w_in: int, x_zp, w_zp):
    """nn.conv2d_integer of input 0 and input ``w_in`` with Conv's window attributes (a 1-d conv
    over a height of 1), and whether it was 1-d."""
    spatial = _spatial(n)
    kernel = list(n.attr("kernel_shape", n.shape(w_in)[2:]))
    strides, dilations, pads = _windows(n, kernel)
    x, w = n.x(0), n.x(w_in)
    if spatial == 1:
        x, w = n.call("expand_dims", x, axis=2), n.call("expand_dims", w, axis=2)
        strides, dilations, pads = _to_2d(strides, dilations, pads)
    y = n.call("nn.conv2d_integer", x, w, x_zp, w_zp, strides=strides, padding=pads,
               dilation=dilations, groups=int(n.attr("group", 1)))
    return y, spatial == 1


def _channel_zero_point(n: Node, i: int, of: int):
    """A weight zero point: a scalar or one per output channel (or 0 when not given)."""
    if not n.has(i):
        return scalar(n, 0, n.dtype(of))
    if n.rank(i) > 1:
        raise n.fail(f"input {i} (the weight's zero point) must be a scalar or a vector, got "
                     f"shape {D.shape_str(n.shape(i))}")
    return n.x(i)


@converter("ConvInteger")
def conv_integer(n: Node):
    x_zp = _one_value(n, 2, "x_zero_point") if n.has(2) else scalar(n, 0, n.dtype(0))
    y, one_d = _conv_integer(n, 1, x_zp, _channel_zero_point(n, 3, 1))
    return n.call("squeeze", y, axis=[2]) if one_d else y


@converter("QLinearConv", composed="`nn.conv2d_integer`, + the int32 bias (`nn.bias_add`), "
           "then requantized as QLinearMatMul with x_scale * w_scale / y_scale per tensor or "
           "per output channel (fused as the conv's epilogue)")
def qlinear_conv(n: Node):
    out = _require(n, n.dtype(7), QUANTIZED, "y_zero_point's dtype")
    acc, one_d = _conv_integer(n, 3, _one_value(n, 2, "x_zero_point"),
                               _channel_zero_point(n, 5, 3))
    if n.has(8):
        acc = n.call("nn.bias_add", acc, n.x(8), axis=1)
    w_scale = _scale(n, 4, "w_scale")
    if w_scale.checked_type.ndim > 1:
        raise n.fail(f"w_scale must be a scalar or one per output channel, got shape "
                     f"{D.shape_str(n.shape(4))}")
    if w_scale.checked_type.ndim == 1:  # one per output channel: along axis 1 of (n, oc, h, w)
        w_scale = n.call("expand_dims", w_scale, axis=1, num_newaxis=2)
    _require(n, n.dtype(1), _FLOATS, "x_scale's dtype")
    _require(n, n.dtype(6), _FLOATS, "y_scale's dtype")
    x_scale = _float32(n, _one_value(n, 1, "x_scale"))
    y_scale = _float32(n, _one_value(n, 6, "y_scale"))
    multiplier = n.call("divide", n.call("multiply", x_scale, w_scale), y_scale)
    y = _requantize(n, acc, multiplier, _one_value(n, 7, "y_zero_point"), out)
    return n.call("squeeze", y, axis=[2]) if one_d else y
