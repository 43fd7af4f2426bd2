"""Normalizations beyond batch and layer norm: RMS norm, group norm and instance norm.

Each normalizes groups of elements by their own statistics, computed in float64 and rounded
once to the input dtype (as ``nn.layer_norm``); the C kernels make one pass per row or group
for the statistics and one to write (``kernels/norm.c``).

* ``nn.rms_norm`` normalizes over every axis from ``axis`` on: x / sqrt(mean(x^2) + epsilon),
  times gamma, which has the last of those dims (all of them, or fewer: it repeats).
* ``nn.group_norm`` (Relay's) splits the channels (axis 1) into ``num_groups`` groups of
  consecutive channels; each group, over all its channels' spatial positions, is normalized
  by its mean and biased variance, then each channel is scaled by gamma and shifted by beta.
* ``nn.instance_norm`` (Relay's) is group norm with one channel per group.
* ``nn.lp_norm`` divides by the L1 or L2 norm along one axis, 0 where the norm is 0 (ONNX
  LpNormalization); ``nn.mean_variance_norm`` standardizes along one axis: (x - mean) /
  sqrt(var + epsilon) (ONNX MeanVarianceNormalization, its axes merged into one).
"""

from __future__ import annotations

import numpy as np

from ..ir import dims as D
from .common import FLOATS, check_dtype, check_rank, differ, fmt_shape, normalize_axis, require, \
    same_dtype, tensor_arg
from .registry import BOOL, FLOAT, INT, OPAQUE, AttrKind, OpTypeError, attr, register

_FLOAT = (FLOATS, "a float dtype")


def _rms_norm_type(attrs, d, g):
    data, gamma = tensor_arg(d, "data"), tensor_arg(g, "gamma")
    same_dtype(("data", data), ("gamma", gamma))
    check_dtype(data, "data", *_FLOAT)
    axis = normalize_axis(attrs.axis, data.ndim)
    want = data.shape[axis:]
    if gamma.ndim > len(want) or any(differ(a, b) for a, b in
                                     zip(gamma.shape, want[len(want) - gamma.ndim:])):
        raise OpTypeError(f"gamma {fmt_shape(gamma.shape)} must have the last dims of the "
                          f"normalized dims of data {fmt_shape(data.shape)} from axis "
                          f"{attrs.axis}: {fmt_shape(want)}")
    return data


def _rms_norm_ref(attrs, x, gamma):
    axis = normalize_axis(attrs.axis, x.ndim)
    want = x.shape[axis:]
    require(gamma.ndim <= len(want) and gamma.shape == want[len(want) - gamma.ndim:],
            f"gamma {gamma.shape} does not match the last normalized dims {want} of {x.shape}")
    x64 = x.astype(np.float64)
    axes = tuple(range(axis, x.ndim))
    with np.errstate(invalid="ignore", divide="ignore"):  # an empty group: NaN, quietly
        ms = (x64 * x64).mean(axis=axes, keepdims=True) if x.size else x64
    return (x64 / np.sqrt(ms + attrs.epsilon) * gamma.astype(np.float64)).astype(x.dtype)


register("nn.rms_norm", inputs=("data", "gamma"), infer=_rms_norm_type, reference=_rms_norm_ref,
         pattern=OPAQUE, attrs=[attr("axis", INT, -1), attr("epsilon", FLOAT, 1e-5)],
         doc="x / sqrt(mean(x^2) + epsilon) over every axis from axis on, times gamma (the last "
             "of those dims)")


_NORM_ATTRS = [attr("axis", INT, 1), attr("epsilon", FLOAT, 1e-5), attr("center", BOOL, True),
               attr("scale", BOOL, True)]


def _channel_norm_type(attrs, d, g, b, groups=None):
    data = tensor_arg(d, "data")
    check_dtype(data, "data", *_FLOAT)
    if data.ndim < 2:
        raise OpTypeError(f"data must have rank >= 2 (N, C, ...), got {fmt_shape(data.shape)}")
    if normalize_axis(attrs.axis, data.ndim) != 1:
        raise OpTypeError(f"only axis=1 (channels first) is supported, got axis={attrs.axis}")
    channels = data.shape[1]
    for name, t in (("gamma", tensor_arg(g, "gamma")), ("beta", tensor_arg(b, "beta"))):
        same_dtype(("data", data), (name, t))
        check_rank(t, name, 1)
        if differ(t.shape[0], channels):
            raise OpTypeError(f"{name} {fmt_shape(t.shape)} must have the {channels} channels "
                              f"of data {fmt_shape(data.shape)}")
    if groups is not None:
        if groups < 1:
            raise OpTypeError(f"num_groups must be positive, got {groups}")
        if not D.equal_or_assumed(D.mod(channels, groups), 0):
            raise OpTypeError(f"num_groups={groups} does not divide the {channels} channels")
    return data


def group_norm_ref(x, gamma, beta, groups: int, attrs) -> np.ndarray:
    """Group norm of NCHW... ``x``; the NumPy form the C kernel follows."""
    n, c = x.shape[:2]
    require(c % groups == 0, f"num_groups={groups} does not divide the {c} channels of {x.shape}")
    for name, v in (("gamma", gamma), ("beta", beta)):
        require(v.shape == (c,), f"{name} {v.shape} does not match the {c} channels of {x.shape}")
    spatial = int(np.prod(x.shape[2:]))
    x64 = x.astype(np.float64).reshape(n, groups, c // groups * spatial)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = x64.mean(axis=2, keepdims=True) if x64.shape[2] else x64
        var = ((x64 - mean) ** 2).mean(axis=2, keepdims=True) if x64.shape[2] else x64
    y = ((x64 - mean) / np.sqrt(var + attrs.epsilon)).reshape((n, c, spatial))
    if attrs.scale:
        y = y * gamma.astype(np.float64)[:, None]
    if attrs.center:
        y = y + beta.astype(np.float64)[:, None]
    return y.reshape(x.shape).astype(x.dtype)


register("nn.group_norm", inputs=("data", "gamma", "beta"),
         infer=lambda attrs, d, g, b: _channel_norm_type(attrs, d, g, b, attrs.num_groups),
         reference=lambda attrs, x, g, b: group_norm_ref(x, g, b, attrs.num_groups, attrs),
         pattern=OPAQUE, attrs=[attr("num_groups", INT, required=True)] + _NORM_ATTRS,
         doc="normalize each group of consecutive channels (axis 1), then scale and shift each "
             "channel by gamma and beta")
register("nn.instance_norm", inputs=("data", "gamma", "beta"), infer=_channel_norm_type,
         reference=lambda attrs, x, g, b: group_norm_ref(x, g, b, max(x.shape[1], 1), attrs),
         pattern=OPAQUE, attrs=_NORM_ATTRS,
         doc="normalize each channel (axis 1) of each item over its spatial dims, then scale "
             "and shift it by gamma and beta")


def _one_or_two(v) -> int:
    if v not in (1, 2) or isinstance(v, bool):
        raise ValueError
    return int(v)


ONE_OR_TWO = AttrKind("1 or 2", _one_or_two)


def _axis_norm_type(attrs, d):
    data = tensor_arg(d, "data")
    check_dtype(data, "data", *_FLOAT)
    normalize_axis(attrs.axis, data.ndim)
    return data


def _lp_norm_ref(attrs, x):
    axis = normalize_axis(attrs.axis, x.ndim)
    x64 = x.astype(np.float64)
    norm = np.abs(x64).sum(axis=axis, keepdims=True) if attrs.p == 1 else \
        np.sqrt((x64 * x64).sum(axis=axis, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm == 0, 0.0, x64 / norm).astype(x.dtype)


def _mean_variance_norm_ref(attrs, x):
    axis = normalize_axis(attrs.axis, x.ndim)
    x64 = x.astype(np.float64)
    if x.shape[axis] == 0:
        return x.copy()
    mean = x64.mean(axis=axis, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):  # a constant line with epsilon 0
        return ((x64 - mean) / np.sqrt(var + attrs.epsilon)).astype(x.dtype)


register("nn.lp_norm", inputs=("data",), infer=_axis_norm_type, reference=_lp_norm_ref,
         pattern=OPAQUE, attrs=[attr("axis", INT, -1), attr("p", ONE_OR_TWO, 2)],
         doc="x / sum(|x|) (p=1) or x / sqrt(sum(x^2)) (p=2) along axis; 0 where the norm is 0")
register("nn.mean_variance_norm", inputs=("data",), infer=_axis_norm_type,
         reference=_mean_variance_norm_ref, pattern=OPAQUE,
         attrs=[attr("axis", INT, -1), attr("epsilon", FLOAT, 1e-9)],
         doc="(x - mean) / sqrt(var + epsilon) along axis (biased variance)")
