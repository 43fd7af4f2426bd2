"""RoiAlign (opsets 10 and 16) and MaxRoiPool imported from ONNX and run on the build users get
(C kernels, fusion on) against ONNX Runtime, number for number; a model of symbolic dims whose
rois come from NonMaxSuppression, built once and run at three sizes; the errors of a bad model
and of a bad batch index."""

from __future__ import annotations

import numpy as np
import pytest

import relvm

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would pass
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from relvm.frontend.onnx import from_onnx  # noqa: E402
from relvm.frontend.onnx.importer import RelvmImportError  # noqa: E402

RNG = np.random.default_rng(46)
F32, F64, I64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64


def make_model(nodes, inputs, outputs, opset, initializers=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs],
                              initializer=list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def ort_run(m, feeds):
    ort.set_default_logger_severity(3)  # its warning on max mode's summation, on every session
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def relvm_vm(m):
    mod, params = from_onnx(m)
    return relvm.VirtualMachine(relvm.build(mod, params=params))


def roi_align_model(attrs, opset, elem=F32):
    node = helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], **attrs)
    return make_model([node], [("x", elem, ["n", "c", "h", "w"]), ("rois", elem, ["k", 4]),
                               ("b", I64, ["k"])], [("y", elem, None)], opset)


def random_rois(count, height, width, scale):
    """[x1, y1, x2, y2] in roi units: inside, across and outside the image, tiny and large."""
    big = max(height, width) / scale
    lo = RNG.uniform(-0.3 * big, 1.1 * big, (count, 2))
    rois = np.concatenate([lo, lo + RNG.uniform(0, big, (count, 2))], axis=1)
    rois[::4, 2:] = rois[::4, :2] + RNG.uniform(0, 0.3, (len(rois[::4]), 2))
    rois[1::6] = [-big, -big, 3 * big, 2.5 * big]
    return rois


CASES = [(opset, mode, coordinates, ratio)
         for opset, coordinates in [(10, None), (16, None), (16, "half_pixel"),
                                    (16, "output_half_pixel")]
         for mode in ("avg", "max") for ratio in (0, 1, 2)]


@pytest.mark.parametrize("opset, mode, coordinates, ratio", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_roi_align_matches_ort(opset, mode, coordinates, ratio, dtype):
    attrs = dict(mode=mode, output_height=3, output_width=4, sampling_ratio=ratio,
                 spatial_scale=0.5)
    if coordinates:
        attrs["coordinate_transformation_mode"] = coordinates
    m = roi_align_model(attrs, opset, F32 if dtype == "float32" else F64)
    vm = relvm_vm(m)
    for shape, count in [((2, 3, 9, 11), 12), ((1, 4, 16, 5), 7)]:
        x = RNG.standard_normal(shape).astype(dtype)
        rois = random_rois(count, *shape[2:], 0.5).astype(dtype)
        b = RNG.integers(0, shape[0], count)
        want, = ort_run(m, {"x": x, "rois": rois, "b": b})
        got = vm.invoke("main", x, rois, b)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def pool_model(pooled, scale):
    node = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=pooled,
                            spatial_scale=scale)
    return make_model([node], [("x", F32, ["n", "c", "h", "w"]), ("rois", F32, ["k", 5])],
                      [("y", F32, None)], 16)


@pytest.mark.parametrize("pooled, scale", [([2, 3], 1.0), ([1, 1], 0.5), ([3, 3], 0.25),
                                           ([4, 2], 0.3)])
def test_max_roi_pool_matches_ort(pooled, scale):
    m = pool_model(pooled, scale)
    vm = relvm_vm(m)
    for shape, count in [((2, 3, 9, 11), 12), ((1, 2, 20, 6), 5)]:
        x = RNG.standard_normal(shape).astype(np.float32)
        x.flat[::5] = -np.abs(x.flat[::5]) - 2
        corners = random_rois(count, *shape[2:], scale)
        corners[2::5] = np.round(corners[2::5] * scale * 2) / 2 / scale  # halves
        batch = RNG.integers(0, shape[0], (count, 1)) + RNG.uniform(0, 0.99, (count, 1))
        rois = np.concatenate([batch, corners], axis=1).astype(np.float32)
        want, = ort_run(m, {"x": x, "rois": rois})
        np.testing.assert_array_equal(vm.invoke("main", x, rois), want)


def detector_head():
    """Boxes kept by NonMaxSuppression pooled by RoiAlign and MaxRoiPool: the roi count is
    known only when the model runs; every other dim is symbolic too."""
    const = [numpy_helper.from_array(np.array(a), name) for name, a in
             [("max_out", np.int64(6)), ("iou", np.float32(0.5)), ("score", np.float32(0.2)),
              ("cols", np.array([0, 2], np.int64)), ("zero", np.int64(0)),
              ("axes", np.array([1], np.int64))]]
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score"],
                         ["sel"]),
        helper.make_node("Gather", ["sel", "cols"], ["pick"], axis=1),
        helper.make_node("GatherND", ["boxes", "pick"], ["rois"]),
        helper.make_node("Gather", ["sel", "zero"], ["b"], axis=1),
        helper.make_node("RoiAlign", ["x", "rois", "b"], ["aligned"], output_height=3,
                         output_width=2, spatial_scale=0.5, mode="max"),
        helper.make_node("Cast", ["b"], ["bf"], to=F32),
        helper.make_node("Unsqueeze", ["bf", "axes"], ["b1"]),
        helper.make_node("Concat", ["b1", "rois"], ["rois5"], axis=1),
        helper.make_node("MaxRoiPool", ["x", "rois5"], ["pooled"], pooled_shape=[2, 2],
                         spatial_scale=0.5),
    ]
    return make_model(nodes, [("x", F32, ["n", "c", "h", "w"]), ("boxes", F32, ["n", "m", 4]),
                              ("scores", F32, ["n", 1, "m"])],
                      [("aligned", F32, None), ("pooled", F32, None)], 16, const)


def test_symbolic_model_runs_at_three_sizes(tmp_path):
    """One build for every size, also once saved and loaded (the runtime alone)."""
    m = detector_head()
    mod, params = from_onnx(m)
    exe = relvm.build(mod, params=params)
    exe.save(tmp_path / "head.rvm")
    vm, loaded = relvm.VirtualMachine(exe), relvm.VirtualMachine(relvm.load(tmp_path / "head.rvm"))
    for n, c, h, w, boxes in [(1, 3, 8, 10, 5), (2, 5, 17, 13, 9), (3, 2, 6, 24, 14)]:
        x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
        lo = RNG.uniform(-4, 2 * max(h, w), (n, boxes, 2))
        b = np.concatenate([lo, lo + RNG.uniform(0, max(h, w), (n, boxes, 2))], axis=2)
        scores = RNG.uniform(0, 1, (n, 1, boxes)).astype(np.float32)
        feeds = {"x": x, "boxes": b.astype(np.float32), "scores": scores}
        want = ort_run(m, feeds)
        assert 0 < len(want[0])
        for machine in (vm, loaded):
            got = machine.invoke("main", *feeds.values())
            for g, w_ in zip(got, want):
                assert g.shape == w_.shape
                np.testing.assert_array_equal(g, w_)


def test_bad_batch_index_is_a_run_time_error():
    vm = relvm_vm(roi_align_model({}, 16))
    x, rois = np.zeros((2, 1, 4, 4), np.float32), np.zeros((3, 4), np.float32)
    with pytest.raises(relvm.RelvmRuntimeError, match=r"vision.roi_align: batch index 2 of roi "
                                                      r"1 is out of range \[0, 2\)"):
        vm.invoke("main", x, rois, np.array([0, 2, 1]))
    pool = relvm_vm(pool_model([1, 1], 1.0))
    with pytest.raises(relvm.RelvmRuntimeError, match=r"vision.max_roi_pool: batch index -1.0 "
                                                      r"of roi 0 is out of range \[0, 2\)"):
        pool.invoke("main", x, np.array([[-1, 0, 0, 1, 1]], np.float32))
    with pytest.raises(relvm.RelvmInputError, match=r"input %b dim 0 is 2, but k is 3"):
        vm.invoke("main", x, rois, np.array([0, 1]))


def test_wrong_roi_shapes_are_refused_at_build():
    node = helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"])
    m = make_model([node], [("x", F32, [1, 3, 8, 8]), ("rois", F32, ["k", 5]),
                            ("b", I64, ["k"])], [("y", F32, None)], 16)
    with pytest.raises(RelvmImportError, match=r"RoiAlign node 'y': vision.roi_align: rois must "
                                               r"have shape \(num_rois, 4\), got \(k, 5\)"):
        from_onnx(m)
    m = make_model([node], [("x", F32, [1, 3, 8, 8]), ("rois", F32, [4, 4]),
                            ("b", I64, [3])], [("y", F32, None)], 16)
    with pytest.raises(RelvmImportError, match=r"batch_indices \(3\) and rois \(4, 4\) differ "
                                               r"in their roi count"):
        from_onnx(m)
    pool = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[2, 2])
    m = make_model([pool], [("x", F32, [1, 3, 8, 8]), ("rois", F32, ["k", 4])],
                   [("y", F32, None)], 16)
    with pytest.raises(RelvmImportError, match=r"MaxRoiPool node 'y': vision.max_roi_pool: rois "
                                               r"must have shape \(num_rois, 5\)"):
        from_onnx(m)
