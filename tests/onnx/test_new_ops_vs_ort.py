"""The NumPy references of the ops added for ONNX import, through single-node ONNX models,
against ONNX Runtime on many random configurations (onnx's reference evaluator where ONNX
Runtime departs from the ONNX spec)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import relvm

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would pass
import onnx  # noqa: E402
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from onnx.reference import ReferenceEvaluator  # noqa: E402

from relvm.frontend.onnx import from_onnx  # noqa: E402


def single_node(op, inputs, attrs, n_out=1, opset=19, constants=()):
    """A model of one node; inputs at the ``constants`` positions are initializers."""
    names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    outs = [f"o{k}" for k in range(n_out)]
    graph = helper.make_graph(
        [helper.make_node(op, names, outs, **attrs)], "g",
        [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for k, (nm, a) in enumerate(zip(names, inputs)) if a is not None and k not in constants],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        initializer=[numpy_helper.from_array(inputs[k], names[k]) for k in constants])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def compare(m, inputs, atol=1e-5, constants=(), oracle="ort"):
    feeds = {f"i{k}": a for k, a in enumerate(inputs) if a is not None and k not in constants}
    if oracle == "ort":
        session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        want = session.run(None, feeds)
    else:
        want = ReferenceEvaluator(m).run(None, feeds)
    mod, params = from_onnx(m)
    got = relvm.VirtualMachine(relvm.build(mod, params=params)).invoke("main", *feeds.values())
    got = list(got) if isinstance(got, tuple) else [got]
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=atol)


# ONNX Runtime wants output_padding below the stride.
CONV_T = [c for c in itertools.product([1, 2], [(1, 1), (2, 3)], [(1, 1), (2, 1)],
                                       [(0, 0, 0, 0), (1, 0, 2, 1)], [(0, 0), (1, 0)])
          if all(o < s for o, s in zip(c[4], c[1]))]


@pytest.mark.parametrize("groups, strides, dilations, pads, output_padding", CONV_T)
def test_conv_transpose_matches_ort(groups, strides, dilations, pads, output_padding):
    rng = np.random.default_rng(sum(strides) + groups)
    x = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
    b = rng.standard_normal(3 * groups).astype(np.float32)
    m = single_node("ConvTranspose", [x, w, b], dict(group=groups, strides=strides,
                                                     dilations=dilations, pads=pads,
                                                     output_padding=output_padding))
    compare(m, [x, w, b])


RESIZE = [
    dict(mode="nearest", coordinate_transformation_mode=ctm, nearest_mode=nm)
    for ctm in ("half_pixel", "asymmetric", "align_corners", "tf_half_pixel_for_nn")
    for nm in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
] + [
    dict(mode=mode, coordinate_transformation_mode=ctm)
    for mode in ("linear", "cubic")
    for ctm in ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel",
                "half_pixel_symmetric")
] + [dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1),
     dict(mode="linear", antialias=1), dict(mode="cubic", antialias=1)]
for _attrs in RESIZE:
    _attrs.setdefault("coordinate_transformation_mode", "half_pixel")


@pytest.mark.parametrize("attrs", RESIZE)
@pytest.mark.parametrize("scales", [(1.0, 1.0, 2.0, 3.0), (1.0, 1.0, 0.6, 0.5),
                                    (1.0, 1.0, 1.7, 0.8)])
def test_resize_matches_ort(attrs, scales):
    x = np.random.default_rng(3).standard_normal((1, 2, 7, 9)).astype(np.float32)
    s = np.array(scales, np.float32)
    compare(single_node("Resize", [x, None, s], attrs, constants=(2,)), [x, None, s], atol=1e-4,
            constants=(2,))


# ONNX Runtime has no layout=1 (the conformance cases *_batchwise cover it).
RECURRENT = [dict(direction=d, clip=clip) for d in ("forward", "reverse", "bidirectional")
             for clip in (None, 0.5)]


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("attrs", RECURRENT)
def test_recurrent_matches_ort(op, attrs):
    rng = np.random.default_rng(4)
    gates = 4 if op == "LSTM" else 3
    dirs = 2 if attrs["direction"] == "bidirectional" else 1
    seq, batch, width, hidden = 5, 3, 4, 6
    attrs = {k: v for k, v in attrs.items() if v is not None}
    attrs["hidden_size"] = hidden
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    x_shape, state_shape = (seq, batch, width), (dirs, batch, hidden)
    inputs = [rng.standard_normal(x_shape).astype(np.float32),
              0.5 * rng.standard_normal((dirs, gates * hidden, width)).astype(np.float32),
              0.5 * rng.standard_normal((dirs, gates * hidden, hidden)).astype(np.float32),
              rng.standard_normal((dirs, 2 * gates * hidden)).astype(np.float32),
              np.array([5, 2, 4], np.int32),
              rng.standard_normal(state_shape).astype(np.float32)]
    if op == "LSTM":
        inputs += [rng.standard_normal(state_shape).astype(np.float32),
                   rng.standard_normal((dirs, 3 * hidden)).astype(np.float32)]
    m = single_node(op, inputs, attrs, n_out=3 if op == "LSTM" else 2)
    compare(m, inputs)


# GridSample: opset 16's mode names and opset 20's; 5-d data from opset 20 (ONNX Runtime has
# no 5-d cubic, which is checked against onnx's reference). With cubic and border padding relvm
# clamps each tap, as ONNX Runtime and PyTorch do (onnx's reference clamps the position).
GRID = [(16, m, p, a, 4) for m in ("bilinear", "nearest", "bicubic")
        for p in ("zeros", "border", "reflection") for a in (0, 1)] + \
       [(20, m, p, a, r) for m in ("linear", "nearest", "cubic") for p in ("zeros", "reflection")
        for a in (0, 1) for r in (4, 5)] + [(22, "cubic", "border", 1, 4)]  # 5-d: the ops tier


@pytest.mark.parametrize("opset, mode, padding, align, rank", GRID)
def test_grid_sample_matches_ort(opset, mode, padding, align, rank):
    rng = np.random.default_rng(6)
    spatial, out = ((4, 5), (3, 6)) if rank == 4 else ((3, 4, 2), (2, 3, 2))
    x = rng.standard_normal((2, 3) + spatial).astype(np.float32)
    grid = rng.uniform(-1.4, 1.4, (2,) + out + (rank - 2,)).astype(np.float32)
    flat = grid.reshape(-1)  # a quarter of the points on borders, centres and pixel edges
    flat[::4] = np.resize(np.float32([-1.0, 1.0, 0.0, 0.5, -0.25, 1.25]), flat[::4].size)
    attrs = dict(padding_mode=padding, align_corners=align)
    if mode not in ("bilinear", "linear"):  # the default of either opset
        attrs["mode"] = mode
    m = single_node("GridSample", [x, grid], attrs, opset=opset)
    if "cubic" in mode and rank == 5:
        # onnx's reference knows opset 20's names only: it runs the opset-20 twin.
        twin = single_node("GridSample", [x, grid], dict(attrs, mode="cubic"), opset=20)
        want = ReferenceEvaluator(twin).run(None, {"i0": x, "i1": grid})[0]
        mod, params = from_onnx(m)
        got = relvm.VirtualMachine(relvm.build(mod, params=params)).invoke("main", x, grid)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    else:
        compare(m, [x, grid])
