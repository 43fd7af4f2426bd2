"""The channels-last pass (relvm/passes/layout.py): which convs go NHWC, where the transposes
are, what follows the convs into NHWC, and that the numbers are the NCHW build's."""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm.compiler import optimize
from relvm.ir.nodes import Call, post_order
from relvm.passes.layout import channels_last_convs
from relvm.passes.type_infer import infer_module

# An inverted residual block with a squeeze-and-excitation scale and SiLU (MobileNetV3 /
# EfficientNet), then the input concatenated to the result along the channels.
MOBILE = """def @main(%x: Tensor[(n, 16, 10, 10), float32], %w1: Tensor[(48, 16, 1, 1), float32],
          %b1: Tensor[(48), float32], %w2: Tensor[(48, 1, 3, 3), float32],
          %b2: Tensor[(48), float32], %w3: Tensor[(48, 48, 1, 1), float32],
          %w4: Tensor[(16, 48, 1, 1), float32], %s: Tensor[(16, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w1, channels=48, kernel_size=[1, 1]);
  %1 = nn.bias_add(%0, %b1);
  %2 = clip(%1, a_min=0f, a_max=6f);
  %3 = nn.conv2d(%2, %w2, padding=[1, 1], groups=48, channels=48, kernel_size=[3, 3]);
  %4 = nn.bias_add(%3, %b2);
  %5 = sigmoid(%4);
  %6 = multiply(%4, %5);
  %7 = nn.global_avg_pool2d(%6);
  %8 = nn.conv2d(%7, %w3, channels=48, kernel_size=[1, 1]);
  %9 = sigmoid(%8);
  %10 = multiply(%6, %9);
  %11 = nn.conv2d(%10, %w4, channels=16, kernel_size=[1, 1]);
  %12 = multiply(%11, %s);
  %13 = add(%12, %x);
  %14 = (%13, %x);
  concatenate(%14, axis=1)
}"""

# Dense 3x3 convs (a ResNet's), then a conv to 24 channels (a quarter of a 16-lane vector
# of channels empty: stays NCHW).
DENSE = """def @main(%x: Tensor[(n, 8, 12, 12), float32], %w1: Tensor[(16, 8, 3, 3), float32],
          %w2: Tensor[(16, 16, 3, 3), float32], %w3: Tensor[(24, 16, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1]);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %w2, padding=[1, 1]);
  %3 = nn.relu(%2);
  nn.conv2d(%3, %w3)
}"""

# One dense conv between NCHW ops (a pool and a softmax): not worth the transposes around it.
LONE = """def @main(%x: Tensor[(n, 16, 12, 12), float32], %w: Tensor[(32, 16, 3, 3), float32]) {
  %0 = nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2]);
  %1 = nn.conv2d(%0, %w, padding=[1, 1]);
  %2 = nn.relu(%1);
  nn.softmax(%2, axis=1)
}"""

# A depthwise conv of 4 channels (no vector of channels to fill) next to a dense one.
NARROW_DW = """def @main(%x: Tensor[(n, 4, 12, 12), float32], %w1: Tensor[(4, 1, 3, 3), float32],
          %w2: Tensor[(32, 4, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1], groups=4);
  %1 = nn.relu(%0);
  nn.conv2d(%1, %w2)
}"""

# A model's first conv on its RGB image, then a depthwise conv: the first stays NCHW (3 input
# channels) and its output is transposed once.
STEM = """def @main(%x: Tensor[(n, 3, 16, 16), float32], %w1: Tensor[(8, 3, 3, 3), float32],
          %w2: Tensor[(8, 1, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w1, strides=[2, 2], padding=[1, 1]);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %w2, padding=[1, 1], groups=8);
  nn.relu(%2)
}"""


# A ResNet's stem: 7 x 7, stride 2, 3 -> 64 channels, then a 3 x 3 conv.
WIDE_STEM = """def @main(%x: Tensor[(n, 3, h, w), float32], %w1: Tensor[(64, 3, 7, 7), float32],
          %w2: Tensor[(64, 64, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w1, strides=[2, 2], padding=[3, 3]);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %w2, padding=[1, 1]);
  nn.relu(%2)
}"""


# A YOLO C2f block: a conv's channels split in halves (strided_slice), one half through a
# bottleneck, the halves and its result concatenated, then a conv.
C2F = """def @main(%x: Tensor[(n, 32, 8, 8), float32], %w1: Tensor[(32, 32, 1, 1), float32],
          %w2: Tensor[(16, 16, 3, 3), float32], %w3: Tensor[(32, 48, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w1);
  %1 = sigmoid(%0);
  %2 = multiply(%0, %1);
  %3 = strided_slice(%2, begin=[0], end=[16], axes=[1]);
  %4 = strided_slice(%2, begin=[16], end=[32], axes=[1]);
  %5 = nn.conv2d(%4, %w2, padding=[1, 1]);
  %6 = add(%4, %5);
  %7 = (%3, %4, %6);
  %8 = concatenate(%7, axis=1);
  nn.conv2d(%8, %w3)
}"""


def _calls(module) -> list[Call]:
    return [n for n in post_order(module.functions["main"].body)
            if isinstance(n, Call) and hasattr(n.op, "name")]


def _optimized(text: str, channels_last: bool = True):
    return optimize(relvm.parse(text), {}, fuse=False, channels_last=channels_last)


def _layouts(module) -> list[str]:
    return [c.attrs.data_layout for c in _calls(module) if c.op.name == "nn.conv2d"]


def _ops(module) -> list[str]:
    return [c.op.name for c in _calls(module)]


def test_mobile_block_goes_channels_last_between_two_transposes():
    m = _optimized(MOBILE)
    assert _layouts(m) == ["NHWC"] * 4
    ops = _ops(m)
    # x into NHWC once (read by the first conv, the residual add and the concatenation), the
    # (16, 1, 1) scale grown to rank 4 and into NHWC, the result back to NCHW once; the pool
    # became a mean over H and W
    transposes = sorted(tuple(c.attrs.axes) for c in _calls(m) if c.op.name == "transpose")
    assert transposes == [(0, 2, 3, 1), (0, 2, 3, 1), (0, 3, 1, 2)]
    assert ops.count("expand_dims") == 1
    assert "nn.global_avg_pool2d" not in ops and "mean" in ops
    concat = next(c for c in _calls(m) if c.op.name == "concatenate")
    assert concat.attrs.axis == 3
    bias_axes = {c.attrs.axis for c in _calls(m) if c.op.name == "nn.bias_add"}
    assert bias_axes == {3}
    # the (16, 1, 1) scale, an NCHW broadcast along the channels, is now one along the last
    # axis: (1, 1, 1, 16)
    scales = [tuple(c.args[1].checked_type.shape) for c in _calls(m) if c.op.name == "multiply"]
    assert (1, 1, 1, 16) in scales
    assert tuple(m.functions["main"].checked_type.ret.shape[1:]) == (32, 10, 10)


def test_dense_convs_go_channels_last_but_a_narrow_one():
    m = _optimized(DENSE)
    assert _layouts(m) == ["NHWC", "NHWC", "NCHW"]
    # x in, the second relu's result out (read by the conv to 24 channels)
    transposes = sorted(tuple(c.attrs.axes) for c in _calls(m) if c.op.name == "transpose")
    assert transposes == [(0, 2, 3, 1), (0, 3, 1, 2)]
    module = infer_module(relvm.parse(DENSE))
    assert len(channels_last_convs(module)) == 2


@pytest.mark.parametrize("text", [LONE, NARROW_DW], ids=["lone dense", "4-channel depthwise"])
def test_convs_not_worth_nhwc_stay_nchw(text):
    m = _optimized(text)
    assert "NHWC" not in _layouts(m)
    assert "transpose" not in _ops(m)
    assert channels_last_convs(infer_module(relvm.parse(text))) == set()


def test_rgb_stem_stays_nchw_and_its_output_is_transposed_once():
    m = _optimized(STEM)
    assert _layouts(m) == ["NCHW", "NHWC"]
    ops = _ops(m)
    assert ops.count("transpose") == 2  # the stem's output in, the result out


def test_a_wide_rgb_stem_runs_nhwc_on_its_transposed_image():
    """A ResNet's stem (3 -> 64 channels, 7 x 7, stride 2) runs NHWC: the RGB image is
    transposed in (interleaving three planes), the result out; the numbers are the NCHW
    build's."""
    m = _optimized(WIDE_STEM)
    assert _layouts(m) == ["NHWC", "NHWC"]
    assert _ops(m).count("transpose") == 2
    rng = np.random.default_rng(5)
    params = {"w1": (rng.standard_normal((64, 3, 7, 7)) * 0.1).astype(np.float32),
              "w2": (rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32)}
    x = rng.standard_normal((2, 3, 30, 28)).astype(np.float32)
    got = relvm.VirtualMachine(relvm.build(relvm.parse(WIDE_STEM), params=params))
    want = relvm.VirtualMachine(relvm.build(relvm.parse(WIDE_STEM), params=params,
                                            backend="numpy"))
    np.testing.assert_allclose(np.asarray(got.invoke("main", x)),
                               np.asarray(want.invoke("main", x)), rtol=1e-4, atol=1e-4)


def test_channels_last_off_changes_nothing():
    m = _optimized(MOBILE, channels_last=False)
    assert _layouts(m) == ["NCHW"] * 4
    assert "transpose" not in _ops(m)


def test_channels_last_module_prints_and_parses_back():
    m = _optimized(MOBILE)
    text = relvm.print_module(m)
    assert 'data_layout="NHWC"' in text
    again = infer_module(relvm.parse(text))
    assert _layouts(again) == ["NHWC"] * 4
    assert relvm.print_module(again) == text


def _weights(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    shapes = {"w1": (48, 16, 1, 1), "b1": (48,), "w2": (48, 1, 3, 3), "b2": (48,),
              "w3": (48, 48, 1, 1), "w4": (16, 48, 1, 1), "s": (16, 1, 1)}
    return {k: (rng.standard_normal(s) * 0.3).astype(np.float32) for k, s in shapes.items()}


@pytest.mark.parametrize("n", [1, 3])
def test_channels_last_build_gives_the_nchw_numbers(n):
    """The default build (C kernels, fusion, channels last) against the NCHW build and the
    NumPy references, with the weights as constants (packed once) and a symbolic batch."""
    params = _weights()
    x = np.random.default_rng(n).standard_normal((n, 16, 10, 10)).astype(np.float32)
    want = relvm.VirtualMachine(relvm.build(relvm.parse(MOBILE), params=params,
                                            backend="numpy")).invoke("main", x)
    for channels_last in (True, False):
        exe = relvm.build(relvm.parse(MOBILE), params=params, channels_last=channels_last)
        got = relvm.VirtualMachine(exe).invoke("main", x)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)
    kernels = [k.name for k in exe.kernels]  # the NCHW build's: no transposes
    assert not any(k.startswith("transpose") for k in kernels)


def test_channels_last_build_saves_and_loads(tmp_path):
    params = _weights(1)
    exe = relvm.build(relvm.parse(MOBILE), params=params)
    assert any(k.name.startswith("transpose") for k in exe.kernels)
    exe.save(tmp_path / "m.rvm")
    x = np.random.default_rng(7).standard_normal((2, 16, 10, 10)).astype(np.float32)
    got = relvm.VirtualMachine(relvm.load(tmp_path / "m.rvm")).invoke("main", x)
    want = relvm.VirtualMachine(exe).invoke("main", x)
    assert np.array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("text", [DENSE, STEM], ids=["dense", "stem"])
def test_channels_last_dense_and_stem_builds_give_the_reference_numbers(text):
    """Dense convs NHWC (the default build) and a conv left NCHW between them, against the
    NumPy references at two batch sizes."""
    module = infer_module(relvm.parse(text))
    fn = module.functions["main"]
    rng = np.random.default_rng(3)
    params = {p.name: (rng.standard_normal(tuple(p.checked_type.shape)) * 0.3).astype(np.float32)
              for p in fn.params[1:]}
    for n in (1, 2):
        shape = (n,) + tuple(fn.params[0].checked_type.shape[1:])
        x = rng.standard_normal(shape).astype(np.float32)
        want = relvm.VirtualMachine(relvm.build(relvm.parse(text), params=params,
                                                backend="numpy")).invoke("main", x)
        got = relvm.VirtualMachine(relvm.build(relvm.parse(text), params=params)).invoke(
            "main", x)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)


def test_channel_slices_follow_into_nhwc():
    m = _optimized(C2F)
    assert _layouts(m) == ["NHWC"] * 3
    slices = [c for c in _calls(m) if c.op.name == "strided_slice"]
    assert [list(c.attrs.axes) for c in slices] == [[3], [3]]
    transposes = sorted(tuple(c.attrs.axes) for c in _calls(m) if c.op.name == "transpose")
    assert transposes == [(0, 2, 3, 1), (0, 3, 1, 2)]  # x in, the result out
    module = infer_module(relvm.parse(C2F))
    fn = module.functions["main"]
    rng = np.random.default_rng(5)
    params = {p.name: (rng.standard_normal(tuple(p.checked_type.shape)) * 0.3).astype(np.float32)
              for p in fn.params[1:]}
    x = rng.standard_normal((2, 32, 8, 8)).astype(np.float32)
    want = relvm.VirtualMachine(relvm.build(relvm.parse(C2F), params=params,
                                            backend="numpy")).invoke("main", x)
    got = relvm.VirtualMachine(relvm.build(relvm.parse(C2F), params=params)).invoke("main", x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)
