"""C kernels of cumsum, cumprod, topk, dyn.topk and trilu against their references: every dtype
each declares, every axis, exclusive and reverse, ties and NaN, k = 0 and k = n, both topk
paths (the insertion of a small k, the merge sort of a large one), empty tensors, and bad k as
an error."""

import numpy as np
import pytest

from relvm.backends.ckernels.common import ALL, NUMBERS

SHAPES = [((7,), 0), ((4, 5), 0), ((4, 5), 1), ((3, 4, 5), 1), ((3, 4, 5), -1), ((0, 3), 1),
          ((3, 0), 1), ((2, 1000), 1), ((1000, 3), 0)]


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("shape,axis", SHAPES, ids=str)
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumulative(check, rand, op, shape, axis, exclusive, reverse):
    for dtype in NUMBERS:
        low, high = (-2, 2) if op == "cumprod" else (-100, 100)
        check(op, {"axis": axis, "exclusive": exclusive, "reverse": reverse},
              [rand(shape, dtype, low, high)], rtol=1e-6 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("dtype", [d for d in NUMBERS if d[0] in "iu"])
def test_cumulative_integers_wrap(check, dtype):
    info = np.iinfo(dtype)
    x = np.array([info.max, info.max, 3, info.min, -1 if info.min else 7, 5], dtype)
    for op in ("cumsum", "cumprod"):
        check(op, {}, [x])


def _ties_and_nans(rng, shape, dtype):
    """Few distinct values (many ties), and NaN in float data."""
    x = rng.integers(-3, 4, shape).astype(dtype) if np.dtype(dtype).kind != "u" else \
        rng.integers(0, 5, shape).astype(dtype)
    if np.dtype(dtype).kind == "f" and x.size:
        x.flat[rng.integers(0, x.size, max(1, x.size // 10))] = np.nan
    return x


TOPK_SHAPES = [((9,), -1), ((4, 6), 1), ((4, 6), 0), ((3, 5, 7), 1), ((2, 100), 1),
               ((70, 3), 0)]


@pytest.mark.parametrize("shape,axis", TOPK_SHAPES, ids=str)
@pytest.mark.parametrize("largest", [True, False])
def test_topk(check, rng, shape, axis, largest):
    n = shape[axis]
    for dtype in NUMBERS:
        x = _ties_and_nans(rng, shape, dtype)
        for k in sorted({0, 1, 3 % (n + 1), n // 2, n - 1, n}):  # > 32: the merge sort
            check("topk", {"k": k, "axis": axis, "largest": largest}, [x])
            check("dyn.topk", {"axis": axis, "largest": largest}, [x, np.array(k, np.int64)])


def test_topk_distinct_values_against_a_plain_sort(c_kernel, rng):
    """Not only the reference: distinct values sorted by NumPy, both paths of the kernel."""
    x = rng.permutation(5000).astype(np.float32).reshape(50, 100)
    for k in (5, 60):
        kernel = c_kernel("topk", {"k": k, "axis": 1}, ["float32"], ["float32", "int64"])
        values, indices = np.empty((50, k), np.float32), np.empty((50, k), np.int64)
        kernel(x, values, indices)
        want = -np.sort(-x, axis=1)[:, :k]
        np.testing.assert_array_equal(values, want)
        np.testing.assert_array_equal(np.take_along_axis(x, indices, 1), want)


@pytest.mark.parametrize("k", [-1, 6])
def test_dyn_topk_refuses_k_outside_the_axis(c_kernel, k):
    kernel = c_kernel("dyn.topk", {"axis": 0}, ["float32", "int64"], ["float32", "int64"])
    x = np.arange(5, dtype=np.float32)
    with pytest.raises(ValueError, match=f"k {k} must be in \\[0, 5\\]"):
        kernel(x, np.array(k), np.empty(max(k, 0), np.float32), np.empty(max(k, 0), np.int64))


DTYPES = list(ALL)


@pytest.mark.parametrize("shape", [(4, 5), (5, 4), (2, 3, 4, 4), (1, 1), (0, 3), (3, 0)], ids=str)
@pytest.mark.parametrize("upper", [True, False])
def test_trilu(check, rand, shape, upper):
    for dtype in DTYPES:
        x = rand(shape, dtype, -50, 50)
        for k in (-(2**62), -6, -1, 0, 1, 2, 5, 2**62):
            check("trilu", {"upper": upper}, [x, np.array(k, np.int64)])


UNIQUE_CASES = [((12,), None), ((3, 4), None), ((6, 3), 0), ((3, 6), 1), ((2, 5, 3), 1),
                ((0, 3), 0), ((0,), None), ((300,), None), ((40, 2), 0)]


@pytest.mark.parametrize("shape,axis", UNIQUE_CASES, ids=str)
@pytest.mark.parametrize("sorted_", [True, False])
def test_unique(check, rng, shape, axis, sorted_):
    for dtype in NUMBERS + ("bool",):
        x = _ties_and_nans(rng, shape, dtype) if dtype != "bool" else rng.random(shape) < 0.5
        check("unique", {"axis": axis, "sorted": sorted_}, [x])


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_topk_and_unique_order_unsigned_values(check, dtype):
    """The top half of the range sorts above the bottom (uint64's read as int64 would not)."""
    top = np.iinfo(dtype).max
    x = np.array([3, top, 0, top // 2 + 1, top // 2, 3, top - 1, 1], dtype)
    for largest in (True, False):
        check("topk", {"k": 3, "largest": largest}, [x])
    check("unique", {}, [x])
    check("unique", {"sorted": False}, [x])


def test_unique_zeros_and_nans_are_one_entry_each(check):
    x = np.array([0.0, np.nan, -0.0, 1.0, np.nan, 0.0], np.float32)
    values, first, _, counts = check("unique", {}, [x])
    assert values.size == 3 and list(first) == [0, 3, 1] and list(counts) == [3, 1, 2]


def test_unique_refuses_outputs_sized_for_another_count(c_kernel):
    kernel = c_kernel("unique", {}, ["int64"], ["int64"] * 4)
    x = np.array([1, 2, 2, 3], np.int64)
    with pytest.raises(ValueError, match="does not hold 2 distinct entries"):
        kernel(x, *(np.empty(2, np.int64) for _ in range(2)), np.empty(4, np.int64),
               np.empty(2, np.int64))


def test_unique_of_empty_slices_is_one_slice():
    """Three slices of no entries are equal: one unique (the VM's count agrees)."""
    from relvm.runtime.bytecode.dimprog import unique_count
    from relvm.ops import OPS

    x = np.zeros((3, 0), np.float32)
    op = OPS["unique"]
    values, first, inverse, counts = op.reference(op.make_attrs({"axis": 0}), x)
    assert values.shape == (1, 0) and list(first) == [0] and list(inverse) == [0, 0, 0]
    assert list(counts) == [3] and unique_count(x, 0) == 1 and unique_count(x, -1) == 0
