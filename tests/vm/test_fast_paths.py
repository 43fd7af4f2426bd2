"""The invoke fast paths keep every check: static signatures, arrays passed again, pooled views."""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm import RelvmInputError
from relvm.runtime.bytecode.opcodes import Opcode

ADD_ONE = "def @main(%x: Tensor[(1, 4), float32]) { add(%x, 1f) }"


def vm_for(text: str, **build) -> relvm.VirtualMachine:
    return relvm.VirtualMachine(relvm.build(relvm.parse(text), **build))


@pytest.mark.parametrize("x,message", [
    (np.zeros((1, 3), np.float32), r"@main input %x dim 1: expected 4, got 3 \(shape \(1, 3\)\)"),
    (np.zeros((2, 4), np.float32), r"@main input %x dim 0: expected 1, got 2"),
    (np.zeros(4, np.float32), r"@main input %x: expected rank 2"),
    (np.zeros((1, 4), np.float64), r"@main input %x: expected dtype float32, got float64"),
    (np.zeros((1, 4), np.dtype(np.float32).newbyteorder()), r"expected dtype float32"),
])
def test_static_inputs_are_checked_with_the_input_and_dim_named(x, message) -> None:
    vm = vm_for(ADD_ONE)
    with pytest.raises(RelvmInputError, match=message):
        vm.invoke_with_outputs("main", [x], [np.empty((1, 4), np.float32)])


def test_static_input_that_is_not_contiguous_is_copied_and_counted() -> None:
    vm = vm_for(ADD_ONE)
    x = np.arange(8, dtype=np.float32).reshape(1, 8)[:, ::2]
    out = np.empty((1, 4), np.float32)
    vm.invoke_with_outputs("main", [x], [out])
    np.testing.assert_array_equal(out, x + 1)
    assert vm.stats.input_copies == 1 and vm.stats.allocations == 0
    vm.invoke_with_outputs("main", [np.ascontiguousarray(x)], [out])
    assert vm.stats.input_copies == 0


def test_arrays_passed_again_are_checked_again() -> None:
    """The same objects coming back skip no check: they may have changed in place."""
    vm = vm_for(ADD_ONE)
    x = np.zeros((1, 4), np.float32)
    out = np.empty((1, 4), np.float32)
    vm.invoke_with_outputs("main", [x], [out])
    out.shape = (4, 1)
    with pytest.raises(RelvmInputError, match=r"output 0: expected shape \(1, 4\)"):
        vm.invoke_with_outputs("main", [x], [out])
    out.shape = (1, 4)
    out.flags.writeable = False
    with pytest.raises(RelvmInputError, match="C-contiguous and writeable"):
        vm.invoke_with_outputs("main", [x], [out])
    out.flags.writeable = True
    x.shape = (4, 1)
    with pytest.raises(RelvmInputError, match=r"input %x dim 0: expected 1, got 4"):
        vm.invoke_with_outputs("main", [x], [out])
    x.shape = (1, 4)
    x[:] = 5
    assert vm.invoke_with_outputs("main", [x], [out]) is out
    np.testing.assert_array_equal(out, [[6, 6, 6, 6]])
    assert vm.stats.allocations == 0 and vm.stats.output_copies == 0


def test_unaligned_output_array_is_accepted() -> None:
    vm = vm_for(ADD_ONE)
    raw = np.zeros(4 * 4 + 1, np.uint8)
    out = raw[1:].view(np.float32).reshape(1, 4)
    assert not out.flags.aligned
    assert vm.invoke_with_outputs("main", [np.ones((1, 4), np.float32)], [out]) is out
    np.testing.assert_array_equal(out, [[2, 2, 2, 2]])


def test_output_arrays_that_alternate_each_get_the_result() -> None:
    vm = vm_for(ADD_ONE)
    a, b = np.zeros((1, 4), np.float32), np.zeros((1, 4), np.float32)
    for k, out in enumerate([a, b, a, b, a]):
        x = np.full((1, 4), k, np.float32)
        assert vm.invoke_with_outputs("main", [x], [out]) is out
        np.testing.assert_array_equal(out, x + 1)
    np.testing.assert_array_equal(b, np.full((1, 4), 4, np.float32))


CHAIN = """def @main(%x: Tensor[(n, 8), float32]) {
  %0 = add(%x, 1f);
  %1 = multiply(%0, 2f);
  %2 = exp(%1);
  %3 = subtract(%2, %0);
  negative(%3)
}"""


def chain_reference(x: np.ndarray) -> np.ndarray:
    h = x + 1
    return -(np.exp(h * 2) - h)


def test_pooled_views_follow_the_storage_as_n_changes() -> None:
    """Views of pooled storage are made once, then remade when the shape or the buffer changes."""
    vm = vm_for(CHAIN, fuse=False)
    code = vm.exe.function("main").instructions
    storages = sum(1 for ins in code if ins[0] == Opcode.AllocStorage)
    sites = sum(1 for ins in code if ins[0] == Opcode.AllocTensor and ins[2] >= 0)
    assert storages and sites
    rng = np.random.default_rng(0)
    for n in [2, 8, 3, 8, 1, 16, 5, 16, 0, 4]:
        x = rng.standard_normal((n, 8)).astype(np.float32)
        out = np.empty((n, 8), np.float32)
        vm.invoke_with_outputs("main", [x], [out])
        np.testing.assert_allclose(out, chain_reference(x), rtol=1e-5, atol=1e-6)
        # One entry per pooled buffer the VM holds, one view per AllocTensor site at most.
        assert len(vm.pooled_views) == storages
        assert all(len(views) <= sites for views in vm.pooled_views.values())


def test_pooled_views_are_reused_for_a_static_shape() -> None:
    vm = vm_for(CHAIN.replace("(n, 8)", "(2, 8)"), fuse=False)
    x = np.ones((2, 8), np.float32)
    out = np.empty((2, 8), np.float32)
    vm.invoke_with_outputs("main", [x], [out])
    views = {pc: v[2] for d in vm.pooled_views.values() for pc, v in d.items()}
    assert views
    x2 = np.full((2, 8), 0.5, np.float32)
    vm.invoke_with_outputs("main", [x2], [out])
    again = {pc: v[2] for d in vm.pooled_views.values() for pc, v in d.items()}
    assert all(again[pc] is v for pc, v in views.items())
    np.testing.assert_allclose(out, chain_reference(x2), rtol=1e-5)
    assert vm.stats.allocations == 0


def test_recursive_frames_do_not_share_pooled_views() -> None:
    vm = vm_for("""def @f(%x: Tensor[(n), float32], %k: int64) -> Tensor[(n), float32] {
      if (equal(%k, 0i64)) { %x } else {
        %0 = add(%x, 1f);
        %1 = multiply(%0, 2f);
        %2 = @f(%1, subtract(%k, 1i64));
        add(%2, %1)
      }
    }
    def @main(%x: Tensor[(n), float32]) { @f(%x, 3i64) }""", fuse=False)

    def reference(x, k):
        if k == 0:
            return x
        h = (x + 1) * 2
        return reference(h, k - 1) + h
    x = np.arange(5, dtype=np.float32)
    for _ in range(3):
        np.testing.assert_allclose(vm.invoke("main", x), reference(x, 3), rtol=1e-6)
