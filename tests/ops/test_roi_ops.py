"""vision.roi_align and vision.max_roi_pool: their type relations over symbolic dims, their
errors, the text round trip with the run-time checks, and the references against plain loops
written from ONNX's definitions (in float64, where the reference computes in the data's dtype
as ONNX Runtime does)."""

import math

import numpy as np
import pytest

import relvm
from relvm.ir.dims import Sym
from relvm.ops.registry import OpTypeError
from ophelpers import T, infer, run

n, c, h, w, k = Sym("n"), Sym("c"), Sym("h"), Sym("w"), Sym("k")
RNG = np.random.default_rng(46)
ALIGN, POOL = "vision.roi_align", "vision.max_roi_pool"


def test_types_over_symbolic_dims():
    got = infer(ALIGN, T((n, c, h, w)), T((k, 4)), T((k,), "int64"), output_height=3,
                output_width=2)
    assert got == T((k, c, 3, 2))
    assert infer(ALIGN, T((2, 3, 8, 8), "float64"), T((k, 4), "float64"), T((5,), "int64")) \
        == T((5, 3, 1, 1), "float64")  # the static roi count
    assert infer(POOL, T((n, c, h, w)), T((k, 5)), pooled_shape=[2, 4]) == T((k, c, 2, 4))


@pytest.mark.parametrize("types, message", [
    ((T((2, 3, 8)), T((k, 4)), T((k,), "int64")), r"data must be \(N, C, H, W\), got \(2, 3, 8\)"),
    ((T((n, c, h, w)), T((k, 5)), T((k,), "int64")),
     r"rois must have shape \(num_rois, 4\), got \(k, 5\)"),
    ((T((n, c, h, w)), T((k,)), T((k,), "int64")), r"rois must have shape \(num_rois, 4\)"),
    ((T((n, c, h, w)), T((3, 4)), T((4,), "int64")),
     r"batch_indices \(4\) and rois \(3, 4\) differ in their roi count"),
    ((T((n, c, h, w)), T((k, 4)), T((k,), "int32")), r"batch_indices must have dtype int64"),
    ((T((n, c, h, w)), T((k, 4)), T((k, 1), "int64")),
     r"batch_indices must have shape \(num_rois,\), got \(k, 1\)"),
    ((T((n, c, h, w)), T((k, 4), "float64"), T((k,), "int64")),
     r"rois must have data's dtype float32, got float64"),
    ((T((n, c, h, w), "int64"), T((k, 4)), T((k,), "int64")),
     r"data must have dtype float32 or float64"),
])
def test_roi_align_type_errors(types, message):
    with pytest.raises(OpTypeError, match=message):
        infer(ALIGN, *types)


def test_attribute_errors():
    with pytest.raises(OpTypeError, match=r"sampling_ratio must be 0 or more, got -1"):
        infer(ALIGN, T((n, c, h, w)), T((k, 4)), T((k,), "int64"), sampling_ratio=-1)
    with pytest.raises(OpTypeError, match=r"rois must have shape \(num_rois, 5\), got \(k, 4\)"):
        infer(POOL, T((n, c, h, w)), T((k, 4)), pooled_shape=[2, 2])
    with pytest.raises(OpTypeError, match=r"pooled_shape must be two sizes of 1 or more, got "
                                          r"\[2, 0\]"):
        infer(POOL, T((n, c, h, w)), T((k, 5)), pooled_shape=[2, 0])
    with pytest.raises(OpTypeError, match=r"data must have dtype float32"):
        infer(POOL, T((n, c, h, w), "float64"), T((k, 5), "float64"), pooled_shape=[2, 2])


# --- plain loops from ONNX's definitions ---------------------------------------------------------

def _bilinear_corners(img, y, x):
    """The four weighted corner values of a sample at (y, x) as RoiAlign reads it; None for a
    sample outside [-1, H] x [-1, W]."""
    height, width = img.shape
    if y < -1 or y > height or x < -1 or x > width:
        return None
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(math.floor(y)), int(math.floor(x))
    if y0 >= height - 1:
        y0 = y1 = height - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= width - 1:
        x0 = x1 = width - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    hy, hx = 1 - ly, 1 - lx
    return [hy * hx * img[y0, x0], hy * lx * img[y0, x1], ly * hx * img[y1, x0],
            ly * lx * img[y1, x1]]


def plain_roi_align(x, rois, batch, oh, ow, ratio=0, scale=1.0, half_pixel=True, mode="avg"):
    x = x.astype(np.float64)
    out = np.zeros((len(rois), x.shape[1], oh, ow))
    off = 0.5 if half_pixel else 0.0
    for r, roi in enumerate(rois.astype(np.float64)):
        x1, y1, x2, y2 = (v * np.float32(scale) - off for v in roi)
        rw, rh = x2 - x1, y2 - y1
        if not half_pixel:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = ratio or math.ceil(rh / oh)
        gw = ratio or math.ceil(rw / ow)
        for ch in range(x.shape[1]):
            img = x[batch[r], ch]
            for i in range(oh):
                for j in range(ow):
                    values = []
                    for iy in range(gh):
                        for ix in range(gw):
                            yy = y1 + i * rh / oh + (iy + 0.5) * rh / oh / gh
                            xx = x1 + j * rw / ow + (ix + 0.5) * rw / ow / gw
                            t = _bilinear_corners(img, yy, xx)
                            values.append([0.0] * 4 if t is None else t)
                    if not values:
                        continue
                    if mode == "avg":
                        out[r, ch, i, j] = np.mean([sum(t) for t in values])
                    else:
                        out[r, ch, i, j] = max(max(t) for t in values)
    return out


def plain_max_roi_pool(x, rois, pooled, scale=1.0):
    ph, pw = pooled
    out = np.zeros((len(rois), x.shape[1], ph, pw), np.float32)
    height, width = x.shape[2:]
    f = np.float32  # ONNX Runtime scales the corners and sizes its bins in float32
    for r, (b, *corners) in enumerate(rois):
        x1, y1, x2, y2 = (int(math.floor(abs(float(v * f(scale))) + 0.5)) * (1 if v >= 0 else -1)
                          for v in corners)
        bh, bw = f(max(y2 - y1 + 1, 1)) / f(ph), f(max(x2 - x1 + 1, 1)) / f(pw)
        for i in range(ph):
            h0 = min(max(math.floor(f(i) * bh) + y1, 0), height)
            h1 = min(max(math.ceil(f(i + 1) * bh) + y1, 0), height)
            for j in range(pw):
                w0 = min(max(math.floor(f(j) * bw) + x1, 0), width)
                w1 = min(max(math.ceil(f(j + 1) * bw) + x1, 0), width)
                if h1 > h0 and w1 > w0:
                    out[r, :, i, j] = x[int(b), :, h0:h1, w0:w1].max(axis=(1, 2))
    return out


def _rois(count, height, width, spread=4.0):
    """Corners inside and around the image, some rois inverted, tiny or far outside."""
    lo = RNG.uniform(-spread, [width, height], (count, 2))
    size = RNG.uniform(-1, max(height, width) / 2 + spread, (count, 2))
    rois = np.concatenate([lo, lo + size], axis=1)
    rois[::5, 2:] = rois[::5, :2] + RNG.uniform(0, 0.3, (len(rois[::5]), 2))  # tiny
    rois[3::7] += 3 * max(height, width)  # outside
    return rois


@pytest.mark.parametrize("half_pixel", [True, False])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ratio", [0, 1, 2, 3])
@pytest.mark.parametrize("scale", [1.0, 0.5, 0.3])
def test_roi_align_reference_against_plain_loops(half_pixel, mode, ratio, scale):
    """float64: the reference's op-by-op rounding against the loops' (one place apart at most)."""
    x = RNG.standard_normal((2, 3, 7, 9))
    rois = _rois(12, 7 / scale, 9 / scale)
    batch = RNG.integers(0, 2, 12)
    if not half_pixel or ratio:  # ONNX Runtime refuses inverted rois on adaptive half_pixel grids
        rois[1::4, 2:] = rois[1::4, :2] - RNG.uniform(0, 2, (3, 2))
    attrs = dict(output_height=3, output_width=2, sampling_ratio=ratio, spatial_scale=scale,
                 mode=mode, coordinate_transformation_mode="half_pixel" if half_pixel
                 else "output_half_pixel")
    got = run(ALIGN, x, rois, batch, **attrs)
    want = plain_roi_align(x, rois, batch, 3, 2, ratio, scale, half_pixel, mode)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_roi_align_float32_reference_against_plain_loops():
    x = RNG.standard_normal((1, 4, 12, 10)).astype(np.float32)
    rois = _rois(10, 12, 10).astype(np.float32)
    batch = np.zeros(10, np.int64)
    for mode in ("avg", "max"):
        got = run(ALIGN, x, rois, batch, output_height=4, output_width=5, mode=mode)
        assert got.dtype == np.float32
        want = plain_roi_align(x, rois, batch, 4, 5, mode=mode)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_roi_align_max_takes_the_weighted_corners_not_the_interpolation():
    """ONNX Runtime's max mode: the largest weighted corner, here half of the one pixel."""
    x = np.zeros((1, 1, 2, 2))
    x[0, 0, 0, 0] = 4.0
    roi = np.array([[0.0, 0.0, 1.0, 1.0]])  # one sample at (0.5, 0.5) with sampling_ratio=1
    got = run(ALIGN, x, roi, np.array([0]), mode="max", sampling_ratio=1,
              coordinate_transformation_mode="output_half_pixel")
    assert got.item() == 1.0  # 0.25 * 4, not the interpolated 1.0 by chance: see avg below
    x[0, 0, 1, 1] = 4.0
    assert run(ALIGN, x, roi, np.array([0]), mode="max", sampling_ratio=1,
               coordinate_transformation_mode="output_half_pixel").item() == 1.0
    assert run(ALIGN, x, roi, np.array([0]), mode="avg", sampling_ratio=1,
               coordinate_transformation_mode="output_half_pixel").item() == 2.0


@pytest.mark.parametrize("pooled, scale", [((2, 3), 1.0), ((1, 1), 0.5), ((4, 2), 0.25),
                                           ((3, 3), 2.0)])
def test_max_roi_pool_reference_against_plain_loops(pooled, scale):
    x = RNG.standard_normal((2, 3, 9, 11)).astype(np.float32)
    corners = _rois(15, 9 / scale, 11 / scale)
    corners[2::6] = np.round(corners[2::6] * scale * 2) / 2 / scale  # halves: rounded away
    rois = np.concatenate([RNG.uniform(0, 1.99, (15, 1)), corners], axis=1).astype(np.float32)
    got = run(POOL, x, rois, pooled_shape=list(pooled), spatial_scale=scale)
    np.testing.assert_array_equal(got, plain_max_roi_pool(x, rois, pooled, scale))


def test_edges_no_pixels_and_no_rois():
    x = RNG.standard_normal((1, 2, 0, 4)).astype(np.float32)
    roi = np.array([[0, 0, 2, 2]], np.float32)
    assert (run(ALIGN, x, roi, np.array([0])) == 0).all()
    assert run(ALIGN, x[:, :, :0], roi[:0], np.zeros(0, np.int64)).shape == (0, 2, 1, 1)
    assert run(POOL, x, np.zeros((0, 5), np.float32), pooled_shape=[2, 2]).shape == (0, 2, 2, 2)


def test_run_time_errors_of_the_reference():
    x = np.zeros((2, 1, 4, 4), np.float32)
    with pytest.raises(ValueError, match=r"vision.roi_align: batch index 2 of roi 1 is out of "
                                         r"range \[0, 2\)"):
        run(ALIGN, x, np.zeros((2, 4), np.float32), np.array([0, 2]))
    with pytest.raises(ValueError, match=r"vision.roi_align: roi 0 is .* pixels across 1 bins: "
                                         r"an adaptive sampling grid past relvm's limit"):
        run(ALIGN, x, np.array([[0, 0, 1e30, 1]], np.float32), np.array([0]))
    with pytest.raises(ValueError, match=r"vision.max_roi_pool: batch index -1.0 of roi 0 is "
                                         r"out of range \[0, 2\)"):
        run(POOL, x, np.array([[-1, 0, 0, 1, 1]], np.float32), pooled_shape=[1, 1])
    with pytest.raises(ValueError, match=r"batch index nan of roi 1"):
        run(POOL, x, np.array([[0, 0, 0, 1, 1], [np.nan, 0, 0, 1, 1]], np.float32),
            pooled_shape=[1, 1])


PROGRAM = """
def @main(%x: Tensor[(n, c, h, w), float32], %rois: Tensor[(k, 4), float32],
          %b: Tensor[(k), int64], %r5: Tensor[(m, 5), float32]) {
  %0 = vision.roi_align(%x, %rois, %b, mode="max", output_height=2, output_width=3,
                        sampling_ratio=2, spatial_scale=0.5f);
  %1 = vision.max_roi_pool(%x, %r5, pooled_shape=[3, 2], spatial_scale=0.5f);
  (%0, %1)
}"""


def test_text_round_trip_and_run_time_checks():
    mod = relvm.parse(PROGRAM)
    assert relvm.parse(relvm.print_module(mod)) == mod
    vm = relvm.VirtualMachine(relvm.build(mod, backend="numpy"))
    x = RNG.standard_normal((2, 3, 6, 5)).astype(np.float32)
    rois = _rois(4, 12, 10).astype(np.float32)
    r5 = np.concatenate([np.ones((3, 1)), _rois(3, 12, 10)], axis=1).astype(np.float32)
    a, p = vm.invoke("main", x, rois, np.array([0, 1, 1, 0]), r5)
    np.testing.assert_allclose(a, plain_roi_align(x, rois, [0, 1, 1, 0], 2, 3, 2, 0.5,
                                                  mode="max"), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(p, plain_max_roi_pool(x, r5, (3, 2), 0.5))
    with pytest.raises(relvm.RelvmRuntimeError, match=r"vision.roi_align: batch index 5 of roi "
                                                      r"2 is out of range \[0, 2\)"):
        vm.invoke("main", x, rois, np.array([0, 1, 5, 0]), r5)
    with pytest.raises(relvm.RelvmInputError, match=r"input %b dim 0 is 3, but k is 4"):
        vm.invoke("main", x, rois, np.array([0, 1, 1]), r5)
