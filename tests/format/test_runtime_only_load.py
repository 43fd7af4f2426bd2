"""A saved executable loads and runs in a process where lark, the front end and the compiler
cannot be imported and no C compiler is on PATH, matching the in-memory executable bit for bit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

import pytest

import relvm
import relvm.examples
from isolation import BLOCK_FRONT_END

CHILD = BLOCK_FRONT_END + textwrap.dedent("""
    import shutil

    for cc in ("cc", "gcc", "clang"):
        assert shutil.which(cc) is None, cc

    import numpy as np
    import relvm

    folder = sys.argv[1]
    expected = np.load(f"{folder}/expected.npz")
    for name in ("one.rvm", "apart.rvm"):
        vm = relvm.VirtualMachine(relvm.load(f"{folder}/{name}"))
        for n in (1, 5, 64):
            got = vm.invoke("main", expected[f"x{n}"])
            want = expected[f"y{n}"]
            assert got.dtype == want.dtype and got.shape == want.shape
            assert got.tobytes() == want.tobytes(), (name, n)
    leaked = [m for m in sys.modules if m.startswith(BLOCKED)]
    assert not leaked, leaked
    print("runtime-only load ok")
""")


@pytest.mark.e2e
def test_saved_executable_runs_without_lark_compiler_or_cc(tmp_path: Path) -> None:
    exe = relvm.build(relvm.parse(relvm.examples.text("mlp")),
                      params=relvm.examples.params("mlp"))
    exe.save(tmp_path / "one.rvm")
    exe.save(tmp_path / "apart.rvm", weights=tmp_path / "apart.weights")
    vm = relvm.VirtualMachine(exe)
    arrays = {}
    for n in (1, 5, 64):
        x = np.random.default_rng(n).standard_normal((n, 784)).astype(np.float32)
        arrays[f"x{n}"], arrays[f"y{n}"] = x, vm.invoke("main", x)
    np.savez(tmp_path / "expected.npz", **arrays)

    empty = tmp_path / "empty-path"
    empty.mkdir()
    env = dict(os.environ, PATH=str(empty),
               PYTHONPATH=str(Path(relvm.__file__).resolve().parents[1]))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True,
                          text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "runtime-only load ok" in proc.stdout
