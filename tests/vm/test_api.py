"""The VirtualMachine API: inputs, stateful invoke, validation, recursion, tracing, profiling."""

from __future__ import annotations

import re

import numpy as np
import pytest

import relvm
from relvm import RelvmInputError, RelvmRuntimeError
from relvm.testing.reference import evaluate

TWO_INPUTS = """def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(n, 4), float32]) {
  subtract(%x, %y)
}"""
X = np.arange(12, dtype=np.float32).reshape(3, 4)


def vm_for(text: str, **build) -> relvm.VirtualMachine:
    return relvm.VirtualMachine(relvm.build(relvm.parse(text), **build))


def test_set_input_by_position_name_and_mix() -> None:
    vm = vm_for(TWO_INPUTS)
    vm.set_input("main", X, y=X * 2)
    np.testing.assert_array_equal(vm.invoke("main"), -X)
    vm.set_input("main", y=X, x=X * 3)
    np.testing.assert_array_equal(vm.invoke("main"), X * 2)
    np.testing.assert_array_equal(vm.run(X, X), np.zeros_like(X))


def test_get_input_index() -> None:
    vm = vm_for(TWO_INPUTS)
    assert vm.get_input_index("y") == 1 and vm.get_input_index("nope") == -1


def test_invoke_stateful_and_get_outputs() -> None:
    vm = vm_for("def @main(%x: Tensor[(n), float32]) { (%x, (exp(%x), negative(%x))) }")
    x = np.ones(2, np.float32)
    vm.invoke_stateful("main", x)
    assert vm.get_num_outputs() == 3
    outs = vm.get_outputs()
    np.testing.assert_allclose(outs[1], np.exp(x))
    np.testing.assert_array_equal(outs[2], -x)


def test_nested_tuple_results_nest() -> None:
    vm = vm_for("def @main(%x: Tensor[(n), float32]) { (%x, (exp(%x), negative(%x))) }")
    r = vm.invoke("main", np.ones(2, np.float32))
    assert isinstance(r, tuple) and isinstance(r[1], tuple) and len(r[1]) == 2


class DLPackOnly:
    """An array-like that only speaks DLPack, like a tensor from another framework."""

    def __init__(self, arr: np.ndarray):
        self._arr = arr

    def __dlpack__(self, **kw):
        return self._arr.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


def test_dlpack_inputs_are_borrowed() -> None:
    vm = vm_for("def @main(%x: Tensor[(n, 4), float32]) { %x }")
    x = X.copy()
    r = vm.invoke("main", DLPackOnly(x))
    assert np.shares_memory(r, x)


def test_contiguous_inputs_are_not_copied_and_others_are_reported() -> None:
    vm = vm_for("def @main(%x: Tensor[(n, 4), float32]) { %x }")
    assert np.shares_memory(vm.invoke("main", X), X)
    assert vm.stats.input_copies == 0
    strided = np.arange(24, dtype=np.float32).reshape(3, 8)[:, ::2]
    np.testing.assert_array_equal(vm.invoke("main", strided), strided)
    assert vm.stats.input_copies == 1


@pytest.mark.parametrize("args,message", [
    ((X.astype(np.float64), X), r"@main input %x: expected dtype float32, got float64"),
    ((X[0], X), r"@main input %x: expected rank 2"),
    ((X[:, :3], X[:, :3]), r"@main input %x dim 1: expected 4, got 3"),
    ((X, X[:2]), r"@main: input %y dim 0 is 2, but n is 3 \(from input %x dim 0\)"),
    (([1, 2], X), r"@main input %x: expected an array"),
])
def test_inputs_are_validated_with_the_input_and_dim_named(args, message) -> None:
    vm = vm_for(TWO_INPUTS)
    with pytest.raises(RelvmInputError, match=message):
        vm.invoke("main", *args)


def test_input_count_and_names() -> None:
    vm = vm_for(TWO_INPUTS)
    with pytest.raises(RelvmInputError, match="missing inputs: y"):
        vm.invoke("main", X)
    with pytest.raises(RelvmInputError, match="no input named 'z'"):
        vm.invoke("main", X, z=X)
    with pytest.raises(RelvmInputError, match="takes 2 inputs, got 3"):
        vm.invoke("main", X, X, X)
    with pytest.raises(RelvmInputError, match="no function @nope"):
        vm.invoke("nope", X)


def test_dim_expression_inputs_are_solved_and_checked() -> None:
    vm = vm_for("def @main(%x: Tensor[(n*2, 3), float32]) { reshape(%x, newshape=[-1, 6]) }")
    assert vm.invoke("main", np.zeros((4, 3), np.float32)).shape == (2, 6)
    with pytest.raises(RelvmInputError, match=r"dim 0 is 5, which is not n\*2"):
        vm.invoke("main", np.zeros((5, 3), np.float32))


RNN = """
def @rnn(%xs: Tensor[(t, 4), float32], %h: Tensor[(4), float32], %i: int64) -> Tensor[(4), float32] {
  %0 = shape_of(%xs, dtype="int64");
  if (less(%i, take(%0, 0i64))) {
    %1 = take(%xs, %i, axis=0);
    @rnn(%xs, tanh(add(multiply(%h, 0.5f), %1)), add(%i, 1i64))
  } else {
    %h
  }
}
def @main(%xs: Tensor[(t, 4), float32]) {
  @rnn(%xs, zeros(shape=[4], dtype="float32"), 0i64)
}"""


@pytest.mark.e2e
def test_recursion_2000_deep_without_growing_the_python_stack() -> None:
    import sys

    vm = vm_for(RNN)
    xs = np.random.default_rng(0).standard_normal((2000, 4)).astype(np.float32)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # the VM's run loop must not recurse
    try:
        got = vm.invoke("main", xs)
    finally:
        sys.setrecursionlimit(limit)
    h = np.zeros(4, np.float32)
    for x in xs:
        h = np.tanh(h * np.float32(0.5) + x)
    np.testing.assert_allclose(got, h, rtol=1e-5)


def test_one_executable_serves_every_n() -> None:
    text = """def @main(%x: Tensor[(n, 8), float32], %w: Tensor[(5, 8), float32]) {
      %0 = nn.dense(%x, %w);
      %1 = concatenate((%0, %0), axis=0);
      nn.softmax(%1, axis=-1)
    }"""
    mod = relvm.parse(text)
    w = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    vm = relvm.VirtualMachine(relvm.build(mod, params={"w": w}))
    rng = np.random.default_rng(2)
    for n in list(rng.integers(1, 301, 40)) + [1, 300]:
        x = rng.standard_normal((n, 8)).astype(np.float32)
        got = vm.invoke("main", x)
        assert got.shape == (2 * n, 5)
        np.testing.assert_allclose(got, evaluate(mod, x, params={"w": w}), rtol=1e-5, atol=1e-7)


def test_every_global_function_is_callable() -> None:
    vm = vm_for("""def @main(%x: Tensor[(n), float32]) { %x }
    def @unused(%x: Tensor[(n), float32]) { exp(%x) }""")
    np.testing.assert_allclose(vm.invoke("unused", np.zeros(2, np.float32)), [1, 1])


def test_kernel_failure_names_function_pc_instruction_and_shapes() -> None:
    vm = vm_for("""def @main(%x: Tensor[(n), float32], %k: int64) {
      %0 = arange(0i64, %k, 0i64);
      %0
    }""")
    with pytest.raises(RelvmRuntimeError) as info:
        vm.invoke("main", np.zeros(2, np.float32), np.array(3, np.int64))
    message = str(info.value)
    assert message.startswith("@main pc ") and "compute_dims dims#" in message
    assert "arange: step must not be zero" in message


def test_runtime_error_in_a_kernel_names_the_kernel() -> None:
    vm = vm_for("""def @main(%x: Tensor[(n, 3), float32]) {
      max(%x, axis=0)
    }""")
    with pytest.raises(RelvmRuntimeError, match=r"@main pc \d+: invoke_packed max#0 \(\$0\) -> "
                                                r"\(\$1\): .*; registers: \$0: float32\[0, 3\], "
                                                r"\$1: float32\[3\]$"):
        vm.invoke("main", np.zeros((0, 3), np.float32))


def test_vm_is_usable_after_an_error() -> None:
    vm = vm_for("def @main(%x: Tensor[(n, 3), float32]) { max(%x, axis=0) }")
    with pytest.raises(RelvmRuntimeError):
        vm.invoke("main", np.zeros((0, 3), np.float32))
    np.testing.assert_array_equal(vm.invoke("main", np.ones((2, 3), np.float32)), [1, 1, 1])


@pytest.mark.e2e
def test_bytecode_disassembly_lists_every_function() -> None:
    exe = relvm.build(relvm.parse(RNN))
    text = exe.bytecode
    assert "VM Function[0]: @rnn(%xs: Tensor[(t, 4), float32]" in text
    assert "VM Function[1]: @main" in text and "# reg file size = " in text
    assert re.search(r"invoke \$\d+ @rnn \(", text) and "ret $" in text and "if $" in text


def test_trace_prints_each_instruction(monkeypatch, capsys) -> None:
    monkeypatch.setenv("RELVM_TRACE", "1")
    vm = vm_for("def @main(%x: Tensor[(n, 4), float32]) { exp(%x) }")
    vm.invoke("main", X)
    err = capsys.readouterr().err
    assert "[relvm] @main" in err and "invoke_packed exp#0" in err
    assert "alloc_tensor" in err and "float32[3, 4]" in err


def test_profiler_reports_kernels_and_opcodes() -> None:
    vm = vm_for("""def @main(%x: Tensor[(n, 4), float32]) {
      %0 = exp(%x);
      %1 = exp(%0);
      add(%1, %0)
    }""", fuse=False)
    prof = vm.profile("main", X)
    assert prof.rows["kernel exp"][0] == 2 and prof.rows["kernel add"][0] == 1
    assert prof.rows["alloc_tensor"][0] == 3
    table = prof.table()
    assert "kernel exp" in table and "count" in table


def test_function_without_parameters_needs_no_set_input() -> None:
    vm = vm_for('def @main() { ones(shape=[2], dtype="float32") }')
    np.testing.assert_array_equal(vm.invoke("main"), [1, 1])


@pytest.mark.parametrize("allowzero,shape,want", [(1, [3, 4, 0], (3, 4, 0)),
                                                   (0, [0, -1], (0, 12))])
def test_dyn_reshape_allowzero(allowzero, shape, want) -> None:
    mod = relvm.parse(f"""def @main(%x: Tensor[(n, 3, 4), float32], %s: Tensor[({len(shape)}), int64]) {{
      dyn.reshape(%x, %s, allowzero={allowzero})
    }}""")
    args = (np.zeros((0, 3, 4), np.float32), np.array(shape, np.int64))
    got = relvm.VirtualMachine(relvm.build(mod)).invoke("main", *args)
    assert got.shape == want == evaluate(mod, *args).shape
