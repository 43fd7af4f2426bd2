"""The loop plan of each generated fused kernel, decided when the model is built.

A fused kernel's C (``backends/fusedgen.py``) is one loop nest over the output: ``cols``, the
longest run of trailing output dims along which every operand is either contiguous (it has
those dims) or constant (it broadcasts over them), is the inner loop; the other dims are
``rows``, where each operand has its own element strides. Which operands the loop reads, and
which of them are contiguous along ``cols``, is decided here from the symbolic shapes: the
*plan*, stored in the kernel entry. The sizes and strides arrive at run time in a
``relvm_fused_ctx`` (see ``backends/fused.py``). The C is compiled with the system compiler
(``backends/toolchain.py``) and carried by the executable.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..backends.fusedgen import PRELUDE, CannotGenerate, generate, trailing_ones  # noqa: F401
from ..backends.toolchain import (CFLAGS, SANITIZE_FLAGS, compile_flags,  # noqa: F401
                                  compile_library, compiler)
from ..ir import dims as D
from ..ir.types import TensorType


@dataclass(frozen=True)
class Operand:
    """An operand of the generated loop: a kernel input seen with ``trailing_ones`` extra dims."""

    input: int        # which kernel input (-1: the anchor's result)
    dtype: str
    trailing_ones: int  # bias_add views its bias with this many trailing 1-dims
    contiguous: bool    # contiguous along cols (else constant along cols)


@dataclass
class FusedPlan:
    """How one fused kernel's loop is laid out; the loader reads it from the kernel entry."""

    symbol: str
    operands: list[Operand]
    col_dims: int       # how many trailing output dims form ``cols``
    source: str

    def to_json(self) -> dict:
        return {"symbol": self.symbol, "col_dims": self.col_dims,
                "operands": [[o.input, o.dtype, o.trailing_ones, o.contiguous]
                             for o in self.operands]}


# --- planning the loop ------------------------------------------------------------------------------

def _view(t: TensorType, rank: int, trailing_ones: int) -> tuple:
    shape = tuple(t.shape) + (1,) * trailing_ones
    return (1,) * (rank - len(shape)) + shape


def _col_dims(out: TensorType, views: list[tuple]) -> tuple[int, list[bool]]:
    """The longest suffix of output dims where each operand is wholly contiguous or constant."""
    best, best_modes = 0, [False] * len(views)
    for k in range(1, out.ndim + 1):
        modes = []
        for v in views:
            tail_out, tail_in = out.shape[out.ndim - k:], v[len(v) - k:]
            if all(D.prove_equal(i, o) for i, o in zip(tail_in, tail_out)):
                modes.append(True)
            elif all(i == 1 for i in tail_in):
                modes.append(False)
            else:
                return best, best_modes
        best, best_modes = k, modes
    return best, best_modes


def plan_fused(symbol: str, steps: list[dict], in_types: list[TensorType], out_type: TensorType,
               anchor_type: TensorType | None) -> FusedPlan:
    """Plan the loop of a fused kernel named ``symbol`` and generate its C; ``steps`` as in
    ``FusedOp.steps_json()``. With an anchor, step 0 is computed by the library; the loop
    starts from its output. Raises CannotGenerate for an op the generator does not know.
    """
    operands: list[Operand] = []
    views: list[tuple] = []

    def operand(input_index: int, t: TensorType, ones: int) -> None:
        if all((o.input, o.trailing_ones) != (input_index, ones) for o in operands):
            operands.append(Operand(input_index, t.dtype, ones, False))
            views.append(_view(t, out_type.ndim, ones))

    if anchor_type is not None:
        operand(-1, anchor_type, 0)
    for s in steps[1 if anchor_type is not None else 0:]:
        for pos, (kind, i) in enumerate(s["args"]):
            if kind == "in":
                operand(i, in_types[i], trailing_ones(s, pos, out_type.ndim))
    col_dims, modes = _col_dims(out_type, views)
    operands = [Operand(o.input, o.dtype, o.trailing_ones, m) for o, m in zip(operands, modes)]
    plan = FusedPlan(symbol, operands, col_dims, "")
    plan.source = generate(symbol, steps, plan.to_json(), [t.dtype for t in in_types],
                           out_type.dtype, out_type.ndim,
                           anchor_type.dtype if anchor_type is not None else None)
    return plan
