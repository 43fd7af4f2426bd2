"""torch and the zoo's other extras stay in benchmarks/: relvm and its tests never import them,
but for the transformer-export tests of the ``hf`` test extra (tests/onnx/test_hf_exports.py,
which skip without it)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = {"torch", "torchvision", "transformers", "onnxscript", "openvino"}
#: The one file that may import some: what the hf extra installs.
HF_TESTS = {"tests/onnx/test_hf_exports.py": {"torch", "transformers", "onnxscript"}}

pytestmark = pytest.mark.skipif(not (ROOT / "relvm").is_dir(),
                                reason="the relvm sources are not beside the tests")


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_benchmark_extra_is_imported_outside_benchmarks() -> None:
    found = {}
    for folder in ("relvm", "tests", "kernels"):
        for p in (ROOT / folder).rglob("*.py"):
            name = str(p.relative_to(ROOT))
            found[name] = sorted(_imported(p) & (EXTRAS - HF_TESTS.get(name, set())))
    assert {p: names for p, names in found.items() if names} == {}
