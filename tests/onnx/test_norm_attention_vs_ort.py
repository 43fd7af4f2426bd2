"""GroupNormalization, InstanceNormalization, RMSNormalization, LpNormalization,
MeanVarianceNormalization, LRN, Attention, RotaryEmbedding, SoftmaxCrossEntropyLoss and
NegativeLogLikelihoodLoss imported from single-node ONNX models with symbolic dims, built once
on the default build (C kernels, fusion on) and run at several shapes against ONNX Runtime (and
onnx's reference evaluator, the spec's own definition, for Attention); bad inputs are relvm
errors naming the node or the input."""

from __future__ import annotations

import numpy as np
import pytest

import relvm

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would pass
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from relvm.frontend.onnx import RelvmImportError, from_onnx  # noqa: E402

RNG = np.random.default_rng(23)
F32, I64 = np.float32, np.int64


def model(op, inputs, attrs, opset, dims=None, outputs=1, constants=None):
    """One node. ``inputs``: name -> example array, in order (None: an absent optional input);
    ``dims``: name -> the declared shape (strings are symbolic dims); ``outputs``: how many
    outputs, or which (a tuple of positions)."""
    dims, constants = dims or {}, constants or {}
    names = [nm if a is not None else "" for nm, a in inputs.items()]
    out_type = helper.np_dtype_to_tensor_dtype(next(iter(inputs.values())).dtype)
    wanted = set(outputs) if isinstance(outputs, tuple) else set(range(outputs))
    outs = [f"out{k}" if k in wanted else "" for k in range(max(wanted) + 1)]
    graph = helper.make_graph(
        [helper.make_node(op, names, outs, **attrs)], "g",
        [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(a.dtype),
                                       dims.get(nm, a.shape))
         for nm, a in inputs.items() if a is not None and nm not in constants],
        [helper.make_tensor_value_info(o, out_type, None) for o in outs if o],
        initializer=[numpy_helper.from_array(v, nm) for nm, v in constants.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


class Pair:
    """The model on the oracle and on relvm (imported and built once, for every shape)."""

    def __init__(self, m, oracle="ort"):
        if oracle == "ort":
            session = ort.InferenceSession(m.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
            self.want = lambda feeds: session.run(None, feeds)
        else:
            ref = ReferenceEvaluator(m)
            self.want = lambda feeds: ref.run(None, feeds)
        self.inputs = [i.name for i in m.graph.input]
        mod, params = from_onnx(m)
        self.mod = mod
        self.vm = relvm.VirtualMachine(relvm.build(mod, params=params))

    def check(self, feeds, rtol=1e-4, atol=1e-5):
        feeds = {k: v for k, v in feeds.items() if k in self.inputs}
        want = self.want(feeds)
        got = self.vm.invoke("main", *(feeds[k] for k in self.inputs))
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            w = np.asarray(w)
            assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)


def rand(*shape, dtype=F32):
    return RNG.standard_normal(shape).astype(dtype)


# --- normalizations ----------------------------------------------------------------------------

@pytest.mark.parametrize("axis,scale_dims", [(-1, ["d"]), (1, ["s", "d"]), (2, [1, "d"]),
                                             (0, ["n", "s", "d"]), (1, ["s", 1])])
def test_rms_normalization(axis, scale_dims):
    ex = {"x": rand(2, 3, 4), "w": rand(*[4 if d == "d" else 3 if d == "s" else 2 if d == "n"
                                          else 1 for d in scale_dims])}
    pair = Pair(model("RMSNormalization", ex, {"axis": axis, "epsilon": 1e-3}, 23,
                      dims={"x": ["n", "s", "d"], "w": scale_dims}))
    for n, s, d in ((2, 3, 4), (1, 7, 16), (3, 1, 5)):
        shape = {"n": n, "s": s, "d": d}
        w = rand(*[shape.get(k, 1) if isinstance(k, str) else k for k in scale_dims])
        pair.check({"x": rand(n, s, d), "w": w})


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_normalization(groups):
    ex = {"x": rand(2, 4, 3, 3), "s": rand(4), "b": rand(4)}
    pair = Pair(model("GroupNormalization", ex, {"num_groups": groups, "epsilon": 1e-4}, 21,
                      dims={"x": ["n", 4, "h", "w"]}))
    for n, h, w in ((2, 3, 3), (1, 8, 5), (3, 1, 1)):
        pair.check({"x": rand(n, 4, h, w), "s": rand(4), "b": rand(4)})


def test_group_normalization_opset_18_scales_per_group():
    ex = {"x": rand(2, 6, 5), "s": rand(3), "b": rand(3)}
    m = model("GroupNormalization", ex, {"num_groups": 3}, 18, dims={"x": ["n", 6, "l"]})
    pair = Pair(m, oracle="reference")  # ONNX Runtime only runs GroupNormalization-21
    for n, length in ((2, 5), (1, 9)):
        pair.check({"x": rand(n, 6, length), "s": rand(3), "b": rand(3)})


def test_instance_normalization():
    ex = {"x": rand(2, 3, 4, 5), "s": rand(3), "b": rand(3)}
    pair = Pair(model("InstanceNormalization", ex, {"epsilon": 1e-3}, 22,
                      dims={"x": ["n", "c", "h", "w"], "s": ["c"], "b": ["c"]}))
    for n, c, h, w in ((2, 3, 4, 5), (1, 8, 2, 9), (4, 1, 3, 1)):
        pair.check({"x": rand(n, c, h, w), "s": rand(c), "b": rand(c)})


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lp_normalization(p, axis):
    pair = Pair(model("LpNormalization", {"x": rand(2, 3, 4)}, {"p": p, "axis": axis}, 22,
                      dims={"x": ["a", "b", "c"]}))
    for shape in ((2, 3, 4), (5, 1, 7), (1, 6, 2)):
        x = rand(*shape)
        x[0] = 0  # a zero norm gives zeros where axis is 1 or -1
        pair.check({"x": x})


@pytest.mark.parametrize("axes", [None, [2, 3], [1]])
def test_mean_variance_normalization(axes):
    attrs = {} if axes is None else {"axes": axes}
    pair = Pair(model("MeanVarianceNormalization", {"x": rand(2, 3, 4, 5)}, attrs, 13,
                      dims={"x": ["n", "c", "h", "w"]}))
    for shape in ((2, 3, 4, 5), (1, 2, 6, 1), (3, 4, 2, 2)):
        pair.check({"x": rand(*shape)})


@pytest.mark.parametrize("size", [1, 3, 5])  # ONNX Runtime wants an odd size
def test_lrn(size):
    pair = Pair(model("LRN", {"x": rand(2, 6, 3, 3)}, {"size": size, "alpha": 0.01,
                                                        "beta": 0.6, "bias": 1.5}, 13,
                      dims={"x": ["n", "c", "h", "w"]}))
    for shape in ((2, 6, 3, 3), (1, 3, 5, 2), (1, 9, 1, 1)):
        pair.check({"x": rand(*shape)})


def test_float16_normalizations_run_in_float32():
    x = rand(2, 4, 5, dtype=np.float16)
    for op, ex, attrs, opset in (
            ("RMSNormalization", {"x": x, "w": rand(5, dtype=np.float16)}, {}, 23),
            ("GroupNormalization", {"x": x, "s": rand(4, dtype=np.float16),
                                    "b": rand(4, dtype=np.float16)}, {"num_groups": 2}, 21),
            ("InstanceNormalization", {"x": x, "s": rand(4, dtype=np.float16),
                                       "b": rand(4, dtype=np.float16)}, {}, 22)):
        Pair(model(op, ex, attrs, opset)).check(ex, rtol=2e-3, atol=2e-3)


# --- losses ------------------------------------------------------------------------------------

LOSSES = [("none", False, None), ("sum", False, None), ("mean", False, None),
          ("mean", True, None), ("sum", True, 1), ("mean", True, 2), ("mean", False, -1),
          ("none", True, 0)]


@pytest.mark.parametrize("op", ["SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"])
@pytest.mark.parametrize("reduction,weighted,ignore", LOSSES)
@pytest.mark.parametrize("extra", [0, 2])
def test_losses(op, reduction, weighted, ignore, extra):
    c = 5
    attrs = {"reduction": reduction}
    if ignore is not None:
        attrs["ignore_index"] = ignore
    spatial = ["d1", "d2"][:extra]
    ex = {"x": rand(3, c, *([2] * extra)), "y": np.zeros((3,) + (2,) * extra, I64),
          "w": rand(c) ** 2 if weighted else None}
    outputs = 2 if op == "SoftmaxCrossEntropyLoss" else 1
    pair = Pair(model(op, ex, attrs, 13, outputs=outputs,
                      dims={"x": ["n", c] + spatial, "y": ["n"] + spatial}))
    for n, d in ((3, 2), (6, 3), (1, 1)):
        rest = (d,) * extra
        y = RNG.integers(0, c, (n,) + rest).astype(I64)
        if ignore is not None and ignore >= 0:
            y.flat[0] = ignore
        pair.check({"x": rand(n, c, *rest), "y": y, "w": rand(c) ** 2})


# --- Attention ---------------------------------------------------------------------------------

def _attention_inputs(b, hq, hkv, s, t, d, dv, past=0, rank=4):
    feeds = {"q": rand(b, hq, s, d), "k": rand(b, hkv, t, d), "v": rand(b, hkv, t, dv)}
    if rank == 3:
        feeds = {"q": rand(b, s, hq * d), "k": rand(b, t, hkv * d), "v": rand(b, t, hkv * dv)}
    feeds["past_k"] = rand(b, hkv, past, d)
    feeds["past_v"] = rand(b, hkv, past, dv)
    return feeds


ATTENTION = [
    dict(), dict(is_causal=1), dict(scale=0.3), dict(softcap=2.0), dict(mask="bool"),
    dict(mask="float"), dict(mask="float4d", is_causal=1), dict(hkv=2), dict(hkv=2, is_causal=1),
    dict(hkv=1, mask="bool"), dict(past=True), dict(past=True, is_causal=1),
    dict(past=True, hkv=2, mask="float"), dict(rank=3), dict(rank=3, hkv=2, is_causal=1),
    dict(rank=3, past=True), dict(qk=0), dict(qk=1, softcap=1.5), dict(qk=2, mask="float"),
    dict(qk=3, is_causal=1), dict(qk=2, past=True, is_causal=1, mask="bool"),
]


@pytest.mark.parametrize("case", ATTENTION, ids=lambda c: "-".join(f"{k}={v}"
                                                                  for k, v in c.items()) or "plain")
@pytest.mark.parametrize("opset", [23, 24])
def test_attention(case, opset):
    case = dict(case)
    rank, hkv, hq = case.pop("rank", 4), case.pop("hkv", 4), 4
    mask, past, qk = case.pop("mask", None), case.pop("past", False), case.pop("qk", None)
    attrs = dict(case)
    if rank == 3:
        attrs.update(q_num_heads=hq, kv_num_heads=hkv)
    d, dv = 8, 6
    ex = _attention_inputs(2, hq, hkv, 3, 5, d, dv, 2 if past else 0, rank)
    if rank == 4:
        dims = {"q": ["b", hq, "s", d], "k": ["b", hkv, "t", d], "v": ["b", hkv, "t", dv]}
    else:
        dims = {"q": ["b", "s", hq * d], "k": ["b", "t", hkv * d], "v": ["b", "t", hkv * dv]}
    dims.update(past_k=["b", hkv, "p", d], past_v=["b", hkv, "p", dv])
    kv = "p+t" if past else "t"  # the mask covers past and new keys
    masks = {"bool": (np.bool_, ["s", kv]), "float": (F32, ["s", kv]),
             "float4d": (F32, ["b", 1, "s", kv])}
    inputs = {k: ex[k] for k in ("q", "k", "v")}
    if mask or past:
        inputs["mask"] = None
    if mask:
        dtype, mdims = masks[mask]
        inputs["mask"] = np.zeros([2] * len(mdims), dtype)
        dims["mask"] = mdims
    if past:
        inputs.update(past_k=ex["past_k"], past_v=ex["past_v"])
    outputs = (0, 1, 2) if past else 1
    if qk is not None:
        attrs["qk_matmul_output_mode"] = qk
        outputs = (0, 1, 2, 3) if past else (0, 3)
    m = model("Attention", inputs, attrs, opset, dims=dims, outputs=outputs)
    pairs = [Pair(m, oracle="reference")]
    if qk is None or qk == 0:  # ONNX Runtime's qk_matmul_output departs from the reference
        pairs.append(Pair(m))
    for b, s, t, p in ((2, 3, 5, 2), (1, 7, 7, 4), (3, 1, 4, 9)):
        feeds = _attention_inputs(b, hq, hkv, s, t, d, dv, p if past else 0, rank)
        if mask:
            dtype, mdims = masks[mask]
            sizes = {"b": b, "s": s, kv: t + (p if past else 0)}
            shape = [sizes.get(x, x) for x in mdims]
            feeds["mask"] = (RNG.random(shape) < 0.7 if dtype is np.bool_
                             else np.where(RNG.random(shape) < 0.7, 0, -np.inf).astype(F32)
                             + rand(*shape) * 0.1)
        # ONNX Runtime aligns a causal mask with a past to the last keys: it departs from the
        # spec (the reference) when fewer new keys than queries arrive
        for pair in pairs[:1] if past and attrs.get("is_causal") and s != t else pairs:
            pair.check(feeds)


def test_attention_nonpad_kv_seqlen_opset_24():
    ex = {"q": rand(2, 4, 3, 8), "k": rand(2, 2, 6, 8), "v": rand(2, 2, 6, 8), "mask": None,
          "past_k": None, "past_v": None, "nonpad": np.array([6, 4], I64)}
    m = model("Attention", ex, {"is_causal": 1}, 24,
              dims={"q": ["b", 4, "s", 8], "k": ["b", 2, "t", 8], "v": ["b", 2, "t", 8],
                    "nonpad": ["b"]})
    pair = Pair(m, oracle="reference")
    for b, s, t in ((2, 3, 6), (3, 1, 5), (1, 4, 4)):
        feeds = {"q": rand(b, 4, s, 8), "k": rand(b, 2, t, 8), "v": rand(b, 2, t, 8),
                 "nonpad": RNG.integers(s, t + 1, b).astype(I64)}
        pair.check(feeds)


def test_attention_products_are_batched_gemms():
    """GQA: two batch_matmuls (K and V broadcast over the head group, never repeated) around
    one attention_softmax; the mask is not materialized over heads."""
    ex = {"q": rand(1, 8, 4, 16), "k": rand(1, 2, 4, 16), "v": rand(1, 2, 4, 16),
          "mask": np.zeros((4, 4), np.bool_)}
    m = model("Attention", ex, {"is_causal": 1}, 23,
              dims={"q": ["b", 8, "s", 16], "k": ["b", 2, "t", 16], "v": ["b", 2, "t", 16],
                    "mask": ["s", "t"]})
    mod, params = from_onnx(m)
    calls = [line for line in str(relvm.build(mod, params=params).bytecode).splitlines()
             if "invoke_packed" in line]
    text = "\n".join(calls)
    assert text.count("batch_matmul") == 2 and text.count("attention_softmax") == 1
    assert "repeat" not in text and "tile" not in text


# --- RotaryEmbedding ---------------------------------------------------------------------------

@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [0, 4])
@pytest.mark.parametrize("position_ids", [True, False])
def test_rotary_embedding(rank, interleaved, rotary_dim, position_ids):
    h, d = 3, 8
    half = (rotary_dim or d) // 2
    x = rand(2, h, 5, d) if rank == 4 else rand(2, 5, h * d)
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": rotary_dim}
    if rank == 3:
        attrs["num_heads"] = h
    dims = {"x": ["b", h, "s", d] if rank == 4 else ["b", "s", h * d]}
    if position_ids:
        ex = {"x": x, "cos": rand(40, half), "sin": rand(40, half), "ids": np.zeros((2, 5), I64)}
        dims["ids"] = ["b", "s"]
    else:
        ex = {"x": x, "cos": rand(2, 5, half), "sin": rand(2, 5, half)}
        dims.update(cos=["b", "s", half], sin=["b", "s", half])
    pair = Pair(model("RotaryEmbedding", ex, attrs, 23, dims=dims))
    for b, s in ((2, 5), (1, 9), (3, 1)):
        feeds = {"x": rand(b, h, s, d) if rank == 4 else rand(b, s, h * d)}
        if position_ids:
            feeds.update(cos=ex["cos"], sin=ex["sin"],
                         ids=RNG.integers(0, 40, (b, s)).astype(I64))
        else:
            feeds.update(cos=rand(b, s, half), sin=rand(b, s, half))
        pair.check(feeds)


# --- errors --------------------------------------------------------------------------------------

def _vm(m):
    mod, params = from_onnx(m)
    return relvm.VirtualMachine(relvm.build(mod, params=params))


def test_import_errors_name_the_node():
    q = rand(1, 6, 2, 8)
    bad = model("Attention", {"q": q, "k": rand(1, 4, 2, 8), "v": rand(1, 4, 2, 8)}, {}, 23)
    with pytest.raises(RelvmImportError, match=r"Attention node .*6 query heads must be a "
                                               r"multiple of the 4 key/value heads"):
        from_onnx(bad)
    bad = model("Attention", {"q": rand(1, 2, 16), "k": rand(1, 2, 16), "v": rand(1, 2, 16)},
                {}, 23)
    with pytest.raises(RelvmImportError, match="need the q_num_heads and kv_num_heads"):
        from_onnx(bad)
    bad = model("GroupNormalization", {"x": rand(2, 6, 3), "s": rand(6), "b": rand(6)},
                {"num_groups": 4}, 21)
    with pytest.raises(RelvmImportError, match="num_groups=4 does not divide the 6 channels"):
        from_onnx(bad)
    bad = model("LpNormalization", {"x": rand(2, 3)}, {"p": 3}, 22)
    with pytest.raises(RelvmImportError, match="p must be 1 or 2"):
        from_onnx(bad)
    bad = model("RotaryEmbedding", {"x": rand(1, 4, 16), "cos": rand(4, 4), "sin": rand(4, 4),
                                    "ids": np.zeros((1, 4), I64)}, {}, 23)
    with pytest.raises(RelvmImportError, match="3-d input needs a positive num_heads"):
        from_onnx(bad)
    bad = model("SoftmaxCrossEntropyLoss", {"x": rand(2, 3), "y": np.zeros((2, 1), I64)}, {}, 13)
    with pytest.raises(RelvmImportError, match=r"labels \(N, ...\) of rank 1"):
        from_onnx(bad)


def test_run_time_errors_are_relvm_errors():
    vm = _vm(model("RotaryEmbedding", {"x": rand(1, 2, 3, 8), "cos": rand(10, 4),
                                       "sin": rand(10, 4), "ids": np.zeros((1, 3), I64)}, {}, 23,
                   dims={"x": ["b", 2, "s", 8], "ids": ["b", "s"]}))
    with pytest.raises(relvm.RelvmRuntimeError, match="out of range"):
        vm.invoke("main", rand(1, 2, 3, 8), rand(10, 4), rand(10, 4),
                  np.array([[0, 1, 10]], I64))
    vm = _vm(model("NegativeLogLikelihoodLoss", {"x": rand(2, 3), "y": np.zeros(2, I64)}, {}, 13,
                   dims={"x": ["n", 3], "y": ["n"]}))
    with pytest.raises(relvm.RelvmRuntimeError, match="out of range"):
        vm.invoke("main", rand(2, 3), np.array([0, 3], I64))
    with pytest.raises(relvm.RelvmInputError):
        vm.invoke("main", rand(2, 3), np.array([0, 1, 2], I64))
    vm = _vm(model("GroupNormalization", {"x": rand(2, 4, 3), "s": rand(4), "b": rand(4)},
                   {"num_groups": 2}, 21, dims={"x": ["n", "c", "l"], "s": ["c"], "b": ["c"]}))
    with pytest.raises(relvm.RelvmInputError, match=r"input %x dim 1 \(c\) is not a multiple "
                       r"of 2 \(the remainder is 1\), but nn.group_norm needs it to be"):
        vm.invoke("main", rand(2, 3, 3), rand(3), rand(3))
    vm = _vm(model("Attention", {"q": rand(1, 2, 3, 8), "k": rand(1, 2, 4, 8),
                                 "v": rand(1, 2, 4, 8), "mask": np.zeros((3, 4), F32)}, {}, 23,
                   dims={"q": [1, 2, "s", 8], "k": [1, 2, "t", 8], "v": [1, 2, "t", 8],
                         "mask": ["m", "n"]}))
    with pytest.raises(relvm.RelvmInputError, match=r"input %k dim 2 \(t\) is 4, but "
                       r"nn.attention_softmax needs at least input %mask dim 1 \(n\) = 5"):
        vm.invoke("main", rand(1, 2, 3, 8), rand(1, 2, 4, 8), rand(1, 2, 4, 8),
                  np.zeros((3, 5), F32))


def test_saved_executable_runs(tmp_path):
    ex = {"q": rand(1, 4, 3, 8), "k": rand(1, 2, 3, 8), "v": rand(1, 2, 3, 8),
          "mask": np.zeros((3, 3), np.bool_)}
    m = model("Attention", ex, {"is_causal": 1}, 23,
              dims={"q": ["b", 4, "s", 8], "k": ["b", 2, "s", 8], "v": ["b", 2, "s", 8],
                    "mask": ["s", "s"]})
    mod, params = from_onnx(m)
    exe = relvm.build(mod, params=params)
    exe.save(tmp_path / "a.relvm")
    vm = relvm.VirtualMachine(relvm.load(tmp_path / "a.relvm", trust_native_code=True))
    ref = ReferenceEvaluator(m)
    for s in (3, 6):
        feeds = {"q": rand(1, 4, s, 8), "k": rand(1, 2, s, 8), "v": rand(1, 2, s, 8),
                 "mask": RNG.random((s, s)) < 0.8}
        np.testing.assert_allclose(vm.invoke("main", *feeds.values()),
                                   ref.run(None, feeds)[0], rtol=1e-4, atol=1e-5)
