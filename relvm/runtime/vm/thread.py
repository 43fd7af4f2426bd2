"""One thread's execution state of a VirtualMachine, and the run loop that uses it.

A :class:`~relvm.runtime.vm.VirtualMachine` may be called from many threads at once, as one
ONNX Runtime session is. Everything a call changes belongs to the calling thread's
:class:`ThreadState`, made on the thread's first call: the steps (handlers bind the state they
are made for), the kernels (their plans, cached C contexts and intermediate buffers live in
their closures), the pooled storage and its views, the entry points with their replays and
reused output maps, the inputs and outputs set for the next call, the statistics, and the
frames in flight. The VM itself keeps only what no call changes: the executable, its read-only
constants, the compiled dim programs, and the packed forms of constant weights
(``kernels.Constants``, shared under a lock). So calls from different threads never share a
mutable Python object, and their kernels run at once (cffi releases the GIL in C).

The run loop keeps an explicit stack of frames, so recursion in a program never grows the
Python stack. Each instruction was turned into a step (``handlers.py``), so the loop is
``pc = steps[pc](frame)``. Set ``RELVM_TRACE=1`` to print every instruction as it runs.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ...errors import RelvmError, RelvmFormatError, RelvmInputError, RelvmRuntimeError
from ..bytecode import format_instruction, operands, register_operands, spec_of, writes
from ..bytecode.dimprog import DimError, written_slots
from ..executable import Executable, VMFunction
from .handlers import ALIGNMENT, CALL, make_step
from . import replay
from .kernels import Constants, native_path, resolve_kernels
from .operands import OperandCheck
from .entry import EntryPoint

MAX_FRAMES = 1_000_000


class Frame:
    """One activation of a VM function: registers, dims, pc, where its result goes."""

    __slots__ = ("func", "index", "regs", "dims", "pc", "ret_reg", "steps", "bound",
                 "owns_cache", "taken")

    def __init__(self, func: VMFunction, index: int, steps: list, regs: list, ret_reg: int,
                 owns_cache: bool, bound: dict[int, np.ndarray] | None = None,
                 dims: list[int] | None = None):
        self.func = func
        self.index = index
        self.regs = regs  # the arguments, then None up to func.num_regs
        self.dims: list[int] = [0] * func.num_dims if dims is None else dims
        self.pc = 0
        self.ret_reg = ret_reg
        self.steps = steps
        self.bound = bound  # AllocTensor pc -> the caller's output array it hands out
        self.owns_cache = owns_cache
        #: If pc -> whether it jumped to its true branch, for a call a replay is made from.
        self.taken: dict[int, bool] | None = None


class InvokeStats:
    """What the calling thread's last invoke did.

    ``allocations`` counts fresh buffers (results, escaping tensors, storage grown or not
    reusable); ``allocated_bytes`` their size. ``peak_bytes`` bounds the memory the invoke used:
    the thread's reusable storage plus what it allocated. ``output_copies`` counts results that
    could not be written in place into bound output arrays and were copied (among them results
    whose output array shares memory with an input); ``input_copies`` counts inputs copied
    because they were not C-contiguous. ``native_code`` says where the executable's generated
    kernels come from, and why (the same on every invoke of a VM).
    """

    # Class-level zeros, no __init__: one is made per invoke, and an invoke that allocates and
    # copies nothing (the serving loop) then writes only peak_bytes.
    FIELDS = ("allocations", "allocated_bytes", "peak_bytes", "output_copies", "input_copies")
    allocations = 0
    allocated_bytes = 0
    peak_bytes = 0
    output_copies = 0
    input_copies = 0
    native_code = "no generated kernels"

    def __repr__(self) -> str:
        return "InvokeStats(" + ", ".join(f"{k}={getattr(self, k)}" for k in self.FIELDS) + ")"


@dataclass
class Profile:
    """Per-kernel and per-opcode time and count over a profiled run."""

    rows: dict[str, list[float]] = field(default_factory=dict)  # name -> [count, seconds]

    def add(self, name: str, seconds: float) -> None:
        row = self.rows.setdefault(name, [0, 0.0])
        row[0] += 1
        row[1] += seconds

    def table(self) -> str:
        total = sum(r[1] for r in self.rows.values()) or 1e-12
        lines = [f"{'name':<40} {'count':>7} {'total us':>10} {'mean us':>9} {'%':>6}"]
        for name, (count, secs) in sorted(self.rows.items(), key=lambda kv: -kv[1][1]):
            lines.append(f"{name:<40} {count:>7} {secs * 1e6:>10.1f} "
                         f"{secs * 1e6 / count:>9.2f} {100 * secs / total:>6.1f}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


class ThreadState:
    """What one thread's calls of a VM change, and the run loop (see the module docstring).

    The handlers receive a ThreadState as their ``vm``: the services below (``kernel``,
    ``constant``, ``storage``, ``ret_value``, ...) are this thread's.
    """

    def __init__(self, exe: Executable, constants: Sequence[np.ndarray], known: Constants,
                 programs: Sequence[Callable]):
        self.exe = exe
        self._constants = constants  # read-only arrays, shared by every thread
        self._programs = programs    # compiled dim programs: closures without state, shared
        self._kernels = resolve_kernels(exe, known)  # this thread's: kernels keep state
        self._operand_checks: list[OperandCheck | None] = [None] * len(self._kernels)
        self._steps: dict[int, list] = {}
        self._active = [0] * len(exe.functions)
        self._cache: dict[tuple, np.ndarray] = {}
        #: id(pooled buffer) -> {AllocTensor pc: (offset, shape, view)}: views made once.
        self.pooled_views: dict[int, dict[int, tuple]] = {}
        self._pooled = 0
        #: Counts pooled-storage changes; a replay made before the last one is not used.
        self.storage_epoch = 0
        #: What the VM's API set for this thread: inputs and outputs per function, results.
        self.inputs: dict[str, list] = {}
        self.entries: dict[str, EntryPoint] = {}
        self.next_outputs: dict[str, tuple] = {}
        self.bound_outputs: dict[str, tuple] = {}
        self.outputs: list[np.ndarray] = []
        # Stats made per invoke with this VM's native_code as a class attribute: no cost a call.
        self._stats_type = type("InvokeStats", (InvokeStats,),
                                {"native_code": native_path(exe)})
        self.stats = self._stats_type()
        self._observed: dict[int, list] = {}
        #: Called around every step while set: ``observer(frame, pc, ins, step) -> next pc``
        #: (the tracer, a profile); None runs the plain steps, and replays.
        self.observer: Callable | None = None
        if os.environ.get("RELVM_TRACE", "") not in ("", "0"):
            self.trace = True
        self.ret_value: Any = None
        self.pending: Frame | None = None

    @property
    def trace(self) -> bool:
        return self.observer == self._trace

    @trace.setter
    def trace(self, on: bool) -> None:
        self.observer = self._trace if on else None

    # --- services used by the handlers ---------------------------------------------------------
    def kernel(self, k: int) -> Callable:
        return self._kernels[k]

    def operand_check(self, k: int) -> OperandCheck:
        """The operand check of kernel ``k`` (one per kernel: the shapes it has accepted)."""
        check = self._operand_checks[k]
        if check is None:
            check = self._operand_checks[k] = OperandCheck(self.exe.kernels[k])
        return check

    def constant(self, k: int) -> np.ndarray:
        self.exe.verify_constant(k)  # a loaded file's constant: its checksum, on first use
        return self._constants[k]

    def dim_program(self, k: int):
        return self._programs[k]

    def function_number(self, fn: VMFunction) -> int:
        return self.exe.function_index[fn.name]

    def steps(self, index: int) -> list:
        steps = self._steps.get(index)
        if steps is None:
            fn = self.exe.functions[index]
            steps = [make_step(self, fn, pc, ins) for pc, ins in enumerate(fn.instructions)]
            self._steps[index] = steps
        return steps

    def new_frame(self, index: int, args: list, ret_reg: int) -> Frame:
        fn = self.exe.functions[index]
        regs = args + [None] * (fn.num_regs - len(args))
        steps = self.steps(index) if self.observer is None else self.observed_steps(index)
        return Frame(fn, index, steps, regs, ret_reg, self._active[index] == 0)

    def count_allocation(self, shape: tuple, dtype: np.dtype) -> None:
        n = dtype.itemsize
        for d in shape:
            n *= d
        self.stats.allocations += 1
        self.stats.allocated_bytes += n

    def storage(self, key: tuple | None, nbytes: int, alignment: int) -> np.ndarray:
        """A byte buffer of at least ``nbytes``; reused across invokes when ``key`` is given."""
        if key is not None:
            buf = self._cache.get(key)
            if buf is not None and buf.nbytes >= nbytes:
                return buf
        buf = _aligned(nbytes, max(alignment, ALIGNMENT))
        self.stats.allocations += 1
        self.stats.allocated_bytes += nbytes
        if key is not None:
            self.storage_epoch += 1  # replays holding views of pooled buffers are stale
            old = self._cache.get(key)
            self._pooled += nbytes - (old.nbytes if old is not None else 0)
            if old is not None:
                del self.pooled_views[id(old)]
            self._cache[key] = buf
            self.pooled_views[id(buf)] = {}
        return buf

    @property
    def pooled_bytes(self) -> int:
        """Bytes of reusable storage this thread holds between invokes."""
        return self._pooled

    def bind_view(self, fn: VMFunction, out: np.ndarray, shape: tuple, dtype: np.dtype):
        """The caller's output array, viewed in the shape the producing instruction needs."""
        if out.shape == shape:
            return out
        size = 1
        for d in shape:
            size *= d
        if out.size != size:
            raise RelvmInputError(f"@{fn.name}: output array of shape {out.shape} cannot hold "
                                  f"the result of shape {shape}")
        return out.reshape(shape)

    # --- entry points ----------------------------------------------------------------------
    def entry(self, func: str) -> EntryPoint:
        ep = self.entries.get(func)
        if ep is None:
            fn = self.exe.function(func)
            ep = self.entries[func] = EntryPoint(fn, self.exe.function_index[func])
            ep.steps = self.steps(ep.index)
            ep.replayable = replay.replayable(fn, self.exe.dim_programs)
            found = replay.plan(fn, self.exe.dim_programs)  # None for a function with ifs
            if found is not None:
                live, ep.keep = found
                ep.live_steps = tuple((pc, ep.steps[pc]) for pc in live)
        return ep

    # --- invoking ------------------------------------------------------------------------------
    def call(self, ep: EntryPoint, inputs: list, outs: tuple | None) -> Any:
        """Run ``ep`` on checked ``inputs``, writing into checked output arrays ``outs``."""
        self.stats = stats = self._stats_type()
        if ep.copies:
            stats.input_copies = ep.copies
            ep.copies = 0
        bound = None if outs is None else ep.bound_map(inputs, outs)
        if self.observer is not None:  # tracing or profiling: every instruction, observed
            frame = Frame(ep.fn, ep.index, self.observed_steps(ep.index),
                          inputs + ep.spare_regs, -1, self._active[ep.index] == 0, bound)
            self._start(ep, frame, outs)
            result = self._run(frame)
        elif ep.replayable:
            result = self._replay(ep, inputs, bound, outs)
        else:
            frame = Frame(ep.fn, ep.index, ep.steps, inputs + ep.spare_regs, -1,
                          self._active[ep.index] == 0, bound)
            self._start(ep, frame, outs)
            result = self._run(frame)
        if outs is not None and (len(outs) != 1 or result is not outs[0]):
            result = self._finish_outputs(ep.fn, result, outs, ep.aliased)
        stats.peak_bytes = self._pooled + stats.allocated_bytes
        return result

    def _start(self, ep: EntryPoint, frame: Frame, outs: tuple | None) -> None:
        """The entry dims (checking the inputs), then the bound output shapes, before any
        kernel runs."""
        if ep.fn.prologue:
            self._run_prologue(frame)
        if outs is not None:
            ep.check_output_shapes(frame.dims, outs)

    def _replay(self, ep: EntryPoint, inputs: list, bound: dict | None,
                outs: tuple | None) -> Any:
        """Run a replayable entry, replaying its last call with the same input shapes when
        there is one (see ``replay.py``), else in full, keeping the call for next time."""
        key = (inputs[0].shape,) if len(inputs) == 1 else tuple([a.shape for a in inputs])
        r = ep.replays.get(key)
        if r is None or r.epoch != self.storage_epoch:
            return self._record(ep, inputs, bound, outs, key)
        ep.replays.move_to_end(key)
        # The same shapes as the kept call: the prologue's checks passed for them then. The
        # replay's frame is reused; its registers are None between calls (so it holds no
        # array of an earlier call), else it is in use by a call that re-entered the VM.
        # (Replayed steps never use storage the frame would own: pooled buffers are kept.)
        frame = r.frame
        if frame is None or frame.regs is not None:
            frame = Frame(ep.fn, ep.index, ep.steps, None, -1, True, None, r.dims)
            if r.frame is None:
                r.frame = frame
        frame.regs = inputs + r.regs
        frame.bound = bound
        if outs is not None:
            ep.check_output_shapes(r.dims, outs)
        pc = -1
        counted = (self.stats.allocations, self.stats.allocated_bytes)
        try:
            for pc, step in r.steps:
                step(frame)
        except replay.Diverged:
            # An if went the other way: the call runs in full (kernels are functions of their
            # inputs: running them again is only work) and its path gets a replay.
            self.stats.allocations, self.stats.allocated_bytes = counted
            frame.regs = None
            ep.diverged += 1
            if ep.diverged > replay.MAX_DIVERGED:
                ep.replayable = False
                ep.replays.clear()
            return self._record(ep, inputs, bound, outs, key)
        except Exception as e:
            raise self._error(frame, pc, e) from None
        finally:
            frame.regs = None
        return self.ret_value

    def _record(self, ep: EntryPoint, inputs: list, bound: dict | None, outs: tuple | None,
                key: tuple) -> Any:
        """Run ``ep`` in full and keep the call as the replay for its input shapes."""
        frame = Frame(ep.fn, ep.index, ep.steps, inputs + ep.spare_regs, -1,
                      self._active[ep.index] == 0, bound)
        live_steps, keep = ep.live_steps, ep.keep
        if live_steps is None:
            frame.taken = {}  # the ifs record which way they went
        self._start(ep, frame, outs)
        result = self._run(frame)
        if not ep.replayable:
            return result
        if live_steps is None:  # a function with ifs: planned along the path this call took
            pcs = replay.path(ep.fn, frame.taken)
            planned = None if pcs is None else ep.path_plans.get(tuple(pcs))
            if planned is None:
                found = None if pcs is None else replay.plan(ep.fn, self.exe.dim_programs, pcs)
                if found is None:
                    ep.replayable = False  # a register written twice on this path: never again
                    return result
                live, keep = found
                planned = (tuple((pc, ep.steps[pc]) for pc in live), keep)
                if len(ep.path_plans) >= replay.MAX_REPLAYS:
                    ep.path_plans.clear()
                ep.path_plans[tuple(pcs)] = planned
            live_steps, keep = planned
        ep.replays.pop(key, None)  # a stale one for these shapes
        if len(ep.replays) >= replay.MAX_REPLAYS:
            ep.replays.popitem(last=False)
        ep.replays[key] = replay.Replay(ep.fn, frame.regs, frame.dims, len(inputs), keep,
                                        self.storage_epoch, live_steps, self.kernel,
                                        frame.taken)
        return result

    def _finish_outputs(self, fn: VMFunction, result: Any, outs: tuple,
                        aliased: tuple[int, ...]) -> Any:
        """Copy the results that are not already in their output arrays into them."""
        leaves = list(result_leaves(result))
        if aliased:
            leaves = _before_overwrite(leaves, outs, aliased)
        for i, (r, out) in enumerate(zip(leaves, outs)):
            if r is out or _same_memory(r, out):
                continue
            if not isinstance(r, np.ndarray) or r.shape != out.shape:
                raise RelvmRuntimeError(f"@{fn.name} result {i} of shape "
                                        f"{getattr(r, 'shape', None)} does not fit output "
                                        f"array of shape {out.shape}")
            np.copyto(out, r)
            self.stats.output_copies += 1
        return _rebuild(result, iter(outs))

    # --- the run loop --------------------------------------------------------------------------
    def _run(self, frame: Frame) -> Any:
        """Run ``frame`` to its return: the run loop, the only one (tracing and profiling run
        it over observed steps, see ``observe``). Calls push frames on an explicit stack."""
        stack = [frame]
        active = self._active
        f = frame
        active[f.index] += 1
        steps = f.steps
        pc = f.pc
        try:
            while True:
                pc = steps[pc](f)
                if pc >= 0:
                    continue
                if pc == CALL:
                    f = self.pending
                    if len(stack) >= MAX_FRAMES:
                        raise RelvmRuntimeError(f"call depth exceeds {MAX_FRAMES} frames "
                                                f"(unbounded recursion?)")
                    stack.append(f)
                    active[f.index] += 1
                    steps = f.steps
                    pc = 0
                    continue
                value = self.ret_value  # RET
                active[f.index] -= 1
                stack.pop()
                if not stack:
                    return value
                callee = f
                f = stack[-1]
                f.regs[callee.ret_reg] = value
                steps = f.steps
                pc = f.pc
        except Exception as e:
            raise self._error(f, pc, e) from None
        finally:
            # Normally every frame was popped; after an error, release the ones still active.
            for g in stack:
                active[g.index] -= 1

    def _error(self, f: Frame, pc: int, e: Exception) -> Exception:
        """What a failure at ``pc`` of ``f`` raises: the caller's errors (bad input, a bad
        file) as they are, anything else as a RelvmRuntimeError naming the function, pc,
        instruction and the shapes of exactly its register operands."""
        if isinstance(e, (RelvmInputError, RelvmFormatError)):
            return e
        if pc < 0:
            pc = f.pc
        fn = f.func
        ins = fn.instructions[pc] if 0 <= pc < len(fn.instructions) else None
        text = format_instruction(ins, self.exe, fn) if ins is not None else "?"
        shapes = ""
        if ins is not None:
            seen = [r for r in register_operands(ins) if 0 <= r < len(f.regs)
                    and isinstance(f.regs[r], np.ndarray)]
            if seen:
                shapes = "; registers: " + ", ".join(f"${r}: {_describe(f.regs[r])}"
                                                     for r in seen)
        what = str(e) if isinstance(e, (RelvmError, DimError)) else f"{type(e).__name__}: {e}"
        return RelvmRuntimeError(f"@{fn.name} pc {pc}: {text}: {what}{shapes}")

    # --- observed runs: tracing and profiling --------------------------------------------------
    def observed_steps(self, index: int) -> list:
        """The steps of function ``index`` with ``self.observer(frame, pc, ins, step)`` around
        each: what the run loop runs while tracing or profiling."""
        steps = self._observed.get(index)
        if steps is None:
            fn = self.exe.functions[index]

            def wrap(pc: int, ins: tuple, step: Callable) -> Callable:
                return lambda f: self.observer(f, pc, ins, step)
            steps = [wrap(pc, ins, step)
                     for pc, (ins, step) in enumerate(zip(fn.instructions, self.steps(index)))]
            self._observed[index] = steps
        return steps

    def _trace(self, f: Frame, pc: int, ins: tuple, step: Callable) -> int:
        """Run one step and print the instruction with what it wrote (``RELVM_TRACE=1``)."""
        nxt = step(f)
        spec = spec_of(ins)
        shown = [f"${r}={_describe(f.regs[r])}" for r in writes(ins) + tuple(operands(ins, ("outs",)))]
        if spec.has("dims"):
            names = f.func.dim_names
            shown += [f"{names[k] if k < len(names) else f'd{k}'}={f.dims[k]}"
                      for k in written_slots(self.exe.dim_programs[ins.prog])]
        print(f"[relvm] @{f.func.name} {pc:>4}: {format_instruction(ins, self.exe, f.func)}"
              + (f"  -> {', '.join(shown)}" if shown else ""), file=sys.stderr)
        return nxt

    def profile(self, ep: EntryPoint, inputs: list) -> Profile:
        """Run ``ep`` once on ``inputs`` and time every instruction: per kernel and opcode."""
        prof = Profile()

        def observe(f: Frame, pc: int, ins: tuple, step: Callable) -> int:
            start = time.perf_counter()
            nxt = step(f)
            secs = time.perf_counter() - start
            spec = spec_of(ins)
            prof.add(f"kernel {self.exe.kernels[ins.kernel].name}" if spec.has("kernel")
                     else spec.text_name, secs)
            return nxt

        outer, self.observer = self.observer, observe
        try:
            self.call(ep, inputs, None)
        finally:
            self.observer = outer
        return prof

    def _run_prologue(self, frame: Frame) -> None:
        """Run the entry dims computation; its failures are the caller's (RelvmInputError)."""
        fn = frame.func
        pc = 0
        try:
            for pc in range(fn.prologue):
                frame.steps[pc](frame)
        except DimError as e:
            raise RelvmInputError(f"@{fn.name}: {e}") from None
        except Exception as e:  # only a malformed executable gets here
            raise self._error(frame, pc, e) from None
        frame.pc = fn.prologue


def _aligned(nbytes: int, alignment: int) -> np.ndarray:
    raw = np.empty(nbytes + alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + nbytes]


def result_leaves(value: Any):
    """The arrays of a call's result in order, (nested) tuples flattened."""
    if isinstance(value, tuple):
        for v in value:
            yield from result_leaves(v)
    else:
        yield value


def _same_memory(r: Any, out: np.ndarray) -> bool:
    """True if result ``r`` is already in output array ``out`` (a kernel wrote it there)."""
    if not isinstance(r, np.ndarray) or r.shape != out.shape:
        return False
    if r.base is out and r.flags.c_contiguous:
        # A view of out (a reshape of the array its kernel wrote) of out's shape, contiguous:
        # out's elements, at out's start (the usual case, and 30x cheaper than addresses).
        return True
    return r.size == 0 or r.__array_interface__["data"][0] == out.__array_interface__["data"][0]


def _before_overwrite(leaves: list, outs: tuple, aliased: tuple[int, ...]) -> list:
    """``leaves`` with a copy of each result that reads memory a copy into an aliased output
    (an output array sharing memory with an input) is about to overwrite -- an input returned
    as a result, say, when two outputs are its inputs swapped -- so that every output receives
    what the call computed from the inputs as they were."""
    def copied(i: int) -> bool:
        return not (leaves[i] is outs[i] or _same_memory(leaves[i], outs[i]))
    written = [j for j in aliased if copied(j)]
    return [np.array(r) if isinstance(r, np.ndarray) and copied(i)
            and any(j != i and np.may_share_memory(r, outs[j]) for j in written) else r
            for i, r in enumerate(leaves)]


def _rebuild(result: Any, outs) -> Any:
    """``result`` with each leaf replaced by the next output array (same nesting)."""
    if isinstance(result, tuple):
        return tuple(_rebuild(r, outs) for r in result)
    return next(outs)


def _describe(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"{v.dtype}{list(v.shape)}"
    if isinstance(v, tuple):
        return "(" + ", ".join(_describe(x) for x in v) + ")"
    return type(v).__name__
