"""The quantization ops (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
QLinearMatMul, ConvInteger, QLinearConv) against ONNX Runtime, through single-node models built
once with every graph input dim symbolic (or static) and run at several shapes; onnx's reference
evaluator where ONNX Runtime has no kernel (a per-channel ConvInteger zero point); exact
uint8 x uint8 products on CPUs where its uint8 x int8 ones saturate (``ORT_U8S8_EXACT``). Integer
results must be equal: relvm's rounding and saturation are ONNX Runtime's step for step (half
to even, NaN to the low end). Then a small float model quantized by onnxruntime.quantization
(QDQ and QOperator formats, static and dynamic) against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

import relvm

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would pass
import onnx  # noqa: E402
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from relvm.frontend.onnx import RelvmImportError, from_onnx  # noqa: E402

U8, I8 = np.uint8, np.int8
#: QuantizeLinear's and DequantizeLinear's integer dtypes (the products take int8 and uint8)
QDQ_DTYPES = [U8, I8, np.int16, np.uint16]
RNG = np.random.default_rng(2019)


def ints(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def model(op, inputs, attrs=None, n_out=1, opset=21, constants=(), symbolic=False):
    """A model of one ``op`` node. ``inputs`` are arrays (None: an optional input left out);
    those at ``constants`` are initializers, the others graph inputs, whose every dim is a
    dim_param of its own when ``symbolic``."""
    inputs = [None if a is None else np.asarray(a) for a in inputs]
    names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    graph_inputs = []
    for k, (name, a) in enumerate(zip(names, inputs)):
        if a is None or k in constants:
            continue
        shape = [f"d{k}_{i}" for i in range(a.ndim)] if symbolic else list(a.shape)
        graph_inputs.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(a.dtype), shape))
    outs = [f"o{k}" for k in range(n_out)]
    graph = helper.make_graph(
        [helper.make_node(op, names, outs, **(attrs or {}))], "g", graph_inputs,
        [helper.make_empty_tensor_value_info(o) for o in outs],
        initializer=[numpy_helper.from_array(inputs[k], names[k]) for k in constants])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def feeds_of(inputs, constants=()):
    return {f"i{k}": np.asarray(a) for k, a in enumerate(inputs)
            if a is not None and k not in constants}


def run_relvm(m, feed_sets):
    """relvm's outputs for each feed set, from one import and one build."""
    mod, params = from_onnx(m)
    vm = relvm.VirtualMachine(relvm.build(mod, params=params))
    results = []
    for feeds in feed_sets:
        got = vm.invoke("main", *feeds.values())
        results.append(list(got) if isinstance(got, tuple) else [got])
    return results


def _ort_u8s8_is_exact() -> bool:
    """Whether ONNX Runtime's uint8 x int8 products are exact on this CPU. Without a VNNI byte
    dot product its kernels sum pairs of products in 16 bits (vpmaddubsw), which saturate:
    255 * 127 twice is 64770, past int16 (seen on an AMD EPYC Zen 3 with AVX2 only)."""
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 64]),
         helper.make_tensor_value_info("b", TensorProto.INT8, [64, 16])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    m.ir_version = 9
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    y = session.run(None, {"a": np.full((1, 64), 255, np.uint8),
                           "b": np.full((64, 16), 127, np.int8)})[0]
    return bool((y == 64 * 255 * 127).all())


#: Where ONNX Runtime's uint8 x int8 sums saturate, its oracle runs the same products as
#: uint8 x uint8 (exact there): every int8 operand and its zero point moved up by 128, which
#: leaves each (value - zero point) as it was.
ORT_U8S8_EXACT = _ort_u8s8_is_exact()


def _u8s8(inputs) -> bool:
    kinds = {np.asarray(a).dtype for a in inputs if a is not None}
    return np.dtype(np.uint8) in kinds and np.dtype(np.int8) in kinds


def _as_u8u8(inputs) -> list:
    return [a if a is None or np.asarray(a).dtype != np.int8 else
            (np.asarray(a).astype(np.int16) + 128).astype(np.uint8) for a in inputs]


def onnx_runtime(m, inputs, constants):
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds_of(inputs, constants))


def onnx_reference(m, inputs, constants):
    return ReferenceEvaluator(m).run(None, feeds_of(inputs, constants))


def check(op, input_sets, attrs=None, constants=(), n_out=1, opset=21, oracle=onnx_runtime,
          rtol=0.0):
    """``op`` on each of ``input_sets`` (same ranks and dtypes, shapes free), built once static
    (per set) and once symbolic (for all), against ``oracle(static model, inputs, constants)``:
    integers equal, floats to ``rtol``."""
    for inputs in input_sets[1:]:  # the symbolic model holds the first set's
        assert all(np.array_equal(inputs[k], input_sets[0][k]) for k in constants)
    symbolic = model(op, input_sets[0], attrs, n_out, opset, constants, symbolic=True)
    feed_sets = [feeds_of(inputs, constants) for inputs in input_sets]
    got_symbolic = run_relvm(symbolic, feed_sets)
    for inputs, feeds, sym in zip(input_sets, feed_sets, got_symbolic):
        static = model(op, inputs, attrs, n_out, opset, constants)
        if oracle is onnx_runtime and not ORT_U8S8_EXACT and _u8s8(inputs):
            exact = _as_u8u8(inputs)
            want = oracle(model(op, exact, attrs, n_out, opset, constants), exact, constants)
        else:
            want = oracle(static, inputs, constants)
        for got in (run_relvm(static, [feeds])[0], sym):
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape)
                if w.dtype.kind == "f" and rtol:
                    np.testing.assert_allclose(g, w, rtol=rtol, atol=0)
                else:
                    np.testing.assert_array_equal(g, w)


# --- QuantizeLinear and DequantizeLinear ---------------------------------------------------------

SHAPES = [(2, 3, 4), (1, 3, 7), (5, 3, 1)]


def floats(shape, spread=300.0):
    """Normal values ``spread`` wide: int8's and uint8's ranges are left at the tails (TIES
    below reaches the 16-bit dtypes' ends)."""
    return (RNG.standard_normal(shape) * spread).astype(np.float32)


@pytest.mark.parametrize("dtype", QDQ_DTYPES)
@pytest.mark.parametrize("granularity", ["tensor", "axis", "blocked"])
@pytest.mark.parametrize("constant", [False, True])
def test_quantize_linear(dtype, granularity, constant):
    if granularity == "tensor":
        scale, attrs = np.float32(1.7), {}
    elif granularity == "axis":
        scale, attrs = np.array([0.5, 2.0, 3.3], np.float32), {"axis": 1}
    else:  # 3 blocks of 2 along axis 1 of (n, 5, w): the last block is short
        scale, attrs = None, {"axis": 1, "block_size": 2}
    sets = []
    for n, _, w in SHAPES:
        if scale is None:  # blocked: the scale has the input's shape but for the blocks
            x, s = floats((n, 5, w)), RNG.uniform(0.5, 4, (n, 3, w)).astype(np.float32)
            sets.append([x, s, ints(s.shape, dtype)])
        else:
            sets.append([floats((n, 3, w)), scale, ints(scale.shape, dtype)])
    if constant and granularity == "blocked":  # a constant scale of the input's rank fixes
        s = RNG.uniform(0.5, 4, (2, 3, 4)).astype(np.float32)  # the input's shape
        z = ints(s.shape, dtype)
        sets = [[floats((2, 5, 4)), s, z] for _ in range(3)]
    elif constant:  # initializers: one scale and zero point for every shape
        sets = [[x, sets[0][1], sets[0][2]] for x, _, _ in sets]
    check("QuantizeLinear", sets, attrs, constants=(1, 2) if constant else ())


def test_quantize_linear_blocked_along_a_symbolic_axis():
    """The gather repeating each block's scale is made when the program runs."""
    sets = []
    for d in (4, 7, 1):
        x = floats((2, d, 3))
        s = RNG.uniform(0.5, 4, (2, -(-d // 3), 3)).astype(np.float32)
        sets.append([x, s, ints(s.shape, I8)])
    check("QuantizeLinear", sets, {"axis": 1, "block_size": 3})


TIES = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, 128.5, -127.5, -128.5, 254.5,
                 255.5, 32766.5, 32767.5, -32767.5, -32768.5, 65534.5, 65535.5, 1e9, -1e9, np.inf,
                 -np.inf, np.nan, 3.4999998, -0.0], np.float32)


@pytest.mark.parametrize("dtype", QDQ_DTYPES)
def test_quantize_linear_rounds_half_to_even_and_saturates(dtype):
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    for zp in (lo, 0, hi):
        got = run_relvm(model("QuantizeLinear", [TIES, np.float32(1), np.array(zp, dtype)]),
                        [feeds_of([TIES, np.float32(1), np.array(zp, dtype)])])[0][0]
        # Half to even, plus the zero point, clamped; NaN to the low end (ONNX Runtime and
        # onnx's reference both give it).
        rounded = np.rint(np.nan_to_num(TIES, nan=-np.inf).astype(np.float64)) + zp
        np.testing.assert_array_equal(got, np.clip(rounded, lo, hi).astype(dtype))
    check("QuantizeLinear", [[TIES, np.float32(0.5), np.array(3, dtype)],
                             [TIES[::-1].copy(), np.float32(2.0), np.array(lo, dtype)]])


@pytest.mark.parametrize("dtype", QDQ_DTYPES + [np.int32])
@pytest.mark.parametrize("granularity", ["tensor", "axis", "blocked"])
@pytest.mark.parametrize("scale_dtype", [np.float32, np.float16])
def test_dequantize_linear(dtype, granularity, scale_dtype):
    sets = []
    for n, _, w in SHAPES:
        if granularity == "tensor":
            shape, s_shape, attrs = (n, 3, w), (), {}
        elif granularity == "axis":
            shape, s_shape, attrs = (n, 3, w), (3,), {"axis": -2}
        else:
            shape, s_shape, attrs = (n, 3, w), (n, 3, -(-w // 2)), {"axis": 2, "block_size": 2}
        x = ints(shape, dtype)
        scale = RNG.uniform(0.001, 0.1, s_shape).astype(scale_dtype)
        zp = ints(s_shape, dtype) if dtype != np.int32 else None
        sets.append([x, scale, zp])
    check("DequantizeLinear", sets, attrs)


@pytest.mark.parametrize("case", ["random", "positive", "negative", "zeros", "constant"])
def test_dynamic_quantize_linear(case):
    def make(shape):
        x = floats(shape, 3.0)
        return {"random": x, "positive": np.abs(x) + 1, "negative": -np.abs(x) - 1,
                "zeros": np.zeros(shape, np.float32),
                "constant": np.full(shape, 2.5, np.float32)}[case]
    check("DynamicQuantizeLinear", [[make(s)] for s in SHAPES], n_out=3, opset=11)


# --- integer products ----------------------------------------------------------------------------

MIXES = [(U8, I8), (U8, U8), (I8, I8)]  # ONNX Runtime has no int8 x uint8 MatMulInteger


@pytest.mark.parametrize("ad, bd", MIXES)
@pytest.mark.parametrize("shapes", [[((5, 16), (16, 7)), ((1, 16), (16, 7)), ((33, 16), (16, 7))],
                                    [((2, 5, 9), (9, 4)), ((3, 1, 9), (9, 4)), ((1, 8, 9), (9, 4))],
                                    [((2, 5, 9), (2, 9, 4)), ((3, 1, 9), (3, 9, 4)),
                                     ((1, 8, 9), (1, 9, 4))],
                                    [((9,), (9, 4)), ((3,), (3, 4)), ((20,), (20, 4))]])
@pytest.mark.parametrize("per_column", [False, True])
def test_matmul_integer(ad, bd, shapes, per_column):
    sets = [[ints(a, ad), ints(b, bd), ints((), ad), ints((b[-1],) if per_column else (), bd)]
            for a, b in shapes]
    # ONNX Runtime takes a vector b_zero_point with a 2-d b only
    batched = len(shapes[0][1]) > 2 and per_column
    check("MatMulInteger", sets, opset=10, oracle=onnx_reference if batched else onnx_runtime)


def test_matmul_integer_with_constant_weights_and_zero_points_at_the_ends():
    b = ints((64, 40), I8)
    sets = [[ints((m, 64), U8), b, np.array(zp_a, U8), np.array([-128, 127] * 20, I8)]
            for m, zp_a in ((7, 0), (1, 255), (50, 128))]
    check("MatMulInteger", sets, opset=10, constants=(1, 3))


@pytest.mark.parametrize("ad, bd", MIXES)
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("rank", [2, 3])
@pytest.mark.parametrize("scale_dtype", [np.float32, np.float16])
def test_qlinear_matmul(ad, bd, per_column, rank, scale_dtype):
    n_b = (6,) if per_column else ()
    params = [np.array(0.02, scale_dtype), ints((), ad), ints((24, 6), bd),
              RNG.uniform(0.001, 0.02, n_b).astype(scale_dtype), ints(n_b, bd),
              np.array(0.05, scale_dtype), ints((), ad)]
    sets = [[ints((2, m, 24) if rank == 3 else (m, 24), ad)] + params for m in (5, 1, 17)]
    check("QLinearMatMul", sets, constants=(1, 2, 3, 4, 5, 6, 7), opset=21 if scale_dtype ==
          np.float16 else 10)


CONVS = [  # attrs, weight shape, data shapes
    ({"pads": [1, 1, 1, 1]}, (8, 4, 3, 3), [(1, 4, 9, 9), (2, 4, 5, 12), (1, 4, 1, 3)]),
    ({"strides": [2, 1], "dilations": [1, 2]}, (6, 4, 3, 3), [(1, 4, 9, 9), (2, 4, 7, 12)]),
    ({"group": 2, "pads": [0, 1, 2, 0]}, (6, 2, 2, 3), [(1, 4, 6, 6), (3, 4, 5, 9)]),
    ({"group": 4, "pads": [1, 1, 1, 1]}, (4, 1, 3, 3), [(1, 4, 8, 8), (2, 4, 5, 3)]),  # depthwise
    ({"auto_pad": "SAME_UPPER"}, (5, 3, 3, 3), [(1, 3, 6, 6), (2, 3, 4, 9)]),
    ({"pads": [1, 2], "strides": [2]}, (5, 3, 4), [(1, 3, 10), (2, 3, 7)]),  # 1-d
]


@pytest.mark.parametrize("attrs, wshape, xshapes", CONVS)
@pytest.mark.parametrize("xd, wd", [(U8, I8), (U8, U8), (I8, I8)])
def test_conv_integer(attrs, wshape, xshapes, xd, wd):
    w, zw = ints(wshape, wd), ints((wshape[0],), wd)
    sets = [[ints(s, xd), w, ints((), xd), ints((), wd)] for s in xshapes]
    check("ConvInteger", sets, attrs, constants=(1,), opset=10)
    # ONNX Runtime takes one weight zero point only: per channel, its float32 Conv of the
    # operands less their zero points decides (exact: every sum is below 2**24).
    sets = [[x, w, zx, zw] for x, w, zx, _ in sets]
    check("ConvInteger", sets, attrs, constants=(1, 3), opset=10, oracle=float_conv(attrs))


def float_conv(attrs):
    """An oracle for ConvInteger: ONNX Runtime's float Conv of (x - x_zero_point) and
    (w - w_zero_point), one zero point per output channel."""
    def run(m, inputs, constants):
        x, w, zx, zw = inputs
        xf = x.astype(np.float32) - np.float32(zx)
        wf = w.astype(np.float32) - zw.astype(np.float32).reshape((-1,) + (1,) * (w.ndim - 1))
        conv = model("Conv", [xf, wf], attrs, opset=11, constants=(1,))
        return [onnx_runtime(conv, [xf, wf], (1,))[0].astype(np.int32)]
    return run


@pytest.mark.parametrize("attrs, wshape, xshapes", CONVS)
@pytest.mark.parametrize("xd, wd", [(U8, I8), (U8, U8), (I8, I8)])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv(attrs, wshape, xshapes, xd, wd, per_channel):
    oc = wshape[0]
    w = ints(wshape, wd)
    w_scale = RNG.uniform(0.001, 0.01, (oc,) if per_channel else ()).astype(np.float32)
    # ONNX Runtime takes one weight zero point, repeated per channel
    w_zp = np.full((oc,) if per_channel else (), 0 if wd == I8 else 128, wd)
    x_zp, y_zp, bias = ints((), xd), ints((), xd), RNG.integers(-3000, 3000, oc).astype(np.int32)
    sets = [[ints(s, xd), np.float32(0.03), x_zp, w, w_scale, w_zp, np.float32(0.04), y_zp,
             bias] for s in xshapes]
    check("QLinearConv", sets, attrs, constants=(1, 2, 3, 4, 5, 6, 7, 8), opset=10)


# --- what the import refuses, by name ------------------------------------------------------------

@pytest.mark.parametrize("op, inputs, attrs, message", [
    ("QuantizeLinear", [floats((2, 3)), np.float32(1)],
     {"output_dtype": TensorProto.FLOAT8E4M3FN},
     r"QuantizeLinear node 'o0': output_dtype float8e4m3fn is not supported: relvm has no "
     r"float8e4m3fn dtype"),
    ("QuantizeLinear", [floats((2, 3)), np.float32(1)], {"precision": TensorProto.BFLOAT16},
     r"output_dtype bfloat16 is not supported|precision bfloat16 is not supported"),
    ("QuantizeLinear", [floats((2, 3)), np.float32(1), np.uint8(0)],
     {"output_dtype": TensorProto.INT8}, r"output_dtype int8 differs from y_zero_point's dtype "
                                         r"uint8"),
    ("QuantizeLinear", [floats((4, 6)), np.ones((4, 2), np.float32)],
     {"axis": 1, "block_size": 2}, r"y_scale \(4, 2\) has 2 blocks along axis 1; the input "
                                   r"\(4, 6\) in blocks of 2 needs 3"),
    ("DequantizeLinear", [ints((4, 6), U8), np.ones((4, 6), np.float32)], {},
     r"x_scale must be a scalar or a vector along axis 1 \(or, with block_size, of the "
     r"input's rank\), got shape \(4, 6\)"),
    ("DequantizeLinear", [ints((4, 6), U8), np.float32(1), np.int8(0)], {},
     r"x_zero_point's dtype int8 differs from the input's uint8"),
    ("MatMulInteger", [ints((2, 3, 4), U8), ints((4, 5), I8), ints((2, 3, 1), U8)], {},
     r"MatMulInteger node 'o0': a_zero_point of shape \(2, 3, 1\) is not supported: relvm "
     r"takes a scalar or one value per row, shared by every batch item"),
    ("QLinearMatMul", [ints((3, 4), U8), np.float32(1), np.uint8(0), ints((4, 5), I8),
                       np.float32(1), np.int8(0), np.ones(2, np.float32), np.uint8(0)], {},
     r"y_scale must be a scalar or hold one value, got shape \(2\)"),
])
def test_refusals_name_the_node(op, inputs, attrs, message):
    m = model(op, inputs, attrs, constants=tuple(range(1, len(inputs))))
    with pytest.raises(RelvmImportError, match=message):
        from_onnx(m)


# --- a quantized model ---------------------------------------------------------------------------

def float_model():
    """Conv + Relu, strided Conv + Relu, then a MatMul over the channels (batch and spatial
    dims symbolic)."""
    rng = np.random.default_rng(7)
    weights = {"w1": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
               "b1": (rng.standard_normal(8) * 0.1).astype(np.float32),
               "w2": (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32),
               "b2": (rng.standard_normal(16) * 0.1).astype(np.float32),
               "fc": (rng.standard_normal((16, 10)) * 0.3).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1],
                              strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Transpose", ["r2"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["t", "fc"], ["y"])]
    graph = helper.make_graph(
        nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


QUANTIZATIONS = ["qdq", "qdq_per_channel", "qoperator", "qoperator_per_channel", "dynamic",
                 "dynamic_uint8"]


@pytest.mark.parametrize("how", QUANTIZATIONS)
def test_quantized_model_matches_ort(tmp_path, how):
    """The model quantized by onnxruntime.quantization, on relvm and on ONNX Runtime at three
    input shapes (one build: n, h and w symbolic).

    Tolerance: one quantization step of the output. ONNX Runtime rewrites a QDQ graph's
    DequantizeLinear -> Conv -> QuantizeLinear into QLinearConv (integer sums, then one
    rounding), while relvm runs it as written: the float32 conv of the dequantized values, then
    QuantizeLinear; the two sums differ by float rounding, so a value within that of a rounding
    boundary (a half step) may land one step apart. In the QOperator and dynamic formats relvm
    computes what ONNX Runtime computes (exact integer sums, the same float32 requantizing
    steps) and they agree exactly. Where ONNX Runtime's uint8 x int8 sums saturate (CPUs without
    VNNI: ``ORT_U8S8_EXACT``), onnx's reference evaluator runs the quantized model instead (ONNX
    Runtime's per-channel uint8-weight kernels are off there too, by 0.08 on this model)."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    QuantFormat, QuantType = quantization.QuantFormat, quantization.QuantType
    source, target = tmp_path / "float.onnx", tmp_path / f"{how}.onnx"
    onnx.save(float_model(), source)
    rng = np.random.default_rng(11)

    class Calibration(quantization.CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": rng.random((1, 3, 16, 16), dtype=np.float32)}
                                 for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    if how.startswith("dynamic"):
        weight = QuantType.QUInt8 if how == "dynamic_uint8" else QuantType.QInt8
        quantization.quantize_dynamic(source, target, weight_type=weight,
                                      op_types_to_quantize=["Conv", "MatMul"])
    else:
        quantization.quantize_static(
            source, target, Calibration(),
            quant_format=QuantFormat.QDQ if how.startswith("qdq") else QuantFormat.QOperator,
            per_channel=how.endswith("per_channel"), activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8)
    quantized = onnx.load(target)
    kinds = {node.op_type for node in quantized.graph.node}
    expected = {"qdq": "QuantizeLinear", "qoperator": "QLinearConv", "dynamic": "ConvInteger"}
    assert expected[how.split("_")[0]] in kinds
    step = _output_step(quantized)

    mod, params = from_onnx(quantized)
    vm = relvm.VirtualMachine(relvm.build(mod, params=params))
    session = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    if not ORT_U8S8_EXACT and how != "dynamic_uint8":  # its uint8 x int8 sums saturate
        session = ReferenceEvaluator(_at_least_opset(quantized, 19))
    for shape in [(1, 3, 16, 16), (3, 3, 20, 12), (2, 3, 9, 31)]:
        x = rng.random(shape, dtype=np.float32)
        want = session.run(None, {"x": x})[0]
        got = vm.invoke("main", x)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=step * 1.0001)


def _at_least_opset(m, version: int):
    """A copy of ``m`` importing the default domain at ``version`` or later (onnx's reference
    evaluator has no DequantizeLinear before opset 19; the quantizer's ops mean the same)."""
    out = onnx.ModelProto()
    out.CopyFrom(m)
    for o in out.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = max(o.version, version)
    return out


def _output_step(m) -> float:
    """The quantization step of the model's output: the scale of the DequantizeLinear that
    makes it, or (dynamic quantization: a float product of two scales) a float32 rounding."""
    out = m.graph.output[0].name
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for node in m.graph.node:
        if out in node.output and node.op_type == "DequantizeLinear":
            return float(np.max(inits[node.input[1]]))
    return 1e-5
