"""C kernel of nn.deform_conv2d against its reference: groups, offset groups, strides,
dilations, padding, offsets far outside the image, NaN offsets, masks."""

import numpy as np
import pytest

# --- nn.deform_conv2d ----------------------------------------------------------------------------

DEFORM = [
    # (data, weight, attrs)
    ((1, 1, 3, 3), (1, 1, 2, 2), {}),
    ((2, 4, 7, 6), (6, 2, 3, 3), {"groups": 2, "offset_groups": 2, "padding": [1, 1]}),
    ((1, 6, 9, 8), (4, 6, 3, 2), {"offset_groups": 3, "strides": [2, 1],
                                  "dilation": [1, 2], "padding": [2, 0, 1, 3]}),
    ((3, 2, 5, 5), (2, 1, 1, 1), {"groups": 2}),
    ((1, 3, 1, 9), (5, 3, 1, 3), {"strides": [1, 3]}),
    ((1, 2, 4, 4), (3, 2, 2, 2), {"padding": [3, 3], "strides": [3, 3]}),
]


@pytest.mark.parametrize("data,weight,attrs", DEFORM, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("masked", [False, True])
def test_deform_conv2d(check, rand, rng, data, weight, attrs, dtype, masked):
    from relvm.ops.window import pad_pairs, pair, window_len

    og = attrs.get("offset_groups", 1)
    kh, kw = weight[2:]
    oh, ow = (window_len(size, k, s, dl, p) for size, k, s, dl, p in zip(
        data[2:], (kh, kw), pair(attrs.get("strides", 1), "", 1),
        pair(attrs.get("dilation", 1), "", 1), pad_pairs(attrs.get("padding", 0))))
    offset = rand((data[0], og * kh * kw * 2, oh, ow), dtype, -4, 4)
    mask = rand((data[0], og * kh * kw, oh, ow), dtype, 0, 1) if masked else \
        np.asarray(1.5, dtype)
    check("nn.deform_conv2d", attrs, [rand(data, dtype), rand(weight, dtype), offset, mask],
          rtol=1e-5, atol=1e-5, scaled=True)


def test_deform_conv2d_far_and_nan_offsets(check, rand):
    x, w = rand((1, 2, 5, 5)), rand((3, 2, 3, 3))
    offset = rand((1, 18, 3, 3), "float32", -2, 2)
    offset[0, 0, 0, 0] = 1e30       # far outside: zeros
    offset[0, 1, 0, 1] = -1e30
    offset[0, 2, 1, 1] = np.inf
    offset[0, 3, 2, 2] = np.nan     # samples NaN
    offset[0, 4, 2, 0] = -0.999999  # just inside the image's edge
    check("nn.deform_conv2d", {}, [x, w, offset, np.float32(1)], rtol=1e-5, atol=1e-5)


def test_deform_conv2d_shape_errors(c_kernel):
    kernel = c_kernel("nn.deform_conv2d", {}, ["float32"] * 4, ["float32"])
    x, w = np.zeros((1, 2, 5, 5), np.float32), np.zeros((3, 2, 3, 3), np.float32)
    with pytest.raises(ValueError, match="does not fit the kernel"):
        kernel(x, w, np.zeros((1, 16, 3, 3), np.float32), np.float32(1),
               np.zeros((1, 3, 3, 3), np.float32))
    with pytest.raises(ValueError, match="channels do not agree"):
        kernel(np.zeros((1, 3, 5, 5), np.float32), w, np.zeros((1, 18, 3, 3), np.float32),
               np.float32(1), np.zeros((1, 3, 3, 3), np.float32))
