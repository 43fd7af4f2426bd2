"""max_pool2d and avg_pool2d (kernels/pool.c) against the NumPy reference over a sweep of
windows: strides 1-3, dilation 1-2, asymmetric padding 0-3 (and windows past all the input),
ceil_mode, count_include_pad, widths on either side of the vector blocks (1-3 go one at a time,
4-15 by 4, then 16 or 8 at a time with an overlapping last block), windows wider than the
passes' POOL_TAPS, NaN, infinities and signed zeros, float32 and float64. Max is exact; an
average is within the tolerance of its float64 sums taken in another order.

The kernels are compiled for AVX-512, AVX2 and baseline x86-64 and chosen when the library
loads (RELVM_ISA_VERSIONS, an ifunc): nothing lets a process ask for a lesser one, so this runs
the version this CPU gets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sweeps import draw_window, sweep

SWEEP = sweep(400)


@st.composite
def windows(draw):
    """(shape, attrs) of a pool whose window fits its padded input."""
    win = draw_window(draw, taps=7, stride=3, dilation=2, pad=3, h=(0, 12), w=(0, 40))
    n, c = draw(st.sampled_from([(1, 1), (1, 3), (2, 2)]))
    attrs = {"pool_size": [win.kh, win.kw], "strides": [win.sh, win.sw],
             "dilation": [win.dh, win.dw], "padding": win.padding,
             "ceil_mode": draw(st.booleans())}
    return (n, c, win.h, win.w), attrs


def values(rng, shape, dtype, specials: bool) -> np.ndarray:
    """Random values; with `specials`, some NaN, +-inf and signed zeros, and ties."""
    x = rng.uniform(-4, 4, shape).astype(dtype)
    if specials and x.size:
        pick = rng.random(shape)
        x[pick < 0.3] = np.round(x[pick < 0.3])  # ties, and zeros of both signs below
        x[(pick >= 0.3) & (pick < 0.34)] = -0.0
        x[(pick >= 0.34) & (pick < 0.38)] = -np.inf
        x[(pick >= 0.38) & (pick < 0.40)] = np.inf
        x[(pick >= 0.40) & (pick < 0.42)] = np.nan
    return x


@SWEEP
@given(window=windows(), dtype=st.sampled_from(["float32", "float64"]),
       specials=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_max_pool_sweep(check, window, dtype, specials, seed):
    shape, attrs = window
    x = values(np.random.default_rng(seed), shape, dtype, specials)
    check("nn.max_pool2d", attrs, [x], rtol=0, atol=0)


@SWEEP
@given(window=windows(), dtype=st.sampled_from(["float32", "float64"]),
       include_pad=st.booleans(), specials=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_avg_pool_sweep(check, window, dtype, include_pad, specials, seed):
    shape, attrs = window
    x = values(np.random.default_rng(seed), shape, dtype, specials)
    check("nn.avg_pool2d", dict(attrs, count_include_pad=include_pad), [x])


# Tiny images, where the bordered row is mostly border: each output's window reads what the
# vertical pass wrote, the identity around it, or, past the input, nothing but identity.
TINY = [
    ((1, 2, 1, 1), {"pool_size": [3, 3], "padding": [1, 1]}),
    ((1, 2, 1, 1), {"pool_size": [2, 2], "strides": [3, 3], "padding": [1, 1],
                    "ceil_mode": True}),
    ((1, 1, 1, 2), {"pool_size": [5, 5], "padding": [2, 2, 2, 3]}),
    ((1, 1, 2, 3), {"pool_size": [1, 4], "strides": [1, 3], "padding": [0, 3, 0, 3]}),
    ((1, 1, 3, 1), {"pool_size": [3, 2], "dilation": [2, 2], "padding": [2, 2]}),
    ((1, 1, 0, 3), {"pool_size": [2, 2], "padding": [1, 1]}),  # no rows: all windows empty
    ((1, 1, 3, 0), {"pool_size": [2, 2], "padding": [1, 1]}),  # no columns
    ((1, 1, 1, 1), {"pool_size": [1, 1]}),
    ((1, 1, 4, 5), {"pool_size": [2, 2], "strides": [4, 4], "padding": [3, 3],
                    "ceil_mode": True}),  # windows entirely in the padding
    ((1, 1, 2, 17), {"pool_size": [1, 2], "strides": [1, 2]}),  # 16 + 1 columns
    ((1, 1, 2, 7), {"pool_size": [3, 3], "strides": [1, 4], "padding": [1, 2]}),  # sw 4
    ((1, 1, 8, 8), {"pool_size": [8, 8]}),  # 1x1 output, windows over POOL_TAPS taps
    ((1, 1, 9, 30), {"pool_size": [9, 11], "padding": [4, 5]}),
    ((1, 1, 4, 9), {"pool_size": [2, 3], "strides": [7, 8], "padding": [1, 2, 3, 4],
                    "ceil_mode": True}),  # strides past the image
    ((1, 1, 5, 5), {"pool_size": [3, 3], "dilation": [4, 4], "padding": [4, 4]}),
    ((1, 1, 3, 4), {"pool_size": [41, 43], "strides": [20, 21], "padding": [20, 21]}),
    ((1, 1, 6, 6), {"pool_size": [2, 2], "strides": [99999999, 99999999]}),
    # Taps reaching the input for some output column, with a gap between them no window
    # bridges: the direct loop.
    ((1, 2, 3, 2), {"pool_size": [2, 12], "strides": [1, 10], "padding": [0, 10]}),
    ((1, 1, 4, 3), {"pool_size": [3, 20], "strides": [2, 9], "padding": [1, 18, 1, 19],
                    "ceil_mode": True}),
    ((1, 1, 4, 3), {"pool_size": [3, 20], "strides": [2, 9], "dilation": [1, 2],
                    "padding": [1, 18, 1, 19], "ceil_mode": True}),  # separable again
]


@pytest.mark.parametrize("shape,attrs", TINY, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tiny_images(check, shape, attrs, dtype):
    x = values(np.random.default_rng(7), shape, dtype, specials=True)
    check("nn.max_pool2d", attrs, [x], rtol=0, atol=0)
    for include_pad in (False, True):
        check("nn.avg_pool2d", dict(attrs, count_include_pad=include_pad), [x])


def test_nan_anywhere_in_a_window_wins(check):
    """A NaN at each tap of a 3x3 window (the first, in the middle, the last; across the
    vertical and the horizontal pass) makes that window's max NaN and no other's."""
    for i in range(3):
        for j in range(3):
            x = np.arange(5 * 6, dtype=np.float32).reshape(1, 1, 5, 6)
            x[0, 0, 1 + i, 2 + j] = np.nan
            got = check("nn.max_pool2d", {"pool_size": [3, 3]}, [x], rtol=0, atol=0)[0]
            assert np.isnan(got[0, 0, 1, 2]) and np.isnan(got).sum() <= 9


def test_window_over_padding_only(check):
    """Max of no input is -inf; an average of none is 0, with or without count_include_pad."""
    x = np.ones((1, 1, 2, 2), np.float32)
    attrs = {"pool_size": [2, 2], "strides": [3, 3], "padding": [2, 2], "ceil_mode": True}
    got = check("nn.max_pool2d", attrs, [x], rtol=0, atol=0)[0]
    assert got[0, 0, 0, 0] == -np.inf and got[0, 0, 1, 1] == 1
    for include_pad in (False, True):
        got = check("nn.avg_pool2d", dict(attrs, count_include_pad=include_pad), [x])[0]
        assert got[0, 0, 0, 0] == 0


def test_windows_and_strides_far_larger_than_the_image(c_kernel):
    """Taps that read padding for every window are left out, and only the input columns some
    tap reads are kept: windows, strides and padding of 10^8 cost no more than the image (the
    bordered row once spanned the padded width: seconds and gigabytes). The reference would
    pad the input to 10^8 columns, so the expected values are worked out here."""
    x = (np.arange(12, dtype=np.float32) - 5).reshape(1, 1, 3, 4)
    big = 100_000_000
    attrs = {"pool_size": [2 * big + 1] * 2, "strides": [big, big], "padding": [big, big]}
    y = np.full((1, 1, 1, 1), np.nan, np.float32)
    c_kernel("nn.max_pool2d", attrs, ["float32"], ["float32"])(x, y)
    assert y[0, 0, 0, 0] == 6
    c_kernel("nn.avg_pool2d", attrs, ["float32"], ["float32"])(x, y)
    assert y[0, 0, 0, 0] == np.float32(0.5)
    c_kernel("nn.avg_pool2d", dict(attrs, count_include_pad=True), ["float32"],
             ["float32"])(x, y)
    assert y[0, 0, 0, 0] == np.float32(6 / (2 * big + 1) ** 2)
    # Two windows a row, 10^8 columns apart, each over all of the input's columns: the taps
    # that reach the input span 10^8 (the direct loop).
    attrs = {"pool_size": [1, big + 4], "strides": [1, big], "padding": [0, big]}
    y = np.full((1, 1, 3, 2), np.nan, np.float32)
    c_kernel("nn.max_pool2d", attrs, ["float32"], ["float32"])(x, y)
    np.testing.assert_array_equal(y, np.repeat(x.max(axis=3, keepdims=True), 2, axis=3))
    c_kernel("nn.avg_pool2d", attrs, ["float32"], ["float32"])(x, y)
    np.testing.assert_array_equal(y, np.repeat(x.mean(axis=3, keepdims=True), 2, axis=3))


@pytest.mark.parametrize("shape,attrs", [
    ((1, 1, 40, 33), {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1]}),
    ((1, 3, 21, 20), {"pool_size": [5, 5], "padding": [2, 2]}),
    ((2, 1, 9, 9), {"pool_size": [2, 3], "strides": [1, 2], "dilation": [2, 1],
                    "ceil_mode": True}),
], ids=str)
def test_bands_of_rows_on_two_threads(check, two_threads, shape, attrs):
    """Fewer planes than four per thread: each plane's rows are cut into bands."""
    x = values(np.random.default_rng(3), shape, "float32", specials=True)
    check("nn.max_pool2d", attrs, [x], rtol=0, atol=0)
    check("nn.avg_pool2d", dict(attrs, count_include_pad=True), [x])
