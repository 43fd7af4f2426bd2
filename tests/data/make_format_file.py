"""Generates tests/data/format_v<N>.rvm for the format version N relvm writes: the small file
that tests/format/test_versions.py loads and runs to prove relvm still reads version N.

    PYTHONPATH=. python tests/data/make_format_file.py

Run it once, when a new format version is introduced; it refuses to replace an existing file,
whose point is to stay the bytes that version's relvm wrote. The program and weights are
chosen so every result is exact in float32. It is built with a throwaway signing key, so the
tests load it as a file from someone else (its kernels made again here).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

import relvm
from relvm.runtime.file.format import FORMAT_VERSION

TEXT = """def @main(%x: Tensor[(n, 3), float32], %w: Tensor[(2, 3), float32],
          %b: Tensor[(2), float32]) {
  %0 = nn.bias_add(nn.dense(%x, %w), %b);
  (nn.relu(%0), sum(%x, axis=[1]))
}"""
W = np.array([[1, 2, 3], [-1, 0.5, 2]], np.float32)
B = np.array([0.5, -1], np.float32)


def main() -> None:
    out = Path(__file__).with_name(f"format_v{FORMAT_VERSION}.rvm")
    if out.exists():
        raise SystemExit(f"{out} exists: it must stay the bytes of format version "
                         f"{FORMAT_VERSION}")
    with tempfile.TemporaryDirectory() as config:
        os.environ["RELVM_CONFIG_DIR"] = config  # a throwaway signing key
        exe = relvm.build(relvm.parse(TEXT), params={"w": W, "b": B})
        exe.save(out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
