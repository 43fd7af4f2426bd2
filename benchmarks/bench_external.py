"""relvm alone vs relvm with the oneDNN backends (``targets=["dnnl"]``, ``["dnnl_bf16"]``) vs
ONNX Runtime, on zoo models: is the partitioned build ever slower than relvm alone?

Run: ``PYTHONPATH=<installed relvm> python benchmarks/bench_external.py [--models a,b]
[--threads 1 2] [--shapes default|all|I ...] [--targets dnnl dnnl_bf16] [--rounds N]`` from
anywhere (the models come from the zoo's cache, see ``benchmarks/zoo/export.py``). Each model
runs in a process of its own, every build of it timed in the same interleaved rounds; one row
per model, shape, thread count and target: relvm ms, relvm+target ms, ORT ms (medians),
target/relvm, target/ORT, the largest relative difference between the outputs of relvm alone
and the partitioned build (max|a - b| / max|a| per output) and the number of regions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "zoo"), str(HERE)]  # the zoo's catalog, then common.py
from catalog import BY_NAME  # noqa: E402

from common import interleaved_us  # noqa: E402

#: model -> the catalog's shape index timed here (batch 1; 224x224 images, 320x320 for the
#: detector, 128 tokens, 3000 frames: 30 s of audio).
MODELS = {"resnet18": 0, "resnet50": 0, "mobilenet_v2": 0, "mobilenet_v3_large": 0,
          "efficientnet_b0": 0, "yolov8n_like": 0, "bert_base_legacy": 2, "minilm_legacy": 1,
          "whisper_tiny_encoder": 2}


def _outputs(out) -> list[np.ndarray]:
    return [np.asarray(o) for o in (out if isinstance(out, (tuple, list)) else [out])]


def measure(name: str, threads: int, rounds: int, shape: int | None = None,
            targets: tuple = ("dnnl",)) -> dict:
    """One model at one thread count and one of the catalog's shapes (by index; None: the
    one ``MODELS`` names), built alone and for each of ``targets``, in this process."""
    import onnxruntime as ort

    import relvm
    from relvm.frontend.onnx import from_onnx

    relvm.set_num_threads(threads)
    model = BY_NAME[name]
    sizes = model.shapes[MODELS[name] if shape is None else shape]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(model.path), opts, providers=["CPUExecutionProvider"])
    feeds = model.feeds(sizes)
    inputs = [feeds[i.name] for i in sess.get_inputs()]
    mod, params = from_onnx(str(model.path))
    plain = relvm.VirtualMachine(relvm.build(mod, params=params))
    want = _outputs(plain.invoke("main", *inputs))
    runs = {"relvm": lambda: plain.invoke("main", *inputs), "ort": lambda: sess.run(None, feeds)}
    built = {}
    for target in targets:
        exe = relvm.build(mod, params=params, targets=[target])
        vm = relvm.VirtualMachine(exe)
        got = _outputs(vm.invoke("main", *inputs))
        err = max(float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-30))
                  for a, b in zip(want, got))
        built[target] = {"max_rel_err": err, "regions": len(exe.externals)}
        runs[target] = (lambda vm: lambda: vm.invoke("main", *inputs))(vm)
    times = interleaved_us(runs, rounds=rounds, repeat=3, warmup=3)
    return {"model": name, "shape": model.label(sizes), "threads": threads,
            "relvm_ms": times["relvm"] / 1e3, "ort_ms": times["ort"] / 1e3,
            "targets": {t: dict(b, ms=times[t] / 1e3) for t, b in built.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--shapes", nargs="+", default=["default"],
                    help="the catalog's shapes to time, by index (0: batch 1 at 224x224, 1: "
                         "batch 4, 2: 320x320 for the CNNs), 'all', or 'default' (MODELS)")
    ap.add_argument("--targets", nargs="+", default=["dnnl"],
                    help="the external backends to build for, each timed beside relvm alone "
                         "(dnnl: float32; dnnl_bf16: bfloat16 convs, on AVX512_BF16 or AMX)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # name:threads:shape, in this process
    args = ap.parse_args()
    if args.one:
        name, k, i = args.one.split(":")
        print(json.dumps(measure(name, int(k), args.rounds, None if i == "default" else int(i),
                                 tuple(args.targets))))
        return
    print(f"{'model':22} {'shape':16} {'thr':>3} {'target':10} {'relvm ms':>9} {'+target':>9} "
          f"{'ORT ms':>8} {'/relvm':>6} {'/ORT':>6} {'max rel err':>11} {'regions':>7}",
          flush=True)
    for name in args.models.split(","):
        shapes = (range(len(BY_NAME[name].shapes)) if args.shapes == ["all"] else args.shapes)
        for i, k in ((i, k) for i in shapes for k in args.threads):
            run = subprocess.run([sys.executable, __file__, "--one", f"{name}:{k}:{i}",
                                  "--rounds", str(args.rounds), "--targets", *args.targets],
                                 capture_output=True, text=True)
            if run.returncode:
                tail = (run.stderr.strip().splitlines() or ["?"])[-1]
                print(f"{name:22} shape {i}, threads={k}: failed: {tail}", flush=True)
                continue
            r = json.loads(run.stdout.strip().splitlines()[-1])
            for target, t in r["targets"].items():
                print(f"{r['model']:22} {r['shape']:16} {k:3d} {target:10} "
                      f"{r['relvm_ms']:9.1f} {t['ms']:9.1f} {r['ort_ms']:8.1f} "
                      f"{t['ms'] / r['relvm_ms']:6.2f} {t['ms'] / r['ort_ms']:6.2f} "
                      f"{t['max_rel_err']:11.1e} {t['regions']:7d}", flush=True)


if __name__ == "__main__":
    main()
