"""The VirtualMachine: runs an Executable's bytecode with TVM Relay VM's API, zero-copy outputs.

This module is the API: it checks and arranges a call's arguments and hands the call to the
calling thread's :class:`~relvm.runtime.vm.thread.ThreadState`, where the run loop and everything a
call changes live. The VM keeps only what calls share and never change, so one VM may be
called from many threads at once.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..bytecode.dimprog import compile_program
from ..executable import Executable
from .kernels import Constants
from .entry import EntryPoint
from .thread import Frame, InvokeStats, Profile, ThreadState, result_leaves  # noqa: F401
from ...errors import RelvmInputError


class _PerThread(threading.local):
    """The calling thread's ThreadState, made on its first use from that thread (threading.local
    calls ``__init__`` once per thread) and freed with the thread."""

    def __init__(self, exe: Executable, constants: Sequence[np.ndarray], known: Constants,
                 programs: Sequence[Callable]):
        self.state = ThreadState(exe, constants, known, programs)


class VirtualMachine:
    """Runs the functions of an :class:`Executable`; safe to call from many threads at once.

    Each thread that calls a VM gets its own execution state, made on its first call: its
    kernels' plans and buffers, pooled storage, replays, statistics, and the inputs and outputs
    it set. Calls from different threads therefore run at once, kernels included, and never see
    each other's state: ``stats``, ``get_outputs``, ``set_input``/``set_output``/
    ``bind_outputs`` followed by ``invoke`` are all per thread, as a thread calling on its own
    expects. The VM shares the executable, its read-only constants and their packed forms.

    Parameters
    ----------
    exe : Executable
        From ``relvm.build`` or ``relvm.load``. One executable may be shared by many VMs.

    Examples
    --------
    >>> exe = relvm.build(relvm.parse(text), params=weights)
    >>> vm = relvm.VirtualMachine(exe)
    >>> y = vm.invoke("main", x)
    >>> out = np.empty((len(x), 10), np.float32)
    >>> vm.invoke_with_outputs("main", input_args=[x], output_args=[out])  # writes into out
    >>> from concurrent.futures import ThreadPoolExecutor
    >>> ys = list(ThreadPoolExecutor(4).map(vm.invoke, ["main"] * 8, batches))  # one VM
    """

    def __init__(self, exe: Executable):
        if not isinstance(exe, Executable):
            what = type(exe).__name__
            hint = (": build it first, relvm.VirtualMachine(relvm.build(module))"
                    if what == "Module" else " (from relvm.build or relvm.load)")
            raise RelvmInputError(f"VirtualMachine takes an Executable, not a {what}{hint}")
        self.exe = exe
        constants = []
        for c in exe.constants:
            c = np.asarray(c, order="C")
            c.flags.writeable = False
            constants.append(c)
        self._constants = tuple(constants)
        self._known = Constants(self._constants)
        self._programs = tuple(compile_program(p) for p in exe.dim_programs)
        # The constructing thread's state is made now: a kernel the backend lacks is reported
        # here, not at the first call.
        self._local = _PerThread(exe, self._constants, self._known, self._programs)

    # --- the calling thread's state ------------------------------------------------------------
    @property
    def stats(self) -> InvokeStats:
        """What the calling thread's last invoke did (see :class:`InvokeStats`)."""
        return self._local.state.stats

    @property
    def pooled_bytes(self) -> int:
        """Bytes of reusable storage the calling thread holds between invokes."""
        return self._local.state.pooled_bytes

    @property
    def pooled_views(self) -> dict[int, dict[int, tuple]]:
        return self._local.state.pooled_views

    @property
    def storage_epoch(self) -> int:
        return self._local.state.storage_epoch

    @property
    def trace(self) -> bool:
        """Print every instruction the calling thread runs (``RELVM_TRACE=1`` sets it)."""
        return self._local.state.trace

    @trace.setter
    def trace(self, on: bool) -> None:
        self._local.state.trace = on

    def kernel(self, k: int) -> Callable:
        """The calling thread's kernel ``k`` of the executable's kernel table."""
        return self._local.state.kernel(k)

    def operand_check(self, k: int):
        """The calling thread's operand check of kernel ``k`` (``operands.OperandCheck``)."""
        return self._local.state.operand_check(k)

    def _entry(self, func: str) -> EntryPoint:
        return self._local.state.entry(func)

    # --- inputs --------------------------------------------------------------------------------
    def get_input_index(self, name: str, func: str = "main") -> int:
        """Position of parameter ``name`` of ``func``, or -1 (as in TVM)."""
        names = self._entry(func).names
        return names.index(name) if name in names else -1

    def set_input(self, func: str = "main", *args: Any, **kwargs: Any) -> None:
        """Set the inputs of ``func`` for the calling thread's next invoke: positionally and/or
        by name.

        Arrays that are C-contiguous with the declared dtype are borrowed, not copied; any
        object with ``__dlpack__`` is accepted the same way.
        """
        st = self._local.state
        ep = st.entry(func)
        values = args if not kwargs and len(args) == len(ep.names) else ep.arrange(args, kwargs)
        st.inputs[func] = ep.convert(values)

    # --- outputs -------------------------------------------------------------------------------
    def get_num_outputs(self) -> int:
        """Number of result tensors of the calling thread's last ``invoke_stateful``."""
        return len(self._local.state.outputs)

    def get_outputs(self) -> list[np.ndarray]:
        """Result tensors of the calling thread's last ``invoke_stateful``, tuples flattened."""
        return list(self._local.state.outputs)

    def set_output(self, func: str, *outs: Any) -> None:
        """Arrays the calling thread's next invoke of ``func`` writes its results into (that
        call only). Arrays that share memory with each other are refused."""
        st = self._local.state
        st.next_outputs[func] = st.entry(func).check_outputs(outs, "outs")

    def bind_outputs(self, func: str, *outs: Any) -> None:
        """Arrays every invoke of ``func`` from the calling thread writes its results into,
        until unbind_outputs. Arrays that share memory with each other are refused."""
        st = self._local.state
        st.bound_outputs[func] = st.entry(func).check_outputs(outs, "outs")

    def unbind_outputs(self, func: str) -> None:
        self._local.state.bound_outputs.pop(func, None)

    # --- invoking ------------------------------------------------------------------------------
    def invoke(self, func: str = "main", *args: Any, **kwargs: Any) -> Any:
        """Run ``func``; with arguments, set them first. Returns arrays or (nested) tuples.

        With outputs set (``set_output``/``bind_outputs``), results are written into those
        arrays and they are returned.
        """
        st = self._local.state
        ep = st.entries.get(func) or st.entry(func)
        if args or kwargs:
            values = (args if not kwargs and len(args) == len(ep.names)
                      else ep.arrange(args, kwargs))
            st.inputs[func] = ep.convert(values)
        outs = st.next_outputs.pop(func, None) or st.bound_outputs.get(func)
        # A function without parameters needs no set_input.
        inputs = st.inputs.get(func, [] if not ep.names else None)
        if inputs is None:
            raise RelvmInputError(f"@{func}: inputs are not set; call set_input or pass them")
        return st.call(ep, inputs, outs)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """``invoke("main", ...)``."""
        return self.invoke("main", *args, **kwargs)

    def invoke_stateful(self, func: str = "main", *args: Any, **kwargs: Any) -> None:
        """Run ``func`` and keep its results for the calling thread's ``get_outputs``."""
        result = self.invoke(func, *args, **kwargs)
        self._local.state.outputs = list(result_leaves(result))

    def invoke_with_outputs(self, func: str, input_args: Mapping[str, Any] | Sequence[Any],
                            output_args: Sequence[Any]) -> Any:
        """Set inputs (dict by name or list by position), set outputs, invoke: zero-copy.

        Each result is written by the kernel that produces it straight into the caller's array;
        where that is impossible (the result is an input or a constant, two results are one
        tensor, or the output array shares memory with an input, which the call must read
        unchanged) it is computed apart and copied, and ``stats.output_copies`` says so.
        Output arrays that share memory with each other are refused (``RelvmInputError``).
        """
        st = self._local.state
        ep = st.entries.get(func) or st.entry(func)
        if type(input_args) in (list, tuple) and len(input_args) == len(ep.names):
            values = input_args
        elif isinstance(input_args, Mapping):
            values = ep.arrange((), input_args)
        else:
            values = ep.arrange(input_args, {})
        st.inputs[func] = inputs = ep.convert(values)
        return st.call(ep, inputs, ep.check_outputs(output_args))

    def profile(self, func: str = "main", *args: Any, **kwargs: Any) -> Profile:
        """Run ``func`` once and time every instruction: per kernel and per opcode."""
        if args or kwargs:
            self.set_input(func, *args, **kwargs)
        st = self._local.state
        ep = st.entry(func)
        inputs = st.inputs.get(func, [] if not ep.names else None)
        if inputs is None:
            raise RelvmInputError(f"@{func}: inputs are not set; call set_input or pass them")
        return st.profile(ep, inputs)

