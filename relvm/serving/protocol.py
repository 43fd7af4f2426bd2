"""The Open Inference Protocol (KServe v2) over HTTP, as data: requests in, responses out.

No web framework here: ``decode_request`` turns an infer request's body (JSON, or JSON followed
by raw tensors -- the binary tensor data extension) into NumPy arrays, and ``encode_response``
turns results back into a body, binary where the client asked for it. Every problem with a
request is a :class:`~relvm.errors.RelvmInputError` whose text the server returns with HTTP 400.

The wire format (https://kserve.github.io/website/latest/modelserving/data_plane/v2_protocol/):

- a request is ``{"id"?, "parameters"?, "inputs": [{"name", "shape", "datatype", "data"?,
  "parameters"?: {"binary_data_size": N}}], "outputs"?: [{"name", "parameters"?:
  {"binary_data": bool}}]}``; ``data`` is the tensor's elements in row-major order, flat or
  nested;
- with the binary extension, the header ``Inference-Header-Content-Length`` gives the JSON's
  length and each input with ``binary_data_size`` has its raw little-endian bytes after the JSON,
  in the order of ``inputs``; a response does the same for the outputs the client asked in
  binary (``binary_data`` on an output, or ``binary_data_output`` among the request's
  parameters).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import RelvmInputError

#: The header naming the JSON part's length in a body with binary tensors.
HEADER_LENGTH = "inference-header-content-length"

#: relvm dtype -> the protocol's datatype name.
DATATYPES = {
    "bool": "BOOL", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32",
    "uint64": "UINT64", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
    "float16": "FP16", "float32": "FP32", "float64": "FP64",
}
#: The protocol's datatype name -> NumPy dtype (little-endian, as the protocol sends them).
NUMPY = {v: np.dtype(k).newbyteorder("<") for k, v in DATATYPES.items()}


@dataclass
class InferRequest:
    """A decoded infer request: inputs by name, and how each output should be sent."""

    id: str | None
    inputs: dict[str, np.ndarray]
    #: Outputs the client asked for, by name (empty: all of them).
    outputs: list[str] = field(default_factory=list)
    #: Outputs to send as binary tensor data, by name; ``binary_all``: every output.
    binary: set[str] = field(default_factory=set)
    binary_all: bool = False
    parameters: dict = field(default_factory=dict)


def _object(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise RelvmInputError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _shape(value: Any, what: str) -> tuple[int, ...]:
    if (not isinstance(value, list)
            or not all(type(d) is int and d >= 0 for d in value)):
        raise RelvmInputError(f"{what}: 'shape' must be a list of non-negative integers, got "
                              f"{json.dumps(value)[:80]}")
    return tuple(value)


def _flat(data: Any, count: int, dtype: np.dtype, what: str) -> np.ndarray:
    """``data`` (flat or nested lists of numbers or booleans) as ``count`` elements of dtype:
    NumPy reads the list (fast), then its kind is checked: numbers for FP*, integers in range
    for INT*/UINT*, booleans for BOOL -- never a silent cast of a string, null or bool."""
    try:
        arr = np.array(data if isinstance(data, list) else [data])
    except (ValueError, OverflowError):
        raise RelvmInputError(f"{what}: 'data' is not a regular nested list of numbers") from None
    if arr.size != count:
        raise RelvmInputError(f"{what}: 'data' has {arr.size} elements, 'shape' needs {count}")
    kinds = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}[dtype.kind]
    if arr.size and dtype.kind in "iu" and arr.dtype.kind in "fO":
        # Integers past int64 (a UINT64's upper half) make NumPy guess float64 or object:
        # read them exactly, one by one.
        values = list(_leaves(data))
        if all(type(v) is int for v in values):
            _check_range(min(values), max(values), dtype, what)
            return np.array(values, dtype=dtype.newbyteorder("="))
    if arr.size and arr.dtype.kind not in kinds:
        raise RelvmInputError(f"{what}: {_name(dtype)} data must be "
                              f"{ {'b': 'true or false', 'iu': 'integers'}.get(kinds, 'numbers')}")
    if dtype.kind in "iu" and arr.size:
        _check_range(arr.min(), arr.max(), dtype, what)
    return arr.reshape(-1).astype(dtype.newbyteorder("="))


def _check_range(low, high, dtype: np.dtype, what: str) -> None:
    info = np.iinfo(dtype)
    if low < info.min or high > info.max:
        raise RelvmInputError(f"{what}: a value is out of range for {_name(dtype)}")


def _leaves(data: Any):
    if isinstance(data, list):
        for x in data:
            yield from _leaves(x)
    else:
        yield data


def _name(dtype: np.dtype) -> str:
    return DATATYPES[np.dtype(dtype).newbyteorder("=").name]


def split_body(body: bytes, header_length: str | None) -> tuple[bytes, memoryview]:
    """(the JSON part, the binary part) of a body, per ``Inference-Header-Content-Length``."""
    if header_length is None:
        return body, memoryview(b"")
    try:
        n = int(header_length)
    except ValueError:
        n = -1
    if not 0 <= n <= len(body):
        raise RelvmInputError(f"Inference-Header-Content-Length is {header_length!r}; the body "
                              f"has {len(body)} bytes")
    return body[:n], memoryview(body)[n:]


def decode_request(body: bytes, header_length: str | None = None) -> InferRequest:
    """An infer request from its body (see the module docstring). Raises RelvmInputError."""
    head, rest = split_body(body, header_length)
    try:
        doc = json.loads(head)
    except (ValueError, UnicodeDecodeError) as e:
        raise RelvmInputError(f"the request is not valid JSON: {e}") from None
    doc = _object(doc, "the request")
    params = _object(doc.get("parameters", {}), "'parameters'")
    items = doc.get("inputs")
    if not isinstance(items, list) or not items:
        raise RelvmInputError("the request needs 'inputs', a non-empty list")
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    for k, item in enumerate(items):
        item = _object(item, f"inputs[{k}]")
        name = item.get("name")
        if not isinstance(name, str):
            raise RelvmInputError(f"inputs[{k}] needs a 'name' (a string)")
        what = f"input '{name}'"
        if name in inputs:
            raise RelvmInputError(f"{what} is given twice")
        datatype = item.get("datatype")
        if datatype not in NUMPY:
            raise RelvmInputError(f"{what}: datatype {datatype!r} is not one relvm serves "
                                  f"({', '.join(NUMPY)})")
        dtype = NUMPY[datatype]
        shape = _shape(item.get("shape"), what)
        count = math.prod(shape)
        iparams = _object(item.get("parameters", {}), f"{what} 'parameters'")
        size = iparams.get("binary_data_size")
        if size is not None:
            if type(size) is not int or size != count * dtype.itemsize:
                raise RelvmInputError(f"{what}: binary_data_size is {size!r}; {datatype} of "
                                      f"shape {list(shape)} takes {count * dtype.itemsize} bytes")
            if offset + size > len(rest):
                raise RelvmInputError(f"{what}: the body ends before its {size} bytes of "
                                      f"binary data")
            arr = np.frombuffer(rest[offset:offset + size], dtype=dtype)
            arr = arr.astype(dtype.newbyteorder("="), copy=False).reshape(shape)
            offset += size
        elif "data" in item:
            arr = _flat(item["data"], count, dtype, what).reshape(shape)
        else:
            raise RelvmInputError(f"{what} has no 'data' and no binary_data_size")
        inputs[name] = arr
    if offset != len(rest):
        raise RelvmInputError(f"the body has {len(rest) - offset} bytes of binary data that "
                              f"no input claims")
    outputs, binary = [], set()
    for k, item in enumerate(doc.get("outputs") or []):
        item = _object(item, f"outputs[{k}]")
        name = item.get("name")
        if not isinstance(name, str):
            raise RelvmInputError(f"outputs[{k}] needs a 'name' (a string)")
        outputs.append(name)
        if _object(item.get("parameters", {}), f"output '{name}' 'parameters'").get(
                "binary_data"):
            binary.add(name)
    rid = doc.get("id")
    return InferRequest(id=rid if isinstance(rid, str) else None, inputs=inputs,
                        outputs=outputs, binary=binary,
                        binary_all=bool(params.get("binary_data_output")), parameters=params)


def encode_response(model: str, version: str, request: InferRequest,
                    results: list[tuple[str, np.ndarray]]) -> tuple[bytes, int | None]:
    """(body, JSON length or None): the response to ``request`` with ``results`` (name,
    array), binary tensor data where the client asked for it."""
    outputs, blobs = [], []
    for name, arr in results:
        datatype = DATATYPES[arr.dtype.name]
        out: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(arr.shape)}
        if request.binary_all or name in request.binary:
            raw = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
            out["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            out["data"] = arr.reshape(-1).tolist()
        outputs.append(out)
    doc: dict[str, Any] = {"model_name": model, "model_version": version, "outputs": outputs}
    if request.id is not None:
        doc["id"] = request.id
    head = json.dumps(doc, separators=(",", ":"), allow_nan=True).encode()
    if not blobs:
        return head, None
    return b"".join([head, *blobs]), len(head)


def error_body(message: str) -> bytes:
    """The protocol's error response: ``{"error": message}``."""
    return json.dumps({"error": message}).encode()
