"""External backends: regions of a model compiled and run by another library.

relvm's "bring your own codegen" (TVM's name for it). A backend declares:

- **patterns** (:class:`Pattern`): the ops, and chains of ops (``nn.conv2d -> nn.bias_add ->
  nn.relu``), it can take, each with an optional predicate on the matched ops' attributes,
  dtypes and shapes. ``relvm.partition`` (``relvm/passes/partition.py``) matches them, merges
  the matches into as few regions as possible without creating cycles, and keeps a region only
  when the backend thinks it is worth a boundary (:attr:`Backend.worth`).
- **compile** ``(region) -> bytes``: run at build time on each region (:class:`Region`); the
  bytes (the *artifact*) travel in the executable's ``extern`` section. An artifact is data
  (relvm never loads native code from one): the oneDNN backend's is JSON.
- **runtime** ``(artifact, constants) -> kernel``: run when a VM resolves its kernels (once per
  calling thread, as for every kernel). The kernel is called in destination-passing style,
  ``kernel(*inputs, *outputs)``, on C-contiguous arrays of the region's dtypes and ranks, and
  writes its results into ``outputs``. A region with symbolic dims gets arrays of any size the
  model allows: the kernel specialises per concrete shape and caches what it made.
  ``constants.holds(a)`` says whether an input is one of the VM's constants (weights), which
  never change: a kernel may prepare one once (``constants.prepared(a, key, make)``).

This module is runtime code: it imports nothing from the front end or the compiler. A backend's
runtime half must not either (a saved executable runs where only the runtime is installed).

Example
-------
>>> import numpy as np
>>> from relvm.backends import external
>>> def run_relu(artifact, constants):
...     def kernel(x, out):
...         np.maximum(x, 0, out=out)
...     return kernel
>>> external.register(external.Backend(
...     "toy", patterns=[external.Pattern("relu", ("nn.relu",))],
...     compile=lambda region: b"relu", runtime=run_relu))
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..errors import RelvmKernelError

#: Backends that ship with relvm, by name -> the module that registers them on import. Names are
#: stored in executables: never rename one.
BUILTIN = {"dnnl": "relvm.backends.dnnl", "dnnl_bf16": "relvm.backends.dnnl"}

#: How to install each built-in backend's library, for error messages.
INSTALL = {"dnnl": 'pip install "relvm[dnnl]"'}  # dnnl_bf16 says it when the library is missing
#: What a user can do instead when a loaded executable's backend cannot run here.
FALLBACK_HINT = ("(or load the executable with external_fallback=True, --external-fallback on "
                 "the command line, to run its regions on relvm's own kernels)")

Shape = tuple  # ints and symbol names (str), as the model declares them


@dataclass(frozen=True)
class TensorInfo:
    """A tensor's dtype and shape; a symbolic dim is its name (``"n"``), an unknown one ``"?"``."""

    dtype: str
    shape: Shape

    def to_json(self) -> dict:
        return {"dtype": self.dtype, "shape": list(self.shape)}


@dataclass(frozen=True)
class OpView:
    """One matched op, as a pattern's predicate sees it: plain Python, no IR."""

    op: str
    attrs: Mapping[str, Any]
    inputs: tuple[TensorInfo | None, ...]  # None: an input that is not a tensor (a tuple)
    output: TensorInfo | None              # None: a result that is not one tensor
    #: Which inputs are constants (weights), known at build time.
    constant: tuple[bool, ...] = ()


@dataclass(frozen=True)
class Pattern:
    """Ops a backend takes together: a chain where each op reads the one before it.

    ``ops`` lists op names along the chain; ``"a|b"`` accepts either op and a trailing ``"?"``
    makes a step optional. Each op after the first takes the previous op's result as one of its
    inputs (any one: a residual ``add`` may read it second), and every result inside the chain
    but the last has no other use. ``check(views)``, given the matched ops in chain order, may
    refuse a match on attributes, dtypes or shapes.

    A chain is directional: ``Pattern("conv_relu", ("nn.conv2d", "nn.relu"))`` takes a relu
    after a conv, never a conv after a relu.
    """

    name: str
    ops: tuple[str, ...]
    check: Callable[[list[OpView]], bool] | None = None

    def __post_init__(self):
        if not self.ops or self.ops[0].endswith("?"):
            raise ValueError(f"pattern {self.name!r}: its first op cannot be optional")


@dataclass(frozen=True)
class Region:
    """What a backend's ``compile`` receives: one region of the model, as data.

    ``inputs`` are the region function's parameters in order (``constant[i]``: the argument at
    every call is a constant of the model, its value ``constants[i]``, else None). ``steps`` are
    the region's ops in evaluation order, each ``{"op", "attrs", "args", "type"}`` with ``args``
    references ``["in", i]`` (an input) or ``["step", j]`` (an earlier step's result) and
    ``type`` the step result's :class:`TensorInfo` as JSON; ``outputs`` are the references the
    region returns (several: a tuple). ``function`` is the region as IR, for backends that want
    it; it is only present at build time.
    """

    name: str
    inputs: tuple[TensorInfo, ...]
    steps: tuple[dict, ...]
    outputs: tuple[tuple[str, int], ...]
    constant: tuple[bool, ...] = ()
    constants: tuple[Any, ...] = ()
    function: Any = None

    def views(self) -> list[OpView]:
        """Each step as a pattern's predicate sees an op (for a backend's ``worth``)."""
        types: list[TensorInfo] = []
        out = []
        for s in self.steps:
            ins = tuple(self.inputs[i] if kind == "in" else types[i] for kind, i in s["args"])
            const = tuple(kind == "in" and self.constant[i] for kind, i in s["args"])
            types.append(TensorInfo(s["type"]["dtype"], tuple(s["type"]["shape"])))
            out.append(OpView(s["op"], s["attrs"], ins, types[-1], const))
        return out

    def to_json(self) -> dict:
        """The region without its IR and constant values (what a kernel entry records)."""
        return {"name": self.name, "inputs": [t.to_json() for t in self.inputs],
                "constant": list(self.constant), "steps": [dict(s) for s in self.steps],
                "outputs": [list(r) for r in self.outputs]}


#: Ops whose work is counted in multiply-adds (any other op touches each element once).
PRODUCTS = frozenset({"nn.conv2d", "nn.dense", "nn.matmul", "nn.batch_matmul",
                      "nn.conv2d_transpose"})


def _count(shape, nominal_dim: int) -> int:
    n = 1
    for d in shape:
        n *= d if isinstance(d, int) else nominal_dim
    return n


def op_work(view: OpView, nominal_dim: int) -> int:
    """Multiply-adds (products, convs) or elements touched (anything else) of one op, symbolic
    dims counted as ``nominal_dim``: what cost models measure work in."""
    out = 0 if view.output is None else _count(view.output.shape, nominal_dim)
    ins = [t for t in view.inputs if t is not None]
    if view.op == "nn.conv2d" and len(ins) >= 2 and len(ins[1].shape) == 4:
        # OIHW weights: each output reads I/groups x kh x kw inputs
        return out * _count(ins[1].shape[1:], nominal_dim)
    if view.op in ("nn.dense", "nn.matmul", "nn.batch_matmul") and ins and ins[0].shape:
        # k: the data's last dim, its second-last when it is transposed (matmul, batch_matmul)
        k = ins[0].shape[-2] if view.attrs.get("transpose_a") else ins[0].shape[-1]
        return out * (k if isinstance(k, int) else nominal_dim)
    return max([out] + [_count(t.shape, nominal_dim) for t in ins])


def _dense_window(view: OpView) -> bool:
    """A conv with groups 1 and a window larger than 1x1 (a ResNet's 3x3)."""
    w = view.inputs[1] if len(view.inputs) > 1 else None
    return (view.op == "nn.conv2d" and view.attrs.get("groups", 1) == 1 and w is not None
            and len(w.shape) == 4 and any(d != 1 for d in w.shape[2:]))


@dataclass(frozen=True)
class Measure:
    """A region's size for a cost model: ``work`` (:func:`op_work` summed), the part of it in
    dense convs with windows larger than 1x1 (``dense_window_work``), and ``edge``, the
    elements crossing its boundary (inputs that are not constants, and results; at least 1)."""

    work: int
    dense_window_work: int
    edge: int


def measure(region: Region, nominal_dim: int) -> Measure:
    """:class:`Measure` of ``region``, symbolic dims counted as ``nominal_dim``."""
    views = region.views()
    works = [op_work(v, nominal_dim) for v in views]
    constant = list(region.constant) or [False] * len(region.inputs)
    edge = sum(_count(t.shape, nominal_dim) for t, c in zip(region.inputs, constant) if not c)
    edge += sum(_count(views[j].output.shape, nominal_dim)
                for kind, j in region.outputs if kind == "step")
    return Measure(sum(works), sum(w for w, v in zip(works, views) if _dense_window(v)),
                   max(edge, 1))


def _always(region: Region) -> bool:
    return True


@dataclass
class Backend:
    """An external backend: its name, patterns, build step and runtime.

    Parameters
    ----------
    name : str
        Stored in executables (``Compiler="name"`` on its region functions).
    patterns : sequence of Pattern
        Tried in order; put longer chains first.
    compile : callable
        ``compile(region: Region) -> bytes``, at build time.
    runtime : callable
        ``runtime(artifact: bytes, constants) -> kernel``; see the module docstring.
    available : callable, optional
        ``available() -> str | None``: None when the backend can run here, else why not (a
        missing library). Asked before partitioning, building and running.
    worth : callable, optional
        ``worth(region: Region) -> bool``: the cost model -- whether offloading the region
        beats running it on relvm's own kernels, boundary included. The default keeps regions
        holding at least one op that does real work (see ``relvm/passes/partition.py``).
    """

    name: str
    patterns: Sequence[Pattern]
    compile: Callable[[Region], bytes]
    runtime: Callable[[bytes, Any], Callable[..., None]]
    available: Callable[[], str | None] = field(default=lambda: None)
    worth: Callable[[Region], bool] | None = None


_registry: dict[str, Backend] = {}
_lock = threading.Lock()


def register(backend: Backend) -> Backend:
    """Make ``backend`` known by its name (replacing one registered before under that name)."""
    if not isinstance(backend, Backend):
        raise TypeError(f"register expects a relvm.backends.external.Backend, got "
                        f"{type(backend).__name__}")
    with _lock:
        _registry[backend.name] = backend
    return backend


def unregister(name: str) -> None:
    with _lock:
        _registry.pop(name, None)


def registered() -> list[str]:
    return sorted(set(_registry) | set(BUILTIN))


def lookup(name: str) -> Backend | None:
    """The backend called ``name``: registered, or a built-in one imported now; None if
    relvm knows no such backend."""
    with _lock:
        if name in _registry:
            return _registry[name]
    module = BUILTIN.get(name)
    if module is None:
        return None
    importlib.import_module(module)  # registers it; imports nothing native until used
    with _lock:
        return _registry.get(name)


def unavailable(name: str) -> str | None:
    """None when backend ``name`` can run here, else a sentence saying why and what to do."""
    backend = lookup(name)
    if backend is None:
        known = ", ".join(registered()) or "none"
        return (f"relvm knows no external backend {name!r} (registered: {known}); "
                "register it with relvm.backends.external.register before loading")
    why = backend.available()
    if why is None:
        return None
    hint = f"; {INSTALL[name]}" if name in INSTALL else ""
    return f"external backend {name!r} cannot run here: {why}{hint}"


def require(name: str) -> Backend:
    """The backend called ``name``, ready to run, or a RelvmKernelError saying why not."""
    why = unavailable(name)
    if why is not None:
        raise RelvmKernelError(why)
    backend = lookup(name)
    assert backend is not None  # unavailable() said it is known
    return backend
