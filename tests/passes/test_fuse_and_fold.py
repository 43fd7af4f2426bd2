"""Build-time passes: fusion groups, batch-norm folding, constant folding."""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm.runtime.bytecode.opcodes import Opcode


def kernels_of(exe, func="main") -> list[str]:
    fn = exe.function(func)
    return [exe.kernels[i[1]].name for i in fn.instructions if i[0] == Opcode.InvokePacked]


def exe_fused_steps(exe) -> list[dict]:
    """Every step of every fused kernel the executable has."""
    return [step for k in exe.kernels if "steps" in k.attrs for step in k.attrs["steps"]]


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


@pytest.mark.e2e
def test_dense_epilogue_fuses_into_one_kernel_named_in_bytecode() -> None:
    exe = build(DENSE_EPILOGUE)
    assert kernels_of(exe) == ["fused_dense_bias_add_relu_add_clip_cast"]
    assert "fused_dense_bias_add_relu_add_clip_cast#0" in exe.bytecode
    assert kernels_of(build(DENSE_EPILOGUE, fuse=False)) == [
        "nn.dense", "nn.bias_add", "nn.relu", "add", "clip", "cast"]


@pytest.mark.e2e
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


@pytest.mark.e2e
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


@pytest.mark.e2e
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


@pytest.mark.e2e
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


# --- conv pairs: a conv and the conv reading it, as one kernel -----------------------------------

CONV_PAIR = """def @main(%x: Tensor[(n, 4, {hw}), {dt}], %w1: Tensor[(8, {icg1}, 3, 3), {dt}],
          %b1: Tensor[(8), {dt}], %w2: Tensor[(6, {icg2}, 3, 3), {dt}],
          %b2: Tensor[(6), {dt}]{extra}) {{
  %0 = nn.conv2d(%x, %w1, padding=[1, 1], groups={groups1}, channels=8, kernel_size=[3, 3]);
  %1 = nn.bias_add(%0, %b1);
  %2 = nn.relu(%1);
  %3 = nn.conv2d(%2, %w2, strides=[2, 2], padding=[1, 1], groups={groups2}, channels=6,
                 kernel_size=[3, 3]);
  %4 = nn.bias_add(%3, %b2);
  %5 = nn.relu(%4);
  {tail}
}}"""

PAIR_NAME = "fused_conv2d_bias_add_relu_conv2d_bias_add_relu"


def conv_pair(tail="%5", hw="h, w", dt="float32", groups1=1, groups2=1, extra=""):
    return CONV_PAIR.format(hw=hw, dt=dt, icg1=4 // groups1, icg2=8 // groups2,
                            groups1=groups1, groups2=groups2, extra=extra, tail=tail)


def pair_params(dt="float32", groups1=1, groups2=1):
    return [rand(8, 4 // groups1, 3, 3, seed=1).astype(dt) * 0.3, rand(8, seed=2).astype(dt),
            rand(6, 8 // groups2, 3, 3, seed=3).astype(dt) * 0.3, rand(6, seed=4).astype(dt)]


@pytest.fixture
def restore_threads():
    before = relvm.get_num_threads()
    yield
    relvm.set_num_threads(before)


def assert_fused_equals_unfused(text, shapes, extra=(), backend="c", **kw) -> None:
    """The fused and unfused builds of ``text`` agree on data of each shape, on one thread and
    on two (a conv pair runs stage by stage or an image per thread, by images per thread)."""
    vm = relvm.VirtualMachine(build(text, backend=backend))
    ref = relvm.VirtualMachine(build(text, fuse=False, backend=backend))
    params = pair_params(**kw)
    for nthreads in (1, 2):
        relvm.set_num_threads(nthreads)
        for shape in shapes:
            x = rand(*shape, seed=sum(shape)).astype(params[0].dtype)
            args = [x, *params, *(e(shape) for e in extra)]
            got, want = vm.invoke("main", *args), ref.invoke("main", *args)
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4,
                                       err_msg=f"{shape} on {nthreads} threads")


PAIR_SHAPES = [(0, 4, 11, 13), (1, 4, 11, 13), (3, 4, 8, 32), (6, 4, 11, 13), (6, 4, 1, 1),
               (1, 4, 17, 20)]


@pytest.mark.parametrize("tail,name", [
    ("nn.global_avg_pool2d(%5)", PAIR_NAME + "_global_avg_pool2d"),
    ("%5", PAIR_NAME),
], ids=["pool", "no_pool"])
@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_conv_pair_fuses_into_one_kernel(restore_threads, tail, name, backend) -> None:
    """conv -> bias_add -> relu -> conv -> bias_add -> relu [-> pool] is one kernel; fused ==
    unfused for n = 0, 1, 3, 6 and several (symbolic) image sizes."""
    text = conv_pair(tail)
    assert kernels_of(build(text, backend=backend)) == [name]
    assert_fused_equals_unfused(text, PAIR_SHAPES, backend=backend)


@pytest.mark.parametrize("tail,names", [
    ("sigmoid(%5)", ["fused_conv2d_bias_add_relu", "fused_conv2d_bias_add_relu_sigmoid"]),
    ("add(%5, %r)", ["fused_conv2d_bias_add_relu", "fused_conv2d_bias_add_relu_add"]),
    ("nn.global_avg_pool2d(sigmoid(%5))",
     ["fused_conv2d_bias_add_relu", "fused_conv2d_bias_add_relu_sigmoid_global_avg_pool2d"]),
], ids=["sigmoid", "residual_add", "sigmoid_then_pool"])
@pytest.mark.e2e
def test_a_pair_whose_second_group_goes_on_splits(restore_threads, tail, names) -> None:
    """The second conv's group may go on only with bias_add, relu and the pool: anything else
    gives the two convs a group each, and the results do not change."""
    text = conv_pair(tail, hw="11, 13", extra=", %r: Tensor[(n, 6, 6, 7), float32]")
    assert kernels_of(build(text)) == names
    residual = lambda shape: rand(shape[0], 6, 6, 7, seed=7)  # noqa: E731
    assert_fused_equals_unfused(text, [(1, 4, 11, 13), (5, 4, 11, 13)], extra=[residual])


@pytest.mark.parametrize("tail,names", [
    ("(%5, %2)", ["fused_conv2d_bias_add_relu", "fused_conv2d_bias_add_relu"]),
    ("(%5, %0)", ["nn.conv2d", "fused_bias_add_relu", "fused_conv2d_bias_add_relu"]),
], ids=["relu_output_kept", "conv_output_kept"])
@pytest.mark.e2e
def test_a_conv_whose_output_has_another_use_is_not_paired(tail, names) -> None:
    text = conv_pair(tail)
    assert kernels_of(build(text)) == names
    vm, ref = (relvm.VirtualMachine(build(text, fuse=f)) for f in (True, False))
    args = [rand(2, 4, 9, 10), *pair_params()]
    for got, want in zip(vm.invoke("main", *args), ref.invoke("main", *args)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.e2e
@pytest.mark.parametrize("kw", [{"groups1": 2}, {"groups2": 2}, {"dt": "float64"}],
                         ids=["first_groups2", "second_groups2", "float64"])
def test_only_float32_convs_of_one_group_pair(restore_threads, kw) -> None:
    """Grouped convs and other dtypes keep a group each (the pair kernel does not take them)."""
    text = conv_pair("nn.global_avg_pool2d(%5)", **kw)
    backend = "numpy" if "dt" in kw else "c"  # the c backend has no float64 conv
    assert kernels_of(build(text, backend=backend)) == [
        "fused_conv2d_bias_add_relu", "fused_conv2d_bias_add_relu_global_avg_pool2d"]
    assert_fused_equals_unfused(text, [(1, 4, 11, 13), (6, 4, 8, 9)], backend=backend, **kw)


THREE_CONVS = """def @main(%x: Tensor[(n, 3, h, w), float32], %w1: Tensor[(8, 3, 3, 3), float32],
          %b1: Tensor[(8), float32], %w2: Tensor[(6, 8, 3, 3), float32],
          %b2: Tensor[(6), float32], %w3: Tensor[(5, 6, 1, 1), float32],
          %b3: Tensor[(5), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1]);
  %1 = nn.relu(nn.bias_add(%0, %b1));
  %2 = nn.conv2d(%1, %w2, strides=[2, 2], padding=[1, 1]);
  %3 = nn.relu(nn.bias_add(%2, %b2));
  %4 = nn.conv2d(%3, %w3);
  nn.relu(nn.bias_add(%4, %b3))
}"""


@pytest.mark.e2e
def test_three_convs_make_one_pair_and_a_single_conv_group(restore_threads) -> None:
    """A conv reading a pair does not join it: the pair is one kernel, the third conv another."""
    assert kernels_of(build(THREE_CONVS)) == [PAIR_NAME, "fused_conv2d_bias_add_relu"]
    vm, ref = (relvm.VirtualMachine(build(THREE_CONVS, fuse=f)) for f in (True, False))
    params = [rand(8, 3, 3, 3, seed=1) * 0.3, rand(8, seed=2), rand(6, 8, 3, 3, seed=3) * 0.3,
              rand(6, seed=4), rand(5, 6, 1, 1, seed=5), rand(5, seed=6)]
    for nthreads in (1, 2):
        relvm.set_num_threads(nthreads)
        for n, h, w in ((1, 11, 13), (3, 16, 16), (6, 7, 20), (0, 5, 5)):
            x = rand(n, 3, h, w, seed=n)
            np.testing.assert_allclose(vm.invoke("main", x, *params),
                                       ref.invoke("main", x, *params), rtol=1e-4, atol=1e-4)


BARE_PAIR = """def @main(%x: Tensor[(n, 4, h, w), float32], %w1: Tensor[(8, 4, 3, 3), float32],
          %w2: Tensor[(6, 8, 3, 3), float32]) {{
  %0 = nn.conv2d(%x, %w1, padding=[1, 1]);
  %1 = nn.conv2d(%0, %w2, strides=[2, 2], padding=[1, 1]);
  {tail}
}}"""


@pytest.mark.parametrize("tail,names", [
    ("%1", ["fused_conv2d_conv2d"]),
    ("nn.global_avg_pool2d(%1)", ["fused_conv2d_conv2d_global_avg_pool2d"]),
    ("sigmoid(%1)", ["nn.conv2d", "fused_conv2d_sigmoid"]),  # split: the first half is one op
], ids=["bare", "bare_pool", "bare_then_sigmoid"])
@pytest.mark.e2e
def test_bare_conv_pair(restore_threads, tail, names) -> None:
    """Two convs with no bias or relu between them pair as well."""
    text = BARE_PAIR.format(tail=tail)
    assert kernels_of(build(text)) == names
    vm, ref = (relvm.VirtualMachine(build(text, fuse=f)) for f in (True, False))
    w1, w2 = rand(8, 4, 3, 3, seed=1) * 0.3, rand(6, 8, 3, 3, seed=2) * 0.3
    for nthreads in (1, 2):
        relvm.set_num_threads(nthreads)
        for n in (0, 1, 3, 6):
            x = rand(n, 4, 11, 13, seed=n)
            np.testing.assert_allclose(vm.invoke("main", x, w1, w2), ref.invoke("main", x, w1, w2),
                                       rtol=1e-4, atol=1e-4)


@pytest.mark.e2e
def test_convnet_example_end_to_end(restore_threads) -> None:
    """The example convnet builds to the pair (with its pool) and the dense layer; fused ==
    unfused, and invoke_with_outputs writes the result into the caller's array."""
    from relvm import examples

    mod, params = relvm.parse(examples.text("convnet")), examples.params("convnet")
    exe = relvm.build(mod, params=params)
    assert kernels_of(exe) == [PAIR_NAME + "_global_avg_pool2d", "fused_dense_bias_add"]
    vm = relvm.VirtualMachine(exe)
    ref = relvm.VirtualMachine(relvm.build(mod, params=params, fuse=False))
    for nthreads in (1, 2):
        relvm.set_num_threads(nthreads)
        for n in (1, 5, 16):
            x = rand(n, 3, 32, 32, seed=n)
            want = ref.invoke("main", x)
            np.testing.assert_allclose(vm.invoke("main", x), want, rtol=1e-4, atol=1e-4)
            out = np.full((n, 10), np.nan, np.float32)
            got = vm.invoke_with_outputs("main", [x], [out])
            assert got is out or np.shares_memory(got, out)
            assert vm.stats.output_copies == 0
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.mark.e2e
def test_a_long_elementwise_chain_is_cut_into_groups_of_at_most_max_group_ops() -> None:
    from relvm.passes.fuse import MAX_GROUP_OPS

    n = 3 * MAX_GROUP_OPS + 5
    body = "".join(f"  %{i + 1} = add(%{i}, 1f);\n" for i in range(n))
    exe = relvm.build(relvm.parse(f"def @main(%0: Tensor[(2, 4), float32]) {{\n{body}  %{n}\n}}"))
    calls = [ins for ins in exe.function("main").instructions if ins[0] == Opcode.InvokePacked]
    assert len(calls) == 4  # three full groups and one of five
    assert all(len(exe.kernels[ins[1]].attrs["steps"]) <= MAX_GROUP_OPS for ins in calls)
    out = relvm.VirtualMachine(exe).invoke("main", np.zeros((2, 4), np.float32))
    np.testing.assert_array_equal(out, np.full((2, 4), n, np.float32))


@pytest.mark.e2e
@pytest.mark.parametrize("power, products", [(1.0, 0), (2.0, 1), (3.0, 2), (4.0, 2)])
def test_a_small_integer_power_becomes_products_that_fuse(power, products) -> None:
    # GELU's tanh form cubes its input: the fused loop multiplies instead of calling pow.
    exe = build(f"""def @main(%x: Tensor[(n, 5), float32]) {{
      %0 = power(%x, {power}f);
      %1 = multiply(%0, 0.5f);
      add(%1, %x)
    }}""")
    steps = [s["op"] for s in exe_fused_steps(exe)]
    assert "power" not in steps and steps.count("multiply") == products + 1
    x = np.float32([[-2.5, -0.0, 0.0, 1.5, 3.0], [np.inf, -np.inf, np.nan, 1e-20, 7.0]])
    with np.errstate(all="ignore"):
        want = np.power(x, np.float32(power)) * np.float32(0.5) + x
    np.testing.assert_allclose(relvm.VirtualMachine(exe).invoke("main", x), want, rtol=1e-6)


@pytest.mark.e2e
def test_every_power_of_a_chain_is_simplified() -> None:
    # A power after another one reads a call the pass rebuilt: its type must still be known.
    exe = build("""def @main(%x: Tensor[(n, 4), float32]) {
      %0 = power(%x, 3f);
      %1 = tanh(%0);
      %2 = power(%1, 2f);
      power(%2, 3f)
    }""")
    assert "power" not in [s["op"] for s in exe_fused_steps(exe)] + kernels_of(exe)
    x = rand(3, 4)
    want = np.power(np.power(np.tanh(np.power(x, 3)), 2), 3)
    np.testing.assert_allclose(relvm.VirtualMachine(exe).invoke("main", x), want, rtol=1e-5)


@pytest.mark.parametrize("text", [
    "power(%x, 2.5f)",                          # not a small integer: pow it stays
    "power(%x, meta[relay.Constant][0])",       # a constant of more dims broadcasts x
    "power(%x, %x)",                            # not a constant
])
def test_other_powers_stay_power(text) -> None:
    mod = relvm.parse(f"def @main(%x: Tensor[(3), float32]) {{ {text} }}",
                      constants=[np.full((1, 1), 2.0, np.float32)])
    exe = relvm.build(mod, backend="numpy")
    assert "power" in [s["op"] for s in exe_fused_steps(exe)] + kernels_of(exe)


@pytest.mark.e2e
@pytest.mark.parametrize("transpose_b", [False, True])
def test_a_matmul_by_a_constant_becomes_a_dense_layer(transpose_b) -> None:
    # A constant right operand is a weight: nn.dense packs it once per VM (C backend), and the
    # bias add fuses into its epilogue.
    w, b = rand(6, 5, seed=1), rand(5, seed=2)
    shape = "(5, 6)" if transpose_b else "(6, 5)"
    mod = relvm.parse(f"""def @main(%x: Tensor[(n, 6), float32], %w: Tensor[{shape}, float32],
                                    %b: Tensor[(5), float32]) {{
      %0 = nn.matmul(%x, %w, transpose_b={transpose_b});
      add(%0, %b)
    }}""")
    wp = np.ascontiguousarray(w.T) if transpose_b else w
    exe = relvm.build(mod, params={"w": wp, "b": b})
    assert kernels_of(exe) == ["fused_dense_add"]
    x = rand(3, 6, seed=3)
    np.testing.assert_allclose(relvm.VirtualMachine(exe).invoke("main", x), x @ w + b,
                               rtol=1e-5, atol=1e-6)


def test_a_matmul_by_an_input_or_of_a_transposed_a_stays_matmul() -> None:
    for text in ["nn.matmul(%x, %y)", "nn.matmul(%x, %y, transpose_a=True)"]:
        mod = relvm.parse(f"""def @main(%x: Tensor[(4, 4), float32], %y: Tensor[(4, 4), float32]) {{
          {text}
        }}""")
        params = {"y": rand(4, 4)} if "transpose_a" in text else {}  # then y is a weight
        exe = relvm.build(mod, params=params, backend="numpy")
        assert kernels_of(exe) == ["nn.matmul"]


CONV1D = """def @main(%x: Tensor[(n, 4, w), float32], %w1: Tensor[(6, 4, 3), float32],
          %b1: Tensor[(6), float32], %w2: Tensor[(5, 6, 3), float32]) {
  %0 = expand_dims(%x, axis=2);
  %1 = expand_dims(%w1, axis=2);
  %2 = nn.conv2d(%0, %1, padding=[0, 1, 0, 1]);
  %3 = nn.bias_add(%2, %b1);
  %4 = squeeze(%3, axis=[2]);
  %5 = nn.relu(%4);
  %6 = expand_dims(%5, axis=2);
  %7 = expand_dims(%w2, axis=2);
  %8 = nn.conv2d(%6, %7, strides=[1, 2], padding=[0, 1, 0, 1]);
  %9 = squeeze(%8, axis=[2]);
  sigmoid(%9)
}"""


def _conv1d_reference(x, w1, b1, w2):
    def conv1d(x, w, stride):
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1)))
        width = (xp.shape[2] - w.shape[2]) // stride + 1
        cols = np.stack([xp[:, :, i * stride:i * stride + w.shape[2]] for i in range(width)], 2)
        return np.einsum("ncwk,ock->now", cols, w)

    y = np.maximum(conv1d(x, w1, 1) + b1[None, :, None], 0)
    return 1 / (1 + np.exp(-conv1d(y, w2, 2)))


@pytest.mark.e2e
def test_conv1d_lowered_through_conv2d_keeps_its_epilogue() -> None:
    # expand_dims -> conv2d -> bias_add -> squeeze -> relu: the relu moves before the squeeze
    # (into the conv's epilogue), and the squeeze -> expand_dims between the convs cancels.
    w1, b1, w2 = rand(6, 4, 3, seed=1), rand(6, seed=2), rand(5, 6, 3, seed=3)
    exe = relvm.build(relvm.parse(CONV1D), params={"w1": w1, "b1": b1, "w2": w2})
    names = kernels_of(exe)
    assert "nn.relu" not in names and not any(n.startswith("squeeze") for n in names[:-1])
    steps = [s["op"] for s in exe_fused_steps(exe)]
    assert steps.count("nn.relu") == 1 and "expand_dims" not in steps
    vm = relvm.VirtualMachine(exe)
    for n, width in ((1, 9), (3, 16)):
        x = rand(n, 4, width, seed=width)
        np.testing.assert_allclose(vm.invoke("main", x), _conv1d_reference(x, w1, b1, w2),
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.e2e
@pytest.mark.parametrize("text, moves", [
    # the reshape's input is used again: f stays after it (x and f(x) would both be kept)
    ("%0 = squeeze(%x, axis=[1]); %1 = nn.relu(%0); (%1, %x)", False),
    # the reshape is used again
    ("%0 = squeeze(%x, axis=[1]); %1 = nn.relu(%0); (%1, %0)", False),
    # a cast moves (its result has the cast's dtype), and so through reshape
    ('%0 = reshape(%x, newshape=[-1, 3]); cast(%0, dtype="float64")', True),
    ("%0 = squeeze(%x, axis=[1]); %1 = add(%0, 1f); %1", False),   # not one input
])
def test_elementwise_ops_move_before_reshapes_only_when_alone(text, moves) -> None:
    mod = relvm.parse(f"def @main(%x: Tensor[(2, 1, 3), float32]) {{ {text} }}")
    from relvm.compiler import optimize

    body = str(optimize(mod, {}, fuse=False).functions["main"].body)
    moved = body.index("squeeze" if "squeeze" in text else "reshape") > body.index(
        "relu" if "relu" in text else "cast" if "cast" in text else "add")
    assert moved == moves, body
    x = rand(2, 1, 3)
    got = relvm.VirtualMachine(relvm.build(mod)).invoke("main", x)
    first = got[0] if isinstance(got, (list, tuple)) else got
    squeezed = x.reshape(2, 3)
    want = (np.maximum(squeezed, 0) if "relu" in text else squeezed.astype(np.float64)
            if "cast" in text else squeezed + 1)
    np.testing.assert_allclose(np.asarray(first), want, rtol=1e-6)
