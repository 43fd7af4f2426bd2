"""Kernels are never handed operands other than their entry describes (issue 15).

The compiler makes every kernel call right and the verifier proves a loaded file's dtypes and
ranks; these tests break an executable *after* that, in memory, the way a compiler bug or a
file lying about sizes would, and check that the kernel refuses with a RelvmRuntimeError naming
the kernel and the instruction instead of touching memory it does not own.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import relvm
from relvm.runtime.bytecode import make
from relvm.runtime.bytecode.opcodes import BY_NUMBER

#: Two groups with the same steps and ranks whose second operands broadcast differently.
TWO_CHAINS = """
def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(1, 4), float32], %z: Tensor[(n, 1), float32]) {
  %0 = tanh(add(%x, %y));
  %1 = tanh(add(%x, %z));
  (%0, %1)
}"""


def _pcs(exe, op: str) -> list[int]:
    return [pc for pc, ins in enumerate(exe.function("main").instructions)
            if BY_NUMBER[ins[0]].name == op]


@pytest.mark.e2e
def test_a_generated_kernel_given_another_groups_operands_refuses() -> None:
    """The bug the check guards against: two groups sharing one generated kernel."""
    exe = relvm.build(relvm.parse(TWO_CHAINS))
    fn = exe.function("main")
    first, second = _pcs(exe, "InvokePacked")
    assert fn.instructions[first][1] != fn.instructions[second][1]
    _, k, n_out, args = fn.instructions[second]
    fn.instructions[second] = make("InvokePacked", fn.instructions[first][1], n_out, args)
    x, y, z = np.ones((3, 4), np.float32), np.ones((1, 4), np.float32), np.ones((3, 1), "f")
    with pytest.raises(relvm.RelvmRuntimeError) as e:
        relvm.VirtualMachine(exe).invoke("main", x, y, z)
    message = str(e.value)
    assert f"@main pc {second}: invoke_packed fused_add_tanh#0" in message
    assert "operand 1 of shape (3, 1) does not fit the loop over the output's shape (3, 4) " \
           "(1 inner dims, contiguous)" in message


@pytest.mark.e2e
def test_an_output_of_another_size_is_refused() -> None:
    exe = relvm.build(relvm.parse("""
def @main(%x: Tensor[(n, 8), float32], %w: Tensor[(16, 8), float32]) {
  nn.relu(nn.dense(%x, %w, units=16))
}"""))
    fn = exe.function("main")
    pc = _pcs(exe, "AllocTensor")[0]
    _, dst, storage, offset, shape, dtype = fn.instructions[pc]
    fn.instructions[pc] = make("AllocTensor", dst, storage, offset, (shape[0], 8), dtype)
    vm = relvm.VirtualMachine(exe)
    with pytest.raises(relvm.RelvmRuntimeError, match=r"invoke_packed fused_dense_relu#0 .*"
                       r"refused its operands: for inputs \[2, 8\], \[16, 8\] the result is "
                       r"\[2, 16\], but output 0 is \[2, 8\]"):
        vm.invoke("main", np.ones((2, 8), np.float32), np.ones((16, 8), np.float32))


def test_a_dtype_the_kernel_does_not_take_is_refused() -> None:
    exe = relvm.build(relvm.parse("def @main(%x: Tensor[(n), float32]) { exp(%x) }"))
    exe.kernels[0] = dataclasses.replace(exe.kernels[0], inputs=("float64",),
                                         outputs=("float64",))
    with pytest.raises(relvm.RelvmRuntimeError, match="refused its operands: input 0 is "
                                                      "float32, but the kernel takes float64"):
        relvm.VirtualMachine(exe).invoke("main", np.ones(5, np.float32))


def test_a_rank_the_kernel_does_not_take_is_refused() -> None:
    exe = relvm.build(relvm.parse("def @main(%x: Tensor[(n), float32]) { exp(%x) }"))
    exe.kernels[0] = dataclasses.replace(exe.kernels[0], input_ranks=(2,), output_ranks=(2,))
    with pytest.raises(relvm.RelvmRuntimeError, match=r"input 0 has rank 1 \[5\], but the "
                                                      r"kernel takes rank 2"):
        relvm.VirtualMachine(exe).invoke("main", np.ones(5, np.float32))


def test_checked_shapes_are_remembered_and_replays_skip_the_check() -> None:
    exe = relvm.build(relvm.parse("def @main(%x: Tensor[(n, 4), float32]) { add(%x, 1f) }"))
    vm = relvm.VirtualMachine(exe)
    for n in (1, 2, 1, 2, 3):
        np.testing.assert_array_equal(vm.invoke("main", np.zeros((n, 4), np.float32)),
                                      np.ones((n, 4), np.float32))
    assert vm.operand_check(0).seen == {((n, 4), (), (n, 4)) for n in (1, 2, 3)}
