"""Differential fuzzing of the whole pipeline: for generated programs and several assignments
of their symbolic dims on one build, the reference interpreter, the VM, the VM writing into
caller arrays (zero-copy), the unfused build, the build with the weights bound as constants
(``params=``), the arena build (upper_bounds) and the executable after save -> load all give
the same results. Those legs run on the C kernels, the build users get (fused kernels generated
as C); the VM runs once more on NumPy's. The test
counts the programs each leg ran and fails when a C leg did not run for every program (only
ops in ``fuzz_harness.NUMPY_ONLY`` may move a program's C legs to NumPy's kernels), and when
the C backend is missing: it never skips.

The generator repeats elementwise chains over other ranks, broadcasts and operand positions in
one program (``relvm/testing/_repeat.py``), so fused kernels that wrongly share code differ.

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

from fuzz_harness import (FuzzCase, Tally, check_case, fails, fuzz_cases, numpy_legs,
                          onto_inputs_legs)

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
#: d115f40 while the fuzzer found it too (relvm/runtime/bytecode/dimprog.py).
DYN_RESHAPE_WITH_ALLOWZERO = FuzzCase.from_text("""
def @main(%x: Tensor[(n, k), int32], %w: Tensor[(k, n), int32]) {
  dyn.reshape(%x, shape_of(%w), allowzero=1)
}""", {"n": 4, "k": 0}, {"n": 2, "k": 3})


#: Fused groups with the same steps on other ranks and broadcasts (an operand of the value's
#: shape, a scalar, a (c, 1, 1) channel) shared one generated kernel: the later ones ran the
#: first one's loop plan, reading past the scalar (relvm/compiler/lower.py: Program.kernel keyed
#: kernels on steps and dtypes only). The generator's repeated chains find it.
SHARED_FUSED_KERNEL = FuzzCase.from_text("""
def @main(%x: Tensor[(n), float32], %y: Tensor[(n), float32], %z: Tensor[(n, 3), float32],
          %s: float32, %w: Tensor[(n, 3, 2, 4), float32], %c: Tensor[(3, 1, 1), float32]) {
  %0 = add(%x, %y);
  %1 = nn.relu(%0);
  %2 = add(%z, %s);
  %3 = nn.relu(%2);
  %4 = add(%w, %c);
  %5 = nn.relu(%4);
  (%1, %3, %5)
}""", {"n": 3}, {"n": 1}, {"n": 0})

#: Two convs fused into one C call with no channels between them (the first conv's weight
#: (n, 3, 1, 1) at n = 0): relvm_conv2d_pair refuses that shape and the fused kernel raised
#: instead of running the steps one by one (relvm/backends/ckernels/packed.py, make_conv_pair).
CONV_PAIR_WITH_NO_CHANNELS_BETWEEN = FuzzCase.from_text("""
def @main(%x: Tensor[(3, 3, 3, 3), float32], %w1: Tensor[(n, 3, 1, 1), float32],
          %b1: Tensor[(n), float32], %w2: Tensor[(3, n, 3, 3), float32],
          %b2: Tensor[(3), float32]) {
  %0 = nn.conv2d(%x, %w1);
  %1 = nn.bias_add(%0, %b1, axis=1);
  %2 = nn.relu(%1);
  %3 = nn.conv2d(%2, %w2, padding=[1]);
  nn.bias_add(%3, %b2)
}""", {"n": 0}, {"n": 2})

TALLY = Tally()


@FUZZ
@given(case=fuzz_cases())
@example(case=CLIP_OF_A_SCALAR)
@example(case=BACKWARD_SLICE_FROM_BEFORE_THE_START)
@example(case=ERF_OF_A_SCALAR)
@example(case=DYN_RESHAPE_WITH_ALLOWZERO)
@example(case=SHARED_FUSED_KERNEL)
@example(case=CONV_PAIR_WITH_NO_CHANNELS_BETWEEN)
def every_leg_matches_the_reference(case: FuzzCase) -> None:
    check_case(case, tally=TALLY)


@pytest.mark.slow
@pytest.mark.e2e
def test_every_leg_matches_the_reference() -> None:
    TALLY.reset()
    every_leg_matches_the_reference()
    print(TALLY)
    TALLY.check(PROGRAMS)


#: Programs per run of the outputs-onto-inputs leg (a cheaper leg; fewer programs).
ONTO_INPUTS = settings(FUZZ, max_examples=max(50, settings.default.max_examples // 4))


@pytest.mark.e2e
@ONTO_INPUTS
@given(case=fuzz_cases(runs=2))
def test_results_written_onto_inputs_match_the_reference(case: FuzzCase) -> None:
    """Each result goes into (a copy of) an input of its shape and dtype, on the default build,
    fused and unfused: the VM must compute it elsewhere and copy it (issue 15)."""
    check_case(case, onto_inputs_legs)


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


@pytest.mark.e2e
def test_the_c_backend_runs_generated_fused_kernels() -> None:
    """The C legs need relvm's compiled kernels and a C compiler for the fused ones: without
    them this fails, as the differential test does, rather than skipping."""
    from relvm.backends import native

    native.load()
    text = """def @main(%x: Tensor[(n, 4), float32], %b: Tensor[(4), float32]) {
      %0 = add(%x, %b);
      nn.relu(%0)
    }"""
    exe = relvm.build(relvm.parse(text))
    assert exe.backend == "c" and exe.kernel_library
    assert any(k.op == "fused" and "plan" in k.attrs for k in exe.kernels)
    x, b = np.arange(-4, 4, dtype="float32").reshape(2, 4), np.ones(4, "float32")
    np.testing.assert_array_equal(relvm.VirtualMachine(exe).invoke("main", x, b),
                                  np.maximum(x + b, 0))


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


@pytest.mark.slow
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
