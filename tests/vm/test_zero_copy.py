"""Zero-copy outputs: kernels write straight into the caller's arrays, or relvm says it copied."""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm import RelvmInputError


def vm_for(text: str, **build) -> relvm.VirtualMachine:
    return relvm.VirtualMachine(relvm.build(relvm.parse(text), **build))


def assert_in_place(result, out) -> None:
    assert result is out or np.shares_memory(result, out)


X = np.arange(12, dtype=np.float32).reshape(3, 4)

PLAIN = "def @main(%x: Tensor[(n, 4), float32]) { exp(%x) }"


def test_plain_tensor_result_is_written_in_place() -> None:
    vm = vm_for(PLAIN)
    out = np.zeros((3, 4), np.float32)
    r = vm.invoke_with_outputs("main", {"x": X}, [out])
    assert r is out
    np.testing.assert_allclose(out, np.exp(X), rtol=1e-6)
    assert vm.stats.allocations == 0 and vm.stats.output_copies == 0


def test_symbolic_shape_result_fixes_n_from_the_caller_array() -> None:
    vm = vm_for(PLAIN)
    for n in (1, 5, 17):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        out = np.empty((n, 4), np.float32)
        vm.invoke_with_outputs("main", [x], [out])
        np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)
        assert vm.stats.allocations == 0 and vm.stats.output_copies == 0


def test_tuple_result_each_field_in_place() -> None:
    vm = vm_for("""def @main(%x: Tensor[(n, 4), float32]) {
      (exp(%x), negative(%x), nn.relu(%x))
    }""")
    outs = [np.empty((3, 4), np.float32) for _ in range(3)]
    r = vm.invoke_with_outputs("main", [X], outs)
    assert isinstance(r, tuple) and all(a is b for a, b in zip(r, outs))
    np.testing.assert_allclose(outs[0], np.exp(X), rtol=1e-6)
    np.testing.assert_array_equal(outs[1], -X)
    np.testing.assert_array_equal(outs[2], np.maximum(X, 0))
    assert vm.stats.allocations == 0 and vm.stats.output_copies == 0


def test_reshape_final_result_views_the_caller_array() -> None:
    vm = vm_for("""def @main(%x: Tensor[(n, 4), float32]) {
      %0 = add(%x, 1f);
      reshape(%0, newshape=[-1])
    }""")
    out = np.empty(12, np.float32)
    r = vm.invoke_with_outputs("main", [X], [out])
    assert_in_place(r, out)
    np.testing.assert_array_equal(out, (X + 1).reshape(-1))
    assert vm.stats.allocations == 0 and vm.stats.output_copies == 0


def test_if_merged_result_in_place_on_both_branches() -> None:
    vm = vm_for("""def @main(%c: bool, %x: Tensor[(n, 4), float32]) {
      if (%c) { exp(%x) } else { negative(%x) }
    }""")
    for c, want in [(True, np.exp(X)), (False, -X)]:
        out = np.empty((3, 4), np.float32)
        vm.invoke_with_outputs("main", [np.array(c), X], [out])
        np.testing.assert_allclose(out, want, rtol=1e-6)
        assert vm.stats.allocations == 0 and vm.stats.output_copies == 0


IF_PAIR = """def @main(%c: bool, %x: Tensor[(n, 4), float32]) {
  %0 = if (%c) { (exp(%x), negative(%x)) } else { (nn.relu(%x), add(%x, 1f)) };
  %1 = %0.0;
  %2 = %0.1;
  RESULT
}"""


@pytest.mark.parametrize("result,picks", [("(%1, %2)", (0, 1)), ("(%2, %1)", (1, 0))])
def test_if_pair_of_results_in_place_on_both_branches(result, picks) -> None:
    # An ONNX If with two outputs imports as this: the pair taken apart and returned (as it
    # is, or in another order). Each field is written into its output array on either path.
    vm = vm_for(IF_PAIR.replace("RESULT", result))
    for c, pair in [(True, (np.exp(X), -X)), (False, (np.maximum(X, 0), X + 1))]:
        outs = [np.empty((3, 4), np.float32), np.empty((3, 4), np.float32)]
        r = vm.invoke_with_outputs("main", [np.array(c), X], outs)
        assert all(a is b for a, b in zip(r, outs))
        for out, i in zip(outs, picks):
            np.testing.assert_allclose(out, pair[i], rtol=1e-6)
        assert vm.stats.allocations == 0 and vm.stats.output_copies == 0


def test_an_if_pair_returned_as_it_is_is_not_rebuilt() -> None:
    text = IF_PAIR.replace("RESULT", "(%1, %2)")
    code = relvm.build(relvm.parse(text)).bytecode
    assert code.count("get_field") == 0
    assert code.count("alloc_adt") == 2  # one pair per branch, returned through the if
    # Taken apart in another order, the tuple is rebuilt (and still bound, above).
    swapped = relvm.build(relvm.parse(IF_PAIR.replace("RESULT", "(%2, %1)"))).bytecode
    assert swapped.count("get_field") == 2


def test_non_main_function_in_place() -> None:
    vm = vm_for("""def @main(%x: Tensor[(n, 4), float32]) { %x }
    def @helper(%a: Tensor[(m, 4), float32], %b: Tensor[(m, 4), float32]) {
      maximum(%a, %b)
    }""")
    out = np.empty((3, 4), np.float32)
    vm.invoke_with_outputs("helper", {"a": X, "b": -X}, [out])
    np.testing.assert_array_equal(out, np.abs(X))
    assert vm.stats.allocations == 0 and vm.stats.output_copies == 0


def test_identity_function_reports_the_copy() -> None:
    vm = vm_for("def @main(%x: Tensor[(n, 4), float32]) { %x }")
    out = np.zeros((3, 4), np.float32)
    vm.invoke_with_outputs("main", [X], [out])
    np.testing.assert_array_equal(out, X)
    assert not np.shares_memory(out, X)
    assert vm.stats.output_copies == 1


def test_two_results_that_are_one_tensor() -> None:
    vm = vm_for("""def @main(%x: Tensor[(n, 4), float32]) {
      %0 = exp(%x);
      (%0, %0)
    }""")
    outs = [np.empty((3, 4), np.float32), np.empty((3, 4), np.float32)]
    vm.invoke_with_outputs("main", [X], outs)
    np.testing.assert_allclose(outs[0], np.exp(X), rtol=1e-6)
    np.testing.assert_allclose(outs[1], np.exp(X), rtol=1e-6)
    assert vm.stats.output_copies == 1


def test_persistent_binding_reuses_arrays_until_unbound() -> None:
    vm = vm_for(PLAIN)
    out = np.empty((3, 4), np.float32)
    vm.bind_outputs("main", out)
    for k in range(3):
        r = vm.invoke("main", X + k)
        assert r is out
        np.testing.assert_allclose(out, np.exp(X + k), rtol=1e-6)
        assert vm.stats.allocations == 0
    vm.unbind_outputs("main")
    r = vm.invoke("main", X)
    assert r is not out and not np.shares_memory(r, out)


def test_set_output_applies_to_the_next_invoke_only() -> None:
    vm = vm_for(PLAIN)
    out = np.empty((3, 4), np.float32)
    vm.set_output("main", out)
    assert vm.invoke("main", X) is out
    assert vm.invoke("main", X) is not out


@pytest.mark.parametrize("bad,message", [
    (np.empty((4, 4), np.float32), r"output 0: expected shape \(3, 4\)"),
    (np.empty((3, 4), np.float64), "output 0: expected dtype float32, got float64"),
    (np.empty((4, 3), np.float32).T, "C-contiguous"),
])
def test_bad_output_arrays_fail_before_anything_runs(bad, message) -> None:
    vm = vm_for(PLAIN)
    with pytest.raises(RelvmInputError, match=message):
        vm.invoke_with_outputs("main", [X], [bad])


def test_wrong_number_of_outputs() -> None:
    vm = vm_for(PLAIN)
    with pytest.raises(RelvmInputError, match="has 1 result tensors"):
        vm.invoke_with_outputs("main", [X], [])


def test_split_fields_are_computed_into_the_callers_arrays() -> None:
    vm = vm_for("""def @main(%x: Tensor[(n, 4), float32]) {
      %0 = split(exp(%x), indices_or_sections=[1, 3], axis=1);
      (%0.2, %0.0, %0.1)
    }""")
    outs = [np.empty((3, 1), np.float32), np.empty((3, 1), np.float32),
            np.empty((3, 2), np.float32)]
    results = vm.invoke_with_outputs("main", [X], outs)
    want = np.split(np.exp(X), [1, 3], axis=1)
    for out, w in zip(outs, (want[2], want[0], want[1])):
        np.testing.assert_allclose(out, w, rtol=1e-6)
    assert all(r is o for r, o in zip(results, outs))
    assert vm.stats.output_copies == 0


def test_a_reshaped_result_is_computed_into_the_callers_array() -> None:
    vm = vm_for("""def @main(%x: Tensor[(n, 4), float32]) {
      reshape(exp(%x), newshape=[-1, 2, 2])
    }""")
    out = np.empty((3, 2, 2), np.float32)
    vm.invoke_with_outputs("main", [X], [out])
    np.testing.assert_allclose(out, np.exp(X).reshape(3, 2, 2), rtol=1e-6)
    assert vm.stats.output_copies == 0


HELPER = """def @h(%a: Tensor[(m, 4), float32]) { exp(%a) }
def @id(%a: Tensor[(m, 4), float32]) { %a }
"""


def test_results_of_a_helper_called_twice_are_computed_into_the_callers_arrays() -> None:
    vm = vm_for(HELPER + """def @main(%x: Tensor[(n, 4), float32]) {
      (@h(%x), @h(negative(%x)))
    }""")
    outs = [np.empty((3, 4), np.float32), np.empty((3, 4), np.float32)]
    results = vm.invoke_with_outputs("main", [X], outs)
    np.testing.assert_allclose(outs[0], np.exp(X), rtol=1e-6)
    np.testing.assert_allclose(outs[1], np.exp(-X), rtol=1e-6)
    assert all(r is o for r, o in zip(results, outs))
    assert vm.stats.output_copies == 0


def test_a_helper_returning_its_input_is_copied_and_counted() -> None:
    vm = vm_for(HELPER + """def @main(%x: Tensor[(n, 4), float32]) {
      (@h(%x), @id(%x))
    }""")
    outs = [np.empty((3, 4), np.float32), np.empty((3, 4), np.float32)]
    vm.invoke_with_outputs("main", [X], outs)
    np.testing.assert_allclose(outs[0], np.exp(X), rtol=1e-6)
    np.testing.assert_array_equal(outs[1], X)
    assert vm.stats.output_copies == 1


def test_a_recursive_call_whose_result_feeds_a_kernel_is_not_bound() -> None:
    """Each frame's result is made from its callee's: only the outermost writes the caller's
    array, so no kernel reads the array it writes."""
    vm = vm_for("""
def @f(%i: int64, %x: Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32] {
  if (less(%i, 1i64)) {
    exp(%x)
  } else {
    %0 = @f(subtract(%i, 1i64), %x);
    nn.dense(%0, %0, units=None)
  }
}
def @main(%x: Tensor[(4, 4), float32]) { @f(3i64, %x) }""")
    x = np.arange(16, dtype=np.float32).reshape(4, 4) / 40
    out = np.empty((4, 4), np.float32)
    vm.invoke_with_outputs("main", [x], [out])
    want = np.exp(x.astype(np.float64))
    for _ in range(3):
        want = want @ want.T
    np.testing.assert_allclose(out, want, rtol=1e-5)
    assert vm.stats.output_copies == 0
