"""Build-time passes: fusion groups, batch-norm folding, constant folding."""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm.runtime.opcodes import Opcode


def kernels_of(exe, func="main") -> list[str]:
    fn = exe.function(func)
    return [exe.kernels[i[1]].name for i in fn.instructions if i[0] == Opcode.InvokePacked]


def build(text, **kw):
    return relvm.build(relvm.parse(text), **kw)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


DENSE_EPILOGUE = """def @main(%x: Tensor[(n, 8), float32], %w: Tensor[(4, 8), float32],
          %b: Tensor[(4), float32], %r: Tensor[(n, 4), float32]) {
  %0 = nn.dense(%x, %w);
  %1 = nn.bias_add(%0, %b);
  %2 = nn.relu(%1);
  %3 = add(%2, %r);
  %4 = clip(%3, a_min=-1f, a_max=1f);
  cast(%4, dtype="float64")
}"""


def test_dense_epilogue_fuses_into_one_kernel_named_in_bytecode() -> None:
    exe = build(DENSE_EPILOGUE)
    assert kernels_of(exe) == ["fused_dense_bias_add_relu_add_clip_cast"]
    assert "fused_dense_bias_add_relu_add_clip_cast#0" in exe.bytecode
    assert kernels_of(build(DENSE_EPILOGUE, fuse=False)) == [
        "nn.dense", "nn.bias_add", "nn.relu", "add", "clip", "cast"]


def test_fused_equals_unfused() -> None:
    x, w, b, r = rand(5, 8), rand(4, 8, seed=1), rand(4, seed=2), rand(5, 4, seed=3)
    outs = [relvm.VirtualMachine(build(DENSE_EPILOGUE, fuse=f)).invoke("main", x, w, b, r)
            for f in (True, False)]
    want = np.clip(np.maximum(x @ w.T + b, 0) + r, -1, 1).astype(np.float64)
    for o in outs:
        assert o.dtype == np.float64
        np.testing.assert_allclose(o, want, rtol=1e-5, atol=1e-6)


def test_a_value_used_twice_is_not_fused_into_either_consumer() -> None:
    exe = build("""def @main(%x: Tensor[(n, 4), float32]) {
      %0 = exp(%x);
      (nn.relu(%0), sigmoid(%0))
    }""")
    assert sorted(kernels_of(exe)) == ["exp", "nn.relu", "sigmoid"]


def test_broadcasting_consumer_that_grows_the_shape_is_not_fused() -> None:
    exe = build("""def @main(%x: Tensor[(4), float32], %y: Tensor[(3, 4), float32]) {
      %0 = exp(%x);
      add(%0, %y)
    }""")
    assert kernels_of(exe) == ["exp", "add"]


def test_reductions_and_softmax_stay_separate() -> None:
    exe = build("""def @main(%x: Tensor[(n, 4), float32]) {
      %0 = exp(%x);
      %1 = nn.softmax(%0);
      %2 = sum(%1, axis=[1]);
      nn.relu(%2)
    }""")
    assert kernels_of(exe) == ["exp", "nn.softmax", "sum", "nn.relu"]


CONV_MEAN = """def @main(%x: Tensor[(n, 4, 9, 9), float32], %w: Tensor[(6, {icg}, 3, 3), float32],
          %b: Tensor[(6), float32]) {{
  %0 = nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1], groups={groups}, channels=6,
                 kernel_size=[3, 3]);
  %1 = nn.bias_add(%0, %b);
  %2 = nn.relu(%1);
  {tail}
}}"""


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_global_avg_pool_ends_its_convs_group(groups, backend) -> None:
    """The conv's output is averaged as it is computed; fused == unfused, for every n."""
    text = CONV_MEAN.format(icg=4 // groups, groups=groups, tail="nn.global_avg_pool2d(%2)")
    exe = build(text, backend=backend)
    assert kernels_of(exe) == ["fused_conv2d_bias_add_relu_global_avg_pool2d"]
    ref = relvm.VirtualMachine(build(text, fuse=False, backend=backend))
    vm = relvm.VirtualMachine(exe)
    w, b = rand(6, 4 // groups, 3, 3, seed=1), rand(6, seed=2)
    for n in (1, 3, 0):
        x = rand(n, 4, 9, 9, seed=n)
        got = vm.invoke("main", x, w, b)
        assert got.shape == (n, 6, 1, 1)
        np.testing.assert_allclose(got, ref.invoke("main", x, w, b), rtol=1e-5, atol=1e-6)


def test_a_pool_of_a_conv_output_used_elsewhere_is_not_fused() -> None:
    tail = "(nn.global_avg_pool2d(%2), %2)"
    exe = build(CONV_MEAN.format(icg=4, groups=1, tail=tail))
    assert kernels_of(exe) == ["fused_conv2d_bias_add_relu", "nn.global_avg_pool2d"]
    max_pool = build(CONV_MEAN.format(icg=4, groups=1, tail="nn.global_max_pool2d(%2)"))
    assert kernels_of(max_pool) == ["fused_conv2d_bias_add_relu", "nn.global_max_pool2d"]


def test_no_fusion_across_a_closure_boundary() -> None:
    exe = build("""def @main(%x: Tensor[(n), float32]) {
      let %y = exp(%x);
      let %f = fn () { nn.relu(%y) };
      %f()
    }""")
    assert kernels_of(exe) == ["exp"]
    assert kernels_of(exe, exe.functions[1].name) == ["nn.relu"]


CONV_BN = """def @main(%x: Tensor[(n, 3, 6, 6), float32], %w: Tensor[(4, 3, 3, 3), float32],
          %g: Tensor[(4), float32], %b: Tensor[(4), float32], %m: Tensor[(4), float32],
          %v: Tensor[(4), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1]);
  %1 = nn.batch_norm(%0, %g, %b, %m, %v, epsilon=1e-3f);
  nn.relu(%1.0)
}"""


def test_batch_norm_folds_into_conv_and_fuses() -> None:
    rng = np.random.default_rng(0)
    params = {"w": rand(4, 3, 3, 3), "g": rand(4, seed=1), "b": rand(4, seed=2),
              "m": rand(4, seed=3), "v": (rng.random(4) + 0.5).astype(np.float32)}
    mod = relvm.parse(CONV_BN)
    exe = relvm.build(mod, params=params)
    assert kernels_of(exe) == ["fused_conv2d_bias_add_relu"]
    x = rand(2, 3, 6, 6, seed=9)
    from relvm.testing.reference import evaluate

    want = evaluate(mod, x, params=params)
    np.testing.assert_allclose(relvm.VirtualMachine(exe).invoke("main", x), want,
                               rtol=1e-4, atol=1e-5)


def test_batch_norm_without_conv_becomes_scale_and_shift() -> None:
    text = """def @main(%x: Tensor[(n, 3), float32]) {
      %0 = nn.batch_norm(%x, meta[relay.Constant][0], meta[relay.Constant][1],
                         meta[relay.Constant][2], meta[relay.Constant][3]);
      %0.0
    }"""
    c = [np.float32([1, 2, 3]), np.float32([0, 1, 0]), np.float32([1, 1, 1]), np.float32([4, 4, 4])]
    mod = relvm.parse(text, constants=c)
    exe = relvm.build(mod)
    assert kernels_of(exe) == ["fused_multiply_add"]
    x = rand(5, 3)
    want = (x - 1) / np.sqrt(4 + 1e-5) * c[0] + c[1]
    np.testing.assert_allclose(relvm.VirtualMachine(exe).invoke("main", x), want, rtol=1e-5)


def test_constants_fold_at_build_time() -> None:
    exe = build("""def @main(%x: Tensor[(3), float32]) {
      %0 = add(1f, 2f);
      %1 = multiply(ones(shape=[3], dtype="float32"), %0);
      %2 = arange(0f, 3f, 1f);
      add(%x, add(%1, %2))
    }""")
    assert kernels_of(exe) == ["add"]
    np.testing.assert_array_equal(relvm.VirtualMachine(exe).invoke("main", np.zeros(3, np.float32)),
                                  [3, 4, 5])


def test_a_failing_constant_op_is_left_for_run_time() -> None:
    exe = build("""def @main(%x: Tensor[(2), float32]) {
      %0 = arange(0f, 3f, 0f);
      add(%x, %0)
    }""")
    with pytest.raises(relvm.RelvmError, match="step must not be zero"):
        relvm.VirtualMachine(exe).invoke("main", np.zeros(2, np.float32))
