"""relvm's own GEMM (kernels/pgemm.c) and the one-call fused dense/conv kernels built on it.

The inner kernel exists once per instruction set; RELVM_PGEMM_ISA makes this machine run the
AVX2 and SSE2 ones too (in a subprocess, since the choice is made once per process).
"""


import numpy as np
import pytest
from sweeps import conv_shape

import relvm
from relvm.backends import c
from relvm.backends.ckernels import packed
from relvm.backends.native import load
from relvm.ops.fused import run_steps, steps_from_json
from relvm.ir.types import TensorType
from relvm.ops import OPS
from relvm.runtime.executable import KernelEntry
from relvm.runtime.vm.kernels import Constants

#: The C kernels' clamp argument for relu: 0 to infinity.
RELU = np.array([0, np.inf], np.float32)


def _listed(v):
    return [_listed(x) for x in v] if isinstance(v, tuple) else v


def _attrs(op: str, attrs: dict) -> dict:
    """Attributes as an executable stores them: normalized by the op, lists not tuples."""
    return {k: _listed(v) for k, v in OPS[op].make_attrs(attrs).items()}


SHAPES = [(1, 1, 1), (1, 512, 784), (3, 10, 512), (12, 32, 7), (13, 33, 300), (25, 100, 3),
          (130, 17, 64), (7, 15, 0), (5, 16, 1), (2, 31, 9), (0, 5, 3), (4, 0, 3),
          # long k, ragged edges
          (37, 45, 260), (64, 96, 129), (7, 33, 384),
          # tall A, taken in chunks of rows (PG_CHUNK_ROWS, PG_CHUNK_A_FLOATS), the last one
          # ragged; and a B too large against A for chunks (n > 4 m): A whole
          (1000, 70, 200), (450, 33, 300), (600, 40, 1000), (100, 1100, 150),
          # A's rows more than pgemm.c packs per thread (PG_PACKED_A_FLOATS): read as they are
          (40, 400, 14000)]


def _pgemm(a, w, bias=None, per_row=False, relu=False, trans_b=True):
    """Run relvm_pgemm on (a, op(w)); w is n x k when trans_b (dense weights) else k x n."""
    ffi, lib = load()
    m, k = a.shape
    n = w.shape[0] if trans_b else w.shape[1]
    pk = packed._aligned(int(lib.relvm_pgemm_packed_size(k, n)))
    lib.relvm_pgemm_pack(int(trans_b), k, n, ffi.from_buffer(w), ffi.from_buffer(pk))
    out = np.full((m, n), np.nan, np.float32)
    status = lib.relvm_pgemm(m, n, k, ffi.from_buffer(a), k, ffi.from_buffer(pk),
                             ffi.from_buffer(out), n,
                             ffi.NULL if bias is None else ffi.from_buffer(bias),
                             int(per_row), ffi.from_buffer("float[]", RELU) if relu else ffi.NULL,
                             ffi.NULL, ffi.NULL)
    assert status == 0
    return out


def _expect(a, w, bias=None, per_row=False, relu=False, trans_b=True):
    y = a.astype(np.float64) @ (w.T if trans_b else w).astype(np.float64)
    if bias is not None:
        y = y + (bias[:, None] if per_row else bias[None, :])
    return np.where(y < 0, 0, y) if relu else y


@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
@pytest.mark.parametrize("epilogue", ["none", "col_bias_relu", "row_bias", "relu"])
def test_pgemm_matches_float64(m, n, k, epilogue):
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    per_row = epilogue == "row_bias"
    bias = (rng.standard_normal(m if per_row else n).astype(np.float32)
            if "bias" in epilogue else None)
    relu = "relu" in epilogue
    got = _pgemm(a, w, bias, per_row, relu)
    np.testing.assert_allclose(got, _expect(a, w, bias, per_row, relu), rtol=1e-4,
                               atol=1e-4 * max(1, k) ** 0.5)


@pytest.mark.parametrize("m,n,k", [(40, 200, 64), (37, 40, 300), (5, 96, 17), (1000, 70, 200)],
                         ids=str)
def test_pgemm_packs_each_calls_a_on_two_threads(two_threads, m, n, k):
    """Each thread packs its rows of A once per call and keeps them across the runs of tasks
    the pool hands it (one task each, on two threads): calls with new A of the same shape, on
    the same threads and scratch, never see an earlier call's packing."""
    rng = np.random.default_rng(m + n + k)
    w = rng.standard_normal((n, k)).astype(np.float32)
    for _ in range(3):
        a = rng.standard_normal((m, k)).astype(np.float32)
        np.testing.assert_allclose(_pgemm(a, w), _expect(a, w), rtol=1e-4,
                                   atol=1e-4 * max(1, k) ** 0.5)


def test_pgemm_non_transposed_b_and_nan():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((9, 20)).astype(np.float32)
    b = rng.standard_normal((20, 45)).astype(np.float32)
    a[2, 3] = np.nan  # row 2 becomes NaN, and relu must keep it NaN, as the reference does
    got = _pgemm(a, b, relu=True, trans_b=False)
    want = _expect(a, b, relu=True, trans_b=False)
    assert np.isnan(got[2]).all()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_pgemm_rejects_negative_sizes():
    ffi, lib = load()
    assert lib.relvm_pgemm(-1, 2, 2, ffi.NULL, 2, ffi.NULL, ffi.NULL, 2, ffi.NULL, 0, ffi.NULL,
                           ffi.NULL, ffi.NULL) == -1


# --- fused entries: one C call --------------------------------------------------------------

def _fused_entry(anchor: str, anchor_attrs: dict, bias_axis: int | None, relu,
                 n_in: int):
    """anchor -> [bias_add] -> [relu (relu True) | clip (relu a pair: a_min, a_max)]."""
    steps = [{"op": anchor, "attrs": _attrs(anchor, anchor_attrs),
              "args": [["in", 0], ["in", 1]]}]
    if bias_axis is not None:
        steps.append({"op": "nn.bias_add", "attrs": {"axis": bias_axis},
                      "args": [["step", 0], ["in", 2]]})
    if isinstance(relu, tuple):
        steps.append({"op": "clip", "attrs": _attrs("clip", dict(zip(("a_min", "a_max"), relu))),
                      "args": [["step", len(steps) - 1]]})
    elif relu:
        steps.append({"op": "nn.relu", "attrs": {}, "args": [["step", len(steps) - 1]]})
    return KernelEntry("fused_test", "fused", {"steps": steps}, ("float32",) * n_in,
                       ("float32",))


def _run_fused(entry, arrays, out_shape, constants=None):
    kernel = c.make_kernel(entry, constants)
    out = np.full(out_shape, np.nan, np.float32)
    kernel(*arrays, out)
    want = run_steps(steps_from_json(entry.attrs["steps"]), arrays)
    return out, want


@pytest.mark.parametrize("data,units", [((1, 784), 512), ((16, 33), 40), ((2, 3, 17), 5),
                                        ((0, 8), 4)], ids=str)
@pytest.mark.parametrize("relu", [False, True, (0.0, 6.0)], ids=["none", "relu", "relu6"])
def test_fused_dense_bias_relu_is_one_call(data, units, relu):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(data).astype(np.float32)
    w = rng.standard_normal((units, data[-1])).astype(np.float32)
    b = rng.standard_normal(units).astype(np.float32)
    entry = _fused_entry("nn.dense", {"units": units}, -1, relu, 3)
    assert packed.supports(entry)
    for constants in (Constants([w]), None):  # relvm's GEMM; OpenBLAS + the generic kernel
        out, want = _run_fused(entry, [x, w, b], data[:-1] + (units,), constants)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_fused_dense_bias_on_another_axis_uses_the_generic_kernel():
    """A bias along a dim that is not the units dim is legal; the epilogue cannot do it, so the
    kernel hands those shapes to the generic fused kernel."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 7)).astype(np.float32)
    w = rng.standard_normal((5, 7)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    entry = _fused_entry("nn.dense", {"units": 5}, 1, True, 3)
    out, want = _run_fused(entry, [x, w, b], (2, 5, 5), Constants([w]))
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def _conv_case(data, weight, attrs, relu, seed):
    """Random data, weight and bias, and the fused conv -> bias_add -> [relu] entry."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in (data, weight, weight[:1])]
    entry = _fused_entry("nn.conv2d", dict(attrs, channels=weight[0],
                                           kernel_size=list(weight[2:])), 1, relu, 3)
    return arrays, entry


@pytest.mark.parametrize("data,weight,attrs", [
    ((1, 3, 32, 32), (16, 3, 3, 3), {"padding": [1, 1]}),
    ((2, 16, 32, 32), (32, 16, 3, 3), {"padding": [1, 1], "strides": [2, 2]}),
    ((2, 6, 9, 11), (6, 2, 3, 2), {"groups": 3, "padding": [1, 2, 0, 1], "strides": [2, 3]}),
    ((1, 4, 13, 13), (6, 4, 3, 3), {"dilation": [2, 2], "padding": [2, 2]}),
    # 16 output columns: read in place, from three column phases (stride 3), dilated
    ((2, 4, 9, 47), (8, 4, 3, 3), {"strides": [2, 3], "padding": [1, 2, 0, 1],
                                   "dilation": [1, 2]}),
    ((1, 2, 6, 60), (5, 2, 2, 5), {"strides": [1, 4], "padding": [0, 3]}),
    # stride 2: rows split into even and odd columns 32 at a time, then one by one; left
    # padding of every parity
    ((1, 3, 5, 33), (4, 3, 3, 3), {"strides": [2, 2]}),
    ((1, 2, 4, 64), (4, 2, 3, 3), {"strides": [2, 2], "padding": [1, 2, 1, 2]}),
    ((1, 2, 3, 70), (4, 2, 3, 5), {"strides": [2, 2], "padding": [0, 3, 0, 1]}),
    # pointwise: the input read where it is, in place (32 columns) and packed (7 columns)
    ((2, 8, 4, 32), (6, 8, 1, 1), {}),
    ((2, 8, 4, 7), (6, 4, 1, 1), {"groups": 2}),
    ((2, 8, 9, 64), (6, 8, 1, 1), {"strides": [2, 2]}),  # 1x1 strided: subsampled, pointwise
    ((2, 8, 10, 10), (8, 1, 3, 3), {"groups": 8, "padding": [1, 1]}),  # depthwise
    ((1, 0, 5, 5), (3, 0, 3, 3), {}),  # no input channels: bias and relu only
], ids=str)
@pytest.mark.parametrize("relu", [False, True, (0.0, 6.0)], ids=["none", "relu", "relu6"])
def test_fused_conv_bias_relu_is_one_call(data, weight, attrs, relu):
    arrays, entry = _conv_case(data, weight, attrs, relu, 11)
    assert packed.supports(entry)
    op = OPS["nn.conv2d"]
    out_t = op.infer(op.make_attrs(dict(attrs, channels=weight[0],
                                        kernel_size=list(weight[2:]))),
                     TensorType(data, "float32"), TensorType(weight, "float32"))
    out, want = _run_fused(entry, arrays, tuple(out_t.shape))
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("data,weight,attrs", [
    ((2, 16, 32, 32), (32, 16, 3, 3), {"padding": [1, 1], "strides": [2, 2]}),  # in place
    ((3, 3, 11, 13), (8, 3, 3, 3), {"padding": [1, 1]}),  # packed panels, ragged last panel
    ((2, 6, 9, 11), (6, 2, 3, 2), {"groups": 3, "padding": [1, 2, 0, 1], "strides": [2, 3]}),
    ((2, 8, 4, 32), (6, 8, 1, 1), {}),  # pointwise, read where it is
    ((2, 8, 9, 64), (6, 8, 1, 1), {"strides": [2, 2]}),  # 1x1 strided: subsampled, pointwise
    ((2, 8, 14, 14), (40, 8, 1, 1), {"strides": [2, 2]}),  # ... and transposed (7 x 7 out)
    ((1, 3, 40, 40), (40, 3, 3, 3), {"padding": [1, 1]}),  # rows in more than one block
    ((2, 8, 10, 10), (8, 1, 3, 3), {"groups": 8, "padding": [1, 1]}),  # depthwise: chained
], ids=str)
@pytest.mark.parametrize("relu", [False, True, (-1.0, 1.5)], ids=["none", "relu", "clip"])
def test_fused_conv_bias_relu_mean_never_stores_the_conv(data, weight, attrs, relu):
    """conv -> bias_add -> [relu] -> global_avg_pool2d as one call: each output plane averaged
    as its panels are computed."""
    arrays, entry = _conv_case(data, weight, attrs, relu, 5)
    steps = entry.attrs["steps"] + [{"op": "nn.global_avg_pool2d", "attrs": {},
                                     "args": [["step", len(entry.attrs["steps"]) - 1]]}]
    entry = KernelEntry("fused_mean", "fused", {"steps": steps}, entry.inputs, entry.outputs)
    assert packed.match(steps).mean and packed.supports(entry)
    out, want = _run_fused(entry, arrays, (data[0], weight[0], 1, 1))
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bounds", [(0.0, 6.0), (-np.inf, 0.5), (-0.25, np.inf), (2.0, 1.0),
                                    (1e-3, 1e-3)], ids=str)
@pytest.mark.parametrize("data,weight,attrs", [
    ((2, 8, 9, 32), (16, 8, 3, 3), {"padding": [1, 1]}),  # in place
    ((1, 8, 9, 13), (40, 8, 3, 3), {"padding": [1, 1], "strides": [2, 2]}),  # packed panels
    ((2, 16, 5, 5), (40, 16, 1, 1), {}),  # transposed
    ((2, 8, 20, 20), (8, 1, 3, 3), {"groups": 8, "padding": [1, 1]}),  # depthwise, wide grid
    ((2, 16, 6, 6), (16, 1, 3, 3), {"groups": 16, "padding": [1, 1]}),  # depthwise, blocked
], ids=str)
def test_clip_after_a_conv_is_its_epilogue(data, weight, attrs, bounds):
    """conv -> bias_add -> clip is one C call whose clamp matches the reference's
    minimum(maximum(x, a_min), a_max) on every path: bounds past the values, one-sided,
    a_min > a_max (every value a_max), equal bounds, and NaN in the input (it stays NaN)."""
    arrays, entry = _conv_case(data, weight, attrs, bounds, 13)
    arrays[0] = arrays[0] * 4
    arrays[0][0, 0, 1, 1] = np.nan
    epilogue = packed.match(entry.attrs["steps"])
    assert packed.supports(entry) and epilogue.clamp == tuple(np.float32(bounds).tolist())
    op = OPS["nn.conv2d"]
    out_t = op.infer(op.make_attrs(dict(attrs, channels=weight[0],
                                        kernel_size=list(weight[2:]))),
                     TensorType(data, "float32"), TensorType(weight, "float32"))
    out, want = _run_fused(entry, arrays, tuple(out_t.shape), Constants([arrays[1]]))
    assert np.isnan(out).any() and (np.isnan(out) == np.isnan(want)).all()
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    assert np.nanmin(out) >= min(bounds[0], bounds[1]) and np.nanmax(out) <= bounds[1]


def test_clip_with_a_nan_bound_is_not_an_epilogue():
    """The reference spreads a NaN bound to every value, which a clamp would not: such a clip
    stays a step of its own."""
    entry = _fused_entry("nn.conv2d", {"channels": 4, "kernel_size": [3, 3]}, 1,
                         (float("nan"), 6.0), 3)
    assert packed.match(entry.attrs["steps"]) is None


def test_conv_mean_of_empty_planes_is_nan_and_dense_takes_no_mean():
    ffi, lib = load()
    shape = conv_shape(ffi, n=2, c=3, h=0, w=4, oc=5, kh=1, kw=1, oh=0, ow=4)
    y = np.zeros((2, 5), np.float32)
    x, w = np.zeros(1, np.float32), np.ones((5, 3), np.float32)
    assert lib.relvm_conv2d_mean(0, shape, ffi.from_buffer(x), ffi.from_buffer(w),
                                 ffi.from_buffer(y), ffi.NULL, ffi.NULL, ffi.NULL) == 0
    assert np.isnan(y).all()
    shape.groups = 3  # depthwise: not this function's
    assert lib.relvm_conv2d_mean(0, shape, ffi.from_buffer(x), ffi.from_buffer(w),
                                 ffi.from_buffer(y), ffi.NULL, ffi.NULL, ffi.NULL) == -1
    dense_mean = [{"op": "nn.dense", "attrs": {}, "args": [["in", 0], ["in", 1]]},
                  {"op": "nn.global_avg_pool2d", "attrs": {}, "args": [["step", 0]]}]
    assert packed.match(dense_mean) is None


# --- packed weights: kept for constants only ---------------------------------------------------

def test_weights_packed_once_for_constants_and_never_kept_otherwise():
    """A constant weight is packed once and kept; any other goes to OpenBLAS, every call."""
    entry = KernelEntry("nn.dense", "nn.dense", _attrs("nn.dense", {"units": 6}),
                        ("float32", "float32"), ("float32",))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    w.flags.writeable = False
    out = np.empty((3, 6), np.float32)
    constant = packed.make_dense(entry, Constants([w]))
    constant(x, w, out)
    np.testing.assert_allclose(out, x @ w.T, rtol=1e-5, atol=1e-5)
    kept = packed.dense_weights(Constants([w]))
    assert kept.get(w, 4, 6) is kept.get(w, 4, 6)  # packed once
    assert kept.get(w.copy(), 4, 6) is None  # an equal array that is not the constant

    mutable = rng.standard_normal((6, 4)).astype(np.float32)
    kernel = packed.make_dense(entry, Constants([w]))
    kernel(x, mutable, out)
    mutable *= -2  # the same array with new values: must not reuse a stale packing
    kernel(x, mutable, out)
    np.testing.assert_allclose(out, x @ mutable.T, rtol=1e-5, atol=1e-5)


def test_conv_weights_packed_once_for_every_batch_size():
    """A constant conv weight is packed once, and the plans of every batch size share that
    copy (so do the grid form of a stride-1 conv over ragged rows and a strided conv that
    packs panels of its image: the same row blocks)."""
    ffi = load()[0]
    w = np.random.default_rng(6).standard_normal((8, 3, 3, 3)).astype(np.float32)
    w.flags.writeable = False

    def plan(n, width, stride=1):
        out = (width + 2 - 3) // stride + 1
        return conv_shape(ffi, n=n, c=3, h=8, w=width, oc=8, kh=3, kw=3,
                          oh=(8 - 1) // stride + 1, ow=out, sh=stride, sw=stride, pt=1, pl=1)
    kept = packed.conv_weights(Constants([w]))
    one, many = kept.get(w, plan(1, 32)), kept.get(w, plan(16, 32))
    assert one is not None and one is many
    assert kept.get(w, plan(1, 7)) is one  # the grid form: the same row blocks
    assert kept.get(w, plan(1, 13, stride=2)) is one  # ragged and strided: packed panels
    assert kept.get(w.copy(), plan(1, 32)) is None  # not the constant


def test_vm_with_weights_as_inputs_sees_new_values_each_call():
    text = """def @main(%x: Tensor[(n, 8), float32], %w: Tensor[(4, 8), float32],
                        %b: Tensor[(4), float32]) {
      nn.relu(nn.bias_add(nn.dense(%x, %w, units=4), %b))
    }"""
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(text)))
    rng = np.random.default_rng(9)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    w = rng.standard_normal((4, 8)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    for _ in range(3):
        got = vm.invoke("main", x, w, b)
        np.testing.assert_allclose(got, np.maximum(x @ w.T + b, 0), rtol=1e-5, atol=1e-5)
        w *= -1.5  # in place: same object, new values
        b += 1


def test_vm_with_conv_weights_as_inputs_sees_new_values_each_call():
    """Conv weights that are inputs are packed by each call, never kept: a pair of convs
    (one fused kernel) sees the new values written in place."""
    text = """def @main(%x: Tensor[(n, 3, 8, 16), float32], %w1: Tensor[(8, 3, 3, 3), float32],
                        %w2: Tensor[(4, 8, 3, 3), float32]) {
      %0 = nn.relu(nn.conv2d(%x, %w1, padding=[1, 1], channels=8, kernel_size=[3, 3]));
      nn.relu(nn.conv2d(%0, %w2, padding=[1, 1], channels=4, kernel_size=[3, 3]))
    }"""
    exe = relvm.build(relvm.parse(text))
    assert any(k.name.startswith("fused_conv2d_relu_conv2d") for k in exe.kernels)
    vm = relvm.VirtualMachine(exe)
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 3, 8, 16)).astype(np.float32)
    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((4, 8, 3, 3)) * 0.3).astype(np.float32)
    op = OPS["nn.conv2d"]
    attrs = op.make_attrs({"padding": [1, 1], "kernel_size": [3, 3]})
    for _ in range(3):
        got = vm.invoke("main", x, w1, w2)
        mid = np.maximum(op.reference(attrs, x, w1), 0)
        want = np.maximum(op.reference(attrs, mid, w2), 0)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        w1 *= -1.5  # in place: same objects, new values
        w2 += 0.1


@pytest.mark.parametrize("isa", ["avx2", "sse2"])
def test_lesser_instruction_sets_give_the_same_results(isa, rerun_under_isa):
    """The AVX2 and SSE2 kernels, run on this machine by asking for them."""
    rerun_under_isa(isa, __file__, 'matches_float64 or non_transposed or fused_conv or fused_dense')
