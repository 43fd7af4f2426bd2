"""The ONNX backend node cases again, with every graph input dim made a symbolic dim_param:
each model is compiled once, for any shape, and the case's shapes arrive only at run time."""

import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would pass

from conformance import backend_test_case  # noqa: E402
from relvm_backend import SymbolicRelvmBackend  # noqa: E402

OnnxBackendNodeModelTest = backend_test_case(SymbolicRelvmBackend, True, __name__)
