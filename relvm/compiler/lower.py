"""Lower typed IR to register bytecode, one VM function at a time.

Every IR node gets a register (A-normal form, made during the walk): shared nodes are lowered
once per scope; an ``if`` branch is a scope of its own, so nothing computed inside it is reused
after it. Primitive ops become destination-passing kernel calls: their outputs are allocated
first (AllocTensor with dims read from the frame's dims vector), then InvokePacked. Reshape-like
ops become ReshapeTensor views. Function literals are lambda-lifted into VM functions that take
their captured variables first; calls of globals become Invoke, calls of closures InvokeClosure.

Memory planning (``memplan.py``) runs afterwards on the finished instruction list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import RelvmCompileError
from ..ir import dims as D
from ..ir.nodes import (Call, Constant, Expr, Function, GlobalVar, If, Let, Tuple, TupleGetItem,
                        Var, post_order)
from ..ir.types import FuncType, ListType, TensorType, TupleType, Type, tensor_types
from ..ops.external import ExternalOp
from ..ops.fused import FusedOp
from ..ops.lists import LIST_OPS
from ..ops.registry import OUT_FUSABLE, Op
from ..runtime.bytecode import make, spec_of
from ..runtime.executable import KernelEntry, ParamSig, TensorSig
from .dimtable import DimTable

#: Ops that only change how a tensor's elements are indexed: lowered to ReshapeTensor views.
RESHAPE_OPS = frozenset({"reshape", "reshape_like", "squeeze", "expand_dims", "nn.batch_flatten",
                         "dyn.reshape"})

ALIGN = 64
#: The symbol of a fused kernel's C while its identity is decided (replaced by its own name).
PLAN_SYMBOL = "relvm_fused_PLAN"


@dataclass
class Program:
    """What the lowering of a whole module accumulates across functions."""

    constants: list[np.ndarray] = field(default_factory=list)
    constant_index: dict[int, int] = field(default_factory=dict)
    kernels: list[KernelEntry] = field(default_factory=list)
    kernel_index: dict[tuple, int] = field(default_factory=dict)
    dim_programs: list[tuple] = field(default_factory=list)
    function_index: dict[str, int] = field(default_factory=dict)
    #: Lifted closures waiting to be lowered: (name, Function, captured Vars).
    pending: list[tuple[str, Function, list[Var]]] = field(default_factory=list)
    lifted: dict[int, int] = field(default_factory=dict)  # id(Function) -> function index
    #: Generate C for fused kernels (backends that run generated code); their sources.
    codegen: bool = False
    fused_sources: list[str] = field(default_factory=list)

    def constant(self, key: int, value: np.ndarray) -> int:
        if key not in self.constant_index:
            self.constant_index[key] = len(self.constants)
            self.constants.append(np.asarray(value, order="C"))
        return self.constant_index[key]

    def kernel(self, op: Op, attrs: dict, inputs: list[TensorType], outputs: list[TensorType],
               groups: tuple[int, ...], call: Call | None = None) -> int:
        """The index of the kernel entry for ``op`` on tensors of these types, made once.

        A kernel's identity is everything its code depends on: op, attributes, the dtypes and
        ranks of its flattened arguments and, for a generated fused kernel, its loop plan and
        C source (two groups with the same steps but other broadcasts or scalar positions get
        two kernels). Library kernels adapt to the shapes they get at run time.
        """
        plan: dict = {}
        if isinstance(op, ExternalOp):
            kind, attrs = "external", {"compiler": op.compiler, "symbol": op.symbol,
                                       "region": op.region}
        elif isinstance(op, FusedOp):
            kind, attrs = "fused", {"steps": op.steps_json()}
            if self.codegen and call is not None:
                plan = self.fused_plan(op, call)
        else:
            kind, attrs = op.name, _jsonable(attrs)
        in_dtypes = tuple(t.dtype for t in inputs)
        out_dtypes = tuple(t.dtype for t in outputs)
        in_ranks = tuple(t.ndim for t in inputs)
        out_ranks = tuple(t.ndim for t in outputs)
        key = (kind, op.name, _freeze(attrs), in_dtypes, out_dtypes, in_ranks, out_ranks, groups,
               _freeze(plan))
        if key not in self.kernel_index:
            index = self.kernel_index[key] = len(self.kernels)
            if plan:
                symbol = f"relvm_fused_{index}"
                self.fused_sources.append(plan.pop("source").replace(PLAN_SYMBOL, symbol))
                attrs = dict(attrs, plan=dict(plan, symbol=symbol))
            self.kernels.append(KernelEntry(op.name, kind, attrs, in_dtypes, out_dtypes, groups,
                                            in_ranks, out_ranks))
        return self.kernel_index[key]

    def fused_plan(self, op: FusedOp, call: Call) -> dict:
        """The generated C of a fused kernel and its loop plan (``symbol`` a placeholder), or
        ``{}`` if the generator lacks an op (the backend then runs the steps one kernel at a
        time)."""
        from .codegen_c import CannotGenerate, plan_fused

        in_types = [a.checked_type for a in call.args]
        first = op.steps[0]
        anchor = None
        if first.op.pattern == OUT_FUSABLE:
            anchor = first.op.infer(first.attrs, *[in_types[i] for _, i in first.args])
        try:
            plan = plan_fused(PLAN_SYMBOL, op.steps_json(), in_types, call.checked_type, anchor)
        except CannotGenerate:
            return {}
        return dict(plan.to_json(), source=plan.source)

    def dim_program(self, statements: list[tuple]) -> int:
        self.dim_programs.append(tuple(statements))
        return len(self.dim_programs) - 1


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict) or hasattr(v, "items"):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


@dataclass
class Lowered:
    """One lowered VM function, before memory planning and assembly."""

    name: str
    params: list[ParamSig]
    prologue: list[tuple]
    body: list[tuple]
    num_regs: int
    dims: DimTable
    result_reg: int
    ret_type: Type
    #: symbols the prologue binds from the inputs
    entry_symbols: set
    #: body pcs of AllocTensor instructions whose tensor is a fresh kernel output
    allocs: dict[int, Any] = field(default_factory=dict)


class FunctionLowering:
    """Lowers one function (global or lifted closure) into a :class:`Lowered`."""

    def __init__(self, program: Program, name: str, func: Function, params: list[Var]):
        self.program = program
        self.name = name
        self.func = func
        self.params = params
        self.code: list[tuple] = []
        self.num_regs = 0
        self.dims = DimTable(name)
        self._memo: list[dict[int, int]] = [{}]
        self._env: list[dict[int, int]] = [{}]
        self.allocs: dict[int, Any] = {}  # pc -> size Dim (bytes) of fresh kernel outputs
        #: symbol key -> where the prologue reads it ("input %x dim 0"), for error messages
        self.origins: dict[str, str] = {}
        #: symbols the prologue binds; checks over only these run in the prologue
        self.entry_symbols: set = set()
        #: checks of assumptions over entry symbols, appended to the prologue
        self.entry_checks: list[tuple] = []
        self.checked: set[tuple] = set()
        #: register -> the field registers of the tuple AllocADT made in it
        self.tuple_fields: dict[int, tuple[int, ...]] = {}

    # --- registers, scopes ---------------------------------------------------------------------
    def reg(self) -> int:
        self.num_regs += 1
        return self.num_regs - 1

    def emit(self, name: str, *fields, **named) -> int:
        self.code.append(make(name, *fields, **named))
        return len(self.code) - 1

    def lookup(self, scopes: list[dict], key: int) -> int | None:
        for scope in reversed(scopes):
            if key in scope:
                return scope[key]
        return None

    def push(self) -> None:
        self._memo.append({})
        self._env.append({})
        self.dims.push()

    def pop(self) -> None:
        self._memo.pop()
        self._env.pop()
        self.dims.pop()

    # --- entry ---------------------------------------------------------------------------------
    def run(self, upper_bounds: dict[str, int]) -> Lowered:
        param_regs = [self.reg() for _ in self.params]
        for v, r in zip(self.params, param_regs):
            self._env[0][id(v)] = r
        prologue = self.prologue(param_regs, upper_bounds)
        entry_symbols = self.entry_symbols = set(self.dims.symbols)
        result = self.lower(self.func.body)
        self.check_assumed(self.func, self.func_description())
        if self.entry_checks:  # into the prologue's dim program, or one of their own
            if prologue and spec_of(prologue[-1]).has("dims"):
                k = prologue[-1].prog
                self.program.dim_programs[k] += tuple(self.entry_checks)
            else:
                prologue.append(make("ComputeDims", self.program.dim_program(self.entry_checks),
                                     ()))
        self.emit("Ret", result)
        ret_type = self.func.checked_type.ret if isinstance(self.func.checked_type, FuncType) \
            else self.func.body.checked_type
        return Lowered(self.name, [self.param_sig(v) for v in self.params], prologue, self.code,
                       self.num_regs, self.dims, result, ret_type, entry_symbols, self.allocs)

    def param_sig(self, v: Var) -> ParamSig:
        t = v.checked_type
        if isinstance(t, ListType):
            elem = TensorSig(t.elem.dtype, None if not t.ranked else tuple(
                d if isinstance(d, int) else "?" for d in t.elem.shape))
            return ParamSig(v.name, str(t), (elem,), is_list=True)
        tensors = tuple(TensorSig(tt.dtype, tuple(d if isinstance(d, int) else D.dim_str(d)
                                                  for d in tt.shape))
                        for tt in tensor_types(t))
        return ParamSig(v.name, str(t), tensors, isinstance(t, TupleType))

    def prologue(self, param_regs: list[int], upper_bounds: dict[str, int]) -> list[tuple]:
        """GetFields for tuple parameters, then one ComputeDims binding and checking symbols."""
        code: list[tuple] = []
        leaves: list[tuple[int, TensorType, str]] = []  # (register, type, description)
        for v, r in zip(self.params, param_regs):
            t = v.checked_type
            if isinstance(t, TensorType):
                leaves.append((r, t, f"input %{v.name}"))
            elif isinstance(t, TupleType):
                for path, tt in _tuple_leaves(t):
                    reg = r
                    for i in path:
                        nxt = self.reg()
                        code.append(make("GetField", nxt, reg, i))
                        reg = nxt
                    leaves.append((reg, tt, f"input %{v.name}.{'.'.join(map(str, path))}"))
        statements = self.bind_shapes(leaves, upper_bounds)
        if statements:
            args = tuple(r for r, _, _ in leaves)
            code.append(make("ComputeDims", self.program.dim_program(statements), args))
        return code

    def bind_shapes(self, leaves: list[tuple[int, TensorType, str]],
                    upper_bounds: dict[str, int] | None = None,
                    arg_base: int = 0, node: Expr | None = None) -> list[tuple]:
        """Statements binding the symbols of ``leaves``' shapes (args numbered in order)."""
        statements: list[tuple] = []
        origin: dict[str, str] = {}
        compound: list[tuple[int, int, D.Dim, str]] = []
        for arg, (_, t, what) in enumerate(leaves, start=arg_base):
            for axis, d in enumerate(t.shape):
                if isinstance(d, int):
                    continue
                shape = ("shape", arg, axis)
                sym, coeff, const = _linear(d)
                if sym is None:
                    compound.append((arg, axis, d, what))
                    continue
                if not self.dims.knows(sym):
                    slot = self.dims.new_slot(D.as_expr(sym))
                    value = shape if (coeff, const) == (1, 0) else \
                        ("floordiv", ("add", shape, ("const", -const)), ("const", coeff))
                    statements.append(("set", slot, value))
                    origin[sym.key] = self.origins[sym.key] = f"{what} dim {axis}"
                    if (coeff, const) != (1, 0):
                        statements.append(("check", shape, self.dims.expr(d),
                                           f"{what} dim {axis} is {{a}}, which is not "
                                           f"{D.dim_str(d)} for any {sym.text()}"))
                    bound = (upper_bounds or {}).get(sym.name) if not sym.anonymous else None
                    if bound is not None:
                        statements.append(("bound", ("slot", slot), bound,
                                           f"{what} dim {axis}: {sym.name}={{value}} exceeds "
                                           f"the upper bound {sym.name} <= {{limit}} the "
                                           f"executable was built with"))
                    continue
                src = origin.get(sym.key, "an earlier dim")
                statements.append(("check", shape, self.dims.expr(d),
                                   f"{what} dim {axis} is {{a}}, but {D.dim_str(d)} is {{b}} "
                                   f"(from {src})"))
        for arg, axis, d, what in compound:
            missing = [s for s in D.free_symbols(d) if not self.dims.knows(s)]
            if missing and node is not None:
                # A result's dim over symbols nothing else determines: what the program
                # needs is this dim's value, read from the result itself.
                statements.append(("set", self.dims.new_slot(d), ("shape", arg, axis)))
                continue
            if missing:
                raise RelvmCompileError(
                    f"@{self.name}: {what} dim {axis} is {D.dim_str(d)}, which does not "
                    f"determine {', '.join(s.text() for s in missing)}; declare a dim that is "
                    f"exactly {missing[0].text()} (or a multiple of it plus a constant)")
            statements.append(("check", ("shape", arg, axis), self.dims.expr(d),
                               f"{what} dim {axis} is {{a}}, expected {D.dim_str(d)} = {{b}}"))
        return statements

    # --- assumptions -------------------------------------------------------------------------
    def check_assumed(self, node: Expr, what: str) -> None:
        """Check at run time what type inference assumed at ``node`` without proof (``k``
        equals ``16``; ``n`` broadcasts against ``4``), before anything relies on it.

        Checks over the entry's own symbols, outside any branch, join the prologue: a failure
        there is the caller's (a RelvmInputError naming the input and dim). A dim the frame
        never computes cannot be checked here; the kernel's own operand check covers it.
        """
        statements = []
        entry_only = len(self._memo) == 1
        for kind, a, b in node.assumed:
            if isinstance(a, int) and kind != "le":  # the message names the run-time dim first
                a, b = b, a
            symbols = D.free_symbols(a) | D.free_symbols(b)
            if not all(self.dims.knows(s) for s in symbols):
                continue
            tag = D.ASSUMPTION_STATEMENTS[kind]
            key = (tag, D.dim_key(a), D.dim_key(b))
            if key in self.checked:
                continue
            self.checked.add(key)
            # From symbols only: a derived dim's slot may be computed after the check runs.
            statement = (tag, self.dims.expr_from_symbols(a), self.dims.expr_from_symbols(b),
                         self.assumption_message(kind, a, b, what))
            if entry_only and symbols <= self.entry_symbols:
                self.entry_checks.append(statement)
            else:
                statements.append(statement)
        self.flush(statements)

    def assumption_message(self, kind: str, a: D.Dim, b: D.Dim, what: str) -> str:
        def describe(d: D.Dim, value: str) -> str:
            if isinstance(d, int):
                return str(d)
            text = _short_dim(d).replace("{", "{{").replace("}", "}}")
            sym, coeff, const = _linear(d)
            if sym is not None and (coeff, const) == (1, 0) and sym.key in self.origins:
                return f"{self.origins[sym.key]} ({text})"
            known = [f"{s.text()} is {self.origins[s.key]}"
                     for s in sorted(D.free_symbols(d), key=lambda s: s.text())
                     if s.key in self.origins]
            return f"{text} = {value}" + (f" ({', '.join(known)})" if known else "")
        if kind == "le":  # a bound on a run-time dim: say what it is and the least it needs
            least = describe(b, "{b}")
            most = str(a) if isinstance(a, int) else describe(a, "{a}")
            return (f"{least}{'' if '{b}' in least else ' is {b}'}, but {what} needs at least "
                    f"{most}{'' if isinstance(a, int) or '{a}' in most else ' = {a}'}")
        divisor = _divisor(a) if kind == "equal" and b == 0 else None
        if divisor is not None:  # x % k == 0: a dim that must be a multiple of k
            x = describe(divisor[0], "?")
            return (f"{x.split(' = ?')[0]} is not a multiple of {divisor[1]} (the remainder is "
                    f"{{a}}), but {what} needs it to be")
        need = "equal" if kind == "equal" else "broadcast against"
        left = describe(a, "{a}")
        right = describe(b, "{b}")
        value = "" if "{b}" in right or isinstance(b, int) else " = {b}"
        return f"{left} is {{a}}, but {what} needs it to {need} {right}{value}"

    def func_description(self) -> str:
        return f"@{self.name}'s return type"

    # --- expressions ---------------------------------------------------------------------------
    def lower(self, e: Expr) -> int:
        r = self.lookup(self._memo, id(e))
        if r is None:
            r = getattr(self, "lower_" + type(e).__name__)(e)
            self._memo[-1][id(e)] = r
        return r

    def lower_Var(self, v: Var) -> int:
        r = self.lookup(self._env, id(v))
        if r is not None:
            return r
        raise RelvmCompileError(f"@{self.name}: %{v.name} is not bound")

    def lower_Constant(self, c: Constant) -> int:
        dst = self.reg()
        self.emit("LoadConst", dst, self.program.constant(id(c), c.data))
        return dst

    def lower_GlobalVar(self, g: GlobalVar) -> int:
        dst = self.reg()
        self.emit("AllocClosure", dst, self.program.function_index[g.name], ())
        return dst

    def lower_Let(self, let: Let) -> int:
        self._env[-1][id(let.var)] = self.lower(let.value)
        self.check_assumed(let, f"the annotation of %{let.var.name}{_at(let.var)}")
        return self.lower(let.body)

    def lower_Tuple(self, t: Tuple) -> int:
        fields = tuple(self.lower(f) for f in t.fields)
        return self.alloc_adt(fields)

    def alloc_adt(self, fields: tuple[int, ...]) -> int:
        dst = self.reg()
        self.emit("AllocADT", dst, 0, fields)
        self.tuple_fields[dst] = fields
        return dst

    def lower_TupleGetItem(self, g: TupleGetItem) -> int:
        if isinstance(g.tuple_value, Tuple):
            return self.lower(g.tuple_value.fields[g.index])
        src = self.lower(g.tuple_value)
        fields = self.tuple_fields.get(src)
        if fields is not None:
            # A field of a tuple made here (a split's results): the field's own register, so
            # a kernel writing it can write straight into the caller's output array.
            return fields[g.index]
        dst = self.reg()
        self.emit("GetField", dst, src, g.index)
        return dst

    def lower_If(self, node: If) -> int:
        cond = self.lower(node.cond)
        one = self.reg()
        self.emit("LoadConsti", one, 1)
        merge = self.reg()
        if_pc = self.emit("If", cond, one, 1, 0)
        self.push()
        then_reg = self.lower(node.then_branch)
        self.emit("Move", dst=merge, src=then_reg)
        self.pop()
        goto_pc = self.emit("Goto", 0)
        else_pc = len(self.code)
        self.push()
        else_reg = self.lower(node.else_branch)
        self.emit("Move", dst=merge, src=else_reg)
        self.pop()
        end_pc = len(self.code)
        self.code[if_pc] = make("If", cond, one, 1, else_pc - if_pc)
        self.code[goto_pc] = make("Goto", end_pc - goto_pc)
        self.bind_result_dims(merge, node.checked_type, node)
        return merge

    def lower_Function(self, fn: Function) -> int:
        captured = self.free_vars(fn)
        index = self.program.lifted.get(id(fn))
        if index is None:
            index = len(self.program.function_index)
            name = f"{self.name}.closure{index}"
            self.program.function_index[name] = index
            self.program.lifted[id(fn)] = index
            self.program.pending.append((name, fn, captured))
        dst = self.reg()
        self.emit("AllocClosure", dst, index, tuple(self.lower(v) for v in captured))
        return dst

    def free_vars(self, fn: Function) -> list[Var]:
        """Variables ``fn`` uses but does not bind."""
        bound = {id(p) for p in fn.params}
        used: dict[int, Var] = {}
        for n in post_order(fn.body, into_functions=True):
            if isinstance(n, Let):
                bound.add(id(n.var))
            elif isinstance(n, Function):
                bound.update(id(p) for p in n.params)
            elif isinstance(n, Var):
                used.setdefault(id(n), n)
        return [v for k, v in used.items() if k not in bound]

    # --- calls -----------------------------------------------------------------------------------
    def lower_Call(self, call: Call) -> int:
        if isinstance(call.op, Op):
            return self.lower_op(call, call.op)
        args = tuple(self.lower(a) for a in call.args)
        callee = f"@{call.op.name}" if isinstance(call.op, GlobalVar) else "the closure"
        self.check_assumed(call, f"the call of {callee}{_at(call)}")
        dst = self.reg()
        if isinstance(call.op, GlobalVar):
            self.emit("Invoke", dst=dst, func=self.program.function_index[call.op.name], args=args)
        else:
            self.emit("InvokeClosure", dst=dst, closure=self.lower(call.op), args=args)
        self.bind_result_dims(dst, call.checked_type, call)
        return dst

    def bind_result_dims(self, reg: int, t: Type, node: Expr) -> None:
        """After a value with possibly new symbols arrives (a call, an if), bind them."""
        leaves = []
        for path, tt in _tuple_leaves(t) if isinstance(t, TupleType) else \
                ([((), t)] if isinstance(t, TensorType) else []):
            if not any(not isinstance(d, int) and not all(self.dims.knows(s)
                                                          for s in D.free_symbols(d))
                       for d in tt.shape):
                continue
            leaf = reg
            for i in path:
                nxt = self.reg()
                self.emit("GetField", nxt, leaf, i)
                leaf = nxt
            leaves.append((leaf, tt, "result"))
        if leaves:
            statements = self.bind_shapes(leaves, node=node)
            if statements:
                self.emit("ComputeDims", self.program.dim_program(statements),
                          tuple(r for r, _, _ in leaves))

    def flat_args(self, call: Call) -> tuple[list[int], list[TensorType], tuple[int, ...]]:
        """Argument registers with tuple-typed arguments flattened into their tensors.

        Also returns the groups: per argument, -1 for a tensor or the tuple's field count.
        """
        regs: list[int] = []
        types: list[str] = []
        groups: list[int] = []
        for a in call.args:
            t = a.checked_type
            if isinstance(t, TupleType):
                if isinstance(a, Tuple):
                    parts = [(self.lower(f), f.checked_type) for f in a.fields]
                else:
                    src = self.lower(a)
                    parts = []
                    for i, f in enumerate(t.fields):
                        r = self.reg()
                        self.emit("GetField", r, src, i)
                        parts.append((r, f))
                for r, ft in parts:
                    regs.append(r)
                    types.append(ft)
                groups.append(len(parts))
            else:
                regs.append(self.lower(a))
                types.append(t)
                groups.append(-1)
        return regs, types, tuple(groups)

    def lower_op(self, call: Call, op: Op) -> int:
        out_type = call.checked_type
        if op.name in LIST_OPS:
            return self.lower_list_op(call, op.name)
        if op.name in RESHAPE_OPS:
            src = self.lower(call.args[0])
            if self.knows(out_type):
                # The result's dims follow from symbols the frame knows: only the data is read
                # (a dyn.reshape's newshape, a reshape_like's shape_like are not computed).
                self.check_assumed(call, f"{_op_description(op)}{_at(call)}")
                return self.reshape(src, out_type)
        in_regs, in_types, groups = self.flat_args(call)
        self.check_assumed(call, f"{_op_description(op)}{_at(call)}")
        if op.data_dependent:
            self.compute_data_dims(call, op, in_regs)
        if op.name in RESHAPE_OPS:
            return self.reshape(in_regs[0], out_type)
        if op.name == "shape_of" and call.attrs["dtype"] == "int64":
            dst = self.reg()
            self.emit("ShapeOf", dst, in_regs[0])
            return dst
        outs = list(tensor_types(out_type))
        out_regs = [self.alloc(t) for t in outs]
        attrs = dict(call.attrs) if op.entry_attrs is None else op.entry_attrs(
            call.attrs, *[a.checked_type for a in call.args])
        k = self.program.kernel(op, attrs, in_types, outs, groups, call)
        self.emit("InvokePacked", kernel=k, inputs=in_regs, outputs=out_regs)
        if isinstance(out_type, TupleType):
            return self.pack(out_type, iter(out_regs))
        return out_regs[0]

    def lower_list_op(self, call: Call, name: str) -> int:
        """A list op: one list instruction (``relvm/ops/lists.py``); an element or a
        concatenation brings fresh dims, bound from its shape."""
        self.check_assumed(call, f"{name}{_at(call)}")
        t, attrs = call.checked_type, call.attrs
        dst = self.reg()
        if name in ("list.construct", "list.empty"):
            items = self.flat_args(call)[0]
            self.emit("AllocList", dst, tuple(items), t.elem.dtype, t.rank_code)
            return dst
        args = [self.lower(a) for a in call.args]
        if name == "list.length":
            self.emit("ListLength", dst, args[0])
        elif name == "list.get":
            self.emit("ListGet", dst, args[0], args[1])
        elif name == "list.insert":
            self.emit("ListInsert", dst, args[0], (args[1],), args[2])
        elif name == "list.erase":
            self.emit("ListErase", dst, args[0], args[1])
        elif name == "list.concat":
            self.emit("ListConcat", dst, args[0], attrs["axis"], int(attrs["new_axis"]))
        else:
            self.emit("ListSplit", dst, args[0], args[1], attrs["axis"], int(attrs["keepdims"]))
        if isinstance(t, TensorType):
            self.bind_result_dims(dst, t, call)
        return dst

    def knows(self, t: Type) -> bool:
        """True if every dim of ``t`` is over symbols the frame has computed."""
        return all(all(self.dims.knows(s) for s in D.free_symbols(d))
                   for tt in tensor_types(t) for d in tt.shape)

    def pack(self, t: Type, regs) -> int:
        if not isinstance(t, TupleType):
            return next(regs)
        return self.alloc_adt(tuple(self.pack(f, regs) for f in t.fields))

    def alloc(self, t: TensorType) -> int:
        statements: list[tuple] = []
        self.dims.ensure(list(t.shape), statements)
        self.flush(statements)
        dst = self.reg()
        shape = tuple(self.dims.operand(d) for d in t.shape)
        pc = self.emit("AllocTensor", dst, -1, 0, shape, t.dtype)
        size: D.Dim = dtypes.to_numpy(t.dtype).itemsize
        for d in t.shape:
            size = size * d
        self.allocs[pc] = size
        return dst

    def reshape(self, src: int, t: TensorType) -> int:
        statements: list[tuple] = []
        self.dims.ensure(list(t.shape), statements)
        self.flush(statements)
        dst = self.reg()
        self.emit("ReshapeTensor", dst, src, tuple(self.dims.operand(d) for d in t.shape))
        return dst

    def flush(self, statements: list[tuple]) -> None:
        if statements:
            self.emit("ComputeDims", self.program.dim_program(statements), ())

    def expand_dims(self, call: Call, in_regs: list[int]) -> None:
        """dyn.broadcast_to's dims, each the broadcast of data's dim and the shape's entry:
        nothing to compute where type inference knows the shape's value (every dim is then
        exact); else each dim it does not know is read from the entry when the program runs,
        and each it knows (a static dim of data) is checked against it."""
        if call.args[1].shape_value is not None:
            return
        out = call.checked_type
        data = call.args[0].checked_type.ndim
        length = call.args[1].checked_type.shape[0]
        rank = len(out.shape)
        statements = []
        for axis, d in enumerate(out.shape):
            own = axis - (rank - data)
            at = axis - (rank - length)
            if at < 0:
                continue  # data's own dim, as it is
            both = ("bcast", ("shape", 0, own) if own >= 0 else ("const", 1), ("item", 1, at))
            if isinstance(d, int) or self.dims.slot_of(d) is not None:
                statements.append(("check", both, self.dims.expr(d),
                                   f"expand: axis {axis} is {{b}}, but the shape gives {{a}}"))
                continue
            slot = self.dims.new_slot(d)
            statements += [("set", slot, both),
                           ("check", ("max", ("slot", slot), ("const", 0)), ("slot", slot),
                            f"expand: size {{b}} of axis {axis} is negative")]
        if statements:
            self.emit("ComputeDims", self.program.dim_program(statements),
                      (in_regs[0], in_regs[1]))

    def compute_data_dims(self, call: Call, op: Op, in_regs: list[int]) -> None:
        """Before allocating a data-dependent op's output, compute its fresh dims from values.

        Dims over symbols the frame knows (type inference found them from the inputs' symbolic
        values: ``arange(0, n)`` is ``[n]``) are computed from the symbols, as any other dim.
        """
        out = call.checked_type
        if op.name == "dyn.broadcast_to":
            self.expand_dims(call, in_regs)
            return
        fresh = [d for t in tensor_types(out) for d in t.shape
                 if not isinstance(d, int) and self.dims.slot_of(d) is None
                 and not all(self.dims.knows(s) for s in D.free_symbols(d))]
        if not fresh:
            return
        if op.name == "dyn.topk":
            values = out.fields[0]
            axis = call.attrs["axis"] % values.ndim
            k = self.dims.new_slot(values.shape[axis])
            within = f"topk: k {{a}} is past {{b}}, the length of axis {axis}"
            statements = [("set", k, ("value", 1)),
                          ("check", ("max", ("slot", k), ("const", 0)), ("slot", k),
                           "topk: k {b} must not be negative"),
                          ("check", ("max", ("slot", k), ("shape", 0, axis)), ("shape", 0, axis),
                           within)]
            args = (in_regs[0], in_regs[1])
        elif op.name == "unique":
            axis, rank = call.attrs["axis"], call.args[0].checked_type.ndim
            u = self.dims.new_slot(out.fields[1].shape[0])
            statements = [("set", u, ("unique", 0, -1 if axis is None else axis % rank))]
            args = (in_regs[0],)
        elif op.name == "argwhere":
            statements = [("set", self.dims.new_slot(out.shape[0]), ("nonzero", 0))]
            args = (in_regs[0],)
        elif op.name == "arange":
            statements = [("set", self.dims.new_slot(out.shape[0]), ("arange_len", 0, 1, 2))]
            args = tuple(in_regs[:3])
        elif op.name == "dyn.resize2d":
            sizes = out.shape[2:]
            statements = []
            for k, d in enumerate(sizes):
                if not isinstance(d, int) and self.dims.slot_of(d) is None:
                    slot = self.dims.new_slot(d)
                    statements += [("set", slot, ("item", 1, k)),
                                   ("check", ("max", ("slot", slot), ("const", 0)), ("slot", slot),
                                    f"resize: size {{b}} of spatial axis {k} is negative")]
            args = (in_regs[0], in_regs[1])
        elif op.name == "dyn.reshape":
            first = self.dims.num_slots
            for d in out.shape:
                self.dims.new_slot(d)
            tag = "reshape_allowzero" if call.attrs["allowzero"] else "reshape"
            statements = [(tag, 0, 1, first)]
            args = (in_regs[0], in_regs[1])
        else:
            raise RelvmCompileError(f"{op.name}: no run-time shape rule for this data-dependent op")
        self.emit("ComputeDims", self.program.dim_program(statements), args)


#: Past this many characters a dim is named by its symbols, not spelled out: a dynamo
#: export's dims nest floor-divisions a thousand characters deep (Swin at 72x88), and what
#: a user needs is which inputs' dims clash, and their values.
LONG_DIM = 60


def _short_dim(d: D.Dim) -> str:
    """``d`` as text, or ``a dim computed from h, w`` when spelling it out would be long."""
    text = D.dim_str(d)
    if len(text) <= LONG_DIM:
        return text
    names = sorted(s.text() for s in D.free_symbols(d))
    return f"a dim computed from {', '.join(names)}" if names else "a computed dim"


def _at(node: Expr) -> str:
    span = getattr(node, "span", None)
    return f" at line {span.line}, column {span.column}" if span is not None else ""


def _op_description(op: Op) -> str:
    if isinstance(op, FusedOp):
        return " -> ".join(s.op.name for s in op.steps)
    return op.name


def _divisor(d: D.Dim) -> tuple[D.Dim, int] | None:
    """``(x, k)`` if ``d`` is exactly ``x % k`` for a constant ``k``, else None."""
    if isinstance(d, int) or len(d.terms) != 1:
        return None
    (mono, coeff), = d.terms
    if coeff != 1 or len(mono) != 1 or not isinstance(mono[0], D.ModAtom):
        return None
    x, k = mono[0].children()
    return (x, k) if isinstance(k, int) else None


def _linear(d: D.Dim) -> tuple[D.Sym | None, int, int]:
    """``(s, a, b)`` if ``d == a*s + b`` for one symbol s and a > 0, else ``(None, 0, 0)``."""
    sym, coeff, const = None, 0, 0
    for mono, c in d.terms:
        if not mono:
            const = c
        elif len(mono) == 1 and isinstance(mono[0], D.Sym) and sym is None and c > 0:
            sym, coeff = mono[0], c
        else:
            return None, 0, 0
    return sym, coeff, const


def _tuple_leaves(t: TupleType, path: tuple = ()):
    for i, f in enumerate(t.fields):
        if isinstance(f, TupleType):
            yield from _tuple_leaves(f, path + (i,))
        elif isinstance(f, TensorType):
            yield path + (i,), f
