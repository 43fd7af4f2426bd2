"""The printer: ``parse(print(m)) == m``, printing is idempotent, and the layout is Relay's."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from relvm.frontend.parser import parse
from relvm.ir import dims as D
from relvm.ir.nodes import Call, Constant, Function, Let, Module, Var
from relvm.ir.printer import attr_text, literal_text, module_constants, print_expr, print_module
from relvm.ir.types import TensorType
from relvm.ops import OPS

F = "float32"

#: (name, text, constants). Every program is well-typed; together they cover every grammar form.
PROGRAMS = [
    ("mlp_symbolic_batch", """
#[version = "0.0.5"]
def @main(%x: Tensor[(n, 8), float32], %w1: Tensor[(16, 8), float32], %b1: Tensor[(16), float32],
          %w2: Tensor[(4, 16), float32], %b2: Tensor[(4), float32]) -> Tensor[(n, 4), float32] {
  %0 = nn.dense(%x, %w1, units=16);
  %1 = nn.bias_add(%0, %b1);
  %2 = nn.relu(%1);
  %3 = nn.dense(%2, %w2, units=4);
  %4 = nn.bias_add(%3, %b2);
  nn.softmax(%4, axis=1)
}""", None),
    ("conv_net", """
def @main(%x: Tensor[(n, 3, 32, 32), float32], %w: Tensor[(32, 3, 3, 3), float32],
          %b: Tensor[(32), float32], %wd: Tensor[(10, 32), float32]) {
  %0 = nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3]);
  %1 = nn.bias_add(%0, %b);
  %2 = nn.relu(%1);
  %3 = nn.max_pool2d(%2, pool_size=[2, 2], strides=[2, 2]);
  %4 = nn.global_avg_pool2d(%3);
  %5 = nn.batch_flatten(%4);
  nn.dense(%5, %wd, units=10)
}""", None),
    ("batch_norm_tuple_result", """
def @main(%x: Tensor[(n, 3, 4, 4), float32], %g: Tensor[(3), float32], %b: Tensor[(3), float32],
          %m: Tensor[(3), float32], %v: Tensor[(3), float32]) {
  %0 = nn.batch_norm(%x, %g, %b, %m, %v, epsilon=0.001f);
  %0.0
}""", None),
    ("layer_norm_and_softmax", """
def @main(%x: Tensor[(n, 6), float32], %g: Tensor[(6), float32], %b: Tensor[(6), float32]) {
  %0 = nn.layer_norm(%x, %g, %b, epsilon=1e-05f);
  nn.log_softmax(%0, axis=-1)
}""", None),
    ("closure_captures_param", """
def @main(%x: Tensor[(n, 4), float32], %b: Tensor[(4), float32]) {
  %0 = fn (%y: Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32] {
    add(%y, %b)
  };
  %1 = %0(%x);
  %0(%1)
}""", None),
    ("closure_captures_binding", """
def @main(%x: Tensor[(n), float32]) {
  %0 = exp(%x);
  let %f = fn (%y: Tensor[(n), float32]) { multiply(%y, %0) };
  %f(%x)
}""", None),
    ("curried_closure", """
def @main(%x: Tensor[(n), float32]) {
  %0 = fn (%s: float32) {
    fn (%v: Tensor[(n), float32]) { multiply(%v, %s) }
  };
  %1 = %0(3f);
  %1(%x)
}""", None),
    ("higher_order_global", """
def @apply(%f: fn (Tensor[(m), float32]) -> Tensor[(m), float32], %v: Tensor[(m), float32]) {
  %f(%v)
}
def @main(%x: Tensor[(n), float32]) {
  @apply(fn (%y: Tensor[(n), float32]) { exp(%y) }, %x)
}""", None),
    ("global_as_value", """
def @double(%v: Tensor[(k), float32]) -> Tensor[(k), float32] { add(%v, %v) }
def @apply(%f: fn (Tensor[(k), float32]) -> Tensor[(k), float32], %v: Tensor[(k), float32]) {
  %f(%v)
}
def @main(%x: Tensor[(n), float32]) { @apply(@double, %x) }""", None),
    ("recursion_factorial", """
def @fact(%i: int64) -> int64 {
  %0 = equal(%i, 0i64);
  if (%0) {
    1i64
  } else {
    %1 = subtract(%i, 1i64);
    %2 = @fact(%1);
    multiply(%i, %2)
  }
}""", None),
    ("mutual_recursion", """
def @is_even(%i: int64) -> bool {
  if (equal(%i, 0i64)) { True } else { @is_odd(subtract(%i, 1i64)) }
}
def @is_odd(%i: int64) -> bool {
  if (equal(%i, 0i64)) { False } else { @is_even(subtract(%i, 1i64)) }
}
def @main(%i: int64) { @is_even(%i) }""", None),
    ("global_used_before_definition", """
def @main(%x: Tensor[(n), float32]) { @helper(%x, %x) }
def @helper(%a: Tensor[(n), float32], %b: Tensor[(n), float32]) { minimum(%a, %b) }""", None),
    ("nested_if", """
def @main(%a: bool, %b: bool, %x: Tensor[(n), float32]) {
  if (%a) {
    if (%b) { %x } else { abs(%x) }
  } else {
    %0 = sqrt(abs(%x));
    if (%b) { %0 } else { negative(%0) }
  }
}""", None),
    ("if_as_let_value", """
def @main(%c: bool, %x: Tensor[(n), float32]) {
  let %y = if (%c) { exp(%x) } else { %x };
  add(%y, %y)
}""", None),
    ("if_shared_condition_and_value", """
def @main(%x: Tensor[(n, 2), float32]) {
  %0 = sum(%x);
  %1 = greater(%0, 0f);
  %2 = multiply(%x, 2f);
  %3 = if (%1) { %2 } else { negative(%2) };
  add(%3, %2)
}""", None),
    ("tuple_and_projections", """
def @main(%x: Tensor[(n), float32], %y: Tensor[(n), float32]) {
  %0 = (%x, %y);
  %1 = %0.1;
  %2 = ((%x, %y), %x);
  %3 = %2.0.1;
  subtract(%0.0, add(%1, %3))
}""", None),
    ("empty_and_single_tuples", """
def @main(%x: Tensor[(n), float32]) {
  %0 = (%x,);
  %1 = ();
  (abs(%0.0), %1)
}""", None),
    ("projection_of_call", """
def @pair(%x: Tensor[(n), float32]) { (%x, exp(%x)) }
def @main(%x: Tensor[(n), float32]) {
  %0 = @pair(%x).1;
  add(@pair(%x).0, %0)
}""", None),
    ("let_without_annotation", """
def @main(%x: Tensor[(n, 2), float32]) {
  let %y = multiply(%x, 3f);
  add(%y, %y)
}""", None),
    ("let_with_annotation", """
def @main(%x: Tensor[(n, 2), float32]) -> Tensor[(n, 2), float32] {
  let %y: Tensor[(n, 2), float32] = tanh(%x);
  let %z: Tensor[(?, 2), float32] = sigmoid(%y);
  %z
}""", None),
    ("let_chain_and_graph_bindings", """
def @main(%x: Tensor[(n), float32]) {
  let %a = exp(%x);
  %0 = add(%a, %x);
  let %b = multiply(%0, %a);
  %1 = (%a, %b);
  %1.1
}""", None),
    ("unused_let", """
def @main(%x: Tensor[(n), float32]) {
  let %unused = exp(%x);
  %x
}""", None),
    ("float_literals", """
def @main(%x: Tensor[(n), float32]) {
  %0 = add(%x, 1f);
  %1 = multiply(%0, 0.5f);
  %2 = subtract(%1, -1.5f);
  %3 = add(%2, 1e-05f);
  %4 = add(%3, 0.5);
  maximum(%4, -0f)
}""", None),
    ("typed_literals", """
def @main(%h: float16, %d: float64, %l: int64, %b: int8, %u: uint8, %i: int32) {
  (add(%h, 1f16), add(%d, 1f64), add(%l, 3i64), add(%b, 2i8), add(%u, 2u8), add(%i, 2),
   add(%i, -7), multiply(%d, 0.1f64), multiply(%h, 0.1f16))
}""", None),
    ("bool_literals", """
def @main(%c: bool) {
  (logical_and(%c, True), logical_or(%c, False))
}""", None),
    ("meta_constants_list", """
def @main(%x: Tensor[(n, 3), float32]) {
  %0 = add(%x, meta[relay.Constant][0]);
  multiply(%0, meta[relay.Constant][1]) /* ty=Tensor[(n, 3), float32] */
}""", [np.arange(3, dtype="float32"), np.full((1, 3), 2.0, dtype="float32")]),
    ("meta_constants_dict_reused", """
def @main(%x: Tensor[(n, 3), float32]) {
  %0 = add(%x, meta[relay.Constant][4]);
  %1 = multiply(%0, meta[relay.Constant][4]);
  add(%1, meta[relay.Constant][2])
}""", {4: np.ones(3, "float32"), 2: np.float32(2.5)}),
    ("dim_expressions", """
def @main(%x: Tensor[(n*2, (n*12)/4), float32], %y: Tensor[(n + 1, m - 1, m % 4, -k + 8), int32])
    -> (Tensor[(n*2, n*3), float32], Tensor[(n + 1, m - 1, m % 4, 8 - k), int32]) {
  (%x, %y)
}""", None),
    ("any_dims_and_max_min", """
def @main(%x: Tensor[(?, 4), float32], %y: Tensor[(max(n, 3), min(m, 2)), float32]) {
  (nn.relu(%x), %y)
}""", None),
    ("scalar_and_rank1_types", """
def @main(%s: float32, %a: Tensor[(10), float32], %b: Tensor[(10,), float32],
          %c: Tensor[(), float32]) {
  %0 = add(%a, %s);
  %1 = add(%b, %c);
  add(%0, %1)
}""", None),
    ("tuple_and_function_types", """
def @main(%t: (Tensor[(n), float32], (int64,), ()),
          %f: fn (Tensor[(n), float32], int64) -> Tensor[(n), float32]) {
  %0 = %t.1;
  %f(%t.0, %0.0)
}""", None),
    ("comments_everywhere", """
// a line comment before everything
#[version = "0.0.5"]
/* a block
   comment */
def @main(%x: Tensor[(n), float32] /* inline */) -> Tensor[(n), float32] { // trailing
  %0 = multiply(%x, 2f); /* ty=Tensor[(n), float32] */
  subtract(%0, 0.5f) // the result
}""", None),
    ("no_version_header", """
def @main(%x: Tensor[(n), float32]) { nn.relu(%x) }""", None),
    ("nested_calls", """
def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(4), float32]) {
  nn.relu(add(%x, negative(%y)))
}""", None),
    ("shared_subexpression", """
def @main(%x: Tensor[(n, 3), float32]) {
  %0 = exp(%x);
  %1 = add(%0, %0);
  multiply(%1, %0)
}""", None),
    ("shadowing_lets", """
def @main(%x: Tensor[(n), float32]) {
  let %x = add(%x, 1f);
  let %x = multiply(%x, 2f);
  %x
}""", None),
    ("shadowing_closure_parameter", """
def @main(%x: Tensor[(n), float32]) {
  %0 = fn (%x: Tensor[(n), float32]) { exp(%x) };
  %1 = fn (%y: Tensor[(n), float32]) { add(%x, %y) };
  %2 = %1(%x);
  %0(%2)
}""", None),
    ("graph_binding_shadows_in_branch", """
def @main(%c: bool, %x: Tensor[(n), float32]) {
  %0 = exp(%x);
  %1 = if (%c) { %0 = negative(%0); %0 } else { %0 };
  add(%0, %1)
}""", None),
    ("string_bool_none_and_nested_list_attrs", """
def @main(%x: Tensor[(n, 3), float32], %p: float32) {
  %0 = nn.pad(%x, %p, pad_width=[[0, 0], [1, 2]], pad_mode="edge");
  %1 = cast(%0, dtype="float64");
  %2 = sum(%1, axis=[1], keepdims=True, exclude=False);
  %3 = argmax(%x, axis=None);
  (%2, %3)
}""", None),
    ("negative_int_attrs", """
def @main(%x: Tensor[(n, 12), float32]) {
  %0 = reshape(%x, newshape=[-1, 4]);
  %1 = zeros(shape=[1, 4]);
  add(%0, %1)
}""", None),
    ("float_attrs", """
def @main(%x: Tensor[(n, 4), float32]) {
  %0 = clip(%x, a_min=-inf, a_max=6f);
  %1 = nn.leaky_relu(%0, alpha=0.1);
  nn.dropout(%1, rate=0.25)
}""", None),
    ("where_and_comparisons", """
def @main(%x: Tensor[(n), float32], %y: Tensor[(n), float32]) {
  %0 = less(%x, %y);
  %1 = logical_not(%0);
  where(%1, %x, %y)
}""", None),
    ("block_expression_argument", """
def @main(%x: Tensor[(n), float32]) {
  add({ let %y = exp(%x); %y }, %x)
}""", None),
    ("closure_in_branch_only", """
def @main(%c: bool, %x: Tensor[(n), float32]) {
  if (%c) {
    %0 = fn (%v: Tensor[(n), float32]) { multiply(%v, %v) };
    %0(%x)
  } else {
    %x
  }
}""", None),
    ("recursion_with_accumulator", """
def @count(%i: int32, %acc: Tensor[(4), float32]) -> Tensor[(4), float32] {
  %0 = less(%i, 10);
  if (%0) {
    @count(add(%i, 1), add(%acc, 1f))
  } else {
    %acc
  }
}
def @main(%x: Tensor[(4), float32]) { @count(0, %x) }""", None),
    ("trailing_metadata_section", """
#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  add(%x, meta[relay.Constant][0])
}
#[metadata]
{ "root": 1, "nodes": [ "this JSON is skipped" ] }""", [np.ones(3, "float32")]),
    ("split_and_concatenate", """
def @main(%x: Tensor[(n, 6), float32]) {
  %0 = split(%x, indices_or_sections=3, axis=1);
  %1 = %0.0;
  %2 = %0.2;
  concatenate((%2, %1), axis=1)
}""", None),
]


def _ids(programs):
    return [p[0] for p in programs]


def _round_trip(text, constants):
    module = parse(text, constants=constants)
    printed = print_module(module)
    again = parse(printed, constants=module_constants(module))
    return module, printed, again


@pytest.mark.parametrize("name,text,constants", PROGRAMS, ids=_ids(PROGRAMS))
def test_round_trip(name, text, constants):
    module, printed, again = _round_trip(text, constants)
    assert again == module, printed


@pytest.mark.parametrize("name,text,constants", PROGRAMS, ids=_ids(PROGRAMS))
def test_printing_is_idempotent(name, text, constants):
    module, printed, again = _round_trip(text, constants)
    assert print_module(again) == printed


def test_at_least_forty_distinct_programs():
    assert len({text for _, text, _ in PROGRAMS}) >= 40


def _shared_cases():
    try:
        import programs
    except ImportError:  # pragma: no cover - the shared table lives in tests/
        return []
    return [pytest.param(c, id=c.name) for c in programs.CASES]


@pytest.mark.parametrize("case", _shared_cases())
def test_shared_programs_round_trip(case):
    module, printed, again = _round_trip(case.text, case.constants)
    assert again == module, printed
    assert print_module(again) == printed


# --- layout -----------------------------------------------------------------------------------

def test_prints_relay_layout():
    m = parse("""
def @main(%x: Tensor[(n, 4), float32], %w: Tensor[(8, 4), float32]) -> Tensor[(n, 8), float32] {
  nn.relu(nn.dense(%x, %w, units=8))
}""")
    assert print_module(m) == (
        '#[version = "0.0.5"]\n'
        "def @main(%x: Tensor[(n, 4), float32], %w: Tensor[(8, 4), float32]) "
        "-> Tensor[(n, 8), float32] {\n"
        "  %0 = nn.dense(%x, %w, units=8);\n"
        "  nn.relu(%0)\n"
        "}\n")


def test_only_non_default_attrs_in_schema_order():
    m = parse("def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {"
              " nn.conv2d(%x, %w, kernel_size=[3, 3], groups=1, padding=[1, 1], strides=[1, 1]) }")
    assert "nn.conv2d(%x, %w, padding=[1, 1], kernel_size=[3, 3])" in print_module(m)


def test_shared_node_bound_once():
    m = parse("def @main(%x: float32) { %0 = exp(%x); %1 = add(%0, %0); multiply(%1, %0) }")
    text = print_module(m)
    assert text.count("exp(") == 1
    assert "%1 = add(%0, %0);" in text and "multiply(%1, %0)" in text


def test_branch_only_nodes_stay_in_their_branch():
    # %1 = @fact(...) is only used in the else-branch; hoisting it would recurse forever.
    m = parse("""
def @fact(%i: int64) -> int64 {
  %0 = subtract(%i, 1i64);
  %1 = @fact(%0);
  %2 = equal(%i, 0i64);
  if (%2) { 1i64 } else { multiply(%i, %1) }
}""")
    lines = print_module(m).splitlines()
    if_line = next(i for i, line in enumerate(lines) if line.strip().startswith("if ("))
    call_line = next(i for i, line in enumerate(lines) if "@fact(" in line and "def" not in line)
    sub_line = next(i for i, line in enumerate(lines) if "subtract(" in line)
    assert call_line > if_line and sub_line > if_line
    assert lines[call_line].startswith("    ")


def test_node_used_in_both_branches_is_bound_before_the_if():
    m = parse("""
def @main(%c: bool, %x: float32) {
  %0 = exp(%x);
  if (%c) { add(%0, 1f) } else { multiply(%0, 2f) }
}""")
    lines = print_module(m).splitlines()
    assert lines[2] == "  %0 = exp(%x);" and lines[3].startswith("  if (%c)")


def test_closure_body_nodes_print_inside_the_closure():
    m = parse("""
def @main(%x: float32) {
  %0 = fn (%y: float32) { %1 = exp(%y); add(%1, %x) };
  %0(%x)
}""")
    text = print_module(m)
    assert "  %1 = fn (%y: float32) {\n    %0 = exp(%y);\n    add(%0, %x)\n  };\n" in text


def test_let_prints_annotation_only_when_present():
    m = parse("def @main(%x: float32) { let %a: float32 = exp(%x); let %b = exp(%a); %b }")
    text = print_module(m)
    assert "let %a: float32 = exp(%x);" in text and "let %b = exp(%a);" in text


def test_graph_numbers_avoid_var_names():
    x = Var("0", TensorType((), F))
    body = Call(OPS["exp"], (Call(OPS["exp"], (x,)),))
    m = Module({"main": Function((x,), body)})
    text = print_module(m)
    assert "def @main(%0: float32)" in text and "%1 = exp(%0);" in text
    assert parse(text) == m


def test_same_name_vars_in_scope_are_renamed():
    a, b = Var("x", TensorType((), F)), Var("x")
    # b is bound by a let inside a's scope and both are used after it.
    body = Let(b, Call(OPS["exp"], (a,)), Call(OPS["add"], (a, b)))
    m = Module({"main": Function((a,), body)})
    text = print_module(m)
    assert "let %x_1 = exp(%x);" in text and "add(%x, %x_1)" in text
    assert parse(text) == m


def test_same_name_vars_in_separate_scopes_keep_their_names():
    m = parse("""
def @main(%c: bool, %v: float32) {
  if (%c) { let %t = exp(%v); %t } else { let %t = abs(%v); %t }
}""")
    assert "%t_1" not in print_module(m)


def test_invalid_var_names_are_sanitized():
    x = Var("input.1", TensorType((), F))
    m = Module({"main": Function((x,), Call(OPS["exp"], (x,)))})
    assert "%input_1: float32" in print_module(m)
    assert parse(print_module(m)) == m


def test_non_tail_let_prints_as_block():
    x = Var("x", TensorType((), F))
    y = Var("y")
    inner = Let(y, Call(OPS["exp"], (x,)), y)
    m = Module({"main": Function((x,), Call(OPS["add"], (inner, x)))})
    text = print_module(m)
    assert "%0 = {\n    let %y = exp(%x);\n    %y\n  };" in text
    assert parse(text) == m


# --- constants --------------------------------------------------------------------------------

def test_meta_constants_keep_indices_and_fill_gaps():
    m = parse("def @main(%x: Tensor[(3), float32]) { add(%x, meta[relay.Constant][2]) }",
              constants={2: np.ones(3, "float32")})
    assert "meta[relay.Constant][2]" in print_module(m)
    consts = module_constants(m)
    assert len(consts) == 3 and consts[0] is None and consts[1] is None
    np.testing.assert_array_equal(consts[2], np.ones(3, "float32"))


def test_new_constants_get_next_free_index_in_order():
    x = Var("x", TensorType((3,), F))
    a, b = np.zeros(3, "float32"), np.full(3, 2.0, "float32")
    body = Call(OPS["add"], (Call(OPS["add"], (x, Constant(a))), Constant(b, meta_index=0)))
    m = Module({"main": Function((x,), body)})
    text = print_module(m)
    assert "add(%x, meta[relay.Constant][1])" in text  # index 0 is b's own
    assert "meta[relay.Constant][0])" in text
    consts = module_constants(m)
    np.testing.assert_array_equal(consts[0], b)
    np.testing.assert_array_equal(consts[1], a)
    assert parse(text, constants=consts) == m


def test_non_finite_scalars_print_as_meta():
    x = Var("x", TensorType((), F))
    body = Call(OPS["add"], (x, Constant(np.array(np.inf, dtype="float32"))))
    m = Module({"main": Function((x,), body)})
    text = print_module(m)
    assert "meta[relay.Constant][0]" in text
    assert parse(text, constants=module_constants(m)) == m


@pytest.mark.parametrize("value,dtype,text", [
    (1.0, "float32", "1f"), (0.5, "float32", "0.5f"), (-1.5, "float32", "-1.5f"),
    (1e-05, "float32", "1e-05f"), (1.0, "float16", "1f16"), (1.0, "float64", "1f64"),
    (3, "int64", "3i64"), (2, "int8", "2i8"), (2, "uint8", "2u8"), (2, "int32", "2"),
    (True, "bool", "True"), (False, "bool", "False"), (-0.0, "float32", "-0f"),
    (-7, "int16", "-7i16"), (7, "uint16", "7u16"), (7, "uint32", "7u32"),
    (2**64 - 1, "uint64", "18446744073709551615u64"),
])
def test_literal_text(value, dtype, text):
    assert literal_text(np.array(value, dtype=dtype)) == text


def _literal_round_trip(value: np.ndarray) -> np.ndarray:
    dtype = str(value.dtype)
    m = parse(f"def @main(%x: {dtype}) {{ add(%x, {literal_text(value)}) }}")
    return m["main"].body.args[1].data


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float32_literals_reparse_to_identical_bits(v):
    value = np.array(v, dtype="float32")
    assert _literal_round_trip(value).tobytes() == value.tobytes()


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_float64_literals_reparse_to_identical_bits(v):
    value = np.array(v, dtype="float64")
    assert _literal_round_trip(value).tobytes() == value.tobytes()


@given(st.floats(width=16, allow_nan=False, allow_infinity=False))
def test_float16_literals_reparse_to_identical_bits(v):
    value = np.array(v, dtype="float16")
    assert _literal_round_trip(value).tobytes() == value.tobytes()


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_float_attributes_reparse_exactly(v):
    m = parse(f"def @main(%x: float32) {{ clip(%x, a_min={attr_text(v)}, a_max=1f) }}")
    got = m["main"].body.attrs.a_min
    assert (np.isnan(got) and np.isnan(v)) or got == v


@pytest.mark.parametrize("value,text", [
    (None, "None"), (True, "True"), (3, "3"), (-1, "-1"), (0.5, "0.5"), (1e-05, "1e-05"),
    (float("inf"), "inf"), (float("-inf"), "-inf"), ("NCHW", '"NCHW"'), ('a"b', '"a\\"b"'),
    ((1, 2), "[1, 2]"), (((0, 0), (1, 2)), "[[0, 0], [1, 2]]"), ((), "[]"),
    ((D.Sym("n") * 2, 4), "[n*2, 4]"),
])
def test_attr_text(value, text):
    assert attr_text(value) == text


# --- types, expressions, long programs --------------------------------------------------------

def test_dims_print_canonically():
    m = parse("def @main(%x: Tensor[((n*12)/4, n + 1 - 1, ?), float32]) { %x }")
    assert "%x: Tensor[(n*3, n, ?), float32]" in print_module(m)


def test_print_expr_and_str():
    m = parse("def @main(%x: float32) { %0 = exp(%x); (%0, %0) }")
    assert print_expr(m["main"].body) == "%0 = exp(%x);\n(%0, %0)"
    assert str(m["main"].body) == print_expr(m["main"].body)
    assert str(m["main"]).startswith("fn (%x: float32) {")
    assert str(m) == print_module(m)
    assert print_expr(m["main"].params[0]) == "%x"


def _chain(length: int, lets: bool = False) -> str:
    lines = ["def @main(%x: Tensor[(n), float32]) {"]
    prev = "%x"
    for i in range(length):
        name = f"%v{i}" if lets else f"%{i}"
        lines.append(f"  {'let ' if lets else ''}{name} = add({prev}, 1f);")
        prev = name
    lines += [f"  {prev}", "}"]
    return "\n".join(lines)


@pytest.mark.parametrize("lets", [False, True], ids=["graph_bindings", "lets"])
def test_three_thousand_binding_chain(lets):
    module, printed, again = _round_trip(_chain(3000, lets), None)
    assert again == module
    assert print_module(again) == printed
    assert printed.count("add(") == 3000


def test_printed_text_is_plain_ascii_lines():
    for _, text, constants in PROGRAMS:
        printed = print_module(parse(text, constants=constants))
        assert printed.startswith('#[version = "0.0.5"]\n')
        assert not re.search(r"[^\x20-\x7e\n]", printed)
