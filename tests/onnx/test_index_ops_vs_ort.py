"""GatherND, GatherElements, ScatterND, ScatterElements, IsNaN, IsInf and ReduceL1/L2/LogSum/
LogSumExp/SumSquare imported from single-node ONNX models with symbolic dims, built once on the
default build (C kernels, fusion on) and run at several shapes against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

import relvm

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would pass
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

from relvm.frontend.onnx import from_onnx  # noqa: E402

RNG = np.random.default_rng(19)
F32, I64 = np.float32, np.int64


def model(op, inputs, attrs, out_dtype, opset, dims=None, constants=None):
    """One node. ``inputs``: name -> example array (its dtype and rank); ``dims``: name -> the
    declared shape (dim_param strings for symbolic dims; default: the example's shape);
    ``constants``: name -> an initializer."""
    dims, constants = dims or {}, constants or {}
    names = list(inputs) + [c for c in constants if c not in inputs]
    order = [nm for nm in attrs.pop("_order", names)]
    graph = helper.make_graph(
        [helper.make_node(op, order, ["out"], **attrs)], "g",
        [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(a.dtype),
                                       dims.get(nm, a.shape)) for nm, a in inputs.items()],
        [helper.make_tensor_value_info("out", helper.np_dtype_to_tensor_dtype(
            np.dtype(out_dtype)), None)],
        initializer=[numpy_helper.from_array(v, nm) for nm, v in constants.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


class Pair:
    """The model on ONNX Runtime and on relvm (imported and built once)."""

    def __init__(self, m):
        self.session = ort.InferenceSession(m.SerializeToString(),
                                            providers=["CPUExecutionProvider"])
        mod, params = from_onnx(m)
        self.mod = mod
        self.vm = relvm.VirtualMachine(relvm.build(mod, params=params))

    def check(self, feeds, rtol=1e-6, atol=0.0):
        want = self.session.run(None, feeds)[0]
        got = self.vm.invoke("main", *feeds.values())
        assert got.dtype == want.dtype and got.shape == want.shape
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(got, want)


def _data(shape, dtype):
    if np.dtype(dtype).kind == "f":
        return RNG.standard_normal(shape).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return RNG.random(shape) < 0.5
    return RNG.integers(-50, 50, shape).astype(dtype)


def _index(shape, dim):
    return RNG.integers(-dim, dim, shape).astype(I64)


# --- GatherND ------------------------------------------------------------------------------------

@pytest.mark.parametrize("opset", [11, 12, 13])
@pytest.mark.parametrize("dtype", [F32, np.int32, np.float16, np.bool_])
def test_gather_nd(opset, dtype):
    m = model("GatherND", {"x": _data((4, 5, 6), dtype), "i": np.zeros((3, 2), I64)}, {},
              dtype, opset, dims={"x": ["n", 5, 6], "i": ["k", 2]})
    pair = Pair(m)
    assert str(pair.mod["main"].checked_type.ret) == f"Tensor[(k, 6), {np.dtype(dtype).name}]"
    for n, k in ((4, 3), (7, 1), (2, 9)):
        idx = np.stack([_index(k, n), _index(k, 5)], axis=-1)
        pair.check({"x": _data((n, 5, 6), dtype), "i": idx})


@pytest.mark.parametrize("opset", [12, 13])
@pytest.mark.parametrize("b, m", [(1, 1), (1, 2), (2, 1)])
def test_gather_nd_batch_dims(opset, b, m):
    data_rank = 4
    ex = {"x": np.zeros((2,) * data_rank, F32), "i": np.zeros((2,) * b + (3, m), I64)}
    batch = [f"b{j}" for j in range(b)]
    mdl = model("GatherND", ex, {"batch_dims": b}, F32, opset,
                dims={"x": batch + [f"d{j}" for j in range(data_rank - b)],
                      "i": batch + ["k", m]})
    pair = Pair(mdl)
    for shape in ((2, 3, 4, 5), (3, 1, 6, 2)):
        k = 4
        idx = np.stack([_index(shape[:b] + (k,), shape[b + j]) for j in range(m)], axis=-1)
        pair.check({"x": _data(shape, F32), "i": idx})


def test_gather_nd_as_torch_exports_index():
    """aten.index with two index tensors: the dynamo export's GatherND (BERT's mask)."""
    ex = {"x": np.zeros((2, 16), F32), "i": np.zeros((2, 1, 16, 2), I64)}
    pair = Pair(model("GatherND", ex, {}, F32, 18,
                      dims={"x": ["batch", "seq"], "i": ["batch", 1, "seq", 2]}))
    for batch, seq in ((2, 16), (3, 5)):
        rows = np.broadcast_to(np.arange(batch)[:, None, None], (batch, 1, seq))
        cols = np.broadcast_to(np.arange(seq)[None, None, :], (batch, 1, seq))
        pair.check({"x": _data((batch, seq), F32), "i": np.stack([rows, cols], -1)})


# --- GatherElements ------------------------------------------------------------------------------

@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [F32, I64, np.int8, np.float16])
def test_gather_elements(opset, axis, dtype):
    ex = {"x": _data((4, 5, 3), dtype), "i": np.zeros((4, 5, 3), I64)}
    pair = Pair(model("GatherElements", ex, {"axis": axis}, dtype, opset,
                      dims={"x": ["a", "b", "c"], "i": ["p", "q", "r"]}))
    for xs, ishape in (((4, 5, 3), (4, 5, 3)), ((6, 2, 7), (6, 2, 7)), ((6, 5, 7), (3, 4, 2))):
        shape = list(ishape)
        shape[axis] = 9  # indices may be longer along the axis, and shorter off it
        pair.check({"x": _data(xs, dtype), "i": _index(shape, xs[axis])})


# --- ScatterElements / ScatterND -----------------------------------------------------------------

REDUCTIONS = ["none", "add", "mul", "max", "min"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [F32, np.int32, I64])
def test_scatter_elements(reduction, axis, dtype):
    ex = {"x": _data((4, 5, 3), dtype), "i": np.zeros((2, 5, 3), I64),
          "u": _data((2, 5, 3), dtype)}
    pair = Pair(model("ScatterElements", ex, {"axis": axis, "reduction": reduction}, dtype, 18,
                      dims={"x": ["a", "b", "c"], "i": ["p", "q", "r"], "u": ["p", "q", "r"]}))
    for xs, ishape in (((4, 5, 3), (2, 5, 3)), ((6, 3, 7), (6, 3, 7)), ((6, 5, 7), (3, 4, 2))):
        shape = list(ishape)
        shape[axis] = 8
        # Two targets per line along the axis: duplicates everywhere.
        pair.check({"x": _data(xs, dtype), "i": _index(shape, 2) % xs[axis],
                    "u": _data(shape, dtype)}, rtol=1e-5)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("m", [1, 2, 3])
def test_scatter_nd(reduction, m):
    ex = {"x": np.zeros((4, 5, 6), F32), "i": np.zeros((3, m), I64),
          "u": np.zeros((3,) + (4, 5, 6)[m:], F32)}
    pair = Pair(model("ScatterND", ex, {"reduction": reduction}, F32, 18,
                      dims={"x": ["a", "b", "c"], "i": ["k", m],
                            "u": ["k"] + ["a", "b", "c"][m:]}))
    for shape, k in (((4, 5, 6), 3), ((3, 2, 7), 10), ((5, 4, 2), 1)):
        # Few distinct tuples (and negative ones): duplicates, applied in order.
        idx = np.stack([_index(k, min(shape[j], 2)) for j in range(m)], axis=-1)
        pair.check({"x": _data(shape, F32), "i": idx, "u": _data((k,) + shape[m:], F32)},
                   rtol=1e-5)


def test_scatter_opset_10_and_11_forms():
    ex = {"x": _data((3, 4), F32), "i": np.array([[1, -1], [0, 2]], I64),
          "u": _data((2, 2), F32)}
    for op, opset in (("Scatter", 10), ("ScatterElements", 11)):
        Pair(model(op, ex, {"axis": 1}, F32, opset)).check(dict(ex))
    idx = np.array([[[0], [2]]], I64)
    Pair(model("ScatterND", {"x": ex["x"], "i": idx, "u": _data((1, 2, 4), F32)}, {}, F32,
               11)).check({"x": ex["x"], "i": idx, "u": _data((1, 2, 4), F32)})


# --- bad indices at run time ---------------------------------------------------------------------

@pytest.mark.parametrize("op, feeds, message", [
    ("GatherND", {"x": np.zeros((3, 4), F32), "i": np.array([[0, 1], [3, 0]], I64)},
     r"gather_nd: index 3 is out of range for axis 0 of size 3"),
    ("GatherElements", {"x": np.zeros((3, 4), F32), "i": np.array([[0, -5]], I64)},
     r"gather: index -5 is out of range for axis 0 of size 3"),
    ("ScatterND", {"x": np.zeros((3, 4), F32), "i": np.array([[1, 4]], I64),
                   "u": np.ones(1, F32)},
     r"scatter_nd: index 4 is out of range for axis 1 of size 4"),
    ("ScatterElements", {"x": np.zeros((3, 4), F32), "i": np.array([[7]], I64),
                         "u": np.ones((1, 1), F32)},
     r"scatter_elements: index 7 is out of range for axis 0 of size 3"),
])
def test_a_bad_index_is_a_runtime_error(op, feeds, message):
    dims = {k: [f"{k}{j}" for j in range(v.ndim)] for k, v in feeds.items()}
    if op in ("GatherND", "ScatterND"):
        dims["i"][-1] = feeds["i"].shape[-1]
    mod, params = from_onnx(model(op, feeds, {}, F32, 18, dims=dims))
    vm = relvm.VirtualMachine(relvm.build(mod, params=params))
    with pytest.raises(relvm.RelvmRuntimeError, match=message):
        vm.invoke("main", *feeds.values())


# --- IsNaN / IsInf -------------------------------------------------------------------------------

SPECIAL = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -3.5, 6e4, -1e-4]


@pytest.mark.parametrize("dtype", [F32, np.float64, np.float16])
@pytest.mark.parametrize("op, attrs", [("IsNaN", {}), ("IsInf", {}),
                                       ("IsInf", {"detect_negative": 0}),
                                       ("IsInf", {"detect_positive": 0}),
                                       ("IsInf", {"detect_positive": 0, "detect_negative": 0})])
def test_isnan_isinf(dtype, op, attrs):
    pair = Pair(model(op, {"x": np.zeros((2, 5), dtype)}, dict(attrs), np.bool_, 20,
                      dims={"x": ["n", "m"]}))
    x = np.array(SPECIAL, dtype)
    for shape in ((2, 5), (5, 2), (1, 10)):
        pair.check({"x": x.reshape(shape)})


def test_isnan_feeding_where_is_one_fused_kernel():
    """The legacy BERT export's pattern: where(isnan(x), 0, x)."""
    nodes = [helper.make_node("IsNaN", ["x"], ["m"]),
             helper.make_node("Where", ["m", "zero", "x"], ["out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, ["n"])],
                              [helper.make_tensor_value_info("out", 1, None)],
                              initializer=[numpy_helper.from_array(np.zeros((), F32), "zero")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    pair = Pair(m)
    exe = relvm.build(pair.mod, params=from_onnx(m)[1])
    assert sum("fused" in line for line in str(exe.bytecode).splitlines()
               if "invoke_packed" in line) == 1
    pair.check({"x": np.array(SPECIAL, F32)})


# --- ReduceL1, L2, LogSum, LogSumExp, SumSquare --------------------------------------------------

NORMS = ["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


def _norm_model(op, dtype, opset, axes, keepdims, noop=None):
    attrs = {"keepdims": keepdims}
    if noop is not None:
        attrs["noop_with_empty_axes"] = noop
    constants = {}
    if axes is not None and opset >= 18:
        constants["axes"] = np.array(axes, I64)
        attrs["_order"] = ["x", "axes"]
    elif axes is not None:
        attrs["axes"] = axes
    return model(op, {"x": np.zeros((3, 4, 5), dtype)}, attrs, dtype, opset,
                 dims={"x": ["a", "b", "c"]}, constants=constants)


def _norm_data(op, shape, dtype):
    if op == "ReduceLogSum":  # a positive sum
        return RNG.uniform(0.1, 3, shape).astype(dtype) if np.dtype(dtype).kind == "f" \
            else RNG.integers(1, 20, shape).astype(dtype)
    if op == "ReduceLogSumExp" and np.dtype(dtype).kind == "f":
        return (RNG.standard_normal(shape) * 40).astype(dtype)  # exp overflows float32
    return _data(shape, dtype)


@pytest.mark.parametrize("op", NORMS)
@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("axes, keepdims", [([1], 1), ([0, -1], 0), (None, 1), (None, 0),
                                            ([2], 0)], ids=str)
def test_reductions(op, opset, axes, keepdims):
    pair = Pair(_norm_model(op, F32, opset, axes, keepdims))
    for shape in ((3, 4, 5), (1, 7, 2), (6, 1, 9)):
        pair.check({"x": _norm_data(op, shape, F32)}, rtol=2e-6)


@pytest.mark.parametrize("op", NORMS)
@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, I64])
def test_reduction_dtypes(op, dtype):
    pair = Pair(_norm_model(op, dtype, 18, [1, 2], 0))
    for shape in ((3, 4, 5), (2, 1, 3)):
        pair.check({"x": _norm_data(op, shape, dtype)},
                   rtol=2e-3 if dtype == np.float16 else 1e-7)


@pytest.mark.parametrize("op", NORMS)
def test_reductions_over_no_axes(op):
    pair = Pair(_norm_model(op, F32, 18, [], 1, noop=1))
    pair.check({"x": _norm_data(op, (2, 3, 4), F32)})
    Pair(_norm_model(op, F32, 18, [], 0, noop=0)).check({"x": _norm_data(op, (2, 3, 4), F32)},
                                                        rtol=2e-6)


def test_reduce_log_sum_exp_is_stable():
    pair = Pair(_norm_model("ReduceLogSumExp", F32, 18, [2], 0))
    x = np.array([[[1000, 1000, -1000], [-np.inf, -np.inf, -np.inf], [88, 89, 90]]], F32)
    pair.check({"x": x})


# --- Gather ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_counts_negative_indices_from_the_end(axis):
    x = _data((4, 5, 3), "float32")
    dim = x.shape[axis]
    pair = Pair(model("Gather", {"x": x, "i": _index((2, 3), dim)}, {"axis": axis}, "float32",
                      13, dims={"x": ["a", "b", "c"], "i": ["m", "n"]}))
    for shape in ((2, 3), (1, 1), (4, 1)):
        pair.check({"x": x, "i": _index(shape, dim)})


@pytest.mark.parametrize("bad", [5, -6])
def test_gather_index_outside_the_axis_is_a_run_time_error(bad):
    # ONNX Runtime refuses it too; relvm once wrapped it around, silently
    x = _data((3, 5), "float32")
    pair = Pair(model("Gather", {"x": x, "i": np.array([0, 1], I64)}, {"axis": 1}, "float32",
                      13, dims={"i": ["n"]}))
    with pytest.raises(relvm.RelvmRuntimeError, match=f"index {bad} is out of range for an "
                                                      "axis of size 5"):
        pair.vm.invoke("main", x, np.array([0, bad], I64))
