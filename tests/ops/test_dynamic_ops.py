"""Data-dependent ops and shape_of: fresh dims in the types, references against NumPy."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from relvm.ir import dims as D
from relvm.ir.dims import Sym
from relvm.ops import OPS
from relvm.ops.registry import OPAQUE, AttrError, OpTypeError
from ophelpers import T, infer, run

n, m = Sym("n"), Sym("m")


def checked(name, *arrays, **attrs):
    """The reference's result, after asserting it has the inferred dtype, rank and static dims."""
    out = run(name, *arrays, **attrs)
    t = infer(name, *(T(a.shape, a.dtype.name) for a in arrays), **attrs)
    assert isinstance(out, np.ndarray) and out.dtype.name == t.dtype and out.ndim == t.ndim
    assert all(d == s for d, s in zip(t.shape, out.shape) if isinstance(d, int))
    return out


def is_fresh(d):
    return isinstance(d, D.DimExpr) and not D.is_expressible(d)


def test_registry_entries():
    for name, inputs in [("arange", (0, 1, 2)), ("argwhere", (0,)), ("dyn.reshape", (1,))]:
        assert OPS[name].data_dependent and OPS[name].shape_inputs == inputs
        assert OPS[name].pattern == OPAQUE
    assert not OPS["shape_of"].data_dependent and OPS["shape_of"].pattern == OPAQUE


# --- shape_of -----------------------------------------------------------------------------------

def test_shape_of():
    assert infer("shape_of", T((n, 3))) == T((2,), "int32")
    assert infer("shape_of", T((n, m, 3)), dtype="int64") == T((3,), "int64")
    assert infer("shape_of", T(())) == T((0,), "int32")
    with pytest.raises(AttrError, match="'dtype' expects one of 'int32', 'int64'"):
        OPS["shape_of"].make_attrs({"dtype": "float32"})
    np.testing.assert_array_equal(checked("shape_of", np.zeros((4, 0, 3))),
                                  np.array([4, 0, 3], np.int32))
    out = checked("shape_of", np.zeros(()), dtype="int64")
    assert out.shape == (0,) and out.dtype == np.int64


# --- arange -------------------------------------------------------------------------------------

def test_arange_type_has_a_fresh_length_per_use():
    s = T((), "int64")
    a, b = infer("arange", s, s, s), infer("arange", s, s, s)
    assert a.dtype == "int64" and a.ndim == 1 and is_fresh(a.shape[0])
    assert D.prove_equal(a.shape[0], b.shape[0]) is None  # never assumed equal
    assert infer("arange", T(()), T(()), T(()), dtype="float64").dtype == "float64"


@pytest.mark.parametrize("types, attrs, message", [
    ((T((), "int64"), T(()), T((), "int64")), {}, r"dtypes differ: start int64 vs stop float32"),
    ((T(()), T((2,)), T(())), {}, r"stop must have rank 0, got \(2\)"),
    ((T((), "bool"),) * 3, {}, r"the result must have a numeric dtype, got bool"),
    ((T(()),) * 3, {"dtype": "bool"}, r"the result must have a numeric dtype, got bool"),
])
def test_arange_errors(types, attrs, message):
    with pytest.raises(OpTypeError, match=message):
        infer("arange", *types, **attrs)


@pytest.mark.parametrize("start, stop, step, dtype", [
    (0, 5, 1, "int64"), (5, 0, -2, "int64"), (0, 0, 1, "int32"), (3, 1, 1, "int32"),
    (-7, 8, 3, "int8"), (0.5, 2.0, 0.25, "float32"), (1.0, -1.0, -0.3, "float64"),
])
def test_arange_reference(start, stop, step, dtype):
    args = [np.array(v, dtype) for v in (start, stop, step)]
    out = checked("arange", *args)
    np.testing.assert_allclose(out, np.arange(start, stop, step, dtype=dtype), rtol=1e-6)
    assert out.dtype == np.dtype(dtype)


def test_arange_dtype_attr_converts_the_inputs_first():
    args = [np.array(v, "float32") for v in (0.0, 5.5, 2.7)]
    np.testing.assert_array_equal(checked("arange", *args, dtype="int32"),
                                  np.array([0, 2, 4], np.int32))
    with pytest.raises(ValueError, match="step must not be zero"):  # 0.5 converts to 0
        run("arange", *(np.array(v, "float32") for v in (0, 5, 0.5)), dtype="int32")


def test_arange_zero_step_is_an_error():
    with pytest.raises(ValueError, match="arange: step must not be zero"):
        run("arange", *(np.array(v, "int64") for v in (0, 5, 0)))


@given(st.integers(-50, 50), st.integers(-50, 50), st.integers(-9, 9).filter(bool))
def test_arange_length_matches_numpy_for_integers(start, stop, step):
    out = run("arange", *(np.array(v, "int64") for v in (start, stop, step)))
    np.testing.assert_array_equal(out, np.arange(start, stop, step, dtype=np.int64))


@given(st.floats(-20, 20), st.floats(-20, 20), st.floats(0.1, 5) | st.floats(-5, -0.1))
def test_arange_length_for_floats_is_the_ceiling(start, stop, step):
    out = run("arange", *(np.array(v, "float64") for v in (start, stop, step)))
    assert len(out) == max(0, math.ceil((stop - start) / step))


# --- argwhere -----------------------------------------------------------------------------------

def test_argwhere_type():
    t = infer("argwhere", T((n, 3), "bool"))
    assert t.dtype == "int32" and t.shape[1] == 2 and is_fresh(t.shape[0])
    assert infer("argwhere", T(())).shape[1] == 0
    assert infer("argwhere", T((4,), "int8")).shape[1] == 1


@pytest.mark.parametrize("x", [
    np.array([[True, False, True], [False, False, True]]), np.zeros((0, 3), bool),
    np.array([0, 2, 0, -1], np.int8), np.array(1.5, np.float32), np.array(0.0, np.float32),
    np.arange(24, dtype=np.float32).reshape(2, 3, 4) % 5 == 0,
])
def test_argwhere_reference(x):
    out = checked("argwhere", x)
    rows = [ix for ix in np.ndindex(x.shape) if x[ix]]
    want = np.array(rows, np.int32).reshape(len(rows), x.ndim)
    np.testing.assert_array_equal(out, want)


# --- dyn.reshape --------------------------------------------------------------------------------

def test_dyn_reshape_type_rank_comes_from_the_length_of_newshape():
    t = infer("dyn.reshape", T((n, 6)), T((3,), "int64"))
    assert t.dtype == "float32" and t.ndim == 3 and all(is_fresh(d) for d in t.shape)
    assert infer("dyn.reshape", T((n, 6), "int8"), T((0,), "int32")) == T((), "int8")


@pytest.mark.parametrize("newshape, message", [
    (T((n,), "int64"), r"newshape \(n\) must have a static length: it is the rank of the result"),
    (T((3,), "float32"), r"newshape must have dtype int32 or int64, got float32"),
    (T((3, 1), "int64"), r"newshape must have rank 1, got \(3, 1\)"),
])
def test_dyn_reshape_errors(newshape, message):
    with pytest.raises(OpTypeError, match=message):
        infer("dyn.reshape", T((n, 6)), newshape)


@pytest.mark.parametrize("shape, newshape, want", [
    ((4, 6), [-1, 3, 2], (4, 3, 2)), ((4, 6), [0, -1], (4, 6)), ((4, 6), [24], (24,)),
    ((1,), [], ()), ((0, 6), [-1, 2], (0, 2)), ((5, 1), [1, 0, -1], (1, 1, 5)),
])
def test_dyn_reshape_reference(shape, newshape, want):
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    out = checked("dyn.reshape", x, np.array(newshape, np.int64))
    np.testing.assert_array_equal(out, x.reshape(want))


def test_dyn_reshape_allowzero_and_run_time_errors():
    out = run("dyn.reshape", np.zeros((0, 6)), np.array([0, 6], np.int32), allowzero=1)
    assert out.shape == (0, 6)
    with pytest.raises(ValueError, match=r"dyn.reshape: newshape \[-2\] holds -2; only sizes, 0 "
                                         r"and -1 are allowed"):
        run("dyn.reshape", np.zeros((2, 3)), np.array([-2], np.int64))
    with pytest.raises(ValueError, match=r"cannot reshape data \(2, 3\) into newshape \[4, -1\]: "
                                         r"6 is not a multiple of 4"):
        run("dyn.reshape", np.zeros((2, 3)), np.array([4, -1], np.int64))


# --- dyn.broadcast_to ---------------------------------------------------------------------------

def test_dyn_broadcast_to_type_rank_is_the_larger_of_data_and_shape():
    t = infer("dyn.broadcast_to", T((n, 1)), T((3,), "int64"))
    assert t.dtype == "float32" and t.ndim == 3 and all(is_fresh(d) for d in t.shape)
    assert infer("dyn.broadcast_to", T((2, 3, 1), "int8"), T((1,), "int32")).ndim == 3
    with pytest.raises(OpTypeError, match="must have a static length"):
        infer("dyn.broadcast_to", T((2,)), T((m,), "int64"))


@pytest.mark.parametrize("shape,target,want", [
    ((3, 1), [2, 1, 6], (2, 3, 6)), ((), [2, 3], (2, 3)), ((4,), [1], (4,)),
    ((2, 1), [0, 2, 5], (0, 2, 5)), ((1, 3), [], (1, 3))])
def test_dyn_broadcast_to_reference_broadcasts_data_and_shape_together(shape, target, want):
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    out = checked("dyn.broadcast_to", x, np.array(target, np.int64))
    np.testing.assert_array_equal(out, np.broadcast_to(x, want))


@pytest.mark.parametrize("shape,target,message", [
    ((2, 1), [2, -1], "holds a negative size"),
    ((3, 1), [2, 2], r"data \(3, 1\) and shape \[2, 2\] do not broadcast")])
def test_dyn_broadcast_to_reference_errors(shape, target, message):
    with pytest.raises(ValueError, match=message):
        run("dyn.broadcast_to", np.zeros(shape, np.float32), np.array(target, np.int64))
