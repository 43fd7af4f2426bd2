"""C for a fused kernel, from its description as data (the steps and the loop's plan).

A fused kernel (``relvm/ops/fused.py``) is a chain of elementwise/broadcast steps, possibly after
an *anchor* (dense, matmul, conv2d) that the kernel library computes first. Its C is one loop
nest over the output, two levels deep: ``cols``, the trailing output dims along which every
operand is contiguous or constant (the inner loop, which the C compiler vectorizes), and
``rows``, the others, where each operand has its own element strides (0 where it broadcasts).
The compiler decides the plan -- which operands the loop reads, and which of them are
contiguous along ``cols`` -- from the symbolic shapes (``compiler/codegen_c.py``);
:func:`generate` turns a plan and the steps into C.

The same function serves the compiler, which builds the C into the executable's kernel library,
and the runtime, which builds it again from an executable's kernel table when the file's own
library is not trusted (``runtime/vm/kernels.py``): the C depends on nothing but this data. Each
kernel is ``void relvm_fused_<k>(void *ctx, int64_t row_begin, int64_t row_end)``, the
signature of the thread pool's parallel loop, beside ``relvm_fused_<k>_signature``.
"""

from __future__ import annotations

import math
from importlib import resources
from typing import Sequence

import numpy as np

from ..ops.elementwise import TRIGONOMETRIC, clip_bounds
from .fused import FUSED_CDEF, MAX_OPERANDS, MAX_ROW_DIMS, signature

CTYPES = {"float32": "float", "float64": "double", "float16": "_Float16", "int64": "int64_t",
          "int32": "int32_t", "int8": "int8_t", "uint8": "uint8_t", "bool": "uint8_t",
          "int16": "int16_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t"}
#: Type in which a dtype's values are computed (float16 computes in float).
COMPUTE = {"float16": "float"}
#: Where C's signed overflow is undefined, add/subtract/multiply/negate compute in the unsigned
#: type of the same width, which wraps as the references do (kernels/binary.c does the same).
#: uint16 computes in uint32_t: it promotes to int, where 65535 * 65535 overflows. The 8-bit
#: types and int16 are promoted to int, where these operations cannot overflow.
UNSIGNED = {"int64": "uint64_t", "int32": "uint32_t", "uint16": "uint32_t"}
#: The unsigned type a left shift computes in (wide enough that no promotion to int overflows).
SHIFTED = {"int64": "uint64_t", "int32": "uint32_t", "int16": "uint32_t", "int8": "uint8_t",
           "uint64": "uint64_t", "uint32": "uint32_t", "uint16": "uint32_t", "uint8": "uint8_t"}


def _is_unsigned(dtype: str) -> bool:
    """GCC refuses (under -Werror=type-limits) a test such as x < 0 that an unsigned type
    decides, so the expressions leave those tests out for these dtypes."""
    return dtype in ("uint8", "uint16", "uint32", "uint64")


def _ctype(dtype: str) -> str:
    return COMPUTE.get(dtype, CTYPES[dtype])


def _float_suffix(dtype: str) -> str:
    return "" if dtype == "float64" else "f"


# --- elementwise expressions, one per op, matching the NumPy references ----------------------------

def _unary(op: str, attrs: dict, x: str, dtype: str, out_dtype: str) -> str:
    f = _float_suffix(dtype)
    is_float = dtype.startswith("float")
    unsigned = _is_unsigned(dtype)
    if op == "nn.relu":
        return x if unsigned else f"({x} < 0 ? 0 : {x})"
    negated = (f"(({CTYPES[dtype]})(0 - ({UNSIGNED[dtype]}){x}))" if dtype in UNSIGNED
               else f"(-{x})")
    if op == "negative":
        return negated
    if op == "abs":
        return f"fabs{f}({x})" if is_float else x if unsigned else f"({x} < 0 ? {negated} : {x})"
    if op == "sign":
        return f"({x} > 0)" if unsigned else f"({x} != {x} ? {x} : ({x} > 0) - ({x} < 0))"
    if op == "logical_not":
        return f"(!{x})"
    if op == "bitwise_not":
        return f"(({CTYPES[dtype]})~{x})"
    simple = {"sigmoid": f"(1 / (1 + exp{f}(-{x})))", "tanh": f"tanh{f}({x})",
              "exp": f"exp{f}({x})", "log": f"log{f}({x})", "sqrt": f"sqrt{f}({x})",
              "rsqrt": f"(1 / sqrt{f}({x}))", "erf": f"erf{f}({x})", "floor": f"floor{f}({x})",
              "ceil": f"ceil{f}({x})", "round": f"rint{f}({x})",
              **{op: f"{op}{f}({x})" for op in TRIGONOMETRIC}}
    if _ctype(dtype) == "float":  # the vectorizable float32 forms (relvm_vmath.h): libm's
        simple.update(sigmoid=f"vm_sigmoidf({x})", tanh=f"vm_tanhf({x})",  # stop the loop
                      exp=f"vm_expf({x})", erf=f"vm_erff({x})")          # vectorizing
    if op in simple:
        return simple[op]
    if op == "nn.leaky_relu":
        return f"({x} > 0 ? {x} : {x} * {_c_float(attrs['alpha'], dtype)})"
    if op == "clip":
        return _clip(x, attrs["a_min"], attrs["a_max"], dtype)
    if op == "cast":
        return _cast(x, dtype, out_dtype)
    raise CannotGenerate(f"no C for {op}")


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
    suffix = {"int64": "LL", "uint64": "ULL"}.get(dtype, "")
    return f"(({CTYPES[dtype]}){value}{suffix})"


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
    if src.startswith("float") and dst != "bool" and not dst.startswith("float"):
        return _float_to_int(x, src, dst)
    return f"(({_ctype(dst)}){x})"


def _float_to_int(x: str, src: str, dst: str) -> str:
    """As the reference and kernels/elementwise.c: in range when ``lo <= x <= hi`` with the
    int range's ends rounded to ``src`` (float32's int32 bound is 2^31), then truncated; NaN,
    infinities and values outside give 0; a value at the rounded-up bound, just past the int
    range, gives the int minimum (as x86 and NumPy do)."""
    info = np.iinfo(dst)
    lo, hi = _rounded(info.min, src), _rounded(info.max, src)
    past = float(info.max) + 1.0  # a power of two: exact in every float type and in C
    # A bound the float type rounds to an infinity (int64's in float16) leaves only the
    # infinity itself out; below such a maximum, no finite x is past the range.
    tests = [f"{x} == {x}",
             f"{x} {'>' if math.isinf(lo) else '>='} {_c_float(lo, 'float64')}",
             f"{x} {'<' if math.isinf(hi) else '<='} {_c_float(hi, 'float64')}"]
    value = f"({CTYPES[dst]}){x}"
    if not math.isinf(hi) and hi >= past:
        value = f"({x} >= {_c_float(past, 'float64')} ? {_c_int(int(info.min), dst)} : {value})"
    return f"(({' && '.join(tests)}) ? {value} : 0)"


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
        if _is_unsigned(dtype):
            return f"({b} == 0 ? 0 : {a} / {b})"
        return f"({b} == 0 ? 0 : ({CTYPES[dtype]})((int64_t){a} / {b}))"
    if op == "power":
        return f"pow{_float_suffix(dtype)}({a}, {b})"
    if op in ("mod", "floor_mod"):
        return _remainder(op, a, b, dtype)
    bitwise = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
    if op in bitwise:
        return f"(({CTYPES[dtype]})({a} {bitwise[op]} {b}))"
    if op in ("left_shift", "right_shift"):
        return _shift(op, a, b, dtype)
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
    raise CannotGenerate(f"no C for {op}")


def _remainder(op: str, a: str, b: str, dtype: str) -> str:
    """mod (the sign of a) or floor_mod (the sign of b), as kernels/binary.c computes them: an
    integer remainder by 0 or -1 is 0 (INT_MIN % -1 traps); a float one by 0 is NaN."""
    if dtype.startswith("float"):
        r = f"fmod{_float_suffix(dtype)}({a}, {b})"
        zero = "0"
    else:
        r = f"({a} % {b})"
        # An unsigned b is never -1 (and its remainder never negative).
        zero = f"{b} == 0" if _is_unsigned(dtype) else f"({b} == 0 || {b} == -1)"
    if op == "floor_mod" and not _is_unsigned(dtype):
        r = f"(({r} != 0 && ({r} < 0) != ({b} < 0)) ? {r} + {b} : {r})"
    return r if zero == "0" else f"({zero} ? 0 : {r})"


def _shift(op: str, a: str, b: str, dtype: str) -> str:
    """As kernels/binary.c: left in an unsigned type (``SHIFTED``); a count outside [0, bits)
    shifts every bit out (0, or -1 for a negative a shifted right)."""
    bits, ctype = np.dtype(dtype).itemsize * 8, CTYPES[dtype]
    signed = not _is_unsigned(dtype)
    outside = f"({b} < 0 || {b} >= {bits})" if signed else f"({b} >= {bits})"
    if op == "left_shift":
        return f"({outside} ? 0 : ({ctype})(({SHIFTED[dtype]}){a} << {b}))"
    gone = f"({a} < 0 ? -1 : 0)" if signed else "0"
    return f"({outside} ? {gone} : ({ctype})({a} >> {b}))"


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
        raise CannotGenerate(f"no C for {op}")  # an op without inputs it does not know
    return arg_types[0]


def _source(symbol: str, operands: list[tuple[str, bool]], lines: list[str], result: str,
            out_dtype: str, block: bool) -> str:
    """The kernel: one loop over columns j0..j1 of output rows r_begin..r_end (``_span``; each
    operand's row offset found once, then stepped row by row), called for whole rows by
    ``symbol`` (the thread pool's loop) and, with ``block``, for a block of the output by
    ``symbol_block`` (a product's epilogue, see ``relvm_block_fn``)."""
    out_t = CTYPES[out_dtype]
    decl = [f"    {out_t} *const out = ({out_t} *)c->out;"]
    starts, steps, carries, loads = [], [], [], []
    for k, (dtype, contiguous) in enumerate(operands):
        t = CTYPES[dtype]
        decl.append(f"    const {t} *const in{k} = (const {t} *)c->inputs[{k}];")
        starts.append(f"        b{k} += coord[d] * c->row_strides[{k}][d];")
        steps.append(f"            b{k} += c->row_strides[{k}][d];")
        carries.append(f"            b{k} -= c->row_dims[d] * c->row_strides[{k}][d];")
        index = "j" if contiguous else "0"
        loads.append(f"            const {_ctype(dtype)} v{k} = in{k}[b{k} + {index}];")
    body = "\n".join(f"            {ln}" for ln in lines)
    offsets = "\n".join(f"    int64_t b{k} = 0;" for k in range(len(operands)))
    nl = "\n"
    source = f"""
static inline __attribute__((always_inline)) void {symbol}_span(const relvm_fused_ctx *c,
                                                                  int64_t r_begin, int64_t r_end,
                                                                  int64_t j0, int64_t j1) {{
{nl.join(decl)}
{offsets}
    int64_t coord[{MAX_ROW_DIMS}];
    int64_t rem = r_begin;
    for (int64_t d = c->row_ndim - 1; d >= 0; --d) {{
        coord[d] = rem % c->row_dims[d];
        rem /= c->row_dims[d];
{nl.join(starts)}
    }}
    for (int64_t r = r_begin; r < r_end; ++r) {{
        {out_t} *const o = out + r * c->cols;
        /* The output is a fresh tensor, or (after an anchor) the anchor's result itself,
         * element for element: no iteration reads what another writes. */
#pragma GCC ivdep
        for (int64_t j = j0; j < j1; ++j) {{
{nl.join(loads)}
{body}
            o[j] = ({out_t}){result};
        }}
        for (int64_t d = c->row_ndim - 1; d >= 0; --d) {{ /* the next row's offsets */
{nl.join(steps)}
            if (++coord[d] < c->row_dims[d]) break;
            coord[d] = 0;
{nl.join(carries)}
        }}
    }}
}}

static inline __attribute__((always_inline)) void {symbol}_rows(void *ctx, int64_t row_begin,
                                                                  int64_t row_end) {{
    const relvm_fused_ctx *c = (const relvm_fused_ctx *)ctx;
    {symbol}_span(c, row_begin, row_end, 0, c->cols);
}}
RELVM_ISA_VERSIONS(, {symbol}, (void *ctx, int64_t row_begin, int64_t row_end),
                   {symbol}_rows(ctx, row_begin, row_end))
const char {symbol}_signature[] = "{signature(operands, out_dtype)}";
"""
    if block:
        source += f"""
static inline __attribute__((always_inline)) void {symbol}_blocks(
    void *ctx, int64_t offset, int64_t rows, int64_t cols, int64_t ld) {{
    const relvm_fused_ctx *c = (const relvm_fused_ctx *)ctx;
    const int64_t r0 = offset / c->cols, j0 = offset - r0 * c->cols;
    if (ld == c->cols && j0 + cols <= c->cols) {{ /* block rows are output rows, in order */
        {symbol}_span(c, r0, r0 + rows, j0, j0 + cols);
        return;
    }}
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t at = offset + i * ld, left = cols; left > 0;) {{
            const int64_t r = at / c->cols, j = at - r * c->cols;
            const int64_t n = left < c->cols - j ? left : c->cols - j;
            {symbol}_span(c, r, r + 1, j, j + n);
            at += n;
            left -= n;
        }}
}}
RELVM_ISA_VERSIONS(, {symbol}_block,
                   (void *ctx, int64_t offset, int64_t rows, int64_t cols, int64_t ld),
                   {symbol}_blocks(ctx, offset, rows, cols, ld))
"""
    return source


#: relvm's vectorizable float32 math and its ISA versions of a loop, the same text the kernel
#: library includes.
VMATH = (resources.files(__package__) / "relvm_vmath.h").read_text(encoding="utf-8")
ISA = (resources.files(__package__) / "relvm_isa.h").read_text(encoding="utf-8")

PRELUDE = f"""/* Generated by relvm/backends/fusedgen.py: fused elementwise kernels. Do not edit. */
#include <math.h>
#include <stdint.h>
{VMATH}
{ISA}
{FUSED_CDEF}
"""


# --- the kernel ----------------------------------------------------------------------------------

class CannotGenerate(Exception):
    """The steps use an op (or more operands or dims) this generator does not handle; the
    backend then runs the steps one library kernel at a time."""


def generate(symbol: str, steps: Sequence[dict], plan: dict, in_dtypes: Sequence[str],
             out_dtype: str, out_ndim: int, anchor_dtype: str | None) -> str:
    """The C of fused kernel ``symbol``.

    ``steps`` as in ``FusedOp.steps_json()``; ``plan`` as in a kernel entry: ``operands``, per
    operand of the loop ``[input, dtype, trailing_ones, contiguous]`` (input -1: the anchor's
    result) in the order the loop reads them, and ``col_dims``. ``in_dtypes`` are the kernel
    inputs' dtypes; ``out_ndim`` the output's rank. With an anchor, step 0 is computed by the
    library and the loop starts from its output. Raises :class:`CannotGenerate`.
    """
    operands = plan["operands"]
    if len(operands) > MAX_OPERANDS or out_ndim - int(plan["col_dims"]) > MAX_ROW_DIMS:
        raise CannotGenerate("too many operands or dims for a fused kernel")
    index = {(int(o[0]), int(o[2])): k for k, o in enumerate(operands)}
    first = 1 if anchor_dtype is not None else 0
    exprs: list[str] = []   # C expression (a local name) per step
    lines: list[str] = []
    step_types: list[str] = []
    if anchor_dtype is not None:
        if (-1, 0) not in index:
            raise CannotGenerate("the plan does not read the anchor's result")
        step_types.append(anchor_dtype)
        exprs.append(f"v{index[(-1, 0)]}")
    for j, s in enumerate(steps[first:], start=first):
        args, arg_types = [], []
        for pos, (kind, i) in enumerate(s["args"]):
            if kind == "step":
                args.append(exprs[i])
                arg_types.append(step_types[i])
            else:
                operand = (i, trailing_ones(s, pos, out_ndim))
                if operand not in index:  # a plan that does not fit its steps (from a file)
                    raise CannotGenerate(f"the plan does not read input {i} as step {j} does")
                args.append(f"v{index[operand]}")
                arg_types.append(in_dtypes[i])
        out = _step_dtype(s, arg_types)
        e = _expr(s, args, arg_types, out)
        lines.append(f"const {_ctype(out)} s{j} = ({_ctype(out)}){e};")
        exprs.append(f"s{j}")
        step_types.append(out)
    loop = [(str(o[1]), bool(o[3])) for o in operands]
    # In place over the anchor's result, a block at a time, while a product's tile is in cache.
    block = anchor_dtype is not None and anchor_dtype == out_dtype
    return _source(symbol, loop, lines, exprs[-1], out_dtype, block)


def trailing_ones(step: dict, pos: int, out_ndim: int) -> int:
    """How many trailing 1-dims the loop views argument ``pos`` of ``step`` with: bias_add's
    bias lies along its axis of the output; anything else is read as it is."""
    if step["op"] != "nn.bias_add" or pos != 1:
        return 0
    return out_ndim - int(step["attrs"].get("axis", 1)) % out_ndim - 1


def _expr(step: dict, args: list[str], arg_types: list[str], out: str) -> str:
    op = step["op"]
    if op in FILLS:
        return _fill(op, args, arg_types, out)
    if len(args) == 1:
        return _unary(op, step["attrs"], args[0], arg_types[0], out)
    if op == "where":
        return f"({args[0]} ? {args[1]} : {args[2]})"
    return _binary(op, args[0], args[1], arg_types[0])

