"""Dense layers and convs on relvm's own GEMM (``kernels/pgemm.c``), with their epilogues fused.

A dense weight is packed into the GEMM's panel layout once, the first time the kernel sees it,
when it is one of the VM's constants (the :class:`~relvm.runtime.kernels.Constants` given to
the kernel). A weight that is not a constant may change between calls, and packing it every
time would cost as much as the product, so those calls go to OpenBLAS (a fused entry's generic
kernel, whose anchor is this same dense kernel without an epilogue). A fused entry
whose steps are ``dense|conv2d -> [bias_add] -> [relu | clip]`` (the shape of nearly every
layer, relu6 included) runs as one C call: the bias and the clamp are applied to each tile of the
product while it is still in registers, so the output is written once and read never.

Each kernel states its C call's arguments once, as a list of slots (:func:`fixed`,
:func:`from_plan`, :func:`pointer`, :func:`packed_weight`); the direct call and a replay's
bound call (``kernel.bind``) are both made from it, once per plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from ...ops.elementwise import clip_bounds
from . import linalg
from .common import attrs_of, check, library, remember

#: Ops relvm's GEMM runs, float32 only (other dtypes keep OpenBLAS / the integer loop).
ANCHORS = ("nn.dense", "nn.conv2d")


@dataclass(frozen=True)
class Post:
    """An elementwise epilogue the C kernel runs over each finished block of its output (a
    generated kernel's ``_block`` function, see ``relvm_block_fn``): ``fn`` its address,
    ``ctx()`` its loop context for the call under way (set by the fused kernel before it
    calls the product)."""

    fn: int
    ctx: Callable[[], Any]


@dataclass(frozen=True)
class Epilogue:
    """What a fused entry does after its product: add input ``bias`` (if not None) along
    ``axis``, then clamp each value to ``clamp`` (lo, hi) if not None (relu: 0 and infinity;
    clip: its float32 bounds), then (a conv only, with ``mean``) average each output plane, as
    ``nn.global_avg_pool2d`` does, or run ``post`` over each block."""

    bias: int | None
    axis: int
    clamp: tuple[float, float] | None
    mean: bool = False
    post: Post | None = None


def _clamp_slot(clamp: tuple[float, float] | None) -> tuple:
    """The C kernels' ``clamp`` argument: NULL, or two floats (kept alive by the slot)."""
    ffi = library()[0]
    return fixed(ffi.NULL if clamp is None else ffi.new("float[2]", list(clamp)))


def _clamp_of(step: dict) -> tuple[float, float] | None:
    """The bounds a relu or clip step clamps float32 values to; None for any other step, and
    for a clip with a NaN bound (which the reference spreads to every value, and a clamp
    would not)."""
    if step["op"] == "nn.relu":
        return (0.0, math.inf)
    if step["op"] == "clip":
        lo, hi = (float(step["attrs"].get(k)) for k in ("a_min", "a_max"))
        if not (math.isnan(lo) or math.isnan(hi)):
            return tuple(float(v) for v in clip_bounds(lo, hi, "float32"))
    return None


def _post_slots(epilogue: Epilogue | None) -> list[tuple]:
    """The (post, post_ctx) arguments of relvm_pgemm and relvm_conv2d."""
    post = epilogue.post if epilogue else None
    if post is None:
        return [pointer(None), pointer(None)]
    ffi = library()[0]
    return [fixed(ffi.cast("relvm_block_fn *", post.fn)), current(post.ctx)]


@dataclass(frozen=True)
class Pair:
    """A fused conv pair: ``second(first(x, w) + epilogue, in weight) + its epilogue``."""

    first: Epilogue
    weight: int
    second: Epilogue


def _epilogue(steps: Sequence[dict], at: int, mean_ok: bool) -> tuple[Epilogue | None, int]:
    """The ``[bias_add] [relu | clip] [global_avg_pool2d]`` run of steps from ``at`` (each
    reading the step before it), and where it ends; None when a step there reads something
    else."""
    def reads_previous(step: dict, more: int) -> bool:
        args = [list(a) for a in step["args"]]
        return args[0] == ["step", at - 1] and len(args) == 1 + more
    bias, axis, mean = None, -1, False
    if at < len(steps) and steps[at]["op"] == "nn.bias_add":
        args = [list(a) for a in steps[at]["args"]]
        if not reads_previous(steps[at], 1) or args[1][0] != "in" or args[1][1] < 2:
            return None, at
        bias, axis = args[1][1], int(steps[at]["attrs"].get("axis", 1))
        at += 1
    clamp = _clamp_of(steps[at]) if at < len(steps) else None
    if clamp is not None:
        if not reads_previous(steps[at], 0):
            return None, at
        at += 1
    if mean_ok and at < len(steps) and steps[at]["op"] == "nn.global_avg_pool2d":
        if not reads_previous(steps[at], 0):
            return None, at
        mean, at = True, at + 1
    return Epilogue(bias, axis, clamp, mean), at


def match(steps: Sequence[dict]) -> Epilogue | Pair | None:
    """What a one-call kernel does for fused ``steps`` (as in ``FusedOp.steps_json()``):
    ``anchor(in a, in b) -> [nn.bias_add(step, in c)] -> [nn.relu(step) | clip(step)]``, and
    for a conv ``-> [nn.global_avg_pool2d(step)]`` (an :class:`Epilogue`); or two convs, the
    second reading the first's epilogue, ``-> nn.conv2d(step, in d) -> [bias_add] [relu | clip]
    [pool]``
    (a :class:`Pair`); else None."""
    if not steps or steps[0]["op"] not in ANCHORS:
        return None
    if [list(a) for a in steps[0]["args"]] != [["in", 0], ["in", 1]]:
        return None
    conv = steps[0]["op"] == "nn.conv2d"
    first, at = _epilogue(steps, 1, conv)
    if first is None or at == len(steps):
        return first
    if not conv or first.mean or steps[at]["op"] != "nn.conv2d":
        return None
    args = [list(a) for a in steps[at]["args"]]
    if args[0] != ["step", at - 1] or args[1][0] != "in":
        return None
    second, end = _epilogue(steps, at + 1, True)
    return Pair(first, args[1][1], second) if second and end == len(steps) else None


def _aligned(count: int) -> np.ndarray:
    """``count`` float32s starting on a 64-byte boundary (the GEMM's vector loads need it)."""
    buf = np.empty(max(count, 1) + 16, np.float32)
    start = (-buf.ctypes.data % 64) // 4
    return buf[start:start + max(count, 1)]


class PackedWeights:
    """The packed forms of a kernel's constant weights, packed once per VM and kept (keyed by
    identity: the VM hands a kernel the same read-only array on every call). The packed copies
    belong to the VM's :class:`~relvm.runtime.kernels.Constants`, so the kernels of every
    thread calling the VM share them; this object keeps one kernel's lookups."""

    def __init__(self, constants, kind: str, size: Callable[..., int],
                 pack: Callable[..., None], reads: Callable[..., tuple]):
        self.constants = constants
        self.kind = kind
        self.size, self.pack = size, pack  # floats for a layout; pack(w pointer, out pointer)
        self.reads = reads  # a layout -> everything of it the packing depends on (hashable)
        self.kept: dict[tuple, tuple[np.ndarray, Any]] = {}  # (id(w), *layout) -> (w, pointer)

    def get(self, w: np.ndarray, *layout: Any) -> Any:
        """The packed ``w`` for ``layout`` (the C size and pack functions' leading arguments) as
        a cffi pointer, or None when ``w`` is not one of the VM's constants: its values may
        change, so the caller does without (OpenBLAS for a dense layer; a conv packs it on each
        call). Layouts that pack alike share one packed copy (a conv's plans for every batch
        size pack its weights alike)."""
        key = (id(w),) + layout
        kept = self.kept.get(key)
        if kept is not None and kept[0] is w:
            return kept[1]
        if self.constants is None or not self.constants.holds(w):
            return None
        size = int(self.size(*layout))
        if size <= 0:
            return None
        if len(self.kept) >= 64:
            self.kept.clear()
        how = (self.kind, size) + self.reads(*layout)
        _, pointer = self.constants.prepared(w, how, lambda: self._packed(w, layout, size))
        self.kept[key] = (w, pointer)
        return pointer

    def _packed(self, w: np.ndarray, layout: tuple, size: int) -> tuple[np.ndarray, Any]:
        ptr = library()[0].from_buffer
        packed = _aligned(size)
        self.pack(*layout, ptr(w), ptr(packed))
        return packed, ptr(packed)


def dense_weights(constants) -> PackedWeights:
    """A dense layer's constant (n x k) weights, packed into the GEMM's panels:
    ``get(w, k, n)``."""
    lib = library()[1]
    return PackedWeights(constants, "dense", lib.relvm_pgemm_packed_size,
                         lambda k, n, w, out: lib.relvm_pgemm_pack(1, k, n, w, out),
                         lambda k, n: (k, n))


def conv_weights(constants) -> PackedWeights:
    """A conv's constant weights as its GEMM path reads them: ``get(w, shape_plan)`` (the
    packing reads the plan's channels, groups and kernel size, and the form its GEMM takes,
    which the output plane's size decides: ``relvm_conv2d_weights_form``)."""
    lib = library()[1]
    return PackedWeights(constants, "conv", lib.relvm_conv2d_packed_size,
                         lib.relvm_conv2d_pack_weights,
                         lambda s: (s.oc, s.c, s.groups, s.kh, s.kw,
                                    lib.relvm_conv2d_weights_form(s)))


def conv_nhwc_weights(constants) -> PackedWeights:
    """An NHWC conv's constant weights as relvm_conv2d_nhwc reads them (GEMM panels, k
    tap-major; a depthwise conv's tap-major): ``get(w, shape_plan)``."""
    lib = library()[1]
    return PackedWeights(constants, "conv_nhwc", lib.relvm_conv2d_nhwc_packed_size,
                         lib.relvm_conv2d_nhwc_pack_weights,
                         lambda s: (s.oc, s.c, s.groups, s.kh, s.kw))


def bind_call(c_function: Callable, c_args: Sequence[Any], at: dict[int, int],
              arrays: Sequence[np.ndarray], fixed: Sequence[bool], what: str
              ) -> Callable | None:
    """``c_function(*c_args)`` as a replay calls it (see ``runtime/replay.py``): ``c_args[p]``
    is the pointer of ``arrays[at[p]]``; the fixed arrays' pointers are made now, the others'
    on each call, which passes those arrays only, in order. None when an array that is not
    fixed has no place in the call (its value was used to make the plan)."""
    ptr = library()[0].from_buffer
    args = list(c_args)
    varying: list[list[int]] = []  # the places of each array passed per call
    for i, a in enumerate(arrays):
        places = [p for p, j in at.items() if j == i]
        if not fixed[i]:
            if not places:
                return None
            varying.append(places)
        for p in places if fixed[i] else ():
            args[p] = ptr(a)
    if not varying:
        def none_varying() -> None:
            status = c_function(*args)
            if status:
                check(status, what)
        return none_varying
    if len(varying) == 1 and len(varying[0]) == 1:
        head, tail = args[:varying[0][0]], args[varying[0][0] + 1:]

        def one_varying(a: np.ndarray) -> None:
            status = c_function(*head, ptr(a), *tail)
            if status:
                check(status, what)
        return one_varying

    def some_varying(*given: np.ndarray) -> None:
        call = list(args)
        for places, a in zip(varying, given):
            pointer = ptr(a)
            for p in places:
                call[p] = pointer
        status = c_function(*call)
        if status:
            check(status, what)
    return some_varying


# --- a kernel's C call, stated once --------------------------------------------------------
#
# Each kernel below lists its C call's arguments once, as slots; the direct call and a replay's
# bound call are both made from that list, once per plan.

def fixed(v: Any) -> tuple:
    """A slot: ``v`` on every call."""
    return ("fixed", v)


def from_plan(field: str | None = None) -> tuple:
    """A slot: the plan (the C geometry struct of a conv), or its ``field``."""
    return ("plan", field)


def pointer(index: int | None) -> tuple:
    """A slot: the pointer of the kernel's array ``index`` (-1: the output); None: NULL."""
    return ("array", index)


def packed_weight(index: int, *fields: str, required: bool = False) -> tuple:
    """A slot: array ``index`` packed for the plan (for its ``fields``, or for the whole plan)
    when it is one of the VM's constants (see :class:`PackedWeights`); otherwise NULL (the C
    kernel packs it itself) or, when ``required``, the call is not this kernel's (the direct
    call goes to the fallback; a replay does not bind it)."""
    return ("packed", index, fields, required)


def current(getter: Callable[[], Any]) -> tuple:
    """A slot: ``getter()``, asked at each call (a fused kernel's loop context, set by its
    caller for this call). A replay binds such a call only with the value to pass there (the
    fused kernel's bound call's own context: ``bind(..., current=...)``)."""
    return ("current", getter)


def _of(plan: Any, field: str | None) -> Any:
    return plan if field is None else getattr(plan, field)


class Call:
    """A kernel's C call for one plan: ``c_function`` with ``slots`` filled in as far as the
    plan fixes them. ``direct(arrays)`` makes the call (its status, or None where a required
    packed weight is missing); ``bind`` makes it for a replay (see :func:`bind_call`)."""

    __slots__ = ("direct", "bind")

    def __init__(self, c_function: Callable, slots: Sequence[tuple], plan: Any,
                 weights: PackedWeights):
        ffi = library()[0]
        null, get = ffi.NULL, weights.get
        template: list[Any] = []  # the arguments, with None where a call fills them in
        values: list[Any] = []  # what the direct call takes, in slot order (see _direct_call)
        pointers: list[tuple[int, int]] = []  # (place, array)
        packs: list[tuple[int, int, tuple, bool]] = []  # (place, array, layout, required)
        for place, (kind, what, *more) in enumerate(slots):
            if kind in ("fixed", "plan"):
                template.append(what if kind == "fixed" else _of(plan, what))
                values.append(template[-1])
            elif kind == "array":
                template.append(null if what is None else None)
                if what is not None:
                    pointers.append((place, what))
            elif kind == "current":
                template.append(None)
                values.append(what)
            else:
                fields, required = more
                layout = tuple(_of(plan, f) for f in fields) if fields else (plan,)
                template.append(None)
                values += layout
                packs.append((place, what, layout, required))
        self.direct = _direct_call(slots)(c_function, ffi.from_buffer, null, get, *values)
        currents = [place for place, (kind, *_) in enumerate(slots) if kind == "current"]

        def bind(arrays: Sequence[np.ndarray], fixed: Sequence[bool], what: str,
                 current: Any = None) -> Callable | None:
            if currents and current is None:
                return None
            n = len(arrays)
            c_args = template.copy()
            for place in currents:
                c_args[place] = current
            for place, i, layout, required in packs:
                i %= n
                weight = get(arrays[i], *layout) if fixed[i] else None
                if weight is None:
                    if required:
                        return None
                    weight = null
                c_args[place] = weight
            at = {place: i % n for place, i in pointers}
            return bind_call(c_function, c_args, at, arrays, fixed, what)
        self.bind = bind


_DIRECT_CALLS: dict[tuple, Callable] = {}  # a layout of slots -> its direct calls' maker


def _layout(slot: tuple) -> tuple:
    """What of a slot the direct call's source depends on: not its values."""
    kind = slot[0]
    if kind == "array":
        return ("array", None if slot[1] is None else int(slot[1]))
    if kind == "packed":
        return ("packed", int(slot[1]), max(1, len(slot[2])), bool(slot[3]))
    if kind == "current":
        return ("current",)
    return ("value",)


def _direct_call(slots: Sequence[tuple]) -> Callable:
    """``make(c_function, ptr, null, get, *values)`` -> ``direct(arrays)``: the C call of
    ``slots`` written out as one expression, as a hand-written call would be, so that a call
    does no more than make its pointers and look its packed weights up (a loop over the slots
    cost some 20% more per call). ``values`` are, in slot order, each fixed or plan slot's
    value and each packed weight's layout. Compiled once per process for each layout of slots
    (the kernels have a few); the source holds names and integers only."""
    layout = tuple(_layout(s) for s in slots)
    make = _DIRECT_CALLS.get(layout)
    if make is not None:
        return make
    params, lines, c_args = [], [], []
    for place, slot in enumerate(layout):
        if slot[0] == "value":
            params.append(f"v{place}")
            c_args.append(f"v{place}")
        elif slot[0] == "current":
            params.append(f"v{place}")
            c_args.append(f"v{place}()")
        elif slot[0] == "array":
            c_args.append("null" if slot[1] is None else f"ptr(arrays[{slot[1]}])")
        else:
            _, i, count, required = slot
            names = [f"v{place}_{j}" for j in range(count)]
            params += names
            lines += [f"w{place} = get(arrays[{i}], {', '.join(names)})",
                      f"if w{place} is None:",
                      "    return None" if required else f"    w{place} = null"]
            c_args.append(f"w{place}")
    source = "\n".join(
        [f"def make(c_function, ptr, null, get, {', '.join(params)}):",
         "    def direct(arrays):"]
        + [f"        {line}" for line in lines]
        + [f"        return c_function({', '.join(c_args)})", "    return direct"])
    namespace: dict[str, Any] = {}
    exec(compile(source, "<relvm packed kernel call>", "exec"), namespace)
    make = namespace["make"]
    if len(_DIRECT_CALLS) >= 64:
        _DIRECT_CALLS.clear()
    _DIRECT_CALLS[layout] = make
    return make


def _kernel(name: str, plan_for: Callable, c_function: Callable, slots: Sequence[tuple],
            weights: PackedWeights, fallback: Callable[[], Callable] | None) -> Callable:
    """``kernel(*arrays)`` (the fused entry's inputs, then its output): a plan per the arrays'
    shapes (``plan_for(shapes)``, falsy where the one-call kernel does not apply) and its
    :class:`Call` of ``c_function`` with ``slots``, whose status is checked; calls the one-call
    kernel does not cover go to ``fallback()``. ``kernel.bind`` (for replays) binds the call
    for shapes with a plan."""
    calls: dict[tuple, Any] = {}  # shapes -> Call, or False: not this kernel's shapes
    slow: list[Callable] = []

    def bind(arrays: Sequence[np.ndarray], fixed: Sequence[bool],
             current: Any = None) -> Callable | None:
        key = tuple([a.shape for a in arrays])
        call = calls.get(key)
        return call.bind(arrays, fixed, f"{name} {key}", current) if call else None

    def run(*args: np.ndarray) -> None:
        key = tuple([a.shape for a in args])
        call = calls.get(key)
        if call is None:
            plan = plan_for(key)
            call = remember(calls, key, Call(c_function, slots, plan, weights) if plan else False)
        status = None if call is False else call.direct(args)
        if status is None:
            if not slow:
                slow.append(fallback())
            slow[0](*args)
        elif status:
            check(status, f"{name} {key}")
    run.bind = bind
    return run


def _layer(items: Sequence, bias_at: int | None) -> tuple:
    """(data, weight, output, bias or None) of a layer's shapes."""
    return items[0], items[1], items[-1], None if bias_at is None else items[bias_at]


class DensePlan(NamedTuple):
    """relvm_pgemm's dims for a dense layer's shapes: out (m x n) = x (m x k) w^T."""

    m: int
    n: int
    k: int


def make_dense(entry, constants, epilogue: Epilogue | None = None,
               fallback: Callable[[], Callable] | None = None) -> Callable:
    """``kernel(x, w, [bias], out)``: nn.dense (plus ``epilogue``) on relvm's GEMM."""
    clamp = epilogue.clamp if epilogue else None
    bias_at = epilogue.bias if epilogue else None

    def plan_for(shapes):
        x, w, out, b = _layer(shapes, bias_at)
        _, m, n, k, _, _ = linalg._dense_plan(x, w, out)
        if b is not None and (b != (n,) or epilogue.axis % len(out) != len(out) - 1):
            return None  # a bias along another axis: the generic kernel's business
        return DensePlan(m, n, k)

    # relvm_pgemm(m, n, k, a, lda, packed b, c, ldc, bias, bias_per_row, clamp, post,
    # post_ctx); a weight that is not a constant goes to OpenBLAS, through the fallback.
    slots = [from_plan("m"), from_plan("n"), from_plan("k"), pointer(0), from_plan("k"),
             packed_weight(1, "k", "n", required=True), pointer(-1), from_plan("n"),
             pointer(bias_at), fixed(0), _clamp_slot(clamp)] + _post_slots(epilogue)
    if fallback is None:  # a plain dense: OpenBLAS for weights that are not constants
        fallback = lambda: linalg._make_gemm(entry, linalg._dense_plan, False, True)  # noqa: E731
    return _kernel(entry.name, plan_for, library()[1].relvm_pgemm, slots,
                   dense_weights(constants), fallback)


def make_conv2d(entry, constants, epilogue: Epilogue | None = None,
                fallback: Callable[[], Callable] | None = None) -> Callable:
    """``kernel(x, w, [bias], out)``: nn.conv2d (plus ``epilogue``) in one C call. With a mean
    (global average pool), the conv's output is never stored: ``out`` is (n, oc, 1, 1). A
    constant weight is packed once (other weights are packed by each call)."""
    ffi, lib = library()
    attrs = attrs_of(entry)
    nhwc = linalg.conv_ops.channels_last(attrs)
    mean = bool(epilogue and epilogue.mean)
    clamp = epilogue.clamp if epilogue else None
    bias_at = epilogue.bias if epilogue else None
    channel_axis = 3 if nhwc else 1

    def plan_for(shapes):
        x, w, out, b = _layer(shapes, bias_at)
        if mean and nhwc:
            return None  # the mean averages NCHW planes
        plan = linalg._conv_plan(ffi, attrs, x, w, out, mean)
        if b is not None and (b != (w[0],) or epilogue.axis % 4 != channel_axis):
            return None
        if mean and (plan.c == 0 or plan.c == plan.groups):
            return None  # the mean runs on the GEMM path only: depthwise convs chain
        return plan

    # relvm_conv2d_mean(dtype, shape, x, w, y, bias, clamp, wpacked) and relvm_conv2d (and
    # relvm_conv2d_nhwc: the same, then post, post_ctx); dtype 0: float32, the only one this
    # path takes.
    slots = [fixed(0), from_plan(), pointer(0), pointer(1), pointer(-1), pointer(bias_at),
             _clamp_slot(clamp), packed_weight(1)] + ([] if mean else _post_slots(epilogue))
    if nhwc:
        return _kernel(entry.name, plan_for, lib.relvm_conv2d_nhwc, slots,
                       conv_nhwc_weights(constants), fallback)
    conv = lib.relvm_conv2d_mean if mean else lib.relvm_conv2d
    return _kernel(entry.name, plan_for, conv, slots, conv_weights(constants), fallback)


class PairPlan(NamedTuple):
    """The C geometry structs of a conv pair's first conv and second conv."""

    a: Any
    b: Any


def make_conv_pair(entry, pair: Pair, constants, fallback: Callable[[], Callable]) -> Callable:
    """``kernel(*inputs, out)``: a fused conv pair in one C call (relvm_conv2d_pair), the
    first conv's output never stored; shapes the C kernel does not take go to ``fallback()``.
    Constant weights are packed once, as in :func:`make_conv2d`."""
    ffi, lib = library()
    steps = entry.attrs["steps"]
    convs = [s for s in steps if s["op"] == "nn.conv2d"]
    attrs_a = attrs_of(type(entry)(entry.name, "nn.conv2d", convs[0]["attrs"], (), ()))
    attrs_b = attrs_of(type(entry)(entry.name, "nn.conv2d", convs[1]["attrs"], (), ()))
    a, b, wb_at = pair.first, pair.second, pair.weight

    def plan_for(shapes: tuple) -> Any:
        x, wa, wb, out = shapes[0], shapes[1], shapes[wb_at], shapes[-1]
        shape_a = linalg._conv_plan(ffi, attrs_a, x, wa, None, check_out=False)
        mid = (shape_a.n, shape_a.oc, shape_a.oh, shape_a.ow)
        shape_b = linalg._conv_plan(ffi, attrs_b, mid, wb, out, b.mean)
        for e, oc in ((a, shape_a.oc), (b, shape_b.oc)):
            if e.bias is not None and (shapes[e.bias] != (oc,) or e.axis % 4 != 1):
                return None  # a bias along another axis: the steps one by one
        # What relvm_conv2d_pair refuses -- no channels into either conv (the first one's
        # output channels are the second one's input), no pixels in or out -- goes to the steps.
        sizes = (shape_a.c, shape_b.c, shape_a.h * shape_a.w, shape_b.h * shape_b.w,
                 shape_b.oh * shape_b.ow)
        return None if 0 in sizes else PairPlan(shape_a, shape_b)

    # relvm_conv2d_pair(dtype, a, b, x, wa, bias_a, clamp_a, wb, y, bias_b, clamp_b, mean,
    # wpacked_a, wpacked_b)
    slots = [fixed(0), from_plan("a"), from_plan("b"), pointer(0), pointer(1), pointer(a.bias),
             _clamp_slot(a.clamp), pointer(wb_at), pointer(-1), pointer(b.bias),
             _clamp_slot(b.clamp), fixed(int(b.mean)), packed_weight(1, "a"),
             packed_weight(wb_at, "b")]
    return _kernel(entry.name, plan_for, lib.relvm_conv2d_pair, slots, conv_weights(constants),
                   fallback)


def supports(entry) -> bool:
    """True for a fused entry this module runs as one call: float32 throughout, and steps that
    :func:`match` reads."""
    if entry.op != "fused" or set(entry.inputs) | set(entry.outputs) != {"float32"}:
        return False
    return match(entry.attrs.get("steps") or []) is not None


def make_fused(entry, constants, fallback: Callable[[], Callable]) -> Callable:
    """The one-call kernel of a fused entry :func:`supports` accepts; ``fallback()`` makes the
    generic kernel, used for shapes the epilogue does not cover."""
    steps = entry.attrs["steps"]
    epilogue = match(steps)
    if isinstance(epilogue, Pair):
        return make_conv_pair(entry, epilogue, constants, fallback)
    anchor = type(entry)(entry.name, steps[0]["op"], steps[0]["attrs"], entry.inputs[:2],
                         entry.outputs)
    if anchor.op == "nn.dense":
        return make_dense(anchor, constants, epilogue, fallback)
    return make_conv2d(anchor, constants, epilogue, fallback)


def block_anchor(entry, constants, post: Post, whole: Callable[[], None]
                 ) -> Callable | None:
    """The product of a fused entry's first step (dense or conv2d, float32) running ``post``
    over each block of its output while it is in cache: ``kernel(x, w, out)``. Shapes or
    weights the one-call kernel does not take run the product alone, then ``whole()`` (the
    epilogue over the whole output). None for products this module does not run."""
    if entry.op not in ANCHORS or set(entry.inputs) | set(entry.outputs) != {"float32"}:
        return None
    from . import BUILDERS  # the plain kernel, for the calls the one-call kernel does not take

    builder = BUILDERS[entry.op]

    def fallback() -> Callable:
        plain = builder.make(entry, constants) if builder.with_constants else builder.make(entry)

        def product_then_epilogue(*args: np.ndarray) -> None:
            plain(*args)
            whole()
        return product_then_epilogue
    epilogue = Epilogue(None, -1, None, post=post)
    make = make_dense if entry.op == "nn.dense" else make_conv2d
    return make(entry, constants, epilogue, fallback)
