"""Loops as recursive global functions: what ONNX's Loop and Scan become.

Relay has no loop construct; a loop is a global function that calls itself. :func:`build_loop`
makes one::

    def @loop_0(%i: int64, %cond: bool, %count: int64, %carried..., %invariant...)
        -> (carried..., Tensor[(?, ...)] per scan output) {
      if (logical_and(less(%i, %count), %cond)) {
        <the body, on %i, %cond, %carried... and the invariants>
        %r = @loop_0(add(%i, 1i64), <cond out>, %count, <carried out>..., %invariant...);
        (%r.0, ..., concatenate((expand_dims(<scan out>, axis=0), %r.k), axis=0), ...)
      } else {
        (%carried..., zeros(shape=[0, ...]), ...)
      }
    }

and the node becomes ``@loop_0(0i64, cond, count, initial values..., invariants...)``. Scan
outputs are stacked on the way back (each frame holds its own iteration's value, not the stack
so far), in reverse order by putting the frame's value last. The VM runs the recursion on its
explicit frame stack: one frame an iteration (at most ``runtime.vm.thread.MAX_FRAMES``; a
runaway loop is a RelvmRuntimeError there).

Parameter types are declared (type inference needs the return type of a recursive function):
each dim of a carried value that the body provably keeps stays (the initial value's symbol, or
number), and one the body changes becomes a fresh ``?`` -- found by converting the body, then
converting it again with those dims generalized. Values from outside the body become extra
parameters as the body reads them (:class:`LoopFrame`), small known constants stay constants.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ...ir import dims as D
from ...ir.nodes import Call, Expr, Function, GlobalVar, If, Var
from ...ir.types import FuncType, TensorType, TupleType
from ...ops.registry import OPS
from ...passes.type_infer import _Mismatch, instantiate, join
from .importer import INLINE_LIMIT, Node, sanitize
from .values import Scope, Value

#: Conversions of a loop body, at most, while its carried values' types settle.
MAX_ROUNDS = 4

#: Body(i, cond, carried, invariants, count or None) -> (cond out or None, carried out,
#: scan outputs), all parameters of the loop's function.
Body = Callable[[Expr, Expr, list, list, "Expr | None"], tuple]


class LoopFrame:
    """The loop body being converted: its function's parameters for values from outside."""

    def __init__(self, n: Node, depth: int):
        self.n = n
        self.depth = depth  # how many loop bodies enclose this loop's node
        self.params: list[Var] = []
        self.args: list[Expr] = []  # the outer expression each parameter receives
        self.captured: dict[str, Value] = {}

    def scope(self, outer: Scope) -> Scope:
        """The body's outermost scope: names it does not bind come from ``outer``."""
        return Scope(outer=lambda name: self.capture_name(name, outer))

    def capture_name(self, name: str, outer: Scope) -> Value | None:
        if name in self.captured:
            return self.captured[name]
        v = outer.lookup(name)
        if v is None:
            return None
        if v.const is not None and not v.initializer and v.const.size <= INLINE_LIMIT:
            out = Value(name, const=v.const)  # inlined where the body uses it
        else:
            out = Value(name, const=v.const, graph_input=v.graph_input,
                        thunk=lambda: self.capture(name, self.outer_expr(v)))
        self.captured[name] = out
        return out

    def outer_expr(self, v: Value) -> Expr:
        """``v``'s expression where the loop's node is (the enclosing loop bodies only)."""
        imp = self.n.imp
        inner = imp.frames[self.depth:]
        del imp.frames[self.depth:]
        try:
            return imp.expr(v, self.n)
        finally:
            imp.frames.extend(inner)

    def capture(self, name: str, outer: Expr) -> Var:
        var = param_var(sanitize(name, "x"), general_type(outer.checked_type))
        self.params.append(var)
        self.args.append(outer)
        return var


def param_var(name: str, t) -> Var:
    var = Var(name, t)
    var.with_type(t)
    return var


def fresh() -> D.Dim:
    return D.as_expr(D.fresh())


def general_type(t):
    """``t`` with every dim that is neither a number nor a bare symbol made a fresh ``?``: a
    global function binds its symbols from bare dims (``n``), not from ``n*2``."""
    if isinstance(t, TupleType):
        return TupleType(tuple(general_type(f) for f in t.fields))
    if not isinstance(t, TensorType):
        return t
    return TensorType(tuple(d if isinstance(d, int) or _bare(d) else fresh() for d in t.shape),
                      t.dtype)


def _bare(d: D.Dim) -> bool:
    return isinstance(d, D.DimExpr) and len(d.terms) == 1 and d.terms[0][1] == 1 \
        and len(d.terms[0][0]) == 1 and isinstance(d.terms[0][0][0], D.Sym)


def tensor_type(n: Node, e: Expr, what: str) -> TensorType:
    t = e.checked_type
    if not isinstance(t, TensorType):
        raise n.fail(f"{what} is not a tensor: {t}")
    return t


def scalar_of(n: Node, e: Expr, dtype: str, what: str) -> Expr:
    """``e`` as a scalar of ``dtype`` (ONNX allows a 1-element tensor too)."""
    t = tensor_type(n, e, what)
    if t.dtype != dtype:
        raise n.fail(f"{what} must be {dtype}, got {t.dtype}")
    if t.ndim == 0:
        return e
    if t.ndim == 1 and D.prove_equal(t.shape[0], 1) is not False:
        return n.call("reshape", e, newshape=[])
    raise n.fail(f"{what} must be a scalar, got {t}")


def build_loop(n: Node, *, count: Expr | None, cond: Expr | None, carried: Sequence[Expr],
               invariants: Sequence[Expr], scan_reverse: Sequence[bool],
               body: Body) -> list[Expr]:
    """The results of a loop -- final carried values, then scan outputs stacked on a new
    leading axis -- as expressions where ``n`` is; the loop itself a new global function.

    It runs while ``i < count`` (no bound if None) and ``cond`` (the body's condition output
    feeds the next test; always true if None). ``body`` converts one iteration given the
    parameters, and returns ``(cond out or None, carried out, scan outputs)``; it may read
    names from outside through the frame's scope. ``scan_reverse[k]`` stacks output ``k`` last
    iteration first.
    """
    imp = n.imp
    name = f"loop_{imp.loop_count}"
    imp.loop_count += 1
    inits = [tensor_type(n, e, f"loop-carried value {k}") for k, e in enumerate(carried)]
    shapes = [list(general_type(t).shape) for t in inits]
    loose: set[tuple[int, int]] = set()  # (value, axis): dims the body changes
    for _ in range(MAX_ROUNDS):
        frame, params, outs = _convert_body(n, shapes, inits, count, cond, invariants, body)
        changed = False
        for k, (e, t0) in enumerate(zip(outs[1], inits)):
            t = tensor_type(n, e, f"the body's loop-carried output {k}")
            if t.dtype != t0.dtype or t.ndim != t0.ndim:
                raise n.fail(f"loop-carried value {k} enters the body as {t0} and leaves it as "
                             f"{t}: its element type and rank must stay")
            for a, (d, p) in enumerate(zip(t.shape, shapes[k])):
                if (k, a) not in loose and D.prove_equal(d, p) is not True:
                    shapes[k][a] = fresh()
                    loose.add((k, a))
                    changed = True
        if not changed:
            return _assemble(n, name, frame, params, outs, cond, count, carried, invariants,
                             scan_reverse)
    raise n.fail("the loop-carried values' shapes did not settle")  # each round loosens one


def _convert_body(n: Node, shapes: list, inits: list[TensorType], count: Expr | None,
                  cond: Expr | None, invariants: Sequence[Expr], body: Body):
    imp = n.imp
    frame = LoopFrame(n, len(imp.frames))
    i = param_var("i", TensorType((), "int64"))
    c = param_var("cond", TensorType((), "bool")) if cond is not None else None
    m = param_var("count", TensorType((), "int64")) if count is not None else None
    carried = [param_var(f"v{k}", TensorType(tuple(s), t.dtype))
               for k, (s, t) in enumerate(zip(shapes, inits))]
    inv = [param_var(f"w{k}", general_type(e.checked_type)) for k, e in enumerate(invariants)]
    imp.frames.append(frame)
    try:
        cond_out, carried_out, scans = body(i, c if c is not None else n.constant(True),
                                            carried, inv, m)
    finally:
        imp.frames.pop()
    params = dict(i=i, cond=c, count=m, carried=carried, inv=inv)
    return frame, params, (cond_out, list(carried_out), list(scans))


def _assemble(n: Node, name: str, frame: LoopFrame, params: dict, outs: tuple,
              cond: Expr | None, count: Expr | None, initial: Sequence[Expr],
              invariants: Sequence[Expr], scan_reverse: Sequence[bool]) -> list[Expr]:
    imp = n.imp
    cond_out, carried_out, scans = outs
    i, c, m, carried, inv = (params[k] for k in ("i", "cond", "count", "carried", "inv"))
    fparams = [i] + ([c] if c is not None else []) + ([m] if m is not None else []) \
        + carried + inv + frame.params
    # The return type: a carried dim the body keeps is the parameter's; one it changes, or a
    # scan output's number of iterations, is unknown at the call.
    carried_ret = [TensorType(tuple(d if D.prove_equal(d, o) is True else fresh()
                                    for d, o in zip(v.checked_type.shape,
                                                    tensor_type(n, e, "").shape)),
                              v.checked_type.dtype)
                   for v, e in zip(carried, carried_out)]
    loose = {(k, a) for k, (v, e) in enumerate(zip(carried, carried_out))
             for a, (d, o) in enumerate(zip(v.checked_type.shape, e.checked_type.shape))
             if D.prove_equal(d, o) is not True}
    where = _dims_of_params(carried + inv + frame.params, loose)
    scan_types, known = [], []
    for k, y in enumerate(scans):
        t = tensor_type(n, y, f"scan output {k}")
        # Shapes the loop's inputs determine stack onto an empty (0, ...) of that shape;
        # others (a slice by the iteration number) onto a placeholder the first row replaces.
        known.append(all(isinstance(d, int) or d in where for d in t.shape))
        dims = t.shape if known[-1] else tuple(fresh() for _ in t.shape)
        scan_types.append(TensorType((fresh(),) + tuple(dims), t.dtype))
    ret = TupleType(tuple(carried_ret + scan_types))
    fn_type = FuncType(tuple(p.checked_type for p in fparams), ret)
    gv = GlobalVar(name)
    gv.with_type(fn_type)

    one = n.constant(np.int64(1))
    keep = None
    if m is not None:
        keep = n.call("less", i, m)
    if c is not None:
        keep = c if keep is None else n.call("logical_and", keep, c)
    if keep is None:
        keep = n.constant(True)
    next_args = [n.call("add", i, one)]
    if c is not None:
        next_args.append(scalar_of(n, cond_out, "bool", "the body's condition output"))
    next_args += ([m] if m is not None else []) + list(carried_out) + inv + frame.params
    rec = _call(n, gv, next_args)
    then_fields = [n.field(rec, k) for k in range(len(carried))]
    else_fields: list[Expr] = list(carried)
    for k, y in enumerate(scans):
        row = n.call("expand_dims", y, axis=0, num_newaxis=1)
        rest = n.field(rec, len(carried) + k)
        pair = (rest, row) if scan_reverse[k] else (row, rest)
        stacked = n.call("concatenate", _tuple(pair), axis=0)
        if known[k]:
            else_fields.append(_zeros(n, scan_types[k], scan_types[k].shape[1:], where))
        else:
            else_fields.append(n.call("zeros", shape=[0] * (1 + y.checked_type.ndim),
                                      dtype=y.checked_type.dtype))
            rows = n.call("take", n.call("shape_of", rest, dtype="int64"),
                          n.constant(np.int64(0)), axis=0)
            first = If(n.call("equal", rows, n.constant(np.int64(0))), row, stacked)
            first.with_type(join(row.checked_type, stacked.checked_type))
            stacked = first
        then_fields.append(stacked)
    then_b, else_b = _tuple(then_fields), _tuple(else_fields)
    node = If(keep, then_b, else_b)
    node.with_type(join(then_b.checked_type, else_b.checked_type))
    imp.functions[name] = Function(tuple(fparams), node, ret)

    zero = n.constant(np.int64(0))
    call_args = [zero] + ([cond] if cond is not None else []) \
        + ([count] if count is not None else []) + list(initial) + list(invariants) \
        + frame.args
    result = _call(n, gv, call_args)
    return [n.field(result, k) for k in range(len(carried) + len(scans))]


def _call(n: Node, gv: GlobalVar, args: list[Expr]) -> Expr:
    call = Call(gv, tuple(args))
    try:
        t = instantiate(gv.checked_type, [a.checked_type for a in args], lambda s: True)
    except _Mismatch as e:
        raise n.fail(f"the loop's call of @{gv.name}: {e}") from None
    call.with_type(t)
    return call


def _tuple(fields):
    from .converters import make_tuple

    return make_tuple(list(fields))


def _zeros(n: Node, t: TensorType, trailing, where: dict) -> Expr:
    """An empty stack of scan outputs, ``(0, *trailing)``: a symbolic dim is read from the
    parameter it is a dim of (``where``: symbol -> (parameter, axis))."""
    shape = [0] + list(trailing)
    if all(isinstance(d, int) for d in shape):
        return n.call("zeros", shape=shape, dtype=t.dtype)
    parts = []
    for d in shape:
        if isinstance(d, int):
            parts.append(n.constant(np.array([d], np.int64)))
        else:
            var, axis = where[d]
            parts.append(n.call("strided_slice", n.call("shape_of", var, dtype="int64"),
                                begin=[axis], end=[axis + 1], strides=[1]))
    dims = n.call("concatenate", _tuple(parts), axis=0)
    return n.call("dyn.reshape", n.call("zeros", shape=[0], dtype=t.dtype), dims, allowzero=1)


def _dims_of_params(params: Sequence[Var], skip: set) -> dict:
    """Bare dims of ``params`` (not the ``skip`` positions): dim -> (parameter, axis)."""
    where: dict = {}
    for k, var in enumerate(params):
        for a, d in enumerate(var.checked_type.shape):
            if not isinstance(d, int) and _bare(d) and (k, a) not in skip:
                where.setdefault(d, (var, a))
    return where
