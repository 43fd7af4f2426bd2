"""The verifier's register types: every program the compiler makes passes, and a file that would
make a kernel read or write an array as another dtype or rank is refused at load -- a dtype or
rank relabelled in meta (checksums recomputed), a kernel index or register swapped in code, a
constant passed as a kernel's output, a call that passes other types than the callee declares."""

from __future__ import annotations

import functools

import json
import re

import numpy as np
import pytest

import relvm
from relvm import RelvmFormatError, examples
from relvm.runtime import verify
from relvm.runtime.bytecode import make
from relvm.runtime.bytecode.opcodes import BY_NAME

from formatcases import assert_identical, with_meta
from programs import CASES, Case

# --- everything the compiler makes verifies, saves, loads and runs the same --------------------


def _same_runs(exe: relvm.Executable, func: str, input_sets) -> None:
    verify.check_executable(exe)  # in memory, as relvm.build made it
    loaded = relvm.load_bytes(exe.save_bytes())  # the loader runs it again
    vm, vm2 = relvm.VirtualMachine(exe), relvm.VirtualMachine(loaded)
    for inputs in input_sets:
        try:
            want = vm.invoke(func, *inputs)
        except relvm.RelvmError as e:
            with pytest.raises(type(e)):
                vm2.invoke(func, *inputs)
            continue
        assert_identical(vm2.invoke(func, *inputs), want)


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_program_verifies_and_runs_after_loading(case: Case, fuse: bool) -> None:
    exe = relvm.build(relvm.parse(case.text, constants=case.constants), params=case.params,
                      backend="c", fuse=fuse)
    _same_runs(exe, case.func, case.input_sets())


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("name", examples.NAMES)
def test_every_example_verifies_and_runs_after_loading(name: str, fuse: bool) -> None:
    exe = relvm.build(relvm.parse(examples.text(name)), params=examples.params(name),
                      backend="c", fuse=fuse)
    shape = (2, 784) if name == "mlp" else (2, 3, 32, 32)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    _same_runs(exe, "main", [[x]])


@pytest.mark.e2e
def test_the_verifier_checks_an_executable_in_memory() -> None:
    exe = relvm.build(relvm.parse(examples.text("mlp")), params=examples.params("mlp"))
    verify.check_executable(exe)
    exe.kernels[2].inputs = ("float64",)
    exe.kernels[2].outputs = ("float64",)
    with pytest.raises(RelvmFormatError, match=r"kernel nn.softmax#2 declares float64"):
        verify.check_executable(exe)


# --- relabelled metadata ------------------------------------------------------------------------

@functools.cache
def _mlp() -> relvm.Executable:
    """The MLP built with the C backend (made on first use: collecting needs no compiler)."""
    return relvm.build(relvm.parse(examples.text("mlp")), params=examples.params("mlp"),
                       backend="c")


@functools.cache
def _mlp_bytes() -> bytes:
    return _mlp().save_bytes()


def load_error(data: bytes, section: str, pattern: str) -> RelvmFormatError:
    with pytest.raises(RelvmFormatError) as info:
        relvm.load_bytes(data)
    assert info.value.section == section, info.value
    assert re.search(pattern, str(info.value)), info.value
    return info.value


def _edit(path: str, value):
    def edit(meta) -> None:
        *parents, last = path.split(".")
        target = meta
        for k in parents:
            target = target[int(k)] if isinstance(target, list) else target[k]
        target[int(last) if isinstance(target, list) else last] = value
    return edit


@pytest.mark.e2e
def test_a_kernel_dtype_relabelled_in_meta_is_refused_not_an_abort() -> None:
    # Before the verifier proved register types this file loaded, and the softmax kernel then
    # read float32 arrays as float64: the process died with munmap_chunk(): invalid pointer.
    def relabel(meta) -> None:
        meta["kernels"][2]["inputs"] = ["float64"]
        meta["kernels"][2]["outputs"] = ["float64"]
    err = load_error(with_meta(_mlp_bytes(), relabel), "code",
                     r"@main pc 17: invoke_packed nn.softmax#2 \(\$9\) -> \(\$10\): input 0 "
                     r"\$9: kernel nn.softmax#2 declares float64 of rank 2, found float32 tensor")
    assert "rank 2" in str(err)


@pytest.mark.e2e
def test_a_kernel_relabelled_against_its_op_is_refused() -> None:
    load_error(with_meta(_mlp_bytes(), _edit("kernels.2.outputs", ["int8"])), "meta",
               r"kernel 'nn.softmax'#2 \(nn.softmax\): its op gives \(float32 of rank 2\), but "
               r"the entry declares \(int8 of rank 2\)")
    load_error(with_meta(_mlp_bytes(), _edit("kernels.0.inputs", ["float32", "float16", "float32"])),
               "meta", r"nn.dense does not accept .*dtypes differ")


@pytest.mark.e2e
def test_a_kernel_rank_relabelled_in_meta_is_refused() -> None:
    load_error(with_meta(_mlp_bytes(), _edit("kernels.2.ranks", [[3], [3]])), "code",
               r"input 0 \$9: kernel nn.softmax#2 declares float32 of rank 3, found float32 "
               r"tensor of rank 2")


@pytest.mark.e2e
def test_an_output_relabelled_in_meta_is_refused() -> None:
    # The output's allocation hands out the caller's array: it must be the output's dtype.
    load_error(with_meta(_mlp_bytes(), _edit("functions.0.outputs.0.dtype", "float64")), "meta",
               r"@main output 0: alloc pc 16 allocates float32, but the output is float64")


@pytest.mark.e2e
def test_a_parameter_relabelled_in_meta_is_refused() -> None:
    load_error(with_meta(_mlp_bytes(), _edit("functions.0.params.0.tensors.0.dtype", "int8")),
               "code", r"input 0 \$0: kernel fused_dense_bias_add_relu#0 declares float32 of "
                       r"rank 2, found int8 tensor of rank 2")
    load_error(with_meta(_mlp_bytes(), _edit("functions.0.params.0.tensors.0.shape", [5])), "code",
               r"declares float32 of rank 2, found float32 tensor of rank 1")


@pytest.mark.e2e
def test_a_constant_relabelled_in_meta_is_refused() -> None:
    def relabel(meta) -> None:
        c = meta["constants"][5]  # b3: float32[10]
        c.update(dtype="int32")
    load_error(with_meta(_mlp_bytes(), relabel), "code",
               r"input 2 \$8: kernel fused_dense_bias_add#1 declares float32 of rank 1, found "
               r"int32 tensor of rank 1")


# --- swapped kernels and registers --------------------------------------------------------------

TWO_DTYPES = """def @main(%x: Tensor[(n), float32], %i: Tensor[(n), int32]) {
  (negative(%x), negative(%i))
}"""


def _two_dtypes() -> relvm.Executable:
    return relvm.build(relvm.parse(TWO_DTYPES), backend="c", fuse=False)


def test_a_kernel_index_swapped_to_one_with_other_dtypes_is_refused() -> None:
    exe = _two_dtypes()
    pc = next(pc for pc, ins in enumerate(exe.functions[0].instructions)
              if ins[0] == 4 and ins[1] == 0)
    ins = exe.functions[0].instructions[pc]
    exe.functions[0].instructions[pc] = ins._replace(kernel=1)
    load_error(exe.save_bytes(), "code", rf"pc {pc}: invoke_packed negative#1 .*: input 0 "
               r"\$0: kernel negative#1 declares int32 of rank 1, found float32 tensor")


def test_kernels_swapped_in_meta_are_refused() -> None:
    def swap(meta) -> None:
        meta["kernels"].reverse()
    load_error(with_meta(_two_dtypes().save_bytes(), swap), "code",
               r"kernel negative#0 declares int32 of rank 1, found float32 tensor")


def _mlp_with(pc: int, *fields) -> bytes:
    exe = relvm.build(relvm.parse(examples.text("mlp")), params=examples.params("mlp"))
    exe.functions[0].instructions[pc] = make(*fields)
    return exe.save_bytes()


@pytest.mark.e2e
def test_a_constant_as_a_kernel_output_is_refused() -> None:
    # The constants are mapped read-only: a kernel writing one would fault.
    load_error(_mlp_with(17, "InvokePacked", 2, (9,), (7,)), "code",
               r"output 0 \$7: a kernel writes its outputs, but this is float32 tensor of rank 2 "
               r"\(read-only\)")


@pytest.mark.e2e
def test_an_input_as_a_kernel_output_is_refused() -> None:
    load_error(_mlp_with(7, "InvokePacked", 0, (0, 1, 2), (0,)), "code",
               r"output 0 \$0: a kernel writes its outputs, but this is float32 tensor")


@pytest.mark.e2e
def test_a_tensor_used_as_storage_is_refused() -> None:
    load_error(_mlp_with(6, "AllocTensor", 3, 1, 0, (-3, 512), "float32"), "code",
               r"alloc_tensor \$3 \$1 .*: \$1 is float32 tensor of rank 2 \(read-only\), not a "
               r"storage buffer")


@pytest.mark.e2e
def test_a_register_read_before_it_is_written_is_refused() -> None:
    load_error(_mlp_with(4, "Move", 0, 0), "code",
               r"pc 7: .*: reads \$1 before it is written")


@pytest.mark.e2e
def test_a_storage_buffer_as_a_kernel_argument_is_refused() -> None:
    load_error(_mlp_with(15, "InvokePacked", 1, (6, 7, 8), (11,)), "code",
               r"output 0 \$11: kernel fused_dense_bias_add#1 declares float32 of rank 2, found "
               r"a storage buffer")


@pytest.mark.e2e
def test_a_function_running_off_its_end_is_refused() -> None:
    load_error(_mlp_with(18, "Move", 10, 9), "code", r"pc 18: .*runs off its end")


# --- control flow, calls and closures -----------------------------------------------------------

def _case(name: str) -> relvm.Executable:
    case = next(c for c in CASES if c.name == name)
    return relvm.build(relvm.parse(case.text, constants=case.constants), params=case.params)


@pytest.mark.e2e
def test_jumps_go_forward() -> None:
    exe = _case("if_else_on_input")
    fn = exe.functions[0]
    pc = next(pc for pc, ins in enumerate(fn.instructions) if ins[0] == 12)  # goto
    for offset in (0, -1):
        fn.instructions[pc] = make("Goto", offset)
        load_error(exe.save_bytes(), "code", re.escape(
            f"pc {pc}: goto {offset:+d}: offset: jump to {pc + offset}, not forward (relvm "
            f"bytecode never loops)"))


def _with_instruction(exe: relvm.Executable, func: str, pc: int, *fields) -> bytes:
    exe.function(func).instructions[pc] = make(*fields)
    return exe.save_bytes()


def test_a_call_passing_other_types_than_the_callee_declares_is_refused() -> None:
    exe = _case("recursion_counts")  # @main: invoke $2 @count ($1, $0)
    load_error(_with_instruction(exe, "main", 1, "Invoke", 2, 0, (0, 1)), "code",
               r"@main pc 1: invoke \$2 @count \(\$0, \$1\): \$0 for @count parameter 0: "
               r"expected int32 tensor of rank 0 \(read-only\), found float32 tensor of rank 1")
    load_error(_with_instruction(_case("recursion_counts"), "main", 1, "Invoke", 2, 0, (1,)),
               "code", r"@count takes 2 parameters, 1 passed")


def test_a_closure_called_with_other_types_than_it_declares_is_refused() -> None:
    # @apply calls its closure parameter: whatever closure it is, it takes a float32 vector.
    exe = _case("function_typed_parameter")
    load_error(_with_instruction(exe, "apply", 2, "InvokeClosure", 2, 0, (0,)), "code",
               r"@apply pc 2: invoke_closure \$2 \$0 \(\$0\): \$0 for @main.closure2 "
               r"parameter 0: expected float32 tensor of rank 1 \(read-only\), found a closure")
    load_error(_with_instruction(_case("function_typed_parameter"), "main", 3, "Invoke", 2, 0,
                                 (0, 1)), "code",
               r"\$0 for @apply parameter 0: expected a closure, found float32 tensor")
    load_error(_with_instruction(_case("function_typed_parameter"), "apply", 2, "InvokeClosure",
                                 2, 1, (1,)), "code", r"\$1 is not a closure: float32 tensor")


def test_a_result_other_than_the_outputs_declare_is_refused() -> None:
    exe = relvm.build(relvm.parse("def @main(%x: Tensor[(n), float32]) { %x }"))
    load_error(with_meta(exe.save_bytes(), _edit("functions.0.outputs.0.dtype", "int8")), "code",
               r"ret \$0: result 0: the outputs declare int8 of rank 1, found float32 tensor")


def test_a_tuple_parameter_relabelled_is_refused() -> None:
    data = _case("tuple_parameter").save_bytes()
    load_error(with_meta(data, _edit("functions.0.params.0.tensors.1.dtype", "float64")), "code",
               r"declares float32 of rank 1, found float64 tensor of rank 1")


@pytest.mark.e2e
def test_recursion_reaches_a_fixpoint() -> None:
    for name in ("recursion_counts", "mutual_recursion", "recursive_rnn_over_symbolic_length"):
        verify.check_executable(_case(name))


def test_the_type_pass_has_steps_only_for_opcodes_that_write_registers() -> None:
    """Reads, jumps and ends come from the opcode table; a step says what an opcode writes,
    so an opcode that writes no register needs none."""
    from relvm.runtime.verify import regtypes
    from relvm.runtime.bytecode.opcodes import TABLE

    writers = {s.number for s in TABLE if s.roles("dst")}
    assert set(regtypes.STEPS) <= writers | {BY_NAME["Ret"].number, BY_NAME["InvokePacked"].number}
