"""The compiler: typed IR -> Executable (``relvm.build``)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from .. import dtypes
from .._stack import run_with_deep_stack
from ..errors import RelvmCompileError, unknown_dims_message
from ..ir import dims as D
from ..ir.limits import MAX_DEPTH, MAX_TENSOR_BYTES, deepest_node
from ..ir.nodes import Module
from ..ir.types import TensorType, TupleType
from ..runtime.executable import Executable, ExternalArtifact
from .lower import FunctionLowering, Program
from .memplan import plan_and_assemble

#: Build stages and their times, at INFO (``relvm -v`` shows them).
log = logging.getLogger("relvm.build")

BACKENDS = ("numpy", "c")
NO_COMPILER_WARNING = ("relvm: no C compiler (cc or gcc) on PATH: fused kernels run step by step "
                       "on relvm's installed kernels, correct but slower; install one (or set "
                       "$CC) to generate them")
#: Backends whose fused kernels are generated as C when the model is built.
CODEGEN_BACKENDS = ("c",)


def build(module: Module, params: Mapping[str, Any] | None = None, *,
          upper_bounds: Mapping[str, int] | None = None, backend: str = "c",
          fuse: bool = True, channels_last: bool = True,
          targets: Sequence[Any] = (), external_fallback: bool = False) -> Executable:
    """Compile a module into an :class:`Executable` that runs for every value of its dims.

    Parameters
    ----------
    module : Module
        From :func:`relvm.parse` (type inference runs again here if needed).
    params : mapping of str to array_like, optional
        Values for parameters of ``@main`` by name (the weights); they become constants and
        leave the signature, as ``relay.build(..., params=...)`` did.
    upper_bounds : mapping of str to int, optional
        Largest value of named dims, e.g. ``{"n": 64}``: memory is then planned into one arena
        allocated once per VM, and an input over a bound is an error.
    backend : str
        Where kernels come from: ``"c"`` (compiled C kernels and OpenBLAS, the default; fused
        kernels are generated as C and carried by the executable) or ``"numpy"`` (the ops'
        NumPy references: every op and dtype, for testing).
    fuse : bool
        Fuse elementwise chains and epilogues into their producers (default). ``False`` keeps
        one kernel per op: results are the same, ``exe.bytecode`` shows every op.
    channels_last : bool
        Run the float32 convs of regions with depthwise convs (mobile CNNs) on NHWC data, with
        transposes at the regions' edges (default; ``passes/layout.py``). ``False`` keeps every
        conv NCHW, as the model has it: results are the same up to the order of float sums.
    targets : sequence of str or Backend, optional
        External backends (``"dnnl"``, or ones registered with
        ``relvm.backends.external.register``), highest priority first: ``relvm.partition``
        runs after constants are folded and each region it keeps is compiled by its backend.
        A module partitioned beforehand needs no ``targets``: its ``Compiler`` functions are
        compiled either way.
    external_fallback : bool
        When a backend cannot run here (its library is missing): False (default) refuses
        with an error naming it; True runs its regions on relvm's own kernels instead.

    Returns
    -------
    Executable

    Examples
    --------
    >>> exe = relvm.build(relvm.parse(text), params={"w": w}, upper_bounds={"n": 64})
    >>> print(exe.bytecode)
    """
    from ..passes.type_infer import infer_module

    if backend not in BACKENDS:
        raise RelvmCompileError(f"unknown backend {backend!r}; relvm has {', '.join(BACKENDS)}")
    bounds = _check_bounds(upper_bounds)
    _check_depth(module)
    if any(f.checked_type is None for f in module.functions.values()):
        infer_module(module)
    _check_bound_names(module, bounds)
    bound = _bind_params(module, dict(params or {}))
    return run_with_deep_stack(lambda: _compile(module, bound, bounds, backend, fuse,
                                                channels_last, tuple(targets),
                                                external_fallback))


def bind_weights(module: Module, params: Mapping[str, Any]) -> Module:
    """``module`` with the named parameters of ``@main`` bound as constants (typed)."""
    from ..passes.bind_params import bind_params
    from ..passes.type_infer import infer_module

    if any(f.checked_type is None for f in module.functions.values()):
        infer_module(module)
    return infer_module(bind_params(module, _bind_params(module, dict(params))))


def _check_backend_has_kernels(backend: str, program: Program) -> None:
    """Refuse at build time a program the backend cannot run, naming every missing kernel."""
    if backend != "c":
        return
    from ..backends import c

    missing = sorted({f"{k.op if k.op != 'fused' else k.name}({', '.join(k.inputs)})"
                      for k in program.kernels if k.op != "external" and not c.supports(k)})
    if missing:
        raise RelvmCompileError("the c backend has no kernel for " + "; ".join(missing)
                                + ' (build with backend="numpy" to run them on NumPy)')


def _check_depth(module: Module) -> None:
    """Refuse a module nested deeper than the compiler's stack is sized for (``MAX_DEPTH``);
    the parser refuses such text, but a module may be built another way (ONNX import)."""
    for name, fn in module.functions.items():
        if deepest_node(fn.body, MAX_DEPTH) is not None:
            raise RelvmCompileError(f"@{name} nests expressions more than {MAX_DEPTH} deep (a "
                                    "chain of lets or calls; relvm's limit)")


def _check_bounds(upper_bounds: Mapping[str, int] | None) -> dict[str, int]:
    out = {}
    for k, v in (upper_bounds or {}).items():
        if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, np.integer)) \
                or v < 0:
            raise RelvmCompileError(f"upper_bounds must map dim names to non-negative ints, "
                                    f"got {k!r}: {v!r}")
        if v > MAX_TENSOR_BYTES:
            raise RelvmCompileError(f"upper_bounds: {k}={v} is over relvm's limit for a dim "
                                    "(2**48)")
        out[k] = int(v)
    return out


def input_dim_names(module: Module, func: str = "main") -> list[str]:
    """The named dims of ``@func``'s parameters, in order of first appearance."""
    names: list[str] = []
    types = [p.checked_type or p.type_annotation for p in module.functions[func].params]
    while types:
        t = types.pop(0)
        if isinstance(t, TupleType):
            types[:0] = list(t.fields)
        elif isinstance(t, TensorType):
            for d in t.shape:
                for s in sorted(D.free_symbols(d), key=lambda s: s.name):
                    if not s.anonymous and s.name not in names:
                        names.append(s.name)
    return names


def _check_bound_names(module: Module, bounds: dict[str, int]) -> None:
    """Refuse upper bounds for dims @main's inputs do not have (a misspelled name)."""
    if not bounds or "main" not in module.functions:
        return
    known = input_dim_names(module)
    for name in bounds:
        if name not in known:
            raise RelvmCompileError(unknown_dims_message("upper_bounds", "main", name, known))


def _bind_params(module: Module, params: dict[str, Any]) -> dict[int, np.ndarray]:
    """Check ``params`` against @main's parameters: id(Var) -> array."""
    if not params:
        return {}
    if "main" not in module.functions:
        raise RelvmCompileError("params bind parameters of @main, but the module has no @main")
    main = module.functions["main"]
    by_name = {p.name: p for p in main.params}
    bound: dict[int, np.ndarray] = {}
    for name, value in params.items():
        var = by_name.get(name)
        if var is None:
            raise RelvmCompileError(f"params: @main has no parameter %{name}; it has "
                                    + ", ".join("%" + p.name for p in main.params))
        t = var.checked_type
        arr = np.asarray(value)
        if not isinstance(t, TensorType):
            raise RelvmCompileError(f"params: %{name} has type {t}; only tensors can be bound")
        if dtypes.from_numpy(arr.dtype) != t.dtype:
            raise RelvmCompileError(f"params: %{name} must have dtype {t.dtype}, got {arr.dtype}")
        if arr.ndim != t.ndim or any(isinstance(d, int) and d != s for d, s in zip(t.shape, arr.shape)):
            raise RelvmCompileError(f"params: %{name} must have shape {D.shape_str(t.shape)}, "
                                    f"got {arr.shape}")
        if any(not isinstance(d, int) for d in t.shape):
            raise RelvmCompileError(f"params: %{name} has symbolic shape {D.shape_str(t.shape)}; "
                                    f"only parameters of static shape can be bound")
        bound[id(var)] = arr
    return bound


@contextlib.contextmanager
def stage(name: str):
    """Log a build stage and how long it took."""
    start = time.perf_counter()
    yield
    log.info("%s: %.1f ms", name, (time.perf_counter() - start) * 1e3)


def optimize(module: Module, bound: dict[int, np.ndarray], fuse: bool,
             channels_last: bool = False, backend: str = "c", targets: tuple = (),
             external_fallback: bool = False, artifacts: dict | None = None) -> Module:
    """The build-time passes, in order: bind params, fold, (partition for ``targets`` and
    compile the regions with their external backends, into ``artifacts``,) (channels last,)
    float16 in float32 where the C backend has no float16 kernel, fuse. Returns a typed
    module."""
    from ..passes import fold
    from ..passes.bind_params import bind_params
    from ..passes.fuse import fuse as fuse_ops
    from ..passes.type_infer import infer_module

    with stage(f"bind {len(bound)} params"):
        module = infer_module(bind_params(module, bound))
    with stage("fold constants and batch norms, simplify"):
        module = infer_module(fold.fold_constants(fold.fold_batch_norm(module)))
        # After folding, so that weights made by folding (a transposed constant) count too.
        module = infer_module(fold.simplify(module))
    if targets:
        from ..passes.partition import partition

        _register(targets)
        with stage(f"partition for {', '.join(map(str, targets))}"):
            module = partition(module, list(targets))
    if any(f.attrs.get("Compiler") for f in module.functions.values()):
        from ..passes.external import externalize

        with stage("compile external regions"):
            given = {t.name: t for t in targets if not isinstance(t, str)}
            module, made = externalize(module, external_fallback, given)
            module = infer_module(module)
        if artifacts is not None:
            artifacts.update(made)
    if channels_last:
        from ..passes.layout import channels_last as to_channels_last

        with stage("convs to channels last"):
            module = infer_module(to_channels_last(module))
    if backend == "c":
        from ..passes.widen import widen_float16

        with stage("float16 ops without a C kernel in float32"):
            module = infer_module(widen_float16(module))
    if fuse:
        with stage("fuse"):
            module = infer_module(fuse_ops(module))
    return module


def _register(targets: tuple) -> None:
    """Register each Backend object given as a target under its name, unless a backend of
    that name is known: a VM finds a region's runtime by the name its kernel entry records.
    (A backend that cannot run here is refused, or its regions inlined back, by
    ``passes/external.py``.)"""
    from ..backends import external

    for t in targets:
        if isinstance(t, external.Backend) and external.lookup(t.name) is None:
            external.register(t)


def _compile(module: Module, bound: dict[int, np.ndarray], bounds: dict[str, int],
             backend: str, fuse: bool, channels_last: bool, targets: tuple = (),
             external_fallback: bool = False) -> Executable:
    artifacts: dict = {}
    module = optimize(module, bound, fuse, channels_last, backend, targets, external_fallback,
                      artifacts)
    program = Program(codegen=backend in CODEGEN_BACKENDS)
    for i, name in enumerate(module.functions):
        program.function_index[name] = i
    lowered = []
    # Upper bounds name @main's dims: other functions have their own symbols (which may share a
    # name), so they keep dynamic pooled storage.
    with stage("lower to registers"):
        for name, fn in module.functions.items():
            lowered.append(FunctionLowering(program, name, fn, list(fn.params))
                           .run(bounds if name == "main" else {}))
        while program.pending:  # closures lifted while lowering (and closures inside them)
            name, fn, captured = program.pending.pop(0)
            lowered.append(FunctionLowering(program, name, fn, captured + list(fn.params))
                           .run({}))
    _check_backend_has_kernels(backend, program)
    order = sorted(lowered, key=lambda lo: program.function_index[lo.name])
    single = {program.function_index[lo.name]: isinstance(lo.ret_type, TensorType)
              for lo in lowered}
    with stage("plan memory and assemble"):
        functions = [plan_and_assemble(lo, program, bounds if lo.name == "main" else {},
                                       single) for lo in order]
    _bind_through_calls(functions)
    _keep_io_names(module, functions)
    library, arch = None, ""
    if program.fused_sources:
        from ..runtime.file.format import machine_tag
        from ..backends.fusedgen import PRELUDE
        from ..backends.toolchain import compile_library, has_compiler

        if has_compiler():
            with stage(f"compile {len(program.fused_sources)} generated kernels"):
                library = compile_library(PRELUDE + "".join(program.fused_sources))
            arch = machine_tag()
        else:  # the fused kernels' steps run on the installed library kernels instead
            warnings.warn(NO_COMPILER_WARNING, RuntimeWarning, stacklevel=3)
    return Executable(functions, program.constants, program.kernels, program.dim_programs,
                      upper_bounds=bounds, backend=backend, kernel_library=library,
                      kernel_arch=arch,
                      externals={s: ExternalArtifact(a.compiler, a.data)
                                 for s, a in artifacts.items()})


def _keep_io_names(module: Module, functions: list) -> None:
    """The model's own input and output names (``module.io_names``) onto the VM functions,
    for the parameters that are still inputs after ``params`` were bound."""
    for fn in functions:
        names = module.io_names.get(fn.name)
        if names is None:
            continue
        fn.input_names = tuple(names.input_name(p.name) for p in fn.params)
        if len(names.outputs) == len(fn.outputs):
            fn.output_names = tuple(names.outputs)


def _bind_through_calls(functions: list) -> None:
    """A result produced by a call is written in place only when the callee's result is:
    drop the call pcs of callees with nothing to bind (until nothing changes: chains)."""
    from ..runtime.bytecode import spec_of

    changed = True
    while changed:
        changed = False
        for fn in functions:
            outputs = []
            for o in fn.outputs:
                pcs = tuple(p for p in o.alloc_pcs if not spec_of(fn.instructions[p]).has("call")
                            or functions[fn.instructions[p].func].outputs[0].alloc_pcs)
                changed |= pcs != o.alloc_pcs
                outputs.append(dataclasses.replace(o, alloc_pcs=pcs))
            fn.outputs = tuple(outputs)


__all__ = ["build"]
