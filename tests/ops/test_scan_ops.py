"""cumsum, cumprod, topk, dyn.topk, trilu: type relations over symbolic dims, their errors, and
the references against loops written out element by element (ONNX's definitions)."""

import itertools

import numpy as np
import pytest

from relvm.ir.dims import Sym
from relvm.ops.registry import OpTypeError
from ophelpers import T, infer, run

n, m = Sym("n"), Sym("m")
RNG = np.random.default_rng(11)


def test_types():
    assert infer("cumsum", T((n, 5)), axis=-1) == T((n, 5))
    assert infer("cumprod", T((n, m), "int8"), axis=0, reverse=True) == T((n, m), "int8")
    values, indices = infer("topk", T((n, 7)), k=3).fields
    assert values == T((n, 3)) and indices == T((n, 3), "int64")
    values, indices = infer("topk", T((n, m), "int32"), k=2, axis=0).fields
    assert values == T((2, m), "int32") and indices == T((2, m), "int64")
    values, _ = infer("dyn.topk", T((n, 7)), T((), "int64"), axis=1).fields
    assert values.shape[0] == n and not isinstance(values.shape[1], int)  # a run-time dim
    assert infer("trilu", T((n, m, 4)), T((), "int64"), upper=False) == T((n, m, 4))


@pytest.mark.parametrize("op, types, attrs, message", [
    ("cumsum", (T(()),), {}, r"rank 1 or more"),
    ("cumsum", (T((3,), "bool"),), {}, r"numeric dtype"),
    ("cumsum", (T((3, 4)),), dict(axis=2), r"axis 2 is out of range"),
    ("topk", (T((n, 5)),), dict(k=6), r"k 6 must be in \[0, 5\]"),
    ("topk", (T((n, 5)),), dict(k=-1), r"k -1 must be in"),
    ("topk", (T(()),), dict(k=1), r"rank 1 or more"),
    ("dyn.topk", (T((5,)), T((1,), "int64")), {}, r"k must have rank 0"),
    ("dyn.topk", (T((5,)), T((), "float32")), {}, r"k must have dtype int32 or int64"),
    ("trilu", (T((5,)), T((), "int64")), {}, r"rank 2 or more"),
    ("trilu", (T((5, 5)), T((), "int32")), {}, r"k must have dtype int64"),
])
def test_type_errors(op, types, attrs, message):
    with pytest.raises(OpTypeError, match=message):
        infer(op, *types, **attrs)


def _loop_cumulative(x, axis, exclusive, reverse, op):
    out = np.empty_like(x)
    moved, res = np.moveaxis(x, axis, -1), np.moveaxis(out, axis, -1)
    for idx in itertools.product(*[range(d) for d in moved.shape[:-1]]):
        line, acc = moved[idx], x.dtype.type(1 if op == "cumprod" else 0)
        order = range(line.size - 1, -1, -1) if reverse else range(line.size)
        for i in order:
            if not exclusive:
                acc = acc * line[i] if op == "cumprod" else acc + line[i]
            res[idx + (i,)] = acc
            if exclusive:
                acc = acc * line[i] if op == "cumprod" else acc + line[i]
    return out


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("exclusive, reverse", list(itertools.product([False, True], repeat=2)))
def test_cumulative_reference(op, exclusive, reverse):
    x = RNG.integers(-3, 4, (3, 4, 5)).astype(np.int64)
    for axis in (0, 1, 2, -1):
        got = run(op, x, axis=axis, exclusive=exclusive, reverse=reverse)
        np.testing.assert_array_equal(got, _loop_cumulative(x, axis, exclusive, reverse, op))


def test_topk_reference_orders_ties_by_index_and_nan_as_largest():
    x = np.array([2.0, np.nan, 5.0, 2.0, 5.0, -1.0], np.float32)
    values, indices = run("topk", x, k=4)
    np.testing.assert_array_equal(indices, [1, 2, 4, 0])
    np.testing.assert_array_equal(values, [np.nan, 5, 5, 2])
    values, indices = run("topk", x, k=4, largest=False)
    np.testing.assert_array_equal(indices, [5, 0, 3, 2])
    _, indices = run("dyn.topk", x, np.array(6), largest=False)
    assert indices[-1] == 1  # NaN last when the smallest come first
    with pytest.raises(ValueError, match="k 7 must be in"):
        run("dyn.topk", x, np.array(7))


def test_trilu_reference_against_numpy():
    x = RNG.standard_normal((2, 4, 6)).astype(np.float32)
    for k in range(-5, 8):
        np.testing.assert_array_equal(run("trilu", x, np.array(k), upper=True), np.triu(x, k))
        np.testing.assert_array_equal(run("trilu", x, np.array(k), upper=False), np.tril(x, k))
