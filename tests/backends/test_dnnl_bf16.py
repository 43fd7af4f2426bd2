"""The ``dnnl_bf16`` backend: oneDNN regions whose conv activations and weights, and matmul
operands, are bfloat16.

Its contract, checked exactly: a conv gives the float32 conv of its input and weight rounded to
bfloat16 (round to nearest even), plus the float32 bias and epilogue, rounded to bfloat16 once
at the end; a matmul the float32 product of its operands rounded to bfloat16. Whole regions (a
ResNet block, a MobileNet block) and built models are checked against float32 within bfloat16's
error. On a CPU without AVX512_BF16 or AMX the backend is refused with that reason (what these
tests then check), never run slowly.

Fails when libdnnl.so.3 cannot be loaded where the test extra installs it (RELVM_REQUIRE_DNNL,
tests/conftest.py); skips elsewhere.
"""

import json
import os
import textwrap

import numpy as np
import pytest

import relvm
from dnnlcases import (BLOCK, BLOCK_WEIGHTS, CNN, CNN_WEIGHTS, CONV_KINDS, Constants,
                       assert_no_reference_impl, mobilenet_block, reference, region,
                       resnet_block)
from isolation import run_python
from relvm.errors import RelvmFormatError, RelvmKernelError
from relvm.ops.registry import OPS

dnnl = pytest.importorskip("relvm.backends.dnnl")
_why = dnnl.available()
if _why is not None:
    if os.environ.get("RELVM_REQUIRE_DNNL") == "1":
        pytest.fail(f"RELVM_REQUIRE_DNNL=1 but oneDNN is unavailable: {_why}", pytrace=False)
    pytest.skip(f"oneDNN unavailable: {_why}", allow_module_level=True)

#: Whether this CPU runs oneDNN's bf16 kernels; where it does not, each test checks the refusal.
NATIVE = dnnl.available_bf16() is None
RNG = np.random.default_rng(0)


def bf16(x) -> np.ndarray:
    """``x`` rounded to the nearest bfloat16 (ties to even), as float32."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def kernel_for(reg, constants):
    art = dnnl.compile_bf16(reg)
    assert json.loads(art)["precision"] == "bf16"
    if not NATIVE:
        with pytest.raises(RelvmKernelError, match="AVX512_BF16"):
            dnnl.make_kernel(art, constants)
        return None
    return dnnl.make_kernel(art, constants)


def assert_runs_bf16_kernels(kernel) -> None:
    assert_no_reference_impl(kernel)
    assert any("bf16" in impl for impl in kernel.impls), kernel.impls


def test_rounding_helper_rounds_to_nearest_even() -> None:
    one_ulp = 2.0 ** -7  # bfloat16 keeps 7 fraction bits
    x = np.array([1.0, 1 + one_ulp / 2, 1 + 3 * one_ulp / 2, 1 + one_ulp / 2 + 2 ** -20, -2.5],
                 np.float32)
    assert bf16(x).tolist() == [1.0, 1.0, 1 + 2 * one_ulp, 1 + one_ulp, -2.5]


@pytest.mark.parametrize("attrs,wshape",
                         CONV_KINDS + [({"data_layout": "NHWC", "padding": 1}, (8, 4, 3, 3))])
def test_a_conv_is_the_float32_conv_of_bf16_values_rounded_once(attrs, wshape) -> None:
    o = wshape[0]
    nhwc = attrs.get("data_layout") == "NHWC"
    out = ["n", "h", "w", o] if nhwc else ["n", o, "h", "w"]
    steps = [("nn.conv2d", attrs, [("in", 0), ("in", 1)], out),
             ("nn.bias_add", {"axis": 3 if nhwc else 1}, [("step", 0), ("in", 2)], out),
             ("nn.relu", {}, [("step", 1)], out)]
    reg = region([("n", "h", "w", 4) if nhwc else ("n", 4, "h", "w"), wshape, (o,)], steps,
                 constant=(1, 2))
    weight, bias = RNG.standard_normal(wshape, dtype=np.float32), \
        RNG.standard_normal(o, dtype=np.float32)
    consts = Constants([weight, bias])
    kernel = kernel_for(reg, consts)
    if kernel is None:
        return
    for shape in [(1, 9, 9), (2, 12, 7), (1, 9, 9)]:  # one kernel, specialised per shape
        n, h, w = shape
        x = RNG.standard_normal((n, h, w, 4) if nhwc else (n, 4, h, w), dtype=np.float32)
        want = reference(reg.steps, [bf16(x), bf16(weight), bias], reg.outputs)[0]
        got = np.full(want.shape, np.nan, np.float32)
        kernel(x, weight, bias, got)
        assert np.array_equal(got, bf16(got)), "the result is not stored as bfloat16"
        # float32 accumulation in another order may round to the neighbouring bfloat16
        np.testing.assert_allclose(got, bf16(want), rtol=2.0 ** -7,
                                   atol=1e-6 * float(np.abs(want).max()))
    assert kernel.reorders == 1  # the weight, rounded and reordered once for every shape
    assert_runs_bf16_kernels(kernel)


def reference_bf16_products(steps, inputs, outputs):
    """A region's steps run by the ops' NumPy references with every product's two operands
    rounded to bfloat16: what a bf16 region of matmuls computes (their results stay float32)."""
    values = {("in", i): x for i, x in enumerate(inputs)}
    for j, step in enumerate(steps):
        xs = [values[tuple(a)] for a in step["args"]]
        if step["op"] in ("nn.dense", "nn.matmul", "nn.batch_matmul"):
            xs[:2] = [bf16(x) for x in xs[:2]]
        op = OPS[step["op"]]
        values[("step", j)] = np.asarray(op.reference(op.make_attrs(step["attrs"]), *xs))
    return [values[tuple(r)] for r in outputs]


@pytest.mark.parametrize("lead", [["s"], ["b", "s"]])
def test_a_dense_chain_multiplies_bf16_operands_in_float32(lead) -> None:
    """A dense layer, its bias and an epilogue: the float32 product of the operands rounded to
    bfloat16, the rest float32 (its result is not rounded: nothing after it is a conv)."""
    steps = [("nn.dense", {}, [("in", 0), ("in", 1)], lead + [48]),
             ("nn.bias_add", {"axis": -1}, [("step", 0), ("in", 2)], lead + [48]),
             ("tanh", {}, [("step", 1)], lead + [48])]
    reg = region([lead + [40], (48, 40), (48,)], steps, constant=(1, 2))
    weight, bias = RNG.standard_normal((48, 40), dtype=np.float32), \
        RNG.standard_normal(48, dtype=np.float32)
    kernel = kernel_for(reg, Constants([weight, bias]))
    if kernel is None:
        return
    for rows in [(17,), (3,), (17,)] if len(lead) == 1 else [(2, 17), (1, 5)]:
        x = RNG.standard_normal(rows + (40,), dtype=np.float32)
        want = reference_bf16_products(reg.steps, [x, weight, bias], reg.outputs)[0]
        got = np.full(want.shape, np.nan, np.float32)
        kernel(x, weight, bias, got)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert not np.allclose(got, reference(reg.steps, [x, weight, bias], reg.outputs)[0],
                               rtol=1e-5, atol=1e-5)  # and not what float32 operands give
    assert kernel.reorders == 1
    assert_runs_bf16_kernels(kernel)


def test_attention_multiplies_bf16_copies_of_computed_operands() -> None:
    """Scores of Q and K computed in the region, masked, softmax, times V: each product
    converts its operands at every call (K and V are not constants)."""
    steps = [("nn.batch_matmul", {}, [("in", 0), ("in", 1)], [4, 6, 6]),
             ("add", {}, [("step", 0), ("in", 2)], [4, 6, 6]),
             ("nn.softmax", {"axis": -1}, [("step", 1)], [4, 6, 6]),
             ("nn.batch_matmul", {"transpose_b": False}, [("step", 2), ("in", 3)], [4, 6, 8])]
    reg = region([(4, 6, 8), (4, 6, 8), (1, 1, 6), (4, 6, 8)], steps)
    kernel = kernel_for(reg, None)
    if kernel is None:
        return
    xs = [RNG.standard_normal(s, dtype=np.float32) for s in ((4, 6, 8), (4, 6, 8), (1, 1, 6),
                                                            (4, 6, 8))]
    want = reference_bf16_products(reg.steps, xs, reg.outputs)[0]
    got = np.full(want.shape, np.nan, np.float32)
    kernel(*xs, got)
    # the softmax's float32 result rounds to bfloat16 as its reference does, but an ulp of
    # float32 apart may round to the neighbouring bfloat16 (2^-8 relative)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=2.0 ** -8 * float(np.abs(want).max()))
    assert_runs_bf16_kernels(kernel)


def _close_bf16(got, want, layers: int) -> None:
    """Within bfloat16's error after ``layers`` rounded convs (2^-8 relative each, at most),
    relative to the result's scale."""
    for g, e in zip(got, want):
        scale = float(np.abs(e).max())
        err = float(np.abs(g - e).max())
        assert err <= 2.0 ** -7 * layers * scale, (err, scale)


@pytest.mark.parametrize("block", [resnet_block, mobilenet_block])
def test_whole_blocks_stay_within_bfloat16_error(block) -> None:
    reg, shapes = block()
    xs = [RNG.standard_normal(s, dtype=np.float32) for s in shapes]
    xs[1:] = [(x / np.sqrt(x[0].size)).astype(np.float32) if x.ndim == 4 else x
              for x in xs[1:]]  # weights keep activations' sizes
    kernel = kernel_for(reg, Constants(xs[1:]))
    if kernel is None:
        return
    want = reference(reg.steps, xs, reg.outputs)
    got = [np.full(w.shape, np.nan, np.float32) for w in want]
    kernel(*xs, *got)
    _close_bf16(got, want, layers=5)
    # the f32 backend gives float32's rounding only: the difference is bfloat16's
    f32 = dnnl.make_kernel(dnnl.compile_region(reg), Constants(xs[1:]))
    exact = [np.full(w.shape, np.nan, np.float32) for w in want]
    f32(*xs, *exact)
    assert not np.array_equal(got[0], exact[0])
    assert_runs_bf16_kernels(kernel)


def test_the_artifact_says_its_precision() -> None:
    reg, _ = mobilenet_block()
    doc = json.loads(dnnl.compile_region(reg))
    assert doc["precision"] == "f32"
    del doc["precision"]  # artifacts saved before precisions existed read as float32
    assert dnnl.make_kernel(json.dumps(doc).encode()).act_type == dnnl.lib.F32
    doc["precision"] = "fp8"
    with pytest.raises(RelvmFormatError, match="precision must be one of f32, bf16"):
        dnnl.make_kernel(json.dumps(doc).encode())
    with pytest.raises(relvm.RelvmCompileError, match="precision 'fp16' is not one of"):
        dnnl.compile_region(reg, precision="fp16")


def test_cost_model_takes_backbones_of_any_conv_kind() -> None:
    """Depthwise and 1x1 convs count in bf16 (MobileNet-v2's backbone: 0.66x relvm's time),
    where the float32 model refuses them (1.36x); a lone conv with a wide edge does not."""
    mobilenet, _ = mobilenet_block()
    assert dnnl.worth_bf16(mobilenet) is False  # a 12x12 block: too little work per edge
    c = 64
    steps, prev = [], ("in", 0)
    for i in range(6):  # a backbone: expand, depthwise, project, six times over
        width = (c * 4, c * 4, c)[i % 3]
        attrs = {"groups": c * 4, "padding": 1} if i % 3 == 1 else {}
        steps.append(("nn.conv2d", attrs, [prev, ("in", 1 + i)], [1, width, 56, 56]))
        prev = ("step", len(steps) - 1)
    shapes = [(1, c, 56, 56)] + [[(c * 4, c, 1, 1), (c * 4, 1, 3, 3),
                                  (c, c * 4, 1, 1)][i % 3] for i in range(6)]
    backbone = region(shapes, steps, constant=tuple(range(1, 7)))
    assert dnnl.worth_bf16(backbone) and not dnnl.worth(backbone)


@pytest.mark.parametrize("case", ["cnn", "block"])
def test_built_models_run_bf16_regions_saved_and_loaded(case, tmp_path) -> None:
    """A CNN and a transformer block with symbolic dims: the cost model gives dnnl_bf16 their
    convs and their products (unlike dnnl's, which leaves a transformer to relvm)."""
    text, weights, shapes = {"cnn": (CNN, CNN_WEIGHTS, [(1, 3, 32, 32), (2, 3, 48, 40)]),
                             "block": (BLOCK, BLOCK_WEIGHTS, [(1, 16, 256), (2, 37, 256)])}[case]
    mod = relvm.parse(text)
    if not NATIVE:
        with pytest.raises(relvm.RelvmCompileError,
                           match="'dnnl_bf16' cannot run here: this CPU .* no AVX512_BF16"):
            relvm.build(mod, params=weights, targets=["dnnl_bf16"])
        with pytest.warns(RuntimeWarning, match="run on relvm's own kernels"):
            exe = relvm.build(mod, params=weights, targets=["dnnl_bf16"],
                              external_fallback=True)
        assert not exe.externals
        return
    exe = relvm.build(mod, params=weights, targets=["dnnl_bf16"])
    assert exe.externals and {a.compiler for a in exe.externals.values()} == {"dnnl_bf16"}
    if case == "block":  # float32 oneDNN matmuls run at relvm's speed: dnnl leaves them
        assert not relvm.build(mod, params=weights, targets=["dnnl"]).externals
    assert 'Compiler="dnnl_bf16"' in relvm.print_module(
        relvm.partition(mod, ["dnnl_bf16"], params=weights))
    exe.save(tmp_path / "m.rvm")
    alone = relvm.VirtualMachine(relvm.build(mod, params=weights))
    for vm in (relvm.VirtualMachine(exe), relvm.VirtualMachine(relvm.load(tmp_path / "m.rvm"))):
        for shape in shapes:
            x = RNG.standard_normal(shape, dtype=np.float32)
            _close_bf16([vm.invoke("main", x)], [alone.invoke("main", x)], layers=4)


WITHOUT_BF16 = textwrap.dedent("""
    import sys
    import numpy as np
    import relvm

    path, x_path = sys.argv[1], sys.argv[2]
    try:
        relvm.load(path)
    except relvm.RelvmKernelError as e:
        print("refused:", e)
    exe = relvm.load(path, external_fallback=True)
    np.save(x_path + ".out.npy", relvm.VirtualMachine(exe).invoke("main", np.load(x_path)))
""")


def test_a_cpu_without_bf16_refuses_the_backend_or_falls_back(tmp_path) -> None:
    """ONEDNN_MAX_CPU_ISA=AVX512_CORE makes oneDNN dispatch as on a CPU without AVX512_BF16."""
    mod = relvm.parse(CNN)
    exe = relvm.partition(mod, ["dnnl_bf16"], params=CNN_WEIGHTS) if NATIVE else None
    if exe is None:
        return  # test_built_models_run_bf16_regions_saved_and_loaded checked the refusal
    relvm.build(exe).save(tmp_path / "m.rvm")
    x = RNG.standard_normal((2, 3, 32, 32), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = run_python(WITHOUT_BF16, str(tmp_path / "m.rvm"), str(tmp_path / "x.npy"),
                      env={"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"})
    assert proc.returncode == 0, proc.stderr
    assert "refused: external backend 'dnnl_bf16' cannot run here: this CPU" in proc.stdout
    assert "AVX512_BF16" in proc.stdout and "external_fallback=True" in proc.stdout
    assert "pip install" not in proc.stdout  # the library is there: the CPU is what lacks
    got = np.load(tmp_path / "x.npy.out.npy")  # relvm's own float32 kernels
    want = relvm.VirtualMachine(relvm.build(mod, params=CNN_WEIGHTS)).invoke("main", x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_command_line_builds_for_dnnl_bf16(tmp_path) -> None:
    relay = tmp_path / "cnn.relay"
    relay.write_text(CNN)
    np.savez(tmp_path / "w.npz", **CNN_WEIGHTS)
    rvm = str(tmp_path / "cnn.rvm")

    def cli(*args):
        return run_python("from relvm.cli import main; raise SystemExit(main())", *args)
    done = cli("compile", str(relay), "--params", str(tmp_path / "w.npz"), "-o", rvm,
               "--target", "dnnl_bf16")
    if not NATIVE:
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert "'dnnl_bf16' cannot run here: this CPU" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    assert "dnnl_bf16_0: dnnl_bf16, " in cli("inspect", rvm, "--no-bytecode").stdout
    ran = cli("run", rvm, "--random-inputs", "--dims", "n=2", "--dims", "h=32", "--dims", "w=32")
    assert ran.returncode == 0 and "float32[2, 10]" in ran.stdout, ran.stderr
