"""Every per-opcode fact comes from the opcode table.

A test-only opcode, declared with ``opcodes.define`` and given nothing but its handler, is
encoded, decoded, verified (operands and register types), disassembled, documented, run, traced
and reported in errors like relvm's own; trace lines and runtime errors name exactly the
operands of the instruction; files of format versions 1 and 2 decode through the reader table.
"""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

import relvm
from relvm import RelvmFormatError, RelvmInputError, RelvmRuntimeError
from relvm.runtime import bytecode as B
from relvm.runtime.vm import handlers, thread
from relvm.runtime.bytecode import opcodes
from relvm.runtime.bytecode.opcodes import BY_NAME, TABLE

TANH = "def @main(%x: Tensor[(n, 4), float32]) { tanh(%x) }"
X = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)


@pytest.fixture
def twice():
    """Opcode 200, ``twice dst src``: dst = src * 2, refusing values above 1e6 -- declared in
    the table and given a handler, nothing else."""
    spec = opcodes.opcode("Twice", 200, "dst:dst src:src", "", "dst = src * 2")
    opcodes.define(spec)

    @handlers.handler(spec)
    def twice(vm, fn, pc, dst, src):
        nxt = pc + 1

        def step(f):
            r = f.regs
            if (r[src] > 1e6).any():
                raise ValueError("a value above 1e6")
            r[dst] = r[src] * 2
            return nxt
        return step
    try:
        yield spec
    finally:
        opcodes.undefine(spec)
        del handlers.HANDLERS[spec.number]


def _with_twice(spec) -> relvm.Executable:
    """@main of TANH with ``twice`` applied to its result before ``ret``."""
    exe = relvm.build(relvm.parse(TANH))
    fn = exe.function("main")
    ret = fn.instructions[-1]
    new = fn.num_regs
    fn.num_regs += 1
    fn.instructions[-1:] = [B.make(spec, dst=new, src=ret.result), B.make("Ret", result=new)]
    return exe


def test_a_new_opcode_needs_only_its_table_entry_and_handler(twice, capsys) -> None:
    exe = relvm.load_bytes(_with_twice(twice).save_bytes())  # encoded, decoded, verified
    fn = exe.function("main")
    ins = fn.instructions[-2]
    assert ins.op == 200 and type(ins).__name__ == "Twice"
    assert B.writes(ins) == (ins.dst,) and B.reads(ins) == (ins.src,)
    assert B.local_uses(ins) == (ins.src,) and B.shared(ins) == ()
    assert re.search(rf"twice \${ins.dst} \${ins.src}\n", exe.bytecode)
    assert f"| 200 | Twice | `twice` | dst: dst, src: src | — | dst = src * 2 |" in \
        opcodes.isa_markdown()

    vm = relvm.VirtualMachine(exe)
    for _ in range(2):
        np.testing.assert_allclose(vm.invoke("main", X), np.tanh(X) * 2, rtol=1e-6)
    out = np.empty((2, 4), np.float32)
    vm.invoke_with_outputs("main", [X], [out])
    np.testing.assert_allclose(out, np.tanh(X) * 2, rtol=1e-6)

    vm.trace = True
    vm.invoke("main", X)
    line = [t for t in capsys.readouterr().err.splitlines() if "twice" in t]
    assert line == [f"[relvm] @main {len(fn.instructions) - 2:>4}: twice ${ins.dst} ${ins.src}"
                    f"  -> ${ins.dst}=float32[2, 4]"]

    prof = vm.profile("main", X)
    assert prof.rows["twice"][0] == 1


def test_a_new_opcodes_operands_are_verified_by_their_roles(twice) -> None:
    exe = _with_twice(twice)
    fn = exe.function("main")
    fn.instructions[-2] = fn.instructions[-2]._replace(src=99)
    with pytest.raises(RelvmFormatError, match=rf"twice \${fn.instructions[-2].dst} \$99: src: "
                                               rf"register 99 outside 0..{fn.num_regs - 1}"):
        relvm.load_bytes(exe.save_bytes())
    exe = _with_twice(twice)
    fn = exe.function("main")
    spare = fn.num_regs
    fn.num_regs += 1
    fn.instructions[-2] = fn.instructions[-2]._replace(src=spare)
    with pytest.raises(RelvmFormatError, match=rf"reads \${spare} before it is written"):
        relvm.load_bytes(exe.save_bytes())


def test_a_new_opcodes_failure_names_it_and_its_operands(twice) -> None:
    exe = relvm.build(relvm.parse("def @main(%x: Tensor[(n, 4), float32]) { %x }"))
    fn = exe.function("main")
    fn.num_regs += 1
    fn.instructions[-1:] = [B.make("Twice", dst=1, src=0), B.make("Ret", result=1)]
    vm = relvm.VirtualMachine(exe)
    with pytest.raises(RelvmRuntimeError) as info:
        vm.invoke("main", np.full((3, 4), 2e6, np.float32))
    pc = len(fn.instructions) - 2
    assert str(info.value) == (f"@main pc {pc}: twice $1 $0: ValueError: a value above 1e6; "
                               f"registers: $0: float32[3, 4]")


def test_trace_names_exactly_what_each_instruction_writes(capsys) -> None:
    exe = relvm.build(relvm.parse("""def @main(%x: Tensor[(n, 3), float32], %w: Tensor[(4, 3), float32]) {
      nn.dense(%x, %w)
    }"""), fuse=False)
    vm = relvm.VirtualMachine(exe)
    vm.trace = True
    vm.invoke("main", np.ones((2, 3), np.float32), np.ones((4, 3), np.float32))
    lines = [t.split(": ", 1)[1] for t in capsys.readouterr().err.splitlines()]
    dense = [t for t in lines if t.startswith("invoke_packed")]
    assert dense == ["invoke_packed nn.dense#0 ($0, $1) -> ($2)  -> $2=float32[2, 4]"]
    # the prologue is traced too: the dims it computes, by name
    assert any(re.fullmatch(r"compute_dims dims#\d+ \(\$0(, \$1)?\)  -> n=2", t) for t in lines)
    assert lines[-1] == "ret $2"


def test_a_failing_kernel_names_exactly_its_operands() -> None:
    vm = relvm.VirtualMachine(relvm.build(relvm.parse("""def @main(%x: Tensor[(n, 3), float32]) {
      %0 = exp(%x);
      max(%0, axis=0)
    }"""), fuse=False))
    with pytest.raises(RelvmRuntimeError) as info:
        vm.invoke("main", np.zeros((0, 3), np.float32))
    m = re.search(r"invoke_packed max#1 \(\$(\d+)\) -> \(\$(\d+)\): .*; registers: (.*)$",
                  str(info.value))
    assert m, str(info.value)
    src, dst = m[1], m[2]
    assert m[3] == f"${src}: float32[0, 3], ${dst}: float32[3]"


@pytest.mark.e2e
def test_the_recursion_limit_holds_while_tracing(monkeypatch, capsys) -> None:
    rnn = """def @rnn(%xs: Tensor[(t, 4), float32], %h: Tensor[(4), float32], %i: int64) -> Tensor[(4), float32] {
      if (less(%i, take(shape_of(%xs, dtype="int64"), 0i64))) {
        @rnn(%xs, tanh(add(multiply(%h, 0.5f), take(%xs, %i, axis=0))), add(%i, 1i64))
      } else { %h }
    }
    def @main(%xs: Tensor[(t, 4), float32]) {
      @rnn(%xs, zeros(shape=[4], dtype="float32"), 0i64)
    }"""
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(rnn)))
    monkeypatch.setattr(thread, "MAX_FRAMES", 50)
    xs = np.zeros((100, 4), np.float32)
    for trace in (False, True):
        vm.trace = trace
        with pytest.raises(RelvmRuntimeError, match="call depth exceeds 50 frames"):
            vm.invoke("main", xs)
    capsys.readouterr()


def test_profile_before_set_input_is_an_input_error() -> None:
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(TANH)))
    with pytest.raises(RelvmInputError, match=r"@main: inputs are not set; call set_input"):
        vm.profile("main")


@pytest.mark.parametrize("name,old,new", [
    ("Move", [0, 1, 2], dict(dst=2, src=1)),
    ("Invoke", [2, 1, 2, 5, 6, 7], dict(dst=7, func=1, args=(5, 6))),
    ("InvokeClosure", [3, 4, 1, 5, 7], dict(dst=7, closure=4, args=(5,))),
    ("InvokePacked", [4, 3, 1, 3, 0, 1, 2], dict(kernel=3, inputs=(0, 1), outputs=(2,))),
    ("InvokePacked", [4, 3, 0, 2, 0, 1], dict(kernel=3, inputs=(0, 1), outputs=())),
])
def test_older_formats_decode_through_the_reader_table(name, old, new) -> None:
    for version in (1, 2):
        assert B.decode(old, 1, version) == [B.make(name, **new)]
    assert B.decode(B.encode([B.make(name, **new)]), 1) == [B.make(name, **new)]


def test_an_old_kernel_call_with_more_outputs_than_arguments_is_a_decode_error() -> None:
    with pytest.raises(B.DecodeError, match="InvokePacked: output_size 4 but 3 arguments"):
        B.decode([4, 0, 4, 3, 0, 1, 2], 1, 2)


@pytest.mark.parametrize("spec", TABLE, ids=[s.name for s in TABLE])
def test_the_table_states_every_fact_the_runtime_uses(spec) -> None:
    """dst first; a handler taking the fields by name; every field a known role."""
    assert [f.name for f in spec.fields if f.role == "dst"] in ([], ["dst"])
    assert not spec.roles("dst") or spec.roles("dst") == (1,)
    factory = handlers.HANDLERS[spec.number]
    assert tuple(inspect.signature(factory).parameters)[3:] == spec.field_names
    assert all(f.role in opcodes.ROLES for f in spec.fields)
    assert spec.flags <= set(opcodes.FLAGS)
    # an opcode that allocates or is pure has a dst; a kernel call, a jump or a call is not pure
    assert not (spec.has("pure") or spec.has("allocates")) or spec.roles("dst")
    assert not (spec.has("pure") and (spec.has("kernel") or spec.has("jump") or spec.has("call")))
    assert BY_NAME[spec.name] is spec
