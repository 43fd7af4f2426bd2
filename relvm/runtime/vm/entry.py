"""Calling a VM function from Python: inputs and outputs checked against its signature.

An :class:`EntryPoint` is built once per function per VM thread (it keeps the thread's replays
and the output arrays it last bound). It precomputes a checker for every parameter and result
(NumPy dtype objects, ranks, static dims), so the per-call cost is a few attribute reads; the
detailed error messages are only built when a check fails.

Output arrays may not share memory with each other (two results cannot both land in one
place); an output array that shares memory with an input is allowed, but its result is
computed apart and copied at the end, since kernels writing into it would overwrite the input
while the call still reads it. Both checks compare the arrays' memory (exact for C-contiguous
arrays, which inputs and outputs are by then) and are remembered for the very same array
objects, which the entry point keeps, so the serving loop that passes the same arrays again
pays two identity tests. An array's memory never moves, whatever is done to its shape, dtype or
flags (those are checked on every call; ``ndarray.resize``, which would move it, refuses an
array something else references, as the entry point does).
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ... import dtypes
from ...errors import RelvmInputError
from ..executable import ParamSig, TensorSig, VMFunction
from .handlers import Closure, shape_reader

_MISSING = object()


class EntryPoint:
    """Everything needed to call one VM function from Python, precomputed."""

    def __init__(self, fn: VMFunction, index: int):
        self.fn = fn
        self.index = index
        self.names = tuple(p.name for p in fn.params)
        self.converters = tuple(self._converter(p) for p in fn.params)
        #: The registers after the parameters, empty: a frame's registers are inputs + these.
        self.spare_regs: list[None] = [None] * (fn.num_regs - len(fn.params))
        self.out_dtypes = tuple(dtypes.to_numpy(o.dtype) for o in fn.outputs)
        self.out_shapes = tuple(shape_reader(o.shape) if o.shape is not None else None
                                for o in fn.outputs)
        self.out_pcs = tuple(o.alloc_pcs for o in fn.outputs)
        #: Output shapes known without any dims (all literal), checked without a reader.
        self.static_out_shapes = tuple(
            o.shape if o.shape is not None and all(d >= 0 for d in o.shape) else None
            for o in fn.outputs)
        # The usual case, one tensor in and one out, gets paths without loops: these are None
        # for other signatures.
        self._only_input = self.converters[0] if len(self.converters) == 1 else None
        self._only_dtype = self.out_dtypes[0] if len(fn.outputs) == 1 else None
        self.returns_list = any(o.is_list for o in fn.outputs)
        self._only_static = self.static_out_shapes[0] if len(fn.outputs) == 1 else None
        self.copies = 0  # inputs copied because they were not C-contiguous
        #: The VM's steps for this function (set by the VM).
        self.steps: list = []
        #: Replays (set by the VM, see replay.py): whether the function is replayed; for a
        #: straight-line one the live (pc, step) pairs and the registers a replay keeps (a
        #: function with ifs is planned per replay, along its call's path); input shapes ->
        #: Replay, least recently used first.
        self.replayable = False
        self.diverged = 0  # calls that went another way than their replay (replay.py)
        self.live_steps: tuple | None = None
        self.keep: list[bool] = []
        #: A function with ifs: path (the pcs a call ran) -> (live steps, keep), planned once
        #: per path, not per replay (a plan walks the whole function).
        self.path_plans: dict[tuple, tuple] = {}
        self.replays: OrderedDict[tuple, Any] = OrderedDict()
        self._last_outs: tuple = ()
        self._last_inputs: list = []
        self._last_map: dict[int, np.ndarray] = {}
        #: Which of the last bound outputs share memory with an input (their results are
        #: computed apart and copied), and the last output arrays found not to share memory.
        self.aliased: tuple[int, ...] | None = ()
        self._outs_own = False  # every one of _last_outs owns its data
        self._apart: tuple = ()

    # --- inputs --------------------------------------------------------------------------------
    def arrange(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        """Positional and keyword inputs in parameter order; errors name what is wrong."""
        name = self.fn.name
        if len(args) > len(self.names):
            raise RelvmInputError(f"@{name} takes {len(self.names)} inputs, got {len(args)}")
        values: list[Any] = list(args) + [_MISSING] * (len(self.names) - len(args))
        for k, v in kwargs.items():
            if k not in self.names:
                raise RelvmInputError(f"@{name} has no input named {k!r}; inputs: "
                                      + ", ".join(self.names))
            i = self.names.index(k)
            if values[i] is not _MISSING:
                raise RelvmInputError(f"@{name} input {k!r} given twice")
            values[i] = v
        missing = [n for n, v in zip(self.names, values) if v is _MISSING]
        if missing:
            raise RelvmInputError(f"@{name} is missing inputs: " + ", ".join(missing))
        return values

    def convert(self, values: Sequence[Any]) -> list[Any]:
        """The inputs checked against the signature (one value per parameter, in order)."""
        only = self._only_input
        if only is not None:
            return [only(values[0])]
        return [conv(v) for conv, v in zip(self.converters, values)]

    def _converter(self, p: ParamSig) -> Callable[[Any], Any]:
        what = f"%{p.name}"
        if p.is_list:
            check = self._tensor_check(f"{what} element", p.tensors[0])
            fname = self.fn.name

            def convert_list(value: Any) -> list:
                if not isinstance(value, (list, tuple)):
                    raise RelvmInputError(f"@{fname} input {what}: expected a list of arrays "
                                          f"({p.type_text}), got {type(value).__name__}")
                out = []
                for i, v in enumerate(value):
                    try:
                        out.append(check(v))
                    except RelvmInputError as e:
                        raise RelvmInputError(str(e).replace(f"{what} element",
                                                             f"{what}[{i}]", 1)) from None
                return out
            return convert_list
        if p.is_tuple:
            checks = [self._tensor_check(f"{what}.{i}", s) for i, s in enumerate(p.tensors)]

            def convert_tuple(value: Any) -> tuple:
                if not isinstance(value, (tuple, list)) or len(value) != len(checks):
                    raise RelvmInputError(f"@{self.fn.name} input {what}: expected a tuple of "
                                          f"{len(checks)} arrays ({p.type_text})")
                return tuple(c(v) for c, v in zip(checks, value))
            return convert_tuple
        if not p.tensors:
            def convert_closure(value: Any) -> Closure:
                if not isinstance(value, Closure):
                    raise RelvmInputError(f"@{self.fn.name} input {what}: expected a function "
                                          f"value ({p.type_text})")
                return value
            return convert_closure
        return self._tensor_check(what, p.tensors[0])

    def _tensor_check(self, what: str, sig: TensorSig) -> Callable[[Any], np.ndarray]:
        if sig.shape is None:  # a list's element of any rank: its shape is not checked
            sig = TensorSig(sig.dtype, ())
            ndim = None
        else:
            ndim = len(sig.shape)
        dt = dtypes.to_numpy(sig.dtype)
        static = tuple((i, d) for i, d in enumerate(sig.shape) if isinstance(d, int))
        # A fully static shape is checked by one tuple comparison; the rank and per-dim checks
        # below then only run to name what is wrong.
        whole = tuple(sig.shape) if len(static) == ndim else None
        fname = self.fn.name

        def check(value: Any) -> np.ndarray:
            arr = value if type(value) is np.ndarray else _as_array(value, sig.dtype)
            if arr is None:
                raise RelvmInputError(f"@{fname} input {what}: expected an array ({sig}), got "
                                      f"{type(value).__name__}")
            if arr.dtype is not dt and arr.dtype != dt:
                raise RelvmInputError(f"@{fname} input {what}: expected dtype {sig.dtype}, got "
                                      f"{arr.dtype}")
            shape = arr.shape
            if shape != whole and ndim is not None:
                if len(shape) != ndim:
                    raise RelvmInputError(f"@{fname} input {what}: expected rank {ndim} ({sig}), "
                                          f"got shape {shape}")
                for i, d in static:
                    if shape[i] != d:
                        raise RelvmInputError(f"@{fname} input {what} dim {i}: expected {d}, "
                                              f"got {shape[i]} (shape {shape})")
            if not arr.flags.c_contiguous:
                arr = np.asarray(arr, order="C")
                self.copies += 1
            return arr
        return check

    # --- outputs -------------------------------------------------------------------------------
    def check_outputs(self, outs: Sequence[Any], label: str = "output_args") -> tuple:
        """The caller's output arrays, checked (count, dtype, layout, no two sharing memory)
        before anything runs; errors call the arrays ``label[i]``."""
        if self.returns_list:
            raise RelvmInputError(f"@{self.fn.name} returns a list ({self.fn.ret_type}): its "
                                  "tensors cannot be written into output arrays")
        dt = self._only_dtype
        if dt is not None and len(outs) == 1:  # the usual case, every check passing
            out = outs[0]
            if type(out) is np.ndarray and out.dtype is dt and out.flags.carray:
                last = self._last_outs
                return last if last and last[0] is out else (out,)
        return self._check_outputs(outs, label)

    def _check_outputs(self, outs: Sequence[Any], label: str) -> tuple:
        fn = self.fn
        if len(outs) != len(self.out_dtypes):
            raise RelvmInputError(f"@{fn.name} has {len(self.out_dtypes)} result tensors "
                                  f"({fn.ret_type}), got {len(outs)} output arrays")
        checked = []
        for i, (dt, out) in enumerate(zip(self.out_dtypes, outs)):
            arr = out if type(out) is np.ndarray else _as_array(out, fn.outputs[i].dtype)
            if not isinstance(arr, np.ndarray):
                raise RelvmInputError(f"@{fn.name} output {i}: expected an array, got "
                                      f"{type(out).__name__}")
            if arr.dtype != dt:
                raise RelvmInputError(f"@{fn.name} output {i}: expected dtype "
                                      f"{fn.outputs[i].dtype}, got {arr.dtype}")
            flags = arr.flags
            if not flags.c_contiguous or not flags.writeable:
                raise RelvmInputError(f"@{fn.name} output {i}: the array must be C-contiguous "
                                      f"and writeable")
            checked.append(arr)
        checked = tuple(checked)
        if len(checked) > 1 and not _same_arrays(checked, self._apart):
            for j, b in enumerate(checked):
                for i, a in enumerate(checked[:j]):
                    if not _apart(a, b):
                        raise RelvmInputError(f"@{fn.name}: {label}[{i}] and {label}[{j}] share "
                                              f"memory; each result needs an array of its own")
            self._apart = checked
        return checked

    def bound_map(self, inputs: list, outs: tuple) -> dict[int, np.ndarray]:
        """AllocTensor pc -> the caller's array it hands out instead of allocating, for every
        output that shares no memory with an input (``self.aliased`` lists the others).

        The same output arrays passed again (the usual serving loop) reuse the previous map;
        with the same inputs too, the memory check is skipped. Arrays that own their data
        (fresh NumPy arrays, the usual new input) are apart without comparing addresses.
        """
        last = self._last_outs
        if outs is last or _same_arrays(outs, last):
            seen = self._last_inputs
            if (inputs[0] is seen[0] if len(inputs) == 1 == len(seen)
                    else _same_arrays(inputs, seen)):
                return self._last_map
        else:
            self._last_outs = outs
            self._outs_own = all([o.flags.owndata for o in outs])
            self.aliased = None  # the map is made again below
        self._last_inputs = inputs
        if len(inputs) == 1 and len(outs) == 1:  # the usual signature, without loops
            x = inputs[0]
            apart = (self._outs_own and type(x) is np.ndarray and x is not outs[0]
                     and x.flags.owndata)
        else:
            apart = self._outs_own and _own_memory(inputs, outs)
        aliased = () if apart else _sharing_inputs(inputs, outs)
        if aliased is not self.aliased and aliased != self.aliased:
            self.aliased = aliased
            self._last_map = {pc: out for i, (pcs, out) in enumerate(zip(self.out_pcs, outs))
                              if i not in aliased for pc in pcs}
        return self._last_map

    def check_output_shapes(self, dims: list, outs: tuple) -> None:
        """Once the entry dims are known, each output array must have the result's shape."""
        only = self._only_static
        if only is not None and outs[0].shape == only:
            return
        for i, (read, static, out) in enumerate(zip(self.out_shapes, self.static_out_shapes,
                                                    outs)):
            if static is not None:
                if out.shape != static:
                    raise RelvmInputError(f"@{self.fn.name} output {i}: expected shape {static} "
                                          f"({self.fn.outputs[i].type_text}), got {out.shape}")
            elif read is not None:
                shape = read(dims)
                if out.shape != shape:
                    raise RelvmInputError(f"@{self.fn.name} output {i}: expected shape {shape} "
                                          f"({self.fn.outputs[i].type_text}), got {out.shape}")


def _same_arrays(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Whether ``a`` and ``b`` hold the very same objects, in order."""
    if len(a) != len(b):
        return False
    if len(a) == 1:
        return a[0] is b[0]
    return all(map(operator.is_, a, b))


def _own_memory(inputs: Sequence[Any], outs: tuple) -> bool:
    """Whether every input is an array that owns its data and is none of ``outs`` (which own
    theirs): then no two of them share memory."""
    for v in inputs:
        for a in (v if type(v) is tuple else (v,)):
            if isinstance(a, np.ndarray) and (not a.flags.owndata or any(a is o for o in outs)):
                return False
    return True


def _sharing_inputs(inputs: Sequence[Any], outs: tuple) -> tuple[int, ...]:
    """The positions of the output arrays that share memory with an input (usually none)."""
    arrays = [a for v in inputs for a in (v if type(v) is tuple else (v,))
              if isinstance(a, np.ndarray)]
    return tuple(i for i, out in enumerate(outs) if not all(_apart(a, out) for a in arrays))


def _apart(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` share no memory. Two arrays that each own their data are two
    allocations; otherwise their byte ranges are compared (exact for C-contiguous arrays)."""
    if a is not b and a.flags.owndata and b.flags.owndata:
        return True
    return not np.may_share_memory(a, b)


def _as_array(value: Any, dtype: str) -> np.ndarray | None:
    """An ndarray view of ``value`` (NumPy, DLPack, or a Python scalar of ``dtype``)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value)
        except (TypeError, ValueError, RuntimeError, BufferError) as e:
            raise RelvmInputError(f"cannot borrow {type(value).__name__} through DLPack: {e}")
    if isinstance(value, (bool, int, float, np.generic)):
        return np.asarray(value, dtypes.to_numpy(dtype))
    return None
