"""An ``onnx.backend.base.Backend`` that imports, builds and runs models on the relvm VM.

``RelvmBackend.prepare(model)`` returns a rep whose ``run(inputs)`` imports the model, builds it
once and runs it on the VM. Graph inputs the importer needs as constants (an ``axes`` input, a
pad width: relvm keeps ranks and such sizes static) are taken from the first run's values; the
rest are fed at run time.

``SymbolicRelvmBackend`` first rewrites every dim of every graph input to its own ``dim_param``
(``x_0``, ``x_1``, ...), so the model is compiled once for any shape and the test's shapes only
arrive at run time. The lengths of 1-d integer inputs that hold a shape (Reshape's target, Slice's
starts...) stay static: they are ranks. So does the last dim of GatherND's and ScatterND's
indices: the length of each index tuple, which decides the result's rank.

Models are built as users build them, ``relvm.build(mod, params=params)``: C kernels, fusion on;
a case the C build refuses fails.
"""

from __future__ import annotations

import copy
import os

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

import relvm
from relvm.frontend.onnx import RelvmImportError, from_onnx

#: The kernels the builds use: relvm.build's ``backend``, C unless ``RELVM_TEST_BACKEND=numpy``
#: (everything on the NumPy reference kernels).
KERNEL_BACKEND = os.environ.get("RELVM_TEST_BACKEND", "c")

#: Inputs that hold shapes or axes, by op type: their lengths are ranks, so they stay static.
SHAPE_INPUTS = {"Reshape": (1,), "Expand": (1,), "ConstantOfShape": (0,), "Slice": (1, 2, 3, 4),
                "Pad": (1, 3), "Resize": (1, 2, 3), "Split": (1,), "Squeeze": (1,),
                "Unsqueeze": (1,), "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,),
                "ReduceMin": (1,), "ReduceProd": (1,), "ReduceL1": (1,), "ReduceL2": (1,),
                "ReduceLogSum": (1,), "ReduceLogSumExp": (1,), "ReduceSumSquare": (1,),
                "Tile": (1,)}
#: Dims of inputs that decide a rank, by op type: {input: axis}. They stay static too.
RANK_DIMS = {"GatherND": {1: -1}, "ScatterND": {1: -1}}


def symbolic_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose graph inputs have one named dim_param per dim."""
    out = copy.deepcopy(model)
    graph = out.graph
    initializers = {t.name for t in graph.initializer}
    keep = {node.input[i] for node in graph.node for i in SHAPE_INPUTS.get(node.op_type, ())
            if i < len(node.input)}
    rank_dims = {node.input[i]: axis for node in graph.node
                 for i, axis in RANK_DIMS.get(node.op_type, {}).items() if i < len(node.input)}
    for k, vi in enumerate(graph.input):
        if vi.name in initializers or vi.name in keep:
            continue
        dims = vi.type.tensor_type.shape.dim
        static = rank_dims[vi.name] % len(dims) if vi.name in rank_dims and dims else None
        for axis, d in enumerate(dims):
            if axis == static:
                continue
            d.Clear()
            d.dim_param = f"in{k}_{axis}"
    return out


class RelvmRep(BackendRep):
    def __init__(self, model: onnx.ModelProto):
        self.model = model
        initializers = {t.name for t in model.graph.initializer}
        self.input_names = [vi.name for vi in model.graph.input if vi.name not in initializers]
        self.builds: dict[tuple, tuple[relvm.VirtualMachine, list[str]]] = {}
        self.backend = KERNEL_BACKEND

    def _build(self, feeds: dict[str, np.ndarray]):
        freeze: dict[str, np.ndarray] = {}
        while True:
            try:
                mod, params = from_onnx(self.model, freeze=freeze)
                break
            except RelvmImportError as e:
                wanted = [name for name in e.needs_constant if name in feeds and name not in freeze]
                if not wanted:
                    raise
                freeze.update({name: feeds[name] for name in wanted})
        key = tuple((k, v.dtype.str, v.shape, v.tobytes()) for k, v in sorted(freeze.items()))
        if key not in self.builds:
            exe = relvm.build(mod, params=params, backend=self.backend)
            self.builds[key] = (relvm.VirtualMachine(exe),
                                [k for k in self.input_names if k not in freeze])
        return self.builds[key]

    def run(self, inputs, **kwargs):
        # Tensors as arrays; a sequence (a list of tensors) as a list, in and out.
        def value(v):
            return v if isinstance(v, list) else np.asarray(v)

        if isinstance(inputs, dict):
            feeds = {k: value(v) for k, v in inputs.items()}
        else:
            feeds = {k: value(v) for k, v in zip(self.input_names, inputs)}
        vm, names = self._build(feeds)
        vm.set_input("main", *[feeds[k] for k in names])  # also for a graph without inputs
        result = vm.invoke("main")
        outs = list(result) if isinstance(result, tuple) else [result]
        return [o if isinstance(o, list) else np.asarray(o) for o in outs]


class RelvmBackend(Backend):
    @classmethod
    def is_compatible(cls, model, device: str = "CPU", **kwargs) -> bool:
        return device == "CPU"

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs) -> RelvmRep:
        return RelvmRep(model)

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device).run(inputs)


class SymbolicRelvmBackend(RelvmBackend):
    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs) -> RelvmRep:
        return RelvmRep(symbolic_model(model))
