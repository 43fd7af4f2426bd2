"""C kernels of gather, gather_nd, scatter_elements and scatter_nd against their references:
every dtype, both index dtypes, negative indices, duplicates, empty tensors, and a bad index
that must be an error naming it (never a read or write outside the tensor)."""

import numpy as np
import pytest

from relvm.dtypes import DTYPES as ALL_DTYPES
from relvm.ops import OPS
from relvm.ops.gather_scatter import REDUCTIONS

DTYPES = list(ALL_DTYPES)


def _indices(rng, shape, dim, dtype):
    """In-range indices, negative ones included (each counts from the end once)."""
    if dim == 0:
        return np.zeros(shape, dtype)
    return rng.integers(-dim, dim, shape).astype(dtype)


# --- gather (ONNX GatherElements) ----------------------------------------------------------------

GATHERS = [((4, 5), (3, 5), 0), ((4, 5), (4, 7), 1), ((3, 4, 5), (2, 3, 5), 1),
           ((3, 4, 5), (3, 4, 2), -1), ((2, 3, 4, 5), (2, 2, 3, 5), 0), ((6,), (9,), 0),
           ((0, 3), (0, 3), 0), ((3, 4), (3, 0), 1), ((300, 260), (300, 260), 0)]


@pytest.mark.parametrize("shape,ishape,axis", GATHERS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_gather(check, rand, rng, shape, ishape, axis, dtype, index_dtype):
    check("gather", {"axis": axis}, [rand(shape, dtype), _indices(rng, ishape, shape[axis],
                                                                   index_dtype)])


@pytest.mark.parametrize("shape,ishape,axis", [((4, 5), (2, 3), 0), ((3, 4, 5), (2, 3, 2), 2),
                                               ((3, 4, 5), (1, 7, 3), 1)], ids=str)
def test_gather_with_indices_shorter_than_data(check, rand, rng, shape, ishape, axis):
    check("gather", {"axis": axis}, [rand(shape), _indices(rng, ishape, shape[axis], "int64")])


# --- scatter_elements ----------------------------------------------------------------------------

SCATTERS = [((4, 5), (3, 5), 0), ((4, 5), (4, 7), 1), ((3, 4, 5), (2, 3, 5), 1),
            ((3, 4, 5), (3, 4, 2), -1), ((3, 4, 5), (1, 3, 2), 1), ((6,), (9,), 0),
            ((0, 3), (0, 3), 0), ((3, 4), (3, 0), 1), ((64, 600), (40, 600), 0)]


@pytest.mark.parametrize("shape,ishape,axis", SCATTERS, ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_elements(check, rand, rng, shape, ishape, axis, reduction, dtype):
    # Few distinct targets: duplicates everywhere, so the order of the updates shows.
    idx = _indices(rng, ishape, min(shape[axis], 3), "int64") % max(shape[axis], 1)
    args = [rand(shape, dtype), idx, rand(ishape, dtype)]
    check("scatter_elements", {"axis": axis, "reduction": reduction}, args)
    check("scatter_elements", {"axis": axis, "reduction": reduction},
          [args[0], idx.astype(np.int32) - shape[axis] * (idx % 2), args[2]])


def test_scatter_elements_last_update_wins(c_kernel):
    kernel = c_kernel("scatter_elements", {"axis": 1}, ["float32", "int64", "float32"],
                      ["float32"])
    out = np.empty((1, 5), np.float32)
    kernel(np.zeros((1, 5), np.float32), np.array([[1, 3, 1, -4]]),
           np.array([[1, 2, 3, 4]], np.float32), out)
    np.testing.assert_array_equal(out, [[0, 4, 0, 2, 0]])


def test_scatter_reductions_propagate_nan_and_wrap(check):
    x = np.array([1.0, np.nan, 3.0], np.float32)
    idx = np.array([0, 0, 2, 2], np.int64)
    upd = np.array([np.nan, 2.0, 1.0, 5.0], np.float32)
    for reduction in ("min", "max", "add", "mul"):
        check("scatter_elements", {"reduction": reduction}, [x, idx, upd])
    ints = np.array([120, -128], np.int8)
    check("scatter_elements", {"reduction": "add"}, [ints, np.array([0, 1, 0]),
                                                     np.array([10, -1, 100], np.int8)])
    check("scatter_elements", {"reduction": "mul"}, [ints, np.array([0, 1]),
                                                     np.array([3, -1], np.int8)])
    # uint16 products past an int (a uint16_t would promote to one); uint64's top half
    for dtype in ("uint16", "uint32", "uint64", "int16"):
        info = np.iinfo(dtype)
        data = np.array([info.max, info.min, info.max // 2 + 1], dtype)
        upd = np.array([info.max, 3, info.max, info.min, 7], dtype)
        for reduction in ("add", "mul", "min", "max"):
            check("scatter_elements", {"reduction": reduction},
                  [data, np.array([0, 1, 0, 2, 2]), upd])
            check("scatter_nd", {"mode": reduction},
                  [data, np.array([[0, 1, 0, 2, 2]]), upd])


# --- gather_nd -----------------------------------------------------------------------------------

# (data shape, indices shape in Relay's layout (M, ...), batch_dims)
GATHER_NDS = [((4, 5), (2, 3), 0), ((4, 5), (1, 3), 0), ((4, 5, 6), (2, 2, 2), 0),
              ((4, 5, 6), (3, 7), 0), ((2, 5, 6), (1, 2, 4), 1), ((2, 3, 5, 6), (2, 2, 3, 4), 2),
              ((2, 3, 5, 6), (1, 2, 3), 2), ((4, 5), (2,), 0), ((4, 5), (0, 3), 0),
              ((3, 0), (1, 2), 0), ((4, 5), (2, 0), 0), ((200, 300), (1, 500), 0)]


@pytest.mark.parametrize("shape,ishape,b", GATHER_NDS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_gather_nd(check, rand, rng, shape, ishape, b, dtype, index_dtype):
    m = ishape[0]
    idx = np.stack([_indices(rng, ishape[1:], shape[b + j], index_dtype) for j in range(m)]) \
        if m else np.zeros(ishape, index_dtype)
    check("gather_nd", {"batch_dims": b}, [rand(shape, dtype), idx.reshape(ishape)])


# --- scatter_nd ----------------------------------------------------------------------------------

# (data shape, indices shape (M, ...)): updates are indices.shape[1:] + data.shape[M:]
SCATTER_NDS = [((4, 5), (2, 3)), ((4, 5), (1, 6)), ((4, 5, 6), (2, 2, 2)), ((4, 5, 6), (3, 7)),
               ((8,), (1, 12)), ((4, 5), (0, 3)), ((4, 5), (2, 0)), ((3, 0), (1, 2)),
               ((50, 2000), (1, 30))]


@pytest.mark.parametrize("shape,ishape", SCATTER_NDS, ids=str)
@pytest.mark.parametrize("mode", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_nd(check, rand, rng, shape, ishape, mode, dtype):
    m = ishape[0]
    # Few distinct tuples: duplicates everywhere.
    idx = np.stack([_indices(rng, ishape[1:], min(shape[j], 2), "int64") for j in range(m)]) \
        if m else np.zeros(ishape, np.int64)
    updates = rand(ishape[1:] + shape[m:], dtype)
    check("scatter_nd", {"mode": mode}, [rand(shape, dtype), idx.reshape(ishape), updates])


# --- bad indices ---------------------------------------------------------------------------------

BAD = [
    ("gather", {"axis": 1}, [np.zeros((2, 4), np.float32), np.array([[0, 4], [1, 0]])],
     (2, 2), r"gather: index 4 is out of range for axis 1 of size 4"),
    ("gather", {"axis": 0}, [np.zeros((3, 2), np.int8), np.array([[-4, 0]], np.int32)],
     (1, 2), r"gather: index -4 is out of range for axis 0 of size 3"),
    ("gather_nd", {}, [np.zeros((3, 4), np.float64), np.array([[0, 2], [1, 9]])],
     (2,), r"gather_nd: index 9 is out of range for axis 1 of size 4"),
    ("gather_nd", {"batch_dims": 1}, [np.zeros((2, 3, 4), np.float32),
                                      np.array([[[0], [-5]]], np.int32)],
     (2, 1, 4), r"gather_nd: index -5 is out of range for axis 1 of size 3"),
    ("scatter_elements", {"axis": 0}, [np.zeros((3,), np.float32), np.array([1, 3]),
                                       np.ones(2, np.float32)],
     (3,), r"scatter_elements: index 3 is out of range for axis 0 of size 3"),
    ("scatter_elements", {"axis": 0, "reduction": "add"},
     [np.zeros((3,), np.int32), np.array([2**40]), np.ones(1, np.int32)],
     (3,), r"index 1099511627776 is out of range"),
    ("scatter_nd", {}, [np.zeros((3, 4), np.float32), np.array([[0, 2], [1, -6]]),
                        np.ones((2,), np.float32)],
     (3, 4), r"scatter_nd: index -6 is out of range for axis 1 of size 4"),
    ("scatter_nd", {"mode": "max"}, [np.zeros((0, 4), np.uint8), np.array([[0]], np.int32),
                                     np.ones((1, 4), np.uint8)],
     (0, 4), r"scatter_nd: index 0 is out of range for axis 0 of size 0"),
]


@pytest.mark.parametrize("op,attrs,arrays,out_shape,message", BAD,
                         ids=[f"{case[0]}-{i}" for i, case in enumerate(BAD)])
def test_a_bad_index_is_an_error_naming_it(c_kernel, op, attrs, arrays, out_shape, message):
    ins = [a.dtype.name for a in arrays]
    kernel = c_kernel(op, attrs, ins, [ins[0]])
    out = np.zeros(out_shape, arrays[0].dtype)
    with pytest.raises(ValueError, match=message):
        kernel(*arrays, out)
    with pytest.raises(ValueError, match=message):  # the reference says the same
        OPS[op].reference(OPS[op].make_attrs(attrs), *arrays)


# --- tensor_scatter ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "int64", "bool"])
@pytest.mark.parametrize("circular", [False, True])
def test_tensor_scatter(check, rng, dtype, circular):
    for shape, axis, count in [((2, 1, 4, 5), -2, 1), ((3, 4, 5), 1, 2), ((2, 3, 7), -1, 7),
                               ((2, 2, 3, 4, 2), 2, 2), ((0, 4, 5), 1, 2), ((2, 4, 0), 1, 3)]:
        x = (rng.standard_normal(shape) * 9).astype(dtype)
        ushape = list(shape)
        ushape[axis] = count
        u = (rng.standard_normal(ushape) * 9).astype(dtype)
        length = shape[axis]
        if circular:
            starts = rng.integers(-20, 20, shape[0])
        else:
            starts = rng.integers(0, length - count + 1, shape[0])
        for w in (starts, starts[:1].reshape(()) if shape[0] else np.zeros((), np.int64)):
            check("tensor_scatter", {"axis": axis, "circular": circular}, [x, u, w])


def test_tensor_scatter_bad_index(c_kernel):
    run = c_kernel("tensor_scatter", {"axis": 1}, ["float32", "float32", "int64"], ["float32"])
    x, u = np.zeros((2, 4, 3), np.float32), np.ones((2, 2, 3), np.float32)
    for starts, message in [([0, 3], r"index 4 \(write_indices\[1\] 3 \+ 1\)"),
                            ([-1, 0], r"index -1 \(write_indices\[0\] -1 \+ 0\)"),
                            ([2**63 - 1, 0], r"index 9223372036854775807 \(write_indices\[0\]")]:
        with pytest.raises(ValueError, match="tensor_scatter: " + message):
            run(x, u, np.array(starts, np.int64), np.zeros_like(x))
