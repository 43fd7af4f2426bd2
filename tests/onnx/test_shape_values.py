"""Shape inputs whose values are computed (issue 19, item 4): Pad's widths and Split's sizes
computed from a graph's symbolic dims (as torch's and onnx's own expansions of Attention and
RotaryEmbedding do), or fed at run time. One build per model, every graph dim symbolic, run at
several shapes against ONNX Runtime; what cannot run is a relvm error naming the node."""

from __future__ import annotations

import numpy as np
import pytest

import relvm

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would pass
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from relvm.errors import RelvmRuntimeError  # noqa: E402
from relvm.frontend.onnx import RelvmImportError, from_onnx  # noqa: E402


def _model(nodes, inputs, outputs, initializers=(), opset=18):
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_empty_tensor_value_info(o)
                                                   for o in outputs],
                              initializer=[numpy_helper.from_array(np.asarray(v), k)
                                           for k, v in initializers])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def _float(name, dims):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def _build(m):
    mod, params = from_onnx(m)
    return relvm.VirtualMachine(relvm.build(mod, params=params))


def _check(m, vm, feeds: dict):
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    got = vm.invoke("main", *feeds.values())
    got = list(got) if isinstance(got, tuple) else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def _shape_entry(x: str, axis: int, out: str) -> list:
    """Nodes computing dim ``axis`` of ``x`` as a 1-element int64 tensor ``out``."""
    return [helper.make_node("Shape", [x], [f"{out}_s"]),
            helper.make_node("Gather", [f"{out}_s", f"ax{axis}"], [out], axis=0)]


def _mask_padded_to_keys():
    """An attention mask (b, q) padded on the right to the keys' length kv: width kv - q."""
    nodes = (_shape_entry("keys", 1, "kv") + _shape_entry("mask", 1, "q") + [
        helper.make_node("Sub", ["kv", "q"], ["width"]),
        helper.make_node("Concat", ["zero", "zero", "zero", "width"], ["pads"], axis=0),
        helper.make_node("Pad", ["mask", "pads", "fill"], ["padded"]),
        helper.make_node("Add", ["padded", "keys"], ["y"])])
    return _model(nodes, [_float("mask", ["b", "q"]), _float("keys", ["b", "kv"])], ["y"],
                  [("ax1", np.array([1], np.int64)), ("zero", np.array([0], np.int64)),
                   ("fill", np.array(-1.5, np.float32))])


def test_pad_by_a_width_computed_from_symbolic_dims():
    m = _mask_padded_to_keys()
    vm = _build(m)
    rng = np.random.default_rng(0)
    for b, q, kv in ((1, 3, 7), (2, 5, 5), (4, 1, 9)):
        _check(m, vm, {"mask": rng.standard_normal((b, q)).astype(np.float32),
                       "keys": rng.standard_normal((b, kv)).astype(np.float32)})


def test_padding_by_a_dim_gives_exact_dims():
    # x (n, h) padded after its last axis by h (a width that cannot be negative): (n, 2*h),
    # the type a static pad would have, so no run-time check is left
    nodes = _shape_entry("x", 1, "h") + [
        helper.make_node("Concat", ["zero", "zero", "zero", "h"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["y"])]
    m = _model(nodes, [_float("x", ["n", "h"])], ["y"], [("ax1", np.array([1], np.int64)),
                                                        ("zero", np.array([0], np.int64))])
    mod, params = from_onnx(m)
    exe = relvm.build(mod, params=params)
    assert [(o.name, o.shape) for o in relvm.InferenceSession(exe).get_outputs()] == [
        ("y", ["n", "h*2"])]
    vm = relvm.VirtualMachine(exe)
    for n, h in ((1, 1), (2, 3)):
        _check(m, vm, {"x": np.arange(n * h, dtype=np.float32).reshape(n, h)})


def test_a_negative_computed_pad_width_is_a_run_time_error():
    vm = _build(_mask_padded_to_keys())
    mask, keys = np.zeros((1, 5), np.float32), np.zeros((1, 3), np.float32)
    with pytest.raises(RelvmRuntimeError, match="pad width computed at run time is negative"):
        vm.invoke("main", mask, keys)


def test_pads_fed_at_run_time():
    nodes = [helper.make_node("Pad", ["x", "pads", "fill"], ["y"])]
    m = _model(nodes, [_float("x", ["n", "c"]),
                       helper.make_tensor_value_info("pads", TensorProto.INT64, [4])],
               ["y"], [("fill", np.array(2.0, np.float32))])
    vm = _build(m)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for pads in ([0, 1, 2, 3], [1, 0, 0, 2], [0, 0, 0, 0]):
        _check(m, vm, {"x": x, "pads": np.array(pads, np.int64)})


def test_edge_padding_by_widths_fed_at_run_time():
    """Edge padding by widths only known when it runs gathers clamped indices (issue 46)."""
    nodes = [helper.make_node("Pad", ["x", "pads"], ["y"], mode="edge", name="edge_pad")]
    m = _model(nodes, [_float("x", ["n"]),
                       helper.make_tensor_value_info("pads", TensorProto.INT64, [2])], ["y"])
    vm = _build(m)
    x = np.arange(1, 6, dtype=np.float32)
    for widths in ([2, 0], [0, 3], [1, 4]):
        np.testing.assert_array_equal(vm.invoke("main", x, np.array(widths)),
                                      np.pad(x, widths, mode="edge"))
    with pytest.raises(RelvmRuntimeError, match="Pad node 'edge_pad': a pad width computed at run "
                                               "time is negative"):
        vm.invoke("main", x, np.array([-1, 0]))


def _split_head(sizes_nodes, sizes_inputs=(), initializers=()):
    nodes = sizes_nodes + [helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=1),
                           helper.make_node("Neg", ["b"], ["nb"]),
                           helper.make_node("Concat", ["nb", "a"], ["y"], axis=1)]
    return _model(nodes, [_float("x", ["n", "h"]), *sizes_inputs], ["y", "a"],
                  [("ax1", np.array([1], np.int64)), *initializers])


def test_split_by_sizes_computed_from_a_symbolic_dim():
    # sizes (h - 2, 2): the rotary part and the rest of a head
    nodes = _shape_entry("x", 1, "h") + [
        helper.make_node("Sub", ["h", "two"], ["rot"]),
        helper.make_node("Concat", ["rot", "two"], ["sizes"], axis=0)]
    m = _split_head(nodes, initializers=[("two", np.array([2], np.int64))])
    vm = _build(m)
    for n, h in ((1, 2), (3, 8), (2, 5)):
        _check(m, vm, {"x": np.arange(n * h, dtype=np.float32).reshape(n, h)})


def test_split_whole_and_empty_by_computed_sizes():
    # sizes (h, 0), as the RotaryEmbedding expansion splits a head with no rotary_dim
    nodes = _shape_entry("x", 1, "h") + [
        helper.make_node("Concat", ["h", "zero"], ["sizes"], axis=0)]
    m = _split_head(nodes, initializers=[("zero", np.array([0], np.int64))])
    vm = _build(m)
    for n, h in ((1, 4), (2, 6)):
        _check(m, vm, {"x": np.arange(n * h, dtype=np.float32).reshape(n, h)})


def test_split_sizes_fed_at_run_time():
    m = _split_head([helper.make_node("Identity", ["s"], ["sizes"])],
                    [helper.make_tensor_value_info("s", TensorProto.INT64, [2])])
    vm = _build(m)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    for sizes in ([1, 5], [6, 0], [0, 6], [3, 3]):
        _check(m, vm, {"x": x, "s": np.array(sizes, np.int64)})
    for bad in ([1, 4], [4, 4], [7, -1]):  # ONNX Runtime refuses these too
        with pytest.raises(RelvmRuntimeError, match="the split sizes must be at least 0 and "
                                                    "add up to the axis length"):
            vm.invoke("main", x, np.array(bad, np.int64))


@pytest.mark.parametrize("op, attrs", [
    ("Conv", {}),
    ("MaxPool", {"kernel_shape": [3, 3]}),
    ("AveragePool", {"kernel_shape": [3, 3]}),
    ("AveragePool", {"kernel_shape": [3, 3], "count_include_pad": 1}),
    ("LpPool", {"kernel_shape": [3, 3]}),
])
@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_same_padding_with_strides_over_symbolic_dims(op, attrs, auto_pad):
    # SAME with stride 2 and 3 pads odd and even sizes differently: computed at run time
    inputs = [_float("x", ["n", "c", "h", "w"])]
    names = ["x"]
    inits = []
    if op == "Conv":
        names.append("wt")
        inits.append(("wt", np.random.default_rng(1).standard_normal((4, 3, 3, 2))
                      .astype(np.float32)))
    node = helper.make_node(op, names, ["y"], auto_pad=auto_pad, strides=[2, 3], **attrs)
    m = _model([node], inputs, ["y"], inits)
    vm = _build(m)
    rng = np.random.default_rng(0)
    for h, w in ((7, 8), (8, 9), (5, 5), (1, 2)):
        x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
        want = ort.InferenceSession(m.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        got = vm.invoke("main", x)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attrs", [
    {"output_shape": [10, 8]}, {"output_shape": [9, 7]}, {"output_shape": [4, 3]},
    {"auto_pad": "SAME_UPPER"}, {"auto_pad": "SAME_LOWER"},
], ids=str)
def test_conv_transpose_output_shape_and_same_over_symbolic_dims(attrs):
    # the full transposed convolution cropped (or padded) to its target when it runs: the
    # input's dims and the weight's are symbolic
    node = helper.make_node("ConvTranspose", ["x", "wt"], ["y"], strides=[3, 2], **attrs)
    m = _model([node], [_float("x", ["n", "c", "h", "w"]), _float("wt", ["c", "o", "kh", "kw"])],
               ["y"])
    vm = _build(m)
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    compared = 0
    # kernels at least the strides: with a smaller one ORT's SAME output is the full scatter,
    # where ONNX (and relvm) says input * stride
    for (h, w), (kh, kw) in (((3, 4), (3, 3)), ((4, 3), (3, 2)), ((1, 1), (3, 2)),
                             ((3, 4), (4, 2)), ((4, 4), (3, 3)), ((3, 3), (5, 3))):
        x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
        wt = rng.standard_normal((3, 2, kh, kw)).astype(np.float32)
        try:  # ORT refuses an output_shape far from what the input gives
            want = session.run(None, {"x": x, "wt": wt})[0]
        except ort.capi.onnxruntime_pybind11_state.InvalidArgument:
            continue
        got = vm.invoke("main", x, wt)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        compared += 1
    assert compared >= 2


def test_squeeze_without_axes_over_symbolic_dims():
    # the dim known to be 1 goes; the symbolic ones are taken to stay, checked when it runs
    m = _model([helper.make_node("Squeeze", ["x"], ["y"], name="sq")],
               [_float("x", ["n", 1, "c"])], ["y"])
    vm = _build(m)
    for shape in ((2, 1, 3), (4, 1, 5)):
        _check(m, vm, {"x": np.ones(shape, np.float32)})
    with pytest.raises(RelvmRuntimeError, match="Squeeze node 'sq': Squeeze without axes: a "
                                                "dim of the input \\(n, 1, c\\) taken to stay "
                                                "is 1 when it runs"):
        vm.invoke("main", np.ones((1, 1, 3), np.float32))
