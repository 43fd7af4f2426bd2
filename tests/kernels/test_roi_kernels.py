"""The C kernels of vision.roi_align and vision.max_roi_pool against their references, element
for element (both compute op by op in the data's dtype, as ONNX Runtime): shapes, modes,
sampling ratios (adaptive too), coordinate modes, rois inside, across and outside the image,
tiny, inverted and huge, spatial scales, dtypes, threads, and the run-time errors."""

import numpy as np
import pytest

ALIGN, POOL = "vision.roi_align", "vision.max_roi_pool"


def rois_for(rng, count, height, width, dtype="float32"):
    """[x1, y1, x2, y2] rois of every kind, over an image of height x width (in roi units)."""
    big = max(height, width)
    lo = rng.uniform(-0.3 * big, 1.1 * np.array([width, height]), (count, 2))
    rois = np.concatenate([lo, lo + rng.uniform(0, 0.8 * big, (count, 2))], axis=1)
    kinds = np.arange(count) % 8
    rois[kinds == 1, 2:] = rois[kinds == 1, :2] + rng.uniform(0, 0.2, (np.sum(kinds == 1), 2))
    rois[kinds == 2] = [-2 * big, -2 * big, -big, -big]  # far outside
    rois[kinds == 3] = [-0.25 * big, -0.25 * big, 1.5 * big, 1.3 * big]  # over the whole image
    rois[kinds == 4, 2:] = rois[kinds == 4, :2]  # no size
    rois[kinds == 5] = np.round(rois[kinds == 5])  # on pixel corners
    rois[kinds == 6, 2:] = rois[kinds == 6, :2] + rng.uniform(4 * big, 9 * big,
                                                               (np.sum(kinds == 6), 2))  # huge
    return rois.astype(dtype)


SHAPES = [(1, 1, 1, 1), (2, 3, 7, 9), (1, 5, 16, 12), (3, 2, 2, 31), (1, 4, 40, 3)]
OUT = [(1, 1), (2, 3), (7, 7), (5, 1)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("out", OUT, ids=str)
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("coordinates", ["half_pixel", "output_half_pixel"])
def test_roi_align(check, rng, rand, shape, out, mode, coordinates):
    n, _, height, width = shape
    for ratio, scale in [(0, 1.0), (1, 0.5), (2, 0.25), (3, 1.0), (0, 0.125), (0, 2.0)]:
        rois = rois_for(rng, 16, height / scale, width / scale)
        if coordinates == "half_pixel" and ratio == 0:
            # ONNX Runtime refuses these (a negative grid); relvm samples nothing, as C does
            rois[7::8, 2:] = rois[7::8, :2] - 3
        attrs = dict(output_height=out[0], output_width=out[1], sampling_ratio=ratio,
                     spatial_scale=scale, mode=mode, coordinate_transformation_mode=coordinates)
        check(ALIGN, attrs, [rand(shape), rois, rng.integers(0, n, 16)], rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_float64(check, rng, rand, mode):
    for coordinates in ("half_pixel", "output_half_pixel"):
        for ratio in (0, 2):
            attrs = dict(output_height=3, output_width=4, sampling_ratio=ratio,
                         spatial_scale=0.3, mode=mode, coordinate_transformation_mode=coordinates)
            check(ALIGN, attrs, [rand((2, 3, 11, 8), "float64"),
                                 rois_for(rng, 24, 11 / 0.3, 8 / 0.3, "float64"),
                                 rng.integers(0, 2, 24)], rtol=0, atol=0)


def test_roi_align_non_finite_values(check, rng, rand):
    """Infinite and NaN pixels (and rois) go where ONNX Runtime's sums and std::max take them:
    an empty sample reads 0 * data[0]."""
    x = rand((1, 2, 6, 6))
    x[0, 0, 0, 0] = np.inf
    x[0, 1, 2, 3] = np.nan
    rois = rois_for(rng, 16, 6, 6)
    rois[5] = [np.nan, 1, 3, 4]
    rois[6] = [1, 1, np.inf, 4]
    for mode in ("avg", "max"):
        check(ALIGN, dict(output_height=2, output_width=2, sampling_ratio=2, mode=mode),
              [x, rois, np.zeros(16, np.int64)], rtol=0, atol=0)


def test_roi_align_empty_shapes(check, rng, rand):
    rois = rois_for(rng, 3, 4, 4)
    for shape, count in [((1, 2, 0, 4), 3), ((1, 2, 4, 0), 3), ((2, 0, 4, 4), 3),
                         ((2, 3, 4, 4), 0)]:
        check(ALIGN, dict(output_height=2, output_width=2), [rand(shape), rois[:count],
                                                             np.zeros(count, np.int64)])
    check(ALIGN, dict(output_height=0, output_width=2),
          [rand((1, 2, 4, 4)), rois, np.zeros(3, np.int64)])


def test_roi_align_threads(check, rng, rand, two_threads):
    """Many rois over the pool's threads, each roi's result as one thread's."""
    for mode in ("avg", "max"):
        check(ALIGN, dict(output_height=7, output_width=7, mode=mode),
              [rand((2, 32, 20, 24)), rois_for(rng, 64, 20, 24), rng.integers(0, 2, 64)],
              rtol=0, atol=0)


def test_roi_align_errors(c_kernel):
    """Errors name the op and the roi, as the reference's; nothing is read out of bounds."""
    run = c_kernel(ALIGN, {}, ["float32", "float32", "int64"], ["float32"])
    x, out = np.zeros((2, 1, 4, 4), np.float32), np.zeros((3, 1, 1, 1), np.float32)
    rois = np.zeros((3, 4), np.float32)
    for bad in (2, -1, 1 << 40):
        with pytest.raises(ValueError, match=rf"vision.roi_align: batch index {bad} of roi 1 is "
                                             r"out of range \[0, 2\)"):
            run(x, rois, np.array([0, bad, 0]), out)
    rois[2] = [0, 0, 1e30, 1]
    with pytest.raises(ValueError, match=r"vision.roi_align: roi 2 is .* pixels across 1 bins: "
                                         r"an adaptive sampling grid past relvm's limit"):
        run(x, rois, np.array([0, 1, 0]), out)
    rois[2] = [0, 0, np.nan, 1]
    with pytest.raises(ValueError, match=r"roi 2 is nan pixels across 1 bins"):
        run(x, rois, np.array([0, 1, 0]), out)
    with pytest.raises(ValueError, match=r"rois \(num_rois, 4\) and batch_indices"):
        run(x, rois, np.array([0, 1]), out)
    with pytest.raises(ValueError, match=r"wrong output shape"):
        run(x, rois, np.array([0, 1, 0]), np.zeros((3, 1, 2, 1), np.float32))


# --- vision.max_roi_pool -------------------------------------------------------------------------

def pool_rois(rng, count, n, height, width):
    corners = rois_for(rng, count, height, width, "float64")
    corners[1::6] = np.round(corners[1::6] * 2) / 2  # halves, rounded away from 0
    batch = rng.integers(0, n, (count, 1)) + rng.uniform(0, 0.99, (count, 1))
    return np.concatenate([batch, corners], axis=1).astype(np.float32)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("pooled", OUT, ids=str)
def test_max_roi_pool(check, rng, rand, shape, pooled):
    n, _, height, width = shape
    for scale in (1.0, 0.5, 0.3, 2.0):
        x = rand(shape)
        x.flat[::7] = np.nan  # ignored unless a bin's first pixel
        x.flat[1::9] = -np.inf
        check(POOL, dict(pooled_shape=list(pooled), spatial_scale=scale),
              [x, pool_rois(rng, 16, n, height / scale, width / scale)], rtol=0, atol=0)


def test_max_roi_pool_extreme_rois_and_threads(check, rng, rand, two_threads):
    rois = pool_rois(rng, 64, 2, 20, 24)
    rois[::5, 1:] = [[-1e30, -np.inf, 1e30, np.nan]]  # clamped: relvm's rule
    rois[1::5, 1:] = [[np.nan, np.nan, np.nan, np.nan]]
    check(POOL, dict(pooled_shape=[7, 7]), [rand((2, 32, 20, 24)), rois], rtol=0, atol=0)
    check(POOL, dict(pooled_shape=[2, 2]), [rand((2, 0, 20, 24)), rois])
    check(POOL, dict(pooled_shape=[2, 2]), [rand((2, 3, 0, 24)), rois])


def test_max_roi_pool_errors(c_kernel):
    run = c_kernel(POOL, {"pooled_shape": [1, 1]}, ["float32", "float32"], ["float32"])
    x, out = np.zeros((2, 1, 4, 4), np.float32), np.zeros((2, 1, 1, 1), np.float32)
    for bad, shown in ((2, "2.0"), (-1, "-1.0"), (np.nan, "nan"), (np.inf, "inf")):
        rois = np.array([[1.5, 0, 0, 1, 1], [bad, 0, 0, 1, 1]], np.float32)
        with pytest.raises(ValueError, match=rf"vision.max_roi_pool: batch index {shown} of roi "
                                             r"1 is out of range \[0, 2\)"):
            run(x, rois, out)
    with pytest.raises(ValueError, match=r"rois \(num_rois, 5\)"):
        run(x, np.zeros((2, 4), np.float32), out)


@pytest.mark.parametrize("ratio", [9, 10])  # 7 * 7 * 81 samples tabulated, 7 * 7 * 100 not
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_tabulated_and_per_axis_samples(check, rng, rand, ratio, mode):
    """A roi's taps are tabulated up to 4096 samples, else formed from its axes' tables: the
    same numbers either way."""
    x = rand((2, 3, 12, 14))
    x[0, 1, 0, 0] = np.nan  # read by every empty sample
    check(ALIGN, dict(output_height=7, output_width=7, sampling_ratio=ratio, mode=mode),
          [x, rois_for(rng, 16, 12, 14), rng.integers(0, 2, 16)], rtol=0, atol=0)
