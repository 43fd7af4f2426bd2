"""End-to-end programs: parse, print round trip, type, and evaluate against hand-written NumPy.

Each case is a small Relay program, its inputs, and the expected result written independently
in NumPy (never by calling relvm's own op references). The same table is reused by the VM tests.
"""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm.ir.printer import module_constants
from relvm.testing.reference import evaluate

from programs import CASES, Case


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_round_trip(case: Case) -> None:
    mod = relvm.parse(case.text, constants=case.constants)
    printed = relvm.print_module(mod)
    again = relvm.parse(printed, constants=module_constants(mod))
    assert again == mod, printed
    assert relvm.print_module(again) == printed


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reference_matches_numpy(case: Case) -> None:
    mod = relvm.parse(case.text, constants=case.constants)
    for inputs in case.input_sets():
        got = evaluate(mod, *inputs, params=case.params, func=case.func)
        want = case.expect(*inputs, **(case.params or {}))
        _assert_same(got, want, case.rtol)


@pytest.mark.parametrize("case", [c for c in CASES if c.result_type],
                         ids=[c.name for c in CASES if c.result_type])
def test_inferred_result_type(case: Case) -> None:
    mod = relvm.parse(case.text, constants=case.constants)
    assert str(mod[case.func].checked_type.ret) == case.result_type


def _assert_same(got, want, rtol: float) -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w, rtol)
        return
    want = np.asarray(want)
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
    else:
        np.testing.assert_array_equal(got, want)


def test_case_count_meets_acceptance() -> None:
    assert len(CASES) >= 40


def test_mlp_signature_is_symbolic() -> None:
    from relvm import examples

    mod = relvm.parse(examples.text("mlp"))
    assert str(mod["main"].checked_type.ret) == "Tensor[(n, 10), float32]"

