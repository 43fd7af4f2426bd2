"""Resizes as PyTorch users write them, exported by torch.onnx (legacy and dynamo) with the
spatial dims dynamic, imported once, built once (C kernels, fusion on) and compared with
PyTorch itself at several sizes (issue 46): ``F.interpolate`` by non-integer scale factors, up
and down, 1 to 3 spatial axes, every mode PyTorch exports (nearest, (bi/tri)linear, bicubic;
align_corners on and off), and to another tensor's size (``size=y.shape[-2:]``, as Segformer's
decode head does). Then Segformer and MobileViT's segmentation models from their configs (random
weights, nothing downloaded) against ONNX Runtime and PyTorch.

torch, transformers and onnxscript are the ``hf`` test extra; without them these tests skip,
except under ``RELVM_REQUIRE_HF=1`` (set by ``.ci/run``), where a missing package fails.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import relvm
from hfextra import need


torch = need("torch")
transformers = need("transformers")
need("onnxscript")
ort = pytest.importorskip("onnxruntime")
from relvm.frontend.onnx import from_onnx  # noqa: E402

F = torch.nn.functional
SPATIAL = "dhw"


def _export(module, args, path, dims: dict[str, dict[int, str]], dynamo: bool) -> None:
    module.eval()
    names = list(dims)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            made: dict[str, object] = {}
            shapes = tuple({axis: made.setdefault(d, torch.export.Dim(d, min=2, max=512))
                            for axis, d in dims[n].items()} for n in names)
            torch.onnx.export(module, args, str(path), input_names=names, dynamic_shapes=shapes,
                              dynamo=True, external_data=False)
        else:
            torch.onnx.export(module, args, str(path), input_names=names, dynamic_axes=dims,
                              opset_version=17, dynamo=False)


def _check(module, path, inputs_list: list[tuple], against_ort: bool = False,
           atol: float = 1e-5):
    """Build the exported file once and compare it with the module at every input set."""
    mod, params = from_onnx(str(path))
    exe = relvm.build(mod, params=params)
    vm = relvm.VirtualMachine(exe)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]) \
        if against_ort else None
    for inputs in inputs_list:
        got = vm.invoke("main", *inputs)
        got = got[0] if isinstance(got, tuple) else got
        with torch.no_grad():
            want = module(*[torch.from_numpy(a) for a in inputs]).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=atol)
        if session is not None:
            names = [i.name for i in session.get_inputs()]
            other = session.run(None, dict(zip(names, inputs)))[0]
            np.testing.assert_allclose(got, other, rtol=0, atol=atol)
    return exe


class _Interpolate(torch.nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.kwargs = kwargs

    def forward(self, x):
        return F.interpolate(x, **self.kwargs)


MODES = {1: ["nearest", "linear"], 2: ["nearest", "bilinear", "bicubic"],
         3: ["nearest", "trilinear"]}
CASES = [(rank, mode, align, scale) for rank, modes in MODES.items() for mode in modes
         for align in ([None] if mode == "nearest" else [False, True])
         for scale in (1.5, 0.6)]
SIZES = {1: [(7,), (10,), (13,)], 2: [(7, 9), (10, 6), (13, 11)],
         3: [(5, 7, 4), (6, 4, 9), (7, 5, 6)]}


@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
@pytest.mark.parametrize("rank, mode, align_corners, scale", CASES)
def test_interpolate_by_a_scale_matches_torch(rank, mode, align_corners, scale, exporter,
                                              tmp_path):
    module = _Interpolate(scale_factor=scale, mode=mode, align_corners=align_corners)
    rng = np.random.default_rng(rank)
    inputs = [(rng.standard_normal((2, 3, *s)).astype(np.float32),) for s in SIZES[rank]]
    path = tmp_path / "m.onnx"
    dims = {"x": {2 + k: SPATIAL[3 - rank + k] for k in range(rank)}}
    _export(module, (torch.from_numpy(inputs[0][0]),), path, dims, exporter == "dynamo")
    _check(module, path, inputs)


class _ToSizeOf(torch.nn.Module):
    def __init__(self, mode: str, align_corners):
        super().__init__()
        self.mode, self.align_corners = mode, align_corners

    def forward(self, x, y):
        return F.interpolate(x, size=y.shape[-2:], mode=self.mode,
                             align_corners=self.align_corners)


@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
@pytest.mark.parametrize("mode, align_corners", [("nearest", None), ("bilinear", False),
                                                 ("bilinear", True), ("bicubic", False)])
def test_interpolate_to_another_tensors_size_keeps_dynamic_dims(mode, align_corners, exporter,
                                                                 tmp_path):
    module = _ToSizeOf(mode, align_corners)
    rng = np.random.default_rng(5)
    inputs = [(rng.standard_normal((1, 4, h, w)).astype(np.float32),
               np.zeros((1, 2, p, q), np.float32))
              for h, w, p, q in [(6, 8, 11, 9), (9, 5, 4, 16), (7, 7, 7, 7)]]
    path = tmp_path / "m.onnx"
    _export(module, tuple(torch.from_numpy(a) for a in inputs[0]), path,
            {"x": {2: "h", 3: "w"}, "y": {2: "p", 3: "q"}}, exporter == "dynamo")
    exe = _check(module, path, inputs)
    # the result's dims are y's, not run-time unknowns: it fuses, pools and replays as a
    # static resize does
    signature = exe.bytecode.splitlines()[0]
    assert signature.endswith("-> Tensor[(1, 4, p, q), float32]"), signature


class _Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(pixel_values=x).logits


def _segformer():
    config = transformers.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
        num_attention_heads=[1, 2], decoder_hidden_size=32, num_labels=5)
    return transformers.SegformerForSemanticSegmentation(config)


def _mobilevit():
    config = transformers.MobileViTConfig(
        image_size=64, hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 16, 24, 32, 48, 64, 96],
        num_labels=5, aspp_out_channels=32)
    return transformers.MobileViTForSemanticSegmentation(config)


@pytest.mark.parametrize("arch, sizes, exporter", [
    ("segformer", [(64, 64), (96, 80), (72, 104)], "legacy"),
    ("segformer", [(64, 64), (96, 80), (72, 104)], "dynamo"),
    # MobileViT unfolds 2x2 patches of every stage: sizes whose stride-32 maps divide by 2 (the
    # model resizes other sizes in a Python branch, which an export fixes to its example's
    # path); torch.export specializes H and W on that branch, so dynamo's file is static
    ("mobilevit", [(64, 64), (128, 64), (64, 192)], "legacy"),
    ("mobilevit", [(64, 64)], "dynamo")])
def test_segmentation_model_with_dynamic_height_and_width(arch, sizes, exporter, tmp_path):
    torch.manual_seed(0)
    model = _Logits({"segformer": _segformer, "mobilevit": _mobilevit}[arch]()).eval()
    rng = np.random.default_rng(0)
    inputs = [(rng.standard_normal((1, 3, h, w)).astype(np.float32),) for h, w in sizes]
    path = tmp_path / "m.onnx"
    _export(model, (torch.from_numpy(inputs[0][0]),), path, {"x": {2: "h", 3: "w"}},
            exporter == "dynamo")
    _check(model, path, inputs, against_ort=True, atol=1e-4)
