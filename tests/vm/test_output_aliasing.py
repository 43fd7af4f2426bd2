"""Output arrays that share memory with an input, or with each other.

An output array that shares memory with an input gets the right result: the VM computes it
into a buffer of its own and copies it into the array at the end (``stats.output_copies``
counts it), since a kernel writing into the array would overwrite the input while the call
still reads it. Output arrays that share memory with each other are refused, naming both.
Arrays that share nothing are still written in place.
"""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm import RelvmInputError, examples

TRANSPOSE = "def @main(%x: Tensor[(4, 4), float32]) { transpose(%x) }"
DENSE = """def @main(%x: Tensor[(4, 4), float32], %w: Tensor[(4, 4), float32]) {
  nn.dense(%x, %w, units=4)
}"""
REVERSE = """def @main(%x: Tensor[(8), float32]) {
  strided_slice(%x, begin=[-1], end=[-9], strides=[-1])
}"""
TWO = "def @main(%x: Tensor[(n, 4), float32]) { (exp(%x), negative(%x)) }"


def vm_for(text: str, **build) -> relvm.VirtualMachine:
    return relvm.VirtualMachine(relvm.build(relvm.parse(text), **build))


def square() -> np.ndarray:
    return np.arange(16, dtype=np.float32).reshape(4, 4)


def test_transpose_into_its_own_input() -> None:
    vm = vm_for(TRANSPOSE)
    x = square()
    got = vm.invoke_with_outputs("main", [x], [x])
    assert got is x
    np.testing.assert_array_equal(x, square().T)
    assert vm.stats.output_copies == 1


@pytest.mark.parametrize("weights", ["input", "constant"])
def test_dense_into_its_data_input(weights: str) -> None:
    w = np.array([[1, 0, 0, 0], [0, 2, 0, 0], [1, 1, 1, 1], [0, 0, 0, -1]], np.float32)
    want = square() @ w.T  # small integers: exact in float32
    x = square()
    if weights == "input":
        vm = vm_for(DENSE)
        got = vm.invoke_with_outputs("main", [x, w], [x])
    else:
        vm = vm_for(DENSE, params={"w": w})
        got = vm.invoke_with_outputs("main", [x], [x])
    assert got is x
    np.testing.assert_array_equal(x, want)
    assert vm.stats.output_copies == 1


def test_reversed_slice_into_its_input_and_into_an_overlapping_view() -> None:
    vm = vm_for(REVERSE)
    x = np.arange(8, dtype=np.float32)
    vm.invoke_with_outputs("main", [x], [x])
    np.testing.assert_array_equal(x, np.arange(8, dtype=np.float32)[::-1])
    assert vm.stats.output_copies == 1
    buf = np.arange(12, dtype=np.float32)  # output overlapping the input's second half
    vm.invoke_with_outputs("main", [buf[:8]], [buf[4:]])
    np.testing.assert_array_equal(buf, [0, 1, 2, 3, 7, 6, 5, 4, 3, 2, 1, 0])
    assert vm.stats.output_copies == 1


@pytest.mark.e2e
def test_a_replayed_model_writing_over_its_input() -> None:
    """The MLP's result (n, 10) written over the start of its input (n, 784), call after call
    (the calls after the first are replays)."""
    exe = relvm.build(relvm.parse(examples.text("mlp")), params=examples.params("mlp"))
    vm, fresh = relvm.VirtualMachine(exe), relvm.VirtualMachine(exe)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal((3, 784)).astype(np.float32)
        want = fresh.invoke("main", x.copy())
        out = x.reshape(-1)[:30].reshape(3, 10)
        got = vm.invoke_with_outputs("main", [x], [out])
        assert got is out
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
        assert vm.stats.output_copies == 1


def test_inputs_returned_swapped_into_each_other() -> None:
    vm = vm_for("""def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
      (%y, %x)
    }""")
    x, y = np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32)
    vm.invoke_with_outputs("main", [x, y], [x, y])
    np.testing.assert_array_equal(x, [4, 5, 6])
    np.testing.assert_array_equal(y, [1, 2, 3])
    assert vm.stats.output_copies == 2


def test_an_input_returned_beside_a_result_written_over_it() -> None:
    vm = vm_for("def @main(%x: Tensor[(3), float32]) { (%x, negative(%x)) }")
    x, a = np.array([1, 2, 3], np.float32), np.zeros(3, np.float32)
    vm.invoke_with_outputs("main", [x], [a, x])
    np.testing.assert_array_equal(a, [1, 2, 3])  # x as it was when the call began
    np.testing.assert_array_equal(x, [-1, -2, -3])


def test_an_input_returned_into_itself_is_not_copied() -> None:
    vm = vm_for("def @main(%x: Tensor[(3), float32]) { %x }")
    x = np.array([1, 2, 3], np.float32)
    assert vm.invoke_with_outputs("main", [x], [x]) is x
    np.testing.assert_array_equal(x, [1, 2, 3])
    assert vm.stats.output_copies == 0


def test_outputs_sharing_memory_are_refused_naming_both() -> None:
    vm = vm_for(TWO)
    x = np.ones((2, 4), np.float32)
    same = np.empty((2, 4), np.float32)
    with pytest.raises(RelvmInputError,
                       match=r"^@main: output_args\[0\] and output_args\[1\] share memory; "
                             r"each result needs an array of its own$"):
        vm.invoke_with_outputs("main", [x], [same, same])
    buf = np.zeros(12, np.float32)
    with pytest.raises(RelvmInputError, match=r"output_args\[0\] and output_args\[1\] share"):
        vm.invoke_with_outputs("main", [x], [buf[:8].reshape(2, 4), buf[4:].reshape(2, 4)])
    np.testing.assert_array_equal(buf, 0)  # refused before anything ran
    with pytest.raises(RelvmInputError, match=r"^@main: outs\[0\] and outs\[1\] share memory"):
        vm.set_output("main", same, same)
    with pytest.raises(RelvmInputError, match=r"^@main: outs\[0\] and outs\[1\] share memory"):
        vm.bind_outputs("main", buf[:8].reshape(2, 4), buf[4:].reshape(2, 4))
    a, b = buf[:8].reshape(2, 4), np.empty((2, 4), np.float32)  # apart: fine
    vm.invoke_with_outputs("main", [x], [a, b])
    np.testing.assert_allclose(a, np.exp(x), rtol=1e-6)
    np.testing.assert_array_equal(b, -x)
    assert vm.stats.output_copies == 0


def test_bound_outputs_then_inputs_that_overlap_them() -> None:
    """bind_outputs once, then calls whose input is, or is not, the bound array: the memory
    check follows the inputs of each call, and arrays apart are written in place again."""
    vm = vm_for(TRANSPOSE)
    out = np.empty((4, 4), np.float32)
    vm.bind_outputs("main", out)
    other = square() + 100
    for _ in range(2):
        out[...] = square()
        assert vm.invoke("main", out) is out  # the input is the bound array
        np.testing.assert_array_equal(out, square().T)
        assert vm.stats.output_copies == 1
        assert vm.invoke("main", other) is out  # apart: written in place
        np.testing.assert_array_equal(out, other.T)
        assert vm.stats.output_copies == 0 and vm.stats.allocations == 0
    vm.unbind_outputs("main")
    x = square()
    vm.set_output("main", x)  # set_output, then an input that is that array
    vm.invoke("main", x)
    np.testing.assert_array_equal(x, square().T)
    assert vm.stats.output_copies == 1


def test_arrays_apart_are_still_written_in_place() -> None:
    vm = vm_for(TRANSPOSE)
    x = square()
    buf = np.zeros(32, np.float32)
    for out in (np.empty((4, 4), np.float32), buf[16:].reshape(4, 4)):  # owned, and a view
        got = vm.invoke_with_outputs("main", [buf[:16].reshape(4, 4) + x], [out])
        assert got is out
        np.testing.assert_array_equal(out, x.T)
        assert vm.stats.output_copies == 0 and vm.stats.allocations == 0
    y = buf[:16].reshape(4, 4)  # an input that is a view of the same buffer, apart from out
    y[...] = x
    vm.invoke_with_outputs("main", [y], [buf[16:].reshape(4, 4)])
    np.testing.assert_array_equal(buf[16:].reshape(4, 4), x.T)
    assert vm.stats.output_copies == 0
