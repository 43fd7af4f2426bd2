"""Operator fusion: elementwise chains and epilogues become one kernel.

A group starts at an *anchor* -- a dense/matmul/conv (pattern ``out_fusable``) or an
elementwise op -- and grows along its single-use consumers that are elementwise or broadcast
ops producing the same shape (``bias_add``, ``relu``, a residual ``add``, ``clip``, ``sigmoid``,
``multiply``, ``cast``, ...). Other operands of those consumers (a bias, a residual) become
inputs of the group. An elementwise group takes in the group that makes a value of its shape
all of whose uses are its own (``x * sigmoid(x)``; two chains meeting at a binary op): SiLU
and GELU join the conv or dense before them. Groups never cross a function boundary (a closure body is its own region).
A conv's group may end in ``nn.global_avg_pool2d`` (its single consumer): the C kernel then
averages each output plane as it is computed and never stores the conv's output. A float32
conv (one group of channels) whose group is only ``[bias_add] [relu]`` takes in the conv that
reads it, when that is its single consumer: the pair runs as one C kernel that writes the first
conv's tiles straight into the second's padded input (see ``kernels/conv_pair.c``). The second conv's
group may grow on only with ``bias_add``, ``relu`` and the average pool; anything else splits the
pair again. A group of one op is left alone. Each group becomes one call of a :class:`FusedOp`.
"""

from __future__ import annotations

from ..ir import dims as D
from ..ir.nodes import Call, Expr, Function, Module, children, post_order
from ..ir.types import TensorType
from ..ops.fused import Step, make_fused
from ..ops.registry import BROADCAST, ELEMWISE, OUT_FUSABLE, Op
from .rewrite import Rewriter, rewrite_module

_ANCHORS = (OUT_FUSABLE, ELEMWISE, BROADCAST)
_EPILOGUES = (ELEMWISE, BROADCAST)
_MEAN_TAILS = ("nn.global_avg_pool2d",)
_MEAN_ANCHORS = ("nn.conv2d",)
#: What may follow each conv of a pair (and the pool, after the second only): the epilogue
#: relvm_conv2d_pair applies in registers (a clip is a clamp, relu6 included).
_PAIR_STEPS = ("nn.bias_add", "nn.relu", "clip")
#: The most ops one group takes; a longer chain is cut into groups of this many. One generated
#: loop gains nothing from more, and a chain of 100,000 elementwise ops made one group whose C
#: the generator refused (too many operands), leaving 100,000 step kernels to build at load.
MAX_GROUP_OPS = 64


def _same_shape(a: TensorType, b: TensorType) -> bool:
    return a.ndim == b.ndim and all(D.prove_equal(x, y) for x, y in zip(a.shape, b.shape))


def _is_op_call(e: Expr, patterns: tuple[str, ...]) -> bool:
    return (isinstance(e, Call) and isinstance(e.op, Op) and e.op.pattern in patterns
            and not e.op.data_dependent and isinstance(e.checked_type, TensorType))


def _pairable(e: Expr) -> bool:
    """A conv that can be either half of a conv pair: float32, one group of channels."""
    return (_is_op_call(e, (OUT_FUSABLE,)) and e.op.name == "nn.conv2d"
            and e.attrs.get("groups", 1) == 1 and e.checked_type.dtype == "float32"
            and _nchw(e))


def _nchw(e: Call) -> bool:
    """A conv whose data is NCHW (the pair and the mean read NCHW planes)."""
    return e.op.name != "nn.conv2d" or e.attrs.get("data_layout", "NCHW") == "NCHW"


def _split_pairs(group_of: dict[int, list[Call]]) -> None:
    """Undo the pairs whose second conv's group grew past bias_add, relu (or clip) and the
    pool: the two halves become groups of their own (or no group, when a half is one op)."""
    for root, group in list(group_of.items()):
        second = next((i for i, c in enumerate(group) if i and c.op.name == "nn.conv2d"), None)
        if second is None or all(c.op.name in _PAIR_STEPS + _MEAN_TAILS
                                 for c in group[second + 1:]):
            continue
        del group_of[root]
        for half in (group[:second], group[second:]):
            if len(half) > 1:
                group_of[id(half[-1])] = half


def find_groups(module: Module) -> dict[int, list[Call]]:
    """id(root call) -> the calls of its group, anchor first (groups of two or more)."""
    uses: dict[int, int] = {}
    region: dict[int, int] = {}
    for fn in module.functions.values():
        for r, f in enumerate([fn] + [n for n in post_order(fn.body, into_functions=True)
                                      if isinstance(n, Function)]):
            for n in post_order(f.body):
                region.setdefault(id(n), (id(fn), r))
                for c in children(n):
                    uses[id(c)] = uses.get(id(c), 0) + 1
    group_of: dict[int, list[Call]] = {}

    def sole_consumer(a: Expr, n: Call) -> bool:
        """n is a's only use, in the same function body: a's value need not be kept."""
        return uses.get(id(a), 0) == 1 and region.get(id(a)) == region.get(id(n))

    for fn in module.functions.values():
        for n in post_order(fn.body, into_functions=True):
            if (isinstance(n, Call) and isinstance(n.op, Op) and n.op.name in _MEAN_TAILS
                    and isinstance(n.checked_type, TensorType)):
                # A global average pool ends its conv's group (post order: the group is
                # complete here; pools are opaque, so nothing joins after it).
                a = n.args[0]
                group = group_of.get(id(a)) or ([a] if _is_op_call(a, (OUT_FUSABLE,)) else None)
                if (group and group[0].op.name in _MEAN_ANCHORS and _nchw(group[0])
                        and sole_consumer(a, n)):
                    group_of.pop(id(a), None)
                    group_of[id(n)] = group + [n]
                continue
            if _pairable(n):
                # A conv reading the result of a conv group: the two may run as one kernel.
                a = n.args[0]
                group = group_of.get(id(a)) or ([a] if _pairable(a) else None)
                if (group and _pairable(group[0]) and sole_consumer(a, n)
                        and all(c.op.name in _PAIR_STEPS for c in group[1:])):
                    group_of.pop(id(a), None)
                    group_of[id(n)] = group + [n]
                continue
            if not _is_op_call(n, _EPILOGUES):
                continue
            for a in n.args:
                if (_is_op_call(a, _ANCHORS) and sole_consumer(a, n)
                        and _same_shape(a.checked_type, n.checked_type)
                        and len(group_of.get(id(a), ())) < MAX_GROUP_OPS):
                    group = group_of.pop(id(a), [a])
                    group.append(n)
                    group_of[id(n)] = group
                    break
    _join_shared(group_of, uses, region)
    _split_pairs(group_of)
    return group_of


def _join_shared(group_of: dict[int, list[Call]], uses: dict[int, int],
                 region: dict[int, tuple]) -> None:
    """An elementwise group takes in the group (or op) that makes a value of its shape when
    every use of the value is its own: a value read twice (SiLU ``x * sigmoid(x)`` after a
    conv, GELU's two branches after a dense), or two chains meeting at a binary op. A chain
    grows only along one single-use argument, so these ran as several kernels, the values
    stored and read again. The group taken in goes first (an anchor stays at the start)."""
    changed = True
    while changed:
        changed = False
        for root, group in list(group_of.items()):
            if any(c.op.pattern == OUT_FUSABLE for c in group):
                continue  # one anchor a group, at its start
            members = {id(c) for c in group}
            for a in dict.fromkeys(a for c in group for a in c.args if id(a) not in members):
                reads = sum(1 for c in group for b in c.args if b is a)
                before = group_of.get(id(a)) or ([a] if _is_op_call(a, _ANCHORS) else None)
                if (before is None or uses.get(id(a), 0) != reads
                        or region.get(id(a)) != region.get(id(group[0]))
                        or before[-1].op.name in _MEAN_TAILS
                        or not _same_shape(a.checked_type, group[-1].checked_type)
                        or len(before) + len(group) > MAX_GROUP_OPS):
                    continue
                group_of.pop(id(a), None)
                group_of[root] = before + group
                changed = True
                break


class _Fuse(Rewriter):
    def __init__(self, groups: dict[int, list[Call]]):
        super().__init__()
        self.groups = groups

    def visit_Call(self, call: Call) -> Expr:
        group = self.groups.get(id(call))
        if group is None:
            return super().visit_Call(call)
        members = {id(c): j for j, c in enumerate(group)}
        inputs: list[Expr] = []
        index: dict[int, int] = {}
        steps = []
        for c in group:
            refs = []
            for a in c.args:
                if id(a) in members:
                    refs.append(("step", members[id(a)]))
                else:
                    if id(a) not in index:
                        index[id(a)] = len(inputs)
                        inputs.append(a)
                    refs.append(("in", index[id(a)]))
            steps.append(Step(c.op, c.attrs, tuple(refs)))
        fused = Call(make_fused(steps, len(inputs)), tuple(self(a) for a in inputs),
                     span=group[0].span)
        fused.with_type(call.checked_type)
        return fused


def fuse(module: Module) -> Module:
    """A module where every fusable group is one FusedOp call (types carried over)."""
    groups = find_groups(module)
    if not groups:
        return module
    return rewrite_module(module, _Fuse, groups=groups)
