"""relvm vs ONNX Runtime on the reference MLP and convnet, at N = 1, 16, 128, in one run.

Run: ``python benchmarks/bench_models.py [--threads default|1] [--backend c|numpy]``
(``pip install ".[bench]"`` for ONNX Runtime). Both runtimes get the same weights and the same
thread count; outputs are checked to agree before timing. Prints medians (microseconds) and the
relvm/ORT ratio per cell.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_us, median_us, optional  # noqa: E402
from models import INPUT_SHAPES, onnx_model, relvm_model  # noqa: E402

import relvm  # noqa: E402

SIZES = (1, 16, 128)


def set_threads(k: int | None) -> None:
    try:
        from relvm.runtime import threads
    except ImportError:
        return
    threads.set_num_threads(k or os.cpu_count() or 1)


def relvm_runner(name: str, backend: str, saved: bool = False):
    text, params = relvm_model(name)
    exe = relvm.build(relvm.parse(text), params=params, backend=backend)
    if saved:  # as a user runs a model they built: saved (signed), loaded, its own kernels
        exe = relvm.load_bytes(exe.save_bytes())
    vm = relvm.VirtualMachine(exe)
    if saved and exe.kernel_library:
        assert vm.stats.native_code.startswith("the file's own kernels"), vm.stats.native_code

    def make(x: np.ndarray):
        out = np.empty((x.shape[0], 10), np.float32)
        return (lambda: vm.invoke_with_outputs("main", [x], [out])), out
    return make, params


def ort_runner(name: str, params, threads: int | None):
    ort = optional("onnxruntime")
    if ort is None or optional("onnx") is None:
        return None
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(onnx_model(name, params).SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])

    def make(x: np.ndarray):
        result = []
        return (lambda: result.__setitem__(slice(None), sess.run(None, {"x": x}))), result
    return make


def run(backend: str, threads: int | None, saved: bool = False) -> list[tuple]:
    set_threads(threads)
    rows = []
    for name in ("mlp", "convnet"):
        make_relvm, params = relvm_runner(name, backend, saved)
        make_ort = ort_runner(name, params, threads)
        for n in SIZES:
            x = np.random.default_rng(n).standard_normal(INPUT_SHAPES[name](n)).astype(np.float32)
            fn, out = make_relvm(x)
            fn()
            t_ort = None
            if make_ort is None:
                t_relvm = median_us(fn)
            else:
                g, result = make_ort(x)
                g()
                np.testing.assert_allclose(out, result[0], rtol=1e-3, atol=1e-4)
                # Taking turns in rounds: noise from the machine lands on both alike.
                times = interleaved_us({"relvm": fn, "ort": g})
                t_relvm, t_ort = times["relvm"], times["ort"]
            rows.append((name, n, t_relvm, t_ort))
    return rows


def table(rows: list[tuple], backend: str, threads: int | None) -> str:
    label = f"{threads} thread" if threads else "default threads"
    lines = [f"relvm[{backend}] vs ONNX Runtime, {label} (median microseconds)",
             f"  {'model':<8} {'N':>4} {'relvm':>10} {'ORT':>10} {'relvm/ORT':>10}"]
    for name, n, t, o in rows:
        ratio = f"{t / o:10.2f}" if o else f"{'-':>10}"
        ort = f"{o:10.1f}" if o else f"{'-':>10}"
        lines.append(f"  {name:<8} {n:>4} {t:10.1f} {ort} {ratio}")
    return "\n".join(lines)


def main(argv=None) -> list[tuple]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="c" if "c" in _backends() else "numpy")
    p.add_argument("--threads", default="both", choices=["default", "1", "both"])
    p.add_argument("--json", help="also write the results to this JSON file")
    p.add_argument("--saved", action="store_true",
                   help="run each model saved and loaded again (signed by your key)")
    args = p.parse_args(argv)
    settings = {"default": [None], "1": [1], "both": [None, 1]}[args.threads]
    all_rows = []
    for threads in settings:
        rows = run(args.backend, threads, args.saved)
        print(table(rows, args.backend, threads), flush=True)
        all_rows.append((threads, rows))
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump({"backend": args.backend, "runs": [
                {"threads": t or "default", "rows": [list(r) for r in rows]}
                for t, rows in all_rows]}, f, indent=1)
    return all_rows


def _backends() -> tuple:
    import relvm.compiler

    return relvm.compiler.BACKENDS


if __name__ == "__main__":
    main()
