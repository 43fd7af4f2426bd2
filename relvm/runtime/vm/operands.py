"""Kernel operand checks: a kernel is never handed arrays other than its entry describes.

A kernel -- from the library or generated -- trusts its arguments: their number, dtypes, ranks
and sizes decide how much memory it reads and writes. The compiler makes them right, and the
verifier proves the dtypes and ranks of a loaded file; this is the last line, for a compiler bug
or a file that lies about sizes. Before an ``InvokePacked`` runs its kernel on a set of shapes
it has not seen, :class:`OperandCheck` checks the arrays against the kernel entry: the argument
count, each array's dtype and rank, and the output shapes the op's type relation gives for the
input shapes (so a bias shorter than the product's rows, or an output of another size, is
refused). Each instruction remembers the shape sets it has checked, so a call with familiar
shapes costs one set lookup, and a replay (whose shapes are those of the call it was made from)
none. A failure is a RelvmRuntimeError, which the VM reports with the function, the pc and
the instruction.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ... import dtypes
from ...errors import RelvmRuntimeError
from ..executable import KernelEntry

#: Shape sets remembered per instruction; one more empties the set (dynamic dims make more).
MAX_SEEN = 1024


class OperandCheck:
    """The check of one kernel entry's operands; ``seen`` holds the shape tuples that passed."""

    __slots__ = ("entry", "seen", "_dtypes", "_ranks", "_relation")

    def __init__(self, entry: KernelEntry):
        self.entry = entry
        self.seen: set[tuple] = set()
        self._dtypes = tuple(dtypes.to_numpy(d) for d in entry.inputs + entry.outputs)
        ranks = entry.input_ranks + entry.output_ranks
        self._ranks = ranks if len(ranks) == len(self._dtypes) else None
        self._relation: Callable | None = None

    def __call__(self, arrays: Sequence[Any]) -> None:
        """Check ``arrays`` (inputs, then outputs); remember their shapes when they pass."""
        problem = self._problem(arrays)
        if problem is not None:
            raise RelvmRuntimeError(f"kernel {self.entry.name!r} refused its operands: "
                                    f"{problem}")
        if len(self.seen) >= MAX_SEEN:
            self.seen.clear()
        self.seen.add(tuple(a.shape for a in arrays))

    def _problem(self, arrays: Sequence[Any]) -> str | None:
        entry = self.entry
        if len(arrays) != len(self._dtypes):
            return (f"{len(arrays)} arrays, but it takes {len(entry.inputs)} inputs and "
                    f"{len(entry.outputs)} outputs")
        for i, (a, dt) in enumerate(zip(arrays, self._dtypes)):
            what = _name(entry, i)
            if not isinstance(a, np.ndarray):
                return f"{what} is a {type(a).__name__}, not a tensor"
            if a.dtype != dt:
                return f"{what} is {a.dtype}, but the kernel takes {dt}"
            if self._ranks is not None and a.ndim != self._ranks[i]:
                return f"{what} has rank {a.ndim} {list(a.shape)}, but the kernel takes rank " \
                       f"{self._ranks[i]}"
            if not a.flags.c_contiguous:
                return f"{what} is not C-contiguous"
            if i >= len(entry.inputs) and not a.flags.writeable:
                return f"{what} is read-only"
        return self._sizes(arrays)

    def _sizes(self, arrays: Sequence[np.ndarray]) -> str | None:
        """The output shapes the op's type relation gives for these inputs, compared."""
        if self._relation is None:
            self._relation = _relation(self.entry)
        n_in = len(self.entry.inputs)
        expected = self._relation([a.shape for a in arrays[:n_in]])
        if isinstance(expected, str):
            return expected
        for j, (want, out) in enumerate(zip(expected, arrays[n_in:])):
            if len(want) != out.ndim or any(isinstance(w, int) and w != d
                                            for w, d in zip(want, out.shape)):
                inputs = ", ".join(str(list(a.shape)) for a in arrays[:n_in])
                return (f"for inputs {inputs} the result is {_dims(want)}, but output {j} is "
                        f"{list(out.shape)}")
        return None  # a generated loop checks its operands against its plan itself


def _name(entry: KernelEntry, i: int) -> str:
    n_in = len(entry.inputs)
    return f"input {i}" if i < n_in else f"output {i - n_in}"


def _dims(shape: Sequence) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) else "?" for d in shape) + "]"


def _relation(entry: KernelEntry) -> Callable[[list[tuple]], list[tuple] | str]:
    """``shapes of the inputs -> shapes of the outputs`` (ints; another type where a dim
    depends on values), or a message saying why the inputs are wrong for the op."""
    from ...ir.nodes import Attrs
    from ...ir.types import TensorType, TupleType
    from ...ops.fused import make_fused, steps_from_json
    from ...ops.registry import OPS, OpTypeError

    anchor = None  # a generated loop's anchor step: its result must be the output's shape
    if entry.op == "external":
        from ...ops.external import make_external

        region = entry.attrs["region"]
        steps = steps_from_json(region["steps"])  # each step's "type" is not read
        op, attrs = make_external(entry.attrs["compiler"], entry.attrs["symbol"], steps,
                                  [tuple(r) for r in region["outputs"]], len(entry.inputs),
                                  region), Attrs()
    elif entry.op == "fused":
        steps = steps_from_json(entry.attrs["steps"])
        n_args = len(entry.groups) if entry.groups else len(entry.inputs)
        op, attrs = make_fused(steps, n_args), Attrs()
        plan = entry.attrs.get("plan")
        if plan and any(o[0] < 0 for o in plan["operands"]):
            anchor = steps[0]
    else:
        op = OPS[entry.op]
        attrs = op.make_attrs(entry.attrs)
    groups = entry.groups or (-1,) * len(entry.inputs)
    in_dtypes = entry.inputs

    def relation(shapes: list[tuple]) -> list[tuple] | str:
        types, i = [], 0
        for g in groups:
            if g < 0:
                types.append(TensorType(shapes[i], in_dtypes[i]))
                i += 1
            else:
                types.append(TupleType(tuple(TensorType(shapes[j], in_dtypes[j])
                                             for j in range(i, i + g))))
                i += g
        try:
            result = op.infer(attrs, *types)
            first = anchor and anchor.op.infer(anchor.attrs, *[types[i] for _, i in anchor.args])
        except (OpTypeError, ValueError, TypeError, ZeroDivisionError, IndexError) as e:
            return f"{entry.op} does not accept inputs {[list(s) for s in shapes]}: {e}"
        if first and tuple(first.shape) != tuple(result.shape):
            return f"its anchor's result {_dims(first.shape)} is not the output's " \
                   f"{_dims(result.shape)}"
        return [tuple(t.shape) for t in _leaves(result)]
    return relation


def _leaves(t: Any):
    from ...ir.types import TupleType

    if isinstance(t, TupleType):
        for f in t.fields:
            yield from _leaves(f)
    else:
        yield t
