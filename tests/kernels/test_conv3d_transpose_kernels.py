"""C kernel of nn.conv3d_transpose against its reference: strides, dilations, padding,
output_padding, groups, empty dims."""

import numpy as np
import pytest

# --- nn.conv3d_transpose -------------------------------------------------------------------------

TRANSPOSED_3D = [
    ((1, 1, 3, 4, 5), (1, 2, 3, 3, 3), {}),
    ((2, 4, 2, 3, 3), (4, 3, 2, 3, 2), {"strides": [2, 1, 3], "groups": 2}),
    ((1, 3, 3, 3, 2), (3, 2, 3, 2, 2), {"dilation": [2, 1, 3], "padding": [1, 0, 2, 0, 1, 1],
                                        "output_padding": [1, 0, 2], "strides": [2, 1, 3]}),
    ((1, 2, 1, 1, 1), (2, 5, 1, 1, 1), {"strides": 4, "output_padding": [3, 0, 1]}),
    ((1, 2, 0, 3, 3), (2, 2, 2, 2, 2), {}),
    ((0, 2, 2, 3, 3), (2, 2, 2, 2, 2), {}),
]


@pytest.mark.parametrize("data,weight,attrs", TRANSPOSED_3D, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv3d_transpose(check, rand, data, weight, attrs, dtype):
    check("nn.conv3d_transpose", attrs, [rand(data, dtype), rand(weight, dtype)], rtol=1e-5,
          atol=1e-5, scaled=True)


def test_conv3d_transpose_refuses_wide_kernels(c_kernel):
    kernel = c_kernel("nn.conv3d_transpose", {}, ["float32"] * 2, ["float32"])
    x, w = np.zeros((1, 1, 1, 1, 1), np.float32), np.zeros((1, 1, 1, 1, 65), np.float32)
    with pytest.raises(ValueError, match="at most 64 taps per axis"):
        kernel(x, w, np.zeros((1, 1, 1, 1, 65), np.float32))
    with pytest.raises(ValueError, match="wrong output shape"):
        kernel(x, x, np.zeros((1, 1, 1, 1, 2), np.float32))
