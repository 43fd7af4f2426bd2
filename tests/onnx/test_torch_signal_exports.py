"""Audio front ends as people export them (issue 46): a log-mel spectrogram made with torch.stft
(Whisper's n_fft 400 and hop 160, a Hann window, center=True: a reflect Pad, then ONNX STFT)
and torch.fft.rfft (ONNX DFT whose dft_length is Shape(x)[axis]), exported by torch.onnx's
dynamo exporter with the signal's length dynamic, imported once, built once (C kernels, fusion
on) and run at three lengths against torch (1e-4 relative) and ONNX Runtime on the same file.

torch and onnxscript are the ``hf`` test extra (``pip install ".[test,hf]"``); without them
these tests skip with one line saying so, except under ``RELVM_REQUIRE_HF=1`` (set by
``.ci/run``, which installs the extra), where a missing package is a failure.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import relvm
from hfextra import need


torch = need("torch")
need("onnxscript")
onnx = need("onnx")
ort = pytest.importorskip("onnxruntime")
from relvm.frontend.onnx import from_onnx  # noqa: E402

#: Samples: a second of 16 kHz audio, an odd length, and a short one (two frames' worth).
LENGTHS = (16000, 4037, 480)


class LogMel(torch.nn.Module):
    """Whisper's front end: |STFT|^2 through a mel-like filter bank, then a log."""

    def __init__(self, n_fft: int = 400, hop: int = 160, mels: int = 80):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))
        bank = torch.from_numpy(np.random.default_rng(46).uniform(0, 1, (n_fft // 2 + 1, mels)))
        self.register_buffer("bank", bank.float())

    def forward(self, audio):
        spec = torch.stft(audio, n_fft=self.n_fft, hop_length=self.hop, window=self.window,
                          return_complex=True)
        power = spec.abs() ** 2
        mel = torch.matmul(power.transpose(-1, -2), self.bank)
        return torch.log(torch.clamp(mel, min=1e-10))


class Rfft(torch.nn.Module):
    def forward(self, audio):
        return torch.view_as_real(torch.fft.rfft(audio))


def _export(module, path: Path) -> None:
    module.eval()
    audio = torch.randn(2, LENGTHS[0])
    samples = torch.export.Dim("samples", min=401, max=480000)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (audio,), str(path), input_names=["audio"],
                          output_names=["out"], dynamic_shapes=({1: samples},), dynamo=True,
                          external_data=False)


@pytest.mark.parametrize("module, node", [(LogMel, "STFT"), (Rfft, "DFT")],
                         ids=["log_mel_stft", "rfft"])
def test_audio_front_end_runs_at_every_length(tmp_path, module, node):
    path = tmp_path / "front_end.onnx"
    net = module()
    _export(net, path)
    assert node in {n.op_type for n in onnx.load(str(path)).graph.node}
    mod, params = from_onnx(str(path))
    vm = relvm.VirtualMachine(relvm.build(mod, params=params))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for length in LENGTHS:
        audio = rng.standard_normal((2, length)).astype(np.float32)
        got = vm.invoke("main", audio)
        want = session.run(None, {"audio": audio})[0]
        with torch.no_grad():
            eager = net(torch.from_numpy(audio)).numpy()
        assert got.shape == want.shape == eager.shape
        scale = np.abs(eager).max()
        np.testing.assert_allclose(got, eager, rtol=1e-4, atol=1e-4 * scale)
        # ONNX Runtime's float32 FFT of a length that is no power of two loses digits as it
        # grows (rfft of 16000 points: 2e-3 of the largest bin): relvm must be as close to it
        # as it is to torch, or 1.5 times ONNX Runtime's own distance from torch.
        theirs = np.abs(want - eager).max()
        assert theirs < 1e-2 * scale, "ONNX Runtime is off: no oracle"
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=max(1e-4 * scale, 1.5 * theirs))
