"""clip on the default build (C kernels, fusion on), unfused, and in the reference: infinite and
NaN bounds, a_min > a_max (ONNX and np.clip: the result is a_max), float and integer dtypes.

The expectations are written with NumPy's minimum/maximum, never with relvm's reference.
"""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm.testing.reference import evaluate

FLOAT_X = np.array([-3, -1, 0, 0.7, 2, np.nan, np.inf, -np.inf, 1e30, -0.0], np.float32)


def builds(text: str):
    """The default build (fused, C kernels and generated C), the unfused build, the reference."""
    mod = relvm.parse(text)
    fused = relvm.VirtualMachine(relvm.build(mod))
    unfused = relvm.VirtualMachine(relvm.build(mod, fuse=False))
    return {"fused": lambda *a: fused.invoke("main", *a),
            "unfused": lambda *a: unfused.invoke("main", *a),
            "reference": lambda *a: evaluate(mod, *a)}


def expected(x, lo, hi):
    with np.errstate(all="ignore"):
        return np.minimum(np.maximum(x, lo), hi)


@pytest.mark.parametrize("lo,hi,a_min,a_max", [
    ("0.5f", "inf", 0.5, np.inf),        # torch.clamp(min=...): only a lower bound
    ("-inf", "0.25f", -np.inf, 0.25),    # only an upper bound
    ("2f", "-1f", 2.0, -1.0),            # a_min > a_max: every element is a_max
    ("inf", "-inf", np.inf, -np.inf),
    ("1e300", "inf", np.inf, np.inf),    # a bound past float32's range rounds to inf
    ("nan", "1f", np.nan, 1.0),          # a NaN bound gives NaN, as np.clip
    ("-1f", "nan", -1.0, np.nan),
])
def test_float_clip_after_exp(lo, hi, a_min, a_max) -> None:
    text = (f"def @main(%x: Tensor[(n), float32]) {{ "
            f"clip(exp(%x), a_min={lo}, a_max={hi}) }}")
    with np.errstate(all="ignore"):
        want = expected(np.exp(FLOAT_X), np.float32(a_min), np.float32(a_max))
    for name, run in builds(text).items():
        np.testing.assert_allclose(run(FLOAT_X), want, rtol=1e-6, equal_nan=True, err_msg=name)


def test_min_only_clip_prints_and_parses_back() -> None:
    text = "def @main(%x: Tensor[(n), float32]) { clip(%x, a_min=0.5f, a_max=inf) }"
    printed = relvm.print_module(relvm.parse(text))
    assert "clip(%x, a_min=0.5, a_max=inf)" in printed
    assert relvm.parse(printed) == relvm.parse(text)
    negative = relvm.print_module(relvm.parse(text.replace("a_max=inf", "a_max=-inf")))
    assert "a_max=-inf" in negative


def test_leaky_relu_with_an_infinite_slope_is_generated_as_c() -> None:
    text = "def @main(%x: Tensor[(n), float32]) { nn.leaky_relu(exp(%x), alpha=inf) }"
    x = np.array([-1, 0, 1], np.float32)
    for name, run in builds(text).items():
        np.testing.assert_allclose(run(x), np.exp(x), rtol=1e-6, err_msg=name)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64", "int16", "uint16", "uint32",
                                   "uint64"])
@pytest.mark.parametrize("lo,hi", [("5f", "-5f"), ("-inf", "inf"), ("-inf", "-inf"),
                                   ("inf", "inf"), ("-2.5f", "inf"), ("1e30", "-1e30"),
                                   ("-1e30", "1e30"), ("-3f", "100f")])
def test_integer_clip(dtype, lo, hi) -> None:
    text = f"def @main(%x: Tensor[(n), {dtype}]) {{ clip(add(%x, %x), a_min={lo}, a_max={hi}) }}"
    info = np.iinfo(dtype)
    x = np.array([info.min, info.min + 1, 0, 3, 50, info.max], dtype)
    number = {"inf": np.inf, "-inf": -np.inf}
    a_min, a_max = (number.get(v) or float(v.rstrip("f")) for v in (lo, hi))
    # The bounds as relvm defines them for integers: ceil/floor, clamped into the range.
    ilo, ihi = (info.min if v == -np.inf else info.max if v == np.inf
                else min(max(int(r(v)), info.min), info.max)
                for v, r in ((a_min, np.ceil), (a_max, np.floor)))
    twice = (x.astype(np.int64) * 2).astype(dtype)  # add wraps
    want = np.minimum(np.maximum(twice, ilo), ihi).astype(dtype)
    for name, run in builds(text).items():
        np.testing.assert_array_equal(run(x), want, err_msg=name)


def test_integer_clip_with_a_nan_bound_is_a_type_error() -> None:
    text = "def @main(%x: Tensor[(n), int32]) {\n  clip(%x, a_min=nan, a_max=1f)\n}"
    with pytest.raises(relvm.RelvmTypeError) as e:
        relvm.parse(text)
    assert e.value.message == ("clip: a_min is nan, which int32 data cannot be compared with")
    assert (e.value.line, e.value.column) == (2, 3)
