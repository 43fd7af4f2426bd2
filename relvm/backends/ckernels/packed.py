"""Dense layers and convs on relvm's own GEMM (``kernels/pgemm.c``), with their epilogues fused.

A dense weight is packed into the GEMM's panel layout once, the first time the kernel sees it,
when it is one of the VM's constants (the :class:`~relvm.runtime.kernels.Constants` given to
the kernel). A weight that is not a constant may change between calls, and packing it every
time would cost as much as the product, so those calls go to OpenBLAS (a fused entry's generic
kernel, whose anchor is this same dense kernel without an epilogue). A fused entry
whose steps are ``dense|conv2d -> [bias_add] -> [relu]`` (the shape of nearly every layer) runs
as one C call: the bias and relu are applied to each tile of the product while it is still in
registers, so the output is written once and read never.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from . import linalg
from .common import attrs_of, check, library, remember

#: Ops relvm's GEMM runs, float32 only (other dtypes keep OpenBLAS / the integer loop).
ANCHORS = ("nn.dense", "nn.conv2d")


@dataclass(frozen=True)
class Epilogue:
    """What a fused entry does after its product: add input ``bias`` (if not None) along
    ``axis``, then relu, then (a conv only, with ``mean``) average each output plane, as
    ``nn.global_avg_pool2d`` does."""

    bias: int | None
    axis: int
    relu: bool
    mean: bool = False


def match(steps: Sequence[dict]) -> Epilogue | None:
    """The epilogue of fused ``steps`` (as in ``FusedOp.steps_json()``), when they are exactly
    ``anchor(in a, in b) -> [nn.bias_add(step, in c)] -> [nn.relu(step)]``, and for a conv
    ``-> [nn.global_avg_pool2d(step)]``; else None."""
    if not steps or steps[0]["op"] not in ANCHORS:
        return None
    if [list(a) for a in steps[0]["args"]] != [["in", 0], ["in", 1]]:
        return None
    bias, axis, relu, at = None, -1, False, 1
    if at < len(steps) and steps[at]["op"] == "nn.bias_add":
        args = [list(a) for a in steps[at]["args"]]
        if args[0] != ["step", at - 1] or args[1][0] != "in" or args[1][1] < 2:
            return None
        bias, axis = args[1][1], int(steps[at]["attrs"].get("axis", 1))
        at += 1
    if at < len(steps) and steps[at]["op"] == "nn.relu":
        if [list(a) for a in steps[at]["args"]] != [["step", at - 1]]:
            return None
        relu, at = True, at + 1
    mean = False
    if (at < len(steps) and steps[at]["op"] == "nn.global_avg_pool2d"
            and steps[0]["op"] == "nn.conv2d"):
        if [list(a) for a in steps[at]["args"]] != [["step", at - 1]]:
            return None
        mean, at = True, at + 1
    return Epilogue(bias, axis, relu, mean) if at == len(steps) else None


def _aligned(count: int) -> np.ndarray:
    """``count`` float32s starting on a 64-byte boundary (the GEMM's vector loads need it)."""
    buf = np.empty(max(count, 1) + 16, np.float32)
    start = (-buf.ctypes.data % 64) // 4
    return buf[start:start + max(count, 1)]


class PackedWeights:
    """The packed forms of a dense kernel's constant weights, packed once and kept (keyed by
    identity: the VM hands a kernel the same read-only array on every call)."""

    def __init__(self, constants):
        self.constants = constants
        self.kept: dict[int, tuple[np.ndarray, np.ndarray, Any]] = {}

    def get(self, w: np.ndarray, k: int, n: int) -> Any:
        """The packed ``w`` (a cffi pointer), or None when ``w`` is not one of the VM's
        constants: its values may change, and packing it on every call would cost as much as
        the product (the caller uses OpenBLAS instead)."""
        kept = self.kept.get(id(w))
        if kept is not None and kept[0] is w:
            return kept[2]
        if self.constants is None or not self.constants.holds(w):
            return None
        ffi, lib = library()
        packed = _aligned(int(lib.relvm_pgemm_packed_size(k, n)))
        lib.relvm_pgemm_pack(1, k, n, ffi.from_buffer(w), ffi.from_buffer(packed))
        if len(self.kept) >= 64:
            self.kept.clear()
        self.kept[id(w)] = (w, packed, ffi.from_buffer(packed))
        return self.kept[id(w)][2]


def _kernel(name: str, bias_at: int | None, plan_for: Callable, call: Callable,
            fallback: Callable[[], Callable] | None) -> Callable:
    """``kernel(x, w, [bias], out)``: a plan per shapes (``plan_for(x, w, out, bias)`` shapes,
    falsy where the epilogue does not apply), then ``call(plan, x, w, out, bias)``, the C call,
    whose status is checked; ``call`` returns None to pass the call on to ``fallback()``, as
    calls the epilogue does not cover go."""
    plans: dict[tuple, Any] = {}
    slow: list[Callable] = []

    def run(*args: np.ndarray) -> None:
        x, w, out = args[0], args[1], args[-1]
        b = args[bias_at] if bias_at is not None else None
        key = (x.shape, w.shape, out.shape, None if b is None else b.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, plan_for(*key) or False)
        status = None if plan is False else call(plan, x, w, out, b)
        if status is None:
            if not slow:
                slow.append(fallback())
            slow[0](*args)
        elif status:
            check(status, f"{name} {key}")
    return run


def make_dense(entry, constants, epilogue: Epilogue | None = None,
               fallback: Callable[[], Callable] | None = None) -> Callable:
    """``kernel(x, w, [bias], out)``: nn.dense (plus ``epilogue``) on relvm's GEMM."""
    ffi, lib = library()
    gemm, ptr, null = lib.relvm_pgemm, ffi.from_buffer, ffi.NULL
    weights = PackedWeights(constants)
    relu = int(bool(epilogue and epilogue.relu))

    def plan_for(x, w, out, b):
        _, m, n, k, _, _ = linalg._dense_plan(x, w, out)
        if b is not None and (b != (n,) or epilogue.axis % len(out) != len(out) - 1):
            return None  # a bias along another axis: the generic kernel's business
        return m, n, k

    def call(plan, x, w, out, b):
        m, n, k = plan
        packed = weights.get(w, k, n)
        if packed is None:
            return None  # not a constant: OpenBLAS, through the fallback
        return gemm(m, n, k, ptr(x), k, packed, ptr(out), n, null if b is None else ptr(b), 0,
                    relu)

    if fallback is None:  # a plain dense: OpenBLAS for weights that are not constants
        fallback = lambda: linalg._make_gemm(entry, linalg._dense_plan, False, True)  # noqa: E731
    return _kernel(entry.name, epilogue.bias if epilogue else None, plan_for, call, fallback)


def make_conv2d(entry, epilogue: Epilogue | None = None,
                fallback: Callable[[], Callable] | None = None) -> Callable:
    """``kernel(x, w, [bias], out)``: nn.conv2d (plus ``epilogue``) in one C call. With a mean
    (global average pool), the conv's output is never stored: ``out`` is (n, oc, 1, 1)."""
    ffi, lib = library()
    attrs = attrs_of(entry)
    mean = bool(epilogue and epilogue.mean)
    conv = lib.relvm_conv2d_mean if mean else lib.relvm_conv2d
    ptr, null = ffi.from_buffer, ffi.NULL
    relu = int(bool(epilogue and epilogue.relu))

    def plan_for(x, w, out, b):
        plan = linalg._conv_plan(ffi, attrs, x, w, out, mean)
        if b is not None and (b != (out[1],) or epilogue.axis % 4 != 1):
            return None
        if mean and (plan.c == 0 or plan.c == plan.groups):
            return None  # the mean runs on the GEMM path only: depthwise convs chain
        return plan

    def call(plan, x, w, out, b):  # dtype 0: float32, the only one this path takes
        return conv(0, plan, ptr(x), ptr(w), ptr(out), null if b is None else ptr(b), relu)
    return _kernel(entry.name, epilogue.bias if epilogue else None, plan_for, call, fallback)


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
    anchor = type(entry)(entry.name, steps[0]["op"], steps[0]["attrs"], entry.inputs[:2],
                         entry.outputs)
    if anchor.op == "nn.dense":
        return make_dense(anchor, constants, epilogue, fallback)
    return make_conv2d(anchor, epilogue, fallback)
