"""Mutation fuzzing of program text (``relvm.testing.mutation``, ``.campaign``): the programs of
``tests/programs.py`` and ``relvm/examples`` are mutated -- characters flipped, tokens deleted,
duplicated, swapped or inserted, numbers made huge, negative or fractional, dtypes, attribute
names and values, dims and ops changed, brackets deleted, operands nested hundreds deep, and,
through the IR, ops retargeted and attributes set to edge values of their kinds -- and every
mutant must parse to a program or a relvm error, then build unfused (fuse=False needs no C
compiler) or say why not; every mutant that builds is invoked once on inputs matching its
signature, and a deterministic subset is also built with fusion (generated C).

A finding is an exception outside ``relvm.RelvmError``, a crashed worker process or a mutant
over the 5 s limit (the slowest is under a second on an idle machine; the margin is for a busy
CI machine). The CI run checks 10,000 mutants (about 15 s on two cores);
``RELVM_FUZZ_LONG=1`` checks 100,000 with every 10th fused, and a chain at the real depth limit;
``RELVM_IR_MUTANTS`` sets the count (the sanitizer stage runs 2,000).
"""

from __future__ import annotations

import os

import pytest

from relvm import examples
from relvm.testing.campaign import campaign, check
from relvm.testing.mutation import Seed, mutant

from programs import CASES

LONG = os.environ.get("RELVM_FUZZ_LONG", "") not in ("", "0")
SEEDS = [Seed(c.name, c.text, c.constants) for c in CASES] + [
    Seed(name, examples.text(name)) for name in examples.NAMES]


@pytest.mark.slow
def test_ten_thousand_mutants_are_programs_or_relvm_errors() -> None:
    count = int(os.environ.get("RELVM_IR_MUTANTS", 100_000 if LONG else 10_000))
    report = campaign(SEEDS, count, seed=0, workers=2, limit=5.0,
                      fused_every=10 if LONG else 500, run_every=1)
    print(report.describe())
    assert report.count == count
    assert not report.findings, report.describe()
    assert report.slowest[0] < 5.0
    # The mutants reach every stage: the fuzzer is not stuck in the parser.
    for stage in ("parse:RelvmSyntaxError", "parse:RelvmTypeError", "build:RelvmCompileError",
                  "run:RelvmRuntimeError", "done"):
        assert report.stages.get(stage, 0) > count // 1000, report.stages


def test_the_deepest_chain_builds_and_one_binding_more_is_refused(monkeypatch) -> None:
    """At relvm's depth limit (long run: the real 100,000 levels, some 2 minutes; CI: the same
    code at a limit of 2,000), a let chain parses and builds, and one binding more is refused."""
    import numpy as np

    import relvm
    from relvm.frontend import parser
    from relvm.ir.limits import MAX_DEPTH

    limit = MAX_DEPTH if LONG else 2_000
    monkeypatch.setattr(parser, "MAX_DEPTH", limit)

    def chain(n: int) -> str:  # n lets are n + 2 levels: the parameter, a let each, the tail
        lets = "".join(f"  let %v{i + 1} = add(%v{i}, 1f);\n" for i in range(n))
        return f"def @main(%v0: Tensor[(2), float32]) {{\n{lets}  %v{n}\n}}"

    exe = relvm.build(relvm.parse(chain(limit - 2)), fuse=False)
    got = relvm.VirtualMachine(exe).invoke("main", np.zeros(2, np.float32))
    np.testing.assert_array_equal(got, np.full(2, limit - 2, np.float32))
    with pytest.raises(relvm.RelvmSyntaxError, match="more than .* deep"):
        relvm.parse(chain(limit - 1))


def test_mutants_are_deterministic() -> None:
    assert mutant(SEEDS, 1234, seed=7) == mutant(SEEDS, 1234, seed=7)
    differ = sum(mutant(SEEDS, i, seed=7)[1] != mutant(SEEDS, i, seed=8)[1] for i in range(50))
    assert differ > 40


def test_an_exception_outside_the_family_is_a_finding(monkeypatch) -> None:
    from relvm.ops import OPS

    def broken(attrs, x):
        raise AttributeError("a type relation's bug")

    monkeypatch.setattr(OPS["nn.relu"], "infer", broken)
    outcome = check("def @main(%x: Tensor[(n), float32]) { nn.relu(%x) }")
    assert outcome.stage == "parse" and outcome.error is None
    assert "AttributeError: a type relation's bug" in outcome.finding


@pytest.mark.parametrize("text,stage,error", [
    ("def @main(%x: Tensor[(n), float32]) { nn.relu(%x) }", "done", None),
    ("def @main(%x: Tensor[(n), float32]) { nn.relu(%x, %x) }", "parse", "RelvmTypeError"),
    ("def @main(%x: Tensor[(n), float32]) { nn.relu(%x }", "parse", "RelvmSyntaxError"),
    # Recursion without end: the VM's call-depth error, not a hang.
    ("def @f(%x: float32) -> float32 { @f(%x) }\ndef @main(%x: float32) { @f(%x) }", "run",
     "RelvmRuntimeError"),
])
def test_check_reports_the_stage_and_error(monkeypatch, text, stage, error) -> None:
    from relvm.runtime.vm import thread

    monkeypatch.setattr(thread, "MAX_FRAMES", 200)  # as the campaign's workers do
    outcome = check(text, run=True)
    assert (outcome.stage, outcome.error, outcome.finding) == (stage, error, None)
