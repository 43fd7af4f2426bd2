"""Hostile and huge programs: each is a located relvm error within a second (``relvm.ir.limits``),
never a hang, a MemoryError, a RecursionError, an IndexError or an OverflowError; and the limits
agree with the runtime's."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest

import relvm
from relvm.backends.ckernels.common import MAX_DIMS
from relvm.errors import RelvmSyntaxError, RelvmTypeError
from relvm.frontend import parser as P
from relvm.ir import limits
from relvm.runtime.file.meta import MAX_RANK

X = "def @main(%x: Tensor[(3), float32]) { "
NINES = "9" * 400
SHOWN = "9" * 40 + "..." + "9" * 12 + " (400 characters)"

#: (name, text, class, message, line, column)
HOSTILE = [
    ("expand_dims_huge", X + "expand_dims(%x, axis=0, num_newaxis=99999999) }", RelvmTypeError,
     "expand_dims: the result would have rank 100000000; relvm's limit is 64", 1, 39),
    ("dyn_reshape_huge_rank",
     "def @main(%x: Tensor[(2), float32], %s: Tensor[(99999999), int64]) { dyn.reshape(%x, %s) }",
     RelvmTypeError, "dyn.reshape: the result would have rank 99999999; relvm's limit is 64",
     1, 70),
    ("float_attribute_overflows", X + "nn.leaky_relu(%x, alpha=1e400) }", RelvmSyntaxError,
     "number 1e400 is out of range for a float64 attribute; write inf for infinity", 1, 63),
    ("float_attribute_huge_integer", X + f"nn.leaky_relu(%x, alpha={NINES}) }}", RelvmTypeError,
     f"nn.leaky_relu: attribute 'alpha' is out of range: {SHOWN} is past the range of a float64",
     1, 57),
    ("int_attribute_huge", X.replace("(3)", "(3, 4)") + f"sum(%x, axis=[{NINES}]) }}",
     RelvmTypeError, f"sum: attribute 'axis' is out of range: {SHOWN} is past int64, the range "
     "of integer attributes", 1, 50),
    ("int_attribute_past_int64", X + "expand_dims(%x, axis=9223372036854775808) }",
     RelvmTypeError, "expand_dims: attribute 'axis' is out of range: 9223372036854775808 is "
     "past int64, the range of integer attributes", 1, 55),
    ("split_into_billions", "def @main(%x: Tensor[(n), float32]) { "
     "split(%x, indices_or_sections=9999999999) }", RelvmTypeError,
     "split: cannot split data (n) into 9999999999 sections along axis 0: relvm's limit for a "
     "tuple is 65536 fields", 1, 39),
    ("dim_of_twenty_digits", "def @main(%x: Tensor[(99999999999999999999), float32]) { %x }",
     RelvmSyntaxError, "99999999999999999999 is too large for a dimension", 1, 23),
    ("dim_past_2_48", "def @main(%x: Tensor[(281474976710657), int8]) { %x }", RelvmTypeError,
     "parameter %x has dim 281474976710657; relvm's limit is 0..2**48", 1, 11),
    ("tensor_past_2_48_bytes", "def @main(%x: Tensor[(2147483648, 2147483648), int64]) { %x }",
     RelvmTypeError, "parameter %x has shape (2147483648, 2147483648) of int64: over 2**48 bytes, "
     "relvm's limit for a tensor", 1, 11),
    ("symbolic_tensor_past_2_48_bytes",
     "def @main(%x: Tensor[(n, 99999999999999, 99999), float32]) { %x }", RelvmTypeError,
     "parameter %x has shape (n, 99999999999999, 99999) of float32: over 2**48 bytes, relvm's "
     "limit for a tensor for every value of its symbols but 0", 1, 11),
    ("dim_coefficient_past_int64",
     "def @main(%x: Tensor[(n*999999999999999999*999999999999999999), float32]) { %x }",
     RelvmTypeError, "parameter %x has a dim holding an integer past int64", 1, 11),
    ("rank_over_64", "def @main(%x: Tensor[(" + ", ".join(["1"] * 65) + "), float32]) { %x }",
     RelvmTypeError, "parameter %x has rank 65; relvm's limit is 64", 1, 11),
    ("op_result_rank_over_64", "def @main(%x: Tensor[(" + ", ".join(["1"] * 64)
     + "), float32]) { expand_dims(%x, axis=0) }", RelvmTypeError,
     "expand_dims: the result would have rank 65; relvm's limit is 64", 1, 228),
    ("negative_dim", "def @main(%x: Tensor[(-3), float32]) { %x }", RelvmSyntaxError,
     "dimension -3 is negative", 1, 23),
    ("product_of_sums", "def @main(%x: Tensor[(" + "*".join(f"(a{i}+b{i})" for i in range(30))
     + "), float32]) { %x }", RelvmSyntaxError,
     "a dim of more than 256 terms is over relvm's limit", 1, 23),
    ("product_of_70_symbols", "def @main(%x: Tensor[(" + "*".join(f"n{i}" for i in range(70))
     + "), float32]) { %x }", RelvmSyntaxError,
     "a product of more than 64 dims in one term is over relvm's limit", 1, 23),
    ("parentheses_300_deep", X + "(" * 300 + "%x" + ")" * 300 + " }", RelvmSyntaxError,
     "brackets nested more than 256 deep (relvm's limit)", 1, 294),
    ("tuples_100000_deep", X + "(%x, " * 100000 + "%x" + ")" * 100000 + " }", RelvmSyntaxError,
     "brackets nested more than 256 deep (relvm's limit)", 1, 1314),
    ("braces_100000_deep", X + "{" * 100000 + "%x" + "}" * 100000 + " }", RelvmSyntaxError,
     "brackets nested more than 256 deep (relvm's limit)", 1, 294),
    ("closures_300_deep", X + "fn () { " * 300 + "%x" + " }" * 300 + " }", RelvmSyntaxError,
     "brackets nested more than 256 deep (relvm's limit)", 1, 2082),
    ("dim_sum_of_3000_terms", "def @main(%x: Tensor[(n" + "+1" * 3000 + "), float32]) { %x }",
     RelvmSyntaxError, "the program's syntax nests more than 1024 levels deep (relvm's limit)",
     1, 3989),
    ("projections_5000_deep", "def @main(%x: (float32,)) { %x" + ".0" * 5000 + " }",
     RelvmSyntaxError, "the program's syntax nests more than 1024 levels deep (relvm's limit)",
     1, 29),
    ("minus_signs_3000", X + "nn.leaky_relu(%x, alpha=" + "-" * 3000 + "1) }",
     RelvmSyntaxError, "the program's syntax nests more than 1024 levels deep (relvm's limit)",
     1, 1081),
    ("int_literal_400_digits", X.replace("float32", "int64") + f"add(%x, {NINES}i64) }}",
     RelvmSyntaxError, "literal 999999999999...999i64 (403 characters) is out of range for int64 "
     "(-9223372036854775808..9223372036854775807)", 1, 45),
    ("float_literal_overflows", X + "add(%x, 1e400f) }", RelvmSyntaxError,
     "literal 1e400f is out of range for float32", 1, 47),
    ("nul_byte", X + "\0 %x }", RelvmSyntaxError,
     "unexpected character '\\x00'; expected an expression or 'let'", 1, 39),
    ("lone_surrogate", X + "\udcff %x }", RelvmSyntaxError,
     "unexpected character '\\udcff'; expected an expression or 'let'", 1, 39),
    ("identifier_of_a_million_characters", "def @main(%" + "x" * 1_000_000
     + ": Tensor[(3), float32]) { %y }", RelvmSyntaxError, None, 1, 1000038),
]


@pytest.mark.parametrize("name,text,cls,message,line,column", HOSTILE,
                         ids=[h[0] for h in HOSTILE])
def test_hostile_program_is_a_located_error_within_a_second(name, text, cls, message, line,
                                                            column):
    start = time.perf_counter()
    with pytest.raises(cls) as e:
        relvm.parse(text)
    assert time.perf_counter() - start < 1.0
    assert type(e.value) is cls
    if message is not None:
        assert e.value.message == message
    assert (e.value.line, e.value.column) == (line, column)


@pytest.mark.parametrize("value,message", [
    (b"def @main() { 1f }", "parse takes the program as a str, not bytes (decode it first)"),
    (None, "parse takes the program as a str, not NoneType")])
def test_a_program_that_is_not_text_is_a_relvm_error(value, message) -> None:
    with pytest.raises(RelvmTypeError) as e:
        relvm.parse(value)
    assert e.value.message == message


@pytest.mark.e2e
def test_a_huge_but_legal_parameter_builds_at_once() -> None:
    """A 16 GiB input is within the limits; building must not fill or plan anything that size
    (its ones() is left to run time, not folded into a 16 GiB constant)."""
    text = ("def @main(%x: Tensor[(2147483648), int64]) {\n"
            '  %0 = ones(shape=[2147483648], dtype="int64");\n'
            "  %1 = add(%0, %x);\n"
            "  multiply(%1, %1)\n}")
    start = time.perf_counter()
    exe = relvm.build(relvm.parse(text))
    assert time.perf_counter() - start < 2.0
    assert "fused_ones_add#" in exe.bytecode
    back = relvm.load_bytes(exe.save_bytes())
    assert len(back.constants) == 0


def test_a_call_whose_dims_grow_past_the_limit_is_a_type_error() -> None:
    """The callee's n*n*...*n, with n bound to a sum of seven symbols, has 6,435 terms."""
    text = ("def @f(%x: Tensor[(n), float32], %z: Tensor[(n*n*n*n*n*n*n*n), float32]) { %z }\n"
            "def @main(%y: Tensor[(a+b+c+d+e+f+g), float32], %w: Tensor[(1), float32]) {\n"
            "  @f(%y, %w)\n}")
    with pytest.raises(RelvmTypeError) as e:
        relvm.parse(text)
    assert e.value.message == "@f: a dim of more than 256 terms is over relvm's limit"
    assert (e.value.line, e.value.column) == (3, 3)


def test_a_tuple_past_the_limit_is_refused() -> None:
    """Not timed: the text itself is half a megabyte."""
    with pytest.raises(RelvmTypeError) as e:
        relvm.parse("def @main(%x: (" + ", ".join(["float32"] * 70000) + ")) { %x }")
    assert e.value.message == "parameter %x has 70000 fields; relvm's limit for a tuple is 65536"


@pytest.mark.parametrize("bounds,message", [
    ({"n": 2**62, "m": 1}, "upper_bounds: n=4611686018427387904 is over relvm's limit for a dim "
     "(2**48)"),
    ({"n": 2**40, "m": 2**40}, "at upper_bounds {'n': 1099511627776, 'm': 1099511627776} the "
     "memory arena would be 9671406556917033397649408 bytes, over relvm's limit of 2**48; lower "
     "the bounds"),
])
def test_huge_upper_bounds_are_a_compile_error(bounds, message) -> None:
    """They overflowed the int64 operands of the arena's alloc_storage (an OverflowError)."""
    mod = relvm.parse("def @main(%x: Tensor[(n, m), float32]) {\n"
                      "  %0 = add(%x, 1f);\n  %1 = multiply(%0, %0);\n  exp(%1)\n}")
    with pytest.raises(relvm.RelvmCompileError) as e:
        relvm.build(mod, upper_bounds=bounds, fuse=False)
    assert str(e.value) == message


def test_limits_agree_with_the_runtime() -> None:
    nest_h = Path(__file__).parents[2] / "kernels" / "internal" / "nest.h"
    nest_max = int(re.search(r"#define NEST_MAX_DIMS (\d+)", nest_h.read_text())[1])
    assert limits.MAX_RANK == MAX_RANK == MAX_DIMS == nest_max == 64


# --- deep programs ----------------------------------------------------------------------------

def _chain(length: int, lets: bool) -> str:
    lines = ["def @main(%x: Tensor[(3), float32]) {"]
    prev = "%x"
    for i in range(length):
        name = f"%v{i}" if lets else f"%{i}"
        lines.append(f"  {'let ' if lets else ''}{name} = add({prev}, 1f);")
        prev = name
    return "\n".join(lines + [f"  {prev}", "}"])


@pytest.mark.parametrize("lets", [False, True], ids=["graph_bindings", "lets"])
def test_a_10000_deep_chain_parses_builds_and_runs(lets) -> None:
    mod = relvm.parse(_chain(10000, lets))
    x = np.zeros(3, np.float32)
    for fuse in (False, True):
        got = relvm.VirtualMachine(relvm.build(mod, fuse=fuse)).invoke("main", x)
        np.testing.assert_array_equal(got, np.full(3, 10000, np.float32))


@pytest.mark.parametrize("lets", [False, True], ids=["graph_bindings", "lets"])
def test_a_chain_past_the_depth_limit_is_refused(monkeypatch, lets) -> None:
    """The parser measures the IR's depth before type inference; the limit is lowered here, as a
    100,000-level program takes lark 20 s to read (RELVM_FUZZ_LONG=1 tests/fuzz reads one)."""
    monkeypatch.setattr(P, "MAX_DEPTH", 500)
    with pytest.raises(RelvmSyntaxError) as e:
        relvm.parse(_chain(600, lets))
    assert e.value.message == ("the program nests expressions more than 500 deep (a chain of "
                               "lets or calls; relvm's limit)")
    # Graph form: %499 has 501 levels below it (%x is one); a let chain counts from its tail.
    assert e.value.line == (103 if lets else 501)
    relvm.parse(_chain(498, lets))  # 500 levels: %x, a call or let per binding, the let's tail


def test_a_dim_of_shared_sub_expressions_is_checked_once_per_node() -> None:
    """Dims computed from shapes share operands (``(max(d, 1) + d) // 2`` holds ``d`` twice):
    the limit check visits each shared node once, so its work grows with the levels, not as
    2**levels (walked as a tree, a 12-layer BERT's import took 74 s)."""
    from relvm.ir import dims as D
    from relvm.ir.types import TensorType

    d = D.Sym("n")
    for _ in range(14):
        d = D.floordiv(D.dim_max(d, 1) + d, 2)
    assert len(list(limits._ints(d))) < 20 * 14  # a tree walk: tens of thousands
    assert limits.tensor_problem(TensorType((d, 3), "float32")) is None
