"""The tutorial's code blocks run, in order, as written."""

import re
from pathlib import Path

import pytest

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorial.md"


def run_blocks(doc: Path, at_least: int, namespace: dict, skip=lambda block: False) -> None:
    """Run a guide's ```python blocks in order in ``namespace`` (but those ``skip`` names)."""
    blocks = [b for b in re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)
              if not skip(b)]
    assert len(blocks) >= at_least
    for i, code in enumerate(blocks):
        exec(compile(code, f"{doc.name} block {i + 1}", "exec"), namespace)


@pytest.mark.e2e
@pytest.mark.skipif(not TUTORIAL.exists(), reason="docs/ is not beside the tests")
def test_tutorial_code_runs(capsys) -> None:
    run_blocks(TUTORIAL, 8, {})
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

    try:
        run_blocks(EXTERNAL, 5, {})
    finally:
        external.unregister("numpy_gemm")
    printed = capsys.readouterr().out
    shown = re.search(r"prints\n\n```\n(.*?)\.\.\.\n```", EXTERNAL.read_text(), re.S).group(1)
    assert shown in printed
    assert "invoke_packed numpy_gemm.numpy_gemm_0" in printed
    assert "relvm knows no external backend 'numpy_gemm'" in printed


SERVING = TUTORIAL.with_name("serving.md")


@pytest.mark.e2e
@pytest.mark.skipif(not SERVING.exists(), reason="docs/ is not beside the tests")
def test_serving_guide_code_runs(capsys, tmp_path, monkeypatch) -> None:
    """Every block but Ray's (its own test, tests/serving/test_ray.py, runs that deployment),
    in order; what the guide says they print, they print."""
    monkeypatch.chdir(tmp_path)  # the guide saves mlp.rvm in the working directory
    text = SERVING.read_text()
    namespace: dict = {}
    try:
        run_blocks(SERVING, 5, namespace, skip=lambda block: "import ray" in block)
    finally:
        if "uv" in namespace:
            namespace["uv"].should_exit = True
    printed = capsys.readouterr().out
    for shown in re.findall(r"prints\n\n```\n(.*?)\n```", text, re.S):
        assert shown in printed
    assert "relvm_batch_size_count" in printed
