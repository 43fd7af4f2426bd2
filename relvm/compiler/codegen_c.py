"""C code generation for fused kernels, compiled when the model is built.

A fused kernel (``relvm/ops/fused.py``) is a chain of elementwise/broadcast steps, possibly after
an *anchor* (dense, matmul, conv2d) that the kernel library computes first. Its generated C is
one loop nest over the output, two levels deep:

* ``cols`` -- the longest run of trailing output dims along which every operand is either
  contiguous (it has those dims) or constant (it broadcasts over them): the inner loop, which
  the C compiler vectorizes;
* ``rows`` -- the other dims, where each operand has its own element strides (0 where it
  broadcasts), so any NumPy broadcasting works.

Which operands are contiguous along ``cols`` is decided here, from the symbolic shapes; the
sizes and strides arrive at run time in a ``relvm_fused_ctx`` (see ``FUSED_CDEF``). Each kernel
is ``void relvm_fused_<k>(void *ctx, int64_t row_begin, int64_t row_end)``, the signature of the
thread pool's parallel loop.

Sources are compiled with the system C compiler (warnings as errors, ``target_clones`` for
AVX-512/AVX2 with a portable fallback) into one shared library, cached on disk by a hash of
(source, flags, compiler version); the library's bytes are carried by the Executable.
``RELVM_SANITIZE=address`` adds AddressSanitizer and UBSan, as it does for the kernel library
(``kernels/build.py``); the flags are part of the cache key, so the two builds never mix. It is
for testing (``tests/kernels/run_sanitized.sh``): such a library loads only where the ASan
runtime is preloaded, so do not save executables built with it.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import RelvmCompileError
from ..ir import dims as D
from ..backends.fused import FUSED_CDEF, MAX_OPERANDS, MAX_ROW_DIMS, signature
from ..ir.types import TensorType
from ..ops.elementwise import clip_bounds

CTYPES = {"float32": "float", "float64": "double", "float16": "_Float16", "int64": "int64_t",
          "int32": "int32_t", "int8": "int8_t", "uint8": "uint8_t", "bool": "uint8_t"}
#: Type in which a dtype's values are computed (float16 computes in float).
COMPUTE = {"float16": "float"}
CFLAGS = ["-O3", "-std=gnu11", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror",
          "-Wno-unused-parameter", "-Wno-unused-variable", "-fno-strict-aliasing",
          "-fno-math-errno"]
INT_RANGES = {"int64": ("-9223372036854775808.0", "9223372036854775808.0"),
              "int32": ("-2147483648.0", "2147483648.0"), "int8": ("-128.0", "128.0"),
              "uint8": ("0.0", "256.0")}
#: Where C's signed overflow is undefined, add/subtract/multiply/negate compute in the unsigned
#: type of the same width, which wraps as the references do (kernels/binary.c does the same).
#: Narrower integers are promoted to int, where these operations cannot overflow.
UNSIGNED = {"int64": "uint64_t", "int32": "uint32_t"}
#: Added by RELVM_SANITIZE=address; kept equal to SANITIZE_FLAGS in kernels/build.py.
SANITIZE_FLAGS = ["-fsanitize=address,undefined,float-cast-overflow", "-fno-omit-frame-pointer",
                  "-g", "-O1"]


@dataclass(frozen=True)
class Operand:
    """An operand of the generated loop: a kernel input seen with ``trailing_ones`` extra dims."""

    input: int        # which kernel input (-1: the anchor's result)
    dtype: str
    trailing_ones: int  # bias_add views its bias with this many trailing 1-dims
    contiguous: bool    # contiguous along cols (else constant along cols)


@dataclass
class FusedPlan:
    """How one fused kernel's loop is laid out; the loader reads it from the kernel entry."""

    symbol: str
    operands: list[Operand]
    col_dims: int       # how many trailing output dims form ``cols``
    source: str

    def to_json(self) -> dict:
        return {"symbol": self.symbol, "col_dims": self.col_dims,
                "operands": [[o.input, o.dtype, o.trailing_ones, o.contiguous]
                             for o in self.operands]}


def _ctype(dtype: str) -> str:
    return COMPUTE.get(dtype, CTYPES[dtype])


def _float_suffix(dtype: str) -> str:
    return "" if dtype == "float64" else "f"


# --- elementwise expressions, one per op, matching the NumPy references ----------------------------

def _unary(op: str, attrs: dict, x: str, dtype: str, out_dtype: str) -> str:
    f = _float_suffix(dtype)
    is_float = dtype.startswith("float")
    if op == "nn.relu":
        return f"({x} < 0 ? 0 : {x})"
    negated = (f"(({CTYPES[dtype]})(0 - ({UNSIGNED[dtype]}){x}))" if dtype in UNSIGNED
               else f"(-{x})")
    if op == "negative":
        return negated
    if op == "abs":
        return f"fabs{f}({x})" if is_float else f"({x} < 0 ? {negated} : {x})"
    if op == "sign":
        return f"({x} != {x} ? {x} : ({x} > 0) - ({x} < 0))"
    if op == "logical_not":
        return f"(!{x})"
    simple = {"sigmoid": f"(1 / (1 + exp{f}(-{x})))", "tanh": f"tanh{f}({x})",
              "exp": f"exp{f}({x})", "log": f"log{f}({x})", "sqrt": f"sqrt{f}({x})",
              "rsqrt": f"(1 / sqrt{f}({x}))", "erf": f"erf{f}({x})", "floor": f"floor{f}({x})",
              "ceil": f"ceil{f}({x})", "round": f"rint{f}({x})"}
    if op in simple:
        return simple[op]
    if op == "nn.leaky_relu":
        return f"({x} > 0 ? {x} : {x} * {_c_float(attrs['alpha'], dtype)})"
    if op == "clip":
        return _clip(x, attrs["a_min"], attrs["a_max"], dtype)
    if op == "cast":
        return _cast(x, dtype, out_dtype)
    raise KeyError(op)


def _c_float(value: float, dtype: str) -> str:
    """A C constant of ``dtype``'s compute type equal to ``value`` rounded to ``dtype``.

    Infinities and NaN are math.h's macros: Python's repr ('inf', 'nan') is no C.
    """
    rounded = _rounded(value, dtype)
    if math.isnan(rounded):
        return f"(({_ctype(dtype)})NAN)"
    if math.isinf(rounded):
        return f"(({_ctype(dtype)}){'-' if rounded < 0 else ''}INFINITY)"
    return f"(({_ctype(dtype)}){rounded!r})"


def _rounded(value: float, dtype: str) -> float:
    with np.errstate(over="ignore"):
        return float(np.dtype(dtype).type(value))


def _c_int(value: int, dtype: str) -> str:
    """A C constant of an integer dtype; int64's minimum has no literal of its own."""
    if value == np.iinfo(np.int64).min:
        return "(-9223372036854775807LL - 1)"
    return f"(({CTYPES[dtype]}){value}{'LL' if dtype == 'int64' else ''})"


def _clip(x: str, a_min: float, a_max: float, dtype: str) -> str:
    """min(max(x, lo), hi) with the reference's bounds (``clip_bounds``): hi where lo > hi, and
    NaN wherever x or a bound is NaN. A comparison a bound makes constant is left out (C
    compilers reject an always-true test under -Werror=type-limits; an infinite bound needs none).
    """
    lo, hi = (v.item() for v in clip_bounds(a_min, a_max, dtype))
    if dtype.startswith("float"):
        if math.isnan(lo) or math.isnan(hi):
            return _c_float(math.nan, dtype)
        c_lo, c_hi = _c_float(lo, dtype), _c_float(hi, dtype)
        # NaN fails both tests and passes through.
        m = x if lo == -math.inf else f"({x} < {c_lo} ? {c_lo} : {x})"
        return m if hi == math.inf else f"({m} > {c_hi} ? {c_hi} : {m})"
    info = np.iinfo(dtype)
    if lo > hi:
        return _c_int(hi, dtype)
    m = x if lo == info.min else f"({x} < {_c_int(lo, dtype)} ? {_c_int(lo, dtype)} : {x})"
    return m if hi == info.max else f"({m} > {_c_int(hi, dtype)} ? {_c_int(hi, dtype)} : {m})"


#: The fill ops: a step whose value does not depend on its position. Their shape is the
#: group's (fusion only joins steps of the output's shape), so each is one C constant or the
#: fill value cast as ``cast`` casts it. ``zeros`` and ``ones`` have no inputs at all.
FILLS = ("zeros", "ones", "full", "zeros_like", "ones_like", "full_like")


def _fill(op: str, args: list[str], arg_types: list[str], out_dtype: str) -> str:
    if op in ("zeros", "zeros_like"):
        return "0"
    if op in ("ones", "ones_like"):
        return "1"
    fill = 0 if op == "full" else 1  # full(fill_value); full_like(data, fill_value)
    return _cast(args[fill], arg_types[fill], out_dtype)


def _cast(x: str, src: str, dst: str) -> str:
    if dst == "bool":
        return f"({x} != 0)"
    if src.startswith("float") and dst in INT_RANGES:
        lo, hi = INT_RANGES[dst]
        # Float to int truncates; NaN and out-of-range values give 0, as the reference does.
        return f"(({x} == {x} && {x} >= {lo} && {x} < {hi}) ? ({CTYPES[dst]}){x} : 0)"
    return f"(({_ctype(dst)}){x})"


def _binary(op: str, a: str, b: str, dtype: str) -> str:
    is_float = dtype.startswith("float")
    wrapping = {"add": "+", "nn.bias_add": "+", "subtract": "-", "multiply": "*"}
    if op in wrapping and dtype in UNSIGNED:
        u = UNSIGNED[dtype]
        return f"(({CTYPES[dtype]})(({u}){a} {wrapping[op]} ({u}){b}))"
    if op in ("add", "nn.bias_add"):
        return f"({a} + {b})"
    if op == "subtract":
        return f"({a} - {b})"
    if op == "multiply":
        return f"({a} * {b})"
    if op == "divide":
        if is_float:
            return f"({a} / {b})"
        if dtype == "int64":
            # Truncated division; x/0 gives 0 and MIN/-1 wraps, as the reference does.
            return (f"({b} == 0 ? 0 : {b} == -1 ? (int64_t)(0 - (uint64_t){a}) : {a} / {b})")
        return f"({b} == 0 ? 0 : ({CTYPES[dtype]})((int64_t){a} / {b}))"
    if op == "power":
        return f"pow{_float_suffix(dtype)}({a}, {b})"
    if op in ("maximum", "minimum"):
        cmp = ">" if op == "maximum" else "<"
        if is_float:
            return f"(({a} != {a} || {b} != {b}) ? {a} + {b} : ({a} {cmp} {b} ? {a} : {b}))"
        return f"({a} {cmp} {b} ? {a} : {b})"
    compare = {"equal": "==", "not_equal": "!=", "less": "<", "less_equal": "<=",
               "greater": ">", "greater_equal": ">="}
    if op in compare:
        return f"({a} {compare[op]} {b})"
    if op == "logical_and":
        return f"({a} && {b})"
    if op == "logical_or":
        return f"({a} || {b})"
    raise KeyError(op)


# --- planning the loop ------------------------------------------------------------------------------

def _view(t: TensorType, rank: int, trailing_ones: int) -> tuple:
    shape = tuple(t.shape) + (1,) * trailing_ones
    return (1,) * (rank - len(shape)) + shape


def _col_dims(out: TensorType, views: list[tuple]) -> tuple[int, list[bool]]:
    """The longest suffix of output dims where each operand is wholly contiguous or constant."""
    best, best_modes = 0, [False] * len(views)
    for k in range(1, out.ndim + 1):
        modes = []
        for v in views:
            tail_out, tail_in = out.shape[out.ndim - k:], v[len(v) - k:]
            if all(D.prove_equal(i, o) for i, o in zip(tail_in, tail_out)):
                modes.append(True)
            elif all(i == 1 for i in tail_in):
                modes.append(False)
            else:
                return best, best_modes
        best, best_modes = k, modes
    return best, best_modes


def plan_fused(symbol: str, steps: list[dict], in_types: list[TensorType], out_type: TensorType,
               anchor_type: TensorType | None) -> FusedPlan:
    """Generate the C of a fused kernel named ``symbol``; ``steps`` as in
    ``FusedOp.steps_json()``.

    With an anchor, step 0 is computed by the library; the loop starts from its output.
    Raises KeyError for an op this generator does not know.
    """
    first = 1 if anchor_type is not None else 0
    operands: list[Operand] = []
    keys: dict[tuple, int] = {}
    views: list[tuple] = []

    def operand(input_index: int, t: TensorType, ones: int) -> int:
        key = (input_index, ones)
        if key not in keys:
            keys[key] = len(operands)
            operands.append(Operand(input_index, t.dtype, ones, False))
            views.append(_view(t, out_type.ndim, ones))
        return keys[key]

    exprs: list[str] = []   # C expression (a local name) per step
    lines: list[str] = []
    step_types: list[str] = []
    if anchor_type is not None:
        step_types.append(anchor_type.dtype)
        exprs.append(f"v{operand(-1, anchor_type, 0)}")
    for j, s in enumerate(steps[first:], start=first):
        args, arg_types = [], []
        for pos, (kind, i) in enumerate(s["args"]):
            if kind == "step":
                args.append(exprs[i])
                arg_types.append(step_types[i])
            else:
                t = in_types[i]
                ones = 0
                if s["op"] == "nn.bias_add" and pos == 1:
                    data_rank = out_type.ndim
                    axis = s["attrs"].get("axis", 1) % data_rank
                    ones = data_rank - axis - 1
                args.append(f"v{operand(i, t, ones)}")
                arg_types.append(t.dtype)
        out_dtype = _step_dtype(s, arg_types)
        if s["op"] in FILLS:
            e = _fill(s["op"], args, arg_types, out_dtype)
        elif len(args) == 1:
            e = _unary(s["op"], s["attrs"], args[0], arg_types[0], out_dtype)
        elif s["op"] == "where":
            e = f"({args[0]} ? {args[1]} : {args[2]})"
        else:
            e = _binary(s["op"], args[0], args[1], arg_types[0])
        lines.append(f"const {_ctype(out_dtype)} s{j} = ({_ctype(out_dtype)}){e};")
        exprs.append(f"s{j}")
        step_types.append(out_dtype)
    col_dims, modes = _col_dims(out_type, views)
    operands = [Operand(o.input, o.dtype, o.trailing_ones, m) for o, m in zip(operands, modes)]
    if len(operands) > MAX_OPERANDS or out_type.ndim - col_dims > MAX_ROW_DIMS:
        raise KeyError("too many operands or dims for a fused kernel")
    return FusedPlan(symbol, operands, col_dims,
                     _source(symbol, operands, lines, exprs[-1], out_type.dtype))


def _step_dtype(step: dict, arg_types: list[str]) -> str:
    op = step["op"]
    if op in ("cast", "zeros", "ones"):
        return step["attrs"]["dtype"]
    if op == "full":
        return step["attrs"]["dtype"] or arg_types[0]
    if op in ("zeros_like", "ones_like", "full_like"):
        return arg_types[0]
    if op in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
              "logical_and", "logical_or", "logical_not"):
        return "bool"
    if op == "where":
        return arg_types[1]
    if not arg_types:
        raise KeyError(op)  # an op without inputs this generator does not know
    return arg_types[0]


def _source(symbol: str, operands: list[Operand], lines: list[str], result: str,
            out_dtype: str) -> str:
    out_t = CTYPES[out_dtype]
    decl = [f"    {out_t} *const out = ({out_t} *)c->out;"]
    base = []
    loads = []
    for k, o in enumerate(operands):
        t = CTYPES[o.dtype]
        decl.append(f"    const {t} *const in{k} = (const {t} *)c->inputs[{k}];")
        base.append(f"            b{k} += coord * c->row_strides[{k}][d];")
        index = "j" if o.contiguous else "0"
        loads.append(f"            const {_ctype(o.dtype)} v{k} = p{k}[{index}];")
    body = "\n".join(f"            {ln}" for ln in lines)
    starts = "\n".join(f"        int64_t b{k} = 0;" for k in range(len(operands)))
    ptrs = "\n".join(f"        const {CTYPES[o.dtype]} *const p{k} = in{k} + b{k};"
                     for k, o in enumerate(operands))
    return f"""
RELVM_VECTORIZE void {symbol}(void *ctx, int64_t row_begin, int64_t row_end) {{
    const relvm_fused_ctx *c = (const relvm_fused_ctx *)ctx;
{chr(10).join(decl)}
    const int64_t cols = c->cols;
    for (int64_t r = row_begin; r < row_end; ++r) {{
{starts}
        int64_t rem = r;
        for (int64_t d = c->row_ndim - 1; d >= 0; --d) {{
            const int64_t coord = rem % c->row_dims[d];
            rem /= c->row_dims[d];
{chr(10).join(base)}
        }}
{ptrs}
        {out_t} *const o = out + r * cols;
        for (int64_t j = 0; j < cols; ++j) {{
{chr(10).join(loads)}
{body}
            o[j] = ({out_t}){result};
        }}
    }}
}}
const char {symbol}_signature[] = "{signature([(o.dtype, o.contiguous) for o in operands],
                                               out_dtype)}";
"""


PRELUDE = f"""/* Generated by relvm/compiler/codegen_c.py: fused elementwise kernels. Do not edit. */
#include <math.h>
#include <stdint.h>
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define RELVM_VECTORIZE __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define RELVM_VECTORIZE
#endif
{FUSED_CDEF}
"""


# --- compiling ------------------------------------------------------------------------------------

def compiler() -> str:
    """The C compiler to use: $CC, else cc or gcc on PATH."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RelvmCompileError("building fused C kernels needs a C compiler (cc or gcc) on PATH;"
                                " install one, or build with fuse=False or backend=\"numpy\"")
    return cc


def compile_flags() -> list[str]:
    """CFLAGS, plus the sanitizer flags when $RELVM_SANITIZE asks for them (read per compile)."""
    value = os.environ.get("RELVM_SANITIZE", "").strip().lower()
    if value in ("", "0", "none"):
        return CFLAGS
    if value == "address":
        return CFLAGS + SANITIZE_FLAGS
    raise RelvmCompileError(f"RELVM_SANITIZE={value!r}: the supported value is 'address' "
                            "(AddressSanitizer + UBSan)")


def _compiler_version(cc: str) -> str:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True,
                              timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise RelvmCompileError(f"cannot run the C compiler {cc}: {e}") from None


def cache_dir() -> Path:
    base = os.environ.get("RELVM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "relvm")
    return Path(base) / "kernels"


def compile_library(source: str) -> bytes:
    """Compile ``source`` into a shared library; cached by hash(source, flags, compiler)."""
    cc = compiler()
    flags = compile_flags()
    key = hashlib.sha256("\0".join([source, " ".join(flags), cc, _compiler_version(cc)])
                         .encode()).hexdigest()[:32]
    cached = cache_dir() / f"{key}.so"
    if cached.exists():
        return cached.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "fused.c"
        lib = Path(tmp) / "fused.so"
        src.write_text(source)
        proc = subprocess.run([cc, *flags, str(src), "-o", str(lib), "-lm"],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RelvmCompileError("the C compiler rejected relvm's generated kernels "
                                    "(a relvm bug; please report it):\n" + proc.stderr[-4000:])
        data = lib.read_bytes()
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp_path = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp_path.write_bytes(data)
        os.replace(tmp_path, cached)
    except OSError:
        pass  # a read-only cache only costs a recompile next time
    return data
