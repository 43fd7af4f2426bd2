"""Layout and shape ops: reshape, transpose, concatenate, split, squeeze, expand_dims,
broadcast_to, and the fill ops (zeros, ones, full and their ``*_like``).

Indexing ops (strided_slice, take) live in ``indexing.py``.

Each type relation computes the output dims with the symbolic dim algebra, so ``reshape`` of
``(n, 12)`` with ``newshape=[-1, 4]`` is ``(n*3, 4)``. What the types already refute is an
OpTypeError; what depends on symbol values is accepted, and the reference (like the VM) checks it
when the program runs, raising ValueError.

Where Relay, NumPy and the symbolic dims part ways, relvm decides:

- ``reshape`` takes Relay's codes 0, -1, -2, -3, -4. The -1 dim is the product of the input dims no
  other code used over the output dims no other code made, so copied dims cancel exactly even when
  they are symbolic.
- ``split`` with indices follows Relay: indices positive, strictly ascending and below the dim.
- ``squeeze`` with ``axis=None`` needs a static shape: which dims are 1 must be known before run
  time, or the rank of the result would depend on the input.
- ``shape`` attributes (broadcast_to, zeros, ones, full) are static, as in Relay; shapes known
  only at run time are tensors (``dyn.reshape``, ``arange``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..ir import dims as D
from ..ir.dims import Dim
from ..ir.limits import MAX_FIELDS
from ..ir.types import TensorType, TupleType, normalize_dim
from .common import (cannot_broadcast_to, check_rank, check_result_rank, differ, fmt_shape,
                     normalize_axes, normalize_axis, np_dtype, require, same_dtype, tensor_arg,
                     tuple_arg)
from .registry import (BROADCAST, DTYPE, DTYPE_OR_EMPTY, ELEMWISE, INJECTIVE, INT, INT_OR_INTS,
                       INTS, OPAQUE, OPT_INT, OPT_INTS, OPS, AttrKind, OpTypeError, attr,
                       register)

# --- attribute kinds and shared helpers ---------------------------------------------------------


def _zero_or_one(v: Any) -> int:
    # Relay's ``allowzero`` is a Bool that its text format prints as 0 or 1; take both spellings.
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int) and v in (0, 1):
        return v
    raise ValueError


def _dims(v: Any) -> tuple[int, ...]:
    if not isinstance(v, (list, tuple)):
        raise ValueError
    out = tuple(normalize_dim(d) for d in v)
    if any(not isinstance(d, int) or d < 0 for d in out):
        raise ValueError
    return out


ZERO_OR_ONE = AttrKind("0 or 1", _zero_or_one)
#: A static shape given as an attribute, as in Relay. Shapes that vary at run time are tensors
#: (``dyn.reshape``, ``arange``), never attributes.
DIMS = AttrKind("a list of non-negative ints (a static shape)", _dims)

INDEX_DTYPES = ("int32", "int64")


def product(dims: Iterable[Dim]) -> Dim:
    """The product of ``dims`` (1 for none), symbolic where they are."""
    out: Dim = 1
    for d in dims:
        out = out * d
    return out


def at_run_time(rule: Callable[..., Any], *args: Any) -> Any:
    """Apply a shape rule to concrete dims, where a violation is a ValueError, not a type error.

    The references reuse the type relations' shape rules, so both agree by construction.
    """
    try:
        return rule(*args)
    except OpTypeError as e:
        raise ValueError(str(e)) from None


def _concrete(shape: Sequence[Dim], what: str) -> tuple[int, ...]:
    """``shape`` as ints. Symbols in a shape attribute must be bound by the caller first."""
    if not all(isinstance(d, int) for d in shape):
        raise ValueError(f"{what} {fmt_shape(shape)} has symbolic dims; bind them to values "
                         "before running the op")
    return tuple(shape)  # type: ignore[arg-type]


def _exact_div(num: Dim, den: Dim, what: str) -> Dim:
    """``num / den``; an OpTypeError when ``num`` is provably not a multiple of ``den``."""
    if den == 0:
        raise OpTypeError(f"{what}: cannot divide by a zero dim")
    rem = D.mod(num, den)
    if not D.equal_or_assumed(rem, 0):
        raise OpTypeError(f"{what}: {D.dim_str(num)} is not a multiple of {D.dim_str(den)}")
    return D.floordiv(num, den)


def _replace(shape: Sequence[Dim], axis: int, d: Dim) -> tuple[Dim, ...]:
    return tuple(shape[:axis]) + (d,) + tuple(shape[axis + 1:])


# --- reshape ------------------------------------------------------------------------------------


class _NewShape:
    """One walk over a reshape ``newshape``: the output dims so far and which input dims they used.

    Dims that 0, -2, -3 and -4 copy, merge or split are "used" on both sides; the -1 dim is the
    product of the unused input dims over the unused output dims (Relay's rule), so used dims
    cancel without a division and stay exact when symbolic.
    """

    def __init__(self, ishape: Sequence[Dim], what: str):
        self.ishape = tuple(ishape)
        self.what = what
        self.out: list[Dim] = []
        self.used_in: set[int] = set()
        self.used_out: set[int] = set()
        self.src = 0  # the input dim the next code refers to
        self.infer_at: int | None = None

    def next_input(self, code: int) -> Dim:
        if self.src >= len(self.ishape):
            raise OpTypeError(f"{self.what}: code {code} refers to input dim {self.src}, but "
                              f"data has rank {len(self.ishape)}")
        self.used_in.add(self.src)
        self.src += 1
        return self.ishape[self.src - 1]

    def emit(self, d: Dim, used: bool) -> None:
        if used:
            self.used_out.add(len(self.out))
        self.out.append(d)

    def literal(self, size: int) -> None:
        self.src += 1  # Relay steps past an input dim for a literal size (or -1)
        self.emit(size, used=False)

    def infer_here(self) -> None:
        if self.infer_at is not None:
            raise OpTypeError(f"{self.what}: only one -1 is allowed")
        self.infer_at = len(self.out)
        self.literal(1)

    def split(self, d0: Dim, a: int | None, b: int | None) -> None:
        """-4: split one input dim into ``a`` x ``b``, one of which may be -1."""
        if a is None or b is None or not all(v == -1 or v > 0 for v in (a, b)) or a == b == -1:
            raise OpTypeError(f"{self.what}: -4 must be followed by two sizes, at most one of "
                              "them -1")
        if a == -1:
            a = _exact_div(d0, b, self.what)
        elif b == -1:
            b = _exact_div(d0, a, self.what)
        elif differ(a * b, d0):
            raise OpTypeError(f"{self.what}: -4 cannot split dim {D.dim_str(d0)} into {a} x {b}")
        self.emit(a, used=True)
        self.emit(b, used=True)

    def finish(self) -> tuple[Dim, ...]:
        if self.infer_at is None:
            n_in, n_out = product(self.ishape), product(self.out)
            if differ(n_in, n_out):
                raise OpTypeError(f"{self.what}: {D.dim_str(n_in)} elements vs "
                                  f"{D.dim_str(n_out)}")
            return tuple(self.out)
        rest_in = product(d for i, d in enumerate(self.ishape) if i not in self.used_in)
        rest_out = product(d for i, d in enumerate(self.out)
                           if i not in self.used_out and i != self.infer_at)
        if rest_out == 0:
            raise OpTypeError(f"{self.what}: -1 is ambiguous beside a zero dim")
        self.out[self.infer_at] = _exact_div(rest_in, rest_out, self.what)
        return tuple(self.out)


def infer_newshape(ishape: Sequence[Dim], newshape: Sequence[int],
                   allowzero: int = 0) -> tuple[Dim, ...]:
    """The result shape of Relay's ``reshape(data, newshape)``, over symbolic or concrete dims.

    Codes: a positive size; 0 copies the input dim at this position (a literal 0 when
    ``allowzero``); -1 is inferred from the rest; -2 copies all remaining input dims; -3 merges the
    next two input dims; -4 splits the next input dim into the two values after it (one may be -1).

    Raises OpTypeError naming data and newshape when the shapes provably disagree.

    Examples
    --------
    >>> n = D.Sym("n")
    >>> infer_newshape((n, 12), [-1, 4])
    (n*3, 4)
    >>> infer_newshape((n, 3, 4), [0, -1])
    (n, 12)
    """
    ishape = tuple(normalize_dim(d) for d in ishape)  # a bare Sym is accepted too
    walk = _NewShape(ishape, f"cannot reshape data {fmt_shape(ishape)} into newshape "
                             f"{list(newshape)}")
    codes = iter(newshape)  # -4 consumes the two codes after it
    for code in codes:
        if code > 0 or (code == 0 and allowzero):
            walk.literal(code)
        elif code == 0:
            walk.emit(walk.next_input(code), used=True)
        elif code == -1:
            walk.infer_here()
        elif code == -2:
            while walk.src < len(walk.ishape):
                walk.emit(walk.next_input(code), used=True)
        elif code == -3:
            walk.emit(walk.next_input(code) * walk.next_input(code), used=True)
        elif code == -4:
            walk.split(walk.next_input(code), next(codes, None), next(codes, None))
        else:
            raise OpTypeError(f"{walk.what}: {code} is not a size or one of the codes "
                              "0, -1, -2, -3, -4")
    return walk.finish()


def _reshape_type(attrs, data):
    t = tensor_arg(data, "data")
    return TensorType(infer_newshape(t.shape, attrs.newshape, attrs.allowzero), t.dtype)


def _reshape_ref(attrs, x):
    return x.reshape(at_run_time(infer_newshape, x.shape, attrs.newshape, attrs.allowzero)).copy()


register("reshape", inputs=("data",), infer=_reshape_type, reference=_reshape_ref,
         pattern=INJECTIVE, doc="same elements, new shape (Relay codes 0, -1, -2, -3, -4)",
         attrs=[attr("newshape", INTS, required=True), attr("allowzero", ZERO_OR_ONE, 0)])


def _subrange(begin: int, end: int | None, ndim: int, name: str, side: str) -> tuple[int, int]:
    """Python-style ``[begin:end]`` of the axes of a rank-``ndim`` input, checked."""
    b = begin + ndim if begin < 0 else begin
    e = ndim if end is None else (end + ndim if end < 0 else end)
    if not 0 <= b <= e <= ndim:
        raise OpTypeError(f"{side}_begin {begin} and {side}_end {end} do not select axes of "
                          f"{name} (rank {ndim})")
    return b, e


def _reshape_like_shape(attrs, dshape: Sequence[Dim], lshape: Sequence[Dim]) -> tuple[Dim, ...]:
    lb, le = _subrange(attrs.lhs_begin, attrs.lhs_end, len(dshape), "data", "lhs")
    rb, re = _subrange(attrs.rhs_begin, attrs.rhs_end, len(lshape), "shape_like", "rhs")
    out = tuple(dshape[:lb]) + tuple(lshape[rb:re]) + tuple(dshape[le:])
    n_in, n_out = product(dshape), product(out)
    if differ(n_in, n_out):
        raise OpTypeError(f"cannot reshape data {fmt_shape(dshape)} like shape_like "
                          f"{fmt_shape(lshape)}: {D.dim_str(n_in)} elements vs {D.dim_str(n_out)}")
    return out


def _reshape_like_type(attrs, data, shape_like):
    t, like = tensor_arg(data, "data"), tensor_arg(shape_like, "shape_like")
    return TensorType(_reshape_like_shape(attrs, t.shape, like.shape), t.dtype)


def _reshape_like_ref(attrs, x, like):
    return x.reshape(at_run_time(_reshape_like_shape, attrs, x.shape, like.shape)).copy()


register("reshape_like", inputs=("data", "shape_like"), infer=_reshape_like_type,
         reference=_reshape_like_ref, pattern=INJECTIVE,
         doc="reshape data to (part of) the shape of shape_like",
         attrs=[attr("lhs_begin", INT, 0), attr("lhs_end", OPT_INT, None),
                attr("rhs_begin", INT, 0), attr("rhs_end", OPT_INT, None)])

# --- transpose, squeeze, expand_dims ------------------------------------------------------------


def _permutation(axes: Sequence[int] | None, shape: Sequence[Dim]) -> tuple[int, ...]:
    ndim = len(shape)
    if axes is None:
        return tuple(reversed(range(ndim)))
    perm = tuple(normalize_axis(a, ndim, "axes entry") for a in axes)
    if sorted(perm) != list(range(ndim)):
        raise OpTypeError(f"axes {list(axes)} is not a permutation of the axes of data "
                          f"{fmt_shape(shape)}")
    return perm


def _transpose_type(attrs, data):
    t = tensor_arg(data, "data")
    return TensorType(tuple(t.shape[a] for a in _permutation(attrs.axes, t.shape)), t.dtype)


register("transpose", inputs=("data",), infer=_transpose_type,
         reference=lambda attrs, x: np.transpose(x, at_run_time(_permutation, attrs.axes,
                                                                x.shape)).copy(),
         pattern=INJECTIVE, doc="permute the axes (reverse them when axes is None)",
         attrs=[attr("axes", OPT_INTS, None)])


def _squeezed_axes(shape: Sequence[Dim], axis: Sequence[int] | None) -> set[int]:
    if axis is None:
        if not all(isinstance(d, int) for d in shape):
            raise OpTypeError(f"squeeze with axis=None needs a static shape, but data is "
                              f"{fmt_shape(shape)}; list the axes to remove instead")
        return {i for i, d in enumerate(shape) if d == 1}
    axes = normalize_axes(axis, len(shape))
    for a in axes:
        if differ(shape[a], 1):
            raise OpTypeError(f"cannot squeeze axis {a} of data {fmt_shape(shape)}: its size is "
                              f"{D.dim_str(shape[a])}, not 1")
    return set(axes)


def _squeeze_shape(shape: Sequence[Dim], axis: Sequence[int] | None) -> tuple[Dim, ...]:
    gone = _squeezed_axes(shape, axis)
    return tuple(d for i, d in enumerate(shape) if i not in gone)


def _squeeze_type(attrs, data):
    t = tensor_arg(data, "data")
    return TensorType(_squeeze_shape(t.shape, attrs.axis), t.dtype)


register("squeeze", inputs=("data",), infer=_squeeze_type,
         reference=lambda attrs, x: x.reshape(at_run_time(_squeeze_shape, x.shape,
                                                          attrs.axis)).copy(),
         pattern=INJECTIVE, doc="remove axes of size 1 (all of them when axis is None)",
         attrs=[attr("axis", OPT_INTS, None)])


def _expanded_shape(shape: Sequence[Dim], axis: int, num_newaxis: int) -> tuple[Dim, ...]:
    ndim = len(shape)
    if not -ndim - 1 <= axis <= ndim:
        raise OpTypeError(f"axis {axis} is out of range for inserting into data "
                          f"{fmt_shape(shape)} (rank {ndim})")
    if num_newaxis < 0:
        raise OpTypeError(f"num_newaxis must be non-negative, got {num_newaxis}")
    check_result_rank(ndim + num_newaxis)
    at = axis + ndim + 1 if axis < 0 else axis
    return tuple(shape[:at]) + (1,) * num_newaxis + tuple(shape[at:])


def _expand_dims_type(attrs, data):
    t = tensor_arg(data, "data")
    return TensorType(_expanded_shape(t.shape, attrs.axis, attrs.num_newaxis), t.dtype)


register("expand_dims", inputs=("data",), infer=_expand_dims_type,
         reference=lambda attrs, x: x.reshape(at_run_time(_expanded_shape, x.shape, attrs.axis,
                                                          attrs.num_newaxis)).copy(),
         pattern=INJECTIVE, doc="insert num_newaxis axes of size 1 at axis",
         attrs=[attr("axis", INT, required=True), attr("num_newaxis", INT, 1)])

# --- concatenate, split -------------------------------------------------------------------------


def _agreed_dim(named: Sequence[tuple[str, TensorType]], axis: int) -> Dim:
    """The common dim of every field at ``axis``; an error naming two fields that differ."""
    for j, (name, t) in enumerate(named):
        for prev_name, prev in named[:j]:
            if differ(prev.shape[axis], t.shape[axis]):
                raise OpTypeError(f"{prev_name} {fmt_shape(prev.shape)} and {name} "
                                  f"{fmt_shape(t.shape)} differ in dim {axis}")
    # Where equality is only checked at run time, keep the most informative dim: a number, else
    # one the text format can spell, else the first.
    dims = [t.shape[axis] for _, t in named]
    for good in (lambda d: isinstance(d, int), D.is_expressible):
        for d in dims:
            if good(d):
                return d
    return dims[0]


def _concatenate_type(attrs, data):
    fields = tuple_arg(data, "data")
    if not fields:
        raise OpTypeError("data must hold at least one tensor")
    named = [(f"data.{i}", t) for i, t in enumerate(fields)]
    dtype = same_dtype(*named)
    ndim = fields[0].ndim
    for name, t in named[1:]:
        if t.ndim != ndim:
            raise OpTypeError(f"data.0 {fmt_shape(fields[0].shape)} and {name} "
                              f"{fmt_shape(t.shape)} differ in rank")
    if ndim == 0:
        raise OpTypeError("cannot concatenate rank-0 tensors")
    axis = normalize_axis(attrs.axis, ndim)
    shape = [sum((t.shape[i] for t in fields), 0) if i == axis else _agreed_dim(named, i)
             for i in range(ndim)]
    return TensorType(tuple(shape), dtype)


register("concatenate", inputs=("data",), infer=_concatenate_type,
         reference=lambda attrs, xs: np.concatenate(xs, axis=attrs.axis),
         pattern=INJECTIVE, doc="join a tuple of tensors along axis",
         attrs=[attr("axis", INT, 0)])


def _split_sizes(dim: Dim, spec: int | Sequence[int], what: str) -> tuple[Dim, ...]:
    """The size of each piece along the split axis."""
    if isinstance(spec, int):
        if spec <= 0:
            raise OpTypeError(f"{what}: the number of sections must be positive")
        if spec > MAX_FIELDS:
            raise OpTypeError(f"{what}: relvm's limit for a tuple is {MAX_FIELDS} fields")
        return (_exact_div(dim, spec, what),) * spec
    bounds = (0,) + tuple(spec)
    if any(hi <= lo for lo, hi in zip(bounds, spec)):
        raise OpTypeError(f"{what}: indices must be positive and strictly ascending")
    if spec and not D.at_most(spec[-1] + 1, dim):
        raise OpTypeError(f"{what}: index {spec[-1]} is not below the dim {dim}")
    return tuple(hi - lo for lo, hi in zip(bounds, spec)) + (dim - bounds[-1],)


def _split_axis_sizes(attrs, shape: Sequence[Dim]) -> tuple[int, tuple[Dim, ...]]:
    if not shape:
        raise OpTypeError("cannot split a rank-0 tensor")
    axis = normalize_axis(attrs.axis, len(shape))
    spec = attrs.indices_or_sections
    how = f"into {spec} sections" if isinstance(spec, int) else f"at indices {list(spec)}"
    what = f"cannot split data {fmt_shape(shape)} {how} along axis {axis}"
    return axis, _split_sizes(shape[axis], spec, what)


def _split_type(attrs, data):
    t = tensor_arg(data, "data")
    axis, sizes = _split_axis_sizes(attrs, t.shape)
    return TupleType(tuple(TensorType(_replace(t.shape, axis, s), t.dtype) for s in sizes))


def _split_ref(attrs, x):
    axis, sizes = at_run_time(_split_axis_sizes, attrs, x.shape)
    return tuple(p.copy() for p in np.split(x, np.cumsum(sizes)[:-1], axis=axis))


register("split", inputs=("data",), infer=_split_type, reference=_split_ref, pattern=INJECTIVE,
         doc="cut data along axis into equal sections or at the given indices",
         attrs=[attr("indices_or_sections", INT_OR_INTS, required=True), attr("axis", INT, 0)])

# --- broadcast_to and the fill ops --------------------------------------------------------------


def _broadcast_to_type(attrs, data):
    t = tensor_arg(data, "data")
    target = attrs.shape
    fail = f"cannot broadcast data {fmt_shape(t.shape)} to shape {fmt_shape(target)}"
    if t.ndim > len(target):
        raise OpTypeError(f"{fail}: data has more dims")
    for d, want in zip(reversed(t.shape), reversed(target)):
        if cannot_broadcast_to(d, want):
            raise OpTypeError(f"{fail}: dim {D.dim_str(d)} vs {D.dim_str(want)}")
    return TensorType(target, t.dtype)


register("broadcast_to", inputs=("data",), infer=_broadcast_to_type,
         reference=lambda attrs, x: np.broadcast_to(x, _concrete(attrs.shape, "shape")).copy(),
         pattern=BROADCAST, doc="repeat data along axes of size 1 up to shape",
         attrs=[attr("shape", DIMS, required=True)])


def _fill_value(fill: np.ndarray, dtype: str) -> np.ndarray:
    # The fill value converts as ``cast`` does (float to int truncates; NaN gives 0).
    return OPS["cast"].reference(OPS["cast"].make_attrs({"dtype": dtype}), np.asarray(fill))


def _constant_type(attrs):
    return TensorType(attrs.shape, attrs.dtype)


def _constant(name: str, value: int) -> None:
    register(name, inputs=(), infer=_constant_type, pattern=ELEMWISE,
             reference=lambda attrs: np.full(_concrete(attrs.shape, "shape"), value,
                                             np_dtype(attrs.dtype)),
             doc=f"a tensor of {value}s", attrs=[attr("shape", DIMS, required=True),
                                                attr("dtype", DTYPE, "float32")])


_constant("zeros", 0)
_constant("ones", 1)


def _scalar_fill(fill) -> TensorType:
    t = tensor_arg(fill, "fill_value")
    check_rank(t, "fill_value", 0)
    return t


def _full_type(attrs, fill):
    t = _scalar_fill(fill)
    return TensorType(attrs.shape, attrs.dtype or t.dtype)


def _full_ref(attrs, fill):
    dtype = attrs.dtype or fill.dtype.name
    return np.full(_concrete(attrs.shape, "shape"), _fill_value(fill, dtype))


register("full", inputs=("fill_value",), infer=_full_type, reference=_full_ref, pattern=ELEMWISE,
         doc="a tensor filled with the scalar fill_value",
         attrs=[attr("shape", DIMS, required=True), attr("dtype", DTYPE_OR_EMPTY, "")])


def _like_type(attrs, data):
    return tensor_arg(data, "data")


register("zeros_like", inputs=("data",), infer=_like_type, pattern=ELEMWISE,
         reference=lambda attrs, x: np.zeros_like(x), doc="zeros of data's shape and dtype")
register("ones_like", inputs=("data",), infer=_like_type, pattern=ELEMWISE,
         reference=lambda attrs, x: np.ones_like(x), doc="ones of data's shape and dtype")


def _full_like_type(attrs, data, fill):
    _scalar_fill(fill)
    return tensor_arg(data, "data")


register("full_like", inputs=("data", "fill_value"), infer=_full_like_type, pattern=ELEMWISE,
         reference=lambda attrs, x, fill: np.full(x.shape, _fill_value(fill, x.dtype.name)),
         doc="fill_value in data's shape and dtype")


# --- bitcast ------------------------------------------------------------------------------------

def _bitcast_type(attrs, data):
    t = tensor_arg(data, "data")
    size, target = np_dtype(t.dtype).itemsize, np_dtype(attrs.dtype).itemsize
    if size != target:
        raise OpTypeError(f"data's dtype {t.dtype} ({size} bytes) and dtype {attrs.dtype} "
                          f"({target} bytes) differ in size")
    return TensorType(t.shape, attrs.dtype)


def _bitcast_ref(attrs, x):
    target = np_dtype(attrs.dtype)
    require(x.dtype.itemsize == target.itemsize,
            f"bitcast: {x.dtype} and {attrs.dtype} differ in size")
    x = x.copy()  # C-contiguous, as view needs (ascontiguousarray would make a 0-d array 1-d)
    if target == np.bool_:  # relvm's bools are 0 or 1: any other byte is true
        return x.view(np.uint8) != 0
    return x.view(target).copy()


register("bitcast", inputs=("data",), infer=_bitcast_type, reference=_bitcast_ref,
         pattern=OPAQUE, attrs=[attr("dtype", DTYPE, required=True)],
         doc="the bytes of data read as another dtype of the same size (little endian; into "
             "bool, a non-zero byte is true)")
