"""One VirtualMachine called from many threads at once: every call right, none serialised.

Each thread gets its own execution state (runtime/vm/thread.py), so calls from different threads
share no mutable object: results, statistics, inputs and outputs set for a call, pooled
storage and replays are all per thread. The tests call one shared VM from THREADS threads,
CALLS calls each, with batch sizes that differ between threads and calls, and compare every
result with NumPy; wrong results are counted and must be zero.
"""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Callable

import numpy as np
import pytest

import relvm
from relvm import examples
from relvm.testing.reference import evaluate

THREADS = 4
CALLS = 40
SIZES = (1, 3, 8, 16, 5)


def run_threads(work: Callable[[int], int], threads: int = THREADS) -> int:
    """Run ``work(t)`` on ``threads`` threads started together; the sum of what they return
    (their wrong results). An exception in a thread fails the test."""
    start = threading.Barrier(threads)
    wrong = [0] * threads
    errors: list[BaseException] = []

    def body(t: int) -> None:
        try:
            start.wait(timeout=30)
            wrong[t] = work(t)
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)
    pool = [threading.Thread(target=body, args=(t,)) for t in range(threads)]
    for p in pool:
        p.start()
    for p in pool:
        p.join(timeout=300)
    assert not any(p.is_alive() for p in pool), "a thread did not finish"
    if errors:
        raise errors[0]
    return sum(wrong)


def model(name: str):
    module = relvm.parse(examples.text(name))
    params = examples.params(name)
    return relvm.build(module, params=params), module, params


def batches(name: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per batch size: an input and the reference interpreter's result for it."""
    _, module, params = model(name)
    shape = (784,) if name == "mlp" else (3, 32, 32)
    rng = np.random.default_rng(len(name))
    out = {}
    for n in SIZES:
        x = rng.standard_normal((n,) + shape).astype(np.float32)
        out[n] = x, np.asarray(evaluate(module, x, params=params))
    return out


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["mlp", "convnet"])
def test_examples_from_many_threads_with_batch_sizes_of_their_own(name: str) -> None:
    exe = model(name)[0]
    vm = relvm.VirtualMachine(exe)
    data = batches(name)

    def work(t: int) -> int:
        wrong = 0
        for i in range(CALLS):
            n = SIZES[(t + i * (t + 1)) % len(SIZES)]  # each thread its own sequence
            x, want = data[n]
            if i % 2:
                got = vm.invoke("main", x)
            else:  # into an array of this thread's, written in place
                out = np.full(want.shape, np.nan, np.float32)
                got = vm.invoke_with_outputs("main", [x], [out])
                wrong += got is not out
            wrong += not np.allclose(got, want, rtol=1e-4, atol=1e-5)
        return wrong
    assert run_threads(work) == 0


@pytest.mark.e2e
def test_generated_fused_kernels_from_many_threads() -> None:
    text = """def @main(%x: Tensor[(n, 4096), float32], %y: Tensor[(4096), float32]) {
      %0 = multiply(%x, 2f);
      %1 = add(%0, %y);
      tanh(exp(negative(nn.relu(%1))))
    }"""
    exe = relvm.build(relvm.parse(text))
    assert any(k.op == "fused" and "plan" in k.attrs for k in exe.kernels)  # generated C
    vm = relvm.VirtualMachine(exe)
    rng = np.random.default_rng(3)
    y = rng.standard_normal(4096).astype(np.float32)

    def work(t: int) -> int:
        wrong = 0
        for i in range(CALLS):
            x = rng_for(t, i).standard_normal((1 + (t + i) % 6, 4096)).astype(np.float32)
            want = np.tanh(np.exp(-np.maximum(x * 2 + y, 0)))
            wrong += not np.allclose(vm.invoke("main", x, y), want, rtol=1e-5, atol=1e-6)
        return wrong
    assert run_threads(work) == 0


def rng_for(t: int, i: int) -> np.random.Generator:
    return np.random.default_rng(1000 * t + i)


def test_control_flow_and_recursion_from_many_threads() -> None:
    vm = relvm.VirtualMachine(relvm.build(relvm.parse("""
    def @f(%x: Tensor[(n), float32], %k: int64) -> Tensor[(n), float32] {
      if (equal(%k, 0i64)) { %x } else {
        %0 = add(%x, 1f);
        %1 = multiply(%0, 2f);
        %2 = @f(%1, subtract(%k, 1i64));
        add(%2, %1)
      }
    }
    def @main(%x: Tensor[(n), float32], %k: int64) { @f(%x, %k) }"""), fuse=False))

    def reference(x: np.ndarray, k: int) -> np.ndarray:
        if k == 0:
            return x
        h = (x + 1) * 2
        return reference(h, k - 1) + h

    def work(t: int) -> int:
        wrong = 0
        for i in range(CALLS):
            x = rng_for(t, i).standard_normal(1 + (t * 7 + i) % 50).astype(np.float32)
            k = (t + i) % 5
            got = vm.invoke("main", x, np.array(k, np.int64))
            wrong += not np.allclose(got, reference(x, k), rtol=1e-5)
        return wrong
    assert run_threads(work) == 0


def test_inputs_outputs_and_stats_are_the_calling_threads() -> None:
    """set_input / set_output / bind_outputs, then invoke or invoke_stateful, get_outputs and
    stats: each thread sees what it set and what its own call did, while the other threads
    do the same in between (the barriers make them take turns at every step)."""
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(
        "def @main(%x: Tensor[(n, 4), float32]) { (exp(%x), negative(%x)) }")))
    step = threading.Barrier(THREADS)

    def work(t: int) -> int:
        wrong = 0
        for i in range(10):
            x = np.full((t + 1, 4), t + i / 10, np.float32)
            vm.set_input("main", x)
            step.wait(timeout=30)
            vm.invoke_stateful("main")
            step.wait(timeout=30)
            a, b = vm.get_outputs()
            wrong += vm.get_num_outputs() != 2
            wrong += not (np.allclose(a, np.exp(x)) and np.array_equal(b, -x))
            wrong += vm.stats.allocations != 2 or vm.stats.output_copies != 0

            outs = [np.empty((t + 1, 4), np.float32) for _ in range(2)]
            vm.set_output("main", *outs)
            step.wait(timeout=30)
            got = vm.invoke("main", x)  # this thread's set_output, for this call only
            wrong += not all(g is o for g, o in zip(got, outs))
            wrong += vm.stats.allocations != 0
            wrong += not np.allclose(outs[0], np.exp(x))
            step.wait(timeout=30)
            vm.bind_outputs("main", *outs)
            got = vm.invoke("main", x * 2)
            vm.unbind_outputs("main")
            wrong += not (got[1] is outs[1] and np.array_equal(outs[1], -2 * x))
        return wrong
    assert run_threads(work) == 0


def test_two_threads_run_kernels_at_the_same_time(monkeypatch) -> None:
    """Each call's kernel waits inside for the other thread's kernel: the calls pass only if
    both threads are inside a kernel at once (a VM that serialised calls would time out)."""
    from relvm.backends import numpy_ref

    inside = threading.Barrier(2)
    make = numpy_ref.make_kernel

    def meeting_kernel(entry, constants=None):
        kernel = make(entry, constants)

        def meet(*args):
            inside.wait(timeout=30)  # BrokenBarrierError if the other call cannot get here
            kernel(*args)
        return meet
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(
        "def @main(%x: Tensor[(n), float32]) { exp(%x) }"), backend="numpy"))
    monkeypatch.setattr(numpy_ref, "make_kernel", meeting_kernel)  # for the threads' kernels

    def work(t: int) -> int:
        x = np.full(3, t, np.float32)
        return not np.allclose(vm.invoke("main", x), np.exp(x))
    assert run_threads(work, threads=2) == 0


@pytest.mark.e2e
def test_a_threads_state_is_made_on_its_first_call_and_freed_with_it() -> None:
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(
        "def @main(%x: Tensor[(n, 8), float32]) { exp(add(%x, 1f)) }")))
    mine = vm._local.state
    seen: list = []

    def work(t: int) -> int:
        vm.invoke("main", np.ones((2, 8), np.float32))
        seen.append(weakref.ref(vm._local.state))
        return 0
    run_threads(work, threads=3)
    gc.collect()
    assert len(seen) == 3 and all(r() is None for r in seen)  # gone with their threads
    assert vm._local.state is mine  # this thread's was made with the VM, and stays


@pytest.mark.e2e
def test_threads_share_the_packed_weights_of_constants() -> None:
    """Kernels are each thread's own, but a constant weight is packed once per VM."""
    exe = model("mlp")[0]
    vm = relvm.VirtualMachine(exe)
    x = np.ones((2, 784), np.float32)
    vm.invoke("main", x)
    packed = dict(vm._known._prepared)
    assert packed  # the dense weights, packed for relvm's GEMM

    def work(t: int) -> int:
        vm.invoke("main", x)
        return 0
    run_threads(work)
    assert vm._known._prepared == packed  # the same packed copies: none made again
