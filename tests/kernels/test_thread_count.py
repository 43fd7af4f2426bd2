"""One thread means one compute thread: relvm's kernels and OpenBLAS share one pool.

Each case runs a GEMM-heavy model in a fresh process and counts the OS threads whose CPU time
grew while it ran (from /proc/self/task), so idle threads do not count.
"""

from __future__ import annotations

import os
import textwrap

import pytest

from isolation import run_python

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")

SCRIPT = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    import relvm
    from relvm import examples

    if sys.argv[1] != "env":
        relvm.set_num_threads(int(sys.argv[1]))
    exe = relvm.build(relvm.parse(examples.text("mlp")), params=examples.params("mlp"))
    vm = relvm.VirtualMachine(exe)
    x = np.ones((256, 784), np.float32)
    vm.invoke("main", x)

    def cpu_ticks():
        out = {}
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                out[tid] = int(fields[11]) + int(fields[12])   # utime + stime
            except OSError:
                pass
        return out

    before = cpu_ticks()
    end = time.time() + 1.5
    while time.time() < end:
        vm.invoke("main", x)
    after = cpu_ticks()
    busy = [t for t in after if after[t] - before.get(t, 0) > 5]
    print(len(busy))
""")


def busy_threads(arg: str, env: dict) -> int:
    proc = run_python(SCRIPT, arg, env=env)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip().splitlines()[-1])


def test_omp_num_threads_1_keeps_one_compute_thread() -> None:
    assert busy_threads("env", {"OMP_NUM_THREADS": "1"}) == 1


def test_set_num_threads_1_keeps_one_compute_thread() -> None:
    # OMP_NUM_THREADS unset (empty): the pool starts with every core, then is set to 1.
    assert busy_threads("1", {"OMP_NUM_THREADS": ""}) == 1


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores")
def test_two_threads_are_really_used() -> None:
    # The counting method sees a second busy thread when there is one.
    assert busy_threads("2", {}) >= 2
