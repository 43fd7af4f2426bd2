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
from sweeps import draw_window, sweep

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
    data, weight, attrs = conv
    rng = np.random.default_rng(seed)
    check("nn.conv2d", attrs, [rng.uniform(-2, 2, data).astype(np.float32),
                               rng.uniform(-2, 2, weight).astype(np.float32)],
          rtol=1e-4, atol=1e-5, scaled=True)


@pytest.mark.parametrize("isa", ["avx2", "sse2"])
def test_conv_sweep_on_lesser_instruction_sets(isa, rerun_under_isa):
    rerun_under_isa(isa, __file__, "not lesser_instruction_sets")
