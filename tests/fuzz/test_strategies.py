"""The public strategies of relvm.testing.strategies: programs that type-check as generated,
assignments that respect names, bounds and constraints, inputs that fit the signature."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import relvm
from relvm.ir import dims as D
from relvm.testing import strategies as rst

QUICK = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                       HealthCheck.data_too_large,
                                                       HealthCheck.filter_too_much])


@QUICK
@given(rst.programs())
def test_generated_params_are_the_parsed_params(program) -> None:
    """The generator's view of @main's signature is what the parser and type inference see."""
    fn = program.parse().functions["main"]
    assert [p.name for p in fn.params] == [p.name for p in program.params]
    for var, param in zip(fn.params, program.params):
        t = var.checked_type
        assert t.dtype == param.dtype and t.ndim == len(param.shape), program.text
        for got, want in zip(t.shape, param.shape):
            if D.is_expressible(want):
                assert D.prove_equal(got, want), (program.text, var.name)


@QUICK
@given(rst.programs(), st.data())
def test_inputs_fit_the_executable_signature(program, data) -> None:
    """Assignments are legal and within bounds, and the VM accepts the inputs made for them."""
    vm = relvm.VirtualMachine(relvm.build(program.parse(), backend="numpy"))
    dims, inputs = data.draw(rst.signature_inputs(program))
    assert program.satisfied_by(dims)
    assert all(0 <= v <= program.max_value for v in dims.values())
    vm.set_input("main", *inputs)


@QUICK
@given(rst.programs(max_ops=2), rst.program_texts(max_ops=2))
def test_text_is_what_a_person_reads(program, text) -> None:
    """Hypothesis prints a failing program as its text."""
    assert repr(program) == "GeneratedProgram(" + "'" * 3 + "\n" + program.text + "'" * 3 + ")"
    assert str(program).startswith("def @") and text.startswith("def @")


@QUICK
@given(rst.programs(forms=["reshape"], max_ops=3))
def test_forms_choose_what_is_generated(program) -> None:
    assert program.forms <= {"reshape"}
    program.parse()


def test_unknown_forms_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown forms"):
        rst.programs(forms=["binary", "conv3d"])


USER_FUNCTION = """
def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(n*2, m), int32], %c: bool) {
  (%x, %y, %c)
}"""


@QUICK
@given(rst.signature_inputs(USER_FUNCTION, min_value=1, upper_bounds={"n": 3}))
def test_a_users_function_gets_one_value_per_name(sample) -> None:
    dims, (x, y, c) = sample
    assert set(dims) == {"n", "m"}
    assert 1 <= dims["n"] <= 3 and 1 <= dims["m"] <= 8
    assert x.shape == (dims["n"], 4) and x.dtype == "float32"
    assert y.shape == (2 * dims["n"], dims["m"]) and y.dtype == "int32"
    assert c.shape == () and c.dtype == bool


def test_a_module_and_its_text_give_the_same_inputs() -> None:
    module = relvm.parse(USER_FUNCTION)
    a = rst.make_inputs(module, {"n": 2, "m": 1}, seed=5)
    b = rst.make_inputs(USER_FUNCTION, {"n": 2, "m": 1}, seed=5)
    assert all((x == y).all() for x, y in zip(a, b))


def test_from_text_keeps_a_hand_written_program() -> None:
    program = rst.GeneratedProgram.from_text(USER_FUNCTION, lower={"n": 1})
    assert [s.name for s in program.symbols] == ["n", "m"]
    assert program.upper_bounds == {"n": 8, "m": 8}
    assert not program.satisfied_by({"n": 0, "m": 0})
    assert program.satisfied_by({"n": 1, "m": 0})


def test_docstring_examples_run() -> None:
    import doctest

    from relvm.testing import strategies

    result = doctest.testmod(strategies)
    assert result.failed == 0 and result.attempted > 0


def test_readme_fuzzing_example_runs(tmp_path) -> None:
    import importlib.util
    import re
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "README.md"
    if not readme.exists():
        pytest.skip("README.md is not beside the tests")
    section = readme.read_text().split("### Shape fuzzing", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    path = tmp_path / "readme_fuzzing_example.py"  # hypothesis reads the test's source
    path.write_text(code)
    spec = importlib.util.spec_from_file_location("readme_fuzzing_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.test_my_backend()
