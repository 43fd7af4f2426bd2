"""Every ONNX conformance case runs on the build users get: the C kernels (``relvm_backend.py``),
where a case the C build refuses fails."""

import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would pass

from relvm_backend import KERNEL_BACKEND  # noqa: E402


def test_the_conformance_cases_run_on_the_c_kernels() -> None:
    assert KERNEL_BACKEND == "c", "RELVM_TEST_BACKEND moves every case to other kernels"
