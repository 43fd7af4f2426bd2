"""Reductions: type relations over symbolic dims, references against hand-written loops."""

import itertools
import math

import numpy as np
import pytest

from relvm.ir.dims import Sym
from relvm.ir.types import TensorType
from relvm.ops import OPS
from relvm.ops.registry import OpTypeError

n, m = Sym("n"), Sym("m")
RNG = np.random.default_rng(1)
VALUE_OPS = ("sum", "mean", "max", "min", "prod")
INDEX_OPS = ("argmax", "argmin")


def T(shape, dtype="float32"):
    return TensorType(tuple(shape), dtype)


def infer(name, t, **attrs):
    op = OPS[name]
    return op.infer(op.make_attrs(attrs), t)


def run(name, x, **attrs):
    op = OPS[name]
    return op.reference(op.make_attrs(attrs), x)


def checked(name, x, **attrs):
    """The reference's result, after asserting it has exactly the inferred dtype and shape."""
    out = run(name, x, **attrs)
    t = infer(name, T(x.shape, x.dtype.name), **attrs)
    assert isinstance(out, np.ndarray)
    assert out.dtype.name == t.dtype and out.shape == t.shape
    return out


# --- types ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", VALUE_OPS + INDEX_OPS)
def test_reduce_types(name):
    dtype = "int32" if name in INDEX_OPS else "float32"
    x = T((n, 3, m))
    assert infer(name, x) == T((), dtype)
    assert infer(name, x, axis=1) == T((n, m), dtype)
    assert infer(name, x, axis=[0, -1]) == T((3,), dtype)
    assert infer(name, x, axis=[1], keepdims=True) == T((n, 1, m), dtype)
    assert infer(name, x, axis=[1], exclude=True) == T((3,), dtype)
    assert infer(name, x, axis=[0, 2], exclude=True, keepdims=True) == T((n, 1, m), dtype)
    assert infer(name, x, axis=[]) == T((n, 3, m), dtype)
    assert infer(name, x, axis=None, exclude=True) == T((), dtype)  # Relay ignores exclude
    assert infer(name, T(())) == T((), dtype)


def test_mean_keeps_the_integer_dtype():
    assert infer("mean", T((n, 4), "int32"), axis=1) == T((n,), "int32")
    assert infer("sum", T((n, 4), "uint8")) == T((), "uint8")


@pytest.mark.parametrize("name", VALUE_OPS + INDEX_OPS)
def test_reduce_type_errors(name):
    with pytest.raises(OpTypeError, match="axis 3 is out of range for rank 3"):
        infer(name, T((n, 3, m)), axis=3)
    with pytest.raises(OpTypeError, match=r"axis \[1, -2\] repeats an axis"):
        infer(name, T((n, 3, m)), axis=[1, -2])
    with pytest.raises(OpTypeError, match="numeric dtype"):
        infer(name, T((n,), "bool"))


def test_reduce_patterns():
    for name in VALUE_OPS + INDEX_OPS:
        assert OPS[name].pattern == "reduce"


# --- values -------------------------------------------------------------------------------------

def loop_reduce(x, axes, keepdims, combine, init):
    """Fold each group of elements that share their kept coordinates, one by one."""
    kept = [a for a in range(x.ndim) if a not in axes]
    out = {}
    for idx in np.ndindex(*x.shape):
        key = tuple(idx[a] for a in kept)
        out[key] = combine(out.get(key, init), x[idx].item())
    shape = [x.shape[a] for a in kept]
    res = np.array([out.get(k, init) for k in np.ndindex(*shape)], dtype=object).reshape(shape)
    if keepdims:
        res = res.reshape([1 if a in axes else x.shape[a] for a in range(x.ndim)])
    return res


AXES_CASES = [((5,), None), ((1,), 0), ((3, 7), 1), ((3, 7), 0), ((2, 3, 5), [0, 2]),
              ((2, 3, 5), [1]), ((2, 1, 4), []), ((), None)]


@pytest.mark.parametrize("shape,axis", AXES_CASES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_sum_prod_max_min(shape, axis, keepdims):
    x = RNG.uniform(0.5, 1.5, shape).astype("float32")
    axes = tuple(range(len(shape))) if axis is None else (
        (axis,) if isinstance(axis, int) else tuple(axis))
    for name, combine, init in [("sum", lambda a, b: a + b, 0.0), ("prod", lambda a, b: a * b, 1.0),
                                ("max", max, -math.inf), ("min", min, math.inf)]:
        out = checked(name, x, axis=axis, keepdims=keepdims)
        expect = loop_reduce(x, axes, keepdims, combine, init).astype(np.float64)
        np.testing.assert_allclose(out, expect, rtol=1e-6, err_msg=name)


def test_exclude_reduces_the_other_axes():
    x = RNG.standard_normal((2, 3, 4)).astype("float32")
    np.testing.assert_allclose(checked("sum", x, axis=[1], exclude=True), x.sum(axis=(0, 2)),
                               rtol=1e-5)
    np.testing.assert_allclose(checked("max", x, axis=[0, 2], exclude=True, keepdims=True),
                               x.max(axis=1, keepdims=True))


def test_integer_sum_and_prod_wrap_in_the_dtype():
    x = np.array([100, 100, 100], "int8")
    assert checked("sum", x).item() == np.int8(300 - 256)
    assert checked("prod", np.array([16, 16], "uint8")).item() == 0  # 256 wraps to 0
    big = np.full(4, 2**30, "int32")
    assert checked("sum", big).item() == 0  # 2**32 wraps to 0 in int32


def test_mean():
    x = RNG.standard_normal((3, 5)).astype("float64")
    np.testing.assert_allclose(checked("mean", x, axis=1),
                               [sum(r) / 5 for r in x.tolist()], rtol=1e-12)
    assert checked("mean", x.astype("float16"), axis=0).dtype == np.float16
    # Integer mean: exact sum, truncated toward zero, never wrapping.
    xi = np.array([[7, 8], [-7, -8], [127, 127]], "int8")
    np.testing.assert_array_equal(checked("mean", xi, axis=1), [7, -7, 127])
    assert checked("mean", np.array([-3, 0], "int32")).item() == -1


def test_empty_reductions():
    empty = np.zeros((2, 0), "float32")
    np.testing.assert_array_equal(checked("sum", empty, axis=1), [0, 0])
    np.testing.assert_array_equal(checked("prod", empty, axis=1), [1, 1])
    assert np.isnan(checked("mean", empty, axis=1)).all()
    np.testing.assert_array_equal(checked("mean", empty.astype("int32"), axis=1), [0, 0])
    for name in ("max", "min", "argmax", "argmin"):
        with pytest.raises(ValueError, match=rf"{name} over an empty axis: data shape \(2, 0\)"):
            run(name, empty, axis=1)
        # Reducing a non-empty axis of an empty tensor, or an empty result, is fine.
        assert checked(name, empty, axis=0).shape == (0,)
        assert checked(name, np.zeros((0, 0), "float32"), axis=1).shape == (0,)


def test_max_min_propagate_nan():
    x = np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 3.0]], "float32")
    out = checked("max", x, axis=1)
    assert np.isnan(out[0]) and out[1] == 3.0
    assert np.isnan(checked("min", x, axis=1)[0])


# --- argmax / argmin --------------------------------------------------------------------------

def loop_arg(x, axes, pick_better, last):
    """Flattened row-major index over the reduced axes of the first (or last) best element."""
    kept = [a for a in range(x.ndim) if a not in axes]
    out = np.zeros([x.shape[a] for a in kept], "int64")
    for key in np.ndindex(*out.shape):
        best, best_i = None, 0
        for i, red in enumerate(np.ndindex(*[x.shape[a] for a in axes])):
            idx = [0] * x.ndim
            for a, v in zip(kept, key):
                idx[a] = v
            for a, v in zip(axes, red):
                idx[a] = v
            v = x[tuple(idx)]
            if best is None or pick_better(v, best) or (last and v == best):
                best, best_i = v, i
        out[key] = best_i
    return out


@pytest.mark.parametrize("shape,axis", [((7,), None), ((1,), 0), ((3, 5), 1), ((3, 5), 0),
                                        ((2, 3, 4), [0, 2]), ((2, 3, 4), [2, 1]), ((2, 3), [])])
@pytest.mark.parametrize("last", [False, True])
def test_argmax_argmin(shape, axis, last):
    x = RNG.integers(0, 3, shape).astype("float32")  # few values: ties are common
    axes = tuple(range(len(shape))) if axis is None else (
        (axis,) if isinstance(axis, int) else tuple(sorted(axis)))
    for name, better in [("argmax", lambda a, b: a > b), ("argmin", lambda a, b: a < b)]:
        out = checked(name, x, axis=axis, select_last_index=last)
        np.testing.assert_array_equal(out, loop_arg(x, axes, better, last), err_msg=name)
        kept = checked(name, x, axis=axis, select_last_index=last, keepdims=True)
        assert kept.shape == tuple(1 if a in axes else s for a, s in enumerate(x.shape))
        np.testing.assert_array_equal(kept.reshape(out.shape), out)


def test_argmax_ints_and_nan():
    xi = np.array([[3, 9, 9], [-1, -5, -1]], "int8")
    np.testing.assert_array_equal(checked("argmax", xi, axis=1), [1, 0])
    np.testing.assert_array_equal(checked("argmax", xi, axis=1, select_last_index=True), [2, 2])
    x = np.array([1.0, np.nan, 5.0, np.nan], "float32")
    assert checked("argmax", x).item() == 1
    assert checked("argmax", x, select_last_index=True).item() == 3
    assert checked("argmin", x).item() == 1


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int64", "int32", "int8",
                                   "uint8"])
def test_result_dtypes(dtype):
    x = RNG.integers(0, 5, (3, 4)).astype(dtype)
    for name in VALUE_OPS + INDEX_OPS:
        for axis, keepdims in itertools.product([None, 0, [0, 1]], [False, True]):
            checked(name, x, axis=axis, keepdims=keepdims)


# --- logsumexp ----------------------------------------------------------------------------------

def test_logsumexp_types():
    x = T((n, 3, m))
    assert infer("logsumexp", x, axis=1) == T((n, m))
    assert infer("logsumexp", x, axis=[0, 2], keepdims=True) == T((1, 3, 1))
    assert infer("logsumexp", T((n,), "float16")) == T((), "float16")
    assert OPS["logsumexp"].pattern == "reduce"
    with pytest.raises(OpTypeError, match="data must have a float dtype, got int32"):
        infer("logsumexp", T((n,), "int32"))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_logsumexp_is_stable_and_exact(dtype):
    x = (RNG.standard_normal((4, 6)) * 300).astype(dtype)  # exp(x) overflows float32 and float64
    got = checked("logsumexp", x, axis=1)
    for row, value in zip(x.astype(np.float64), got):
        top = row.max()
        want = top + math.log(math.fsum(math.exp(v - top) for v in row))
        assert value == pytest.approx(want, rel=1e-6 if dtype == "float32" else 1e-13)


def test_logsumexp_special_values():
    inf, nan = np.inf, np.nan
    x = np.array([[-inf, -inf], [inf, 1], [nan, inf], [-inf, 3]], np.float32)
    got = checked("logsumexp", x, axis=1)
    np.testing.assert_array_equal(got, [-inf, inf, nan, 3])
    assert np.isneginf(checked("logsumexp", np.zeros((2, 0), np.float32), axis=1)).all()
    np.testing.assert_array_equal(checked("logsumexp", x[3:], axis=[]), x[3:])
