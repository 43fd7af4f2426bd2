"""The README stays true: its example runs, and CI runs exactly its test command."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

pytestmark = pytest.mark.skipif(not README.exists(), reason="README.md is not beside the tests")


def test_readme_example_runs(capsys) -> None:
    code = re.search(r"## Example\n\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "alloc_tensor" in printed and "InvokeStats(" in printed


def test_ci_runs_the_readme_test_command() -> None:
    text = README.read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", text, re.S)
    test_command = next(b for b in blocks if "pytest" in b)
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command.strip() in ci.splitlines()
    main_command = next(b for b in blocks if "relvm demo" in b)
    assert main_command.strip() == "pip install . && relvm demo"


def test_ci_runs_the_memory_safety_script_after_the_tests() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "tests/kernels/run_sanitized.sh" in README.read_text()
    assert ci.index("tests/kernels/run_sanitized.sh") > ci.index('pip install ".[test]" && pytest')
