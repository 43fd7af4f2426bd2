"""Import ONNX models: ``from_onnx(model) -> (module, params)``.

ONNX ``dim_param`` s become named symbolic dims (``batch_size``, ``sequence_length``; names are
made valid identifiers), unknown dims become ``?``, and initializers become parameters of
``@main`` that :func:`relvm.build` binds::

    mod, params = relvm.frontend.onnx.from_onnx("model.onnx")
    exe = relvm.build(mod, params=params)          # compiled once, for every batch size

The model's local functions, and the ops the ONNX standard defines as functions of other ops
that relvm has no converter for (SwiGLU, CausalConvWithState, ...), are inlined first
(``functions.py``). Needs the ``onnx`` package (``pip install "relvm[onnx]"``). See ``docs/onnx.md`` for the ops,
the opsets and what stays static.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from .importer import RelvmImportError

__all__ = ["from_onnx", "load_model", "supported_ops", "RelvmImportError"]


def from_onnx(model: Any, *, freeze: Mapping[str, Any] | None = None):
    """Convert an ONNX model into a typed relvm Module and its params.

    Parameters
    ----------
    model : onnx.ModelProto, str, os.PathLike or bytes
        The model, a path to a ``.onnx`` file, or its serialized bytes.
    freeze : mapping of str to array_like, optional
        Values for graph inputs to take as constants (for example an ``axes`` input that a
        model feeds at run time but relvm needs at import); they leave @main's signature.

    Returns
    -------
    (Module, dict of str to numpy.ndarray)
        ``@main`` takes the graph inputs in order (initializers excluded), then one parameter
        per weight, which ``params`` holds by name. A model with several outputs returns a tuple.

    Raises
    ------
    RelvmImportError
        Unsupported op types (all of them, in one error), or a node relvm cannot convert (the
        message names the node and its op type).

    Examples
    --------
    >>> mod, params = from_onnx("silero_vad_16k_sequence.onnx")
    >>> print(mod["main"].params[0].type_annotation)
    Tensor[(sequence_length, 576), float32]
    >>> exe = relvm.build(mod, params=params)
    """
    try:
        import onnx
    except ImportError:  # pragma: no cover
        raise RelvmImportError('importing ONNX needs the onnx package: pip install "relvm[onnx]"') \
            from None
    from .converters import CONVERTERS
    from .functions import expand_functions
    from .importer import Importer, op_key

    model = load_model(model)
    model = expand_functions(model, lambda domain, op: op_key(domain, op) in CONVERTERS)
    frozen = {k: np.asarray(v) for k, v in (freeze or {}).items()}
    return Importer(model, frozen).run()


def load_model(model: Any):
    """An ``onnx.ModelProto`` from a path, bytes or a ModelProto; a file that is not an ONNX
    model (protobuf cannot decode it) or cannot be read is a RelvmImportError."""
    try:
        import onnx
    except ImportError:  # pragma: no cover
        raise RelvmImportError('importing ONNX needs the onnx package: pip install "relvm[onnx]"') \
            from None
    from google.protobuf.message import DecodeError

    what = os.fspath(model) if isinstance(model, (str, os.PathLike)) else "the model bytes"
    try:
        if isinstance(model, (str, os.PathLike)):
            model = onnx.load(os.fspath(model))
        elif isinstance(model, (bytes, bytearray, memoryview)):
            model = onnx.load_from_string(bytes(model))
    except DecodeError as e:
        raise RelvmImportError(f"{what} is not an ONNX model (protobuf cannot decode it: {e})") \
            from None
    except OSError as e:
        raise RelvmImportError(f"cannot read {what}: {e.strerror or e}") from None
    if not isinstance(model, onnx.ModelProto):
        raise RelvmImportError(f"expected an onnx.ModelProto, a path or bytes, got "
                               f"{type(model).__name__}")
    return model


def supported_ops() -> list[str]:
    """The ONNX op types relvm imports, sorted: ONNX's own by name, others as
    ``domain::name`` (``ai.onnx.ml::Binarizer``)."""
    from .converters import CONVERTERS

    return sorted(CONVERTERS)

