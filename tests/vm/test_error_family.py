"""Each failure is the relvm error that says what went wrong: a missing kernel is not a bad file,
a bad argument to ``save`` is an input error, and a bug in the C generator is not mistaken for
"this op has no generator"."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import relvm
from relvm import RelvmFormatError, RelvmInputError, RelvmKernelError
from relvm.backends import c, fusedgen
from relvm.runtime.executable import KernelEntry

CHAIN = "def @main(%x: Tensor[(n, 4), float32]) { tanh(add(multiply(%x, 2f), 1f)) }"


def test_a_kernel_the_c_backend_lacks_is_a_kernel_error_not_a_format_error() -> None:
    entry = KernelEntry("softmax_int", "nn.softmax", {"axis": -1}, ("int32",), ("int32",))
    with pytest.raises(RelvmKernelError, match=r"kernel 'softmax_int': the c backend has no "
                                               r"kernel for op 'nn.softmax' on int32 -> int32"):
        c.make_kernel(entry)


def test_making_a_vm_whose_kernel_the_backend_lacks_names_the_kernel() -> None:
    exe = relvm.build(relvm.parse("def @main(%x: Tensor[(n), int32]) { negative(%x) }"),
                      backend="numpy")
    exe.backend = "c"
    exe.kernels[0] = dataclasses.replace(exe.kernels[0], op="nn.softmax", attrs={"axis": -1})
    with pytest.raises(RelvmKernelError) as info:
        relvm.VirtualMachine(exe)
    assert not isinstance(info.value, RelvmFormatError)
    assert "no kernel for op 'nn.softmax' on int32" in str(info.value)


def test_saving_the_weights_into_the_executable_itself_is_refused_before_writing(tmp_path) -> None:
    exe = relvm.build(relvm.parse(CHAIN), backend="numpy")  # the pure tier: no compiler
    path = tmp_path / "model.rvm"
    path.write_bytes(b"the file that was there")
    with pytest.raises(RelvmInputError,
                       match=r"the weights file must not be the executable itself \(.*model\.rvm\)"):
        exe.save(path, weights=path)
    assert path.read_bytes() == b"the file that was there"
    with pytest.raises(RelvmInputError, match=r"must be in the executable's directory"):
        exe.save(path, weights=tmp_path / "sub" / "w.bin")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.rvm"]


@pytest.mark.e2e
def test_a_bug_inside_the_c_generator_is_not_taken_for_an_op_it_lacks(monkeypatch) -> None:
    """Before, codegen signalled "no C for this op" with a KeyError caught by the caller: any
    KeyError in the generator -- a real bug -- silently gave an unfused kernel."""
    def broken(op, attrs, x, dtype, out):
        raise KeyError("a bug")
    monkeypatch.setattr(fusedgen, "_unary", broken)
    with pytest.raises(KeyError, match="a bug"):
        relvm.build(relvm.parse(CHAIN))


@pytest.mark.e2e
def test_an_op_the_generator_lacks_runs_its_steps_on_library_kernels(monkeypatch) -> None:
    def lacking(op, attrs, x, dtype, out):
        raise fusedgen.CannotGenerate(f"no C for {op}")
    monkeypatch.setattr(fusedgen, "_unary", lacking)
    exe = relvm.build(relvm.parse(CHAIN))
    assert "plan" not in exe.kernels[0].attrs
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(relvm.VirtualMachine(exe).invoke("main", x), np.tanh(x * 2 + 1),
                               rtol=1e-6)
