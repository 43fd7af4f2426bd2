"""The thread pool with several calling threads (kernels/threads.c): a parallel loop never
waits for another thread's region -- it runs on its caller instead -- so the kernels of calls
from different threads run at once; BLAS regions, whose jobs wait on each other, still get the
pool's threads all together."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import relvm
from relvm import examples

native = pytest.importorskip("relvm.backends.native")
if not native.available():
    pytest.skip("relvm's C kernels are not built", allow_module_level=True)


def test_a_loop_runs_on_its_caller_while_another_threads_region_runs(two_threads) -> None:
    """Thread A's loop waits inside its region until thread B's loop has run: that happens
    only if B does not wait for A's region to end."""
    ffi, lib = native.load()
    a_inside, b_inside = threading.Event(), threading.Event()
    b_seen: list[bool] = []
    b_ranges: list[tuple[int, int]] = []

    def body(ctx, begin, end):
        if int(ffi.cast("intptr_t", ctx)) == 1:  # A's loop, on A or on a pool thread
            a_inside.set()
            b_seen.append(b_inside.wait(timeout=10))
        else:
            b_ranges.append((begin, end))
            b_inside.set()
    callback = ffi.callback("relvm_range_fn", body)

    def caller_b() -> None:
        assert a_inside.wait(timeout=10)
        lib.relvm_parallel_for(64, 1, callback, ffi.cast("void *", 2))
    b = threading.Thread(target=caller_b)
    b.start()
    lib.relvm_parallel_for(2, 1, callback, ffi.cast("void *", 1))
    b.join(timeout=30)
    assert b_seen and all(b_seen)
    assert b_ranges == [(0, 64)]  # B's whole loop, inline on B


def test_blas_and_loops_from_many_threads_stay_right(two_threads) -> None:
    """Weights passed as inputs go to OpenBLAS (threaded, on the pool) while other threads run
    relvm's loops: no deadlock, every result right."""
    exe = relvm.build(relvm.parse(examples.text("mlp")))
    vm = relvm.VirtualMachine(exe)
    p = examples.params("mlp")
    weights = [p[k] for k in ("w1", "b1", "w2", "b2", "w3", "b3")]

    def reference(x):
        h = np.maximum(x @ p["w1"].T + p["b1"], 0)
        h = np.maximum(h @ p["w2"].T + p["b2"], 0)
        z = h @ p["w3"].T + p["b3"]
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    wrong = [0] * 4

    def work(t: int) -> None:
        for i in range(8):
            x = np.random.default_rng(10 * t + i).standard_normal((16 + 48 * (t % 2), 784))
            x = x.astype(np.float32)
            wrong[t] += not np.allclose(vm.invoke("main", x, *weights), reference(x),
                                        rtol=1e-4, atol=1e-5)
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert wrong == [0] * 4
