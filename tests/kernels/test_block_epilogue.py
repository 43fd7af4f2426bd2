"""Elementwise epilogues run inside the product: a fused dense or conv followed by any
elementwise chain (SiLU, GELU, tanh, a residual add, ...) runs the chain's generated ``_block``
form over each block of the product's output while it is in cache (``relvm_block_fn``), in the
same C call, instead of a second pass over the output.

Every case is checked against the reference interpreter on the default build (C kernels,
fusion on), and the kernel is checked to really run the chain inside the product. The blocks
cover dense layers (tiles, row chunks, panels past the output's edge), convs on both GEMM paths
(the padded image read in place, or packed 32-pixel panels), pointwise, grouped, strided and
depthwise convs, and convs without input channels; operands that broadcast along channels,
over the batch, or are scalars.
"""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm.testing.reference import evaluate

RNG = np.random.default_rng(7)


def _f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _vm_and_kernel(text: str, params: dict):
    mod = relvm.parse(text)
    exe = relvm.build(mod, params=params)
    vm = relvm.VirtualMachine(exe)
    fused = [k for k, entry in enumerate(exe.kernels) if entry.op == "fused"]
    assert len(fused) == 1, exe.bytecode
    return mod, vm, vm.kernel(fused[0])


def _check(text: str, params: dict, inputs: list[np.ndarray], in_product: bool = True):
    mod, vm, kernel = _vm_and_kernel(text, params)
    got = vm.invoke("main", *inputs)
    assert getattr(kernel, "in_product", False) is in_product
    want = evaluate(mod, *inputs, params=params)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


DENSE = """def @main(%x: Tensor[(n, {k}), float32], %w: Tensor[({u}, {k}), float32],
                    %b: Tensor[({u}), float32], %r: Tensor[(n, {u}), float32]) {{
  %0 = nn.bias_add(nn.dense(%x, %w), %b);
  {chain}
}}"""

CHAINS = {
    "tanh": "tanh(%0)",
    "silu_residual": "add(multiply(%0, sigmoid(%0)), %r)",
    "gelu": "multiply(multiply(%0, 0.5f), add(erf(multiply(%0, 0.70710677f)), 1f))",
    "clip_scale": "multiply(clip(%0, a_min=-1f, a_max=6f), %r)",
}


@pytest.mark.parametrize("chain", sorted(CHAINS))
@pytest.mark.parametrize("n,k,u", [(1, 16, 8), (5, 64, 33), (64, 96, 100), (200, 40, 64)])
def test_dense_chains_run_inside_the_product(chain, n, k, u):
    params = {"w": _f32(u, k, scale=0.2), "b": _f32(u)}
    text = DENSE.format(k=k, u=u, chain=CHAINS[chain])
    _check(text, params, [_f32(n, k), _f32(n, u)])


def test_dense_weights_that_are_inputs_run_the_product_then_the_chain():
    """Weights that are not constants are not packed ahead: the product goes to the generic
    GEMM, then the chain runs over the whole output (the same kernel, the other path)."""
    text = DENSE.format(k=24, u=40, chain=CHAINS["silu_residual"])
    params = {"b": _f32(40)}
    mod, vm, kernel = _vm_and_kernel(text, params)
    assert kernel.in_product
    x, w, r = _f32(9, 24), _f32(40, 24, scale=0.2), _f32(9, 40)
    np.testing.assert_allclose(vm.invoke("main", x, w, r),
                               evaluate(mod, x, w, r, params=params), rtol=2e-4, atol=2e-4)


CONV = """def @main(%x: Tensor[(n, {c}, {h}, {w}), float32], %wt: Tensor[({oc}, {cg}, {kh}, {kw}), float32],
                    %b: Tensor[({oc}), float32], %r: Tensor[({rshape}), float32]) {{
  %0 = nn.bias_add(nn.conv2d(%x, %wt, strides=[{s}, {s}], padding=[{p}, {p}], groups={g}), %b);
  add(multiply(%0, sigmoid(%0)), %r)
}}"""


@pytest.mark.parametrize("c,oc,h,w,k,s,p,g", [
    (8, 16, 16, 16, 3, 1, 1, 1),     # rows of whole vectors: the padded image read in place
    (8, 16, 7, 9, 3, 1, 1, 1),       # ragged rows: packed 32-pixel panels
    (16, 32, 10, 10, 1, 1, 0, 1),    # pointwise: the input read as it is
    (8, 20, 10, 13, 1, 1, 0, 1),     # pointwise, ragged rows: in place, the last panel packed
    (8, 8, 12, 12, 3, 2, 1, 2),      # grouped, strided
    (12, 12, 9, 11, 3, 1, 1, 12),    # depthwise: each plane finished in cache
    (6, 12, 8, 8, 5, 2, 2, 6),       # depthwise with a channel multiplier, 5x5
    (16, 48, 3, 4, 3, 1, 1, 1),      # a small plane: the transposed form, a ragged panel
    (64, 80, 7, 7, 1, 1, 0, 1),      # pointwise over 7 x 7: transposed
    (8, 64, 4, 4, 3, 2, 1, 2),       # grouped, strided, small: transposed
    (64, 64, 9, 11, 3, 1, 1, 1),     # k of 576: the direct form, k in blocks, rows in bands
    (120, 62, 7, 9, 3, 2, 1, 2),     # direct, grouped, strided, a ragged panel of channels
    (600, 64, 14, 14, 1, 1, 0, 1),   # pointwise, 600 -> 64 channels: direct, a band one run
])
@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("residual", ["full", "channels", "scalar", "batch_one"])
def test_conv_chains_run_inside_the_product(c, oc, h, w, k, s, p, g, n, residual):
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    rshape = {"full": f"n, {oc}, {oh}, {ow}", "channels": f"{oc}, 1, 1", "scalar": "",
              "batch_one": f"1, {oc}, {oh}, {ow}"}[residual]
    text = CONV.format(c=c, h=h, w=w, oc=oc, cg=c // g, kh=k, kw=k, s=s, p=p, g=g,
                       rshape=rshape)
    params = {"wt": _f32(oc, c // g, k, k, scale=0.3), "b": _f32(oc)}
    r_shape = {"full": (n, oc, oh, ow), "channels": (oc, 1, 1), "scalar": (),
               "batch_one": (1, oc, oh, ow)}[residual]
    _check(text, params, [_f32(n, c, h, w), _f32(*r_shape)])


SMALL_PLANES = """def @main(%x: Tensor[(n, 24, h, w), float32]) {
  %0 = nn.bias_add(nn.conv2d(%x, meta[relay.Constant][0], padding=[1, 1]),
                   meta[relay.Constant][1]);
  %1 = nn.relu(%0);
  (%1, nn.global_avg_pool2d(nn.relu(nn.conv2d(%x, meta[relay.Constant][2], padding=[1, 1]))))
}"""


def test_one_weight_at_plane_sizes_of_both_forms_in_one_vm():
    """A conv's constant weights are packed per form (dense-layer panels for a small plane's
    transposed GEMM, row blocks for the usual one): one VM, planes of both kinds in turn, and a
    conv ending in a mean on each."""
    consts = [_f32(40, 24, 3, 3, scale=0.3), _f32(40), _f32(64, 24, 3, 3, scale=0.3)]
    mod = relvm.parse(SMALL_PLANES, constants=consts)
    vm = relvm.VirtualMachine(relvm.build(mod))
    for n, h, w in [(1, 2, 3), (2, 16, 16), (1, 5, 5), (3, 2, 3), (1, 16, 16)]:
        x = _f32(n, 24, h, w)
        got, want = vm.invoke("main", x), evaluate(mod, x)
        for g, e in zip(got, want):
            np.testing.assert_allclose(g, e, rtol=2e-4, atol=2e-4)


def test_a_conv_without_input_channels_still_runs_its_chain():
    text = CONV.format(c=0, h=5, w=5, oc=4, cg=0, kh=3, kw=3, s=1, p=1, g=1,
                       rshape="n, 4, 5, 5")
    _check(text, {"wt": np.zeros((4, 0, 3, 3), np.float32), "b": _f32(4)},
           [np.zeros((2, 0, 5, 5), np.float32), _f32(2, 4, 5, 5)])


def test_the_chain_sees_every_element_once_on_one_and_two_threads():
    """tanh twice would show: each block is run exactly once, whatever the split."""
    text = DENSE.format(k=32, u=70, chain="tanh(%0)")
    params = {"w": _f32(70, 32, scale=0.2), "b": _f32(70)}
    before = relvm.get_num_threads()
    try:
        for threads in (1, 2):
            relvm.set_num_threads(threads)
            _check(text, params, [_f32(37, 32), _f32(37, 70)])
    finally:
        relvm.set_num_threads(before)


@pytest.mark.parametrize("c,oc,h,w,k,s,p,g", [
    (8, 200, 21, 37, 3, 1, 1, 1),     # ragged rows on the grid, several chunks of channels
    (16, 96, 19, 48, 3, 1, 1, 2),     # whole-vector rows read in place, grouped
    (24, 100, 30, 30, 1, 1, 0, 1),    # pointwise over 900 pixels
    (8, 40, 41, 64, 3, 2, 1, 1),      # strided, read in place
    (64, 96, 23, 29, 3, 1, 1, 1),     # the direct form: bands of rows, three panels
    (576, 96, 14, 14, 1, 1, 0, 1),    # pointwise direct: bands of several rows as one run
])
def test_conv_chains_over_large_planes_see_every_pixel_once(c, oc, h, w, k, s, p, g):
    """A conv runs its chain over runs of consecutive panels of a chunk at once (up to 256
    pixels, kernels/conv_gemm.c): planes of many panels, on one and two threads (which split
    the runs), with tanh, which run twice over a pixel would show."""
    text = CONV.format(c=c, h=h, w=w, oc=oc, cg=c // g, kh=k, kw=k, s=s, p=p, g=g,
                       rshape="1").replace("add(multiply(%0, sigmoid(%0)), %r)",
                                           "add(tanh(%0), %r)")
    params = {"wt": _f32(oc, c // g, k, k, scale=0.3), "b": _f32(oc)}
    before = relvm.get_num_threads()
    try:
        for threads in (1, 2):
            relvm.set_num_threads(threads)
            _check(text, params, [_f32(2, c, h, w), _f32(1)])
    finally:
        relvm.set_num_threads(before)


@pytest.mark.parametrize("isa", ["avx2", "sse2"])
def test_lesser_instruction_sets_run_the_same_blocks(isa, rerun_under_isa):
    rerun_under_isa(isa, __file__, "inside_the_product and not threads")
