"""float16 ops the C backend has no float16 kernel for run in float32 (``passes/widen.py``)."""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm.runtime.bytecode.opcodes import Opcode


def kernels_of(exe, func="main") -> list[str]:
    fn = exe.function(func)
    return [exe.kernels[i[1]].name for i in fn.instructions if i[0] == Opcode.InvokePacked]


def half(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float16)


def in_float32(f, *args):
    """f over the float16 arguments in float32, rounded to float16: what the build computes."""
    return f(*[a.astype(np.float32) for a in args]).astype(np.float16)


CASES = [
    ("multiply(%a, %b)", lambda a, b: a * b),
    ("divide(%a, %b)", lambda a, b: a / b),
    ("nn.softmax(%a, axis=-1)",
     lambda a, b: np.exp(a - a.max(-1, keepdims=True)) / np.exp(a - a.max(-1, keepdims=True))
     .sum(-1, keepdims=True)),
    ("nn.batch_matmul(%a, %b, transpose_b=True)", lambda a, b: a @ np.swapaxes(b, -1, -2)),
    ("sigmoid(add(%a, %b))", lambda a, b: 1 / (1 + np.exp(-(a + b)))),
    ("sum(multiply(%a, %b), axis=[2])", lambda a, b: (a * b).sum(2)),
    ("power(%b, %a)", lambda a, b: np.power(b, a)),
]


@pytest.mark.parametrize("expr,ref", CASES, ids=[c[0] for c in CASES])
def test_float16_ops_without_a_float16_kernel_compute_in_float32(expr, ref) -> None:
    text = f"""def @main(%a: Tensor[(2, n, 8), float16], %b: Tensor[(2, n, 8), float16]) {{
      {expr}
    }}"""
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(text)))  # the C kernels, fusion on
    for n in (1, 5, 8):
        a, b = half(2, n, 8, seed=n), half(2, n, 8, seed=n + 1) + np.float16(3)
        got = vm.invoke("main", a, b)
        assert got.dtype == np.float16
        want = in_float32(ref, a, b)
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                   rtol=2e-3, atol=2e-3)


def test_a_float16_conv2d_runs_in_float32_with_casts_fused_around_it() -> None:
    text = """def @main(%x: Tensor[(n, 3, 9, 9), float16], %w: Tensor[(4, 3, 3, 3), float16]) {
      nn.relu(nn.conv2d(%x, %w, padding=[1, 1], channels=4, kernel_size=[3, 3]))
    }"""
    w = half(4, 3, 3, 3, seed=1)
    exe = relvm.build(relvm.parse(text), params={"w": w})
    names = kernels_of(exe)
    assert any("cast" in k for k in names), names
    x = half(2, 3, 9, 9)
    got = relvm.VirtualMachine(exe).invoke("main", x)
    ref = relvm.VirtualMachine(relvm.build(relvm.parse(text), params={"w": w},
                                           backend="numpy")).invoke("main", x)
    assert got.dtype == np.float16 and got.shape == (2, 4, 9, 9)
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=5e-3,
                               atol=5e-3)


def test_a_float16_op_with_a_float16_kernel_is_left_as_it_is() -> None:
    exe = relvm.build(relvm.parse(
        "def @main(%a: Tensor[(n, 8), float16]) { abs(%a) }"))
    assert kernels_of(exe) == ["abs"]
    a = half(3, 8)
    np.testing.assert_array_equal(relvm.VirtualMachine(exe).invoke("main", a), np.abs(a))


def test_the_numpy_backend_is_not_rewritten() -> None:
    exe = relvm.build(relvm.parse(
        "def @main(%a: Tensor[(n, 8), float16]) { multiply(%a, %a) }"), backend="numpy")
    assert kernels_of(exe) == ["multiply"]
