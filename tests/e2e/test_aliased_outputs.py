"""Output arrays that alias inputs or each other, on the build users get (C kernels, fused) and
the unfused and NumPy builds.

The contract of ``invoke_with_outputs`` (and ``set_output``/``bind_outputs``):

* an output array that overlaps an input (is the input, a view of it, or shares part of its
  buffer) still receives the right result: the VM computes into a buffer of its own and copies
  it out, counted in ``vm.stats.output_copies``;
* output arrays that overlap each other (one array given for two results, or two views sharing
  elements) are refused with ``RelvmInputError``; views of one buffer that share no element are
  two separate outputs.

Each expected value is computed by NumPy from copies of the inputs taken before the call.
"""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm import RelvmInputError

BUILDS = {"c fused": dict(), "c unfused": dict(fuse=False), "numpy": dict(backend="numpy")}


@pytest.fixture(params=list(BUILDS), ids=list(BUILDS))
def build(request):
    def vm_for(text: str) -> relvm.VirtualMachine:
        return relvm.VirtualMachine(relvm.build(relvm.parse(text), **BUILDS[request.param]))
    return vm_for


def values(*shape: int, seed: int = 0) -> np.ndarray:
    """Multiples of 1/4 in [-2, 2]: every backend computes the same bits for small sums."""
    return (np.random.default_rng(seed).integers(-8, 9, shape) / 4).astype(np.float32)


# --- an output that is (part of) an input ------------------------------------------------------

#: name -> (program, input shapes, which input is also the output, NumPy of the inputs)
ONTO_AN_INPUT = {
    "elementwise": ("def @main(%x: Tensor[(n, 4), float32]) { add(%x, 1f) }",
                    [(5, 4)], 0, lambda x: x + 1),
    "fused chain onto its second operand": (
        """def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(n, 4), float32]) {
          %0 = subtract(%x, %y);
          %1 = multiply(%0, %x);
          nn.relu(%1)
        }""", [(5, 4), (5, 4)], 1, lambda x, y: np.maximum((x - y) * x, 0)),
    "broadcast operand": (
        """def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(4), float32]) {
          %0 = add(%y, %x);
          nn.relu(%0)
        }""", [(6, 4), (4,)], 0, lambda x, y: np.maximum(y + x, 0)),
    "transpose": ("def @main(%x: Tensor[(n, n), float32]) { transpose(%x) }",
                  [(7, 7)], 0, lambda x: x.T),
    "transpose of a 3-d input": (
        "def @main(%x: Tensor[(4, 4, 4), float32]) { transpose(%x, axes=[2, 0, 1]) }",
        [(4, 4, 4)], 0, lambda x: x.transpose(2, 0, 1)),
    "dense onto its data": (
        """def @main(%x: Tensor[(n, 8), float32], %w: Tensor[(8, 8), float32]) {
          nn.dense(%x, %w)
        }""", [(5, 8), (8, 8)], 0, lambda x, w: x @ w.T),
    "dense onto its weight": (
        """def @main(%x: Tensor[(8, 8), float32], %w: Tensor[(8, 8), float32]) {
          nn.dense(%x, %w)
        }""", [(8, 8), (8, 8)], 1, lambda x, w: x @ w.T),
    "dense with bias and relu onto its data": (
        """def @main(%x: Tensor[(n, 8), float32], %w: Tensor[(8, 8), float32],
                     %b: Tensor[(8), float32]) {
          %0 = nn.dense(%x, %w);
          %1 = nn.bias_add(%0, %b, axis=-1);
          nn.relu(%1)
        }""", [(5, 8), (8, 8), (8,)], 0, lambda x, w, b: np.maximum(x @ w.T + b, 0)),
    "reversed slice": (
        """def @main(%x: Tensor[(n), float32]) {
          strided_slice(%x, begin=[-1], end=[-2147483647], strides=[-1])
        }""", [(9,)], 0, lambda x: x[::-1]),
    "reversed slice of rows": (
        """def @main(%x: Tensor[(n, 3), float32]) {
          strided_slice(%x, begin=[-1], end=[-2147483647], strides=[-1])
        }""", [(6, 3)], 0, lambda x: x[::-1]),
    "softmax": ("def @main(%x: Tensor[(n, 5), float32]) { nn.softmax(%x) }",
                [(3, 5)], 0, lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True)),
}


@pytest.mark.parametrize("name", list(ONTO_AN_INPUT))
def test_an_output_that_is_an_input_gets_the_right_result(build, name) -> None:
    text, shapes, aliased, expect = ONTO_AN_INPUT[name]
    vm = build(text)
    inputs = [values(*s, seed=i) for i, s in enumerate(shapes)]
    want = expect(*[a.copy() for a in inputs])
    out = inputs[aliased]
    result = vm.invoke_with_outputs("main", inputs, [out])
    assert result is out
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    assert vm.stats.output_copies == 1


def test_an_output_that_is_an_input_twice_in_a_row(build) -> None:
    """The second call on the same arrays (a replay, a reused output binding) is right too."""
    vm = build("def @main(%x: Tensor[(n, n), float32]) { transpose(%x) }")
    x = values(4, 4)
    vm.invoke_with_outputs("main", [x.copy()], [np.empty((4, 4), np.float32)])
    for _ in range(2):
        want = x.T.copy()
        vm.invoke_with_outputs("main", [x], [x])
        np.testing.assert_array_equal(x, want)
        assert vm.stats.output_copies == 1


def test_an_output_that_overlaps_part_of_an_input(build) -> None:
    """x and the output are two views of one buffer, one element apart."""
    vm = build("def @main(%x: Tensor[(n), float32]) { multiply(%x, 2f) }")
    buf = values(9)
    x, out = buf[:8], buf[1:]
    want = 2 * x.copy()
    vm.invoke_with_outputs("main", [x], [out])
    np.testing.assert_array_equal(out, want)
    assert vm.stats.output_copies == 1


def test_an_input_viewed_by_a_reshaped_output(build) -> None:
    vm = build("""def @main(%x: Tensor[(n, 6), float32]) {
      %0 = transpose(%x);
      reshape(%0, newshape=[-1])
    }""")
    x = values(2, 6)
    want = x.T.reshape(-1).copy()
    out = x.reshape(-1)
    vm.invoke_with_outputs("main", [x], [out])
    np.testing.assert_array_equal(out, want)


def test_two_results_written_onto_their_two_inputs(build) -> None:
    """Each result reads both inputs: writing the first result into x in place would change
    what the second reads."""
    vm = build("""def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(n, 4), float32]) {
      (add(%x, %y), multiply(%x, %y))
    }""")
    x, y = values(3, 4, seed=1), values(3, 4, seed=2)
    want = (x + y, x * y)
    result = vm.invoke_with_outputs("main", [x, y], [x, y])
    assert result[0] is x and result[1] is y
    np.testing.assert_array_equal(x, want[0])
    np.testing.assert_array_equal(y, want[1])
    assert vm.stats.output_copies == 2


def test_swapped_onto_each_others_input(build) -> None:
    vm = build("""def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(n, 4), float32]) {
      (negative(%y), negative(%x))
    }""")
    x, y = values(3, 4, seed=1), values(3, 4, seed=2)
    want = (-y, -x)
    vm.invoke_with_outputs("main", [x, y], [x, y])
    np.testing.assert_array_equal(x, want[0])
    np.testing.assert_array_equal(y, want[1])


def test_bound_outputs_that_are_inputs(build) -> None:
    vm = build("def @main(%x: Tensor[(n, 4), float32]) { exp(%x) }")
    x = values(3, 4)
    vm.bind_outputs("main", x)
    for _ in range(2):
        want = np.exp(x)
        vm.invoke("main", x)
        np.testing.assert_allclose(x, want, rtol=1e-6)
        assert vm.stats.output_copies == 1


# --- outputs that overlap each other -------------------------------------------------------------

TWO = """def @main(%x: Tensor[(n), float32]) {
  (add(%x, 1f), multiply(%x, 2f))
}"""


def test_one_array_for_two_results_is_refused(build) -> None:
    vm = build(TWO)
    out = np.zeros(4, np.float32)
    with pytest.raises(RelvmInputError, match=r"^@main: output_args\[0\] and output_args\[1\] "
                                              r"share memory; each result needs an array of "
                                              r"its own$"):
        vm.invoke_with_outputs("main", [values(4)], [out, out])


def test_two_overlapping_views_are_refused(build) -> None:
    vm = build(TWO)
    buf = np.zeros(6, np.float32)
    with pytest.raises(RelvmInputError, match=r"output_args\[0\] and output_args\[1\] share "
                                              r"memory"):
        vm.invoke_with_outputs("main", [values(4)], [buf[:4], buf[2:]])


def test_overlapping_bound_outputs_are_refused(build) -> None:
    vm = build(TWO)
    out = np.zeros(4, np.float32)
    with pytest.raises(RelvmInputError, match=r"^@main: outs\[0\] and outs\[1\] share memory"):
        vm.bind_outputs("main", out, out)


def test_disjoint_views_of_one_buffer_are_two_outputs(build) -> None:
    vm = build(TWO)
    buf = np.zeros(8, np.float32)
    x = values(4)
    vm.invoke_with_outputs("main", [x], [buf[:4], buf[4:]])
    np.testing.assert_array_equal(buf, np.concatenate([x + 1, 2 * x]))


def test_a_result_returned_twice_into_two_arrays(build) -> None:
    vm = build("""def @main(%x: Tensor[(n), float32]) {
      %0 = add(%x, 1f);
      (%0, %0)
    }""")
    x = values(4)
    outs = [np.zeros(4, np.float32), np.zeros(4, np.float32)]
    vm.invoke_with_outputs("main", [x], outs)
    for out in outs:
        np.testing.assert_array_equal(out, x + 1)
