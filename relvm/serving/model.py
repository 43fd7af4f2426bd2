"""A model as the server sees it: its signature in the protocol's terms, and requests checked
against it one by one before any of them is batched with others.

The batch dim is the symbolic dim every input has first (``n`` in ``x: (n, 784)``, ``y: (n,
16)``) that appears nowhere else in the inputs and leads every output: requests stacked along
it give the stacked results, each request's rows its own. A model without one (a fixed batch,
two inputs with different first dims) is served one request per call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .. import dtypes
from ..errors import RelvmError, RelvmInputError
from ..runtime import Executable
from .protocol import DATATYPES


@dataclass(frozen=True)
class TensorSpec:
    """One input or output: its name, relvm dtype and dims (ints, or names; ``?`` any)."""

    name: str
    dtype: str
    dims: tuple[int | str, ...]

    def metadata(self) -> dict:
        """The protocol's tensor metadata: symbolic dims as -1."""
        return {"name": self.name, "datatype": DATATYPES[self.dtype],
                "shape": [d if isinstance(d, int) else -1 for d in self.dims]}


_TENSOR = re.compile(r"^Tensor\[\((.*)\), (\w+)\]$")


def _dims_of(type_text: str) -> tuple[int | str, ...]:
    """The dims of a result's type text, ``Tensor[(n, 10), float32]``; a dim that is an
    expression (``n*2``) is kept as its text."""
    m = _TENSOR.match(type_text)
    if not m or not m.group(1).strip():
        return ()
    return tuple(int(d) if d.strip().isdigit() else d.strip()
                 for d in m.group(1).rstrip(",").split(","))


class ModelSignature:
    """The inputs and outputs of an executable's function, and its batch dim if it has one.

    Raises RelvmError for a function the protocol cannot serve: a parameter that is a tuple,
    list or closure, a result that is a list, or a dtype the protocol has no name for.
    """

    def __init__(self, exe: Executable, func: str = "main", batch_dim: str | None = None):
        fn = exe.function(func)
        self.func = func
        self.inputs: list[TensorSpec] = []
        for i, p in enumerate(fn.params):
            if p.is_tuple or p.is_list or len(p.tensors) != 1 or p.tensors[0].shape is None:
                raise RelvmError(f"@{func} parameter %{p.name} is {p.type_text}: the server "
                                 f"takes tensor inputs only")
            self.inputs.append(TensorSpec(fn.input_name(i), p.tensors[0].dtype,
                                          tuple(p.tensors[0].shape)))
        self.outputs: list[TensorSpec] = []
        for i, o in enumerate(fn.outputs):
            if o.is_list:
                raise RelvmError(f"@{func} returns a list ({o.type_text}): the server returns "
                                 f"tensors only")
            self.outputs.append(TensorSpec(fn.output_name(i), o.dtype, _dims_of(o.type_text)))
        for t in self.inputs + self.outputs:
            if t.dtype not in DATATYPES:
                raise RelvmError(f"{t.name} is {t.dtype}, which the protocol cannot carry")
        self.numpy = [dtypes.to_numpy(t.dtype) for t in self.inputs]
        self.upper_bounds = dict(exe.upper_bounds)
        self.batch_dim = self._batch_dim(batch_dim)

    def _batch_dim(self, wanted: str | None) -> str | None:
        firsts = {t.dims[0] if t.dims else None for t in self.inputs}
        found = firsts.pop() if len(firsts) == 1 else None
        if not isinstance(found, str) or found == "?":
            found = None
        if found is not None:
            others = [d for t in self.inputs for d in t.dims[1:]]
            outs_ok = all(t.dims and t.dims[0] == found
                          and not any(found in str(d) for d in t.dims[1:])
                          for t in self.outputs)
            if found in others or not outs_ok:
                found = None
        if wanted is not None and wanted != found:
            why = (f"the batch dim is {found!r}" if found else
                   "no dim leads every input and output (and appears nowhere else)")
            raise RelvmError(f"@{self.func} cannot batch along {wanted!r}: {why}")
        return found

    def check(self, given: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The request's arrays in parameter order, each checked: names, datatypes, ranks,
        fixed dims, and named dims agreeing across inputs. Raises RelvmInputError."""
        unknown = sorted(set(given) - {t.name for t in self.inputs})
        if unknown:
            raise RelvmInputError(f"unknown input {unknown[0]!r}; the model takes "
                                  f"{', '.join(t.name for t in self.inputs)}")
        values: dict[str, int] = {}
        arrays = []
        for spec, dt in zip(self.inputs, self.numpy):
            arr = given.get(spec.name)
            if arr is None:
                raise RelvmInputError(f"input {spec.name!r} is missing")
            if arr.dtype != dt:
                raise RelvmInputError(f"input {spec.name!r}: expected datatype "
                                      f"{DATATYPES[spec.dtype]}, got "
                                      f"{DATATYPES.get(arr.dtype.name, arr.dtype.name)}")
            if arr.ndim != len(spec.dims):
                raise RelvmInputError(f"input {spec.name!r}: expected shape "
                                      f"{self._shape_text(spec)}, got {list(arr.shape)}")
            for i, (d, got) in enumerate(zip(spec.dims, arr.shape)):
                if isinstance(d, int) and d != got:
                    raise RelvmInputError(f"input {spec.name!r} dim {i}: expected {d}, got "
                                          f"{got}")
                if isinstance(d, str) and d != "?":
                    if values.setdefault(d, got) != got:
                        raise RelvmInputError(f"input {spec.name!r} dim {i} ({d}) is {got}; "
                                              f"another input gives {d} = {values[d]}")
                    bound = self.upper_bounds.get(d)
                    if bound is not None and got > bound:
                        raise RelvmInputError(f"input {spec.name!r} dim {i} ({d}) is {got}, "
                                              f"over the model's upper bound {bound}")
            arrays.append(np.ascontiguousarray(arr))
        return arrays

    @staticmethod
    def _shape_text(spec: TensorSpec) -> str:
        return "[" + ", ".join(str(d) for d in spec.dims) + "]"

    def metadata(self, name: str, versions: list[str]) -> dict:
        return {"name": name, "versions": versions, "platform": "relvm",
                "inputs": [t.metadata() for t in self.inputs],
                "outputs": [t.metadata() for t in self.outputs]}
