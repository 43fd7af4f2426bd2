"""Dims that type inference could only assume equal (or broadcastable) are checked when the
program runs, before any kernel relies on them (issue 15: a fused dense + bias kernel read 16
floats from a bias of 2).

Assumptions over the entry's own dims are checked with its inputs: a RelvmInputError naming the
input and dim. Others are checked where they arise, as a RelvmRuntimeError.
"""

from __future__ import annotations

import numpy as np
import pytest

import relvm

DENSE_BIAS = """
def @main(%x: Tensor[(n, 8), float32], %w: Tensor[(16, 8), float32], %b: Tensor[(k), float32]) {
  %0 = nn.dense(%x, %w, units=16);
  nn.bias_add(%0, %b)
}"""


def _vm(text: str, fuse: bool = True) -> relvm.VirtualMachine:
    return relvm.VirtualMachine(relvm.build(relvm.parse(text), fuse=fuse))


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_bias_of_another_length_is_refused_naming_the_input(fuse: bool) -> None:
    vm = _vm(DENSE_BIAS, fuse)
    x, w = np.ones((3, 8), np.float32), np.ones((16, 8), np.float32)
    with pytest.raises(relvm.RelvmInputError) as e:
        vm.invoke("main", x, w, np.ones(2, np.float32))
    assert "input %b dim 0 (k) is 2, but" in str(e.value)
    assert "needs it to equal 16" in str(e.value)
    b = np.arange(16, dtype=np.float32)
    np.testing.assert_allclose(vm.invoke("main", x, w, b), x @ w.T + b)


@pytest.mark.e2e
def test_a_dim_assumed_to_broadcast_is_checked() -> None:
    vm = _vm("""
def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(k), float32]) {
  tanh(add(%x, %y))
}""")
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    for k in (1, 4):
        y = np.full(k, 0.5, np.float32)
        np.testing.assert_allclose(vm.invoke("main", x, y), np.tanh(x + y), rtol=1e-6)
    with pytest.raises(relvm.RelvmInputError,
                       match=r"input %y dim 0 \(k\) is 3, but add -> tanh at line 3, column "
                             r"\d+ needs it to broadcast against 4"):
        vm.invoke("main", x, np.ones(3, np.float32))


def test_a_call_argument_of_another_static_dim_is_refused() -> None:
    vm = _vm("""
def @f(%b: Tensor[(16), float32]) -> Tensor[(16), float32] {
  add(%b, 1f)
}
def @main(%b: Tensor[(k), float32]) {
  @f(%b)
}""")
    with pytest.raises(relvm.RelvmInputError, match=r"input %b dim 0 \(k\) is 2, but the call "
                                                    r"of @f at line 6, column 3 needs it to "
                                                    r"equal 16"):
        vm.invoke("main", np.ones(2, np.float32))
    np.testing.assert_array_equal(vm.invoke("main", np.zeros(16, np.float32)),
                                  np.ones(16, np.float32))


def test_let_and_return_annotations_are_checked() -> None:
    vm = _vm("""
def @main(%b: Tensor[(k), float32]) -> Tensor[(4), float32] {
  let %c: Tensor[(4), float32] = exp(%b);
  %c
}""")
    with pytest.raises(relvm.RelvmInputError, match=r"input %b dim 0 \(k\) is 3, but the "
                                                    r"annotation of %c at line 3, column \d+ "
                                                    r"needs it to equal 4"):
        vm.invoke("main", np.ones(3, np.float32))
    np.testing.assert_allclose(vm.invoke("main", np.zeros(4, np.float32)), np.ones(4))


def test_an_assumption_inside_a_branch_is_checked_only_when_it_runs() -> None:
    vm = _vm("""
def @main(%c: bool, %x: Tensor[(n, 4), float32], %y: Tensor[(k), float32]) {
  if (%c) {
    add(%x, %y)
  } else {
    %x
  }
}""")
    x = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(vm.invoke("main", np.array(False), x, np.ones(3, np.float32)), x)
    with pytest.raises(relvm.RelvmRuntimeError, match=r"\(k\) is 3, but add at line 4, column "
                                                      r"\d+ needs it to broadcast against 4"):
        vm.invoke("main", np.array(True), x, np.ones(3, np.float32))


def test_proven_dims_add_no_checks() -> None:
    exe = relvm.build(relvm.parse("""
def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(n, 4), float32]) {
  add(%x, %y)
}"""))
    assert "broadcast" not in exe.bytecode and "== 16" not in exe.bytecode


def test_a_long_computed_dim_is_named_by_its_inputs_not_spelled_out() -> None:
    """Issue 46: a dynamo export's dims nest floor-divisions a thousand characters deep; the
    message names the inputs and dims that clash and their sizes instead."""
    vm = _vm("""
def @main(%x: Tensor[(1, 1, h, w), float32], %y: Tensor[(k), float32]) {
  %0 = image.resize2d(%x, scale=[0.7, 0.3]);
  %1 = image.resize2d(%0, scale=[1.3, 1.7]);
  %2 = image.resize2d(%1, scale=[0.45, 2.3]);
  add(reshape(%2, newshape=[-1]), %y)
}""")
    with pytest.raises(relvm.RelvmInputError) as info:
        vm.invoke("main", np.ones((1, 1, 37, 41), np.float32), np.ones(5, np.float32))
    message = str(info.value)
    assert message == ("@main: a dim computed from h, w = 644 (h is input %x dim 2, w is input "
                       "%x dim 3) is 644, but add at line 6, column 3 needs it to broadcast "
                       "against input %y dim 0 (k) = 5")
