"""image.col2im: its type relation over symbolic dims, its errors, and the reference against a
block-by-block loop written from ONNX's definition."""

import itertools

import numpy as np
import pytest

from relvm.ir.dims import Sym
from relvm.ops.registry import OpTypeError
from ophelpers import T, infer, run

n, c = Sym("n"), Sym("c")
RNG = np.random.default_rng(19)


def test_types_over_symbolic_dims():
    assert infer("image.col2im", T((n, 5, 5)), image_shape=[5, 5], block_shape=[1, 5]) == \
        T((n, 1, 5, 5))
    assert infer("image.col2im", T((n, c * 9, 4), "float64"), image_shape=[5, 5],
                 block_shape=[3, 3], strides=[2, 2]) == T((n, c, 5, 5), "float64")
    assert infer("image.col2im", T((1, 10, 12)), image_shape=[3, 4, 5],
                 block_shape=[1, 1, 5]) == T((1, 2, 3, 4, 5))


@pytest.mark.parametrize("shape, attrs, message", [
    ((1, 5, 24), {"image_shape": [5, 5], "block_shape": [1, 5]},
     r"data's last dim 24 must be the number of blocks, 5 \(5 x 1\)"),
    ((1, 6, 5), {"image_shape": [5, 5], "block_shape": [1, 5]}, r"6 is not a multiple of 5"),
    ((1, 5, 5), {"image_shape": [5, 5], "block_shape": [5]}, r"must give 2 spatial axes"),
    ((1, 5, 25), {"image_shape": [3, 3], "block_shape": [1, 5]}, r"does not fit"),
    ((5, 25), {"image_shape": [5, 5], "block_shape": [1, 5]}, r"data must be \(N, C \*"),
])
def test_type_errors(shape, attrs, message):
    with pytest.raises(OpTypeError, match=message):
        infer("image.col2im", T(shape), **attrs)


def _loop(x, image, block, dil, pads, strides):
    k = len(image)
    blocks = [(image[i] + pads[i] + pads[i + k] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
              for i in range(k)]
    n, ck, _ = x.shape
    cc = ck // int(np.prod(block))
    out = np.zeros((n, cc) + tuple(image))
    for b, ch in itertools.product(range(n), range(cc)):
        for oi, o in enumerate(itertools.product(*map(range, block))):
            for li, blk in enumerate(itertools.product(*map(range, blocks))):
                p = [blk[i] * strides[i] - pads[i] + o[i] * dil[i] for i in range(k)]
                if all(0 <= p[i] < image[i] for i in range(k)):
                    out[(b, ch) + tuple(p)] += x[b, ch * int(np.prod(block)) + oi, li]
    return out


@pytest.mark.parametrize("image, block, dil, pads, strides", [
    ([5, 5], [1, 5], [1, 1], [0, 0, 0, 0], [1, 1]),
    ([5, 5], [2, 2], [1, 1], [0, 0, 0, 0], [2, 2]),
    ([5, 5], [1, 5], [1, 1], [0, 1, 0, 1], [1, 1]),
    ([6, 6], [2, 2], [1, 5], [0, 0, 0, 0], [1, 1]),
    ([7, 6], [3, 2], [2, 1], [1, 2, 0, 1], [2, 3]),
    ([3, 4, 5], [1, 2, 2], [1, 1, 2], [0, 1, 0, 1, 0, 1], [1, 2, 1]),
    ([9], [3], [2], [1, 1], [2]),
])
def test_reference_against_a_loop(image, block, dil, pads, strides):
    k = len(image)
    blocks = [(image[i] + pads[i] + pads[i + k] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
              for i in range(k)]
    x = RNG.standard_normal((2, 3 * int(np.prod(block)), int(np.prod(blocks))))
    got = run("image.col2im", x, image_shape=image, block_shape=block, dilations=dil, pads=pads,
              strides=strides)
    np.testing.assert_allclose(got, _loop(x, image, block, dil, pads, strides), rtol=1e-12)
