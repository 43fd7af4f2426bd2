"""float16 computed in float32 where the C backend has no float16 kernel.

relvm stores float16 tensors as they are (inputs, outputs, weights, data movement), and the C
backend has float16 kernels for casts, comparisons and a few elementwise ops. Every other op on
float16 -- a conv, a matmul, a softmax, a multiply -- is computed in float32: its float16
operands are cast to float32, the op runs on its float32 kernel, and its float16 results are
cast back (rounded to nearest even, as ONNX Runtime's CPU provider does with the casts it
inserts around the float16 nodes it has no kernel for). Fusion then folds the casts into the
kernels around them: ``cast -> multiply -> cast`` is one loop.

The rewrite is made only where it helps: a call whose op has a C kernel for its dtypes as they
are stays as it is, and so does one whose float32 form has no kernel either (the build then
names the missing float16 kernel, as before), or whose attributes name a dtype (``cast``,
``zeros``: the attribute decides the result's type). The NumPy backend computes float16 as
NumPy does and is not rewritten.
"""

from __future__ import annotations

from ..ir.nodes import Call, Expr, Tuple, TupleGetItem
from ..ir.types import TensorType, TupleType, Type
from ..ops.registry import OPS, Op
from .rewrite import Rewriter, rewrite_module

#: The narrow float dtype computed in the wide one.
NARROW, WIDE = "float16", "float32"


class _Widen(Rewriter):
    def rebuilt(self, old: Call, new: Call) -> Call:
        # A call rebuilt because an argument was widened keeps its type: what replaced the
        # argument (a cast back to float16) has the argument's type.
        if old.checked_type is not None:
            new.with_type(old.checked_type)
        return new

    def rewrite_call(self, call: Call) -> Expr:
        op = call.op
        if not isinstance(op, Op) or call.checked_type is None or _names_a_dtype(call.attrs):
            return call
        arg_types = [a.checked_type for a in call.args]
        if any(t is None for t in arg_types):
            return call
        ins, outs = _leaves(arg_types), _leaves([call.checked_type])
        if ins is None or outs is None or NARROW not in ins + outs:
            return call
        if _has_kernel(op, call.attrs, arg_types, [call.checked_type]):
            return call
        wide_args = [_widened_type(t) for t in arg_types]
        wide_out = _widened_type(call.checked_type)
        if not _has_kernel(op, call.attrs, wide_args, [wide_out]):
            return call
        args = []
        for a, t in zip(call.args, arg_types):
            new = _cast_leaves(a, t, WIDE)
            if new is None:
                return call
            args.append(new)
        wide = Call(op, tuple(args), call.attrs, span=call.span)
        wide.with_type(wide_out)
        back = _cast_leaves(wide, wide_out, NARROW, original=call.checked_type)
        return call if back is None else back


def _names_a_dtype(attrs) -> bool:
    return any(isinstance(v, str) and v in (NARROW, WIDE) for v in dict(attrs or {}).values())


def _leaves(types: list[Type]) -> list[str] | None:
    """The dtypes of the tensors in ``types`` (tuples of tensors flattened), or None when a
    value is neither."""
    out: list[str] = []
    for t in types:
        if isinstance(t, TensorType):
            out.append(t.dtype)
        elif isinstance(t, TupleType) and all(isinstance(f, TensorType) for f in t.fields):
            out.extend(f.dtype for f in t.fields)
        else:
            return None
    return out


def _widened_type(t: Type) -> Type:
    if isinstance(t, TensorType):
        return TensorType(tuple(t.shape), WIDE) if t.dtype == NARROW else t
    return TupleType(tuple(_widened_type(f) for f in t.fields))


def _has_kernel(op: Op, attrs, in_types: list[Type], out_types: list[Type]) -> bool:
    from ..backends import c
    from ..compiler.lower import _jsonable
    from ..runtime.executable import KernelEntry

    ins = [t for t in in_types for t in (t.fields if isinstance(t, TupleType) else (t,))]
    outs = [t for t in out_types for t in (t.fields if isinstance(t, TupleType) else (t,))]
    groups = tuple(len(t.fields) if isinstance(t, TupleType) else -1 for t in in_types)
    entry = KernelEntry(op.name, op.name, _jsonable(dict(attrs or {})),
                        tuple(t.dtype for t in ins), tuple(t.dtype for t in outs), groups,
                        tuple(t.ndim for t in ins), tuple(t.ndim for t in outs))
    return c.supports(entry)


def _cast(e: Expr, t: TensorType, dtype: str) -> Expr:
    out = Call(OPS["cast"], (e,), OPS["cast"].make_attrs({"dtype": dtype}),
               span=getattr(e, "span", None))
    out.with_type(TensorType(tuple(t.shape), dtype))
    return out


def _cast_leaves(e: Expr, t: Type, dtype: str, original: Type | None = None) -> Expr | None:
    """``e`` with each tensor whose dtype is the other float one cast to ``dtype`` (a tensor
    that was not ``NARROW`` in ``original`` stays as it is); None for a tuple that is not a
    tuple expression or a call's result."""
    src = WIDE if dtype == NARROW else NARROW
    if isinstance(t, TensorType):
        was = original.dtype if isinstance(original, TensorType) else t.dtype
        return _cast(e, t, dtype) if t.dtype == src and (original is None or was == NARROW) else e
    if not isinstance(t, TupleType):
        return None
    fields = []
    for i, ft in enumerate(t.fields):
        if isinstance(e, Tuple):
            item = e.fields[i]
        elif isinstance(e, Call):
            item = TupleGetItem(e, i)
            item.with_type(ft)
        else:
            return None
        of = original.fields[i] if isinstance(original, TupleType) else None
        new = _cast_leaves(item, ft, dtype, of)
        if new is None:
            return None
        fields.append(new)
    out = Tuple(tuple(fields))
    out.with_type(TupleType(tuple(f.checked_type for f in fields)))
    return out


def widen_float16(module):
    """The module with float16 ops the C backend lacks computed in float32 (module docstring)."""
    return rewrite_module(module, _Widen)
