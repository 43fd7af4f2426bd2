"""What the oneDNN backend takes: its pattern table and the predicates that keep it exact.

A predicate refuses what oneDNN would compute differently from the op's NumPy reference
(``relvm/ops``): anything but float32, a broadcast that grows the fused result, clip with
``a_min > a_max`` (oneDNN clamps to a_min there, relvm gives a_max), layer_norm over any axis
but the last, pooling windows that can cover only padding (relvm gives -inf / 0, oneDNN the
lowest float / NaN), and avg pooling with both ceil_mode and count_include_pad (relvm does not
count the extra ceil_mode padding, oneDNN does). A lone add, multiply or subtract is taken when
one operand has the result's shape (SiLU's and squeeze-excite's multiplies), so that a network's
blocks make one region rather than one per conv.
"""

from __future__ import annotations

import math

from ..external import OpView, Pattern
from .compile import BINARY, ELTWISE

_EPILOGUE = "|".join(list(ELTWISE) + ["add", "multiply", "subtract"]) + "?"
_CHAIN = ("nn.bias_add?", _EPILOGUE, _EPILOGUE, _EPILOGUE)


def _float32(v: OpView) -> bool:
    tensors = list(v.inputs) + [v.output]
    return all(t is not None and t.dtype == "float32" for t in tensors)


def _pair(x, default: int) -> list[int]:
    x = default if x is None else x
    x = [x] if isinstance(x, int) else list(x)
    return x * 2 if len(x) == 1 else x


def _epilogue_ok(prev: OpView, v: OpView) -> bool:
    if v.op == "clip":
        lo, hi = v.attrs["a_min"], v.attrs["a_max"]
        return not (math.isnan(lo) or math.isnan(hi)) and lo <= hi
    if v.op in BINARY and v.op != "nn.bias_add":
        # The fused result keeps its shape: the other operand may only broadcast into it.
        return (tuple(v.output.shape) == tuple(prev.output.shape)
                and all(len(t.shape) <= len(v.output.shape) for t in v.inputs))
    return True


def _chain_ok(views: list[OpView]) -> bool:
    if not all(_float32(v) for v in views):
        return False
    if views[0].attrs.get("out_dtype", "") not in ("", "float32"):
        return False
    if len(views[0].output.shape) > 12:
        return False
    return all(_epilogue_ok(p, v) for p, v in zip(views, views[1:]))


def _conv_ok(views: list[OpView]) -> bool:
    a = views[0].attrs
    return (a.get("kernel_layout", "OIHW") == "OIHW"
            and a.get("out_layout", "") in ("", a.get("data_layout", "NCHW"))
            and _chain_ok(views))


def _pool_ok(views: list[OpView]) -> bool:
    v = views[0]
    if not _float32(v) or v.attrs.get("layout", "NCHW") != "NCHW":
        return False
    if v.op == "nn.global_avg_pool2d":
        return True
    a = v.attrs
    if a.get("ceil_mode") and a.get("count_include_pad"):
        return False
    pad = a.get("padding", 0)
    pad = [pad] if isinstance(pad, int) else list(pad)
    pad = {1: pad * 4, 2: pad * 2}.get(len(pad), pad)
    kernel, dilation = _pair(a.get("pool_size"), 1), _pair(a.get("dilation"), 1)
    if any(d != 1 for d in dilation):
        return False  # oneDNN 3.2 pools dilated windows only with ref:any
    reach = [(k - 1) * d + 1 for k, d in zip(kernel, dilation)]
    return all(p < reach[i % 2] for i, p in enumerate(pad))


def _layer_norm_ok(views: list[OpView]) -> bool:
    v = views[0]
    rank = len(v.inputs[0].shape) if v.inputs[0] else 0
    return _float32(v) and rank >= 1 and v.attrs.get("axis", -1) in (-1, rank - 1)


def _softmax_ok(views: list[OpView]) -> bool:
    # oneDNN's jit softmax reduces the innermost axis only; any other runs ref:any.
    v = views[0]
    rank = len(v.output.shape) if v.output else 0
    return _single_ok(views) and rank >= 1 and v.attrs.get("axis", -1) in (-1, rank - 1)


def _single_ok(views: list[OpView]) -> bool:
    v = views[0]
    return _float32(v) and len(v.output.shape) <= 12 and _epilogue_ok(v, v)


def _binary_ok(views: list[OpView]) -> bool:
    """A lone add/multiply/subtract (SiLU's and squeeze-excite's multiply, hard-swish's
    scaling): one operand has the result's shape, the other broadcasts into it."""
    v = views[0]
    if not _float32(v) or len(v.output.shape) > 12 or len(v.inputs) != 2:
        return False
    out = tuple(v.output.shape)
    return any(tuple(t.shape) == out for t in v.inputs) and \
        all(len(t.shape) <= len(out) for t in v.inputs)


PATTERNS = [
    Pattern("conv2d", ("nn.conv2d",) + _CHAIN, _conv_ok),
    Pattern("dense", ("nn.dense",) + _CHAIN, _chain_ok),
    Pattern("matmul", ("nn.matmul",) + _CHAIN, _chain_ok),
    Pattern("batch_matmul", ("nn.batch_matmul",) + _CHAIN, _chain_ok),
    Pattern("pool2d", ("nn.max_pool2d|nn.avg_pool2d|nn.global_avg_pool2d",), _pool_ok),
    Pattern("layer_norm", ("nn.layer_norm",), _layer_norm_ok),
    Pattern("softmax", ("nn.softmax",), _softmax_ok),
    Pattern("eltwise", ("|".join(ELTWISE),), _single_ok),
    Pattern("binary", ("add|multiply|subtract",), _binary_ok),
]
