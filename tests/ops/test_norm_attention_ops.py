"""rms_norm, group_norm, instance_norm, attention_softmax and rotary_embedding: type relations
over symbolic dims, their errors, and the references against element loops written from the
ONNX definitions."""

import math

import numpy as np
import pytest

from relvm.ir.dims import Sym
from relvm.ops.registry import OpTypeError
from ophelpers import T, infer, run

n, s, t = Sym("n"), Sym("s"), Sym("t")
RNG = np.random.default_rng(7)
ALL_KEYS = 2 ** 62


def rand(*shape):
    return RNG.uniform(-2, 2, shape).astype(np.float32)


# --- type relations -------------------------------------------------------------------------------

def test_types():
    assert infer("nn.rms_norm", T((n, s, 64)), T((64,))) == T((n, s, 64))
    assert infer("nn.rms_norm", T((n, s, 64)), T((s, 64)), axis=1) == T((n, s, 64))
    assert infer("nn.group_norm", T((n, 32, s, s)), T((32,)), T((32,)), num_groups=8) \
        == T((n, 32, s, s))
    assert infer("nn.instance_norm", T((n, 3, s)), T((3,)), T((3,))) == T((n, 3, s))
    assert infer("nn.attention_softmax", T((n, 8, s, t)), T((n, 1, s, t)), T((1, 2), "int64"),
                 causal=True) == T((n, 8, s, t))
    assert infer("nn.attention_softmax", T((n, 8, s, t)), T(()), T((n, 2), "int64")) \
        == T((n, 8, s, t))
    assert infer("nn.rotary_embedding", T((n, 4, s, 64)), T((n, s, 32)), T((1, s, 32))) \
        == T((n, 4, s, 64))
    assert infer("nn.rotary_embedding", T((n, s, 4, 64)), T((n, s, 16)), T((n, s, 16)),
                 layout="BSHD", rotary_dim=32) == T((n, s, 4, 64))


@pytest.mark.parametrize("op, types, attrs, message", [
    ("nn.rms_norm", (T((n, 8)), T((7,))), {}, r"gamma \(7\) must have the last dims"),
    ("nn.rms_norm", (T((n, 8), "int32"), T((8,), "int32")), {}, r"float"),
    ("nn.group_norm", (T((n, 6, s)), T((6,)), T((6,))), dict(num_groups=4),
     r"num_groups=4 does not divide the 6 channels"),
    ("nn.group_norm", (T((n, 6, s)), T((5,)), T((6,))), dict(num_groups=3), r"gamma \(5\)"),
    ("nn.group_norm", (T((n, 6, s)), T((6,)), T((6,))), dict(num_groups=0),
     r"num_groups must be positive"),
    ("nn.instance_norm", (T((6,)), T((6,)), T((6,))), {}, r"rank >= 2"),
    ("nn.attention_softmax", (T((n, 8, s)), T(()), T((1, 2), "int64")), {}, r"rank 4"),
    ("nn.attention_softmax", (T((2, 8, 4, 6)), T((3, 8, 4, 6)), T((1, 2), "int64")), {},
     r"does not broadcast"),
    ("nn.attention_softmax", (T((2, 8, 4, 6)), T((4, 7)), T((1, 2), "int64")), {},
     r"more keys than scores"),
    ("nn.attention_softmax", (T((2, 8, 4, 6)), T(()), T((3, 2), "int64")), {},
     r"positions must be int64 \(batch or 1, 2\)"),
    ("nn.rotary_embedding", (T((2, 4, 5, 8)), T((2, 5, 3)), T((2, 5, 3))), {},
     r"cos \(2, 5, 3\) must be \(batch or 1, seq, rotary_dim/2\)"),
    ("nn.rotary_embedding", (T((2, 4, 5, 8)), T((2, 5, 4)), T((2, 5, 4))), dict(rotary_dim=3),
     r"rotary_dim must be even"),
    ("nn.rotary_embedding", (T((2, 4, 5, 8)), T((2, 5, 5)), T((2, 5, 5))), dict(rotary_dim=10),
     r"rotary_dim 10 must be even and at most the head size 8"),
])
def test_type_errors(op, types, attrs, message):
    with pytest.raises(OpTypeError, match=message):
        infer(op, *types, **attrs)


# --- references against loops -----------------------------------------------------------------

def test_rms_norm_reference():
    x, g = rand(2, 3, 4), rand(3, 4)
    got = run("nn.rms_norm", x, g, axis=1, epsilon=0.1)
    for b in range(2):
        rms = math.sqrt(sum(float(v) ** 2 for v in x[b].flat) / 12 + 0.1)
        np.testing.assert_allclose(got[b], x[b] / rms * g, rtol=1e-5)


def test_group_norm_reference():
    x, g, b = rand(2, 6, 5), rand(6), rand(6)
    got = run("nn.group_norm", x, g, b, num_groups=3, epsilon=1e-3)
    for i in range(2):
        for c in range(6):
            group = x[i, c // 2 * 2:c // 2 * 2 + 2].astype(np.float64)
            want = (x[i, c] - group.mean()) / np.sqrt(group.var() + 1e-3) * g[c] + b[c]
            np.testing.assert_allclose(got[i, c], want, rtol=1e-5, atol=1e-6)
    inst = run("nn.instance_norm", x, g, b)
    np.testing.assert_allclose(inst, run("nn.group_norm", x, g, b, num_groups=6), rtol=1e-6)


def test_lp_and_mean_variance_norm_reference():
    x = rand(3, 4)
    x[1] = 0
    l1, l2 = run("nn.lp_norm", x, axis=1, p=1), run("nn.lp_norm", x, axis=1, p=2)
    mvn = run("nn.mean_variance_norm", x, axis=1, epsilon=0.0)
    for i in (0, 2):
        row = [float(v) for v in x[i]]
        np.testing.assert_allclose(l1[i], [v / sum(map(abs, row)) for v in row], rtol=1e-6)
        np.testing.assert_allclose(l2[i], [v / math.sqrt(sum(v * v for v in row)) for v in row],
                                   rtol=1e-6)
        mean = sum(row) / 4
        std = math.sqrt(sum((v - mean) ** 2 for v in row) / 4)
        np.testing.assert_allclose(mvn[i], [(v - mean) / std for v in row], rtol=1e-5)
    assert (l1[1] == 0).all() and (l2[1] == 0).all()
    with pytest.raises(Exception, match="expects 1 or 2"):
        infer("nn.lp_norm", T((n, 4)), p=3)


def _softmax_row(v):
    finite = [e for e in v if e != -math.inf]
    if not finite:
        return [0.0] * len(v)
    m = max(finite)
    ex = [math.exp(e - m) if e != -math.inf else 0.0 for e in v]
    return [e / sum(ex) for e in ex]


@pytest.mark.parametrize("causal,left,right,softcap", [(False, -1, -1, 0.0), (True, -1, -1, 0.0),
                                                       (False, 1, 0, 2.0), (True, 2, -1, 0.5)])
def test_attention_softmax_reference(causal, left, right, softcap):
    scores, bias = rand(2, 2, 3, 5), rand(2, 1, 3, 4)  # keys past 4 are masked
    positions = np.array([[1, ALL_KEYS], [0, 3]], np.int64)
    got = run("nn.attention_softmax", scores, bias, positions, causal=causal, left_window=left,
              right_window=right, softcap=softcap)
    for b, h, i in np.ndindex(2, 2, 3):
        row = []
        for j in range(5):
            d = i + positions[b, 0] - j
            masked = j >= 4 or j >= positions[b, 1] or (causal and d < 0) or \
                (left >= 0 and d > left) or (right >= 0 and -d > right)
            v = float(scores[b, h, i, j])
            v = softcap * math.tanh(v / softcap) if softcap else v
            row.append(-math.inf if masked else v + float(bias[b, 0, i, j]))
        np.testing.assert_allclose(got[b, h, i], _softmax_row(row), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_reference(interleaved):
    x, cos, sin = rand(2, 3, 4, 6), rand(2, 4, 2), rand(2, 4, 2)  # BHSD, rotary_dim 4
    got = run("nn.rotary_embedding", x, cos, sin, interleaved=interleaved, rotary_dim=4)
    for b, h, q in np.ndindex(2, 3, 4):
        v, want = x[b, h, q], x[b, h, q].copy()
        for k in range(2):
            a, c = (2 * k, 2 * k + 1) if interleaved else (k, k + 2)
            want[a] = cos[b, q, k] * v[a] - sin[b, q, k] * v[c]
            want[c] = sin[b, q, k] * v[a] + cos[b, q, k] * v[c]
        np.testing.assert_allclose(got[b, h, q], want, rtol=1e-5, atol=1e-6)
