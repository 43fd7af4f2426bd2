"""One loaded Executable shared by 8 threads, each with its own VirtualMachine."""

from __future__ import annotations

import threading

import numpy as np

import pytest

import relvm

from formatcases import assert_identical

TEXT = """def @main(%x: Tensor[(n, 32), float32], %w1: Tensor[(32, 32), float32],
          %w2: Tensor[(16, 32), float32]) {
  %0 = nn.dense(%x, %w1);
  %1 = tanh(%0);
  %2 = nn.dense(%1, %w2);
  (nn.softmax(%2, axis=1), sum(%2, axis=[1]))
}"""
THREADS, CALLS, SIZES = 8, 200, range(1, 33)


@pytest.mark.e2e
def test_one_loaded_executable_eight_threads(tmp_path) -> None:
    rng = np.random.default_rng(3)
    params = {"w1": rng.standard_normal((32, 32)).astype(np.float32) / 4,
              "w2": rng.standard_normal((16, 32)).astype(np.float32) / 4}
    exe = relvm.build(relvm.parse(TEXT), params=params)
    exe.save(tmp_path / "m.rvm")
    inputs = {n: rng.standard_normal((n, 32)).astype(np.float32) for n in SIZES}
    reference = relvm.VirtualMachine(exe)
    expected = {n: reference.invoke("main", x) for n, x in inputs.items()}

    loaded = relvm.load(tmp_path / "m.rvm")  # constants not yet verified: threads race to it
    start = threading.Barrier(THREADS)
    failures: list = []
    done = [0] * THREADS

    def work(t: int) -> None:
        try:
            vm = relvm.VirtualMachine(loaded)
            order = np.random.default_rng(t).choice(list(SIZES), CALLS)
            start.wait()
            for n in order:
                assert_identical(vm.invoke("main", inputs[int(n)]), expected[int(n)])
                done[t] += 1
        except BaseException as e:  # reported below, with the thread
            failures.append((t, repr(e)))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not failures, failures
    assert done == [CALLS] * THREADS
