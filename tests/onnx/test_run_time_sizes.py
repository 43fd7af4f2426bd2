"""Sizes an export computes at run time (issue 46): Resize's ``sizes`` from another tensor's
shape or fed as an input, Pad in every mode by widths computed from shapes ("pad to a multiple
of 8"), OneHot's depth from a shape. Each is built once with symbolic dims, keeps exact dims
where the sizes are known as dims, and matches ONNX Runtime at several sizes on the build users
get; a bad run-time size is an error naming the node."""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm.errors import RelvmError

pytest.importorskip("onnx.helper")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from relvm.frontend.onnx import from_onnx  # noqa: E402


def _model(nodes, inputs, inits):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(name, dtype, shape)
                     for name, dtype, shape in inputs],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    return m


def _run_both(m, feeds_list):
    mod, params = from_onnx(m)
    vm = relvm.VirtualMachine(relvm.build(mod, params=params))
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for feeds in feeds_list:
        got = vm.invoke("main", *feeds.values())
        want = session.run(None, feeds)[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    return mod, vm


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("ctm", ["half_pixel", "align_corners", "asymmetric"])
def test_resize_to_another_tensors_shape_keeps_exact_dims(mode, ctm):
    """``F.interpolate(x, size=y.shape[-2:])``: Shape, Slice, Concat with N and C."""
    nodes = [helper.make_node("Shape", ["x"], ["sx"]),
             helper.make_node("Slice", ["sx", "z", "two"], ["nc"]),
             helper.make_node("Shape", ["y"], ["sy"]),
             helper.make_node("Slice", ["sy", "two", "four"], ["hw"]),
             helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["out"], mode=mode,
                              coordinate_transformation_mode=ctm)]
    inits = dict(z=np.array([0]), two=np.array([2]), four=np.array([4]))
    m = _model(nodes, [("x", TensorProto.FLOAT, ["n", 3, "h", "w"]),
                       ("y", TensorProto.FLOAT, ["n", 8, "p", "q"])], inits)
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((2, 3, h, w)).astype(np.float32),
              "y": np.zeros((2, 8, p, q), np.float32)}
             for h, w, p, q in [(5, 7, 11, 4), (8, 8, 3, 13), (6, 9, 6, 9)]]
    mod, _ = _run_both(m, feeds)
    assert str(mod["main"].checked_type.ret) == "Tensor[(n, 3, p, q), float32]"


def test_resize_to_sizes_fed_at_run_time():
    nodes = [helper.make_node("Resize", ["x", "", "", "sizes"], ["out"], mode="linear",
                              coordinate_transformation_mode="align_corners")]
    m = _model(nodes, [("x", TensorProto.FLOAT, ["n", 2, "d", "h", "w"]),
                       ("sizes", TensorProto.INT64, [5])], {})
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((1, 2, 3, 5, 4)).astype(np.float32),
              "sizes": np.array(s, np.int64)} for s in ([1, 2, 7, 2, 9], [1, 2, 2, 8, 3])]
    _, vm = _run_both(m, feeds)
    x = feeds[0]["x"]
    with pytest.raises(RelvmError, match="the sizes resize N or C"):
        vm.invoke("main", x, np.array([1, 3, 7, 2, 9], np.int64))
    with pytest.raises(RelvmError, match="size -2 of spatial axis 1 is negative"):
        vm.invoke("main", x, np.array([1, 2, 7, -2, 9], np.int64))


def _pad_to_multiple_of_8(mode: str):
    """``[0, 0, 1, 0, 0, 0, (8 - h % 8) % 8, (8 - w % 8) % 8]``: one static width, the rest
    from the shape."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "two", "four"], ["hw"]),
             helper.make_node("Mod", ["hw", "eight"], ["r"]),
             helper.make_node("Sub", ["eight", "r"], ["p0"]),
             helper.make_node("Mod", ["p0", "eight"], ["p"]),
             helper.make_node("Concat", ["z2", "one", "z1", "z2", "p"], ["pads"], axis=0),
             helper.make_node("Pad", ["x", "pads"], ["out"], mode=mode)]
    inits = dict(two=np.array([2]), four=np.array([4]), eight=np.array([8]),
                 z2=np.array([0, 0]), z1=np.array([0]), one=np.array([1]))
    return _model(nodes, [("x", TensorProto.FLOAT, ["n", 3, "h", "w"])], inits)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
def test_pad_by_widths_from_the_shape(mode):
    rng = np.random.default_rng(2)
    feeds = [{"x": rng.standard_normal((2, 3, h, w)).astype(np.float32)}
             for h, w in [(5, 7), (8, 9), (13, 16), (6, 7)]]
    mod, vm = _run_both(_pad_to_multiple_of_8(mode), feeds)
    if mode == "reflect":  # as the static pad: a width shorter than the axis
        with pytest.raises(RelvmError, match="reflect pad width computed at run time"):
            vm.invoke("main", np.zeros((1, 3, 3, 3), np.float32))


@pytest.mark.parametrize("axis", [-1, 0])
def test_one_hot_depth_from_a_shape(axis):
    nodes = [helper.make_node("Constant", [], ["one"],
                              value=numpy_helper.from_array(np.array(1, np.int64))),
             helper.make_node("Shape", ["y"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["depth"], axis=0),
             helper.make_node("OneHot", ["x", "depth", "values"], ["out"], axis=axis)]
    inits = dict(values=np.array([0.0, 2.0], np.float32))
    m = _model(nodes, [("x", TensorProto.INT64, ["n"]), ("y", TensorProto.FLOAT, ["a", "k"])],
               inits)
    x = np.array([0, 2, -1, 4, 1, -3], np.int64)
    mod, _ = _run_both(m, [{"x": x, "y": np.zeros((2, k), np.float32)} for k in (3, 5, 1)])
    want = "Tensor[(n, k), float32]" if axis == -1 else "Tensor[(k, n), float32]"
    assert str(mod["main"].checked_type.ret) == want


def test_one_hot_depth_fed_at_run_time():
    nodes = [helper.make_node("OneHot", ["x", "depth", "values"], ["out"])]
    m = _model(nodes, [("x", TensorProto.INT64, ["n"]), ("depth", TensorProto.INT64, [1])],
               dict(values=np.array([0.0, 2.0], np.float32)))
    x = np.array([0, 2, -1, 4], np.int64)
    _, vm = _run_both(m, [{"x": x, "depth": np.array([d])} for d in (3, 6)])
    with pytest.raises(RelvmError, match="depth computed at run time is not positive"):
        vm.invoke("main", x, np.array([0]))
