"""``dyn.broadcast_to``: ONNX Expand and ConstantOfShape to a shape computed at run time (issue
42), one copy on the build users get, against NumPy; its sizes read when the values are not
known, exact dims when type inference knows them."""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm.runtime.bytecode.opcodes import BY_NUMBER

RUN_TIME = """def @main(%x: Tensor[(n, 1), float32], %s: Tensor[(3), int64]) {
  dyn.broadcast_to(%x, %s)
}"""

FROM_SHAPES = """def @main(%x: Tensor[(b, 1, t), float32], %y: Tensor[(b, h, t), float32]) {
  %0 = shape_of(%y, dtype="int64");
  add(dyn.broadcast_to(%x, %0), %y)
}"""


def _kernels(exe) -> list[str]:
    return [exe.kernels[ins[1]].name.split("#")[0] for ins in exe.function("main").instructions
            if BY_NUMBER[ins[0]].name == "InvokePacked"]


@pytest.mark.parametrize("n,target", [(3, [2, 3, 5]), (1, [1, 4, 2]), (2, [4, 2, 1])])
def test_a_shape_given_at_run_time(n, target) -> None:
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(RUN_TIME)))
    x = np.arange(n, dtype=np.float32).reshape(n, 1)
    got = vm.invoke("main", x, np.array(target, np.int64))
    np.testing.assert_array_equal(got, np.broadcast_to(x, np.broadcast_shapes(x.shape, target)))


@pytest.mark.parametrize("target,message", [
    ([2, 3, 5], r"compute_dims .*: dims 2 and 3 do not broadcast"),
    ([2, -3, 5], "do not broadcast|negative")])
def test_a_shape_that_does_not_fit_is_refused(target, message) -> None:
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(RUN_TIME)))
    with pytest.raises(relvm.RelvmRuntimeError, match=message):
        vm.invoke("main", np.zeros((2, 1), np.float32), np.array(target, np.int64))


def test_a_shape_from_shapes_has_exact_dims_and_one_kernel() -> None:
    mod = relvm.parse(FROM_SHAPES)
    exe = relvm.build(mod)
    assert "dyn.broadcast_to" in _kernels(exe)
    vm = relvm.VirtualMachine(exe)
    for b, h, t in ((1, 2, 3), (2, 4, 5), (1, 1, 7)):
        x = np.random.default_rng(t).standard_normal((b, 1, t)).astype(np.float32)
        y = np.ones((b, h, t), np.float32)
        np.testing.assert_array_equal(vm.invoke("main", x, y), x + y)


def test_a_static_dim_of_data_is_kept_and_checked_against_the_shape() -> None:
    exe = relvm.build(relvm.parse("def @main(%x: Tensor[(2, 3), float32], %s: Tensor[(3), int64]) "
                                  "{ dyn.broadcast_to(%x, %s) }"))
    vm = relvm.VirtualMachine(exe)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for target in ([4, 2, 3], [1, 1, 3], [2, 2, 1]):
        np.testing.assert_array_equal(vm.invoke("main", x, np.array(target, np.int64)),
                                      np.broadcast_to(x, np.broadcast_shapes((2, 3), target)))
    with pytest.raises(relvm.RelvmRuntimeError, match="dims 2 and 5 do not broadcast"):
        vm.invoke("main", x, np.array([4, 5, 3], np.int64))
