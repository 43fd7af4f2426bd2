"""conv2d on relvm's GEMM (kernels/conv_gemm.c) against the NumPy reference over a sweep of
geometries: 1-5 taps a side, strides 1-2, dilation 1-2, asymmetric padding 0-2, 1 or 2 groups,
widths on either side of the vector widths (whole rows read in place, ragged stride-1 rows on
the grid form, ragged strided rows packed), on every instruction set the GEMM is compiled for
(RELVM_PGEMM_ISA). The guard bands around every output (conftest.run_c) check that the grid
form's copies stay inside the output."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sweeps import check_drawn_conv, conv_shape, draw_window, sweep

import relvm
from relvm.backends.native import load
from relvm.ops import OPS

SWEEP = sweep(200)


@st.composite
def convs(draw):
    """(data shape, weight shape, attrs) of a conv on the GEMM path whose window fits."""
    win = draw_window(draw, taps=5, stride=2, dilation=2, pad=2, h=(1, 12), w=(1, 40))
    groups = draw(st.integers(1, 2))
    n = draw(st.integers(1, 2))
    # more than 48 output channels: weights in several chunks (conv_chunk_rows), which a
    # packed panel runs one after another
    icg, ocg = draw(st.integers(2, 9)), draw(st.integers(1, 100))
    attrs = {"strides": [win.sh, win.sw], "dilation": [win.dh, win.dw],
             "padding": win.padding, "groups": groups}
    return (n, icg * groups, win.h, win.w), (ocg * groups, icg, win.kh, win.kw), attrs


@SWEEP
@given(conv=convs(), seed=st.integers(0, 2**32 - 1))
def test_conv_sweep(check, conv, seed):
    check_drawn_conv(check, conv, seed)


@st.composite
def direct_convs(draw):
    """Convs whose k (input channels of a group x taps) is 512 or more: the direct form
    (kernels/conv_gemm.c, is_direct) when a group's output channels fill their 32-channel panels
    to within a sixteenth (30-32, 62-64, 96), which the draw of ocg makes likely; k in blocks of
    144 with a shorter or longer last block, bands of output rows, strides, dilation, groups."""
    win = draw_window(draw, taps=3, stride=2, dilation=2, pad=2, h=(1, 9), w=(1, 21))
    taps = win.kh * win.kw
    groups = draw(st.integers(1, 2))
    icg = draw(st.integers(-(-512 // taps), -(-512 // taps) + 70))
    ocg = draw(st.sampled_from([30, 31, 32, 33, 62, 64, 96]))
    attrs = {"strides": [win.sh, win.sw], "dilation": [win.dh, win.dw],
             "padding": win.padding, "groups": groups}
    n = draw(st.integers(1, 2))
    return (n, icg * groups, win.h, win.w), (ocg * groups, icg, win.kh, win.kw), attrs


@sweep(40)
@given(conv=direct_convs(), seed=st.integers(0, 2**32 - 1))
def test_conv_direct_sweep(check, conv, seed):
    check_drawn_conv(check, conv, seed)


def _run(kind, attrs, x, w, out_shape):
    """relvm_conv2d ("conv") or relvm_conv2d_mean ("mean") called directly: a fresh output
    buffer each call, weights packed by the call."""
    ffi, lib = load()
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    pt, pl, pb, pr = attrs["padding"]
    sh, sw = attrs["strides"]
    oh, ow = (h + pt + pb - kh) // sh + 1, (wd + pl + pr - kw) // sw + 1
    shape = conv_shape(ffi, n=n, c=c, h=h, w=wd, oc=oc, kh=kh, kw=kw, oh=oh, ow=ow, sh=sh,
                       sw=sw, pt=pt, pl=pl)
    y = np.full(out_shape, 12345.0, np.float32)
    args = (0, shape, ffi.from_buffer(x), ffi.from_buffer(w), ffi.from_buffer(y), ffi.NULL,
            ffi.NULL, ffi.NULL)
    status = (lib.relvm_conv2d(*args, ffi.NULL, ffi.NULL) if kind == "conv"
              else lib.relvm_conv2d_mean(*args))
    assert status == 0
    return y


@pytest.mark.parametrize("geometry", [
    # (data, weight, strides, padding): the grid form, packed strided panels, panels in place,
    # a large image in many bands, weights in two chunks
    ((1, 5, 23, 19), (7, 5, 3, 3), [1, 1], [1, 1, 1, 1]),
    ((2, 4, 41, 37), (9, 4, 3, 3), [2, 2], [1, 1, 1, 1]),
    ((1, 3, 30, 64), (6, 3, 3, 3), [1, 1], [1, 1, 1, 1]),
    ((1, 16, 80, 80), (32, 16, 3, 3), [2, 2], [1, 1, 1, 1]),
    ((1, 6, 40, 33), (100, 6, 5, 5), [1, 2], [2, 1, 2, 1]),
    ((1, 64, 30, 23), (64, 64, 3, 3), [1, 1], [1, 1, 1, 1]),
    ((2, 60, 29, 31), (62, 60, 3, 3), [2, 2], [1, 0, 1, 2]),
], ids=["grid", "strided", "in-place", "bands", "chunks", "direct", "direct-strided"])
@pytest.mark.parametrize("nthreads", [1, 2])
def test_conv_pads_only_the_rows_its_panels_read(c_kernel, nthreads, geometry):
    """Each thread pads the bands of rows its panels read, as it reaches them: rows it never
    padded hold whatever the scratch held (here NaN from a first call over NaN input), and no
    output, nor a mean over the output, may see them. Two threads start in the middle of an
    image."""
    data, weight, strides, padding = geometry
    attrs = {"strides": strides, "padding": padding, "dilation": [1, 1], "groups": 1}
    op = OPS["nn.conv2d"]
    rng = np.random.default_rng(7)
    w = rng.uniform(-1, 1, weight).astype(np.float32)
    before = relvm.get_num_threads()
    relvm.set_num_threads(nthreads)
    try:
        for kind in ("conv", "mean"):
            for x in (np.full(data, np.nan, np.float32),
                      rng.uniform(-2, 2, data).astype(np.float32)):
                want = op.reference(op.make_attrs(attrs), x, w)
                if kind == "mean":
                    want = want.mean(axis=(2, 3), dtype=np.float64)
                got = _run(kind, attrs, x, w, want.shape)
                if np.isnan(x).all():
                    assert np.isnan(got).all()
                    continue
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    finally:
        relvm.set_num_threads(before)


@pytest.mark.parametrize("isa", ["avx2", "sse2"])
def test_conv_sweep_on_lesser_instruction_sets(isa, rerun_under_isa):
    rerun_under_isa(isa, __file__, "not lesser_instruction_sets")
