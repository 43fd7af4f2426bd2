"""The tutorial's code blocks run, in order, as written."""

import re
from pathlib import Path

import pytest

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorial.md"


@pytest.mark.e2e
@pytest.mark.skipif(not TUTORIAL.exists(), reason="docs/ is not beside the tests")
def test_tutorial_code_runs(capsys) -> None:
    blocks = re.findall(r"```python\n(.*?)```", TUTORIAL.read_text(), re.S)
    assert len(blocks) >= 8
    namespace: dict = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"tutorial.md block {i + 1}", "exec"), namespace)
    printed = capsys.readouterr().out
    assert "inner dims differ: data (n, 16) vs weight (32, 15) at line 6, column 8" in printed
    assert "@main input %x dim 1: expected 16, got 15" in printed
    assert "n=65 exceeds the upper bound n <= 64" in printed
    assert "fused_dense_bias_add_relu" in printed


EXTERNAL = TUTORIAL.with_name("external-backends.md")


@pytest.mark.e2e
@pytest.mark.skipif(not EXTERNAL.exists(), reason="docs/ is not beside the tests")
def test_external_backend_tutorial_code_runs(capsys) -> None:
    from relvm.backends import external

    blocks = re.findall(r"```python\n(.*?)```", EXTERNAL.read_text(), re.S)
    assert len(blocks) >= 5
    namespace: dict = {}
    try:
        for i, code in enumerate(blocks):
            exec(compile(code, f"external-backends.md block {i + 1}", "exec"), namespace)
    finally:
        external.unregister("numpy_gemm")
    printed = capsys.readouterr().out
    shown = re.search(r"prints\n\n```\n(.*?)\.\.\.\n```", EXTERNAL.read_text(), re.S).group(1)
    assert shown in printed
    assert "invoke_packed numpy_gemm.numpy_gemm_0" in printed
    assert "relvm knows no external backend 'numpy_gemm'" in printed
