"""relvm vs ONNX Runtime on real ONNX models shipped in PyPI packages, at several input shapes.

Run: ``python benchmarks/bench_onnx_models.py [--backend c|numpy]``. Needs ``onnx`` and
``onnxruntime``, and the model packages: ``pip install --no-deps silero-vad rapidocr-onnxruntime``
(models whose package is missing are skipped). Each model is imported and built once; outputs
are checked against ORT (1e-4) before timing. Prints medians (ms) and relvm/ORT per shape.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import median_us  # noqa: E402

import relvm  # noqa: E402


def _path(package: str, *parts: str) -> str | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], *parts)
    return path if os.path.exists(path) else None


def _silero_feeds(n: int, rng) -> dict:
    return {"input": (0.1 * rng.standard_normal((n, 576))).astype(np.float32),
            "h": np.zeros((1, 1, 128), np.float32), "c": np.zeros((1, 1, 128), np.float32)}


MODELS = [
    ("silero-vad 16k sequence", ("silero_vad", "data", "silero_vad_16k_sequence.onnx"),
     [("T=10", 10), ("T=100", 100), ("T=400", 400)], _silero_feeds),
    ("PP-OCRv4 det", ("rapidocr_onnxruntime", "models", "ch_PP-OCRv4_det_infer.onnx"),
     [("1x3x64x64", (1, 3, 64, 64)), ("1x3x320x320", (1, 3, 320, 320)),
      ("2x3x256x512", (2, 3, 256, 512))],
     lambda shape, rng: {"x": rng.random(shape, dtype=np.float32)}),
    ("PP-OCR cls", ("rapidocr_onnxruntime", "models", "ch_ppocr_mobile_v2.0_cls_infer.onnx"),
     [("1x3x48x192", (1, 3, 48, 192)), ("6x3x48x192", (6, 3, 48, 192)),
      ("30x3x48x192", (30, 3, 48, 192))],
     lambda shape, rng: {"x": rng.random(shape, dtype=np.float32)}),
]


def main(argv=None) -> list[tuple]:
    import onnxruntime as ort

    from relvm.frontend.onnx import from_onnx

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="c" if "c" in relvm.compiler.BACKENDS else "numpy")
    args = p.parse_args(argv)
    rows = []
    print(f"relvm[{args.backend}] vs ONNX Runtime on real models (median ms, default threads)")
    print(f"  {'model':<26} {'shape':<14} {'relvm':>9} {'ORT':>9} {'relvm/ORT':>10}")
    for name, where, shapes, make in MODELS:
        path = _path(*where)
        if path is None:
            print(f"  {name:<26} (skipped: {where[0]} is not installed)")
            continue
        mod, params = from_onnx(path)
        vm = relvm.VirtualMachine(relvm.build(mod, params=params, backend=args.backend))
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        for label, shape in shapes:
            feeds = make(shape, rng)
            vm.set_input("main", *feeds.values())
            got = vm.invoke("main")
            want = sess.run(None, feeds)
            got = list(got) if isinstance(got, tuple) else [got]
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=0, atol=1e-4)
            t_relvm = median_us(lambda: vm.invoke("main"), repeat=7) / 1e3
            t_ort = median_us(lambda: sess.run(None, feeds), repeat=7) / 1e3
            rows.append((name, label, t_relvm, t_ort))
            print(f"  {name:<26} {label:<14} {t_relvm:9.2f} {t_ort:9.2f} {t_relvm / t_ort:10.2f}",
                  flush=True)
    return rows


if __name__ == "__main__":
    import relvm.compiler  # noqa: F401

    main()
