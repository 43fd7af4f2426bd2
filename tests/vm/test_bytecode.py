"""The opcode table and everything derived from it: handlers, encoding, disassembly, docs."""

from pathlib import Path

import pytest

from relvm.docs import DOCUMENTS
from relvm.runtime import bytecode as B
from relvm.runtime.vm.handlers import HANDLERS
from relvm.runtime.bytecode.opcodes import BY_NAME, TABLE, Opcode

# A sample value for each field kind, so every opcode can be built.
SAMPLE = {"reg": 3, "regs": (0, 5, 6), "int": 2, "dim": -2, "dims": (-1, 512), "dtype": "float32",
          "func": 0, "kernel": 1, "const": 0, "prog": 0, "offset": -4}


def sample(spec):
    return B.make(spec, *[SAMPLE[f.kind] for f in spec.fields])


def test_numbers_are_fixed() -> None:
    # Files depend on these numbers: TVM's 0-20, then relvm's own.
    expected = ["Move", "Ret", "Invoke", "InvokeClosure", "InvokePacked", "AllocTensor",
                "AllocTensorReg", "AllocADT", "AllocClosure", "GetField", "If", "LoadConst",
                "Goto", "GetTag", "LoadConsti", "Fatal", "AllocStorage", "ShapeOf",
                "ReshapeTensor", "DeviceCopy", "KillRegister", "ComputeDims",
                "AllocList", "ListLength", "ListGet", "ListInsert", "ListErase", "ListConcat",
                "ListSplit"]
    assert [s.name for s in TABLE] == expected
    assert [s.number for s in TABLE] == list(range(len(expected)))
    assert Opcode.InvokePacked == 4 and Opcode.ComputeDims == 21 and Opcode.ListSplit == 28


@pytest.mark.parametrize("spec", TABLE, ids=[s.name for s in TABLE])
def test_every_opcode_has_a_handler(spec) -> None:
    assert spec.number in HANDLERS
    assert HANDLERS[spec.number].__name__.rstrip("_") == spec.text_name


@pytest.mark.parametrize("spec", TABLE, ids=[s.name for s in TABLE])
def test_encode_decode_print_round_trip(spec) -> None:
    ins = sample(spec)
    words = B.encode([ins])
    assert all(isinstance(w, int) for w in words)
    assert B.decode(words, 1) == [ins]
    text = B.format_instruction(ins)
    assert text.split()[0] == spec.text_name


def test_disassembly_format() -> None:
    ins = B.make("AllocTensor", 3, 1, 0, (-1, 512), "float32")

    class Fn:
        dim_names = ("n",)
    assert B.format_instruction(ins, None, Fn()) == "alloc_tensor $3 $1 0 [n, 512] float32"


@pytest.mark.parametrize("words,count,message", [
    ([99], 1, "unknown opcode 99"),
    ([0, 1], 1, "ends in the middle"),
    ([4, 0, 5, 1], 1, "bad length 5"),
    ([5, 0, 0, 0, 1, 7, 42], 1, "unknown dtype code 42"),
    ([15, 15], 1, "1 words left"),
])
def test_decode_rejects_bad_bytecode(words, count, message) -> None:
    with pytest.raises(B.DecodeError, match=message):
        B.decode(words, count)


def test_opcode_names_match_handlers_and_table() -> None:
    assert set(BY_NAME) == {s.name for s in TABLE}
    assert set(HANDLERS) == {s.number for s in TABLE}


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_generated_docs_are_current(name: str) -> None:
    path = Path(__file__).resolve().parents[2] / "docs" / name
    if not path.exists():
        pytest.skip("docs/ is not beside the tests (installed elsewhere)")
    assert path.read_text() == DOCUMENTS[name](), f"run `python -m relvm.docs` to regenerate {name}"
