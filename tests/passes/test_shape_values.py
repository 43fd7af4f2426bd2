"""Symbolic values (``relvm/ops/values.py``): shapes computed with tensors give exact dims.

A symbolic build must see the shapes a static build sees where the program computes them from
shapes: ``arange`` up to a dim, ``dyn.reshape`` to a shape made of dims. Each case checks the
inferred type, then runs the VM (NumPy backend: the pure tier) against the reference
interpreter, and, where the type relies on an assumption, that an input breaking it is refused.
"""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm import RelvmError
from relvm.ir import dims as D
from relvm.ir.nodes import Call, post_order
from relvm.ops import values as V
from relvm.testing.reference import evaluate


def ret(mod) -> str:
    return str(mod["main"].checked_type.ret)


def run(mod, *args):
    return relvm.VirtualMachine(relvm.build(mod, backend="numpy")).invoke("main", *args)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# Position ids as BERT's legacy export computes them: a table of 16 rows sliced up to the
# sequence length, added to the embeddings.
POSITIONS = """def @main(%x: Tensor[(b, n, 4), float32], %table: Tensor[(16, 4), float32]) {
  %s = shape_of(%x, dtype="int64");
  %n = take(%s, 1i64, axis=0);
  %stop = minimum(maximum(where(less(%n, 0i64), add(%n, 16i64), %n), 0i64), 16i64);
  %ids = arange(0i64, %stop, 1i64);
  add(%x, take(%table, %ids, axis=0))
}"""


def test_arange_up_to_a_dim_has_that_length() -> None:
    mod = relvm.parse(POSITIONS)
    aranges = [n for n in post_order(mod["main"].body)
               if isinstance(n, Call) and n.op.name == "arange"]
    assert str(aranges[0].checked_type) == "Tensor[(min(n, 16)), int64]"
    # broadcast(n, min(n, 16)) is n whenever they broadcast at all: the embeddings' shape.
    assert ret(mod) == "Tensor[(b, n, 4), float32]"


@pytest.mark.parametrize("n", [1, 7, 16])
def test_positions_match_the_reference(n) -> None:
    mod = relvm.parse(POSITIONS)
    x, table = rand(2, n, 4), rand(16, 4, seed=1)
    got = run(mod, x, table)
    np.testing.assert_array_equal(got, evaluate(mod, x, table))
    np.testing.assert_allclose(got, x + table[:n], rtol=1e-6)


def test_positions_past_the_table_are_refused() -> None:
    with pytest.raises(RelvmError, match="broadcast"):
        run(relvm.parse(POSITIONS), rand(1, 20, 4), rand(16, 4))


# A view's target shape gathered from the input's shape (Shape -> Gather -> Concat -> Reshape).
HEADS = """def @main(%x: Tensor[(b, n, 8), float32]) {
  %s = shape_of(%x, dtype="int64");
  %t = concatenate((strided_slice(%s, begin=[0], end=[2]), expand_dims(2i64, axis=0),
                    expand_dims(-1i64, axis=0)));
  dyn.reshape(%x, %t)
}"""


def test_dyn_reshape_to_a_shape_of_dims_is_exact() -> None:
    mod = relvm.parse(HEADS)
    assert ret(mod) == "Tensor[(b, n, 2, 4), float32]"
    x = rand(3, 5, 8)
    np.testing.assert_array_equal(run(mod, x), x.reshape(3, 5, 2, 4))


def test_exact_dyn_reshape_computes_no_shape() -> None:
    """Lowered as a view: the newshape tensor is never made, the dims come from the symbols."""
    text = str(relvm.build(relvm.parse(HEADS), backend="numpy").bytecode)
    assert "concatenate" not in text and "shape_of" not in text
    assert "reshape_tensor" in text and "[b, n, 2, 4]" in text


UNFLATTEN = """def @main(%x: Tensor[(b, n), float32]) {
  %f = reshape(%x, newshape=[-1]);
  dyn.reshape(nn.relu(%f), shape_of(%x, dtype="int64"))
}"""


def test_unflatten_assumes_a_dim_past_the_input_rank_is_not_zero() -> None:
    """newshape [b, n] of a [b*n] tensor: b is a size either way (a b of 0 empties both), n
    sits past the input's rank, where a 0 is an error: assumed not 0, checked when it runs."""
    mod = relvm.parse(UNFLATTEN)
    assert ret(mod) == "Tensor[(b, n), float32]"
    x = rand(3, 5)
    np.testing.assert_array_equal(run(mod, x), np.maximum(x, 0))
    with pytest.raises(RelvmError, match="dyn.reshape"):
        run(mod, np.zeros((3, 0), np.float32))
    with pytest.raises(ValueError):
        evaluate(mod, np.zeros((3, 0), np.float32))  # the reference refuses it too


HALF = """def @main(%x: Tensor[(n), float32]) {
  %s = shape_of(%x, dtype="int64");
  %h = add(divide(subtract(take(%s, 0i64, axis=0), 1i64), 2i64), 1i64);
  arange(0i64, %h, 1i64)
}"""


def test_truncating_division_of_a_dim_minus_one() -> None:
    """1 + (n - 1) / 2, truncated as ONNX's Div: (n + 1)/2 for every n >= 1, the dim a
    stride-2 conv gives; the n >= 1 it needs is checked when the program runs."""
    mod = relvm.parse(HALF)
    assert ret(mod) == "Tensor[((n + 1)/2), int64]"
    for n in (1, 2, 5):
        np.testing.assert_array_equal(run(mod, rand(n)), np.arange((n + 1) // 2))
    with pytest.raises(RelvmError, match=r"n - 1 = -1 \(n is input %x dim 0\) is -1, but "
                                         r"arange at line 4, column 3 needs it to equal"):
        run(mod, rand(0))


def test_a_value_unknown_at_build_time_keeps_fresh_dims() -> None:
    mod = relvm.parse("""def @main(%k: int64) { arange(0i64, %k, 1i64) }""")
    assert ret(mod) == "Tensor[(?), int64]"
    np.testing.assert_array_equal(run(mod, np.int64(3)), [0, 1, 2])


# --- the rules --------------------------------------------------------------------------------

def value(text: str):
    """The symbolic value of @main's body."""
    mod = relvm.parse(text)
    k = V.known(mod["main"].body)
    return None if k is None else k.value


@pytest.mark.parametrize("expr,want", [
    ("shape_of(%x, dtype=\"int64\")", "[n 3]"),
    ("multiply(take(shape_of(%x, dtype=\"int64\"), 0i64, axis=0), 2i64)", "n*2"),
    ("prod(shape_of(%x, dtype=\"int64\"))", "n*3"),
    ("less(take(shape_of(%x, dtype=\"int64\"), 0i64, axis=0), 0i64)", "False"),
    ("greater_equal(take(shape_of(%x, dtype=\"int64\"), 0i64, axis=0), 0i64)", "True"),
    ("equal(take(shape_of(%x, dtype=\"int64\"), 1i64, axis=0), 3i64)", "True"),
    ("maximum(take(shape_of(%x, dtype=\"int64\"), 0i64, axis=0), 0i64)", "n"),
    ("floor_mod(add(take(shape_of(%x, dtype=\"int64\"), 0i64, axis=0), 4i64), 2i64)", "n%2"),
    ("cast(take(shape_of(%x, dtype=\"int64\"), 1i64, axis=0), dtype=\"bool\")", "True"),
])
def test_rules(expr, want) -> None:
    got = value(f'def @main(%x: Tensor[(n, 3), float32]) {{ {expr} }}')
    assert str(got) == want


@pytest.mark.parametrize("expr", [
    "less(take(shape_of(%x, dtype=\"int64\"), 0i64, axis=0), 3i64)",   # depends on n
    "equal(take(shape_of(%x, dtype=\"int64\"), 0i64, axis=0), 3i64)",
    "shape_of(%x, dtype=\"int32\")",                                    # int32 could wrap
    "cast(shape_of(%x, dtype=\"int64\"), dtype=\"float32\")",
])
def test_undecided_values_are_unknown(expr) -> None:
    assert value(f'def @main(%x: Tensor[(n, 3), float32]) {{ {expr} }}') is None


def test_a_value_under_an_assumption_carries_it() -> None:
    mod = relvm.parse("""def @main(%x: Tensor[(n), float32]) {
      divide(subtract(take(shape_of(%x, dtype="int64"), 0i64, axis=0), 1i64), 2i64)
    }""")
    k = V.known(mod["main"].body)
    n = D.Sym("n")
    assert k.value[()] == D.floordiv(n - 1, 2)
    assert k.assumed == (("equal", n - 1, D.dim_max(n - 1, 0)),)


# --- folding ------------------------------------------------------------------------------------

def calls(mod) -> list[str]:
    return [n.op.name for n in post_order(mod["main"].body) if isinstance(n, Call)]


def optimized(text: str):
    from relvm.compiler import optimize

    return optimize(relvm.parse(text), {}, fuse=False)


def test_a_static_value_folds_to_a_constant() -> None:
    mod = optimized("""def @main(%x: Tensor[(n, 12, 64), float32]) {
      %d = take(shape_of(%x, dtype="int64"), 2i64, axis=0);
      reshape(add(%d, 1i64), newshape=[1])
    }""")
    assert calls(mod) == []
    assert mod["main"].body.data.tolist() == [65]


def test_a_call_whose_value_is_its_input_is_dropped() -> None:
    mod = optimized("""def @main(%x: Tensor[(n), float32]) {
      %n = take(shape_of(%x, dtype="int64"), 0i64, axis=0);
      where(less(%n, 0i64), add(%n, 5i64), maximum(%n, 0i64))
    }""")
    assert calls(mod) == ["shape_of", "take"]


def test_a_value_under_an_assumption_is_not_folded() -> None:
    mod = optimized("""def @main(%x: Tensor[(n), float32]) {
      %h = divide(subtract(take(shape_of(%x, dtype="int64"), 0i64, axis=0), 1i64), 2i64);
      less(%h, 0i64)
    }""")
    assert "less" in calls(mod)  # False only when n >= 1: n = 0 computes it
    x = np.zeros(0, np.float32)
    assert bool(run(relvm.parse(str(mod)), x)) is bool(evaluate(mod, x))


# --- dims ----------------------------------------------------------------------------------------

def test_broadcast_against_a_capped_copy_is_the_dim() -> None:
    n = D.Sym("n")
    assert D.broadcast(n, D.dim_min(n, 512)) == D.as_expr(n)
    assert D.broadcast(D.dim_min(n * 2, 8), n * 2) == n * 2
    assert str(D.broadcast(n, D.dim_min(n, D.Sym("m")))) == "?"  # capped by a dim: either


def test_a_max_is_non_negative_when_either_side_is() -> None:
    n = D.Sym("n")
    assert D.prove_nonnegative(D.floordiv(D.dim_max(n - 1, 0), 2) + 1)
    assert not D.prove_nonnegative(D.dim_min(n - 1, 0))
