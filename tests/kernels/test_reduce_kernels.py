"""C reductions over any axes against the references."""

import numpy as np
import pytest

from relvm.backends.ckernels.reduce import REDUCE

INTS = ["int64", "int32", "int8", "uint8", "int16", "uint16", "uint32", "uint64"]
DTYPES = ["float32", "float64"] + INTS
AXES = [None, [], [0], [-1], [1], [0, 2], [1, 2], [0, 1, 2]]
SHAPES = [(2, 3, 4), (5, 1, 7), (1, 9, 1), (3, 300, 5), (7, 3, 1031)]


def _data(rand, shape, dtype, op):
    if op == "prod":
        return rand(shape, dtype, -2, 2) if dtype.startswith("float") else rand(shape, dtype, -3, 3)
    return rand(shape, dtype, -100, 100)


@pytest.mark.parametrize("op", sorted(REDUCE))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduce_float32(check, rand, op, shape, axis, keepdims):
    check(op, {"axis": axis, "keepdims": keepdims}, [_data(rand, shape, "float32", op)],
          rtol=1e-4, atol=1e-5, scaled=True)


@pytest.mark.parametrize("op", sorted(REDUCE))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis,exclude", [([1], False), ([1], True), ([0, 2], False),
                                          (None, False), ([-1], True)], ids=str)
def test_reduce_dtypes(check, rand, op, dtype, axis, exclude):
    check(op, {"axis": axis, "exclude": exclude}, [_data(rand, (4, 5, 6), dtype, op)],
          rtol=1e-4, atol=1e-5, scaled=True)


@pytest.mark.parametrize("op", ["mean", "sum", "max"])
@pytest.mark.parametrize("shape", [(1, 112, 112, 32), (2, 7, 7, 1280), (3, 5, 6, 7)], ids=str)
def test_channels_last_global_pool(check, rand, op, shape):
    """Over H and W of NHWC data (the channels-last pass's global average pool): the kept
    channels contiguous, the reduced positions stepped through two dims."""
    check(op, {"axis": [1, 2], "keepdims": True}, [rand(shape)], rtol=1e-5, atol=1e-5,
          scaled=True)


@pytest.mark.parametrize("op", ["sum", "prod"])
@pytest.mark.parametrize("dtype", INTS)
def test_integer_sums_wrap(check, rand, op, dtype):
    x = rand((3, 200), dtype, -128, 255)
    x[:, :2] = np.iinfo(dtype).max  # past the range at once, whatever the width
    check(op, {"axis": [1]}, [x])
    check(op, {"axis": [0]}, [x])  # the column walk


@pytest.mark.parametrize("dtype", [d for d in INTS if d.startswith("int")])
def test_integer_mean_truncates_toward_zero(check, dtype):
    x = np.array([[-3, -4], [3, 4], [-1, 0], [-7, 2]], dtype)
    check("mean", {"axis": [1]}, [x])


@pytest.mark.parametrize("dtype", [d for d in INTS if d.startswith("uint")])
@pytest.mark.parametrize("op", sorted(REDUCE))
def test_unsigned_reductions_of_large_values(check, dtype, op):
    """Values in the top half of the range (uint64's read as int64 would be negative): the
    maximum, the order and the mean are unsigned."""
    top = np.iinfo(dtype).max
    x = np.array([[top // 2 + 4, 2, 0], [1, top, top - 1], [5, top // 2 + 1, 3]], dtype)
    for axis in ([1], [0]):  # the row walk, then the column walk
        check(op, {"axis": axis}, [x])


@pytest.mark.parametrize("op", ["sum", "prod", "mean"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_empty_axis_folds(check, op, dtype):
    check(op, {"axis": [1]}, [np.empty((3, 0, 2), dtype)])
    check(op, {"axis": [0]}, [np.empty((0, 4), dtype)])


@pytest.mark.parametrize("op", ["max", "min", "argmax", "argmin"])
def test_empty_axis_picks(check, c_kernel, op):
    check(op, {"axis": [1]}, [np.empty((0, 0, 2), np.float32)])  # empty result: fine
    out = "int32" if op.startswith("arg") else "float32"
    kernel = c_kernel(op, {"axis": [1]}, ["float32"], [out])
    with pytest.raises(ValueError, match="empty axis"):
        kernel(np.empty((3, 0), np.float32), np.empty((3,), out))


@pytest.mark.parametrize("op", ["max", "min", "argmax", "argmin"])
@pytest.mark.parametrize("last", [False, True])
def test_nan_and_ties(check, op, last):
    x = np.array([[1, np.nan, 3, np.nan], [2, 2, 1, 1], [5, 5, 5, 5], [-np.inf, -np.inf, 0, 0]],
                 np.float32)
    attrs = {"axis": [1]}
    if op.startswith("arg"):
        attrs["select_last_index"] = last
    check(op, attrs, [x])
    check(op, dict(attrs, axis=[0]), [np.ascontiguousarray(x.T)])


def test_argmax_over_several_axes_counts_row_major(check, rand):
    x = rand((3, 4, 5, 6), "float32")
    for axis in ([1, 3], [0, 2], [0, 1, 3]):
        check("argmax", {"axis": axis, "keepdims": True}, [x])
        check("argmin", {"axis": axis, "select_last_index": True}, [x])


def test_wide_column_reduction_uses_lane_tiles(check, rand):
    """A kept contiguous dim longer than the C lane tile (256) and not a multiple of it."""
    x = rand((2, 37, 1000), "float32")
    for op in sorted(REDUCE):
        check(op, {"axis": [1]}, [x], rtol=1e-4, atol=1e-5, scaled=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_negative_nan_and_signed_zeros_in_vector_extremes(check, dtype):
    """The vectorized max/min compare integer keys of the floats: every NaN must still win,
    whatever its sign bit (x86 makes -NaN by default), over runs long enough to vectorize."""
    x = np.linspace(-5, 5, 4 * 67).reshape(4, 67).astype(dtype)
    x[1, 40] = -np.nan
    x[2, 3] = np.nan
    x[3, :] = -0.0
    x[3, 10] = 0.0
    for op in ("max", "min"):
        check(op, {"axis": [1]}, [x])
    check("nn.softmax", {"axis": 1}, [x])
    check("nn.global_max_pool2d", {}, [x.reshape(1, 4, 1, 67)])


# --- logsumexp ---------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_logsumexp(check, rand, shape, axis, keepdims):
    # Values up to 500: exp alone would overflow float32 (and float64 past 710).
    check("logsumexp", {"axis": axis, "keepdims": keepdims}, [rand(shape, "float32", -500, 500)],
          rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("axis,exclude", [([1], False), ([1], True), ([0, 2], False),
                                          (None, False), ([], False)], ids=str)
def test_logsumexp_dtypes(check, rand, dtype, axis, exclude):
    check("logsumexp", {"axis": axis, "exclude": exclude}, [rand((4, 5, 6), dtype, -800, 800)],
          rtol=1e-6 if dtype != "float16" else 1e-3, atol=0)


def test_logsumexp_special_values(check):
    inf, nan = np.inf, np.nan
    rows = np.array([[1, 2, 3], [-inf, -inf, -inf], [inf, 1, -inf], [nan, 1, inf],
                     [-inf, 0, -inf], [1e30, 1e30, -1e30]], np.float32)
    want = check("logsumexp", {"axis": [1]}, [rows])[0]
    assert np.isneginf(want[1]) and np.isposinf(want[2]) and np.isnan(want[3]) and want[4] == 0
    check("logsumexp", {"axis": [0]}, [np.ascontiguousarray(rows.T)])  # the column walk
    empty = check("logsumexp", {"axis": [1]}, [np.empty((3, 0), np.float64)])[0]
    assert np.isneginf(empty).all()
    check("logsumexp", {"axis": [0]}, [np.empty((0, 3), np.float32)])
