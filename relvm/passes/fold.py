"""Build-time simplification: constant folding and batch-norm folding.

- An op call whose inputs are all constants is evaluated with its NumPy reference and becomes a
  constant (ops with no inputs, like ``zeros``, too). A call whose reference raises is left for
  run time, which reports the error where the program runs; so is one whose result would be
  larger than both its inputs and ``MAX_GROWTH_BYTES``.
- A call whose symbolic value (``ops/values.py``, found by type inference) is all numbers
  becomes that constant, whatever its inputs: ``take(shape_of(x), 2)`` of an ``x`` of
  ``[n, 12, 64]`` is 64, as a static build of it would fold. One whose value is an input's
  (of the same type) is that input: ``maximum(n, 0)``, ``where(False, n + 512, n)``.
- A tuple rebuilt from all the fields of another, in order (``(%r.0, %r.1)`` of an if's pair
  of results), is that tuple: the results are then bound to the caller's output arrays
  through the if's branches, and no tuple is taken apart and made again on each call.
- ``nn.batch_norm`` (inference) becomes a per-channel scale and shift; after an ``nn.conv2d``
  with constant weights used nowhere else, the scale is folded into the weights and the shift
  becomes an ``nn.bias_add``, so the conv's epilogue fusion absorbs it.
- Simplifications that constants allow (``simplify``): ``power(x, c)`` of a float ``x`` by a
  one-element constant ``c`` of 1, 2, 3 or 4 becomes ``x`` or products of ``x`` (GELU's
  ``x ** 3``, a variance's ``x ** 2``), so a fused loop multiplies in vector registers instead
  of calling ``pow`` for each element (which took longer than the rest of the loop together);
  ``nn.matmul(a, W)`` by a constant ``W`` becomes ``nn.dense(a, W^T)``, whose constant weights
  the C backend packs once per VM rather than on every call (GPT-2's and ONNX ``Gemm``'s
  layers, 2-3x faster when the weights are larger than the caches).
- Elementwise ops move before reshapes (``simplify``): ``f(squeeze(x))`` of a one-input,
  shape-preserving elementwise ``f`` (relu, sigmoid, cast, ...) becomes ``squeeze(f(x))`` (also
  through ``expand_dims`` and ``reshape``) when the reshape and ``x`` have no other use, so
  ``f`` fuses into what computed ``x``; and ``expand_dims(squeeze(x, [a]), a)`` of the same
  type as ``x`` is ``x``. A Conv1d lowered to ``expand_dims -> conv2d -> squeeze`` then keeps
  its bias and activation in the conv's epilogue, and consecutive Conv1ds meet as conv2ds
  (silero-vad's encoder ran a separate relu after each of its convs).
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..ir.nodes import Call, Constant, Expr, Module, Tuple, TupleGetItem, post_order
from ..ir.types import TensorType, TupleType, tensor_types
from ..ops.dynamic import arange_length
from ..ops import values
from ..ops.registry import ELEMWISE, OPS, Op
from .rewrite import Rewriter, rewrite_module


#: Folding may make a constant larger than the constants it reads only up to this size: a fill
#: or a broadcast of a large shape is left to run time, rather than filled here (seconds,
#: gigabytes) and stored in the executable.
MAX_GROWTH_BYTES = 2**24


class _FoldConstants(Rewriter):
    def visit_Call(self, call: Call) -> Expr:
        known = _known_value(call)
        if known is not None:
            return known
        same = _same_as_input(call)
        return self(same) if same is not None else super().visit_Call(call)

    def rewrite_call(self, call: Call) -> Expr:
        if not isinstance(call.op, Op) or not all(isinstance(a, Constant) for a in call.args):
            return call
        read = sum(a.data.nbytes for a in call.args if a.data is not None)
        made = result_bytes(call)
        if made is None or made > max(read, MAX_GROWTH_BYTES):
            return call
        try:
            with np.errstate(all="ignore"):
                value = call.op.reference(call.attrs, *[a.data for a in call.args])
        except Exception:  # noqa: BLE001  (the error is reported when the program runs)
            return call
        return _constant(value, call)

    def rewrite_get_item(self, g: TupleGetItem) -> Expr:
        if isinstance(g.tuple_value, Tuple):
            return g.tuple_value.fields[g.index]
        return g

    def visit_Tuple(self, t: Tuple) -> Expr:
        new = super().visit_Tuple(t)
        whole = _projected(t)
        if not (whole is not None and isinstance(whole.checked_type, TupleType)
                and len(whole.checked_type.fields) == len(t.fields)):
            return new
        # The input module's tuple has the type (a rewritten one has none yet).
        same = _projected(new) if isinstance(new, Tuple) else None
        return same if same is not None else new


def _projected(t: Tuple) -> Expr | None:
    """``v`` if ``t`` is ``(v.0, v.1, ..., v.k)`` (all of v's fields if v has k + 1: an if's
    results returned as they are), else None."""
    fields = t.fields
    if fields and all(isinstance(f, TupleGetItem) and f.index == i
                      and f.tuple_value is fields[0].tuple_value for i, f in enumerate(fields)):
        return fields[0].tuple_value
    return None


def _known_value(call: Call) -> Constant | None:
    """The constant a call's symbolic value says it computes, if every entry is a number."""
    k, t = call.shape_value, call.checked_type
    if k is None or k.assumed or not isinstance(k.value, np.ndarray) \
            or not isinstance(t, TensorType) or not values.is_static(k.value):
        return None
    return Constant(values.as_array(k.value, t.dtype), span=call.span)


def _same_as_input(call: Call) -> Expr | None:
    """The input whose value and type a call's are, if any (the call does nothing)."""
    k = call.shape_value
    if k is None or k.assumed or not isinstance(call.op, Op):
        return None
    for a in call.args:
        if a.checked_type == call.checked_type and values.same(values.value_of(a), k.value):
            return a
    return None


def result_bytes(call: Call) -> int | None:
    """The bytes ``call`` (an op on constants) would make, from its type, without running it;
    None where that cannot be known cheaply."""
    result = call.checked_type or _inferred(call)
    types = list(tensor_types(result)) if result is not None else []
    if types and all(t.is_static for t in types):
        return sum(math.prod(t.shape) * dtypes.to_numpy(t.dtype).itemsize for t in types)
    if call.op.name == "arange":
        # The reference's length: from the inputs converted to the result dtype.
        dtype = result.dtype
        with np.errstate(all="ignore"):
            start, stop, step = (a.data.astype(dtype).item() for a in call.args)
        try:
            return arange_length(start, stop, step) * dtypes.to_numpy(dtype).itemsize
        except (ValueError, OverflowError, ZeroDivisionError):
            return None  # the reference would raise: left for run time
    # dyn.reshape keeps its input's size, argwhere makes at most ndim int32 per element.
    return 256 * sum(a.data.nbytes for a in call.args) if call.op.data_dependent else None


def _inferred(call: Call):
    """The type of a call rebuilt by this pass (its arguments are constants), or None."""
    try:
        args = [TensorType(a.data.shape, dtypes.from_numpy(a.data.dtype)) for a in call.args]
        return call.op.infer(call.attrs, *args)
    except Exception:  # noqa: BLE001  (the reference would fail too: left for run time)
        return None


def _constant(value, call: Call) -> Expr:
    if isinstance(value, tuple):
        return Tuple(tuple(_constant(v, call) for v in value), span=call.span)
    return Constant(np.asarray(value), span=call.span)


def fold_constants(module: Module) -> Module:
    return rewrite_module(module, _FoldConstants)


class _Simplify(Rewriter):
    def __init__(self, uses: dict[int, int]):
        super().__init__()
        self.uses = uses
        # id(rebuilt call) -> (that call, id of the input call it stands for). The rebuilt call
        # is kept alive here: one dropped by a rewrite could otherwise be freed and its id given
        # to a new expression, which would then count the uses of a call it is not.
        self.original: dict[int, tuple[Call, int]] = {}

    def uses_of(self, e: Expr) -> int:
        """How many times the input module uses the expression e stands for (a call rebuilt
        because an argument upstream was simplified -- GELU's power -- counts as the original)."""
        rebuilt = self.original.get(id(e))
        return self.uses.get(rebuilt[1] if rebuilt is not None else id(e), 0)

    def rebuilt(self, old: Call, new: Call) -> Call:
        # A call rebuilt because an argument was simplified keeps its type (no rewrite here
        # changes a type), so a rewrite of it or after it still sees the types; and it counts
        # the uses of the call it stands for.
        if old.checked_type is not None:
            new.with_type(old.checked_type)
        self.original[id(new)] = (new, id(old))  # old is the input module's (Rewriter.visit_Call)
        return new

    def visit_Call(self, call: Call) -> Expr:
        new = super().visit_Call(call)
        # What a rewrite made in its place has its type too: the products of a small power, the
        # dense layer of a matmul by a constant (the reshape moves type what they build).
        if new is not call and new.checked_type is None and call.checked_type is not None:
            new.with_type(call.checked_type)
        return new

    def rewrite_call(self, call: Call) -> Expr:
        if call.op is OPS["power"]:
            return _small_power(call)
        if call.op is OPS["nn.matmul"]:
            return _matmul_by_constant(call)
        if call.op is OPS["expand_dims"]:
            return _undo_squeeze(call)
        if isinstance(call.op, Op) and call.op.pattern == ELEMWISE:
            return self._before_reshape(call)
        return call

    def _before_reshape(self, call: Call) -> Expr:
        """reshape(f(x)) for f(reshape(x)): see the module docstring."""
        if len(call.args) != 1:
            return call
        inner = call.args[0]
        if not (isinstance(inner, Call) and inner.op in _RESHAPES and len(inner.args) == 1
                and self.uses_of(inner) == 1):
            return call
        x = inner.args[0]
        t, r, xt = call.checked_type, inner.checked_type, x.checked_type
        # f keeps its operand's shape (not `full`, whose input is a fill value), and x is used
        # by the reshape alone (else both x and f(x) would be kept).
        if not (isinstance(t, TensorType) and isinstance(r, TensorType)
                and isinstance(xt, TensorType) and tuple(t.shape) == tuple(r.shape)
                and self.uses_of(x) == 1):
            return call
        moved = Call(call.op, (x,), call.attrs, span=call.span)
        moved.with_type(TensorType(tuple(xt.shape), t.dtype))
        outer = Call(inner.op, (moved,), inner.attrs, span=inner.span)
        outer.with_type(t)
        return outer


def _small_power(call: Call) -> Expr:
    """x, x * x, x * x * x or (x * x) * (x * x) for power(x, c) by a constant 1, 2, 3 or 4."""
    x, c = call.args
    t = x.checked_type
    # The result must be x's type: a float x, c no wider than x (a constant of more dims would
    # broadcast x into a larger shape), c's dtype x's.
    if not (isinstance(c, Constant) and c.data is not None and isinstance(t, TensorType)
            and t.dtype.startswith("float") and c.data.size == 1 and c.data.ndim <= t.ndim
            and c.data.dtype == dtypes.to_numpy(t.dtype)):
        return call
    power = float(c.data.reshape(()))
    if power not in (1.0, 2.0, 3.0, 4.0):
        return call
    if power == 1.0:
        return x

    def times(a: Expr, b: Expr) -> Expr:
        return Call(OPS["multiply"], (a, b), OPS["multiply"].make_attrs(), span=call.span)

    square = times(x, x)
    return {2.0: square, 3.0: times(square, x), 4.0: times(square, square)}[power]


def _matmul_by_constant(call: Call) -> Expr:
    """nn.dense(a, W^T) for nn.matmul(a, W) by a constant W (a not transposed)."""
    w = call.args[1]
    if call.attrs.transpose_a or not isinstance(w, Constant) or w.data is None \
            or w.data.ndim != 2:
        return call
    weight = w if call.attrs.transpose_b else Constant(np.ascontiguousarray(w.data.T),
                                                      span=w.span)
    attrs = OPS["nn.dense"].make_attrs({"units": call.attrs.units,
                                         "out_dtype": call.attrs.out_dtype})
    return Call(OPS["nn.dense"], (call.args[0], weight), attrs, span=call.span)


#: Ops that only reshape: the elements in the same order (see _Simplify._before_reshape).
_RESHAPES = (OPS["squeeze"], OPS["expand_dims"], OPS["reshape"])


def _undo_squeeze(call: Call) -> Expr:
    """x for expand_dims(squeeze(x, axis=[a]), axis=a) when the result has x's type."""
    inner = call.args[0]
    if not (isinstance(inner, Call) and inner.op is OPS["squeeze"]
            and call.attrs.num_newaxis == 1 and inner.attrs.axis is not None
            and len(inner.attrs.axis) == 1):
        return call
    x = inner.args[0]
    t, xt = call.checked_type, x.checked_type
    if not (isinstance(t, TensorType) and isinstance(xt, TensorType) and t.ndim == xt.ndim):
        return call
    ndim = xt.ndim
    if inner.attrs.axis[0] % ndim != call.attrs.axis % ndim or tuple(t.shape) != tuple(xt.shape) \
            or t.dtype != xt.dtype:
        return call
    return x


def simplify(module: Module) -> Module:
    return rewrite_module(module, _Simplify, uses=use_counts(module))


class _FoldBatchNorm(Rewriter):
    def __init__(self, uses: dict[int, int]):
        super().__init__()
        self.uses = uses

    def visit_TupleGetItem(self, g: TupleGetItem) -> Expr:
        bn = g.tuple_value
        if g.index == 0 and isinstance(bn, Call) and bn.op is OPS["nn.batch_norm"] \
                and all(isinstance(a, Constant) for a in bn.args[1:]) \
                and self.uses.get(id(bn), 0) == 1:
            return self.fold(bn)
        return super().visit_TupleGetItem(g)

    def fold(self, bn: Call) -> Expr:
        data = bn.args[0]
        gamma, beta, mean, var = (a.data for a in bn.args[1:])
        a = bn.attrs
        dtype = data.checked_type.dtype
        scale = (gamma if a.scale else np.ones_like(gamma)) / np.sqrt(var + a.epsilon)
        shift = (beta if a.center else np.zeros_like(beta)) - mean * scale
        ndim = data.checked_type.ndim
        axis = a.axis % ndim
        conv = data
        if isinstance(conv, Call) and conv.op is OPS["nn.conv2d"] and axis == 1 \
                and isinstance(conv.args[1], Constant) and self.uses.get(id(conv), 0) == 1:
            w = conv.args[1].data
            folded = Call(conv.op, (self(conv.args[0]),
                                    Constant((w * scale.reshape(-1, 1, 1, 1)).astype(w.dtype))),
                          conv.attrs, span=conv.span)
            return Call(OPS["nn.bias_add"], (folded, Constant(shift.astype(dtype))),
                        OPS["nn.bias_add"].make_attrs({"axis": 1}), span=bn.span)
        shape = (-1,) + (1,) * (ndim - axis - 1)
        scaled = Call(OPS["multiply"], (self(data), Constant(scale.reshape(shape).astype(dtype))),
                      OPS["multiply"].make_attrs(), span=bn.span)
        return Call(OPS["add"], (scaled, Constant(shift.reshape(shape).astype(dtype))),
                    OPS["add"].make_attrs(), span=bn.span)


def use_counts(module: Module) -> dict[int, int]:
    """How many times each node is an argument of another node (across all functions)."""
    from ..ir.nodes import children

    uses: dict[int, int] = {}
    for fn in module.functions.values():
        for n in post_order(fn.body, into_functions=True):
            for c in children(n):
                uses[id(c)] = uses.get(id(c), 0) + 1
    return uses


def fold_batch_norm(module: Module) -> Module:
    return rewrite_module(module, _FoldBatchNorm, uses=use_counts(module))
