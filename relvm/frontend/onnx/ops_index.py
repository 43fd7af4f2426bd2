"""Gathers and scatters by index tensors: GatherElements, GatherND, ScatterElements (and its
opset-10 name Scatter), ScatterND.

relvm's ops have ONNX's index rules (negative indices count from the end once; others outside
an axis are run-time errors). ``gather_nd`` and ``scatter_nd`` are Relay's, with the index tuples
along the first axis of ``indices``: ONNX's last axis is moved first (a transpose, folded away
when the indices are constants).
"""

from __future__ import annotations

from ...ir import dims as D
from .converters import converter, norm_axis
from .importer import Node

#: ONNX's reduction attribute -> relvm's (Relay's names).
_REDUCTIONS = {"none": "update", "add": "add", "mul": "mul", "min": "min", "max": "max"}


def _reduction(n: Node) -> str:
    value = n.attr("reduction", "none")
    if value not in _REDUCTIONS:
        raise n.fail(f"reduction {value!r} is not one of {', '.join(_REDUCTIONS)}")
    return _REDUCTIONS[value]


def _tuples_first(n: Node, i: int):
    """Input ``i`` (ONNX indices, tuples along the last axis) with that axis moved first."""
    shape = n.shape(i)
    if not shape:
        raise n.fail("indices must have rank 1 or more")
    if not isinstance(shape[-1], int):
        raise n.fail(f"indices {D.shape_str(shape)} need a static last dim (the length of each "
                     "index tuple decides the result's rank)")
    idx = n.x(i)
    if len(shape) == 1:
        return idx
    return n.call("transpose", idx, axes=[len(shape) - 1] + list(range(len(shape) - 1)))


@converter("GatherElements")
def gather_elements(n: Node):
    axis = norm_axis(n, int(n.attr("axis", 0)), n.rank(0))
    return n.call("gather", n.x(0), n.x(1), axis=axis)


@converter("GatherND")
def gather_nd(n: Node):
    batch_dims = int(n.attr("batch_dims", 0))
    return n.call("gather_nd", n.x(0), _tuples_first(n, 1), batch_dims=batch_dims)


@converter("ScatterElements", "Scatter")
def scatter_elements(n: Node):
    axis = norm_axis(n, int(n.attr("axis", 0)), n.rank(0))
    return n.call("scatter_elements", n.x(0), n.x(1), n.x(2), axis=axis, reduction=_reduction(n))


@converter("ScatterND")
def scatter_nd(n: Node):
    return n.call("scatter_nd", n.x(0), _tuples_first(n, 1), n.x(2), mode=_reduction(n))
