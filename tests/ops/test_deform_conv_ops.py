"""nn.deform_conv2d: its type relation over symbolic dims, its errors, and the reference
against independent computations (with zero offsets it is a conv2d, with whole-pixel offsets a
conv2d of a shifted image, half-pixel offsets interpolate the four pixels around)."""

import numpy as np
import pytest

from relvm.ir.dims import Sym
from relvm.ops.registry import OpTypeError
from ophelpers import T, infer, run

n, h, w = Sym("n"), Sym("h"), Sym("w")
RNG = np.random.default_rng(7)

# --- nn.deform_conv2d ----------------------------------------------------------------------------

def test_deform_types_over_symbolic_dims():
    x, wt = T((n, 4, h, w)), T((6, 2, 3, 3))
    off, mask = T((n, 36, h - 2, w - 2)), T((n, 18, h - 2, w - 2))
    assert infer("nn.deform_conv2d", x, wt, off, mask, groups=2, offset_groups=2) == \
        T((n, 6, h - 2, w - 2))
    got = infer("nn.deform_conv2d", x, T((6, 4, 3, 3)), T((n, 18, h // 2, w // 2)),
                T((), "float32"), padding=[1, 1], strides=[2, 2])
    assert got == T((n, 6, (h - 1) // 2 + 1, (w - 1) // 2 + 1))


@pytest.mark.parametrize("types, attrs, message", [
    ((T((1, 4, 5, 5)), T((6, 3, 3, 3)), T((1, 18, 3, 3)), T(())), {},
     r"weight \(6, 3, 3, 3\) with groups=1 needs 3 input channels"),
    ((T((1, 4, 5, 5)), T((6, 4, 3, 3)), T((1, 18, 3, 3)), T(())), {"offset_groups": 3},
     r"input channels 4 are not a multiple of offset_groups=3"),
    ((T((1, 4, 5, 5)), T((6, 4, 3, 3)), T((1, 16, 3, 3)), T(())), {},
     r"offset must be \(1, 18, 3, 3\), got \(1, 16, 3, 3\)"),
    ((T((1, 4, 5, 5)), T((6, 4, 3, 3)), T((1, 18, 3, 3)), T((1, 9, 2, 3))), {},
     r"mask must be \(1, 9, 3, 3\), got \(1, 9, 2, 3\)"),
    ((T((1, 4, 5, 5)), T((6, 4, 3, 3)), T((1, 18, 3, 3)), T((9,))), {},
     r"mask must be \(N, offset_groups\*kh\*kw, oh, ow\) or a scalar, got \(9\)"),
    ((T((1, 4, 5, 5), "int32"), T((6, 4, 3, 3)), T((1, 18, 3, 3)), T(())), {},
     r"data must have a float dtype"),
    ((T((1, 4, 5, 5)), T((6, 4, 3, 3)), T((1, 18, 3, 3), "float64"), T(())), {},
     r"offset has dtype float64, data float32"),
    ((T((1, 4, 2, 2)), T((6, 4, 3, 3)), T((1, 18, 1, 1)), T(())), {},
     r"the kernel does not fit in the padded input"),
])
def test_deform_type_errors(types, attrs, message):
    with pytest.raises(OpTypeError, match=message):
        infer("nn.deform_conv2d", *types, **attrs)


def _conv2d(x, wt, groups, pad):
    return run("nn.conv2d", x, wt, groups=groups, padding=pad)


@pytest.mark.parametrize("groups,offset_groups", [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_deform_with_zero_and_whole_offsets_is_a_conv(groups, offset_groups):
    x = RNG.standard_normal((2, 4, 6, 7)).astype(np.float32)
    wt = RNG.standard_normal((6, 4 // groups, 3, 2)).astype(np.float32)
    zero = np.zeros((2, offset_groups * 12, 6, 8), np.float32)
    attrs = dict(groups=groups, offset_groups=offset_groups, padding=[1, 1])
    want = _conv2d(x, wt, groups, [1, 1])
    np.testing.assert_allclose(run("nn.deform_conv2d", x, wt, zero, np.float32(1), **attrs),
                               want, rtol=1e-5, atol=1e-5)
    # Every tap one row down and two columns left: without padding, the conv of the image
    # moved up and right (zeros coming in), as every tap then reads inside the moved image.
    shift = np.zeros((2, offset_groups, 6, 2, 4, 6), np.float32)
    shift[:, :, :, 0], shift[:, :, :, 1] = 1, -2
    moved = np.zeros_like(x)
    moved[:, :, :-1, 2:] = x[:, :, 1:, :-2]
    np.testing.assert_allclose(
        run("nn.deform_conv2d", x, wt, shift.reshape(2, -1, 4, 6), np.float32(1),
            groups=groups, offset_groups=offset_groups),
        _conv2d(moved, wt, groups, [0, 0]), rtol=1e-5, atol=1e-5)
    # A mask of 0.5 everywhere halves it; a mask array equals the scalar.
    half = np.full((2, offset_groups * 6, 6, 8), 0.5, np.float32)
    np.testing.assert_allclose(run("nn.deform_conv2d", x, wt, zero, half, **attrs), want / 2,
                               rtol=1e-5, atol=1e-5)


def test_deform_half_pixel_offsets_interpolate():
    x = np.arange(1, 10, dtype=np.float64).reshape(1, 1, 3, 3)
    off = np.zeros((1, 2, 3, 3))
    off[0, 0], off[0, 1] = 0.5, 0.25  # down half a row, right a quarter column
    got = run("nn.deform_conv2d", x, np.ones((1, 1, 1, 1)), off, np.float64(1))[0, 0]
    padded = np.zeros((4, 4))
    padded[:3, :3] = x[0, 0]  # past the last row and column: zeros
    want = np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            want[i, j] = (0.5 * 0.75 * padded[i, j] + 0.5 * 0.25 * padded[i, j + 1]
                          + 0.5 * 0.75 * padded[i + 1, j] + 0.5 * 0.25 * padded[i + 1, j + 1])
    np.testing.assert_allclose(got, want)
    off[0, 0, 1, 1] = np.nan  # a NaN offset samples NaN
    assert np.isnan(run("nn.deform_conv2d", x, np.ones((1, 1, 1, 1)), off,
                        np.float64(1))[0, 0, 1, 1])
