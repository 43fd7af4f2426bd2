"""nn ops: type relations over symbolic dims, and references against hand-written NumPy loops."""

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from relvm.ir import dims as D
from relvm.ir.dims import Sym
from relvm.ir.types import TensorType, TupleType
from relvm.ops import OPS
from relvm.ops.registry import AttrError, OpTypeError
from ophelpers import T, infer, run

n, h, w = Sym("n"), Sym("h"), Sym("w")
RNG = np.random.default_rng(0)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def check_against_type(name, arrays, attrs):
    """The reference's dtype and shape are exactly what the type relation says."""
    out = run(name, *arrays, **attrs)
    t = infer(name, *(T(a.shape, a.dtype.name) for a in arrays), **attrs)
    assert out.dtype.name == t.dtype and out.shape == t.shape
    return out


# --- dense and matmuls ----------------------------------------------------------------------------

def test_dense_symbolic_batch():
    assert infer("nn.dense", T((n, 784)), T((512, 784)), units=512) == T((n, 512))
    assert infer("nn.dense", T((n, 3, 7)), T((5, 7))) == T((n, 3, 5))
    assert infer("nn.dense", T((7,)), T((5, 7))) == T((5,))


def test_dense_unknown_inner_dim_is_left_to_the_vm():
    assert infer("nn.dense", T((n, h)), T((5, 7))) == T((n, 5))


def test_dense_inner_mismatch_names_both_shapes():
    with pytest.raises(OpTypeError, match=r"inner dims differ: data \(n, 784\) vs weight "
                                          r"\(512, 780\)"):
        infer("nn.dense", T((n, 784)), T((512, 780)))


def test_dense_units_and_dtype_errors():
    with pytest.raises(OpTypeError, match=r"units=10 but weight \(12, 4\)"):
        infer("nn.dense", T((n, 4)), T((12, 4)), units=10)
    with pytest.raises(OpTypeError, match="dtypes differ"):
        infer("nn.dense", T((n, 4)), T((12, 4), "float64"))
    with pytest.raises(OpTypeError, match="out_dtype int32 does not suit float32"):
        infer("nn.dense", T((n, 4)), T((12, 4)), out_dtype="int32")


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (0, 5), (2, 3, 5)])
def test_dense_reference(shape):
    x, wt = rand(*shape), rand(11, shape[-1])
    out = check_against_type("nn.dense", [x, wt], {})
    expect = np.zeros(shape[:-1] + (11,))
    for idx in np.ndindex(*shape[:-1]):
        for u in range(11):
            expect[idx + (u,)] = sum(float(x[idx + (k,)]) * float(wt[u, k])
                                     for k in range(shape[-1]))
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-6)


def test_dense_int8_accumulates_into_int32():
    x = RNG.integers(-128, 128, (4, 64)).astype("int8")
    wt = RNG.integers(-128, 128, (3, 64)).astype("int8")
    out = check_against_type("nn.dense", [x, wt], {"out_dtype": "int32"})
    np.testing.assert_array_equal(out, x.astype(np.int64) @ wt.astype(np.int64).T)
    # Without out_dtype the result wraps in int8, as int8 accumulation would.
    wrapped = check_against_type("nn.dense", [x, wt], {})
    np.testing.assert_array_equal(wrapped, (x.astype(np.int64) @ wt.astype(np.int64).T)
                                  .astype(np.int8))


def test_dense_float16():
    x, wt = rand(3, 5, dtype="float16"), rand(2, 5, dtype="float16")
    out = check_against_type("nn.dense", [x, wt], {})
    np.testing.assert_allclose(out, x.astype(np.float64) @ wt.astype(np.float64).T, rtol=2e-3,
                               atol=2e-3)


@pytest.mark.parametrize("ta,tb", list(itertools.product([False, True], repeat=2)))
def test_matmul_transposes(ta, tb):
    a = T((7, n)) if ta else T((n, 7))
    b = T((5, 7)) if tb else T((7, 5))
    assert infer("nn.matmul", a, b, transpose_a=ta, transpose_b=tb) == T((n, 5))
    x = rand(7, 3) if ta else rand(3, 7)
    y = rand(5, 7) if tb else rand(7, 5)
    out = check_against_type("nn.matmul", [x, y], {"transpose_a": ta, "transpose_b": tb})
    np.testing.assert_allclose(out, (x.T if ta else x) @ (y.T if tb else y), rtol=1e-5)


def test_matmul_errors():
    with pytest.raises(OpTypeError, match=r"inner dims differ: tensor_a \(n, 7\) vs tensor_b "
                                          r"\(5, 7\)"):
        infer("nn.matmul", T((n, 7)), T((5, 7)))
    with pytest.raises(OpTypeError, match="tensor_a must have rank 2"):
        infer("nn.matmul", T((2, n, 7)), T((7, 5)))
    with pytest.raises(OpTypeError, match="units=4"):
        infer("nn.matmul", T((n, 7)), T((7, 5)), units=4)


def test_batch_matmul_types():
    # Relay's default transpose_b=True: y is (B, N, K).
    assert infer("nn.batch_matmul", T((n, 3, 7)), T((n, 5, 7))) == T((n, 3, 5))
    assert infer("nn.batch_matmul", T((1, 3, 7)), T((4, 7, 5)), transpose_b=False) == T((4, 3, 5))
    assert infer("nn.batch_matmul", T((4, 7, 3)), T((1, 5, 7)), transpose_a=True) == T((4, 3, 5))
    with pytest.raises(OpTypeError, match=r"batch dims do not broadcast: tensor_a \(2, 3, 7\) "
                                          r"vs tensor_b \(4, 5, 7\)"):
        infer("nn.batch_matmul", T((2, 3, 7)), T((4, 5, 7)))
    with pytest.raises(OpTypeError, match="inner dims differ"):
        infer("nn.batch_matmul", T((2, 3, 7)), T((2, 7, 5)))


def test_batch_matmul_of_higher_ranks_broadcasts_its_batch_dims():
    hd = Sym("hd")
    # Attention's products over (batch, heads, tokens, head dim), every dim symbolic.
    assert infer("nn.batch_matmul", T((n, h, w, hd)), T((n, h, w, hd))) == T((n, h, w, w))
    assert infer("nn.batch_matmul", T((n, h, w, w)), T((n, h, w, hd)),
                 transpose_b=False) == T((n, h, w, hd))
    assert infer("nn.batch_matmul", T((1, 3, 5, 7)), T((2, 1, 7, 4)),
                 transpose_b=False) == T((2, 3, 5, 4))
    with pytest.raises(OpTypeError, match=r"batch dims do not broadcast: tensor_a "
                                          r"\(2, 3, 5, 7\) vs tensor_b \(2, 4, 4, 7\)"):
        infer("nn.batch_matmul", T((2, 3, 5, 7)), T((2, 4, 4, 7)))
    with pytest.raises(OpTypeError, match=r"one rank of at least 3, got \(2, 3, 5, 7\) and "
                                          r"\(3, 4, 7\)"):
        infer("nn.batch_matmul", T((2, 3, 5, 7)), T((3, 4, 7)))
    with pytest.raises(OpTypeError, match="one rank of at least 3"):
        infer("nn.batch_matmul", T((5, 7)), T((4, 7)))


@pytest.mark.parametrize("ba,bb", [((2, 3), (2, 3)), ((1, 3), (2, 1)), ((2, 1), (1, 3)),
                                   ((1, 1), (2, 3)), ((2, 0), (1, 1))])
def test_batch_matmul_reference_of_rank_4(ba, bb):
    x, y = rand(*ba, 2, 5), rand(*bb, 5, 4)
    out = check_against_type("nn.batch_matmul", [x, y], {"transpose_b": False})
    np.testing.assert_allclose(out, np.matmul(x, y), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ba,bb", [(1, 1), (3, 3), (1, 4), (4, 1), (0, 0)])
def test_batch_matmul_reference(ba, bb):
    x, y = rand(ba, 2, 5), rand(bb, 3, 5)
    out = check_against_type("nn.batch_matmul", [x, y], {})
    batch = max(ba, bb) if min(ba, bb) else 0
    expect = np.zeros((batch, 2, 3))
    for b in range(batch):
        expect[b] = x[b if ba > 1 else 0] @ y[b if bb > 1 else 0].T
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-6)


# --- bias_add -------------------------------------------------------------------------------------

def test_bias_add():
    assert infer("nn.bias_add", T((n, 512)), T((512,))) == T((n, 512))
    assert infer("nn.bias_add", T((n, 3, h, w)), T((3,))) == T((n, 3, h, w))
    assert infer("nn.bias_add", T((n, 4, 6)), T((6,)), axis=-1) == T((n, 4, 6))
    with pytest.raises(OpTypeError, match=r"bias length differs from data axis 1: data "
                                          r"\(n, 512\) vs bias \(510\)"):
        infer("nn.bias_add", T((n, 512)), T((510,)))
    with pytest.raises(OpTypeError, match="axis 4 is out of range"):
        infer("nn.bias_add", T((n, 512)), T((512,)), axis=4)
    x, b = rand(2, 3, 4), rand(3)
    out = check_against_type("nn.bias_add", [x, b], {})
    np.testing.assert_array_equal(out, x + b[None, :, None])
    xi, bi = np.arange(6, dtype="int32").reshape(2, 3), np.array([1, 2, 3], "int32")
    np.testing.assert_array_equal(check_against_type("nn.bias_add", [xi, bi], {"axis": -1}),
                                  xi + bi)


# --- conv2d ---------------------------------------------------------------------------------------

def naive_conv2d(x, wt, strides=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """Direct 7-deep loop; pads are (top, left, bottom, right)."""
    nb, c, ih, iw = x.shape
    o, i, kh, kw = wt.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilation, pads
    oh = (ih + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (iw + pl + pr - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((nb, o, oh, ow))
    per_group = o // groups
    for b, oc, y, xx in itertools.product(range(nb), range(o), range(oh), range(ow)):
        g = oc // per_group
        total = 0.0
        for ic, ky, kx in itertools.product(range(i), range(kh), range(kw)):
            iy, ix = y * sh - pt + ky * dh, xx * sw - pl + kx * dw
            if 0 <= iy < ih and 0 <= ix < iw:
                total += float(x[b, g * i + ic, iy, ix]) * float(wt[oc, ic, ky, kx])
        out[b, oc, y, xx] = total
    return out


def test_conv2d_symbolic_output_dims():
    t = infer("nn.conv2d", T((n, 3, h, w)), T((16, 3, 3, 3)), strides=[2, 2], padding=[1, 1])
    assert t.shape[:2] == (D.as_expr(n), 16)
    # (h + 1 + 1 - 3) // 2 + 1 simplifies to (h + 1) // 2.
    assert t.shape[2] == D.floordiv(h + 1, 2)
    assert t.shape[3] == D.floordiv(w + 1, 2)
    t = infer("nn.conv2d", T((n, 3, h, 9)), T((8, 3, 3, 5)), dilation=[2, 1], padding=[0, 1, 2, 3])
    assert t.shape[2] == h - 2  # h + 0 + 2 - 5 + 1
    assert t.shape[3] == 9      # 9 + 1 + 3 - 5 + 1
    assert infer("nn.conv2d", T((n, 3, 8, 8)), T((8, 3, 3, 3)), padding=1) == T((n, 8, 8, 8))


def test_conv2d_symbolic_kernel():
    k = Sym("k")
    t = infer("nn.conv2d", T((n, 3, h, h)), T((8, 3, k, k)))
    assert t.shape[2] == h - k + 1


def test_conv2d_symbolic_output_evaluates_like_the_loop():
    t = infer("nn.conv2d", T((1, 1, h, w)), T((1, 1, 3, 2)), strides=[3, 2], padding=[2, 1, 0, 1],
              dilation=[1, 2])
    for hv, wv in [(1, 1), (2, 5), (7, 8), (13, 4)]:
        x, wt = rand(1, 1, hv, wv), rand(1, 1, 3, 2)
        out = run("nn.conv2d", x, wt, strides=[3, 2], padding=[2, 1, 0, 1], dilation=[1, 2])
        env = {h: hv, w: wv}
        assert out.shape[2:] == (D.evaluate(t.shape[2], env), D.evaluate(t.shape[3], env))


CONV_CASES = [
    # (x shape, weight shape, attrs)
    ((1, 1, 1, 1), (1, 1, 1, 1), {}),
    ((2, 3, 7, 5), (4, 3, 3, 3), {}),
    ((1, 3, 7, 5), (4, 3, 3, 3), {"padding": [1, 1], "strides": [2, 2]}),
    ((1, 2, 11, 13), (5, 2, 3, 2), {"padding": [2, 0, 1, 3], "strides": [3, 2]}),
    ((1, 2, 11, 7), (3, 2, 3, 3), {"dilation": [2, 3], "padding": 2}),
    ((2, 6, 5, 5), (4, 3, 3, 3), {"groups": 2, "padding": [1]}),
    ((1, 4, 6, 7), (4, 1, 3, 3), {"groups": 4, "padding": [1, 1], "strides": 2}),  # depthwise
    ((1, 3, 5, 5), (6, 1, 2, 2), {"groups": 3, "channels": 6, "kernel_size": [2, 2]}),
    ((0, 3, 5, 5), (2, 3, 3, 3), {"padding": [1, 1]}),  # empty batch
]


@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
def test_conv2d_reference(xs, ws, attrs):
    x, wt = rand(*xs), rand(*ws)
    out = check_against_type("nn.conv2d", [x, wt], attrs)
    pad = attrs.get("padding", 0)
    pad = [pad] if isinstance(pad, int) else pad
    pads = {1: pad * 4, 2: pad * 2, 4: pad}[len(pad)]
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
    expect = naive_conv2d(x, wt, pair(attrs.get("strides", 1)), tuple(pads),
                          pair(attrs.get("dilation", 1)), attrs.get("groups", 1))
    np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
def test_conv2d_nhwc_reference_is_the_nchw_one_transposed(xs, ws, attrs):
    """data_layout="NHWC": data (n, h, w, c), output (n, oh, ow, oc), the same numbers."""
    x, wt = rand(*xs), rand(*ws)
    nchw = run("nn.conv2d", x, wt, **attrs)
    nhwc = check_against_type("nn.conv2d", [np.ascontiguousarray(x.transpose(0, 2, 3, 1)), wt],
                              {**attrs, "data_layout": "NHWC"})
    np.testing.assert_array_equal(nhwc, nchw.transpose(0, 2, 3, 1))


def test_conv2d_nhwc_symbolic_output_dims():
    t = infer("nn.conv2d", T((n, h, w, 3)), T((16, 3, 3, 3)), strides=[2, 2], padding=[1, 1],
              data_layout="NHWC")
    assert t.shape[0] == D.as_expr(n) and t.shape[3] == 16
    assert t.shape[1] == D.floordiv(h + 1, 2) and t.shape[2] == D.floordiv(w + 1, 2)
    with pytest.raises(OpTypeError, match="input channels differ"):
        infer("nn.conv2d", T((n, 3, 8, 8)), T((16, 3, 3, 3)), data_layout="NHWC")
    with pytest.raises(OpTypeError, match="out_layout 'NCHW' must be empty or the data layout"):
        infer("nn.conv2d", T((n, h, w, 3)), T((16, 3, 3, 3)), data_layout="NHWC",
              out_layout="NCHW")
    with pytest.raises(AttrError, match="data_layout"):
        infer("nn.conv2d", T((n, h, w, 3)), T((16, 3, 3, 3)), data_layout="NCWH")


def test_conv2d_float64_and_float16_dtypes():
    x, wt = rand(1, 2, 4, 4, dtype="float64"), rand(3, 2, 3, 3, dtype="float64")
    out = check_against_type("nn.conv2d", [x, wt], {})
    np.testing.assert_allclose(out, naive_conv2d(x, wt), rtol=1e-12)
    x16, w16 = x.astype("float16"), wt.astype("float16")
    assert check_against_type("nn.conv2d", [x16, w16], {}).dtype == np.float16
    assert check_against_type("nn.conv2d", [x16, w16], {"out_dtype": "float32"}).dtype \
        == np.float32


def test_conv2d_errors():
    with pytest.raises(OpTypeError, match=r"input channels differ: data \(n, 3, h, w\) vs weight "
                                          r"\(8, 4, 3, 3\) with groups=1"):
        infer("nn.conv2d", T((n, 3, h, w)), T((8, 4, 3, 3)))
    with pytest.raises(OpTypeError, match=r"weight \(6, 2, 3, 3\) are not a multiple of groups=4"):
        infer("nn.conv2d", T((n, 8, h, w)), T((6, 2, 3, 3)), groups=4)
    with pytest.raises(OpTypeError, match=r"channels=16 but weight \(8, 3, 3, 3\)"):
        infer("nn.conv2d", T((n, 3, h, w)), T((8, 3, 3, 3)), channels=16)
    with pytest.raises(OpTypeError, match=r"kernel_size=\[5, 5\] but weight \(8, 3, 3, 3\)"):
        infer("nn.conv2d", T((n, 3, h, w)), T((8, 3, 3, 3)), kernel_size=[5, 5])
    with pytest.raises(OpTypeError, match=r"does not fit in the padded input: data "
                                          r"\(n, 3, 2, w\)"):
        infer("nn.conv2d", T((n, 3, 2, w)), T((8, 3, 3, 3)))
    with pytest.raises(OpTypeError, match="padding must be 1, 2 or 4 ints"):
        infer("nn.conv2d", T((n, 3, h, w)), T((8, 3, 3, 3)), padding=[1, 1, 1])
    with pytest.raises(OpTypeError, match="strides must be 1 or 2 ints >= 1"):
        infer("nn.conv2d", T((n, 3, h, w)), T((8, 3, 3, 3)), strides=[0, 1])
    with pytest.raises(OpTypeError, match="data must have a float dtype"):
        infer("nn.conv2d", T((n, 3, h, w), "int32"), T((8, 3, 3, 3), "int32"))
    with pytest.raises(OpTypeError, match="weight must have rank 4"):
        infer("nn.conv2d", T((n, 3, h, w)), T((8, 3, 3)))


def test_conv2d_run_time_checks():
    with pytest.raises(ValueError, match="does not fit"):
        run("nn.conv2d", rand(1, 1, 2, 2), rand(1, 1, 3, 3))
    with pytest.raises(ValueError, match="input channels differ"):
        run("nn.conv2d", rand(1, 2, 4, 4), rand(1, 3, 3, 3))


def test_layout_attrs():
    attrs = OPS["nn.conv2d"].make_attrs({"data_layout": "NCHW", "kernel_layout": "OIHW",
                                          "out_layout": "", "out_dtype": ""})
    assert attrs.data_layout == "NCHW"
    assert OPS["nn.conv2d"].make_attrs({"data_layout": "NHWC"}).data_layout == "NHWC"
    with pytest.raises(AttrError, match="'data_layout' expects one of 'NCHW', 'NHWC', got 'NCWH'"):
        OPS["nn.conv2d"].make_attrs({"data_layout": "NCWH"})
    with pytest.raises(AttrError, match="layout"):
        OPS["nn.max_pool2d"].make_attrs({"layout": "NHWC"})
    # Printed Relay writes lists; they normalize to the tuple defaults.
    conv = OPS["nn.conv2d"]
    assert conv.non_default_attrs(conv.make_attrs({"strides": [1, 1], "padding": [0, 0]})) == {}


# --- pooling --------------------------------------------------------------------------------------

def torch_out_len(size, k, s, d, p0, p1, ceil_mode):
    """PyTorch's pooling_output_shape, generalized to asymmetric pads."""
    num = size + p0 + p1 - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = num // s + 1
    if ceil_mode and (out - 1) * s >= size + p0:
        out -= 1
    return out


def naive_pool(x, kind, k, s, d, pads, ceil_mode, include_pad=False):
    """Loops over windows; pads are (top, left, bottom, right). PyTorch's CPU semantics."""
    nb, c, ih, iw = x.shape
    pt, pl, pb, pr = pads
    oh = torch_out_len(ih, k[0], s[0], d[0], pt, pb, ceil_mode)
    ow = torch_out_len(iw, k[1], s[1], d[1], pl, pr, ceil_mode)
    out = np.zeros((nb, c, oh, ow))
    for b, ch, y, xx in itertools.product(range(nb), range(c), range(oh), range(ow)):
        vals, padded_taps = [], 0
        for ky, kx in itertools.product(range(k[0]), range(k[1])):
            iy, ix = y * s[0] - pt + ky * d[0], xx * s[1] - pl + kx * d[1]
            if -pt <= iy < ih + pb and -pl <= ix < iw + pr:
                padded_taps += 1
            if 0 <= iy < ih and 0 <= ix < iw:
                vals.append(float(x[b, ch, iy, ix]))
        if kind == "max":
            out[b, ch, y, xx] = max(vals) if vals else -np.inf
        elif vals:
            out[b, ch, y, xx] = sum(vals) / (padded_taps if include_pad else len(vals))
    return out


def test_pool_symbolic_output_dims():
    t = infer("nn.max_pool2d", T((n, 3, h, w)), pool_size=[3, 3], strides=[2, 2],
              padding=[1, 1])
    assert t == T((n, 3, D.floordiv(h + 1, 2), D.floordiv(w + 1, 2)))
    t = infer("nn.avg_pool2d", T((n, 3, h, w)), pool_size=[2, 2], strides=[2, 2])
    assert t == T((n, 3, D.floordiv(h, 2), D.floordiv(w, 2)))
    t = infer("nn.max_pool2d", T((n, 3, h, w)), pool_size=[2, 2], strides=[2, 2], ceil_mode=True)
    assert t == T((n, 3, D.ceildiv(h, 2), D.ceildiv(w, 2)))
    assert infer("nn.global_avg_pool2d", T((n, 5, h, w))) == T((n, 5, 1, 1))
    assert infer("nn.global_max_pool2d", T((n, 5, h, w))) == T((n, 5, 1, 1))


@given(size=st.integers(0, 30), k=st.integers(1, 6), s=st.integers(1, 5), d=st.integers(1, 3),
       p0=st.integers(0, 6), p1=st.integers(0, 6), ceil_mode=st.booleans())
def test_symbolic_pool_length_matches_pytorch_rule(size, k, s, d, p0, p1, ceil_mode):
    if size + p0 + p1 < d * (k - 1) + 1:
        return  # no window fits: a type error (or a run-time error for a symbolic size)
    t = infer("nn.max_pool2d", T((1, 1, h, 1)), pool_size=[k, 1], strides=[s, 1],
              dilation=[d, 1], padding=[p0, 0, p1, 0], ceil_mode=ceil_mode)
    assert D.evaluate(t.shape[2], {h: size}) == torch_out_len(size, k, s, d, p0, p1, ceil_mode)


POOL_CASES = [
    # (x shape, attrs)
    ((1, 1, 1, 1), {}),
    ((2, 3, 7, 5), {"pool_size": [2, 2], "strides": [2, 2]}),
    ((1, 2, 7, 5), {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1]}),
    ((1, 2, 7, 6), {"pool_size": [3, 2], "strides": [2, 2], "ceil_mode": True}),
    ((1, 2, 6, 6), {"pool_size": [3, 3], "strides": [2, 2], "padding": 1, "ceil_mode": True}),
    ((1, 1, 5, 5), {"pool_size": [2, 2], "strides": [3, 3], "padding": [1], "ceil_mode": True}),
    ((1, 2, 11, 13), {"pool_size": [3, 2], "strides": [2, 3], "padding": [2, 0, 1, 1]}),
    ((1, 2, 9, 8), {"pool_size": [2, 3], "dilation": [2, 2], "padding": [1, 1], "ceil_mode": True}),
    ((1, 1, 4, 4), {"pool_size": 2, "padding": [3, 0, 0, 0]}),  # windows entirely in padding
    ((0, 3, 5, 5), {"pool_size": [2, 2]}),
]


@pytest.mark.parametrize("xs,attrs", POOL_CASES)
@pytest.mark.parametrize("kind,include_pad", [("max", False), ("avg", False), ("avg", True)])
def test_pool_reference(xs, attrs, kind, include_pad):
    x = rand(*xs)
    full = dict(attrs)
    if kind == "avg":
        full["count_include_pad"] = include_pad
    out = check_against_type(f"nn.{kind}_pool2d", [x], full)
    op = OPS[f"nn.{kind}_pool2d"]
    a = op.make_attrs(full)
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v) * (2 // len(v))  # noqa: E731
    pad = [a.padding] if isinstance(a.padding, int) else list(a.padding)
    pads = {1: pad * 4, 2: pad * 2, 4: pad}[len(pad)]
    expect = naive_pool(x, kind, pair(a.pool_size), pair(a.strides), pair(a.dilation), pads,
                        a.ceil_mode, include_pad)
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-6)


def test_avg_pool_count_include_pad_by_hand():
    x = np.ones((1, 1, 2, 2), "float32")
    attrs = {"pool_size": [2, 2], "strides": [1, 1], "padding": [1, 1]}
    np.testing.assert_allclose(run("nn.avg_pool2d", x, **attrs)[0, 0], np.ones((3, 3)))
    with_pad = run("nn.avg_pool2d", x, count_include_pad=True, **attrs)[0, 0]
    np.testing.assert_allclose(with_pad, [[.25, .5, .25], [.5, 1, .5], [.25, .5, .25]])


def test_pool_dtypes():
    x = rand(1, 2, 5, 5, dtype="float16")
    assert check_against_type("nn.avg_pool2d", [x], {"pool_size": [2, 2]}).dtype == np.float16
    assert check_against_type("nn.max_pool2d", [x], {"pool_size": [2, 2]}).dtype == np.float16
    with pytest.raises(OpTypeError, match="data must have a float dtype"):
        infer("nn.max_pool2d", T((n, 3, h, w), "int32"))


def test_pool_errors():
    with pytest.raises(OpTypeError, match=r"pool_size \(3, 3\) with dilation \(1, 1\) does not "
                                          r"fit in the padded input: data \(n, 3, 2, w\)"):
        infer("nn.max_pool2d", T((n, 3, 2, w)), pool_size=[3, 3])
    with pytest.raises(OpTypeError, match="data must have rank 4"):
        infer("nn.avg_pool2d", T((n, 3, h)))
    with pytest.raises(ValueError, match="does not fit"):
        run("nn.max_pool2d", rand(1, 1, 2, 2), pool_size=[3, 3])


def test_global_pools():
    x = rand(2, 3, 5, 7)
    np.testing.assert_allclose(check_against_type("nn.global_avg_pool2d", [x], {}),
                               x.mean(axis=(2, 3), keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(check_against_type("nn.global_max_pool2d", [x], {}),
                                  x.max(axis=(2, 3), keepdims=True))
    empty = rand(0, 3, 4, 4)
    assert check_against_type("nn.global_max_pool2d", [empty], {}).shape == (0, 3, 1, 1)
    assert np.isnan(run("nn.global_avg_pool2d", rand(1, 2, 0, 3))).all()
    with pytest.raises(ValueError, match="empty image"):
        run("nn.global_max_pool2d", rand(1, 2, 0, 3))


# --- normalization, softmax -------------------------------------------------------------------

def test_batch_norm():
    c = T((3,))
    t = infer("nn.batch_norm", T((n, 3, h, w)), c, c, c, c)
    assert t == TupleType((T((n, 3, h, w)), T((3,)), T((3,))))
    t = infer("nn.batch_norm", T((n, 5)), *[T((5,))] * 4, axis=-1)
    assert t.fields[1] == T((5,))
    with pytest.raises(OpTypeError, match=r"moving_var length differs from data axis 1: data "
                                          r"\(n, 3, h, w\) vs moving_var \(4\)"):
        infer("nn.batch_norm", T((n, 3, h, w)), c, c, c, T((4,)))
    x, g, b, m, v = rand(2, 3, 4, 5), rand(3), rand(3), rand(3), np.abs(rand(3)) + 0.1
    y, mm, mv = run("nn.batch_norm", x, g, b, m, v, epsilon=1e-3)
    for ch in range(3):
        expect = (x[:, ch] - m[ch]) / np.sqrt(v[ch] + 1e-3) * g[ch] + b[ch]
        np.testing.assert_allclose(y[:, ch], expect, rtol=1e-5, atol=1e-5)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(mm, m)
    np.testing.assert_array_equal(mv, v)
    y, _, _ = run("nn.batch_norm", x, g, b, m, v, center=False, scale=False)
    np.testing.assert_allclose(y, (x - m[:, None, None]) / np.sqrt(v[:, None, None] + 1e-5),
                               rtol=1e-5, atol=1e-5)


def test_layer_norm():
    assert infer("nn.layer_norm", T((n, 7)), T((7,)), T((7,))) == T((n, 7))
    with pytest.raises(OpTypeError, match=r"gamma length differs"):
        infer("nn.layer_norm", T((n, 7)), T((6,)), T((7,)))
    x, g, b = rand(3, 4, 7), rand(4), rand(4)
    out = check_against_type("nn.layer_norm", [x, g, b], {"axis": 1})
    for i, k in itertools.product(range(3), range(7)):
        col = x[i, :, k].astype(np.float64)
        expect = (col - col.mean()) / np.sqrt(col.var() + 1e-5) * g + b
        np.testing.assert_allclose(out[i, :, k], expect, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,axis", [((1,), -1), ((3, 7), -1), ((3, 7), 0), ((2, 3, 4), 1),
                                        ((0, 4), 1), ((4, 0), 1)])
def test_softmax_and_log_softmax(shape, axis):
    x = rand(*shape) * 10
    out = check_against_type("nn.softmax", [x], {"axis": axis})
    e = np.exp(x.astype(np.float64))
    np.testing.assert_allclose(out, e / e.sum(axis=axis, keepdims=True), rtol=1e-5)
    log = check_against_type("nn.log_softmax", [x], {"axis": axis})
    np.testing.assert_allclose(log, np.log(e / e.sum(axis=axis, keepdims=True)), rtol=1e-5,
                               atol=1e-5)


def test_softmax_is_stable():
    x = np.array([[1000.0, 1000.0, -1000.0]], "float32")
    np.testing.assert_allclose(run("nn.softmax", x), [[0.5, 0.5, 0.0]])
    log2 = np.log(2)
    np.testing.assert_allclose(run("nn.log_softmax", x), [[-log2, -log2, -2000 - log2]], rtol=1e-6)
    assert run("nn.softmax", x.astype("float16")).dtype == np.float16
    with pytest.raises(OpTypeError, match="data must have a float dtype"):
        infer("nn.softmax", T((n, 4), "int32"))
    with pytest.raises(OpTypeError, match="axis 2 is out of range"):
        infer("nn.softmax", T((n, 4)), axis=2)


# --- batch_flatten, pad, dropout --------------------------------------------------------------

def test_batch_flatten():
    assert infer("nn.batch_flatten", T((n, 3, h, w))) == T((n, h * w * 3))
    assert infer("nn.batch_flatten", T((n,))) == T((n, 1))
    assert infer("nn.batch_flatten", T((n, 2, 5))) == T((n, 10))
    x = rand(0, 3, 4)
    assert check_against_type("nn.batch_flatten", [x], {}).shape == (0, 12)
    x = rand(2, 3, 4)
    np.testing.assert_array_equal(check_against_type("nn.batch_flatten", [x], {}),
                                  x.reshape(2, 12))
    with pytest.raises(OpTypeError, match="rank >= 1"):
        infer("nn.batch_flatten", T(()))


def test_pad_types():
    v = T(())
    assert infer("nn.pad", T((n, 3)), v, pad_width=[[0, 0], [1, 2]]) == T((n, 6))
    assert infer("nn.pad", T((n, h)), v, pad_width=[[1, 1], [2, 0]]) == T((n + 2, h + 2))
    with pytest.raises(OpTypeError, match=r"pad_width must give \(before, after\) for each of "
                                          r"the 2 axes of data \(n, 3\)"):
        infer("nn.pad", T((n, 3)), v, pad_width=[[1, 1]])
    with pytest.raises(OpTypeError, match="must not be negative"):
        infer("nn.pad", T((n, 3)), v, pad_width=[[0, 0], [-1, 0]])
    with pytest.raises(OpTypeError, match="pad_value must be a scalar"):
        infer("nn.pad", T((n, 3)), T((1,)), pad_width=[[0, 0], [1, 1]])
    with pytest.raises(OpTypeError, match=r"pad_mode='reflect' cannot pad axis 1 of data "
                                          r"\(n, 3\) by \[0, 3\]"):
        infer("nn.pad", T((n, 3)), v, pad_width=[[0, 0], [0, 3]], pad_mode="reflect")
    with pytest.raises(AttrError, match="pad_mode"):
        OPS["nn.pad"].make_attrs({"pad_width": [[0, 0]], "pad_mode": "wrap"})


def naive_pad(x, widths, mode, value):
    """Index arithmetic per output element: source index for each output position."""
    out = np.zeros([s + b + a for s, (b, a) in zip(x.shape, widths)], x.dtype)
    for idx in np.ndindex(*out.shape):
        src = []
        for i, (size, (before, _)) in zip(idx, zip(x.shape, widths)):
            j = i - before
            if mode == "edge":
                j = min(max(j, 0), size - 1)
            elif mode == "reflect":
                j = -j if j < 0 else (2 * (size - 1) - j if j >= size else j)
            src.append(j)
        inside = all(0 <= j < s for j, s in zip(src, x.shape))
        out[idx] = x[tuple(src)] if inside else value
    return out


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
@pytest.mark.parametrize("shape,widths", [((1,), [[0, 0]]), ((3, 4), [[1, 2], [0, 3]]),
                                          ((2, 5, 3), [[1, 1], [2, 4], [0, 2]])])
def test_pad_reference(mode, shape, widths):
    if mode == "reflect" and any(max(w) >= s for s, w in zip(shape, widths)):
        pytest.skip("reflect needs pads shorter than the axis")
    x = rand(*shape)
    value = np.array(7.5, "float32")
    out = check_against_type("nn.pad", [x, value], {"pad_width": widths, "pad_mode": mode})
    np.testing.assert_array_equal(out, naive_pad(x, widths, mode, 7.5))


def test_pad_run_time_checks_and_ints():
    xi = np.arange(6, dtype="int32").reshape(2, 3)
    out = check_against_type("nn.pad", [xi, np.array(-1, "int32")], {"pad_width": [[1, 0], [0, 1]]})
    np.testing.assert_array_equal(out, [[-1, -1, -1, -1], [0, 1, 2, -1], [3, 4, 5, -1]])
    with pytest.raises(ValueError, match="cannot pad axis 1"):
        run("nn.pad", rand(2, 2), np.array(0, "float32"), pad_width=[[0, 0], [2, 0]],
            pad_mode="reflect")
    with pytest.raises(ValueError, match="cannot pad axis 0"):
        run("nn.pad", rand(0, 2), np.array(0, "float32"), pad_width=[[1, 0], [0, 0]],
            pad_mode="edge")
    assert run("nn.pad", rand(0, 2), np.array(0, "float32"), pad_width=[[0, 0], [1, 1]],
               pad_mode="edge").shape == (0, 4)


def test_dropout_is_identity_with_a_mask():
    t = infer("nn.dropout", T((n, 4)), rate=0.3)
    assert t == TupleType((T((n, 4)), T((n, 4))))
    x = rand(3, 4)
    out, mask = run("nn.dropout", x, rate=0.3)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(mask, np.ones((3, 4)))
    assert mask.dtype == np.float32
    with pytest.raises(OpTypeError, match="float dtype"):
        infer("nn.dropout", T((n, 4), "int32"))


def test_patterns():
    expect = {"nn.dense": "out_fusable", "nn.matmul": "out_fusable",
              "nn.batch_matmul": "out_fusable", "nn.conv2d": "out_fusable",
              "nn.bias_add": "broadcast", "nn.batch_flatten": "injective", "nn.pad": "injective",
              "nn.max_pool2d": "opaque", "nn.softmax": "opaque", "nn.dropout": "opaque"}
    for name, pattern in expect.items():
        assert OPS[name].pattern == pattern, name


# --- random geometry --------------------------------------------------------------------------

geometry = st.fixed_dictionaries({
    "size": st.tuples(st.integers(1, 9), st.integers(1, 9)),
    "k": st.tuples(st.integers(1, 4), st.integers(1, 4)),
    "s": st.tuples(st.integers(1, 3), st.integers(1, 3)),
    "d": st.tuples(st.integers(1, 2), st.integers(1, 2)),
    "pads": st.tuples(*[st.integers(0, 3)] * 4),
})


def fits(g):
    return all(size + g["pads"][i] + g["pads"][i + 2] >= g["d"][i] * (g["k"][i] - 1) + 1
               for i, size in enumerate(g["size"]))


@given(g=geometry, groups=st.sampled_from([1, 2]))
def test_conv2d_random_geometry(g, groups):
    if not fits(g):
        return
    x, wt = rand(1, 2 * groups, *g["size"]), rand(2 * groups, 2, *g["k"])
    attrs = {"strides": list(g["s"]), "dilation": list(g["d"]), "padding": list(g["pads"]),
             "groups": groups}
    out = check_against_type("nn.conv2d", [x, wt], attrs)
    np.testing.assert_allclose(out, naive_conv2d(x, wt, g["s"], g["pads"], g["d"], groups),
                               rtol=1e-4, atol=1e-5)


@given(g=geometry, kind=st.sampled_from(["max", "avg", "avg_pad"]), ceil_mode=st.booleans())
def test_pool_random_geometry(g, kind, ceil_mode):
    if not fits(g):
        return
    x = rand(1, 2, *g["size"])
    attrs = {"pool_size": list(g["k"]), "strides": list(g["s"]), "dilation": list(g["d"]),
             "padding": list(g["pads"]), "ceil_mode": ceil_mode}
    if kind != "max":
        attrs["count_include_pad"] = kind == "avg_pad"
    out = check_against_type(f"nn.{kind[:3]}_pool2d", [x], attrs)
    expect = naive_pool(x, kind[:3], g["k"], g["s"], g["d"], g["pads"], ceil_mode,
                        kind == "avg_pad")
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-6)


# --- nn.max_pool2d_with_argmax --------------------------------------------------------------------

def test_max_pool2d_with_argmax_type_and_reference():
    n, h = Sym("n"), Sym("h")
    t = OPS["nn.max_pool2d_with_argmax"]
    got = t.infer(t.make_attrs({"pool_size": [2, 2], "strides": [2, 2]}),
                  TensorType((n, 3, h, 8), "float32"))
    assert got.fields[1] == TensorType(got.fields[0].shape, "int64")
    assert got.fields[0] == OPS["nn.max_pool2d"].infer(
        OPS["nn.max_pool2d"].make_attrs({"pool_size": [2, 2], "strides": [2, 2]}),
        TensorType((n, 3, h, 8), "float32"))
    with pytest.raises(AttrError, match="'storage_order' expects 0 or 1"):
        t.make_attrs({"storage_order": 2})
    # ONNX's own example (test_maxpool_with_argmax_2d_precomputed_strides), then by a loop.
    x = np.arange(1, 26, dtype=np.float32).reshape(1, 1, 5, 5)
    for order, want in ((0, [[6, 8], [16, 18]]), (1, [[6, 16], [8, 18]])):
        values, index = t.reference(t.make_attrs({"pool_size": [2, 2], "strides": [2, 2],
                                                  "storage_order": order}), x)
        assert values[0, 0].tolist() == [[7, 9], [17, 19]] and index[0, 0].tolist() == want
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    attrs = t.make_attrs({"pool_size": [3, 2], "strides": [2, 1], "padding": [1, 0, 1, 1],
                          "dilation": [1, 2], "storage_order": 1})
    values, index = t.reference(attrs, x)
    for b, c, i, j in itertools.product(*(range(k) for k in values.shape)):
        taps = [(r, q) for r in range(i * 2 - 1, i * 2 - 1 + 3)
                for q in range(j, j + 4, 2) if 0 <= r < 7 and 0 <= q < 6]
        r, q = max(taps, key=lambda p: (x[b, c, p[0], p[1]], -taps.index(p)))
        assert values[b, c, i, j] == x[b, c, r, q]
        assert index[b, c, i, j] == (b * 3 + c) * 42 + r + q * 7


# --- nn.max_unpool --------------------------------------------------------------------------------

def test_max_unpool_types_and_errors():
    n, c, h = Sym("n"), Sym("c"), Sym("h")
    op = OPS["nn.max_unpool"]

    def infer(shape, ishape=None, **attrs):
        return op.infer(op.make_attrs(attrs), TensorType(shape, "float32"),
                        TensorType(ishape or shape, "int64"))

    assert infer((n, c, h, 3), kernel_shape=[2, 2], strides=[2, 2]) == \
        TensorType((n, c, h * 2, 6), "float32")
    assert infer((n, 1, h), kernel_shape=[3], strides=[2], pads=[1, 0]) == \
        TensorType((n, 1, h * 2), "float32")
    assert infer((n, 1, 2, 2, 2), kernel_shape=[2, 2, 2], output_size=[5, 4, 4]) == \
        TensorType((n, 1, 5, 4, 4), "float32")
    with pytest.raises(OpTypeError, match=r"output_size \[2, 4\] is smaller than the unpooled "
                                          r"size \[4, 4\]"):
        infer((1, 1, 2, 2), kernel_shape=[2, 2], strides=[2, 2], output_size=[2, 4])
    with pytest.raises(OpTypeError, match=r"indices \(1, 1, 3\) must have data's shape"):
        infer((1, 1, 2), (1, 1, 3), kernel_shape=[2])
    with pytest.raises(OpTypeError, match=r"must give 2 spatial axes"):
        infer((1, 1, 2, 2), kernel_shape=[2])
    with pytest.raises(OpTypeError, match=r"data must be \(N, C, spatial...\)"):
        infer((1, 2), kernel_shape=[2])


def test_max_unpool_reference():
    op = OPS["nn.max_unpool"]
    attrs = op.make_attrs({"kernel_shape": [2, 2], "strides": [2, 2]})
    x = np.array([[[[5, 6], [7, 8]]], [[[1, 2], [3, 4]]]], np.float32)
    i = np.array([[[[5, 7], [13, 15]]], [[[16, 17], [30, 16]]]])
    y = op.reference(attrs, x, i)
    assert y.shape == (2, 1, 4, 4)
    assert y.reshape(-1)[[5, 7, 13, 15, 17, 30, 16]].tolist() == [5, 6, 7, 8, 2, 3, 4]
    assert np.count_nonzero(y) == 7  # 16 written twice: the last value stays
    with pytest.raises(ValueError, match=r"nn.max_unpool: index 32 is out of range for an "
                                         r"unpooled tensor of 32 elements \(2, 1, 4, 4\)"):
        op.reference(attrs, x, np.where(i == 30, 32, i))
    # output_size: the unpooled (4, 4) planes at the start of (5, 6) ones (onnx's reference).
    big = op.reference(op.make_attrs({"kernel_shape": [2, 2], "strides": [2, 2],
                                      "output_size": [5, 6]}), x, i)
    assert big.shape == (2, 1, 5, 6) and np.count_nonzero(big[:, :, 4:]) == 0
    np.testing.assert_array_equal(big[:, :, :4, :4], y)
    assert np.count_nonzero(big[:, :, :, 4:]) == 0
