"""``signal.dft`` and ``signal.stft``: discrete Fourier transforms, as ONNX DFT and STFT.

Complex numbers are ONNX's layout: a last dim of 2 holds (real, imaginary); a last dim of 1 is
a real signal. Both ops compute in complex128 and round once to the data's dtype (float32 or
float64); the C kernels compute in double too.

``signal.dft(x)`` transforms along ``axis`` (any axis but the last) lines of ``length`` points
(None: the axis' size), each cut or padded with zeros to that length:

- forward: ``y[k] = sum_t x[t] exp(-2 pi i k t / length)``, every bin (``(..., length, ..., 2)``)
  or, ``onesided``, bins ``0 .. length // 2`` of a real signal (ONNX's RFFT);
- ``inverse``: ``x[t] = 1 / length sum_k y[k] exp(2 pi i k t / length)``, complex out, or,
  ``onesided``, the real signal whose one-sided spectrum the input holds (ONNX's IRFFT: bins
  ``0 .. length // 2`` read, the rest by Hermitian symmetry; complex in, ``(..., length, ..., 1)``
  out; ``length`` defaults to ``2 * (size - 1)``).

``signal.stft(signal, window)``: ``signal`` is ``(batch, length, 1 | 2)``, ``window`` a 1-d
tensor of ``frame_length`` values of the signal's dtype. Frame ``f`` is the signal from
``f * frame_step`` on, times the window; the result is ``(batch, frames, bins, 2)``, the DFT of
each frame, with ``frames = (length - frame_length) // frame_step + 1`` (symbolic in a symbolic
length; a signal shorter than a frame is an error) and ``bins = frame_length // 2 + 1`` when
``onesided`` (ONNX's default; for a complex signal too, as ONNX Runtime: the first bins of its
full transform), else ``frame_length``.
"""

from __future__ import annotations

import numpy as np

from ..ir import dims as D
from ..ir.types import TensorType
from .common import FLOATS, check_dtype, differ, fmt_shape, np_dtype, require, tensor_arg
from .registry import BOOL, INT, OPAQUE, OPT_INT, OpTypeError, attr, register


# --- signal.dft ---------------------------------------------------------------------------------

def dft_axis(axis: int, ndim: int) -> int:
    """``axis`` counted from 0, refusing the last dim (real/imaginary) and ranks below 2."""
    if ndim < 2:
        raise OpTypeError(f"x must have a signal axis and a last dim of 1 or 2 (rank 2 or "
                          f"more), got rank {ndim}")
    if not -ndim <= axis < ndim - 1 or axis == -1:
        raise OpTypeError(f"axis {axis} must be a signal axis of x: in [{-ndim}, -2] or "
                          f"[0, {ndim - 2}] for rank {ndim} (the last dim holds real and "
                          "imaginary parts)")
    return axis % ndim


def dft_length(attrs, size: D.Dim) -> D.Dim:
    """The transform's length: ``length``, else the axis' size (``2 * (size - 1)`` for an
    inverse one-sided transform)."""
    if attrs.length is not None:
        return attrs.length
    return 2 * (size - 1) if attrs.inverse and attrs.onesided else size


def _check_channels(t: TensorType, name: str) -> None:
    """A last dim of 1 or 2 (a symbolic one: assumed between 1 and 2, checked at run time)."""
    if not (D.at_most(1, t.shape[-1]) and D.at_most(t.shape[-1], 2)):
        raise OpTypeError(f"{name}'s last dim must be 1 (real) or 2 (real, imaginary), got "
                          f"{fmt_shape(t.shape)}")


def _dft_type(attrs, x):
    t = tensor_arg(x, "x")
    check_dtype(t, "x", FLOATS, "float32 or float64")
    axis = dft_axis(attrs.axis, t.ndim)
    _check_channels(t, "x")
    if attrs.length is not None and attrs.length < 1:
        raise OpTypeError(f"length must be at least 1, got {attrs.length}")
    channels = t.shape[-1]
    if attrs.onesided and not attrs.inverse and differ(channels, 1):
        raise OpTypeError(f"a one-sided forward DFT needs a real x (last dim 1), got "
                          f"{fmt_shape(t.shape)}")
    if attrs.onesided and attrs.inverse and differ(channels, 2):
        raise OpTypeError(f"a one-sided inverse DFT needs a complex x (last dim 2), got "
                          f"{fmt_shape(t.shape)}")
    n = dft_length(attrs, t.shape[axis])
    if attrs.onesided and not D.at_most(1, n):
        raise OpTypeError(f"a one-sided DFT along an axis of {D.dim_str(t.shape[axis])} has "
                          f"length {n}: give a length of at least 1")
    if attrs.onesided and not attrs.inverse:
        out, last = D.floordiv(n, 2) + 1, 2
    else:
        out, last = n, 1 if attrs.onesided else 2
    shape = list(t.shape)
    shape[axis], shape[-1] = out, last
    return TensorType(tuple(shape), t.dtype)


def as_complex(x: np.ndarray) -> np.ndarray:
    """ONNX's (..., 1 | 2) layout as complex128 (..., ) values."""
    z = x[..., 0].astype(np.complex128)
    if x.shape[-1] == 2:
        z = z + 1j * x[..., 1]
    return z


def as_pairs(z: np.ndarray, dtype) -> np.ndarray:
    """complex values as ONNX's (..., 2) layout of ``dtype``."""
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


def _dft_ref(attrs, x):
    dtype = np_dtype(x.dtype.name)
    axis = attrs.axis % x.ndim
    require(x.ndim >= 2 and axis < x.ndim - 1 and x.shape[-1] in (1, 2),
            f"signal.dft: x {x.shape} needs a last dim of 1 or 2 and a signal axis {attrs.axis}")
    n = dft_length(attrs, x.shape[axis])
    require(n >= 1 or (n == 0 and attrs.length is None and not attrs.onesided),
            f"signal.dft: the transform of x {x.shape} along axis {axis} would have length {n}")
    z = as_complex(x)
    if n == 0:  # an empty axis: no bins
        shape = list(x.shape)
        shape[-1] = 2
        return np.zeros(shape, dtype)
    if attrs.inverse and attrs.onesided:
        require(x.shape[-1] == 2, f"signal.dft: a one-sided inverse needs a complex x, got "
                                  f"{x.shape}")
        return np.fft.irfft(z, n=n, axis=axis)[..., None].astype(dtype)
    require(not attrs.onesided or x.shape[-1] == 1,
            f"signal.dft: a one-sided DFT needs a real x, got {x.shape}")
    y = np.fft.ifft(z, n=n, axis=axis) if attrs.inverse else np.fft.fft(z, n=n, axis=axis)
    if attrs.onesided:
        y = np.take(y, np.arange(n // 2 + 1), axis=axis)
    return as_pairs(y, dtype)


register("signal.dft", inputs=("x",), infer=_dft_type, reference=_dft_ref, pattern=OPAQUE,
         attrs=[attr("axis", INT, 1), attr("length", OPT_INT, None),
                attr("onesided", BOOL, False), attr("inverse", BOOL, False)],
         doc="discrete Fourier transform along one axis of real (..., 1) or complex (..., 2) "
             "data, each line cut or zero-padded to length (the axis' size when None); "
             "onesided: bins 0..length/2 of a real signal, or with inverse a real signal from "
             "them; inverse scales by 1/length (ONNX DFT)")


# --- signal.stft --------------------------------------------------------------------------------

def stft_frames(length: D.Dim, frame_length: int, step: int) -> D.Dim:
    """How many frames of ``frame_length`` fit ``length`` at ``step`` (symbolic in length).

    Never below 0: a symbolic signal shorter than a frame then gets an empty output, and the
    kernel its error, not the allocation a negative size (``max`` drops out where the length
    provably fits a frame: ``n + 400`` samples, frames of 400)."""
    return D.dim_max(D.floordiv(length - frame_length, step) + 1, 0)


def stft_bins(frame_length: int, onesided: bool) -> int:
    return frame_length // 2 + 1 if onesided else frame_length


def _stft_type(attrs, s, w):
    sig, window = tensor_arg(s, "signal"), tensor_arg(w, "window")
    check_dtype(sig, "signal", FLOATS, "float32 or float64")
    if sig.ndim != 3:
        raise OpTypeError(f"signal must be (batch, length, 1 | 2), got {fmt_shape(sig.shape)}")
    _check_channels(sig, "signal")
    if window.ndim != 1 or window.dtype != sig.dtype:
        raise OpTypeError(f"window must be 1-d of the signal's dtype {sig.dtype}, got "
                          f"{fmt_shape(window.shape)} {window.dtype}")
    frame_length = window.shape[0]
    if not D.is_static(frame_length):
        raise OpTypeError(f"the window's length (the frame length) must be static, got "
                          f"{D.dim_str(frame_length)}")
    if frame_length < 1:
        raise OpTypeError("the window must have at least one value")
    if attrs.frame_step < 1:
        raise OpTypeError(f"frame_step must be at least 1, got {attrs.frame_step}")
    length = sig.shape[1]
    if not D.at_most(frame_length, length):
        raise OpTypeError(f"the signal's length {length} is shorter than a frame "
                          f"({frame_length})")
    frames = stft_frames(length, frame_length, attrs.frame_step)
    return TensorType((sig.shape[0], frames, stft_bins(frame_length, attrs.onesided), 2),
                      sig.dtype)


def _stft_ref(attrs, signal, window):
    dtype = np_dtype(signal.dtype.name)
    require(signal.ndim == 3 and signal.shape[-1] in (1, 2) and window.ndim == 1,
            f"signal.stft: signal {signal.shape} must be (batch, length, 1 | 2) and window "
            f"{window.shape} 1-d")
    batch, length, _ = signal.shape
    frame_length, step = window.shape[0], attrs.frame_step
    require(length >= frame_length, f"signal.stft: the signal's length {length} is shorter than "
                                    f"a frame ({frame_length})")
    frames = stft_frames(length, frame_length, step)
    starts = np.arange(frames) * step
    z = as_complex(signal)[:, starts[:, None] + np.arange(frame_length)]
    y = np.fft.fft(z * window.astype(np.float64), axis=-1)
    return as_pairs(y[..., :stft_bins(frame_length, attrs.onesided)], dtype)


register("signal.stft", inputs=("signal", "window"), infer=_stft_type, reference=_stft_ref,
         pattern=OPAQUE, attrs=[attr("frame_step", INT, required=True),
                                attr("onesided", BOOL, True)],
         doc="short-time Fourier transform of a (batch, length, 1 or 2) signal: the DFT of "
             "each frame of len(window) values at every frame_step, times the window -> "
             "(batch, (length - len(window)) // frame_step + 1, bins, 2), bins "
             "len(window) // 2 + 1 if onesided (ONNX STFT)")
