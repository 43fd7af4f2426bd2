"""Run every benchmark and print the relvm-vs-peers report; chart latency vs N per model.

Usage: ``python benchmarks/run.py [--quick] [--chart benchmarks/report.png]``. Peers (ONNX
Runtime) come from ``pip install ".[bench]"``; the chart needs matplotlib (skipped without it).
Each benchmark runs in its own process, so one runtime's threads never slow another's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(script: str, *args: str) -> int:
    print(f"\n=== {script} {' '.join(args)}".rstrip(), flush=True)
    start = time.perf_counter()
    code = subprocess.run([sys.executable, str(HERE / script), *args]).returncode
    print(f"=== {script}: {'ok' if code == 0 else f'exit {code}'} "
          f"({time.perf_counter() - start:.0f} s)", flush=True)
    return code


def chart(results: dict, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no chart: pip install matplotlib)")
        return
    runs = results["runs"]
    fig, axes = plt.subplots(len(runs), 2, figsize=(10, 4 * len(runs)), squeeze=False)
    for row, run_ in enumerate(runs):
        for col, model in enumerate(("mlp", "convnet")):
            ax = axes[row][col]
            rows = [r for r in run_["rows"] if r[0] == model]
            sizes = [r[1] for r in rows]
            ax.plot(sizes, [r[2] for r in rows], "o-", label=f"relvm ({results['backend']})")
            if all(r[3] for r in rows):
                ax.plot(sizes, [r[3] for r in rows], "s--", label="ONNX Runtime")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("batch N")
            ax.set_ylabel("median latency (µs)")
            ax.set_title(f"{model}, {run_['threads']} threads")
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="skip the slow real-model and load runs")
    p.add_argument("--chart", default=str(HERE / "report.png"), help="where to write the PNG")
    args = p.parse_args()
    failures = 0
    failures += run("bench_vm_overhead.py") != 0
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "models.json"
        failures += run("bench_models.py", "--json", str(results)) != 0
        if results.exists():
            chart(json.loads(results.read_text()), args.chart)
    if not args.quick:
        failures += run("bench_onnx_models.py") != 0
        failures += run("bench_load.py") != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
