"""The wire format on its own (protocol.py, model.py): every datatype in JSON and binary, the
binary extension's framing both ways, and the signature checks' messages."""

from __future__ import annotations

import json

import numpy as np
import pytest

import relvm
from relvm.errors import RelvmInputError
from relvm.serving import ModelSignature
from relvm.serving import protocol as P

VALUES = {
    "BOOL": [True, False, True, True], "UINT8": [0, 255, 7, 1], "UINT16": [0, 65535, 3, 2],
    "UINT32": [0, 2 ** 32 - 1, 5, 4], "UINT64": [0, 2 ** 63, 9, 8],
    "INT8": [-128, 127, 0, -1], "INT16": [-32768, 32767, 1, 2], "INT32": [-2 ** 31, 7, 0, 1],
    "INT64": [-2 ** 63, 2 ** 63 - 1, 0, 5], "FP16": [0.5, -2.0, 65504.0, 1e-3],
    "FP32": [0.1, -3.5, 1e30, float(np.float32(1 / 3))], "FP64": [0.1, -3.5, 1e300, 1 / 3],
}


@pytest.mark.parametrize("datatype", list(VALUES))
def test_every_datatype_round_trips_in_json_and_binary(datatype):
    dtype = P.NUMPY[datatype].newbyteorder("=")
    arr = np.array(VALUES[datatype], dtype=dtype).reshape(2, 2)
    doc = {"inputs": [{"name": "a", "shape": [2, 2], "datatype": datatype,
                       "data": [VALUES[datatype][:2], VALUES[datatype][2:]]}]}
    got = P.decode_request(json.dumps(doc).encode()).inputs["a"]
    assert got.dtype == dtype and got.shape == (2, 2)
    np.testing.assert_array_equal(got, arr)
    raw = arr.astype(P.NUMPY[datatype]).tobytes()
    head = json.dumps({"inputs": [{"name": "a", "shape": [2, 2], "datatype": datatype,
                                   "parameters": {"binary_data_size": len(raw)}}]}).encode()
    got = P.decode_request(head + raw, str(len(head))).inputs["a"]
    np.testing.assert_array_equal(got, arr)
    # and back: as JSON, then as binary
    req = P.InferRequest(id="7", inputs={})
    body, n = P.encode_response("m", "1", req, [("y", arr)])
    out = json.loads(body)
    assert n is None and out["id"] == "7" and out["model_name"] == "m"
    assert out["outputs"][0]["datatype"] == datatype
    np.testing.assert_array_equal(np.array(out["outputs"][0]["data"], dtype).reshape(2, 2),
                                  arr)
    req.binary_all = True
    body, n = P.encode_response("m", "1", req, [("y", arr)])
    meta = json.loads(body[:n])["outputs"][0]
    assert meta["parameters"]["binary_data_size"] == arr.nbytes
    np.testing.assert_array_equal(np.frombuffer(body[n:], P.NUMPY[datatype]).reshape(2, 2),
                                  arr)


def test_outputs_in_binary_only_where_asked():
    doc = {"inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [1]}],
           "outputs": [{"name": "y", "parameters": {"binary_data": True}}, {"name": "z"}]}
    req = P.decode_request(json.dumps(doc).encode())
    assert req.outputs == ["y", "z"] and req.binary == {"y"}
    y, z = np.arange(3, dtype=np.float32), np.arange(2, dtype=np.int64)
    body, n = P.encode_response("m", "1", req, [("y", y), ("z", z)])
    outs = json.loads(body[:n])["outputs"]
    assert outs[1]["data"] == [0, 1] and "data" not in outs[0]
    np.testing.assert_array_equal(np.frombuffer(body[n:], np.float32), y)


@pytest.mark.parametrize("datatype,data,message", [
    ("INT8", [1, 128], "out of range for INT8"),
    ("UINT8", [-1, 0], "out of range for UINT8"),
    ("INT32", [1.5, 2], "INT32 data must be integers"),
    ("BOOL", [1, 0], "BOOL data must be true or false"),
    ("FP32", [True, False], "FP32 data must be numbers"),
    ("FP32", [1, None], "FP32 data must be numbers"),
    ("FP32", [[1], [2, 3]], "not a regular nested list"),
])
def test_data_of_the_wrong_kind_is_refused(datatype, data, message):
    doc = {"inputs": [{"name": "a", "shape": [2], "datatype": datatype, "data": data}]}
    with pytest.raises(RelvmInputError, match=message):
        P.decode_request(json.dumps(doc).encode())


def test_signature_checks_name_the_input_and_dim():
    exe = relvm.build(relvm.parse(
        "def @main(%a: Tensor[(n, t, 4), float32], %b: Tensor[(n, 2), int64]) "
        "{ (sum(%a, axis=[1]), %b) }"), upper_bounds={"n": 16})
    sig = ModelSignature(exe)
    assert sig.batch_dim == "n"
    assert [t.metadata()["shape"] for t in sig.inputs] == [[-1, -1, 4], [-1, 2]]
    a, b = np.zeros((2, 3, 4), np.float32), np.zeros((2, 2), np.int64)
    assert [x.shape for x in sig.check({"a": a, "b": b})] == [(2, 3, 4), (2, 2)]
    cases = [({"a": a}, "input 'b' is missing"),
             ({"a": a, "b": b, "c": b}, "unknown input 'c'; the model takes a, b"),
             ({"a": a, "b": b.astype(np.int32)}, "input 'b': expected datatype INT64, got INT32"),
             ({"a": a, "b": np.zeros((3, 2), np.int64)},
              "input 'b' dim 0 (n) is 3; another input gives n = 2"),
             ({"a": np.zeros((17, 1, 4), np.float32), "b": np.zeros((17, 2), np.int64)},
              "input 'a' dim 0 (n) is 17, over the model's upper bound 16"),
             ({"a": a[:, :, :3], "b": b}, "input 'a' dim 2: expected 4, got 3")]
    for given, message in cases:
        with pytest.raises(RelvmInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
            sig.check(given)


def test_no_batch_dim_when_the_first_dims_differ_or_the_dim_appears_elsewhere():
    for text in ["def @main(%a: Tensor[(n, 4), float32], %b: Tensor[(m, 4), float32]) "
                 "{ (%a, %b) }",
                 "def @main(%a: Tensor[(n, n), float32]) { %a }",
                 "def @main(%a: Tensor[(4, 4), float32]) { %a }",
                 "def @main(%a: Tensor[(n, 4), float32]) { sum(%a, axis=[0]) }"]:
        assert ModelSignature(relvm.build(relvm.parse(text))).batch_dim is None, text
