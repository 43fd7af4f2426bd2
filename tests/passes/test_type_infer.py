"""Type and shape inference: symbolic dims through programs, and located type errors."""

from __future__ import annotations

import pytest

import relvm
from relvm import RelvmTypeError
from relvm import examples


def test_mlp_infers_symbolic_batch() -> None:
    mod = relvm.parse(examples.text("mlp"))
    assert str(mod["main"].checked_type.ret) == "Tensor[(n, 10), float32]"


def test_every_expression_gets_a_type() -> None:
    from relvm.ir.nodes import post_order

    mod = relvm.parse(examples.text("mlp"))
    nodes = list(post_order(mod["main"].body))
    assert nodes and all(n.checked_type is not None for n in nodes)


def test_question_mark_stays_unknown() -> None:
    mod = relvm.parse("def @main(%x: Tensor[(?, 3), float32]) { nn.relu(%x) }")
    assert str(mod["main"].checked_type.ret) == "Tensor[(?, 3), float32]"


def test_named_dims_simplify() -> None:
    mod = relvm.parse("""def @main(%x: Tensor[(n, 12), float32]) {
      %0 = reshape(%x, newshape=[-1, 4]);
      concatenate((%0, %0), axis=0)
    }""")
    assert str(mod["main"].checked_type.ret) == "Tensor[(n*6, 4), float32]"


def test_dense_mismatch_names_op_shapes_and_location() -> None:
    text = """def @main(%x: Tensor[(n, 784), float32],
          %w: Tensor[(512, 780), float32]) {
  %0 = add(%x, 1f);
  %1 = nn.dense(%0, %w);
  %1
}"""
    with pytest.raises(RelvmTypeError) as info:
        relvm.parse(text)
    e = info.value
    assert (e.line, e.column) == (4, 8)
    assert str(e).startswith("nn.dense: inner dims differ: data (n, 784) vs weight (512, 780) "
                             "at line 4, column 8")
    assert "    %1 = nn.dense(%0, %w);\n           ^" in str(e)


CASES = [
    ("broadcast", "def @main(%x: Tensor[(3), float32], %y: Tensor[(4), float32]) {\n"
                  "  add(%x, %y)\n}", 2, 3, "add: shapes do not broadcast: lhs (3) vs rhs (4)"),
    ("dtype", "def @main(%x: Tensor[(3), float32], %y: Tensor[(3), int32]) {\n"
              "  add(%x, %y)\n}", 2, 3, "add: dtypes differ: lhs float32 vs rhs int32"),
    ("if_condition", "def @main(%x: Tensor[(3), float32]) {\n"
                     "  if (%x) { %x } else { %x }\n}", 2, 3, "if condition must be a scalar bool"),
    ("if_branches", "def @main(%c: bool, %x: Tensor[(3), float32]) {\n"
                    "  if (%c) { %x } else { cast(%x, dtype=\"int32\") }\n}", 2, 3,
     "if branches differ"),
    ("return_type", "def @main(%x: Tensor[(3), float32]) -> Tensor[(4), float32] {\n"
                    "  exp(%x)\n}", 2, 3, "body does not match the declared return type"),
    ("let_annotation", "def @main(%x: Tensor[(3), float32]) {\n"
                       "  let %y: Tensor[(3), int32] = exp(%x);\n  %y\n}", 2, 3,
     "let %y: annotation does not match its value"),
    ("global_arity", "def @f(%a: Tensor[(3), float32]) { %a }\n"
                     "def @main(%x: Tensor[(3), float32]) {\n  @f(%x, %x)\n}", 3, 3,
     "@f takes 1 arguments, got 2"),
    ("global_argument", "def @f(%a: Tensor[(k, 2), float32]) { %a }\n"
                        "def @main(%x: Tensor[(3), float32]) {\n  @f(%x)\n}", 3, 3,
     "@f: argument 0: expected Tensor[(k, 2), float32], got Tensor[(3), float32]"),
    ("recursion_needs_annotation",
     "def @f(%a: Tensor[(3), float32]) {\n  @f(%a)\n}", 2, 3,
     "@f is called recursively, so its return type must be annotated"),
    ("tuple_index", "def @main(%x: Tensor[(3), float32]) {\n  %0 = (%x, %x);\n  %0.2\n}", 3, 3,
     "tuple index 2 out of range"),
    ("not_a_tuple", "def @main(%x: Tensor[(3), float32]) {\n  %x.0\n}", 2, 3,
     "cannot take field 0 of a non-tuple"),
    ("call_non_function", "def @main(%x: Tensor[(3), float32]) {\n  %x(%x)\n}", 2, 3,
     "cannot call a value of type Tensor[(3), float32]"),
    ("unbound_meta", "def @main(%x: Tensor[(3), float32]) {\n"
                     "  add(%x, meta[relay.Constant][0])\n}", 2, 11,
     "meta[relay.Constant][0] is not bound"),
    ("op_arity", "def @main(%x: Tensor[(3), float32]) {\n  add(%x)\n}", 2, 3,
     "add takes 2 input(s) (lhs, rhs), got 1"),
    ("attribute_type", "def @main(%x: Tensor[(1, 1, 4, 4), float32]) {\n"
                       "  nn.max_pool2d(%x, pool_size=1.5)\n}", 2, 21,
     "attribute 'pool_size' expects"),
]


@pytest.mark.parametrize("name,text,line,column,message", CASES, ids=[c[0] for c in CASES])
def test_type_errors_are_located(name, text, line, column, message) -> None:
    with pytest.raises(RelvmTypeError) as info:
        relvm.parse(text)
    assert message in str(info.value)
    assert (info.value.line, info.value.column) == (line, column), str(info.value)
    assert "^" in str(info.value)


def test_symbolic_mismatch_accepted_for_run_time_check() -> None:
    mod = relvm.parse("""def @main(%x: Tensor[(n), float32], %y: Tensor[(m), float32]) {
      add(%x, %y)
    }""")
    assert str(mod["main"].checked_type.ret) == "Tensor[(?), float32]"


def test_global_call_instantiates_callee_dims() -> None:
    mod = relvm.parse("""def @f(%a: Tensor[(k, 2), float32]) { concatenate((%a, %a), axis=0) }
    def @main(%x: Tensor[(n*3, 2), float32]) { @f(%x) }""")
    assert str(mod["main"].checked_type.ret) == "Tensor[(n*6, 2), float32]"
