"""Generated fused kernels (compiler/codegen_c.py + backends/fused.py) against the references.

Each case is a list of steps, compiled to C, loaded, run on random inputs, and compared with the
same steps run by the ops' NumPy references. Needs a C compiler on PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from relvm.backends.fused import FusedLibrary, make_fused_kernel
from relvm.compiler import codegen_c as G
from relvm.errors import RelvmCompileError
from relvm.ir.dims import Sym
from relvm.ir.types import TensorType
from relvm.ops.fused import run_steps, steps_from_json

pytestmark = pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")),
                                reason="no C compiler on PATH")

N = Sym("n")
UNARY = ["nn.relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "erf", "floor", "ceil",
         "round", "negative", "abs", "sign", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
         "cosh", "asinh", "acosh", "atanh"]
BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "mod",
          "floor_mod"]
COMPARE = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]


def step(op, args, **attrs):
    return {"op": op, "attrs": attrs, "args": [list(a) for a in args]}


def run_case(steps, arrays, sym_shapes=None, out_dtype=None):
    """Compile ``steps`` and compare the generated kernel with the references."""
    sym_shapes = sym_shapes or [a.shape for a in arrays]
    in_types = [TensorType(s, _dt(a)) for s, a in zip(sym_shapes, arrays)]
    want = np.asarray(run_steps(steps_from_json(steps), arrays))
    out_shape = want.shape
    out_sym = tuple(N if d == -1 else d for d in _sym_out(sym_shapes, out_shape))
    plan = G.plan_fused("relvm_fused_0", steps, in_types, TensorType(out_sym, _dt(want)), None)
    lib = FusedLibrary(G.compile_library(G.PRELUDE + plan.source), [plan.symbol])
    kernel = make_fused_kernel(plan.to_json(), lib, len(arrays), None, (), None, None)
    out = np.full(out_shape, 7, want.dtype)
    kernel(*arrays, out)
    if want.dtype.kind == "f":
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6, equal_nan=True)
    else:
        np.testing.assert_array_equal(out, want)
    return plan


def _dt(a):
    return str(np.asarray(a).dtype)


def _sym_out(sym_shapes, out_shape):
    # The output keeps the symbolic first dim when any input had one.
    has_n = any(len(s) == len(out_shape) and s and s[0] is N for s in sym_shapes)
    return ((-1,) + tuple(out_shape[1:])) if has_n else out_shape


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("op", UNARY)
def test_unary_then_add(op) -> None:
    x = rand(5, 7)
    if op in ("log", "sqrt", "rsqrt"):
        x = np.abs(x) + np.float32(0.1)
    if op in ("asin", "acos", "atanh"):
        x = np.tanh(x)
    if op == "acosh":
        x = np.abs(x) + np.float32(1)
    x[0, 0] = np.nan
    steps = [step(op, [("in", 0)]), step("add", [("step", 0), ("in", 1)])]
    run_case(steps, [x, rand(7, seed=1)], [(N, 7), (7,)])


INTS = ["int32", "int64", "int8", "uint8", "int16", "uint16", "uint32", "uint64"]
DTYPES = ["float32", "float64"] + INTS


@pytest.mark.parametrize("op,dtype", [(op, dt) for op in BINARY + COMPARE for dt in DTYPES
                                      if op != "power" or dt.startswith("float")])
def test_binary_ops_all_dtypes(op, dtype) -> None:
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((4, 6)) * 20).astype(dtype)
    b = (rng.standard_normal((4, 6)) * 5).astype(dtype)
    if op == "power":
        a = np.abs(a)
    run_case([step(op, [("in", 0), ("in", 1)])], [a, b])


def test_integer_divide_by_zero_and_negative_truncation() -> None:
    a = np.array([[7, -7, 7, -7, 5, np.iinfo(np.int64).min]], np.int64)
    b = np.array([[2, 2, -2, 0, 0, -1]], np.int64)
    run_case([step("divide", [("in", 0), ("in", 1)])], [a, b])
    run_case([step("divide", [("in", 0), ("in", 1)])], [a.astype(np.int32) // 1 + 0,
                                                         b.astype(np.int32)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["mod", "floor_mod"])
def test_remainders_by_zero_minus_one_and_infinity(op, dtype) -> None:
    if dtype.startswith("float"):
        a = np.array([[7.5, -7.5, -3, 3, -1, 1, np.inf, 1, np.nan, 0.0]], dtype)
        b = np.array([[-2, 2, np.inf, np.inf, -np.inf, -np.inf, 2, 0, 2, -2]], dtype)
    elif dtype.startswith("u"):  # b == max: no -1 test may catch it
        hi = np.iinfo(dtype).max
        a, b = np.array([[7, 0, 255, 9, hi, 5]], dtype), np.array([[0, 3, 1, 4, 10, hi]], dtype)
    else:
        lo = np.iinfo(dtype).min
        a = np.array([[7, -7, 7, -7, lo, lo, 5, -6]], dtype)
        b = np.array([[2, 2, -2, 0, -1, 0, -5, 3]], dtype)
    run_case([step(op, [("in", 0), ("in", 1)])], [a, b])


@pytest.mark.parametrize("dtype", INTS)
def test_integer_overflow_wraps(dtype) -> None:
    # C's signed overflow is undefined (UBSan flags it: tests/kernels/run_sanitized.sh), and a
    # uint16 promotes to int, where 65535 * 65535 overflows; the generated code must wrap as
    # the references do.
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    a = np.array([[hi, lo, hi, lo, 3, hi // 2 + 1]], dtype)
    b = np.array([[hi, hi, 2, -1 if lo else 1, 4, 1]], dtype)
    with np.errstate(over="ignore"):
        for op in ("add", "subtract", "multiply"):
            run_case([step(op, [("in", 0), ("in", 1)])], [a, b])
        for op in ("negative", "abs", "sign", "nn.relu"):
            run_case([step(op, [("in", 0)]), step("add", [("step", 0), ("in", 1)])], [a, b])
        for op in ("maximum", "minimum", "less", "greater_equal"):  # uint64's top half is large
            run_case([step(op, [("in", 0), ("in", 1)])], [a, b])


@pytest.mark.parametrize("shapes", [((3, 4), (4,)), ((3, 1), (1, 4)), ((2, 3, 4), (3, 1)),
                                    ((1,), (5, 6)), ((2, 1, 4), (3, 1)), ((4,), ())])
def test_broadcasting_layouts(shapes) -> None:
    a, b = rand(*shapes[0]), rand(*shapes[1], seed=1)
    run_case([step("add", [("in", 0), ("in", 1)]), step("nn.relu", [("step", 0)])], [a, b])


def test_bias_add_on_channel_axis_of_nchw() -> None:
    x, bias = rand(2, 3, 4, 5), rand(3, seed=1)
    plan = run_case([step("nn.bias_add", [("in", 0), ("in", 1)], axis=1),
                     step("nn.relu", [("step", 0)])], [x, bias])
    assert plan.col_dims == 2  # the inner loop is H*W, the bias constant along it


def test_clip_leaky_relu_where_cast() -> None:
    x = rand(6, 5) * np.float32(3)
    x[0, :3] = [np.nan, np.inf, -np.inf]
    steps = [step("clip", [("in", 0)], a_min=-1.5, a_max=2.0),
             step("nn.leaky_relu", [("step", 0)], alpha=0.1),
             step("greater", [("step", 1), ("in", 1)]),
             step("where", [("step", 2), ("step", 1), ("in", 0)]),
             step("cast", [("step", 3)], dtype="int32")]
    run_case(steps, [x, np.array(0.5, np.float32)])


@pytest.mark.parametrize("target", INTS + ["bool", "float64"])
@pytest.mark.parametrize("source", ["float32", "float64", "float16"])
def test_cast_edge_values(source, target) -> None:
    """As the library's cast: out of range is 0, the rounded-up maximum (2^31 in float32) the
    minimum."""
    x = np.array([[0.5, -0.5, 1e20, -1e20, np.nan, 300.7, -129.2, 2.0, 2.0**31, 2.0**32,
                   2.0**63, 2.0**64, 32768.0, 65535.0, 65536.0, -32768.0, 4294967295.0]])
    if source == "float16":
        x = np.array([[0.5, -0.5, np.inf, np.nan, 300.7, -129.2, 32768.0, -32768.0, 65504.0]])
    with np.errstate(over="ignore"):
        run_case([step("cast", [("in", 0)], dtype=target)], [x.astype(source)])


def test_generated_library_is_cached(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RELVM_CACHE_DIR", str(tmp_path))
    source = G.PRELUDE + "void relvm_cache_probe(void) {}\n"
    first = G.compile_library(source)
    cached = list((tmp_path / "kernels").glob("*.so"))
    assert len(cached) == 1 and cached[0].read_bytes() == first
    assert G.compile_library(source) == first


def test_sanitized_builds_have_their_own_cache_entries(tmp_path, monkeypatch) -> None:
    # RELVM_SANITIZE=address (tests/kernels/run_sanitized.sh) adds ASan + UBSan to the flags,
    # which are part of the cache key: the sanitized library is never handed to a normal build.
    monkeypatch.setenv("RELVM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("RELVM_WERROR", raising=False)  # CI sets it (tests/cli/test_installs.py)
    monkeypatch.setenv("RELVM_SANITIZE", "thread")
    with pytest.raises(RelvmCompileError, match="RELVM_SANITIZE"):
        G.compile_flags()
    monkeypatch.setenv("RELVM_SANITIZE", "address")
    assert G.compile_flags() == G.CFLAGS + G.SANITIZE_FLAGS
    monkeypatch.delenv("RELVM_SANITIZE")
    assert G.compile_flags() == G.CFLAGS
    libasan = subprocess.run([G.compiler(), "-print-file-name=libasan.so"], capture_output=True,
                             text=True).stdout.strip()
    if not os.path.isabs(libasan):
        pytest.skip("the C compiler has no AddressSanitizer runtime")
    source = G.PRELUDE + "void relvm_cache_probe(void) {}\n"
    normal = G.compile_library(source)
    monkeypatch.setenv("RELVM_SANITIZE", "address")
    sanitized = G.compile_library(source)   # compiled and cached, never loaded here
    assert sanitized != normal and len(list((tmp_path / "kernels").glob("*.so"))) == 2
    monkeypatch.delenv("RELVM_SANITIZE")
    assert G.compile_library(source) == normal


@pytest.mark.parametrize("dtype,lo,hi", [("uint8", 0, 6), ("uint8", -3, 300), ("int8", -200, 5),
                                         ("int32", -5, 5), ("int16", -40000, 7),
                                         ("uint16", 0, 70000), ("uint32", 2, 4294967295),
                                         ("uint64", 0, 1e20), ("uint64", 3, 2**63)])
def test_integer_clip_with_bounds_at_the_type_limits_compiles(dtype, lo, hi) -> None:
    """A clip bound at or past the type's range makes its comparison constant: the generated
    code leaves it out (C compilers reject it under -Werror=type-limits)."""
    import relvm

    text = (f"def @main(%x: Tensor[(n, 4), {dtype}]) {{ "
            f"add(clip(%x, a_min={lo}f, a_max={hi}f), %x) }}")
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(text)))
    x = np.array([[0, 3, 7, 100]], dtype)
    info = np.iinfo(dtype)
    clipped = np.clip(x.astype(np.float64), max(lo, info.min), min(hi, info.max))  # exact
    np.testing.assert_array_equal(vm.invoke("main", x), (clipped + x).astype(dtype))


@pytest.mark.parametrize("dtype", INTS)
def test_bitwise_ops_and_shifts(dtype) -> None:
    rng = np.random.default_rng(8)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, (4, 6), endpoint=True, dtype=dtype)
    b = rng.integers(info.min, info.max, (4, 6), endpoint=True, dtype=dtype)
    for op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        run_case([step(op, [("in", 0), ("in", 1)])], [a, b])
    run_case([step("bitwise_not", [("in", 0)])], [a])
    bits = info.bits
    counts = (np.arange(24).reshape(4, 6) % (bits + 4) - (2 if info.min < 0 else 0))
    for op in ("left_shift", "right_shift"):  # counts past the width, and negative ones
        run_case([step(op, [("in", 0), ("in", 1)])], [a, counts.astype(dtype)])
