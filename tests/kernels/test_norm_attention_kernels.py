"""C kernels of rms_norm, group_norm, instance_norm, lp_norm, mean_variance_norm,
attention_softmax and rotary_embedding
against their NumPy references: both float dtypes, broadcast parameters, masks of every rank,
frames (causal, windows, valid keys), fully masked rows, NaN scores, empty tensors, and shapes
the kernels must refuse with an error (never a read outside the arrays)."""

import numpy as np
import pytest

FLOATS = ["float32", "float64"]
ALL_KEYS = 2 ** 62


# --- rms_norm, group_norm, instance_norm ----------------------------------------------------------

@pytest.mark.parametrize("shape,axis,gamma", [
    ((4, 16), -1, (16,)), ((2, 3, 5), 1, (3, 5)), ((2, 3, 5), 1, (5,)), ((2, 3, 5), 0, (2, 3, 5)),
    ((2, 3, 5), 2, (5,)), ((7, 1000), 1, (1000,)), ((0, 8), 1, (8,)), ((3, 0), 1, (0,))], ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm(check, rand, shape, axis, gamma, dtype):
    check("nn.rms_norm", {"axis": axis, "epsilon": 1e-3}, [rand(shape, dtype), rand(gamma, dtype)])


@pytest.mark.parametrize("shape,groups", [((3, 4, 2, 2), 2), ((2, 6, 5), 3), ((2, 6, 5), 1),
                                          ((2, 6, 5), 6), ((1, 32, 17, 9), 8), ((2, 4), 2),
                                          ((0, 4, 3), 2), ((2, 4, 0), 4)], ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("scale,center", [(True, True), (False, True), (True, False)])
def test_group_norm(check, rand, shape, groups, dtype, scale, center):
    c = shape[1]
    check("nn.group_norm", {"num_groups": groups, "epsilon": 1e-4, "scale": scale,
                            "center": center},
          [rand(shape, dtype), rand((c,), dtype), rand((c,), dtype)])


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 2, 1, 3), (2, 3, 7), (4, 8)], ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_instance_norm(check, rand, shape, dtype):
    c = shape[1]
    check("nn.instance_norm", {"epsilon": 1e-2},
          [rand(shape, dtype), rand((c,), dtype), rand((c,), dtype)])


@pytest.mark.parametrize("shape,axis", [((4, 16), -1), ((4, 16), 0), ((2, 3, 5), 1),
                                        ((3, 1000), 1), ((0, 3), 1), ((3, 0), 1)], ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_lp_and_mean_variance_norm(check, rand, shape, axis, dtype):
    x = rand(shape, dtype)
    if x.size:
        x[0] = 0  # a zero norm: zeros, not NaN
    for p in (1, 2):
        check("nn.lp_norm", {"axis": axis, "p": p}, [x])
    check("nn.mean_variance_norm", {"axis": axis, "epsilon": 1e-6}, [x])


def test_norm_shapes_refused(c_kernel, rand):
    rms = c_kernel("nn.rms_norm", {"axis": 1}, ["float32"] * 2, ["float32"])
    x = rand((2, 3, 4))
    with pytest.raises(ValueError, match="gamma must have the last normalized dims"):
        rms(x, rand((3,)), np.empty_like(x))
    group = c_kernel("nn.group_norm", {"num_groups": 4}, ["float32"] * 3, ["float32"])
    x = rand((2, 6, 3))
    with pytest.raises(ValueError, match="num_groups=4 does not divide the 6 channels"):
        group(x, rand((6,)), rand((6,)), np.empty_like(x))
    with pytest.raises(ValueError, match="gamma"):
        group(x, rand((5,)), rand((6,)), np.empty_like(x))


# --- attention_softmax ----------------------------------------------------------------------------

SCORES = (2, 3, 4, 6)
BIASES = [(), (6,), (4, 6), (4, 1), (3, 4, 6), (2, 1, 4, 6), (2, 3, 4, 6), (1, 1, 1, 6),
          (4, 5), (2, 3, 4, 2), (1,)]


def _positions(rows):
    return np.array(rows, np.int64)


@pytest.mark.parametrize("bias", BIASES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_attention_softmax_bias(check, rand, bias, dtype):
    check("nn.attention_softmax", {}, [rand(SCORES, dtype), rand(bias, dtype),
                                       _positions([[0, ALL_KEYS]])])


FRAMES = [dict(causal=True), dict(causal=True, softcap=2.0, scale=0.125), dict(scale=3.0), dict(left_window=1),
          dict(right_window=0, left_window=2), dict(causal=True, left_window=1),
          dict(softcap=0.5), dict(logits=True), dict(logits=True, causal=True, softcap=3.0,
                                                                  scale=0.5)]


@pytest.mark.parametrize("frame", FRAMES, ids=str)
@pytest.mark.parametrize("positions", [[[0, ALL_KEYS]], [[2, ALL_KEYS]], [[2, 5], [-1, 3]],
                                       [[0, 0]]], ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_attention_softmax_frames(check, rand, frame, positions, dtype):
    check("nn.attention_softmax", frame, [rand(SCORES, dtype), rand((4, 6), dtype),
                                          _positions(positions)])


def test_attention_softmax_masked_rows_and_nan(check, rand):
    scores = rand(SCORES)
    scores[0, 0, 0, 0] = np.nan  # poisons its row only
    scores[1, 1, 2, :] = np.inf
    bias = np.zeros((4, 6), np.float32)
    bias[1] = -np.inf  # a row with no key open: zeros, even where scores are inf
    bias[2, 3] = -np.inf
    got = check("nn.attention_softmax", {}, [scores, bias, _positions([[0, ALL_KEYS]])])[0]
    assert np.isnan(got[0, 0, 0]).all() and not np.isnan(got[0, 0, 3]).any()
    assert (got[:, :, 1] == 0).all()


def test_attention_softmax_large(check, rand):
    check("nn.attention_softmax", {"causal": True},
          [rand((1, 4, 130, 300), low=-20, high=20), rand((1, 1, 130, 300)),
           _positions([[170, ALL_KEYS]])])


def test_attention_softmax_refuses(c_kernel, rand):
    k = c_kernel("nn.attention_softmax", {}, ["float32", "float32", "int64"], ["float32"])
    s = rand(SCORES)
    with pytest.raises(ValueError, match="bias does not broadcast"):
        k(s, rand((4, 7)), _positions([[0, 9]]), np.empty_like(s))
    with pytest.raises(ValueError, match="bias does not broadcast"):
        k(s, rand((3, 3, 4, 6)), _positions([[0, 9]]), np.empty_like(s))
    with pytest.raises(ValueError, match="positions must be"):
        k(s, rand((4, 6)), _positions([[0, 9]] * 3), np.empty_like(s))


# --- rotary_embedding -----------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["BHSD", "BSHD"])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_dim,cos_batch", [(0, 2), (4, 2), (0, 1), (2, 1)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_rotary_embedding(check, rand, layout, interleaved, rotary_dim, cos_batch, dtype):
    b, h, s, d = 2, 3, 5, 8
    shape = (b, h, s, d) if layout == "BHSD" else (b, s, h, d)
    half = (rotary_dim or d) // 2
    check("nn.rotary_embedding", dict(layout=layout, interleaved=interleaved,
                                      rotary_dim=rotary_dim),
          [rand(shape, dtype), rand((cos_batch, s, half), dtype),
           rand((cos_batch, s, half), dtype)])


def test_rotary_embedding_refuses(c_kernel, rand):
    k = c_kernel("nn.rotary_embedding", {"rotary_dim": 4}, ["float32"] * 3, ["float32"])
    x = rand((2, 3, 5, 8))
    with pytest.raises(ValueError, match="cos must be"):
        k(x, rand((2, 5, 4)), rand((2, 5, 2)), np.empty_like(x))
    k = c_kernel("nn.rotary_embedding", {"rotary_dim": 10}, ["float32"] * 3, ["float32"])
    with pytest.raises(ValueError, match="rotary_dim 10 must be even and at most"):
        k(x, rand((2, 5, 5)), rand((2, 5, 5)), np.empty_like(x))
