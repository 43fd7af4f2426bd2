"""A fused kernel entry run as a chain of C kernels, one per step.

The compiler's fusion pass stores a fused op as its steps (``attrs["steps"]``). When no
generated code comes with the entry, the C backend still runs it: each step is the op's own C
kernel, writing into an intermediate buffer (kept per input shapes) or, for the last step, into
the output. Slower than one generated loop, but every fused graph runs.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...errors import RelvmFormatError
from ...ir.types import TensorType
from ...ops.fused import steps_from_json
from ...ops.registry import AttrError
from ...runtime.executable import KernelEntry
from .common import np_dtype, remember

_BOOL_RESULTS = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
                 "logical_and", "logical_or", "logical_not"}
_INT32_RESULTS = {"argmax", "argmin", "argwhere", "nn.matmul_integer", "nn.conv2d_integer"}


def step_dtype(op: str, attrs, inputs: list[str]) -> str:
    """The result dtype of one step, from its op's dtype rule (see the ops' type relations)."""
    if op in _BOOL_RESULTS:
        return "bool"
    if op in _INT32_RESULTS:
        return "int32"
    if op in ("cast", "shape_of", "zeros", "ones"):
        return attrs["dtype"]
    if op == "where":
        return inputs[1]
    if "out_dtype" in attrs or op in ("full", "arange"):
        key = "out_dtype" if "out_dtype" in attrs else "dtype"
        return attrs[key] or inputs[0 if op != "full" else -1]
    return inputs[0]


def make_chain(entry: KernelEntry, make_step: Callable[[KernelEntry], Callable]) -> Callable:
    """The kernel for a fused ``entry``; ``make_step`` makes each step's C kernel (and raises
    RelvmKernelError for a step the backend cannot run)."""
    try:
        steps = steps_from_json(entry.attrs["steps"])
    except (KeyError, ValueError, TypeError, AttrError) as e:
        raise RelvmFormatError(f"fused kernel {entry.name!r} is malformed: {e}",
                               section="kernels") from None
    n_in = len(entry.inputs)
    # The steps whose results are the entry's outputs: the last one, or (an external region
    # run on relvm's kernels) those its "outputs" name.
    try:
        result_steps = [int(j) for kind, j in entry.attrs.get("outputs", [["step", -1]])
                        if kind == "step"]
        result_steps = [j % len(steps) for j in result_steps]
        if len(result_steps) != len(entry.outputs) or len(set(result_steps)) != len(
                result_steps):
            raise ValueError("its outputs do not match its result dtypes")
    except (ValueError, TypeError, ZeroDivisionError) as e:
        raise RelvmFormatError(f"fused kernel {entry.name!r} is malformed: {e}",
                               section="kernels") from None
    out_of = {j: k for k, j in enumerate(result_steps)}
    dtypes: list[str] = []
    kernels = []
    for i, s in enumerate(steps):
        ins = [entry.inputs[j] if kind == "in" else dtypes[j] for kind, j in s.args]
        out = entry.outputs[out_of[i]] if i in out_of else step_dtype(s.op.name, s.attrs, ins)
        dtypes.append(out)
        attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in s.attrs.items()}
        kernels.append(make_step(KernelEntry(f"{entry.name}.{i}", s.op.name, attrs, tuple(ins),
                                             (out,))))
    buffers: dict[tuple, list[np.ndarray]] = {}

    def intermediates(arrays) -> list[np.ndarray | None]:
        """An array per step but the results, shaped by the steps' type relations."""
        types: list[Any] = []
        for s, dt in zip(steps, dtypes):
            args = [TensorType(arrays[j].shape, arrays[j].dtype.name) if kind == "in"
                    else types[j] for kind, j in s.args]
            t = s.op.infer(s.attrs, *args)
            types.append(TensorType(t.shape, dt))
        return [None if i in out_of else np.empty(t.shape, np_dtype(t.dtype))
                for i, t in enumerate(types)]

    def run(*args: np.ndarray) -> None:
        arrays, outs = args[:n_in], args[n_in:]
        key = tuple(a.shape for a in arrays)
        values = buffers.get(key)
        if values is None:
            values = remember(buffers, key, intermediates(arrays))
        values = [outs[out_of[i]] if i in out_of else v for i, v in enumerate(values)]
        for i, (s, kernel) in enumerate(zip(steps, kernels)):
            kernel(*[arrays[j] if kind == "in" else values[j] for kind, j in s.args],
                   values[i])
    return run
