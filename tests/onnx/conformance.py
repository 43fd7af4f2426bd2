"""Which ONNX backend node cases relvm runs, and how each is expected to end.

The cases are onnx's own (``onnx.backend.test``; the wheel builds them in memory). A case
belongs to an op by its node (or, for ``*_expanded`` cases, by the case it expands); relvm runs
every case of the ops issues 7, 19 and 46 list. The counted cases are those whose inputs and
outputs are all float32, int64, int32 or bool tensors.

``XFAIL`` gives the reason of every case expected to fail, on both runs; ``XFAIL_SYMBOLIC`` the
cases that pass with static shapes but not when every input dim is symbolic. The test modules
mark them ``xfail(strict=True)``, so a case that starts passing must leave the table.

Every case runs on the build users get (C kernels, fusion on); float16 ops the C backend has
no float16 kernel for compute in float32 there (``relvm/passes/widen.py``).
"""

from __future__ import annotations

import re
from functools import lru_cache

#: The op types issues 7, 19 and 46 ask for.
OPS = ("Conv ConvTranspose Gemm MatMul Relu LeakyRelu PRelu Sigmoid Tanh Gelu Erf HardSigmoid "
       "HardSwish Clip Add Sub Mul Div Pow Sqrt Exp Log Neg Abs Where Equal Less Greater Max Min "
       "Cast Softmax LogSoftmax ReduceMean ReduceSum ReduceMax ArgMax MaxPool AveragePool "
       "GlobalAveragePool BatchNormalization LayerNormalization Reshape Transpose Concat Split "
       "Slice Squeeze Unsqueeze Flatten Gather Expand Shape ConstantOfShape Range Pad Resize "
       "Identity Dropout Constant LSTM GRU If "
       # issue 19
       "GatherND GatherElements ScatterND ScatterElements Scatter IsNaN IsInf ReduceL1 ReduceL2 "
       "ReduceLogSum ReduceLogSumExp ReduceSumSquare "
       "GroupNormalization RMSNormalization InstanceNormalization LpNormalization "
       "MeanVarianceNormalization LRN Attention RotaryEmbedding SoftmaxCrossEntropyLoss "
       "NegativeLogLikelihoodLoss "
       "Mod Selu Elu Celu Mish Softplus Softsign ThresholdedRelu Shrink Tile OneHot NonZero "
       "Trilu CumSum CumProd TopK Einsum Unique "
       "Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Swish Xor "
       "HannWindow HammingWindow BlackmanWindow SpaceToDepth DepthToSpace CenterCropPad Hardmax "
       "EyeLike Compress LpPool AffineGrid GridSample BitwiseAnd BitwiseOr BitwiseXor BitwiseNot "
       "BitShift ReverseSequence "
       "QuantizeLinear DequantizeLinear DynamicQuantizeLinear MatMulInteger QLinearMatMul "
       "ConvInteger QLinearConv "
       "BitCast TfIdfVectorizer DeformConv MelWeightMatrix "
       "NonMaxSuppression Det MaxUnpool Col2Im TensorScatter "
       "Loop Scan "
       # issue 46
       "DFT STFT RoiAlign MaxRoiPool").split()

#: TensorProto element types of the counted cases: float32, int32, int64, bool.
COUNTED_TYPES = {1, 6, 7, 9}

XFAIL: dict[str, str] = {}
XFAIL_SYMBOLIC: dict[str, str] = {}



def onnx_version() -> str:
    import onnx

    return onnx.__version__


@lru_cache(maxsize=None)
def node_cases() -> dict:
    """Every node case of the installed onnx, by name (built once; onnx's own warnings muted)."""
    import warnings

    import numpy as np
    from onnx.backend.test.loader import load_node_model_tests

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return {c.name: c for c in load_node_model_tests()}


def op_of(case) -> str | None:
    """The op type a case tests (its node's, or the node of the case it expands)."""
    cases = node_cases()
    base = re.sub(r"_expanded(_ver\d+)?$", "", case.name)
    if base != case.name and base in cases and len(cases[base].model.graph.node) == 1:
        return cases[base].model.graph.node[0].op_type
    nodes = case.model.graph.node
    return nodes[0].op_type if len(nodes) == 1 else None


def counted(case) -> bool:
    """True if every graph input and output is a float32/int32/int64/bool tensor."""
    g = case.model.graph
    for vi in list(g.input) + list(g.output):
        t = vi.type
        if not t.HasField("tensor_type") or t.tensor_type.elem_type not in COUNTED_TYPES:
            return False
    return True


@lru_cache(maxsize=None)
def selected() -> dict[str, str]:
    """Case name -> op type, for every case of the listed ops."""
    out = {}
    for name, case in node_cases().items():
        op = op_of(case)
        if op in OPS:
            out[name] = op
    return dict(sorted(out.items()))


@lru_cache(maxsize=None)
def every_case() -> dict[str, str]:
    """Case name -> op type, for every node case of the installed onnx (a case of several
    nodes that expands no single-node case is named after its first node's op type)."""
    out = {}
    for name, case in node_cases().items():
        op = op_of(case)
        if op is None:
            nodes = case.model.graph.node
            op = nodes[0].op_type if nodes else "(no nodes)"
        out[name] = op
    return dict(sorted(out.items()))


def _node_ops(graph) -> set[str]:
    """The op types of a graph's nodes and of its subgraphs' (another domain's as domain::op)."""
    import onnx
    from relvm.frontend.onnx.importer import op_key

    found = set()
    for node in graph.node:
        found.add(op_key(node.domain, node.op_type))
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                found |= _node_ops(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    found |= _node_ops(g)
    return found


@lru_cache(maxsize=None)
def unsupported_ops(name: str, symbolic: bool = False) -> tuple[str, ...]:
    """The op types of case ``name`` that relvm has no converter for once the import has
    inlined what it inlines (``relvm/frontend/onnx/functions.py``: local functions, and ops
    the standard defines as functions of others) -- what the import's error lists. On the
    ``symbolic`` run's model (every input dim symbolic) a context-dependent function's body may
    not be buildable."""
    from relvm.frontend.onnx.converters import CONVERTERS
    from relvm.frontend.onnx.functions import expand_functions
    from relvm.frontend.onnx.importer import op_key

    model = node_cases()[name].model
    if symbolic:
        from relvm_backend import symbolic_model

        model = symbolic_model(model)
    model = expand_functions(model, lambda domain, op: op_key(domain, op) in CONVERTERS)
    return tuple(sorted(op for op in _node_ops(model.graph) if op not in CONVERTERS))


XFAIL.update({
    "test_training_dropout": "training-mode Dropout is random",
    "test_training_dropout_default": "training-mode Dropout is random",
    "test_training_dropout_default_mask": "training-mode Dropout is random",
    "test_training_dropout_mask": "training-mode Dropout is random",
    "test_identity_opt": "optional values are not supported (tensors only)",
    "test_if_opt": "optional values are not supported (tensors only)",
    "test_affine_grid_3d_align_corners_expanded": "the expansion's If branches differ in rank "
                                                  "(a scalar and a 1-element tensor): issue 19, "
                                                  "item 3",
    **{f"test_dft_inverse{v}": "the expected imaginary parts are complex64 rounding noise "
       "(1.9e-7 from NumPy's complex64 ifft, past the case's atol of 1e-7) where relvm's "
       "double arithmetic gives exactly 0" for v in ("", "_opset19")},
})

_FRACTIONAL = ("onnx's expected output divides by the fractional output length (in * scale); "
               "the operator's text, ONNX Runtime and PyTorch divide by the integer one, as "
               "relvm does (issue 46)")
XFAIL.update({"test_resize_downsample_scales_linear_align_corners": _FRACTIONAL,
              "test_resize_downsample_scales_cubic_align_corners": _FRACTIONAL})

_KEEP_ASPECT = "keep_aspect_ratio_policy computes the output size from the input's: static only"
XFAIL_SYMBOLIC.update({
    **{f"test_affine_grid_2d{c}_expanded": "the expansion fills a tensor of a shape computed "
       "from a data-dependent value, whose length (the rank) is then unknown: issue 19, item 4"
       for c in ("", "_align_corners")},
    "test_affine_grid_3d_expanded": "the expansion expands to a shape computed from a "
                                    "data-dependent value, whose length (the rank) is then "
                                    "unknown: issue 19, item 4",
    "test_reduce_max_empty_set": "relvm's max of an empty axis is a run-time error; only a "
                                 "statically empty axis gives ONNX's -inf",
    "test_reduce_max_empty_set_bool": "relvm's max of an empty axis is a run-time error; only a "
                                      "statically empty axis gives ONNX's False",
    "test_reduce_min_empty_set": "relvm's min of an empty axis is a run-time error; only a "
                                 "statically empty axis gives ONNX's inf",
    "test_stft_with_window": "the window is a graph input: its length is the frame length, "
                             "which decides the output's shape and must be static",
    "test_resize_downsample_sizes_nearest_not_larger": _KEEP_ASPECT,
    "test_resize_downsample_sizes_nearest_not_smaller": _KEEP_ASPECT,
    "test_resize_upsample_sizes_nearest_not_larger": _KEEP_ASPECT,
    "test_resize_upsample_sizes_nearest_not_smaller": _KEEP_ASPECT,
})


def _elem_type_names(case) -> set[str]:
    import onnx

    g = case.model.graph
    out = set()
    for vi in list(g.input) + list(g.output):
        t = vi.type
        if t.HasField("tensor_type"):
            out.add(onnx.TensorProto.DataType.Name(t.tensor_type.elem_type))
    return out


#: ONNX element types relvm has.
SUPPORTED_TYPES = {"FLOAT", "DOUBLE", "FLOAT16", "INT64", "INT32", "INT8", "UINT8", "BOOL",
                   "INT16", "UINT16", "UINT32", "UINT64"}


#: How the reasons of the two computed kinds of expected failure begin.
UNSUPPORTED_OP = "relvm does not import"
UNSUPPORTED_DTYPE = "relvm has no"


def failure_kind(reason: str | None) -> str:
    """pass, op (an op type without converter), dtype (an element type relvm lacks) or other."""
    if reason is None:
        return "pass"
    if reason.startswith(UNSUPPORTED_OP):
        return "op"
    if reason.startswith(UNSUPPORTED_DTYPE) and reason.endswith("dtype"):
        return "dtype"
    return "other"


def expected_failure(name: str, symbolic: bool) -> str | None:
    """Why case ``name`` fails (on the symbolic-dims run if ``symbolic``), or None if it passes."""
    if name in XFAIL:
        return XFAIL[name]
    if symbolic and name in XFAIL_SYMBOLIC:
        return XFAIL_SYMBOLIC[name]
    ops = unsupported_ops(name, symbolic)
    if ops:
        if symbolic and not unsupported_ops(name):
            return (f"{UNSUPPORTED_OP} {', '.join(ops)} with every input dim symbolic: onnx "
                    "builds the op's function body from static input shapes")
        return f"{UNSUPPORTED_OP} {', '.join(ops)}"
    missing = sorted(_elem_type_names(node_cases()[name]) - SUPPORTED_TYPES)
    if missing:
        return f"{UNSUPPORTED_DTYPE} {', '.join(t.lower() for t in missing)} dtype"
    return None


def backend_test_case(backend, symbolic: bool, module: str, ops=None):
    """onnx's BackendTest for ``backend``: every node case (CPU), each case
    expected to fail marked ``xfail(strict=True)`` with its reason."""
    import pytest
    from onnx.backend.test import BackendTest

    cases = every_case()  # builds the cases first, with onnx's warnings muted
    generated = BackendTest(backend, module).test_cases["OnnxBackendNodeModelTest"]
    methods = {}
    for name, op in cases.items():
        if ops is not None and op not in ops:
            continue
        method = getattr(generated, f"{name}_cpu")
        reason = expected_failure(name, symbolic)
        if reason is not None:
            method = pytest.mark.xfail(reason=reason, strict=True)(method)
        methods[f"{name}_cpu"] = method
    cls = type("OnnxBackendNodeModelTest", (generated.__bases__[0],), methods)
    cls.__module__ = module
    return cls
