"""The C image.resize2d against the reference, over methods, coordinate modes and dtypes."""

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
