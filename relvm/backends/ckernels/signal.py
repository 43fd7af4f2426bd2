"""C kernels of signal.dft and signal.stft (kernels/fft.c). A transform's plan -- its radices
and twiddles, or Bluestein's chirp -- is made once per (length, direction) and shared by every
kernel and shape that uses it; each kernel keeps the C arguments of the shapes it has seen."""

from __future__ import annotations

from functools import lru_cache

from ...ops import signal as signal_ops
from . import kernel
from .common import CODE, FLOATS, attrs_of, check, library, prod, remember, shape_error


@lru_cache(maxsize=64)
def fft_plan(n: int, inverse: bool):
    """The C plan of a length-``n`` complex DFT (freed with its last user)."""
    ffi, lib = library()
    plan = lib.relvm_fft_plan_new(n, int(inverse))
    if plan == ffi.NULL:
        raise MemoryError(f"signal: no memory for the plan of a DFT of length {n}")
    return ffi.gc(plan, lib.relvm_fft_plan_free)


def _dft_plan(attrs, x, out):
    """The C arguments of signal.dft for these shapes (its checks run here, once)."""
    if len(x) < 2 or x[-1] not in (1, 2) or not -len(x) <= attrs.axis < len(x) - 1 \
            or attrs.axis == -1:
        raise shape_error(f"signal.dft: x needs a last dim of 1 or 2 and a signal axis "
                          f"{attrs.axis}", x=x)
    axis = attrs.axis % len(x)
    n = signal_ops.dft_length(attrs, x[axis])
    hermitian = attrs.inverse and attrs.onesided
    bins = n // 2 + 1 if attrs.onesided and not attrs.inverse else n
    want = x[:axis] + (bins,) + x[axis + 1:-1] + (1 if hermitian else 2,)
    if out != want:
        raise shape_error("signal.dft: wrong output shape", x=x, output=out)
    if n < 1 and (attrs.onesided or attrs.length is not None):
        raise shape_error(f"signal.dft: the transform along axis {axis} would have length {n}",
                          x=x)
    if attrs.onesided and x[-1] != (2 if attrs.inverse else 1):
        raise shape_error("signal.dft: a one-sided DFT needs a real x (an inverse one, a "
                          "complex x)", x=x)
    if prod(out) == 0:
        return None
    scale = 1.0 / n if attrs.inverse else 1.0
    return (fft_plan(n, attrs.inverse), prod(x[:axis]), x[axis], prod(x[axis + 1:-1]), x[-1],
            bins, 1 if hermitian else 2, int(hermitian), scale)


@kernel("signal.dft", dtypes=FLOATS, accepts=lambda e: e.outputs[0] == e.inputs[0])
def make_dft(entry):
    ffi, lib = library()
    attrs, code, name = attrs_of(entry), CODE[entry.inputs[0]], entry.name
    dft, ptr, plans = lib.relvm_dft, ffi.from_buffer, {}

    def run(x, out):
        key = (x.shape, out.shape)
        if key in plans:
            args = plans[key]
        else:
            args = remember(plans, key, _dft_plan(attrs, *key))
        if args is not None:
            check(dft(code, *args, ptr(x), ptr(out)), f"{name} {key}")
    return run


def _stft_plan(attrs, x, window, out):
    if len(x) != 3 or x[-1] not in (1, 2) or len(window) != 1:
        raise shape_error("signal.stft: the signal must be (batch, length, 1 | 2) and the "
                          "window 1-d", signal=x, window=window)
    (batch, length, channels), frame_length = x, window[0]
    if length < frame_length:
        raise shape_error(f"signal.stft: the signal's length {length} is shorter than a frame "
                          f"({frame_length})", signal=x, window=window)
    frames = signal_ops.stft_frames(length, frame_length, attrs.frame_step)
    bins = signal_ops.stft_bins(frame_length, attrs.onesided)
    if out != (batch, frames, bins, 2):
        raise shape_error("signal.stft: wrong output shape", signal=x, window=window,
                          output=out)
    if prod(out) == 0:
        return None
    return (fft_plan(frame_length, False), batch, length, channels, frames, attrs.frame_step,
            bins)


@kernel("signal.stft", dtypes=FLOATS,
        accepts=lambda e: e.inputs[1] == e.inputs[0] and e.outputs[0] == e.inputs[0])
def make_stft(entry):
    ffi, lib = library()
    attrs, code, name = attrs_of(entry), CODE[entry.inputs[0]], entry.name
    stft, ptr, plans = lib.relvm_stft, ffi.from_buffer, {}

    def run(x, window, out):
        key = (x.shape, window.shape, out.shape)
        if key in plans:
            args = plans[key]
        else:
            args = remember(plans, key, _stft_plan(attrs, *key))
        if args is not None:
            check(stft(code, *args, ptr(window), ptr(x), ptr(out)), f"{name} {key}")
    return run
