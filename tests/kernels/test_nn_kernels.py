"""C pooling, softmax, layer_norm, batch_norm and dropout against the references."""

import numpy as np
import pytest

POOLS = [
    ((1, 1, 4, 4), {"pool_size": [2, 2], "strides": [2, 2]}),
    ((2, 3, 9, 9), {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1]}),
    ((2, 3, 9, 9), {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1],
                    "ceil_mode": True}),
    ((1, 2, 10, 7), {"pool_size": [3, 2], "strides": [3, 2], "ceil_mode": True}),
    ((1, 2, 11, 11), {"pool_size": [3, 3], "strides": [2, 2], "dilation": [2, 2],
                      "padding": [2, 1, 0, 2], "ceil_mode": True}),
    ((1, 2, 5, 5), {"pool_size": [5, 5], "padding": [2, 2]}),
    ((1, 1, 3, 3), {"pool_size": [2, 2], "strides": [4, 4], "padding": [1, 1],
                    "ceil_mode": True}),
    ((0, 3, 6, 6), {"pool_size": [2, 2]}),
    ((2, 64, 56, 56), {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1]}),
]


@pytest.mark.parametrize("shape,attrs", POOLS, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_max_pool2d(check, rand, shape, attrs, dtype):
    check("nn.max_pool2d", attrs, [rand(shape, dtype)])


@pytest.mark.parametrize("shape,attrs", POOLS, ids=str)
@pytest.mark.parametrize("include_pad", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_avg_pool2d(check, rand, shape, attrs, include_pad, dtype):
    check("nn.avg_pool2d", dict(attrs, count_include_pad=include_pad), [rand(shape, dtype)])


@pytest.mark.parametrize("shape,attrs", POOLS, ids=str)
@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_max_pool2d_with_argmax(check, rand, shape, attrs, order, dtype):
    check("nn.max_pool2d_with_argmax", dict(attrs, storage_order=order), [rand(shape, dtype)])


def test_max_pool2d_with_argmax_ties_and_nan(check):
    """Equal maxima: the first in the window's row-major order; NaN wins as a value."""
    x = np.zeros((2, 1, 4, 4), np.float32)
    x[1, 0, 2:, 2:] = [[1, np.nan], [np.nan, 1]]
    for order in (0, 1):
        got = check("nn.max_pool2d_with_argmax", {"pool_size": [2, 2], "strides": [2, 2],
                                                  "storage_order": order}, [x])
        assert got[1][0, 0].tolist() == [[0, 2], [8, 10]] if order == 0 else \
            [[0, 8], [2, 10]]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int64", "bool", "float16"])
def test_max_unpool(check, rng, dtype):
    """Every itemsize; repeated indices (the last value stays); 1-d to 3-d."""
    for shape, attrs in [((2, 3, 4, 5), {"kernel_shape": [2, 2], "strides": [2, 2]}),
                         ((1, 2, 7), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
                         ((1, 1, 2, 2, 3), {"kernel_shape": [2, 2, 2], "output_size": [5, 4, 7]}),
                         ((2, 2, 3, 3), {"kernel_shape": [2, 2], "strides": [2, 2],
                                         "output_size": [7, 6]}),
                         ((0, 2, 3, 3), {"kernel_shape": [2, 2]})]:
        x = (rng.standard_normal(shape) * 10).astype(dtype)
        total = shape[0] * shape[1] * int(np.prod([
            (d - 1) * attrs.get("strides", [1] * 3)[k] + attrs["kernel_shape"][k]
            - sum(attrs.get("pads", [0] * 6)[k::len(attrs["kernel_shape"])])
            for k, d in enumerate(shape[2:])]))
        index = rng.integers(0, max(total, 1), shape)
        check("nn.max_unpool", attrs, [x, index])


def test_max_unpool_bad_index(c_kernel):
    run = c_kernel("nn.max_unpool", {"kernel_shape": [2]}, ["float32", "int64"], ["float32"])
    x = np.ones((1, 1, 3), np.float32)
    for bad in (-1, 4):
        with pytest.raises(ValueError, match=f"nn.max_unpool: index {bad} is out of range for "
                                             r"an unpooled tensor of 4 elements \(1, 1, 4\)"):
            run(x, np.array([[[0, bad, 1]]]), np.zeros((1, 1, 4), np.float32))


def test_max_pool_propagates_nan(check, rand):
    x = rand((1, 1, 4, 4))
    x[0, 0, 1, 1] = np.nan
    check("nn.max_pool2d", {"pool_size": [2, 2], "strides": [2, 2]}, [x])


@pytest.mark.parametrize("shape", [(2, 3, 7, 7), (1, 1, 1, 1), (0, 3, 4, 4), (2, 3, 0, 4),
                                   (1, 512, 7, 7)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_global_pools(check, rand, shape, dtype):
    x = rand(shape, dtype)
    check("nn.global_avg_pool2d", {}, [x])
    if 0 not in shape[2:]:
        check("nn.global_max_pool2d", {}, [x])


def test_global_max_of_an_empty_image_is_an_error(c_kernel):
    kernel = c_kernel("nn.global_max_pool2d", {}, ["float32"], ["float32"])
    with pytest.raises(ValueError, match="empty image"):
        kernel(np.empty((1, 2, 0, 3), np.float32), np.empty((1, 2, 1, 1), np.float32))


SOFTMAX_CASES = [((7,), -1), ((3, 17), -1), ((3, 17), 0), ((2, 3, 5), 1), ((4, 1031), 1),
                 ((2, 8, 4, 4), 1), ((5, 0), 1), ((0, 5), 1), ((64, 128, 3), 1),
                 # columns in blocks of 256 and a rest (YOLO's 16 bins of 4 x n boxes)
                 ((2, 16, 4, 130), 1), ((1, 5, 300), 1)]


@pytest.mark.parametrize("shape,axis", SOFTMAX_CASES, ids=str)
@pytest.mark.parametrize("op", ["nn.softmax", "nn.log_softmax"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax(check, rand, shape, axis, op, dtype):
    check(op, {"axis": axis}, [rand(shape, dtype, -30, 30)])


@pytest.mark.parametrize("op", ["nn.softmax", "nn.log_softmax"])
def test_softmax_special_rows(check, op):
    x = np.array([[0, 1, 2], [np.nan, 1, 2], [-np.inf, -np.inf, -np.inf], [np.inf, 1, 2],
                  [-np.inf, 0, 1], [1e30, -1e30, 0]], np.float32)
    check(op, {"axis": 1}, [x])
    check(op, {"axis": 0}, [np.ascontiguousarray(x.T)])


@pytest.mark.parametrize("shape,axis", [((7,), 0), ((3, 17), -1), ((3, 17), 0), ((2, 3, 5), 1),
                                        ((16, 768), -1), ((2, 0), 1), ((0, 4), 1)], ids=str)
@pytest.mark.parametrize("scale,center", [(True, True), (False, True), (True, False)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layer_norm(check, rand, shape, axis, scale, center, dtype):
    n = shape[axis]
    check("nn.layer_norm", {"axis": axis, "scale": scale, "center": center, "epsilon": 1e-3},
          [rand(shape, dtype, -5, 10), rand((n,), dtype), rand((n,), dtype)], atol=1e-5)


@pytest.mark.parametrize("shape,axis", [((2, 3, 5, 5), 1), ((4, 6), 1), ((4, 6), 0),
                                        ((2, 5, 3), -1), ((1, 64, 1, 1), 1), ((0, 3), 1)], ids=str)
@pytest.mark.parametrize("scale,center", [(True, True), (False, False)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batch_norm(check, rand, shape, axis, scale, center, dtype):
    n = shape[axis]
    params = [rand((n,), dtype), rand((n,), dtype), rand((n,), dtype), rand((n,), dtype, 0.1, 3)]
    check("nn.batch_norm", {"axis": axis, "scale": scale, "center": center}, [rand(shape, dtype),
                                                                              *params], atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dropout_is_identity_with_a_mask_of_ones(check, rand, dtype):
    check("nn.dropout", {"rate": 0.3}, [rand((3, 5), dtype)])
