"""signal.dft and signal.stft: their type relations over symbolic dims, their errors, the text
round trip, a program run at several signal lengths, and the references against the DFT
written out as a sum (a matrix of exp(-2 pi i k t / n), in float64: no FFT)."""

import numpy as np
import pytest

import relvm
from relvm.ir import dims as D
from relvm.ir.dims import Sym
from ophelpers import T, infer, run

n, b = Sym("n"), Sym("b")
RNG = np.random.default_rng(46)


def dft_matrix(size: int, length: int, inverse: bool = False) -> np.ndarray:
    """(length, size): bin k of a line of ``size`` points cut or zero-padded to ``length``."""
    k, t = np.arange(length)[:, None], np.arange(min(size, length))[None, :]
    m = np.exp((2j if inverse else -2j) * np.pi * k * t / length)
    out = np.zeros((length, size), complex)
    out[:, :m.shape[1]] = m / (length if inverse else 1)
    return out


def pairs(z):
    return np.stack([z.real, z.imag], -1)


def signal(shape, channels, dtype="float64"):
    return RNG.standard_normal(tuple(shape) + (channels,)).astype(dtype)


def as_complex(x):
    return x[..., 0] + (1j * x[..., 1] if x.shape[-1] == 2 else 0)


# --- type relations -----------------------------------------------------------------------------

def test_dft_types_over_symbolic_dims():
    assert infer("signal.dft", T((b, n, 2))) == T((b, n, 2))
    assert infer("signal.dft", T((b, n, 1)), onesided=True) == T((b, n // 2 + 1, 2))
    assert infer("signal.dft", T((b, n, 2)), onesided=True, inverse=True) == \
        T((b, 2 * n - 2, 1))
    assert infer("signal.dft", T((n, 5, 3, 1), "float64"), axis=-3, length=8) == \
        T((n, 8, 3, 2), "float64")
    assert infer("signal.dft", T((4, n, 1)), axis=0, length=9, onesided=True) == \
        T((5, n, 2))


def test_stft_frames_are_a_dim_expression_of_the_length():
    t = infer("signal.stft", T((b, n, 1)), T((400,)), frame_step=160)
    assert t.shape[:1] == (b,) and t.shape[2:] == (201, 2)
    for length in (400, 559, 560, 16000, 16001):
        assert D.evaluate(t.shape[1], {n: length}) == (length - 400) // 160 + 1
    assert infer("signal.stft", T((2, 20, 2)), T((8,)), frame_step=3, onesided=False) == \
        T((2, 5, 8, 2))
    assert infer("signal.stft", T((2, 8, 1), "float64"), T((8,), "float64"),
                 frame_step=3) == T((2, 1, 5, 2), "float64")


@pytest.mark.parametrize("op, types, attrs, message", [
    ("signal.dft", (T((4, 3)),), {"axis": 0},
     r"x's last dim must be 1 \(real\) or 2 \(real, imaginary\), got \(4, 3\)"),
    ("signal.dft", (T((4,)),), {"axis": 0}, r"x must have a signal axis .* got rank 1"),
    ("signal.dft", (T((4, 2)),), {"axis": 1},
     r"axis 1 must be a signal axis of x: in \[-2, -2\] or \[0, 0\] for rank 2"),
    ("signal.dft", (T((3, 4, 2)),), {"axis": -1}, r"axis -1 must be a signal axis"),
    ("signal.dft", (T((4, 2), "int32"),), {"axis": 0}, r"x must have float32 or float64"),
    ("signal.dft", (T((4, 2)),), {"axis": 0, "onesided": True},
     r"a one-sided forward DFT needs a real x \(last dim 1\), got \(4, 2\)"),
    ("signal.dft", (T((4, 1)),), {"axis": 0, "onesided": True, "inverse": True},
     r"a one-sided inverse DFT needs a complex x \(last dim 2\), got \(4, 1\)"),
    ("signal.dft", (T((4, 1)),), {"axis": 0, "length": 0}, r"length must be at least 1, got 0"),
    ("signal.dft", (T((1, 2)),), {"axis": 0, "onesided": True, "inverse": True},
     r"a one-sided DFT along an axis of 1 has length 0"),
    ("signal.stft", (T((2, 20)), T((8,))), {"frame_step": 2},
     r"signal must be \(batch, length, 1 \| 2\), got \(2, 20\)"),
    ("signal.stft", (T((2, 20, 3)), T((8,))), {"frame_step": 2},
     r"signal's last dim must be 1 \(real\) or 2"),
    ("signal.stft", (T((2, 20, 1)), T((8,), "float64")), {"frame_step": 2},
     r"window must be 1-d of the signal's dtype float32, got \(8\) float64"),
    ("signal.stft", (T((2, 20, 1)), T((n,))), {"frame_step": 2},
     r"the window's length \(the frame length\) must be static, got n"),
    ("signal.stft", (T((2, 20, 1)), T((8,))), {"frame_step": 0},
     r"frame_step must be at least 1, got 0"),
    ("signal.stft", (T((2, 7, 1)), T((8,))), {"frame_step": 2},
     r"the signal's length 7 is shorter than a frame \(8\)"),
    ("signal.stft", (T((2, 20, 1)), T((8,))), {},
     r"signal.stft needs attribute 'frame_step'"),
])
def test_type_errors(op, types, attrs, message):
    with pytest.raises(Exception, match=message) as info:
        infer(op, *types, **attrs)
    assert info.type.__name__ in ("OpTypeError", "AttrError")


def test_text_round_trip_and_type_error_in_a_program():
    text = ("def @main(%x: Tensor[(b, n, 1), float32], %w: Tensor[(16), float32]) {"
            " %0 = signal.stft(%x, %w, frame_step=4);"
            " signal.dft(%0, axis=2, inverse=True) }")
    mod = relvm.parse(text)
    ret = mod["main"].checked_type.ret
    assert ret.shape[0] == b and ret.shape[2:] == (9, 2)
    assert [D.evaluate(ret.shape[1], {n: v}) for v in (16, 19, 20, 99)] == [1, 1, 2, 21]
    assert relvm.parse(relvm.print_module(mod)) == mod
    with pytest.raises(relvm.RelvmTypeError, match=r"shorter than a frame \(16\)"):
        relvm.parse("def @main(%x: Tensor[(1, 10, 1), float32], %w: Tensor[(16), float32]) {"
                    " signal.stft(%x, %w, frame_step=4) }")


# --- the references against the sums ------------------------------------------------------------

@pytest.mark.parametrize("size, length", [(1, None), (7, None), (12, None), (12, 5), (5, 12),
                                          (9, 16)])
@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("inverse", [False, True])
def test_dft_is_the_sum(size, length, channels, inverse):
    x = signal((3, size, 2), channels)  # transform along axis 1 of (3, size, 2, c)
    got = run("signal.dft", x, axis=1, length=length, inverse=inverse)
    m = dft_matrix(size, length or size, inverse)
    want = np.einsum("kt,btj->bkj", m, as_complex(x))
    np.testing.assert_allclose(got, pairs(want), rtol=1e-12, atol=1e-12)
    assert got.dtype == x.dtype


@pytest.mark.parametrize("size, length", [(8, None), (9, None), (8, 5), (4, 11)])
def test_onesided_dft_is_the_first_half_of_the_sum(size, length):
    x = signal((size, 3), 1, "float32")
    got = run("signal.dft", x, axis=0, length=length, onesided=True)
    full = dft_matrix(size, length or size) @ as_complex(x).astype(np.float64)
    want = full[:(length or size) // 2 + 1]
    np.testing.assert_allclose(got, pairs(want), rtol=1e-5, atol=1e-5)
    assert got.dtype == np.float32


@pytest.mark.parametrize("bins, length", [(5, None), (5, 9), (5, 6), (3, 10)])
def test_inverse_onesided_dft_rebuilds_the_hermitian_spectrum(bins, length):
    """IRFFT: bins 0..L/2 (those past the input's are 0), the rest by symmetry; the imaginary
    parts the symmetry cannot hold (bin 0, and L/2 for an even L) drop out of the real part."""
    x = signal((2, bins), 2)
    got = run("signal.dft", x, axis=1, length=length, onesided=True, inverse=True)
    size = length or 2 * (bins - 1)
    spectrum = np.zeros((2, size), complex)
    half = min(bins, size // 2 + 1)
    spectrum[:, :half] = as_complex(x)[:, :half]
    for k in range(size // 2 + 1, size):
        spectrum[:, k] = np.conj(spectrum[:, size - k])
    want = (dft_matrix(size, size, True) @ spectrum.T).T.real
    assert got.shape == (2, size, 1)
    np.testing.assert_allclose(got[..., 0], want, rtol=1e-12, atol=1e-12)


def test_empty_axis_has_no_bins():
    assert run("signal.dft", np.zeros((2, 0, 1)), axis=1).shape == (2, 0, 2)


@pytest.mark.parametrize("length, frame, step, onesided, channels",
                         [(20, 8, 3, True, 1), (20, 8, 3, False, 2), (8, 8, 1, True, 1),
                          (33, 5, 7, False, 1), (30, 6, 2, True, 2)])
def test_stft_is_the_sum_of_each_windowed_frame(length, frame, step, onesided, channels):
    x = signal((2, length), channels)
    window = RNG.uniform(0.2, 1.0, frame)
    got = run("signal.stft", x, window, frame_step=step, onesided=onesided)
    frames = (length - frame) // step + 1
    z = as_complex(x)
    m = dft_matrix(frame, frame)
    want = np.stack([[m @ (z[i, f * step:f * step + frame] * window) for f in range(frames)]
                     for i in range(2)])
    bins = frame // 2 + 1 if onesided else frame
    np.testing.assert_allclose(got, pairs(want[..., :bins]), rtol=1e-12, atol=1e-12)


def test_references_check_what_the_types_could_not():
    with pytest.raises(ValueError, match=r"signal.stft: the signal's length 7 is shorter than "
                                         r"a frame \(8\)"):
        run("signal.stft", np.zeros((1, 7, 1)), np.ones(8), frame_step=2)
    with pytest.raises(ValueError, match=r"signal.dft: a one-sided DFT needs a real x"):
        run("signal.dft", np.zeros((1, 7, 2)), axis=1, onesided=True)


def test_a_symbolic_length_runs_at_every_length_on_the_numpy_backend():
    mod = relvm.parse("def @main(%x: Tensor[(2, n, 1), float64], %w: Tensor[(16), float64]) {"
                      " signal.stft(%x, %w, frame_step=5) }")
    vm = relvm.VirtualMachine(relvm.build(mod, backend="numpy"))
    window = np.hanning(16)
    for length in (16, 37, 101):
        x = signal((2, length), 1)
        got = vm.invoke("main", x, window)
        assert got.shape == (2, (length - 16) // 5 + 1, 9, 2)
        np.testing.assert_allclose(got, run("signal.stft", x, window, frame_step=5))
    with pytest.raises(relvm.RelvmInputError, match=r"input %x dim 1 \(n\) is 9, but "
                       r"signal.stft at line 1, column \d+ needs at least 16"):
        vm.invoke("main", signal((2, 9), 1), window)
