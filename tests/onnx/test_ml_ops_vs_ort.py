"""Ops of the ai.onnx.ml domain relvm imports (Binarizer, ArrayFeatureExtractor), run on the C
build against ONNX Runtime with static and symbolic dims; a bad index is a relvm error."""

from __future__ import annotations

import numpy as np
import pytest

import relvm

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would pass
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from relvm.errors import RelvmRuntimeError  # noqa: E402
from relvm.frontend.onnx import from_onnx, supported_ops  # noqa: E402


def _model(op, inputs, attrs=None, symbolic=False):
    def info(name, a):
        dims = [f"{name}_{j}" for j in range(a.ndim)] if symbolic else list(a.shape)
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype),
                                             dims)
    names = [f"i{k}" for k in range(len(inputs))]
    graph = helper.make_graph([helper.make_node(op, names, ["y"], domain="ai.onnx.ml",
                                                **(attrs or {}))], "g",
                              [info(nm, a) for nm, a in zip(names, inputs)],
                              [helper.make_empty_tensor_value_info("y")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                helper.make_opsetid("ai.onnx.ml", 3)])
    m.ir_version = 9
    return m


def _compare(op, inputs, attrs=None, reference=False):
    """Against ONNX Runtime, or onnx's reference evaluator where ORT has no kernel."""
    feeds = {f"i{k}": a for k, a in enumerate(inputs)}
    m = _model(op, inputs, attrs)
    if reference:
        from onnx.reference import ReferenceEvaluator

        want = ReferenceEvaluator(m).run(None, feeds)[0]
    else:
        want = ort.InferenceSession(m.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    for symbolic in (False, True):
        mod, params = from_onnx(_model(op, inputs, attrs, symbolic))
        got = relvm.VirtualMachine(relvm.build(mod, params=params)).invoke("main", *inputs)
        assert got.dtype == want.dtype and got.shape == want.shape, (symbolic, got.shape)
        np.testing.assert_array_equal(got, want)


def test_ml_ops_are_listed_with_their_domain():
    assert {"ai.onnx.ml::Binarizer", "ai.onnx.ml::ArrayFeatureExtractor"} <= set(supported_ops())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threshold", [0.0, 0.5, -1.25])
def test_binarizer_matches_ort(dtype, threshold):
    x = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(dtype)
    x[0, 0, :3] = [-np.inf, threshold, np.inf]
    # ONNX Runtime's Binarizer is float32 only
    _compare("Binarizer", [x], {"threshold": threshold}, reference=dtype == np.float64)


def test_binarizer_of_nan_is_zero():
    # onnx's reference: NaN is not above the threshold (ONNX Runtime refuses NaN input)
    x = np.array([np.nan, 2.0, 0.0], np.float32)
    mod, params = from_onnx(_model("Binarizer", [x], {"threshold": 1.0}, symbolic=True))
    got = relvm.VirtualMachine(relvm.build(mod, params=params)).invoke("main", x)
    np.testing.assert_array_equal(got, [0, 1, 0])


@pytest.mark.parametrize("shape, index", [((5,), [4, 0, 2]), ((3, 4), [1, 3]),
                                          ((2, 3, 6), [5, 5, 0, 1]), ((3, 4), [[2], [0]])],
                         ids=str)
def test_array_feature_extractor_matches_ort(shape, index):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    _compare("ArrayFeatureExtractor", [x, np.array(index, np.int64)])


@pytest.mark.parametrize("index", [4, -1])
def test_array_feature_extractor_index_out_of_range_is_a_run_time_error(index):
    x = np.zeros((3, 4), np.float32)
    mod, params = from_onnx(_model("ArrayFeatureExtractor", [x, np.array([0, index])],
                                   symbolic=True))
    vm = relvm.VirtualMachine(relvm.build(mod, params=params))
    with pytest.raises(RelvmRuntimeError, match=f"index {index} is out of range"):
        vm.invoke("main", x, np.array([0, index], np.int64))
