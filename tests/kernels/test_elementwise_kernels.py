"""The compiled elementwise kernels (relvm._kernels, built by pip install) against NumPy."""

import numpy as np
import pytest

kernels = pytest.importorskip("relvm._kernels", reason="relvm is not installed with its kernels")
ffi, lib = kernels.ffi, kernels.lib

BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
          "divide": np.divide, "maximum": np.maximum, "minimum": np.minimum}


def _ptr(a: np.ndarray):
    return ffi.cast("float *", ffi.from_buffer(a))


def test_abi_version() -> None:
    assert lib.relvm_kernels_abi_version() == 1


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("n", [0, 1, 7, 16, 17, 1023, 4099])
def test_binary_matches_numpy(name: str, n: int) -> None:
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32) + np.float32(3)
    out = np.full(n, np.nan, np.float32)
    getattr(lib, f"relvm_{name}_f32")(_ptr(a), _ptr(b), _ptr(out), n)
    np.testing.assert_allclose(out, BINARY[name](a, b), rtol=1e-6)


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_max_min_propagate_nan(name: str) -> None:
    a = np.array([np.nan, 1, 2, np.nan], np.float32)
    b = np.array([0, np.nan, 1, np.nan], np.float32)
    out = np.zeros(4, np.float32)
    getattr(lib, f"relvm_{name}_f32")(_ptr(a), _ptr(b), _ptr(out), 4)
    np.testing.assert_array_equal(out, BINARY[name](a, b))


def test_relu_in_place_and_nan() -> None:
    x = np.array([-1, 0, 2.5, np.nan, -np.inf, np.inf], np.float32)
    want = np.maximum(x, 0)
    lib.relvm_relu_f32(_ptr(x), _ptr(x), x.size)  # out aliases x
    np.testing.assert_array_equal(x, want)
