"""Every program of the shared table, built once, run by the VM at several sizes.

Checked against the independent NumPy expectation, plainly and through invoke_with_outputs
(where every result must land in the caller's arrays, in place or reported as copied).
"""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm.testing.reference import evaluate

from programs import CASES, Case


def _flat(v):
    if isinstance(v, tuple):
        for x in v:
            yield from _flat(x)
    else:
        yield np.asarray(v)


def _assert_same(got, want, rtol) -> None:
    got, want = list(_flat(got)), list(_flat(want))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)
        else:
            np.testing.assert_array_equal(g, w)


def _build(case: Case, fuse: bool = True):
    mod = relvm.parse(case.text, constants=case.constants)
    return mod, relvm.build(mod, params=case.params, fuse=fuse)


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_vm_matches_numpy_and_reference(case: Case, fuse: bool) -> None:
    mod, exe = _build(case, fuse)
    vm = relvm.VirtualMachine(exe)
    for inputs in case.input_sets():
        want = case.expect(*inputs, **(case.params or {}))
        got = vm.invoke(case.func, *inputs)
        _assert_same(got, want, case.rtol)
        _assert_same(got, evaluate(mod, *inputs, params=case.params, func=case.func), case.rtol)


@pytest.mark.e2e
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_vm_writes_into_caller_outputs(case: Case) -> None:
    mod, exe = _build(case)
    vm = relvm.VirtualMachine(exe)
    fn = exe.function(case.func)
    for inputs in case.input_sets():
        want = list(_flat(case.expect(*inputs, **(case.params or {}))))
        if len(want) != len(fn.outputs):
            pytest.skip("result is not made of tensors only")
        outs = [np.full(w.shape, 7, w.dtype) for w in want]
        vm.invoke_with_outputs(case.func, list(inputs), outs)
        _assert_same(tuple(outs), tuple(want), case.rtol)
        in_place = sum(1 for o in fn.outputs if o.alloc_pcs)
        # Every result was either written in place or copied, and the VM says which.
        assert vm.stats.output_copies == len(outs) - in_place
