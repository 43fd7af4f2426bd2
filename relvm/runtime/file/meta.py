"""The ``meta`` section of an executable file: an Executable's metadata as JSON, and back.

Everything except the bytecode words and the constant bytes is here: functions and their
signatures (symbolic dims as text, e.g. ``"n"``), kernels, dim programs (nested lists), upper
bounds, the backend, the constants index and what the kernel library was compiled for.
Reading checks every value's JSON type and range, so a bad file is a RelvmFormatError naming
``meta`` and the path of the value, never a KeyError or TypeError from deep inside the VM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ... import dtypes
from ...errors import RelvmFormatError
from ..executable import Executable, KernelEntry, OutputSig, ParamSig, TensorSig, VMFunction

#: Top-level keys of the meta JSON, each with its meaning. The writer writes exactly these (a
#: test checks it) and docs/format.md lists them.
META_KEYS: dict[str, str] = {
    "writer": "the relvm version that wrote the file (informational)",
    "backend": "the kernel backend the kernels were built for, e.g. `numpy`",
    "functions": "per VM function: `name`, `params` (name, type text, tuple flag, tensors as "
                 "dtype and shape, dims as ints or symbol text), `num_regs`, `num_dims`, "
                 "`dim_names`, `prologue`, `ret_type`, `outputs` (dtype, shape as dim operands "
                 "or null, `alloc_pcs`, type text), `code`: `word_offset`, `word_count`, "
                 "`instructions` locating its bytecode in `code`, and optionally `io_names`: "
                 "`inputs` (one name per parameter) and `outputs` (one per flattened output), "
                 "the names the model gave them (ONNX's `input.1` for the parameter `input_1`; "
                 "files written before it existed lack it and load, their names the IR's); a "
                 "parameter or an output that is a list of tensors (`List[...]`) has `list`: true "
                 "(optional: absent means false); a list parameter's one tensor is its element "
                 "type (dims a number or `?`; shape null: any rank)",
    "kernels": "the kernel table: `name`, `op`, `attrs` (float attributes may be `NaN` or "
               "`Infinity`, as Python's json writes them), `inputs` and `outputs` dtypes, "
               "`groups`, and `ranks`: `[input ranks, output ranks]` of the flattened "
               "arguments (optional: files of relvm 0.1.0 lack it). A `fused` entry's attrs "
               "are `steps` (each `op`, `attrs`, `args` as `[\"in\", i]` or `[\"step\", j]`) "
               "and, with generated code, `plan`: `symbol` (`relvm_fused_<digits>`), "
               "`col_dims`, `operands` as `[input (-1: the anchor), dtype, trailing_ones, "
               "contiguous]`",
    "dim_programs": "dim programs as nested lists of strings and integers (see "
                    "relvm/runtime/bytecode/dimprog.py); compiled to closures at load, never evaluated",
    "upper_bounds": "largest value of named dims, e.g. `{\"n\": 64}`",
    "constants": "the constants index: per constant `dtype`, `shape`, `nbytes`, `crc32`, and "
                 "where its bytes are: `file` `main` (`offset` into `consts`) or `weights` "
                 "(`index` into the weights file's index)",
    "kernel_library": "null, or `{\"arch\": \"x86_64-linux\"}`: the machine the library in "
                      "`kernels` was compiled for",
    "weights": "null, or `{\"path\", \"content_id\"}`: the weights file's name (a plain file "
               "name, in this file's directory) and the first 16 bytes of the SHA-256 of its "
               "index, in hex",
    "externals": "the regions compiled by external backends: per artifact `symbol` (the "
                 "`external` kernel entries' `attrs.symbol`), `compiler` (the backend's name), "
                 "`offset` and `size` of its bytes in `extern` (optional: absent means none; "
                 "files before format version 4 lack it). An `external` kernel entry's attrs "
                 "are `compiler`, `symbol` and `region`: `name`, `inputs` (dtype, shape), "
                 "`constant`, `steps` (as a fused entry's, each with its `type`) and `outputs` "
                 "(references)",
}
#: Keys a file may lack (older relvm did not write them).
OPTIONAL_META_KEYS = ("externals",)

#: Registers or dims slots per frame: far above any real program, low enough that a bad file
#: cannot make a frame allocate gigabytes.
MAX_REGS = 1 << 20
#: The largest tensor rank relvm handles (the C kernels' NEST_MAX_DIMS).
MAX_RANK = 64
INT64 = (-2**63, 2**63 - 1)


@dataclass
class CodeRange:
    """Where one function's bytecode lies in the ``code`` section, in int64 words."""

    word_offset: int
    word_count: int
    instructions: int


@dataclass
class ConstantEntry:
    """One constant of the index: its type and where its checked bytes are."""

    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    crc32: int
    file: str  # "main" or "weights"
    offset: int  # byte offset into `consts` (file "main"); -1 for weights
    index: int  # position in the weights file's index (file "weights"); -1 for main


# --- writing -------------------------------------------------------------------------------------

def to_meta(exe: Executable, code: list[CodeRange], constants: list[dict], writer: str,
            kernel_arch: str | None, weights: dict | None) -> dict:
    """The meta JSON object of ``exe`` (instructions and constant bytes go elsewhere)."""
    externals, at = [], 0
    for symbol, artifact in exe.externals.items():
        externals.append({"symbol": symbol, "compiler": artifact.compiler, "offset": at,
                          "size": len(artifact.data)})
        at += len(artifact.data)
    return {
        "writer": writer,
        "backend": exe.backend,
        "functions": [_function_meta(fn, c) for fn, c in zip(exe.functions, code)],
        "kernels": [{"name": k.name, "op": k.op, "attrs": k.attrs, "inputs": list(k.inputs),
                     "outputs": list(k.outputs), "groups": list(k.groups),
                     "ranks": [list(k.input_ranks), list(k.output_ranks)]}
                    for k in exe.kernels],
        "dim_programs": [_lists(p) for p in exe.dim_programs],
        "upper_bounds": dict(exe.upper_bounds),
        "constants": constants,
        "kernel_library": None if kernel_arch is None else {"arch": kernel_arch},
        "weights": weights,
        "externals": externals,
    }


def _function_meta(fn: VMFunction, code: CodeRange) -> dict:
    return {
        "name": fn.name,
        "params": [{"name": p.name, "type": p.type_text, "tuple": p.is_tuple,
                    **({"list": True} if p.is_list else {}),
                    "tensors": [{"dtype": t.dtype,
                                 "shape": None if t.shape is None else list(t.shape)}
                                for t in p.tensors]}
                   for p in fn.params],
        "num_regs": fn.num_regs, "num_dims": fn.num_dims, "dim_names": list(fn.dim_names),
        "prologue": fn.prologue, "ret_type": fn.ret_type,
        "outputs": [{"dtype": o.dtype, "shape": None if o.shape is None else list(o.shape),
                     "alloc_pcs": list(o.alloc_pcs), "type": o.type_text,
                     **({"list": True} if o.is_list else {})} for o in fn.outputs],
        "code": {"word_offset": code.word_offset, "word_count": code.word_count,
                 "instructions": code.instructions},
        **({"io_names": {"inputs": list(fn.input_names), "outputs": list(fn.output_names)}}
           if fn.input_names or fn.output_names else {}),
    }


def _lists(v: Any) -> Any:
    return [_lists(x) for x in v] if isinstance(v, (tuple, list)) else v


def tuples(v: Any) -> Any:
    """JSON lists back to the nested tuples of a dim program."""
    return tuple(tuples(x) for x in v) if isinstance(v, list) else v


# --- reading: typed access with errors naming the path -------------------------------------------

def _fail(path: str, message: str) -> RelvmFormatError:
    return RelvmFormatError(f"{path}: {message}", section="meta")


def _kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(type(v), "?")


def obj(v: Any, path: str, keys: tuple[str, ...]) -> dict:
    if type(v) is not dict:
        raise _fail(path, f"expected an object, got {_kind(v)}")
    missing = [k for k in keys if k not in v]
    if missing:
        raise _fail(path, f"missing {', '.join(repr(k) for k in missing)}")
    return v


def lst(v: Any, path: str) -> list:
    if type(v) is not list:
        raise _fail(path, f"expected a list, got {_kind(v)}")
    return v


def text(v: Any, path: str) -> str:
    if type(v) is not str:
        raise _fail(path, f"expected a string, got {_kind(v)}")
    return v


def integer(v: Any, path: str, low: int = INT64[0], high: int = INT64[1]) -> int:
    if type(v) is not int:
        raise _fail(path, f"expected an integer, got {_kind(v)}")
    if not low <= v <= high:
        raise _fail(path, f"{v} is outside {low}..{high}")
    return v


def boolean(v: Any, path: str) -> bool:
    if type(v) is not bool:
        raise _fail(path, f"expected true or false, got {_kind(v)}")
    return v


def dtype(v: Any, path: str) -> str:
    if not dtypes.is_dtype(v):
        raise _fail(path, f"unknown dtype {v!r}; relvm has {', '.join(dtypes.DTYPES)}")
    return v


def each(v: Any, path: str, read: Callable[[Any, str], Any]) -> tuple:
    return tuple(read(x, f"{path}[{i}]") for i, x in enumerate(lst(v, path)))


def _static_dim(v: Any, path: str) -> int | str:
    if type(v) is str:
        return v
    return integer(v, path, 0)


# --- reading -------------------------------------------------------------------------------------

@dataclass
class Meta:
    """The meta section, checked: everything but the instructions and constant bytes."""

    backend: str
    functions: list[VMFunction]  # with empty instruction lists
    code: list[CodeRange]
    kernels: list[KernelEntry]
    dim_programs: list  # as JSON lists; verify.check_program, then tuples()
    upper_bounds: dict[str, int]
    constants: list[ConstantEntry]
    kernel_arch: str | None
    weights: dict | None  # {"path": str, "content_id": str}
    externals: list[tuple[str, str, int, int]]  # symbol, compiler, offset, size


def from_meta(m: Any) -> Meta:
    """Check the meta JSON object and build the Executable's pieces from it."""
    m = obj(m, "meta", tuple(k for k in META_KEYS if k not in OPTIONAL_META_KEYS))
    text(m["writer"], "writer")
    functions, code = [], []
    for i, f in enumerate(lst(m["functions"], "functions")):
        fn, c = _function(f, f"functions[{i}]")
        functions.append(fn)
        code.append(c)
    names = [f.name for f in functions]
    if len(set(names)) != len(names):
        raise _fail("functions", "two functions have the same name")
    bounds = obj(m["upper_bounds"], "upper_bounds", ())
    for k, v in bounds.items():
        integer(v, f"upper_bounds[{k!r}]", 0)
    lib = m["kernel_library"]
    arch = None if lib is None else text(obj(lib, "kernel_library", ("arch",))["arch"],
                                         "kernel_library.arch")
    weights = m["weights"]
    if weights is not None:
        obj(weights, "weights", ("path", "content_id"))
        text(weights["path"], "weights.path")
        cid = text(weights["content_id"], "weights.content_id")
        if len(cid) != 32 or any(ch not in "0123456789abcdef" for ch in cid):
            raise _fail("weights.content_id", f"expected 32 hex digits, got {cid!r}")
    return Meta(backend=text(m["backend"], "backend"), functions=functions, code=code,
                kernels=list(each(m["kernels"], "kernels", _kernel)),
                dim_programs=lst(m["dim_programs"], "dim_programs"), upper_bounds=dict(bounds),
                constants=list(each(m["constants"], "constants", constant_entry)),
                kernel_arch=arch, weights=weights,
                externals=list(each(m.get("externals", []), "externals", _external)))


def _external(e: Any, path: str) -> tuple[str, str, int, int]:
    e = obj(e, path, ("symbol", "compiler", "offset", "size"))
    return (text(e["symbol"], f"{path}.symbol"), text(e["compiler"], f"{path}.compiler"),
            integer(e["offset"], f"{path}.offset", 0), integer(e["size"], f"{path}.size", 0))


def _function(f: Any, path: str) -> tuple[VMFunction, CodeRange]:
    f = obj(f, path, ("name", "params", "num_regs", "num_dims", "dim_names", "prologue",
                      "ret_type", "outputs", "code"))
    num_regs = integer(f["num_regs"], f"{path}.num_regs", 0, MAX_REGS)
    num_dims = integer(f["num_dims"], f"{path}.num_dims", 0, MAX_REGS)
    c = obj(f["code"], f"{path}.code", ("word_offset", "word_count", "instructions"))
    code = CodeRange(*(integer(c[k], f"{path}.code.{k}", 0)
                       for k in ("word_offset", "word_count", "instructions")))
    fn = VMFunction(
        name=text(f["name"], f"{path}.name"),
        params=each(f["params"], f"{path}.params", _param),
        num_regs=num_regs, instructions=[], num_dims=num_dims,
        dim_names=each(f["dim_names"], f"{path}.dim_names", text),
        outputs=each(f["outputs"], f"{path}.outputs", _output),
        ret_type=text(f["ret_type"], f"{path}.ret_type"),
        prologue=integer(f["prologue"], f"{path}.prologue", 0))
    if "io_names" in f:  # optional: files written before it existed lack it
        fn.input_names, fn.output_names = _io_names(f["io_names"], f"{path}.io_names",
                                                    len(fn.params), len(fn.outputs))
    return fn, code


def _io_names(v: Any, path: str, params: int, outputs: int) -> tuple[tuple, tuple]:
    v = obj(v, path, ("inputs", "outputs"))
    inputs = each(v["inputs"], f"{path}.inputs", text)
    outs = each(v["outputs"], f"{path}.outputs", text)
    if len(inputs) not in (0, params):
        raise _fail(f"{path}.inputs", f"{len(inputs)} names for {params} parameters")
    if len(outs) not in (0, outputs):
        raise _fail(f"{path}.outputs", f"{len(outs)} names for {outputs} outputs")
    return inputs, outs


def _param(p: Any, path: str) -> ParamSig:
    p = obj(p, path, ("name", "type", "tuple", "tensors"))
    sig = ParamSig(text(p["name"], f"{path}.name"), text(p["type"], f"{path}.type"),
                   each(p["tensors"], f"{path}.tensors", _tensor),
                   boolean(p["tuple"], f"{path}.tuple"),
                   boolean(p.get("list", False), f"{path}.list"))  # optional: older files
    if sig.is_list:
        _check_list(sig.type_text, path)
        if sig.is_tuple or len(sig.tensors) != 1:
            raise _fail(path, f"a list parameter ({sig.type_text}) has one element type and is "
                              f"no tuple; found {len(sig.tensors)} tensors"
                              + (" and a tuple" if sig.is_tuple else ""))
    elif any(t.shape is None for t in sig.tensors):
        raise _fail(f"{path}.tensors", "only a list's element may have no shape (any rank)")
    return sig


def _check_list(type_text: str, path: str) -> None:
    """A list's type text is ``List[<its element type>]``."""
    if not (type_text.startswith("List[") and type_text.endswith("]")):
        raise _fail(f"{path}.type", f"a list's type must be List[...], got {type_text!r}")


def _tensor(t: Any, path: str) -> TensorSig:
    t = obj(t, path, ("dtype", "shape"))
    return TensorSig(dtype(t["dtype"], f"{path}.dtype"),
                     None if t["shape"] is None else each(t["shape"], f"{path}.shape",
                                                          _static_dim))


def _output(o: Any, path: str) -> OutputSig:
    o = obj(o, path, ("dtype", "shape", "alloc_pcs", "type"))
    shape = None if o["shape"] is None else each(o["shape"], f"{path}.shape", integer)
    sig = OutputSig(dtype(o["dtype"], f"{path}.dtype"), shape,
                    each(o["alloc_pcs"], f"{path}.alloc_pcs", integer),
                    text(o["type"], f"{path}.type"),
                    boolean(o.get("list", False), f"{path}.list"))  # optional: older files
    if sig.is_list:
        _check_list(sig.type_text, path)
        if sig.shape is not None or sig.alloc_pcs:
            raise _fail(path, "a list result has no shape and no allocations")
    return sig


def _kernel(k: Any, path: str) -> KernelEntry:
    k = obj(k, path, ("name", "op", "attrs", "inputs", "outputs", "groups"))
    inputs = each(k["inputs"], f"{path}.inputs", dtype)
    groups = each(k["groups"], f"{path}.groups", lambda v, p: integer(v, p, -1, 1 << 20))
    if groups and sum(1 if g < 0 else g for g in groups) != len(inputs):
        raise _fail(f"{path}.groups", f"{list(groups)} does not cover {len(inputs)} inputs")
    outputs = each(k["outputs"], f"{path}.outputs", dtype)
    in_ranks = out_ranks = ()
    if "ranks" in k:
        ranks = lst(k["ranks"], f"{path}.ranks")
        if len(ranks) != 2:
            raise _fail(f"{path}.ranks", "expected [input ranks, output ranks]")
        rank = lambda v, p: integer(v, p, 0, MAX_RANK)  # noqa: E731
        in_ranks = each(ranks[0], f"{path}.ranks[0]", rank)
        out_ranks = each(ranks[1], f"{path}.ranks[1]", rank)
        if len(in_ranks) != len(inputs) or len(out_ranks) != len(outputs):
            raise _fail(f"{path}.ranks", f"{len(in_ranks)} input and {len(out_ranks)} output "
                        f"ranks for {len(inputs)} inputs and {len(outputs)} outputs")
    return KernelEntry(text(k["name"], f"{path}.name"), text(k["op"], f"{path}.op"),
                       obj(k["attrs"], f"{path}.attrs", ()), inputs, outputs, groups,
                       in_ranks, out_ranks)


def constant_entry(c: Any, path: str) -> ConstantEntry:
    c = obj(c, path, ("dtype", "shape", "nbytes", "crc32", "file"))
    where = text(c["file"], f"{path}.file")
    if where not in ("main", "weights"):
        raise _fail(f"{path}.file", f"expected 'main' or 'weights', got {where!r}")
    key = "offset" if where == "main" else "index"
    obj(c, path, (key,))
    dt = dtype(c["dtype"], f"{path}.dtype")
    shape = each(c["shape"], f"{path}.shape", lambda v, p: integer(v, p, 0, 2**62))
    nbytes = integer(c["nbytes"], f"{path}.nbytes", 0, 2**62)
    size = dtypes.to_numpy(dt).itemsize
    for d in shape:
        size *= d
    if size != nbytes:
        raise _fail(path, f"{nbytes} bytes cannot hold {dt}{list(shape)} ({size} bytes)")
    place = integer(c[key], f"{path}.{key}", 0, 2**62)
    return ConstantEntry(dt, shape, nbytes, integer(c["crc32"], f"{path}.crc32", 0, 2**32 - 1),
                         where, place if where == "main" else -1,
                         place if where == "weights" else -1)
