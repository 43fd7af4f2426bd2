"""linalg.det: its type relation over symbolic dims, its errors, and the reference on matrices
whose determinant is known (triangular, permutations, products)."""

import numpy as np
import pytest

import relvm
from relvm.ir.dims import Sym
from ophelpers import T, infer, run

b, m = Sym("b"), Sym("m")
RNG = np.random.default_rng(19)


def test_types_over_symbolic_dims():
    assert infer("linalg.det", T((b, m, m))) == T((b,))
    assert infer("linalg.det", T((3, 3), "float64")) == T((), "float64")
    assert infer("linalg.det", T((2, b, 4, 4), "float16")) == T((2, b), "float16")
    assert infer("linalg.det", T((m, Sym("k")))) == T(())  # equal when it runs


@pytest.mark.parametrize("t, message", [
    (T((3,)), r"data must hold square matrices in its last two axes \(\.\.\., M, M\), got \(3\)"),
    (T((2, 3, 4)), r"got \(2, 3, 4\)"),
    (T((3, 3), "int64"), r"data must have a float dtype, got int64"),
])
def test_type_errors(t, message):
    with pytest.raises(relvm.ops.registry.OpTypeError, match=message):
        infer("linalg.det", t)


def test_reference_on_known_determinants():
    upper = np.triu(RNG.uniform(1, 2, (5, 5)))
    np.testing.assert_allclose(run("linalg.det", upper), np.prod(np.diag(upper)), rtol=1e-12)
    perm = np.eye(4)[[1, 0, 3, 2]]  # two swaps
    assert run("linalg.det", perm) == 1.0
    assert run("linalg.det", np.eye(3)[[1, 2, 0]].astype(np.float32)) == 1.0
    a, c = RNG.standard_normal((2, 3, 3)), RNG.standard_normal((2, 3, 3))
    np.testing.assert_allclose(run("linalg.det", a @ c), run("linalg.det", a) *
                               run("linalg.det", c), rtol=1e-10)
    assert run("linalg.det", np.zeros((2, 0, 0), np.float32)).tolist() == [1.0, 1.0]
    assert run("linalg.det", np.ones((3, 3))) == 0.0


def test_text_round_trip_and_run_time_check():
    mod = relvm.parse("""
    def @main(%x: Tensor[(b, m, k), float32]) {
      linalg.det(%x)
    }""")
    assert relvm.parse(relvm.print_module(mod)) == mod
    vm = relvm.VirtualMachine(relvm.build(mod, backend="numpy"))
    x = RNG.standard_normal((2, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(vm.invoke("main", x), np.linalg.det(x), rtol=1e-5)
    with pytest.raises(relvm.RelvmError, match=r"input %x dim 2 \(k\) is 4, but linalg.det at "
                                               r"line 3, column 7 needs it to equal input %x "
                                               r"dim 1 \(m\) = 3"):
        vm.invoke("main", np.zeros((2, 3, 4), np.float32))
