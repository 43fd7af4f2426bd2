"""Lists of tensors (``List[Tensor[(?, 3), float32]]``), whose length is known at run time: ONNX
sequences fed as graph inputs, returned as outputs, or split by a count known when the program
runs.

A list's value is a Python list of arrays, never changed once made (``list.insert`` makes a new
one). The functions below are the ops' definitions; the VM's list instructions call them too
(``relvm/runtime/vm/handlers.py``), so the reference and the VM cannot differ. Positions count
from the end when negative; one out of range is a :class:`ListError` naming the op and the
position.
"""

from __future__ import annotations

import numpy as np

from ..errors import RelvmError
from ..ir import dims as D
from ..ir.types import ListType, TensorType, TupleType
from .common import check_rank, fmt_shape, tensor_arg
from .registry import BOOL, DTYPE, INT, OPAQUE, OPT_INTS, OpTypeError, attr, register


class ListError(RelvmError, ValueError):
    """A list op given a position out of range (or another value it cannot take)."""


def list_arg(t, name: str, ranked: bool = False) -> ListType:
    """``t`` as a list type (``ranked``: whose tensors' rank is known)."""
    if not isinstance(t, ListType):
        raise OpTypeError(f"{name} must be a list, got {t}")
    if ranked and not t.ranked:
        raise OpTypeError(f"{name} is {t}: its tensors' rank is not known (declare the "
                          "sequence's element shape)")
    return t


def _position_type(t, name: str) -> None:
    p = tensor_arg(t, name)
    check_rank(p, name, 0)
    if p.dtype not in ("int32", "int64"):
        raise OpTypeError(f"{name} must be int32 or int64, got {p.dtype}")


def _anonymous(t: TensorType) -> TensorType:
    """An element read from a list: a fresh ``?`` for each dim the list does not fix."""
    return TensorType(tuple(d if isinstance(d, int) else D.fresh() for d in t.shape), t.dtype)


def position(op: str, p, length: int, inserting: bool = False) -> int:
    """Position ``p`` (negative: from the end) in a list of ``length``, as an index in
    ``[0, length)`` (``[0, length]`` when inserting)."""
    p = int(np.asarray(p).reshape(()))
    high = length if inserting else length - 1
    if not -length <= p <= high:
        valid = f"{-length} to {high}" if high >= -length else "none: the list is empty"
        raise ListError(f"{op}: position {p} is out of range for a list of length {length} "
                        f"(valid: {valid})")
    return p + length if p < 0 else p


# --- construct, empty, length, get, insert, erase -----------------------------------------------

def _construct_type(attrs, items):
    if not isinstance(items, TupleType) or not items.fields:
        raise OpTypeError(f"items must be a non-empty tuple of tensors, got {items}")
    first = tensor_arg(items.fields[0], "items.0")
    elem = ListType(first)
    for i, f in enumerate(items.fields[1:], 1):
        t = tensor_arg(f, f"items.{i}")
        if t.dtype != first.dtype or t.ndim != first.ndim:
            raise OpTypeError(f"items.{i} is {t}, items.0 {first}: a list's tensors share dtype "
                              "and rank")
        elem = ListType(TensorType(tuple(a if a == b else D.ANY
                                         for a, b in zip(elem.elem.shape, t.shape)), t.dtype))
    return elem


register("list.construct", inputs=("items",), infer=_construct_type, pattern=OPAQUE,
         reference=lambda attrs, items: [np.asarray(x) for x in items],
         doc="a list of the tuple's tensors (one dtype and rank)")


def _empty_type(attrs):
    if attrs.shape is None:
        return ListType(TensorType((), attrs.dtype), ranked=False)
    if any(d < -1 for d in attrs.shape):
        raise OpTypeError(f"shape {list(attrs.shape)} holds a dim below -1")
    return ListType(TensorType(tuple(d if d >= 0 else D.ANY for d in attrs.shape), attrs.dtype))


register("list.empty", inputs=(), infer=_empty_type, pattern=OPAQUE,
         reference=lambda attrs: [],
         doc="an empty list of tensors of dtype and shape (-1: any dim; None: any rank)",
         attrs=[attr("dtype", DTYPE, "float32"), attr("shape", OPT_INTS, None)])


def _length_type(attrs, data):
    list_arg(data, "data")
    return TensorType((), "int64")


register("list.length", inputs=("data",), infer=_length_type, pattern=OPAQUE,
         reference=lambda attrs, data: np.array(len(data), np.int64),
         doc="the number of tensors in the list, as an int64 scalar")


def _get_type(attrs, data, index):
    _position_type(index, "index")
    return _anonymous(list_arg(data, "data", ranked=True).elem)


def get(data: list, index) -> np.ndarray:
    return data[position("list.get", index, len(data))]


register("list.get", inputs=("data", "index"), infer=_get_type, pattern=OPAQUE,
         reference=lambda attrs, data, index: get(data, index),
         doc="the tensor at index (negative: from the end)")


def _insert_type(attrs, data, item, index):
    lst = list_arg(data, "data")
    t = tensor_arg(item, "item")
    _position_type(index, "index")
    if t.dtype != lst.elem.dtype:
        raise OpTypeError(f"item is {t}, the list's tensors {lst.elem.dtype}: they must share "
                          "dtype")
    if not lst.ranked:
        return lst
    if t.ndim != lst.elem.ndim:
        raise OpTypeError(f"item is {t}, the list's tensors {lst.elem}: they must share dtype "
                          "and rank")
    return ListType(TensorType(tuple(a if a == b else D.ANY
                                     for a, b in zip(lst.elem.shape, t.shape)), t.dtype))


def insert(data: list, item: np.ndarray, index) -> list:
    at = position("list.insert", index, len(data), inserting=True)
    return data[:at] + [item] + data[at:]


register("list.insert", inputs=("data", "item", "index"), infer=_insert_type, pattern=OPAQUE,
         reference=lambda attrs, data, item, index: insert(data, item, index),
         doc="a new list with item inserted before position index (the length: at the end)")


def _erase_type(attrs, data, index):
    _position_type(index, "index")
    return list_arg(data, "data")


def erase(data: list, index) -> list:
    at = position("list.erase", index, len(data))
    return data[:at] + data[at + 1:]


register("list.erase", inputs=("data", "index"), infer=_erase_type, pattern=OPAQUE,
         reference=lambda attrs, data, index: erase(data, index),
         doc="a new list without the tensor at position index")


# --- concat and split ---------------------------------------------------------------------------

def _concat_type(attrs, data):
    elem = list_arg(data, "data", ranked=True).elem
    rank = elem.ndim + (1 if attrs.new_axis else 0)
    if not -rank <= attrs.axis < rank or rank == 0:
        raise OpTypeError(f"axis {attrs.axis} is out of range for rank {rank}")
    axis = attrs.axis % rank
    shape = list(elem.shape)
    if attrs.new_axis:
        shape.insert(axis, 1)
    shape[axis] = D.ANY
    return TensorType(tuple(d if isinstance(d, int) else D.fresh() for d in shape), elem.dtype)


def concat(data: list, axis: int, new_axis: bool) -> np.ndarray:
    if not data:
        raise ListError("list.concat: the list is empty")
    try:
        return np.stack(data, axis=axis) if new_axis else np.concatenate(data, axis=axis)
    except ValueError:
        shapes = ", ".join(fmt_shape(x.shape) for x in data[:8])
        how = "differ" if new_axis else f"differ off axis {axis}"
        raise ListError(f"list.concat: the tensors {shapes}{', ...' if len(data) > 8 else ''} "
                        f"{how}") from None


register("list.concat", inputs=("data",), infer=_concat_type, pattern=OPAQUE,
         reference=lambda attrs, data: concat(data, attrs.axis, attrs.new_axis),
         doc="the list's tensors concatenated along axis (new_axis: stacked along a new axis)",
         attrs=[attr("axis", INT, required=True), attr("new_axis", BOOL, False)])


def _split_type(attrs, data, split):
    x = tensor_arg(data, "data")
    s = tensor_arg(split, "split")
    if s.ndim > 1 or s.dtype not in ("int32", "int64"):
        raise OpTypeError(f"split must be an int32 or int64 scalar or 1-d tensor, got {s}")
    if not -x.ndim <= attrs.axis < x.ndim:
        raise OpTypeError(f"axis {attrs.axis} is out of range for rank {x.ndim}")
    axis = attrs.axis % x.ndim
    shape = [d if isinstance(d, int) else D.ANY for d in x.shape]
    shape[axis] = D.ANY
    if not attrs.keepdims:
        if s.ndim != 0:
            raise OpTypeError("keepdims=False needs parts of 1 (a scalar split)")
        del shape[axis]
    return ListType(TensorType(tuple(shape), x.dtype))


def split(data: np.ndarray, sizes, axis: int, keepdims: bool) -> list:
    """``data`` cut along ``axis`` into parts of ``sizes`` (1-d), or of ``sizes`` each (a
    scalar; the last part shorter); with ``keepdims`` False (parts of 1) the axis dropped."""
    axis %= data.ndim
    length = data.shape[axis]
    sizes = np.asarray(sizes)
    if sizes.ndim == 0:
        chunk = int(sizes)
        if chunk < 1:
            raise ListError(f"list.split: split {chunk} must be positive")
        bounds = list(range(0, length, chunk)) + [length]
    else:
        parts = [int(s) for s in sizes]
        if any(s < 0 for s in parts) or sum(parts) != length:
            raise ListError(f"list.split: split {parts} must be sizes >= 0 summing to the axis "
                            f"length {length}")
        bounds = [0] + list(np.cumsum(parts, dtype=np.int64).tolist())
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        part = np.take(data, np.arange(lo, hi), axis=axis)
        out.append(part if keepdims else np.squeeze(part, axis=axis))
    return out


register("list.split", inputs=("data", "split"), infer=_split_type, pattern=OPAQUE,
         reference=lambda attrs, data, split_: split(data, split_, attrs.axis, attrs.keepdims),
         doc="data cut along axis into a list: parts of the sizes in split (1-d), or of split "
             "each (a scalar; the last part shorter); keepdims=False drops the axis of parts "
             "of 1",
         attrs=[attr("axis", INT, 0), attr("keepdims", BOOL, True)])


#: The list ops: no kernel runs them (the VM's list instructions do), and none is folded.
LIST_OPS = frozenset(("list.construct", "list.empty", "list.length", "list.get", "list.insert",
                      "list.erase", "list.concat", "list.split"))
