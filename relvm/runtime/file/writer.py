"""Writing executable files (``Executable.save``, ``save_bytes``): see ``format.py``.

Constants are written once, straight from their arrays, each at a 64-byte-aligned offset;
with ``weights=...`` the large ones go to a separate weights file that the executable names
and identifies by a content id. Files are written beside their final path and renamed into
place, so a failed save never leaves half a file behind.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zlib
from typing import Any

import numpy as np

from ... import dtypes
from ...errors import RelvmInputError
from ..bytecode import encode
from ..executable import Executable
from .meta import CodeRange, to_meta
from .format import MAGIC, WEIGHTS_MAGIC, align, machine_tag, relvm_version, write_container


def _little_endian(c: np.ndarray) -> np.ndarray:
    c = np.asarray(c, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
    if dtypes.from_numpy(c.dtype) is None:
        raise ValueError(f"cannot save a constant of dtype {c.dtype}")
    return c.astype(c.dtype.newbyteorder("<"), copy=False)


def _json(v: Any) -> bytes:
    # Insertion order (kernel attributes keep the compiler's order); NaN/Infinity for floats.
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=True).encode()


def _write_executable(exe: Executable, out, weights_out=None, weights_ref: str = "",
                      min_weight_bytes: int = 1024) -> None:
    arrays = [_little_endian(c) for c in exe.constants]
    apart = [weights_out is not None and a.nbytes >= min_weight_bytes for a in arrays]
    index, main, moved = _constants_index(arrays, apart)
    weights = None
    if moved:
        weights = {"path": weights_ref, "content_id": _write_weights(weights_out, moved)}
    words, code = [], []
    for fn in exe.functions:
        encoded = encode(fn.instructions)
        code.append(CodeRange(len(words), len(encoded), len(fn.instructions)))
        words.extend(encoded)
    code_bytes = np.array(words, dtype="<i8").tobytes()
    library = bytes(exe.kernel_library or b"")
    arch = (exe.kernel_arch or machine_tag()) if library else None
    meta = _json(to_meta(exe, code, index, relvm_version(), arch, weights))
    sign = _signature(exe, meta, code_bytes, library)
    extern = b"".join(a.data for a in exe.externals.values())  # in meta's order
    write_container(out, MAGIC, [
        ("meta", [(0, meta)], len(meta)),
        ("code", [(0, code_bytes)], len(code_bytes)),
        ("kernels", [(0, library)], len(library)),
        ("sign", [(0, sign)], len(sign)),
        ("extern", [(0, extern)], len(extern)),
        ("consts", [(e["offset"], a) for e, a in main], _end(main))])


def _signature(exe: Executable, meta: bytes, code: bytes, library: bytes) -> bytes:
    """The ``sign`` section: this user's signature of what decides what the kernel library
    does, when the executable carries one and its code is trusted here (built in this process,
    or loaded trusted); else empty. An untrusted file saved again stays unsigned: saving never
    turns someone else's native code into the user's own."""
    if not library or not exe.native.trusted:
        return b""
    from . import trust

    signer = trust.signer()
    signature = signer.sign(trust.signed_message([meta, code, library]))
    return _json({"algorithm": "ed25519", "key": signer.public.hex(),
                  "signature": signature.hex()})


def _constants_index(arrays: list[np.ndarray], apart: list[bool]
                     ) -> tuple[list[dict], list[tuple[dict, np.ndarray]],
                                list[tuple[dict, np.ndarray]]]:
    """The meta index of every constant; (entry, array) of those in `consts` and moved apart.

    Each file packs its constants one after another at 64-byte-aligned offsets.
    """
    index, main, moved = [], [], []
    for a, w in zip(arrays, apart):
        entry = {"dtype": dtypes.from_numpy(a.dtype), "shape": list(a.shape), "nbytes": a.nbytes,
                 "crc32": zlib.crc32(a), "file": "weights" if w else "main"}
        place = moved if w else main
        entry["index" if w else "offset"] = len(moved) if w else align(_end(main))
        place.append((entry, a))
        index.append(entry)
    return index, main, moved


def _end(placed: list[tuple[dict, np.ndarray]]) -> int:
    if not placed:
        return 0
    entry, a = placed[-1]
    return entry.get("offset", 0) + a.nbytes


def _write_weights(out, moved: list[tuple[dict, np.ndarray]]) -> str:
    """Write the weights file of the ``moved`` constants; its content id."""
    index, pieces, at = [], [], 0
    for entry, a in moved:
        at = align(at)
        index.append({k: entry[k] for k in ("dtype", "shape", "nbytes", "crc32")} | {"offset": at})
        pieces.append((at, a))
        at += a.nbytes
    index_bytes = _json(index)
    write_container(out, WEIGHTS_MAGIC, [("index", [(0, index_bytes)], len(index_bytes)),
                                         ("data", pieces, at)])
    return hashlib.sha256(index_bytes).digest()[:16].hex()


def save_bytes(exe: Executable) -> bytes:
    """The executable file of ``exe`` as bytes (everything in one file)."""
    out = io.BytesIO()
    _write_executable(exe, out)
    return out.getvalue()


def save(exe: Executable, path, weights=None, *, min_weight_bytes: int = 1024) -> None:
    """Write ``exe`` to ``path`` (and its large constants to ``weights``, if given: a file in
    the same directory, which the executable names by its file name alone)."""
    path = os.fspath(path)
    if weights is None:
        with _atomic(path) as out:
            _write_executable(exe, out)
        return
    weights = os.fspath(weights)
    if os.path.abspath(weights) == os.path.abspath(path):
        raise RelvmInputError(f"the weights file must not be the executable itself ({path})")
    if os.path.dirname(os.path.abspath(weights)) != os.path.dirname(os.path.abspath(path)):
        raise RelvmInputError(f"the weights file {weights} must be in the executable's directory "
                         f"({os.path.dirname(os.path.abspath(path))}): the executable names it "
                         f"by its file name alone")
    with _atomic(weights) as wout, _atomic(path) as out:
        _write_executable(exe, out, wout, os.path.basename(weights), min_weight_bytes)


class _atomic:
    """Write to a fresh temporary file beside ``path``, made with an unpredictable name and
    O_EXCL (never following a link someone placed there); replace ``path`` only on success."""

    def __init__(self, path: str):
        self.path = path

    def __enter__(self):
        folder, name = os.path.split(os.path.abspath(self.path))
        fd, self.tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
        self.file = os.fdopen(fd, "wb")
        return self.file

    def __exit__(self, exc_type, *_):
        self.file.close()
        if exc_type is None:
            os.chmod(self.tmp, 0o666 & ~_umask())  # mkstemp makes it 0600
            os.replace(self.tmp, self.path)
        else:
            os.unlink(self.tmp)
        return False


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
