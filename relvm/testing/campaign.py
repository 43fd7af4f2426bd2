"""Fuzzing campaigns over program mutants: every mutant is a program or a relvm error, in
bounded time.

:func:`check` runs one mutant through the front end and the compiler -- ``relvm.parse``, then
``relvm.build(fuse=False)`` if it type-checks, and on request the default fused build and one VM
invoke on inputs matching its signature -- and says how it ended. :func:`campaign` checks a range
of mutants (``relvm.testing.mutation``) in worker processes, so that a crash (a segfault in a
kernel) or a hang costs one mutant, not the run::

    report = campaign(seeds, count=10_000)
    assert not report.findings, report.describe()

A *finding* is an exception outside :class:`relvm.RelvmError`, a crash, or a mutant over the
time limit.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .mutation import Seed, mutant

# --- checking one mutant -------------------------------------------------------------------------

#: A mutant is run only if its inputs and every value it computes are no larger (a mutant may
#: ask for terabytes).
MAX_INPUT_ELEMENTS = 100_000


@dataclass
class Outcome:
    """How one mutant ended: ``stage`` reached (parse, build, fused, run) and the error, if any."""

    index: int
    stage: str
    error: str | None = None      # the relvm error class that ended it
    finding: str | None = None    # an exception outside the family: its traceback
    elapsed: float = 0.0          # in all, less the fused build
    compiling: float = 0.0        # the fused build: mostly the C compiler, timed apart


def check(text: str, constants: Any = None, fused: bool = False, run: bool = False) -> Outcome:
    """Run one mutant; exceptions outside relvm's family become a finding (never raised)."""
    import relvm

    outcome = Outcome(-1, "parse")
    start = time.perf_counter()
    try:
        module = relvm.parse(text, constants=constants)
        outcome.stage = "build"
        exe = relvm.build(module, fuse=False)
        if fused:
            outcome.stage = "fused"
            began = time.perf_counter()
            exe = relvm.build(module)
            outcome.compiling = time.perf_counter() - began
        if run:
            inputs = _inputs(module)
            if inputs is not None:
                outcome.stage = "run"
                name = "main" if "main" in module.functions else next(iter(module.functions))
                relvm.VirtualMachine(exe).invoke(name, *inputs)
        outcome.stage = "done"
    except relvm.RelvmError as e:
        outcome.error = type(e).__name__
    except BaseException as e:  # noqa: BLE001  (the point: anything else is a finding)
        if isinstance(e, KeyboardInterrupt):
            raise
        outcome.finding = "".join(traceback.format_exception(type(e), e, e.__traceback__,
                                                             limit=-12))
    outcome.elapsed = time.perf_counter() - start - outcome.compiling
    return outcome


def _inputs(module) -> list | None:
    """Arrays matching the entry's parameter types, each symbol 1..3; None if none fit."""
    from ..ir import dims as D
    from ..ir.nodes import post_order
    from ..ir.types import TensorType, TupleType, tensor_types

    if not module.functions:
        return None
    name = "main" if "main" in module.functions else next(iter(module.functions))
    fn = module.functions[name]
    values: dict = {}
    rng = np.random.default_rng(0)

    def dim(d) -> int:
        for s in D.free_symbols(d):
            values.setdefault(s, 1 + len(values) % 3)
        v = D.substitute(d, values) if not isinstance(d, int) else d
        if not isinstance(v, int) or v < 0:
            raise ValueError(d)
        return v

    def make(t) -> Any:
        if isinstance(t, TupleType):
            return tuple(make(f) for f in t.fields)
        if not isinstance(t, TensorType):
            raise ValueError(t)
        shape = tuple(dim(d) for d in t.shape)
        if np.prod(shape, dtype=float) > MAX_INPUT_ELEMENTS:
            raise ValueError(shape)
        if t.dtype == "bool":
            return rng.integers(0, 2, shape).astype(bool)
        if t.dtype.startswith("float"):
            return rng.standard_normal(shape).astype(t.dtype)
        return rng.integers(0 if t.dtype.startswith("uint") else -5, 6, shape).astype(t.dtype)

    try:
        inputs = [make(p.checked_type) for p in fn.params]
        # A legal program may still compute on gigabytes (zeros(shape=[2147483648, 2])): it
        # would take minutes, not find a bug. Every typed node must be small at these dims.
        for f in module.functions.values():
            for node in post_order(f.body, into_functions=True):
                for t in tensor_types(node.checked_type) if node.checked_type else ():
                    shape = [D.substitute(d, values) if not isinstance(d, int) else d
                             for d in t.shape]
                    known = [d for d in shape if isinstance(d, int)]
                    if np.prod(known, dtype=float) > MAX_INPUT_ELEMENTS:
                        return None
        return inputs
    except (ValueError, OverflowError):
        return None


# --- a campaign over worker processes -------------------------------------------------------------

#: A fused build runs the system C compiler (several ISAs, -O3): its own, looser time limit.
COMPILE_LIMIT = 30.0

@dataclass
class Report:
    """What a campaign saw: counts per stage, the slowest mutant, and every finding."""

    count: int = 0
    elapsed: float = 0.0
    stages: dict = field(default_factory=dict)
    slowest: tuple[float, int] = (0.0, -1)
    slowest_compile: tuple[float, int] = (0.0, -1)
    findings: list[str] = field(default_factory=list)

    def add(self, o: Outcome, limit: float, seeds: Sequence[Seed], seed: int) -> None:
        self.count += 1
        key = o.stage if o.error is None else f"{o.stage}:{o.error}"
        self.stages[key] = self.stages.get(key, 0) + 1
        self.slowest = max(self.slowest, (o.elapsed, o.index))
        self.slowest_compile = max(self.slowest_compile, (o.compiling, o.index))
        slow = o.elapsed > limit or o.compiling > COMPILE_LIMIT
        if o.finding or slow:
            what = o.finding or (f"took {o.elapsed:.2f} s (limit {limit} s) and "
                                 f"{o.compiling:.2f} s in the fused build (limit "
                                 f"{COMPILE_LIMIT} s), in {o.stage}")
            self.findings.append(_describe(seeds, seed, o.index, what))

    def describe(self) -> str:
        lines = [f"{self.count} mutants in {self.elapsed:.1f} s; slowest: mutant "
                 f"{self.slowest[1]} in {self.slowest[0]:.2f} s (fused builds apart: mutant "
                 f"{self.slowest_compile[1]} in {self.slowest_compile[0]:.2f} s); outcomes: "
                 f"{self.stages}"]
        return "\n".join(lines + [f"finding {i + 1}:\n{f}" for i, f in enumerate(self.findings)])


def _describe(seeds: Sequence[Seed], seed: int, index: int, what: str) -> str:
    base, text, applied = mutant(seeds, index, seed)
    shown = text if len(text) <= 3000 else text[:3000] + f"... ({len(text)} characters)"
    return (f"mutant {index} of seed program {base.name!r} ({', '.join(applied)}):\n{what}\n"
            f"--- text ---\n{shown}\n")


def _worker(conn, seeds: Sequence[Seed], seed: int, indices: Sequence[int], fused_every: int,
            run_every: int) -> None:
    """Check ``indices`` in order, telling the parent before each starts and when it ends."""
    import relvm

    # Workers share the machine's cores: a kernel's threads waiting on a descheduled sibling
    # would make the timings measure the machine, not relvm.
    relvm.set_num_threads(1)
    # A mutant may recurse forever (@f calling @f with the argument that stopped it changed):
    # the VM's call-depth error then comes after 200 frames, not a million.
    from ..runtime.vm import thread as state

    state.MAX_FRAMES = 200
    for i in indices:
        conn.send(("start", i))
        _, text, _ = mutant(seeds, i, seed)
        base = seeds[i % len(seeds)]
        o = check(text, base.constants, fused=fused_every > 0 and i % fused_every == 0,
                  run=run_every > 0 and i % run_every == 0)
        o.index = i
        conn.send(("done", o))
    conn.send(("end", None))


def campaign(seeds: Sequence[Seed], count: int, seed: int = 0, workers: int = 2,
             limit: float = 2.0, hard_limit: float = 60.0, fused_every: int = 0,
             run_every: int = 0) -> Report:
    """Check mutants ``0 .. count-1`` in ``workers`` processes; a worker that dies or takes
    ``hard_limit`` seconds on one mutant is replaced, and that mutant is a finding.

    ``fused_every=k`` also builds every k-th mutant with fusion (compiling generated C: slow);
    ``run_every=k`` runs every k-th mutant once on the VM.
    """
    context = multiprocessing.get_context("spawn")
    report = Report()
    start = time.perf_counter()
    queues = [list(range(w, count, workers)) for w in range(workers)]
    running: list[Any] = [None] * workers

    def launch(w: int) -> None:
        parent, child = context.Pipe()
        p = context.Process(target=_worker, args=(child, list(seeds), seed, queues[w],
                                                  fused_every, run_every), daemon=True)
        p.start()
        child.close()
        running[w] = [p, parent, None, time.perf_counter()]  # process, pipe, current, since

    for w in range(workers):
        if queues[w]:
            launch(w)
    while any(r is not None for r in running):
        for w, r in enumerate(running):
            if r is None:
                continue
            p, conn, current, since = r
            if conn.poll(0.05):
                try:
                    kind, value = conn.recv()
                except (EOFError, OSError):
                    kind, value = "died", None
            elif not p.is_alive() and not conn.poll(0):
                kind, value = "died", None
            elif current is not None and time.perf_counter() - since > hard_limit:
                p.kill()
                kind, value = "hung", None
            else:
                continue
            if kind == "start":
                r[2], r[3] = value, time.perf_counter()
            elif kind == "done":
                report.add(value, limit, seeds, seed)
                queues[w].remove(value.index)
                r[2] = None
            elif kind == "end":
                p.join()
                running[w] = None
            else:  # died or hung: that mutant is a finding; the rest go to a new worker
                p.join()
                if current is not None:
                    what = ("the worker process died (a crash)" if kind == "died"
                            else f"still running after {hard_limit} s (a hang)")
                    report.count += 1
                    report.findings.append(_describe(seeds, seed, current, what))
                    queues[w].remove(current)
                running[w] = None
                if queues[w]:
                    launch(w)
    report.elapsed = time.perf_counter() - start
    return report
