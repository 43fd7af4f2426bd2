"""docs/onnx.md's conformance tables are the ones conformance.py's expectations give.

The backend tests hold every case to those expectations (strict xfail), so the document is
current when this passes. Regenerate it with ``python tests/onnx/make_report.py``.
"""

import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would pass

from make_report import DOC, conformance_tables, expected_outcomes  # noqa: E402


@pytest.mark.skipif(not DOC.exists(), reason="docs/ is not beside the tests")
def test_docs_onnx_md_tables_are_current():
    tables = "\n".join(conformance_tables(expected_outcomes()))
    assert tables in DOC.read_text(), "docs/onnx.md is stale: python tests/onnx/make_report.py"
