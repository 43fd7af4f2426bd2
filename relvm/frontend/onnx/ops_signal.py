"""Window functions -- HannWindow, HammingWindow, BlackmanWindow -- and MelWeightMatrix, made
constants at import (their inputs must be known then), computed as onnx's reference does and
rounded once to the output dtype."""

from __future__ import annotations

import numpy as np

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
