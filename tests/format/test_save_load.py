"""Save -> load -> run gives the in-memory executable's results bit for bit, for every program
of the shared table and of the VM tests; constants are memory-mapped; weights can live apart."""

from __future__ import annotations

import ast
import mmap
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import relvm
from relvm import RelvmError, RelvmFormatError
from relvm.runtime.file.format import sections_of

from formatcases import (X, Y, assert_identical, signature_inputs, small_exe, small_expected,
                         with_section)
from programs import CASES, Case

TESTS = Path(__file__).resolve().parents[1]


def assert_same_executable(loaded: relvm.Executable, exe: relvm.Executable) -> None:
    assert loaded.functions == exe.functions
    assert loaded.kernels == exe.kernels
    assert loaded.dim_programs == exe.dim_programs
    assert loaded.upper_bounds == exe.upper_bounds and loaded.backend == exe.backend
    assert loaded.bytecode == exe.bytecode
    assert len(loaded.constants) == len(exe.constants)
    for a, b in zip(loaded.constants, exe.constants):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def outcome(vm: relvm.VirtualMachine, func: str, inputs: list):
    """The result, or the error (type and message) if the run fails."""
    try:
        return vm.invoke(func, *inputs)
    except RelvmError as e:
        return (type(e), str(e))


def assert_same_outcome(got, want) -> None:
    if isinstance(want, tuple) and len(want) == 2 and isinstance(want[0], type):
        assert got == want
    else:
        assert_identical(got, want)


@pytest.mark.e2e
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_program_round_trips_bit_for_bit(case: Case) -> None:
    exe = relvm.build(relvm.parse(case.text, constants=case.constants), params=case.params)
    loaded = relvm.load_bytes(exe.save_bytes())
    assert_same_executable(loaded, exe)
    vm, vm2 = relvm.VirtualMachine(exe), relvm.VirtualMachine(loaded)
    for inputs in case.input_sets():
        assert_same_outcome(outcome(vm2, case.func, inputs), outcome(vm, case.func, inputs))


def _vm_test_programs() -> list[tuple[str, str]]:
    """Every Relay program written in the VM tests (string literals defining an @function)."""
    found = []
    for path in sorted((TESTS / "vm").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and "def @" in node.value and "{" in node.value:
                found.append((f"{path.stem}:{node.lineno}", node.value))
    return found


VM_PROGRAMS = _vm_test_programs()


def _inputs_for(fn, rng) -> list | None:
    """Inputs matching a signature: every symbolic dim 4, small values; None for closures."""
    return signature_inputs(fn, rng, 4)


def test_vm_test_programs_are_found() -> None:
    assert len(VM_PROGRAMS) >= 10


@pytest.mark.parametrize("text", [t for _, t in VM_PROGRAMS], ids=[n for n, _ in VM_PROGRAMS])
def test_vm_test_programs_round_trip_bit_for_bit(text: str) -> None:
    try:
        exe = relvm.build(relvm.parse(text))
    except RelvmError:
        pytest.skip("not a complete program (an error case or a fragment)")
    loaded = relvm.load_bytes(exe.save_bytes())
    assert_same_executable(loaded, exe)
    vm, vm2 = relvm.VirtualMachine(exe), relvm.VirtualMachine(loaded)
    fn = exe.function("main") if "main" in exe.function_index else exe.functions[0]
    inputs = _inputs_for(fn, np.random.default_rng(0))
    if inputs is None:
        pytest.skip("takes a function value")
    assert_same_outcome(outcome(vm2, fn.name, inputs), outcome(vm, fn.name, inputs))


@pytest.mark.e2e
def test_upper_bounds_and_pooled_storage_round_trip() -> None:
    text = """def @main(%x: Tensor[(n, 16), float32], %w: Tensor[(16, 16), float32]) {
      %0 = nn.dense(%x, %w);
      %1 = tanh(%0);
      nn.dense(%1, %w)
    }"""
    w = np.eye(16, dtype=np.float32)
    exe = relvm.build(relvm.parse(text), params={"w": w}, upper_bounds={"n": 32})
    loaded = relvm.load_bytes(exe.save_bytes())
    assert loaded.upper_bounds == {"n": 32}
    x = np.ones((5, 16), np.float32)
    assert_identical(relvm.VirtualMachine(loaded).invoke("main", x),
                     relvm.VirtualMachine(exe).invoke("main", x))
    with pytest.raises(relvm.RelvmInputError):
        relvm.VirtualMachine(loaded).invoke("main", np.ones((33, 16), np.float32))


def test_save_writes_the_bytes_of_save_bytes(tmp_path) -> None:
    exe = small_exe()
    exe.save(tmp_path / "small.rvm")
    assert (tmp_path / "small.rvm").read_bytes() == exe.save_bytes()
    assert exe.save_bytes() == small_exe().save_bytes()  # deterministic
    assert [p.name for p in tmp_path.iterdir()] == ["small.rvm"]  # no temporary file left


@pytest.mark.e2e
def test_load_maps_constants_read_only_and_aligned(tmp_path) -> None:
    import relvm.examples

    exe = relvm.build(relvm.parse(relvm.examples.text("mlp")),
                      params=relvm.examples.params("mlp"))
    exe.save(tmp_path / "mlp.rvm")
    loaded = relvm.load(tmp_path / "mlp.rvm")
    for c in loaded.constants:
        assert not c.flags.writeable and not c.flags.owndata
        assert c.ctypes.data % 64 == 0
        base = c
        while isinstance(base, (np.ndarray, memoryview)):
            base = base.obj if isinstance(base, memoryview) else base.base
        assert isinstance(base, mmap.mmap)  # a view of the mapped file, not a copy
    x = np.random.default_rng(0).standard_normal((7, 784)).astype(np.float32)
    assert_identical(relvm.VirtualMachine(loaded).invoke("main", x),
                     relvm.VirtualMachine(exe).invoke("main", x))


def test_load_of_a_missing_file_or_a_directory(tmp_path) -> None:
    with pytest.raises(RelvmFormatError, match=r"cannot read .*model.rvm: No such file"):
        relvm.load(tmp_path / "model.rvm")
    with pytest.raises(RelvmFormatError, match="cannot read .*: Is a directory"):
        relvm.load(tmp_path)
    (tmp_path / "empty.rvm").write_bytes(b"")
    with pytest.raises(RelvmFormatError, match="empty") as info:
        relvm.load(tmp_path / "empty.rvm")
    assert info.value.section == "header"


def test_corrupted_constant_is_reported_on_first_use_naming_it() -> None:
    data = bytearray(small_exe().save_bytes())
    sections = sections_of(bytes(data))
    consts_at = bytes(data).index(sections["consts"])
    data[consts_at + 64 + 5] ^= 0x10  # inside constant 1 (the dense weight, at offset 64)
    loaded = relvm.load_bytes(bytes(data))  # load does not read the constants
    vm = relvm.VirtualMachine(loaded)
    with pytest.raises(RelvmFormatError, match=r"constant 1 \(float32\[8, 4\].*fails its "
                                               r"checksum") as info:
        vm.invoke("main", X, Y)
    assert info.value.section == "consts"
    with pytest.raises(RelvmFormatError):  # and again: a bad constant never passes
        relvm.VirtualMachine(loaded).invoke("main", X, Y)
    loaded.verify_constant(0)  # the others are fine
    with pytest.raises(RelvmFormatError, match="constant 1"):
        loaded.verify_constants()


def test_corrupted_constant_in_a_called_function_is_a_format_error() -> None:
    data = bytearray(small_exe().save_bytes())
    consts_at = bytes(data).index(sections_of(bytes(data))["consts"])
    data[consts_at] ^= 0x01  # constant 0: the 0.5 of @scale, loaded when @main calls it
    with pytest.raises(RelvmFormatError, match="constant 0") as info:
        relvm.VirtualMachine(relvm.load_bytes(bytes(data))).invoke("main", X, Y)
    assert info.value.section == "consts"


# --- weights apart ----------------------------------------------------------------------------

def test_weights_apart(tmp_path) -> None:
    exe = small_exe()
    exe.save(tmp_path / "m.rvm", weights=tmp_path / "m.weights", min_weight_bytes=64)
    inline = sections_of(exe.save_bytes())["consts"]
    kept = sections_of((tmp_path / "m.rvm").read_bytes())["consts"]
    assert len(kept) <= len(inline) - 128  # the 128-byte weight moved out, the others stayed
    assert (tmp_path / "m.weights").read_bytes()[:8] == b"RELVMWTS"
    loaded = relvm.load(tmp_path / "m.rvm")
    assert_identical(relvm.VirtualMachine(loaded).invoke("main", X, Y),
                     relvm.VirtualMachine(exe).invoke("main", X, Y))
    np.testing.assert_allclose(relvm.VirtualMachine(loaded).invoke("main", X, Y),
                               small_expected(), rtol=1e-6)


def test_weights_found_relative_to_the_executable(tmp_path, monkeypatch) -> None:
    (tmp_path / "a").mkdir()
    small_exe().save(tmp_path / "a" / "m.rvm", weights=tmp_path / "a" / "w.bin",
                     min_weight_bytes=64)
    shutil.move(tmp_path / "a", tmp_path / "b")
    monkeypatch.chdir(tmp_path)
    loaded = relvm.load(os.path.join("b", "m.rvm"))
    np.testing.assert_allclose(relvm.VirtualMachine(loaded).invoke("main", X, Y),
                               small_expected(), rtol=1e-6)


def test_missing_or_foreign_weights_file(tmp_path) -> None:
    small_exe().save(tmp_path / "m.rvm", weights=tmp_path / "m.weights", min_weight_bytes=64)
    other = relvm.build(relvm.parse("def @main(%x: Tensor[(n, 64), float32], "
                                    "%w: Tensor[(64), float32]) { add(%x, %w) }"),
                        params={"w": np.ones(64, np.float32)})
    other.save(tmp_path / "o.rvm", weights=tmp_path / "o.weights", min_weight_bytes=64)
    with pytest.raises(RelvmFormatError, match="does not belong to the executable") as info:
        relvm.load(tmp_path / "m.rvm", weights=tmp_path / "o.weights")
    assert info.value.section == "weights"
    with pytest.raises(RelvmFormatError, match="this is a relvm executable"):
        relvm.load(tmp_path / "m.rvm", weights=tmp_path / "o.rvm")
    with pytest.raises(RelvmFormatError, match="pass weights="):
        relvm.load_bytes((tmp_path / "m.rvm").read_bytes())
    loaded = relvm.load_bytes((tmp_path / "m.rvm").read_bytes(), weights=tmp_path / "m.weights")
    assert loaded.constants[1].shape == (8, 4)
    os.unlink(tmp_path / "m.weights")
    with pytest.raises(RelvmFormatError, match="cannot read .*m.weights") as info:
        relvm.load(tmp_path / "m.rvm")
    assert info.value.section == "weights"


def test_corrupted_weights_are_caught_at_load_or_first_use(tmp_path) -> None:
    small_exe().save(tmp_path / "m.rvm", weights=tmp_path / "m.weights", min_weight_bytes=64)
    raw = (tmp_path / "m.weights").read_bytes()
    index = sections_of(raw, b"RELVMWTS")["index"]
    data = bytearray(raw)
    data[raw.index(index) + 3] ^= 0x20  # the index: checked at load
    (tmp_path / "m.weights").write_bytes(bytes(data))
    with pytest.raises(RelvmFormatError, match="index: checksum mismatch") as info:
        relvm.load(tmp_path / "m.rvm")
    assert info.value.section == "weights"
    data = bytearray(raw)
    data[-1] ^= 0x20  # the last weight: checked when first used
    (tmp_path / "m.weights").write_bytes(bytes(data))
    loaded = relvm.load(tmp_path / "m.rvm")
    with pytest.raises(RelvmFormatError, match="fails its checksum") as info:
        relvm.VirtualMachine(loaded).invoke("main", X, Y)
    assert info.value.section == "weights"


def test_default_save_is_one_file(tmp_path) -> None:
    small_exe().save(tmp_path / "m.rvm")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.rvm"]


# --- the kernel library -----------------------------------------------------------------------

def _elf(machine: int) -> bytes:
    import struct
    import sys

    order = "<" if sys.byteorder == "little" else ">"
    ident = b"\x7fELF" + bytes([2 if struct.calcsize("P") == 8 else 1,
                                1 if sys.byteorder == "little" else 2, 1]) + b"\0" * 9
    return ident + struct.pack(order + "HHI", 3, machine, 1) + b"\0" * 100


def _this_machine() -> int:
    import platform

    from relvm.runtime.file.loader import ELF_MACHINES

    m = ELF_MACHINES.get(platform.machine().lower())
    if m is None:
        pytest.skip("unknown ELF machine")
    return m


def test_kernel_library_is_carried_and_checked_not_loaded() -> None:
    from relvm.runtime.file.format import machine_tag

    exe = small_exe()
    exe.kernel_library = _elf(_this_machine())
    loaded = relvm.load_bytes(exe.save_bytes())
    assert loaded.kernel_library == exe.kernel_library and loaded.kernel_arch == machine_tag()
    assert_identical(relvm.VirtualMachine(loaded).invoke("main", X, Y),
                     relvm.VirtualMachine(exe).invoke("main", X, Y))


@pytest.mark.parametrize("arch,machine,message", [
    ("sparc64-sunos5", None, "compiled for sparc64-sunos5; this machine is"),
    (None, 0x9999, "ELF object for another machine"),
    (None, -1, "not an ELF shared object"),
])
def test_kernel_library_for_another_machine_is_refused(arch, machine, message) -> None:
    exe = small_exe()
    exe.kernel_library = b"MZ" + b"\0" * 200 if machine == -1 else _elf(machine or
                                                                         _this_machine())
    if arch is not None:
        exe.kernel_arch = arch
    import sys

    if machine is not None and not sys.platform.startswith("linux"):
        pytest.skip("ELF checks are for ELF platforms")
    with pytest.raises(RelvmFormatError, match=message) as info:
        relvm.load_bytes(exe.save_bytes())
    assert info.value.section == "kernels"


def test_kernel_library_without_its_machine_is_refused() -> None:
    data = small_exe().save_bytes()
    with pytest.raises(RelvmFormatError, match="meta records no machine") as info:
        relvm.load_bytes(with_section(data, "kernels", _elf(62)))
    assert info.value.section == "kernels"


def test_saving_over_a_loaded_file_is_safe(tmp_path) -> None:
    exe = small_exe()
    exe.save(tmp_path / "m.rvm")
    loaded = relvm.load(tmp_path / "m.rvm")
    other = relvm.build(relvm.parse("def @main(%x: Tensor[(n), float32]) { exp(%x) }"))
    other.save(tmp_path / "m.rvm")  # a new file renamed into place; the mapping keeps the old
    assert_identical(relvm.VirtualMachine(loaded).invoke("main", X, Y),
                     relvm.VirtualMachine(exe).invoke("main", X, Y))
    assert relvm.load(tmp_path / "m.rvm").functions == other.functions


@pytest.mark.e2e
def test_a_carried_library_that_does_not_load_is_a_format_error() -> None:
    exe = relvm.build(relvm.parse("""def @main(%x: Tensor[(n), float32]) {
      nn.relu(exp(%x))
    }"""), backend="c")
    assert exe.kernel_library and any("plan" in k.attrs for k in exe.kernels)
    exe.kernel_library = b"\x7fELF" + b"\x00" * 60  # an ELF header and nothing else
    with pytest.raises(relvm.RelvmFormatError, match="kernels.*symbol table: not a 64-bit"):
        relvm.VirtualMachine(exe)
