"""Loops as recursive global functions: what ONNX's Loop and Scan become.

Relay has no loop construct; a loop is a global function that calls itself. :func:`build_loop`
converts the body once for the function's parameters -- ``%i``, ``%cond``, ``%count``, the
carried values, the invariants (a Scan's inputs) and the values the body reads from outside
(:class:`LoopFrame`) -- and makes one of two shapes of recursion:

- with a trip count, halves (:func:`_tree`)::

    def @loop_0(%i: int64, %length: int64, %count: int64, %v0: ..., %w0: ...)
        -> (carried..., Tensor[(?, ...)] per scan output) {
      if (less(%length, 1i64)) { (%v0, <empty (0, ...) stacks>) }
      else if (equal(%length, 1i64)) { <the body at %i>: (carried out, expand_dims(rows)) }
      else {
        %h = divide(%length, 2i64);
        %a = @loop_0(%i, %h, %count, %v0, %w0);
        %b = @loop_0(add(%i, %h), subtract(%length, %h), %count, %a.0, %w0);
        (%b.0, concatenate((%a.1, %b.1)))
      }
    }

  called as ``@loop_0(0i64, count, count, ...)``: log2(count) frames deep, each scan row
  copied once a level (a condition input is threaded through, and a first half that stopped
  the loop is the result);
- without one (or with a sentinel like 2**63 - 1), a chain (:func:`_chain`): ``if (i < count
  and cond) { body; @loop_0(i + 1, ...) } else { carried }``, one frame an iteration, so the
  VM's frame limit (``runtime.vm.thread.MAX_FRAMES``) stops a runaway loop with a
  RelvmRuntimeError; its scan stacks copy the rest each frame (quadratic).

Reverse scan directions put the later rows first. Parameter types are declared (type inference
needs the return type of a recursive function): each dim of a carried value that the body
provably keeps stays (the initial value's symbol, or number), and one the body changes becomes
a fresh ``?`` -- found by converting the body, then converting it again with those dims
loosened. Small known constants the body reads stay constants.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ...ir import dims as D
from ...ir.nodes import Call, Expr, Function, GlobalVar, If, Var
from ...ir.types import FuncType, ListType, TensorType, TupleType
from ...passes.type_infer import _list_fits, _Mismatch, instantiate, join, join_lists
from .importer import INLINE_LIMIT, Node, sanitize
from .values import Scope, Value

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


def _is_empty_list(e: Expr) -> bool:
    return isinstance(e, Call) and getattr(e.op, "name", None) == "list.empty"


def _carried_type(n: Node, e: Expr, what: str) -> TensorType | ListType:
    """A loop-carried value's type: a tensor's, or a list's (an ONNX sequence)."""
    t = e.checked_type
    return t if isinstance(t, ListType) else tensor_type(n, e, what)


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
               body: Body, declared: Sequence[ListType | None] = ()) -> list[Expr]:
    """The results of a loop -- final carried values, then scan outputs stacked on a new
    leading axis -- as expressions where ``n`` is; the loop itself a new global function.

    It runs while ``i < count`` (no bound if None) and ``cond`` (the body's condition output
    feeds the next test; always true if None). ``body`` converts one iteration given the
    parameters, and returns ``(cond out or None, carried out, scan outputs)``; it may read
    names from outside through the frame's scope. ``scan_reverse[k]`` stacks output ``k`` last
    iteration first. ``declared[k]``, for a carried sequence, is the list type the body
    declares for it: the loop's list is of that type (joined with the entering list's), and an
    empty list entering takes it (an ONNX SequenceEmpty has no element shape of its own).
    """
    imp = n.imp
    carried = list(carried)
    for k, want in enumerate(declared):
        if want is not None and _is_empty_list(carried[k]) and want.ranked:
            carried[k] = n.call("list.empty", dtype=want.elem.dtype,
                                shape=[d if isinstance(d, int) else -1 for d in want.elem.shape])
    name = f"loop_{imp.loop_count}"
    imp.loop_count += 1
    inits = [_carried_type(n, e, f"loop-carried value {k}") for k, e in enumerate(carried)]
    # A tensor's shape, each dim loosened to a fresh ? once the body changes it; a list's type
    # (ONNX sequences: the body grows it), joined with what the body makes of it.
    shapes = [t if isinstance(t, ListType) else list(general_type(t).shape) for t in inits]
    for k, want in enumerate(declared):
        if want is not None and isinstance(shapes[k], ListType):
            shapes[k] = join_lists(shapes[k], want)
    loose: set[tuple[int, int]] = set()  # (value, axis): dims the body changes
    rounds = 1 + sum(2 if isinstance(t, ListType) else t.ndim for t in inits)
    for _ in range(rounds):  # each round but the last loosens a dim or widens a list's type
        frame, params, outs = _convert_body(n, shapes, inits, count, cond, invariants, body)
        changed = False
        for k, (e, t0) in enumerate(zip(outs[1], inits)):
            if isinstance(t0, ListType):
                t = e.checked_type
                if not isinstance(t, ListType) or t.elem.dtype != t0.elem.dtype:
                    raise n.fail(f"loop-carried value {k} enters the body as {t0} and leaves "
                                 f"it as {t}: a sequence of the same element type must stay")
                if not _list_fits(t, shapes[k]):
                    shapes[k] = join_lists(shapes[k], t)
                    changed = True
                continue
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
    raise AssertionError("unreachable: every dim is loose by then")


def _convert_body(n: Node, shapes: list, inits: list[TensorType], count: Expr | None,
                  cond: Expr | None, invariants: Sequence[Expr], body: Body):
    imp = n.imp
    frame = LoopFrame(n, len(imp.frames))
    i = param_var("i", TensorType((), "int64"))
    c = param_var("cond", TensorType((), "bool")) if cond is not None else None
    m = param_var("count", TensorType((), "int64")) if count is not None else None
    carried = [param_var(f"v{k}", s if isinstance(s, ListType) else TensorType(tuple(s), t.dtype))
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
    cond_out, carried_out, scans = outs
    m, carried, inv = params["count"], params["carried"], params["inv"]
    # The return type: a carried dim the body keeps is the parameter's; one it changes, or a
    # scan output's number of iterations, is unknown at the call.
    carried_ret = [v.checked_type if isinstance(v.checked_type, ListType) else
                   TensorType(tuple(d if D.prove_equal(d, o) is True else fresh()
                                    for d, o in zip(v.checked_type.shape,
                                                    tensor_type(n, e, "").shape)),
                              v.checked_type.dtype)
                   for v, e in zip(carried, carried_out)]
    loose = {(k, a) for k, (v, e) in enumerate(zip(carried, carried_out))
             if isinstance(v.checked_type, TensorType)
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
    empties = [_zeros(n, t, t.shape[1:], where) if ok else
               n.call("zeros", shape=[0] * t.ndim, dtype=t.dtype)
               for t, ok in zip(scan_types, known)]
    parts = _Parts(n, name, frame, params, outs, carried_ret, scan_types, known, empties,
                   scan_reverse)
    if m is not None and not _sentinel(count):
        return _tree(parts, cond, count, initial, invariants)
    return _chain(parts, cond, count, initial, invariants)


#: A trip count known at import from this on is a "no bound" sentinel (PyTorch's while loops
#: export 2**63 - 1): such a loop runs as a chain, whose depth the VM's frame limit bounds.
SENTINEL_COUNT = 2**31


def _sentinel(count: Expr | None) -> bool:
    data = getattr(count, "data", None)
    return data is not None and int(np.asarray(data).reshape(-1)[0]) >= SENTINEL_COUNT


class _Parts:
    """A converted loop body and its types, for :func:`_chain` or :func:`_tree`."""

    def __init__(self, n, name, frame, params, outs, carried_ret, scan_types, known, empties,
                 scan_reverse):
        self.n, self.name, self.frame = n, name, frame
        self.i, self.c, self.m = params["i"], params["cond"], params["count"]
        self.carried, self.inv = params["carried"], params["inv"]
        self.cond_out, self.carried_out, self.scans = outs
        self.carried_ret, self.scan_types, self.known = carried_ret, scan_types, known
        self.empties, self.reverse = empties, scan_reverse

    def function(self, lead: list[Var], ret_lead: list, body_of) -> GlobalVar:
        """Declares @name(lead..., carried..., invariants..., captured...) -> (ret_lead...,
        carried..., stacks...), its body ``body_of(gv)``."""
        fparams = lead + self.carried + self.inv + self.frame.params
        ret = TupleType(tuple(ret_lead + self.carried_ret + self.scan_types))
        gv = GlobalVar(self.name)
        gv.with_type(FuncType(tuple(p.checked_type for p in fparams), ret))
        self.n.imp.functions[self.name] = Function(tuple(fparams), body_of(gv), ret)
        return gv

    def cond_out_scalar(self) -> Expr:
        return scalar_of(self.n, self.cond_out, "bool", "the body's condition output")

    def rows(self) -> list[Expr]:
        return [self.n.call("expand_dims", y, axis=0, num_newaxis=1) for y in self.scans]

    def merge(self, k: int, earlier: Expr, later: Expr) -> Expr:
        """Stack ``k`` of iterations in order, ``earlier``'s before ``later``'s (after them for
        a reverse direction). A shape the inputs do not determine has an empty placeholder of
        another shape, which a concatenate would refuse: the other side is taken then."""
        n = self.n
        pair = (later, earlier) if self.reverse[k] else (earlier, later)
        both = n.call("concatenate", _tuple(pair), axis=0)
        if self.known[k]:
            return both
        return _if(_no_rows(n, earlier), later, _if(_no_rows(n, later), earlier, both))


def _no_rows(n: Node, stack: Expr) -> Expr:
    rows = n.call("take", n.call("shape_of", stack, dtype="int64"), n.constant(np.int64(0)),
                  axis=0)
    return n.call("equal", rows, n.constant(np.int64(0)))


def _if(cond: Expr, then: Expr, else_: Expr) -> If:
    node = If(cond, then, else_)
    node.with_type(join(then.checked_type, else_.checked_type))
    return node


def _chain(p: _Parts, cond, count, initial, invariants) -> list[Expr]:
    """One call an iteration: @loop(i, cond, count, ...) runs iteration i and calls
    @loop(i + 1, ...); its scan stacks are this row and the rest's stack (copies quadratic in
    the iterations). For loops with no trip count: a runaway one meets the frame limit."""
    n, i, c, m = p.n, p.i, p.c, p.m
    lead = [i] + ([c] if c is not None else []) + ([m] if m is not None else [])

    def body_of(gv):
        keep = None
        if m is not None:
            keep = n.call("less", i, m)
        if c is not None:
            keep = c if keep is None else n.call("logical_and", keep, c)
        nxt = [n.call("add", i, n.constant(np.int64(1)))]
        nxt += [p.cond_out_scalar()] if c is not None else []
        nxt += ([m] if m is not None else []) + list(p.carried_out) + p.inv + p.frame.params
        rec = _call(n, gv, nxt)
        count_c = len(p.carried)
        then = [n.field(rec, k) for k in range(count_c)]
        then += [p.merge(k, row, n.field(rec, count_c + k)) for k, row in enumerate(p.rows())]
        done = _tuple(list(p.carried) + p.empties)
        return _if(keep if keep is not None else n.constant(True), _tuple(then), done)

    gv = p.function(lead, [], body_of)
    args = [n.constant(np.int64(0))] + ([cond] if cond is not None else []) \
        + ([count] if count is not None else []) + list(initial) + list(invariants) \
        + p.frame.args
    result = _call(n, gv, args)
    return [n.field(result, k) for k in range(len(p.carried) + len(p.scans))]


def _tree(p: _Parts, cond, count, initial, invariants) -> list[Expr]:
    """Halves of the iterations: @loop(lo, length, cond, count, ...) runs iterations
    lo .. lo + length - 1 as @loop over the first half, then (if its condition still holds)
    over the second from the first's results; one iteration is the body. The recursion is
    log2(count) deep and each row is copied once a level: n log n, not n**2."""
    n, i, c, m = p.n, p.i, p.c, p.m
    length = param_var("length", TensorType((), "int64"))
    lead = [i, length] + ([c] if c is not None else []) + [m]
    ret_lead = [TensorType((), "bool")] if c is not None else []
    flow = len(ret_lead) + len(p.carried)  # what one half hands the next: cond, carried

    def args(lo, size, state, bound=None, shared=None):
        """The arguments of a call: ``state`` is (cond, carried...); ``bound`` the trip count
        and ``shared`` the invariants and captured values, the parameters' own by default."""
        shared = p.inv + p.frame.params if shared is None else shared
        return [lo, size] + list(state[:len(ret_lead)]) + [m if bound is None else bound] \
            + list(state[len(ret_lead):]) + list(shared)

    def body_of(gv):
        state = ([c] if c is not None else []) + list(p.carried)
        none = _tuple(state + p.empties)
        leaf = _tuple(([p.cond_out_scalar()] if c is not None else []) + list(p.carried_out)
                      + p.rows())
        if c is not None:
            leaf = _if(c, leaf, none)
        half = n.call("divide", length, n.constant(np.int64(2)))
        first = _call(n, gv, args(i, half, state))
        mid = [n.field(first, k) for k in range(flow)]
        second = _call(n, gv, args(n.call("add", i, half), n.call("subtract", length, half),
                                   mid))
        both = [n.field(second, k) for k in range(flow)]
        both += [p.merge(k, n.field(first, flow + k), n.field(second, flow + k))
                 for k in range(len(p.scans))]
        split: Expr = _tuple(both)
        if c is not None:
            split = _if(mid[0], split, first)  # the first half stopped the loop
        one = n.constant(np.int64(1))
        return _if(n.call("less", length, one), none,
                   _if(n.call("equal", length, one), leaf, split))

    gv = p.function(lead, ret_lead, body_of)
    start = ([cond] if cond is not None else []) + list(initial)
    result = _call(n, gv, args(n.constant(np.int64(0)), count, start, count,
                               list(invariants) + p.frame.args))
    skip = len(ret_lead)
    return [n.field(result, skip + k) for k in range(len(p.carried) + len(p.scans))]


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
        if not isinstance(var.checked_type, TensorType):
            continue  # a list: its elements' dims are not the loop's
        for a, d in enumerate(var.checked_type.shape):
            if not isinstance(d, int) and _bare(d) and (k, a) not in skip:
                where.setdefault(d, (var, a))
    return where
