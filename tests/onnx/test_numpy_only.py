"""The ONNX cases that run on the NumPy kernels (``conformance.NUMPY_ONLY``) are exactly cases the
default build refuses for lack of a C kernel: one that gets its kernel must leave the table, and
every other case runs on the C kernels (``relvm_backend.py``), where a refusal fails it."""

import re

import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would pass

import relvm  # noqa: E402
from conformance import NUMPY_ONLY, node_cases, selected  # noqa: E402
from relvm import RelvmCompileError  # noqa: E402
from relvm.frontend.onnx import from_onnx  # noqa: E402
from relvm_backend import KERNEL_BACKEND  # noqa: E402


@pytest.mark.parametrize("name", sorted(NUMPY_ONLY))
def test_the_default_build_has_no_kernel_for_it(name: str) -> None:
    assert name in selected(), f"{name} is not a conformance case of the selected ops"
    mod, params = from_onnx(node_cases()[name].model)
    with pytest.raises(RelvmCompileError, match=r"c backend has no kernel for .*"
                       + re.escape(NUMPY_ONLY[name])):
        relvm.build(mod, params=params)


def test_the_conformance_cases_run_on_the_c_kernels() -> None:
    assert KERNEL_BACKEND == "c", "RELVM_TEST_BACKEND moves every case to other kernels"
