"""The system C compiler, for C that relvm generates, and the cache of what it built.

Used by the compiler, to build an executable's fused kernels, and by the runtime, to build them
again from a file's kernel descriptions when the file's own library is not trusted. Sources are
compiled (``-Werror`` only when ``RELVM_WERROR=1`` asks, as CI does; an ifunc picks AVX-512, AVX2
or a portable fallback) and cached on disk by a hash of (source, flags, compiler version), in a
cache bounded by size (least recently used entries go first; ``relvm cache info|clear``).
``RELVM_SANITIZE=address`` adds AddressSanitizer and UBSan, as it does for the kernel library
(``kernels/build.py``); the flags are part of the cache key, so the two builds never mix. It is
for testing (``tests/kernels/run_sanitized.sh``): such a library loads only where the ASan
runtime is preloaded, so do not save executables built with it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

from ..errors import RelvmCompileError

#: As the kernel library's (kernels/build.py): without -fno-trapping-math GCC keeps the
#: clamps and selects of exp, tanh and erf as branches, and only the AVX-512 clone of a
#: generated loop vectorized (AVX2 machines ran SiLU one float at a time: 14x slower).
CFLAGS = ["-O3", "-std=gnu11", "-fPIC", "-shared", "-Wall", "-Wextra",
          "-Wno-unused-parameter", "-Wno-unused-variable", "-fno-strict-aliasing",
          "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=fast"]
#: Added by RELVM_SANITIZE=address; kept equal to SANITIZE_FLAGS in kernels/build.py.
SANITIZE_FLAGS = ["-fsanitize=address,undefined,float-cast-overflow", "-fno-omit-frame-pointer",
                  "-g", "-O1"]


def compiler() -> str:
    """The C compiler to use: $CC, else cc or gcc on PATH."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RelvmCompileError("building fused C kernels needs a C compiler (cc or gcc) on PATH;"
                                " install one, or build with fuse=False or backend=\"numpy\"")
    return cc


def has_compiler() -> bool:
    return bool(os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc"))


def werror() -> bool:
    """True when $RELVM_WERROR asks for warnings as errors (development and CI; .ci/run sets
    it). Never by default: a newer compiler's new warning must not break a user's build."""
    return os.environ.get("RELVM_WERROR", "").strip().lower() in ("1", "yes", "true", "on")


def compile_flags() -> list[str]:
    """CFLAGS, plus -Werror when $RELVM_WERROR asks for it and the sanitizer flags when
    $RELVM_SANITIZE does (read per compile)."""
    flags = CFLAGS + (["-Werror"] if werror() else [])
    value = os.environ.get("RELVM_SANITIZE", "").strip().lower()
    if value in ("", "0", "none"):
        return flags
    if value == "address":
        return flags + SANITIZE_FLAGS
    raise RelvmCompileError(f"RELVM_SANITIZE={value!r}: the supported value is 'address' "
                            "(AddressSanitizer + UBSan)")


def _compiler_version(cc: str) -> str:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True,
                              timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise RelvmCompileError(f"cannot run the C compiler {cc}: {e}") from None


def cache_dir() -> Path:
    """Where built libraries are kept: ``kernels/`` in $RELVM_CACHE_DIR, else in
    $XDG_CACHE_HOME/relvm, else in ~/.cache/relvm."""
    base = os.environ.get("RELVM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "relvm")
    return Path(base) / "kernels"


def compile_library(source: str) -> bytes:
    """Compile ``source`` into a shared library; cached by hash(source, flags, compiler).

    The cache directory is made owner-only and used only while it stays so: one owned by
    another user, or writable by group or others, is refused with a warning (anyone who can
    write it could plant a library that relvm would then carry into executables and run), and
    the library is built in a private temporary directory instead. A cached library is used
    only if it is a regular file of this user's, not writable by others, whose SHA-256 is the
    one recorded when it was built.
    """
    cc = compiler()
    flags = compile_flags()
    key = hashlib.sha256("\0".join([source, " ".join(flags), cc, _compiler_version(cc)])
                         .encode()).hexdigest()[:32]
    cache = _usable_cache()
    if cache is not None:
        data = _cached(cache, key)
        if data is not None:
            _touch(cache / f"{key}.so")  # recently used: the last to be evicted
            return data
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "fused.c"
        lib = Path(tmp) / "fused.so"
        src.write_text(source)
        proc = subprocess.run([cc, *flags, str(src), "-o", str(lib), "-lm"],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RelvmCompileError("the C compiler rejected relvm's generated kernels "
                                    "(a relvm bug; please report it):\n" + proc.stderr[-4000:])
        data = lib.read_bytes()
    if cache is not None:
        _store(cache, key, data)
        prune_cache(cache, cache_limit())
    return data


# --- the cache's size: least recently used entries go first -------------------------------------

#: The default bound on the kernel cache: a generated library is 50-500 KB, so hundreds of
#: models' kernels fit. ``$RELVM_CACHE_MAX_MB`` sets another (0: keep nothing).
DEFAULT_CACHE_LIMIT = 256 * 2**20


def cache_limit() -> int:
    """The kernel cache's size bound in bytes ($RELVM_CACHE_MAX_MB, else 256 MiB)."""
    value = os.environ.get("RELVM_CACHE_MAX_MB", "").strip()
    if not value:
        return DEFAULT_CACHE_LIMIT
    try:
        mb = float(value)
    except ValueError:
        raise RelvmCompileError(f"RELVM_CACHE_MAX_MB={value!r}: expected a number of "
                                "megabytes") from None
    return max(0, int(mb * 2**20))


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def cache_entries(cache: Path | None = None) -> list[tuple[str, int, float]]:
    """The cached libraries as (key, bytes with its digest file, last use), oldest use first."""
    cache = cache or cache_dir()
    out = []
    try:
        names = os.listdir(cache)
    except OSError:
        return []
    for name in names:
        if not name.endswith(".so") or name.startswith("."):
            continue
        key = name[:-3]
        try:
            st = os.stat(cache / name, follow_symlinks=False)
            size = st.st_size + os.stat(cache / f"{key}.sha256", follow_symlinks=False).st_size
        except OSError:
            size, st = 0, None
        if st is not None:
            out.append((key, size, st.st_mtime))
    return sorted(out, key=lambda e: e[2])


def _remove_entry(cache: Path, key: str) -> None:
    for name in (f"{key}.so", f"{key}.sha256"):
        try:
            os.unlink(cache / name)
        except OSError:
            pass


def prune_cache(cache: Path, limit: int) -> int:
    """Remove least recently used entries until the cache holds at most ``limit`` bytes;
    returns how many were removed."""
    entries = cache_entries(cache)
    total = sum(size for _, size, _ in entries)
    removed = 0
    for key, size, _ in entries:
        if total <= limit:
            break
        _remove_entry(cache, key)
        total -= size
        removed += 1
    return removed


def clear_cache() -> tuple[int, int]:
    """Remove every cached library (and stale temporary files); returns (entries, bytes)."""
    cache = cache_dir()
    entries = cache_entries(cache)
    for key, _, _ in entries:
        _remove_entry(cache, key)
    try:
        for name in os.listdir(cache):
            if name.startswith(".") and name.endswith(".tmp"):
                os.unlink(cache / name)
    except OSError:
        pass
    return len(entries), sum(size for _, size, _ in entries)


def _usable_cache() -> Path | None:
    from ..runtime.file.trust import RelvmTrustError, private_dir

    try:
        return private_dir(cache_dir(), "kernel cache directory")
    except RelvmTrustError as e:
        warnings.warn(f"relvm: {e}; building kernels in a private temporary directory instead",
                      RuntimeWarning, stacklevel=3)
        return None


def _cached(cache: Path, key: str) -> bytes | None:
    """The library cached under ``key`` if it passes every check, else None."""
    from ..runtime.file.trust import unsafe

    data = _read_own(cache / f"{key}.so", unsafe)
    digest = _read_own(cache / f"{key}.sha256", unsafe)
    if data is None or digest is None or hashlib.sha256(data).hexdigest().encode() != digest:
        return None
    return data


def _read_own(path: Path, unsafe) -> bytes | None:
    """The bytes of ``path`` if it is a regular file of this user's that others cannot write
    (opened without following a link, checked on the open file)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if unsafe(os.fstat(f.fileno()), "file"):
            return None
        return f.read()


def _store(cache: Path, key: str, data: bytes) -> None:
    """Write the library and its SHA-256 through fresh private files renamed into place; a
    cache that cannot be written only costs a recompile next time."""
    for name, content in ((f"{key}.so", data),
                          (f"{key}.sha256", hashlib.sha256(data).hexdigest().encode())):
        try:
            fd, tmp = tempfile.mkstemp(dir=cache, prefix=f".{name}.", suffix=".tmp")
        except OSError:
            return
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(content)
            os.replace(tmp, cache / name)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return
