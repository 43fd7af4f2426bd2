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
    """The dtypes (their codes in executables, their literals), how the C backend computes the
    narrow float one, and the rules every integer dtype follows."""
    from . import dtypes
    from .frontend.parser import LITERAL_SUFFIXES

    suffix = {dt: s for s, dt in LITERAL_SUFFIXES.items() if s != "f32"}
    suffix["int32"], suffix["bool"] = "none (`2`)", "`True`, `False`"
    lines = ["", "## Element types", "",
             "Every op's inputs and results have one of these dtypes; the code is what an "
             "executable stores (new codes are only ever appended).", "",
             "| code | dtype | literal |", "|---|---|---|"]
    for code, name in enumerate(dtypes.DTYPES):
        lit = suffix.get(name, "")
        lit = lit if " " in lit or "`" in lit else f"`2{lit}`"
        lines.append(f"| {code} | `{name}` | {lit} |")
    return lines + ["", *FLOAT16_RULE, "", *INTEGER_RULES]


#: How the backends compute float16.
FLOAT16_RULE = [
    "The NumPy backend computes each dtype as NumPy does. The C backend has float16 kernels for "
    "data movement, casts, comparisons and a few elementwise ops; every other op on float16 "
    "(convs, matmuls, softmax, arithmetic, reductions) is computed in float32: the build casts "
    "its float16 operands to float32 and its results back to float16, rounding to nearest even "
    "after each op, as ONNX Runtime's CPU provider does (`relvm/passes/widen.py`; fusion folds "
    "the casts into the loops around them)."]


#: How every integer dtype computes, in the references, the C kernels and generated code alike.
INTEGER_RULES = [
    "Integer semantics, the same for every integer dtype (the NumPy references, the C kernels "
    "and the generated fused kernels agree; `tests/programs.py` checks them against Python "
    "integers):", "",
    "- `add`, `subtract`, `multiply`, `negative`, `abs`, integer `sum`/`prod`/`cumsum`/"
    "`cumprod` and the products wrap modulo 2^bits (`abs` of the minimum is the minimum; an "
    "unsigned `negative` is 2^bits - x).",
    "- `divide` truncates toward zero; a zero divisor gives 0; the minimum divided by -1 wraps "
    "to the minimum. `mod` (the sign of a) and `floor_mod` (the sign of b) give 0 for a zero "
    "divisor. An integer `mean` is the sum (modulo 2^64) divided, truncated.",
    "- `left_shift` wraps; a count below 0 or at least the bit width shifts every bit out: 0, "
    "and for `right_shift` of a negative signed value -1 (`right_shift` is arithmetic for "
    "signed types).",
    "- `cast` from a float truncates toward zero when the value lies in [min, max] of the "
    "target, those bounds rounded to the float type first; NaN, infinities and values outside "
    "give 0 (so -1.5 and 65535.5 cast to `uint16` are both 0, as -1.5 and 255.5 to `uint8`). "
    "The one value the float type rounds the maximum up to, just past the range (2^31 in "
    "float32 for `int32`, 2^64 for `uint64`, 32768 in float16 for `int16`), gives the minimum, "
    "as x86 and NumPy do. Integer to integer wraps; anything to `bool` is `x != 0`.",
    "- `clip` bounds are floats: an integer dtype takes ceil(a_min) and floor(a_max), clamped "
    "into its range (a bound past 2^53 is the float's value).",
    "- The C backend has every kernel for the integer dtypes that it has for `int32`, but "
    "`image.resize2d`, which takes float32, float64, int64, int32, int8 and uint8 only; the "
    "build names what it lacks (`the c backend has no kernel for ...`).",
]


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
