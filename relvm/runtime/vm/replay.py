"""Replays: an entry function without control flow, run again with inputs of the same shapes.

Most instructions of a typical model compute the same thing on every call that has the same
input shapes: a constant is loaded, dims are computed from shapes, a pooled buffer is fetched,
a view of it is made, a view is reshaped. Only kernels, fresh allocations (results), views of
the caller's output arrays and the final ``ret`` do work that changes from call to call.

For a function that qualifies (:func:`plan`), the VM runs the first call with given input
shapes as usual and keeps its frame's registers and dims as a :class:`Replay`. Later calls with
the same shapes start from a copy of those registers, put the new inputs in, and run only the
*live* instructions -- the very same steps the run loop would run, so there is one definition
of what each opcode does. Replays are kept per calling thread, as the pooled buffers they view
are (``state.ThreadState``); a replay is dropped when its thread's pooled storage changes
(``storage_epoch``), since the views it holds would then point at old buffers.

A kernel may also offer ``kernel.bind(arrays, fixed)``: given the arrays of the kept call and
which of them a replay passes again unchanged (``fixed``: kept registers, the very same objects),
it returns a callable taking only the others, with its plan and the fixed arrays' pointers made
once (or None, and the replay calls the kernel as the run loop does). A replay's kernel steps are
bound that way the first time it runs them, so a replayed call skips the kernels' per-call
lookups too -- and a call whose shapes never come back (most calls, in real traffic) pays
nothing for a replay it never uses.

A function qualifies when it is made of kernels, pure instructions, storage and tensor
allocations, dims, ``if``/``goto`` and ``ret`` (the opcode table's flags say which is which),
takes tensors only, writes each register once along any path, and its dim programs read shapes
only (no ``value``/``nonzero``/run-time reshape: those depend on data), or, in a straight-line
function, values that the input shapes alone decide (:func:`per_shape_registers`: a YOLO
head's anchor grid takes its length from ``float(shape[3])``). A straight-line
function is planned once. One with ``if``s is planned per replay, along the path its call took
(each ``if`` records which way it went as it runs, ``Frame.taken``): each ``if`` on the path is
a live *guard*, and a call whose condition goes the other way stops (:class:`Diverged`) and
runs in full, which makes a new replay for its path. silero-vad's model branches on its
sample-rate input this way. An entry whose calls keep switching paths (more than
:data:`MAX_DIVERGED` times) stops replaying: each switch costs a full run and a new plan.

Then every shape in the function depends on the input shapes alone, and so does every value
computed only from constants and shapes (:func:`per_shape_kernels`): position ids
``arange(0, n)``, a causal mask, a table sliced up to a length -- what a static build folds
into constants. A kernel computing such a value into a fresh buffer (memory planning does not
pool them in a function a replay can run) is run by the call a replay is made from and never
again: the replay keeps its result, as it keeps a constant. With ``if``s too: a register
written on two paths (an ``if``'s result) is never such a value, and a kernel on a path keeps
what that path computed, the ``if``s before it being guards (silero-vad's symbolic build
computes the indices it reads from its input's shape once, as its static build folds them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from ..bytecode import reads, spec_of, writes
from ..bytecode.dimprog import reads_values

if TYPE_CHECKING:  # pragma: no cover
    from ..executable import VMFunction

#: How many input-shape signatures an entry keeps replays for; one more drops the least
#: recently used. A server's batcher runs every batch size from 1 to its max batch (64 by
#: default), so the calls of a busy model cycle through that many shapes. A replay holds views
#: of pooled buffers and the few per-shape values (masks, position ids), not its call's results.
MAX_REPLAYS = 64
#: How many calls of an entry with ifs may go another way than their replay before the entry
#: stops replaying (see the module docstring).
MAX_DIVERGED = 16


class Diverged(Exception):
    """A replayed call's ``if`` went the other way than the call the replay was made from."""


def _dims_of_shapes(ins: tuple, programs: Sequence[tuple], known: set[int] | None) -> bool:
    """Whether dims instruction ``ins`` computes the same dims on every call with the same
    input shapes: its program reads shapes only, or (``known``: the registers of a straight-line
    function whose values the input shapes decide, :func:`per_shape_registers`) values of such
    registers only -- YOLO's anchor grid, ``arange(0, float(shape[3]))``."""
    if not 0 <= ins.prog < len(programs):
        return False
    if not reads_values(programs[ins.prog]):
        return True
    return known is not None and all(r in known for r in reads(ins))


def replayable(fn: VMFunction, programs: Sequence[tuple]) -> bool:
    """Whether ``fn`` may be replayed at all (see the module docstring)."""
    if any(p.is_tuple or p.is_list or not p.tensors for p in fn.params):
        return False  # replays are keyed by input shapes: tensors only
    return replayable_code(fn.instructions, programs)


def branches(fn: VMFunction) -> bool:
    return _has_branches(fn.instructions)


def _has_branches(code: Sequence[tuple]) -> bool:
    return any(spec_of(ins).name in ("If", "Goto") for ins in code)


def path(fn: VMFunction, taken: Mapping[int, bool]) -> list[int] | None:
    """The pcs a finished call of ``fn`` ran, in order, from which way each of its ``if``s
    went (``Frame.taken``: its condition may sit in a pooled buffer a later kernel reused);
    None if that does not say."""
    code, pcs, pc = fn.instructions, [], 0
    while 0 <= pc < len(code) and len(pcs) <= len(code):
        ins = code[pc]
        pcs.append(pc)
        name = spec_of(ins).name
        if name == "Ret":
            return pcs
        if name == "If":
            if pc not in taken:
                return None
            pc += ins.true_offset if taken[pc] else ins.false_offset
        elif name == "Goto":
            pc += ins.offset
        else:
            pc += 1
    return None


def plan(fn: VMFunction, programs: Sequence[tuple],
         pcs: Sequence[int] | None = None) -> tuple[tuple[int, ...], list[bool]] | None:
    """The pcs a replay of ``fn`` must run on every call, and for each register whether a
    replay keeps its value (it is written by an instruction that is not live); or None when
    ``fn`` cannot be replayed. ``programs`` are the executable's dim programs (plain data).
    ``pcs`` is the path a call took through a function with ``if``s (:func:`path`); its
    ``if``s are live, as guards."""
    if not replayable(fn, programs):
        return None
    if pcs is None:
        if branches(fn):
            return None  # planned per replay, along the path of its call
        pcs = range(len(fn.instructions))
    same: set[int] = set()      # registers that hold the same value on every replayed call
    written: set[int] = set(range(len(fn.params)))  # an input overwritten: not replayed
    bound = {pc for o in fn.outputs for pc in o.alloc_pcs}
    kernels, known = _per_shape(fn.instructions)
    if branches(fn):
        known = None  # dims read from values: straight-line entries only (replayable)
    once = _computed_once(fn.instructions, bound, kernels)
    live: list[int] = []
    for pc in pcs:
        ins = fn.instructions[pc]
        spec = spec_of(ins)
        if pc in once or spec.name == "ShapeOf":
            same.update(writes(ins))  # the input shapes decide it; a kernel's fresh result too
        elif spec.has("kernel") or spec.name in ("Ret", "If"):
            live.append(pc)
        elif spec.name == "Goto":
            continue
        elif spec.has("dims"):
            if not _dims_of_shapes(ins, programs, known):
                return None
        elif spec.has("pure") or spec.name in ("AllocStorage", "AllocTensor"):
            # The same value as last call when it is computed from values that are the same
            # (the dims are: they depend on the input shapes alone); a fresh buffer, a buffer
            # not kept between calls, or the caller's output array is live.
            fresh = (spec.name == "AllocStorage" and not ins.reuse
                     or spec.name == "AllocTensor" and (ins.storage < 0 or pc in bound))
            if not fresh and all(r in same for r in reads(ins)):
                same.update(writes(ins))
            else:
                live.append(pc)
        else:
            return None  # calls, closures, copies, data-dependent shapes
        for dst in writes(ins):
            if dst in written:
                return None  # a register reused: the registers at the end are not its values
            written.add(dst)
    return tuple(live), [r in same for r in range(fn.num_regs)]


def _guard(ins: tuple, taken: bool, nxt: int) -> Callable:
    """A replayed ``if``: on to the next live step while it goes as it went, else Diverged."""
    test, target = ins.test, ins.target

    def step(f):
        r = f.regs
        if bool(r[test] == r[target]) is not taken:
            raise Diverged
        return nxt
    return step


def replayable_code(code: Sequence[tuple], programs: Sequence[tuple]) -> bool:
    """True if ``code`` has only the instructions a replay (along a path, where it has ``if``s)
    can run: kernels, pure instructions, allocations, ``if``/``goto``, a last ``ret``, and dims
    from the input shapes alone (in straight-line code, or from values they decide)."""
    last = len(code) - 1
    known = None if _has_branches(code) else per_shape_registers(code)
    for pc, ins in enumerate(code):
        spec = spec_of(ins)
        if spec.has("dims"):
            if not _dims_of_shapes(ins, programs, known):
                return False
        elif not (spec.has("kernel") or spec.has("pure") or (spec.name == "Ret" and pc == last)
                  or spec.name in ("AllocStorage", "AllocTensor", "If", "Goto")):
            return False
    return True


def per_shape_kernels(code: Sequence[tuple]) -> set[int]:
    """The pcs of the kernels of ``code`` whose every input depends on the input shapes alone:
    a constant, a ``ShapeOf``, a view or tuple of such values, or the result of such a kernel.
    Kernels are functions of their inputs, so these compute the same values on every call with
    the same input shapes (that takes the same path through ``code``'s ``if``s)."""
    return _per_shape(code)[0]


def per_shape_registers(code: Sequence[tuple]) -> set[int]:
    """The registers of ``code`` whose values the input shapes alone decide
    (constants, shapes, and what :func:`per_shape_kernels` and pure instructions make of
    them)."""
    return _per_shape(code)[1]


def _per_shape(code: Sequence[tuple]) -> tuple[set[int], set[int]]:
    # A register written in more than one place (an if's result, one write a branch) is never
    # known: which write it holds depends on the way the call went, not on the shapes alone.
    # Every other register has one writer, which runs before any reader on any path.
    count: dict[int, int] = {}
    for ins in code:
        for r in writes(ins):
            count[r] = count.get(r, 0) + 1
    known: set[int] = set()
    found: set[int] = set()

    def learn(regs) -> None:
        known.update(r for r in regs if count[r] == 1)

    for pc, ins in enumerate(code):
        spec = spec_of(ins)
        if spec.name in ("LoadConst", "LoadConsti", "ShapeOf"):
            learn(writes(ins))
        elif spec.has("kernel"):
            if all(r in known for r in ins.inputs):
                found.add(pc)
                learn(ins.outputs)
        elif spec.has("pure") and reads(ins) and all(r in known for r in reads(ins)):
            learn(writes(ins))
    return found, known


def _computed_once(code: Sequence[tuple], bound: set[int], kernels: set[int]) -> set[int]:
    """The pcs a replay never runs again besides pure ones: each per-shape kernel (``kernels``,
    :func:`per_shape_kernels`) whose outputs are fresh buffers (a pooled one is shared with other tensors; one bound to the caller's
    output array changes every call), and the allocations of those buffers."""
    alloc_of: dict[int, int] = {}
    for pc, ins in enumerate(code):
        if spec_of(ins).name == "AllocTensor":
            alloc_of[ins.dst] = pc
    once: set[int] = set()
    for pc in kernels:
        allocs = [alloc_of.get(r) for r in code[pc].outputs]
        if all(a is not None and code[a].storage < 0 and a not in bound for a in allocs):
            once.add(pc)
            once.update(allocs)
    return once


def _bound_step(kernel: Callable, ins: tuple, regs: list, keep: Sequence[bool],
                nxt: int) -> Callable | None:
    """InvokePacked ``ins`` as a step calling ``kernel.bind(...)``'s result, or None."""
    bind = getattr(kernel, "bind", None)
    args = ins.inputs + ins.outputs
    if bind is None or len(ins.outputs) != 1:
        return None
    arrays = [regs[a] for a in args]
    if not all(isinstance(a, np.ndarray) for a in arrays):
        return None
    if arrays[-1].size == 0:  # an empty result has nothing to compute, on every replay
        return lambda f: nxt
    bound = bind(arrays, [keep[a] for a in args])
    if bound is None:
        return None
    varying = [a for a in args if not keep[a]]
    if not varying:
        def step(f):
            bound()
            return nxt
    elif len(varying) == 1:
        v0, = varying

        def step(f):
            bound(f.regs[v0])
            return nxt
    elif len(varying) == 2:
        v0, v1 = varying

        def step(f):
            r = f.regs
            bound(r[v0], r[v1])
            return nxt
    else:
        def step(f):
            r = f.regs
            bound(*[r[v] for v in varying])
            return nxt
    return step


def _binding(steps: list, i: int, kernel: Callable, ins: tuple, keep: Sequence[bool],
             plain: Callable) -> Callable:
    """Kernel step ``i`` of a replay, which binds the kernel on its first run (on that call's
    arrays: the kept ones are the very objects every replayed call passes, the others have
    the shapes of the call the replay was made from) and puts the bound step in its place."""
    def bind_then_run(f):
        pc = steps[i][0]
        step = _bound_step(kernel, ins, f.regs, keep, pc + 1) or plain
        steps[i] = (pc, step)
        return step(f)
    return bind_then_run


class Replay:
    """The registers and dims of one finished call, as the next call with its shapes starts,
    and the live steps to run from there (kernel steps bound as they first run, see the module
    docstring)."""

    __slots__ = ("regs", "dims", "epoch", "frame", "_steps", "_made")

    def __init__(self, fn: VMFunction, regs: list, dims: list, n_inputs: int,
                 keep: Sequence[bool], epoch: int, live_steps: Sequence[tuple[int, Callable]],
                 kernel: Callable[[int], Callable], taken: Mapping[int, bool] | None = None):
        #: The registers after the inputs: values that stay, None for the rest.
        self.regs = [r if k else None for r, k in zip(regs[n_inputs:], keep[n_inputs:])]
        self.dims = list(dims)
        self.epoch = epoch
        #: The frame replayed calls run in, made by the VM at the first one and kept.
        self.frame: Any = None
        self._steps: list[tuple[int, Callable]] | None = None
        # What the steps are made of, at the first replay (most replays never run).
        self._made = (fn, keep, live_steps, kernel, taken)

    @property
    def steps(self) -> list[tuple[int, Callable]]:
        """(pc, step) for each live instruction, in order; a kernel's step replaces itself
        with its bound form when it first runs."""
        if self._steps is None:
            self._steps = self._make_steps(*self._made)
            self._made = None
        return self._steps

    @staticmethod
    def _make_steps(fn: VMFunction, keep: Sequence[bool],
                    live_steps: Sequence[tuple[int, Callable]],
                    kernel: Callable[[int], Callable],
                    taken: Mapping[int, bool] | None) -> list[tuple[int, Callable]]:
        steps: list[tuple[int, Callable]] = []
        for pc, step in live_steps:
            ins = fn.instructions[pc]
            if spec_of(ins).has("kernel"):
                # Its shapes are those of the call it was made from: checked then.
                step = _binding(steps, len(steps), kernel(ins.kernel), ins, keep,
                                getattr(step, "replayed", step))
            elif spec_of(ins).name == "If":
                step = _guard(ins, taken[pc], pc + 1)
            steps.append((pc, step))
        return steps
