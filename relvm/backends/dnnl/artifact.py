"""Reading a oneDNN artifact strictly: it comes from an executable file, which may be hostile.

Every field is checked for kind and range before the runtime touches the library; anything
else is a :class:`RelvmFormatError` naming the ``extern`` section and the field. Sizes are
bounded so that a file cannot make the runtime loop or allocate without limit.
"""

from __future__ import annotations

import json
import math

from ...errors import RelvmFormatError
from .compile import FORMAT, PRECISIONS, VERSION

MAX_BYTES = 1 << 20
MAX_INPUTS, MAX_PRIMS, MAX_POST_OPS, MAX_RANK = 256, 1024, 32, 12
MAX_WINDOW = 1 << 20  # kernel sizes, strides, dilations, paddings
KINDS = ("conv", "matmul", "pool", "layer_norm", "softmax", "eltwise", "binary")
ELTWISE_ALGS = ("relu", "tanh", "elu", "abs", "sqrt", "linear", "logistic", "exp", "log", "clip",
                "swish", "hardsigmoid", "hardswish")
BINARY_ALGS = ("add", "mul", "sub")
POOL_ALGS = ("max", "avg_include_padding", "avg_exclude_padding")


def _fail(msg: str):
    raise RelvmFormatError(f"dnnl artifact: {msg}", section="extern")


def _dict(v, where: str, keys: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
    if not isinstance(v, dict):
        _fail(f"{where} must be an object")
    missing = [k for k in keys if k not in v]
    extra = [k for k in v if k not in keys + optional]
    if missing or extra:
        _fail(f"{where}: missing {missing}, unknown {extra}" if missing else
              f"{where}: unknown fields {extra}")
    return v


def _bool(v, where: str) -> bool:
    if not isinstance(v, bool):
        _fail(f"{where} must be true or false")
    return v


def _int(v, where: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        _fail(f"{where} must be an int in [{lo}, {hi}]")
    return v


def _ints(v, where: str, n: int, lo: int, hi: int) -> list[int]:
    if not isinstance(v, list) or len(v) != n:
        _fail(f"{where} must be a list of {n} ints")
    return [_int(x, f"{where}[{i}]", lo, hi) for i, x in enumerate(v)]


def _float(v, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        _fail(f"{where} must be a number")
    return float(v)


def _choice(v, where: str, options) -> str:
    if v not in options:
        _fail(f"{where} must be one of {', '.join(options)}")
    return v


class _Reader:
    def __init__(self, n_inputs: int):
        self.n_inputs = n_inputs
        self.n_prims = 0  # prims read so far: a ref may name only those

    def ref(self, v, where: str, optional: bool = False):
        if v is None and optional:
            return None
        if (not isinstance(v, list) or len(v) != 2 or v[0] not in ("in", "prim")
                or isinstance(v[1], bool) or not isinstance(v[1], int)):
            _fail(f"{where} must be [\"in\", i] or [\"prim\", j]")
        limit = self.n_inputs if v[0] == "in" else self.n_prims
        if not 0 <= v[1] < limit:
            _fail(f"{where} = {v} refers past the {limit} {v[0]}s before it")
        return (v[0], v[1])

    def window(self, p: dict, where: str) -> None:
        for k in ("strides", "kernel"):
            if k in p:
                p[k] = _ints(p[k], f"{where}.{k}", 2, 1, MAX_WINDOW)
        for k in ("dilates", "pad_l", "pad_r"):
            p[k] = _ints(p[k], f"{where}.{k}", 2, 0, MAX_WINDOW)

    def post_ops(self, v, where: str) -> list[dict]:
        if not isinstance(v, list) or len(v) > MAX_POST_OPS:
            _fail(f"{where} must be a list of at most {MAX_POST_OPS} post-ops")
        out = []
        for i, po in enumerate(v):
            w = f"{where}[{i}]"
            if not isinstance(po, dict) or po.get("op") not in ("eltwise", "binary"):
                _fail(f"{w}.op must be \"eltwise\" or \"binary\"")
            if po["op"] == "eltwise":
                _dict(po, w, ("op", "alg", "alpha", "beta"))
                out.append({"op": "eltwise", "alg": _choice(po["alg"], w + ".alg", ELTWISE_ALGS),
                            "alpha": _float(po["alpha"], w + ".alpha"),
                            "beta": _float(po["beta"], w + ".beta")})
            else:
                _dict(po, w, ("op", "alg", "src", "along"))
                out.append({"op": "binary", "alg": _choice(po["alg"], w + ".alg", BINARY_ALGS),
                            "src": self.ref(po["src"], w + ".src"),
                            "along": None if po["along"] is None else
                            _int(po["along"], w + ".along", 0, MAX_RANK - 1)})
        return out

    def prim(self, p, where: str) -> dict:
        if not isinstance(p, dict):
            _fail(f"{where} must be an object")
        kind = _choice(p.get("kind"), where + ".kind", KINDS)
        fields = {
            "conv": ("src", "weights", "bias", "nhwc", "groups", "strides", "dilates", "pad_l",
                     "pad_r", "post_ops"),
            "matmul": ("src", "weights", "bias", "trans_a", "trans_b", "flatten", "post_ops"),
            "pool": ("src", "alg", "global", "kernel", "strides", "dilates", "pad_l", "pad_r",
                     "ceil_mode"),
            "layer_norm": ("src", "scale", "shift", "epsilon"),
            "softmax": ("src", "axis"),
            "eltwise": ("src", "alg", "alpha", "beta"),
            "binary": ("src0", "src1", "alg", "along", "negate"),
        }[kind]
        p = dict(_dict(p, where, ("kind",) + fields))
        for k in ("src", "weights", "src0", "src1"):
            if k in p:
                p[k] = self.ref(p[k], f"{where}.{k}")
        for k in ("bias", "scale", "shift"):
            if k in p:
                p[k] = self.ref(p[k], f"{where}.{k}", optional=True)
        for k in ("nhwc", "trans_a", "trans_b", "flatten", "global", "ceil_mode", "negate"):
            if k in p:
                p[k] = _bool(p[k], f"{where}.{k}")
        if "post_ops" in p:
            p["post_ops"] = self.post_ops(p["post_ops"], where + ".post_ops")
        if kind in ("conv", "pool"):
            self.window(p, where)
        if kind == "conv":
            p["groups"] = _int(p["groups"], where + ".groups", 1, 1 << 30)
        elif kind == "pool":
            p["alg"] = _choice(p["alg"], where + ".alg", POOL_ALGS)
        elif kind == "layer_norm":
            p["epsilon"] = _float(p["epsilon"], where + ".epsilon")
        elif kind == "softmax":
            p["axis"] = _int(p["axis"], where + ".axis", 0, MAX_RANK - 1)
        elif kind == "eltwise":
            p["alg"] = _choice(p["alg"], where + ".alg", ELTWISE_ALGS)
            p["alpha"], p["beta"] = _float(p["alpha"], where), _float(p["beta"], where)
        elif kind == "binary":
            p["alg"] = _choice(p["alg"], where + ".alg", BINARY_ALGS)
            if p["along"] is not None:
                p["along"] = _int(p["along"], where + ".along", 0, MAX_RANK - 1)
        self.n_prims += 1
        return p


def read(artifact: bytes) -> dict:
    """The artifact's content, checked; RelvmFormatError (section "extern") if malformed."""
    if not isinstance(artifact, (bytes, bytearray)) or len(artifact) > MAX_BYTES:
        _fail(f"must be at most {MAX_BYTES} bytes")
    try:
        doc = json.loads(bytes(artifact).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        _fail(f"is not JSON ({type(e).__name__})")
    _dict(doc, "artifact", ("format", "version", "inputs", "prims", "outputs"), ("precision",))
    if doc["format"] != FORMAT:
        _fail(f"format must be {FORMAT!r}")
    if doc["version"] != VERSION:
        _fail(f"version {doc['version']!r} is not {VERSION}, the one this relvm reads")
    ins = doc["inputs"]
    if not isinstance(ins, list) or len(ins) > MAX_INPUTS:
        _fail(f"inputs must be a list of at most {MAX_INPUTS}")
    inputs = [{"rank": _int(_dict(t, f"inputs[{i}]", ("rank", "constant"))["rank"],
                            f"inputs[{i}].rank", 0, MAX_RANK),
               "constant": _bool(t["constant"], f"inputs[{i}].constant")}
              for i, t in enumerate(ins)]
    r = _Reader(len(inputs))
    if not isinstance(doc["prims"], list) or not 1 <= len(doc["prims"]) <= MAX_PRIMS:
        _fail(f"prims must be a list of 1 to {MAX_PRIMS}")
    prims = [r.prim(p, f"prims[{j}]") for j, p in enumerate(doc["prims"])]
    outs = doc["outputs"]
    if not isinstance(outs, list) or not 1 <= len(outs) <= MAX_INPUTS:
        _fail(f"outputs must be a list of 1 to {MAX_INPUTS} refs")
    outputs = [r.ref(o, f"outputs[{k}]") for k, o in enumerate(outs)]
    precision = _choice(doc.get("precision", "f32"), "precision", PRECISIONS)
    return {"inputs": inputs, "prims": prims, "outputs": outputs, "precision": precision}
