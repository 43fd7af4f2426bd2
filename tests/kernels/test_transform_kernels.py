"""C data-movement kernels (every dtype: they move bytes) and the dynamic ops."""

import numpy as np
import pytest

from relvm.dtypes import DTYPES

ALL_DTYPES = list(DTYPES)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_reshape_family_copies(check, rand, dtype):
    x = rand((2, 3, 4), dtype)
    check("reshape", {"newshape": [-1, 4]}, [x])
    check("reshape_like", {}, [x, rand((6, 4), "float32")])
    check("squeeze", {"axis": [0]}, [rand((1, 3, 4), dtype)])
    check("expand_dims", {"axis": 1, "num_newaxis": 2}, [x])
    check("nn.batch_flatten", {}, [x])
    check("dyn.reshape", {}, [x, np.array([4, -1], np.int64)])


@pytest.mark.parametrize("shape,axes", [((3, 4), None), ((3, 4), [1, 0]), ((2, 3, 4), [0, 2, 1]),
                                        ((2, 3, 4), [2, 0, 1]), ((2, 3, 4, 5), [0, 2, 3, 1]),
                                        ((2, 3, 4, 5), [0, 3, 1, 2]), ((1, 64, 9), [2, 1, 0]),
                                        ((67, 129), [1, 0]), ((4, 0, 3), [2, 1, 0]), ((5,), None),
                                        ((8, 12, 64, 64), [0, 2, 1, 3])], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "int64", "int8", "float16"])
def test_transpose(check, rand, shape, axes, dtype):
    check("transpose", {"axes": axes}, [rand(shape, dtype)])


# NCHW <-> NHWC, the channels-last pass's transposes: one image (its 32 x 32 tiles shared out
# between the threads) and several (the images shared out), ragged tiles, 3 channels.
# Onto 2-7 channels (an RGB image going channels last) the rows interleave: every count, one
# image and several, planes of fewer and more pixels than a tile, and a strided source.
@pytest.mark.parametrize("shape", [(1, 32, 112, 112), (1, 3, 20, 21), (2, 40, 7, 7),
                                   (1, 1280, 7, 7), (3, 33, 9, 10), (1, 7, 1, 1),
                                   (1, 3, 224, 224), (2, 3, 17, 19), (1, 2, 3, 3), (1, 4, 33, 1),
                                   (2, 5, 8, 9), (1, 6, 40, 41), (3, 7, 5, 31)], ids=str)
@pytest.mark.parametrize("axes", [[0, 2, 3, 1], [0, 3, 1, 2]], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "int32", "float64"])
def test_channels_last_transposes(check, rand, shape, axes, dtype):
    check("transpose", {"axes": axes}, [rand(shape, dtype)])


@pytest.mark.parametrize("channels", [2, 3, 7])
def test_interleaving_transpose_reads_a_strided_source(channels, rand):
    """A transpose onto a short last dim reads its source planes where they are (a strided
    view: every other row of a bigger array) and writes every item once."""
    import relvm

    x = rand((2, channels, 24, 30), "float32")
    text = (f"def @main(%x: Tensor[(2, {channels}, 24, 30), float32]) "
            "{ transpose(strided_slice(%x, begin=[0, 0, 0, 0], end=[2, 99, 24, 30], "
            "strides=[1, 1, 2, 1]), axes=[0, 2, 3, 1]) }")
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(text)))
    out = np.full((2, 12, 30, channels), np.nan, np.float32)
    vm.invoke_with_outputs("main", input_args=[x], output_args=[out])
    np.testing.assert_array_equal(out, x[:, :, ::2].transpose(0, 2, 3, 1))


@pytest.mark.parametrize("shapes,axis", [([(2, 3), (2, 5)], 1), ([(2, 3), (4, 3), (1, 3)], 0),
                                         ([(2, 0, 3), (2, 4, 3)], 1), ([(3,), (4,)], -1),
                                         ([(2, 3, 4)], 2), ([(1, 2, 3), (1, 2, 3)], 2)], ids=str)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_concatenate(check, rand, shapes, axis, dtype):
    check("concatenate", {"axis": axis}, [rand(s, dtype) for s in shapes],
          groups=(len(shapes),))


@pytest.mark.parametrize("shape,spec,axis", [((6, 4), 3, 0), ((6, 4), [1, 3], 0), ((6, 4), 2, 1),
                                             ((2, 9, 3), [2, 5, 8], 1), ((2, 9, 3), 1, -1),
                                             ((0, 4), 2, 1)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "int8", "bool"])
def test_split(check, rand, shape, spec, axis, dtype):
    check("split", {"indices_or_sections": spec, "axis": axis}, [rand(shape, dtype)])


SLICES = [
    ((10,), {"begin": [2], "end": [8]}),
    ((10,), {"begin": [8], "end": [2], "strides": [-2]}),
    ((10,), {"begin": [-3], "end": [100]}),
    ((10,), {"begin": [5], "end": [2]}),  # empty
    ((4, 6), {"begin": [1, 0], "end": [3, 6], "strides": [1, 2]}),
    ((4, 6), {"begin": [3, 5], "end": [-5, -7], "strides": [-1, -1]}),
    ((4, 6, 5), {"begin": [1], "end": [3], "axes": [2]}),
    ((4, 6, 5), {"begin": [0, 1], "end": [2, 3], "slice_mode": "size"}),
    ((4, 6, 5), {"begin": [1, -4], "end": [-1, -1], "axes": [0, 1], "slice_mode": "size"}),
    ((4, 6), {"begin": [0, 0], "end": [2147483647, 2147483647], "strides": [3, 4]}),
]


@pytest.mark.parametrize("shape,attrs", SLICES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8"])
def test_strided_slice(check, rand, shape, attrs, dtype):
    check("strided_slice", attrs, [rand(shape, dtype)])


TAKES = [
    ((5, 4), (3,), {"axis": 0}), ((5, 4), (2, 3), {"axis": 1}), ((5, 4), (7,), {}),
    ((2, 5, 4), (2, 3), {"axis": 1, "batch_dims": 1}), ((2, 3, 5, 4), (2, 3, 2),
                                                        {"axis": 2, "batch_dims": 2}),
    ((3, 4), (), {"axis": 1}), ((3, 4), (0,), {"axis": 0}), ((0, 4), (0,), {"axis": 0}),
    ((1000, 64), (17, 5), {"axis": 0}),
]


@pytest.mark.parametrize("shape,ishape,attrs", TAKES, ids=str)
@pytest.mark.parametrize("mode", ["clip", "wrap"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("dtype", ["float32", "int64", "int8", "float16"])
def test_take_modes(check, rand, shape, ishape, attrs, mode, index_dtype, dtype):
    x = rand(shape, dtype)
    dim = int(np.prod(shape)) if attrs.get("axis") is None else shape[attrs["axis"]]
    idx = rand(ishape, index_dtype, -2 * dim - 3, 2 * dim + 3)
    check("take", dict(attrs, mode=mode), [x, idx])


def test_take_fast_mode(check, c_kernel, rand):
    x = rand((5, 4))
    check("take", {"axis": 0, "mode": "fast"}, [x, np.array([0, 4, 2], np.int64)])
    kernel = c_kernel("take", {"axis": 0, "mode": "fast"}, ["float32", "int64"], ["float32"])
    with pytest.raises(ValueError, match="index 5 is out of range"):
        kernel(x, np.array([0, 5], np.int64), np.empty((2, 4), np.float32))


@pytest.mark.parametrize("shape,ishape,attrs", TAKES[:6], ids=str)
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_take_from_end_mode(check, c_kernel, rand, shape, ishape, attrs, index_dtype):
    # ONNX's Gather: [-len, 0) counts from the end, anything else outside the axis is refused
    x = rand(shape)
    dim = int(np.prod(shape)) if attrs.get("axis") is None else shape[attrs["axis"]]
    check("take", dict(attrs, mode="from_end"), [x, rand(ishape, index_dtype, -dim, dim - 1)])
    if not ishape or not dim:
        return
    kernel = c_kernel("take", dict(attrs, mode="from_end"), ["float32", index_dtype], ["float32"])
    axis, bdims = attrs.get("axis"), attrs.get("batch_dims", 0)
    out_shape = ishape if axis is None else shape[:axis] + ishape[bdims:] + shape[axis + 1:]
    for bad in (dim, -dim - 1):
        idx = np.zeros(ishape, index_dtype)
        idx.flat[-1] = bad
        with pytest.raises(ValueError, match=f"take\\(mode='from_end'\\): index {bad} is out "
                                             f"of range for an axis of size {dim}"):
            kernel(x, idx, np.empty(out_shape, np.float32))


def test_take_from_an_empty_axis_is_an_error(c_kernel):
    kernel = c_kernel("take", {"axis": 0}, ["float32", "int32"], ["float32"])
    with pytest.raises(ValueError, match="axis of size 0"):
        kernel(np.empty((0, 3), np.float32), np.zeros(2, np.int32), np.empty((2, 3), np.float32))


@pytest.mark.parametrize("shape,target", [((3,), [2, 3]), ((1, 3), [4, 3]), ((4, 1), [4, 5]),
                                          ((), [2, 2]), ((2, 1, 3), [2, 5, 3]), ((1,), [0]),
                                          ((5, 1, 1), [2, 5, 7, 3])], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "bool", "int32"])
def test_broadcast_to(check, rand, shape, target, dtype):
    check("broadcast_to", {"shape": target}, [rand(shape, dtype)])


PADS = [((3, 4), [[1, 2], [0, 3]]), ((2, 3, 4), [[0, 0], [2, 1], [1, 1]]), ((5,), [[4, 4]]),
        ((0, 3), [[1, 1], [1, 0]]), ((2, 2), [[0, 0], [0, 0]])]


@pytest.mark.parametrize("shape,widths", PADS, ids=str)
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
@pytest.mark.parametrize("dtype", ["float32", "int8", "float64"])
def test_pad(check, rand, shape, widths, mode, dtype):
    for axis, (n, w) in enumerate(zip(shape, widths)):
        if max(w) and (n == 0 or (mode == "reflect" and max(w) >= n)):
            return  # the reference refuses these; tested below
    check("nn.pad", {"pad_width": widths, "pad_mode": mode},
          [rand(shape, dtype), np.array(7, dtype)])


def test_pad_refuses_reflecting_past_the_edge(c_kernel):
    kernel = c_kernel("nn.pad", {"pad_width": [[3, 0]], "pad_mode": "reflect"},
                      ["float32", "float32"], ["float32"])
    with pytest.raises(ValueError, match="cannot pad axis 0"):
        kernel(np.ones(3, np.float32), np.zeros((), np.float32), np.empty(6, np.float32))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_fills(check, rand, dtype):
    check("zeros", {"shape": [2, 3], "dtype": dtype}, [])
    check("ones", {"shape": [4], "dtype": dtype}, [])
    x = rand((3, 2), dtype)
    check("zeros_like", {}, [x])
    check("ones_like", {}, [x])
    for fill in (np.array(2.7, np.float32), np.array(-3, np.int64), np.array(np.nan),
                 np.array(True)):
        check("full", {"shape": [2, 2], "dtype": dtype}, [fill])
        check("full_like", {}, [x, fill.astype(dtype) if dtype == "bool" else fill])


# --- dynamic ops ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(), (3,), (2, 0, 5)], ids=str)
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_shape_of(check, rand, shape, dtype):
    check("shape_of", {"dtype": dtype}, [rand(shape, "float32")])


@pytest.mark.parametrize("args,dtype", [((0, 10, 1), "int32"), ((10, 0, -3), "int64"),
                                        ((0.5, 7.0, 0.7), "float32"), ((1.0, 2.0, 0.1), "float64"),
                                        ((5, 5, 1), "int32"), ((-3, 300, 7), "int8"),
                                        ((0, 10, 3), "float32"), ((-3, 40000, 7), "int16"),
                                        ((65500, 65535, 3), "uint16"), ((1, 100, 9), "uint32"),
                                        ((2**40, 2**40 + 9, 4), "uint64")], ids=str)
def test_arange(check, args, dtype):
    source = "float64" if isinstance(args[0], float) else "int64"
    check("arange", {"dtype": dtype}, [np.array(v, source) for v in args])


@pytest.mark.parametrize("shape", [(), (7,), (3, 4), (2, 3, 4), (0, 3)], ids=str)
@pytest.mark.parametrize("dtype", ["bool", "float32", "int32", "int8", "float16", "int16",
                                   "uint16", "uint32", "uint64"])
def test_argwhere(check, rand, shape, dtype):
    x = rand(shape, dtype, -1, 2)
    if dtype == "float32" and x.size:
        x.reshape(-1)[0] = np.nan  # NaN is non-zero
    check("argwhere", {}, [x])


def test_argwhere_checks_the_row_count(c_kernel):
    kernel = c_kernel("argwhere", {}, ["bool"], ["int32"])
    with pytest.raises(ValueError, match="2 non-zero entries"):
        kernel(np.array([True, False, True]), np.empty((3, 1), np.int32))


# --- bitcast -------------------------------------------------------------------------------------

BITCASTS = [("float32", "int32"), ("int32", "float32"), ("float64", "int64"), ("int64", "float64"),
            ("uint32", "int32"), ("int8", "uint8"), ("uint16", "int16"), ("float16", "int16"),
            ("uint64", "float64"), ("bool", "uint8"), ("uint8", "bool"), ("int8", "bool")]


@pytest.mark.parametrize("src,dst", BITCASTS, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 5), (2, 1, 9)], ids=str)
def test_bitcast(check, rand, src, dst, shape):
    x = rand(shape, src, -100, 100)
    check("bitcast", {"dtype": dst}, [x])


def test_bitcast_every_byte_and_large(check, rand):
    """Every byte value into bool and int8; a copy large enough for the thread pool's parts."""
    every = np.arange(256, dtype=np.uint8)
    check("bitcast", {"dtype": "bool"}, [every])
    check("bitcast", {"dtype": "int8"}, [every])
    big = rand((3, 1 << 20), "uint8", 0, 3)
    check("bitcast", {"dtype": "bool"}, [big])
    check("bitcast", {"dtype": "int8"}, [big])
    special = np.float32([np.nan, -np.nan, np.inf, -0.0, 1e-45])
    check("bitcast", {"dtype": "uint32"}, [special])


def test_bitcast_refuses_a_size_change(c_kernel):
    with pytest.raises(ValueError, match="float32 and float64 differ in size"):
        c_kernel("bitcast", {"dtype": "float64"}, ["float32"], ["float64"])
