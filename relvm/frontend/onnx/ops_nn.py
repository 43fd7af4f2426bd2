"""Convolutions, pooling, normalization, matrix products, recurrent layers, Resize and GridSample.

relvm's window ops are 2-D (NCHW): 1-D convolutions and pools run as 2-D ones over a height of
1; 3-D pools run as two 2-D pools (over H and W, then over D), which is exact because max and
average pooling are separable.
"""

from __future__ import annotations

import numpy as np

from ...ir import dims as D
from ...ops.image import scale_fraction
from .converters import converter, make_tuple, norm_axis, scalar
from .importer import Node
from .ops_shape import dim_scalar, fit_at_run_time, pad_by

# --- sliding windows ---------------------------------------------------------------------------


def _same_pads(n: Node, sizes, kernel, strides, dilations, upper: bool) -> list[int]:
    """auto_pad SAME_UPPER / SAME_LOWER: the output is ceil(in / stride)."""
    begins, ends = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        if s == 1:
            total = (k - 1) * d
        elif isinstance(size, int):
            total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        else:  # odd and even sizes pad differently: computed at run time (same_at_run_time)
            begins.append(None)
            ends.append(None)
            continue
        begin = total // 2 if upper else total - total // 2
        begins.append(begin)
        ends.append(total - begin)
    return begins + ends


def same_at_run_time(n: Node, x, kernel, strides, dilations, pads, fill):
    """``x`` padded by ``fill`` where auto_pad SAME left a pad to run time (None: a symbolic
    dim with stride above 1), and the pads that remain for the window op."""
    spatial = len(kernel)
    if None not in pads:
        return x, pads
    upper = n.attr("auto_pad") == "SAME_UPPER"
    pads = list(pads)
    i64 = lambda v: scalar(n, v, "int64")  # noqa: E731
    for i in range(spatial):
        if pads[i] is not None:
            continue
        size, s = dim_scalar(n, x, 2 + i), strides[i]
        extent = (kernel[i] - 1) * dilations[i] + 1
        out = n.call("divide", n.call("add", size, i64(s - 1)), i64(s))  # ceil(size / s)
        reach = n.call("add", n.call("multiply", n.call("subtract", out, i64(1)), i64(s)),
                       i64(extent))
        total = n.call("maximum", n.call("subtract", reach, size), i64(0))
        half = n.call("divide", total, i64(2))
        begin = half if upper else n.call("subtract", total, half)
        x = pad_by(n, x, 2 + i, True, begin, fill)
        x = pad_by(n, x, 2 + i, False, n.call("subtract", total, begin), fill)
        pads[i] = pads[i + spatial] = 0
    return x, pads


def _windows(n: Node, kernel: list[int]) -> tuple[list[int], list[int], list[int]]:
    """strides, dilations and pads (begins then ends) of a window op."""
    spatial = len(kernel)
    strides = [int(s) for s in n.attr("strides", [1] * spatial)]
    dilations = [int(d) for d in n.attr("dilations", [1] * spatial)]
    pads = [int(p) for p in n.attr("pads", [0] * 2 * spatial)]
    auto = n.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = _same_pads(n, n.shape(0)[2:], kernel, strides, dilations, auto == "SAME_UPPER")
    elif auto == "VALID":
        pads = [0] * 2 * spatial
    if len(strides) != spatial or len(dilations) != spatial or len(pads) != 2 * spatial:
        raise n.fail(f"strides {strides}, dilations {dilations} and pads {pads} do not match "
                     f"a {spatial}-d kernel {kernel}")
    return strides, dilations, pads


def _spatial(n: Node, allowed=(1, 2)) -> int:
    spatial = n.rank(0) - 2
    if spatial not in allowed:
        raise n.fail(f"{spatial}-d {n.op_type} is not supported (relvm has "
                     f"{' and '.join(f'{s}-d' for s in allowed)})")
    return spatial


def _to_2d(strides, dilations, pads):
    """A 1-d window's parameters as a 2-d window over a height of 1."""
    return [1] + strides, [1] + dilations, [0, pads[0], 0, pads[1]]


@converter("Conv")
def conv(n: Node):
    spatial = _spatial(n)
    kernel = list(n.attr("kernel_shape", n.shape(1)[2:]))
    strides, dilations, pads = _windows(n, kernel)
    x, w = n.x(0), n.x(1)
    x, pads = same_at_run_time(n, x, kernel, strides, dilations, pads, scalar(n, 0, n.dtype(0)))
    if spatial == 1:
        x, w = n.call("expand_dims", x, axis=2), n.call("expand_dims", w, axis=2)
        strides, dilations, pads = _to_2d(strides, dilations, pads)
    y = n.call("nn.conv2d", x, w, strides=strides, padding=pads, dilation=dilations,
               groups=int(n.attr("group", 1)))
    if n.has(2):
        y = n.call("nn.bias_add", y, n.x(2), axis=1)
    return n.call("squeeze", y, axis=[2]) if spatial == 1 else y


@converter("ConvTranspose")
def conv_transpose(n: Node):
    spatial = _spatial(n, (1, 2, 3))
    kernel = list(n.attr("kernel_shape", n.shape(1)[2:]))
    strides = [int(s) for s in n.attr("strides", [1] * spatial)]
    dilations = [int(d) for d in n.attr("dilations", [1] * spatial)]
    out_pad = [int(p) for p in n.attr("output_padding", [0] * spatial)]
    pads = [int(p) for p in n.attr("pads", [0] * 2 * spatial)]
    auto = n.attr("auto_pad", "NOTSET")
    crops = []  # (spatial axis, target size): cropped at run time (a symbolic input dim)
    # The padding total splits as ONNX says: SAME_UPPER puts the smaller half first, NOTSET
    # (output_shape) and SAME_LOWER the larger.
    upper = auto == "SAME_UPPER"
    if "output_shape" in n.attrs or auto in ("SAME_UPPER", "SAME_LOWER"):
        sizes = n.shape(0)[2:]
        targets = list(n.attr("output_shape", []))[-spatial:] if "output_shape" in n.attrs \
            else [size * s for size, s in zip(sizes, strides)]
        begins, ends = [], []
        for i, (size, k, s, d, target) in enumerate(zip(sizes, kernel, strides, dilations,
                                                          targets)):
            total = s * (size - 1) + out_pad[i] + (k - 1) * d + 1 - target
            if not isinstance(total, int):  # the full scatter, cropped when it runs
                crops.append((i, int(target) if isinstance(target, int) else
                              n.call("multiply", dim_scalar(n, n.x(0), 2 + i),
                                     scalar(n, s, "int64"))))
                begins.append(0)
                ends.append(0)
                continue
            if total < 0:  # the output is larger than the full scatter: zeros at the end
                out_pad[i] -= total
                total = 0
            begins.append(total // 2 if upper else total - total // 2)
            ends.append(total - begins[-1])
        pads = begins + ends
    elif auto == "VALID":
        pads = [0] * 2 * spatial
    x, w = n.x(0), n.x(1)
    op = "nn.conv3d_transpose" if spatial == 3 else "nn.conv2d_transpose"
    if spatial == 1:
        x, w = n.call("expand_dims", x, axis=2), n.call("expand_dims", w, axis=2)
        strides, dilations, pads = _to_2d(strides, dilations, pads)
        out_pad = [0] + out_pad
    y = n.call(op, x, w, strides=strides, padding=pads, dilation=dilations,
               output_padding=out_pad, groups=int(n.attr("group", 1)))
    if n.has(2):
        y = n.call("nn.bias_add", y, n.x(2), axis=1)
    y = n.call("squeeze", y, axis=[2]) if spatial == 1 else y
    for i, target in crops:
        y = fit_at_run_time(n, y, 2 + i, target, smaller_first=upper, split_pad=False)
    return y


@converter("DeformConv")
def deform_conv(n: Node):
    """``nn.deform_conv2d`` (2-d, as ONNX Runtime and onnx's reference have it), the bias
    added after; a missing mask is the scalar 1."""
    _spatial(n, (2,))
    kernel = list(n.attr("kernel_shape", n.shape(1)[2:]))
    strides, dilations, pads = _windows(n, kernel)
    dtype = n.dtype(0)
    mask = n.x(4) if n.has(4) else n.constant(np.ones((), dtype))
    y = n.call("nn.deform_conv2d", n.x(0), n.x(1), n.x(2), mask, strides=strides, padding=pads,
               dilation=dilations, groups=int(n.attr("group", 1)),
               offset_groups=int(n.attr("offset_group", 1)))
    if n.has(3):
        y = n.call("nn.bias_add", y, n.x(3), axis=1)
    return y


def _pool2d(n: Node, op: str, x, kernel, strides, dilations, pads, extra):
    return n.call(op, x, pool_size=kernel, strides=strides, dilation=dilations, padding=pads,
                  ceil_mode=bool(n.attr("ceil_mode", 0)), **extra)


@converter("MaxPool", "AveragePool")
def pool(n: Node):
    spatial = _spatial(n, (1, 2, 3))
    kernel = [int(k) for k in n.required("kernel_shape")]
    strides, dilations, pads = _windows(n, kernel)
    if n.op_type == "MaxPool" and n.wants(1):
        return _max_pool_indices(n, spatial, kernel, strides, dilations, pads)
    op = "nn.max_pool2d" if n.op_type == "MaxPool" else "nn.avg_pool2d"
    extra = {} if n.op_type == "MaxPool" else \
        {"count_include_pad": bool(n.attr("count_include_pad", 0))}
    x = n.x(0)
    if n.dtype(0) in ("uint8", "int8") and n.op_type == "MaxPool":  # exact in float32
        y = pool_nd(n, op, n.call("cast", x, dtype="float32"), spatial, kernel, strides,
                    dilations, pads, extra)
        return n.call("cast", y, dtype=n.dtype(0))
    return pool_nd(n, op, x, spatial, kernel, strides, dilations, pads, extra)


def _max_pool_indices(n: Node, spatial: int, kernel, strides, dilations, pads):
    """MaxPool with its Indices: ``nn.max_pool2d_with_argmax`` (1-d as 2-d over a height of 1,
    where both storage orders give the same positions)."""
    if spatial == 3:
        raise n.fail("the Indices output is supported for 1-d and 2-d pools (relvm pools 3-d "
                     "data as two 2-d pools, which lose the maximum's position)")
    if n.dtype(0) not in ("float32", "float64"):
        raise n.fail(f"the Indices output needs float32 or float64 data, got {n.dtype(0)}")
    if None in pads:  # padding computed at run time would move the positions
        raise n.fail("the Indices output with auto_pad SAME and a stride above 1 needs static "
                     "spatial dims")
    order = int(n.attr("storage_order", 0))
    if order not in (0, 1):
        raise n.fail(f"storage_order must be 0 or 1, got {order}")
    x = n.x(0)
    if spatial == 1:
        strides, dilations, pads = _to_2d(strides, dilations, pads)
        kernel, x = [1] + kernel, n.call("expand_dims", x, axis=2)
    pair = _pool2d(n, "nn.max_pool2d_with_argmax", x, kernel, strides, dilations, pads,
                   {"storage_order": order})
    values, index = n.field(pair, 0), n.field(pair, 1)
    if spatial == 1:
        values, index = (n.call("squeeze", v, axis=[2]) for v in (values, index))
    return [values, index]


@converter("MaxUnpool")
def max_unpool(n: Node):
    """``nn.max_unpool``; a given output_shape must be known at import (it is the result's):
    the unpooled tensor sits at its start, as onnx's reference places it."""
    rank = n.rank(0)
    if rank < 3:
        raise n.fail(f"X must be (N, C, spatial...), got rank {rank}")
    k = rank - 2
    kernel = [int(v) for v in n.required("kernel_shape")]
    strides = [int(v) for v in n.attr("strides", [1] * k)]
    pads = [int(v) for v in n.attr("pads", [0] * (2 * k))]
    if len(kernel) != k or len(strides) != k or len(pads) != 2 * k:
        raise n.fail(f"kernel_shape {kernel}, strides {strides} and pads {pads} must give {k} "
                     "spatial axes (pads twice)")
    size = None
    if n.has(2):
        from .ops_array import _static_ints

        shape = _static_ints(n, 2, "output_shape")
        if len(shape) != rank:
            raise n.fail(f"output_shape {shape} must have X's rank {rank}")
        for i, d in enumerate(n.shape(0)[:2]):
            if isinstance(d, int) and d != shape[i]:
                raise n.fail(f"output_shape {shape} must keep X's dim {i} ({d})")
        size = shape[2:]
    if n.dtype(1) != "int64":
        raise n.fail(f"I must be int64, got {n.dtype(1)}")
    return n.call("nn.max_unpool", n.x(0), n.x(1), kernel_shape=kernel, strides=strides,
                  pads=pads, output_size=size)


@converter("LpPool")
def lp_pool(n: Node):
    """(sum of |x|^p over each window)^(1/p): an average pool counting the padding, times the
    window's size (as onnx's reference and PyTorch compute it)."""
    dtype = n.dtype(0)
    if dtype not in ("float32", "float64"):
        raise n.fail(f"LpPool needs a float32 or float64 input, got {dtype}")
    spatial = _spatial(n, (1, 2, 3))
    kernel = [int(k) for k in n.required("kernel_shape")]
    strides, dilations, pads = _windows(n, kernel)
    p = float(n.attr("p", 2))
    if p <= 0:
        raise n.fail(f"p must be positive, got {p}")
    powered = n.call("power", n.call("abs", n.x(0)), scalar(n, p, dtype))
    mean = pool_nd(n, "nn.avg_pool2d", powered, spatial, kernel, strides, dilations, pads,
                   {"count_include_pad": True})
    total = n.call("multiply", mean, scalar(n, float(np.prod(kernel)), dtype))
    return n.call("power", total, scalar(n, 1 / p, dtype))


def pool_nd(n: Node, op: str, x, spatial: int, kernel, strides, dilations, pads, extra):
    """A 1-, 2- or 3-d pool through relvm's 2-d pools."""
    if None in pads:  # auto_pad SAME over a symbolic dim with stride above 1
        dtype = x.checked_type.dtype
        if op == "nn.max_pool2d":
            low = -np.inf if np.dtype(dtype).kind == "f" else np.iinfo(dtype).min
            x, pads = same_at_run_time(n, x, kernel, strides, dilations, pads,
                                       scalar(n, low, dtype))
        elif extra.get("count_include_pad"):
            x, pads = same_at_run_time(n, x, kernel, strides, dilations, pads,
                                       scalar(n, 0, dtype))
        else:  # the padding must not count: the mean is a sum over a count of real elements
            zero = scalar(n, 0, dtype)
            padded, rest = same_at_run_time(n, x, kernel, strides, dilations, pads, zero)
            ones, _ = same_at_run_time(n, n.call("ones_like", x), kernel, strides, dilations,
                                       pads, zero)
            counted = {**extra, "count_include_pad": True}
            return n.call("divide",
                          pool_nd(n, op, padded, spatial, kernel, strides, dilations, rest,
                                  counted),
                          pool_nd(n, op, ones, spatial, kernel, strides, dilations, rest,
                                  counted))
    if spatial == 2:
        return _pool2d(n, op, x, kernel, strides, dilations, pads, extra)
    if spatial == 1:
        s, d, p = _to_2d(strides, dilations, pads)
        y = _pool2d(n, op, n.call("expand_dims", x, axis=2), [1] + kernel, s, d, p, extra)
        return n.call("squeeze", y, axis=[2])
    # 3-d: pool H and W of (N, C*D, H, W), then D of (N, C, D, H'*W').
    flat = n.call("reshape", x, newshape=[0, -3, 0, 0])
    hw = _pool2d(n, op, flat, kernel[1:], strides[1:], dilations[1:],
                 [pads[1], pads[2], pads[4], pads[5]], extra)
    hw = n.call("reshape_like", hw, x, lhs_begin=1, lhs_end=2, rhs_begin=1, rhs_end=3)
    flat = n.call("reshape", hw, newshape=[0, 0, 0, -3])
    dd = _pool2d(n, op, flat, [kernel[0], 1], [strides[0], 1], [dilations[0], 1],
                 [pads[0], 0, pads[3], 0], extra)
    return n.call("reshape_like", dd, hw, lhs_begin=3, lhs_end=4, rhs_begin=3, rhs_end=5)


@converter("GlobalAveragePool", "GlobalMaxPool")
def global_pool(n: Node):
    rank = n.rank(0)
    if rank == 4:
        op = "nn.global_avg_pool2d" if n.op_type == "GlobalAveragePool" else "nn.global_max_pool2d"
        return n.call(op, n.x(0))
    op = "mean" if n.op_type == "GlobalAveragePool" else "max"
    return n.call(op, n.x(0), axis=list(range(2, rank)), keepdims=True)


# --- normalization -----------------------------------------------------------------------------

@converter("BatchNormalization")
def batch_norm(n: Node):
    eps = float(n.attr("epsilon", 1e-5))
    x, scale, bias, mean, var = (n.x(i) for i in range(5))
    if n.opset >= 14 and n.attr("training_mode", 0):
        return _batch_norm_training(n, x, scale, bias, mean, var, eps)
    if any(n.wants(i) for i in range(1, len(n.outputs))):
        raise n.fail("the running-statistics outputs exist only in training mode")
    bn = n.call("nn.batch_norm", x, scale, bias, mean, var, axis=1, epsilon=eps)
    return [n.field(bn, 0)]


def _batch_norm_training(n: Node, x, scale, bias, mean, var, eps):
    """Normalize with the batch's statistics; update the running ones by momentum."""
    rank, dtype = n.rank(0), n.dtype(0)
    axes = [0] + list(range(2, rank))
    batch_mean = n.call("mean", x, axis=axes)
    centered = n.call("subtract", x, n.call("expand_dims", batch_mean, axis=1,
                                            num_newaxis=rank - 2))
    batch_var = n.call("mean", n.call("multiply", centered, centered), axis=axes)
    y = n.field(n.call("nn.batch_norm", x, scale, bias, batch_mean, batch_var, axis=1,
                       epsilon=eps), 0)
    momentum = float(n.attr("momentum", 0.9))

    def running(old, new):
        return n.call("add", n.call("multiply", old, scalar(n, momentum, dtype)),
                      n.call("multiply", new, scalar(n, 1 - momentum, dtype)))
    return [y, running(mean, batch_mean), running(var, batch_var)]


@converter("LayerNormalization")
def layer_norm(n: Node):
    rank, dtype = n.rank(0), n.dtype(0)
    axis = norm_axis(n, int(n.attr("axis", -1)), rank)
    eps = float(n.attr("epsilon", 1e-5))
    x, scale = n.x(0), n.x(1)
    bias = n.x(2) if n.has(2) else None
    if axis == rank - 1 and not n.wants(1) and not n.wants(2) and n.rank(1) == 1 \
            and (bias is None or n.rank(2) == 1):
        bias = bias if bias is not None else n.call("zeros_like", scale)
        return n.call("nn.layer_norm", x, scale, bias, axis=axis, epsilon=eps)
    stash = "float32" if int(n.attr("stash_type", 1)) == 1 else dtype
    xs = x if stash == dtype else n.call("cast", x, dtype=stash)
    axes = list(range(axis, rank))
    mean = n.call("mean", xs, axis=axes, keepdims=True)
    centered = n.call("subtract", xs, mean)
    var = n.call("mean", n.call("multiply", centered, centered), axis=axes, keepdims=True)
    inv = n.call("rsqrt", n.call("add", var, scalar(n, eps, stash)))
    y = n.call("multiply", centered, inv)
    if stash != dtype:
        y = n.call("cast", y, dtype=dtype)
    y = n.call("multiply", y, scale)
    if bias is not None:
        y = n.call("add", y, bias)
    return [y, mean, inv]


# --- matrix products ---------------------------------------------------------------------------

@converter("Gemm")
def gemm(n: Node):
    a, b = n.x(0), n.x(1)
    trans_a, trans_b = bool(n.attr("transA", 0)), bool(n.attr("transB", 0))
    if trans_b and not trans_a:
        y = n.call("nn.dense", a, b)
    else:
        y = n.call("nn.matmul", a, b, transpose_a=trans_a, transpose_b=trans_b)
    dtype = n.dtype(0)
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    if alpha != 1:
        y = n.call("multiply", y, scalar(n, alpha, dtype))
    if n.has(2):
        c = n.x(2)
        if beta != 1:
            c = n.call("multiply", c, scalar(n, beta, dtype))
        y = n.call("add", y, c)
    return y


@converter("MatMul")
def matmul(n: Node):
    a, b = n.x(0), n.x(1)
    ra, rb = n.rank(0), n.rank(1)
    if ra == 0 or rb == 0:
        raise n.fail("MatMul of a scalar")
    if ra == 1 and rb == 1:
        y = n.call("nn.dense", n.call("expand_dims", a, axis=0), n.call("expand_dims", b, axis=0))
        return n.call("reshape", y, newshape=[])
    if ra == 1:
        a, ra = n.call("expand_dims", a, axis=0), 2
    squeeze_b = rb == 1
    if squeeze_b:
        b, rb = n.call("expand_dims", b, axis=1), 2
    y = _matmul(n, a, b, ra, rb)
    if n.rank(0) == 1:
        y = n.call("squeeze", y, axis=[max(ra, rb) - 2])
    if squeeze_b:
        y = n.call("squeeze", y, axis=[-1])
    return y


def _matmul(n: Node, a, b, ra: int, rb: int):
    if rb == 2:
        if ra == 2:
            return n.call("nn.matmul", a, b)
        return n.call("nn.dense", a, n.call("transpose", b, axes=[1, 0]))
    # NumPy's rule: the operand of lower rank gets leading dims of 1; the batch dims then
    # broadcast, checked when the program runs where the dims are symbolic.
    rank = max(ra, rb)
    if ra < rank:
        a = n.call("expand_dims", a, axis=0, num_newaxis=rank - ra)
    if rb < rank:
        b = n.call("expand_dims", b, axis=0, num_newaxis=rank - rb)
    return n.call("nn.batch_matmul", a, b, transpose_b=False)


# --- recurrent layers --------------------------------------------------------------------------

_TAKES_ALPHA = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
_TAKES_BETA = {"affine", "scaledtanh", "hardsigmoid"}


def _activation_attrs(n: Node, per_direction: int, dirs: int) -> dict:
    names = n.attr("activations")
    if names is None:
        if "activation_alpha" in n.attrs or "activation_beta" in n.attrs:
            raise n.fail("activation_alpha/beta without activations")
        return {}
    names = [s.lower() for s in names]
    if len(names) == per_direction and dirs == 2:
        names = names * 2
    from ...ops.recurrent import ACTIVATION_DEFAULTS, ACTIVATIONS

    unknown = [s for s in names if s not in ACTIVATIONS]
    if unknown:
        raise n.fail(f"activation {unknown[0]!r} is not supported")
    alphas, betas = list(n.attr("activation_alpha", [])), list(n.attr("activation_beta", []))
    alpha, beta = [], []
    for s in names:
        da, db = ACTIVATION_DEFAULTS.get(s, (0.0, 0.0))
        alpha.append(float(alphas.pop(0)) if s in _TAKES_ALPHA and alphas else da)
        beta.append(float(betas.pop(0)) if s in _TAKES_BETA and betas else db)
    return {"activations": names, "activation_alpha": alpha, "activation_beta": beta}


def _recurrent(n: Node, op: str, gates: int, per_direction: int, states: int):
    direction = n.attr("direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    hidden = n.attr("hidden_size")
    if hidden is None:
        hidden = n.shape(2)[-1]
        if not isinstance(hidden, int):
            raise n.fail("hidden_size is not given and R's shape does not tell it")
    hidden = int(hidden)
    dtype = n.dtype(0)
    layout = int(n.attr("layout", 0))
    x = n.x(0)
    if layout:
        x = n.call("transpose", x, axes=[1, 0, 2])
    args = [x, n.x(1), n.x(2)]
    args.append(n.x(3) if n.has(3) else n.constant(np.zeros((dirs, 2 * gates * hidden), dtype)))
    if n.has(4):
        lens = n.x(4)
        args.append(lens if n.dtype(4) == "int32" else n.call("cast", lens, dtype="int32"))
    else:
        args.append(n.constant(np.zeros(0, np.int32)))
    for i in range(5, 5 + states):
        if n.has(i):
            s = n.x(i)
            args.append(n.call("transpose", s, axes=[1, 0, 2]) if layout else s)
        else:
            args.append(n.constant(np.zeros((dirs, 1, hidden), dtype)))
    if op == "nn.lstm":
        args.append(n.x(7) if n.has(7) else n.constant(np.zeros((dirs, 3 * hidden), dtype)))
    attrs = dict(hidden_size=hidden, direction=direction, **_activation_attrs(n, per_direction, dirs))
    if n.attr("clip") is not None:
        attrs["clip"] = float(n.attr("clip"))
    if op == "nn.lstm":
        attrs["input_forget"] = bool(n.attr("input_forget", 0))
    elif op == "nn.gru":
        attrs["linear_before_reset"] = bool(n.attr("linear_before_reset", 0))
    out = n.call(op, *args, **attrs)
    y = n.field(out, 0)
    finals = [n.field(out, 1 + i) for i in range(states)]
    if layout:
        y = n.call("transpose", y, axes=[2, 0, 1, 3])
        finals = [n.call("transpose", f, axes=[1, 0, 2]) for f in finals]
    return [y] + finals


@converter("LSTM")
def lstm(n: Node):
    return _recurrent(n, "nn.lstm", 4, 3, 2)


@converter("GRU")
def gru(n: Node):
    return _recurrent(n, "nn.gru", 3, 2, 1)


@converter("RNN")
def rnn(n: Node):
    return _recurrent(n, "nn.rnn", 1, 1, 1)


# --- resize ------------------------------------------------------------------------------------

_METHODS = {"nearest": "nearest_neighbor", "linear": "linear", "cubic": "cubic"}


def _full_rank(n: Node, values, axes, rank: int, fill) -> list:
    if axes is None:
        if len(values) != rank:
            raise n.fail(f"{list(values)} must have one entry per axis of the rank-{rank} input")
        return list(values)
    out = list(fill)
    for a, v in zip(axes, values):
        out[a] = v
    return out


@converter("Upsample")
def upsample(n: Node):
    """Upsample (opsets 7-9, deprecated for Resize): out = floor(in * scale); nearest picks
    floor(out / scale), linear interpolates at out / scale (asymmetric), as ONNX Runtime."""
    rank = n.rank(0)
    if rank != 4:
        raise n.fail(f"only 4-d (NCHW) inputs are supported, got rank {rank}")
    mode = n.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear"):
        raise n.fail(f"mode {mode!r} is not supported")
    scales = n.attr("scales") if n.opset < 9 else n.const(1, "scales")
    scales = [float(s) for s in np.asarray(scales).reshape(-1)]
    if len(scales) != rank:
        raise n.fail(f"scales {scales} must have one entry per axis of the rank-{rank} input")
    if scales[0] != 1 or scales[1] != 1:
        raise n.fail(f"upsampling N or C is not supported (scales {scales})")
    return n.call("image.resize2d", n.x(0), scale=scales[2:],
                  method="nearest_neighbor" if mode == "nearest" else "linear",
                  coordinate_transformation_mode="asymmetric", rounding_method="floor")


@converter("Resize")
def resize(n: Node):
    """Resize of (N, C, ...) data with 1 to 3 spatial axes (N and C keep their sizes). Sizes
    that are numbers make ``image.resize2d``'s ``size``; sizes computed from shapes (or fed at
    run time) make ``dyn.resize2d``, whose dims are those the sizes' symbolic values say."""
    rank = n.rank(0)
    if not 3 <= rank <= 5:
        raise n.fail(f"only (N, C, ...) inputs with 1 to 3 spatial axes are supported, got rank "
                     f"{rank}")
    shape = n.shape(0)
    mode = n.attr("mode", "nearest")
    if mode not in _METHODS:
        raise n.fail(f"mode {mode!r} is not supported")
    old = n.opset < 11
    ctm = n.attr("coordinate_transformation_mode", "asymmetric" if old else "half_pixel")
    axes = n.attr("axes")
    axes = None if axes is None else [norm_axis(n, int(a), rank) for a in axes]
    scale_input, size_input = (1, None) if old else (2, 3)
    scales = None
    if n.has(scale_input) and n.known(scale_input) is None:
        n.const(scale_input, "scales")
    if n.has(scale_input) and n.known(scale_input).size:
        scales = _full_rank(n, [float(s) for s in n.known(scale_input)], axes, rank, [1.0] * rank)
    sizes = None
    run_time = size_input is not None and n.has(size_input)
    if run_time:
        target = n.sym(size_input)
        if target is not None and all(isinstance(d, int) for d in target.reshape(-1)):
            sizes = _full_rank(n, [int(d) for d in target], axes, rank, list(shape))
            run_time = False
    if (scales is None) == (sizes is None and not run_time):
        raise n.fail("give exactly one of scales and sizes")
    roi = None
    if ctm == "tf_crop_and_resize":
        r = [float(v) for v in n.const(1, "roi")]
        k = len(r) // 2
        starts = _full_rank(n, r[:k], axes, rank, [0.0] * rank)
        ends = _full_rank(n, r[k:], axes, rank, [1.0] * rank)
        roi = starts[2:] + ends[2:]
    attrs = dict(method=_METHODS[mode], coordinate_transformation_mode=ctm,
                 rounding_method=n.attr("nearest_mode", "round_prefer_floor"),
                 cubic_alpha=float(n.attr("cubic_coeff_a", -0.75)),
                 cubic_exclude=int(n.attr("exclude_outside", 0)),
                 extrapolation_value=float(n.attr("extrapolation_value", 0.0)),
                 antialias=bool(n.attr("antialias", 0)), roi=roi)
    policy = n.attr("keep_aspect_ratio_policy", "stretch")
    x = n.x(0)
    if run_time:
        if policy != "stretch":  # the sizes are bounds to fit in, read at import
            n.const(size_input, f"sizes, for keep_aspect_ratio_policy={policy!r}")
        x, spatial = _run_time_sizes(n, x, axes, rank)
        return n.call("dyn.resize2d", x, spatial, **attrs)
    if sizes is not None:
        same = [D.prove_equal(s, d) for s, d in zip(sizes[:2], shape[:2])]
        if False in same:
            raise n.fail(f"resizing N or C is not supported (sizes {sizes})")
        if None in same:  # symbolic N or C: they must equal the sizes (checked at run time)
            x = n.call("reshape", x, newshape=[int(sizes[0]), int(sizes[1])] + [0] * (rank - 2))
        if policy != "stretch":
            attrs.update(_keep_aspect(n, sizes, shape, axes or list(range(rank)), policy))
        else:
            attrs["size"] = [int(s) for s in sizes[2:]]
    else:
        if scales[0] != 1 or scales[1] != 1:
            raise n.fail(f"resizing N or C is not supported (scales {scales})")
        attrs["scale"] = scales[2:]
        if roi is not None:
            if not all(isinstance(d, int) for d in shape[2:]):
                raise n.fail("tf_crop_and_resize with scales needs static spatial dims (ONNX "
                             "Runtime sizes the output from the roi's float product)")
            k, q = rank - 2, scale_fraction  # the fractions the floats stand for, as scales
            attrs["size"] = [int(d * (q(roi[i + k]) - q(roi[i])) * q(s))
                             for i, (d, s) in enumerate(zip(shape[2:], scales[2:]))]
    return n.call("image.resize2d", x, **attrs)


def _run_time_sizes(n: Node, x, axes, rank: int):
    """``x``, and an int64 tensor of the spatial sizes, from Resize's ``sizes`` (one entry per
    axis, or per ``axes``): an axis not listed keeps its size. N and C must keep theirs, which
    is proved from the sizes' symbolic values or else checked when the model runs."""
    sizes = n.x(3)
    if n.dtype(3) != "int64":
        sizes = n.call("cast", sizes, dtype="int64")
    count = rank if axes is None else len(axes)
    if n.rank(3) != 1 or D.prove_equal(n.shape(3)[0], count) is False:
        raise n.fail(f"sizes {D.shape_str(n.shape(3))} must hold one entry per axis ({count})")
    where = list(range(rank)) if axes is None else axes
    known = n.sym(3)
    pieces, kept = [], []
    for axis in range(rank):
        if axis not in where:
            if axis >= 2:
                pieces.append(n.call("reshape", dim_scalar(n, x, axis), newshape=[1]))
            continue
        i = where.index(axis)
        entry = n.call("strided_slice", sizes, begin=[i], end=[i + 1], axes=[0])
        if axis >= 2:
            pieces.append(entry)
        elif known is None or not D.prove_equal(known[i], n.shape(0)[axis]):
            kept.append(n.call("equal", n.call("reshape", entry, newshape=[]),
                               dim_scalar(n, x, axis)))
    for same in kept:
        x = n.call("guard", x, same, message=f"{n.describe()}: the sizes resize N or C, which "
                                             "is not supported")
    spatial = pieces[0] if len(pieces) == 1 else \
        n.call("concatenate", make_tuple(pieces), axis=0)
    return x, spatial


def _keep_aspect(n: Node, sizes, shape, axes, policy: str) -> dict:
    if not all(isinstance(d, int) for d in shape):
        raise n.fail(f"keep_aspect_ratio_policy={policy!r} needs a static input shape, got "
                     f"{D.shape_str(shape)}")
    ratios = [sizes[a] / shape[a] for a in axes]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    out = [int(scale * shape[a] + 0.5) if a in axes else shape[a] for a in range(len(shape))]
    return {"size": out[2:], "scale": [scale if a in axes else 1.0 for a in (2, 3)]}


# --- grid sample -------------------------------------------------------------------------------

#: GridSample's modes: opset 16's names, then opset 20's (N-D: linear and cubic for any rank).
_GRID_METHODS = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest",
                 "linear": "linear", "cubic": "cubic"}


@converter("GridSample")
def grid_sample(n: Node):
    """``image.grid_sample``, which checks the ranks and shapes."""
    mode = n.attr("mode", "bilinear" if n.opset < 20 else "linear")
    if mode not in _GRID_METHODS:
        raise n.fail(f"mode {mode!r} is not one of {', '.join(_GRID_METHODS)}")
    padding = n.attr("padding_mode", "zeros")
    if padding not in ("zeros", "border", "reflection"):
        raise n.fail(f"padding_mode {padding!r} is not zeros, border or reflection")
    return n.call("image.grid_sample", n.x(0), n.x(1), method=_GRID_METHODS[mode],
                  padding_mode=padding, align_corners=bool(n.attr("align_corners", 0)))
