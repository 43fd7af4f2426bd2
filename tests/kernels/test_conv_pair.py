"""Two convs in a row as one C call (relvm_conv2d_pair), the first conv's output never stored.

The pair is checked against two relvm_conv2d calls (and a NumPy mean) over many geometries, with
each image whole on a thread and cut into bands of rows (fewer images than threads, or images
too large for cache), so that a band's first rows repeat its neighbour's last ones, and against
an independent float64 NumPy conv. Then the Python side: which fused steps ``packed.match``
reads as a :class:`~relvm.backends.ckernels.packed.Pair`, and the fused kernel ``make_fused``
builds for them, with its fallback for shapes the C call does not take. The C tests are rerun
under the AVX2 and SSE2 GEMM kernels in a subprocess.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np
import pytest
from sweeps import conv_shape

from relvm.backends import c
from relvm.backends.ckernels import packed
from relvm.backends.ckernels.chain import make_chain
from relvm.backends.native import load
from relvm.ops import OPS
from relvm.ops.fused import run_steps, steps_from_json
from relvm.runtime import threads
from relvm.runtime.executable import KernelEntry

UNSUPPORTED = -1  # RELVM_UNSUPPORTED (kernels/relvm_config.h)


def _two(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


class Conv(NamedTuple):
    """One conv of a pair: ``pad`` is one int or (top, left, bottom, right), as Relay has it."""

    oc: int
    k: int | tuple = 3
    stride: int | tuple = 1
    pad: int | tuple = 0
    dilation: int | tuple = 1
    groups: int = 1

    def pads(self):
        return (self.pad,) * 4 if isinstance(self.pad, int) else tuple(self.pad)

    def out_hw(self, h, w):
        (kh, kw), (sh, sw), (dh, dw) = _two(self.k), _two(self.stride), _two(self.dilation)
        pt, pl, pb, pr = self.pads()
        return ((h + pt + pb - dh * (kh - 1) - 1) // sh + 1,
                (w + pl + pr - dw * (kw - 1) - 1) // sw + 1)

    def weight_shape(self, c):
        return (self.oc, c // self.groups) + _two(self.k)

    def struct(self, ffi, n, c, h, w):
        (kh, kw), (sh, sw), (dh, dw) = _two(self.k), _two(self.stride), _two(self.dilation)
        pt, pl, _, _ = self.pads()
        oh, ow = self.out_hw(h, w)
        return conv_shape(ffi, n=n, c=c, h=h, w=w, oc=self.oc, kh=kh, kw=kw, oh=oh, ow=ow,
                          sh=sh, sw=sw, pt=pt, pl=pl, dh=dh, dw=dw, groups=self.groups)

    def relay_attrs(self):
        pt, pl, pb, pr = self.pads()
        return {"strides": list(_two(self.stride)), "padding": [pt, pl, pb, pr],
                "dilation": list(_two(self.dilation)), "groups": self.groups,
                "channels": self.oc, "kernel_size": list(_two(self.k))}


def direct_conv(x, w, conv: Conv):
    """An independent float64 conv: each tap's strided window of the zero-padded input times
    that tap's weights, group by group."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = x.shape
    (kh, kw), (sh, sw), (dh, dw) = _two(conv.k), _two(conv.stride), _two(conv.dilation)
    pt, pl, pb, pr = conv.pads()
    oh, ow = conv.out_hw(h, wd)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    icg, ocg = c // conv.groups, conv.oc // conv.groups
    out = np.zeros((n, conv.oc, oh, ow))
    for g in range(conv.groups):
        xs, ws = xp[:, g * icg:(g + 1) * icg], w[g * ocg:(g + 1) * ocg]
        for i in range(kh):
            for j in range(kw):
                window = xs[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh,
                            j * dw:j * dw + (ow - 1) * sw + 1:sw]
                out[:, g * ocg:(g + 1) * ocg] += np.einsum("nchw,oc->nohw", window, ws[:, :, i, j])
    return out


def _epilogue(y, bias, relu):
    if bias is not None:
        y = y + bias.reshape(1, -1, 1, 1)
    return np.maximum(y, 0) if relu else y


# (id, data (c, h, w) for any n, conv a, conv b reading a's output)
CASES = [
    # the convnet's pair: output rows of 32 whole vectors, then stride 2 (two column phases)
    ("convnet_w32", (3, 32, 32), Conv(16, 3, 1, 1), Conv(32, 3, 2, 1)),
    ("ragged_w11_b_stride3_pad2", (4, 13, 11), Conv(6, 3, 1, 1), Conv(5, 3, 3, 2)),
    ("ragged_w13_b_dilation2", (3, 9, 13), Conv(8, 3, 1, 0), Conv(4, 3, 1, 2, dilation=2)),
    ("ragged_w17_b_stride2", (2, 17, 17), Conv(9, 3, 1, 0), Conv(4, 3, 2, 1)),
    ("a_5x5_stride2_w20_b_pointwise", (3, 9, 20), Conv(12, 5, 2, 2), Conv(7, 1, 1, 0)),
    ("a_pointwise", (8, 16, 16), Conv(16, 1), Conv(8, 3, 1, 1)),
    ("a_stride2_w32_b_w16", (8, 16, 32), Conv(16, 3, 2, 1), Conv(16, 3, 1, 1)),
    ("b_groups2", (4, 12, 12), Conv(8, 3, 1, 1), Conv(6, 3, 2, 1, groups=2)),
    ("both_groups2_w20_b_stride3", (4, 10, 20), Conv(8, 3, 1, 1, groups=2),
     Conv(4, 3, 3, 1, groups=2)),
    ("b_stride3_pad0_w32", (3, 8, 32), Conv(8, 3, 1, 1), Conv(6, 3, 3, 0)),
    ("a_dilation2", (4, 13, 13), Conv(6, 3, 1, 2, dilation=2), Conv(5, 3, 2, 0)),
    ("b_5x5_stride2_pad2_w20", (3, 11, 20), Conv(8, 3, 1, 1), Conv(6, 5, 2, 2)),
    # rectangular windows and strides, padding on one side only
    ("asymmetric", (3, 9, 11), Conv(6, (3, 2), (1, 2), (1, 0, 0, 1)),
     Conv(5, (2, 3), (2, 3), (1, 2, 0, 1), dilation=(1, 2))),
    # one input channel (groups 1, not depthwise) and one channel between the convs
    ("one_channel_in_and_between", (1, 12, 12), Conv(1, 3, 1, 1), Conv(4, 3, 2, 1)),
    # borders of more than 64 columns are cleared as whole rows
    ("b_wide_padding", (2, 5, 7), Conv(4, 3, 1, 1), Conv(3, 3, 1, (1, 34, 1, 34))),
    # b's first and last rows read only padding: a band of them needs no rows of a
    ("b_tall_padding", (2, 5, 7), Conv(4, 3, 1, 1), Conv(3, 3, 1, (9, 1, 9, 1))),
    # Planes small enough for the transposed form (conv_gemm.c): the pair runs as two convs.
    ("small_planes_transposed", (16, 4, 5), Conv(32, 3, 1, 1), Conv(64, 3, 2, 1)),
    ("b_pointwise_7x7_transposed", (8, 7, 7), Conv(16, 3, 1, 1), Conv(80, 1)),
]
CASE_IDS = [c[0] for c in CASES]

# (threads, n): each image is cut into threads / gcd(n, threads) bands (one band: the image
# whole), so the items divide evenly among the threads.
MODES = [(1, 1), (1, 5), (2, 1), (2, 3), (2, 4), (3, 1), (3, 2)]
MODE_IDS = [f"t{t}-n{n}-bands{t // math.gcd(n, t)}" for t, n in MODES]

# (bias a, relu a, bias b, relu b, mean)
EPILOGUES = [
    (False, False, False, False, False),
    (True, True, True, True, False),
    (True, True, True, True, True),
    (True, True, False, False, False),
    (False, False, True, True, True),
    (False, True, False, True, True),
    (True, False, True, False, False),
]


@pytest.fixture
def restore_threads():
    before = threads.get_num_threads()
    yield
    threads.set_num_threads(before)


def _arrays(case, n, seed):
    _, (c, h, w), a, b = case
    rng = np.random.default_rng(seed)
    oh, ow = a.out_hw(h, w)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wa = (rng.standard_normal(a.weight_shape(c)) * 0.3).astype(np.float32)
    wb = (rng.standard_normal(b.weight_shape(a.oc)) * 0.3).astype(np.float32)
    ba = rng.standard_normal(a.oc).astype(np.float32)
    bb = rng.standard_normal(b.oc).astype(np.float32)
    return x, wa, ba, wb, bb, (oh, ow)


RELU = np.array([0, np.inf], np.float32)


def _relu(on):
    """The kernels' clamp argument for relu (0 to infinity), or NULL: no clamp."""
    ffi = load()[0]
    return ffi.from_buffer("float[]", RELU) if on else ffi.NULL


def _setup(case, n):
    """(ffi, lib, both convs' shape structs, the middle's (oh, ow), a pointer maker)."""
    ffi, lib = load()
    _, (c, h, w), a, b = case
    oh, ow = a.out_hw(h, w)
    sa, sb = a.struct(ffi, n, c, h, w), b.struct(ffi, n, a.oc, oh, ow)
    ptr = lambda v: ffi.NULL if v is None else ffi.from_buffer(v)  # noqa: E731
    return lib, sa, sb, (oh, ow), ptr


def _packed(lib, shape, w):
    """w as relvm_conv2d_pack_weights lays it out for ``shape`` (None where it is read as it is)."""
    size = lib.relvm_conv2d_packed_size(shape)
    if size == 0:
        return None
    out = np.full(size, np.nan, np.float32)
    ffi = load()[0]
    lib.relvm_conv2d_pack_weights(shape, ffi.from_buffer(w), ffi.from_buffer(out))
    return out


def _pair(case, x, wa, ba, relu_a, wb, bb, relu_b, mean, prepacked=False):
    """relvm_conv2d_pair's status and output (NaN where it wrote nothing); with ``prepacked``,
    the weights are packed beforehand (else the call packs them)."""
    n, b = x.shape[0], case[3]
    lib, sa, sb, mid_hw, ptr = _setup(case, n)
    y = np.full((n, b.oc) if mean else (n, b.oc) + b.out_hw(*mid_hw), np.nan, np.float32)
    packs = (_packed(lib, sa, wa), _packed(lib, sb, wb)) if prepacked else (None, None)
    status = lib.relvm_conv2d_pair(0, sa, sb, ptr(x), ptr(wa), ptr(ba), _relu(relu_a),
                                   ptr(wb), ptr(y), ptr(bb), _relu(relu_b), int(mean),
                                   *map(ptr, packs))
    return status, y


def _two_convs(case, x, wa, ba, relu_a, wb, bb, relu_b, mean):
    """The same through two relvm_conv2d calls (the middle stored), then NumPy's mean."""
    n, (_, _, a, b) = x.shape[0], case
    lib, sa, sb, mid_hw, ptr = _setup(case, n)
    mid = np.full((n, a.oc) + mid_hw, np.nan, np.float32)
    y = np.full((n, b.oc) + b.out_hw(*mid_hw), np.nan, np.float32)
    null = ptr(None)
    assert lib.relvm_conv2d(0, sa, ptr(x), ptr(wa), ptr(mid), ptr(ba), _relu(relu_a), null,
                            null, null) == 0
    assert lib.relvm_conv2d(0, sb, ptr(mid), ptr(wb), ptr(y), ptr(bb), _relu(relu_b), null,
                            null, null) == 0
    return y.mean(axis=(2, 3)) if mean else y


@pytest.mark.parametrize("nthreads,n", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_pair_matches_two_conv_calls(restore_threads, case, nthreads, n):
    """For every epilogue (bias on either conv or none, relu on either, mean or not), the pair
    writes every output element, equal to two relvm_conv2d calls with the middle stored."""
    threads.set_num_threads(nthreads)
    x, wa, ba, wb, bb, _ = _arrays(case, n, seed=len(case[0]) + n)
    for bias_a, relu_a, bias_b, relu_b, mean in EPILOGUES:
        args = (x, wa, ba if bias_a else None, relu_a, wb, bb if bias_b else None, relu_b, mean)
        status, got = _pair(case, *args)
        what = f"bias {bias_a}/{bias_b} relu {relu_a}/{relu_b} mean {mean}"
        assert status == 0, what
        np.testing.assert_allclose(got, _two_convs(case, *args), rtol=1e-4, atol=1e-4,
                                   err_msg=what)


FLOAT64_CASES = [c for c in CASES if c[0] in (
    "convnet_w32", "ragged_w11_b_stride3_pad2", "a_5x5_stride2_w20_b_pointwise",
    "both_groups2_w20_b_stride3", "asymmetric", "ragged_w13_b_dilation2",
    "small_planes_transposed", "b_pointwise_7x7_transposed")]


@pytest.mark.parametrize("mean", [False, True], ids=["full", "mean"])
@pytest.mark.parametrize("nthreads,n", [(2, 1), (2, 5)], ids=["t2-n1-bands2", "t2-n5-bands2"])
@pytest.mark.parametrize("case", FLOAT64_CASES, ids=[c[0] for c in FLOAT64_CASES])
def test_pair_matches_float64_reference(restore_threads, case, nthreads, n, mean):
    """conv -> bias -> relu -> conv -> bias -> relu [-> mean] against a direct float64 conv."""
    threads.set_num_threads(nthreads)
    _, _, a, b = case
    x, wa, ba, wb, bb, _ = _arrays(case, n, seed=99)
    status, got = _pair(case, x, wa, ba, True, wb, bb, True, mean)
    assert status == 0
    want = _epilogue(direct_conv(_epilogue(direct_conv(x, wa, a), ba, True), wb, b), bb, True)
    if mean:
        want = want.mean(axis=(2, 3))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _full_and_mean(case, n, seed):
    """The arguments of conv -> bias -> relu -> conv -> bias -> relu, then with the mean."""
    x, wa, ba, wb, bb, _ = _arrays(case, n, seed)
    return [(x, wa, ba, True, wb, bb, True, mean) for mean in (False, True)]


@pytest.mark.parametrize("nthreads,n", [(1, 3), (2, 1)], ids=["t1-n3", "t2-n1-bands2"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_pair_with_weights_packed_beforehand_gives_the_same_numbers(restore_threads, case,
                                                                    nthreads, n):
    """Weights packed once by relvm_conv2d_pack_weights (a constant's) and weights the call
    packs itself give bit-identical outputs; convs whose rows are not whole vectors read their
    weights as they are (packed size 0)."""
    threads.set_num_threads(nthreads)
    for args in _full_and_mean(case, n, seed=21):
        status, want = _pair(case, *args)
        packed_status, got = _pair(case, *args, prepacked=True)
        assert status == packed_status == 0
        np.testing.assert_array_equal(got, want)


def test_packed_size_is_zero_where_weights_are_read_as_they_are():
    """Weights are packed by row blocks wherever the GEMM runs untransposed: output rows of
    whole vectors, any width at stride 1 (the grid form), and a strided conv over ragged rows
    (panels of its image packed); only a depthwise conv reads its weights as they are."""
    lib = load()[1]
    whole, ragged = _shapes(w=32), _shapes(w=7)
    strided = _shapes(w=9, a=Conv(4, 3, 2, 1))  # 5 output columns: ragged at every width
    assert lib.relvm_conv2d_packed_size(whole[0]) == 4 * 3 * 3 * 3
    assert lib.relvm_conv2d_packed_size(ragged[0]) == 4 * 3 * 3 * 3
    assert lib.relvm_conv2d_packed_size(strided[0]) == 4 * 3 * 3 * 3
    depthwise = _shapes(c=4, w=32, a=Conv(4, 3, 1, 1, groups=4))[0]
    assert lib.relvm_conv2d_packed_size(depthwise) == 0


def test_pair_reads_new_input_values_on_every_call(restore_threads):
    """Threads keep the images they padded for a call; the next call (same shapes, same
    arrays, new values) must pad them again, whole or in bands."""
    case = CASES[1]
    for nthreads, n in ((1, 1), (1, 5), (2, 1), (2, 5)):
        threads.set_num_threads(nthreads)
        x, wa, ba, wb, bb, _ = _arrays(case, n, seed=3)
        for _ in range(3):
            args = (x, wa, ba, True, wb, bb, False, False)
            status, got = _pair(case, *args)
            assert status == 0
            np.testing.assert_allclose(got, _two_convs(case, *args), rtol=1e-4, atol=1e-4)
            x *= -0.5  # in place: the same buffer, new values
            wa += 0.1


def test_pair_after_a_larger_pair_and_bands_agree(restore_threads):
    """Scratch left by a larger call (and by one cut into bands) does not leak into a smaller
    one; whole images and bands give the same numbers."""
    big, small = CASES[0], CASES[3]
    results = []
    for nthreads in (1, 2):
        threads.set_num_threads(nthreads)
        for case in (big, small, big):
            x, wa, ba, wb, bb, _ = _arrays(case, 3, seed=5)
            args = (x, wa, ba, True, wb, bb, True, False)
            status, got = _pair(case, *args)
            assert status == 0
            np.testing.assert_allclose(got, _two_convs(case, *args), rtol=1e-4, atol=1e-4)
            if case is small:
                results.append(got)
    # n = 3: whole images on one thread, two bands each on two
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-5)


# b's padded input is 3.4 MB an image: cut into 8 bands or more (16 with two threads), each
# reading 6 rows of its neighbours' through the dilated window; rows of 100 pixels are ragged.
LARGE = ("large_ragged_b_dilation3", (3, 120, 100), Conv(64, 3, 1, 1),
         Conv(8, 3, 1, 3, dilation=3))


@pytest.mark.parametrize("nthreads,n", [(1, 1), (2, 1), (2, 2)], ids=["t1-n1", "t2-n1", "t2-n2"])
def test_images_too_large_for_cache_run_in_bands(restore_threads, nthreads, n):
    threads.set_num_threads(nthreads)
    for args in _full_and_mean(LARGE, n, seed=11):
        status, got = _pair(LARGE, *args)
        assert status == 0
        np.testing.assert_allclose(got, _two_convs(LARGE, *args), rtol=1e-4, atol=1e-4)


def _shapes(n=2, c=3, h=6, w=7, a=Conv(4, 3, 1, 1), b=Conv(5, 3, 1, 1)):
    ffi, _ = load()
    oh, ow = a.out_hw(h, w)
    return a.struct(ffi, n, c, h, w), b.struct(ffi, n, a.oc, oh, ow)


def _call(sa, sb, dtype=0, mean=0):
    """relvm_conv2d_pair on buffers large enough for any shape below; its status and y."""
    ffi, lib = load()
    buf = np.ones(4096, np.float32)
    y = np.full(4096, 7.0, np.float32)
    p = ffi.from_buffer
    relu = _relu(True)
    return lib.relvm_conv2d_pair(dtype, sa, sb, p(buf), p(buf), p(buf), relu, p(buf), p(y),
                                 p(buf), relu, mean, ffi.NULL, ffi.NULL), y


def _edited(**changes):
    """The default shapes with fields changed: ``b_n=3`` sets b->n."""
    sa, sb = _shapes()
    for key, value in changes.items():
        side, field = key.split("_", 1)
        setattr(sa if side == "a" else sb, field, value)
    return sa, sb


# (id, shapes, dtype, status)
REFUSED = [
    ("float32_accepted", lambda: _shapes(), 0, 0),  # the baseline
    ("dtype_not_float32", lambda: _shapes(), 1, UNSUPPORTED),
    ("depthwise_a", lambda: _shapes(c=4, a=Conv(4, 3, 1, 1, groups=4)), 0, UNSUPPORTED),
    ("depthwise_b", lambda: _shapes(b=Conv(4, 3, 1, 1, groups=4)), 0, UNSUPPORTED),
    ("a_no_input_channels", lambda: _shapes(c=0), 0, UNSUPPORTED),
    ("b_no_input_channels", lambda: _shapes(a=Conv(0, 3, 1, 1)), 0, UNSUPPORTED),
    ("b_other_n", lambda: _edited(b_n=3), 0, UNSUPPORTED),
    ("b_other_c", lambda: _edited(b_c=5), 0, UNSUPPORTED),
    ("b_other_h", lambda: _edited(b_h=5, b_oh=5), 0, UNSUPPORTED),
    ("b_other_w", lambda: _edited(b_w=8, b_ow=8), 0, UNSUPPORTED),
    # empty planes, even where padding makes the output non-empty
    ("a_empty_plane", lambda: _shapes(h=0, a=Conv(4, 3, 1, 2)), 0, UNSUPPORTED),
    ("b_empty_plane", lambda: _shapes(w=2, a=Conv(4, 3, 1, 0), b=Conv(5, 1)), 0, UNSUPPORTED),
    ("b_empty_output", lambda: _shapes(h=4, w=4, a=Conv(4, 3, 1, 0), b=Conv(5, 3, 1, 0)), 0,
     UNSUPPORTED),
    ("b_groups_not_dividing_oc", lambda: _edited(b_groups=2), 0, UNSUPPORTED),
    ("negative_n", lambda: _edited(a_n=-1, b_n=-1), 0, UNSUPPORTED),
]


@pytest.mark.parametrize("shapes,dtype,want", [r[1:] for r in REFUSED],
                         ids=[r[0] for r in REFUSED])
def test_pair_refuses_what_it_does_not_run(shapes, dtype, want):
    """RELVM_UNSUPPORTED for another dtype, depthwise convs, convs without input channels,
    b not reading a's output, and empty planes (the caller runs those step by step)."""
    status, _ = _call(*shapes(), dtype=dtype)
    assert status == want


@pytest.mark.parametrize("mean", [0, 1])
@pytest.mark.parametrize("what", ["n0", "oc0"])
def test_pair_of_nothing_succeeds_and_writes_nothing(what, mean):
    """No images or no output channels: RELVM_OK, y untouched."""
    sa, sb = _shapes(n=0) if what == "n0" else _shapes(b=Conv(0, 3, 1, 1))
    status, y = _call(sa, sb, mean=mean)
    assert status == 0
    assert (y == 7.0).all()


# --- packed.match: which fused steps are a pair --------------------------------------------------

def _listed(v):
    return [_listed(x) for x in v] if isinstance(v, tuple) else v


def _step(op, args, **attrs):
    return {"op": op, "attrs": {k: _listed(v) for k, v in OPS[op].make_attrs(attrs).items()},
            "args": [list(a) for a in args]}


def pair_steps(a=Conv(6, 3, 1, 1), b=Conv(5, 3, 2, 1), bias_a=True, relu_a=True, bias_b=True,
               relu_b=True, mean=True, bias_axis=1):
    """conv(in 0, in 1) -> [bias_add(in 2)] -> [relu] -> conv(in k) -> [bias_add] -> [relu]
    -> [global_avg_pool2d], inputs numbered in order of first use."""
    steps = [_step("nn.conv2d", [("in", 0), ("in", 1)], **a.relay_attrs())]
    inputs = 2

    def tail(bias, relu, pool):
        nonlocal inputs
        if bias:
            steps.append(_step("nn.bias_add", [("step", len(steps) - 1), ("in", inputs)],
                               axis=bias_axis))
            inputs += 1
        if relu:
            steps.append(_step("nn.relu", [("step", len(steps) - 1)]))
        if pool:
            steps.append(_step("nn.global_avg_pool2d", [("step", len(steps) - 1)]))
    tail(bias_a, relu_a, False)
    steps.append(_step("nn.conv2d", [("step", len(steps) - 1), ("in", inputs)],
                       **b.relay_attrs()))
    inputs += 1
    tail(bias_b, relu_b, mean)
    return steps, inputs


def test_match_reads_the_convnet_pair():
    """conv -> bias_add -> relu -> conv -> bias_add -> relu -> pool: a Pair with the second
    weight at input 3 and the biases at inputs 2 and 4, along the channel axis."""
    steps, _ = pair_steps()
    pair = packed.match(steps)
    assert isinstance(pair, packed.Pair)
    assert pair.weight == 3
    relu = (0.0, float("inf"))
    assert (pair.first.bias, pair.first.axis % 4, pair.first.clamp, pair.first.mean) == (
        2, 1, relu, False)
    assert (pair.second.bias, pair.second.axis % 4, pair.second.clamp, pair.second.mean) == (
        4, 1, relu, True)


@pytest.mark.parametrize("bias_a,relu_a,bias_b,relu_b,mean,weight,bias_at", [
    (False, False, False, False, False, 2, (None, None)),
    (False, True, True, False, False, 2, (None, 3)),
    (True, False, False, True, True, 3, (2, None)),
], ids=["bare", "relu_a_bias_b", "bias_a_relu_b_mean"])
def test_match_reads_pairs_with_any_epilogues(bias_a, relu_a, bias_b, relu_b, mean, weight,
                                              bias_at):
    steps, _ = pair_steps(bias_a=bias_a, relu_a=relu_a, bias_b=bias_b, relu_b=relu_b,
                          mean=mean)
    pair = packed.match(steps)
    assert isinstance(pair, packed.Pair)
    assert pair.weight == weight
    assert (pair.first.bias, pair.second.bias) == bias_at
    clamps = [(0.0, float("inf")) if relu else None for relu in (relu_a, relu_b)]
    assert [pair.first.clamp, pair.second.clamp] == clamps
    assert (pair.first.mean, pair.second.mean) == (False, mean)


def _malformed():
    steps, _ = pair_steps()
    second = steps[3]
    yield "second_conv_reads_an_input", steps[:3] + [
        dict(second, args=[["in", 0], ["in", 3]])] + steps[4:]
    yield "second_weight_is_a_step", steps[:3] + [
        dict(second, args=[["step", 2], ["step", 1]])] + steps[4:]
    mean_first = steps[:3] + [_step("nn.global_avg_pool2d", [("step", 2)]),
                              dict(second, args=[["step", 3], ["in", 3]])]
    yield "mean_after_the_first_conv", mean_first
    dense = [_step("nn.dense", [("in", 0), ("in", 1)], units=6),
             _step("nn.bias_add", [("step", 0), ("in", 2)], axis=-1),
             _step("nn.relu", [("step", 1)]),
             dict(second, args=[["step", 2], ["in", 3]])]
    yield "dense_then_conv", dense
    yield "step_after_the_pool", steps + [_step("nn.relu", [("step", len(steps) - 1)])]
    yield "sigmoid_after_the_second_conv", steps[:5] + [
        _step("sigmoid", [("step", 4)])]
    three, n_in = pair_steps(mean=False)
    third = dict(second, args=[["step", len(three) - 1], ["in", n_in]])
    yield "three_convs", three + [third]
    yield "relu_reads_an_input", steps[:2] + [_step("nn.relu", [("in", 2)])] + steps[3:]


MALFORMED = list(_malformed())


@pytest.mark.parametrize("steps", [m[1] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_match_refuses_malformed_pairs(steps):
    """Steps that are not exactly conv [epilogue] conv [epilogue] [pool], each reading the step
    before it: not a pair, and not a one-call kernel at all."""
    assert packed.match(steps) is None


# --- the fused kernel: one C call, or the fallback -----------------------------------------------

def _pair_entry(a, b, **kw):
    steps, inputs = pair_steps(a, b, **kw)
    return KernelEntry("fused_pair_test", "fused", {"steps": steps}, ("float32",) * inputs,
                       ("float32",))


def _make(entry):
    """The entry's kernel through packed.make_fused, and a list of the fallbacks it made."""
    made = []

    def fallback():  # the generic fused kernel: the steps' C kernels one by one
        made.append(make_chain(entry, c.make_kernel))
        return made[-1]

    assert packed.supports(entry)
    return packed.make_fused(entry, None, fallback), made


def _inputs_for(entry, data, a, b, bias_shapes=(None, None), seed=0):
    """Random inputs for a pair entry (data, weights, biases of ``bias_shapes``, else one per
    output channel) and what its steps give, run one by one with the ops' references."""
    rng = np.random.default_rng(seed)
    shapes, convs = [data, a.weight_shape(data[1])], 0
    for step in entry.attrs["steps"][1:]:
        if step["op"] == "nn.conv2d":
            convs += 1
            shapes.append(b.weight_shape(a.oc))
        elif step["op"] == "nn.bias_add":
            shapes.append(bias_shapes[convs] or ((a.oc, b.oc)[convs],))
    arrays = [(rng.standard_normal(s) * (0.3 if len(s) == 4 and i else 1)).astype(np.float32)
              for i, s in enumerate(shapes)]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean of an empty plane
        want = run_steps(steps_from_json(entry.attrs["steps"]), arrays)
    return arrays, want


@pytest.mark.parametrize("mean", [False, True], ids=["full", "mean"])
@pytest.mark.parametrize("n", [0, 1, 5])
@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[8]],
                         ids=[CASE_IDS[0], CASE_IDS[1], CASE_IDS[8]])
def test_fused_pair_is_one_call(restore_threads, case, n, mean):
    """A pair entry runs as one C call (the fallback is never made) and matches the steps run
    one by one with the ops' references."""
    threads.set_num_threads(2)
    _, chw, a, b = case
    entry = _pair_entry(a, b, mean=mean)
    kernel, made = _make(entry)
    arrays, want = _inputs_for(entry, (n,) + chw, a, b)
    out = np.full(want.shape, np.nan, np.float32)
    kernel(*arrays, out)
    kernel(*arrays, out)  # the plan is kept per shapes
    assert not made
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("data,a,b,mean,bias_axis", [
    # an empty input plane padded to a non-empty output: the C call does not take it
    ((2, 3, 0, 5), Conv(4, 3, 1, 2), Conv(5, 3, 1, 1), False, 1),
    ((2, 3, 0, 5), Conv(4, 3, 1, 2), Conv(5, 3, 1, 1), True, 1),
    # no input channels: the first conv is its bias
    ((2, 0, 6, 7), Conv(4, 3, 1, 1), Conv(5, 3, 2, 1), False, 1),
    ((2, 0, 6, 7), Conv(4, 3, 1, 1), Conv(5, 3, 2, 1), True, 1),
    # no channels between the convs: the second conv is its bias (found by the fuzzer: the
    # kernel raised "arguments the kernel does not support")
    ((3, 3, 3, 3), Conv(0, 1, 1, 0), Conv(3, 3, 1, 1), False, 1),
    ((3, 3, 3, 3), Conv(0, 1, 1, 0), Conv(3, 3, 1, 1), True, 1),
    # biases along the width axis (legal for bias_add, not for the C epilogue)
    ((2, 3, 8, 8), Conv(8, 3, 1, 1), Conv(8, 3, 1, 1), False, 3),
], ids=["empty_plane", "empty_plane_mean", "no_input_channels", "no_input_channels_mean",
        "no_channels_between", "no_channels_between_mean", "bias_on_width"])
def test_fused_pair_shapes_the_c_call_does_not_take_use_the_fallback(data, a, b, mean,
                                                                     bias_axis):
    """Shapes relvm_conv2d_pair refuses run through the generic fused kernel, and still match
    the steps run one by one."""
    entry = _pair_entry(a, b, mean=mean, bias_axis=bias_axis)
    kernel, made = _make(entry)
    oh, ow = a.out_hw(*data[2:])
    bias_shapes = ((ow,), (b.out_hw(oh, ow)[1],)) if bias_axis == 3 else (None, None)
    arrays, want = _inputs_for(entry, data, a, b, bias_shapes)
    out = np.full(want.shape, 7.0, np.float32)
    kernel(*arrays, out)
    assert len(made) == 1
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, equal_nan=True)


def test_fused_pair_through_the_c_backend_matches_float64(restore_threads):
    """c.make_kernel picks the pair kernel for the entry; float64 direct convs agree."""
    _, chw, a, b = CASES[4]
    entry = _pair_entry(a, b)
    kernel = c.make_kernel(entry)
    for nthreads, n in ((1, 1), (2, 6)):
        threads.set_num_threads(nthreads)
        arrays, _ = _inputs_for(entry, (n,) + chw, a, b, seed=n)
        x, wa, ba, wb, bb = arrays
        out = np.full((n, b.oc, 1, 1), np.nan, np.float32)
        kernel(*arrays, out)
        want = _epilogue(direct_conv(_epilogue(direct_conv(x, wa, a), ba, True), wb, b), bb, True)
        np.testing.assert_allclose(out, want.mean(axis=(2, 3), keepdims=True), rtol=1e-4,
                                   atol=1e-4)


# --- the AVX2 and SSE2 GEMM kernels -------------------------------------------------------------

@pytest.mark.parametrize("isa", ["avx2", "sse2"])
def test_lesser_instruction_sets_give_the_same_results(isa, rerun_under_isa):
    """The pair's C tests again, on the AVX2 and SSE2 kernels (chosen once per process)."""
    rerun_under_isa(isa, __file__, 'test_pair_ or fused_pair')
