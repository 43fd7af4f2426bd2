"""Instructions in memory, their int64 encoding, and their text (the disassembler).

In memory an instruction is a named tuple ``(op, field, ...)``: the opcode number, then the
fields in the table's order, by name (``ins.dst``); ``regs``/``dims`` fields are tuples and
``dtype`` fields are dtype names. Everything here is driven by the opcode table
(``opcodes.py``): what an instruction reads and writes comes from its fields' roles.
"""

from __future__ import annotations

from collections import namedtuple
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from ... import dtypes
from .opcodes import BY_NAME, BY_NUMBER, LEGACY_LAYOUTS, READ_ROLES, Field, OpcodeSpec

if TYPE_CHECKING:  # pragma: no cover
    from ..executable import Executable, VMFunction

DTYPE_CODES = {name: i for i, name in enumerate(dtypes.DTYPES)}
DTYPE_NAMES = list(dtypes.DTYPES)


class DecodeError(ValueError):
    """Malformed encoded bytecode; the executable loader names the section."""


# --- instructions in memory ---------------------------------------------------------------------

_CLASSES: dict[OpcodeSpec, type] = {}


def instruction_class(spec: OpcodeSpec) -> type:
    """The named tuple of ``spec``'s instructions: ``op`` (the number), then its fields by
    name (``ins.dst``, ``ins.kernel``, ...)."""
    cls = _CLASSES.get(spec)
    if cls is None:
        cls = _CLASSES[spec] = namedtuple(spec.name, ("op",) + spec.field_names)
    return cls


def spec_of(ins: tuple) -> OpcodeSpec:
    return BY_NUMBER[ins[0]]


def make(name_or_spec: str | OpcodeSpec, *fields: Any, **named: Any) -> tuple:
    """Build an instruction from its fields in table order or by name (checked against the
    table): ``make("Move", dst=3, src=1)``."""
    spec = BY_NAME[name_or_spec] if isinstance(name_or_spec, str) else name_or_spec
    if named:
        assert not fields and set(named) == set(spec.field_names), (spec.name, named)
        fields = tuple(named[n] for n in spec.field_names)
    assert len(fields) == len(spec.fields), (spec.name, fields)
    return instruction_class(spec)(spec.number, *(tuple(v) if f.is_list else v
                                                  for f, v in zip(spec.fields, fields)))


# --- what an instruction reads and writes, from the fields' roles --------------------------------

def operands(ins: tuple, roles: frozenset[str] | set[str] | tuple[str, ...]) -> Iterator[int]:
    """The registers in ``ins``'s fields with these roles, in field order (an optional register
    that is -1 is none)."""
    for f, v in zip(BY_NUMBER[ins[0]].fields, ins[1:]):
        if f.role in roles:
            if f.is_list:
                yield from v
            elif v >= 0:
                yield v


def reads(ins: tuple) -> tuple[int, ...]:
    """Registers ``ins`` reads (every register field but ``dst``)."""
    return tuple(operands(ins, READ_ROLES))


def writes(ins: tuple) -> tuple[int, ...]:
    """Registers ``ins`` writes: its ``dst``, if it has one."""
    return tuple(operands(ins, ("dst",)))


def shared(ins: tuple, roles: tuple[str, ...] = ("view", "part", "holds")) -> tuple[int, ...]:
    """Registers whose values ``dst`` holds afterwards (as itself or a view of it, as a part,
    in a tuple): a use of a tensor there continues as the uses of ``dst``."""
    return tuple(operands(ins, roles))


def local_uses(ins: tuple) -> tuple[int, ...]:
    """Registers ``ins`` uses without keeping their values anywhere (read, or written in place
    by a kernel)."""
    return tuple(operands(ins, ("src", "srcs", "outs")))


def register_operands(ins: tuple) -> tuple[int, ...]:
    """Every register ``ins`` names, written or read, without repeats, in field order."""
    return tuple(dict.fromkeys(writes(ins) + reads(ins)))


# --- encoding -----------------------------------------------------------------------------------

def encode(instructions: Sequence[tuple]) -> list[int]:
    """Flatten instructions into int64 words (the current format's layout)."""
    words: list[int] = []
    for ins in instructions:
        spec = BY_NUMBER[ins[0]]
        words.append(spec.number)
        for f, value in zip(spec.fields, ins[1:]):
            if f.is_list:
                words.append(len(value))
                words.extend(int(v) for v in value)
            elif f.encoding == "dtype":
                words.append(DTYPE_CODES[value])
            else:
                words.append(int(value))
    return words


def decode(words: Sequence[int], count: int, version: int | None = None) -> list[tuple]:
    """Read ``count`` instructions back from int64 words written by format ``version`` (None:
    the current one). Raises DecodeError on bad data."""
    legacy = LEGACY_LAYOUTS.get(version, {}) if version is not None else {}
    words = [int(w) for w in words]
    out: list[tuple] = []
    pos, n = 0, len(words)

    def fields_of(spec: OpcodeSpec, layout: Sequence[Field]) -> list:
        nonlocal pos
        values = []
        for f in layout:
            if pos >= n:
                raise DecodeError("bytecode ends in the middle of an instruction")
            v = words[pos]
            pos += 1
            if f.is_list:
                if v < 0 or v > n - pos:
                    raise DecodeError(f"{spec.name}.{f.name}: bad length {v}")
                values.append(tuple(words[pos:pos + v]))
                pos += v
            elif f.encoding == "dtype":
                if not 0 <= v < len(DTYPE_NAMES):
                    raise DecodeError(f"{spec.name}: unknown dtype code {v}")
                values.append(DTYPE_NAMES[v])
            else:
                values.append(v)
        return values

    for _ in range(count):
        if pos >= n:
            raise DecodeError("bytecode ends in the middle of an instruction")
        number = words[pos]
        spec = BY_NUMBER.get(number)
        if spec is None:
            raise DecodeError(f"unknown opcode {number} at word {pos}")
        pos += 1
        old = legacy.get(spec.name)
        if old is None:
            fields = fields_of(spec, spec.fields)
        else:
            layout, convert = old
            try:
                fields = list(convert(*fields_of(spec, layout)))
            except ValueError as e:
                raise DecodeError(f"{spec.name}: {e}") from None
        out.append(instruction_class(spec)(number, *fields))
    if pos != n:
        raise DecodeError(f"{n - pos} words left after {count} instructions")
    return out


# --- disassembler ------------------------------------------------------------------------------

def _dim(v: int, names: Sequence[str]) -> str:
    if v >= 0:
        return str(v)
    k = -v - 1
    return names[k] if k < len(names) else f"d{k}"


def _reg(r: int) -> str:
    return "-" if r < 0 else f"${r}"


def format_instruction(ins: tuple, exe: "Executable | None" = None,
                       func: "VMFunction | None" = None) -> str:
    """Text of one instruction, e.g. ``alloc_tensor $3 $1 0 [n, 512] float32``."""
    spec = BY_NUMBER[ins[0]]
    names = func.dim_names if func is not None else ()
    parts = [spec.text_name]
    for f, v in zip(spec.fields, ins[1:]):
        text = _format_field(f.kind, v, exe, names)
        parts.append("-> " + text if f.role == "outs" else text)
    return " ".join(parts)


def _format_field(kind: str, v: Any, exe: "Executable | None", names: Sequence[str]) -> str:
    if kind == "reg":
        return _reg(v)
    if kind == "regs":
        return "(" + ", ".join(map(_reg, v)) + ")"
    if kind == "dim":
        return _dim(v, names)
    if kind == "dims":
        return "[" + ", ".join(_dim(x, names) for x in v) + "]"
    if kind == "func":
        if exe is not None and v < len(exe.functions):
            return "@" + exe.functions[v].name
        return f"func[{v}]"
    if kind == "const":
        if exe is not None and v < len(exe.constants):
            c = exe.constants[v]
            return f"const[{v}]:{dtypes.from_numpy(c.dtype)}{list(c.shape)}"
        return f"const[{v}]"
    if kind == "kernel":
        if exe is not None and 0 <= v < len(exe.kernels):
            return f"{exe.kernels[v].name}#{v}"
        return f"kernel#{v}"
    if kind == "prog":
        return f"dims#{v}"
    if kind == "offset":
        return f"{v:+d}"
    return str(v)
