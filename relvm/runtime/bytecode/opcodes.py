"""The opcode table: every VM instruction, declared once, with what each of its fields *is*.

Each entry gives the opcode's name, its fixed number (executable files depend on it: never
renumber), its fields in encoding order with their roles, a few flags, and a one-line
description. Everything that needs a fact about an opcode derives it from here: the instruction
classes, encoder, decoder and disassembler (``instructions.py``), which registers an instruction
reads and writes (``instructions.reads``/``writes``), the verifier's operand checks, the tracer and
the runtime error report, the replay plan, memory planning's walks, the VM's handler table
(``vm/handlers.py``, whose factories take the fields by name) and ``docs/isa.md``.

Numbers 0-20 are TVM Relay VM's; relvm adds ComputeDims (21), which evaluates a dim program
into the frame's dims vector (see ``dimprog.py``) so that shapes over symbolic dims cost one
instruction per stage instead of a shape-function kernel per allocation.

Every instruction that writes a register has it as its first field, ``dst`` (format version 3
on; older files are read through ``LEGACY_LAYOUTS``).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

#: Field roles: role -> (encoding, meaning). Encodings: ``reg`` one register (-1: none, for an
#: optional field), ``regs`` a length then registers, ``int`` one int64, ``dims`` a length then
#: dim operands, ``dtype`` a dtype code.
ROLES: dict[str, tuple[str, str]] = {
    "dst": ("reg", "register written: the instruction's result"),
    "src": ("reg", "register read; the value is used here and not kept"),
    "srcs": ("regs", "registers read; their values are used here and not kept"),
    "view": ("reg", "register read; the result is its value, or a view sharing its memory"),
    "part": ("reg", "register read; the result is a part of its value (a field)"),
    "holds": ("regs", "registers read; the result is a tuple of their values"),
    "captures": ("regs", "registers read; the result, a closure, keeps their values"),
    "args": ("regs", "registers passed to a called function"),
    "result": ("reg", "register returned to the caller"),
    "outs": ("regs", "registers read whose tensors a kernel writes in place"),
    "dim": ("int", "a dim operand: a literal >= 0, or -(k+1) for slot k of the frame's dims"),
    "dims": ("dims", "a list of dim operands (a shape)"),
    "imm": ("int", "an immediate integer"),
    "align": ("int", "a byte alignment: a power of two"),
    "dtype": ("dtype", "a dtype code (index into relvm.dtypes.DTYPES)"),
    "func": ("int", "a VM function index"),
    "kernel": ("int", "a kernel table index"),
    "const": ("int", "a constant table index"),
    "prog": ("int", "a dim program index"),
    "offset": ("int", "a relative jump, in instructions (forward only)"),
}
#: Roles whose fields hold registers; the ones below them, registers an instruction reads.
REGISTER_ROLES = frozenset({"dst", "src", "srcs", "view", "part", "holds", "captures", "args",
                            "result", "outs"})
READ_ROLES = REGISTER_ROLES - {"dst"}
#: Roles that index a table of the executable: role -> the executable's attribute.
TABLE_ROLES = {"func": "functions", "kernel": "kernels", "const": "constants",
               "prog": "dim_programs"}
#: Encodings of a length followed by that many items.
LIST_ENCODINGS = frozenset({"regs", "dims"})

#: Opcode flags: flag -> meaning.
FLAGS: dict[str, str] = {
    "call": "pushes a frame for another VM function; its result arrives in dst on return",
    "jump": "transfers control by its offsets instead of falling through",
    "ends": "ends the function (returns or stops)",
    "kernel": "runs a kernel of the kernel table",
    "allocates": "makes tensor memory (or a view of storage) for dst",
    "bindable": "its dst may be the caller's output array instead (``OutputSig.alloc_pcs``)",
    "pure": "only computes dst from its operands: no memory written, nothing allocated",
    "dims": "writes the frame's dims vector",
}


@dataclass(frozen=True)
class Field:
    name: str
    role: str
    optional: bool = False          # a register field that may be -1 (none)
    low: int = -2**63               # the range of an ``imm`` field
    high: int = 2**63 - 1

    @cached_property  # asked for every field of every instruction decoded and checked
    def encoding(self) -> str:
        return ROLES[self.role][0]

    @cached_property
    def kind(self) -> str:
        """How the field is encoded and printed: its role's encoding, or the role itself for
        table indices, dims and offsets."""
        return self.role if self.role in ("dim", "offset", *TABLE_ROLES) else self.encoding

    @cached_property
    def is_list(self) -> bool:
        return self.encoding in LIST_ENCODINGS

    @cached_property
    def is_register(self) -> bool:
        return self.role in REGISTER_ROLES


@dataclass(frozen=True)
class OpcodeSpec:
    name: str          # CamelCase, as in the table
    number: int        # fixed forever
    fields: tuple[Field, ...]
    flags: frozenset[str]
    doc: str

    @property
    def text_name(self) -> str:
        """snake_case, as printed by the disassembler and used in handler names."""
        return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", self.name).lower()

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def has(self, flag: str) -> bool:
        return flag in self.flags

    def roles(self, *roles: str) -> tuple[int, ...]:
        """Positions (1-based, as in an instruction tuple) of the fields with these roles."""
        return tuple(i + 1 for i, f in enumerate(self.fields) if f.role in roles)


_FIELD = re.compile(r"(\w+):(\w+)(\?)?(?:\[(-?\d+)\.\.(-?\d+)\])?$")


def parse_fields(fields: str) -> tuple[Field, ...]:
    """``"dst:dst storage:view? tag:imm[0..7]"`` -> Fields (``?``: optional register,
    ``[lo..hi]``: the range of an immediate)."""
    parsed = []
    for item in fields.split():
        m = _FIELD.match(item)
        assert m and m[2] in ROLES, item
        name, role, optional, low, high = m.groups()
        assert not optional or ROLES[role][0] == "reg", item
        extra = {} if low is None else {"low": int(low), "high": int(high)}
        parsed.append(Field(name, role, bool(optional), **extra))
    assert len({f.name for f in parsed}) == len(parsed), fields
    return tuple(parsed)


def opcode(name: str, number: int, fields: str, flags: str, doc: str) -> OpcodeSpec:
    """Declare an opcode (``TABLE`` below; a test may declare more with ``define``)."""
    assert all(f in FLAGS for f in flags.split()), (name, flags)
    parsed = parse_fields(fields)
    # The decision of format version 3: a written register is the first field, named dst.
    assert all((f.role == "dst") == (f.name == "dst") == (i == 0 and f.role == "dst")
               for i, f in enumerate(parsed)), (name, fields)
    return OpcodeSpec(name, number, parsed, frozenset(flags.split()), doc)


_I31 = f"[0..{2**31 - 1}]"
_MAX_RANK = 64  # relvm.ir.limits.MAX_RANK, as the file format's meta.MAX_RANK repeats it

TABLE: tuple[OpcodeSpec, ...] = (
    opcode("Move", 0, "dst:dst src:view", "pure",
           "dst = src (a reference; no data is copied)"),
    opcode("Ret", 1, "result:result", "ends",
           "return result to the caller's destination register, or from the VM"),
    opcode("Invoke", 2, "dst:dst func:func args:args", "call",
           "call VM function func with args in a new frame; its result goes to dst"),
    opcode("InvokeClosure", 3, "dst:dst closure:src args:args", "call",
           "call a closure: its captured values, then args; result to dst"),
    opcode("InvokePacked", 4, "kernel:kernel inputs:srcs outputs:outs", "kernel",
           "run a kernel on inputs, writing into the preallocated tensors in outputs"),
    opcode("AllocTensor", 5, "dst:dst storage:view? offset:dim shape:dims dtype:dtype",
           "allocates bindable",
           "dst = tensor of shape/dtype viewing storage at byte offset (storage -1: a fresh buffer)"),
    opcode("AllocTensorReg", 6, "dst:dst storage:view? offset:dim shape:src dtype:dtype",
           "allocates bindable",
           "as AllocTensor, the shape read from a 1-d int64 tensor register (storage -1: fresh)"),
    opcode("AllocADT", 7, f"dst:dst tag:imm{_I31} fields:holds", "pure",
           "dst = a tuple (tag 0) or constructor value with these fields"),
    opcode("AllocClosure", 8, "dst:dst func:func captured:captures", "pure",
           "dst = closure of VM function func capturing these registers"),
    opcode("GetField", 9, f"dst:dst object:part index:imm{_I31}", "pure",
           "dst = field index of a tuple or ADT"),
    opcode("If", 10, "test:src target:src true_offset:offset false_offset:offset", "jump",
           "jump by true_offset if test == target, else by false_offset"),
    opcode("LoadConst", 11, "dst:dst const:const", "pure",
           "dst = constant (shared, never written)"),
    opcode("Goto", 12, "offset:offset", "jump",
           "jump by offset"),
    opcode("GetTag", 13, "dst:dst object:src", "pure",
           "dst = constructor tag of an ADT (0 for a tuple), as an int64 scalar"),
    opcode("LoadConsti", 14, "dst:dst value:imm", "pure",
           "dst = value as an int64 scalar tensor"),
    opcode("Fatal", 15, "", "ends",
           "stop with an error (unreachable code)"),
    opcode("AllocStorage", 16, "dst:dst size:dim alignment:align reuse:imm[0..1]", "allocates",
           "dst = a byte buffer; reuse=1 lets the VM keep and reuse it across invokes"),
    opcode("ShapeOf", 17, "dst:dst tensor:src", "pure",
           "dst = the shape of tensor as a 1-d int64 tensor"),
    opcode("ReshapeTensor", 18, "dst:dst tensor:view shape:dims", "pure",
           "dst = a view of tensor with another shape (no copy)"),
    opcode("DeviceCopy", 19, "dst:dst src:src src_device:imm dst_device:imm", "allocates",
           "dst = a copy of src on dst_device (CPU: device 0)"),
    opcode("KillRegister", 20, "dst:dst", "",
           "drop the reference in dst so its memory can be freed"),
    opcode("ComputeDims", 21, "prog:prog args:srcs", "dims",
           "run dim program prog over the shapes (or values) of args into the frame's dims"),
    # Lists of tensors (ONNX sequences), of a length known when the program runs. A list is
    # never changed: insert and erase make new ones. Elements are read-only to kernels (they
    # may be the caller's arrays); positions count from the end when negative.
    opcode("AllocList", 22, f"dst:dst items:holds dtype:dtype rank:imm[-1..{_MAX_RANK}]", "pure",
           "dst = a list of the items, tensors of dtype and rank (-1: any; no items: an empty "
           "list)"),
    opcode("ListLength", 23, "dst:dst list:src", "pure",
           "dst = the number of tensors in list, as an int64 scalar"),
    opcode("ListGet", 24, "dst:dst list:part index:src", "pure",
           "dst = the tensor at position index (an integer scalar) of list"),
    opcode("ListInsert", 25, "dst:dst list:part item:holds index:src", "pure",
           "dst = list with the item (one register) inserted before position index "
           "(the length: at the end)"),
    opcode("ListErase", 26, "dst:dst list:part index:src", "pure",
           "dst = list without the tensor at position index"),
    opcode("ListConcat", 27, f"dst:dst list:src axis:imm[{-_MAX_RANK - 1}..{_MAX_RANK}] "
           "new_axis:imm[0..1]", "",
           "dst = a new tensor: list's tensors joined along axis (new_axis 1: stacked along a "
           "new axis there)"),
    opcode("ListSplit", 28, f"dst:dst tensor:src split:src axis:imm[{-_MAX_RANK}..{_MAX_RANK}] "
           "keepdims:imm[0..1]", "",
           "dst = a list of new tensors: tensor cut along axis into parts of the sizes in "
           "split (1-d), or of split each (a scalar; the last shorter); keepdims 0 drops the "
           "axis (parts of 1)"),
)

BY_NAME: dict[str, OpcodeSpec] = {s.name: s for s in TABLE}
BY_NUMBER: dict[int, OpcodeSpec] = {s.number: s for s in TABLE}

Opcode = enum.IntEnum("Opcode", {s.name: s.number for s in TABLE})  # type: ignore[misc]
Opcode.__doc__ = "Opcode numbers, derived from TABLE."

#: Format versions 1 and 2 laid four opcodes out differently: opcode -> (old fields, a function
#: from the old field values to the new ones, raising ValueError on values that fit no new
#: instruction). The decoder reads an old file's instructions through it.
LEGACY_LAYOUTS: dict[int, dict[str, tuple[tuple[Field, ...], Callable[..., tuple]]]] = {}


def _split_args(kernel: int, n_out: int, args: tuple) -> tuple:
    if not 0 <= n_out <= len(args):
        raise ValueError(f"output_size {n_out} but {len(args)} arguments")
    return kernel, args[:len(args) - n_out], args[len(args) - n_out:]


_V2 = {
    "Move": (parse_fields("src:view dst:view"), lambda src, dst: (dst, src)),
    "Invoke": (parse_fields("func:func args:args dst:view"),
               lambda func, args, dst: (dst, func, args)),
    "InvokeClosure": (parse_fields("closure:src args:args dst:view"),
                      lambda closure, args, dst: (dst, closure, args)),
    "InvokePacked": (parse_fields("kernel:kernel output_size:imm args:srcs"), _split_args),
}
LEGACY_LAYOUTS[1] = LEGACY_LAYOUTS[2] = _V2


def define(spec: OpcodeSpec) -> None:
    """Add an opcode to the tables (tests declare test-only opcodes this way; ``undefine``
    removes it). relvm's own opcodes are the literal TABLE above."""
    assert spec.number not in BY_NUMBER and spec.name not in BY_NAME, spec.name
    BY_NAME[spec.name] = spec
    BY_NUMBER[spec.number] = spec


def undefine(spec: OpcodeSpec) -> None:
    del BY_NAME[spec.name]
    del BY_NUMBER[spec.number]


def isa_markdown() -> str:
    """The ISA reference (docs/isa.md), generated from TABLE."""
    lines = [
        "<!-- Generated from relvm/runtime/bytecode/opcodes.py by `python -m relvm.docs`; "
        "do not edit. -->",
        "# relvm instruction set",
        "",
        "Registers (`$k`) are per call frame; a function's parameters occupy the first "
        "registers. Each frame also has a *dims vector* of integers filled by `ComputeDims`; a "
        "`dim` operand is a literal (`512`) or a dims slot, printed by the symbolic dim it "
        "holds (`n`, `n*3`). An instruction that writes a register has it first, as `dst`.",
        "",
        "| # | opcode | text | fields (name: role) | flags | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for s in sorted(BY_NUMBER.values(), key=lambda s: s.number):
        fields = ", ".join(_field_text(f) for f in s.fields) or "—"
        flags = ", ".join(sorted(s.flags)) or "—"
        lines.append(f"| {s.number} | {s.name} | `{s.text_name}` | {fields} | {flags} | "
                     f"{s.doc} |")
    lines += ["", "## Field roles", "", "| role | encoding | meaning |", "|---|---|---|"]
    lines += [f"| `{r}` | {enc} | {doc} |" for r, (enc, doc) in ROLES.items()]
    lines += ["", "## Flags", "", "| flag | meaning |", "|---|---|"]
    lines += [f"| `{k}` | {doc} |" for k, doc in FLAGS.items()]
    lines += ["", "## Encoding", "",
              "An instruction is encoded as int64 words: the opcode number, then each field in "
              "table order; a `regs` or `dims` field is its length followed by its items. "
              "Files of format versions 1 and 2 ordered four opcodes differently:", ""]
    for name, (old, _) in _V2.items():
        lines.append(f"- `{name}`: " + ", ".join(f.name for f in old))
    lines.append("")
    return "\n".join(lines)


def _field_text(f: Field) -> str:
    text = f"{f.name}: {f.role}" + ("?" if f.optional else "")
    if f.role == "imm" and (f.low, f.high) != (-2**63, 2**63 - 1):
        text += f" {f.low}..{f.high}"
    return text
