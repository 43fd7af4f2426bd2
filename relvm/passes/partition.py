"""Partition a module into regions that external backends compile (``relvm.partition``).

Three steps, TVM's "bring your own codegen" flow in one pass:

1. **Match.** Backends are tried in the order given (priority): each claims, among the ops no
   earlier backend took, the chains its patterns match (``external.Pattern``: longer patterns
   first, as the backend lists them), each chain checked by the pattern's predicate.
2. **Merge.** A backend's matches that feed each other, or read the same value, are merged
   into regions, as few as possible, never making a cycle: two regions merge only when no path
   leaves one and comes back into the other through an op outside both (that op would have to
   run both before and after the merged region).
3. **Cost.** A region stays only when its backend finds it worth a boundary
   (``Backend.worth``, else :func:`default_worth`): a lone cheap op between two relvm regions
   is not (it would split relvm's own fusion and add a call, for no work saved).

Each region becomes a global function with ``Compiler="<backend>"`` and
``global_symbol="<name>"`` attributes, called from where its ops were; its parameters are the
values it reads (constants too: weights travel as arguments, so the runtime can tell them
apart and prepare them once). The result is ordinary IR, printed and parsed back like any.
Only ops outside ``if`` branches are partitioned (a region never straddles a branch).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Sequence

from ..backends import external
from ..backends.external import Backend, OpView, Region, TensorInfo
from ..errors import RelvmCompileError
from ..ir import dims as D
from ..ir.nodes import (Attrs, Call, Constant, Expr, Function, GlobalVar, If, Module, Tuple,
                        TupleGetItem, Var, children, post_order)
from ..ir.types import TensorType, map_type_dims
from ..ops.registry import Op
from .rewrite import Rewriter
from .type_infer import infer_module

#: A region is worth its boundary when its work is at least this many times the elements it
#: moves across it (see :func:`default_worth`).
WORK_PER_BOUNDARY_ELEMENT = 16
#: The value a symbolic dim takes when the cost model estimates work (a batch, a length).
NOMINAL_DIM = 8


def partition(module: Module, targets: Sequence[str | Backend]) -> Module:
    """Regions of ``module`` for the external backends ``targets``, as Compiler functions.

    Parameters
    ----------
    module : Module
        A typed module (:func:`relvm.parse`, ``from_onnx``).
    targets : sequence of str or Backend
        Backends by name (registered, or built in: ``"dnnl"``) or object, highest priority
        first.

    Returns
    -------
    Module
        ``@main`` calling ``@<backend>_<k>`` functions that carry ``Compiler`` and
        ``global_symbol`` attributes; ``relvm.build`` compiles each with its backend.

    Examples
    --------
    >>> part = relvm.partition(relvm.parse(text), ["dnnl"])
    >>> print(part)                      # def @dnnl_0(..., Compiler="dnnl", ...)
    >>> exe = relvm.build(part)
    """
    backends = [_backend(t) for t in targets]
    if any(f.checked_type is None for f in module.functions.values()):
        module = infer_module(module)
    taken = {f.attrs["global_symbol"] for f in module.functions.values() if f.attrs}
    names = _Names(set(module.functions) | taken)
    functions: dict[str, Function] = {}
    regions: dict[str, Function] = {}
    for name, fn in module.functions.items():
        if fn.attrs.get("Compiler"):
            functions[name] = fn
            continue
        functions[name] = _Partitioner(fn, backends, names, regions).run()
    ordered = dict(regions)
    ordered.update(functions)
    return infer_module(Module(ordered, module.source, module.io_names))


def _backend(target: str | Backend) -> Backend:
    if isinstance(target, Backend):
        return target
    backend = external.lookup(target) if isinstance(target, str) else None
    if backend is None:
        raise RelvmCompileError(f"unknown external backend {target!r}; relvm knows "
                                + (", ".join(external.registered()) or "none"))
    return backend


class _Names:
    def __init__(self, taken: set[str]):
        self.taken = taken

    def new(self, backend: str) -> str:
        for k in itertools.count():
            name = f"{backend}_{k}"
            if name not in self.taken:
                self.taken.add(name)
                return name
        raise AssertionError


# --- the cost model ------------------------------------------------------------------------------

def default_worth(region: Region) -> bool:
    """Whether a region is worth a boundary: it holds a product or conv, and its work is at
    least ``WORK_PER_BOUNDARY_ELEMENT`` times the elements it reads and writes (constants not
    counted: weights are prepared once)."""
    if not any(s["op"] in external.PRODUCTS for s in region.steps):
        return False
    m = external.measure(region, NOMINAL_DIM)
    return m.work >= WORK_PER_BOUNDARY_ELEMENT * m.edge


# --- describing IR as plain data -----------------------------------------------------------------

def dim_text(d: D.Dim) -> int | str:
    return d if isinstance(d, int) else str(d)


def tensor_info(t) -> TensorInfo | None:
    if not isinstance(t, TensorType):
        return None
    return TensorInfo(t.dtype, tuple(dim_text(d) for d in t.shape))


def op_view(call: Call) -> OpView:
    return OpView(call.op.name, dict(call.attrs),
                  tuple(tensor_info(a.checked_type) for a in call.args),
                  tensor_info(call.checked_type),
                  tuple(isinstance(a, Constant) for a in call.args))


def jsonable(v):
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    if isinstance(v, D.DimExpr):
        return str(v)
    return v


def region_of(name: str, nodes: list[Call], inputs: list[Expr], outputs: list[Call],
              function: Function | None = None) -> Region:
    """The plain-data description of region ``name`` (its ops in evaluation order)."""
    ref: dict[int, list] = {id(x): ["in", i] for i, x in enumerate(inputs)}
    steps = []
    for j, call in enumerate(nodes):
        steps.append({"op": call.op.name, "attrs": jsonable(dict(call.attrs)),
                      "args": [list(ref[id(a)]) for a in call.args],
                      "type": tensor_info(call.checked_type).to_json()})
        ref[id(call)] = ["step", j]
    constant = tuple(isinstance(x, Constant) for x in inputs)
    return Region(name, tuple(tensor_info(x.checked_type) for x in inputs),
                  tuple(steps), tuple(tuple(ref[id(o)]) for o in outputs), constant,
                  tuple(x.data if isinstance(x, Constant) else None for x in inputs), function)


# --- the partitioner -----------------------------------------------------------------------------

@dataclass(eq=False)
class _Group:
    backend: Backend
    nodes: list[Call] = field(default_factory=list)


class _Partitioner:
    def __init__(self, fn: Function, backends: list[Backend], names: _Names,
                 regions: dict[str, Function]):
        self.fn = fn
        self.backends = backends
        self.names = names
        self.regions = regions
        self.order = list(post_order(fn.body))
        self.index = {id(e): i for i, e in enumerate(self.order)}
        self.users: dict[int, list[Expr]] = {id(e): [] for e in self.order}
        for e in self.order:
            for c in children(e):
                self.users[id(c)].append(e)
        self.users[id(fn.body)].append(fn)  # the result is used by the caller
        self.branch = _in_branches(fn.body)
        self.group: dict[int, _Group] = {}

    def candidate(self, e: Expr) -> bool:
        return (isinstance(e, Call) and isinstance(e.op, Op) and type(e.op) is Op
                and id(e) not in self.branch and isinstance(e.checked_type, TensorType)
                and all(isinstance(a.checked_type, TensorType) for a in e.args))

    def run(self) -> Function:
        for backend in self.backends:
            for pattern in backend.patterns:
                for e in self.order:
                    if self.candidate(e) and id(e) not in self.group:
                        chain = self.match(pattern, e)
                        if chain:
                            g = _Group(backend, chain)
                            for c in chain:
                                self.group[id(c)] = g
        groups = self.merge()
        kept = []
        for g in groups:
            inputs, outputs = self.boundary(g)
            region = region_of("", g.nodes, inputs, outputs)
            worth = g.backend.worth or default_worth
            if worth(region):
                kept.append((g, inputs, outputs))
        if not kept:
            return self.fn
        return _Outline(self, kept).function()

    def match(self, pattern, start: Call) -> list[Call] | None:
        steps = [(frozenset(s.rstrip("?").split("|")), s.endswith("?")) for s in pattern.ops]
        if start.op.name not in steps[0][0]:
            return None
        chain, at = [start], [0]  # at[k]: the pattern step chain[k] matched
        for s, (names, optional) in enumerate(steps[1:], 1):
            users = self.users[id(chain[-1])]
            nxt = users[0] if len(users) == 1 else None
            if (nxt is not None and self.candidate(nxt) and id(nxt) not in self.group
                    and nxt.op.name in names):
                chain.append(nxt)
                at.append(s)
            elif not optional:
                return None
        # The longest match whose predicate holds: a conv's epilogue may end before an op the
        # predicate refuses (squeeze-excite's multiply by the whole feature map).
        for k in range(len(chain), 0, -1):
            if not all(optional for _, optional in steps[at[k - 1] + 1:]):
                break
            if pattern.check is None or pattern.check([op_view(c) for c in chain[:k]]):
                return chain[:k]
        return None

    # --- merging ---------------------------------------------------------------------------
    def merge(self) -> list[_Group]:
        """Merge groups of one backend that feed each other or share an input, in order,
        whenever the union stays convex."""
        changed = True
        while changed:
            changed = False
            for e in self.order:
                g = self.group.get(id(e))
                if g is None:
                    continue
                neighbours = [u for u in self.users[id(e)] if id(u) in self.group]
                # Siblings read one value; a weight shared by distant layers is no reason.
                neighbours += [s for a in e.args if not isinstance(a, Constant)
                               for s in self.users[id(a)] if id(s) in self.group]
                for other in neighbours:
                    h = self.group[id(other)]
                    if h is not g and h.backend is g.backend and self.convex(g, h):
                        self.join(g, h)
                        changed = True
        seen, out = set(), []
        for e in self.order:
            g = self.group.get(id(e))
            if g is not None and id(g) not in seen:
                seen.add(id(g))
                g.nodes.sort(key=lambda c: self.index[id(c)])
                out.append(g)
        return out

    def join(self, g: _Group, h: _Group) -> None:
        for c in h.nodes:
            self.group[id(c)] = g
        g.nodes += h.nodes

    def convex(self, g: _Group, h: _Group) -> bool:
        """No path leaves g ∪ h and re-enters it."""
        inside = {id(c) for c in g.nodes} | {id(c) for c in h.nodes}
        last = max(self.index[i] for i in inside)
        stack = [u for c in itertools.chain(g.nodes, h.nodes) for u in self.users[id(c)]
                 if id(u) not in inside and self.index.get(id(u), last + 1) < last]
        seen: set[int] = set()
        while stack:
            x = stack.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            for u in self.users[id(x)]:
                if id(u) in inside:
                    return False
                if self.index.get(id(u), last + 1) < last:
                    stack.append(u)
        return True

    def boundary(self, g: _Group) -> tuple[list[Expr], list[Call]]:
        """The values a group reads (in order of first use) and the ones used outside it."""
        inside = {id(c) for c in g.nodes}
        inputs: dict[int, Expr] = {}
        for c in g.nodes:
            for a in c.args:
                if id(a) not in inside:
                    inputs.setdefault(id(a), a)
        outputs = [c for c in g.nodes if any(id(u) not in inside for u in self.users[id(c)])]
        return list(inputs.values()), outputs


def _in_branches(body: Expr) -> set[int]:
    """Nodes only an ``if``'s branches use (regions stay out of them): those the function
    reaches only through a branch."""
    outside: set[int] = set()
    stack = [body]
    while stack:
        e = stack.pop()
        if id(e) in outside:
            continue
        outside.add(id(e))
        stack.extend((e.cond,) if isinstance(e, If) else children(e))
    return {id(e) for e in post_order(body) if id(e) not in outside}


class _Outline(Rewriter):
    """``fn`` with each kept region replaced by a call of its own Compiler function."""

    def __init__(self, part: _Partitioner, kept: list):
        super().__init__()
        self.part = part
        self.region = {}
        for g, inputs, outputs in kept:
            for c in g.nodes:
                self.region[id(c)] = (g, inputs, outputs)
        self.calls: dict[int, Expr] = {}

    def function(self) -> Function:
        fn = self.part.fn
        body = self(fn.body)
        return Function(fn.params, body, fn.ret_type, span=fn.span, attrs=fn.attrs)

    def visit_Call(self, call: Call) -> Expr:
        entry = self.region.get(id(call))
        if entry is None:
            return super().visit_Call(call)
        g, inputs, outputs = entry
        if call not in outputs:
            return call  # inside the region: reached only through its outputs
        made = self.calls.get(id(g))
        if made is None:
            made = self.calls[id(g)] = self.outline(g, inputs, outputs)
        return made if len(outputs) == 1 else TupleGetItem(made, outputs.index(call))

    def outline(self, g: _Group, inputs: list[Expr], outputs: list[Call]) -> Expr:
        name = self.part.names.new(g.backend.name)
        generic = _Generic()
        params = tuple(Var(f"p{i}", generic.type(x.checked_type)) for i, x in enumerate(inputs))
        value: dict[int, Expr] = {id(x): p for x, p in zip(inputs, params)}
        for c in g.nodes:
            value[id(c)] = Call(c.op, tuple(value[id(a)] for a in c.args), c.attrs, span=c.span)
        body = value[id(outputs[0])] if len(outputs) == 1 else \
            Tuple(tuple(value[id(o)] for o in outputs))
        self.part.regions[name] = Function(
            params, body, None, attrs=Attrs({"Compiler": g.backend.name, "global_symbol": name}))
        return Call(GlobalVar(name), tuple(self(x) for x in inputs))


class _Generic:
    """Parameter types of a region function: the caller's named symbols as they are, each
    other dim expression a named symbol of its own (the same expression, the same symbol), so
    the function is generic in every dim its caller computes and keeps their equalities."""

    def __init__(self):
        self.names: dict[str, D.Dim] = {}

    def type(self, t):
        return map_type_dims(t, self.dim)

    def dim(self, d: D.Dim) -> D.Dim:
        if isinstance(d, int):
            return d
        if isinstance(d, D.DimExpr) and len(d.terms) == 1:
            (mono, coeff), = d.terms
            if coeff == 1 and len(mono) == 1 and isinstance(mono[0], D.Sym) \
                    and not mono[0].anonymous:
                return d
        key = D.dim_key(d)
        if key not in self.names:
            self.names[key] = D.as_expr(D.Sym(f"r{len(self.names)}_"))
        return self.names[key]
