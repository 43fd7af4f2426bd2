"""Instructions in memory, their int64 encoding, and their text (the disassembler).

In memory an instruction is a tuple ``(opcode_number, field, ...)`` in the table's field order;
``regs``/``dims`` fields are tuples and ``dtype`` fields are dtype names. Everything here is
driven by ``opcodes.TABLE``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from .. import dtypes
from .opcodes import BY_NUMBER, LIST_KINDS, OpcodeSpec

if TYPE_CHECKING:  # pragma: no cover
    from .executable import Executable, VMFunction

DTYPE_CODES = {name: i for i, name in enumerate(dtypes.DTYPES)}
DTYPE_NAMES = list(dtypes.DTYPES)


class DecodeError(ValueError):
    """Malformed encoded bytecode; the executable loader names the section."""


def make(name_or_spec: str | OpcodeSpec, *fields: Any) -> tuple:
    """Build an instruction, checking the field count against the table."""
    from .opcodes import BY_NAME

    spec = BY_NAME[name_or_spec] if isinstance(name_or_spec, str) else name_or_spec
    assert len(fields) == len(spec.fields), (spec.name, fields)
    return (spec.number,) + tuple(tuple(f) if spec.fields[i].kind in LIST_KINDS else f
                                  for i, f in enumerate(fields))


def encode(instructions: Sequence[tuple]) -> list[int]:
    """Flatten instructions into int64 words."""
    words: list[int] = []
    for ins in instructions:
        spec = BY_NUMBER[ins[0]]
        words.append(spec.number)
        for f, value in zip(spec.fields, ins[1:]):
            if f.kind in LIST_KINDS:
                words.append(len(value))
                words.extend(int(v) for v in value)
            elif f.kind == "dtype":
                words.append(DTYPE_CODES[value])
            else:
                words.append(int(value))
    return words


def decode(words: Sequence[int], count: int) -> list[tuple]:
    """Read ``count`` instructions back from int64 words. Raises DecodeError on bad data."""
    out: list[tuple] = []
    pos = 0
    n = len(words)

    def take() -> int:
        nonlocal pos
        if pos >= n:
            raise DecodeError("bytecode ends in the middle of an instruction")
        pos += 1
        return int(words[pos - 1])

    for _ in range(count):
        number = take()
        spec = BY_NUMBER.get(number)
        if spec is None:
            raise DecodeError(f"unknown opcode {number} at word {pos - 1}")
        fields: list[Any] = []
        for f in spec.fields:
            if f.kind in LIST_KINDS:
                length = take()
                if length < 0 or length > n - pos:
                    raise DecodeError(f"{spec.name}.{f.name}: bad length {length}")
                fields.append(tuple(take() for _ in range(length)))
            elif f.kind == "dtype":
                code = take()
                if not 0 <= code < len(DTYPE_NAMES):
                    raise DecodeError(f"{spec.name}: unknown dtype code {code}")
                fields.append(DTYPE_NAMES[code])
            else:
                fields.append(take())
        out.append((number,) + tuple(fields))
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
    if spec.name == "InvokePacked":
        kernel, n_out, args = ins[1], ins[2], ins[3]
        kname = exe.kernels[kernel].name if exe is not None and kernel < len(exe.kernels) \
            else "kernel"
        ins_, outs = args[:len(args) - n_out], args[len(args) - n_out:]
        return (f"invoke_packed {kname}#{kernel} (in: {', '.join(map(_reg, ins_))}, "
                f"out: {', '.join(map(_reg, outs))})")
    parts = [spec.text_name]
    for f, v in zip(spec.fields, ins[1:]):
        parts.append(_format_field(f.kind, v, exe, names))
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
    if kind == "prog":
        return f"dims#{v}"
    if kind == "offset":
        return f"{v:+d}"
    return str(v)
