"""conv2d on relvm's GEMM (kernels/conv_gemm.c) against the NumPy reference over a sweep of
geometries: 1-5 taps a side, strides 1-2, dilation 1-2, asymmetric padding 0-2, 1 or 2 groups,
widths on either side of the vector widths (whole rows read in place, ragged stride-1 rows on
the grid form, ragged strided rows packed), on every instruction set the GEMM is compiled for
(RELVM_PGEMM_ISA). The guard bands around every output (conftest.run_c) check that the grid
form's copies stay inside the output."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SWEEP = settings(max_examples=200, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow,
                                        HealthCheck.function_scoped_fixture])


@st.composite
def convs(draw):
    """(data shape, weight shape, attrs) of a conv on the GEMM path whose window fits."""
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    sh, sw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    top, left, bottom, right = (draw(st.integers(0, 2)) for _ in range(4))
    h, w = draw(st.integers(1, 12)), draw(st.integers(1, 40))
    bottom += max(0, dh * (kh - 1) + 1 - (h + top + bottom))
    right += max(0, dw * (kw - 1) + 1 - (w + left + right))
    groups = draw(st.integers(1, 2))
    n = draw(st.integers(1, 2))
    icg, ocg = draw(st.integers(2, 9)), draw(st.integers(1, 40))
    attrs = {"strides": [sh, sw], "dilation": [dh, dw], "padding": [top, left, bottom, right],
             "groups": groups}
    return (n, icg * groups, h, w), (ocg * groups, icg, kh, kw), attrs


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
