"""Normalizations and losses: GroupNormalization, InstanceNormalization, RMSNormalization,
LpNormalization, MeanVarianceNormalization, LRN, SoftmaxCrossEntropyLoss and
NegativeLogLikelihoodLoss.

Group, instance, RMS, Lp and mean-variance norm are relvm ops with one C kernel each
(``nn.group_norm``, ``nn.instance_norm``, ``nn.rms_norm``, ``nn.lp_norm``,
``nn.mean_variance_norm``); LRN and the losses are compositions of existing ops. float16 inputs are normalized in float32 (the
kernels are float32/float64), as ONNX's ``stash_type`` asks by default.
"""

from __future__ import annotations

from ...ir import dims as D
from .converters import converter, norm_axes, norm_axis, scalar
from .importer import Node


def in_float32(n: Node, build, *xs):
    """``build(*xs)``, computed in float32 when the inputs are float16 (the result cast back)."""
    if n.dtype(0) != "float16":
        return build(*xs)
    y = build(*(n.call("cast", x, dtype="float32") for x in xs))
    return n.call("cast", y, dtype="float16")


def _check_rank(n: Node, least: int, what: str) -> int:
    rank = n.rank(0)
    if rank < least:
        raise n.fail(f"{what} needs an input of rank >= {least}, got rank {rank}")
    return rank


# --- group, instance and RMS norm -------------------------------------------------------------

@converter("GroupNormalization")
def group_norm(n: Node):
    _check_rank(n, 2, "GroupNormalization")
    groups = int(n.required("num_groups"))
    if groups < 1:
        raise n.fail(f"num_groups must be positive, got {groups}")
    channels = n.shape(0)[1]
    if isinstance(channels, int) and channels % groups:
        raise n.fail(f"num_groups={groups} does not divide the {channels} channels of X")
    eps = float(n.attr("epsilon", 1e-5))
    scale, bias = n.x(1), n.x(2)
    if n.opset < 21:  # opset 18: one scale and bias per group, repeated over its channels
        if not isinstance(channels, int):
            raise n.fail("opset-18 GroupNormalization (scale per group) needs a static channel "
                         f"count, got {D.dim_str(channels)}")
        scale, bias = (n.call("reshape", n.call("broadcast_to", n.call("expand_dims", v, axis=1),
                                                shape=[groups, channels // groups]),
                              newshape=[-1]) for v in (scale, bias))
    return in_float32(n, lambda x, s, b: n.call("nn.group_norm", x, s, b, num_groups=groups,
                                                 epsilon=eps), n.x(0), scale, bias)


@converter("InstanceNormalization")
def instance_norm(n: Node):
    _check_rank(n, 2, "InstanceNormalization")
    eps = float(n.attr("epsilon", 1e-5))
    return in_float32(n, lambda x, s, b: n.call("nn.instance_norm", x, s, b, epsilon=eps),
                      n.x(0), n.x(1), n.x(2))


def _trailing(n: Node, shape, want) -> int | None:
    """How many of ``want``'s last dims ``shape`` is, once its leading 1s go; None if not."""
    dims = list(shape)
    while dims and dims[0] == 1 and len(dims) > len(want):
        dims.pop(0)
    while dims and dims[0] == 1 and D.prove_equal(want[len(want) - len(dims)], 1) is not True:
        dims.pop(0)
    if len(dims) > len(want):
        return None
    tail = want[len(want) - len(dims):]
    return len(dims) if all(D.prove_equal(a, b) for a, b in zip(dims, tail)) else None


@converter("RMSNormalization")
def rms_norm(n: Node):
    rank = _check_rank(n, 1, "RMSNormalization")
    axis = norm_axis(n, int(n.attr("axis", -1)), rank)
    eps = float(n.attr("epsilon", 1e-5))
    x, scale = n.x(0), n.x(1)
    kept = _trailing(n, n.shape(1), n.shape(0)[axis:])
    if kept is not None:  # the common case: scale has the last normalized dims
        if kept != n.rank(1):  # drop its leading 1s
            scale = n.call("squeeze", scale, axis=list(range(n.rank(1) - kept)))
        return in_float32(n, lambda x, s: n.call("nn.rms_norm", x, s, axis=axis, epsilon=eps),
                          x, scale)

    def composed(x, s):  # scale broadcasts some other way: mean of squares, then one pass
        ms = n.call("mean", n.call("multiply", x, x), axis=list(range(axis, rank)), keepdims=True)
        inv = n.call("rsqrt", n.call("add", ms, scalar(n, eps, n.dtype(0) if n.dtype(0) !=
                                                        "float16" else "float32")))
        return n.call("multiply", n.call("multiply", x, inv), s)
    return in_float32(n, composed, x, scale)


# --- Lp, mean-variance, LRN ---------------------------------------------------------------------

@converter("LpNormalization")
def lp_norm(n: Node):
    rank = _check_rank(n, 1, "LpNormalization")
    axis = norm_axis(n, int(n.attr("axis", -1)), rank)
    p = int(n.attr("p", 2))
    if p not in (1, 2):
        raise n.fail(f"p must be 1 or 2, got {p}")
    return in_float32(n, lambda x: n.call("nn.lp_norm", x, axis=axis, p=p), n.x(0))


def _merge(n: Node, x, first: int, count: int):
    """x with its dims first .. first + count - 1 merged into one."""
    for _ in range(count - 1):
        x = n.call("reshape", x, newshape=[0] * first + [-3, -2])
    return x


@converter("MeanVarianceNormalization", composed="`nn.mean_variance_norm` over its axes "
           "merged into one (a reshape), moved last first (a transpose there and back) when "
           "they are not consecutive, as the default (0, 2, 3) of NCHW")
def mean_variance_norm(n: Node):
    rank = n.rank(0)
    axes = sorted(norm_axes(n, [int(a) for a in n.attr("axes", [0, 2, 3])], rank))
    if not axes:
        raise n.fail("axes must not be empty")

    def build(x):
        order = list(range(rank))
        if axes != list(range(axes[0], axes[-1] + 1)):
            order = [a for a in range(rank) if a not in axes] + axes
            x = n.call("transpose", x, axes=order)
        first = order.index(axes[0])
        y = n.call("nn.mean_variance_norm", _merge(n, x, first, len(axes)), axis=first,
                   epsilon=1e-9)  # ONNX's function body adds 1e-9 under the root
        y = n.call("reshape_like", y, x)
        if order != list(range(rank)):
            y = n.call("transpose", y, axes=[order.index(a) for a in range(rank)])
        return y
    return in_float32(n, build, n.x(0))


@converter("LRN", composed="x*x, `nn.avg_pool2d` over a window of channels (the zero "
           "padding counted), then one fused pass: x / (bias + alpha * avg) ** beta")
def lrn(n: Node):
    if n.rank(0) != 4:
        raise n.fail(f"LRN needs a 4-d (N, C, H, W) input, got rank {n.rank(0)}")
    size = int(n.required("size"))
    if size < 1:
        raise n.fail(f"size must be positive, got {size}")
    alpha, beta = float(n.attr("alpha", 1e-4)), float(n.attr("beta", 0.75))
    bias = float(n.attr("bias", 1.0))
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2

    def build(x):
        dtype = "float32" if n.dtype(0) == "float16" else n.dtype(0)
        # the sum of squares over a window of channels: an average pool over (C, H*W) of 1
        # plane, counting the zero padding, times size
        planes = n.call("reshape", n.call("expand_dims", n.call("multiply", x, x), axis=1),
                        newshape=[0, 0, 0, -1])
        window = n.call("nn.avg_pool2d", planes, pool_size=[size, 1], strides=[1, 1],
                        padding=[before, 0, after, 0], count_include_pad=True)
        window = n.call("reshape_like", window, x)
        base = n.call("add", n.call("multiply", window, scalar(n, alpha, dtype)),
                      scalar(n, bias, dtype))
        return n.call("divide", x, n.call("power", base, scalar(n, beta, dtype)))
    return in_float32(n, build, n.x(0))


# --- losses -----------------------------------------------------------------------------------

def _loss(n: Node, log_prob, labels):
    """-log_prob[labels] with ONNX's weights, ignore_index and reduction."""
    reduction = n.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise n.fail(f"reduction must be none, sum or mean, got {reduction!r}")
    if n.dtype(1) not in ("int32", "int64"):
        raise n.fail(f"labels must be int32 or int64, got {n.dtype(1)}")
    if n.rank(0) < 2 or n.rank(1) != n.rank(0) - 1:
        raise n.fail(f"scores (N, C, ...) of rank {n.rank(0)} need labels (N, ...) of rank "
                     f"{n.rank(0) - 1}, got rank {n.rank(1)}")
    dtype = n.dtype(0)
    ignore = n.attr("ignore_index")
    ignored = None
    if ignore is not None:
        ignored = n.call("equal", labels, scalar(n, int(ignore), n.dtype(1)))
        labels = n.call("where", ignored, scalar(n, 0, n.dtype(1)), labels)
    picked = n.call("gather", log_prob, n.call("expand_dims", labels, axis=1), axis=1)
    loss = n.call("negative", n.call("squeeze", picked, axis=[1]))
    weight = None
    if n.has(2):
        weight = n.call("take", n.x(2), labels, axis=0, mode="clip")
    if ignored is not None:
        weight = n.call("where", ignored, scalar(n, 0, dtype),
                        weight if weight is not None else scalar(n, 1, dtype))
    if weight is not None:
        loss = n.call("multiply", loss, weight)
    if reduction == "none":
        return loss
    total = n.call("sum", loss)
    if reduction == "sum":
        return total
    if weight is None:
        return n.call("mean", loss)
    return n.call("divide", total, n.call("sum", weight))


@converter("NegativeLogLikelihoodLoss", composed="`gather` of the labels' log-probabilities "
           "(ignored labels read class 0), `take` of the weights, then `sum`/`mean`")
def nll_loss(n: Node):
    return _loss(n, n.x(0), n.x(1))


@converter("SoftmaxCrossEntropyLoss", composed="`nn.log_softmax` over the classes, then as "
           "NegativeLogLikelihoodLoss")
def softmax_cross_entropy(n: Node):
    if n.rank(0) < 2:
        raise n.fail(f"scores must be (N, C, ...), got rank {n.rank(0)}")
    log_prob = n.call("nn.log_softmax", n.x(0), axis=1)
    loss = _loss(n, log_prob, n.x(1))
    return [loss, log_prob] if n.wants(1) else [loss]
