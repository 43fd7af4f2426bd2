"""Memory planning: pooled storage, the upper-bound arena, bounded memory under varying N."""

from __future__ import annotations

import os

import numpy as np
import pytest

import relvm
from relvm import RelvmInputError
from relvm.runtime.bytecode.opcodes import Opcode

CHAIN = """def @main(%x: Tensor[(n, 64), float32], %w: Tensor[(64, 64), float32]) {
  %0 = nn.dense(%x, %w);
  %1 = nn.relu(%0);
  %2 = nn.dense(%1, %w);
  %3 = tanh(%2);
  %4 = nn.dense(%3, %w);
  %5 = sigmoid(%4);
  add(%5, 1f)
}"""

W = (np.random.default_rng(0).standard_normal((64, 64)) * 0.1).astype(np.float32)


def reference(x):
    h = np.maximum(x @ W.T, 0)
    h = np.tanh(h @ W.T)
    return 1 / (1 + np.exp(-(h @ W.T))) + 1


def build(**kw):
    return relvm.build(relvm.parse(CHAIN), params={"w": W}, **kw)


def test_intermediates_share_storage_by_liveness() -> None:
    fn = build(fuse=False).function("main")
    storages = [i for i in fn.instructions if i[0] == Opcode.AllocStorage]
    pooled = [i for i in fn.instructions if i[0] == Opcode.AllocTensor and i[2] >= 0]
    # Six intermediates, but only two live at once: two storages serve them all.
    assert len(pooled) == 6 and len(storages) == 2


@pytest.mark.e2e
def test_pooled_storage_is_reused_across_invokes() -> None:
    vm = relvm.VirtualMachine(build())
    x = np.ones((8, 64), np.float32)
    vm.invoke("main", x)
    first = vm.stats.allocations
    vm.invoke("main", x)
    assert vm.stats.allocations == 1 < first  # only the result is new
    out = np.empty((8, 64), np.float32)
    vm.invoke_with_outputs("main", [x], [out])
    assert vm.stats.allocations == 0
    np.testing.assert_allclose(out, reference(x), rtol=1e-5)


@pytest.mark.e2e
def test_upper_bounds_arena_zero_allocations_after_first() -> None:
    exe = build(upper_bounds={"n": 64})
    fn = exe.function("main")
    storages = [i for i in fn.instructions if i[0] == Opcode.AllocStorage]
    assert len(storages) == 1 and storages[0][2] >= 0  # one arena of static size
    vm = relvm.VirtualMachine(exe)
    rng = np.random.default_rng(1)
    for i, n in enumerate([64, 1, 33, 64, 7, 2]):
        x = rng.standard_normal((n, 64)).astype(np.float32)
        out = np.empty((n, 64), np.float32)
        vm.invoke_with_outputs("main", [x], [out])
        np.testing.assert_allclose(out, reference(x), rtol=1e-5, atol=1e-6)
        if i:
            assert vm.stats.allocations == 0


@pytest.mark.e2e
def test_upper_bound_exceeded_is_a_clear_error() -> None:
    vm = relvm.VirtualMachine(build(upper_bounds={"n": 64}))
    with pytest.raises(RelvmInputError, match=r"n=65 exceeds the upper bound n <= 64"):
        vm.invoke("main", np.zeros((65, 64), np.float32))


def test_bad_upper_bounds() -> None:
    with pytest.raises(relvm.RelvmCompileError, match="upper_bounds"):
        build(upper_bounds={"n": -1})


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


@pytest.mark.e2e
def test_memory_stays_bounded_when_n_changes_every_call() -> None:
    vm = relvm.VirtualMachine(build())
    x = np.ones((512, 64), np.float32)
    for _ in range(20):  # warm up at the peak N = 512
        vm.invoke("main", x)
    peak_pool = vm.pooled_bytes
    rss_at_peak = _rss_bytes()
    rng = np.random.default_rng(2)
    for n in rng.integers(1, 513, 10_000):
        vm.invoke("main", x[:n])
        assert vm.pooled_bytes <= peak_pool
    rss_after = _rss_bytes()
    if rss_at_peak is not None:
        # Resident memory stays within a small constant of the N = 512 peak: no per-size pools.
        assert rss_after - rss_at_peak < 16 * 2**20, (rss_at_peak, rss_after)
    # What the VM holds between calls is what N = 512 needed: no free lists per size.
    assert vm.pooled_bytes == peak_pool
    assert vm.stats.peak_bytes <= peak_pool + 512 * 64 * 4


@pytest.mark.e2e
def test_stats_report_allocations_and_peak() -> None:
    vm = relvm.VirtualMachine(build())
    vm.invoke("main", np.ones((10, 64), np.float32))
    assert vm.stats.allocations >= 1
    assert vm.stats.allocated_bytes >= 10 * 64 * 4
    assert vm.stats.peak_bytes >= vm.stats.allocated_bytes
