"""The opcode table: every VM instruction, declared once.

Each entry gives the opcode's name, its fixed number (executable files depend on it: never
renumber), its fields in encoding order, and a one-line description. The ``Opcode`` enum, the
encoder and decoder (``bytecode.py``), the disassembler, the VM's handler table (``handlers.py``,
checked by a test to cover every opcode) and ``docs/isa.md`` all derive from this table.

Numbers 0-20 are TVM Relay VM's; relvm adds ComputeDims (21), which evaluates a dim program
into the frame's dims vector (see ``dimprog.py``) so that shapes over symbolic dims cost one
instruction per stage instead of a shape-function kernel per allocation.

Field kinds:

=========  ==================================================================================
``reg``    a register index, printed ``$3``
``regs``   a variable-length list of registers
``int``    an immediate integer
``dim``    a dim operand: an int >= 0 literal, or ``-(k+1)`` for slot ``k`` of the frame's dims
``dims``   a variable-length list of dim operands (a shape)
``dtype``  a dtype code (index into ``relvm.dtypes.DTYPES``)
``func``   a VM function index
``kernel`` a kernel table index
``const``  a constant table index
``prog``   a dim program index
``offset`` a relative jump, in instructions
=========  ==================================================================================
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

FIELD_KINDS = ("reg", "regs", "int", "dim", "dims", "dtype", "func", "kernel", "const", "prog",
               "offset")
#: Kinds whose encoding is a length followed by that many items.
LIST_KINDS = frozenset({"regs", "dims"})


@dataclass(frozen=True)
class Field:
    name: str
    kind: str


@dataclass(frozen=True)
class OpcodeSpec:
    name: str          # CamelCase, as in the table
    number: int        # fixed forever
    fields: tuple[Field, ...]
    doc: str

    @property
    def text_name(self) -> str:
        """snake_case, as printed by the disassembler and used in handler names."""
        return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", self.name).lower()


def _op(name: str, number: int, fields: str, doc: str) -> OpcodeSpec:
    parsed = []
    for item in fields.split():
        fname, kind = item.split(":")
        assert kind in FIELD_KINDS, (name, kind)
        parsed.append(Field(fname, kind))
    return OpcodeSpec(name, number, tuple(parsed), doc)


TABLE: tuple[OpcodeSpec, ...] = (
    _op("Move", 0, "src:reg dst:reg",
        "dst = src (a reference; no data is copied)"),
    _op("Ret", 1, "result:reg",
        "return result to the caller's destination register, or from the VM"),
    _op("Invoke", 2, "func:func args:regs dst:reg",
        "call VM function func with args in a new frame; its result goes to dst"),
    _op("InvokeClosure", 3, "closure:reg args:regs dst:reg",
        "call a closure: its captured values, then args; result to dst"),
    _op("InvokePacked", 4, "kernel:kernel output_size:int args:regs",
        "call a kernel; the last output_size args are its preallocated outputs"),
    _op("AllocTensor", 5, "dst:reg storage:reg offset:dim shape:dims dtype:dtype",
        "dst = tensor of shape/dtype viewing storage at byte offset (storage -1: a fresh buffer)"),
    _op("AllocTensorReg", 6, "dst:reg storage:reg offset:dim shape:reg dtype:dtype",
        "as AllocTensor, the shape read from a 1-d int64 tensor register (storage -1: fresh)"),
    _op("AllocADT", 7, "dst:reg tag:int fields:regs",
        "dst = a tuple (tag 0) or constructor value with these fields"),
    _op("AllocClosure", 8, "dst:reg func:func captured:regs",
        "dst = closure of VM function func capturing these registers"),
    _op("GetField", 9, "dst:reg object:reg index:int",
        "dst = field index of a tuple or ADT"),
    _op("If", 10, "test:reg target:reg true_offset:offset false_offset:offset",
        "jump by true_offset if test == target, else by false_offset"),
    _op("LoadConst", 11, "dst:reg const:const",
        "dst = constant (shared, never written)"),
    _op("Goto", 12, "offset:offset",
        "jump by offset"),
    _op("GetTag", 13, "dst:reg object:reg",
        "dst = constructor tag of an ADT (0 for a tuple), as an int64 scalar"),
    _op("LoadConsti", 14, "dst:reg value:int",
        "dst = value as an int64 scalar tensor"),
    _op("Fatal", 15, "",
        "stop with an error (unreachable code)"),
    _op("AllocStorage", 16, "dst:reg size:dim alignment:int reuse:int",
        "dst = a byte buffer; reuse=1 lets the VM keep and reuse it across invokes"),
    _op("ShapeOf", 17, "dst:reg tensor:reg",
        "dst = the shape of tensor as a 1-d int64 tensor"),
    _op("ReshapeTensor", 18, "dst:reg tensor:reg shape:dims",
        "dst = a view of tensor with another shape (no copy)"),
    _op("DeviceCopy", 19, "dst:reg src:reg src_device:int dst_device:int",
        "dst = a copy of src on dst_device (CPU: device 0)"),
    _op("KillRegister", 20, "reg:reg",
        "drop the reference in reg so its memory can be freed"),
    _op("ComputeDims", 21, "prog:prog args:regs",
        "run dim program prog over the shapes (or values) of args into the frame's dims"),
)

BY_NAME: dict[str, OpcodeSpec] = {s.name: s for s in TABLE}
BY_NUMBER: dict[int, OpcodeSpec] = {s.number: s for s in TABLE}

Opcode = enum.IntEnum("Opcode", {s.name: s.number for s in TABLE})  # type: ignore[misc]
Opcode.__doc__ = "Opcode numbers, derived from TABLE."


def isa_markdown() -> str:
    """The ISA reference (docs/isa.md), generated from TABLE."""
    lines = [
        "<!-- Generated from relvm/runtime/opcodes.py by `python -m relvm.docs`; "
        "do not edit. -->",
        "# relvm instruction set",
        "",
        "Registers (`$k`) are per call frame; a function's parameters occupy the first "
        "registers. Each frame also has a *dims vector* of integers filled by `ComputeDims`; a "
        "`dim` operand is a literal (`512`) or a dims slot, printed by the symbolic dim it "
        "holds (`n`, `n*3`).",
        "",
        "| # | opcode | text | fields | meaning |",
        "|---|---|---|---|---|",
    ]
    for s in TABLE:
        fields = ", ".join(f"{f.name}: {f.kind}" for f in s.fields) or "—"
        lines.append(f"| {s.number} | {s.name} | `{s.text_name}` | {fields} | {s.doc} |")
    lines += ["", "## Encoding", "",
              "An instruction is encoded as int64 words: the opcode number, then each field in "
              "table order; a `regs` or `dims` field is its length followed by its items.", ""]
    return "\n".join(lines)
