"""The C image kernels against the references: image.resize2d over methods, coordinate modes
and dtypes; image.grid_sample over methods, paddings, align_corners, ranks and dtypes."""

import itertools

import numpy as np

import pytest

from relvm.ops.image import METHODS, MODES, ROUNDING

SIZES = [((1, 2, 4, 5), {"size": [8, 10]}), ((2, 1, 6, 6), {"size": [3, 4]}),
         ((1, 3, 5, 7), {"scale": [2.0, 0.6]}), ((1, 1, 3, 3), {"size": [3, 7]}),
         ((1, 1, 1, 1), {"size": [4, 2]}), ((1, 1, 7, 5), {"size": [1, 1]})]


@pytest.mark.parametrize("shape,size", SIZES, ids=str)
@pytest.mark.parametrize("method,mode", list(itertools.product(METHODS, MODES)), ids=str)
def test_resize2d_methods_and_modes(check, rand, shape, size, method, mode):
    attrs = dict(size, method=method, coordinate_transformation_mode=mode)
    if mode == "tf_crop_and_resize":
        attrs.update(roi=[0.1, 0.2, 0.8, 0.9], extrapolation_value=-1.5)
    check("image.resize2d", attrs, [rand(shape)], atol=1e-5)


@pytest.mark.parametrize("rounding", ROUNDING)
def test_resize2d_nearest_rounding(check, rand, rounding):
    check("image.resize2d", {"scale": [1.7, 2.5], "rounding_method": rounding},
          [rand((1, 2, 5, 4))])


@pytest.mark.parametrize("antialias,exclude", [(True, 0), (False, 1), (True, 1)])
@pytest.mark.parametrize("method", ["linear", "cubic"])
def test_resize2d_antialias_and_exclude(check, rand, antialias, exclude, method):
    check("image.resize2d", {"size": [3, 9], "method": method, "antialias": antialias,
                             "cubic_exclude": exclude, "cubic_alpha": -0.5},
          [rand((1, 2, 8, 5))], atol=1e-5)


@pytest.mark.parametrize("dtype,out_dtype", [("float64", ""), ("uint8", ""), ("int32", ""),
                                             ("float32", "int8"), ("int64", "float32")])
def test_resize2d_dtypes(check, rand, dtype, out_dtype):
    x = rand((1, 2, 4, 6), dtype, -100, 250)
    check("image.resize2d", {"size": [7, 5], "method": "cubic", "out_dtype": out_dtype}, [x],
          atol=1e-5)


def test_resize2d_identity_and_empty(check, rand):
    check("image.resize2d", {"size": [4, 6]}, [rand((1, 2, 4, 6))])
    check("image.resize2d", {"size": [0, 3]}, [rand((1, 2, 4, 6))])
    check("image.resize2d", {"size": [2, 3], "extrapolation_value": 2.5}, [rand((1, 2, 0, 6))])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int8", "uint8", "int64"])
@pytest.mark.parametrize("size", [{"scale": [2.0, 2.0]}, {"size": [3, 11]}, {"size": [4, 6]}],
                         ids=str)
def test_resize2d_nearest_selects_every_dtype_exactly(check, rand, dtype, size):
    """Nearest resampling only selects: a gather for dtypes float64 holds exactly (int64 still
    goes through the float64 passes, as the reference), equal element for element."""
    x = rand((2, 3, 4, 6), dtype, -100, 120)
    check("image.resize2d", dict(size, method="nearest_neighbor"), [x], rtol=0, atol=0)


def test_resize2d_nearest_with_extrapolation_fills(check, rand):
    """tf_crop_and_resize's positions outside the image take the fill: not a pure gather."""
    check("image.resize2d", {"size": [5, 7], "method": "nearest_neighbor",
                             "coordinate_transformation_mode": "tf_crop_and_resize",
                             "roi": [-0.5, -0.2, 1.3, 1.5], "extrapolation_value": -7.0},
          [rand((1, 2, 4, 6))], rtol=0, atol=0)


def test_resize2d_nearest_ignores_the_neighbour_it_does_not_select(check):
    """An infinite input next to the selected one leaves the output alone (0 * inf is NaN in a
    weighted sum): nearest selects, as ONNX's Resize does."""
    x = np.float32([[[[1.0, np.inf, 3.0, -np.inf], [np.nan, 2.0, 5.0, 6.0]]]])
    check("image.resize2d", {"scale": [2.0, 2.0], "method": "nearest_neighbor"}, [x],
          rtol=0, atol=0)
    from relvm.ops import OPS

    ref = OPS["image.resize2d"]
    got = ref.reference(ref.make_attrs({"scale": [2.0, 2.0], "method": "nearest_neighbor"}), x)
    assert np.isfinite(got[0, 0, :2, 0]).all() and np.isnan(got[0, 0, 2:, 0]).all()


# --- image.grid_sample ---------------------------------------------------------------------------

from relvm.ops.grid_sample import METHODS as GRID_METHODS, PADDING  # noqa: E402

#: (data shape, grid shape): 2-d and 3-d (and 1-d), planes smaller and larger than the kernel's
#: block of 64 points, one-pixel axes, more output points than input pixels and fewer.
GRID_SHAPES = [((2, 3, 4, 5), (2, 3, 6, 2)), ((1, 2, 9, 7), (1, 13, 11, 2)),
               ((1, 1, 1, 6), (1, 70, 1, 2)), ((3, 2, 16, 16), (3, 5, 4, 2)),
               ((1, 2, 3, 4, 5), (1, 2, 5, 3, 3)), ((2, 1, 5, 1, 3), (2, 4, 3, 6, 3)),
               ((1, 3, 10), (1, 130, 1))]


def grid_points(rand, shape, dtype="float32"):
    """Coordinates in [-3, 3] (mostly outside [-1, 1]), a third of them exact: the borders
    +-1, the centre, pixel edges and centres, and far outside (+-40, +-1e6)."""
    g = rand(shape, "float64", -3, 3)
    flat = g.reshape(-1)
    exact = np.array([-1, 1, 0, -0.5, 0.5, 0.25, -0.75, 1 / 3, 1.5, -40, 41, 1e6, -1e6])
    flat[::3] = exact[np.arange(flat[::3].size) % len(exact)]
    with np.errstate(over="ignore"):  # float16: +-1e6 are infinite
        return g.astype(dtype)


@pytest.mark.parametrize("shape,gshape", GRID_SHAPES, ids=str)
@pytest.mark.parametrize("method,padding", list(itertools.product(GRID_METHODS, PADDING)),
                         ids=str)
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_modes(check, rand, shape, gshape, method, padding, align):
    attrs = {"method": method, "padding_mode": padding, "align_corners": align}
    # Nearest reads the very pixel the reference does; float32 data sums in float32 in C.
    tol = 0 if method == "nearest" else 1e-5
    check("image.grid_sample", attrs, [rand(shape), grid_points(rand, gshape)], rtol=tol,
          atol=tol)


@pytest.mark.parametrize("dtype,grid_dtype", [("float64", "float64"), ("float64", "float32"),
                                              ("float32", "float64")])
@pytest.mark.parametrize("method,padding", list(itertools.product(GRID_METHODS, PADDING)),
                         ids=str)
def test_grid_sample_dtypes(check, rand, dtype, grid_dtype, method, padding):
    """float64 data sums in float64 as the reference does; positions in the grid's dtype."""
    tol = 1e-12 if dtype == "float64" else 1e-5
    for shape, gshape in (GRID_SHAPES[1], GRID_SHAPES[4]):
        check("image.grid_sample", {"method": method, "padding_mode": padding},
              [rand(shape, dtype), grid_points(rand, gshape, grid_dtype)], rtol=tol, atol=tol)


@pytest.mark.parametrize("padding", PADDING)
@pytest.mark.parametrize("method", GRID_METHODS)
def test_grid_sample_non_finite_values(check, padding, method):
    """NaN and infinite coordinates as the reference; an infinite pixel next to a tap that reads
    0 (zeros padding) leaves the point finite, as it does in the reference."""
    x = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    x[0, 0, 0, 0] = np.inf
    x[0, 1, 2, 3] = -np.inf
    grid = np.float32([[[[np.nan, 0.0], [np.inf, 0.1], [-np.inf, -np.inf], [0.3, np.nan]],
                        [[-1.2, -1.3], [1.3, 1.4], [-1.0, -1.0], [1.0, 1.0]]]])
    check("image.grid_sample", {"method": method, "padding_mode": padding}, [x, grid],
          rtol=1e-5, atol=1e-5)
    check("image.grid_sample", {"method": method, "padding_mode": padding,
                                "align_corners": True}, [x, grid], rtol=1e-5, atol=1e-5)


def test_grid_sample_empty_shapes(check, rand):
    for shape, gshape in [((1, 2, 0, 3), (1, 2, 2, 2)), ((2, 0, 3, 3), (2, 2, 2, 2)),
                          ((2, 3, 3, 3), (2, 0, 4, 2)), ((0, 3, 3, 3), (0, 2, 2, 2))]:
        for padding in PADDING:
            check("image.grid_sample", {"padding_mode": padding},
                  [rand(shape), grid_points(rand, gshape)])


def test_grid_sample_threads(check, rand, two_threads):
    """Many blocks of points over the pool's threads, the result as one thread's."""
    for method in GRID_METHODS:
        check("image.grid_sample", {"method": method, "padding_mode": "reflection"},
              [rand((2, 8, 20, 24)), grid_points(rand, (2, 30, 33, 2))], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype,grid_dtype", [("float16", "float32"), ("float16", "float16"),
                                              ("float32", "float16")])
def test_grid_sample_float16_computes_in_float32(rand, dtype, grid_dtype):
    """float16 data or grid is cast to float32 around the float32 kernel (passes/widen.py)."""
    import relvm
    from relvm.ops import OPS

    text = (f"def @main(%x: Tensor[(2, 3, 5, 6), {dtype}], %g: Tensor[(2, 4, 3, 2), {grid_dtype}])"
            ' { image.grid_sample(%x, %g, method="cubic", padding_mode="reflection") }')
    exe = relvm.build(relvm.parse(text))
    assert "invoke_packed image.grid_sample" in exe.bytecode and "cast" in exe.bytecode
    x, g = rand((2, 3, 5, 6), dtype), grid_points(rand, (2, 4, 3, 2), grid_dtype)
    op = OPS["image.grid_sample"]
    want = op.reference(op.make_attrs({"method": "cubic", "padding_mode": "reflection"}), x, g)
    got = relvm.VirtualMachine(exe).invoke("main", x, g)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-3,
                               atol=2e-3)


def test_grid_sample_refuses_shapes_that_do_not_fit(c_kernel):
    kernel = c_kernel("image.grid_sample", {}, ["float32", "float32"], ["float32"])
    x = np.zeros((2, 3, 4, 4), np.float32)
    with pytest.raises(ValueError, match=r"the grid must be \(N, ..., 2\) for this data"):
        kernel(x, np.zeros((1, 5, 5, 2), np.float32), np.zeros((2, 3, 5, 5), np.float32))
    with pytest.raises(ValueError, match=r"wrong output shape"):
        kernel(x, np.zeros((2, 5, 5, 2), np.float32), np.zeros((2, 3, 5, 4), np.float32))


GRID_PROGRAM = ("def @main(%x: Tensor[(n, c, h, w), float32], %g: Tensor[(n, p, q, k), float32]) "
                "{{ image.grid_sample(%x, %g, method=\"{method}\", padding_mode=\"border\") }}")


@pytest.mark.parametrize("method", GRID_METHODS)
def test_grid_sample_over_symbolic_dims(rand, method):
    """One build for every batch, size and grid: the C kernel at several shapes, and the grid's
    batch and last dim checked when the program runs."""
    import relvm
    from relvm.ops import OPS

    vm = relvm.VirtualMachine(relvm.build(relvm.parse(GRID_PROGRAM.format(method=method))))
    op = OPS["image.grid_sample"]
    attrs = op.make_attrs({"method": method, "padding_mode": "border"})
    for n, c, h, w, p, q in [(1, 3, 4, 5, 2, 3), (3, 2, 7, 7, 9, 1), (2, 5, 1, 9, 8, 8)]:
        x, g = rand((n, c, h, w)), grid_points(rand, (n, p, q, 2))
        want = op.reference(attrs, x, g)
        np.testing.assert_allclose(vm.invoke("main", x, g), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(relvm.RelvmInputError, match=r"input %g dim 0 is 3, but n is 2"):
        vm.invoke("main", rand((2, 3, 4, 4)), grid_points(rand, (3, 2, 2, 2)))
    with pytest.raises(relvm.RelvmInputError, match=r"input %g dim 3 \(k\) is 3, but "
                                                     r"image.grid_sample .* needs it to equal 2"):
        vm.invoke("main", rand((2, 3, 4, 4)), grid_points(rand, (2, 2, 2, 3)))


# --- vision.non_max_suppression ------------------------------------------------------------------

@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 17), (1, 4, 60), (2, 2, 0), (0, 3, 5)],
                         ids=str)
def test_non_max_suppression(check, rng, center, shape):
    """Random boxes (corners either way round, some with no area), tied scores, every
    threshold form; NaN scores never kept."""
    batches, classes, n = shape
    for max_out, iou, score in [(3, 0.5, 0.0), (1000, 0.2, -np.inf), (0, 0.5, 0.0),
                                (4, 0.0, 0.3), (50, 1.0, 0.1), (-2, 0.5, 0.0)]:
        boxes = rng.uniform(0, 10, (batches, n, 4)).astype(np.float32)
        if n:
            boxes[:, ::7, 2] = boxes[:, ::7, 0]  # no height
        if center:
            boxes[..., 2:] = np.abs(boxes[..., 2:]) / 2
        scores = (rng.integers(0, 6, shape) / 5).astype(np.float32)
        if scores.size:
            scores.flat[::11] = np.nan
        check("vision.non_max_suppression", {"center_point_box": center},
              [boxes, scores, np.array(max_out), np.array([iou], np.float32),
               np.float32(score)])


def test_non_max_suppression_iou_threshold_out_of_range(c_kernel):
    run = c_kernel("vision.non_max_suppression", {}, ["float32", "float32", "int64", "float32",
                                                      "float32"], ["int64", "int64"])
    boxes, scores = np.zeros((1, 2, 4), np.float32), np.zeros((1, 1, 2), np.float32)
    with pytest.raises(ValueError, match=r"iou_threshold -0.5 must be in \[0, 1\]"):
        run(boxes, scores, np.array(1), np.float32(-0.5), np.float32(0),
            np.zeros((2, 3), np.int64), np.zeros((), np.int64))


# --- image.col2im --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("image, block, dil, pads, strides, batch", [
    ([5, 5], [1, 5], None, None, None, (1, 1)),
    ([5, 5], [2, 2], [1, 1], [0, 0, 0, 0], [2, 2], (2, 3)),
    ([5, 5], [1, 5], None, [0, 1, 0, 1], None, (1, 2)),
    ([6, 6], [2, 2], [1, 5], None, None, (2, 1)),
    ([7, 6], [3, 2], [2, 1], [1, 2, 0, 1], [2, 3], (2, 2)),
    ([3, 4, 5], [1, 1, 5], None, None, None, (1, 2)),
    ([2, 3, 3, 4], [1, 2, 2, 2], None, [0, 0, 1, 1, 0, 1, 0, 1], [1, 1, 2, 1], (1, 2)),
    ([9], [3], [2], [1, 1], [2], (3, 2)),
    ([4, 4], [2, 2], None, None, None, (0, 2)),
], ids=str)
def test_col2im(check, rng, dtype, image, block, dil, pads, strides, batch):
    attrs = {"image_shape": image, "block_shape": block}
    attrs.update({k: v for k, v in (("dilations", dil), ("pads", pads), ("strides", strides))
                  if v is not None})
    from relvm.ops.image import col2im_blocks
    from relvm.ops import OPS
    blocks = col2im_blocks(OPS["image.col2im"].make_attrs(attrs))
    x = rng.standard_normal((batch[0], batch[1] * int(np.prod(block)), int(np.prod(blocks))))
    check("image.col2im", attrs, [x.astype(dtype)], rtol=1e-5)
