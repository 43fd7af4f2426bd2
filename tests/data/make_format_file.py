"""Generates tests/data/format_v1.rvm, the small file of format version 1 that
tests/format/test_versions.py loads and runs to prove relvm still reads version 1.

    PYTHONPATH=. python tests/data/make_format_v1.py

Run it only while relvm writes format version 1 (it refuses otherwise). Never regenerate the
file with a relvm that writes a newer version: its point is to stay the bytes of version 1.
The program and weights are chosen so every result is exact in float32.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import relvm
from relvm.runtime.fileformat import FORMAT_VERSION

TEXT = """def @main(%x: Tensor[(n, 3), float32], %w: Tensor[(2, 3), float32],
          %b: Tensor[(2), float32]) {
  %0 = nn.bias_add(nn.dense(%x, %w), %b);
  (nn.relu(%0), sum(%x, axis=[1]))
}"""
W = np.array([[1, 2, 3], [-1, 0.5, 2]], np.float32)
B = np.array([0.5, -1], np.float32)


def main() -> None:
    if FORMAT_VERSION != 1:
        raise SystemExit(f"relvm writes format version {FORMAT_VERSION}; format_v1.rvm must "
                         f"stay a version 1 file")
    exe = relvm.build(relvm.parse(TEXT), params={"w": W, "b": B})
    out = Path(__file__).with_name("format_v1.rvm")
    exe.save(out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
