"""The oneDNN backend's cost model: is a region worth running in oneDNN rather than relvm?

Measured at 1 thread (oneDNN 3.2 on AVX-512, AMD EPYC; whole models, batch 1, every region
kept): ResNet-50 0.92x relvm's time, ResNet-18 1.00x, but MobileNet-v2 1.36x, MobileNet-v3
1.61x, EfficientNet-B0 1.34x, YOLOv8n-like 1.26x (51 small regions), MiniLM 1.03x, BERT-base
and Whisper-tiny 1.00x. Per primitive (ONEDNN_VERBOSE=profile_exec, inside a region, no
reorders): ResNet-18's 3x3 convs run as fast as relvm's (31.9 ms of convs, relvm 32 ms in all),
but MobileNet-v2's 1x1 convs on few channels take 6.6 ms and its depthwise ones 1.8 ms where
relvm runs the whole model in 7.6 ms. And a region's edges cost: its inputs are reordered into
NHWC and its results out of it (1.6 ns an element: ResNet-18's 1x3x224x224 input, 0.24 ms).

So a region is kept when oneDNN's gain can pay for its edges:

- a conv region when dense (groups 1) convs with windows larger than 1x1 do 40% of its
  work (``KXK_SHARE``; ResNet-50: 48%, MobileNets: 0-2%) and its work is at least
  ``CONV_WORK_PER_ELEMENT`` flops per element crossing its edge (a backbone: ResNet-18's is
  ~24,000; one YOLO 3x3 conv on 64 channels ~600);
- a region without convs (dense, matmul, layer_norm, softmax) never: oneDNN's matmul runs at
  relvm's speed (dense + bias + relu at 1 thread, oneDNN / relvm: 128x768x768 1.00, 128 rows
  768->3072 1.02, 3072->768 0.99, 128x4096x4096 1.00, 512x1024x1024 0.99, 16x768x768 1.07:
  one-layer models built with and without the region, interleaved medians), so a region only
  adds its edges and splits relvm's fusion (BERT-base at 128 tokens with its 24 such regions:
  1.00 at 1 thread, 1.06 at 2, where both libraries' thread pools hand the cores back and
  forth at every edge).

``dnnl_bf16`` (bfloat16 operands, float32 accumulation) runs convs and matmuls about twice as
fast as float32, so it keeps more (:func:`worth_bf16`): conv regions of any conv kind, and
matmul regions (``worth_matmul`` with ``BF16_MATMUL_WORK_PER_ELEMENT``).

Symbolic dims count as ``SYMBOLIC_DIM``: the ratios above hardly depend on them (a conv's work
and its edges both grow with its image, a matmul's both with its rows).
"""

from __future__ import annotations

import math

from .. import external

KXK_SHARE = 0.4
CONV_WORK_PER_ELEMENT = 5000.0
MATMUL_WORK_PER_ELEMENT = 1000.0
SYMBOLIC_DIM = 64


def _dims(shape) -> list[int]:
    return [d if isinstance(d, int) else SYMBOLIC_DIM for d in shape]


def measure(region) -> tuple[float, float, float]:
    """(work in flops, share of it in dense kxk convs, elements crossing the region's edge):
    relvm's one measure (``external.measure``, in multiply-adds: two flops each), symbolic
    dims at ``SYMBOLIC_DIM``."""
    m = external.measure(region, SYMBOLIC_DIM)
    return 2.0 * m.work, m.dense_window_work / max(m.work, 1), float(m.edge)


#: A conv-free region needs a product of this many rows: a classifier head's dense reads
#: (batch, K), one row per image at batch 1, and the region call does not pay off there
#: (MobileNet-v2 with only its 1280->1000 head in oneDNN: 1.04-1.12x relvm's time).
MIN_ROWS = 16


def _rows(shape) -> int:
    """Rows of a product's data: a lone symbolic leading dim is a batch, taken as 1."""
    lead = list(shape[:-1])
    if len(lead) == 1 and not isinstance(lead[0], int):
        return 1
    return math.prod(_dims(lead))


def worth(region) -> bool:
    """Whether oneDNN should run ``region`` (see the module docstring for the numbers)."""
    work, kxk_share, edge = measure(region)
    if any(s["op"] == "nn.conv2d" for s in region.steps):
        return kxk_share >= KXK_SHARE and work >= CONV_WORK_PER_ELEMENT * edge
    return False


#: dnnl_bf16: the flops per element crossing a conv region's edge that pay for converting it
#: to and from bfloat16 there -- counting all its work, or only its dense kxk convs' (where
#: bfloat16 gains most; depthwise and few-channel 1x1 convs are bound by memory more than by
#: arithmetic). YOLOv8n-like at 1 thread, relvm's time with the regions kept at a threshold
#: on all work: 100 (42 regions) 0.86x, 250 (24) 0.85x, 500 (8) 0.92x, 1000 (1) 0.96x;
#: MobileNet-v3 and EfficientNet-B0 (depthwise blocks cut by squeeze-excite): 1.02-1.03x at
#: 100, nothing gained at any threshold (their runs' noise: +-10%).
BF16_WORK_PER_ELEMENT = 1000.0
BF16_KXK_WORK_PER_ELEMENT = 250.0
#: dnnl_bf16's matmul regions (each matmul converts its operands at every call): at 1 thread,
#: relvm's time with the regions kept at 100 / 300 / 1000 flops per edge element: BERT-base at
#: 128 tokens 0.58 / 0.56 / 0.55 (25, 25, 24 regions), MiniLM 0.67 / 0.64 / 1.00 (13, 13, 0),
#: Whisper-tiny's encoder at 30 s 0.71 / 0.72 / 0.94 (11, 11, 2); at 300 and 16 tokens BERT
#: 0.71, MiniLM 0.94, Whisper at 5 s 0.59; at 2 threads BERT 0.63, MiniLM 0.82.
BF16_MATMUL_WORK_PER_ELEMENT = 300.0


def worth_bf16(region) -> bool:
    """Whether ``dnnl_bf16`` should run ``region``: a conv region whose work per element
    crossing its edge reaches ``BF16_WORK_PER_ELEMENT``, or whose dense kxk convs' work alone
    reaches ``BF16_KXK_WORK_PER_ELEMENT`` (any conv kind counts: a MobileNet-v2 backbone of
    depthwise and 1x1 convs is 0.66x relvm's time in bfloat16, 1.36x in float32); a region
    without convs by :func:`worth_matmul` at ``BF16_MATMUL_WORK_PER_ELEMENT``."""
    if not any(s["op"] == "nn.conv2d" for s in region.steps):
        return worth_matmul(region, BF16_MATMUL_WORK_PER_ELEMENT)
    work, kxk_share, edge = measure(region)
    return work >= BF16_WORK_PER_ELEMENT * edge or \
        work * kxk_share >= BF16_KXK_WORK_PER_ELEMENT * edge


def worth_matmul(region, per_element: float = MATMUL_WORK_PER_ELEMENT) -> bool:
    """A conv-free region with a product of at least ``MIN_ROWS`` rows doing ``per_element``
    flops per edge element: ``dnnl_bf16``'s rule, and float32's were its matmul faster than
    relvm's (``MATMUL_WORK_PER_ELEMENT``)."""
    work, _, edge = measure(region)
    rows = [_rows(region.inputs[a[1]].shape if a[0] == "in"
                  else region.steps[a[1]]["type"]["shape"])
            for s in region.steps if s["op"] in ("nn.dense", "nn.matmul", "nn.batch_matmul")
            for a in s["args"][:1]]
    return max(rows, default=0) >= MIN_ROWS and work >= per_element * edge
