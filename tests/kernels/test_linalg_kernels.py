"""C matrix products (OpenBLAS) and conv2d against the references."""

import time

import numpy as np
import pytest

GEMM_TOL = dict(rtol=1e-4, atol=1e-5, scaled=True)
INTS = ["int64", "int32", "int8", "uint8", "int16", "uint16", "uint32", "uint64"]


@pytest.mark.parametrize("data,units", [((1, 8), 3), ((5, 8), 3), ((1, 1), 1), ((7, 13), 11),
                                        ((2, 3, 17), 5), ((0, 8), 4), ((4, 0), 3), ((3, 8), 0),
                                        ((1, 1031), 257), ((257, 1), 3), ((64, 768), 3072)],
                         ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dense(check, rand, data, units, dtype):
    check("nn.dense", {}, [rand(data, dtype), rand((units, data[-1]), dtype)], **GEMM_TOL)


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("out_dtype", ["", "int32", "int64", "int8", "uint16", "uint64"])
def test_dense_integers_wrap(check, rand, dtype, out_dtype):
    check("nn.dense", {"out_dtype": out_dtype},
          [rand((5, 9), dtype, -100, 100), rand((4, 9), dtype, -100, 100)])


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("m,k,n", [(1, 7, 5), (6, 7, 1), (5, 1, 3), (17, 31, 13), (0, 3, 4),
                                   (3, 0, 4), (128, 96, 64)])
def test_matmul_transposes(check, rand, ta, tb, m, k, n):
    a = rand((k, m) if ta else (m, k))
    b = rand((n, k) if tb else (k, n))
    check("nn.matmul", {"transpose_a": ta, "transpose_b": tb}, [a, b], **GEMM_TOL)
    check("nn.matmul", {"transpose_a": ta, "transpose_b": tb},
          [a.astype(np.int32), b.astype(np.int32)])


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("ba,bb", [(1, 1), (4, 4), (1, 4), (4, 1), (0, 0), (0, 1)])
@pytest.mark.parametrize("m,k,n", [(1, 5, 3), (7, 5, 1), (12, 64, 12)])
def test_batch_matmul(check, rand, ta, tb, ba, bb, m, k, n):
    a = rand((ba, k, m) if ta else (ba, m, k))
    b = rand((bb, n, k) if tb else (bb, k, n))
    check("nn.batch_matmul", {"transpose_a": ta, "transpose_b": tb}, [a, b], **GEMM_TOL)


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("ba,bb", [((2, 3), (2, 3)), ((1, 3), (2, 3)), ((2, 1), (2, 3)),
                                   ((2, 1), (1, 3)), ((1, 1), (2, 3)), ((2, 3), (1, 1)),
                                   ((3, 1, 2), (1, 4, 2)), ((2, 0), (2, 1)), ((1, 2, 1), (3, 2, 1))])
@pytest.mark.parametrize("m,k,n", [(5, 7, 3), (33, 17, 65), (1, 4, 6), (6, 4, 1)])
def test_batch_matmul_broadcasts_batch_dims_of_any_rank(check, rand, ta, tb, ba, bb, m, k, n):
    a = rand(ba + ((k, m) if ta else (m, k)))
    b = rand(bb + ((n, k) if tb else (k, n)))
    check("nn.batch_matmul", {"transpose_a": ta, "transpose_b": tb}, [a, b], **GEMM_TOL)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, True)])
def test_products_pack_each_calls_operands_on_two_threads(check, rand, two_threads, ta, tb):
    """Products whose B changes per call, on two threads (one task per run of the pool): what
    a thread packed for one call (rows of A, panels of B) is never taken for the next."""
    for _ in range(3):
        a = rand((3, 70, 40) if ta else (3, 40, 70))
        b = rand((3, 90, 70) if tb else (3, 70, 90))
        check("nn.batch_matmul", {"transpose_a": ta, "transpose_b": tb}, [a, b], **GEMM_TOL)


@pytest.mark.parametrize("m,k,n,batch", [(40, 100, 70, 1), (128, 64, 128, 12), (3, 300, 37, 2),
                                         (8, 8, 64, 48), (64, 0, 5, 2), (600, 1000, 40, 2)])
@pytest.mark.parametrize("ta", [False, True])
def test_float32_products_on_relvms_gemm(check, rand, m, k, n, batch, ta):
    """Panels of B packed per task, rows split when there are few tasks, k = 0; A's rows
    packed per thread, or (600 x 1000: more than pgemm.c packs) read as they are."""
    a = rand((batch, k, m) if ta else (batch, m, k))
    check("nn.batch_matmul", {"transpose_a": ta, "transpose_b": False}, [a, rand((1, k, n))],
          **GEMM_TOL)
    check("nn.matmul", {"transpose_b": True}, [rand((m, k)), rand((n, k))], **GEMM_TOL)


def test_batch_matmul_refuses_batch_dims_that_do_not_broadcast(c_kernel, rand):
    kernel = c_kernel("nn.batch_matmul", {"transpose_b": False}, ["float32"] * 2, ["float32"])
    with pytest.raises(ValueError, match=r"batch dims do not broadcast: \(2, 3, 4, 5\) vs "
                                         r"\(2, 2, 5, 6\)"):
        kernel(rand((2, 3, 4, 5)), rand((2, 2, 5, 6)), np.empty((2, 3, 4, 6), np.float32))


@pytest.mark.parametrize("isa", ["avx2", "sse2"])
def test_products_on_lesser_instruction_sets(isa, rerun_under_isa):
    rerun_under_isa(isa, __file__,
                    "float32_products or broadcasts_batch_dims or conv_form_follows_the_plane")


def test_gemm_rejects_wrong_inner_dims(c_kernel, rand):
    kernel = c_kernel("nn.dense", {}, ["float32", "float32"], ["float32"])
    with pytest.raises(ValueError, match="inner dims differ"):
        kernel(rand((2, 3)), rand((4, 5)), np.empty((2, 4), np.float32))


# --- conv2d -------------------------------------------------------------------------------------

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
    # depthwise whose padded plane is an odd number of floats (2x2 taps over 5x5: 5 rows of
    # 9): the tap offsets after it in scratch were misaligned int64s (UBSan in CI)
    ((1, 4, 5, 5), (4, 1, 2, 2), {"groups": 4}),
    ((2, 3, 7, 9), (6, 1, 2, 3), {"groups": 3, "strides": [3, 3], "padding": [1, 0]}),
    ((3, 16, 7, 7), (32, 16, 1, 1), {}),  # pointwise: read in place, no padded copy
    # Pointwise over ragged rows: whole panels read in place across rows, the last one packed.
    ((2, 8, 10, 13), (20, 8, 1, 1), {}),
    ((2, 16, 7, 7), (32, 8, 1, 1), {"groups": 2}),
    ((1, 3, 5, 5), (2, 3, 1, 1), {"padding": [1, 1]}),  # 1x1 with padding: not pointwise
    # 1x1 with a stride (ResNet's shortcuts): the pointwise conv of the subsampled input, in
    # place, packed, transposed (7 x 7 out) and grouped; bottom and right padding reach past
    # the image (zeros)
    ((2, 8, 9, 11), (20, 8, 1, 1), {"strides": [2, 2]}),
    ((1, 16, 28, 28), (40, 16, 1, 1), {"strides": [2, 1]}),
    ((2, 32, 14, 14), (48, 32, 1, 1), {"strides": [2, 2]}),
    ((1, 6, 9, 10), (12, 6, 1, 1), {"strides": [3, 2], "padding": [0, 0, 2, 1]}),
    ((2, 8, 14, 14), (64, 4, 1, 1), {"strides": [2, 2], "groups": 2}),
    ((1, 3, 5, 5), (2, 3, 5, 5), {}),  # one output pixel
    ((1, 1, 1, 1), (1, 1, 1, 1), {}),
    ((0, 3, 5, 5), (2, 3, 3, 3), {}),  # empty batch
    ((1, 3, 6, 6), (0, 3, 3, 3), {}),  # no output channels
    ((1, 2, 3, 3), (2, 2, 3, 3), {"padding": [4, 4], "strides": [3, 3]}),  # windows of pad only
    ((2, 32, 28, 28), (64, 32, 3, 3), {"padding": [1, 1]}),
    # Strides past the input take the first window only; the C kernels loop over a stride's
    # phases, so a stride of 2**62 ran (practically) for ever before the plan took the
    # smallest stride with the same windows. The same for a one-tap kernel's dilation.
    ((1, 3, 5, 5), (2, 3, 3, 3), {"strides": [2**62, 2**63 - 1]}),
    ((2, 3, 6, 7), (2, 3, 3, 2), {"strides": [4, 2**40], "padding": [1, 1]}),
    ((1, 3, 5, 5), (2, 3, 1, 3), {"dilation": [2**62, 1], "strides": [2, 1]}),
    # One input channel and a large window (an STFT front end): a GEMM of k = 256 taps, not
    # the depthwise loop, and (3 output pixels) in the transposed form.
    ((1, 1, 1, 576), (20, 1, 1, 256), {"strides": [1, 128]}),
    ((2, 1, 9, 9), (4, 1, 8, 8), {}),  # 64 taps of one channel: the GEMM too
    # Small output planes: the transposed form (pixels x k times channel panels).
    ((1, 129, 1, 3), (40, 129, 1, 3), {"padding": [0, 1]}),
    ((2, 64, 7, 7), (80, 64, 1, 1), {}),  # pointwise over 7 x 7
    # ... whose input and output are transposed in 8 x 8 blocks: channels and pixels that are
    # not multiples of 8 leave edges done element by element.
    ((2, 45, 7, 7), (64, 45, 1, 1), {}),
    ((1, 19, 14, 14), (96, 19, 1, 1), {}),
    ((2, 8, 4, 4), (64, 4, 3, 3), {"groups": 2, "padding": [1, 1], "strides": [2, 2]}),
    ((3, 5, 2, 3), (33, 5, 2, 2), {"dilation": [1, 2], "padding": [1, 1]}),
]


@pytest.mark.parametrize("data,weight,attrs", CONVS, ids=str)
def test_conv2d(check, rand, data, weight, attrs):
    check("nn.conv2d", attrs, [rand(data), rand(weight)], **GEMM_TOL)


def test_conv2d_rejects_channel_mismatch(c_kernel, rand):
    kernel = c_kernel("nn.conv2d", {}, ["float32", "float32"], ["float32"])
    with pytest.raises(ValueError, match="input channels differ"):
        kernel(rand((1, 3, 5, 5)), rand((2, 4, 3, 3)), np.empty((1, 2, 3, 3), np.float32))


@pytest.mark.parametrize("strides,groups", [([99999999, 99999999], 1), ([2, 2**62], 1),
                                            ([99999999, 1], 3)])
def test_conv2d_with_a_stride_past_the_image(check, rand, strides, groups):
    """One output position along an axis: the kernels' phase-split image once had a phase per
    unit of stride (gigabytes, filled for minutes); the fuzzer found it."""
    start = time.perf_counter()
    check("nn.conv2d", {"strides": strides, "padding": [1, 1], "groups": groups},
          [rand((2, 3, 9, 9)), rand((6, 3 // groups, 3, 3))], **GEMM_TOL)
    assert time.perf_counter() - start < 1.0


def test_conv2d_refuses_a_padded_image_past_its_limit(c_kernel, rand):
    # A window of padding only: one output pixel, but a padded image of 2**80 floats, whose
    # size the C kernels' int64 arithmetic cannot even hold.
    kernel = c_kernel("nn.conv2d", {"padding": [2**40, 2**40], "strides": [2**62, 2**62]},
                      ["float32", "float32"], ["float32"])
    with pytest.raises(ValueError, match="makes a padded image of 3 x"):
        kernel(rand((1, 3, 5, 5)), rand((2, 3, 3, 3)), np.empty((1, 2, 1, 1), np.float32))


def test_conv2d_large_batch_threads(check, rand):
    """Many planes: the depthwise loop and the GEMM path run on every pool thread."""
    check("nn.conv2d", {"groups": 24, "padding": [1, 1]}, [rand((4, 24, 30, 30)),
                                                            rand((24, 1, 3, 3))], **GEMM_TOL)


TRANSPOSED = [
    ((1, 3, 4, 4), (3, 2, 3, 3), {}),
    ((2, 4, 5, 5), (4, 3, 3, 3), {"strides": [2, 2], "padding": [1, 1]}),
    ((2, 4, 5, 6), (4, 3, 4, 2), {"strides": [2, 3], "padding": [1, 0, 2, 1],
                                  "output_padding": [1, 2]}),
    ((1, 6, 5, 5), (6, 2, 3, 3), {"groups": 3, "dilation": [2, 2]}),
    ((1, 4, 7, 7), (4, 1, 3, 3), {"groups": 4, "strides": [2, 2], "padding": [1, 1],
                                  "output_padding": [1, 1]}),
    ((1, 8, 1, 1), (8, 16, 4, 4), {}),
    ((0, 3, 4, 4), (3, 2, 3, 3), {}),
    ((1, 3, 0, 4), (3, 2, 3, 3), {}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"padding": [2, 2]}),  # crops to a single pixel
    ((2, 64, 16, 16), (64, 32, 4, 4), {"strides": [2, 2], "padding": [1, 1]}),
]


@pytest.mark.parametrize("data,weight,attrs", TRANSPOSED, ids=str)
def test_conv2d_transpose(check, rand, data, weight, attrs):
    check("nn.conv2d_transpose", attrs, [rand(data), rand(weight)], **GEMM_TOL)


@pytest.mark.parametrize("data,weight,attrs,form", [
    ((1, 129, 1, 3), (128, 129, 1, 3), {"padding": [0, 1]}, 2),   # 3 pixels: transposed
    ((1, 1, 1, 576), (258, 1, 1, 256), {"strides": [1, 128]}, 2),  # one channel, 256 taps
    ((1, 2048, 7, 7), (512, 2048, 1, 1), {}, 2),                   # pointwise, 7 x 7
    ((1, 32, 80, 80), (32, 32, 3, 3), {"padding": [1, 1]}, 1),      # k of 288: on the grid
    ((1, 16, 58, 58), (64, 16, 3, 3), {"padding": [1, 1], "strides": [2, 2]}, 1),  # panels
    ((1, 24, 56, 56), (144, 24, 1, 1), {}, 1),                       # pointwise: in place
    ((1, 64, 20, 20), (80, 64, 3, 3), {"padding": [1, 1]}, 1),      # 80 channels: the grid
    # k of 576: direct with AVX-512's tiles; AVX2 and SSE2 read rows of whole vectors in place
    ((1, 64, 56, 56), (64, 64, 3, 3), {"padding": [1, 1]}, {"avx512f": 2, "avx2": 1, "sse2": 1}),
    ((1, 64, 58, 58), (64, 64, 3, 3), {"padding": [1, 1], "strides": [2, 2]}, 2),  # direct
    ((1, 256, 14, 14), (256, 256, 3, 3), {"padding": [1, 1]}, 2),   # direct, not a gather
    ((1, 576, 14, 14), (96, 576, 1, 1), {}, 2),  # direct (AVX-512), else transposed
    ((1, 512, 7, 7), (2048, 512, 1, 1), {}, 2),                    # more out: transposed
    ((1, 8, 3, 3), (8, 1, 3, 3), {"groups": 8, "padding": [1, 1]}, 0),  # depthwise loop
])
def test_the_conv_form_follows_the_plane(data, weight, attrs, form):
    """Which GEMM form a conv takes (relvm_conv2d_weights_form; the numbers are the other
    tests'): the dense-panel weights of the transposed form where 32-pixel panels would run
    mostly empty, and of the direct form for windows with a k of 512 or more whose channels
    fill their panels; the usual row blocks otherwise. A dict: the form per instruction set
    of the GEMM (relvm_pgemm_isa)."""
    from relvm.backends.ckernels.common import library
    from relvm.backends.ckernels.linalg import _conv_plan
    from relvm.ops import OPS

    ffi, lib = library()
    full = OPS["nn.conv2d"].make_attrs(attrs)
    out = OPS["nn.conv2d"].reference(full, np.zeros(data, np.float32),
                                     np.zeros(weight, np.float32)).shape
    if isinstance(form, dict):
        form = form[ffi.string(lib.relvm_pgemm_isa()).decode()]
    assert lib.relvm_conv2d_weights_form(_conv_plan(ffi, full, data, weight, out)) == form


def test_transposed_form_weights_packed_off_a_64_byte_boundary(rand):
    """Weights packed for the transposed form (dense panels, read as aligned vectors) at an
    address that is not 64-byte aligned are copied by the call, not read in place (that
    faulted): the same numbers either way."""
    from relvm.backends.ckernels.common import library
    from relvm.backends.ckernels.linalg import _conv_plan
    from relvm.ops import OPS

    ffi, lib = library()
    x, w = rand((2, 129, 1, 3)), rand((40, 129, 1, 3))
    full = OPS["nn.conv2d"].make_attrs({"padding": [0, 1]})
    want = OPS["nn.conv2d"].reference(full, x, w)
    plan = _conv_plan(ffi, full, x.shape, w.shape, want.shape)
    assert lib.relvm_conv2d_weights_form(plan) == 2
    size = lib.relvm_conv2d_packed_size(plan)
    buf = np.empty(size + 32, np.float32)
    start = (-buf.ctypes.data % 64) // 4 + 1  # one float past a 64-byte boundary
    packed = buf[start:start + size]
    lib.relvm_conv2d_pack_weights(plan, ffi.from_buffer(w), ffi.from_buffer(packed))
    y = np.empty(want.shape, np.float32)
    null = ffi.NULL
    assert lib.relvm_conv2d(0, plan, ffi.from_buffer(x), ffi.from_buffer(w), ffi.from_buffer(y),
                            null, null, ffi.from_buffer(packed), null, null) == 0
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


# --- linalg.det ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (4, 4), (5, 2, 2), (3, 4, 7, 7),
                                   (2, 33, 33), (0, 3, 3), (2, 0, 0)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_det(check, rng, shape, dtype):
    x = rng.standard_normal(shape).astype(dtype)
    check("linalg.det", {}, [x], rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-5)


def test_det_pivots_and_singular_matrices(check):
    zero_pivot = np.array([[0, 1, 2], [3, 4, 5], [6, 7, 9]], np.float64)  # needs a row swap
    singular = np.array([[1, 2, 3], [2, 4, 6], [1, 0, 1]], np.float64)
    tiny = np.array([[1e-20, 1], [1, 1]], np.float64)  # pivoting keeps this exact enough
    for x in (zero_pivot, singular, tiny, np.zeros((4, 4))):
        for dtype in ("float32", "float64"):
            check("linalg.det", {}, [x.astype(dtype)], atol=1e-6)
