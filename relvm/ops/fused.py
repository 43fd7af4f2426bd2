"""Fused ops: a chain of registry ops run as one kernel (made by ``relvm/passes/fuse.py``).

A fused op is described by its *steps*: each step applies a registry op to the fused op's
inputs (``("in", i)``) or to earlier steps (``("step", j)``); the last step is the result. The
description is plain data, so the same steps give the type relation, the NumPy reference (for
tests: fused == unfused), the kernel entry stored in an executable, and the generated C code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..ir.nodes import Attrs
from .registry import OPAQUE, OPS, Op

Ref = tuple  # ("in", i) or ("step", j)


@dataclass(frozen=True)
class Step:
    op: Op
    attrs: Attrs
    args: tuple[Ref, ...]


@dataclass(eq=False)
class FusedOp(Op):
    """An Op whose computation is a sequence of registry ops."""

    steps: tuple[Step, ...] = ()

    def steps_json(self) -> list[dict[str, Any]]:
        """The steps as JSON-able data (the kernel entry's ``attrs["steps"]``)."""
        return [{"op": s.op.name, "attrs": _jsonable(dict(s.attrs)),
                 "args": [list(r) for r in s.args]} for s in self.steps]


def make_fused(steps: Sequence[Step], num_inputs: int) -> FusedOp:
    steps = tuple(steps)
    name = "fused_" + "_".join(s.op.name.split(".")[-1] for s in steps)

    def infer(attrs: Attrs, *types: Any) -> Any:
        return _run(steps, types, lambda s, args: s.op.infer(s.attrs, *args))

    def reference(attrs: Attrs, *inputs: Any) -> Any:
        return _run(steps, inputs, lambda s, args: s.op.reference(s.attrs, *args))

    doc = "fused: " + " -> ".join(s.op.name for s in steps)
    return FusedOp(name, tuple(f"input{i}" for i in range(num_inputs)), (), infer, reference,
                   OPAQUE, doc, steps=steps)


def steps_from_json(data: Sequence[dict]) -> tuple[Step, ...]:
    """Rebuild steps from a kernel entry; raises KeyError/ValueError on bad data."""
    steps = []
    for item in data:
        op = OPS[item["op"]]
        args = tuple((str(kind), int(i)) for kind, i in item["args"])
        steps.append(Step(op, op.make_attrs(_unjson(item["attrs"])), args))
    return tuple(steps)


def run_steps(steps: Sequence[Step], inputs: Sequence[Any]) -> Any:
    """Evaluate ``steps`` with each op's NumPy reference."""
    return _run(steps, inputs, lambda s, args: s.op.reference(s.attrs, *args))


def _run(steps: Sequence[Step], inputs: Sequence[Any], apply) -> Any:
    return step_values(steps, inputs, apply)[-1]


def step_values(steps: Sequence[Step], inputs: Sequence[Any], apply) -> list[Any]:
    """``apply(step, args)`` of every step in order, each reading the inputs and earlier
    results its references name: the value of each step."""
    values: list[Any] = []
    for s in steps:
        args = [inputs[i] if kind == "in" else values[i] for kind, i in s.args]
        values.append(apply(s, args))
    return values


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def _unjson(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _unjson(x) for k, x in v.items()}
    if isinstance(v, list):
        return tuple(_unjson(x) for x in v)
    return v
