"""What the kernel sweeps share (test_pool_sweep.py, test_depthwise_sweep.py,
test_conv_sweep.py, test_conv_nhwc_sweep.py): their hypothesis settings, the 2-d window each
draws -- taps, strides, dilation, asymmetric padding and an input size, the padding grown where
the padded input would not hold one window (the ops refuse less) -- and a drawn conv's check.
Also the conv kernels' shape struct, for the tests that call them directly (these and
test_conv_pair.py, test_packed_gemm.py)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st


def sweep(examples: int) -> settings:
    """Derandomized (the same cases every run), no deadline, fixtures allowed."""
    return settings(max_examples=examples, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


def conv_shape(ffi, *, n: int, c: int, h: int, w: int, oc: int, kh: int, kw: int, oh: int,
               ow: int, sh: int = 1, sw: int = 1, pt: int = 0, pl: int = 0, dh: int = 1,
               dw: int = 1, groups: int = 1):
    """A `struct relvm_conv2d_shape *` (kernels/conv.h) for relvm_conv2d and its kin; the
    defaults are a plain conv's: stride and dilation 1, no top or left padding, one group."""
    return ffi.new("struct relvm_conv2d_shape *", dict(
        n=n, c=c, h=h, w=w, oc=oc, kh=kh, kw=kw, oh=oh, ow=ow, sh=sh, sw=sw, pt=pt, pl=pl,
        dh=dh, dw=dw, groups=groups))


class Window(NamedTuple):
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    padding: list  # top, left, bottom, right
    h: int
    w: int


def draw_window(draw, taps: int, stride: int, dilation: int, pad: int, h: tuple[int, int],
                w: tuple[int, int]) -> Window:
    """Taps 1..taps a side, strides 1..stride, dilation 1..dilation, each side's padding
    0..pad, and an input of h[0]..h[1] rows and w[0]..w[1] columns."""
    kh, kw = draw(st.integers(1, taps)), draw(st.integers(1, taps))
    sh, sw = draw(st.integers(1, stride)), draw(st.integers(1, stride))
    dh, dw = draw(st.integers(1, dilation)), draw(st.integers(1, dilation))
    top, left, bottom, right = (draw(st.integers(0, pad)) for _ in range(4))
    rows, cols = draw(st.integers(*h)), draw(st.integers(*w))
    bottom += max(0, dh * (kh - 1) + 1 - (rows + top + bottom))
    right += max(0, dw * (kw - 1) + 1 - (cols + left + right))
    return Window(kh, kw, sh, sw, dh, dw, [top, left, bottom, right], rows, cols)


def check_drawn_conv(check, conv, seed: int) -> None:
    """One drawn conv ((data shape, weight shape, attrs)), its C kernel against the NumPy
    reference on inputs in [-2, 2] (tolerances scaled by the result's magnitude)."""
    data, weight, attrs = conv
    rng = np.random.default_rng(seed)
    check("nn.conv2d", attrs, [rng.uniform(-2, 2, data).astype(np.float32),
                               rng.uniform(-2, 2, weight).astype(np.float32)],
          rtol=1e-4, atol=1e-5, scaled=True)
