"""The verifier: an executable's bytecode, dim programs and kernel table, checked before anything
runs (``check_executable``; ``relvm.load`` runs it on every file).

Checksums catch damage; the verifier catches files that are well-formed but wrong (written by a
buggy tool, by hand, or by an attacker who recomputed the checksums). Every operand is checked
against its field's role in the opcode table -- registers within the frame, dims slots within
the dims vector, function, kernel, constant and dim-program indices within their tables, jumps
forward and inside the function -- and every dim program against the grammar in
``dimprog.py``. Then ``kernelcheck.py`` checks the kernel entries (attributes, fused steps and
plans, types by each op's type relation) and ``regtypes.py`` proves the type of every register
and checks each kernel call, call and result against it: no file can make a kernel read or
write an array as another dtype or rank. A failure is a RelvmFormatError naming the section
(``code`` for instructions, ``meta`` for everything described in the metadata) and the place.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any, Sequence

from ...errors import RelvmFormatError
from ..bytecode import format_instruction
from ..bytecode.dimprog import EXPRESSIONS as _EXPRESSIONS
from ..bytecode.dimprog import STATEMENTS as _STATEMENTS
from . import kernelcheck, regtypes
from ..executable import Executable, VMFunction
from ..bytecode import spec_of
from ..bytecode.opcodes import TABLE_ROLES

MAX_EXPR_DEPTH = 100
#: The largest alignment an AllocStorage may ask for.
MAX_ALIGNMENT = 4096


@dataclass
class ProgramUse:
    """What a dim program reads: the highest ComputeDims argument and dims slot (or -1)."""

    max_arg: int = -1
    max_slot: int = -1


def check_executable(exe: Executable, uses: Sequence[ProgramUse] | None = None) -> None:
    """Verify everything in ``exe`` before a VM runs it (see the module doc).

    ``relvm.load`` calls it on every file; it accepts everything ``relvm.build`` makes.
    ``uses`` are the dim programs' checks if already made (else they are made here).

    Raises
    ------
    RelvmFormatError
        Naming the section (``code`` or ``meta``) and the place.

    Examples
    --------
    >>> verify.check_executable(relvm.build(relvm.parse(text)))
    """
    if uses is None:
        uses = [check_program(k, _lists(p)) for k, p in enumerate(exe.dim_programs)]
    for fi in range(len(exe.functions)):
        check_function(exe, fi, uses)
    kernelcheck.check_kernels(exe)
    kernelcheck.check_calls(exe, regtypes.check_types(exe))


def _lists(v: Any) -> Any:
    return [_lists(x) for x in v] if isinstance(v, (tuple, list)) else v


def _meta_error(message: str) -> RelvmFormatError:
    return RelvmFormatError(message, section="meta")


def check_program(k: int, program: Any) -> ProgramUse:
    """Check dim program ``k`` (plain JSON data) against the grammar; what it reads."""
    use = ProgramUse()
    if type(program) is not list:
        raise _meta_error(f"dims#{k}: a program is a list of statements")
    for i, s in enumerate(program):
        where = f"dims#{k} statement {i}"
        _check_node(s, _STATEMENTS, where, use, 0)
    return use


def _check_node(node: Any, grammar: dict, where: str, use: ProgramUse, depth: int) -> None:
    if depth > MAX_EXPR_DEPTH:
        raise _meta_error(f"{where}: expression nested deeper than {MAX_EXPR_DEPTH}")
    if type(node) is not list or not node or type(node[0]) is not str:
        raise _meta_error(f"{where}: expected [tag, operands...], got {_short(node)}")
    kinds = grammar.get(node[0])
    if kinds is None:
        raise _meta_error(f"{where}: unknown tag {node[0]!r}")
    if len(node) != len(kinds) + 1:
        raise _meta_error(f"{where}: {node[0]!r} takes {len(kinds)} operands, got "
                          f"{len(node) - 1}")
    for kind, v in zip(kinds, node[1:]):
        if kind == "e":
            _check_node(v, _EXPRESSIONS, where, use, depth + 1)
        elif kind.startswith("message:"):
            _check_message(v, kind.split(":")[1].split(","), where)
        else:
            if type(v) is not int or not -2**63 <= v < 2**63 or (kind != "int" and v < 0):
                raise _meta_error(f"{where}: {node[0]!r} operand must be a "
                                  f"{'non-negative ' if kind != 'int' else ''}integer, got "
                                  f"{_short(v)}")
            if kind == "arg":
                use.max_arg = max(use.max_arg, v)
            elif kind == "slot":
                use.max_slot = max(use.max_slot, v)


def _check_message(v: Any, names: list[str], where: str) -> None:
    """A check's message may only use its own fields: {a} and {b}, or {value} and {limit}."""
    if type(v) is not str:
        raise _meta_error(f"{where}: message must be a string, got {_short(v)}")
    try:
        parts = list(string.Formatter().parse(v))
    except ValueError as e:
        raise _meta_error(f"{where}: bad message {v!r}: {e}") from None
    for _, field_name, spec, conversion in parts:
        if field_name is not None and (field_name not in names or spec or conversion):
            raise _meta_error(f"{where}: message {v!r} may only use "
                              + ", ".join("{" + n + "}" for n in names))


def check_function(exe: Executable, fi: int, uses: Sequence[ProgramUse]) -> None:
    """Check every instruction of function ``fi`` against the table and ``exe``'s tables."""
    fn = exe.functions[fi]
    n = len(fn.instructions)
    if n == 0:
        raise RelvmFormatError(f"@{fn.name} has no instructions", section="code")
    if fn.prologue > n:
        raise _meta_error(f"@{fn.name}: prologue of {fn.prologue} instructions, but the "
                          f"function has {n}")
    if len(fn.params) > fn.num_regs:
        raise _meta_error(f"@{fn.name}: {len(fn.params)} parameters but {fn.num_regs} registers")
    limits = {role: len(getattr(exe, attr)) for role, attr in TABLE_ROLES.items()}
    for pc, ins in enumerate(fn.instructions):
        problem = _instruction_problem(fn, pc, ins, limits, uses)
        if problem:
            raise RelvmFormatError(f"@{fn.name} pc {pc}: {format_instruction(ins, None, fn)}: "
                                   f"{problem}", section="code")
    for i, out in enumerate(fn.outputs):
        problem = _output_problem(exe, fn, out)
        if problem:
            raise _meta_error(f"@{fn.name} output {i}: {problem}")


def _output_problem(exe: Executable, fn: VMFunction, out) -> str | None:
    """An output's dims, and the allocations that hand out the caller's array for it: the
    kernel writing one writes the caller's array, so it must be allocated as the output's
    dtype. A call listed there binds its callee's one result to the array: the callee must
    return one tensor of that dtype (its own allocations are checked with it)."""
    for p in out.alloc_pcs:
        if not 0 <= p < len(fn.instructions):
            return f"alloc pc {p} outside the function"
        ins = fn.instructions[p]
        spec = spec_of(ins)
        if spec.name == "Invoke":
            callee = exe.functions[ins.func]
            if len(callee.outputs) != 1 or callee.outputs[0].dtype != out.dtype:
                return (f"alloc pc {p} calls @{callee.name}, which does not return one "
                        f"{out.dtype} tensor")
            continue
        if not spec.has("bindable"):
            return f"alloc pc {p} is {format_instruction(ins, None, fn)}, not an allocation"
        if ins.dtype != out.dtype:
            return f"alloc pc {p} allocates {ins.dtype}, but the output is {out.dtype}"
    for d in out.shape or ():
        if _dim_problem(fn, d):
            return _dim_problem(fn, d)
    return None


def _instruction_problem(fn: VMFunction, pc: int, ins: tuple, limits: dict,
                         uses: Sequence[ProgramUse]) -> str | None:
    """What is wrong with one instruction's operands, by their roles in the opcode table."""
    spec = spec_of(ins)
    for f, v in zip(spec.fields, ins[1:]):
        role = f.role
        if f.is_register:
            low = -1 if f.optional else 0
            bad = [r for r in (v if f.is_list else (v,)) if not low <= r < fn.num_regs]
            if bad:
                return f"{f.name}: register {bad[0]} outside 0..{fn.num_regs - 1}"
        elif role in ("dim", "dims"):
            for d in (v if f.is_list else (v,)):
                problem = _dim_problem(fn, d)
                if problem:
                    return f"{f.name}: {problem}"
        elif role in TABLE_ROLES:
            if not 0 <= v < limits[role]:
                return f"{f.name}: {role} index {v}, but the executable has {limits[role]}"
        elif role == "offset":
            if not 0 <= pc + v < len(fn.instructions):
                return f"{f.name}: jump to {pc + v}, outside the function"
            if v <= 0:  # so a call runs each instruction at most once, and always ends
                return f"{f.name}: jump to {pc + v}, not forward (relvm bytecode never loops)"
        elif role == "imm":
            if not f.low <= v <= f.high:
                return f"{f.name}: {v} outside {f.low}..{f.high}"
        elif role == "align":
            # Kernels rely on buffers aligned to their vector width: 65 would misalign them.
            if not 1 <= v <= MAX_ALIGNMENT or v & (v - 1):
                return f"{f.name}: {v} is not a power of two in 1..{MAX_ALIGNMENT}"
    if spec.has("dims"):
        use = uses[ins.prog]
        if use.max_arg >= len(ins.args):
            return f"dims#{ins.prog} reads argument {use.max_arg}, but gets {len(ins.args)}"
        if use.max_slot >= fn.num_dims:
            return f"dims#{ins.prog} writes dims slot {use.max_slot}, but @{fn.name} has " \
                   f"{fn.num_dims}"
    return None


def _dim_problem(fn: VMFunction, d: Any) -> str | None:
    if type(d) is not int:
        return f"dim operand {_short(d)} is not an integer"
    if d < 0 and -d - 1 >= fn.num_dims:
        return f"dims slot {-d - 1}, but @{fn.name} has {fn.num_dims}"
    return None


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."
