"""A region's relvm steps -> oneDNN primitives, as a JSON artifact (build time).

Each conv2d, dense, matmul, batch_matmul, pool, layer_norm and softmax step becomes one
primitive. Elementwise steps and ``bias_add``/``add``/``subtract``/``multiply`` that follow a conv
or a matmul (and read its result only once) become its bias or **post-ops**; any other one is a
primitive of its own (eltwise, binary). Activations that the importer spells as several ops --
SiLU ``x * sigmoid(x)``, hard-sigmoid ``clip(x * a + b, 0, 1)`` with constant a and b, and
hard-swish ``x * hardsigmoid(x)`` -- become one eltwise (``swish``, ``hardsigmoid``,
``hardswish``), so a post-op of the conv before them (:class:`_Activations`). The runtime
(``runtime.py``) makes oneDNN objects from the artifact; nothing here touches the library.

Artifact, version 1 (``ref`` is ``["in", i]`` or ``["prim", j]`` with ``j`` an earlier prim)::

    {"format": "relvm-dnnl", "version": 1,
     "inputs": [{"rank": r, "constant": bool}, ...],
     "prims": [{"kind": "conv", "src": ref, "weights": ref, "bias": ref | null, "nhwc": bool,
                "groups": g, "strides": [2], "dilates": [2], "pad_l": [2], "pad_r": [2],
                "post_ops": [...]},
               {"kind": "matmul", "src", "weights", "bias", "trans_a", "trans_b",
                "flatten": bool, "post_ops"},
               {"kind": "pool", "src", "alg": "max" | "avg_include_padding" |
                "avg_exclude_padding", "global": bool, "kernel", "strides", "dilates", "pad_l",
                "pad_r", "ceil_mode": bool},
               {"kind": "layer_norm", "src", "scale": ref | null, "shift": ref | null,
                "epsilon": float},
               {"kind": "softmax", "src", "axis": int},
               {"kind": "eltwise", "src", "alg", "alpha", "beta"},
               {"kind": "binary", "src0", "src1", "alg", "along": axis | null,
                "negate": bool}],
     "outputs": [ref, ...], "precision": "f32" | "bf16"}

A post-op is ``{"op": "eltwise", "alg", "alpha", "beta"}`` or ``{"op": "binary", "alg", "src":
ref, "along": axis | null}``; ``along`` spreads a 1-D tensor along that axis of the result
(bias_add), else the tensor broadcasts NumPy-style. Dilations are oneDNN's (0: none), the
paddings per spatial axis. ``precision`` (absent in artifacts older than it: ``"f32"``) is
``"bf16"`` for the ``dnnl_bf16`` backend: values in the region's activation layout (what convs
and pools read and write) are stored as bfloat16, conv weights are rounded to it, and matmuls
multiply bfloat16 copies of their operands; bias, accumulation and everything else stay
float32.
"""

from __future__ import annotations

import json

import numpy as np

from ...errors import RelvmCompileError

FORMAT, VERSION = "relvm-dnnl", 1

#: relvm op -> (oneDNN eltwise algorithm, alpha(attrs), beta(attrs)).
ELTWISE = {
    "nn.relu": ("relu", lambda a: 0.0, lambda a: 0.0),
    "nn.leaky_relu": ("relu", lambda a: a["alpha"], lambda a: 0.0),
    "sigmoid": ("logistic", lambda a: 0.0, lambda a: 0.0),
    "tanh": ("tanh", lambda a: 0.0, lambda a: 0.0),
    "exp": ("exp", lambda a: 0.0, lambda a: 0.0),
    "log": ("log", lambda a: 0.0, lambda a: 0.0),
    "sqrt": ("sqrt", lambda a: 0.0, lambda a: 0.0),
    "abs": ("abs", lambda a: 0.0, lambda a: 0.0),
    "negative": ("linear", lambda a: -1.0, lambda a: 0.0),
    "clip": ("clip", lambda a: a["a_min"], lambda a: a["a_max"]),
}
BINARY = {"add": "add", "multiply": "mul", "subtract": "sub", "nn.bias_add": "add"}
MAIN = ("nn.conv2d", "nn.dense", "nn.matmul", "nn.batch_matmul", "nn.max_pool2d",
        "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.layer_norm", "nn.softmax")
FUSES_INTO = ("conv", "matmul")  # the primitives that take post-ops here
PRECISIONS = ("f32", "bf16")


def _pair(v, default):
    v = default if v is None else v
    v = [v] if isinstance(v, int) else list(v)
    return v * 2 if len(v) == 1 else v


def _pads(v):
    """Relay's padding -> (pad_l, pad_r), each [top/left per axis]."""
    p = [v] if isinstance(v, int) else list(v)
    if len(p) == 1:
        p = p * 4
    elif len(p) == 2:
        p = p * 2
    return [p[0], p[1]], [p[2], p[3]]


def _conv(attrs, args):
    pad_l, pad_r = _pads(attrs.get("padding", 0))
    return {"kind": "conv", "src": args[0], "weights": args[1], "bias": None,
            "nhwc": attrs.get("data_layout", "NCHW") == "NHWC",
            "groups": attrs.get("groups", 1), "strides": _pair(attrs.get("strides"), 1),
            "dilates": [d - 1 for d in _pair(attrs.get("dilation"), 1)],
            "pad_l": pad_l, "pad_r": pad_r, "post_ops": []}


def _matmul(op, attrs, args):
    dense = op == "nn.dense"
    return {"kind": "matmul", "src": args[0], "weights": args[1], "bias": None,
            "trans_a": bool(attrs.get("transpose_a", False)),
            "trans_b": True if dense else bool(attrs.get("transpose_b", op == "nn.batch_matmul")),
            "flatten": dense, "post_ops": []}


def _pool(op, attrs, args):
    if op == "nn.global_avg_pool2d":
        return {"kind": "pool", "src": args[0], "alg": "avg_include_padding", "global": True,
                "kernel": [1, 1], "strides": [1, 1], "dilates": [0, 0], "pad_l": [0, 0],
                "pad_r": [0, 0], "ceil_mode": False}
    pad_l, pad_r = _pads(attrs.get("padding", 0))
    if op == "nn.max_pool2d":
        alg = "max"
    else:
        alg = "avg_include_padding" if attrs.get("count_include_pad") else "avg_exclude_padding"
    return {"kind": "pool", "src": args[0], "alg": alg, "global": False,
            "kernel": _pair(attrs.get("pool_size"), 1), "strides": _pair(attrs.get("strides"), 1),
            "dilates": [d - 1 for d in _pair(attrs.get("dilation"), 1)],
            "pad_l": pad_l, "pad_r": pad_r, "ceil_mode": bool(attrs.get("ceil_mode", False))}


def _main(op, attrs, args, rank):
    if op == "nn.conv2d":
        return _conv(attrs, args)
    if op in ("nn.dense", "nn.matmul", "nn.batch_matmul"):
        return _matmul(op, attrs, args)
    if op == "nn.layer_norm":
        return {"kind": "layer_norm", "src": args[0],
                "scale": args[1] if attrs.get("scale", True) else None,
                "shift": args[2] if attrs.get("center", True) else None,
                "epsilon": float(attrs.get("epsilon", 1e-5))}
    if op == "nn.softmax":
        return {"kind": "softmax", "src": args[0], "axis": attrs.get("axis", -1) % rank}
    return _pool(op, attrs, args)


def _jit_broadcast(shape, out, prim) -> bool:
    """Whether oneDNN's jit kernels take an operand of ``shape`` as a binary post-op of
    ``prim`` (result ``out``): the full shape, a scalar, or one value per output channel (the
    last axis of a matmul, axis 1 of an NCHW conv, 3 of an NHWC one). Other broadcasts (an
    attention mask over the batch, a (6, 5) added to every (2, 4, 6, 5) matmul) make the
    primitive ``ref:any``: they run as a binary primitive of their own instead."""
    shape = [1] * (len(out) - len(shape)) + list(shape)
    if shape == list(out) or all(d == 1 for d in shape):
        return True
    channel = len(out) - 1 if prim["kind"] == "matmul" or prim.get("nhwc") else 1
    return all(d == 1 for a, d in enumerate(shape) if a != channel)


def _scalar(region, arg) -> float | None:
    """The value of ``arg`` when it is a constant of the model holding one number."""
    kind, i = arg
    if kind != "in" or not (region.constant and region.constant[i]) or \
            len(region.constants) <= i or region.constants[i] is None:
        return None
    try:
        v = np.asarray(region.constants[i], dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return float(v.reshape(-1)[0]) if v.size == 1 else None


class _Activations:
    """Activations the importer spells as several ops, each found as one oneDNN eltwise: swish
    (``multiply(x, sigmoid(x))``: SiLU), hardsigmoid (``clip(add(multiply(x, a), b), 0, 1)``
    with constant numbers a and b) and hardswish (``multiply(x, hardsigmoid(x))``), when their
    inner steps feed nothing else. ``fused[j] = (x, entry)``: step j is that eltwise of ``x``;
    the steps in ``inner`` are folded into one (never emitted); ``uses`` is corrected (x is now
    read once, by step j)."""

    def __init__(self, region, uses: list[int]):
        self.region, self.steps, self.uses = region, region.steps, uses
        self.fused: dict[int, tuple[list, dict]] = {}
        self.inner: set[int] = set()
        for j in range(len(self.steps)):
            found = self.hardsigmoid(j) or self.product(j)
            if found is None:
                continue
            x, entry, inner, reads = found
            self.fused[j] = (x, entry)
            for i in inner:
                self.fused.pop(i, None)
                self.inner.add(i)
                uses[i] = 0
            if x[0] == "step":
                uses[x[1]] -= reads  # the inner steps' reads of x, beyond step j's one

    def _once(self, arg, op: str) -> int | None:
        """Step ``arg`` when it is an ``op`` whose result only the step asking reads."""
        kind, i = arg
        if kind == "step" and self.steps[i]["op"] == op and self.uses[i] == 1 and \
                i not in self.inner:
            return i
        return None

    def _with_number(self, args):
        """(the other arg, the number) when one of two args is a constant number."""
        for k in (0, 1):
            v = _scalar(self.region, args[k])
            if v is not None and _scalar(self.region, args[1 - k]) is None:
                return list(args[1 - k]), v
        return None, None

    def hardsigmoid(self, j: int):
        step = self.steps[j]
        if step["op"] != "clip" or step["attrs"].get("a_min") != 0.0 or \
                step["attrs"].get("a_max") != 1.0:
            return None
        add = self._once(step["args"][0], "add")
        if add is None:
            return None
        scaled, beta = self._with_number(self.steps[add]["args"])
        mul = self._once(scaled, "multiply") if scaled is not None else None
        if mul is None:
            return None
        x, alpha = self._with_number(self.steps[mul]["args"])
        if x is None:
            return None
        return x, {"alg": "hardsigmoid", "alpha": alpha, "beta": beta}, {add, mul}, 0

    def product(self, j: int):
        """``multiply(x, sigmoid(x))`` or ``multiply(x, hardsigmoid(x))``."""
        step = self.steps[j]
        if step["op"] != "multiply":
            return None
        for k in (0, 1):
            x, other = list(step["args"][1 - k]), step["args"][k]
            i = self._once(other, "sigmoid")
            if i is not None and list(self.steps[i]["args"][0]) == x:
                return x, {"alg": "swish", "alpha": 1.0, "beta": 0.0}, {i}, 1
            i = self._once(other, "clip")
            if i is not None and i in self.fused and self.fused[i][0] == x:
                entry = dict(self.fused[i][1], alg="hardswish")
                return x, entry, {i}, 1
        return None


class _Builder:
    def __init__(self, region):
        self.region = region
        self.prims: list[dict] = []
        self.value: list[list] = []  # step j -> its ref in the artifact
        self.uses = [0] * len(region.steps)
        for step in region.steps:
            for kind, i in step["args"]:
                if kind == "step":
                    self.uses[i] += 1
        for kind, i in region.outputs:
            if kind == "step":
                self.uses[i] += 2  # an output is never folded away
        self.activations = _Activations(region, self.uses)

    def ref(self, arg) -> list:
        kind, i = arg
        return ["in", int(i)] if kind == "in" else self.value[i]

    def shape(self, arg) -> list:
        kind, i = arg
        if kind == "in":
            return list(self.region.inputs[i].shape)
        return list(self.region.steps[i]["type"]["shape"])

    def foldable(self, arg) -> int | None:
        """The prim step ``arg``'s result may take one more post-op in, else None."""
        kind, i = arg
        if kind != "step" or self.uses[i] != 1:
            return None
        ref = self.value[i]
        if ref[0] != "prim" or self.prims[ref[1]]["kind"] not in FUSES_INTO:
            return None
        return ref[1]

    def before(self, ref: list, prim: int) -> bool:
        return ref[0] == "in" or ref[1] < prim

    def step(self, j: int, step: dict) -> None:
        op, attrs, args = step["op"], step["attrs"], step["args"]
        if step["type"]["dtype"] != "float32":
            raise RelvmCompileError(f"dnnl: step {j} ({op}) is {step['type']['dtype']}; "
                                    "only float32 is supported")
        if j in self.activations.inner:
            self.value.append(None)  # folded into a later step's eltwise
            return
        if j in self.activations.fused:
            x, entry = self.activations.fused[j]
            self.eltwise_entry(entry, x, self.ref(x))
            return
        refs = [self.ref(a) for a in args]
        if op in MAIN:
            self.prims.append(_main(op, attrs, refs, len(step["type"]["shape"])))
            self.value.append(["prim", len(self.prims) - 1])
        elif op in ELTWISE:
            self.eltwise(op, attrs, args[0], refs[0])
        elif op in BINARY:
            self.binary(op, attrs, args, refs, step)
        else:
            raise RelvmCompileError(f"dnnl: no oneDNN primitive for step {j} ({op})")

    def eltwise(self, op, attrs, arg, ref):
        alg, alpha, beta = ELTWISE[op]
        self.eltwise_entry({"alg": alg, "alpha": float(alpha(attrs)), "beta": float(beta(attrs))},
                           arg, ref)

    def eltwise_entry(self, entry: dict, arg, ref):
        """``entry`` ({alg, alpha, beta}) applied to step ``arg``: a post-op of its prim when
        it may take one, else an eltwise prim."""
        p = self.foldable(arg)
        if p is not None:
            self.prims[p]["post_ops"].append({"op": "eltwise", **entry})
            self.value.append(["prim", p])
        else:
            self.prims.append({"kind": "eltwise", "src": ref, **entry})
            self.value.append(["prim", len(self.prims) - 1])

    def binary(self, op, attrs, args, refs, step):
        out = list(step["type"]["shape"])
        alg, along = BINARY[op], None
        if op == "nn.bias_add":
            along = attrs.get("axis", 1) % len(out)
            order = [0]
        else:  # the operand of the result's full shape leads
            order = [k for k in (0, 1) if self.shape(args[k]) == out]
        for k in order:
            p = self.foldable(args[k])
            other = refs[1 - k]
            if p is None or not self.before(other, p):
                continue
            shape = (self.shape(args[1 - k]) if along is None
                     else [d if a == along else 1 for a, d in enumerate(out)])
            if not _jit_broadcast(shape, out, self.prims[p]):
                continue
            prim = self.prims[p]
            if (op == "nn.bias_add" and not prim["post_ops"] and prim["bias"] is None
                    and along == (1 if prim["kind"] == "conv" and not prim["nhwc"]
                                  else len(out) - 1)):
                prim["bias"] = other  # the primitive's own bias: no post-op at all
            else:
                if alg == "sub" and k == 1:  # other - x = -x + other
                    prim["post_ops"].append({"op": "eltwise", "alg": "linear", "alpha": -1.0,
                                             "beta": 0.0})
                    prim["post_ops"].append({"op": "binary", "alg": "add", "src": other,
                                             "along": along})
                else:
                    prim["post_ops"].append({"op": "binary", "alg": alg, "src": other,
                                             "along": along})
            self.value.append(["prim", p])
            return
        if not order:
            raise RelvmCompileError(f"dnnl: {op} broadcasts both operands ({self.shape(args[0])}"
                                    f", {self.shape(args[1])} -> {out}); oneDNN cannot")
        k = order[0]
        self.prims.append({"kind": "binary", "src0": refs[k], "src1": refs[1 - k], "alg": alg,
                           "along": along, "negate": alg == "sub" and k == 1})
        self.value.append(["prim", len(self.prims) - 1])


def compile_region(region, precision: str = "f32") -> bytes:
    """The oneDNN artifact (JSON, see the module docstring) for one region.

    Parameters
    ----------
    region : relvm.backends.external.Region
    precision : {"f32", "bf16"}
        "bf16": bfloat16 activations, conv weights and matmul operands (module docstring).

    Returns
    -------
    bytes
        UTF-8 JSON; ``runtime.make_kernel`` reads it.
    """
    if precision not in PRECISIONS:
        raise RelvmCompileError(f"dnnl: precision {precision!r} is not one of "
                                f"{', '.join(PRECISIONS)}")
    for i, t in enumerate(region.inputs):
        if t.dtype != "float32":
            raise RelvmCompileError(f"dnnl: input {i} is {t.dtype}; only float32 is supported")
    b = _Builder(region)
    for j, step in enumerate(region.steps):
        b.step(j, step)
    constant = list(region.constant) or [False] * len(region.inputs)
    artifact = {"format": FORMAT, "version": VERSION,
                "inputs": [{"rank": len(t.shape), "constant": bool(c)}
                           for t, c in zip(region.inputs, constant)],
                "prims": b.prims, "outputs": [b.ref(r) for r in region.outputs],
                "precision": precision}
    return json.dumps(artifact, separators=(",", ":")).encode()
