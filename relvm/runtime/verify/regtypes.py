"""Register types: what every register can hold, proved from the bytecode before anything runs.

``code.py`` keeps each operand inside its table; this pass keeps kernels inside their arrays.
A C kernel reads and writes its arguments with the element size (and, for some, the rank) its
kernel entry declares, so a file that hands it other arrays -- a dtype relabelled in ``meta``,
a register swapped in ``code`` -- would make it read or write past them. For every register the
pass infers a *fact*: a tensor of a known dtype (its rank when known, and whether it is a fresh
buffer a kernel may write), a tuple of facts, a closure, a storage buffer, or unknown. Then it
checks every use that depends on one:

* ``InvokePacked``: as many arguments as the kernel entry has; each input of the entry's dtype
  and (when the file records ranks) rank; each output too, and fresh -- an ``AllocTensor``,
  maybe reshaped, never a constant (mapped read-only), an input or a literal;
* ``AllocTensor``/``AllocTensorReg`` view a storage buffer (``AllocStorage``), nothing else;
* ``Invoke``, ``AllocClosure``, ``InvokeClosure`` pass what the callee's parameters declare:
  every function is analysed assuming its declared parameters (``ParamSig``), which the VM
  checks for an entry call and a call site must prove;
* ``Ret`` returns what the function's ``outputs`` declare, where that is provable;
* jumps go forward (Relay has no loops: it recurses), no path runs off the end of a function,
  and every register is written before it is read, on every path.

Because jumps only go forward, one pass in pc order sees every write that can reach a read:
a register's fact at a pc is the join of the writes before it (the compiler writes a register
once, except the merge register of an ``if``, whose two writes join). Call results are found
interprocedurally, callees first, again for recursion until nothing changes. Each function is
passed over a small constant number of times: the pass is linear in the code.
"""

from __future__ import annotations

from typing import Callable

from ... import dtypes
from ...errors import RelvmFormatError
from ..bytecode import format_instruction, reads, spec_of, writes
from ..executable import Executable, ParamSig
from ..bytecode.opcodes import BY_NAME

#: Facts are tuples, compared by value. A tensor: ("tensor", dtype, rank or None, fresh).
NOTHING = ("nothing",)  # no value yet: a register never written, a call that never returns
UNKNOWN = ("unknown",)  # a value this pass cannot describe
STORAGE = ("storage",)  # a byte buffer from AllocStorage
ANY_CLOSURE = ("closure", None, 0)  # a closure of some function: ("closure", func, captured)
#: Tuples nest at most this deep in a fact (deeper ones are UNKNOWN), so recursion that builds
#: ever deeper tuples still reaches a fixpoint.
MAX_DEPTH = 16
#: Times a function is analysed before its result is given up as UNKNOWN (only recursion
#: through growing results gets near it).
MAX_ROUNDS = 20

#: NumPy dtype -> relvm's name (``dtype.name`` is slow, and constants are looked up often).
_DTYPE_NAMES = {dt: name for name, dt in dtypes.DTYPES.items()}


def tensor(dtype: str, rank: int | None, fresh: bool = False) -> tuple:
    return ("tensor", dtype, rank, fresh)


def adt(tag: int | None, fields: tuple) -> tuple:
    depth = 1 + max((f[3] for f in fields if f[0] == "tuple"), default=0)
    return ("tuple", tag, fields, depth) if depth <= MAX_DEPTH else UNKNOWN


def tensor_list(dtype: str, rank: int | None) -> tuple:
    """A list of tensors of ``dtype`` and ``rank`` (None: not proven)."""
    return ("list", dtype, rank)


def join(a: tuple, b: tuple) -> tuple:
    """The least fact describing both: equal facts survive, a rank or a closure's function
    that differs is forgotten, anything else is UNKNOWN."""
    if a == b or b is NOTHING:
        return a
    if a is NOTHING:
        return b
    kind = a[0]
    if kind != b[0] or kind in ("unknown", "storage"):
        return UNKNOWN
    if kind == "tensor":
        if a[1] != b[1]:
            return UNKNOWN
        return tensor(a[1], a[2] if a[2] == b[2] else None, a[3] and b[3])
    if kind == "closure":
        return ANY_CLOSURE
    if kind == "list":
        return UNKNOWN if a[1] != b[1] else tensor_list(a[1], a[2] if a[2] == b[2] else None)
    if len(a[2]) != len(b[2]):
        return UNKNOWN
    return adt(a[1] if a[1] == b[1] else None, tuple(map(join, a[2], b[2])))


def describe(f: tuple) -> str:
    kind = f[0]
    if kind == "tensor":
        rank = "unknown rank" if f[2] is None else f"rank {f[2]}"
        return f"{f[1]} tensor of {rank}" + ("" if f[3] else " (read-only)")
    if kind == "tuple":
        return "(" + ", ".join(map(describe, f[2])) + ("," if len(f[2]) == 1 else "") + ")"
    if kind == "closure":
        return "a closure" + ("" if f[1] is None else f" of function {f[1]}")
    if kind == "list":
        return f"a list of {f[1]} tensors of {'unknown rank' if f[2] is None else f'rank {f[2]}'}"
    return {"storage": "a storage buffer", "unknown": "a value of unproven type",
            "nothing": "nothing (never written)"}[kind]


def param_fact(p: ParamSig) -> tuple | None:
    """What a VM entry lets parameter ``p`` hold (a tuple arrives flat), or None if ``p``
    describes nothing an entry accepts."""
    if p.is_list:
        if len(p.tensors) != 1:
            return None
        elem = p.tensors[0]
        return tensor_list(elem.dtype, None if elem.shape is None else len(elem.shape))
    tensors = tuple(tensor(t.dtype, len(t.shape)) for t in p.tensors)
    if p.is_tuple:
        return adt(0, tensors)
    if len(tensors) == 1:
        return tensors[0]
    return ANY_CLOSURE if not tensors else None


def mismatch(found: tuple, declared: tuple) -> str | None:
    """Why a value described by ``found`` may not be passed where ``declared`` is expected."""
    if declared[0] != found[0]:
        return f"expected {describe(declared)}, found {describe(found)}"
    if declared[0] in ("tensor", "list"):
        if found[1] != declared[1] or found[2] != declared[2]:
            return f"expected {describe(declared)}, found {describe(found)}"
    elif declared[0] == "tuple":
        if len(found[2]) != len(declared[2]):
            return f"expected {describe(declared)}, found {describe(found)}"
        for i, (f, d) in enumerate(zip(found[2], declared[2])):
            problem = mismatch(f, d)
            if problem:
                return f"field {i}: {problem}"
    return None


def get_field(obj: tuple, index: int) -> tuple:
    """The fact of ``obj[index]`` as the VM computes it (a tensor's is a row of it)."""
    kind = obj[0]
    if kind == "tuple":
        return obj[2][index] if index < len(obj[2]) else NOTHING
    if kind == "tensor":
        if obj[2] == 0:
            return NOTHING  # indexing a 0-d array fails
        return tensor(obj[1], None if obj[2] is None else obj[2] - 1, obj[3])
    return NOTHING if kind == "nothing" else UNKNOWN


def reshaped(src: tuple, rank: int) -> tuple:
    if src[0] == "tensor":
        return tensor(src[1], rank, src[3])
    if src is STORAGE:
        return tensor("uint8", rank, True)  # a storage buffer is a 1-d uint8 array
    return UNKNOWN if src is UNKNOWN else NOTHING


def tensor_leaves(f: tuple) -> list[tuple] | None:
    """The tensors of a result, flattened as ``outputs`` lists them; None if not provable."""
    kind = f[0]
    if kind in ("tensor", "list"):
        return [f]
    if kind == "closure":
        return []
    if kind == "tuple":
        out: list[tuple] = []
        for x in f[2]:
            leaves = tensor_leaves(x)
            if leaves is None:
                return None
            out += leaves
        return out
    return None


# --- the program: parameters, call results, closures ---------------------------------------------

class Program:
    """What the functions of one executable know about each other."""

    def __init__(self, exe: Executable):
        self.exe = exe
        self.params: list[list[tuple]] = []
        for fn in exe.functions:
            facts = []
            for i, p in enumerate(fn.params):
                fact = param_fact(p)
                if fact is None:
                    raise RelvmFormatError(f"@{fn.name} parameter {i} (%{p.name}): not a tuple, "
                                           f"yet {len(p.tensors)} tensors", section="meta")
                facts.append(fact)
            self.params.append(facts)
        self.results = [NOTHING] * len(exe.functions)
        #: (function, captured count) of every AllocClosure: the closures that can exist.
        self.closures: set[tuple[int, int]] = set()
        self.callees: list[set[int]] = []
        self.calls_closures: list[bool] = []
        for fn in exe.functions:
            callees, indirect = set(), False
            for ins in fn.instructions:
                name = spec_of(ins).name
                if name == "Invoke":
                    callees.add(ins.func)
                elif name == "InvokeClosure":
                    indirect = True
                elif name == "AllocClosure":
                    self.closures.add((ins.func, len(ins.captured)))
            self.callees.append(callees)
            self.calls_closures.append(indirect)
        #: kernel -> the ranks of its arguments at each call, for entries without recorded ranks.
        self.call_ranks: dict[int, set[tuple[int, ...]]] = {}

    def closure_targets(self, closure: tuple, nargs: int) -> list[tuple[int, int]]:
        """(function, captured count) of every closure ``closure`` may be, called with
        ``nargs`` arguments (only closures whose function takes that many can be)."""
        if closure[0] == "closure" and closure[1] is not None:
            return [(closure[1], closure[2])]
        return sorted((f, n) for f, n in self.closures
                      if len(self.params[f]) == n + nargs)

    def dependents(self) -> list[set[int]]:
        """Per function, the functions whose analysis reads its result."""
        out: list[set[int]] = [set() for _ in self.results]
        targets = {f for f, _ in self.closures}
        for fi, callees in enumerate(self.callees):
            for g in callees | (targets if self.calls_closures[fi] else set()):
                out[g].add(fi)
        return out


# --- one pass over one function ------------------------------------------------------------------

class Pass:
    """One pass over a function in pc order: facts, definite assignment and (when
    ``checking``) every check. Jumps go forward, so every write that can reach a pc comes
    before it."""

    def __init__(self, prog: Program, fi: int, checking: bool):
        self.prog = prog
        self.exe = prog.exe
        self.fn = self.exe.functions[fi]
        self.checking = checking
        self.regs = [NOTHING] * self.fn.num_regs
        params = prog.params[fi]
        self.regs[:len(params)] = params
        self.assigned = (1 << len(params)) - 1  # registers written on every path to here
        self.result = NOTHING
        self.pc = 0
        self.live = True  # the current pc is reached by falling through
        #: jump target -> the registers written on every jump there so far
        self.incoming: dict[int, int] = {}

    def run(self) -> None:
        incoming = self.incoming
        for pc, ins in enumerate(self.fn.instructions):
            self.pc = pc
            joined = incoming.pop(pc, None) if incoming else None
            if joined is not None:
                self.assigned = self.assigned & joined if self.live else joined
                self.live = True
            if not self.live:
                continue  # unreachable: never runs
            # From the opcode table: every register read must be written on every path here;
            # jumps carry what is written to their targets; jumps and ends fall through to
            # nothing. The opcode's step says what it writes (and checks its uses).
            spec = spec_of(ins)
            for r in reads(ins):
                self.read(ins, r)
            STEPS.get(ins[0], _by_default)(self, ins)
            for i in spec.roles("offset"):
                self.jump(ins[i])
            if spec.has("jump") or spec.has("ends"):
                self.live = False
        if self.live:
            raise self.error(self.fn.instructions[-1], "the function runs off its end (its "
                             "last instruction is not ret, goto or fatal)")

    def error(self, ins: tuple, problem: str, section: str = "code") -> RelvmFormatError:
        text = format_instruction(ins, self.exe, self.fn)
        return RelvmFormatError(f"@{self.fn.name} pc {self.pc}: {text}: {problem}",
                                section=section)

    def read(self, ins: tuple, r: int) -> tuple:
        if not self.assigned >> r & 1:
            raise self.error(ins, f"reads ${r} before it is written (on some path)")
        return self.regs[r]

    def jump(self, offset: int) -> None:
        target, incoming = self.pc + offset, self.incoming
        incoming[target] = incoming.get(target, self.assigned) & self.assigned

    def write(self, r: int, fact: tuple) -> None:
        old = self.regs[r]
        self.regs[r] = fact if old is NOTHING else join(old, fact)
        self.assigned |= 1 << r

    def check(self, ins: tuple, found: tuple, declared: tuple, what: str) -> None:
        problem = mismatch(found, declared)
        if problem:
            raise self.error(ins, f"{what}: {problem}")


Step = Callable[[Pass, tuple], None]
STEPS: dict[int, Step] = {}


def step(name: str):
    def register(f: Step) -> Step:
        STEPS[BY_NAME[name].number] = f
        return f
    return register


def _by_default(p: Pass, ins: tuple) -> None:
    """An opcode without a step of its own (an opcode added to the table with nothing but
    its handler): its dst gets the type of the one register it reads, else nothing is known."""
    found = [p.regs[r] for r in reads(ins)]
    for dst in writes(ins):
        p.write(dst, found[0] if len(found) == 1 else UNKNOWN)


@step("Move")
def _move(p: Pass, ins: tuple) -> None:
    p.write(ins.dst, p.read(ins, ins.src))


@step("Ret")
def _ret(p: Pass, ins: tuple) -> None:
    fact = p.read(ins, ins.result)
    p.result = join(p.result, fact)
    if p.checking:
        _check_result(p, ins, fact)


def _check_result(p: Pass, ins: tuple, fact: tuple) -> None:
    leaves = tensor_leaves(fact)
    if leaves is None:
        return  # not provable here; the VM checks bound outputs as it copies them
    outputs = p.fn.outputs
    if len(leaves) != len(outputs):
        raise p.error(ins, f"returns {len(leaves)} tensors, but the function's outputs list "
                           f"{len(outputs)}")
    for i, (t, out) in enumerate(zip(leaves, outputs)):
        if (t[0] == "list") != out.is_list or (out.is_list and t[1] != out.dtype):
            raise p.error(ins, f"result {i}: the outputs declare {out.type_text}, found "
                               f"{describe(t)}")
        rank = None if out.shape is None else len(out.shape)
        if t[1] != out.dtype or (rank is not None and t[2] is not None and t[2] != rank):
            raise p.error(ins, f"result {i}: the outputs declare {out.dtype}"
                               f"{'' if rank is None else f' of rank {rank}'}, found "
                               f"{describe(t)}")


@step("Invoke")
def _invoke(p: Pass, ins: tuple) -> None:
    found = [p.read(ins, r) for r in ins.args]
    if p.checking:
        _check_call(p, ins, ins.func, 0, found, ins.args)
    p.write(ins.dst, p.prog.results[ins.func])


def _check_call(p: Pass, ins: tuple, func: int, captured: int, found: list[tuple],
                regs: tuple[int, ...]) -> None:
    params = p.prog.params[func]
    callee = p.exe.functions[func].name
    if len(params) != captured + len(found):
        raise p.error(ins, f"@{callee} takes {len(params)} parameters, "
                           f"{'' if not captured else f'{captured} captured and '}"
                           f"{len(found)} passed")
    for i, (f, r) in enumerate(zip(found, regs)):
        p.check(ins, f, params[captured + i],
                f"${r} for @{callee} parameter {captured + i}")


@step("InvokeClosure")
def _invoke_closure(p: Pass, ins: tuple) -> None:
    dst, closure, args = ins.dst, ins.closure, ins.args
    c = p.read(ins, closure)
    found = [p.read(ins, r) for r in args]
    targets = p.prog.closure_targets(c, len(args)) if c[0] in ("closure", "unknown") else []
    if p.checking:
        if c[0] not in ("closure", "unknown"):
            raise p.error(ins, f"${closure} is not a closure: {describe(c)}")
        for func, captured in targets:  # a closure of unknown function: any it may be
            _check_call(p, ins, func, captured, found, args)
    result = NOTHING
    for func, _ in targets:
        result = join(result, p.prog.results[func])
    p.write(dst, result)


@step("InvokePacked")
def _invoke_packed(p: Pass, ins: tuple) -> None:
    args = ins.inputs + ins.outputs
    found = [p.read(ins, r) for r in args]
    if p.checking:
        _check_kernel_call(p, ins, ins.kernel, len(ins.outputs), args, found)


def _check_kernel_call(p: Pass, ins: tuple, k: int, n_out: int, args: tuple,
                       found: list[tuple]) -> None:
    entry = p.exe.kernels[k]
    n_in = len(entry.inputs)
    if n_out != len(entry.outputs) or len(args) != n_in + n_out:
        raise p.error(ins, f"kernel {entry.name}#{k} takes {n_in} inputs and "
                           f"{len(entry.outputs)} outputs, the call passes "
                           f"{len(args) - n_out} and {n_out}")
    dtypes = entry.inputs + entry.outputs
    ranks = entry.input_ranks + entry.output_ranks or (None,) * len(args)
    for i, (f, dtype, rank) in enumerate(zip(found, dtypes, ranks)):
        if f[0] != "tensor" or f[1] != dtype or (rank is not None and f[2] != rank) or \
                (i >= n_in and not f[3]):
            raise _argument_error(p, ins, k, i, args[i], f, dtype, rank)
    if not entry.input_ranks and not entry.output_ranks:
        ranks_found = tuple(f[2] for f in found)
        if None in ranks_found:
            r = args[ranks_found.index(None)]
            raise p.error(ins, f"${r}: its rank cannot be proven, and the file records no "
                               f"ranks for kernel {entry.name}#{k}")
        p.prog.call_ranks.setdefault(k, set()).add(ranks_found)


def _argument_error(p: Pass, ins: tuple, k: int, i: int, r: int, f: tuple, dtype: str,
                    rank: int | None) -> RelvmFormatError:
    entry = p.exe.kernels[k]
    n_in = len(entry.inputs)
    what = f"input {i}" if i < n_in else f"output {i - n_in}"
    if f[0] == "tensor" and f[1] == dtype and (rank is None or f[2] == rank):
        return p.error(ins, f"{what} ${r}: a kernel writes its outputs, but this is "
                            f"{describe(f)} (a constant, an input or a literal)")
    declared = dtype + ("" if rank is None else f" of rank {rank}")
    return p.error(ins, f"{what} ${r}: kernel {entry.name}#{k} declares {declared}, found "
                        f"{describe(f)}")


def _storage(p: Pass, ins: tuple) -> None:
    storage = ins.storage
    if storage >= 0:
        s = p.read(ins, storage)
        if p.checking and s is not STORAGE:
            raise p.error(ins, f"${storage} is {describe(s)}, not a storage buffer")


@step("AllocTensor")
def _alloc_tensor(p: Pass, ins: tuple) -> None:
    _storage(p, ins)
    p.write(ins.dst, tensor(ins.dtype, len(ins.shape), True))


@step("AllocTensorReg")
def _alloc_tensor_reg(p: Pass, ins: tuple) -> None:
    _storage(p, ins)
    p.write(ins.dst, tensor(ins.dtype, None, True))  # the rank is the shape register's length


@step("AllocADT")
def _alloc_adt(p: Pass, ins: tuple) -> None:
    p.write(ins.dst, adt(ins.tag, tuple(p.read(ins, r) for r in ins.fields)))


@step("AllocClosure")
def _alloc_closure(p: Pass, ins: tuple) -> None:
    dst, func, captured = ins.dst, ins.func, ins.captured
    found = [p.read(ins, r) for r in captured]
    if p.checking:
        params = p.prog.params[func]
        if len(found) > len(params):
            raise p.error(ins, f"captures {len(found)} values, but "
                               f"@{p.exe.functions[func].name} takes {len(params)} parameters")
        for i, (f, r) in enumerate(zip(found, captured)):
            p.check(ins, f, params[i], f"${r} for @{p.exe.functions[func].name} parameter {i}")
    p.write(dst, ("closure", func, len(captured)))


@step("GetField")
def _get_field(p: Pass, ins: tuple) -> None:
    p.write(ins.dst, get_field(p.read(ins, ins.object), ins.index))


@step("LoadConst")
def _load_const(p: Pass, ins: tuple) -> None:
    c = p.exe.constants[ins.const]
    p.write(ins.dst, tensor(_DTYPE_NAMES.get(c.dtype) or c.dtype.name, c.ndim))


@step("GetTag")
def _get_tag(p: Pass, ins: tuple) -> None:
    p.write(ins.dst, tensor("int64", 0))


@step("LoadConsti")
def _load_consti(p: Pass, ins: tuple) -> None:
    p.write(ins.dst, tensor("int64", 0))


@step("AllocStorage")
def _alloc_storage(p: Pass, ins: tuple) -> None:
    p.write(ins.dst, STORAGE)


@step("ShapeOf")
def _shape_of(p: Pass, ins: tuple) -> None:
    p.write(ins.dst, tensor("int64", 1, True))


@step("ReshapeTensor")
def _reshape_tensor(p: Pass, ins: tuple) -> None:
    p.write(ins.dst, reshaped(p.read(ins, ins.tensor), len(ins.shape)))


@step("DeviceCopy")
def _device_copy(p: Pass, ins: tuple) -> None:
    src = p.read(ins, ins.src)
    if src[0] == "tensor":
        p.write(ins.dst, tensor(src[1], src[2], True))
    else:
        p.write(ins.dst, reshaped(src, 1) if src is STORAGE else UNKNOWN)


@step("AllocList")
def _alloc_list(p: Pass, ins: tuple) -> None:
    declared = tensor(ins.dtype, None if ins.rank < 0 else ins.rank)
    for r in ins.items:
        _list_item(p, ins, r, declared)
    p.write(ins.dst, tensor_list(declared[1], declared[2]))


def _list_item(p: Pass, ins: tuple, r: int, declared: tuple) -> None:
    found = p.read(ins, r)
    if p.checking and (found[0] != "tensor" or found[1] != declared[1]
                       or found[2] not in (None, declared[2])):
        raise p.error(ins, f"${r} is {describe(found)}; the list holds {describe(declared)}")


def _list_of(p: Pass, ins: tuple, r: int) -> tuple:
    found = p.read(ins, r)
    if p.checking and found[0] not in ("list", "unknown"):
        raise p.error(ins, f"${r} is {describe(found)}, not a list")
    return found


@step("ListLength")
def _list_length(p: Pass, ins: tuple) -> None:
    _list_of(p, ins, ins.list)
    p.write(ins.dst, tensor("int64", 0))


@step("ListGet")
def _list_get(p: Pass, ins: tuple) -> None:
    lst = _list_of(p, ins, ins.list)
    p.write(ins.dst, tensor(lst[1], lst[2]) if lst[0] == "list" else UNKNOWN)


@step("ListInsert")
def _list_insert(p: Pass, ins: tuple) -> None:
    lst = _list_of(p, ins, ins.list)
    if len(ins.item) != 1:
        raise p.error(ins, f"inserts {len(ins.item)} registers, not one")
    if lst[0] == "list":
        _list_item(p, ins, ins.item[0], tensor(lst[1], lst[2]))
    p.write(ins.dst, lst)


@step("ListErase")
def _list_erase(p: Pass, ins: tuple) -> None:
    p.write(ins.dst, _list_of(p, ins, ins.list))


@step("ListConcat")
def _list_concat(p: Pass, ins: tuple) -> None:
    lst = _list_of(p, ins, ins.list)
    if lst[0] != "list":
        p.write(ins.dst, UNKNOWN)
        return
    rank = None if lst[2] is None else lst[2] + ins.new_axis
    p.write(ins.dst, tensor(lst[1], rank))


@step("ListSplit")
def _list_split(p: Pass, ins: tuple) -> None:
    src = p.read(ins, ins.tensor)
    if src[0] != "tensor":
        if p.checking:
            raise p.error(ins, f"${ins.tensor} is {describe(src)}, not a tensor")
        p.write(ins.dst, UNKNOWN)
        return
    rank = None if src[2] is None else src[2] - (0 if ins.keepdims else 1)
    if p.checking and rank is not None and (rank < 0 or src[2] == 0):
        raise p.error(ins, f"splits {describe(src)}, which has no axis")
    p.write(ins.dst, tensor_list(src[1], rank))


@step("KillRegister")
def _kill_register(p: Pass, ins: tuple) -> None:
    p.assigned &= ~(1 << ins.dst)  # it holds nothing now


# --- every function, to a fixpoint ---------------------------------------------------------------

def check_types(exe: Executable) -> dict[int, set[tuple[int, ...]]]:
    """Prove the type of every register of ``exe`` and check every use (see the module doc).

    Assumes ``verify.check_function`` passed for every function (operands in range, jumps
    forward). Raises RelvmFormatError naming the function, pc and instruction. Returns, per
    kernel entry without recorded ranks, the argument ranks of its calls.
    """
    prog = Program(exe)
    dependents = prog.dependents()
    order = _callees_first(prog)
    queue, queued = list(reversed(order)), set(order)
    rounds = [0] * len(exe.functions)
    checked = set()
    while queue:
        fi = queue.pop()
        queued.discard(fi)
        rounds[fi] += 1
        # A function that calls nothing depends on no result: its first pass is final.
        is_leaf = not prog.callees[fi] and not prog.calls_closures[fi]
        p = Pass(prog, fi, checking=is_leaf)
        p.run()
        if is_leaf:
            checked.add(fi)
        result = join(prog.results[fi], p.result)
        if rounds[fi] > MAX_ROUNDS:
            result = UNKNOWN
        if result != prog.results[fi]:
            prog.results[fi] = result
            for g in dependents[fi]:
                if g not in queued:
                    queued.add(g)
                    queue.append(g)
    for fi in range(len(exe.functions)):
        if fi not in checked:
            Pass(prog, fi, checking=True).run()
    return prog.call_ranks


def _callees_first(prog: Program) -> list[int]:
    """The functions in post-order of the call graph (callees before callers)."""
    seen: set[int] = set()
    order: list[int] = []
    for root in range(len(prog.results)):
        stack = [(root, iter(sorted(prog.callees[root])))] if root not in seen else []
        seen.add(root)
        while stack:
            f, it = stack[-1]
            g = next(it, None)
            if g is None:
                stack.pop()
                order.append(f)
            elif g not in seen:
                seen.add(g)
                stack.append((g, iter(sorted(prog.callees[g]))))
    return order
