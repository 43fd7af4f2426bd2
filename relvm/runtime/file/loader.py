"""Loading executable files (``relvm.load``, ``relvm.load_bytes``): see ``format.py``.

What is checked when:

* at load, everything small: the header, ``meta`` (checksum, then JSON types and ranges,
  ``meta.py``), ``code`` (checksum, decoded, every operand, kernel entry and register
  type verified, ``runtime/verify/``),
  ``kernels`` (checksum, the machine it was compiled for, its ELF header) and the constants
  index against ``consts``;
* on first use, each constant's bytes against its own CRC-32 (``Executable.verify_constant``,
  called by the VM). Checking ``consts`` as a whole would read every weight at load and defeat
  memory-mapping; this way load time does not depend on the size of the weights and resident
  memory grows only as weights are used.

Every failure is a RelvmFormatError naming the section; nothing else escapes.

Kernel library hook: ``kernels`` carries the compiled kernel library (shared-object bytes),
which becomes ``Executable.kernel_library``. This module never loads it; it only checks it,
before anything may use it. The backend named by ``Executable.backend`` loads it (for example
writes it to its cache by hash and opens it with cffi) when ``kernels.resolve_kernels`` asks it
for the kernel table.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import platform
import stat
import struct
import sys
import threading
import zlib
from typing import Any, Callable

import numpy as np

from ... import dtypes
from ...errors import RelvmFormatError, RelvmKernelError
from .. import verify
from ..bytecode import DecodeError, decode
from . import trust
from ..executable import Executable, ExternalArtifact, NativeCode
from .meta import CodeRange, ConstantEntry, Meta, constant_entry, from_meta, tuples
from .format import (ALIGNMENT, MAGIC, SECTIONS, WEIGHTS_MAGIC, WEIGHTS_SECTIONS,
                         machine_tag, open_container)


def load(path, *, weights=None, trust_native_code: bool = False,
         external_fallback: bool = False) -> Executable:
    """Load an executable file, its constants memory-mapped (read-only, paged in on use).

    Parameters
    ----------
    path : str or PathLike
        A file written by ``Executable.save``.
    weights : str or PathLike, optional
        Where its weights file is, if it has one and it moved (default: the path recorded in
        the file, beside ``path``).
    trust_native_code : bool
        Run the native code the file carries (its generated kernels) even though it is not
        signed by a key you trust. By default such a file runs without it: each fused kernel
        is generated again here from its description, or run with relvm's own kernels.
    external_fallback : bool
        When an external backend the file's regions need cannot run here (``relvm.partition``;
        its library is missing): False (default) raises RelvmKernelError naming it; True runs
        those regions on relvm's own kernels.

    Raises
    ------
    RelvmFormatError
        The file cannot be read, is corrupted, truncated, from a newer relvm or for another
        machine; ``section`` names the part of the file.

    Examples
    --------
    >>> exe = relvm.load("mlp.rvm")
    >>> relvm.VirtualMachine(exe).invoke("main", x)
    """
    path = os.fspath(path)
    buf = _map(path, "header")
    base = os.path.dirname(os.path.abspath(path))

    def weights_buf(ref: str) -> memoryview:
        if weights is not None:
            return _map(os.fspath(weights), "weights")
        return _map(os.path.join(base, _beside(ref)), "weights")
    return _load(buf, path, weights_buf, trust_native_code, external_fallback)


def _beside(ref: str) -> str:
    """The weights file the executable names: a plain file name, in its own directory (a path,
    ``..`` or a hidden name could reach any file the reader can open)."""
    if (not ref or ref in (".", "..") or ref.startswith(".") or "/" in ref or "\\" in ref
            or "\0" in ref or os.sep in ref or (os.altsep and os.altsep in ref)):
        raise RelvmFormatError(f"the weights file must be named by a plain file name beside "
                               f"the executable, not {ref[:80]!r}", section="meta")
    return ref


def load_bytes(data: bytes | bytearray | memoryview, *, weights=None,
               trust_native_code: bool = False, external_fallback: bool = False) -> Executable:
    """Load an executable from bytes (``Executable.save_bytes``).

    The constants are read-only views of ``data`` (no copy): do not change ``data`` while the
    executable lives. ``weights`` is the weights file, if the executable keeps one.

    Examples
    --------
    >>> exe = relvm.load_bytes(relvm.build(relvm.parse(text)).save_bytes())
    """
    buf = memoryview(data).cast("B")

    def weights_buf(ref: str) -> memoryview:
        if weights is None:
            raise RelvmFormatError(f"the executable keeps its weights in {ref!r}; pass "
                                   f"weights=<path> to load_bytes", section="weights")
        return _map(os.fspath(weights), "weights")
    return _load(buf, "<bytes>", weights_buf, trust_native_code, external_fallback)


def _map(path: str, section: str) -> memoryview:
    """The file at ``path`` memory-mapped. Opened without blocking and checked to be a regular
    file before anything is read: a FIFO or a device there would block or never end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise RelvmFormatError(f"{path} is not a regular file", section=section)
            if st.st_size == 0:
                raise RelvmFormatError(f"{path} is empty", section=section)
            return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    except OSError as e:
        raise RelvmFormatError(f"cannot read {path}: {e.strerror or e}",
                               section=None if section == "header" else section) from None


def _load(buf: memoryview, source: str, weights_buf: Callable[[str], memoryview],
          trust_native_code: bool, external_fallback: bool = False) -> Executable:
    stage = ["header"]  # the section being read, for errors nothing more specific caught
    try:
        return _read_executable(buf, weights_buf, stage, trust_native_code, external_fallback)
    except RelvmFormatError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, struct.error, OverflowError,
            RecursionError, MemoryError, DecodeError) as e:
        raise RelvmFormatError(f"{source}: malformed ({type(e).__name__}: {e})",
                               section=stage[0]) from None


def _fail(section: str | None, message: str) -> RelvmFormatError:
    return RelvmFormatError(message, section=section)


def _read_executable(buf: memoryview, weights_buf: Callable[[str], memoryview],
                     stage: list[str], trust_native_code: bool,
                     external_fallback: bool = False) -> Executable:
    box = open_container(buf, MAGIC, SECTIONS, _fail)
    stage[0] = "meta"
    meta_bytes = box.checked("meta")
    meta = from_meta(_parse_json(meta_bytes, "meta", dict))
    stage[0] = "code"
    code_bytes = box.checked("code")
    words = _words(code_bytes)
    stage[0] = "kernels"
    library = _kernel_library(box.checked("kernels"), meta.kernel_arch)
    stage[0] = "sign"
    native = _native_code(box, [meta_bytes, code_bytes, library], trust_native_code)
    _check_backend(meta.backend)
    stage[0] = "extern"
    externals = _externals(box, meta.externals)
    stage[0] = "consts"
    offset, size = box.span("consts")
    constants = _constants(buf[offset:offset + size], meta, weights_buf)
    stage[0] = "meta"
    uses = [verify.check_program(k, p) for k, p in enumerate(meta.dim_programs)]
    exe = Executable(meta.functions, [a for a, _ in constants], meta.kernels,
                     [tuples(p) for p in meta.dim_programs], meta.upper_bounds, meta.backend,
                     library, meta.kernel_arch or "", externals)
    exe.native = native
    exe.external_fallback = external_fallback
    stage[0] = "code"
    _attach_code(exe, meta.code, words, box.version)
    verify.check_executable(exe, uses)
    _check_external_backends(exe)
    exe.constant_checks = ConstantChecks([a for a, _ in constants], [w for _, w in constants])
    return exe


def _externals(box, entries: list[tuple[str, str, int, int]]) -> dict[str, ExternalArtifact]:
    """The artifacts in ``extern``, each where ``meta.externals`` says, tiling the section."""
    data = box.checked("extern") if "extern" in box.sections else memoryview(b"")
    out: dict[str, ExternalArtifact] = {}
    at = 0
    for symbol, compiler, offset, size in entries:
        if symbol in out:
            raise RelvmFormatError(f"two artifacts are called {symbol!r}", section="meta")
        if offset != at or offset + size > len(data):
            raise RelvmFormatError(f"artifact {symbol!r}: bytes {offset}..{offset + size} do "
                                   f"not follow on at {at} within {len(data)}",
                                   section="extern")
        out[symbol] = ExternalArtifact(compiler, bytes(data[offset:offset + size]))
        at += size
    if at != len(data):
        raise RelvmFormatError(f"{len(data) - at} bytes belong to no artifact",
                               section="extern")
    return out


def _check_external_backends(exe: Executable) -> None:
    """Every external backend the executable needs can run here, or the caller accepted
    relvm's own kernels in its place: else an error naming the backend, now, not at the
    first call."""
    from ...backends import external

    for compiler in sorted({a.compiler for a in exe.externals.values()}):
        why = external.unavailable(compiler)
        if why is not None and not exe.external_fallback:
            raise RelvmKernelError(f"{why} {external.FALLBACK_HINT}")


def _parse_json(data: memoryview, section: str, kind: type) -> Any:
    try:
        value = json.loads(bytes(data).decode("utf-8"))
    except UnicodeDecodeError as e:
        raise RelvmFormatError(f"not UTF-8 text: {e}", section=section) from None
    except json.JSONDecodeError as e:
        raise RelvmFormatError(f"not valid JSON: {e}", section=section) from None
    except RecursionError:
        raise RelvmFormatError("JSON nested too deeply", section=section) from None
    if type(value) is not kind:
        raise RelvmFormatError(f"expected a JSON {'object' if kind is dict else 'list'}",
                               section=section)
    return value


def _words(code: memoryview) -> list[int]:
    if len(code) % 8:
        raise RelvmFormatError(f"{len(code)} bytes is not a whole number of int64 words",
                               section="code")
    return np.frombuffer(code, dtype="<i8").tolist()


def _attach_code(exe: Executable, ranges: list[CodeRange], words: list[int],
                 version: int) -> None:
    """Decode each function's instructions (laid out as format ``version`` lays them out);
    the functions must tile ``code`` in order."""
    at = 0
    for fn, r in zip(exe.functions, ranges):
        end = r.word_offset + r.word_count
        if r.word_offset != at or end > len(words):
            raise RelvmFormatError(f"@{fn.name}: words {r.word_offset}..{end} do not follow on "
                                   f"at word {at} within {len(words)}", section="code")
        try:
            fn.instructions = decode(words[at:at + r.word_count], r.instructions, version)
        except DecodeError as e:
            raise RelvmFormatError(f"@{fn.name}: {e}", section="code") from None
        at += r.word_count
    if at != len(words):
        raise RelvmFormatError(f"{len(words) - at} words belong to no function", section="code")


# --- the kernel library ----------------------------------------------------------------------

#: platform.machine() -> ELF e_machine, to check a kernel library was built for this machine.
ELF_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "i386": 3, "i686": 3,
                "riscv64": 243, "ppc64le": 21, "ppc64": 21, "s390x": 22, "armv7l": 40}


def _kernel_library(data: memoryview, arch: str | None) -> bytes | None:
    if not len(data):
        if arch is not None:
            raise RelvmFormatError(f"meta records a kernel library for {arch}, but the "
                                   f"section is empty", section="kernels")
        return None
    if arch is None:
        raise RelvmFormatError(f"{len(data)} bytes of kernel library, but meta records no "
                               f"machine for it", section="kernels")
    here = machine_tag()
    if arch != here:
        raise RelvmFormatError(f"the kernel library was compiled for {arch}; this machine is "
                               f"{here}: rebuild the executable here", section="kernels")
    if sys.platform.startswith(("linux", "freebsd")):
        _check_elf(data, here)
    return bytes(data)


def _check_elf(data: memoryview, here: str) -> None:
    head = bytes(data[:20])
    if len(head) < 20 or head[:4] != b"\x7fELF":
        raise RelvmFormatError("the kernel library is not an ELF shared object",
                               section="kernels")
    bits = {1: 32, 2: 64}.get(head[4])
    order = {1: "little", 2: "big"}.get(head[5])
    machine = int.from_bytes(head[18:20], order or "little")
    expected = ELF_MACHINES.get(platform.machine().lower())
    if bits != struct.calcsize("P") * 8 or order != sys.byteorder or \
            (expected is not None and machine != expected):
        raise RelvmFormatError(f"the kernel library is an ELF object for another machine "
                               f"({bits}-bit, {order}-endian, e_machine {machine}); this is "
                               f"{here}", section="kernels")


def _native_code(box, signed: list, trust_native_code: bool) -> NativeCode:
    """Whether the kernel library may run: signed by a trusted key, or trusted by the caller.

    A signature that does not verify, or a key the user does not trust, is no error: the file
    then runs without its native code. A ``sign`` section that is not a signature at all is.
    """
    library = signed[-1]
    data = box.checked("sign") if "sign" in box.sections else b""
    signer = None
    if len(data):
        value = _parse_json(data, "sign", dict)
        key, sig = value.get("key"), value.get("signature")
        if value.get("algorithm") != "ed25519" or not _hex(key, 32) or not _hex(sig, 64):
            raise RelvmFormatError("expected {algorithm: ed25519, key: 64 hex digits, "
                                   "signature: 128 hex digits}", section="sign")
        key, sig = bytes.fromhex(key), bytes.fromhex(sig)
        signer = trust.key_id(key)
    if library is None:
        return NativeCode(False, "the file carries no native code", signer)
    if trust_native_code:
        return NativeCode(True, "trusted by the caller (trust_native_code=True)", signer)
    if signer is None:
        return NativeCode(False, "the file is not signed", None)
    if not trust.verify(key, sig, trust.signed_message([bytes(s) for s in signed])):
        return NativeCode(False, f"its signature (key {signer}) does not match its contents",
                          signer)
    known = trust.trusted_keys()
    if known.get(signer) != key:
        return NativeCode(False, f"it is signed by key {signer}, which you do not trust",
                          signer)
    own = trust.own_key_id()
    return NativeCode(True, "signed by your key" if signer == own else
                      f"signed by key {signer}, which you trust", signer)


def _hex(v: Any, nbytes: int) -> bool:
    return type(v) is str and len(v) == 2 * nbytes and all(c in "0123456789abcdef" for c in v)


def _check_backend(name: str) -> None:
    from ..vm.kernels import BACKENDS

    if name not in BACKENDS:
        raise RelvmFormatError(f"unknown kernel backend {name!r}; this relvm knows "
                               + ", ".join(BACKENDS), section="kernels")


# --- constants -----------------------------------------------------------------------------------

def _constants(consts: memoryview, meta: Meta, weights_buf: Callable[[str], memoryview]
               ) -> list[tuple[np.ndarray, tuple]]:
    """Each constant as a read-only array viewing the file, with what checks it later."""
    moved = [c for c in meta.constants if c.file == "weights"]
    index: list = []
    data = memoryview(b"")
    if meta.weights is not None:
        index, data = _open_weights(weights_buf(meta.weights["path"]), meta.weights)
    elif moved:
        raise RelvmFormatError("constants are in a weights file, but meta names none",
                               section="meta")
    out = []
    for k, c in enumerate(meta.constants):
        if c.file == "main":
            section, buf, offset, crc = "consts", consts, c.offset, c.crc32
        else:
            if c.index >= len(index):
                raise RelvmFormatError(f"constant {k}: weights index {c.index}, but the file "
                                       f"has {len(index)}", section="weights")
            w = index[c.index]
            if (w.dtype, w.shape, w.nbytes, w.crc32) != (c.dtype, c.shape, c.nbytes, c.crc32):
                raise RelvmFormatError(f"constant {k}: the weights file holds "
                                       f"{w.dtype}{list(w.shape)}, expected "
                                       f"{c.dtype}{list(c.shape)}", section="weights")
            section, buf, offset, crc = "weights", data, w.offset, w.crc32
        if offset % ALIGNMENT or offset + c.nbytes > len(buf):
            raise RelvmFormatError(f"constant {k} at bytes {offset}..{offset + c.nbytes} is "
                                   f"misaligned or outside the section ({len(buf)} bytes)",
                                   section=section)
        dt = dtypes.to_numpy(c.dtype).newbyteorder("<")
        count = c.nbytes // dt.itemsize
        arr = np.frombuffer(buf, dt, count, offset) if count else np.empty(0, dt)
        arr = arr.reshape(c.shape)
        arr.flags.writeable = False
        out.append((arr, (section, offset, crc)))
    return out


def _open_weights(buf: memoryview, ref: dict) -> tuple[list[ConstantEntry], memoryview]:
    def fail(section: str | None, message: str) -> RelvmFormatError:
        return RelvmFormatError(f"weights file {ref['path']!r}, {section}: {message}",
                                section="weights")

    box = open_container(buf, WEIGHTS_MAGIC, WEIGHTS_SECTIONS, fail)
    raw = box.checked("index")
    if hashlib.sha256(raw).digest()[:16].hex() != ref["content_id"]:
        raise fail("index", "this weights file does not belong to the executable (its content "
                            "id differs): it was saved with another executable")
    entries = _parse_json(raw, "weights", list)
    try:  # the same checks as entries of the main index
        index = [constant_entry({**e, "file": "main"} if type(e) is dict else e, f"index[{i}]")
                 for i, e in enumerate(entries)]
    except RelvmFormatError as e:
        raise fail("index", str(e).split(": ", 1)[1]) from None
    offset, size = box.span("data")
    return index, buf[offset:offset + size]


class ConstantChecks:
    """Each loaded constant's CRC-32, checked the first time it is used (once, thread-safe)."""

    def __init__(self, arrays: list[np.ndarray], where: list[tuple[str, int, int]]):
        self._arrays = arrays  # where: (section, offset, crc32) of each constant
        self._pending = {k: w for k, w in enumerate(where)}
        self._lock = threading.Lock()

    def verify(self, k: int) -> None:
        if k not in self._pending:
            return
        with self._lock:
            where = self._pending.get(k)
            if where is None:
                return
            section, offset, crc = where
            arr = self._arrays[k]
            actual = zlib.crc32(arr)
            if actual != crc:
                raise RelvmFormatError(f"constant {k} ({arr.dtype.name}{list(arr.shape)}, "
                                       f"{arr.nbytes} bytes at offset {offset}) fails its "
                                       f"checksum (CRC-32 {actual:08x}, expected {crc:08x}): "
                                       f"the file is corrupted", section=section)
            del self._pending[k]
