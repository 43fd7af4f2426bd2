"""External ops: a region of ops that an external backend runs as one kernel.

``relvm/passes/external.py`` turns each call of a ``Compiler`` function (made by
``relvm.partition``) into a call of an :class:`ExternalOp`. Like a fused op, its computation
is data -- the region's steps (``ops/fused.py``'s form) and the references it returns -- so the
same description gives its type relation, its NumPy reference, the kernel entry an executable
records (checked at load as fused steps are) and, when the backend cannot run where the file is
loaded and the user asked for it, a run on relvm's own kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..ir.types import TupleType
from .fused import Ref, Step, step_values
from .registry import OPAQUE, Op


@dataclass(eq=False)
class ExternalOp(Op):
    """An Op run by external backend ``compiler`` under ``symbol``."""

    compiler: str = ""
    symbol: str = ""
    steps: tuple[Step, ...] = ()
    outputs: tuple[Ref, ...] = ()
    #: The region as the kernel entry records it (``external.Region.to_json()``).
    region: dict = field(default_factory=dict)


def make_external(compiler: str, symbol: str, steps: Sequence[Step], outputs: Sequence[Ref],
                  num_inputs: int, region: dict) -> ExternalOp:
    steps, outputs = tuple(steps), tuple(tuple(r) for r in outputs)

    def pick(values: list[Any], inputs: Sequence[Any], tuple_of) -> Any:
        out = [inputs[i] if kind == "in" else values[i] for kind, i in outputs]
        return out[0] if len(out) == 1 else tuple_of(out)

    def infer(attrs, *types: Any) -> Any:
        values = step_values(steps, types, lambda s, args: s.op.infer(s.attrs, *args))
        return pick(values, types, lambda ts: TupleType(tuple(ts)))

    def reference(attrs, *inputs: Any) -> Any:
        values = step_values(steps, inputs, lambda s, args: s.op.reference(s.attrs, *args))
        return pick(values, inputs, tuple)

    doc = f"external ({compiler}): " + " -> ".join(s.op.name for s in steps)
    return ExternalOp(f"{compiler}.{symbol}", tuple(f"input{i}" for i in range(num_inputs)), (),
                      infer, reference, OPAQUE, doc, compiler=compiler, symbol=symbol,
                      steps=steps, outputs=outputs, region=region)
