"""Layout and shape ops: type relations over symbolic dims, references against NumPy."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from relvm.ir import dims as D
from relvm.ir.dims import Sym
from relvm.ir.types import TensorType, TupleType
from relvm.ops import OPS
from relvm.ops.registry import BROADCAST, ELEMWISE, INJECTIVE, AttrError, OpTypeError
from ophelpers import T, infer, run

n, m = Sym("n"), Sym("m")
RNG = np.random.default_rng(2)
HUGE = [2**31 - 1, -(2**31 - 1), 2**31, -(2**31), 2**63 - 1, -(2**63)]


def rand(*shape, dtype="float32"):
    return (RNG.standard_normal(shape) * 10).astype(dtype)


def type_of(value):
    if isinstance(value, tuple):
        return TupleType(tuple(type_of(v) for v in value))
    return T(value.shape, value.dtype.name)


def checked(name, *arrays, **attrs):
    """The reference's result, after asserting it has exactly the inferred dtype and shape."""
    out = run(name, *arrays, **attrs)
    assert type_of(out) == infer(name, *(type_of(a) for a in arrays), **attrs)
    return out


def at(d, **values):
    return D.evaluate(d, {Sym(k): v for k, v in values.items()})


def test_patterns():
    assert {k: OPS[k].pattern for k in ("reshape", "transpose", "concatenate", "split",
                                        "strided_slice", "take", "squeeze")} \
        == dict.fromkeys(("reshape", "transpose", "concatenate", "split", "strided_slice",
                          "take", "squeeze"), INJECTIVE)
    assert OPS["broadcast_to"].pattern == BROADCAST
    assert all(OPS[k].pattern == ELEMWISE for k in ("zeros", "ones", "full", "zeros_like",
                                                    "ones_like", "full_like"))
    assert not any(OPS[k].data_dependent for k in ("reshape", "take", "full"))


# --- reshape ------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, newshape, want", [
    ((n, 12), [-1, 4], (n * 3, 4)),
    ((n, 3, 4), [0, -1], (n, 12)),
    ((n * 2, 3), [-1, 6], (n, 6)),
    ((n + 1, 12), [0, -1], (n + 1, 12)),          # copied dims cancel: no division needed
    ((n, m, 12), [0, -1, 4], (n, m * 3, 4)),
    ((n, 3, 4), [0, -2], (n, 3, 4)),
    ((n, 3, 4), [-2], (n, 3, 4)),
    ((n, 3, 4), [-3, 0], (n * 3, 4)),
    ((n * 6, 5), [-4, -1, 2, 0], (n * 3, 2, 5)),
    ((n, 12), [0, -4, 3, -1], (n, 3, 4)),
    ((6, n), [-4, 2, 3, -2], (2, 3, n)),
    ((n, 12), [-1], (n * 12,)),
    ((), [1, -1], (1, 1)),
])
def test_reshape_symbolic(shape, newshape, want):
    assert infer("reshape", T(shape), newshape=newshape) == T(want)


def test_reshape_allowzero_keeps_a_literal_zero():
    assert infer("reshape", T((0, 3)), newshape=[0, 3], allowzero=1) == T((0, 3))
    assert infer("reshape", T((n, 3)), newshape=[0, 3], allowzero=0) == T((n, 3))
    assert OPS["reshape"].make_attrs({"newshape": [1], "allowzero": True}).allowzero == 1


def test_reshape_minus_one_beside_zero_dims():
    # Relay's rule: a copied zero dim cancels, so -1 is still determined (NumPy refuses this).
    assert infer("reshape", T((0, 3)), newshape=[0, -1]) == T((0, 3))
    assert run("reshape", np.zeros((0, 3)), newshape=[0, -1]).shape == (0, 3)
    with pytest.raises(OpTypeError, match=r"-1 is ambiguous beside a zero dim"):
        infer("reshape", T((0, 3)), newshape=[0, -1], allowzero=1)


def test_reshape_not_provably_divisible_is_left_to_run_time():
    t = infer("reshape", T((n, 12)), newshape=[5, -1])
    assert at(t.shape[1], n=5) == 12
    np.testing.assert_array_equal(run("reshape", rand(5, 12), newshape=[5, -1]).shape, (5, 12))
    with pytest.raises(ValueError, match=r"cannot reshape data \(3, 12\) into newshape \[5, -1\]: "
                                         r"36 is not a multiple of 5"):
        run("reshape", rand(3, 12), newshape=[5, -1])


@pytest.mark.parametrize("shape, newshape, message", [
    ((3, 4), [5, -1], r"cannot reshape data \(3, 4\) into newshape \[5, -1\]: "
                      r"12 is not a multiple of 5"),
    ((n * 2 + 1,), [2, -1], r"n\*2 \+ 1 is not a multiple of 2"),
    ((2, 3), [4, 2], r"cannot reshape data \(2, 3\) into newshape \[4, 2\]: 6 elements vs 8"),
    ((n, 3), [-1, -1], r"only one -1 is allowed"),
    ((n, 3), [-5], r"-5 is not a size or one of the codes"),
    ((n,), [0, 0], r"code 0 refers to input dim 1, but data has rank 1"),
    ((n,), [-3], r"code -3 refers to input dim 1"),
    ((n * 6,), [-4, -1, -1], r"-4 must be followed by two sizes"),
    ((n * 6,), [-4, 2], r"-4 must be followed by two sizes"),
    ((6,), [-4, 4, 2], r"-4 cannot split dim 6 into 4 x 2"),
])
def test_reshape_errors(shape, newshape, message):
    with pytest.raises(OpTypeError, match=message):
        infer("reshape", T(shape), newshape=newshape)


@pytest.mark.parametrize("shape, newshape, numpy_shape", [
    ((2, 3, 4), [-1, 4], (-1, 4)), ((2, 3, 4), [0, -1], (2, 12)), ((7,), [1, -1, 1], (1, 7, 1)),
    ((1,), [], ()), ((0, 4), [-1, 2], (-1, 2)), ((5, 0), [0, 0], (5, 0)),
    ((2, 3, 4), [-3, 4], (6, 4)), ((6, 5), [-4, 2, -1, 0], (2, 3, 5)),
    ((2, 3, 5), [0, -2], (2, 3, 5)),
])
def test_reshape_reference(shape, newshape, numpy_shape):
    x = rand(*shape).astype("int8")
    out = checked("reshape", x, newshape=newshape)
    np.testing.assert_array_equal(out, x.reshape(numpy_shape))
    assert out.dtype == np.int8


@given(st.integers(0, 9), st.sampled_from([[-1, 4], [0, -1], [-1], [2, -1, 2], [-3, -1],
                                           [0, -4, 2, -1, 0], [-4, -1, 1, -2], [-2]]))
def test_reshape_symbolic_type_evaluates_to_numpys_shape(value, newshape):
    t = infer("reshape", T((n, 2, 4)), newshape=newshape)
    want = run("reshape", np.zeros((value, 2, 4)), newshape=newshape).shape
    assert tuple(at(d, n=value) for d in t.shape) == want


def test_reshape_like():
    assert infer("reshape_like", T((n, 6)), T((n, 2, 3), "int8")) == T((n, 2, 3))
    assert infer("reshape_like", T((n, 6)), T((2, 3)), lhs_begin=1) == T((n, 2, 3))
    assert infer("reshape_like", T((n, 6, 5)), T((7, 2, 3, 9)), lhs_begin=1, lhs_end=-1,
                 rhs_begin=1, rhs_end=3) == T((n, 2, 3, 5))
    with pytest.raises(OpTypeError, match=r"cannot reshape data \(2, 3\) like shape_like \(4\): "
                                          r"6 elements vs 4"):
        infer("reshape_like", T((2, 3)), T((4,)))
    with pytest.raises(OpTypeError, match=r"lhs_begin 3 and lhs_end None do not select axes of "
                                          r"data \(rank 2\)"):
        infer("reshape_like", T((2, 3)), T((6,)), lhs_begin=3)
    x = rand(4, 6)
    np.testing.assert_array_equal(checked("reshape_like", x, rand(4, 2, 3)), x.reshape(4, 2, 3))
    with pytest.raises(ValueError, match="24 elements vs 20"):
        run("reshape_like", x, rand(4, 5))


# --- transpose, squeeze, expand_dims ------------------------------------------------------------

def test_transpose():
    assert infer("transpose", T((n, 3, m))) == T((m, 3, n))
    assert infer("transpose", T((n, 3, m)), axes=[1, -1, 0]) == T((3, m, n))
    assert infer("transpose", T(())) == T(())
    with pytest.raises(OpTypeError, match=r"axes \[0, 0, 1\] is not a permutation of the axes of "
                                          r"data \(n, 3, m\)"):
        infer("transpose", T((n, 3, m)), axes=[0, 0, 1])
    with pytest.raises(OpTypeError, match=r"axes \[1, 0\] is not a permutation"):
        infer("transpose", T((n, 3, m)), axes=[1, 0])
    with pytest.raises(OpTypeError, match="axes entry 3 is out of range for rank 3"):
        infer("transpose", T((n, 3, m)), axes=[0, 1, 3])
    for shape, axes in [((2, 3, 5), None), ((2, 3, 5), [2, 0, 1]), ((0, 3), [-1, -2]), ((7,), [0])]:
        x = rand(*shape).astype("int32")
        want = np.transpose(x, axes)
        out = checked("transpose", x, axes=axes)
        np.testing.assert_array_equal(out, want)
        assert out.flags.c_contiguous


def test_squeeze():
    assert infer("squeeze", T((n, 1, 3)), axis=[1]) == T((n, 3))
    assert infer("squeeze", T((n, 1, 3)), axis=[-2]) == T((n, 3))
    assert infer("squeeze", T((n, 3)), axis=[0]) == T((3,))  # checked when it runs
    assert infer("squeeze", T((1, 3, 1))) == T((3,))
    assert infer("squeeze", T((n, 1)), axis=[]) == T((n, 1))
    with pytest.raises(OpTypeError, match=r"cannot squeeze axis 1 of data \(n, 3\): its size is "
                                          r"3, not 1"):
        infer("squeeze", T((n, 3)), axis=[1])
    with pytest.raises(OpTypeError, match=r"squeeze with axis=None needs a static shape, but data "
                                          r"is \(n, 1, 3\)"):
        infer("squeeze", T((n, 1, 3)))
    x = rand(1, 3, 1)
    np.testing.assert_array_equal(checked("squeeze", x), x.reshape(3))
    np.testing.assert_array_equal(checked("squeeze", x, axis=[-1]), x[:, :, 0])
    y = rand(1)
    np.testing.assert_array_equal(checked("squeeze", y), y.reshape(()))
    with pytest.raises(ValueError, match=r"cannot squeeze axis 0 of data \(2, 3\)"):
        run("squeeze", rand(2, 3), axis=[0])


def test_expand_dims():
    assert infer("expand_dims", T((n, 3)), axis=0, num_newaxis=2) == T((1, 1, n, 3))
    assert infer("expand_dims", T((n, 3)), axis=-1) == T((n, 3, 1))
    assert infer("expand_dims", T((n, 3)), axis=2) == T((n, 3, 1))
    assert infer("expand_dims", T((n, 3)), axis=-3) == T((1, n, 3))
    assert infer("expand_dims", T((n, 3)), axis=1, num_newaxis=0) == T((n, 3))
    with pytest.raises(OpTypeError, match=r"axis 3 is out of range for inserting into data "
                                          r"\(n, 3\) \(rank 2\)"):
        infer("expand_dims", T((n, 3)), axis=3)
    with pytest.raises(AttrError, match="needs attribute 'axis'"):
        OPS["expand_dims"].make_attrs({})
    x = rand(2, 3)
    np.testing.assert_array_equal(checked("expand_dims", x, axis=-2), x[:, None, :])
    np.testing.assert_array_equal(checked("expand_dims", np.float32(5).reshape(()), axis=0,
                                          num_newaxis=3), np.full((1, 1, 1), 5, np.float32))


# --- concatenate, split -------------------------------------------------------------------------

def test_concatenate_types():
    assert infer("concatenate", TupleType((T((n, 3)), T((m, 3))))) == T((n + m, 3))
    assert infer("concatenate", TupleType((T((n, 3)), T((n, 4)), T((n, 1)))), axis=-1) \
        == T((n, 8))
    assert infer("concatenate", TupleType((T((n, 3)), T((n, 3)))), axis=0) == T((n * 2, 3))
    assert infer("concatenate", TupleType((T((n, 3)),))) == T((n, 3))
    # An unproven equality is left to the VM; the result keeps the most informative dim.
    anon = D.fresh()
    assert infer("concatenate", TupleType((T((anon, 2)), T((n, 2)))), axis=1) == T((n, 4))
    assert infer("concatenate", TupleType((T((m, 2)), T((4, 2)))), axis=1) == T((4, 4))


@pytest.mark.parametrize("fields, axis, message", [
    ((T((n, 3)), T((n, 4))), 0, r"data.0 \(n, 3\) and data.1 \(n, 4\) differ in dim 1"),
    ((T((n, 3)), T((n, 3)), T((n + 1, 3))), 1, r"data.0 \(n, 3\) and data.2 \(n \+ 1, 3\) "
                                               r"differ in dim 0"),
    ((T((m, 3)), T((n, 3)), T((n + 1, 3))), 1, r"data.1 \(n, 3\) and data.2 \(n \+ 1, 3\) "
                                               r"differ in dim 0"),
    ((T((n, 3)), T((n, 3, 1))), 0, r"data.0 \(n, 3\) and data.1 \(n, 3, 1\) differ in rank"),
    ((T((n,)), T((n,), "int32")), 0, r"dtypes differ: data.0 float32 vs data.1 int32"),
    ((T(()), T(())), 0, r"cannot concatenate rank-0 tensors"),
    ((), 0, r"data must hold at least one tensor"),
    ((T((n, 3)),), 2, r"axis 2 is out of range for rank 2"),
])
def test_concatenate_errors(fields, axis, message):
    with pytest.raises(OpTypeError, match=message):
        infer("concatenate", TupleType(fields), axis=axis)


def test_concatenate_needs_a_tuple():
    with pytest.raises(OpTypeError, match="data must be a tuple of tensors"):
        infer("concatenate", T((n, 3)))


@pytest.mark.parametrize("shapes, axis", [
    (((2, 3), (5, 3)), 0), (((2, 3), (2, 1), (2, 0)), -1), (((0, 4), (1, 4)), 0), (((7,),), 0),
])
def test_concatenate_reference(shapes, axis):
    xs = tuple(rand(*s, dtype="int64") for s in shapes)
    np.testing.assert_array_equal(checked("concatenate", xs, axis=axis),
                                  np.concatenate(xs, axis=axis))


def test_split_types():
    assert infer("split", T((n * 3, 4)), indices_or_sections=3) == TupleType((T((n, 4)),) * 3)
    assert infer("split", T((n, 8)), indices_or_sections=[3, 5], axis=1) \
        == TupleType((T((n, 3)), T((n, 2)), T((n, 3))))
    assert infer("split", T((n, 4)), indices_or_sections=[3, 5]) \
        == TupleType((T((3, 4)), T((2, 4)), T((n - 5, 4))))
    assert infer("split", T((n, 4)), indices_or_sections=[]) == TupleType((T((n, 4)),))
    # A symbolic dim not provably divisible: each piece is its floor division, checked at run time.
    pieces = infer("split", T((n, 4)), indices_or_sections=2).fields
    assert at(pieces[0].shape[0], n=6) == 3


@pytest.mark.parametrize("shape, spec, message", [
    ((7, 2), 3, r"cannot split data \(7, 2\) into 3 sections along axis 0: 7 is not a multiple "
                r"of 3"),
    ((n * 2 + 1,), 2, r"n\*2 \+ 1 is not a multiple of 2"),
    ((n,), 0, r"the number of sections must be positive"),
    ((n,), [3, 3], r"cannot split data \(n\) at indices \[3, 3\] along axis 0: indices must be "
                   r"positive and strictly ascending"),
    ((n,), [0, 2], r"indices must be positive and strictly ascending"),
    ((8,), [3, 8], r"index 8 is not below the dim 8"),
    ((), 1, r"cannot split a rank-0 tensor"),
])
def test_split_errors(shape, spec, message):
    with pytest.raises(OpTypeError, match=message):
        infer("split", T(shape), indices_or_sections=spec)


@pytest.mark.parametrize("shape, spec, axis", [
    ((6, 2), 3, 0), ((2, 9), [2, 3, 7], 1), ((2, 8), [3, 5], -1), ((1, 5), 1, 1), ((0, 4), 2, 1),
    ((0, 4), 1, 0),
])
def test_split_reference(shape, spec, axis):
    x = rand(*shape, dtype="float64")
    got = checked("split", x, indices_or_sections=spec, axis=axis)
    want = np.split(x, spec, axis=axis)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@given(st.integers(0, 12), st.lists(st.integers(1, 12), max_size=3, unique=True))
def test_split_symbolic_pieces_evaluate_to_numpys(value, indices):
    indices = sorted(indices)
    pieces = infer("split", T((n, 2)), indices_or_sections=indices).fields
    if indices and indices[-1] >= value:
        with pytest.raises(ValueError, match="is not below the dim"):
            run("split", np.zeros((value, 2)), indices_or_sections=indices)
        return
    want = np.split(np.zeros((value, 2)), indices)
    assert [at(p.shape[0], n=value) for p in pieces] == [w.shape[0] for w in want]


def test_split_sections_checked_at_run_time():
    with pytest.raises(ValueError, match=r"7 is not a multiple of 2"):
        run("split", rand(7), indices_or_sections=2)


# --- strided_slice ------------------------------------------------------------------------------

INDEX = st.one_of(st.integers(-14, 14), st.sampled_from(HUGE))


@given(st.integers(0, 13), INDEX, INDEX, st.integers(-4, 4).filter(bool))
def test_strided_slice_symbolic_length_matches_python(value, b, e, s):
    t = infer("strided_slice", T((n, 2)), begin=[b], end=[e], strides=[s])
    assert at(t.shape[0], n=value) == len(range(value)[b:e:s])
    assert t.shape[1] == 2


@given(st.integers(0, 13), st.integers(-14, 14), st.integers(-3, 14))
def test_strided_slice_size_mode_symbolic_length(value, b, size):
    t = infer("strided_slice", T((n,)), begin=[b], end=[size], slice_mode="size")
    rest = range(value)[b:]
    assert at(t.shape[0], n=value) == len(rest if size < 0 else rest[:size])


@given(st.integers(0, 9), st.integers(-4, 4).filter(bool))
def test_strided_slice_defaults_cover_the_axis(value, s):
    # begin and end shorter than the rank: the missing entries take the whole axis.
    t = infer("strided_slice", T((n, m)), begin=[], end=[], strides=[1, s])
    assert t.shape[0] == n
    assert at(t.shape[1], m=value) == len(range(value)[::s])


def test_strided_slice_simple_forms():
    x = T((n, 10))
    assert infer("strided_slice", x, begin=[0], end=[2**31 - 1]) == x
    assert infer("strided_slice", x, begin=[0, 1], end=[2**63 - 1, 9], strides=[1, 2]) \
        == T((n, 4))
    assert infer("strided_slice", x, begin=[-1], end=[-11], strides=[-3], axes=[1]) == T((n, 4))
    assert infer("strided_slice", x, begin=[0], end=[-(2**31)], strides=[-1]) \
        == T((D.dim_min(D.as_expr(n), 1), 10))
    assert infer("strided_slice", x, begin=[2], end=[3], axes=[1], slice_mode="size") == T((n, 3))


@pytest.mark.parametrize("shape, attrs, index", [
    ((4, 10), dict(begin=[0, 1], end=[2147483647, 9], strides=[1, 2]), np.s_[:, 1:9:2]),
    ((4, 10), dict(begin=[-1], end=[-11], strides=[-3], axes=[1]), np.s_[:, -1:-11:-3]),
    ((5, 7), dict(begin=[1], end=[-1]), np.s_[1:-1]),
    ((5, 7), dict(begin=[4, 6], end=[0, -100], strides=[-2, -1]), np.s_[4:0:-2, 6:-100:-1]),
    ((5, 7), dict(begin=[3], end=[1]), np.s_[3:1]),                      # empty, not an error
    ((5, 7), dict(begin=[], end=[], strides=[-1, -1]), np.s_[::-1, ::-1]),
    ((5, 7), dict(begin=[-2], end=[5], axes=[-1], slice_mode="size"), np.s_[:, -2:]),
    ((5, 7), dict(begin=[1, 2], end=[-1, 3], slice_mode="size", strides=[3, 3]), np.s_[1:, 2:5]),
    ((0, 3), dict(begin=[0, 1], end=[5, 3]), np.s_[0:5, 1:3]),
    ((1,), dict(begin=[0], end=[1], strides=[5]), np.s_[0:1:5]),
    ((2, 3, 4), dict(begin=[1, 2], end=[9, 0], strides=[1, -1], axes=[2, 0]),
     np.s_[2:0:-1, :, 1:9]),
])
def test_strided_slice_reference(shape, attrs, index):
    x = rand(*shape, dtype="int32")
    out = checked("strided_slice", x, **attrs)
    np.testing.assert_array_equal(out, x[index])
    assert out.dtype == np.int32


@pytest.mark.parametrize("attrs, message", [
    (dict(begin=[0], end=[1], strides=[0]), r"strides \[0\] has a zero stride"),
    (dict(begin=[0, 0, 0], end=[1]), r"more entries than data \(n, 10\) has axes"),
    (dict(begin=[0, 0], end=[1, 1], axes=[1, -1]), r"axes \[1, -1\] repeats an axis"),
    (dict(begin=[0], end=[1, 2], axes=[1]), r"need one entry per axis in axes \[1\]"),
    (dict(begin=[0], end=[1], axes=[2]), r"axes entry 2 is out of range for rank 2"),
])
def test_strided_slice_errors(attrs, message):
    with pytest.raises(OpTypeError, match=message):
        infer("strided_slice", T((n, 10)), **attrs)


def test_strided_slice_mode_is_checked():
    with pytest.raises(AttrError, match="slice_mode"):
        OPS["strided_slice"].make_attrs({"begin": [0], "end": [1], "slice_mode": "stop"})


# --- take ---------------------------------------------------------------------------------------

def test_take_types():
    assert infer("take", T((n, 5)), T((3,), "int64"), axis=1) == T((n, 3))
    assert infer("take", T((n, 5)), T((m, 2), "int32"), axis=0) == T((m, 2, 5))
    assert infer("take", T((n, 5)), T((), "int64"), axis=0) == T((5,))
    assert infer("take", T((n, 5)), T((), "int64")) == T(())
    assert infer("take", T((n, 5)), T((2, 2), "int32")) == T((2, 2))
    assert infer("take", T((n, 4, 5)), T((n, 2), "int32"), axis=1, batch_dims=1) == T((n, 2, 5))
    assert infer("take", T((n, 4, 5)), T((n, 2), "int32"), axis=-1, batch_dims=-1) \
        == T((n, 4, 2))


@pytest.mark.parametrize("data, indices, attrs, message", [
    (T((n, 5)), T((3,)), dict(axis=0), r"indices must have dtype int32 or int64, got float32"),
    (T((n, 5)), T((3,), "int32"), dict(axis=2), r"axis 2 is out of range for rank 2"),
    (T((n, 5)), T((n, 3), "int32"), dict(axis=0, batch_dims=1), r"batch_dims 1 must be in"),
    (T((3, 4, 5)), T((4, 2), "int32"), dict(axis=1, batch_dims=1),
     r"data \(3, 4, 5\) and indices \(4, 2\) differ in batch dim 0"),
    (T(()), T((), "int32"), dict(axis=0), r"cannot take along axis 0 of a rank-0 data"),
])
def test_take_errors(data, indices, attrs, message):
    with pytest.raises(OpTypeError, match=message):
        infer("take", data, indices, **attrs)


def test_take_modes():
    x = np.arange(5, dtype=np.float32) * 10
    idx = np.array([-7, -1, 0, 4, 5, 12], np.int64)
    np.testing.assert_array_equal(checked("take", x, idx, axis=0),
                                  x[[0, 0, 0, 4, 4, 4]])                       # clip
    np.testing.assert_array_equal(checked("take", x, idx, axis=0, mode="wrap"),
                                  x[[3, 4, 0, 4, 0, 2]])
    ok = np.array([[4, 0], [2, 2]], np.int32)
    np.testing.assert_array_equal(checked("take", x, ok, axis=0, mode="fast"), x[ok])
    with pytest.raises(ValueError, match=r"take\(mode='fast'\): index -7 is out of range for an "
                                         r"axis of size 5"):
        run("take", x, idx, axis=0, mode="fast")
    np.testing.assert_array_equal(checked("take", x, idx[1:4], axis=0, mode="from_end"),
                                  x[[4, 0, 4]])
    for bad in (-7, 5):
        with pytest.raises(ValueError, match=rf"take\(mode='from_end'\): index {bad} is out of "
                                             "range for an axis of size 5"):
            run("take", x, np.array([0, bad]), axis=0, mode="from_end")
    with pytest.raises(ValueError, match="cannot take from an axis of size 0"):
        run("take", np.zeros((0, 2), np.float32), np.array([0], np.int32), axis=0)


@pytest.mark.parametrize("shape, idx_shape, axis", [
    ((4, 5), (3,), 1), ((4, 5), (2, 2), 0), ((4, 5), (), 0), ((4, 5), (), None),
    ((2, 3, 5), (7,), None), ((3, 1), (0,), 0), ((0, 4), (2,), 1),
])
def test_take_reference(shape, idx_shape, axis):
    x = rand(*shape, dtype="float64")
    dim = x.size if axis is None else x.shape[axis]
    idx = RNG.integers(0, dim, idx_shape).astype(np.int32)
    # For in-range indices every mode is plain NumPy indexing.
    want = x.reshape(-1)[idx] if axis is None else np.take(x, idx, axis=axis)
    out = checked("take", x, idx, axis=axis)
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, want)


def test_take_batch_dims_against_a_loop():
    x = rand(2, 3, 4, 5)
    idx = RNG.integers(0, 4, (2, 3, 6)).astype(np.int64)
    out = checked("take", x, idx, axis=2, batch_dims=2)
    assert out.shape == (2, 3, 6, 5)
    for i in range(2):
        for j in range(3):
            np.testing.assert_array_equal(out[i, j], x[i, j][idx[i, j]])
    with pytest.raises(ValueError, match="differ in batch dim 1"):
        run("take", x, idx[:, :2], axis=2, batch_dims=2)


# --- broadcast_to and the fill ops --------------------------------------------------------------

def test_broadcast_to():
    assert infer("broadcast_to", T((1, 1, 1, 3)), shape=[2, 1, 4, 3]) == T((2, 1, 4, 3))
    assert infer("broadcast_to", T((1, 3)), shape=[5, 2, 3]) == T((5, 2, 3))
    assert infer("broadcast_to", T((m, 3)), shape=[4, 3]) == T((4, 3))  # checked at run time
    with pytest.raises(OpTypeError, match=r"cannot broadcast data \(3\) to shape \(4\): dim 3 "
                                          r"vs 4"):
        infer("broadcast_to", T((3,)), shape=[4])
    with pytest.raises(OpTypeError, match=r"cannot broadcast data \(2, 3\) to shape \(3\): data "
                                          r"has more dims"):
        infer("broadcast_to", T((2, 3)), shape=[3])
    x = rand(3, 1)
    np.testing.assert_array_equal(checked("broadcast_to", x, shape=[2, 3, 4]),
                                  np.tile(x[None], (2, 1, 4)))
    assert checked("broadcast_to", x, shape=[3, 0]).shape == (3, 0)


def test_shape_attributes_are_static_as_in_relay():
    assert OPS["zeros"].make_attrs({"shape": [3, 2]}).shape == (3, 2)
    for bad in ([-1], [n, 2]):
        with pytest.raises(AttrError, match="a static shape"):
            OPS["zeros"].make_attrs({"shape": bad})


def test_zeros_ones():
    assert OPS["zeros"].infer(OPS["zeros"].make_attrs({"shape": [5, 2]})) == T((5, 2))
    assert OPS["ones"].infer(OPS["ones"].make_attrs({"shape": [], "dtype": "int8"})) \
        == T((), "int8")
    out = run("zeros", shape=[2, 3], dtype="int32")
    np.testing.assert_array_equal(out, np.zeros((2, 3), np.int32))
    assert out.dtype == np.int32
    out = run("ones", shape=[0, 4])
    assert out.shape == (0, 4) and out.dtype == np.float32
    np.testing.assert_array_equal(run("ones", shape=[], dtype="bool"), np.ones((), bool))


def test_full():
    three = np.array(3.75, np.float32)
    assert infer("full", T(()), shape=[3, 2]) == T((3, 2))
    assert infer("full", T(()), shape=[2], dtype="int32") == T((2,), "int32")
    with pytest.raises(OpTypeError, match=r"fill_value must have rank 0, got \(1\)"):
        infer("full", T((1,)), shape=[2])
    with pytest.raises(OpTypeError, match=r"fill_value must have rank 0, got \(1\)"):
        infer("full", T((1,)), shape=[2], dtype="int8")
    np.testing.assert_array_equal(checked("full", three, shape=[2, 2]),
                                  np.full((2, 2), 3.75, np.float32))
    out = checked("full", three, shape=[3], dtype="int32")  # converts as cast: truncation
    np.testing.assert_array_equal(out, np.array([3, 3, 3], np.int32))
    out = checked("full", np.array(-2, np.int64), shape=[1], dtype="float16")
    np.testing.assert_array_equal(out, np.array([-2], np.float16))


def test_like_ops():
    x = T((n, 3), "int8")
    for name in ("zeros_like", "ones_like"):
        assert infer(name, x) == x
    assert infer("full_like", x, T((), "float32")) == x
    with pytest.raises(OpTypeError, match=r"fill_value must have rank 0"):
        infer("full_like", x, T((3,)))
    a = rand(2, 3).astype(np.int8)
    np.testing.assert_array_equal(checked("zeros_like", a), np.zeros((2, 3), np.int8))
    np.testing.assert_array_equal(checked("ones_like", a), np.ones((2, 3), np.int8))
    np.testing.assert_array_equal(checked("full_like", a, np.array(-7.9, np.float32)),
                                  np.full((2, 3), -7, np.int8))


# --- bitcast -------------------------------------------------------------------------------------

SAME_SIZE = [("float32", "int32"), ("int32", "float32"), ("float64", "int64"), ("int64", "uint64"),
             ("uint32", "int32"), ("int8", "uint8"), ("uint16", "int16"), ("float16", "uint16"),
             ("bool", "uint8"), ("uint8", "bool"), ("int64", "float64")]


@pytest.mark.parametrize("src,dst", SAME_SIZE, ids=str)
def test_bitcast_types_and_reference(src, dst):
    assert infer("bitcast", T((n, 3, m), src), dtype=dst) == T((n, 3, m), dst)
    x = rand(2, 5, dtype=src)
    got = run("bitcast", x, dtype=dst)
    assert got.dtype == np.dtype(dst) and got.shape == x.shape
    if dst == "bool":
        np.testing.assert_array_equal(got, x.view(np.uint8) != 0)
    else:
        np.testing.assert_array_equal(got.view(np.uint8), x.view(np.uint8))


def test_bitcast_keeps_bit_patterns():
    x = np.float32([1.0, -0.0, np.inf, np.nan])
    np.testing.assert_array_equal(run("bitcast", x, dtype="int32"),
                                  [0x3F800000, -2**31, 0x7F800000, 0x7FC00000])
    # Into bool, any non-zero byte is true (relvm's bools are 0 or 1).
    np.testing.assert_array_equal(run("bitcast", np.uint8([0, 1, 2, 255]), dtype="bool"),
                                  [False, True, True, True])


@pytest.mark.parametrize("src,dst,message", [
    ("float32", "float64", r"data's dtype float32 \(4 bytes\) and dtype float64 \(8 bytes\) "
                           r"differ in size"),
    ("bool", "int16", r"data's dtype bool \(1 bytes\) and dtype int16 \(2 bytes\)"),
])
def test_bitcast_errors(src, dst, message):
    with pytest.raises(OpTypeError, match=message):
        infer("bitcast", T((n,), src), dtype=dst)
    with pytest.raises(AttrError, match="dtype"):
        infer("bitcast", T((n,), src), dtype="complex64")
