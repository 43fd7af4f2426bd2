"""cffi build of the kernel library ``relvm._kernels`` (run by setup.py through cffi_modules).

Each ``kernels/<name>.c`` has its declarations in ``kernels/<name>.h`` beside it (the conv
sources, one per algorithm -- ``conv_gemm.c``, ``conv_pair.c``, ``conv_depthwise.c``,
``conv_transpose.c``, ``conv_nhwc.c`` -- share ``conv.h``); the headers are the single place a
C signature is written: they are both ``#include``d by the C sources and read here as the cffi
``cdef`` (preprocessor lines dropped). Helpers shared between sources live in
``kernels/internal/`` and are not part of the cdef. Kernels are compiled with warnings as
errors; hot loops use GCC ``target_clones`` so one binary runs on any x86-64 and picks AVX-512 or
AVX2 at load time where the CPU has them.

OpenBLAS (the ``scipy-openblas32`` wheel) is needed here only for its ``cblas.h``: the library
itself is opened at run time (``kernels/blas.c``), so the extension has no link-time dependency
on a path that exists only in pip's build environment.

``RELVM_SANITIZE=address`` (at build time) builds the library with AddressSanitizer and
UBSan instead, for the memory-safety run ``tests/kernels/run_sanitized.sh``; the same variable
makes ``relvm/backends/toolchain.py`` build the generated fused kernels the same way. Such a
library runs only in a process that has the ASan runtime preloaded (see that script).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
#: Headers the package ships for generated C too (relvm_vmath.h), on the library's include path.
PACKAGE_HEADERS = HERE.parent / "relvm" / "backends"
HEADERS = sorted(HERE.glob("*.h"))
SOURCES = sorted(HERE.glob("*.c"))

# -fno-math-errno / -fno-trapping-math let sqrt, floor, rint and selects vectorize; relvm
# never reads errno or FP exception flags. -ffp-contract=fast lets the AVX-512 clones fuse
# a * b + c into one FMA (the polynomials of exp/tanh/erf run ~25% faster): a fused operation
# rounds once instead of twice, so results only get closer to the float64 references.
CFLAGS = ["-O3", "-std=c11", "-Wall", "-Wextra", "-fno-strict-aliasing",
          "-fvisibility=hidden", "-Wno-unused-parameter", "-fno-math-errno",
          "-fno-trapping-math", "-ffp-contract=fast", "-pthread"]

# The sanitizer build (RELVM_SANITIZE=address): ASan + UBSan (plus float-to-int casts out of
# range, which GCC's "undefined" leaves out), -O1 with frame pointers so the reports have whole
# stacks. Kept equal to SANITIZE_FLAGS in relvm/backends/toolchain.py.
SANITIZE_FLAGS = ["-fsanitize=address,undefined,float-cast-overflow", "-fno-omit-frame-pointer",
                  "-g", "-O1"]


def werror_flags() -> list[str]:
    """``-Werror`` when $RELVM_WERROR asks for it (development and CI: .ci/run sets it), never
    for users: a newer compiler's new warning must not break an install."""
    value = os.environ.get("RELVM_WERROR", "").strip().lower()
    return ["-Werror"] if value in ("1", "yes", "true", "on") else []


def sanitize_flags() -> list[str]:
    """Extra compile and link flags asked for by $RELVM_SANITIZE ("address" or unset)."""
    value = os.environ.get("RELVM_SANITIZE", "").strip().lower()
    if value in ("", "0", "none"):
        return []
    if value == "address":
        return SANITIZE_FLAGS
    raise SystemExit(f"RELVM_SANITIZE={value!r}: the supported value is 'address' "
                     "(AddressSanitizer + UBSan)")


def blas_include_dir() -> str:
    try:
        import scipy_openblas32
    except ImportError:
        raise SystemExit("building relvm's kernels needs scipy-openblas32 (for cblas.h): "
                         "pip install scipy-openblas32") from None
    return scipy_openblas32.get_include_dir()


def cdef_text() -> str:
    """The headers' declarations without preprocessor lines (cffi's cdef cannot read them),
    each header after the ones it includes (cffi reads a type before its uses)."""
    lines: list[str] = []
    done: set[Path] = set()

    def add(h: Path) -> None:
        if h in done:
            return
        done.add(h)
        text = h.read_text()
        for name in re.findall(r'^\s*#\s*include\s+"([^"/]+)"', text, re.MULTILINE):
            if (HERE / name) in HEADERS:
                add(HERE / name)
        lines.extend(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    for h in HEADERS:
        add(h)
    return "\n".join(lines)


ffibuilder = FFI()
ffibuilder.cdef(cdef_text())
ffibuilder.set_source(
    "relvm._kernels",
    "\n".join(f'#include "{h.name}"' for h in HEADERS),
    sources=[os.path.relpath(s) for s in SOURCES],
    include_dirs=[os.path.relpath(HERE), os.path.relpath(PACKAGE_HEADERS), blas_include_dir()],
    extra_compile_args=CFLAGS + werror_flags() + sanitize_flags(),
    extra_link_args=["-pthread"] + sanitize_flags(),
    libraries=["m", "dl"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
