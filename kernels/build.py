"""cffi build of the kernel library ``relvm._kernels`` (run by setup.py through cffi_modules).

Each ``kernels/<name>.c`` has its declarations in ``kernels/<name>.h`` beside it; the headers are
the single place a C signature is written: they are both ``#include``d by the C sources and read
here as the cffi ``cdef`` (preprocessor lines dropped). Kernels are compiled with warnings as
errors; hot loops use GCC ``target_clones`` so one binary runs on any x86-64 and picks AVX-512 or
AVX2 at load time where the CPU has them.
"""

from __future__ import annotations

import os
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
HEADERS = sorted(HERE.glob("*.h"))
SOURCES = sorted(HERE.glob("*.c"))

CFLAGS = ["-O3", "-std=c11", "-Wall", "-Wextra", "-Werror", "-fno-strict-aliasing",
          "-fvisibility=hidden", "-Wno-unused-parameter"]


def cdef_text() -> str:
    """The headers' declarations without preprocessor lines (cffi's cdef cannot read them)."""
    lines = []
    for h in HEADERS:
        lines += [ln for ln in h.read_text().splitlines() if not ln.lstrip().startswith("#")]
    return "\n".join(lines)


ffibuilder = FFI()
ffibuilder.cdef(cdef_text())
ffibuilder.set_source(
    "relvm._kernels",
    "\n".join(f'#include "{h.name}"' for h in HEADERS),
    sources=[os.path.relpath(s) for s in SOURCES],
    include_dirs=[os.path.relpath(HERE)],
    extra_compile_args=CFLAGS,
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
