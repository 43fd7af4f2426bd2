"""Transformers as people export them (issue 19, item 5): Hugging Face architectures made from
their configs with random weights (nothing is downloaded), exported by torch.onnx -- the legacy
TorchScript exporter and the dynamo one -- with batch and sequence dims dynamic, imported once,
built once (C kernels, fusion on) and run at three (batch, sequence) shapes against ONNX Runtime
on the same file (1e-4 relative).

torch, transformers and onnxscript are the ``hf`` test extra (``pip install ".[test,hf]"``);
without them these tests skip with one line saying so, except under ``RELVM_REQUIRE_HF=1``
(set by ``.ci/run``, which installs the extra), where a missing package is a failure.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import relvm
from hfextra import need


torch = need("torch")
transformers = need("transformers")
need("onnxscript")
ort = pytest.importorskip("onnxruntime")
from relvm.frontend.onnx import from_onnx  # noqa: E402

SEED = 0


def _export(module, args: tuple, path: Path, names: list[str], outputs: list[str],
            dims: dict[str, dict[int, str]], dynamo: bool) -> None:
    module.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            made: dict[str, object] = {}
            shapes = tuple({axis: made.setdefault(d, torch.export.Dim(d, min=1, max=4096))
                            for axis, d in dims.get(n, {}).items()} for n in names)
            torch.onnx.export(module, args, str(path), input_names=names, output_names=outputs,
                              dynamic_shapes=shapes, dynamo=True, external_data=False)
        else:
            torch.onnx.export(module, args, str(path), input_names=names, output_names=outputs,
                              dynamic_axes=dims, opset_version=17, dynamo=False)


class _Field(torch.nn.Module):
    """A transformers model returning one field of its output, as a plain tensor."""

    def __init__(self, net, field: str):
        super().__init__()
        self.net, self.field = net, field

    def forward(self, input_ids, attention_mask):
        return getattr(self.net(input_ids=input_ids, attention_mask=attention_mask), self.field)


class _GPT2WithPast(torch.nn.Module):
    """GPT-2 (two layers) decoding with past keys and values as flat tensors, as ONNX files
    carry them: (input_ids, attention_mask, past_key_0, past_value_0, ...) -> (logits,
    present_key_0, ...)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, input_ids, attention_mask, past_key_0, past_value_0, past_key_1,
                past_value_1):  # two layers, each argument named (torch.export needs them)
        past = (past_key_0, past_value_0, past_key_1, past_value_1)
        cache = transformers.DynamicCache()
        for layer in range(len(past) // 2):
            cache.update(past[2 * layer], past[2 * layer + 1], layer)
        out = self.net(input_ids=input_ids, attention_mask=attention_mask,
                       past_key_values=cache, use_cache=True)
        present = out.past_key_values
        flat = []
        for layer in range(len(past) // 2):
            if hasattr(present, "layers"):
                flat += [present.layers[layer].keys, present.layers[layer].values]
            else:
                flat += [present.key_cache[layer], present.value_cache[layer]]
        return (out.logits, *flat)


def _text_inputs(rng, batch: int, seq: int, vocab: int) -> dict[str, np.ndarray]:
    ids = rng.integers(0, vocab, (batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), np.int64)
    mask[0, seq // 2 + 1:] = 0  # one padded row: the mask matters
    return {"input_ids": ids, "attention_mask": mask}


def _bert(dynamo: bool, path: Path):
    config = transformers.BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=128,
                                     attn_implementation="eager")
    net = _Field(transformers.BertModel(config, add_pooling_layer=False), "last_hidden_state")
    return _encoder(net, 500, dynamo, path)


def _distilbert(dynamo: bool, path: Path):
    config = transformers.DistilBertConfig(vocab_size=500, dim=64, n_layers=2, n_heads=4,
                                           hidden_dim=128, attn_implementation="eager")
    net = _Field(transformers.DistilBertModel(config), "last_hidden_state")
    return _encoder(net, 500, dynamo, path)


def _encoder(net, vocab: int, dynamo: bool, path: Path):
    names = ["input_ids", "attention_mask"]
    example = _text_inputs(np.random.default_rng(1), 2, 8, vocab)
    _export(net, tuple(torch.from_numpy(example[n]) for n in names), path, names,
            ["last_hidden_state"], {n: {0: "batch", 1: "sequence"} for n in names}, dynamo)

    def inputs(rng, batch, seq):
        return _text_inputs(rng, batch, seq, vocab)
    return inputs


def _gpt2(dynamo: bool, path: Path):
    layers, heads, head_dim = 2, 4, 16
    config = transformers.GPT2Config(vocab_size=500, n_positions=256, n_embd=heads * head_dim,
                                     n_layer=layers, n_head=heads, attn_implementation="eager")
    net = _GPT2WithPast(transformers.GPT2LMHeadModel(config))
    past_names = [f"past_{kind}_{i}" for i in range(layers) for kind in ("key", "value")]
    names = ["input_ids", "attention_mask", *past_names]
    outputs = ["logits"] + [n.replace("past", "present") for n in past_names]

    def inputs(rng, batch, seq, past=None):
        past = seq + 1 if past is None else past
        feeds = _text_inputs(rng, batch, seq, 500)
        feeds["attention_mask"] = np.ones((batch, past + seq), np.int64)
        for n in past_names:
            feeds[n] = rng.standard_normal((batch, heads, past, head_dim)).astype(np.float32)
        return feeds

    example = inputs(np.random.default_rng(1), 2, 3, 4)
    dims = {"input_ids": {0: "batch", 1: "sequence"},
            "attention_mask": {0: "batch", 1: "total"},
            **{n: {0: "batch", 2: "past"} for n in past_names}}
    _export(net, tuple(torch.from_numpy(example[n]) for n in names), path, names, outputs,
            dims, dynamo)
    return inputs


def _vit(dynamo: bool, path: Path):
    config = transformers.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=128, image_size=32, patch_size=8,
                                    attn_implementation="eager")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = transformers.ViTModel(config, add_pooling_layer=False)

        def forward(self, pixel_values):
            return self.net(pixel_values=pixel_values).last_hidden_state

    example = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    _export(Net(), (torch.from_numpy(example),), path, ["pixel_values"],
            ["last_hidden_state"], {"pixel_values": {0: "batch"}}, dynamo)

    def inputs(rng, batch, seq):  # a ViT's sequence is its patches: the batch varies
        return {"pixel_values": rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)}
    return inputs


def _whisper_encoder(dynamo: bool, path: Path):
    """Whisper's encoder at a small width, for any number of frames up to 2 x its positions:
    its position embeddings sliced to the length (as whisper.cpp and faster-whisper run it)."""
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = transformers.WhisperConfig(d_model=64, encoder_layers=2,
                                        encoder_attention_heads=4, encoder_ffn_dim=128,
                                        num_mel_bins=16, max_source_positions=64,
                                        attn_implementation="eager")
    encoder = WhisperEncoder(config)
    gelu = torch.nn.functional.gelu

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = encoder

        def forward(self, features):
            e = self.encoder
            x = gelu(e.conv2(gelu(e.conv1(features)))).permute(0, 2, 1)
            x = x + e.embed_positions.weight[: x.shape[1]]
            for layer in e.layers:
                out = layer(x, None)
                x = out[0] if isinstance(out, tuple) else out
            return e.layer_norm(x)

    example = np.random.default_rng(1).standard_normal((2, 16, 40)).astype(np.float32)
    _export(Net(), (torch.from_numpy(example),), path, ["input_features"],
            ["last_hidden_state"], {"input_features": {0: "batch", 2: "frames"}}, dynamo)

    def inputs(rng, batch, seq):  # seq: frames, even (the second conv has stride 2)
        return {"input_features": rng.standard_normal((batch, 16, 2 * seq))
                .astype(np.float32)}
    return inputs


ARCHITECTURES = {"bert": _bert, "distilbert": _distilbert, "gpt2_past": _gpt2, "vit": _vit,
                 "whisper_encoder": _whisper_encoder}
SHAPES = ((1, 5), (2, 16), (3, 37))  # (batch, sequence)


@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_hf_export_matches_onnx_runtime(arch, exporter, tmp_path):
    torch.manual_seed(SEED)
    path = tmp_path / f"{arch}_{exporter}.onnx"
    inputs = ARCHITECTURES[arch](exporter == "dynamo", path)
    mod, params = from_onnx(str(path))
    vm = relvm.VirtualMachine(relvm.build(mod, params=params))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    rng = np.random.default_rng(2)
    for batch, seq in SHAPES:
        feeds = inputs(rng, batch, seq)
        want = session.run(None, {n: feeds[n] for n in names})
        got = vm.invoke("main", *[feeds[n] for n in names])
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape, (batch, seq, g.shape, w.shape)
            scale = max(float(np.abs(w).max()), 1e-6)
            assert float(np.abs(g - w).max()) <= 1e-4 * scale, (batch, seq)
