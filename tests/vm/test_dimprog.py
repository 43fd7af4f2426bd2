"""Dim programs: the grammar table and the evaluator agree, and the evaluator computes right."""

import numpy as np
import pytest

from relvm.runtime.bytecode.dimprog import (EXPRESSIONS, STATEMENTS, DimError, compile_expr,
                                   compile_program)

SAMPLE = {"int": 3, "slot": 0, "arg": 0, "e": ("const", 2), "message:a,b": "{a} vs {b}",
          "message:value,limit": "{value} > {limit}"}


def sample(tag, kinds):
    return (tag,) + tuple(SAMPLE[k] for k in kinds)


@pytest.mark.parametrize("tag", sorted(EXPRESSIONS))
def test_every_expression_in_the_grammar_compiles(tag) -> None:
    compile_expr(sample(tag, EXPRESSIONS[tag]))


@pytest.mark.parametrize("tag", sorted(STATEMENTS))
def test_every_statement_in_the_grammar_compiles(tag) -> None:
    compile_program((sample(tag, STATEMENTS[tag]),))


def test_nothing_outside_the_grammar_compiles() -> None:
    with pytest.raises(ValueError):
        compile_expr(("pow", ("const", 1), ("const", 2)))
    with pytest.raises(ValueError):
        compile_program((("print", 1),))


def test_evaluation() -> None:
    x = np.zeros((6, 4))
    run = compile_program((("set", 0, ("shape", 0, 0)),
                           ("set", 1, ("floordiv", ("mul", ("slot", 0), ("const", 3)), ("const", 2))),
                           ("set", 2, ("bcast", ("slot", 0), ("const", 1))),
                           ("set", 3, ("nonzero", 1)),
                           ("check", ("shape", 0, 1), ("const", 4), "dim is {a}, want {b}")))
    dims = [0] * 4
    run(dims, [x, np.array([0, 1, 2])])
    assert dims == [6, 9, 6, 2]
    with pytest.raises(DimError, match="dim is 4, want 5"):
        compile_program((("check", ("shape", 0, 1), ("const", 5), "dim is {a}, want {b}"),))(
            dims, [x])
    with pytest.raises(DimError, match="do not broadcast"):
        compile_expr(("bcast", ("const", 3), ("const", 4)))([], [])


def test_a_program_reading_no_values_is_memoized_on_what_it_reads() -> None:
    """Same slots and shapes read: the dims it wrote before, without evaluating again; a
    failing check is never remembered."""
    program = (("set", 1, ("add", ("slot", 0), ("shape", 0, 1))),
               ("set", 2, ("mul", ("slot", 1), ("const", 2))),
               ("check", ("slot", 0), ("shape", 0, 0), "batch {a} vs {b}"))
    run = compile_program(program)
    x = np.zeros((3, 4))
    for _ in range(2):
        dims = [3, 0, 0]
        run(dims, (x,))
        assert dims == [3, 7, 14]
    with pytest.raises(DimError, match="batch 5 vs 3"):
        run([5, 0, 0], (x,))
    with pytest.raises(DimError, match="batch 5 vs 3"):  # again: the failure was not kept
        run([5, 0, 0], (x,))
    dims = [2, 0, 0]
    run(dims, (np.zeros((2, 1)),))
    assert dims == [2, 3, 6]


def test_a_program_reading_values_is_not_memoized() -> None:
    run = compile_program((("set", 0, ("value", 0)),))
    for v in (3, 4):
        dims = [0]
        run(dims, (np.array(v),))
        assert dims == [v]
