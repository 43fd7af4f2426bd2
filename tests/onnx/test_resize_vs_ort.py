"""ONNX Resize against ONNX Runtime where ``in * scale`` is not an integer: every mode (and
antialias), nearest rounding and coordinate transformation, 1 to 3 spatial axes, up and down, by scales and by
sizes (issue 46: align_corners divided by the fractional length ``in * scale`` and was up to the
whole output's scale off; ``0.7 * 10`` sized 6 where ONNX Runtime sizes 7). Every case runs on
the build users get (C kernels, fusion on), built once with symbolic dims and run at two input
sizes, and agrees to 1e-5.

Two places where ONNX Runtime 1.32 departs from the operator's text are compared as the text
says: tf_crop_and_resize by scales sizes the output ``floor(in * (end - start) * scale)`` (ONNX
Runtime leaves the roi out; the coordinates do not depend on the scale, so relvm's result is
compared with ONNX Runtime's run to relvm's sizes); and nearest at a tie -- a source coordinate
that is ``k + 0.5`` (rounding modes) or ``k`` (floor, ceil) in exact arithmetic over the scale
the float32 stands for (3/5 for 0.6), where float rounding picks the side -- may differ: relvm
picks by the float32 coordinate ONNX Runtime's published formula computes, and ONNX Runtime
1.32's nearest path does not always (every other position is compared)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import relvm

pytest.importorskip("onnx.helper")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from relvm.frontend.onnx import from_onnx  # noqa: E402
from relvm.ops.image import scale_fraction  # noqa: E402

TRANSFORMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
              "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")

#: Spatial input sizes per rank, two per case (the model is built once for both), and scales
#: whose products with them are not integers (1.5 x 5, 0.6 x 7, ...), up and down.
SPATIAL = {1: [(5,), (7,)], 2: [(5, 7), (6, 9)], 3: [(5, 4, 6), (3, 7, 5)]}
SCALES = {1: [(1.5,), (0.6,)], 2: [(1.5, 0.6), (0.7, 2.3)], 3: [(1.5, 0.6, 1.3), (0.7, 2.5, 0.45)]}
#: Output sizes that are not a multiple of the input's (up and down at once).
SIZES = {1: [(8,), (3,)], 2: [(8, 4), (3, 11)], 3: [(7, 3, 4), (2, 5, 9)]}
#: Crops whose sizes by SCALES differ from the input's on every axis (ONNX Runtime copies an
#: axis whose size stays, roi or not).
ROI = {1: [0.2, 0.7], 2: [0.2, 0.2, 0.8, 0.7], 3: [0.2, 0.1, 0.0, 0.7, 0.8, 0.6]}


def _supported_by_ort(mode: str, rank: int, ctm: str) -> bool:
    """ONNX Runtime's CPU Resize: nearest at any rank, linear for 1 to 3 spatial axes, cubic
    for 2 (it refuses the rest)."""
    return mode != "cubic" or rank == 2


CASES = [(mode, ctm, nm, rank, by)
         for rank in (1, 2, 3) for ctm in TRANSFORMS
         for mode, nm in [("nearest", m) for m in NEAREST] + [("linear", None), ("cubic", None),
                                                               ("linear", "antialias"),
                                                               ("cubic", "antialias")]
         for by in ("scales", "sizes") if _supported_by_ort(mode, rank, ctm)
         # an antialias filter is as wide as the scale says, and ONNX Runtime sizes a
         # tf_crop_and_resize by scales without its roi: it has no run to compare with
         and not (nm == "antialias" and ctm == "tf_crop_and_resize" and by == "scales")]


def _model(attrs: dict, rank: int, roi, scales, sizes, dims: list) -> bytes:
    inits = [numpy_helper.from_array(np.array(roi if roi is not None else [], np.float32), "roi")]
    names = ["x", "roi"]
    if scales is not None:
        inits.append(numpy_helper.from_array(np.array(scales, np.float32), "scales"))
        names.append("scales")
    else:
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
        names += ["", "sizes"]
    graph = helper.make_graph(
        [helper.make_node("Resize", names, ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    return m


def _exact_coords(ctm: str, n_in: int, n_out: int, scale, roi) -> list[Fraction]:
    """Each output position's source coordinate in exact arithmetic (the operator's text)."""
    s = scale_fraction(scale) if scale is not None else Fraction(n_out, n_in)
    out = []
    for y in range(n_out):
        half = Fraction(1, 2)
        if ctm == "align_corners":
            x = Fraction(0) if n_out == 1 else Fraction(y * (n_in - 1), n_out - 1)
        elif ctm == "asymmetric":
            x = y / s
        elif ctm == "tf_crop_and_resize":
            a, b = (scale_fraction(v) for v in roi)
            x = (a + b) / 2 * (n_in - 1) if n_out == 1 else \
                a * (n_in - 1) + y * (b - a) * (n_in - 1) / (n_out - 1)
        elif ctm == "pytorch_half_pixel":
            x = Fraction(0) if n_out == 1 else (y + half) / s - half
        elif ctm == "half_pixel":
            x = (y + half) / s - half
        elif ctm == "half_pixel_symmetric":
            x = Fraction(n_in, 2) * (1 - n_out / (s * n_in)) + (y + half) / s - half
        else:
            x = (y + half) / s
        out.append(x)
    return out


def _ties(mode: str, nearest_mode, ctm: str, shape, out_shape, scales, roi) -> np.ndarray:
    """Where nearest's pick is a tie in exact arithmetic (see the module's docstring)."""
    mask = np.zeros(out_shape, bool)
    if mode != "nearest":
        return mask
    rank = len(shape) - 2
    for k in range(rank):
        axis_roi = (roi[2 + k], roi[len(roi) // 2 + 2 + k]) if roi is not None else None
        xs = _exact_coords(ctm, shape[2 + k], out_shape[2 + k],
                           None if scales is None else scales[2 + k], axis_roi)
        frac = [x - (x.numerator // x.denominator) for x in xs]
        tie = Fraction(0) if nearest_mode in ("floor", "ceil") else Fraction(1, 2)
        hit = np.array([f == tie for f in frac])
        index = [None] * len(out_shape)
        index[2 + k] = slice(None)
        mask |= np.broadcast_to(hit.reshape([-1 if i == 2 + k else 1
                                             for i in range(len(out_shape))]), out_shape)
    return mask


def _ort(m, x):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


@pytest.mark.parametrize("mode, ctm, nearest_mode, rank, by", CASES)
def test_resize_matches_ort(mode, ctm, nearest_mode, rank, by):
    attrs = dict(mode=mode, coordinate_transformation_mode=ctm)
    if nearest_mode == "antialias":
        attrs["antialias"] = 1
    elif nearest_mode:
        attrs["nearest_mode"] = nearest_mode
    if ctm == "tf_crop_and_resize":
        attrs["extrapolation_value"] = -3.0
    roi = [0, 0] + ROI[rank][:rank] + [1, 1] + ROI[rank][rank:] \
        if ctm == "tf_crop_and_resize" else None
    rng = np.random.default_rng(rank * 100 + len(ctm))
    spatial_names = ["d", "h", "w"][3 - rank:]
    for k, (scales, sizes) in enumerate(zip(SCALES[rank], SIZES[rank])):
        full_scales = [1.0, 1.0, *scales] if by == "scales" else None
        full_sizes = None if by == "scales" else None
        # sizes fix the output, so N and C are the only symbolic dims then
        dims = ["n", 3, *spatial_names] if by == "scales" else ["n", 3, *SPATIAL[rank][0]]
        inputs = SPATIAL[rank] if by == "scales" else SPATIAL[rank][:1]
        if by == "sizes":
            full_sizes = [2, 3, *sizes]
        if by == "scales" and ctm == "tf_crop_and_resize":
            dims = [2, 3, *SPATIAL[rank][0]]  # relvm sizes this from static dims only
            inputs = SPATIAL[rank][:1]
        m = _model(attrs, rank, roi, full_scales, full_sizes, dims)
        mod, params = from_onnx(m)
        vm = relvm.VirtualMachine(relvm.build(mod, params=params))
        for shape in inputs:
            x = rng.standard_normal((2, 3, *shape)).astype(np.float32)
            got = vm.invoke("main", x)
            ort_sizes = full_sizes
            if ctm == "tf_crop_and_resize" and by == "scales":
                ort_sizes = list(got.shape)  # ONNX Runtime leaves the roi out of the size
            want = _ort(_model(attrs, rank, roi, None if ort_sizes else full_scales, ort_sizes,
                               [2, 3, *shape]), x)
            assert got.shape == want.shape, (k, shape)
            ties = _ties(mode, nearest_mode, ctm, x.shape, want.shape, full_scales, roi)
            close = np.isclose(got, want, rtol=0, atol=1e-5)
            assert (close | ties).all(), (k, shape, np.argwhere(~(close | ties))[:5],
                                          got[~(close | ties)][:5], want[~(close | ties)][:5])
