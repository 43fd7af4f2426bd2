"""nn.matmul_integer and nn.conv2d_integer: type relations over symbolic dims, their errors, the
text round trip with run-time checks, and the references against sums written out element by
element (ONNX's definitions: products of operands less their zero points, summed exactly and
wrapped into int32)."""

import itertools

import numpy as np
import pytest

import relvm
from relvm.ir.dims import Sym
from ophelpers import T, infer, run

n, m, k, c = Sym("n"), Sym("m"), Sym("k"), Sym("c")
RNG = np.random.default_rng(19)
U8, I8 = "uint8", "int8"


def rand(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


# --- type relations ------------------------------------------------------------------------------

def test_matmul_integer_types():
    assert infer("nn.matmul_integer", T((n, 5), U8), T((5, 7), I8), T((), U8), T((), I8)) == \
        T((n, 7), "int32")
    # Batch dims broadcast as NumPy's, ranks may differ; zero points per row and per column.
    assert infer("nn.matmul_integer", T((2, n, m, 5), I8), T((5, 7), I8), T((m,), I8),
                 T((7,), I8)) == T((2, n, m, 7), "int32")
    assert infer("nn.matmul_integer", T((1, m, k), U8), T((n, k, 3), U8), T((1,), U8),
                 T((1,), U8)) == T((n, m, 3), "int32")
    # A zero point of symbolic length: 1 or the dim, checked when the program runs.
    assert infer("nn.matmul_integer", T((4, 5), U8), T((5, 7), U8), T((c,), U8),
                 T((k,), U8)) == T((4, 7), "int32")


def test_conv2d_integer_types():
    assert infer("nn.conv2d_integer", T((n, 3, 32, 32), U8), T((8, 3, 3, 3), I8), T((), U8),
                 T((8,), I8), padding=[1, 1], strides=[2, 2]) == T((n, 8, 16, 16), "int32")
    assert infer("nn.conv2d_integer", T((n, c, m, k), I8), T((6, 2, 3, 3), I8), T((), I8),
                 T((), I8), groups=3) == T((n, 6, m - 2, k - 2), "int32")


@pytest.mark.parametrize("op, types, attrs, message", [
    ("nn.matmul_integer", (T((4, 5)), T((5, 7), U8), T((), U8), T((), U8)), {},
     r"a must have dtype int8 or uint8, got float32"),
    ("nn.matmul_integer", (T((4, 5), U8), T((6, 7), U8), T((), U8), T((), U8)), {},
     r"inner dims differ: a \(4, 5\) vs b \(6, 7\)"),
    ("nn.matmul_integer", (T((5,), U8), T((5, 7), U8), T((), U8), T((), U8)), {},
     r"a and b must have rank 2 or more"),
    ("nn.matmul_integer", (T((2, 4, 5), U8), T((3, 5, 7), U8), T((), U8), T((), U8)), {},
     r"shapes do not broadcast"),
    ("nn.matmul_integer", (T((4, 5), U8), T((5, 7), U8), T((), I8), T((), U8)), {},
     r"a_zero_point must have the dtype of a \(uint8\), got int8"),
    ("nn.matmul_integer", (T((4, 5), U8), T((5, 7), U8), T((3,), U8), T((), U8)), {},
     r"a_zero_point \(3\) must have 1 entry or one per row of a \(4\)"),
    ("nn.matmul_integer", (T((4, 5), U8), T((5, 7), U8), T((), U8), T((1, 7), U8)), {},
     r"b_zero_point must be a scalar or a vector, got \(1, 7\)"),
    ("nn.conv2d_integer", (T((1, 3, 8, 8), U8), T((4, 3, 3, 3), U8), T((1,), U8), T((), U8)),
     {}, r"data_zero_point must be a scalar, got \(1\)"),
    ("nn.conv2d_integer", (T((1, 3, 8, 8), U8), T((4, 3, 3, 3), U8), T((), U8), T((3,), U8)),
     {}, r"weight_zero_point \(3\) must have 1 entry or one per output channel \(4\)"),
    ("nn.conv2d_integer", (T((1, 4, 8, 8), U8), T((4, 3, 3, 3), U8), T((), U8), T((), U8)),
     {}, r"input channels differ"),
    ("nn.conv2d_integer", (T((1, 3, 2, 2), U8), T((4, 3, 3, 3), U8), T((), U8), T((), U8)),
     {}, r"does not fit in the padded input"),
])
def test_type_errors(op, types, attrs, message):
    with pytest.raises(Exception, match=message):
        infer(op, *types, **attrs)


# --- references against element loops -----------------------------------------------------

def loop_matmul(a, b, za, zb):
    """ONNX MatMulInteger on 2-d operands, one output at a time, in Python ints."""
    za, zb = np.broadcast_to(za, (a.shape[0],)), np.broadcast_to(zb, (b.shape[1],))
    out = np.empty((a.shape[0], b.shape[1]), np.int64)
    for i, j in itertools.product(range(a.shape[0]), range(b.shape[1])):
        out[i, j] = sum((int(a[i, p]) - int(za[i])) * (int(b[p, j]) - int(zb[j]))
                        for p in range(a.shape[1]))
    return out


def to_int32(v):
    return ((np.asarray(v, np.int64) + 2**31) % 2**32 - 2**31).astype(np.int32)


@pytest.mark.parametrize("ad, bd", [(U8, I8), (I8, U8), (U8, U8), (I8, I8)])
@pytest.mark.parametrize("per_row, per_col", [(False, False), (True, True), (False, True)])
def test_matmul_integer_reference(ad, bd, per_row, per_col):
    a, b = rand((5, 9), ad), rand((9, 4), bd)
    za, zb = rand((5,) if per_row else (), ad), rand((4,) if per_col else (), bd)
    np.testing.assert_array_equal(run("nn.matmul_integer", a, b, za, zb),
                                  loop_matmul(a, b, za, zb).astype(np.int32))


def test_matmul_integer_reference_broadcasts_batch_dims():
    a, b = rand((2, 1, 3, 6), U8), rand((4, 6, 5), I8)
    za, zb = np.uint8(200), rand((5,), I8)
    got = run("nn.matmul_integer", a, b, za, zb)
    assert got.shape == (2, 4, 3, 5) and got.dtype == np.int32
    for i, j in itertools.product(range(2), range(4)):
        np.testing.assert_array_equal(got[i, j], loop_matmul(a[i, 0], b[j], za, zb))


def test_matmul_integer_zero_points_at_the_extremes_and_int32_wrap():
    # 255 - 0 times -128 - 127, k times: -65025 * k wraps past int32 at k = 33026.
    k = 70000
    a, b = np.full((2, k), 255, np.uint8), np.full((k, 3), -128, np.int8)
    za, zb = np.array([0, 255], np.uint8), np.int8(127)
    got = run("nn.matmul_integer", a, b, za, zb)
    np.testing.assert_array_equal(got[0], to_int32([255 * -255 * k] * 3))
    np.testing.assert_array_equal(got[1], [0, 0, 0])
    assert got[0, 0] != 255 * -255 * k  # wrapped


def loop_conv(x, w, zx, zw, stride, pad, dilation, groups):
    """ONNX ConvInteger, one output at a time: taps in the padding read x's zero point."""
    nb, ch, h, wd = x.shape
    oc, icg, kh, kw = w.shape
    zw = np.broadcast_to(zw, (oc,))
    oh = (h + pad[0] + pad[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pad[1] + pad[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((nb, oc, oh, ow), np.int64)
    for b, o, y, xx in itertools.product(range(nb), range(oc), range(oh), range(ow)):
        g = o // (oc // groups)
        for ci, i, j in itertools.product(range(icg), range(kh), range(kw)):
            iy = y * stride[0] - pad[0] + i * dilation[0]
            ix = xx * stride[1] - pad[1] + j * dilation[1]
            v = int(x[b, g * icg + ci, iy, ix]) if 0 <= iy < h and 0 <= ix < wd else int(zx)
            out[b, o, y, xx] += (v - int(zx)) * (int(w[o, ci, i, j]) - int(zw[o]))
    return out


@pytest.mark.parametrize("xd, wd", [(U8, I8), (I8, I8), (U8, U8)])
@pytest.mark.parametrize("case", [
    ((1, 2, 5, 5), (3, 2, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((2, 4, 6, 5), (4, 2, 2, 3), (2, 1), (0, 1, 1, 0), (1, 2), 2),
    ((1, 3, 5, 5), (6, 1, 3, 3), (1, 2), (2, 2, 2, 2), (2, 1), 3),  # depthwise, multiplier 2
])
def test_conv2d_integer_reference(xd, wd, case):
    xs, ws, stride, pad, dilation, groups = case
    x, w = rand(xs, xd), rand(ws, wd)
    zx, zw = rand((), xd), rand((ws[0],), wd)
    got = run("nn.conv2d_integer", x, w, zx, zw, strides=stride,
              padding=[pad[0], pad[1], pad[2], pad[3]], dilation=dilation, groups=groups)
    np.testing.assert_array_equal(got, loop_conv(x, w, zx, zw, stride, pad, dilation, groups))


# --- text, build, run --------------------------------------------------------------------

def test_text_round_trip_and_run_time_checks():
    text = """
    def @main(%a: Tensor[(n, 16), uint8], %b: Tensor[(16, m), int8], %za: Tensor[(), uint8],
              %zb: Tensor[(k), int8], %x: Tensor[(n, 3, h, w), uint8],
              %wt: Tensor[(4, 3, 3, 3), int8]) {
      %0 = nn.matmul_integer(%a, %b, %za, %zb);
      %1 = nn.conv2d_integer(%x, %wt, %za, %zb, padding=[1, 1]);
      (%0, %1)
    }"""
    mod = relvm.parse(text)
    assert str(mod["main"].checked_type.ret) == \
        "(Tensor[(n, m), int32], Tensor[(n, 4, h, w), int32])"
    assert relvm.parse(relvm.print_module(mod)) == mod
    vm = relvm.VirtualMachine(relvm.build(mod, backend="numpy"))
    a, b, za, zb = rand((3, 16), U8), rand((16, 4), I8), np.uint8(7), rand((4,), I8)
    x, wt = rand((3, 3, 5, 6), U8), rand((4, 3, 3, 3), I8)
    mm, conv = vm.invoke("main", a, b, za, zb, x, wt)
    np.testing.assert_array_equal(mm, loop_matmul(a, b, za, zb))
    np.testing.assert_array_equal(conv, loop_conv(x, wt, za, zb, (1, 1), (1, 1, 1, 1),
                                                  (1, 1), 1))
    # zb has 4 entries: one per column of b (m = 4) and one per output channel; 3 fits neither.
    with pytest.raises(relvm.RelvmInputError, match=r"input %zb dim 0 \(k\) is 3, but "
                       r"nn.matmul_integer at line 5, column 12 needs it to broadcast against "
                       r"input %b dim 1 \(m\) = 4"):
        vm.invoke("main", a, b, za, rand((3,), I8), x, wt)
