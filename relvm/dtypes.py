"""The element types relvm knows, by their IR names. Shared by the front end and the runtime."""

from __future__ import annotations

import numpy as np

#: IR dtype name -> NumPy dtype. The order is the order of the dtype codes in executables.
DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype("float32"),
    "float64": np.dtype("float64"),
    "float16": np.dtype("float16"),
    "int64": np.dtype("int64"),
    "int32": np.dtype("int32"),
    "int8": np.dtype("int8"),
    "uint8": np.dtype("uint8"),
    "bool": np.dtype("bool"),
    # Appended after bool, never inserted: a file's dtype codes keep their meaning.
    "int16": np.dtype("int16"),
    "uint16": np.dtype("uint16"),
    "uint32": np.dtype("uint32"),
    "uint64": np.dtype("uint64"),
}

FLOAT_DTYPES = frozenset({"float32", "float64", "float16"})
INT_DTYPES = frozenset({"int64", "int32", "int8", "uint8", "int16", "uint16", "uint32",
                        "uint64"})


def is_dtype(name: object) -> bool:
    return isinstance(name, str) and name in DTYPES


def to_numpy(name: str) -> np.dtype:
    return DTYPES[name]


def from_numpy(dtype: np.dtype) -> str | None:
    """The IR name of a NumPy dtype, or None if relvm does not support it."""
    name = np.dtype(dtype).name
    return name if name in DTYPES else None
