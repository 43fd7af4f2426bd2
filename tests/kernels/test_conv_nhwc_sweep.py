"""conv2d over NHWC data (kernels/conv_nhwc.c) against the NumPy reference: a sweep of windows
(1-5 taps a side, strides 1-2, dilation 1-2, asymmetric padding 0-2), groups, depthwise convs,
and input channels from 1 to 300 (taps read in place, k in blocks of taps or, past 144
channels, of a tap's channels; 1x1 convs one GEMM over the pixels), output
channels that end in a partial panel (one vector or less of it: the half tile; more: the
masked edge); the layer shapes of mobile networks; the weights packed ahead as a constant
weight is; and every instruction set the GEMM is compiled for (RELVM_PGEMM_ISA). The guard
bands around every output (conftest.run_c) check that no store lands past it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sweeps import check_drawn_conv, conv_shape, draw_window, sweep

from relvm.backends import native

SWEEP = sweep(200)
TOL = dict(rtol=1e-4, atol=1e-5, scaled=True)
RELU6 = np.array([0, 6], np.float32)


def _nhwc(shape):
    """An NCHW shape's NHWC order."""
    n, c, h, w = shape
    return (n, h, w, c)


@st.composite
def convs(draw):
    """(NHWC data shape, weight shape, attrs) of a conv whose window fits."""
    win = draw_window(draw, taps=5, stride=2, dilation=2, pad=2, h=(1, 12), w=(1, 30))
    n = draw(st.integers(1, 2))
    kind = draw(st.sampled_from(["dense", "grouped", "depthwise"]))
    if kind == "depthwise":
        c = draw(st.integers(1, 40))
        groups, icg, oc = c, 1, c
    else:
        groups = 1 if kind == "dense" else draw(st.integers(2, 3))
        icg = draw(st.sampled_from([1, 3, 8, 31, 32, 40, 70, 160]))
        oc = groups * draw(st.integers(1, 70))
        c = icg * groups
    attrs = {"strides": [win.sh, win.sw], "dilation": [win.dh, win.dw],
             "padding": win.padding, "groups": groups, "data_layout": "NHWC"}
    return (n, win.h, win.w, c), (oc, icg, win.kh, win.kw), attrs


@SWEEP
@given(conv=convs(), seed=st.integers(0, 2**32 - 1))
def test_conv_nhwc_sweep(check, conv, seed):
    check_drawn_conv(check, conv, seed)


@st.composite
def pointwise(draw):
    """1x1 convs of stride 1 and no padding: one GEMM over the pixels of every image."""
    n, h, w = draw(st.integers(1, 3)), draw(st.integers(1, 20)), draw(st.integers(1, 20))
    c = draw(st.sampled_from([1, 16, 24, 64, 65, 96, 200]))
    oc = draw(st.sampled_from([1, 8, 16, 24, 32, 40, 144, 100]))
    return (n, h, w, c), (oc, c, 1, 1), {"data_layout": "NHWC"}


@SWEEP
@given(conv=pointwise(), seed=st.integers(0, 2**32 - 1))
def test_conv_nhwc_pointwise_sweep(check, conv, seed):
    check_drawn_conv(check, conv, seed)


# Mobile-network layers (NCHW shapes, run NHWC): depthwise 3x3 and 5x5, strided, over planes
# of 112 down to 7 pixels; expanding and projecting 1x1 convs with 16-960 channels; dense 3x3
# convs reading their taps in place (8 to 300 channels, in k blocks).
LAYERS = [
    ((1, 32, 112, 112), (32, 1, 3, 3), {"padding": [1, 1], "groups": 32}),
    ((1, 96, 112, 112), (96, 1, 3, 3), {"padding": [1, 1], "strides": [2, 2], "groups": 96}),
    ((2, 144, 14, 14), (144, 1, 5, 5), {"padding": [2, 2], "groups": 144}),
    ((1, 960, 7, 7), (960, 1, 3, 3), {"padding": [1, 1], "groups": 960}),
    # OCR planes 3 rows high (every row's window clipped at the top or bottom), 8 channels
    # (vectors of 8 under AVX-512), dilated
    ((2, 88, 3, 96), (88, 1, 5, 5), {"padding": [2, 2], "groups": 88}),
    ((3, 8, 24, 96), (8, 1, 3, 3), {"padding": [1, 1], "strides": [2, 1], "groups": 8}),
    ((1, 20, 9, 30), (20, 1, 3, 3), {"padding": [2, 2], "dilation": [2, 2], "groups": 20}),
    # small planes, most pixels at a border (one by one, several vectors of channels at once)
    # and rows of 1-3 interior pixels: 1152 = 18 blocks of 4 AVX-512 vectors, 200 and 72 end
    # in a vector that overlaps the one before; a window wider than the plane
    ((1, 1152, 7, 7), (1152, 1, 5, 5), {"padding": [2, 2], "groups": 1152}),
    ((2, 72, 6, 7), (72, 1, 3, 3), {"padding": [1, 1], "strides": [2, 2], "groups": 72}),
    ((1, 200, 2, 3), (200, 1, 5, 5), {"padding": [2, 2], "groups": 200}),
    # RGB stems (3 input channels: the input gathered a band at a time, k = taps x 3): 7x7
    # stride 2 to 64 channels, 3x3 stride 2 to 32 and 16, dilated (a tap per run)
    ((1, 3, 64, 64), (64, 3, 7, 7), {"padding": [3, 3], "strides": [2, 2]}),
    ((2, 3, 30, 30), (32, 3, 3, 3), {"padding": [1, 1], "strides": [2, 2]}),
    ((1, 3, 41, 33), (16, 3, 3, 3), {"padding": [1, 1], "strides": [2, 2]}),
    ((1, 3, 20, 20), (16, 3, 3, 3), {"padding": [2, 2], "dilation": [2, 2]}),
    ((1, 24, 56, 56), (144, 24, 1, 1), {}),
    ((1, 144, 56, 56), (24, 144, 1, 1), {}),
    ((1, 960, 7, 7), (160, 960, 1, 1), {}),
    ((2, 16, 20, 20), (96, 16, 1, 1), {}),
    ((1, 64, 14, 14), (64, 64, 3, 3), {"padding": [1, 1]}),
    ((1, 128, 9, 9), (96, 128, 3, 3), {"padding": [1, 1], "strides": [2, 2]}),
    ((1, 16, 40, 40), (32, 16, 3, 3), {"padding": [1, 1], "strides": [2, 2]}),
    ((1, 256, 7, 7), (512, 256, 1, 1), {"strides": [2, 2]}),
    ((1, 8, 3, 300), (16, 8, 3, 3), {"padding": [1, 1]}),  # a long row, few channels
    # taps read in place in k blocks: a tap's channels in three blocks (300 = 3 x 100), the
    # same tap's first and last block starting and ending the sums (a strided 1x1), no tap
    # covering a whole row (a padded 1x1), bands of 64 one-pixel rows
    ((1, 300, 9, 9), (40, 300, 3, 3), {"padding": [1, 1]}),
    ((2, 300, 7, 7), (48, 300, 1, 1), {"strides": [2, 2]}),
    ((1, 40, 5, 6), (24, 40, 1, 1), {"padding": [1, 1]}),
    ((1, 32, 100, 1), (16, 32, 3, 1), {"padding": [1, 0]}),
]


@pytest.mark.parametrize("data,weight,attrs", LAYERS, ids=str)
def test_conv_nhwc_layers(check, rand, data, weight, attrs):
    check("nn.conv2d", {**attrs, "data_layout": "NHWC"}, [rand(_nhwc(data)), rand(weight)],
          **TOL)


def _reference(x, w, bias, clamp, attrs):
    """The float64 result of an NHWC conv with bias and clamp."""
    from relvm.ops import OPS

    conv = OPS["nn.conv2d"]
    y = conv.reference(conv.make_attrs(attrs), x.astype(np.float64), w.astype(np.float64))
    return np.clip(y + bias, *clamp)


@pytest.mark.parametrize("data,weight,attrs", LAYERS[:9], ids=str)
def test_conv_nhwc_packed_weights_bias_clamp(rand, data, weight, attrs):
    """relvm_conv2d_nhwc as a fused layer calls it: constant weights packed once
    (relvm_conv2d_nhwc_pack_weights), the bias and the clamp (relu6) in its epilogue."""
    ffi, lib = native.load()
    x, w = rand(_nhwc(data)), rand(weight)
    bias = rand((weight[0],))
    pad = attrs.get("padding", [0, 0])
    stride, dil = attrs.get("strides", [1, 1]), attrs.get("dilation", [1, 1])
    n, h, wd, c = x.shape
    oc, _, kh, kw = w.shape
    oh = (h + 2 * pad[0] - (kh - 1) * dil[0] - 1) // stride[0] + 1
    ow = (wd + 2 * pad[1] - (kw - 1) * dil[1] - 1) // stride[1] + 1
    s = conv_shape(ffi, n=n, c=c, h=h, w=wd, oc=oc, kh=kh, kw=kw, oh=oh, ow=ow, sh=stride[0],
                   sw=stride[1], pt=pad[0], pl=pad[1], dh=dil[0], dw=dil[1],
                   groups=attrs.get("groups", 1))
    size = lib.relvm_conv2d_nhwc_packed_size(s)
    buf = np.empty(size + 16, np.float32)
    at = (-buf.ctypes.data % 64) // 4
    packed = buf[at:at + size]
    lib.relvm_conv2d_nhwc_pack_weights(s, ffi.from_buffer(w), ffi.from_buffer(packed))
    y = np.full((n, oh, ow, oc), np.nan, np.float32)
    p, clamp = ffi.from_buffer, ffi.from_buffer("float[]", RELU6)
    assert lib.relvm_conv2d_nhwc(0, s, p(x), p(w), p(y), p(bias), clamp, p(packed), ffi.NULL,
                                 ffi.NULL) == 0
    want = _reference(x, w, bias, RELU6, {**attrs, "data_layout": "NHWC"})
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_conv_nhwc_without_input_channels():
    """No input channels: each output is its bias, clamped."""
    ffi, lib = native.load()
    x = np.zeros((2, 3, 4, 0), np.float32)
    w = np.zeros((5, 0, 3, 3), np.float32)
    bias = np.array([-1, 0, 2, 7, 3], np.float32)
    s = conv_shape(ffi, n=2, c=0, h=3, w=4, oc=5, kh=3, kw=3, oh=3, ow=4, pt=1, pl=1)
    y = np.full((2, 3, 4, 5), np.nan, np.float32)
    p, clamp = ffi.from_buffer, ffi.from_buffer("float[]", RELU6)
    assert lib.relvm_conv2d_nhwc(0, s, p(x), p(w), p(y), p(bias), clamp, ffi.NULL, ffi.NULL,
                                 ffi.NULL) == 0
    assert np.array_equal(y, np.broadcast_to(np.clip(bias, 0, 6), y.shape))


@pytest.mark.parametrize("isa", ["avx2", "sse2"])
def test_conv_nhwc_on_lesser_instruction_sets(isa, rerun_under_isa):
    rerun_under_isa(isa, __file__, "not lesser_instruction_sets")
