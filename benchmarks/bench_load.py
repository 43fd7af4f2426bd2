"""Loading executables: load time of the MLP and of a >= 100 MB-weights model, and how resident
memory grows (constants are memory-mapped: pages come in as weights are used).

Run: ``python benchmarks/bench_load.py``. Each load is measured in a fresh process that imports
only the runtime, so resident memory (``/proc/self/statm``) is not the parent's. Targets from
issue 5: the MLP loads in <= 5 ms; 128 MB of weights load in <= 50 ms.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import relvm
import relvm.examples

#: Two dense layers of 4096 x 4096 float32: 128 MiB of weights.
BIG = """def @main(%x: Tensor[(n, 4096), float32], %w1: Tensor[(4096, 4096), float32],
          %w2: Tensor[(4096, 4096), float32]) {
  %0 = nn.relu(nn.dense(%x, %w1));
  nn.dense(%0, %w2)
}"""

# Runs in a fresh process: load the file (median of repeats), then memory at each stage.
CHILD = r"""
import json, os, statistics, sys, time
import numpy as np

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

import relvm
path, width, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
times = []
for _ in range(repeats):  # each load maps the file again; the earlier maps are dropped
    start = time.perf_counter()
    exe = relvm.load(path)
    times.append((time.perf_counter() - start) * 1e3)
    del exe
rss = {"before load": rss_mb()}
start = time.perf_counter()
exe = relvm.load(path)
first = (time.perf_counter() - start) * 1e3
rss["after load"] = rss_mb()
vm = relvm.VirtualMachine(exe)
rss["after VirtualMachine()"] = rss_mb()
x = np.ones((1, width), np.float32)
start = time.perf_counter()
vm.invoke("main", x)
invoke1 = (time.perf_counter() - start) * 1e3
rss["after first invoke"] = rss_mb()
start = time.perf_counter()
vm.invoke("main", x)
invoke2 = (time.perf_counter() - start) * 1e3
rss["after second invoke"] = rss_mb()
print(json.dumps({"median_ms": statistics.median(times), "min_ms": min(times),
                  "load_ms": first, "invoke1_ms": invoke1, "invoke2_ms": invoke2,
                  "rss_mb": rss}))
"""


def measure(path: Path, width: int, repeats: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), str(width), str(repeats)],
                          capture_output=True, text=True, check=True,
                          env=dict(os.environ, PYTHONPATH=str(Path(relvm.__file__).parents[1])))
    return json.loads(proc.stdout)


def report(name: str, path: Path, r: dict, target_ms: float) -> None:
    size = path.stat().st_size / 2**20
    ok = "ok" if r["median_ms"] <= target_ms else "OVER TARGET"
    print(f"{name}: {size:.1f} MiB file")
    print(f"  load: median {r['median_ms']:.2f} ms, min {r['min_ms']:.2f} ms "
          f"(target <= {target_ms:g} ms: {ok})")
    print(f"  first invoke {r['invoke1_ms']:.1f} ms (checks each constant's CRC-32 on first "
          f"use), second {r['invoke2_ms']:.2f} ms")
    base = r["rss_mb"]["before load"]
    for stage, mb in r["rss_mb"].items():
        print(f"  RSS {stage:<24} {mb:8.1f} MiB  ({mb - base:+8.1f})")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        mlp = Path(tmp) / "mlp.rvm"
        relvm.build(relvm.parse(relvm.examples.text("mlp")),
                    params=relvm.examples.params("mlp")).save(mlp)
        report("MLP (784-512-512-10)", mlp, measure(mlp, 784, 50), 5)

        big = Path(tmp) / "big.rvm"
        rng = np.random.default_rng(0)
        params = {k: (rng.standard_normal((4096, 4096), np.float32) / 64) for k in ("w1", "w2")}
        relvm.build(relvm.parse(BIG), params=params).save(big)
        del params
        report("dense 4096x4096 x2 (128 MiB of weights)", big, measure(big, 4096, 20), 50)


if __name__ == "__main__":
    main()
