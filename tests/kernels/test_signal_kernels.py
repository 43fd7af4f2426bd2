"""The C FFT kernels (kernels/fft.c) against the references: signal.dft over lengths of every
radix and of large primes (Bluestein), padding and cutting, one-sided and inverse transforms,
real and complex data, axes with data before and after them, float32 and float64; signal.stft
over frames, steps and windows; the plan's choice of algorithm; and the shape errors."""

import numpy as np
import pytest

#: 1; radix 2, 3, 4, 5 alone and mixed; odd radices 7 to 31; Whisper's 400 (2^4 5^2) and 512;
#: primes past the largest radix (Bluestein: 37, 257, 1031) and products with one (2 * 37).
LENGTHS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 15, 16, 25, 27, 29, 31, 32, 37, 49, 60, 64,
           74, 97, 100, 121, 128, 210, 243, 257, 400, 480, 512, 625, 961, 1000, 1031, 1024,
           2048, 3125]

#: float32 data is transformed in double and rounded once; float64 to double's accuracy.
TOL = {"float32": (2e-6, 2e-6), "float64": (1e-12, 1e-12)}


def check_dft(check, x, scaled=True, **attrs):
    rtol, atol = TOL[x.dtype.name]
    check("signal.dft", attrs, [x], rtol=rtol, atol=atol, scaled=scaled)


@pytest.mark.parametrize("size", LENGTHS)
@pytest.mark.parametrize("channels", [1, 2])
def test_dft_every_length(check, rand, size, channels):
    x = rand((3, size, channels))
    check_dft(check, x, axis=1)
    check_dft(check, x, axis=1, inverse=True)


@pytest.mark.parametrize("size", [1, 2, 7, 16, 37, 257, 400, 512])
def test_dft_float64(check, rand, size):
    check_dft(check, rand((2, size, 2), "float64"), axis=1)
    check_dft(check, rand((2, size, 1), "float64"), axis=1, onesided=True)
    check_dft(check, rand((2, size, 2), "float64"), axis=1, inverse=True)


@pytest.mark.parametrize("size, length", [(10, 16), (16, 10), (400, 512), (512, 400),
                                          (5, 257), (300, 257), (3, 1), (1, 7)])
@pytest.mark.parametrize("channels", [1, 2])
def test_dft_pads_and_cuts(check, rand, size, length, channels):
    x = rand((2, size, channels))
    check_dft(check, x, axis=1, length=length)
    check_dft(check, x, axis=1, length=length, inverse=True)
    if channels == 1:
        check_dft(check, x, axis=1, length=length, onesided=True)


@pytest.mark.parametrize("size", [1, 2, 5, 8, 9, 37, 400, 401, 512])
def test_dft_onesided(check, rand, size):
    check_dft(check, rand((4, size, 1)), axis=1, onesided=True)


@pytest.mark.parametrize("bins, length", [(2, None), (5, None), (201, None), (257, None),
                                          (201, 400), (201, 401), (5, 20), (9, 6), (1, 1),
                                          (65, 129)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dft_inverse_onesided(check, rand, bins, length, dtype):
    check_dft(check, rand((3, bins, 2), dtype), axis=1, length=length, inverse=True,
              onesided=True)


@pytest.mark.parametrize("shape, axis", [((5, 2, 3, 2), 0), ((2, 6, 3, 1), -3),
                                         ((2, 3, 25, 2), 2), ((2, 3, 25, 2), -2),
                                         ((37, 4, 1), 0), ((1, 1, 1, 2), 1)])
def test_dft_axes(check, rand, shape, axis):
    x = rand(shape)
    check_dft(check, x, axis=axis)
    check_dft(check, x, axis=axis, length=7, inverse=True)
    if shape[-1] == 1:
        check_dft(check, x, axis=axis, onesided=True)


def test_dft_many_lines_run_on_every_thread(check, rand):
    """Enough lines for the pool to split them; each thread's scratch holds its own line."""
    check_dft(check, rand((64, 400, 1)), axis=1, onesided=True)
    check_dft(check, rand((40, 257, 2)), axis=1)
    check_dft(check, rand((8, 7, 500, 2)), axis=1)


def test_dft_empty_and_exact_values(check):
    check_dft(check, np.zeros((0, 8, 2), np.float32), axis=1)
    check_dft(check, np.zeros((2, 0, 1), np.float32), axis=1)
    # an impulse's spectrum is all ones, exactly; a constant's is one bin
    x = np.zeros((1, 400, 1), np.float32)
    x[0, 0, 0] = 1
    got = check("signal.dft", {"axis": 1}, [x], rtol=0, atol=0)[0]
    np.testing.assert_array_equal(got[0, :, 0], 1)
    np.testing.assert_array_equal(got[0, :, 1], 0)


def test_dft_non_finite_values_stay_in_their_line(c_kernel, rand):
    """Every bin reads every point: a NaN makes its line's bins NaN, an infinity non-finite
    (which parts are NaN depends on the order of the butterflies, in NumPy's FFT too), and
    the other lines are untouched."""
    x = rand((3, 12, 1))
    x[0, 3, 0], x[1, 5, 0] = np.inf, np.nan
    got = np.empty((3, 12, 2), np.float32)
    c_kernel("signal.dft", {"axis": 1}, ["float32"], ["float32"])(x, got)
    assert (~np.isfinite(got[0])).any(axis=-1).all()
    assert np.isnan(got[1]).any(axis=-1).all()
    want = np.fft.fft(x[2, :, 0].astype(np.float64))
    np.testing.assert_allclose(got[2, :, 0] + 1j * got[2, :, 1], want, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("length, frame, step", [(16000, 400, 160), (1000, 512, 128),
                                                  (400, 400, 1), (5000, 257, 100),
                                                  (30, 8, 3), (31, 7, 7), (100, 1, 9)])
@pytest.mark.parametrize("onesided", [True, False])
@pytest.mark.parametrize("channels", [1, 2])
def test_stft(check, rand, length, frame, step, onesided, channels):
    x = rand((2, length, channels))
    window = rand((frame,), "float32", 0, 1)
    check("signal.stft", {"frame_step": step, "onesided": onesided}, [x, window],
          rtol=2e-6, atol=2e-6, scaled=True)


def test_stft_float64(check, rand):
    x, window = rand((3, 2000, 1), "float64"), np.hanning(400)
    check("signal.stft", {"frame_step": 160}, [x, window], rtol=1e-12, atol=1e-12, scaled=True)


def test_plans_choose_bluestein_for_large_primes_only():
    from relvm.backends.ckernels.signal import fft_plan
    from relvm.backends.native import load

    _, lib = load()
    chosen = {n: lib.relvm_fft_plan_bluestein(fft_plan(n, False))
              for n in (1, 400, 512, 31 * 29, 31 * 64, 37, 257, 2 * 37, 1031)}
    assert chosen == {1: 0, 400: 0, 512: 0, 899: 0, 1984: 0, 37: 1, 257: 1, 74: 1, 1031: 1}
    assert fft_plan(400, False) is fft_plan(400, False)  # made once per (length, direction)
    assert fft_plan(400, True) is not fft_plan(400, False)


def test_shape_errors(c_kernel):
    dft = c_kernel("signal.dft", {"axis": 1}, ["float32"], ["float32"])
    with pytest.raises(ValueError, match=r"signal.dft: x needs a last dim of 1 or 2 and a signal "
                                         r"axis 1: x \(2, 4, 3\)"):
        dft(np.zeros((2, 4, 3), np.float32), np.zeros((2, 4, 2), np.float32))
    with pytest.raises(ValueError, match=r"signal.dft: wrong output shape: x \(2, 4, 1\), "
                                         r"output \(2, 5, 2\)"):
        dft(np.zeros((2, 4, 1), np.float32), np.zeros((2, 5, 2), np.float32))
    stft = c_kernel("signal.stft", {"frame_step": 2}, ["float32", "float32"], ["float32"])
    with pytest.raises(ValueError, match=r"signal.stft: the signal's length 7 is shorter than a "
                                         r"frame \(8\)"):
        stft(np.zeros((1, 7, 1), np.float32), np.ones(8, np.float32),
             np.zeros((1, 0, 5, 2), np.float32))
    with pytest.raises(ValueError, match=r"signal.stft: wrong output shape"):
        stft(np.zeros((1, 12, 1), np.float32), np.ones(8, np.float32),
             np.zeros((1, 2, 5, 2), np.float32))
