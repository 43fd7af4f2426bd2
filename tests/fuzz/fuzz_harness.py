"""The differential harness of the fuzz tests: one program, one build per leg, many shapes.

A *case* is a generated program and several runs (an assignment of its symbolic dims and a
seed for its inputs). Every leg builds the program once and runs all the runs on one VM, so
buffers kept between invokes of different shapes are exercised too. Each leg's results must
equal the reference interpreter's; a difference fails with the program text, the dims, the
input shapes and the first differing element.

The legs that matter most run on the C kernels, as users run relvm (:data:`C_LEGS`); nothing
falls back to NumPy's kernels silently: a :class:`Tally` counts the programs each leg ran, and
a C build may only be replaced by a NumPy one for the ops listed in :data:`NUMPY_ONLY`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

import relvm
from relvm.errors import RelvmCompileError
from relvm.testing import strategies as rst
from relvm.testing.reference import evaluate

RUNS = 5  # assignments of the symbolic dims per program, on one build


@dataclass(frozen=True)
class Run:
    dims: dict
    seed: int


@dataclass(frozen=True, repr=False)
class FuzzCase:
    program: rst.GeneratedProgram
    runs: tuple[Run, ...]

    def __repr__(self) -> str:
        runs = ", ".join(f"{r.dims} seed={r.seed}" for r in self.runs)
        return f"FuzzCase(\n{self.program.text}runs: {runs})"

    @classmethod
    def from_text(cls, text: str, *dims: dict, **kwargs: Any) -> "FuzzCase":
        """A hand-written case (the regression examples): each dims dict is one run."""
        return cls(rst.GeneratedProgram.from_text(text, **kwargs),
                   tuple(Run(d, i) for i, d in enumerate(dims)))


@st.composite
def fuzz_cases(draw, runs: int = RUNS, **program_kwargs: Any) -> FuzzCase:
    """A generated program and ``runs`` legal assignments of its dims, with input seeds."""
    program = draw(rst.programs(**program_kwargs))
    drawn = tuple(Run(draw(rst.dim_assignments(program)), draw(st.integers(0, 2**16)))
                  for _ in range(runs))
    return FuzzCase(program, drawn)


# --- legs ---------------------------------------------------------------------------------------

#: Ops the C backend has no kernel for that generated programs may use. A program with one runs
#: its C legs on the NumPy kernels instead, and the tally counts it; a C build refused for any
#: other op fails. Empty: the C backend covers every op and dtype the generator makes.
NUMPY_ONLY: frozenset[str] = frozenset()

#: The legs that must run on the C kernels (the build users get, and its variants).
C_LEGS = ("vm", "vm unfused", "vm with weights bound as constants (params=)",
          "vm invoke_with_outputs (zero-copy)", "vm with upper_bounds (arena)",
          "vm after save_bytes -> load_bytes")


@dataclass
class Leg:
    """One way of running the program: ``run(inputs, want) -> results`` on one build, on the
    kernels of ``backend``; a C leg (``c``) was meant for the C kernels."""

    name: str
    backend: str
    run: Callable[[list, Any], Any]
    c: bool = True

    def __str__(self) -> str:
        return f"{self.name} [{self.backend} kernels]"


@dataclass
class Tally:
    """How many programs ran each leg on which kernels, how many ran their C legs on NumPy's
    kernels, and for which missing ops: what the differential test asserts after its run."""

    programs: int = 0
    fell_back: int = 0                                   # programs
    ran: Counter = field(default_factory=Counter)        # (leg, backend) -> programs
    fallbacks: Counter = field(default_factory=Counter)  # missing op -> builds

    def reset(self) -> "Tally":
        self.programs = self.fell_back = 0
        self.ran.clear()
        self.fallbacks.clear()
        return self

    def record(self, legs: list[Leg]) -> None:
        self.programs += 1
        self.fell_back += any(leg.c and leg.backend != "c" for leg in legs)
        self.ran.update((leg.name, leg.backend) for leg in legs)

    def __str__(self) -> str:
        legs = "; ".join(f"{name} [{backend}] {n}"
                         for (name, backend), n in sorted(self.ran.items()))
        ops = ", ".join(f"{op} {n}" for op, n in sorted(self.fallbacks.items()))
        return (f"{self.programs} programs, {self.fell_back} with their C legs on NumPy's "
                f"kernels{f' (missing: {ops})' if ops else ''}; programs per leg: {legs}")

    def check(self, least: int) -> None:
        """At least ``least`` programs ran, and each ran every C leg on the C kernels unless
        it needed an op of :data:`NUMPY_ONLY`."""
        assert self.programs >= least, f"only {self}"
        for name in C_LEGS:
            assert self.ran[(name, "c")] == self.programs - self.fell_back, (
                f"{name} did not run on the C kernels for every program: {self}")


def _flat(v: Any) -> list[np.ndarray]:
    if isinstance(v, tuple):
        return [x for f in v for x in _flat(f)]
    return [np.asarray(v)]


def _invoke_leg(name: str, exe, c: bool = True) -> Leg:
    vm = relvm.VirtualMachine(exe)
    return Leg(name, exe.backend, lambda inputs, want: vm.invoke("main", *inputs), c)


def _zero_copy_leg(exe) -> Leg:
    vm = relvm.VirtualMachine(exe)

    def run(inputs, want):
        outs = [np.full(w.shape, 77, w.dtype) for w in _flat(want)]
        vm.invoke_with_outputs("main", list(inputs), outs)
        return tuple(outs)
    return Leg("vm invoke_with_outputs (zero-copy)", exe.backend, run)


def _onto_inputs_leg(exe) -> Leg:
    """Each result written into (a copy of) an input of its shape and dtype where there is one:
    the VM must notice that an output is an input it still reads."""
    vm = relvm.VirtualMachine(exe)

    def run(inputs, want):
        inputs = [np.array(a) if isinstance(a, np.ndarray) else a for a in inputs]
        free = [a for a in inputs if isinstance(a, np.ndarray) and a.ndim]
        outs = []
        for w in _flat(want):
            same = next((a for a in free if a.shape == w.shape and a.dtype == w.dtype), None)
            if same is not None:
                free = [a for a in free if a is not same]
            outs.append(same if same is not None else np.full(w.shape, 77, w.dtype))
        vm.invoke_with_outputs("main", inputs, outs)
        return tuple(outs)
    return Leg("vm invoke_with_outputs onto its inputs", exe.backend, run)


def weights(program: rst.GeneratedProgram, run: Run) -> dict[str, np.ndarray]:
    """The inputs a user would bind as constants -- every input of static shape but the data
    (``%p...``) and bool conditions: weights, biases, norms' statistics -- with the values
    ``run`` gives them. Every run of a case uses these values, so one build can hold them."""
    inputs = rst.make_inputs(program, run.dims, run.seed)
    return {p.name: a for p, a in zip(program.params, inputs)
            if not p.name.startswith("p") and p.dtype != "bool"
            and all(isinstance(d, int) for d in p.shape)}


def _params_leg(mod, program: rst.GeneratedProgram, tally: Tally | None, bound: dict) -> Leg:
    """The build with ``bound`` as constants (``relvm.build(mod, params=...)``): what users
    build, where weights are packed once, batch norms fold into convs and constants fold."""
    vm = relvm.VirtualMachine(build_c(mod, tally, params=bound))
    keep = [i for i, p in enumerate(program.params) if p.name not in bound]

    def run(inputs, want):
        return vm.invoke("main", *[inputs[i] for i in keep])
    return Leg("vm with weights bound as constants (params=)", vm.exe.backend, run)


def build_c(mod, tally: Tally | None = None, **kwargs: Any):
    """``relvm.build`` on the C kernels. A build refused for missing kernels is built on NumPy's
    instead only when every missing op is in :data:`NUMPY_ONLY` (counted in ``tally``);
    otherwise the refusal is an AssertionError."""
    try:
        return relvm.build(mod, backend="c", **kwargs)
    except RelvmCompileError as e:
        if "has no kernel" not in str(e):
            raise
        missing = missing_c_kernels(mod, **kwargs)
        if not missing or not missing <= NUMPY_ONLY:
            raise AssertionError(f"the C backend refused a program it should run: {e}") from e
    if tally is not None:
        tally.fallbacks.update(missing)
    return relvm.build(mod, backend="numpy", **kwargs)


def missing_c_kernels(mod, **kwargs: Any) -> set[str]:
    """The ops of ``mod``'s kernels the C backend lacks (for fused kernels, their steps')."""
    from relvm.backends import c

    missing = set()
    for k in relvm.build(mod, backend="numpy", **kwargs).kernels:
        if c.supports(k):
            continue
        steps = k.attrs["steps"] if k.op == "fused" else [{"op": k.op}]
        missing.update(s["op"] for s in steps)
    return missing


def numpy_legs(mod, program: rst.GeneratedProgram, tally: Tally | None = None,
               bound: dict | None = None) -> list[Leg]:
    """The VM on the NumPy kernels, fused and unfused (what a broken NumPy kernel affects)."""
    return [_invoke_leg("vm", relvm.build(mod, backend="numpy"), c=False),
            _invoke_leg("vm unfused", relvm.build(mod, backend="numpy", fuse=False), c=False)]


def legs(mod, program: rst.GeneratedProgram, tally: Tally | None = None,
         bound: dict | None = None) -> list[Leg]:
    """Every way relvm can run ``mod``, each built once: the C legs (:data:`C_LEGS`: the
    default build, unfused, with the ``bound`` inputs as constants, into caller arrays, with an
    arena, after save -> load) and the VM on the NumPy kernels."""
    exe = build_c(mod, tally)
    return [_invoke_leg("vm", exe), _invoke_leg("vm unfused", build_c(mod, tally, fuse=False)),
            _params_leg(mod, program, tally, bound or {}),
            _invoke_leg("vm", relvm.build(mod, backend="numpy"), c=False), _zero_copy_leg(exe),
            _invoke_leg("vm with upper_bounds (arena)",
                        build_c(mod, tally, upper_bounds=program.upper_bounds)),
            _invoke_leg("vm after save_bytes -> load_bytes", relvm.load_bytes(exe.save_bytes()))]


def onto_inputs_legs(mod, program: rst.GeneratedProgram, tally: Tally | None = None,
                     bound: dict | None = None) -> list[Leg]:
    """The default build writing its results into its own inputs, fused and unfused."""
    return [_onto_inputs_leg(build_c(mod, tally)), _onto_inputs_leg(build_c(mod, tally,
                                                                            fuse=False))]


# --- comparison ---------------------------------------------------------------------------------


def describe_inputs(program: rst.GeneratedProgram, inputs: list) -> str:
    return ", ".join(f"%{p.name} {a.dtype}{list(a.shape)}"
                     for p, a in zip(program.params, inputs))


def first_difference(got: list[np.ndarray], want: list[np.ndarray], rtol: float) -> str | None:
    """A description of the first result that differs, or None if all agree."""
    if len(got) != len(want):
        return f"{len(got)} results, the reference has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        where = f"result {i} of {len(want)}"
        if g.dtype != w.dtype or g.shape != w.shape:
            return (f"{where}: {g.dtype}{list(g.shape)}, the reference has "
                    f"{w.dtype}{list(w.shape)}")
        if w.dtype.kind == "f":
            ok = np.isclose(g, w, rtol=rtol, atol=rtol, equal_nan=True)
        else:
            ok = g == w
        if not np.all(ok):
            index = tuple(int(k) for k in np.argwhere(~np.asarray(ok))[0])
            return (f"{where} {w.dtype}{list(w.shape)}: first difference at {list(index)}: "
                    f"got {g[index]!r}, the reference has {w[index]!r}")
    return None


def check_case(case: FuzzCase, make_legs=legs, tally: Tally | None = None) -> None:
    """Every leg agrees with the reference interpreter on every run; else AssertionError.
    ``tally`` counts the legs that ran."""
    program = case.program
    mod = program.parse()
    bound = weights(program, case.runs[0])
    try:
        built = make_legs(mod, program, tally, bound)
    except Exception as e:
        raise AssertionError(f"building failed: {type(e).__name__}: {e}\n--- program ---\n"
                             f"{program.text}") from e
    for k, run in enumerate(case.runs):
        inputs = [bound.get(p.name, a) for p, a in
                  zip(program.params, rst.make_inputs(program, run.dims, run.seed))]
        context = (f"\n--- program ---\n{program.text}--- run {k + 1} of {len(case.runs)}: "
                   f"dims {run.dims}, inputs {describe_inputs(program, inputs)}")
        try:
            want = evaluate(mod, *inputs)
        except Exception as e:
            raise AssertionError(f"the reference interpreter failed: {type(e).__name__}: {e}"
                                 + context) from e
        flat_want = _flat(want)
        for leg in built:
            try:
                got = _flat(leg.run(inputs, want))
            except Exception as e:
                raise AssertionError(f"{leg} raised {type(e).__name__}: {e}" + context) from e
            diff = first_difference(got, flat_want, program.rtol)
            if diff is not None:
                raise AssertionError(f"{leg} differs from the reference interpreter: {diff}"
                                     + context)
    if tally is not None:
        tally.record(built)


def fails(case: FuzzCase, make_legs=legs) -> bool:
    """True if :func:`check_case` finds a difference (for ``hypothesis.find``)."""
    try:
        check_case(case, make_legs)
    except AssertionError:
        return True
    return False
