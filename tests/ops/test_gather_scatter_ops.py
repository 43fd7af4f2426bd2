"""gather, gather_nd, scatter_elements, scatter_nd: type relations over symbolic dims, their
errors, the text round trip, and the references against loops written out element by element
(ONNX's definitions, with its index rules: a negative index counts from the end once)."""

import itertools

import numpy as np
import pytest

import relvm
from relvm.ir.dims import Sym
from relvm.ops.gather_scatter import REDUCTIONS
from relvm.ops.registry import OpTypeError
from ophelpers import T, infer, run

n, m, k = Sym("n"), Sym("m"), Sym("k")
RNG = np.random.default_rng(5)
I64 = "int64"


# --- type relations ------------------------------------------------------------------------------

def test_gather_types():
    assert infer("gather", T((n, 5)), T((n, 3), I64), axis=1) == T((n, 3))
    assert infer("gather", T((n, 5)), T((m, 5), "int32"), axis=0) == T((m, 5))
    assert infer("gather", T((4, 5, 6), "int8"), T((2, 7, 6), I64), axis=-2) == T((2, 7, 6), "int8")


def test_gather_nd_types():
    # Relay's layout: the index tuples along the first axis of indices.
    assert infer("gather_nd", T((n, 5, 6)), T((2, m), I64)) == T((m, 6))
    assert infer("gather_nd", T((n, 5, 6)), T((3, m, k), I64)) == T((m, k))
    assert infer("gather_nd", T((n, 5, 6)), T((1,), I64)) == T((5, 6))
    assert infer("gather_nd", T((n, 5, 6)), T((1, n, m), "int32"), batch_dims=1) == T((n, m, 6))
    assert infer("gather_nd", T((n, 5, 6)), T((0, 4), I64)) == T((4, n, 5, 6))
    assert infer("gather_nd", T((n, 5)), T((m, 3), I64), index_rank=2) == T((3,))


def test_scatter_types():
    assert infer("scatter_elements", T((n, 5)), T((m, 5), I64), T((m, 5))) == T((n, 5))
    assert infer("scatter_elements", T((n, 5), "bool"), T((n, 2), I64), T((n, 2), "bool"),
                 axis=1, reduction="max") == T((n, 5), "bool")
    assert infer("scatter_nd", T((n, 5, 6)), T((2, m), I64), T((m, 6))) == T((n, 5, 6))
    assert infer("scatter_nd", T((n, 5)), T((1, m, k), "int32"), T((m, k, 5)),
                 mode="mul") == T((n, 5))
    # scatter_nd's tuple length may be a symbol: the ranks say it is 1 (checked at run time).
    assert infer("scatter_nd", T((n, 5)), T((k, m), I64), T((m, 5))) == T((n, 5))


@pytest.mark.parametrize("op, types, attrs, message", [
    ("gather", (T((4, 5)), T((4, 5))), {}, r"indices must have dtype int32 or int64"),
    ("gather", (T((4, 5)), T((4,), I64)), {}, r"indices \(4\) must have the rank of data"),
    ("gather", (T((4, 5)), T((4, 6), I64)), {}, r"longer than data \(4, 5\) along axis 1"),
    ("gather", (T((4, 5)), T((4, 5), I64)), dict(axis=2), r"axis 2 is out of range"),
    ("gather", (T(()), T((), I64)), {}, r"cannot gather along an axis of rank-0 data"),
    ("gather_nd", (T((4, 5)), T((), I64)), {}, r"indices must have rank 1 or more"),
    ("gather_nd", (T((4, 5)), T((n, 3), I64)), {}, r"need a static first dim"),
    ("gather_nd", (T((4, 5)), T((3, 2), I64)), {}, r"tuples of length 3 .* do not fit data"),
    ("gather_nd", (T((4, 5)), T((1, 3), I64)), dict(batch_dims=1),
     r"differ in batch dim 0"),
    ("gather_nd", (T((4, 5)), T((1, 4), I64)), dict(batch_dims=2), r"batch_dims 2 must be in"),
    ("gather_nd", (T((4, 5)), T((2, 3), I64)), dict(index_rank=1),
     r"index_rank 1 differs from indices' first dim"),
    ("scatter_elements", (T((4, 5)), T((4, 5), I64), T((4, 5), "int32")), {},
     r"dtypes differ: data float32 vs updates int32"),
    ("scatter_elements", (T((4, 5)), T((4, 5), I64), T((4, 4))), {},
     r"updates \(4, 4\) must have the shape of indices \(4, 5\)"),
    ("scatter_nd", (T((4, 5)), T((1, 3), I64), T((3, 4))), {},
     r"updates \(3, 4\) must have shape \(3, 5\)"),
    ("scatter_nd", (T((4, 5)), T((3, 3), I64), T((3,))), {}, r"do not fit data"),
    ("scatter_nd", (T((4, 5)), T((k, 3), I64), T((3, 2, 4, 5))), {}, r"do not fit data"),
    ("scatter_nd", (T((4, 5)), T((1, 3), I64), T((3, 5))), dict(mode="mean"),
     r"mode"),
])
def test_type_errors(op, types, attrs, message):
    with pytest.raises(Exception, match=message) as info:
        infer(op, *types, **attrs)
    assert info.type.__name__ in ("OpTypeError", "AttrError")


def test_text_round_trip_and_run_time_checks(tmp_path):
    text = """
    def @main(%x: Tensor[(n, 5), float32], %i: Tensor[(n, 2), int64], %t: Tensor[(2, m), int64],
              %u: Tensor[(m), float32]) {
      %0 = gather(%x, %i, axis=1);
      %1 = gather_nd(%x, %t);
      %2 = scatter_elements(%x, %i, %0, axis=1, reduction="add");
      scatter_nd(%2, %t, %u, mode="max")
    }"""
    mod = relvm.parse(text)
    assert str(mod["main"].checked_type.ret) == "Tensor[(n, 5), float32]"
    assert relvm.parse(relvm.print_module(mod)) == mod
    # Saved and loaded: the loader checks each kernel entry by its dtypes and ranks alone, so
    # gather_nd's entry records index_rank (here m is a symbol).
    path = tmp_path / "gather_scatter.relvm"
    relvm.build(mod, backend="numpy").save(path)
    vm = relvm.VirtualMachine(relvm.load(path))
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    i = np.array([[0, -1], [2, 2], [4, 1]])
    t = np.array([[0, 2, -1], [4, -5, 3]])
    u = np.array([7, -8, 9], np.float32)
    got = vm.invoke("main", x, i, t, u)
    want = run("scatter_nd", run("scatter_elements", x, i, run("gather", x, i, axis=1), axis=1,
                                 reduction="add"), t, u, mode="max")
    np.testing.assert_array_equal(got, want)
    with pytest.raises(relvm.RelvmRuntimeError, match=r"gather: index 5 is out of range for "
                                                      r"axis 1 of size 5"):
        vm.invoke("main", x, np.array([[0, 5], [0, 0], [0, 0]]), t, u)


# --- references against loops --------------------------------------------------------------------

def _wrap(i, dim):
    return i + dim if i < 0 else i


def _gather_loop(x, idx, axis):
    out = np.empty(idx.shape, x.dtype)
    for pos in itertools.product(*map(range, idx.shape)):
        src = list(pos)
        src[axis] = _wrap(int(idx[pos]), x.shape[axis])
        out[pos] = x[tuple(src)]
    return out


def _gather_nd_loop(x, idx, b):
    """ONNX GatherND (tuples along the last axis of idx), written out."""
    m = idx.shape[-1]
    out = np.empty(idx.shape[:-1] + x.shape[b + m:], x.dtype)
    for pos in itertools.product(*map(range, idx.shape[:-1])):
        src = pos[:b] + tuple(_wrap(int(c), x.shape[b + j]) for j, c in enumerate(idx[pos]))
        out[pos] = x[src]
    return out


def _combine(a, v, reduction):
    return {"update": lambda: v, "add": lambda: a + v, "mul": lambda: a * v,
            "min": lambda: np.minimum(a, v), "max": lambda: np.maximum(a, v)}[reduction]()


def _scatter_elements_loop(x, idx, upd, axis, reduction):
    out = x.copy()
    for pos in itertools.product(*map(range, idx.shape)):
        dst = list(pos)
        dst[axis] = _wrap(int(idx[pos]), x.shape[axis])
        out[tuple(dst)] = _combine(out[tuple(dst)], upd[pos], reduction)
    return out


def _scatter_nd_loop(x, idx, upd, reduction):
    """ONNX ScatterND (tuples along the last axis of idx), written out."""
    out = x.copy()
    for pos in itertools.product(*map(range, idx.shape[:-1])):
        dst = tuple(_wrap(int(c), x.shape[j]) for j, c in enumerate(idx[pos]))
        out[dst] = _combine(out[dst], upd[pos], reduction)
    return out


def _indices(shape, dim):
    return RNG.integers(-dim, dim, shape)


@pytest.mark.parametrize("shape, ishape, axis", [((4, 5), (3, 5), 0), ((4, 5), (2, 3), 1),
                                                 ((3, 4, 5), (3, 6, 2), 1), ((6,), (4,), 0)])
def test_gather_reference(shape, ishape, axis):
    x = RNG.standard_normal(shape).astype(np.float32)
    idx = _indices(ishape, shape[axis])
    np.testing.assert_array_equal(run("gather", x, idx, axis=axis), _gather_loop(x, idx, axis))


@pytest.mark.parametrize("shape, ishape, b", [
    ((4, 5), (3, 2), 0), ((4, 5), (2, 3, 1), 0), ((2, 4, 5), (2, 3, 1), 1),
    ((2, 3, 4, 5), (2, 3, 2), 2), ((2, 3, 4), (2, 2, 3), 0)])
def test_gather_nd_reference(shape, ishape, b):
    x = RNG.standard_normal(shape).astype(np.float32)
    m = ishape[-1]
    idx = np.stack([_indices(ishape[:-1], shape[b + j]) for j in range(m)], axis=-1)
    for j in range(b):  # batch coordinates are positions, not indices
        assert ishape[j] == shape[j]
    relay = np.moveaxis(idx, -1, 0)
    np.testing.assert_array_equal(run("gather_nd", x, relay, batch_dims=b),
                                  _gather_nd_loop(x, idx, b))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape, ishape, axis", [((4, 5), (6, 5), 0), ((4, 5), (2, 7), 1),
                                                 ((3, 4, 5), (2, 6, 3), 1)])
def test_scatter_elements_reference(reduction, shape, ishape, axis):
    x = RNG.standard_normal(shape).astype(np.float32)
    idx = _indices(ishape, 2)  # few targets: many duplicates, so order matters
    upd = RNG.standard_normal(ishape).astype(np.float32)
    np.testing.assert_array_equal(
        run("scatter_elements", x, idx, upd, axis=axis, reduction=reduction),
        _scatter_elements_loop(x, idx, upd, axis, reduction))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape, ishape", [((4, 5), (6, 2)), ((4, 5), (3, 1)),
                                           ((3, 4, 5), (2, 3, 2)), ((6,), (9, 1))])
def test_scatter_nd_reference(reduction, shape, ishape):
    x = RNG.standard_normal(shape).astype(np.float32)
    m = ishape[-1]
    idx = np.stack([_indices(ishape[:-1], min(shape[j], 2)) for j in range(m)], axis=-1)
    upd = RNG.standard_normal(ishape[:-1] + shape[m:]).astype(np.float32)
    np.testing.assert_array_equal(
        run("scatter_nd", x, np.moveaxis(idx, -1, 0), upd, mode=reduction),
        _scatter_nd_loop(x, idx, upd, reduction))


@pytest.mark.parametrize("op, arrays, attrs, message", [
    ("gather", [np.zeros((2, 3)), np.array([[0, 3]])], dict(axis=1),
     r"gather: index 3 is out of range for axis 1 of size 3"),
    ("gather", [np.zeros((2, 3)), np.array([[-3, -4]])], dict(axis=1), r"index -4 is out"),
    ("gather_nd", [np.zeros((2, 3)), np.array([[1], [-4]])], {},
     r"gather_nd: index -4 is out of range for axis 1 of size 3"),
    ("scatter_elements", [np.zeros(3), np.array([3]), np.ones(1)], {},
     r"scatter_elements: index 3 is out of range for axis 0 of size 3"),
    ("scatter_nd", [np.zeros((2, 3)), np.array([[2]]), np.ones((1, 3))], {},
     r"scatter_nd: index 2 is out of range for axis 0 of size 2"),
    ("gather", [np.zeros((2, 3)), np.zeros((2, 4), np.int64)], {},
     r"longer than data \(2, 3\) along axis 1"),
])
def test_reference_errors(op, arrays, attrs, message):
    with pytest.raises(ValueError, match=message):
        run(op, *arrays, **attrs)


# --- tensor_scatter ------------------------------------------------------------------------------

def test_tensor_scatter_types_and_errors():
    b, s, m = Sym("b"), Sym("s"), Sym("m")
    assert infer("tensor_scatter", T((b, 2, m, 8)), T((b, 2, s, 8)), T((b,), "int64")) == \
        T((b, 2, m, 8))
    assert infer("tensor_scatter", T((3, 4, 5)), T((3, 2, 5)), T((), "int64"), axis=1) == \
        T((3, 4, 5))
    for types, attrs, message in [
        ((T((3, 4, 5)), T((3, 2, 5)), T((3,), "int64")), {"axis": 0}, "axis must not be 0"),
        ((T((3, 4, 5)), T((3, 2, 6)), T((3,), "int64")), {"axis": 1},
         r"update \(3, 2, 6\) must have data's shape \(3, 4, 5\) but along axis 1"),
        ((T((3, 4, 5)), T((3, 6, 5)), T((3,), "int64")), {"axis": 1},
         "update's length 6 along axis 1 is past data's 4"),
        ((T((3, 4, 5)), T((3, 2, 5)), T((2,), "int64")), {"axis": 1},
         r"write_indices must be a scalar or one index per batch \(\(3\)\), got \(2\)"),
        ((T((3, 4, 5)), T((3, 2, 5), "float64"), T((3,), "int64")), {"axis": 1},
         "dtypes differ"),
    ]:
        with pytest.raises(OpTypeError, match=message):
            infer("tensor_scatter", *types, **attrs)


def _tensor_scatter_loop(x, u, starts, axis, circular):
    """ONNX's definition, element by element."""
    out = x.copy()
    for idx in np.ndindex(*u.shape):
        p = starts[idx[0]] + idx[axis]
        out[idx[:axis] + (p % x.shape[axis] if circular else p,) + idx[axis + 1:]] = u[idx]
    return out


@pytest.mark.parametrize("axis", [1, 2, -1, -2])
@pytest.mark.parametrize("circular", [False, True])
def test_tensor_scatter_reference_against_a_loop(axis, circular):
    x = RNG.standard_normal((3, 4, 6, 5)).astype(np.float32)
    shape = list(x.shape)
    shape[axis] = 3
    u = RNG.standard_normal(shape).astype(np.float32)
    length = x.shape[axis]
    starts = np.array([0, length - 3, 5 if circular else 1])
    if circular:
        starts[1] = -7
    got = run("tensor_scatter", x, u, starts, axis=axis, circular=circular)
    np.testing.assert_array_equal(got, _tensor_scatter_loop(x, u, starts, axis % 4, circular))
    if not circular:
        with pytest.raises(ValueError, match=rf"tensor_scatter: index {length} "
                                             rf"\(write_indices\[0\] {length - 2} \+ 2\) is out "
                                             rf"of range for axis {axis % 4} of size {length}"):
            run("tensor_scatter", x, u, np.array([length - 2, 0, 0]), axis=axis)
