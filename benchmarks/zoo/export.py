"""Write the zoo's ONNX files: public architectures with random weights, dynamic dims kept dynamic.

Run: ``python benchmarks/zoo/export.py [--models a,b] [--force]`` (``pip install ".[zoo]"``).
Each file goes to ``$RELVM_ZOO_DIR`` (default ``~/.cache/relvm/zoo``), only if missing. Nothing
is downloaded: torchvision models are made with ``weights=None``, transformers models from a
``*Config``, under a fixed seed, with ``HF_HUB_OFFLINE=1``. The models that ship in PyPI packages
(PP-OCR, silero-vad) are read where their package installed them.

This module imports torch; nothing outside ``benchmarks/`` imports it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from catalog import BY_NAME, MODELS, Model  # noqa: E402

SEED = 0
LEGACY_OPSET = 17


def _torch():
    import torch

    torch.manual_seed(SEED)
    return torch


def torch_export(module, args: tuple, path: Path, names: list[str], outputs: list[str],
                 dims: dict[str, dict[int, str]], dynamo: bool) -> None:
    """torch.onnx.export, legacy (``dynamic_axes``) or dynamo (``dynamic_shapes``).

    ``args`` are tensors, one per name in ``names``; ``dims`` names the dynamic axes of each
    (one name, one dim across inputs). The dynamo exporter wants the dims shaped like
    ``module.forward``'s signature (a ``*past`` parameter takes a tuple of them): a
    ``ShapesCollection`` keyed by the tensors themselves builds that structure."""
    torch = _torch()
    module.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            Dim = torch.export.Dim
            made: dict[str, object] = {}
            shapes = torch.export.ShapesCollection()
            for tensor, name in zip(args, names):
                shapes[tensor] = {axis: made.setdefault(d, Dim(d.replace(".", "_"), max=1 << 20))
                                  for axis, d in dims.get(name, {}).items()}
            torch.onnx.export(module, args, str(path), input_names=names, output_names=outputs,
                              dynamic_shapes=shapes.dynamic_shapes(module, args), dynamo=True,
                              external_data=False)
        else:
            torch.onnx.export(module, args, str(path), input_names=names, output_names=outputs,
                              dynamic_axes=dims, opset_version=LEGACY_OPSET, dynamo=False)


def _symbolic(model: Model) -> dict[str, dict[int, str]]:
    return {i.name: {axis: d for axis, d in enumerate(i.dims) if isinstance(d, str)}
            for i in model.inputs}


def _example(model: Model):
    torch = _torch()
    return tuple(torch.from_numpy(a) for a in model.feeds(model.shapes[0]).values())


# --- exporters: each writes ``model`` to ``path`` ------------------------------------------

def torchvision_cnn(model: Model, path: Path) -> None:
    _torch()
    import torchvision

    net = getattr(torchvision.models, model.name)(weights=None)
    torch_export(net, _example(model), path, ["input"], ["logits"], _symbolic(model), dynamo=False)


def yolo(model: Model, path: Path) -> None:
    _torch()
    import yolo_like

    torch_export(yolo_like.YoloV8n(), _example(model), path, ["input"], ["output"],
                 _symbolic(model), dynamo=False)


def bert(model: Model, path: Path) -> None:
    _torch()
    from transformers import BertConfig, BertModel

    config = BertConfig(**model.options["config"], attn_implementation="eager")
    net = BertModel(config, add_pooling_layer=False)
    wrapped = _Outputs(net, "last_hidden_state")
    torch_export(wrapped, _example(model), path, [i.name for i in model.inputs],
                 ["last_hidden_state"], _symbolic(model), dynamo=model.options["dynamo"])


def gpt2(model: Model, path: Path) -> None:
    _torch()
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(use_cache=False, attn_implementation="eager")  # the small model's sizes
    net = _Outputs(GPT2LMHeadModel(config), "logits", use_cache=False)
    torch_export(net, _example(model), path, ["input_ids", "attention_mask"], ["logits"],
                 _symbolic(model), dynamo=False)


def whisper_encoder(model: Model, path: Path) -> None:
    _torch()
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6,
                           encoder_ffn_dim=1536, num_mel_bins=80, max_source_positions=1500,
                           attn_implementation="eager")
    net = _WhisperEncoder(WhisperEncoder(config))
    torch_export(net, _example(model), path, ["input_features"], ["last_hidden_state"],
                 _symbolic(model), dynamo=True)


def rnn(model: Model, path: Path) -> None:
    torch = _torch()

    class Net(torch.nn.Module):
        def __init__(self, cell: str):
            super().__init__()
            self.rnn = getattr(torch.nn, cell)(80, 256, num_layers=2, batch_first=True)
            self.head = torch.nn.Linear(256, 32)

        def forward(self, x):
            return self.head(self.rnn(x)[0])

    torch_export(Net(model.options["cell"]), _example(model), path, ["input"], ["output"],
                 _symbolic(model), dynamo=False)


def _module():
    """torch.nn.Module; the wrappers below are classes made on first use, so that importing
    this file needs no torch."""
    return _torch().nn.Module


def _Outputs(net, field: str, **kwargs):
    class Outputs(_module()):
        """A transformers model returning one field of its output, as a plain tensor."""

        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            if token_type_ids is not None:
                kwargs["token_type_ids"] = token_type_ids
            return getattr(self.net(input_ids=input_ids, attention_mask=attention_mask, **kwargs),
                           field)

    return Outputs()


def _WhisperEncoder(encoder):
    torch = _torch()
    gelu = torch.nn.functional.gelu

    class Encoder(_module()):
        """WhisperEncoder's forward for any number of frames (up to 3000): its position
        embeddings sliced to the length, as whisper.cpp and faster-whisper run it."""

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

    return Encoder()


def ensure(model: Model, force: bool = False) -> Path | None:
    """The model's ONNX file, exported first when missing; None when its package is missing."""
    path = model.path
    if path is None or model.exporter is None or (path.exists() and not force):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.onnx")
    start = time.perf_counter()
    globals()[model.exporter](model, tmp)
    tmp.replace(path)
    print(f"  exported {model.name} -> {path} ({time.perf_counter() - start:.0f} s)", flush=True)
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", help="comma-separated names (default: all)")
    p.add_argument("--force", action="store_true", help="export again even if the file exists")
    args = p.parse_args(argv)
    names = args.models.split(",") if args.models else [m.name for m in MODELS]
    for name in names:
        path = ensure(BY_NAME[name], args.force)
        print(f"{name}: {path if path else '(package not installed)'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
