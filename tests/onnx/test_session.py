"""``relvm.InferenceSession`` called exactly as ONNX Runtime code calls ``ort.InferenceSession``,
on a model whose input is named ``input.1``: names, shapes, types, ``run``, IOBinding."""

from __future__ import annotations

import re

import numpy as np
import pytest

import relvm

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 3)).astype(np.float32)
B = RNG.standard_normal(3).astype(np.float32)


def _reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mm = x @ W + B
    return np.maximum(mm, 0), 1 / (1 + np.exp(-mm))


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    """MatMul + Add, then Relu and Sigmoid: input ``input.1``, outputs ``output.0``, ``probs``."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input.1", "w.0"], ["mm"]),
         helper.make_node("Add", ["mm", "b.0"], ["z"]),
         helper.make_node("Relu", ["z"], ["output.0"]),
         helper.make_node("Sigmoid", ["z"], ["probs"])], "g",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("output.0", TensorProto.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(W, "w.0"), numpy_helper.from_array(B, "b.0")])
    model = helper.make_model(graph, producer_name="relvm-tests",
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("session") / "model.onnx"
    onnx.save(model, str(path))
    return str(path)


@pytest.fixture(scope="module")
def sess(model_path):
    return relvm.InferenceSession(model_path, providers=["CPUExecutionProvider"])


def test_inputs_and_outputs_keep_the_models_names(sess):
    (inp,) = sess.get_inputs()
    assert (inp.name, inp.shape, inp.type) == ("input.1", ["batch", 4], "tensor(float)")
    assert [(o.name, o.shape, o.type) for o in sess.get_outputs()] == [
        ("output.0", ["batch", 3], "tensor(float)"), ("probs", ["batch", 3], "tensor(float)")]
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert sess.get_modelmeta().producer_name == "relvm-tests"


@pytest.mark.parametrize("n", [1, 5])
def test_run_as_ort_code_does(sess, n):
    x = RNG.standard_normal((n, 4)).astype(np.float32)
    relu, probs = sess.run(None, {sess.get_inputs()[0].name: x})
    want_relu, want_probs = _reference(x)
    np.testing.assert_allclose(relu, want_relu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(probs, want_probs, rtol=1e-5, atol=1e-6)
    (only,) = sess.run(["probs"], {"input.1": x})
    np.testing.assert_allclose(only, want_probs, rtol=1e-5, atol=1e-6)


def test_matches_onnxruntime(model_path, sess):
    ort = pytest.importorskip("onnxruntime")
    ref = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    assert [i.name for i in ref.get_inputs()] == [i.name for i in sess.get_inputs()]
    assert [o.name for o in ref.get_outputs()] == [o.name for o in sess.get_outputs()]
    assert [i.shape for i in ref.get_inputs()] == [i.shape for i in sess.get_inputs()]
    assert [i.type for i in ref.get_outputs()] == [i.type for i in sess.get_outputs()]
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    for got, want in zip(sess.run(None, {"input.1": x}), ref.run(None, {"input.1": x})):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_feed_errors_are_relvm_input_errors(sess):
    """In ONNX Runtime's order and words (its own exception classes aside)."""
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(relvm.RelvmInputError, match=re.escape(
            "Required inputs (['input.1']) are missing from input feed (['input_1']).")):
        sess.run(None, {"input_1": x})
    with pytest.raises(relvm.RelvmInputError, match=re.escape(
            "Invalid input name: x (inputs: input.1)")):
        sess.run(None, {"input.1": x, "x": x})
    with pytest.raises(relvm.RelvmInputError, match=re.escape(
            "Invalid output name: nope (outputs: output.0, probs)")):
        sess.run(["nope"], {"input.1": x})
    with pytest.raises(relvm.RelvmInputError, match=re.escape(
            "input 'input.1' (%input_1): expected dtype float32, got float64")):
        sess.run(None, {"input.1": x.astype(np.float64)})
    with pytest.raises(relvm.RelvmInputError, match=re.escape(
            "input 'input.1' (%input_1) dim 1: expected 4, got 5")):
        sess.run(None, {"input.1": np.zeros((2, 5), np.float32)})
    with pytest.raises(ValueError):  # as ORT's missing-input error is
        sess.run(None, {})


def test_only_the_cpu_provider(model_path):
    with pytest.raises(relvm.RelvmInputError, match="provider 'CUDAExecutionProvider' is not "
                                                    "available"):
        relvm.InferenceSession(model_path, providers=["CUDAExecutionProvider"])


@pytest.mark.parametrize("providers,options,message", [
    (["DnnlExecutionProvider"], [{"precision": "fp16"}],
     "DnnlExecutionProvider option precision='fp16': expected one of fp32, bf16"),
    ([("DnnlExecutionProvider", {"threads": 4})], None,
     "DnnlExecutionProvider has no option 'threads'; relvm's options: precision"),
    (["DnnlExecutionProvider", "CPUExecutionProvider"], [{}],
     "provider_options must be a list of one dict per provider \\(2\\)"),
    (["DnnlExecutionProvider"], ["bf16"], "the options of DnnlExecutionProvider must be a dict"),
])
def test_provider_options_are_checked(model_path, providers, options, message):
    with pytest.raises(relvm.RelvmInputError, match=message):
        relvm.InferenceSession(model_path, providers=providers, provider_options=options)


def test_cpu_provider_options_are_ignored_as_ort_ignores_unknown_ones(model_path):
    sess = relvm.InferenceSession(model_path, providers=[("CPUExecutionProvider",
                                                          {"arena_extend_strategy": "x"})])
    assert sess.get_provider_options() == {"CPUExecutionProvider": {}}


def test_io_binding_writes_into_the_callers_memory(sess):
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    relu = np.full((2, 3), np.nan, np.float32)
    probs = np.full((2, 3), np.nan, np.float32)
    binding = sess.io_binding()
    binding.bind_cpu_input("input.1", x)
    binding.bind_output("output.0", "cpu", 0, np.float32, list(relu.shape), relu.ctypes.data)
    binding.bind_ortvalue_output("probs", probs)
    sess.run_with_iobinding(binding)
    want_relu, want_probs = _reference(x)
    np.testing.assert_allclose(relu, want_relu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(probs, want_probs, rtol=1e-5, atol=1e-6)
    got = binding.get_outputs()
    assert np.shares_memory(got[0], relu) and got[1] is probs
    assert sess.executable is not None


def test_io_binding_output_by_name_is_allocated(sess):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    binding = sess.io_binding()
    binding.bind_cpu_input("input.1", x)
    binding.bind_output("probs")
    sess.run_with_iobinding(binding)
    (probs,) = binding.copy_outputs_to_cpu()
    np.testing.assert_allclose(probs, _reference(x)[1], rtol=1e-5, atol=1e-6)


def test_names_survive_relay_text_and_the_executable_file(model_path, tmp_path):
    from relvm.frontend.onnx import from_onnx

    module, params = from_onnx(model_path)
    text = relvm.print_module(module)
    assert 'input_names=["input.1", "w.0", "b.0"]' in text
    assert 'output_names=["output.0", "probs"]' in text
    (tmp_path / "m.relay").write_text(text)
    np.savez(tmp_path / "m.npz", **params)
    from_text = relvm.InferenceSession(str(tmp_path / "m.relay"),
                                       params=str(tmp_path / "m.npz"))
    exe = relvm.build(module, params=params)
    exe.save(str(tmp_path / "m.rvm"))
    from_file = relvm.InferenceSession(str(tmp_path / "m.rvm"))
    with open(model_path, "rb") as f:
        from_bytes = relvm.InferenceSession(f.read())
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    for s in (from_text, from_file, from_bytes):
        assert [i.name for i in s.get_inputs()] == ["input.1"]
        assert [o.name for o in s.get_outputs()] == ["output.0", "probs"]
        np.testing.assert_allclose(s.run(["output.0"], {"input.1": x})[0], _reference(x)[0],
                                   rtol=1e-5, atol=1e-6)


def test_intra_op_threads(model_path):
    opts = relvm.SessionOptions()
    opts.intra_op_num_threads = 1
    before = relvm.get_num_threads()
    try:
        s = relvm.InferenceSession(model_path, sess_options=opts)
        assert relvm.get_num_threads() == 1
        assert s.get_session_options() is opts
    finally:
        relvm.set_num_threads(before)


def test_not_an_onnx_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\xff\xff\xff garbage")
    with pytest.raises(relvm.RelvmError, match="is not an ONNX model"):
        relvm.InferenceSession(str(bad))


def test_virtual_machine_refuses_a_module(model_path):
    from relvm.frontend.onnx import from_onnx

    module, _ = from_onnx(model_path)
    with pytest.raises(relvm.RelvmInputError, match=r"VirtualMachine takes an Executable, not a "
                                                    r"Module: build it first"):
        relvm.VirtualMachine(module)
