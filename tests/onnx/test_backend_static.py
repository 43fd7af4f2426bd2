"""The ONNX backend node cases of the ops relvm imports, run on the VM with static shapes.

Expected failures carry their reason (``tests/onnx/conformance.py``); ``docs/onnx.md`` has the
counts per op (``python tests/onnx/make_report.py`` regenerates it).
"""

import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would pass

from conformance import backend_test_case  # noqa: E402
from relvm_backend import RelvmBackend  # noqa: E402

OnnxBackendNodeModelTest = backend_test_case(RelvmBackend, False, __name__)
