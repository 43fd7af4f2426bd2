"""Well-formed hostile files: executables mutated by an attacker who recomputes every checksum.

``test_fuzz.py`` flips bytes, and checksums catch most of its mutants; here every mutant passes
its checksums -- the section CRCs, the header's, each constant's CRC-32 in meta and in a weights
file's index, and the weights file's content id are recomputed after mutating -- so only the
verifier and the run-time checks stand between it and the kernels. Mutations know the file's
structure: meta JSON (dtypes, shapes, ranks, indices, numbers, strings; keys and list items
deleted, duplicated, renamed, swapped; kernels, steps and plans; constants and functions),
code (operands of each kind, opcodes, whole instructions replaced, swapped, deleted or
duplicated, raw words), constant bytes and weights files. The bytes of the native library in
``kernels`` are never mutated: a file may carry any native code it likes, and deciding whether
to trust it is the job of the signature model of issue #16, not of the verifier.

A *kind* is a list of base programs (an executable file, maybe a weights file); ``run`` loads a
mutant, makes a VM and invokes it with valid inputs for the original signature (and for the
mutated one if it changed), each twice (the second may replay the first). ``fuzz_worker.py``
runs mutants in a subprocess, so a crash or hang is caught and reported with its mutation.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import tempfile
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

import relvm
from relvm import RelvmError, RelvmFormatError, dtypes, examples
from relvm.ops.registry import OPS
from relvm.runtime.bytecode import DecodeError, decode, encode
from relvm.runtime.file.format import (ENTRY, FORMAT_VERSION, HEADER, MAGIC, RELEASES,
                                      WEIGHTS_MAGIC, align, sections_of)
from relvm.runtime.bytecode.opcodes import BY_NUMBER, TABLE

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from programs import CASES  # noqa: E402

from formatcases import SMALL, B, W, signature_inputs  # noqa: E402

DTYPES = list(dtypes.DTYPES)
OP_NAMES = sorted(OPS)
#: Inputs larger than this (elements) are not made for a mutated signature.
MAX_INPUT_ELEMENTS = 1 << 22


# --- the bases of each kind ----------------------------------------------------------------------

@dataclass
class Base:
    label: str
    data: bytes
    weights: bytes | None = None  # the weights file, for an executable that keeps one
    func: str = "main"
    inputs: list = field(default_factory=list)  # valid inputs for the original signature


def _case_base(name: str, backend: str = "c", fuse: bool = True) -> Base:
    case = next(c for c in CASES if c.name == name)
    exe = relvm.build(relvm.parse(case.text, constants=case.constants), params=case.params,
                      backend=backend, fuse=fuse)
    return Base(f"{name}/{backend}", exe.save_bytes(), func=case.func,
                inputs=inputs_for(exe.function(case.func), np.random.default_rng(0)))


def _example(name: str, weights_apart: bool = False) -> Base:
    exe = relvm.build(relvm.parse(examples.text(name)), params=examples.params(name),
                      backend="c")
    base = Base(name, exe.save_bytes(), inputs=inputs_for(exe.function("main"),
                                                         np.random.default_rng(0)))
    if weights_apart:
        with tempfile.TemporaryDirectory() as tmp:
            path, wpath = os.path.join(tmp, "m.rvm"), os.path.join(tmp, "m.weights")
            exe.save(path, weights=wpath)
            with open(path, "rb") as f, open(wpath, "rb") as g:
                base.data, base.weights = f.read(), g.read()
        base.label = f"{name}+weights"
    return base


def _small_numpy() -> Base:
    exe = relvm.build(relvm.parse(SMALL), params={"w": W, "b": B}, backend="numpy")
    return Base("small/numpy", exe.save_bytes(),
                inputs=inputs_for(exe.function("main"), np.random.default_rng(0)))


#: kind -> the bases it mutates (round-robin).
KINDS: dict[str, Callable[[], list[Base]]] = {
    "mlp": lambda: [_example("mlp")],
    "convnet": lambda: [_example("convnet")],
    "control": lambda: [_case_base(n) for n in (
        "if_else_on_input", "if_on_computed_condition", "closure_captures_variable",
        "closure_returned_and_applied", "function_typed_parameter", "recursion_counts",
        "mutual_recursion", "recursive_rnn_over_symbolic_length", "tuple_parameter",
        "nested_tuple_result", "global_call_instantiates_dims")],
    "generated": lambda: [_case_base(n) for n in (
        "fused_same_chain_other_broadcast", "fused_scalar_on_either_side",
        "fused_swish_two_ranks", "fused_same_chain_other_operand", "unary_math",
        "comparisons_and_where", "integer_arithmetic", "cast_float_to_int")],
    "numpy": lambda: [_small_numpy()] + [_case_base(n, "numpy") for n in (
        "take_gather", "concatenate_and_split", "batch_norm_tuple", "dyn_reshape",
        "argwhere_data_dependent", "strided_slice", "reductions", "arange_data_dependent")],
    "weights": lambda: [_example("mlp", weights_apart=True)],
    # The C backend's library kernels one op at a time: their shape checks and attributes.
    "ops": lambda: [_case_base(n, fuse=False) for n in (
        "pooling", "reductions", "concatenate_and_split", "strided_slice", "take_gather",
        "layer_norm_and_dropout", "batch_norm_tuple", "squeeze_expand_dims_broadcast_to",
        "reshape_like_and_pad", "conv2d_depthwise_dilated", "conv2d_strided_padded",
        "batch_matmul", "matmul", "dense_softmax", "argwhere_data_dependent",
        "arange_data_dependent", "zeros_ones_full_like", "shape_of", "comparisons_and_where",
        "clip_leaky_relu_power", "cast_float_to_int", "integer_arithmetic")],
}


def inputs_for(fn, rng: np.random.Generator) -> list | None:
    """Inputs matching a function's signature (symbolic dims 2); None if none can be made."""
    return signature_inputs(fn, rng, 2, MAX_INPUT_ELEMENTS)


# --- running a mutant ----------------------------------------------------------------------------

def run(base: Base, data: bytes, weights_path: str | None, trust: bool = True) -> str:
    """Load, make a VM, invoke: the outcome's name. Exceptions outside relvm's family (and
    crashes) escape: they are what the fuzz looks for.

    A mutated file's signature no longer matches, so by default its kernels would be made
    again from the mutated descriptions; with ``trust`` the genuine library runs under the
    mutated metadata instead (``trust_native_code=True``), the harder case for the checks."""
    try:
        exe = relvm.load_bytes(data, weights=weights_path, trust_native_code=trust)
    except RelvmFormatError:
        return "refused at load"
    try:
        vm = relvm.VirtualMachine(exe)
    except RelvmError:
        return "refused by the VM"
    sets = [base.inputs]
    try:
        fn = exe.function(base.func)
    except RelvmError:
        fn = None
    if fn is not None:
        mutated = inputs_for(fn, np.random.default_rng(1))
        if mutated is not None and not _same_signature(mutated, base.inputs):
            sets.append(mutated)
    outcome = "ran"
    for inputs in sets:
        if inputs is None:
            continue
        for _ in range(2):  # the second call may replay the first
            try:
                vm.invoke(base.func, *inputs)
            except RelvmError:
                outcome = "relvm error while running"
    return outcome


def _same_signature(a: list, b: list | None) -> bool:
    if b is None or len(a) != len(b):
        return False
    for x, y in zip(a, b):
        xs, ys = (x if isinstance(x, tuple) else (x,)), (y if isinstance(y, tuple) else (y,))
        if len(xs) != len(ys) or any(p.dtype != q.dtype or p.shape != q.shape
                                     for p, q in zip(xs, ys)):
            return False
    return True


# --- a file, opened up for mutation ---------------------------------------------------------------

class Template:
    """A base file taken apart once: mutants copy what they change, share the rest."""

    def __init__(self, base: Base):
        self.base = base
        sections = sections_of(base.data)
        self.meta_text = sections["meta"]
        meta = json.loads(self.meta_text)
        words = np.frombuffer(sections["code"], "<i8").tolist()
        self.functions = [decode(words[f["code"]["word_offset"]:
                                       f["code"]["word_offset"] + f["code"]["word_count"]],
                                 f["code"]["instructions"]) for f in meta["functions"]]
        self.kernels = sections["kernels"]
        self.sign = sections["sign"]
        self.extern = sections["extern"]
        self.consts = sections["consts"]
        self.crcs = {"consts": zlib.crc32(self.consts), "kernels": zlib.crc32(self.kernels)}
        self.index_text = self.data = None
        if base.weights is not None:
            w = sections_of(base.weights, WEIGHTS_MAGIC)
            self.index_text, self.data = w["index"], w["data"]
            self.crcs["data"] = zlib.crc32(self.data)


class File:
    """A base file as the attacker edits it: meta JSON, instructions per function, constant
    bytes, the weights file's index and data; ``bytes()`` puts it back with fresh checksums."""

    def __init__(self, t: Template):
        self.template = t
        self.meta = json.loads(t.meta_text)
        self.functions = [list(code) for code in t.functions]
        self.raw_words: list[tuple[int, int]] = []  # (word index, value) set after encoding
        self.consts: bytes | bytearray = t.consts  # a bytearray once changed
        self.index = json.loads(t.index_text) if t.index_text is not None else None
        self.data: bytes | bytearray | None = t.data
        self.dups: list[tuple[int, str, Any, bool]] = []  # (id(dict), key, value, last)
        self.notes: list[str] = []
        self.recode = False  # instructions changed: re-encode and redo meta's code ranges

    def writable(self, name: str) -> bytearray:
        """Section ``consts`` or ``data``, copied before its first change."""
        value = getattr(self, name)
        if not isinstance(value, bytearray):
            value = bytearray(value)
            setattr(self, name, value)
        return value

    def code_words(self) -> list[int]:
        words: list[int] = []
        for f, instructions in zip(self.meta["functions"], self.functions):
            encoded = encode(instructions)
            if self.recode and isinstance(f, dict) and isinstance(f.get("code"), dict):
                f["code"].update(word_offset=len(words), word_count=len(encoded),
                                 instructions=len(instructions))
            words += encoded
        for at, value in self.raw_words:
            if at < len(words):
                words[at] = value
        return words

    def bytes(self) -> tuple[bytes, bytes | None]:
        """The main file and the weights file, every checksum recomputed."""
        t = self.template
        words = self.code_words()  # may rewrite meta's code ranges: before dumping meta
        weights = None
        if self.index is not None:
            _recompute_crcs(self.index, self.data, lambda e: True, self.data is t.data)
            index_bytes = self.dumps(self.index)
            weights = _assemble(WEIGHTS_MAGIC, [("index", index_bytes), ("data", self.data)],
                                {"data": t.crcs["data"]} if self.data is t.data else {})
            ref = self.meta.get("weights") if isinstance(self.meta, dict) else None
            if isinstance(ref, dict) and "content_id" in ref:
                ref["content_id"] = hashlib.sha256(index_bytes).digest()[:16].hex()
            _copy_weight_crcs(self.meta, self.index)
        if isinstance(self.meta, dict):
            _recompute_crcs(self.meta.get("constants"), self.consts,
                            lambda e: e.get("file") == "main", self.consts is t.consts)
        code = np.array([_int64(w) for w in words], "<i8").tobytes()
        known = {"kernels": t.crcs["kernels"], "sign": zlib.crc32(t.sign)}
        if self.consts is t.consts:
            known["consts"] = t.crcs["consts"]
        main = _assemble(MAGIC, [("meta", self.dumps(self.meta)), ("code", code),
                                 ("kernels", t.kernels), ("sign", t.sign),
                                 ("extern", t.extern), ("consts", self.consts)], known)
        return main, weights

    def dumps(self, value: Any) -> bytes:
        """JSON as relvm writes it, with any duplicated keys this mutant asked for."""
        if not self.dups:
            return json.dumps(value, separators=(",", ":"), allow_nan=True).encode()
        dups: dict[int, list[tuple[str, Any, bool]]] = {}
        for obj_id, key, v, last in self.dups:
            dups.setdefault(obj_id, []).append((key, v, last))

        def write(v: Any) -> str:
            if isinstance(v, dict):
                extra = dups.get(id(v), [])
                pairs = [(k, x) for k, x, last in extra if not last] + list(v.items()) + \
                    [(k, x) for k, x, last in extra if last]
                return "{" + ",".join(json.dumps(str(k)) + ":" + write(x) for k, x in pairs) + "}"
            if isinstance(v, list):
                return "[" + ",".join(write(x) for x in v) + "]"
            return json.dumps(v, allow_nan=True)
        return write(value).encode()


def _assemble(magic: bytes, sections: list[tuple[str, bytes]], known: dict[str, int]) -> bytes:
    """A file of these sections as ``fileformat.write_container`` lays it out, checksums
    recomputed (``known``: CRC-32s of sections the mutant did not change)."""
    table_end = HEADER.size + len(sections) * ENTRY.size
    pieces, entries, pos = [], [], table_end
    for name, data in sections:
        offset = align(pos)
        pieces += [b"\0" * (offset - pos), data]
        crc = known[name] if name in known else zlib.crc32(data)
        entries.append(ENTRY.pack(name.encode(), offset, len(data), crc, 0))
        pos = offset + len(data)
    table = b"".join(entries)
    head = HEADER.pack(magic, FORMAT_VERSION, RELEASES[FORMAT_VERSION].encode(), len(sections),
                       0, 0)
    head = head[:-4] + struct.pack("<I", zlib.crc32(table, zlib.crc32(head[:-4])))
    return b"".join([head, table] + pieces)


def _int64(v: Any) -> int:
    v = int(v)
    return (v + 2**63) % 2**64 - 2**63


_CRCS: dict[tuple[int, int, int], int] = {}


def _recompute_crcs(entries: Any, data: bytes | bytearray, mine: Callable[[dict], bool],
                    unchanged: bool) -> None:
    """The attacker's CRC-32 of each constant's bytes, where its place is readable (of bytes
    the mutant left ``unchanged``, remembered)."""
    if not isinstance(entries, list):
        return
    for e in entries:
        if not isinstance(e, dict) or "crc32" not in e or not mine(e):
            continue
        offset, nbytes = e.get("offset"), e.get("nbytes")
        if type(offset) is int and type(nbytes) is int and 0 <= offset and \
                0 <= nbytes and offset + nbytes <= len(data):
            key = (id(data), offset, nbytes)
            crc = _CRCS.get(key) if unchanged else None
            if crc is None:
                crc = zlib.crc32(memoryview(data)[offset:offset + nbytes])
                if unchanged:
                    _CRCS[key] = crc
            e["crc32"] = crc


def _copy_weight_crcs(meta: Any, index: Any) -> None:
    """Constants kept in the weights file carry the same CRC-32 as its index says."""
    if not isinstance(meta, dict) or not isinstance(meta.get("constants"), list) \
            or not isinstance(index, list):
        return
    for c in meta["constants"]:
        if isinstance(c, dict) and c.get("file") == "weights" and "crc32" in c:
            i = c.get("index")
            if type(i) is int and 0 <= i < len(index) and isinstance(index[i], dict):
                c["crc32"] = index[i].get("crc32", c["crc32"])


# --- mutations ------------------------------------------------------------------------------------

def _nodes(v: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """Every (path, value) inside a JSON value, the value itself first."""
    out = [(path, v)]
    if isinstance(v, dict):
        for k, x in v.items():
            out += _nodes(x, path + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += _nodes(x, path + (i,))
    return out


def _parent(root: Any, path: tuple) -> tuple[Any, Any]:
    target = root
    for k in path[:-1]:
        target = target[k]
    return target, path[-1]


def _number(rng: np.random.Generator, v: int | float) -> Any:
    choice = int(rng.integers(12))
    if choice < 3:
        return v + int(rng.choice([-2, -1, 1, 2]))
    if choice == 3:
        return 0
    if choice == 4:
        return -1
    if choice == 5:
        return int(v) * 2 if v else 1
    if choice == 6:
        return int(rng.choice([2**31 - 1, 2**31, 2**32, 2**63 - 1, -2**63, 2**64, 1 << 20]))
    if choice == 7:
        return float(v) + 0.5
    if choice == 8:
        return int(rng.integers(0, 64))
    if choice == 9:
        return str(v)
    if choice == 10:
        return True
    return None


def _string(rng: np.random.Generator, v: str) -> Any:
    choice = int(rng.integers(10))
    if choice < 3:
        return str(rng.choice(DTYPES))
    if choice == 3:
        return str(rng.choice(OP_NAMES))
    if choice == 4:
        return str(rng.choice(["", "n", "m", "?", "main", "fused", "relvm_fused_1",
                               "relvm_fused_0", "relvm_fused_99", "system", "float", "weights",
                               "numpy", "c", "in", "step", "{a}", "NCHW", "x86_64-linux"]))
    if choice == 5 and v:
        i = int(rng.integers(len(v)))
        return v[:i] + chr(int(rng.integers(32, 127))) + v[i + 1:]
    if choice == 6:
        return v + v[-1:] if v else "x"
    if choice == 7:
        return int(rng.integers(-1, 8))
    if choice == 8:
        return [v]
    return v[:-1]


def _value(rng: np.random.Generator, v: Any) -> Any:
    """Another value for a JSON leaf, mostly of a nearby kind."""
    if isinstance(v, bool):
        return [not v, 0, 1, None][int(rng.integers(4))]
    if isinstance(v, (int, float)):
        return _number(rng, v)
    if isinstance(v, str):
        return _string(rng, v)
    if v is None:
        return [0, {}, [], "float32", False][int(rng.integers(5))]
    if isinstance(v, list):
        return [[], None, v[:1], 7][int(rng.integers(4))]
    return [{}, [], None][int(rng.integers(3))]


def _mutate_node(f: File, rng: np.random.Generator, root: Any, path: tuple, v: Any,
                 where: str) -> None:
    """One structural or value change at ``path`` of ``root`` (a list, a dict or a leaf)."""
    if isinstance(v, list) and v and rng.integers(3):
        i, j = (int(x) for x in rng.integers(len(v), size=2))
        op = int(rng.integers(6))
        if op == 0:
            del v[i]
            f.notes.append(f"{where}: deleted item {i}")
        elif op == 1:
            v.insert(i, json.loads(json.dumps(v[j])))
            f.notes.append(f"{where}: duplicated item {j} at {i}")
        elif op == 2:
            v[i], v[j] = v[j], v[i]
            f.notes.append(f"{where}: swapped items {i} and {j}")
        elif op == 3:
            v.reverse()
            f.notes.append(f"{where}: reversed")
        elif op == 4:
            v.append(json.loads(json.dumps(v[j])))
            f.notes.append(f"{where}: appended a copy of item {j}")
        else:
            v[i] = _value(rng, v[i])
            f.notes.append(f"{where}: item {i} = {json.dumps(v[i])[:60]}")
        return
    if isinstance(v, dict) and v and rng.integers(3):
        keys = list(v)
        k = keys[int(rng.integers(len(keys)))]
        op = int(rng.integers(5))
        if op == 0:
            del v[k]
            f.notes.append(f"{where}: deleted key {k!r}")
        elif op == 1:
            alt = _value(rng, v[k])
            last = bool(rng.integers(2))
            f.dups.append((id(v), k, alt, last))
            f.notes.append(f"{where}: key {k!r} written twice, {json.dumps(alt)[:40]} "
                           f"{'after' if last else 'before'} the real value")
        elif op == 2:
            v[k + "_"] = v.pop(k)
            f.notes.append(f"{where}: renamed key {k!r}")
        elif op == 3:
            v["extra"] = _value(rng, v[k])
            f.notes.append(f"{where}: added key 'extra'")
        else:
            v[k] = _value(rng, v[k])
            f.notes.append(f"{where}.{k} = {json.dumps(v[k])[:60]}")
        return
    if not path:
        return
    parent, key = _parent(root, path)
    parent[key] = _value(rng, v)
    f.notes.append(f"{where} = {json.dumps(parent[key])[:60]}")


def _path_text(path: tuple) -> str:
    return ".".join(str(p) for p in path) or "<root>"


#: Dtypes of one element size: relabelling one as another everywhere keeps every size right.
SAME_SIZE = [("float32", "int32"), ("float64", "int64"), ("int8", "uint8"), ("uint8", "bool"),
             ("int8", "bool")]


def relabel_everywhere(f: File, rng: np.random.Generator) -> None:
    """One dtype renamed as another of its size in all of meta and code: a consistent file
    (constants keep their sizes) that only the kernels' code itself contradicts."""
    a, b = SAME_SIZE[int(rng.integers(len(SAME_SIZE)))]
    if rng.integers(2):
        a, b = b, a
    count = 0
    for path, v in _nodes(f.meta):
        if v == a and path:
            parent, key = _parent(f.meta, path)
            parent[key] = b
            count += 1
    for code in f.functions:
        for pc, ins in enumerate(code):
            if a in ins[1:]:
                code[pc] = tuple(b if x == a else x for x in ins)
                count += 1
    f.recode = True
    f.notes.append(f"{a} relabelled {b} everywhere ({count} places)")


def mutate_meta(f: File, rng: np.random.Generator) -> None:
    """A change somewhere in meta, aimed at the parts the verifier reasons about."""
    if rng.integers(12) == 0:
        relabel_everywhere(f, rng)
        return
    focus = int(rng.integers(10))
    sub: tuple = ()
    meta = f.meta
    if focus < 3 and meta.get("kernels"):
        sub = ("kernels", int(rng.integers(len(meta["kernels"]))))
        if focus < 2 and isinstance(meta["kernels"][sub[1]].get("attrs"), dict):
            sub += ("attrs",)
    elif focus < 5 and meta.get("functions"):
        sub = ("functions", int(rng.integers(len(meta["functions"]))))
    elif focus == 5 and meta.get("constants"):
        sub = ("constants",)
    elif focus == 6 and meta.get("dim_programs"):
        sub = ("dim_programs",)
    target = meta
    for k in sub:
        target = target[k]
    nodes = _nodes(target, sub)
    if rng.integers(4) == 0:  # a dtype anywhere in the chosen part becomes another
        names = [(p, v) for p, v in nodes if isinstance(v, str) and v in DTYPES]
        if names:
            path, v = names[int(rng.integers(len(names)))]
            parent, key = _parent(meta, path)
            parent[key] = str(rng.choice([d for d in DTYPES if d != v]))
            f.notes.append(f"meta.{_path_text(path)}: {v} -> {parent[key]}")
            return
    path, v = nodes[int(rng.integers(len(nodes)))]
    _mutate_node(f, rng, meta, path, v, f"meta.{_path_text(path)}")


def _operand(rng: np.random.Generator, kind: str, v: Any, limits: dict) -> Any:
    """Another value for an instruction field of ``kind``: near, in range, or just outside."""
    near = int(rng.integers(4))
    if kind == "dtype":
        return str(rng.choice(DTYPES))
    if kind in ("regs", "dims"):
        v = list(v)
        op = int(rng.integers(4))
        if op == 0 and v:
            del v[int(rng.integers(len(v)))]
        elif op == 1:
            v.insert(int(rng.integers(len(v) + 1)), _operand(rng, kind[:-1], 0, limits))
        elif v:
            i = int(rng.integers(len(v)))
            v[i] = _operand(rng, kind[:-1], v[i], limits)
        return tuple(v)
    limit = limits.get(kind, 8)
    if near == 0:
        return v + int(rng.choice([-1, 1]))
    if near == 1:
        return int(rng.integers(-1, max(limit, 1) + 1))
    if kind == "dim":
        return int(rng.choice([-1, -2, -3, 0, 1, 2, 7, 512, 1 << 20, 1 << 40]))
    return int(rng.choice([0, -1, limit, limit - 1, 2**31, 2**62]))


def _random_instruction(rng: np.random.Generator, limits: dict) -> tuple:
    spec = TABLE[int(rng.integers(len(TABLE)))]
    fields = []
    for fd in spec.fields:
        if fd.kind in ("regs", "dims"):
            fields.append(tuple(_operand(rng, fd.kind[:-1], 0, limits)
                                for _ in range(int(rng.integers(0, 4)))))
        elif fd.kind == "dtype":
            fields.append(str(rng.choice(DTYPES)))
        elif fd.kind in ("reg", "func", "kernel", "const", "prog"):
            fields.append(int(rng.integers(0, max(limits[fd.kind], 1))))
        else:
            fields.append(int(rng.integers(1, 4)))
    return (spec.number, *fields)


def mutate_code(f: File, rng: np.random.Generator) -> None:
    """A change to one function's instructions, or to a raw code word."""
    fi = int(rng.integers(len(f.functions)))
    code = f.functions[fi]
    fmeta = f.meta["functions"][fi]
    limits = {"reg": fmeta.get("num_regs", 8), "func": len(f.functions),
              "kernel": len(f.meta.get("kernels") or ()), "const": len(f.meta.get("constants")
                                                                        or ()),
              "prog": len(f.meta.get("dim_programs") or ()), "offset": len(code)}
    where = f"code @{fmeta.get('name')}"
    op = int(rng.integers(12))
    f.recode = f.recode or op < 10
    pc = int(rng.integers(len(code)))
    if op < 6:  # one operand of one instruction
        ins = code[pc]
        spec = BY_NUMBER[ins[0]]
        if not spec.fields:
            return
        i = int(rng.integers(len(spec.fields)))
        fd = spec.fields[i]
        new = _operand(rng, fd.kind, ins[1 + i], limits)
        code[pc] = ins[:1 + i] + (new,) + ins[2 + i:]
        f.notes.append(f"{where} pc {pc} {spec.name}.{fd.name}: {ins[1 + i]} -> {new}")
    elif op == 6:
        code[pc] = _random_instruction(rng, limits)
        f.notes.append(f"{where} pc {pc} replaced by {code[pc]}")
    elif op == 7:
        other = int(rng.integers(len(code)))
        code[pc], code[other] = code[other], code[pc]
        f.notes.append(f"{where}: pcs {pc} and {other} swapped")
    elif op == 8 and len(code) > 1:
        del code[pc]
        f.notes.append(f"{where}: pc {pc} deleted")
    elif op == 9:
        code.insert(pc, code[int(rng.integers(len(code)))])
        f.notes.append(f"{where}: an instruction duplicated at pc {pc}")
    elif op == 10:  # an opcode number, the operands read as another instruction's
        words = f.code_words()
        at = int(rng.integers(len(words)))
        value = int(rng.integers(0, len(TABLE) + 1))
        f.raw_words.append((at, value))
        f.notes.append(f"code word {at}: {words[at]} -> {value}")
    else:  # any raw word
        words = f.code_words()
        at = int(rng.integers(len(words)))
        value = _number(rng, words[at])
        value = value if type(value) is int else -1
        f.raw_words.append((at, value))
        f.notes.append(f"code word {at}: {words[at]} -> {value}")


def _constant_span(entries: Any, data: bytearray, rng: np.random.Generator,
                   mine: Callable[[dict], bool]) -> tuple[int, int, str] | None:
    spans = []
    for k, e in enumerate(entries or ()):
        if isinstance(e, dict) and mine(e) and e.get("nbytes"):
            spans.append((int(e["offset"]), int(e["nbytes"]), str(e.get("dtype"))))
    return spans[int(rng.integers(len(spans)))] if spans else None


SPECIAL = {"float32": [np.nan, np.inf, -np.inf, 3.4e38, -0.0], "float64": [np.nan, 1e308],
           "int64": [-1, 2**62, -2**63, 1 << 20], "int32": [-1, 2**31 - 1, -2**31, 1 << 20],
           "int8": [-128, 127], "uint8": [255]}


def mutate_bytes(f: File, rng: np.random.Generator) -> None:
    """Constant bytes (in ``consts`` or the weights file's ``data``), their CRC-32s redone."""
    in_weights = f.data is not None and rng.integers(2)
    entries = f.index if in_weights else f.meta.get("constants")
    data = f.writable("data" if in_weights else "consts")
    span = _constant_span(entries, data, rng,
                          (lambda e: True) if in_weights else (lambda e: e.get("file") == "main"))
    if span is None:
        return  # no constant bytes here
    offset, nbytes, dt = span
    where = "weights data" if in_weights else "consts"
    if rng.integers(2) and dt in SPECIAL:
        item = dtypes.to_numpy(dt).itemsize
        at = offset + int(rng.integers(nbytes // item)) * item
        value = np.array(rng.choice(SPECIAL[dt]), dt)
        data[at:at + item] = value.tobytes()
        f.notes.append(f"{where} {dt} at byte {at} = {value}")
    else:
        for _ in range(int(rng.integers(1, 5))):
            at = offset + int(rng.integers(nbytes))
            data[at] ^= int(rng.integers(1, 256))
        f.notes.append(f"{where}: bytes flipped in the constant at {offset}")


def mutate_weights_index(f: File, rng: np.random.Generator) -> None:
    nodes = _nodes(f.index)
    path, v = nodes[int(rng.integers(len(nodes)))]
    _mutate_node(f, rng, f.index, path, v, f"weights index.{_path_text(path)}")


_TEMPLATES: dict[int, Template] = {}


def mutant(base: Base, seed: int) -> tuple[bytes, bytes | None, str]:
    """Mutant ``seed`` of ``base``: the main file, the weights file, what was done."""
    rng = np.random.default_rng(seed)
    t = _TEMPLATES.get(id(base))
    if t is None:
        t = _TEMPLATES[id(base)] = Template(base)
    f = File(t)
    changes = int(rng.choice([1, 1, 1, 1, 1, 1, 1, 2, 2, 3]))
    for _ in range(4 * changes):  # an operation may find nothing to change: try another
        if len(f.notes) >= changes:
            break
        r = rng.random()
        op = mutate_meta if r < 0.5 else mutate_code if r < 0.82 else \
            mutate_weights_index if f.index is not None and r < 0.9 else mutate_bytes
        try:
            op(f, rng)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
            f.notes.append(f"({op.__name__} found nothing to change: {type(e).__name__})")
    try:
        main, weights = f.bytes()
    except (DecodeError, KeyError, ValueError, TypeError, OverflowError) as e:
        # A mutation the attacker's own tools cannot write (an unknown dtype in code, ...).
        f.notes.append(f"(unwritable: {type(e).__name__}; the base instead)")
        main, weights = base.data, base.weights
    return main, weights, "; ".join(f.notes) or "(no change)"
