"""Real models shipped inside PyPI packages, against ONNX Runtime at several input shapes.

Each is imported and compiled once (its dims stay symbolic) on the build users get --
``relvm.build(mod, params=params)``: C kernels, fusion on, fused kernels generated as C -- then
run at three or more shapes on one VM; every output matches ONNX Runtime to 1e-4 (max abs
difference). The tests skip when the package holding the model is not installed:
``pip install --no-deps silero-vad rapidocr-onnxruntime`` (the models are data files; their own
dependencies, torch and opencv, are not needed).
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would pass
ort = pytest.importorskip("onnxruntime")

import relvm  # noqa: E402
from relvm.frontend.onnx import from_onnx  # noqa: E402

TOLERANCE = 1e-4


def model_path(package: str, *parts: str) -> str:
    """The path of a data file inside an installed package (without importing the package)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed")
    path = os.path.join(list(spec.submodule_search_locations)[0], *parts)
    if not os.path.exists(path):
        pytest.skip(f"{package} has no {'/'.join(parts)}")
    return path


def check_against_ort(path: str, feeds_per_shape: list[dict], signature: list[str]) -> list:
    mod, params = from_onnx(path)
    assert [str(p.checked_type) for p in mod["main"].params[:len(signature)]] == signature
    # One build for every shape: the default one, which fuses and generates C.
    exe = relvm.build(mod, params=params)
    assert exe.backend == "c" and exe.kernel_library
    assert any(k.op == "fused" and "plan" in k.attrs for k in exe.kernels)
    vm = relvm.VirtualMachine(exe)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    diffs = []
    for feeds in feeds_per_shape:
        expected = session.run(None, feeds)
        got = vm.invoke("main", *feeds.values())
        got = list(got) if isinstance(got, tuple) else [got]
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.shape == e.shape and g.dtype == e.dtype
            np.testing.assert_allclose(g, e, rtol=0, atol=TOLERANCE)
        diffs.append(max(float(np.abs(g - e).max()) for g, e in zip(got, expected)))
    return diffs


def test_silero_vad_sequence():
    path = model_path("silero_vad", "data", "silero_vad_16k_sequence.onnx")
    rng = np.random.default_rng(0)
    feeds = [{"input": (0.1 * rng.standard_normal((n, 576))).astype(np.float32),
              "h": (0.1 * rng.standard_normal((1, 1, 128))).astype(np.float32),
              "c": (0.1 * rng.standard_normal((1, 1, 128))).astype(np.float32)}
             for n in (1, 4, 10, 37)]
    check_against_ort(path, feeds, ["Tensor[(sequence_length, 576), float32]",
                                    "Tensor[(1, 1, 128), float32]", "Tensor[(1, 1, 128), float32]"])


@pytest.mark.parametrize("name", ["silero_vad", "silero_vad_16k_op15", "silero_vad_half",
                                  "silero_vad_op18_ifless", "silero_vad_openvino_16k"])
def test_silero_vad_streaming(name):
    """The streaming files: a chunk of samples and the state in, a probability and the state
    out. Four of them squeeze the decoder's time dim only when it is 1 and then branch on the
    rank (an If whose branches differ in rank: the importer converts the rest per branch, and
    the branch that cannot run at all -- an LSTM fed rank 5 -- becomes a run-time error)."""
    path = model_path("silero_vad", "data", f"{name}.onnx")
    inputs = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).get_inputs()
    rng = np.random.default_rng(0)
    feeds = []
    for batch, samples, rate in ((1, 512, 16000), (2, 512, 16000), (3, 512, 16000),
                                 (1, 256, 8000)):
        feed = {}
        for i in inputs:
            if i.name == "input":  # static in the OpenVINO file: (1, 576) there
                shape = [d if isinstance(d, int) else v for d, v in zip(i.shape, (batch, samples))]
                feed[i.name] = (0.1 * rng.standard_normal(shape)).astype(np.float32)
            elif i.name == "state":
                feed[i.name] = (0.1 * rng.standard_normal((2, feed["input"].shape[0], 128))
                                ).astype(np.float32)
            else:
                assert i.name == "sr"
                feed[i.name] = np.array(rate, np.int64)
        feeds.append(feed)
    if "sr" not in [i.name for i in inputs]:
        feeds = feeds[:3]  # 16 kHz only
    check_against_ort(path, feeds, [])


def test_silero_vad_with_its_dims_fixed():
    """silero_vad.onnx with its chunk fixed at (1, 512) (the zoo's static copy): its 8 kHz
    branch cannot take that shape (its LSTM would read rank 5; ONNX Runtime refuses the file),
    so it becomes a run-time error, and the 16 kHz branch matches ORT on the original file."""
    import onnx

    path = model_path("silero_vad", "data", "silero_vad.onnx")
    proto = onnx.load(path)
    fixed = {"input": (1, 512), "state": (2, 1, 128)}
    for inp in proto.graph.input:
        for d, size in zip(inp.type.tensor_type.shape.dim, fixed.get(inp.name, ())):
            d.Clear()
            d.dim_value = size
    mod, params = from_onnx(proto)
    vm = relvm.VirtualMachine(relvm.build(mod, params=params))
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for _ in range(3):
        feeds = {"input": (0.1 * rng.standard_normal((1, 512))).astype(np.float32),
                 "state": (0.1 * rng.standard_normal((2, 1, 128))).astype(np.float32),
                 "sr": np.array(16000, np.int64)}
        for g, e in zip(vm.invoke("main", *feeds.values()), session.run(None, feeds)):
            np.testing.assert_allclose(g, e, rtol=0, atol=TOLERANCE)
    with pytest.raises(relvm.RelvmRuntimeError, match=r"If node .* took its else-branch, "
                       r"where the model cannot run: .*LSTM"):
        vm.invoke("main", feeds["input"], feeds["state"], np.array(8000, np.int64))


def test_silero_vad_runs_out_of_its_one_convertible_branch_as_an_error():
    """silero_vad_16k_op15 at 1024 samples: the decoder's time dim is 2, the branch ORT then
    takes fails (its LSTM gets rank 5); relvm refuses the input, naming the dim and why."""
    path = model_path("silero_vad", "data", "silero_vad_16k_op15.onnx")
    mod, params = from_onnx(path)
    vm = relvm.VirtualMachine(relvm.build(mod, params=params))
    with pytest.raises(relvm.RelvmInputError, match=r"sequence is input %input dim 1\) is 2, "
                       r"but squeeze needs it to equal 1"):
        vm.invoke("main", np.zeros((1, 1024), np.float32), np.zeros((2, 1, 128), np.float32),
                  np.array(16000, np.int64))


def test_ppocr_v4_detection():
    path = model_path("rapidocr_onnxruntime", "models", "ch_PP-OCRv4_det_infer.onnx")
    rng = np.random.default_rng(1)
    # Height and width are multiples of 32, as the model needs.
    feeds = [{"x": rng.random(shape, dtype=np.float32)}
             for shape in [(1, 3, 64, 64), (2, 3, 96, 160), (1, 3, 128, 96)]]
    check_against_ort(path, feeds, ["Tensor[(p2o_DynamicDimension_0, 3, p2o_DynamicDimension_1, "
                                    "p2o_DynamicDimension_2), float32]"])


def test_ppocr_mobile_v2_text_angle_classification():
    path = model_path("rapidocr_onnxruntime", "models", "ch_ppocr_mobile_v2.0_cls_infer.onnx")
    rng = np.random.default_rng(2)
    # The model declares (-1, 3, ?, ?): every dim unknown but the channels.
    feeds = [{"x": rng.random(shape, dtype=np.float32)}
             for shape in [(1, 3, 48, 192), (3, 3, 48, 100), (2, 3, 64, 64)]]
    check_against_ort(path, feeds, ["Tensor[(?, 3, ?, ?), float32]"])


def test_ppocr_v4_recognition():
    """PP-OCRv4's text recognizer (an SVTR neck after a conv backbone): many fused groups with
    the same steps over other ranks and broadcasts. With kernels keyed on steps and dtypes only
    they shared generated code, and the outputs were off by 0.14-0.40 (issue 15)."""
    path = model_path("rapidocr_onnxruntime", "models", "ch_PP-OCRv4_rec_infer.onnx")
    rng = np.random.default_rng(3)
    # Text lines 48 pixels high, of any width (a multiple of 8: one output step per 8 columns).
    feeds = [{"x": rng.random(shape, dtype=np.float32)}
             for shape in [(1, 3, 48, 80), (2, 3, 48, 160), (1, 3, 48, 320), (2, 3, 48, 248)]]
    check_against_ort(path, feeds, ["Tensor[(p2o_DynamicDimension_0, 3, ?, "
                                    "p2o_DynamicDimension_1), float32]"])


#: Transformer exports made by the benchmark zoo (benchmarks/zoo); $RELVM_ZOO_DIR overrides.
ZOO = os.environ.get("RELVM_ZOO_DIR", os.path.expanduser("~/.cache/relvm/zoo"))


@pytest.mark.parametrize("name", ["minilm_dynamo", "bert_base_dynamo"])
def test_torch_dynamo_transformer_exports(name):
    """torch.onnx's dynamo exports of BERT-style encoders: their attention mask is built with
    GatherND (aten.index). Random token ids, the second half of some rows padded."""
    path = os.path.join(ZOO, f"{name}.onnx")
    if not os.path.exists(path):
        pytest.skip(f"{path} is absent (made by benchmarks/zoo)")
    rng = np.random.default_rng(4)
    feeds = []
    for batch, seq in ((2, 16), (1, 7), (3, 33)):
        mask = np.ones((batch, seq), np.int64)
        mask[1:, seq // 2 + 1:] = 0
        feeds.append({"input_ids": rng.integers(0, 1000, (batch, seq)).astype(np.int64),
                      "attention_mask": mask,
                      "token_type_ids": np.zeros((batch, seq), np.int64)})
    check_against_ort(path, feeds, ["Tensor[(batch, sequence), int64]"] * 3)
