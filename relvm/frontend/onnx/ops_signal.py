"""Window functions -- HannWindow, HammingWindow, BlackmanWindow -- and MelWeightMatrix, made
constants at import (their inputs must be known then), computed as onnx's reference does and
rounded once to the output dtype; DFT and STFT, as signal.dft and signal.stft."""

from __future__ import annotations

import numpy as np

from ...ir import dims as D
from .converters import check_made_size, converter
from .importer import ONNX_DTYPES, Node

#: w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N the length (periodic) or length - 1.
_COEFFICIENTS = {"HannWindow": (0.5, 0.5, 0.0), "HammingWindow": (25 / 46, 21 / 46, 0.0),
                 "BlackmanWindow": (0.42, 0.5, 0.08)}


@converter(*_COEFFICIENTS)
def window(n: Node):
    size = np.asarray(n.const(0, "size")).reshape(-1)
    if size.size != 1 or int(size[0]) < 0:
        raise n.fail(f"size must be one non-negative integer, got {size.tolist()}")
    length = int(size[0])
    check_made_size(n, length, "the window")
    dtype = ONNX_DTYPES.get(int(n.attr("output_datatype", 1)))
    if dtype is None or dtype == "bool":
        raise n.fail(f"output_datatype {n.attr('output_datatype')} is not a dtype relvm has")
    span = length if n.attr("periodic", 1) else length - 1
    a0, a1, a2 = _COEFFICIENTS[n.op_type]
    with np.errstate(divide="ignore", invalid="ignore"):
        phase = 2 * np.pi * np.arange(length, dtype=np.float64) / span
        w = a0 - a1 * np.cos(phase) + a2 * np.cos(2 * phase)
    return n.constant(w.astype(dtype))


def _scalar_const(n: Node, i: int, what: str) -> np.ndarray:
    v = np.asarray(n.const(i, what))
    if v.size != 1:
        raise n.fail(f"{what} must be one value, got shape {v.shape}")
    return v.reshape(())


@converter("MelWeightMatrix")
def mel_weight_matrix(n: Node):
    """A constant made at import (every input must be known then; the first two decide the
    shape): ``(dft_length // 2 + 1, num_mel_bins)`` triangles over the mel scale, computed op by
    op in the inputs' dtypes as onnx's reference computes them. Bins at the edges' mel values
    plus multiples of ``(high - low) / (num_mel_bins + 2)`` (onnx's step), each a spectrogram
    index ``floor((dft_length + 1) * f / sample_rate)``; bin ``i`` rises from index ``b[i]``
    to ``b[i + 1]`` (1 there) and falls to ``b[i + 2]``."""
    bins = int(_scalar_const(n, 0, "num_mel_bins"))
    dft = _scalar_const(n, 1, "dft_length")
    rate = _scalar_const(n, 2, "sample_rate")
    lower = _scalar_const(n, 3, "lower_edge_hertz")
    upper = _scalar_const(n, 4, "upper_edge_hertz")
    if bins < 0 or int(dft) < 0 or not rate > 0:
        raise n.fail(f"num_mel_bins {bins} and dft_length {int(dft)} must be >= 0 and "
                     f"sample_rate {rate} > 0")
    dtype = ONNX_DTYPES.get(int(n.attr("output_datatype", 1)))
    if dtype is None:
        raise n.fail(f"output_datatype {n.attr('output_datatype')} is not a dtype relvm has")
    spectrum = int(dft) // 2 + 1
    check_made_size(n, spectrum * bins, "the mel weight matrix")
    with np.errstate(all="ignore"):
        points = np.arange(0, bins + 2)
        low = 2595 * np.log1p(lower / 700) / np.log(10)
        high = 2595 * np.log1p(upper / 700) / np.log(10)
        mel = points * ((high - low) / points.shape[0]) + low
        hertz = 700 * np.expm1(mel / 2595 * np.log(10))
        edges = ((dft + 1) * hertz) // rate
    if not np.isfinite(edges).all() or edges.min() < 0 or edges.max() >= spectrum:
        raise n.fail(f"the band edges {lower} to {upper} Hz fall outside the {spectrum} "
                     f"spectrogram bins of dft_length {int(dft)} at sample_rate {rate}")
    b = edges.astype(np.int64)
    out = np.zeros((spectrum, bins))
    for i in range(bins):
        left, centre, right = b[i], b[i + 1], b[i + 2]
        if centre == left:
            out[centre, i] = 1
        else:
            out[left:centre + 1, i] = (np.arange(left, centre + 1) - left) / (centre - left)
        if right > centre:
            out[centre:right, i] = (right - np.arange(centre, right)) / (right - centre)
    return n.constant(out.astype(dtype))


def _dft_length(n: Node, size: D.Dim, irfft: bool) -> int | None:
    """DFT's ``dft_length`` as signal.dft's ``length``: None when absent, or when it is the
    length the transform has anyway (torch.fft.rfft exports ``Shape(x)[axis]``, a symbolic
    dim); otherwise it decides the output's shape and must be a constant."""
    if not n.has(1):
        return None
    known = n.sym(1)
    if known is not None and known.size == 1 and n.known(1) is None:
        default = 2 * (size - 1) if irfft else size
        if D.prove_equal(known.reshape(-1)[0], default):
            return None
    length = np.asarray(n.const(1, "dft_length"))
    if length.size != 1:
        raise n.fail(f"dft_length must be one value, got shape {length.shape}")
    return int(length.reshape(()))


@converter("DFT")
def dft(n: Node):
    """``signal.dft``. Opset 20 takes the axis as an input (default -2), which must be a
    constant; opset 17 as an attribute (default 1)."""
    if n.opset >= 20:
        axis = int(_scalar_const(n, 2, "axis")) if n.has(2) else -2
    else:
        axis = int(n.attr("axis", 1))
    inverse, onesided = bool(n.attr("inverse", 0)), bool(n.attr("onesided", 0))
    shape = n.shape(0)
    size = shape[axis] if len(shape) >= 2 and -len(shape) <= axis < len(shape) - 1 else 0
    length = _dft_length(n, size, inverse and onesided)
    return n.call("signal.dft", n.x(0), axis=axis, length=length, onesided=onesided,
                  inverse=inverse)


@converter("STFT")
def stft(n: Node):
    """``signal.stft``. ``frame_step`` and ``frame_length`` decide the output's shape: they must
    be constants, as must the window's length. Without a window the frame is rectangular (a
    window of ones); without both, the frame is the whole signal, whose length must then be
    static."""
    step = int(_scalar_const(n, 1, "frame_step"))
    frame_length = int(_scalar_const(n, 3, "frame_length")) if n.has(3) else None
    dtype = n.dtype(0)
    if n.has(2):
        window = n.x(2)
        size = n.shape(2)[0] if n.rank(2) == 1 else None
        if size is not None and not D.is_static(size):
            raise n.fail(f"the window's length {D.dim_str(size)} (the frame length) must be "
                         "static")
        if frame_length is not None and size is not None and size != frame_length:
            raise n.fail(f"the window has {size} values but frame_length is {frame_length}")
    else:
        if frame_length is None:
            shape = n.shape(0)
            frame_length = shape[1] if len(shape) == 3 else None
            if not isinstance(frame_length, int):
                raise n.fail("without a window or frame_length the frame is the whole signal, "
                             f"whose length must then be static: signal {shape}")
        if frame_length < 1:
            raise n.fail(f"frame_length must be at least 1, got {frame_length}")
        check_made_size(n, frame_length, "the rectangular window")
        window = n.constant(np.ones(frame_length), dtype)
    return n.call("signal.stft", n.x(0), window, frame_step=step,
                  onesided=bool(n.attr("onesided", 1)))
