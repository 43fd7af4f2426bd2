"""The oneDNN backend (relvm.backends.dnnl): each pattern compiled, run at several shapes
through one kernel and compared with the ops' NumPy references step by step.

Skips when libdnnl.so.3 cannot be loaded, unless RELVM_REQUIRE_DNNL=1 (then fails).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from dnnlcases import (CONV_KINDS, Constants, assert_no_reference_impl, mobilenet_block,
                       reference, region, resnet_block)
from relvm.backends.external import TensorInfo
from relvm.errors import RelvmFormatError

dnnl = pytest.importorskip("relvm.backends.dnnl")
_why = dnnl.available()
if _why is not None:
    if os.environ.get("RELVM_REQUIRE_DNNL") == "1":
        pytest.fail(f"RELVM_REQUIRE_DNNL=1 but oneDNN is unavailable: {_why}",
                    pytrace=False)
    pytest.skip(f"oneDNN unavailable: {_why}", allow_module_level=True)


def run(reg, shapes_list, constant=(), seed=0, positive=False):
    """Compile ``reg``, then run it at each tuple of input shapes through one kernel."""
    art = dnnl.compile_region(reg)
    rng = np.random.default_rng(seed)
    consts = None
    kernel = None
    for shapes in shapes_list:
        xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        if positive:
            xs = [np.abs(x) + 0.1 for x in xs]
        if kernel is None:
            consts = Constants([xs[i] for i in constant])
            kernel = dnnl.make_kernel(art, consts)
            first = xs
        else:  # constants keep their arrays across calls, as a VM's do
            for i in constant:
                xs[i] = first[i]
        want = reference(reg.steps, xs, reg.outputs)
        outs = [np.full(w.shape, np.nan, np.float32) for w in want]
        kernel(*xs, *outs)
        for o, w in zip(outs, want):
            scale = max(1.0, float(np.abs(w).max(initial=0)))
            np.testing.assert_allclose(o, w, rtol=1e-4, atol=1e-4 * scale)
    assert_no_reference_impl(kernel)
    return kernel, consts


def conv_steps(attrs, x, w, out, extra=()):
    return [("nn.conv2d", attrs, [("in", 0), ("in", 1)], out)] + list(extra)


@pytest.mark.parametrize("attrs,wshape", CONV_KINDS)
def test_conv2d_bias_relu_symbolic(attrs, wshape):
    o = wshape[0]
    steps = [("nn.conv2d", attrs, [("in", 0), ("in", 1)], ["n", o, "h", "w"]),
             ("nn.bias_add", {"axis": 1}, [("step", 0), ("in", 2)], ["n", o, "h", "w"]),
             ("nn.relu", {}, [("step", 1)], ["n", o, "h", "w"])]
    reg = region([("n", 4, "h", "w"), wshape, (o,)], steps, constant=(1, 2))
    art = json.loads(dnnl.compile_region(reg))
    assert len(art["prims"]) == 1 and art["prims"][0]["bias"] == ["in", 2]
    kernel, consts = run(reg, [((1, 4, 9, 9), wshape, (o,)), ((2, 4, 12, 7), wshape, (o,)),
                               ((1, 4, 9, 9), wshape, (o,))], constant=(1,))
    assert kernel.reorders <= 1  # the weight was reordered once for all shapes


def test_conv2d_nhwc_residual_add():
    steps = [("nn.conv2d", {"data_layout": "NHWC", "padding": 1}, [("in", 0), ("in", 1)],
              [1, 6, 6, 8]),
             ("add", {}, [("in", 2), ("step", 0)], [1, 6, 6, 8]),
             ("sigmoid", {}, [("step", 1)], [1, 6, 6, 8])]
    reg = region([(1, 6, 6, 4), (8, 4, 3, 3), (1, 6, 6, 8)], steps)
    run(reg, [((1, 6, 6, 4), (8, 4, 3, 3), (1, 6, 6, 8))])


def test_conv_chain_keeps_blocked_layout_between_convs():
    steps = [("nn.conv2d", {"padding": 1}, [("in", 0), ("in", 1)], [1, 16, 8, 8]),
             ("nn.relu", {}, [("step", 0)], [1, 16, 8, 8]),
             ("nn.conv2d", {"padding": 1}, [("step", 1), ("in", 2)], [1, 16, 8, 8]),
             ("subtract", {}, [("in", 3), ("step", 2)], [1, 16, 8, 8])]
    reg = region([(1, 16, 8, 8), (16, 16, 3, 3), (16, 16, 3, 3), (16, 1, 1)], steps)
    run(reg, [((1, 16, 8, 8), (16, 16, 3, 3), (16, 16, 3, 3), (16, 1, 1))], constant=(1, 2))


def test_resnet_like_region_runs_jit_only():
    """A ResNet stem and block as one region (dnnlcases.resnet_block): every value in the
    region's one activation layout, the residual add fused."""
    reg, shapes = resnet_block()
    art = json.loads(dnnl.compile_region(reg))
    assert [p["kind"] for p in art["prims"]] == ["conv", "pool", "conv", "conv", "conv",
                                                 "pool", "pool"]
    assert art["prims"][3]["post_ops"][0]["op"] == "binary"  # the residual add, fused
    run(reg, [shapes], constant=(1, 2, 3, 4, 5))


def test_mobilenet_like_region_runs_jit_only():
    """An inverted residual (dnnlcases.mobilenet_block); the region's input is read by two
    prims."""
    reg, shapes = mobilenet_block()
    run(reg, [shapes], constant=(1, 2, 3, 4))


def _activation_case(name):
    """conv -> bias -> an activation the importer spells as several ops, or a squeeze-excite
    gate; the inputs' values (scalars at 4, 5: what compile reads)."""
    y, c = ("step", 1), [1, 8, 6, 6]
    conv = [("nn.conv2d", {"padding": 1}, [("in", 0), ("in", 1)], c),
            ("nn.bias_add", {"axis": 1}, [("step", 0), ("in", 2)], c)]
    hardsigmoid = [("multiply", {}, [y, ("in", 4)], c), ("add", {}, [("in", 5), ("step", 2)], c),
                   ("clip", {"a_min": 0.0, "a_max": 1.0}, [("step", 3)], c)]
    steps = {"silu": conv + [("sigmoid", {}, [y], c), ("multiply", {}, [("step", 2), y], c)],
             "hardswish": conv + hardsigmoid + [("multiply", {}, [y, ("step", 4)], c)],
             "hardsigmoid": conv + hardsigmoid,
             "silu_twice_read": conv + [("sigmoid", {}, [y], c),
                                        ("multiply", {}, [y, ("step", 2)], c)],
             "squeeze_excite": conv + [
                 ("nn.global_avg_pool2d", {}, [y], [1, 8, 1, 1]),
                 ("nn.conv2d", {}, [("step", 2), ("in", 3)], [1, 8, 1, 1]),
                 ("multiply", {}, [("step", 3), ("in", 4)], [1, 8, 1, 1]),
                 ("add", {}, [("step", 4), ("in", 5)], [1, 8, 1, 1]),
                 ("clip", {"a_min": 0.0, "a_max": 1.0}, [("step", 5)], [1, 8, 1, 1]),
                 ("multiply", {}, [y, ("step", 6)], c)]}[name]
    shapes = [(1, 4, 6, 6), (8, 4, 3, 3), (8,), (8, 8, 1, 1), (), ()]
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes[:4]] + \
        [np.array(1 / 6, np.float32), np.array(0.5, np.float32)]
    outputs = [("step", 2), ("step", 3)] if name == "silu_twice_read" else None
    reg = region(shapes, steps, outputs=outputs, constant=(1, 2, 3, 4, 5),
                 values={i: xs[i] for i in (1, 2, 3, 4, 5)})
    return reg, xs


@pytest.mark.parametrize("name,prims,post_ops", [
    ("silu", ["conv"], ["swish"]),
    ("hardswish", ["conv"], ["hardswish"]),
    ("hardsigmoid", ["conv"], ["hardsigmoid"]),
    ("silu_twice_read", ["conv", "eltwise", "binary"], []),  # the sigmoid is an output too
    ("squeeze_excite", ["conv", "pool", "conv", "binary"], ["hardsigmoid"]),
])
def test_activations_spelled_as_several_ops_run_as_one_eltwise(name, prims, post_ops):
    reg, xs = _activation_case(name)
    art = json.loads(dnnl.compile_region(reg))
    assert [p["kind"] for p in art["prims"]] == prims
    got_post = [po["alg"] for p in art["prims"] for po in p.get("post_ops", [])
                if po["op"] == "eltwise"]
    assert got_post == post_ops
    kernel = dnnl.make_kernel(json.dumps(art).encode(), Constants(xs[1:]))
    want = reference(reg.steps, xs, reg.outputs)
    outs = [np.full(w.shape, np.nan, np.float32) for w in want]
    kernel(*xs, *outs)
    for o, w in zip(outs, want):
        np.testing.assert_allclose(o, w, rtol=1e-5, atol=1e-5 * float(np.abs(w).max()))
    assert_no_reference_impl(kernel)


def test_a_hardsigmoid_needs_constant_numbers():
    """Without the constants' values (a region from a module whose scalars are inputs), the
    ops stay ops."""
    reg, xs = _activation_case("hardsigmoid")
    reg = region([tuple(t.shape) for t in reg.inputs], [
        (s["op"], s["attrs"], s["args"], s["type"]["shape"]) for s in reg.steps],
        constant=(1, 2, 3))
    art = json.loads(dnnl.compile_region(reg))
    assert [p["kind"] for p in art["prims"]] == ["conv"]
    assert [po["alg"] for po in art["prims"][0]["post_ops"]] == ["mul", "add", "clip"]


@pytest.mark.parametrize("mask,fused", [((1, 1, 6), True), ((6, 6), False)])
def test_attention_like_region_runs_jit_only(mask, fused):
    """Scores plus a mask, softmax, then the product with V. A mask along the keys only is a
    post-op of the scores' matmul; one broadcast over the batch has no jit post-op kernel and
    runs as a binary prim of its own."""
    steps = [("nn.batch_matmul", {}, [("in", 0), ("in", 1)], [4, 6, 6]),
             ("add", {}, [("step", 0), ("in", 2)], [4, 6, 6]),
             ("nn.softmax", {"axis": -1}, [("step", 1)], [4, 6, 6]),
             ("nn.batch_matmul", {"transpose_b": False}, [("step", 2), ("in", 3)], [4, 6, 8])]
    reg = region([(4, 6, 8), (4, 6, 8), mask, (4, 6, 8)], steps)
    art = json.loads(dnnl.compile_region(reg))
    kinds = ["matmul", "softmax", "matmul"] if fused else ["matmul", "binary", "softmax",
                                                           "matmul"]
    assert [p["kind"] for p in art["prims"]] == kinds
    run(reg, [((4, 6, 8), (4, 6, 8), mask, (4, 6, 8))])


@pytest.mark.parametrize("rank", [2, 3])
def test_dense_bias_gelu_like_chain(rank):
    lead = ["b", "s"][:rank - 1]
    steps = [("nn.dense", {}, [("in", 0), ("in", 1)], lead + [12]),
             ("nn.bias_add", {"axis": -1}, [("step", 0), ("in", 2)], lead + [12]),
             ("tanh", {}, [("step", 1)], lead + [12]),
             ("multiply", {}, [("step", 2), ("in", 3)], lead + [12])]
    reg = region([lead + [10], (12, 10), (12,), (12,)], steps, constant=(1,))
    shapes = [((3, 10)[-rank:] if rank == 2 else (2, 3, 10), (12, 10), (12,), (12,)),
              ((5, 10) if rank == 2 else (1, 4, 10), (12, 10), (12,), (12,))]
    kernel, consts = run(reg, shapes, constant=(1,))
    assert kernel.reorders == 1


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_transposes_clip(ta, tb):
    a, b = ((7, 5) if ta else (5, 7)), ((9, 7) if tb else (7, 9))
    steps = [("nn.matmul", {"transpose_a": ta, "transpose_b": tb}, [("in", 0), ("in", 1)],
              [5, 9]),
             ("clip", {"a_min": -0.5, "a_max": 0.75}, [("step", 0)], [5, 9])]
    run(region([a, b], steps), [(a, b)])


def test_batch_matmul_broadcast_and_symbolic():
    steps = [("nn.batch_matmul", {}, [("in", 0), ("in", 1)], ["b", 4, "m", "n"]),
             ("add", {}, [("step", 0), ("in", 2)], ["b", 4, "m", "n"])]
    reg = region([("b", 4, "m", 8), (1, 4, "n", 8), ("m", "n")], steps)
    run(reg, [((2, 4, 6, 8), (1, 4, 5, 8), (6, 5)), ((1, 4, 3, 8), (1, 4, 7, 8), (3, 7))])


@pytest.mark.parametrize("op,attrs", [
    ("nn.max_pool2d", {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1]}),
    ("nn.max_pool2d", {"pool_size": [3, 3], "strides": [2, 2], "ceil_mode": True}),
    ("nn.avg_pool2d", {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1]}),
    ("nn.avg_pool2d", {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1],
                       "count_include_pad": True}),
    ("nn.avg_pool2d", {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 0, 0, 1],
                       "ceil_mode": True}),
    ("nn.global_avg_pool2d", {}),
])
def test_pools(op, attrs):
    view = type("V", (), {})
    from relvm.backends.external import OpView
    from relvm.backends.dnnl.patterns import _pool_ok
    assert _pool_ok([OpView(op, attrs, (TensorInfo("float32", (1, 3, "h", "w")),),
                            TensorInfo("float32", (1, 3, "p", "q")))])
    reg = region([(1, 3, "h", "w")], [(op, attrs, [("in", 0)], [1, 3, "p", "q"])])
    run(reg, [((1, 3, 11, 11),), ((2, 3, 8, 13),)])
    del view


def _accepts(name, op, attrs, ins, out):
    from relvm.backends.dnnl.patterns import PATTERNS
    from relvm.backends.external import OpView
    pattern, = [p for p in PATTERNS if p.name == name]
    return pattern.check([OpView(op, attrs, tuple(TensorInfo("float32", s) for s in ins),
                                 TensorInfo("float32", out))])


def test_patterns_refuse_what_runs_only_as_ref():
    # oneDNN 3.2 has only ref:any kernels for these: relvm runs them.
    assert not _accepts("pool2d", "nn.max_pool2d", {"pool_size": [2, 2], "dilation": [2, 2]},
                        [(1, 3, 8, 8)], (1, 3, 6, 6))
    assert not _accepts("softmax", "nn.softmax", {"axis": 0}, [("n", 32)], ("n", 32))
    assert not _accepts("softmax", "nn.softmax", {"axis": 1}, [(4, 6, 5)], (4, 6, 5))
    assert _accepts("softmax", "nn.softmax", {"axis": -1}, [(4, 6, 5)], (4, 6, 5))


def test_layer_norm_and_softmax_last_axis():
    steps = [("nn.layer_norm", {"epsilon": 1e-5}, [("in", 0), ("in", 1), ("in", 2)],
              ["n", 32]),
             ("nn.softmax", {"axis": 1}, [("step", 0)], ["n", 32])]
    reg = region([("n", 32), (32,), (32,)], steps, outputs=[("step", 0), ("step", 1)])
    run(reg, [((5, 32), (32,), (32,)), ((9, 32), (32,), (32,))])
    reg = region([(4, 6, 5)], [("nn.softmax", {"axis": -1}, [("in", 0)], [4, 6, 5])])
    run(reg, [((4, 6, 5),)])
    reg = region([(4, 6)], [("nn.layer_norm", {"center": False, "scale": False},
                             [("in", 0), ("in", 0), ("in", 0)], [4, 6])])


@pytest.mark.parametrize("op,attrs", [("nn.relu", {}), ("sigmoid", {}), ("tanh", {}),
                                      ("exp", {}), ("nn.leaky_relu", {"alpha": 0.1}),
                                      ("clip", {"a_min": -1.0, "a_max": 0.5}), ("abs", {}),
                                      ("negative", {}), ("sqrt", {}), ("log", {})])
def test_standalone_eltwise(op, attrs):
    reg = region([("n", 7)], [(op, attrs, [("in", 0)], ["n", 7])])
    run(reg, [((3, 7),), ((11, 7),)], positive=op in ("sqrt", "log"))


def test_standalone_binary_subtract_broadcast():
    steps = [("nn.softmax", {}, [("in", 0)], [3, 5]),
             ("subtract", {}, [("in", 1), ("step", 0)], [3, 5]),
             ("nn.relu", {}, [("step", 1)], [3, 5])]
    run(region([(3, 5), (5,)], steps), [((3, 5), (5,))])


@pytest.mark.parametrize("text", [
    b"not json", b"[]", b'{"format": "relvm-dnnl"}',
    b'{"format":"relvm-dnnl","version":2,"inputs":[],"prims":[],"outputs":[]}',
    b'{"format":"relvm-dnnl","version":1,"inputs":[{"rank":2,"constant":false}],'
    b'"prims":[{"kind":"eltwise","src":["prim",0],"alg":"relu","alpha":0,"beta":0}],'
    b'"outputs":[["prim",0]]}',
    b'{"format":"relvm-dnnl","version":1,"inputs":[{"rank":2,"constant":false}],'
    b'"prims":[{"kind":"eltwise","src":["in",0],"alg":"system","alpha":0,"beta":0}],'
    b'"outputs":[["prim",0]]}',
    b'{"format":"relvm-dnnl","version":1,"inputs":[{"rank":99,"constant":false}],'
    b'"prims":[],"outputs":[]}',
])
def test_malformed_artifact(text):
    with pytest.raises(RelvmFormatError) as e:
        dnnl.make_kernel(text, None)
    assert e.value.section == "extern"


def test_available_names_a_bogus_library():
    code = ("import relvm.backends.dnnl as d; print(d.available())")
    env = dict(os.environ, RELVM_DNNL_LIBRARY="/nonexistent/libdnnl.so.3")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert "libdnnl.so.3 not found at /nonexistent/libdnnl.so.3" in out


def test_import_loads_nothing_native():
    code = ("import sys, relvm.backends.dnnl; "
            "print('cffi' in sys.modules and any('dnnl' in k for k in sys.modules "
            "if k.endswith('.lib') and sys.modules[k].__dict__.get('_loaded')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


def test_threads_follow_relvm():
    code = ("import relvm, relvm.backends.dnnl as d\n"
            "from relvm.backends.dnnl import threads, runtime\n"
            "d.make_kernel(d.compile_region.__globals__['json'].dumps({}).encode()) "
            "if False else None\n"
            "runtime.L.load(); threads.follow_relvm()\n"
            "relvm.set_num_threads(1); a = threads.active_threads()\n"
            "relvm.set_num_threads(2); b = threads.active_threads()\n"
            "print(a, b)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["1", "2"]


def test_cost_model_keeps_backbones_and_wide_layers_only():
    """cost.py's measured rules: a chain of 3x3 convs is worth its edges, a MobileNet block
    (1x1 and depthwise convs) is not; no conv-free region is (the matmul rule would take a
    768->3072 dense, not a 384->384 one)."""
    c, x = 64, (1, 64, "h", "w")
    convs = [("nn.conv2d", {"padding": 1}, [("in", 0) if k == 0 else ("step", k - 1),
                                            ("in", 1)], x) for k in range(12)]
    assert dnnl.worth(region([x, (c, c, 3, 3)], convs, constant=(1,)))
    mobile = [("nn.conv2d", {}, [("in", 0), ("in", 1)], x),
              ("nn.conv2d", {"padding": 1, "groups": c}, [("step", 0), ("in", 2)], x),
              ("nn.conv2d", {}, [("step", 1), ("in", 1)], x)] * 3
    assert not dnnl.worth(region([x, (c, c, 1, 1), (c, 1, 3, 3)], mobile, constant=(1, 2)))
    from relvm.backends.dnnl.cost import worth_matmul

    for k, n, keep in ((768, 3072, True), (384, 384, False)):
        steps = [("nn.dense", {}, [("in", 0), ("in", 1)], ["b", "s", n])]
        made = region([("b", "s", k), (n, k)], steps, constant=(1,))
        assert not dnnl.worth(made)  # conv-free: oneDNN's matmul is no faster than relvm's
        assert worth_matmul(made) is keep
    # a classifier head: one row per image
    steps = [("nn.dense", {}, [("in", 0), ("in", 1)], ["b", 1000])]
    assert not worth_matmul(region([("b", 1280), (1000, 1280)], steps, constant=(1,)))
