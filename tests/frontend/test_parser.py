"""The parser: what each grammar form builds, name resolution, spans, literals and types."""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm.errors import RelvmError, RelvmSyntaxError, RelvmTypeError
from relvm.frontend.grammar import grammar_path, lark_parser
from relvm.frontend.parser import parse
from relvm.ir import dims as D
from relvm.ir.nodes import (Call, Constant, Function, GlobalVar, If, Let, Span, TupleGetItem,
                            post_order)
from relvm.ir.types import FuncType, TensorType, TupleType
from relvm.ops import OPS

n, m = D.Sym("n"), D.Sym("m")


def body_of(text: str, name: str = "main", **kw):
    return parse(text, **kw)[name].body


# --- module structure -------------------------------------------------------------------------

def test_functions_in_definition_order_and_source_kept():
    text = "def @b(%x: float32) { %x }\ndef @a(%x: float32) { @b(%x) }\n"
    module = parse(text)
    assert list(module) == ["b", "a"]
    assert module.source == text


def test_empty_module():
    assert list(parse("")) == []
    assert list(parse('#[version = "0.0.5"]\n// nothing here\n')) == []


def test_every_node_is_type_checked():
    module = parse("""
def @main(%x: Tensor[(n, 4), float32], %c: bool) {
  %0 = fn (%y: Tensor[(n, 4), float32]) { exp(%y) };
  let %t = (%0(%x), %x);
  if (%c) { %t.0 } else { %t.1 }
}""")
    for node in post_order(module["main"], into_functions=True):
        assert node.checked_type is not None, node


def test_relvm_parse_is_the_frontend_parser():
    text = "def @main(%x: float32) { exp(%x) }"
    assert relvm.parse(text) == parse(text)


def test_grammar_is_a_file_and_the_parser_is_built_once():
    assert grammar_path().name == "relay.lark"
    assert lark_parser() is lark_parser()


# --- bindings and scopes ----------------------------------------------------------------------

def test_graph_bindings_share_one_node_without_let():
    body = body_of("def @main(%x: float32) { %0 = exp(%x); add(%0, %0) }")
    assert isinstance(body, Call) and body.op is OPS["add"]
    assert body.args[0] is body.args[1]
    assert not any(isinstance(e, Let) for e in post_order(body))


def test_let_body_is_the_rest_of_the_block():
    body = body_of("def @main(%x: float32) { let %a = exp(%x); let %b: float32 = abs(%a); %b }")
    assert isinstance(body, Let) and body.var.name == "a" and body.var.type_annotation is None
    inner = body.body
    assert isinstance(inner, Let) and inner.var.type_annotation == TensorType((), "float32")
    assert inner.value.args[0] is body.var and inner.body is inner.var


def test_let_value_sees_the_outer_name():
    func = parse("def @main(%x: float32) { let %x = exp(%x); %x }")["main"]
    let = func.body
    assert let.value.args[0] is func.params[0] and let.body is let.var


def test_params_are_vars_shared_by_every_use():
    func = parse("def @main(%x: float32) { add(%x, %x) }")["main"]
    assert func.body.args[0] is func.params[0] is func.body.args[1]


def test_inner_names_shadow_outer_ones():
    func = parse("""
def @main(%x: float32) {
  %0 = fn (%x: float32) { exp(%x) };
  %0(%x)
}""")["main"]
    closure = func.body.op
    assert closure.body.args[0] is closure.params[0]
    assert func.body.args[0] is func.params[0]


def test_closures_capture_enclosing_names():
    func = parse("""
def @main(%x: float32) {
  %0 = exp(%x);
  %1 = fn (%y: float32) { add(%y, %0) };
  %1(%x)
}""")["main"]
    closure = func.body.op
    assert isinstance(closure, Function)
    captured = closure.body.args[1]
    assert captured.op is OPS["exp"] and captured.args[0] is func.params[0]


def test_branch_bindings_are_local_to_the_branch():
    with pytest.raises(RelvmSyntaxError, match="unknown variable %5"):
        parse("def @main(%c: bool, %x: float32) {\n"
              "  %0 = if (%c) { %5 = exp(%x); %5 } else { %x };\n"
              "  add(%0, %5)\n}")


def test_graph_binding_may_rebind_a_name():
    body = body_of("def @main(%x: float32) { %0 = exp(%x); %0 = abs(%0); %0 }")
    assert body.op is OPS["abs"] and body.args[0].op is OPS["exp"]


def test_globals_resolve_in_any_order_and_recursively():
    module = parse("""
def @main(%i: int64) { @even(%i) }
def @even(%i: int64) -> bool { if (equal(%i, 0i64)) { True } else { @odd(subtract(%i, 1i64)) } }
def @odd(%i: int64) -> bool { if (equal(%i, 0i64)) { False } else { @even(subtract(%i, 1i64)) } }
""")
    call = module["main"].body
    assert isinstance(call.op, GlobalVar) and call.op.name == "even"


# --- expressions ------------------------------------------------------------------------------

def test_tuples_and_projections():
    body = body_of("def @main(%x: float32) { ((%x, %x), (%x,), ()).0.1 }")
    assert isinstance(body, TupleGetItem) and body.index == 1
    inner = body.tuple_value
    assert isinstance(inner, TupleGetItem) and inner.index == 0
    fields = inner.tuple_value.fields
    assert [len(f.fields) for f in fields] == [2, 1, 0]


def test_parenthesised_expression_is_not_a_tuple():
    body = body_of("def @main(%x: float32) { (exp(%x)) }")
    assert isinstance(body, Call)


def test_projection_of_any_atom():
    module = parse("""
def @pair(%x: float32) { (%x, %x) }
def @main(%x: float32) { %0 = @pair(%x); add(%0.1, @pair(%x).0) }""")
    args = module["main"].body.args
    assert all(isinstance(a, TupleGetItem) for a in args)
    assert isinstance(args[1].tuple_value.op, GlobalVar)


def test_op_call_attributes_are_validated_with_defaults():
    body = body_of("def @main(%x: Tensor[(n, 3), float32]) { sum(%x, axis=[1], keepdims=True) }")
    assert body.attrs.axis == (1,) and body.attrs.keepdims is True and body.attrs.exclude is False


def test_attribute_values():
    body = body_of("""
def @main(%x: Tensor[(n, 3), float32], %p: float32) {
  nn.pad(%x, %p, pad_width=[[0, 0], [1, 2]], pad_mode="reflect")
}""")
    assert body.attrs.pad_width == ((0, 0), (1, 2)) and body.attrs.pad_mode == "reflect"
    clip = body_of("def @main(%x: float32) { clip(%x, a_min=-inf, a_max=1e-05f) }")
    assert clip.attrs.a_min == -np.inf and clip.attrs.a_max == 1e-05  # the double, as in TVM


def test_symbols_in_attributes_parse_and_reach_the_op():
    # The attribute grammar shares the dim rules; no op takes symbolic shapes today, so the op's
    # own check reports it, at the attribute.
    with pytest.raises(RelvmTypeError, match=r"zeros: attribute 'shape'") as e:
        parse("def @main(%x: Tensor[(n, 4), float32]) { zeros(shape=[n*2, 4]) }")
    assert e.value.column == 48


def test_if_and_closure_nodes():
    body = body_of("""
def @main(%c: bool, %x: float32) {
  if (%c) { %0 = fn (%y: float32) -> float32 { exp(%y) }; %0(%x) } else { %x }
}""")
    assert isinstance(body, If)
    closure = body.then_branch.op
    assert isinstance(closure, Function) and closure.ret_type == TensorType((), "float32")


def test_block_expression():
    body = body_of("def @main(%x: float32) { add({ let %y = exp(%x); %y }, %x) }")
    assert isinstance(body.args[0], Let)


@pytest.mark.parametrize("text,dtype,value", [
    ("1f", "float32", 1.0), ("0.5f", "float32", 0.5), ("-1.5f", "float32", -1.5),
    ("1e-05f", "float32", np.float32(1e-05)), ("1f16", "float16", 1.0),
    ("1f64", "float64", 1.0), ("0.1f64", "float64", 0.1), ("3i64", "int64", 3),
    ("2i8", "int8", 2), ("-128i8", "int8", -128), ("2u8", "uint8", 2), ("255u8", "uint8", 255),
    ("2", "int32", 2), ("-7", "int32", -7), ("0.5", "float32", 0.5), ("2.5e3", "float32", 2500),
    ("7i32", "int32", 7), ("1f32", "float32", 1.0), ("True", "bool", True),
    ("False", "bool", False), ("-32768i16", "int16", -32768), ("65535u16", "uint16", 65535),
    ("4294967295u32", "uint32", 4294967295),
    ("18446744073709551615u64", "uint64", 18446744073709551615),
])
def test_literals(text, dtype, value):
    body = body_of(f"def @main() {{ {text} }}")
    assert isinstance(body, Constant) and body.data.shape == ()
    assert body.data.dtype == np.dtype(dtype) and body.data == np.array(value, dtype=dtype)
    assert body.checked_type == TensorType((), dtype)


def test_negative_zero_literal_keeps_its_sign():
    body = body_of("def @main() { -0f }")
    assert np.signbit(body.data)


# --- meta constants ---------------------------------------------------------------------------

META = "def @main(%x: Tensor[(3), float32]) { %0 = add(%x, meta[relay.Constant][0]); " \
       "multiply(%0, meta[relay.Constant][1]) }"


def test_meta_constants_from_a_list():
    body = body_of(META, constants=[[np.float32(1), np.float32(2), np.float32(3)],
                                    np.ones(3, "float32")])
    first, second = body.args[0].args[1], body.args[1]
    assert first.meta_index == 0 and second.meta_index == 1
    assert isinstance(first.data, np.ndarray)
    np.testing.assert_array_equal(second.data, np.ones(3, "float32"))


def test_meta_constants_from_a_dict():
    body = body_of(META.replace("[1]", "[7]"),
                   constants={0: np.zeros(3, "float32"), 7: np.ones(3, "float32")})
    assert body.args[1].meta_index == 7


def test_unbound_meta_constant_is_reported_by_type_inference():
    with pytest.raises(RelvmTypeError, match=r"meta\[relay.Constant\]\[1\] is not bound") as e:
        parse(META, constants=[np.zeros(3, "float32")])
    assert (e.value.line, e.value.column) == (1, META.index("meta[relay.Constant][1]") + 1)


def test_a_single_array_is_not_a_constants_table():
    with pytest.raises(RelvmTypeError, match="list or a dict"):
        parse(META, constants=np.zeros(3, "float32"))


# --- types ------------------------------------------------------------------------------------

def param_types(text: str):
    return [p.type_annotation for p in parse(text)["main"].params]


def test_type_forms():
    types = param_types("""
def @main(%a: float32, %b: Tensor[(), int8], %c: Tensor[(10), bool], %d: Tensor[(10,), bool],
          %e: (float32, Tensor[(n), float64]), %f: (int64,), %g: (),
          %h: fn (float32, (float32,)) -> Tensor[(n), float32]) { %a }""")
    a, b, c, d, e, f, g, h = types
    assert a == TensorType((), "float32") and b == TensorType((), "int8")
    assert c == d == TensorType((10,), "bool")
    assert e == TupleType((TensorType((), "float32"), TensorType((n,), "float64")))
    assert f == TupleType((TensorType((), "int64"),)) and g == TupleType(())
    assert h == FuncType((TensorType((), "float32"), TupleType((TensorType((), "float32"),))),
                         TensorType((n,), "float32"))


def test_dim_expressions_use_the_dims_arithmetic():
    (t,) = param_types("def @main(%x: Tensor[(n*2, (n*12)/4, n + 1, m - 1, n % 4, n / m, "
                       "-n + 8, max(n, m), min(n, 2), ?), float32]) { %x }")
    assert t.shape[:-1] == (n * 2, n * 3, n + 1, m - 1, D.mod(n, 4), D.floordiv(n, m),
                            8 - D.as_expr(n), D.dim_max(D.as_expr(n), D.as_expr(m)),
                            D.dim_min(D.as_expr(n), 2))
    assert t.shape[-1] == D.as_expr(D.ANY)


def test_all_dtypes_parse():
    for dtype in relvm.dtypes.DTYPES:
        assert param_types(f"def @main(%x: Tensor[(2), {dtype}]) {{ %x }}")[0].dtype == dtype


# --- spans ------------------------------------------------------------------------------------

def test_spans_point_at_each_constructs_first_token():
    text = """def @main(%x: Tensor[(n), float32], %c: bool) -> Tensor[(n), float32] {
  let %y = (%x, 2f);
  %0 = %y.0;
  if (%c) { nn.relu(%0) } else { @main(%x, %c) }
}"""
    func = parse(text)["main"]
    assert func.span == Span(1, 1)
    assert func.params[0].span == Span(1, 11) and func.params[1].span == Span(1, 37)
    let = func.body
    assert let.span == Span(2, 3) and let.var.span == Span(2, 7)
    tup = let.value
    assert tup.span == Span(2, 12) and tup.fields[1].span == Span(2, 17)
    branch = let.body
    assert branch.span == Span(4, 3)
    relu = branch.then_branch
    assert relu.span == Span(4, 13) and relu.args[0].span == Span(3, 8)
    call = branch.else_branch
    assert call.span == Span(4, 34) and call.op.span == Span(4, 34)


def test_negative_literal_span_starts_at_the_minus():
    body = body_of("def @main() { -1.5f }")
    assert body.span == Span(1, 15)


# --- robustness -------------------------------------------------------------------------------

def test_three_thousand_bindings_parse():
    lines = ["def @main(%x: float32) {"]
    lines += [f"  %{i} = add({'%x' if i == 0 else f'%{i - 1}'}, 1f);" for i in range(3000)]
    lines += ["  %2999", "}"]
    body = body_of("\n".join(lines))
    depth = 0
    while isinstance(body, Call):
        body, depth = body.args[0], depth + 1
    assert depth == 3000


def test_very_deep_nesting_is_a_relvm_error():
    text = "def @main(%x: float32) { " + "exp(" * 5000 + "%x" + ")" * 5000 + " }"
    with pytest.raises(RelvmSyntaxError) as e:
        parse(text)
    assert e.value.message == "brackets nested more than 256 deep (relvm's limit)"
    assert (e.value.line, e.value.column) == (1, 1049)


def test_nesting_up_to_the_limit_parses_prints_and_builds():
    depth = 250
    text = "def @main(%x: float32) { " + "exp(" * depth + "%x" + ")" * depth + " }"
    module = parse(text)
    assert parse(relvm.print_module(module)) == module
    relvm.build(module, fuse=False)


def test_source_name_prefixes_messages():
    with pytest.raises(RelvmSyntaxError, match=r"^model.relay: unknown variable %y") as e:
        parse("def @main(%x: float32) { %y }", source_name="model.relay")
    assert (e.value.line, e.value.column) == (1, 26)
