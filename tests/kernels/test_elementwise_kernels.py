"""C elementwise kernels (unary, clip, leaky_relu, cast, binary with broadcasting, where,
bias_add) against the NumPy references, for every dtype each kernel declares."""

import math

import numpy as np
import pytest

from relvm.backends.ckernels.elementwise import BINARY, UNARY
from relvm.dtypes import DTYPES

SIZES = [0, 1, 7, 17, 4099, 70001]  # 70001: past the parallel grain, uneven chunks
INT_DTYPES = [d for d in DTYPES if np.dtype(d).kind in "iu"]  # code order: int64 ... uint64
UNSIGNED = [d for d in INT_DTYPES if np.dtype(d).kind == "u"]


def _domain(op: str, rand, shape, dtype):
    """Inputs inside the op's domain (log and sqrt of positives), else around zero."""
    if op in ("log", "sqrt", "rsqrt"):
        return rand(shape, dtype, 0.01, 50)
    if op in ("asin", "acos", "atanh"):
        return rand(shape, dtype, -1, 1)
    if op == "acosh":
        return rand(shape, dtype, 1, 50)
    if op in ("exp", "sigmoid", "tanh", "erf"):
        return rand(shape, dtype, -20, 20)
    return rand(shape, dtype, -100, 100)


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("n", SIZES)
def test_unary_matches_reference(check, rand, op, n):
    for dtype in UNARY[op][1]:
        check(op, {}, [_domain(op, rand, (n,), dtype)])


@pytest.mark.parametrize("op", sorted(o for o, (_, d) in UNARY.items() if "float32" in d))
def test_unary_special_values(check, op):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 3.4e38, -3.4e38, 0.5, -0.5,
                  1.5, 2.5, -2.5, 88.7, 88.8, -87.0, -104.0, -200.0], np.float32)
    check(op, {}, [x])
    check(op, {}, [x.astype(np.float64)])


def test_vectorized_math_is_accurate(check):
    """exp, tanh, erf, sigmoid are the C library's own approximations: check them densely."""
    x = np.concatenate([np.linspace(-110, 95, 400_001), np.geomspace(1e-8, 30, 20_000),
                        -np.geomspace(1e-8, 30, 20_000)]).astype(np.float32)
    for op in ("exp", "tanh", "erf", "sigmoid"):
        check(op, {}, [x], rtol=2e-6, atol=1e-37)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_unary_wraps(check, dtype):
    """-min wraps to min (abs too); an unsigned -x is 2^bits - x, its sign 0 or 1."""
    info = np.iinfo(dtype)
    x = np.array([v for v in (info.min, info.min + 1, -1, 0, 1, 2, info.max // 2 + 1, info.max)
                  if info.min <= v <= info.max], dtype)
    for op in ("negative", "abs", "sign", "nn.relu", "bitwise_not"):
        check(op, {}, [x])


@pytest.mark.parametrize("dtype", ["float32", "float64"] + INT_DTYPES)
def test_clip(check, rand, dtype):
    x = rand((1001,), dtype, -200, 200)
    if dtype in ("uint32", "uint64"):
        x[:2] = np.iinfo(dtype).max, np.iinfo(dtype).max // 2 + 1  # uint64's top half too
    bounds = [(-0.5, 0.5), (-2.7, 3.2), (-1e30, 1e30), (5, -5), (-math.inf, 0.0),
              (10.0, math.inf), (math.inf, -math.inf), (1e30, -1e30), (3e9, 1e19),
              (1e19, math.inf)]
    for lo, hi in bounds:
        check("clip", {"a_min": lo, "a_max": hi}, [x])


def test_clip_keeps_nan(check):
    x = np.array([np.nan, 2, -2, 0.5], np.float32)
    for lo, hi in [(-1.0, 1.0), (math.nan, 1.0), (-1.0, math.nan), (1.0, -1.0)]:
        check("clip", {"a_min": lo, "a_max": hi}, [x])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_leaky_relu(check, rand, dtype):
    x = rand((4099,), dtype)
    x[:3] = [np.nan, -0.0, np.inf]
    for alpha in (0.0, 0.01, 0.25, -1.5):
        check("nn.leaky_relu", {"alpha": alpha}, [x])


ALL_DTYPES = list(DTYPES)

#: Bounds of every int range and the floats just past them, as float64.
EDGES = [32767.0, 32768.0, 32768.5, -32768.0, -32768.9, -32769.0, 65535.0, 65535.9, 65536.0,
         4294967295.0, 4294967296.0, 2.0**63, 2.0**63 + 4096, 1.5e19, 2.0**64 - 2048, 2.0**64]


def _cast_source(dtype: str) -> np.ndarray:
    """Values that hit every rule: fractions, negatives, NaN/inf, the int bounds and past them."""
    if dtype == "bool":
        return np.array([True, False, True], bool)
    if np.dtype(dtype).kind == "f":
        vals = [0.0, -0.0, 0.4, -0.6, 1.5, -1.5, 127.0, 127.9, 128.0, -128.0, -128.9, 255.0, 255.5,
                256.0, -1.0, 1e4, 65504.0, np.nan, np.inf, -np.inf, 2147483520.0, 2147483647.0,
                2147483648.0, -2147483648.0, -2147483904.0, 9.2e18, 9.223372036854775807e18,
                -9.3e18, 1e20, -1e20] + EDGES
        with np.errstate(over="ignore"):
            return np.array(vals, np.float64).astype(dtype)
    info = np.iinfo(dtype)
    vals = [info.min, info.min + 1, -1, 0, 1, 127, 128, 255, 256, 32767, 32768, 65535, 65536,
            2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, info.max]
    return np.array([v for v in vals if info.min <= v <= info.max], dtype)


@pytest.mark.parametrize("src", ALL_DTYPES)
@pytest.mark.parametrize("dst", ALL_DTYPES)
def test_cast_every_pair(check, src, dst):
    if src == "float16" and np.dtype(dst).kind in "iu":
        # NumPy compares float16 against int bounds it cannot hold; keep to its finite range.
        x = np.array([0.0, -0.6, 1.5, 127.9, 255.5, -300.0, 1e4, np.nan, np.inf, 32768.0,
                      -32768.0, -32800.0, 65504.0], np.float16)
    else:
        x = _cast_source(src)
    check("cast", {"dtype": dst}, [x])


#: (source, target) -> (values, what each casts to) under the rule below.
FLOAT_TO_INT = {
    ("float32", "uint16"): ([-1.5, -0.0, 65535.0, 65535.9, 65536.0, 1e9, 7.9],
                            [0, 0, 65535, 0, 0, 0, 7]),
    ("float64", "uint32"): ([-1.0, 4294967295.0, 4294967295.5, 4294967296.0],
                            [0, 4294967295, 0, 0]),
    ("float32", "uint32"): ([4294967296.0, 4294967040.0], [0, 4294967040]),
    ("float64", "uint64"): ([2.0**63, 2.0**64 - 2048, 2.0**64, -0.5, np.nan],
                            [2**63, 2**64 - 2048, 0, 0, 0]),
    ("float16", "int16"): ([32768.0, -32768.0, 65504.0], [-32768, -32768, 0]),
    ("float16", "uint16"): ([65504.0, -1.0, np.inf], [65504, 0, 0]),
    ("float32", "int16"): ([-32768.0, -32768.9, 32767.0, 32767.99, -7.9],
                           [-32768, 0, 32767, 0, -7]),
    ("float32", "int32"): ([2.0**31, -2.0**31, 2.0**32], [-2**31, -2**31, 0]),
}


@pytest.mark.parametrize("src,dst", list(FLOAT_TO_INT), ids=str)
def test_float_to_int_casts_follow_one_rule(check, src, dst):
    """NaN, infinities and values outside [min, max] give 0 (so -1.5 to any unsigned type is 0,
    and 65535.9 to uint16 too, as -1.5 and 255.5 to uint8), values inside truncate toward
    zero, and the one value past the range that the float type rounds the maximum to (2^31 in
    float32, 2^64 in float64, 32768 in float16) gives the minimum."""
    values, want = FLOAT_TO_INT[src, dst]
    got = check("cast", {"dtype": dst}, [np.array(values, src)])[0]
    np.testing.assert_array_equal(got, np.array(want, dst))


def test_cast_large_array(check, rand):
    check("cast", {"dtype": "int32"}, [rand((70001,), "float32", -1e6, 1e6)])


# --- binary ops --------------------------------------------------------------------------------

BROADCASTS = [
    ((), ()), ((1,), (1,)), ((17,), (17,)), ((4099,), ()), ((), (4099,)), ((5, 7), (7,)),
    ((5, 7), (5, 1)), ((5, 1), (1, 7)), ((1, 7), (5, 1)), ((2, 3, 5, 7), (3, 1, 7)),
    ((2, 1, 5, 1), (1, 3, 1, 7)), ((0, 7), (7,)), ((5, 0), (5, 1)), ((3, 1), (0,)),
    ((64, 1031), (1031,)), ((1031, 64), (1031, 1)), ((2, 3, 4, 5, 6, 7), (1, 3, 1, 5, 1, 7)),
]


def _operands(op, rand, dtype, sa, sb):
    if op == "power":
        return rand(sa, dtype, 0.1, 3), rand(sb, dtype, -2, 2)
    if op == "divide" and np.dtype(dtype).kind in "iub":
        return rand(sa, dtype, -100, 100), rand(sb, dtype, -3, 3)  # zeros included
    return rand(sa, dtype, -5, 5), rand(sb, dtype, -5, 5)


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_binary_broadcasting(check, rand, op, shapes):
    for dtype in BINARY[op][1]:
        a, b = _operands(op, rand, dtype, *shapes)
        if np.dtype(dtype).kind in "iu" and op in ("add", "subtract", "multiply"):
            a, b = rand(shapes[0], dtype, -10**9, 10**9), rand(shapes[1], dtype, -10**9, 10**9)
        check(op, {}, [a, b])


def test_power_of_two_is_exact(check, rand):
    x = rand((1000,), "float32", -1e3, 1e3)
    check("power", {}, [x, np.array(2.0, np.float32)], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_divide_truncates_and_never_traps(check, dtype):
    info = np.iinfo(dtype)
    if info.min < 0:
        a = np.array([7, -7, 7, -7, 0, info.min, info.min, info.max, 5, -5], dtype)
        b = np.array([2, 2, -2, -2, 0, -1, 0, -1, 0, 3], dtype)
    else:  # uint64's top half too: divided as unsigned, never through int64
        a = np.array([7, 7, 0, 255, 255, 5, info.max, info.max, info.max // 2 + 3], dtype)
        b = np.array([2, 3, 0, 1, 0, 3, info.max, 2, 0], dtype)
    check("divide", {}, [a, b])


REMAINDER_CASES = {
    "signed": ([7, -7, 7, -7, 0, 6, -6, "min", "min", "max", 5, -5, 3],
               [2, 2, -2, -2, 3, 3, -3, -1, 0, -1, 0, 7, -7]),
    "unsigned": ([7, 7, 0, 255, 255, 5, "max", "max", "max", 9],
                 [2, 3, 0, 1, 0, 3, 0, "max", 10, "max"]),
    "float": ([7.5, -7.5, 7.5, -7.5, 0.0, -0.0, -3, 3, -1, 1, np.inf, -np.inf, 1, np.nan, 1],
              [2, 2, -2, -2, -2, 2, np.inf, np.inf, -np.inf, -np.inf, 2, 2, 0, 2, np.nan]),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"] + INT_DTYPES)
@pytest.mark.parametrize("op", ["mod", "floor_mod"])
def test_remainders_edge_cases(check, op, dtype):
    """mod has a's sign, floor_mod b's (-3 floor_mod inf is inf, as NumPy's); an integer
    remainder by 0 is 0 and INT_MIN by -1 never traps."""
    kind = ("float" if dtype.startswith("float") else "unsigned" if dtype in UNSIGNED
            else "signed")
    a, b = REMAINDER_CASES[kind]
    if kind != "float":
        info = np.iinfo(dtype)
        a, b = ([info.min if v == "min" else info.max if v == "max" else v for v in vs]
                for vs in (a, b))
    check(op, {}, [np.array(a, dtype), np.array(b, dtype)])


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_arithmetic_and_order_at_the_limits(check, dtype):
    """add, subtract, multiply wrap; maximum, minimum and the comparisons order the values as
    the type does (uint64 past 2^63 above every smaller value, int16's -1 below 0)."""
    info = np.iinfo(dtype)
    half = info.max // 2 + 1  # 2^63 for uint64: negative if read as int64
    a = np.array([info.max, info.min, info.max, info.min, half, half, 3, 0, info.max - 1, 1],
                 dtype)
    b = np.array([info.max, info.max, 2, 1, 1, half, half, info.max, info.max, info.min], dtype)
    for op in ("add", "subtract", "multiply", "maximum", "minimum", "equal", "not_equal", "less",
               "less_equal", "greater", "greater_equal", "bitwise_and", "bitwise_or",
               "bitwise_xor"):
        check(op, {}, [a, b])
        check(op, {}, [a, b[3:4].reshape(())])  # a 0-d operand: the flat loop


def test_max_min_and_comparisons_with_nan(check):
    a = np.array([np.nan, 1, 2, np.nan, -0.0, 0.0, np.inf], np.float32)
    b = np.array([0, np.nan, 1, np.nan, 0.0, -0.0, np.nan], np.float32)
    for op in ("maximum", "minimum", "equal", "not_equal", "less", "less_equal", "greater",
               "greater_equal"):
        check(op, {}, [a, b])


def test_float16_comparisons_and_abs(check, rand):
    """What the ONNX import of IsNaN (x != x) and IsInf (|x| == inf) runs on float16."""
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 65504, -6e-8, 1], np.float16)
    x = np.concatenate([special, rand((200,), "float16", -60000, 60000)]).astype(np.float16)
    for op in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
        check(op, {}, [x, x[::-1].copy()])
        check(op, {}, [x, np.array(np.inf, np.float16)])
    check("abs", {}, [x])
    assert np.signbit(check("abs", {}, [special])[0]).sum() == 0


def test_binary_refuses_mismatched_output(c_kernel, rand):
    kernel = c_kernel("add", {}, ["float32", "float32"], ["float32"])
    with pytest.raises(ValueError, match="do not broadcast"):
        kernel(rand((3, 4)), rand((4,)), np.empty((3, 5), np.float32))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shapes", [((7,), (7,), (7,)), ((5, 1), (1, 7), (7,)),
                                    ((), (4099,), ()), ((2, 3, 1), (3, 4), (2, 1, 4)),
                                    ((0, 3), (3,), (1, 3))], ids=str)
def test_where(check, rand, dtype, shapes):
    sc, sx, sy = shapes
    check("where", {}, [rand(sc, "bool"), rand(sx, dtype), rand(sy, dtype)])


@pytest.mark.parametrize("dtype", ["float32", "float64"] + INT_DTYPES)
@pytest.mark.parametrize("shape,axis", [((5,), 0), ((4, 6), 1), ((4, 6), -1), ((2, 3, 5, 7), 1),
                                        ((2, 3, 5, 7), 3), ((2, 3, 5, 7), 0), ((1, 64, 1, 1), 1),
                                        ((0, 3), 1)])
def test_bias_add(check, rand, dtype, shape, axis):
    check("nn.bias_add", {"axis": axis}, [rand(shape, dtype), rand((shape[axis],), dtype)])


def test_bias_add_checks_the_bias_length(c_kernel, rand):
    kernel = c_kernel("nn.bias_add", {}, ["float32", "float32"], ["float32"])
    with pytest.raises(ValueError, match="bias length"):
        kernel(rand((2, 3)), rand((4,)), np.empty((2, 3), np.float32))


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_shifts_by_any_count(check, dtype):
    """Left shifts wrap; a count below 0 or past the width shifts every bit out."""
    info = np.iinfo(dtype)
    bits = info.bits
    a = np.array([1, info.max, info.min, 3, info.min, 5, info.max, 1], dtype)
    counts = [0, 1, bits - 1, bits, bits + 3, 2, 1, 0]
    if info.min < 0:
        counts[-1] = -1
    b = np.array(counts, dtype)
    for op in ("left_shift", "right_shift"):
        check(op, {}, [a, b])
