"""Compile the regions ``relvm.partition`` made, each with its external backend.

Every call of a function with a ``Compiler`` attribute becomes a call of an
:class:`~relvm.ops.external.ExternalOp` (the region's ops as data), and the backend's
``compile`` turns the region into its artifact (bytes, carried in the executable's ``extern``
section under the function's ``global_symbol``). The region functions then leave the module:
the VM calls each region as one kernel.

A backend that cannot run here (its library is missing) is an error naming it, unless the
caller asked for relvm's own kernels (``fallback=True``): then its regions are inlined back
into their callers and run as any other ops.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from ..backends import external
from ..errors import RelvmCompileError, RelvmError
from ..ir.nodes import Call, Constant, Function, GlobalVar, Module, Tuple, post_order
from ..ops.external import ExternalOp, make_external
from ..ops.fused import Step, step_values
from ..ops.registry import Op
from .partition import jsonable, tensor_info
from .rewrite import Rewriter


@dataclass(frozen=True)
class Artifact:
    """One compiled region: the backend that runs it and what its ``compile`` returned."""

    compiler: str
    data: bytes


def externalize(module: Module, fallback: bool = False,
                backends: dict[str, external.Backend] | None = None
                ) -> tuple[Module, dict[str, Artifact]]:
    """``module`` with its Compiler functions compiled and called as external ops, and the
    artifacts by symbol. ``backends`` (by name) compile in place of the registered ones of the
    same name (the objects a build was given as targets)."""
    regions = {name: fn for name, fn in module.functions.items() if fn.attrs.get("Compiler")}
    if not regions:
        return module, {}
    usable: dict[str, external.Backend | None] = {}
    for fn in regions.values():
        compiler = fn.attrs["Compiler"]
        if compiler in usable:
            continue
        why = external.unavailable(compiler)
        if why is not None and not fallback:
            raise RelvmCompileError(why + " (or build with external_fallback=True to run its "
                                    "regions on relvm's own kernels)")
        if why is not None:
            warnings.warn(why + "; its regions run on relvm's own kernels", RuntimeWarning,
                          stacklevel=4)
        usable[compiler] = None if why is not None else \
            (backends or {}).get(compiler) or external.lookup(compiler)
    artifacts: dict[str, Artifact] = {}
    functions = {}
    for name, fn in module.functions.items():
        if name in regions:
            continue
        body = _Externalize(regions, usable, artifacts)(fn.body)
        functions[name] = fn if body is fn.body else Function(
            fn.params, body, fn.ret_type, span=fn.span, attrs=fn.attrs)
    return Module(functions, module.source, module.io_names), artifacts


class _Externalize(Rewriter):
    def __init__(self, regions: dict[str, Function], usable: dict, artifacts: dict):
        super().__init__()
        self.regions = regions
        self.usable = usable
        self.artifacts = artifacts
        self.ops: dict[str, ExternalOp] = {}
        #: Rebuilt calls -> the typed calls they replace (rebuilt nodes are not typed yet).
        self.typed: dict[int, Call] = {}

    def rebuilt(self, old: Call, new: Call) -> Call:
        self.typed[id(new)] = old
        return new

    def rewrite_call(self, call: Call) -> Call:
        if not isinstance(call.op, GlobalVar) or call.op.name not in self.regions:
            return call
        fn = self.regions[call.op.name]
        backend = self.usable[fn.attrs["Compiler"]]
        if backend is None:
            return _inline(fn, call)
        op = self.ops.get(call.op.name)
        if op is None:
            op = self.ops[call.op.name] = self.compile(fn, self.typed.get(id(call), call),
                                                       backend)
        return Call(op, call.args, span=call.span)

    def compile(self, fn: Function, call: Call, backend: external.Backend) -> ExternalOp:
        symbol = fn.attrs["global_symbol"]
        steps, step_json, ref = [], [], {id(p): ("in", i) for i, p in enumerate(fn.params)}
        for node in post_order(fn.body):
            if isinstance(node, Call):
                if not isinstance(node.op, Op) or type(node.op) is not Op:
                    raise RelvmCompileError(f"region @{symbol} calls {node.op!r}: a region "
                                            "holds only primitive ops")
                steps.append(Step(node.op, node.attrs, tuple(ref[id(a)] for a in node.args)))
                ref[id(node)] = ("step", len(steps) - 1)
            elif not isinstance(node, (Tuple,)) and id(node) not in ref:
                raise RelvmCompileError(f"region @{symbol} holds a {type(node).__name__}: a "
                                        "region holds only primitive ops")
        leaves = fn.body.fields if isinstance(fn.body, Tuple) else (fn.body,)
        outputs = [ref[id(x)] for x in leaves]
        arg_types = [a.checked_type for a in call.args]
        types = step_values(steps, arg_types, lambda s, args: s.op.infer(s.attrs, *args))
        for s, t in zip(steps, types):
            step_json.append({"op": s.op.name, "attrs": jsonable(dict(s.attrs)),
                              "args": [list(r) for r in s.args],
                              "type": tensor_info(t).to_json()})
        region = external.Region(
            symbol, tuple(tensor_info(t) for t in arg_types), tuple(step_json),
            tuple(tuple(r) for r in outputs),
            tuple(isinstance(a, Constant) for a in call.args),
            tuple(a.data if isinstance(a, Constant) else None for a in call.args), fn)
        try:
            data = backend.compile(region)
        except RelvmError:
            raise
        except Exception as e:  # a backend's own bug: say whose
            raise RelvmCompileError(f"external backend {backend.name!r} failed to compile "
                                    f"region @{symbol}: {type(e).__name__}: {e}") from None
        if not isinstance(data, (bytes, bytearray)):
            raise RelvmCompileError(f"external backend {backend.name!r} compiled region "
                                    f"@{symbol} into {type(data).__name__}, not bytes")
        self.artifacts[symbol] = Artifact(backend.name, bytes(data))
        return make_external(backend.name, symbol, steps, outputs, len(call.args),
                             region.to_json())


def _inline(fn: Function, call: Call):
    """The region's body with its parameters replaced by the call's arguments."""
    value = {id(p): a for p, a in zip(fn.params, call.args)}

    class _Sub(Rewriter):
        def visit_Var(self, v):
            return value.get(id(v), v)

    return _Sub()(fn.body)
