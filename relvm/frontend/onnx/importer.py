"""The ONNX graph walker: inputs, initializers, nodes (in their topological order), outputs.

Each node is handed to its converter (``converters.CONVERTERS``) as a :class:`Node`, which reads
inputs as IR expressions, known values or symbolic values, and builds IR calls through
:meth:`Node.call`. A call is typed as it is made (the op's type relation over symbolic dims), so
a converter can look at the shapes it has built; a call whose arguments are all constants is
evaluated at once with the op's NumPy reference. Every error names the ONNX node.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ... import dtypes
from ...errors import RelvmError
from ...ir import dims as D
from ...ir.nodes import (Call, Constant, Expr, Function, GlobalVar, If, IONames, Module, Tuple,
                         TupleGetItem, Var, post_order)
from ...ir.types import ListType, TensorType, TupleType
from ...ops import values as V
from ...ops.lists import LIST_OPS
from ...ops.registry import OPS, AttrError, OpTypeError
from ...passes.type_infer import _Mismatch, freshen, infer_module, join
from .values import Scope, Value, as_sym

#: ONNX TensorProto element types relvm has, by their numbers.
ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
               7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}
#: Known tensors (other than initializers) up to this many elements stay inline constants;
#: larger ones become parameters of @main, as initializers do.
INLINE_LIMIT = 16
#: A call on constants is folded at import unless its result is this large and much larger than
#: its inputs (zeros(shape=[4096, 4096]) stays a call; the build folds it where it must).
FOLD_LIMIT = 4096
#: How many If nodes whose branches differ in rank may split one import (each split converts the
#: rest of its graph twice).
MAX_SPLITS = 4


class RelvmImportError(RelvmError, ValueError):
    """An ONNX model relvm cannot import. The message names the ONNX node (name and op type).

    ``unsupported`` lists the op types relvm has no converter for; ``needs_constant`` the graph
    inputs whose values the import needed (an ``axes`` input fed at run time).
    """

    def __init__(self, message: str, *, node: str | None = None, op_type: str | None = None,
                 unsupported: Sequence[str] = (), needs_constant: Sequence[str] = ()):
        super().__init__(message)
        self.node = node
        self.op_type = op_type
        self.unsupported = tuple(unsupported)
        self.needs_constant = tuple(needs_constant)


def onnx_type_name(elem_type: int) -> str:
    import onnx

    return onnx.TensorProto.DataType.Name(elem_type).lower() if elem_type in \
        onnx.TensorProto.DataType.values() else f"type {elem_type}"


def _attribute(a) -> Any:
    import onnx
    from onnx import numpy_helper

    if a.type == onnx.AttributeProto.TENSOR:
        return numpy_helper.to_array(a.t)
    if a.type == onnx.AttributeProto.GRAPH:
        return a.g
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    return v


def sanitize(name: str, fallback: str) -> str:
    """A name the text format accepts (letters, digits, underscores)."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return out if out.strip("_") else fallback


def both_branches(convert: Callable[[int], Any]) -> tuple[list, list[RelvmError | None]]:
    """``convert(0)`` and ``convert(1)`` (an If's then- and else-branch) and their failures: a
    branch whose conversion raises a relvm error cannot run -- the model fails when it is
    taken -- and gives None and its error. When both fail, the then-branch's error is raised."""
    results: list = []
    failures: list[RelvmError | None] = []
    for b in (0, 1):
        try:
            results.append(convert(b))
            failures.append(None)
        except RelvmError as e:
            results.append(None)
            failures.append(e)
    if failures[0] and failures[1]:
        raise failures[0]
    return results, failures


class BranchesDiffer(Exception):
    """Raised by the If converter when its branches cannot join: the graph walker splits the
    rest of the graph there (:meth:`Importer.convert_nodes`). Never leaves the importer."""

    def __init__(self, node: "Node", cond: Expr, then_values: list[Value],
                 else_values: list[Value], reason: str):
        super().__init__(reason)
        self.node, self.cond, self.reason = node, cond, reason
        self.then_values, self.else_values = then_values, else_values


def op_key(domain: str, op_type: str) -> str:
    """How converters are registered: ``Relu``, or ``ai.onnx.ml::Binarizer`` for another
    domain's op."""
    return op_type if domain in ("", "ai.onnx") else f"{domain}::{op_type}"


class Node:
    """One ONNX node as its converter sees it."""

    def __init__(self, importer: "Importer", proto, scope: Scope):
        self.imp = importer
        self.proto = proto
        self.scope = scope
        self.op_type = proto.op_type
        #: the converter's key: the op type, with its domain unless it is ONNX's own
        self.key = op_key(proto.domain, proto.op_type)
        self.name = proto.name or next((o for o in proto.output if o), "")
        self.inputs = list(proto.input)
        self.outputs = list(proto.output)
        self.attrs = {a.name: _attribute(a) for a in proto.attribute}
        self.opset = importer.opset
        #: set while every input is known: inputs read as constants, results fold
        self.folding = False

    # --- errors --------------------------------------------------------------------------------
    def describe(self) -> str:
        return f"{self.op_type} node {self.name!r}"

    def fail(self, message: str, needs: Iterable[str] = ()) -> RelvmImportError:
        return RelvmImportError(f"{self.describe()}: {message}", node=self.name,
                                op_type=self.op_type, needs_constant=tuple(needs))

    # --- attributes and inputs ----------------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def required(self, name: str) -> Any:
        if name not in self.attrs:
            raise self.fail(f"attribute {name!r} is missing")
        return self.attrs[name]

    def has(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] != ""

    def wants(self, i: int) -> bool:
        """True if output ``i`` is used (named)."""
        return i < len(self.outputs) and self.outputs[i] != ""

    def value(self, i: int) -> Value:
        if not self.has(i):
            raise self.fail(f"input {i} is missing")
        v = self.scope.lookup(self.inputs[i])
        if v is None:
            raise self.fail(f"input {self.inputs[i]!r} is not produced by any earlier node, "
                            "initializer or graph input")
        return v

    def x(self, i: int) -> Expr:
        """Input ``i`` as an IR expression."""
        v = self.value(i)
        if self.folding and v.const is not None:
            return self.imp.constant(self, v.const)
        return self.imp.expr(v, self)

    def known(self, i: int) -> np.ndarray | None:
        return self.value(i).const if self.has(i) else None

    def const(self, i: int, what: str) -> np.ndarray:
        """The value of input ``i``, which must be known at import (an axes list, a pad width)."""
        v = self.value(i)
        if v.const is None:
            source = f"graph input {v.graph_input!r}" if v.graph_input else "a run-time value"
            raise self.fail(f"input {i} ({what}) must be a constant, but it is {source}",
                            needs=(v.graph_input,) if v.graph_input else ())
        return v.const

    def ints(self, i: int, what: str) -> list[int]:
        return [int(x) for x in np.asarray(self.const(i, what)).reshape(-1)]

    def sym(self, i: int) -> np.ndarray | None:
        """Input ``i`` as an object array of dims, if it is known or symbolic."""
        return as_sym(self.value(i)) if self.has(i) else None

    def all_known(self) -> bool:
        present = [i for i in range(len(self.inputs)) if self.has(i)]
        return bool(present) and all(self.value(i).const is not None for i in present)

    # --- types ---------------------------------------------------------------------------------
    def type(self, i: int) -> TensorType:
        v = self.value(i)
        if v.const is not None:
            return TensorType(tuple(int(s) for s in v.const.shape), self.imp.dtype_of(self, v.const))
        if v.sym is not None:
            return TensorType(v.sym.shape, v.dtype)
        t = self.imp.expr(v, self).checked_type
        if not isinstance(t, TensorType):
            raise self.fail(f"input {i} is not a tensor: {t}")
        return t

    def shape(self, i: int) -> tuple[D.Dim, ...]:
        return self.type(i).shape

    def dtype(self, i: int) -> str:
        return self.type(i).dtype

    def rank(self, i: int) -> int:
        return self.type(i).ndim

    # --- building ------------------------------------------------------------------------------
    def call(self, op: str, *args: Expr, **attrs: Any) -> Expr:
        return self.imp.call(self, op, args, attrs)

    def constant(self, value: Any, dtype: str | None = None) -> Constant:
        arr = np.asarray(value, dtype=dtypes.to_numpy(dtype) if dtype else None)
        return self.imp.constant(self, arr)

    def field(self, tup: Expr, i: int) -> Expr:
        if isinstance(tup, Tuple):
            return tup.fields[i]
        t = tup.checked_type
        assert isinstance(t, TupleType)
        g = TupleGetItem(tup, i)
        g.with_type(t.fields[i])
        return g


class _Lazy:
    """A node converted on first demand (the run-time form of a symbolic value)."""

    def __init__(self, convert: Callable[[Node], list], node: Node):
        self.convert = convert
        self.node = node
        self.results: list | None = None

    def get(self, i: int) -> Expr:
        if self.results is None:
            self.results = _as_list(self.convert(self.node))
        out = self.results[i]
        return out if isinstance(out, Expr) else self.node.imp.expr(out, self.node)


def _small_enough_to_fold(op, attrs, args: Sequence[Expr], datas: list) -> bool:
    """False when the result's type says it is too large to fold (checked again after the
    reference runs): ConstantOfShape([2**31]) would spend a minute filling 16 GB here."""
    from ...passes.fold import result_bytes

    made = result_bytes(Call(op, tuple(args), attrs))
    read = sum(np.asarray(v).nbytes for d in datas for v in _as_list(d))
    return made is None or made <= max(FOLD_LIMIT * 8, 4 * read)


def _constant_data(e: Expr) -> Any:
    """The value of a constant, or of a tuple of constants; None otherwise."""
    if isinstance(e, Constant):
        return e.data
    if isinstance(e, Tuple) and all(isinstance(f, Constant) for f in e.fields):
        return tuple(f.data for f in e.fields)
    return None


def _as_list(out: Any) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


class Importer:
    """Converts one ONNX ModelProto into a relvm Module and its params."""

    def __init__(self, model, freeze: dict[str, np.ndarray] | None = None):
        from .converters import CONVERTERS, SYMBOLIC  # registers every converter

        self.converters = CONVERTERS
        self.symbolic = SYMBOLIC
        self.model = model
        #: IR name -> the ONNX name it was made from, where they differ (``input_1``: ``input.1``)
        self.original_names: dict[str, str] = {}
        self.freeze = dict(freeze or {})
        self.opset = _default_opset(model)
        self.params: dict[str, np.ndarray] = {}
        self.param_vars: list[Var] = []
        self.var_names: set[str] = set()
        self.dim_symbols: dict[str, D.Sym] = {}
        self.dim_names: set[str] = set()
        self.splits = 0
        #: the global functions besides @main, by name: those Loop and Scan nodes became
        #: (``loops.py``) and SequenceMap over lists (``ops_sequence.py``), all recursive
        self.functions: dict[str, Function] = {}
        #: the loop bodies being converted, outermost first (``loops.LoopFrame``)
        self.frames: list = []
        self.loop_count = 0
        #: > 0 while converting the body of a SequenceMap function: known tensors are inline
        #: constants there (a parameter of @main would be out of its reach)
        self.in_function = 0

    # --- the whole model ---------------------------------------------------------------------------
    def run(self) -> tuple[Module, dict[str, np.ndarray]]:
        import onnx

        newest = onnx.defs.onnx_opset_version()
        if self.opset > newest:
            raise RelvmImportError(f"the model uses opset {self.opset}, newer than the {newest} "
                                   f"the installed onnx knows")
        graph = self.model.graph
        self.check_supported(graph)
        scope = Scope()
        inputs = self.bind_graph_inputs(graph, scope)
        values = self.convert_nodes(list(graph.node), 0, scope,
                                    [o.name for o in graph.output])
        outputs = [self.expr(v, None) for v in values]
        if not outputs:
            raise RelvmImportError("the graph has no outputs")
        body = outputs[0] if len(outputs) == 1 else Tuple(tuple(outputs))
        names = IONames(dict(self.original_names), tuple(o.name for o in graph.output))
        main = Function(tuple(inputs + self.param_vars), body)
        module = Module({"main": main, **self.reachable_functions(main)},
                        io_names={"main": names})
        infer_module(module)
        return module, dict(self.params)

    def reachable_functions(self, main: Function) -> dict[str, Function]:
        """The loop functions ``main`` calls, directly or not (a loop body converted again once
        its carried shapes were known, or a dropped If branch, leaves some unused)."""
        out: dict[str, Function] = {}
        todo = [main]
        while todo:
            for node in post_order(todo.pop().body, into_functions=True):
                if isinstance(node, GlobalVar) and node.name not in out:
                    out[node.name] = self.functions[node.name]
                    todo.append(out[node.name])
        return {name: out[name] for name in sorted(
            out, key=lambda k: (k.rsplit("_", 1)[0], int(k.rsplit("_", 1)[1])))}

    def check_supported(self, graph) -> None:
        """One error listing every op type without a converter (in subgraphs too)."""
        missing: dict[str, list[str]] = {}
        for node in _all_nodes(graph):
            key = op_key(node.domain, node.op_type)
            if key not in self.converters:
                missing.setdefault(key, []).append(node.name or node.output[0])
        if missing:
            parts = [f"{op} ({len(names)} node{'s' if len(names) > 1 else ''}, e.g. {names[0]!r})"
                     for op, names in sorted(missing.items())]
            raise RelvmImportError(f"the model uses {len(missing)} op type"
                                   f"{'s' if len(missing) > 1 else ''} relvm cannot import: "
                                   + "; ".join(parts), unsupported=sorted(missing))

    def bind_graph_inputs(self, graph, scope: Scope) -> list[Var]:
        from onnx import numpy_helper

        initializers = {t.name for t in graph.initializer}
        for t in graph.initializer:
            scope.bind(t.name, Value(t.name, const=numpy_helper.to_array(t), initializer=True))
        inputs = []
        for vi in graph.input:
            if vi.name in initializers:
                continue
            if vi.name in self.freeze:
                scope.bind(vi.name, Value(vi.name, const=np.asarray(self.freeze[vi.name])))
                continue
            var = self.input_var(vi)
            inputs.append(var)
            scope.bind(vi.name, Value(vi.name, expr=var, graph_input=vi.name))
        unknown = set(self.freeze) - {vi.name for vi in graph.input}
        if unknown:
            raise RelvmImportError(f"freeze names {sorted(unknown)[0]!r}, which is not a graph "
                                   "input")
        return inputs

    def output_value(self, scope: Scope, name: str) -> Value:
        v = scope.lookup(name)
        if v is None:
            raise RelvmImportError(f"graph output {name!r} is not produced by any node")
        return v

    def convert_subgraph(self, graph, parent: Scope,
                         inputs: dict[str, Value] | None = None) -> list[Value]:
        """The output values of a subgraph (an If branch; a SequenceMap body, given its
        ``inputs``), converted in a child scope."""
        from onnx import numpy_helper

        scope = Scope(parent)
        for name, v in (inputs or {}).items():
            scope.bind(name, v)
        for t in graph.initializer:
            scope.bind(t.name, Value(t.name, const=numpy_helper.to_array(t), initializer=True))
        return self.convert_nodes(list(graph.node), 0, scope, [o.name for o in graph.output])

    def convert_nodes(self, nodes: list, start: int, scope: Scope,
                      outputs: list[str]) -> list[Value]:
        """Converts ``nodes[start:]`` in ``scope``; the values of the graph's ``outputs``.

        An ``If`` whose branches differ in rank or element type (silero-vad squeezes a dim only
        when it is 1, then branches on the rank) splits the graph there: the rest of it is
        converted once per branch, with the ``If``'s outputs bound to that branch's values, so
        every value keeps a static rank (tests of it fold) and the ``If`` returns the graph's
        outputs. Those must agree in rank and type between the two copies."""
        for i in range(start, len(nodes)):
            try:
                self.convert_node(nodes[i], scope)
            except BranchesDiffer as split:
                return self.split_rest(nodes, i, scope, outputs, split)
        return [self.output_value(scope, name) for name in outputs]

    def split_rest(self, nodes: list, at: int, scope: Scope, outputs: list[str],
                   split: "BranchesDiffer") -> list[Value]:
        node = split.node
        self.splits += 1
        if self.splits > MAX_SPLITS:
            raise node.fail(f"the branches differ ({split.reason}), and the graph already "
                            f"splits at {MAX_SPLITS} such If nodes; relvm converts the rest of "
                            "a graph once per branch of each, up to that many")
        branch_values = (split.then_values, split.else_values)
        arms, failures = both_branches(
            lambda b: self.convert_arm(nodes, at, scope, outputs, node, branch_values[b]))
        if failures[0] or failures[1]:
            good = 1 if failures[0] else 0
            guarded = self.guard_branch(node, split.cond, good, branch_values[good],
                                        failures[1 - good],
                                        f" (the branches differ: {split.reason})")
            return self.convert_rest(nodes, at, scope, outputs, node, guarded)
        try:
            t = join(arms[0].checked_type, arms[1].checked_type)
        except _Mismatch as e:
            raise node.fail(f"the branches differ ({split.reason}), and so do the graph's "
                            f"outputs after it: {e}") from None
        result = If(split.cond, arms[0], arms[1])
        result.with_type(t)
        if len(outputs) == 1:
            return [Value(outputs[0], expr=result)]
        return [Value(name, expr=node.field(result, i)) for i, name in enumerate(outputs)]

    def guard_branch(self, node: "Node", cond: Expr, good: int, values: list[Value],
                     failure: RelvmError, why: str = "") -> list[Value]:
        """The ``values`` of If ``node``'s branch ``good`` (0: then, 1: else), each behind a
        ``guard`` on ``cond``: the other branch cannot run (``failure``), so the model runs this
        one and stops with the other's error when the condition picks it, as ONNX Runtime
        fails there at run time."""
        which = ("then", "else")
        if good == 1:
            cond = self.call(node, "logical_not", [cond], {})
        message = (f"{node.describe()} took its {which[1 - good]}-branch{why}, where the model "
                   f"cannot run: {failure}")
        return [Value(v.name, expr=self.call(node, "guard", [self.expr(v, node), cond],
                                             {"message": message}))
                for v in values]

    def convert_rest(self, nodes: list, at: int, scope: Scope, outputs: list[str], node: "Node",
                     values: list[Value]) -> list[Value]:
        """The graph's outputs from ``nodes[at + 1:]``, the If ``node``'s outputs bound to
        ``values``, in a scope of their own."""
        arm = Scope(scope)
        for name, v in zip(node.outputs, values):
            if name:
                arm.bind(name, v)
        return self.convert_nodes(nodes, at + 1, arm, outputs)

    def convert_arm(self, nodes: list, at: int, scope: Scope, outputs: list[str], node: "Node",
                    values: list[Value]) -> Expr:
        """The rest of the graph for one branch of a split If: its outputs as one expression."""
        exprs = [self.expr(v, node) for v in self.convert_rest(nodes, at, scope, outputs, node,
                                                                  values)]
        if len(exprs) == 1:
            return exprs[0]
        tup = Tuple(tuple(exprs))
        tup.with_type(TupleType(tuple(e.checked_type for e in exprs)))
        return tup

    # --- inputs and params ------------------------------------------------------------------------
    def unique_var_name(self, name: str) -> str:
        base = sanitize(name, "x")
        out, k = base, 1
        while out in self.var_names:
            out, k = f"{base}_{k}", k + 1
        self.var_names.add(out)
        if out != name:
            self.original_names[out] = name
        return out

    def dim_symbol(self, name: str) -> D.Sym:
        if name not in self.dim_symbols:
            base = sanitize(name, "dim")
            if base[0].isdigit():
                base = "d_" + base
            out, k = base, 1
            while out in self.dim_names:
                out, k = f"{base}_{k}", k + 1
            self.dim_names.add(out)
            self.dim_symbols[name] = D.Sym(out)
        return self.dim_symbols[name]

    def input_var(self, vi) -> Var:
        t = vi.type
        if t.HasField("sequence_type"):
            return self.list_var(vi)
        if not t.HasField("tensor_type"):
            raise RelvmImportError(f"graph input {vi.name!r} is neither a tensor nor a sequence "
                                   "of tensors; relvm imports those")
        tt = t.tensor_type
        dtype = _dtype(tt.elem_type, f"graph input {vi.name!r} has element type")
        if not tt.HasField("shape"):
            raise RelvmImportError(f"graph input {vi.name!r} has no shape; relvm needs at least "
                                   "its rank")
        shape = []
        for d in tt.shape.dim:
            if d.HasField("dim_value") and d.dim_value >= 0:
                shape.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param.strip("?") != "":
                shape.append(self.dim_symbol(d.dim_param))
            else:
                shape.append(D.ANY)  # unknown, or a literal -1: a fresh dim of its own
        annotation = TensorType(tuple(shape), dtype)
        var = Var(self.unique_var_name(vi.name), annotation)
        var.with_type(freshen(annotation))
        return var

    def list_var(self, vi) -> Var:
        """A sequence input: a list of its element type (``list_type``)."""
        t = self.list_type(vi)
        var = Var(self.unique_var_name(vi.name), t)
        var.with_type(t)
        return var

    @staticmethod
    def list_type(vi) -> ListType:
        """A sequence's declared type as a list: its element type, each dim a number or ``?``
        (of any rank when the model gives no shape)."""
        elem = vi.type.sequence_type.elem_type
        if not elem.HasField("tensor_type"):
            raise RelvmImportError(f"graph input {vi.name!r} is a sequence of non-tensors; "
                                   "relvm's lists hold tensors")
        tt = elem.tensor_type
        dtype = _dtype(tt.elem_type, f"graph input {vi.name!r} is a sequence of")
        shape = tuple(int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0
                      else D.ANY for d in tt.shape.dim)
        return ListType(TensorType(shape, dtype), ranked=tt.HasField("shape"))

    def param(self, node: Node | None, v: Value) -> Var:
        arr = np.asarray(v.const, order="C")  # (ascontiguousarray would make a scalar 1-d)
        t = TensorType(tuple(int(s) for s in arr.shape), self.dtype_of(node, arr))
        var = Var(self.unique_var_name(v.name), t)
        var.with_type(t)
        value = V.constant_value(arr)  # as converters see it: n.known() is its value
        var.with_value(None if value is None else V.Known(value))
        self.params[var.name] = arr
        self.param_vars.append(var)
        return var

    def dtype_of(self, node: Node | None, arr: np.ndarray) -> str:
        name = dtypes.from_numpy(arr.dtype)
        if name is None:
            msg = f"a tensor of dtype {arr.dtype} is not supported by relvm"
            raise node.fail(msg) if node else RelvmImportError(msg)
        return name

    # --- values and expressions -------------------------------------------------------------------
    def expr(self, v: Value, node: Node | None) -> Expr:
        """The IR expression of a value, made on first use (a param, a constant, a lazy node)."""
        if v.expr is None:
            if v.seq is not None:
                v.expr = self.list_expr(v, node)
            elif v.const is not None and (self.frames or self.in_function) and v.thunk is None:
                # A function body's own constant: inline (a param of @main is not in scope
                # there; a loop body's captured outer constants come through their thunks).
                v.expr = self.constant(node, v.const)
            elif v.const is not None and v.thunk is None:
                if v.initializer or v.const.size > INLINE_LIMIT:
                    v.expr = self.param(node, v)
                else:
                    v.expr = self.constant(node, v.const)
            else:
                assert v.thunk is not None, v
                v.expr = v.thunk()
        return v.expr

    def list_expr(self, v: Value, node: Node | None) -> Expr:
        """A sequence of known length as one IR list (``list.construct``; an empty one
        ``list.empty``, of its element type's dtype and any rank)."""
        if v.seq:
            items = [self.expr(e, node) for e in v.seq]
            tup = Tuple(tuple(items))
            tup.with_type(TupleType(tuple(e.checked_type for e in items)))
            op, args, attrs = OPS["list.construct"], (tup,), {}
        else:
            op, args, attrs = OPS["list.empty"], (), {"dtype": v.dtype or "float32"}
        checked = op.make_attrs(attrs)
        try:
            t = op.infer(checked, *[a.checked_type for a in args])
        except OpTypeError as e:
            where = f"{node.describe()}: " if node else ""
            raise RelvmImportError(f"{where}sequence {v.name!r}: {e}") from None
        c = Call(op, args, checked)
        c.with_type(t)
        return c

    def constant(self, node: Node | None, arr: np.ndarray) -> Constant:
        arr = np.asarray(arr)
        c = Constant(arr)
        c.with_type(TensorType(tuple(int(s) for s in arr.shape), self.dtype_of(node, arr)))
        return c

    def call(self, node: Node, op_name: str, args: Sequence[Expr], attrs: dict) -> Expr:
        op = OPS[op_name]
        try:
            checked = op.make_attrs(attrs)
        except AttrError as e:
            raise node.fail(f"{op_name}: {e}") from None
        datas = [_constant_data(a) for a in args]
        if all(d is not None for d in datas) and op_name not in LIST_OPS and \
                _small_enough_to_fold(op, checked, args, datas):
            try:
                with np.errstate(all="ignore"):
                    value = op.reference(checked, *datas)
            except (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError) as e:
                raise node.fail(f"{op_name} on constants: {e}") from None
            size = sum(np.asarray(v).size for v in _as_list(value))
            if size <= FOLD_LIMIT or size <= 4 * sum(np.size(v) for d in datas for v in _as_list(d)):
                return self.folded(node, value)
        types = [a.checked_type for a in args]
        try:
            t = op.infer(checked, *types)
        except OpTypeError as e:
            raise node.fail(f"{op_name}: {e}") from None
        except (ValueError, TypeError, ZeroDivisionError) as e:
            raise node.fail(f"{op_name}: cannot infer the result type: {e}") from None
        # The symbolic values type inference will find (ops/values.py), so that shapes are as
        # exact here, for the converters that read them, as they will be after inference.
        if op.data_dependent:
            t = V.refine(op, checked, args, t)
        c = Call(op, tuple(args), checked)
        c.with_type(t)
        c.with_value(V.infer(op, checked, args, t))
        return c

    def folded(self, node: Node, value: Any) -> Expr:
        if isinstance(value, tuple):
            t = Tuple(tuple(self.folded(node, v) for v in value))
            t.with_type(TupleType(tuple(f.checked_type for f in t.fields)))
            return t
        return self.constant(node, np.asarray(value))

    # --- nodes -------------------------------------------------------------------------------------
    def convert_node(self, proto, scope: Scope) -> None:
        node = Node(self, proto, scope)
        try:
            outs = self.dispatch(node)
        except (RelvmError, BranchesDiffer):
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError,
                ZeroDivisionError) as e:  # a malformed node the converter did not foresee
            raise node.fail(f"cannot convert: {type(e).__name__}: {e}") from e
        for i, name in enumerate(node.outputs):
            if not name:
                continue
            if i >= len(outs) or outs[i] is None:
                raise node.fail(f"output {i} ({name!r}) is not supported")
            out = outs[i]
            if isinstance(out, Value):
                value = out
            elif isinstance(out, Constant):
                value = Value(name, const=out.data)
            else:
                value = Value(name, expr=out)
            scope.bind(name, value)

    def dispatch(self, node: Node) -> list:
        convert = self.converters[node.key]
        symbolic = self.symbolic.get(node.key)
        if symbolic is not None:
            results = symbolic(node)
            if results is not None:
                lazy = _Lazy(convert, node)
                return [Value.of_sym(name, sym, dtype, thunk=lambda i=i: lazy.get(i))
                        for i, (name, (sym, dtype)) in enumerate(zip(node.outputs, results))]
        if node.op_type != "If" and node.all_known():
            node.folding = True
            try:
                return _as_list(convert(node))
            finally:
                node.folding = False
        return _as_list(convert(node))


def _default_opset(model) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 1  # no op of the default domain


def _all_nodes(graph):
    """Every node of ``graph`` and of its subgraphs, depth first."""
    for node in graph.node:
        yield node
        for g in subgraphs(node):
            yield from _all_nodes(g)


def subgraphs(node):
    """The graphs a node's attributes hold (an If's branches, a Loop's body)."""
    import onnx

    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def _dtype(elem_type: int, what: str) -> str:
    """relvm's dtype for an ONNX element type, or an error saying ``what`` has it."""
    dtype = ONNX_DTYPES.get(elem_type)
    if dtype is None:
        raise RelvmImportError(f"{what} {onnx_type_name(elem_type)}, which relvm does not "
                               "support")
    return dtype
