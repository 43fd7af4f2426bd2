"""Differential fuzzing of the whole pipeline: for generated programs and several assignments
of their symbolic dims on one build, the reference interpreter, the VM, the VM writing into
caller arrays (zero-copy), the unfused build, the arena build (upper_bounds) and the
executable after save -> load all give the same results. Legs run on the C kernels where they
cover the program (else on NumPy's), and the VM once more on NumPy's.

The CI profile runs at least 200 programs; ``RELVM_HYPOTHESIS_PROFILE=long`` (or
``pytest --hypothesis-profile=long``) runs thousands. Each bug the fuzzer found is kept below:
each kept as an ``@example`` case or a regression test below.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, example, find, given, settings

import relvm
from relvm.backends import numpy_ref

from fuzz_harness import (FuzzCase, c_backend, check_case, fails, fuzz_cases, numpy_legs,
                          save_load_available)

#: Programs per run: at least 200 in CI, the profile's count when it asks for more.
PROGRAMS = max(200, settings.default.max_examples)
FUZZ = settings(max_examples=PROGRAMS, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])

# --- the bugs it found, kept as regression cases ---------------------------------------------

#: clip's reference returned a NumPy scalar, not an array, for a rank-0 input
#: (relvm/ops/elementwise.py::_clip_ref).
CLIP_OF_A_SCALAR = FuzzCase.from_text("""
def @main(%x: float32) {
  clip(%x, a_min=-1.0, a_max=1.5)
}""", {})

#: A backward strided_slice beginning before the first element (begin=-2**31+1, stride < 0)
#: is empty, as in Python; the static type and the reference took one element
#: (relvm/ops/indexing.py::_static_slice).
BACKWARD_SLICE_FROM_BEFORE_THE_START = FuzzCase.from_text("""
def @main(%x: Tensor[(1, n, 2), float32]) {
  %0 = strided_slice(%x, begin=[-2147483647], end=[0], strides=[-2], axes=[1]);
  %1 = strided_slice(%x, begin=[-2147483647], end=[0], strides=[-2], axes=[2]);
  (%0, %1)
}""", {"n": 2}, {"n": 0}, {"n": 5})

#: erf's reference crashed on a rank-0 input (relvm/ops/elementwise.py, erf).
ERF_OF_A_SCALAR = FuzzCase.from_text("""
def @main(%x: float32) {
  erf(%x)
}""", {})

#: dyn.reshape with allowzero=1 took a 0 in the shape as "copy the dim" at run time; fixed in
#: d115f40 while the fuzzer found it too (relvm/runtime/dimprog.py).
DYN_RESHAPE_WITH_ALLOWZERO = FuzzCase.from_text("""
def @main(%x: Tensor[(n, k), int32], %w: Tensor[(k, n), int32]) {
  dyn.reshape(%x, shape_of(%w), allowzero=1)
}""", {"n": 4, "k": 0}, {"n": 2, "k": 3})


@FUZZ
@given(case=fuzz_cases())
@example(case=CLIP_OF_A_SCALAR)
@example(case=BACKWARD_SLICE_FROM_BEFORE_THE_START)
@example(case=ERF_OF_A_SCALAR)
@example(case=DYN_RESHAPE_WITH_ALLOWZERO)
def test_every_leg_matches_the_reference(case: FuzzCase) -> None:
    check_case(case)


def test_upper_bounds_apply_to_callee_dims_of_the_same_name() -> None:
    mod = relvm.parse("""
def @f(%a: Tensor[(n), float32]) { add(%a, 1f) }
def @main(%x: Tensor[(n), float32]) { %0 = concatenate((%x, %x)); @f(%0) }""")
    vm = relvm.VirtualMachine(relvm.build(mod, backend="numpy", upper_bounds={"n": 4}))
    x = np.arange(3, dtype="float32")
    np.testing.assert_array_equal(vm.invoke("main", x), np.concatenate([x, x]) + 1)


def test_upper_bounds_with_a_run_time_broadcast_build() -> None:
    mod = relvm.parse("""
def @main(%x: Tensor[(n), float32], %y: Tensor[(m), float32]) {
  %0 = add(%x, %y);
  nn.softmax(%0)
}""")
    vm = relvm.VirtualMachine(relvm.build(mod, backend="numpy", upper_bounds={"n": 3, "m": 4}))
    x = np.ones(2, "float32")
    np.testing.assert_allclose(vm.invoke("main", x, x), np.full(2, 0.5, "float32"))


def test_zero_copy_keeps_a_tensor_that_one_branch_returns() -> None:
    mod = relvm.parse("""
def @main(%c: bool, %x: Tensor[(n), float32]) {
  %0 = negative(%x);
  %1 = sum(%0);
  %2 = if (%c) { add(%0, 1f) } else { %0 };
  %3 = multiply(%0, 2f);
  (%1, %2, %3)
}""")
    vm = relvm.VirtualMachine(relvm.build(mod, backend="numpy"))
    x = np.arange(3, dtype="float32")
    outs = [np.zeros((), "float32"), np.zeros(3, "float32"), np.zeros(3, "float32")]
    vm.invoke_with_outputs("main", [np.array(True), x], outs)
    np.testing.assert_array_equal(outs[1], 1 - x)
    np.testing.assert_array_equal(outs[2], -2 * x)


def test_upper_bounds_arena_holds_a_slice_longest_below_the_bound() -> None:
    mod = relvm.parse("""
def @main(%x: Tensor[(n), float32]) {
  %0 = strided_slice(%x, begin=[-3], end=[2]);
  nn.softmax(%0)
}""")
    vm = relvm.VirtualMachine(relvm.build(mod, backend="numpy", upper_bounds={"n": 8}))
    np.testing.assert_allclose(vm.invoke("main", np.ones(2, "float32")), [0.5, 0.5])


# --- which legs run -------------------------------------------------------------------------


def test_save_load_leg_runs() -> None:
    if not save_load_available():
        pytest.skip("relvm.load_bytes / Executable.save_bytes are missing: the differential "
                    "tests run without the save -> load leg")


def test_c_kernel_legs_run() -> None:
    if c_backend() is None:
        pytest.skip("no C backend with supports(entry): the differential tests run every leg "
                    "on the NumPy kernels")


# --- a deliberately broken kernel is caught, and shrunk to a few lines ------------------------


def _zero_broadcast(x: np.ndarray, shape: tuple) -> np.ndarray:
    """``x`` broadcast to ``shape`` wrongly: a size-1 dim gives its value once, then zeros."""
    full = np.zeros(shape, x.dtype)
    aligned = x.reshape((1,) * (len(shape) - x.ndim) + x.shape)
    own = len(shape) - x.ndim  # leading dims added by rank alignment broadcast correctly
    index = tuple(slice(0, 1) if i >= own and d == 1 and s > 1 else slice(None)
                  for i, (d, s) in enumerate(zip(aligned.shape, shape)))
    full[index] = aligned
    return full


@pytest.fixture
def misbroadcasting_add(monkeypatch):
    """The NumPy backend with an ``add`` kernel that broadcasts size-1 dims wrongly (tests
    only: the op registry and the reference interpreter are untouched)."""
    make_kernel = numpy_ref.make_kernel

    def patched(entry, constants=None):
        if entry.op != "add":
            return make_kernel(entry, constants)

        def kernel(a, b, out):
            shape = np.broadcast_shapes(a.shape, b.shape)
            np.copyto(out, _zero_broadcast(a, shape) + _zero_broadcast(b, shape),
                      casting="unsafe")
        return kernel
    monkeypatch.setattr(numpy_ref, "make_kernel", patched)


def _bindings(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.match(r"\s*(let )?%\w+ = ", line)]


def test_broken_broadcasting_is_caught_and_shrunk(misbroadcasting_add) -> None:
    # The elementwise forms reach the bug within a few dozen programs (the full generator
    # takes a few hundred); derandomized, so the run time is the same on every run.
    strategy = fuzz_cases(runs=3, forms=("binary", "unary", "reduce", "reshape"))
    case = find(strategy, lambda c: fails(c, numpy_legs),
                settings=settings(max_examples=1000, database=None, deadline=None,
                                  derandomize=True, suppress_health_check=list(HealthCheck)))
    text = case.program.text
    print("the broken add, shrunk:", repr(case), sep="\n")
    assert "add(" in text, text
    assert len(_bindings(text)) <= 3, text
    with pytest.raises(AssertionError, match="differs from the reference"):
        check_case(case, numpy_legs)
