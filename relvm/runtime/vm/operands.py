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

Shapes never seen before are the rule, not the exception, in the traffic a dynamic-shape VM
serves (every OCR crop, sentence or decoding step has new lengths), so the relation is not run
on IR types per call. Once per kernel entry it is run on *symbolic* inputs -- a fresh symbol for
every input dim -- and what it finds, every output dim as an expression of the input dims and
every equality or broadcast it had to assume, becomes a dim program over the operands' shapes
(:func:`compiled_relation`): a handful of integer comparisons a call. A relation that cannot
be stated that way (one that needs a dim's value) keeps the exact check on IR types. A compiled
program that refuses hands over to the exact relation, which gives the message (and has the
last word).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ... import dtypes
from ...errors import RelvmRuntimeError
from ..bytecode.dimprog import DimError, compile_program
from ..executable import KernelEntry

#: Shape sets remembered per instruction; one more empties the set (dynamic dims make more).
MAX_SEEN = 1024


class OperandCheck:
    """The check of one kernel entry's operands; ``seen`` holds the shape tuples that passed."""

    __slots__ = ("entry", "seen", "_dtypes", "_ranks", "_relation", "_compiled")

    def __init__(self, entry: KernelEntry):
        self.entry = entry
        self.seen: set[tuple] = set()
        self._dtypes = tuple(dtypes.to_numpy(d) for d in entry.inputs + entry.outputs)
        ranks = entry.input_ranks + entry.output_ranks
        self._ranks = ranks if len(ranks) == len(self._dtypes) else None
        self._relation: Callable | None = None
        #: The relation as an integer program over the operands' shapes; False where the
        #: relation cannot be stated so (then every new shape set runs the exact one).
        self._compiled: Callable | bool | None = None

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
        """The output shapes the op's type relation gives for these inputs, compared: by the
        compiled relation, or (where there is none, or it refuses) on IR types."""
        if self._compiled is None:
            self._compiled = compiled_relation(self.entry) or False
        if self._compiled:
            try:
                self._compiled(None, arrays)
                return None
            except DimError:
                pass  # the exact relation below says why (and may accept after all)
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


def _op_of(entry: KernelEntry) -> tuple[Any, Any, Any]:
    """The op (with attrs) an entry runs and, for a generated loop over an anchor's product,
    that anchor step (its result must be the output's shape), else None."""
    from ...ir.nodes import Attrs
    from ...ops.fused import make_fused, steps_from_json
    from ...ops.registry import OPS

    if entry.op == "external":
        from ...ops.external import make_external

        region = entry.attrs["region"]
        steps = steps_from_json(region["steps"])  # each step's "type" is not read
        return make_external(entry.attrs["compiler"], entry.attrs["symbol"], steps,
                             [tuple(r) for r in region["outputs"]], len(entry.inputs),
                             region), Attrs(), None
    if entry.op == "fused":
        steps = steps_from_json(entry.attrs["steps"])
        n_args = len(entry.groups) if entry.groups else len(entry.inputs)
        plan = entry.attrs.get("plan")
        anchor = steps[0] if plan and any(o[0] < 0 for o in plan["operands"]) else None
        return make_fused(steps, n_args), Attrs(), anchor
    op = OPS[entry.op]
    return op, op.make_attrs(entry.attrs), None


def _relation(entry: KernelEntry) -> Callable[[list[tuple]], list[tuple] | str]:
    """``shapes of the inputs -> shapes of the outputs`` (ints; another type where a dim
    depends on values), or a message saying why the inputs are wrong for the op."""
    from ...ir.types import TensorType, tensor_types
    from ...ops.registry import OpTypeError
    from ..verify.kernelcheck import grouped

    op, attrs, anchor = _op_of(entry)

    def relation(shapes: list[tuple]) -> list[tuple] | str:
        types = grouped([TensorType(s, dt) for s, dt in zip(shapes, entry.inputs)], entry.groups)
        try:
            result = op.infer(attrs, *types)
            first = anchor and anchor.op.infer(anchor.attrs, *[types[i] for _, i in anchor.args])
        except (OpTypeError, ValueError, TypeError, ZeroDivisionError, IndexError) as e:
            return f"{entry.op} does not accept inputs {[list(s) for s in shapes]}: {e}"
        if first and tuple(first.shape) != tuple(result.shape):
            return f"its anchor's result {_dims(first.shape)} is not the output's " \
                   f"{_dims(result.shape)}"
        return [tuple(t.shape) for t in tensor_types(result)]
    return relation


def compiled_relation(entry: KernelEntry) -> Callable | None:
    """The kernel's operand relation as a compiled dim program ``run(None, arrays)`` raising
    DimError where ``arrays`` (inputs, then outputs) do not fit it; None where the op's type
    relation cannot be stated over symbolic dims (see the module docstring)."""
    from ...ir import dims as D
    from ...ir.types import tensor_types
    from ..verify.kernelcheck import symbolic_args

    op, attrs, anchor = _op_of(entry)
    if len(entry.input_ranks) != len(entry.inputs):
        return None
    # The verifier's symbolic arguments: input i's dim a is a symbol of its own, read from
    # the operand's shape.
    types = symbolic_args(entry.inputs, entry.input_ranks, entry.groups)
    flat = [leaf for t in types for leaf in tensor_types(t)]
    where = {D.dim_key(d): ("shape", i, axis)
             for i, t in enumerate(flat) for axis, d in enumerate(t.shape)}
    try:
        with D.assumptions() as assumed:
            result = op.infer(attrs, *types)
            first = anchor and anchor.op.infer(anchor.attrs, *[types[i] for _, i in anchor.args])
    except Exception:  # noqa: BLE001 -- the relation needs values: the exact check stays
        return None
    leaves = [tuple(t.shape) for t in tensor_types(result)]
    if len(leaves) != len(entry.outputs) or any(
            len(s) != r for s, r in zip(leaves, entry.output_ranks)):
        return None

    def expr(d: Any) -> tuple:
        return D.program_expr(d, lambda x: where.get(D.dim_key(x)))

    statements: list[tuple] = []
    try:
        for kind, a, b in assumed:
            statements.append((D.ASSUMPTION_STATEMENTS[kind], expr(a), expr(b),
                               f"{kind} {{a}} {{b}}"))
        if first:
            for a, b in zip(first.shape, result.shape):
                if D.prove_equal(a, b) is not True:
                    statements.append(("check", expr(a), expr(b), "anchor"))
        n_in = len(entry.inputs)
        for j, shape in enumerate(leaves):
            for axis, d in enumerate(shape):
                if isinstance(d, int) or all(D.dim_key(D.as_expr(s)) in where
                                             for s in D.free_symbols(d)):
                    statements.append(("check", ("shape", n_in + j, axis), expr(d), "output"))
                # else a dim the values decide: as the exact relation, it is not compared
    except D.NotInProgram:
        return None
    if not statements:
        return lambda dims, arrays: None
    run = compile_program(tuple(statements))
    return lambda dims, arrays: run([], arrays)
