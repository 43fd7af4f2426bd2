"""Depthwise conv2d (kernels/conv_depthwise.c) against the NumPy reference over a sweep of
windows: 1-7 taps a side, strides 1-3, dilation 1-2, asymmetric padding 0-3, a channel
multiplier of 1-3, planes from 1 pixel to wider than several vectors, and the fused bias and
relu, on every instruction set the kernels are compiled for (the depthwise loop follows the
GEMM's choice, RELVM_PGEMM_ISA). Each plane is computed on a "wide grid" C columns wide and
copied out in whole vectors, so the guard bands around every output (conftest.run_c) check
that no vector lands past a plane's end."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sweeps import conv_shape, draw_window, sweep

from relvm.backends import native

#: The C kernels' clamp argument for relu: 0 to infinity.
RELU = np.array([0, np.inf], np.float32)

SWEEP = sweep(300)
TOL = dict(rtol=1e-4, atol=1e-5, scaled=True)


@st.composite
def depthwise(draw):
    """(data shape, weight shape, attrs) of a depthwise conv whose window fits."""
    win = draw_window(draw, taps=7, stride=3, dilation=2, pad=3, h=(1, 20), w=(1, 40))
    n, c = draw(st.sampled_from([(1, 1), (1, 3), (2, 2)]))
    mult = draw(st.integers(1, 3))
    attrs = {"strides": [win.sh, win.sw], "dilation": [win.dh, win.dw],
             "padding": win.padding, "groups": c}
    return (n, c, win.h, win.w), (c * mult, 1, win.kh, win.kw), attrs


@SWEEP
@given(conv=depthwise(), seed=st.integers(0, 2**32 - 1))
def test_depthwise_sweep(check, conv, seed):
    data, weight, attrs = conv
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, data).astype(np.float32)
    w = rng.uniform(-2, 2, weight).astype(np.float32)
    check("nn.conv2d", attrs, [x, w], **TOL)


# The planes of MobileNet/EfficientNet-style networks: the grid is y itself (C == ow: a 1-wide
# window without padding), a plane of whole vectors, ragged ones, and 7 x 7 and 14 x 14 planes
# whose rows are shorter than a vector.
PLANES = [
    ((1, 8, 112, 112), (8, 1, 3, 3), {"padding": [1, 1], "groups": 8}),
    ((1, 8, 112, 112), (8, 1, 3, 3), {"padding": [1, 1], "strides": [2, 2], "groups": 8}),
    ((1, 16, 56, 56), (16, 1, 5, 5), {"padding": [2, 2], "groups": 16}),
    ((2, 24, 14, 14), (24, 1, 3, 3), {"padding": [1, 1], "groups": 24}),
    ((1, 32, 7, 7), (32, 1, 3, 3), {"padding": [1, 1], "groups": 32}),
    ((1, 16, 14, 14), (16, 1, 5, 5), {"padding": [2, 2], "strides": [2, 2], "groups": 16}),
    ((1, 4, 9, 33), (4, 1, 1, 1), {"groups": 4}),             # the grid is y
    ((1, 4, 10, 10), (4, 1, 7, 7), {"padding": [3, 3], "groups": 4}),  # 49 taps
    ((1, 2, 6, 6), (2, 1, 6, 4), {"padding": [2, 1], "groups": 2}),    # 24 taps: any window
]


@pytest.mark.parametrize("data,weight,attrs", PLANES, ids=str)
def test_depthwise_planes(check, rand, data, weight, attrs):
    check("nn.conv2d", attrs, [rand(data), rand(weight)], **TOL)


def _direct(x, w, bias, relu, attrs):
    """The float64 result of a depthwise conv, + bias, through relu."""
    (sh, sw), (dh, dw), (top, left, bottom, right) = (attrs["strides"], attrs["dilation"],
                                                      attrs["padding"])
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + left + right - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, oc, oh, ow))
    for o in range(oc):
        for i in range(kh):
            for j in range(kw):
                y[:, o] += w[o, 0, i, j] * xp[:, o // (oc // c), i * dh:i * dh + sh * (oh - 1) + 1:sh,
                                              j * dw:j * dw + sw * (ow - 1) + 1:sw]
    y += bias[None, :, None, None]
    return np.maximum(y, 0) if relu else y


@pytest.mark.parametrize("data,weight,attrs", PLANES[:6], ids=str)
@pytest.mark.parametrize("relu", [False, True])
def test_bias_and_relu_in_the_loop(rand, data, weight, attrs, relu):
    """relvm_conv2d's own bias and relu (what a fused conv passes it), NaN kept by relu."""
    ffi, lib = native.load()
    x, w, bias = rand(data), rand(weight), rand((weight[0],))
    x[0, 0, 0, 0] = np.nan
    attrs = {"strides": [1, 1], "dilation": [1, 1], **attrs}
    pads = attrs["padding"] * (2 if len(attrs["padding"]) == 2 else 1)
    attrs["padding"] = [pads[0], pads[1], pads[2], pads[3]]
    want = _direct(x, w, bias, relu, attrs)
    n, c, h, wd = data
    shape = conv_shape(ffi, n=n, c=c, h=h, w=wd, oc=weight[0], kh=weight[2], kw=weight[3],
                       oh=want.shape[2], ow=want.shape[3], sh=attrs["strides"][0],
                       sw=attrs["strides"][1], pt=pads[0], pl=pads[1], groups=c)
    y = np.full(want.shape, -7.0, np.float32)
    status = lib.relvm_conv2d(0, shape, ffi.from_buffer(x), ffi.from_buffer(w),
                              ffi.from_buffer(y), ffi.from_buffer(bias),
                              ffi.from_buffer("float[]", RELU) if relu else ffi.NULL, ffi.NULL,
                              ffi.NULL, ffi.NULL)
    assert status == 0
    np.testing.assert_allclose(y, want.astype(np.float32), rtol=1e-4, atol=1e-4 * np.nanmax(
        np.abs(want)), equal_nan=True)
    assert np.isnan(y[0, 0]).any()  # the NaN pixel reaches its windows, relu or not


@pytest.mark.parametrize("isa", ["avx2", "sse2"])
def test_depthwise_on_lesser_instruction_sets(isa, rerun_under_isa):
    rerun_under_isa(isa, __file__, "not lesser_instruction_sets")
