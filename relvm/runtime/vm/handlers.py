"""One handler per opcode.

A handler is a factory: given the VM, the function, the pc and the instruction's fields *by
name* (its parameters are the opcode's field names, checked against the table when it is
registered), it binds them once and returns a *step* ``step(frame) -> next_pc``. The run loop
(``thread.py``) then executes ``pc = steps[pc](frame)`` with no decoding or dispatch per
instruction. Steps that transfer control between frames return CALL or RET; the VM finishes the
transfer. The VM a factory is given is one thread's ``state.ThreadState``: steps are made per
thread, so what they bind (kernels, pooled views) is that thread's.

``HANDLERS`` maps opcode numbers to factories; a test checks it covers ``opcodes.TABLE``.
"""

from __future__ import annotations

import inspect
import operator
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ... import dtypes
from ...errors import RelvmRuntimeError
from ..bytecode.opcodes import BY_NAME, OpcodeSpec

if TYPE_CHECKING:  # pragma: no cover
    from ..executable import VMFunction
    from .thread import Frame, ThreadState

CALL = -1
RET = -2
ALIGNMENT = 64

Step = Callable[["Frame"], int]
Factory = Callable[..., Step]

HANDLERS: dict[int, Factory] = {}


def handler(name_or_spec: str | OpcodeSpec):
    """Register the factory for an opcode. It is named after the opcode and takes
    ``(vm, fn, pc, <the opcode's fields, by their names in the table>)``."""
    spec = BY_NAME[name_or_spec] if isinstance(name_or_spec, str) else name_or_spec

    def register(factory: Factory) -> Factory:
        # Python keywords get a trailing underscore ("if" -> "if_").
        assert factory.__name__.rstrip("_") == spec.text_name, (factory.__name__, spec.text_name)
        params = tuple(inspect.signature(factory).parameters)
        assert params == ("vm", "fn", "pc") + spec.field_names, (spec.name, params)
        HANDLERS[spec.number] = factory
        return factory
    return register


def make_step(vm: "ThreadState", fn: "VMFunction", pc: int, ins: tuple) -> Step:
    """The step of instruction ``ins`` at ``pc`` of ``fn``: its fields bound by name."""
    return HANDLERS[ins[0]](vm, fn, pc, *ins[1:])


def dim_reader(operand: int) -> Callable[[list], int] | int:
    """A literal dim as an int, or a function reading dims slot k from a frame's dims."""
    if operand >= 0:
        return operand
    k = -operand - 1
    return lambda dims: dims[k]


def shape_reader(operands: tuple[int, ...]) -> Callable[[list], tuple[int, ...]]:
    """A function returning the concrete shape of dim ``operands`` given a frame's dims.

    It runs for every symbolic allocation and reshape a call does not replay: one C call
    (``itemgetter``) where every dim is a slot.
    """
    if all(v >= 0 for v in operands):
        shape = tuple(operands)
        return lambda dims: shape
    if all(v < 0 for v in operands):
        if len(operands) == 1:
            k = -operands[0] - 1
            return lambda dims: (dims[k],)
        return operator.itemgetter(*(-v - 1 for v in operands))
    slots = tuple((i, -v - 1) for i, v in enumerate(operands) if v < 0)
    template = list(operands)

    def read(dims: list) -> tuple[int, ...]:
        out = template[:]
        for i, k in slots:
            out[i] = dims[k]
        return tuple(out)
    return read


class ADT:
    """A constructor value with a tag other than 0 (tag-0 values are plain tuples)."""

    __slots__ = ("tag", "fields")

    def __init__(self, tag: int, fields: tuple):
        self.tag = tag
        self.fields = fields

    def __getitem__(self, i: int) -> Any:
        return self.fields[i]


class Closure:
    """A function value: a VM function index and the values it captured."""

    __slots__ = ("func", "captured")

    def __init__(self, func: int, captured: tuple):
        self.func = func
        self.captured = captured

    def __repr__(self) -> str:
        return f"Closure(func={self.func}, captured={len(self.captured)})"


# --- data movement ------------------------------------------------------------------------------

@handler("Move")
def move(vm, fn, pc, dst, src) -> Step:
    nxt = pc + 1

    def step(f):
        r = f.regs
        r[dst] = r[src]
        return nxt
    return step


@handler("LoadConst")
def load_const(vm, fn, pc, dst, const) -> Step:
    value = vm.constant(const)
    nxt = pc + 1

    def step(f):
        f.regs[dst] = value
        return nxt
    return step


@handler("LoadConsti")
def load_consti(vm, fn, pc, dst, value) -> Step:
    value = np.array(value, np.int64)
    value.flags.writeable = False
    nxt = pc + 1

    def step(f):
        f.regs[dst] = value
        return nxt
    return step


@handler("KillRegister")
def kill_register(vm, fn, pc, dst) -> Step:
    nxt = pc + 1

    def step(f):
        f.regs[dst] = None
        return nxt
    return step


@handler("DeviceCopy")
def device_copy(vm, fn, pc, dst, src, src_device, dst_device) -> Step:
    if src_device != 0 or dst_device != 0:
        raise RelvmRuntimeError(f"@{fn.name} pc {pc}: device_copy between devices "
                                f"{src_device} and {dst_device}; this build of relvm has only the CPU "
                                f"(device 0)")
    nxt = pc + 1

    def step(f):
        r = f.regs
        r[dst] = np.array(r[src], copy=True)
        return nxt
    return step


# --- tuples and closures ------------------------------------------------------------------------

@handler("AllocADT")
def alloc_adt(vm, fn, pc, dst, tag, fields) -> Step:
    nxt = pc + 1
    if tag == 0:
        def step(f):
            r = f.regs
            r[dst] = tuple([r[i] for i in fields])
            return nxt
    else:
        def step(f):
            r = f.regs
            r[dst] = ADT(tag, tuple([r[i] for i in fields]))
            return nxt
    return step


@handler("GetField")
def get_field(vm, fn, pc, dst, object, index) -> Step:
    obj = object
    nxt = pc + 1

    def step(f):
        r = f.regs
        r[dst] = r[obj][index]
        return nxt
    return step


@handler("GetTag")
def get_tag(vm, fn, pc, dst, object) -> Step:
    obj = object
    nxt = pc + 1
    zero = np.array(0, np.int64)

    def step(f):
        r = f.regs
        v = r[obj]
        r[dst] = np.array(v.tag, np.int64) if isinstance(v, ADT) else zero
        return nxt
    return step


@handler("AllocClosure")
def alloc_closure(vm, fn, pc, dst, func, captured) -> Step:
    nxt = pc + 1

    def step(f):
        r = f.regs
        r[dst] = Closure(func, tuple([r[i] for i in captured]))
        return nxt
    return step


# --- control flow -------------------------------------------------------------------------------

@handler("Goto")
def goto(vm, fn, pc, offset) -> Step:
    target = pc + offset
    return lambda f: target


@handler("If")
def if_(vm, fn, pc, test, target, true_offset, false_offset) -> Step:
    t_pc, f_pc = pc + true_offset, pc + false_offset

    def step(f):
        r = f.regs
        if r[test] == r[target]:
            if f.taken is not None:  # a call a replay is made from (replay.path)
                f.taken[pc] = True
            return t_pc
        if f.taken is not None:
            f.taken[pc] = False
        return f_pc
    return step


@handler("Fatal")
def fatal(vm, fn, pc) -> Step:
    def step(f):
        raise RelvmRuntimeError("reached a fatal instruction (unreachable code)")
    return step


@handler("Ret")
def ret(vm, fn, pc, result) -> Step:

    def step(f):
        vm.ret_value = f.regs[result]
        return RET
    return step


@handler("Invoke")
def invoke(vm, fn, pc, dst, func, args) -> Step:
    nxt = pc + 1
    if not any(pc in o.alloc_pcs for o in fn.outputs):
        def step(f):
            r = f.regs
            f.pc = nxt
            vm.pending = vm.new_frame(func, [r[i] for i in args], dst)
            return CALL
        return step
    # The call's result is one of this function's results: with outputs bound, the callee
    # writes it into the caller's array (its own result allocations bound to it).
    callee_pcs = vm.exe.functions[func].outputs[0].alloc_pcs

    def step_bound(f):
        r = f.regs
        f.pc = nxt
        frame = vm.new_frame(func, [r[i] for i in args], dst)
        out = f.bound.get(pc) if f.bound is not None else None
        if out is not None:
            frame.bound = {p: out for p in callee_pcs}
        vm.pending = frame
        return CALL
    return step_bound


@handler("InvokeClosure")
def invoke_closure(vm, fn, pc, dst, closure, args) -> Step:
    nxt = pc + 1

    def step(f):
        r = f.regs
        c = r[closure]
        f.pc = nxt
        vm.pending = vm.new_frame(c.func, list(c.captured) + [r[i] for i in args], dst)
        return CALL
    return step


# --- kernels and shapes ---------------------------------------------------------------------------

@handler("InvokePacked")
def invoke_packed(vm, fn, pc, kernel, inputs, outputs) -> Step:
    """Run a kernel on its input registers and output registers (called with the outputs
    last). Before the kernel first sees a set of shapes, its operands are checked against its
    entry (``operands.py``); the step a replay runs (``step.replayed``) skips that, its shapes
    being those of a checked call."""
    check = vm.operand_check(kernel)
    kernel = vm.kernel(kernel)
    seen = check.seen
    args = inputs + outputs
    n_out = len(outputs)
    nxt = pc + 1
    if len(args) == 2 and n_out == 1:
        a0, a1 = args

        def replayed(f):
            r = f.regs
            out = r[a1]
            if out.size:
                kernel(r[a0], out)
            return nxt

        def step(f):
            r = f.regs
            x, out = r[a0], r[a1]
            if (x.shape, out.shape) not in seen:
                check((x, out))
            if out.size:
                kernel(x, out)
            return nxt
    elif len(args) == 3 and n_out == 1:
        a0, a1, a2 = args

        def replayed(f):
            r = f.regs
            out = r[a2]
            if out.size:
                kernel(r[a0], r[a1], out)
            return nxt

        def step(f):
            r = f.regs
            x, y, out = r[a0], r[a1], r[a2]
            if (x.shape, y.shape, out.shape) not in seen:
                check((x, y, out))
            if out.size:
                kernel(x, y, out)
            return nxt
    elif len(args) == 4 and n_out == 1:  # a fused layer: data, weight, bias -> out
        a0, a1, a2, a3 = args

        def replayed(f):
            r = f.regs
            out = r[a3]
            if out.size:
                kernel(r[a0], r[a1], r[a2], out)
            return nxt

        def step(f):
            r = f.regs
            x, w, b, out = r[a0], r[a1], r[a2], r[a3]
            if (x.shape, w.shape, b.shape, out.shape) not in seen:
                check((x, w, b, out))
            if out.size:
                kernel(x, w, b, out)
            return nxt
    else:
        def run(arrays: list) -> int:
            # A call whose outputs are all empty has nothing to compute.
            if n_out and all(arrays[i].size == 0 for i in range(len(args) - n_out, len(args))):
                return nxt
            kernel(*arrays)
            return nxt

        def replayed(f):
            r = f.regs
            return run([r[i] for i in args])

        def step(f):
            r = f.regs
            arrays = [r[i] for i in args]
            if tuple([getattr(a, "shape", None) for a in arrays]) not in seen:
                check(arrays)
            return run(arrays)
    step.replayed = replayed
    return step


@handler("ComputeDims")
def compute_dims(vm, fn, pc, prog, args) -> Step:
    run = vm.dim_program(prog)
    nxt = pc + 1
    if len(args) == 1:
        a0 = args[0]

        def step(f):
            run(f.dims, (f.regs[a0],))
            return nxt
    else:
        def step(f):
            r = f.regs
            run(f.dims, [r[i] for i in args])
            return nxt
    return step


@handler("ShapeOf")
def shape_of(vm, fn, pc, dst, tensor) -> Step:
    nxt = pc + 1

    def step(f):
        r = f.regs
        r[dst] = np.array(r[tensor].shape, np.int64)
        return nxt
    return step


@handler("ReshapeTensor")
def reshape_tensor(vm, fn, pc, dst, tensor, shape) -> Step:
    read = shape_reader(shape)
    nxt = pc + 1

    def step(f):
        r = f.regs
        r[dst] = r[tensor].reshape(read(f.dims))
        return nxt
    return step


# --- lists (relvm/ops/lists.py defines what each computes) ---------------------------------------

@handler("AllocList")
def alloc_list(vm, fn, pc, dst, items, dtype, rank) -> Step:
    nxt = pc + 1

    def step(f):
        r = f.regs
        r[dst] = [r[i] for i in items]
        return nxt
    return step


@handler("ListLength")
def list_length(vm, fn, pc, dst, list) -> Step:
    src = list
    nxt = pc + 1

    def step(f):
        r = f.regs
        r[dst] = np.array(len(r[src]), np.int64)
        return nxt
    return step


@handler("ListGet")
def list_get(vm, fn, pc, dst, list, index) -> Step:
    from ...ops.lists import get
    src = list
    nxt = pc + 1

    def step(f):
        r = f.regs
        r[dst] = get(r[src], r[index])
        return nxt
    return step


@handler("ListInsert")
def list_insert(vm, fn, pc, dst, list, item, index) -> Step:
    from ...ops.lists import insert
    src = list
    if len(item) != 1:
        raise RelvmRuntimeError(f"list_insert at pc {pc} inserts {len(item)} registers, not one")
    it = item[0]
    nxt = pc + 1

    def step(f):
        r = f.regs
        r[dst] = insert(r[src], r[it], r[index])
        return nxt
    return step


@handler("ListErase")
def list_erase(vm, fn, pc, dst, list, index) -> Step:
    from ...ops.lists import erase
    src = list
    nxt = pc + 1

    def step(f):
        r = f.regs
        r[dst] = erase(r[src], r[index])
        return nxt
    return step


@handler("ListConcat")
def list_concat(vm, fn, pc, dst, list, axis, new_axis) -> Step:
    from ...ops.lists import concat
    src = list
    nxt = pc + 1

    def step(f):
        r = f.regs
        r[dst] = concat(r[src], axis, bool(new_axis))
        return nxt
    return step


@handler("ListSplit")
def list_split(vm, fn, pc, dst, tensor, split, axis, keepdims) -> Step:
    from ...ops.lists import split as cut
    nxt = pc + 1

    def step(f):
        r = f.regs
        r[dst] = cut(r[tensor], r[split], axis, bool(keepdims))
        return nxt
    return step


# --- memory ---------------------------------------------------------------------------------------

@handler("AllocStorage")
def alloc_storage(vm, fn, pc, dst, size, alignment, reuse) -> Step:
    size_of = dim_reader(size)
    static = isinstance(size_of, int)
    key = (vm.function_number(fn), pc)
    nxt = pc + 1

    def step(f):
        nbytes = size_of if static else size_of(f.dims)
        f.regs[dst] = vm.storage(key if reuse and f.owns_cache else None, nbytes, alignment)
        return nxt
    return step


def _view(storage: np.ndarray, offset: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
    nbytes = dtype.itemsize
    for d in shape:
        nbytes *= d
    if offset + nbytes > storage.nbytes:
        raise RelvmRuntimeError(f"tensor of {nbytes} bytes at offset {offset} does not fit its "
                                f"storage of {storage.nbytes} bytes")
    return np.ndarray(shape, dtype, buffer=storage, offset=offset)


def _alloc_step(vm, fn, pc, dst, storage, offset, shape_of, dtype,
                dims_shape: Callable | None = None) -> Step:
    """Shared by AllocTensor and AllocTensorReg: view a storage, or allocate, or bind.

    ``shape_of`` is the shape when it is static, else a function of the frame returning it;
    ``dims_shape``, when given, is the same as a function of the frame's dims (one call less).
    """
    dt = dtypes.to_numpy(dtype)
    make = _fresh(vm, dt) if storage < 0 else _viewer(vm, pc, storage, dim_reader(offset), dt)
    static = isinstance(shape_of, tuple)
    nxt = pc + 1

    if not any(pc in o.alloc_pcs for o in fn.outputs):
        if static:
            def step(f):
                f.regs[dst] = make(f, shape_of)
                return nxt
        elif dims_shape is not None:
            def step(f):
                f.regs[dst] = make(f, dims_shape(f.dims))
                return nxt
        else:
            def step(f):
                f.regs[dst] = make(f, shape_of(f))
                return nxt
        return step

    def step_bound(f):
        shape = shape_of if static else shape_of(f)
        out = f.bound.get(pc) if f.bound is not None else None
        if out is None:
            f.regs[dst] = make(f, shape)
        else:
            f.regs[dst] = out if out.shape == shape else vm.bind_view(fn, out, shape, dt)
        return nxt
    return step_bound


def _fresh(vm, dt: np.dtype) -> Callable:
    def make(f, shape):
        vm.count_allocation(shape, dt)
        return np.empty(shape, dt)
    return make


def _viewer(vm, pc: int, storage: int, off, dt: np.dtype) -> Callable:
    """A view of the storage in register ``storage``. A view of one of the VM's pooled buffers
    is made once and handed out again while the buffer, offset and shape stay the same: the
    buffer lives as long as its entry in ``vm.pooled_views``, so its id names it."""
    views = vm.pooled_views
    static_off = isinstance(off, int)

    def make(f, shape):
        buf = f.regs[storage]
        o = off if static_off else off(f.dims)
        mine = views.get(id(buf))
        if mine is None:  # storage that is not pooled: fresh each invoke
            return _view(buf, o, shape, dt)
        hit = mine.get(pc)
        if hit is not None and hit[0] == o and hit[1] == shape:
            return hit[2]
        view = _view(buf, o, shape, dt)
        mine[pc] = (o, shape, view)
        return view
    return make


@handler("AllocTensor")
def alloc_tensor(vm, fn, pc, dst, storage, offset, shape, dtype) -> Step:
    if all(d >= 0 for d in shape):
        return _alloc_step(vm, fn, pc, dst, storage, offset, tuple(shape), dtype)
    read = shape_reader(shape)
    return _alloc_step(vm, fn, pc, dst, storage, offset, lambda f: read(f.dims), dtype, read)


@handler("AllocTensorReg")
def alloc_tensor_reg(vm, fn, pc, dst, storage, offset, shape, dtype) -> Step:
    shape_reg = shape

    def read(f):
        s = np.asarray(f.regs[shape_reg])
        if s.ndim != 1 or s.dtype.kind not in "iu" or (s < 0).any():
            raise RelvmRuntimeError(f"alloc_tensor_reg: shape must be a 1-d tensor of "
                                    f"non-negative ints, got {s!r}")
        return tuple(int(v) for v in s)
    return _alloc_step(vm, fn, pc, dst, storage, offset, read, dtype)
