"""MelWeightMatrix, made a constant at import: against onnx's reference over sizes, rates and
band edges and output dtypes; its inputs must be known at import, and bands past the spectrum
are refused by name."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would pass
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import relvm  # noqa: E402
from relvm.frontend.onnx import RelvmImportError, from_onnx  # noqa: E402

NAMES = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")


def mel_model(values, output_datatype=None, constant=True):
    """A MelWeightMatrix node whose inputs are initializers (or graph inputs)."""
    arrays = [np.asarray(v, np.int64 if i < 3 else np.float32) for i, v in enumerate(values)]
    attrs = {} if output_datatype is None else {"output_datatype": output_datatype}
    node = helper.make_node("MelWeightMatrix", list(NAMES), ["y"], **attrs)
    inits = [numpy_helper.from_array(a, n) for a, n in zip(arrays, NAMES)] if constant else []
    inputs = [] if constant else [
        helper.make_tensor_value_info(n, TensorProto.INT64 if i < 3 else TensorProto.FLOAT, [])
        for i, n in enumerate(NAMES)]
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
                              initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, arrays


@pytest.mark.parametrize("values", [(8, 16, 8192, 0, 4096), (20, 512, 16000, 20, 7600),
                                    (3, 10, 100, 5, 45), (1, 64, 22050, 300, 8000),
                                    (0, 8, 100, 0, 50), (40, 400, 16000, 0, 8000)], ids=str)
@pytest.mark.parametrize("output_datatype", [None, TensorProto.DOUBLE])
def test_against_onnx_reference(values, output_datatype):
    m, arrays = mel_model(values, output_datatype)
    mod, params = from_onnx(m)
    got = relvm.VirtualMachine(relvm.build(mod, params=params)).invoke("main")
    want = ReferenceEvaluator(m).run(None, {})[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_inputs_must_be_known_at_import():
    m, arrays = mel_model((8, 16, 8192, 0, 4096), constant=False)
    with pytest.raises(RelvmImportError, match=r"input 0 \(num_mel_bins\) must be a constant"):
        from_onnx(m)
    frozen = dict(zip(NAMES, arrays))
    mod, params = from_onnx(m, freeze=frozen)
    got = relvm.VirtualMachine(relvm.build(mod, params=params)).invoke("main")
    assert got.shape == (9, 8)


@pytest.mark.parametrize("values, message", [
    ((8, 16, 8192, 0, 9000), r"the band edges 0.0 to 9000.0 Hz fall outside the 9 spectrogram "
                             r"bins of dft_length 16 at sample_rate 8192"),
    ((8, 16, 8192, -500, 4000), r"fall outside the 9 spectrogram bins"),
    ((-1, 16, 8192, 0, 4000), r"num_mel_bins -1 and dft_length 16 must be >= 0 and "
                              r"sample_rate 8192 > 0"),
    ((8, 16, 0, 0, 4000), r"sample_rate 0 > 0"),
])
def test_errors(values, message):
    m, _ = mel_model(values)
    with pytest.raises(RelvmImportError, match=message):
        from_onnx(m)
