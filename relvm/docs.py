"""Generate the reference documents derived from relvm's tables.

``python -m relvm.docs [DIR]`` writes ``DIR/isa.md`` (from the opcode table), ``DIR/ops.md``
(from the op registry) and ``DIR/format.md`` (from the file format tables); DIR defaults to
``docs``. A test checks the committed files are current.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from .runtime.file.format import format_markdown
from .runtime.bytecode.opcodes import isa_markdown

HEADER = "<!-- Generated from {source} by `python -m relvm.docs`; do not edit. -->"


def ops_markdown() -> str:
    """The op reference (docs/ops.md), generated from the op registry."""
    from .ops import OPS

    lines = [HEADER.format(source="the op registry (relvm/ops)"), "# relvm ops", "",
             "Every primitive op of the IR, with its inputs, attributes (and defaults) and "
             "fusion pattern. Names and attributes are TVM Relay's.", "",
             "| op | inputs | attributes | pattern | meaning |", "|---|---|---|---|---|"]
    for name in sorted(OPS):
        op = OPS[name]
        attrs = ", ".join(a.name + ("" if a.required else f"={_show(a.default)}")
                          for a in op.attrs) or "—"
        lines.append(f"| `{name}` | {', '.join(op.inputs) or '—'} | {attrs} | {op.pattern}"
                     f"{' (data-dependent shape)' if op.data_dependent else ''} | {op.doc} |")
    return "\n".join(lines + _element_types() + _compositions()) + "\n"


def _element_types() -> list[str]:
    """The dtypes, and how the C backend computes the narrow float one."""
    from . import dtypes

    return ["", "## Element types", "",
            "Every op's inputs and results have one of: "
            + ", ".join(f"`{d}`" for d in dtypes.DTYPES) + ". The NumPy backend computes each "
            "as NumPy does. The C backend has float16 kernels for data movement, casts, "
            "comparisons and a few elementwise ops; every other op on float16 (convs, "
            "matmuls, softmax, arithmetic, reductions) is computed in float32: the build casts "
            "its float16 operands to float32 and its results back to float16, rounding to "
            "nearest even after each op, as ONNX Runtime's CPU provider does "
            "(`relvm/passes/widen.py`; fusion folds the casts into the loops around them)."]


def _compositions() -> list[str]:
    """The ONNX ops imported as compositions of the ops above."""
    from .frontend.onnx.converters import COMPOSITIONS

    lines = ["", "## ONNX ops without an op of their own", "",
             "These ONNX ops are imported as compositions of the ops above (chains of "
             "elementwise steps fused into one pass each). float16 inputs of the normalizations "
             "and of Attention and RotaryEmbedding are computed in float32.", "",
             "| ONNX op | composed of |", "|---|---|"]
    return lines + [f"| {op} | {how} |" for op, how in sorted(COMPOSITIONS.items())]


def _show(v: object) -> str:
    if isinstance(v, tuple):
        return "[" + ", ".join(map(str, v)) + "]"
    return '""' if v == "" else str(v)


DOCUMENTS: dict[str, Callable[[], str]] = {"isa.md": isa_markdown, "ops.md": ops_markdown,
                                           "format.md": format_markdown}


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m relvm.docs",
                                     description="Regenerate the reference docs generated from "
                                                 "the code: " + ", ".join(DOCUMENTS))
    parser.add_argument("folder", nargs="?", default="docs",
                        help="where to write them (default: docs)")
    out = Path(parser.parse_args(argv).folder)
    out.mkdir(parents=True, exist_ok=True)
    for name, make in DOCUMENTS.items():
        (out / name).write_text(make())
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
