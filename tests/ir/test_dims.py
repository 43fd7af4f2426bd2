"""The symbolic dim algebra: canonical forms, simplification, evaluation, printing."""

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from relvm.ir import dims as D
from relvm.ir.dims import Sym

n, m = Sym("n"), Sym("m")


@pytest.mark.parametrize("expr,text", [
    (lambda: (n * 12) // 4, "n*3"),
    (lambda: n + 1 - 1, "n"),
    (lambda: (n + 3) // 4, "(n + 3)/4"),
    (lambda: ((n + 3) // 4) // 2, "(n + 3)/8"),
    (lambda: (n * 4 + 1) % 4, "1"),
    (lambda: (n * m * 4) // n, "m*4"),
    (lambda: n * 2 + 1, "n*2 + 1"),
    (lambda: 1 - n, "-n + 1"),
    (lambda: (n + 1) * (n - 1), "n*n - 1"),
    (lambda: D.dim_max(n * 128, n * 65536), "n*65536"),
    (lambda: D.dim_min(n, n + 1), "n"),
    (lambda: D.dim_max(n, m), "max(m, n)"),
    (lambda: D.ceildiv(n, 2), "(n + 1)/2"),
])
def test_canonical_forms(expr, text) -> None:
    assert D.dim_str(expr()) == text


def test_equal_polynomials_are_equal_and_hash_alike() -> None:
    assert n * 2 == n + n and hash(D.as_expr(n * 2)) == hash(n + n)
    assert D.prove_equal(n * 2, n + n) is True
    assert D.prove_equal(n + 1, n) is False
    assert D.prove_equal(n, m) is None


def test_anonymous_dims_print_as_question_mark() -> None:
    a = D.fresh()
    assert D.dim_str(D.as_expr(a)) == "?" and D.dim_str(a + n) == "?"
    assert D.as_expr(D.fresh()) != D.as_expr(D.fresh())


def test_broadcast() -> None:
    assert D.broadcast(n, 1) == n and D.broadcast(4, n) == 4
    assert D.dim_str(D.broadcast(n, m)) == "?"
    with pytest.raises(ValueError):
        D.broadcast(3, 4)
    assert D.evaluate(D.broadcast(n, m), {n: 1, m: 5}) == 5
    with pytest.raises(ValueError):
        D.evaluate(D.broadcast(n, m), {n: 2, m: 5})


def test_substitute_and_evaluate() -> None:
    e = (n * 2 + 3) // 4
    assert D.evaluate(e, {n: 5}) == 3
    assert D.substitute(e, {n: D.as_expr(m) * 2}) == m  # (4m + 3) / 4 == m
    assert D.free_symbols(e) == {n}


def test_nonnegative() -> None:
    assert D.prove_nonnegative(n * 3 + m) and D.prove_nonnegative((n + 1) // 2)
    assert not D.prove_nonnegative(n - 1) and not D.prove_nonnegative(-n)


@given(st.integers(0, 50), st.integers(0, 50), st.integers(1, 7), st.integers(-3, 3))
def test_simplification_never_changes_the_value(a, b, k, c) -> None:
    env = {n: a, m: b}
    for e, want in [((n * k + c) // k, (a * k + c) // k), ((n * k + c) % k, (a * k + c) % k),
                    (D.dim_max(n * k, m + c), max(a * k, b + c)),
                    (D.dim_min(n + c, m * k), min(a + c, b * k)),
                    (D.dim_max(D.dim_max(n, m * k + c), D.dim_max(m, n + c)),
                     max(a, b * k + c, b, a + c)),
                    (D.dim_min(D.dim_min(n * k, m), D.dim_min(m + c, 7)),
                     min(a * k, b, b + c, 7)),
                    ((n + m) * k - n, (a + b) * k - a)]:
        assert D.evaluate(e, env) == want


def test_upper_bound_is_the_maximum_over_the_box() -> None:
    bounds = {n: 8, m: 4}
    assert D.upper_bound(n * 3 + m, bounds) == 28
    assert D.upper_bound(D.broadcast(n, m), bounds) == 8          # either side
    assert D.upper_bound(D.dim_min(n, 2), bounds) == 2            # a slice is not longest at n=8
    assert D.upper_bound((n + 1) // 2, bounds) == 4
    assert D.upper_bound(n - m, bounds) == 8 and D.upper_bound(n, {}) is None


@given(st.integers(0, 8), st.integers(0, 4))
def test_upper_bound_is_never_below_a_value(a, b) -> None:
    bounds = {n: 8, m: 4}
    for e in [n * 3 - m, D.dim_min(n, m + 1), D.dim_max(n // 3, m % 3), (n * m + 2) // 3]:
        assert D.evaluate(e, {n: a, m: b}) <= D.upper_bound(e, bounds)


def test_nested_max_and_min_flatten_and_drop_what_another_operand_bounds() -> None:
    """Memory planning takes the max of every size a buffer holds: repeated and dominated
    sizes no longer pile up into an expression the VM evaluates on every call."""
    b, s = D.Sym("b"), D.Sym("s")
    assert D.dim_max(D.dim_max(b * 512, 8), b * 512) == D.dim_max(b * 512, 8)
    assert D.dim_max(D.dim_max(b * 512, s), D.dim_max(b * 1024, s)) == D.dim_max(b * 1024, s)
    assert D.dim_max(D.dim_max(s, b), D.dim_max(b, s)) == D.dim_max(b, s)  # order-free
    assert D.dim_min(D.dim_min(s, 512), 16) == D.dim_min(s, 16)
    assert D.dim_min(D.dim_min(s, b), s + 1) == D.dim_min(s, b)
    env = {b: 3, s: 700}
    assert D.evaluate(D.dim_max(D.dim_max(b * 512, s * 2), 8), env) == 1536


def _dim_trees():
    """Random dim expressions over n and m with every operator the text format spells."""
    leaves = st.one_of(st.sampled_from([n, m]).map(D.as_expr), st.integers(1, 5))
    pos = st.integers(1, 5)

    def grow(kids):
        return st.one_of(
            st.tuples(kids, kids).map(lambda p: p[0] + p[1]),
            st.tuples(kids, kids).map(lambda p: p[0] - p[1]),
            st.tuples(kids, kids).map(lambda p: p[0] * p[1]),
            kids.map(lambda a: -a),
            st.tuples(kids, pos).map(lambda p: D.floordiv(p[0], p[1])),
            st.tuples(kids, pos).map(lambda p: D.mod(p[0], p[1])),
            st.tuples(kids, kids).map(lambda p: D.dim_max(p[0], p[1])),
            st.tuples(kids, kids).map(lambda p: D.dim_min(p[0], p[1])))
    return st.recursive(leaves, grow, max_leaves=8)


@given(_dim_trees(), st.integers(0, 9), st.integers(0, 9))
def test_printed_dims_parse_back_to_the_same_value(expr, a, b) -> None:
    """The printer's text is what the parser reads: a type printed into a module (the fuzzer's
    programs, ``relvm show``, a saved module) keeps its value for every size. ``n*m/2`` used to
    stand for ``n*(m/2)`` and ``-n/2`` for ``-(n/2)``; both read back differently."""
    import relvm
    assume(not isinstance(expr, int))     # a constant prints as itself; a shape refuses one < 0
    text = D.dim_str(expr)
    fn = relvm.parse(f"def @main(%x: Tensor[({text}), float32]) {{ %x }}").functions["main"]
    back = fn.params[0].type_annotation.shape[0]
    env = {n: a, m: b}
    assert D.evaluate(back, env) == D.evaluate(expr, env), text
