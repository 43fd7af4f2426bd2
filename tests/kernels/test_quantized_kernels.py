"""The integer GEMM (kernels/qgemm.c): nn.matmul_integer and nn.conv2d_integer against their
references, for every mix of int8 and uint8, zero points per tensor, per row, per column and per
output channel (at the ends of their ranges), ragged tiles (rows, columns and k that are no
multiple of the tile's), k large enough for int32 to wrap, constant operands packed once, two
threads, and the portable tile (without AVX-512 VNNI)."""

import numpy as np
import pytest

from relvm.ops import OPS
from relvm.runtime.executable import KernelEntry

QUANTIZED = ["uint8", "int8"]
MIXES = [(a, b) for a in QUANTIZED for b in QUANTIZED]


@pytest.fixture
def q(rng):
    """Values over a quantized dtype's whole range."""
    def make(shape, dtype):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, shape).astype(dtype)
    return make


def make_entry(op, attrs, inputs):
    full = {k: list(v) if isinstance(v, tuple) else v
            for k, v in OPS[op].make_attrs(attrs).items()}
    return KernelEntry(op, op, full, tuple(inputs), ("int32",))


@pytest.mark.parametrize("ad, bd", MIXES)
@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (3, 5, 7), (8, 16, 48), (9, 33, 50),
                                     (17, 64, 129), (64, 300, 17), (2, 0, 3), (0, 4, 5),
                                     (5, 4, 0)])
def test_matmul_integer(check, q, ad, bd, m, k, n):
    a, b = q((m, k), ad), q((k, n), bd)
    check("nn.matmul_integer", {}, [a, b, q((), ad), q((), bd)])
    check("nn.matmul_integer", {}, [a, b, q((m,), ad), q((n,), bd)])
    check("nn.matmul_integer", {}, [a, b, q((1,), ad), q((1,), bd)])


@pytest.mark.parametrize("ad, bd", MIXES)
def test_matmul_integer_zero_points_at_the_ends_of_their_range(check, ad, bd):
    lo_a, hi_a = np.iinfo(ad).min, np.iinfo(ad).max
    lo_b, hi_b = np.iinfo(bd).min, np.iinfo(bd).max
    a = np.array([[lo_a, hi_a] * 10, [hi_a, lo_a] * 10, [hi_a] * 20], ad)
    b = np.array([[lo_b, hi_b, 0] * 11] * 20, bd)[:, :33]
    for za in (lo_a, hi_a):
        for zb in (lo_b, hi_b):
            check("nn.matmul_integer", {}, [a, b, np.array(za, ad), np.array(zb, bd)])
    check("nn.matmul_integer", {}, [a, b, np.array([lo_a, hi_a, 0], ad),
                                    np.array([lo_b, hi_b, 0] * 11, bd)])


def test_matmul_integer_wraps_in_int32(check):
    """(255 - 0) * (-128 - 127) summed 40,000 times is past int32: the sum wraps (as ONNX's
    32-bit accumulation does), in the kernel as in the reference."""
    k = 40000
    a, b = np.full((9, k), 255, np.uint8), np.full((k, 17), -128, np.int8)
    got = check("nn.matmul_integer", {}, [a, b, np.uint8(0), np.int8(127)])[0]
    assert got[0, 0] == np.int32(((255 * -255 * k + 2**31) % 2**32) - 2**31)


@pytest.mark.parametrize("ashape, bshape", [((2, 3, 5, 7), (7, 4)), ((2, 3, 5, 7), (3, 7, 4)),
                                            ((1, 3, 5, 7), (2, 1, 7, 4)), ((4, 9, 3), (1, 3, 20)),
                                            ((3, 9, 5), (3, 5, 20)), ((9, 5), (2, 5, 20)),
                                            ((0, 3, 4), (4, 5))])
def test_matmul_integer_broadcasts_batch_dims(check, q, ashape, bshape):
    m, n = ashape[-2], bshape[-1]
    check("nn.matmul_integer", {}, [q(ashape, "uint8"), q(bshape, "int8"), q((m,), "uint8"),
                                    q((n,), "int8")])


def test_matmul_integer_with_a_constant_b_packs_it_once(q):
    """A constant b is packed once per VM (its packed form kept by the VM's constants) and
    serves every later call, whatever a's rows."""
    from relvm.backends import c
    from relvm.runtime.vm.kernels import Constants

    b = q((70, 45), "int8")
    b.setflags(write=False)
    constants = Constants([b])
    kernel = c.make_kernel(make_entry("nn.matmul_integer", {}, ["uint8", "int8", "uint8", "int8"]),
                           constants)
    op = OPS["nn.matmul_integer"]
    for rows in (1, 13, 40, 13):
        a, za, zb = q((rows, 70), "uint8"), q((), "uint8"), q((45,), "int8")
        out = np.empty((rows, 45), np.int32)
        kernel(a, b, za, zb, out)
        np.testing.assert_array_equal(out, op.reference(op.make_attrs({}), a, b, za, zb))
    assert len(constants._prepared) == 1


def test_matmul_integer_refuses_a_zero_point_of_another_length(c_kernel, q):
    kernel = c_kernel("nn.matmul_integer", {}, ["uint8", "int8", "uint8", "int8"], ["int32"])
    with pytest.raises(ValueError, match=r"b_zero_point has 3 entries; it needs 1 or one per "
                                         r"column of b \(5\)"):
        kernel(q((2, 4), "uint8"), q((4, 5), "int8"), q((), "uint8"), q((3,), "int8"),
               np.empty((2, 5), np.int32))


CONVS = [
    # (data, weight, attrs)
    ((1, 3, 8, 8), (4, 3, 3, 3), {}),
    ((2, 3, 9, 9), (4, 3, 3, 3), {"padding": [1, 1]}),
    ((2, 3, 9, 11), (5, 3, 3, 2), {"padding": [1, 2, 0, 1], "strides": [2, 3]}),
    ((1, 4, 13, 13), (6, 4, 3, 3), {"dilation": [2, 2], "padding": [2, 2]}),
    ((2, 6, 7, 7), (6, 2, 3, 3), {"groups": 3, "padding": [1, 1]}),
    ((2, 8, 10, 10), (8, 1, 3, 3), {"groups": 8, "padding": [1, 1]}),  # depthwise
    ((1, 8, 10, 10), (16, 1, 3, 3), {"groups": 8, "padding": [1, 1], "strides": [2, 2]}),
    ((1, 5, 11, 11), (5, 1, 5, 5), {"groups": 5, "padding": [2, 2], "dilation": [2, 1]}),
    # depthwise 3-tap rows: no columns where all 3 taps read inside; dilated along w
    ((2, 6, 4, 2), (6, 1, 3, 3), {"groups": 6, "padding": [1, 1]}),
    ((1, 3, 6, 9), (6, 1, 3, 3), {"groups": 3, "padding": [0, 3], "dilation": [1, 2]}),
    ((1, 3, 6, 40), (3, 1, 3, 3), {"groups": 3, "padding": [1, 1]}),
    ((3, 16, 7, 7), (32, 16, 1, 1), {}),  # pointwise
    ((1, 17, 5, 6), (20, 17, 2, 2), {"padding": [1, 0]}),  # channels no multiple of 4
    ((1, 64, 14, 14), (40, 64, 3, 3), {"padding": [1, 1]}),  # several chunks of panels
    ((1, 2, 3, 3), (3, 2, 3, 3), {"padding": [3, 3]}),  # windows mostly in the padding
    ((2, 3, 4, 4), (2, 3, 1, 1), {"strides": [5, 5]}),
]


@pytest.mark.parametrize("xd, wd", MIXES)
@pytest.mark.parametrize("data, weight, attrs", CONVS, ids=str)
def test_conv2d_integer(check, q, xd, wd, data, weight, attrs):
    x, w = q(data, xd), q(weight, wd)
    check("nn.conv2d_integer", attrs, [x, w, q((), xd), q((), wd)])
    check("nn.conv2d_integer", attrs, [x, w, q((), xd), q((weight[0],), wd)])


@pytest.mark.parametrize("xd, wd", MIXES)
def test_conv2d_integer_padding_holds_the_zero_point_at_either_end(check, q, xd, wd):
    x, w = q((1, 5, 6, 6), xd), q((7, 5, 3, 3), wd)
    for zx in (np.iinfo(xd).min, np.iinfo(xd).max):
        check("nn.conv2d_integer", {"padding": [2, 1]},
              [x, w, np.array(zx, xd), np.array(np.iinfo(wd).max, wd)])


def test_conv2d_integer_with_constant_weights(q):
    from relvm.backends import c
    from relvm.runtime.vm.kernels import Constants

    w = q((24, 12, 3, 3), "int8")
    constants = Constants([w])
    attrs = {"padding": [1, 1]}
    kernel = c.make_kernel(make_entry("nn.conv2d_integer", attrs,
                                      ["uint8", "int8", "uint8", "int8"]), constants)
    op = OPS["nn.conv2d_integer"]
    for size in (5, 9, 5):
        x, zx, zw = q((2, 12, size, size), "uint8"), q((), "uint8"), q((24,), "int8")
        out = np.empty((2, 24, size, size), np.int32)
        kernel(x, w, zx, zw, out)
        np.testing.assert_array_equal(out, op.reference(op.make_attrs(attrs), x, w, zx, zw))
    assert len(constants._prepared) == 1


def test_products_on_two_threads(check, q, two_threads):
    for _ in range(2):
        check("nn.matmul_integer", {}, [q((3, 37, 90), "int8"), q((90, 70), "int8"),
                                        q((37,), "int8"), q((70,), "int8")])
        check("nn.conv2d_integer", {"padding": [1, 1]},
              [q((3, 8, 15, 15), "uint8"), q((20, 8, 3, 3), "int8"), q((), "uint8"),
               q((), "int8")])


@pytest.mark.parametrize("isa", ["avx2", "sse2"])
def test_products_on_lesser_tiles(rerun_under_isa, isa):
    """The AVX2 tile (16-bit products) and the portable one: RELVM_PGEMM_ISA holds the GEMMs
    to AVX2 or SSE2."""
    rerun_under_isa(isa, __file__, "not lesser_tiles and not two_threads")


def test_the_tile_follows_the_instruction_set_asked_for():
    """RELVM_PGEMM_ISA=avx2 holds the integer GEMM to its AVX2 tile, sse2 to the portable one
    (so the reruns above run them); otherwise AVX-512 VNNI where the CPU has it."""
    import os

    from relvm.backends.native import load

    ffi, lib = load()
    isa = ffi.string(lib.relvm_qgemm_isa()).decode()
    asked = os.environ.get("RELVM_PGEMM_ISA")
    if asked == "sse2":
        assert isa == "portable"
    elif asked == "avx2":
        assert isa == "avx2"
    else:
        assert isa in ("avx512vnni", "avx2", "portable")
