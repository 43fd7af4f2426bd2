"""Memory planning and assembly of one lowered function.

A kernel output that never escapes -- every use is as a kernel argument, a dims argument, or
through a ReshapeTensor view with the same property, and it is not the result -- is *pooled*:
it lives in a storage slot shared, by liveness, with other pooled tensors whose lifetimes do not
overlap. A slot's size is the symbolic max of its tensors' sizes, computed once per invoke right
after the prologue; its AllocStorage is marked reusable, so the VM keeps the buffer between
invokes and only grows it. With ``upper_bounds`` every slot size is evaluated at the bounds and
all slots are packed into one arena: a single allocation for the VM's whole life.

Everything else (results, tensors in tuples or closures or passed to calls) gets a fresh buffer,
and so does, in a function a replay can run (straight-line, or with ``if``s), a tensor a kernel
computes from constants and shapes alone (``replay.per_shape_kernels``: position ids, a mask made
from the sequence length, an index read from an input's shape): a replay keeps it from the call
it is made from instead of computing it again, which a buffer shared with other tensors would
not allow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import dtypes
from ..errors import RelvmCompileError
from ..ir import dims as D
from ..ir.limits import MAX_TENSOR_BYTES
from ..ir.types import ListType, TensorType, TupleType, Type
from ..runtime.bytecode import local_uses, make, operands, reads, shared, spec_of
from ..runtime.executable import OutputSig, VMFunction
from ..runtime.bytecode.dimprog import reads_values
from ..runtime.vm import replay
from .lower import ALIGN, Lowered, Program

@dataclass
class _Tensor:
    pc: int
    reg: int
    size: D.Dim
    end: int = -1
    slot: int = -1


def plan_and_assemble(lo: Lowered, program: Program, upper_bounds: dict[str, int],
                      single: dict[int, bool]) -> VMFunction:
    body = lo.body
    entry_symbols = lo.entry_symbols
    uses: dict[int, list[int]] = {}
    for pc, ins in enumerate(body):
        for r in reads(ins):
            uses.setdefault(r, []).append(pc)

    per_shape: set[int] = set()
    if replay.replayable_code(body, program.dim_programs):
        per_shape = {r for pc in replay.per_shape_kernels(body) for r in body[pc].outputs}
    pooled = [t for t in (_Tensor(pc, body[pc].dst, size) for pc, size in lo.allocs.items())
              if D.free_symbols(t.size) <= entry_symbols and t.reg not in per_shape
              and _stays_local(t, body, uses, lo)]
    slots = _assign_slots(pooled)

    # Setup: compute slot sizes and result dims from the entry symbols, then allocate storage.
    statements: list[tuple] = []
    size_ops = [_size_operand(lo, s, statements) for s in slots]
    result_shapes = _result_shapes(lo, entry_symbols, statements)
    setup: list[tuple] = []
    if statements:
        setup.append(make("ComputeDims", program.dim_program(statements), ()))
    prologue_len = len(lo.prologue) + len(setup)
    num_regs = lo.num_regs
    storage_regs: list[int] = []
    offsets: list[int] = [0] * len(slots)
    arena = _arena_layout(slots, upper_bounds)
    if arena is not None:
        total, offsets = arena
        storage_regs = [num_regs] * len(slots)
        setup.append(make("AllocStorage", num_regs, total, ALIGN, 1))
        num_regs += 1
    else:
        for op in size_ops:
            storage_regs.append(num_regs)
            setup.append(make("AllocStorage", num_regs, op, ALIGN, 1))
            num_regs += 1

    shift = len(lo.prologue) + len(setup)
    pooled_at = {t.pc: t for t in pooled}
    code = list(lo.prologue) + setup + [_patch(ins, pooled_at.get(pc), storage_regs, offsets)
                                        for pc, ins in enumerate(body)]
    outputs = _outputs(code, shift + len(body) - 1, lo, result_shapes, single,
                       program.dim_programs)
    return VMFunction(lo.name, tuple(lo.params), num_regs, code, lo.dims.num_slots,
                      tuple(lo.dims.names), outputs, str(lo.ret_type), prologue_len)


def _stays_local(t: _Tensor, body: list[tuple], uses: dict[int, list[int]], lo: Lowered) -> bool:
    """True if the tensor in ``t.reg`` (and any view of it) is only used locally; sets t.end."""
    pending = [t.reg]
    seen: set[int] = set()
    while pending:
        r = pending.pop()
        if r in seen:
            continue
        seen.add(r)
        if r == lo.result_reg:
            return False
        for pc in uses.get(r, []):
            ins = body[pc]
            t.end = max(t.end, pc)
            if r in local_uses(ins):
                continue
            if r in shared(ins, ("view", "part")) and spec_of(ins).has("pure"):
                pending.append(ins.dst)  # a view: its uses are the tensor's
                continue
            return False
    t.end = max(t.end, t.pc)
    return True


def _assign_slots(tensors: list[_Tensor]) -> list[D.Dim]:
    """Greedy interval assignment; returns each slot's (symbolic) size in bytes."""
    slot_end: list[int] = []
    slot_size: list[D.Dim] = []
    for t in sorted(tensors, key=lambda t: t.pc):
        for k, end in enumerate(slot_end):
            if end < t.pc:
                t.slot = k
                slot_end[k] = t.end
                slot_size[k] = D.dim_max(slot_size[k], t.size)
                break
        else:
            t.slot = len(slot_end)
            slot_end.append(t.end)
            slot_size.append(t.size)
    return slot_size


def _size_operand(lo: Lowered, size: D.Dim, statements: list[tuple], is_bytes: bool = True) -> int:
    """A dim operand for ``size``, computed in the setup from the entry symbols alone.

    Equal sizes share one slot (the setup's statements are scanned for it).
    """
    if isinstance(size, int):
        return size
    expr = lo.dims.expr_from_symbols(size)
    for st in statements:
        if st[0] == "set" and st[2] == expr:
            return -st[1] - 1
    slot = lo.dims.num_slots
    statements.append(("set", slot, expr))
    lo.dims.num_slots += 1
    text = D.dim_str(size)
    lo.dims.names.append(f"bytes({text})" if is_bytes else text)
    return -slot - 1


def _arena_layout(slots: list[D.Dim], upper_bounds: dict[str, int]):
    """(total bytes, offset per slot) when every slot size is bounded, else None."""
    if not upper_bounds or not slots:
        return None
    sizes = []
    for s in slots:
        syms = D.free_symbols(s)
        if any(sym.anonymous or sym.name not in upper_bounds for sym in syms):
            return None
        # The largest size over every value up to the bounds (a slice is not always longest
        # at the bound; a run-time broadcast takes either side).
        size = D.upper_bound(s, {sym: upper_bounds[sym.name] for sym in syms})
        if size is None:
            return None
        sizes.append(max(size, 0))
    offsets, total = [], 0
    for size in sizes:
        offsets.append(total)
        total += -(-size // ALIGN) * ALIGN
    if total > MAX_TENSOR_BYTES:
        # No machine has the memory, and the instruction's operand is an int64.
        raise RelvmCompileError(f"at upper_bounds {upper_bounds} the memory arena would be "
                                f"{total} bytes, over relvm's limit of 2**48; lower the bounds")
    return total, offsets


def _patch(ins: tuple, t: _Tensor | None, storage_regs: list[int], offsets: list[int]) -> tuple:
    """The instruction, or for a pooled tensor ``t`` its AllocTensor placed in its slot."""
    if t is None:
        return ins
    _, dst, _, _, shape, dtype = ins
    return make("AllocTensor", dst, storage_regs[t.slot], offsets[t.slot], shape, dtype)


def _result_shapes(lo: Lowered, entry_symbols: set, statements: list[tuple]):
    """Per result tensor, its dim operands if known from the inputs alone, else None."""
    shapes = []
    for t in _result_leaves(lo.ret_type):
        if isinstance(t, ListType):
            shapes.append(None)
            continue
        if not all(D.free_symbols(d) <= entry_symbols for d in t.shape if not isinstance(d, int)):
            shapes.append(None)
            continue
        shapes.append(tuple(_size_operand(lo, d, statements, False) if not isinstance(d, int) else d
                            for d in t.shape))
    return shapes


#: producers() before any definition of the register is seen.
_UNSEEN = object()


def _outputs(code: list[tuple], ret_pc: int, lo: Lowered, shapes: list,
             single: dict[int, bool], programs: list[tuple]) -> tuple[OutputSig, ...]:
    """For each result tensor, the AllocTensor pcs that produce it (for zero-copy binding),
    and the pcs of the Invokes whose result it is: a callee returning one tensor (``single``:
    function index -> whether it does) writes it into the array its caller was given."""
    defs: dict[int, list[int]] = {}
    for pc, ins in enumerate(code):
        for r in operands(ins, ("dst",)):
            defs.setdefault(r, []).append(pc)

    def producers(reg: int, depth: int = 0) -> Any:
        """What produces the value in ``reg``: for a tensor, its alloc pcs (a list), or None
        where binding is impossible; for a tuple, a tuple of those, field by field."""
        found: Any = _UNSEEN
        for pc in defs.get(reg, []) or [None]:
            ins = code[pc] if pc is not None else None
            spec = spec_of(ins) if ins is not None else None
            if ins is None or depth > 64:
                value = None
            elif spec.has("bindable") and ins.storage < 0:
                value = [pc]
            elif spec.has("call") and spec.name == "Invoke" and single.get(ins.func, False):
                value = [pc]  # the callee's tensor result: it writes the caller's array
            elif spec.has("pure") and shared(ins, ("view",)):
                value = producers(shared(ins, ("view",))[0], depth + 1)  # itself or a view
            elif spec.has("pure") and spec.name == "AllocADT":
                value = tuple(producers(r, depth + 1) for r in shared(ins, ("holds",)))
            elif spec.has("pure") and spec.name == "GetField":
                whole = producers(shared(ins, ("part",))[0], depth + 1)
                value = (whole[ins.index] if isinstance(whole, tuple)
                         and ins.index < len(whole) else None)
            else:
                value = None
            found = value if found is _UNSEEN else _merge(found, value)
        return None if found is _UNSEEN else found

    ret_reg = code[ret_pc].result
    leaf_pcs = list(_flat(producers(ret_reg)))
    leaf_types = _result_leaves(lo.ret_type)
    if len(leaf_pcs) != len(leaf_types):
        leaf_pcs = [None] * len(leaf_types)
    readers: dict[int, list[int]] = {}
    for pc, ins in enumerate(code):
        for r in reads(ins):
            readers.setdefault(r, []).append(pc)
    claimed: set[int] = set()
    out = []
    for t, pcs, shape in zip(leaf_types, leaf_pcs, shapes):
        if isinstance(t, ListType):  # returned as the VM's list: nothing to bind
            out.append(OutputSig(t.elem.dtype, None, (), str(t), True))
            continue
        if pcs and (len(pcs) > 1 or spec_of(code[pcs[0]]).has("call")):
            # Producers on different branches share the caller's array. A tensor that is also
            # used elsewhere (say, made before the if and returned by one branch) must keep its
            # own buffer: the other branch's producer would overwrite it while still needed.
            # A call's result is bound only when nothing else reads it (a recursive call's
            # result read by the kernel that makes this frame's result must not share it).
            pcs = [p for p in pcs
                   if _only_flows_to_result(code[p].dst, code, readers, programs)]
        # Two results that are one tensor: only the first is written in place.
        pcs = tuple(p for p in (pcs or []) if p not in claimed)
        claimed.update(pcs)
        out.append(OutputSig(t.dtype, shape, pcs, str(t)))
    return tuple(out)


def _result_leaves(t: Type) -> list:
    """The tensors and lists of a result, tuples flattened in order."""
    if isinstance(t, (TensorType, ListType)):
        return [t]
    if isinstance(t, TupleType):
        return [leaf for f in t.fields for leaf in _result_leaves(f)]
    return []


def _only_flows_to_result(reg: int, code: list[tuple], readers: dict[int, list[int]],
                          programs: list[tuple]) -> bool:
    """True if the tensor in ``reg`` is only written by its kernel and passed on to the result
    (through Move, ReshapeTensor, AllocADT and Ret), or has only its shape read."""
    pending, seen = [reg], set()
    while pending:
        r = pending.pop()
        if r in seen:
            continue
        seen.add(r)
        for pc in readers.get(r, []):
            ins = code[pc]
            spec = spec_of(ins)
            if spec.has("kernel"):
                if r in ins.outputs and r not in ins.inputs:
                    continue  # its producing kernel writes it
                return False
            if spec.has("pure") and r in shared(ins):
                pending.append(ins.dst)  # moved, reshaped or put in the result tuple
            elif spec.has("dims"):
                if reads_values(programs[ins.prog]):
                    return False
            elif not (spec.has("ends") or spec.name == "ShapeOf"):
                return False
    return True


def _merge(a: Any, b: Any) -> Any:
    """The producers of a value made on two paths (the branches of an if): tensors' alloc pcs
    joined, tuples field by field; None where either path cannot be bound."""
    if isinstance(a, list) and isinstance(b, list):
        return a + b
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        return tuple(_merge(x, y) for x, y in zip(a, b))
    return None


def _flat(value: Any):
    """The leaves of a producers value, in order (a tensor's list, or None)."""
    if isinstance(value, tuple):
        for v in value:
            yield from _flat(v)
    else:
        yield value


