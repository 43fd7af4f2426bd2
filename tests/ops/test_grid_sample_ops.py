"""image.grid_sample: its type relation over symbolic dims, its errors, the text round trip, and
the reference against ONNX GridSample written out point by point (positions in the grid's
dtype, each pixel read through the padding rule, the taps' weights from Keys' kernel)."""

import itertools
import math

import numpy as np
import pytest

import relvm
from relvm.ir.dims import Sym
from relvm.ops.grid_sample import METHODS, PADDING
from ophelpers import T, infer, run

n, h, w, p, q = Sym("n"), Sym("h"), Sym("w"), Sym("p"), Sym("q")
RNG = np.random.default_rng(19)


# --- type relation -------------------------------------------------------------------------------

def test_types_over_symbolic_dims():
    assert infer("image.grid_sample", T((n, 3, h, w)), T((n, p, q, 2))) == T((n, 3, p, q))
    assert infer("image.grid_sample", T((2, 3, 4, h, w), "float64"), T((2, 5, p, 7, 3)),
                 method="nearest") == T((2, 3, 5, p, 7), "float64")
    assert infer("image.grid_sample", T((n, 1, w)), T((n, 9, 1)), method="cubic") == T((n, 1, 9))
    # data's dtype, whatever the grid's; a static batch on either side wins.
    assert infer("image.grid_sample", T((n, 3, 4, 4), "float16"), T((2, 5, 5, 2))) == \
        T((2, 3, 5, 5), "float16")
    # A symbolic last dim of the grid is taken to be the spatial rank (checked at run time).
    assert infer("image.grid_sample", T((n, 3, h, w)), T((n, p, q, Sym("k")))) == T((n, 3, p, q))


@pytest.mark.parametrize("types, attrs, message", [
    ((T((2, 3)), T((2, 2))), {},
     r"data must be \(N, C\) and 1 to 3 spatial dims \(rank 3 to 5\), got \(2, 3\)"),
    ((T((1, 1, 2, 2, 2, 2)), T((1, 1, 1, 1, 1, 4))), {},
     r"data must be \(N, C\) and 1 to 3 spatial dims \(rank 3 to 5\), got "
     r"\(1, 1, 2, 2, 2, 2\)"),
    ((T((1, 3, 4, 4), "int32"), T((1, 2, 2, 2))), {},
     r"data must have a float dtype, got int32"),
    ((T((1, 3, 4, 4)), T((1, 2, 2, 2), "int64")), {},
     r"grid must have a float dtype, got int64"),
    ((T((1, 3, 4, 4)), T((1, 2, 2))), {},
     r"grid must have rank 4 \(N, 2 output dims, 2\) for data \(1, 3, 4, 4\), got \(1, 2, 2\)"),
    ((T((2, 3, 4, 4)), T((3, 5, 5, 2))), {}, r"grid's batch 3 differs from data's 2"),
    ((T((n, 3, 4, 4)), T((n, 5, 5, 3))), {},
     r"grid's last dim must be 2 \(a coordinate per spatial dim of data \(n, 3, 4, 4\)\), "
     r"got 3"),
    ((T((1, 3, 4, 4, 4)), T((1, 5, 5, 5, 2))), {}, r"grid's last dim must be 3"),
    ((T((1, 3, 4, 4)), T((1, 5, 5, 2))), {"method": "bilinear"},
     r"image.grid_sample: attribute 'method' expects one of 'nearest', 'linear', 'cubic', "
     r"got 'bilinear'"),
    ((T((1, 3, 4, 4)), T((1, 5, 5, 2))), {"padding_mode": "wrap"},
     r"attribute 'padding_mode' expects one of 'zeros', 'border', 'reflection', got 'wrap'"),
])
def test_type_errors(types, attrs, message):
    with pytest.raises(Exception, match=message) as info:
        infer("image.grid_sample", *types, **attrs)
    assert info.type.__name__ in ("OpTypeError", "AttrError")


def test_text_round_trip_and_type_error_in_a_program():
    text = ("def @main(%x: Tensor[(n, 3, h, w), float32], %g: Tensor[(n, p, q, 2), float32]) {"
            ' image.grid_sample(%x, %g, method="cubic", padding_mode="reflection",'
            " align_corners=True) }")
    mod = relvm.parse(text)
    assert str(mod["main"].checked_type.ret) == "Tensor[(n, 3, p, q), float32]"
    assert relvm.parse(relvm.print_module(mod)) == mod
    with pytest.raises(relvm.RelvmTypeError, match=r"grid's batch 2 differs from data's 1"):
        relvm.parse("def @main(%x: Tensor[(1, 3, 4, 4), float32], "
                    "%g: Tensor[(2, 5, 5, 2), float32]) { image.grid_sample(%x, %g) }")


# --- the reference against ONNX GridSample written out --------------------------------------------

def _mirror(v: float, lo: float, hi: float) -> float:
    """v folded into [lo, hi] as a mirror would (one pixel: lo)."""
    span = hi - lo
    if span <= 0:
        return lo
    u = (v - lo) % (2 * span)
    return lo + (2 * span - u if u > span else u)


def _keys(s: float, a: float = -0.75) -> float:
    s = abs(s)
    if s <= 1:
        return (a + 2) * s ** 3 - (a + 3) * s ** 2 + 1
    if s < 2:
        return a * s ** 3 - 5 * a * s ** 2 + 8 * a * s - 4 * a
    return 0.0


def _pixel(img, index, padding, bounds):
    fixed = []
    for i, size, (lo, hi) in zip(index, img.shape, bounds):
        if 0 <= i < size:
            fixed.append(i)
        elif padding == "zeros":
            return 0.0
        elif padding == "border":
            fixed.append(min(max(i, 0), size - 1))
        else:
            fixed.append(int(_mirror(i, lo, hi)))
    return float(img[tuple(fixed)])


def _sample(img, pos, method, padding, bounds):
    if method == "nearest":
        return _pixel(img, [int(v) for v in pos], padding, bounds)
    axes = []
    for v in pos:
        f = math.floor(v)
        t = v - f
        if method == "linear":
            axes.append([(f, 1 - t), (f + 1, t)])
        else:
            axes.append([(f - 1 + i, _keys(t + 1 - i)) for i in range(4)])
    total = 0.0
    for taps in itertools.product(*axes):
        total += math.prod(wt for _, wt in taps) * _pixel(img, [i for i, _ in taps], padding,
                                                          bounds)
    return total


def grid_sample_loop(x, grid, method, padding, align):
    """ONNX GridSample, point by point and channel by channel."""
    ft = np.float64 if grid.dtype == np.float64 else np.float32
    sizes = x.shape[2:]
    bounds = [(0.0, s - 1.0) if align else (-0.5, s - 0.5) for s in sizes]
    out = np.empty(x.shape[:2] + grid.shape[1:-1])
    for b in range(x.shape[0]):
        for point in itertools.product(*map(range, grid.shape[1:-1])):
            pos = []
            for g, size, (lo, hi) in zip(grid[(b,) + point][::-1], sizes, bounds):
                g = ft(g)
                v = ((g + ft(1)) / ft(2) * ft(size - 1) if align
                     else ((g + ft(1)) * ft(size) - ft(1)) / ft(2))
                if method == "nearest":
                    v = ft(np.rint(v))
                if v < lo or v > hi:
                    if padding == "border" and method != "cubic":  # cubic: each tap clamps
                        v = ft(min(max(float(v), 0.0), size - 1.0))
                    elif padding == "reflection":
                        v = ft(_mirror(float(v), lo, hi))
                pos.append(float(v))
            for c in range(x.shape[1]):
                out[(b, c) + point] = _sample(x[b, c], pos, method, padding, bounds)
    return out.astype(x.dtype)


def _grid(shape, dtype):
    """Coordinates across [-1.7, 1.7] with exact ones among them: the borders (+-1), the
    centre, and positions on pixel edges and centres (multiples of 1/4 and 1/6)."""
    g = RNG.uniform(-1.7, 1.7, shape)
    flat = g.reshape(-1)
    exact = np.array([-1, 1, 0, -0.5, 0.5, 0.25, -0.75, 1 / 3, -2 / 3, 1.5, -1.25])
    flat[::3] = exact[RNG.integers(0, len(exact), flat[::3].size)]
    return g.astype(dtype)


CASES = [((2, 3, 4, 5), (2, 3, 6, 2)), ((1, 2, 3, 2), (1, 2, 4, 2)), ((1, 2, 7), (1, 11, 1)),
         ((1, 2, 3, 2, 4), (1, 2, 3, 2, 3)), ((2, 1, 1, 1), (2, 2, 3, 2))]


@pytest.mark.parametrize("shape, gshape", CASES, ids=str)
@pytest.mark.parametrize("method, padding", list(itertools.product(METHODS, PADDING)))
@pytest.mark.parametrize("align", [False, True])
def test_reference_matches_the_loop(shape, gshape, method, padding, align):
    x = RNG.standard_normal(shape).astype(np.float32)
    grid = _grid(gshape, np.float32)
    got = run("image.grid_sample", x, grid, method=method, padding_mode=padding,
              align_corners=align)
    want = grid_sample_loop(x, grid, method, padding, align)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype, grid_dtype", [("float64", "float64"), ("float64", "float32"),
                                               ("float32", "float64"), ("float16", "float16")])
@pytest.mark.parametrize("method", METHODS)
def test_reference_dtypes(dtype, grid_dtype, method):
    x = RNG.standard_normal((1, 2, 5, 4)).astype(dtype)
    grid = _grid((1, 3, 3, 2), grid_dtype)
    got = run("image.grid_sample", x, grid, method=method, padding_mode="reflection")
    want = grid_sample_loop(x, grid, method, "reflection", False)
    assert got.dtype == np.dtype(dtype)
    tol = 2e-3 if dtype == "float16" else 1e-6
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_far_outside_positions():
    """Points far past the borders: zeros reads 0, border the edge pixel, reflection folds them
    back (the period is twice the span, so 1 + 4k lands on 1 with align_corners)."""
    x = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
    grid = np.float32([[[[41.0, 1.0], [-37.0, -1.0], [1e6, -1e6]]]])
    zeros = run("image.grid_sample", x, grid, align_corners=True)
    np.testing.assert_array_equal(zeros, np.zeros((1, 1, 1, 3), np.float32))
    border = run("image.grid_sample", x, grid, padding_mode="border", align_corners=True)
    np.testing.assert_array_equal(border, [[[[11.0, 0.0, 3.0]]]])
    reflected = run("image.grid_sample", x, grid, padding_mode="reflection", align_corners=True)
    np.testing.assert_allclose(reflected, grid_sample_loop(x, grid, "linear", "reflection", True))
    np.testing.assert_array_equal(reflected[..., :2], [[[[11.0, 0.0]]]])


def test_positions_the_spec_leaves_open():
    """NaN samples NaN; an infinite position reads 0 under zeros, the edge under border, NaN
    under reflection; one pixel with align_corners reflects onto it; no pixels read 0."""
    x = np.float32([[[[1.0, 2.0], [3.0, 4.0]]]])
    grid = np.float32([[[[np.nan, 0.0], [np.inf, -1.0], [-np.inf, 1.0]]]])
    for method in METHODS:
        zeros = run("image.grid_sample", x, grid, method=method)
        assert np.isnan(zeros[0, 0, 0, 0]) and (zeros[0, 0, 0, 1:] == 0).all()
        border = run("image.grid_sample", x, grid, method=method, padding_mode="border",
                     align_corners=True)
        assert np.isnan(border[0, 0, 0, 0])
        np.testing.assert_array_equal(border[0, 0, 0, 1:], [2.0, 3.0])
        reflected = run("image.grid_sample", x, grid, method=method, padding_mode="reflection")
        assert np.isnan(reflected).all()
    one = np.float32([[[[5.0]]]])
    g = np.float32([[[[0.7, -3.0], [2.5, 9.0]]]])
    for method in METHODS:
        got = run("image.grid_sample", one, g, method=method, padding_mode="reflection",
                  align_corners=True)
        np.testing.assert_allclose(got, [[[[5.0, 5.0]]]], rtol=1e-6)
    empty = run("image.grid_sample", np.zeros((1, 2, 0, 3), np.float32), g, padding_mode="border")
    np.testing.assert_array_equal(empty, np.zeros((1, 2, 1, 2), np.float32))


def test_batch_mismatch_is_a_run_time_error_of_the_reference():
    with pytest.raises(ValueError, match=r"grid's batch 2 differs from data's 1"):
        run("image.grid_sample", np.zeros((1, 1, 2, 2), np.float32),
            np.zeros((2, 1, 1, 2), np.float32))
