"""The differential harness of the fuzz tests: one program, one build per leg, many shapes.

A *case* is a generated program and several runs (an assignment of its symbolic dims and a
seed for its inputs). Every leg builds the program once and runs all the runs on one VM, so
buffers kept between invokes of different shapes are exercised too. Each leg's results must
equal the reference interpreter's; a difference fails with the program text, the dims, the
input shapes and the first differing element.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
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


@dataclass
class Leg:
    """One way of running the program: ``run(inputs, want) -> results`` on one build."""

    name: str
    run: Callable[[list, Any], Any]


def _flat(v: Any) -> list[np.ndarray]:
    if isinstance(v, tuple):
        return [x for f in v for x in _flat(f)]
    return [np.asarray(v)]


def _invoke_leg(name: str, exe) -> Leg:
    vm = relvm.VirtualMachine(exe)
    return Leg(f"{name} [{exe.backend} kernels]", lambda inputs, want: vm.invoke("main", *inputs))


def _zero_copy_leg(exe) -> Leg:
    vm = relvm.VirtualMachine(exe)

    def run(inputs, want):
        outs = [np.full(w.shape, 77, w.dtype) for w in _flat(want)]
        vm.invoke_with_outputs("main", list(inputs), outs)
        return tuple(outs)
    return Leg(f"vm invoke_with_outputs (zero-copy) [{exe.backend} kernels]", run)


def save_load_available() -> bool:
    return hasattr(relvm, "load_bytes") and hasattr(relvm.Executable, "save_bytes")


def c_backend() -> Any | None:
    """The C backend module if it is registered and says which kernels it supports."""
    from relvm import compiler
    if "c" not in getattr(compiler, "BACKENDS", ()):
        return None
    try:
        module = importlib.import_module("relvm.backends.c")
    except ImportError:
        return None
    return module if hasattr(module, "supports") else None


def build(mod, **kwargs: Any):
    """``relvm.build`` with the C kernels where they cover every kernel, else NumPy's."""
    c = c_backend()
    if c is not None:
        try:
            exe = relvm.build(mod, backend="c", **kwargs)
        except RelvmCompileError as e:
            if "has no kernel" not in str(e):
                raise
        else:
            if all(c.supports(k) for k in exe.kernels):
                return exe
    return relvm.build(mod, backend="numpy", **kwargs)


def numpy_legs(mod, program: rst.GeneratedProgram) -> list[Leg]:
    """The VM on the NumPy kernels, fused and unfused (what a broken NumPy kernel affects)."""
    return [_invoke_leg("vm", relvm.build(mod, backend="numpy")),
            _invoke_leg("vm unfused", relvm.build(mod, backend="numpy", fuse=False))]


def legs(mod, program: rst.GeneratedProgram) -> list[Leg]:
    """Every way relvm can run ``mod``, each built once: with compiled (C) kernels where they
    cover the program, and on the NumPy kernels."""
    exe = build(mod)
    out = [_invoke_leg("vm", exe), _invoke_leg("vm unfused", build(mod, fuse=False))]
    if exe.backend != "numpy":
        out.append(_invoke_leg("vm", relvm.build(mod, backend="numpy")))
    out.append(_zero_copy_leg(exe))
    out.append(_invoke_leg("vm with upper_bounds (arena)",
                           build(mod, upper_bounds=program.upper_bounds)))
    if save_load_available():
        out.append(_invoke_leg("vm after save_bytes -> load_bytes",
                               relvm.load_bytes(exe.save_bytes())))
    return out


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


def check_case(case: FuzzCase, make_legs=legs) -> None:
    """Every leg agrees with the reference interpreter on every run; else AssertionError."""
    program = case.program
    mod = program.parse()
    try:
        built = make_legs(mod, program)
    except Exception as e:
        raise AssertionError(f"building failed: {type(e).__name__}: {e}\n--- program ---\n"
                             f"{program.text}") from e
    for k, run in enumerate(case.runs):
        inputs = rst.make_inputs(program, run.dims, run.seed)
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
                raise AssertionError(f"{leg.name} raised {type(e).__name__}: {e}"
                                     + context) from e
            diff = first_difference(got, flat_want, program.rtol)
            if diff is not None:
                raise AssertionError(f"{leg.name} differs from the reference interpreter: "
                                     f"{diff}" + context)


def fails(case: FuzzCase, make_legs=legs) -> bool:
    """True if :func:`check_case` finds a difference (for ``hypothesis.find``)."""
    try:
        check_case(case, make_legs)
    except AssertionError:
        return True
    return False
