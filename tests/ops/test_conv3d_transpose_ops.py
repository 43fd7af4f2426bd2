"""nn.conv3d_transpose: its type relation over symbolic dims, its errors, and the reference
against nn.conv2d_transpose (a depth of one) and a one-tap kernel spreading planes apart."""

import numpy as np
import pytest

from relvm.ir.dims import Sym
from relvm.ops.registry import OpTypeError
from ophelpers import T, infer, run

n, h, w, d = Sym("n"), Sym("h"), Sym("w"), Sym("d")
RNG = np.random.default_rng(7)

# --- nn.conv3d_transpose -------------------------------------------------------------------------

def test_conv3d_transpose_types():
    got = infer("nn.conv3d_transpose", T((n, 4, d, h, w)), T((4, 3, 3, 3, 3)),
                strides=[2, 2, 1], padding=[1, 1, 1, 1, 1, 0], output_padding=[1, 0, 0])
    assert got == T((n, 3, (d - 1) * 2 + 2, (h - 1) * 2 + 1, w + 1))
    assert infer("nn.conv3d_transpose", T((n, 4, 3, 4, 5), "float64"),
                 T((4, 1, 3, 3, 3), "float64"),
                 groups=2) == T((n, 2, 5, 6, 7), "float64")


@pytest.mark.parametrize("types, attrs, message", [
    ((T((1, 4, 3, 3, 3)), T((3, 2, 3, 3, 3))), {}, r"input channels differ"),
    ((T((1, 4, 3, 3, 3)), T((4, 2, 3, 3, 3))), {"groups": 3}, r"not a multiple of groups=3"),
    ((T((1, 4, 3, 3)), T((4, 2, 3, 3))), {}, r"data must have rank 5"),
    ((T((1, 4, 3, 3, 3)), T((4, 2, 3, 3, 3))), {"padding": [1, 1]},
     r"padding must be 1, 3 or 6 ints >= 0, got \(1, 1\)"),
    ((T((1, 4, 3, 3, 3)), T((4, 2, 3, 3, 3))), {"strides": [1, 0, 1]},
     r"strides must be 1 or 3 ints >= 1"),
    ((T((1, 4, 1, 1, 1)), T((4, 2, 1, 1, 1))), {"padding": 1}, r"crops more than the output"),
])
def test_conv3d_transpose_errors(types, attrs, message):
    with pytest.raises(OpTypeError, match=message):
        infer("nn.conv3d_transpose", *types, **attrs)


def test_conv3d_transpose_of_depth_one_is_2d():
    x = RNG.standard_normal((2, 4, 1, 5, 6))
    wt = RNG.standard_normal((4, 3, 1, 3, 2))
    attrs2 = dict(strides=[2, 3], padding=[1, 0, 0, 1], dilation=[1, 2], output_padding=[1, 2],
                  groups=2)
    want = run("nn.conv2d_transpose", x[:, :, 0], wt[:, :, 0], **attrs2)
    got = run("nn.conv3d_transpose", x, wt, strides=[1, 2, 3], padding=[0, 1, 0, 0, 0, 1],
              dilation=[1, 1, 2], output_padding=[0, 1, 2], groups=2)
    np.testing.assert_allclose(got[:, :, 0], want, rtol=1e-12)
    # Along depth, a kernel of one tap at stride 2 spreads the planes apart, zeros between.
    x3 = RNG.standard_normal((1, 2, 3, 2, 2))
    w3 = RNG.standard_normal((2, 2, 1, 1, 1))
    y = run("nn.conv3d_transpose", x3, w3, strides=[2, 1, 1])
    assert y.shape == (1, 2, 5, 2, 2)
    np.testing.assert_allclose(y[:, :, 1::2], 0)
    np.testing.assert_allclose(y[:, :, ::2], np.einsum("ncdhw,co->nodhw", x3, w3[..., 0, 0, 0]))
