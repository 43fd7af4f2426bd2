"""The zoo: each model's family, where its ONNX file comes from, its inputs, the 3 timed shapes
and the traffic its users send.

Nothing here imports torch: a model is described by data, and ``export.py`` (which does import
torch, torchvision and transformers) writes the files this list names. Dims named by a string
are symbolic in the ONNX file; a shape gives each name a size.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


def cache_dir() -> Path:
    """Where exported models live: ``$RELVM_ZOO_DIR``, by default ``~/.cache/relvm/zoo``."""
    return Path(os.environ.get("RELVM_ZOO_DIR", Path.home() / ".cache" / "relvm" / "zoo"))


@dataclass(frozen=True)
class Input:
    """One graph input: dims (ints, or names of symbolic dims) and how to fill it.

    ``kind`` is ``normal`` (standard normal floats, times ``scale``), ``document`` (a synthetic
    page of dark glyph-sized boxes in lines on white, NCHW in [-1, 1] as PP-OCR's preprocessing
    gives), ``ids`` (token ids below ``high``), ``mask`` (int64 ones) or ``value`` (every
    element ``scale``).
    """

    name: str
    dims: tuple
    kind: str = "normal"
    dtype: str = "float32"
    high: int = 0
    scale: float = 1.0

    def shape(self, sizes: dict[str, int]) -> tuple[int, ...]:
        return tuple(sizes[d] if isinstance(d, str) else d for d in self.dims)

    def make(self, sizes: dict[str, int], rng: np.random.Generator) -> np.ndarray:
        shape = self.shape(sizes)
        if self.kind == "normal":
            return (self.scale * rng.standard_normal(shape)).astype(self.dtype)
        if self.kind == "document":
            return _document(shape, rng).astype(self.dtype)
        if self.kind == "ids":
            return rng.integers(0, self.high, shape).astype(self.dtype)
        if self.kind == "mask":
            return np.ones(shape, self.dtype)
        if self.kind == "value":
            return np.full(shape, self.scale, self.dtype)
        raise ValueError(f"unknown input kind {self.kind!r}")


def _document(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Lines of glyph-sized boxes of dark strokes on a white page, with a little noise: the OCR
    models have their trained weights, and noise alone makes a text map of near-zero scores."""
    _, _, height, width = shape
    page = np.ones(shape, np.float32)
    glyph = height * 2 // 3 if height <= 64 else 16  # a text line's crop, or a page
    stroke = max(2, glyph // 8)
    for image in page:
        for top in range((height - glyph) // 2 if height <= 64 else glyph // 2,
                         height - glyph + 1, int(glyph * 1.8)):
            x, end = int(rng.integers(2, glyph)), int(rng.integers(width // 2, width))
            while x + glyph < end:
                w = int(rng.integers(glyph // 2, glyph))
                for _ in range(3):
                    if rng.random() < 0.5:
                        at = x + int(rng.integers(0, w - stroke))
                        image[:, top:top + glyph, at:at + stroke] = -1
                    else:
                        at = top + int(rng.integers(0, glyph - stroke))
                        image[:, at:at + stroke, x:x + w] = -1
                x += w + int(rng.integers(2, glyph // 3))
    return page + 0.05 * rng.standard_normal(shape)


@dataclass(frozen=True)
class Traffic:
    """The shapes a model's users send (``run.py --traffic``): each symbolic dim drawn uniformly
    from its ``range``, or fixed (an int). ``calls`` caps the calls per pass for the models whose
    mean call takes a second or more, so that each model's traffic takes a minute or two."""

    dims: dict[str, range | int]
    calls: int | None = None

    def draw(self, count: int, seed: int = 0) -> list[dict[str, int]]:
        """``count`` distinct shapes in drawing order, from a fixed seed: fewer when ``calls``
        caps them or the distribution has fewer."""
        rng = np.random.default_rng(seed)
        population = 1
        for d in self.dims.values():
            population *= 1 if isinstance(d, int) else len(d)
        count = min(count, self.calls or count, population)
        shapes: dict[tuple, dict[str, int]] = {}
        while len(shapes) < count:
            sizes = {name: d if isinstance(d, int) else d[int(rng.integers(len(d)))]
                     for name, d in self.dims.items()}
            shapes.setdefault(tuple(sizes.values()), sizes)
        return list(shapes.values())

    def __str__(self) -> str:
        """``batch 1-8, height 224-640 step 32``, then the cap on calls if any."""
        parts = []
        for name, d in self.dims.items():
            if isinstance(d, int):
                parts.append(f"{name} {d}")
            else:
                step = f" step {d.step}" if d.step > 1 else ""
                parts.append(f"{name} {d[0]}-{d[-1]}{step}")
        return ", ".join(parts) + (f" ({self.calls} calls at most)" if self.calls else "")


@dataclass(frozen=True)
class Model:
    """A zoo model. ``package`` models ship in a PyPI package (``package``, path inside it);
    the others are written by ``export.py``'s function ``exporter`` into :func:`cache_dir`."""

    name: str
    family: str
    source: str
    inputs: tuple[Input, ...]
    shapes: tuple[dict, ...]
    traffic: Traffic
    exporter: str | None = None
    package: tuple[str, ...] | None = None
    static_shape: int = 1  # the shape whose static copy is built for the symbolic/static ratio
    options: dict = field(default_factory=dict)  # passed to the exporter

    @property
    def path(self) -> Path | None:
        """The ONNX file, or None when its package is not installed."""
        if self.package is None:
            return cache_dir() / f"{self.name}.onnx"
        spec = importlib.util.find_spec(self.package[0])
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(list(spec.submodule_search_locations)[0], *self.package[1:])
        return path if path.exists() else None

    def feeds(self, sizes: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {i.name: i.make(sizes, rng) for i in self.inputs}

    def label(self, sizes: dict[str, int]) -> str:
        """The first input's shape, ``1x3x224x224``."""
        return "x".join(map(str, self.inputs[0].shape(sizes)))


def _image(batches, hw=((224, 224),) * 3):
    return tuple({"batch": b, "height": h, "width": w} for b, (h, w) in zip(batches, hw))


IMAGE = (Input("input", ("batch", 3, "height", "width")),)
MINILM_SHAPES = ({"batch": 1, "sequence": 16}, {"batch": 1, "sequence": 128},
                 {"batch": 4, "sequence": 128})
BERT_BASE_SHAPES = ({"batch": 1, "sequence": 16}, {"batch": 1, "sequence": 64},
                    {"batch": 1, "sequence": 128})
BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072)
MINILM = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
              intermediate_size=1536)

# Traffic: images of any size the network takes (a multiple of its stride, 32), sentences and
# prompts of up to 256 tokens, an utterance of 2-30 s (Whisper's 100 frames a second).
IMAGE_TRAFFIC = dict(batch=range(1, 9), height=range(224, 641, 32), width=range(224, 641, 32))
SENTENCES = dict(batch=1, sequence=range(1, 257))


def _tokens(vocab: int, token_types: bool) -> tuple[Input, ...]:
    """input_ids, attention_mask and (BERT's) token_type_ids, as tokenizers give them."""
    types = (Input("token_type_ids", ("batch", "sequence"), "value", "int64", scale=0),)
    return (Input("input_ids", ("batch", "sequence"), "ids", "int64", high=vocab),
            Input("attention_mask", ("batch", "sequence"), "mask", "int64")) + types * token_types


def _cnn(name: str, calls: int | None = None) -> Model:
    return Model(name, "cnn", f"torchvision.models.{name}(weights=None), legacy exporter", IMAGE,
                 _image((1, 4, 1), ((224, 224), (224, 224), (320, 320))),
                 traffic=Traffic(IMAGE_TRAFFIC, calls), exporter="torchvision_cnn")


def _nlp(name: str, config: dict, dynamo: bool, size: str, shapes: tuple,
         traffic: Traffic) -> Model:
    how = "dynamo" if dynamo else "legacy"
    return Model(name, "nlp",
                 f"transformers BertModel({size} BertConfig, random), {how} exporter",
                 _tokens(config["vocab_size"], True), shapes, traffic=traffic, exporter="bert",
                 options={"config": config, "dynamo": dynamo})


def _silero_chunk(name: str, file: str, what: str) -> Model:
    """silero-vad's streaming model: a 512-sample chunk at 16 kHz and the LSTM state; its
    traffic, a server's batch of 1-64 streams, each a chunk."""
    return Model(name, "speech", f"silero-vad {file} ({what}; If on the sample rate, LSTM)",
                 (Input("input", ("batch", "samples"), scale=0.1),
                  Input("state", (2, "batch", 128), "value", scale=0.0),
                  Input("sr", (), "value", "int64", scale=16000)),
                 tuple({"batch": b, "samples": 512} for b in (1, 4, 16)),
                 traffic=Traffic(dict(batch=range(1, 65), samples=512)),
                 package=("silero_vad", "data", file))


MODELS: tuple[Model, ...] = (
    _cnn("resnet18"),
    _cnn("resnet50", calls=12),
    _cnn("mobilenet_v2"),
    _cnn("mobilenet_v3_large"),
    _cnn("efficientnet_b0"),
    Model("yolov8n_like", "detector",
          "YOLOv8n-like (Conv-BN-SiLU, C2f, SPPF, FPN/PAN neck, DFL head, no NMS) in torch",
          IMAGE, _image((1, 1, 1), ((320, 320), (480, 640), (640, 640))),
          traffic=Traffic(IMAGE_TRAFFIC), exporter="yolo"),
    Model("ppocr_det", "ocr", "rapidocr-onnxruntime ch_PP-OCRv4_det_infer.onnx",
          (Input("x", ("p2o.DynamicDimension.0", 3, "p2o.DynamicDimension.1",
                       "p2o.DynamicDimension.2"), "document"),),
          tuple({"p2o.DynamicDimension.0": b, "p2o.DynamicDimension.1": h,
                 "p2o.DynamicDimension.2": w}
                for b, h, w in ((1, 320, 320), (1, 480, 640), (1, 736, 736))),
          traffic=Traffic({"p2o.DynamicDimension.0": 1,
                           "p2o.DynamicDimension.1": range(320, 961, 32),
                           "p2o.DynamicDimension.2": range(320, 961, 32)}),
          package=("rapidocr_onnxruntime", "models", "ch_PP-OCRv4_det_infer.onnx")),
    Model("ppocr_rec", "ocr", "rapidocr-onnxruntime ch_PP-OCRv4_rec_infer.onnx",
          (Input("x", ("p2o.DynamicDimension.0", 3, 48, "p2o.DynamicDimension.1"), "document"),),
          tuple({"p2o.DynamicDimension.0": b, "p2o.DynamicDimension.1": w}
                for b, w in ((1, 320), (6, 320), (1, 960))),
          # RapidOCR recognises the lines of a page 6 at a time (rec_batch_num), their width
          # the longest line's at height 48.
          traffic=Traffic({"p2o.DynamicDimension.0": range(1, 7),
                           "p2o.DynamicDimension.1": range(32, 961, 8)}),
          package=("rapidocr_onnxruntime", "models", "ch_PP-OCRv4_rec_infer.onnx")),
    Model("ppocr_cls", "ocr", "rapidocr-onnxruntime ch_ppocr_mobile_v2.0_cls_infer.onnx",
          (Input("x", ("p2o.DynamicDimension.0", 3, 48, 192), "document"),),
          tuple({"p2o.DynamicDimension.0": b} for b in (1, 6, 30)),
          traffic=Traffic({"p2o.DynamicDimension.0": range(1, 65)}),
          package=("rapidocr_onnxruntime", "models", "ch_ppocr_mobile_v2.0_cls_infer.onnx")),
    Model("silero_vad_seq", "speech", "silero-vad silero_vad_16k_sequence.onnx (LSTM)",
          (Input("input", ("sequence_length", 576), scale=0.1),
           Input("h", (1, 1, 128), "value", scale=0.0),
           Input("c", (1, 1, 128), "value", scale=0.0)),
          tuple({"sequence_length": n} for n in (10, 100, 400)),
          traffic=Traffic(dict(sequence_length=range(10, 401))),
          package=("silero_vad", "data", "silero_vad_16k_sequence.onnx")),
    _silero_chunk("silero_vad", "silero_vad.onnx", "the package's default ONNX model"),
    _silero_chunk("silero_vad_ifless", "silero_vad_op18_ifless.onnx",
                  "opset 18"),
    Model("whisper_tiny_encoder", "speech",
          "transformers WhisperEncoder (tiny-sized WhisperConfig, random), positions sliced "
          "to the input length, dynamo exporter",
          (Input("input_features", ("batch", 80, "frames")),),
          tuple({"batch": b, "frames": f} for b, f in ((1, 500), (1, 1500), (1, 3000))),
          traffic=Traffic(dict(batch=1, frames=range(200, 3001, 2))),
          exporter="whisper_encoder"),
    _nlp("bert_base_legacy", BERT_BASE, False, "base-sized", BERT_BASE_SHAPES,
         Traffic(SENTENCES)),
    _nlp("bert_base_dynamo", BERT_BASE, True, "base-sized", BERT_BASE_SHAPES,
         Traffic(SENTENCES)),
    _nlp("minilm_legacy", MINILM, False, "MiniLM-sized (6x384, 12 heads)", MINILM_SHAPES,
         Traffic({**SENTENCES, "batch": range(1, 9)})),
    _nlp("minilm_dynamo", MINILM, True, "MiniLM-sized (6x384, 12 heads)", MINILM_SHAPES,
         Traffic({**SENTENCES, "batch": range(1, 9)})),
    Model("gpt2_small", "decoder",
          "transformers GPT2LMHeadModel (GPT2Config small-sized, random), no KV cache, "
          "legacy exporter",
          _tokens(50257, False), tuple({"batch": 1, "sequence": n} for n in (16, 64, 128)),
          traffic=Traffic(SENTENCES), exporter="gpt2"),
    Model("lstm", "rnn", "torch.nn.LSTM(80, 256, num_layers=2, batch_first) + Linear, "
          "legacy exporter",
          (Input("input", ("batch", "sequence", 80)),),
          tuple({"batch": b, "sequence": n} for b, n in ((1, 50), (4, 100), (16, 200))),
          traffic=Traffic(dict(batch=range(1, 17), sequence=range(10, 201))),
          exporter="rnn", options={"cell": "LSTM"}),
    Model("gru", "rnn", "torch.nn.GRU(80, 256, num_layers=2, batch_first) + Linear, "
          "legacy exporter",
          (Input("input", ("batch", "sequence", 80)),),
          tuple({"batch": b, "sequence": n} for b, n in ((1, 50), (4, 100), (16, 200))),
          traffic=Traffic(dict(batch=range(1, 17), sequence=range(10, 201))),
          exporter="rnn", options={"cell": "GRU"}),
)

BY_NAME = {m.name: m for m in MODELS}
