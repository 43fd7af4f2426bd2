"""Installs that do not surprise (issue 20): -Werror only when asked, a bounded and cleanable
kernel cache, a build without a C compiler, tests run against the installed package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import relvm
from relvm import examples
from relvm.backends import toolchain

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = (str(Path(sys.executable).parent / "relvm")
          if (Path(sys.executable).parent / "relvm").exists() else shutil.which("relvm"))


def test_werror_only_when_the_environment_asks(monkeypatch):
    monkeypatch.delenv("RELVM_WERROR", raising=False)
    monkeypatch.delenv("RELVM_SANITIZE", raising=False)
    assert "-Werror" not in toolchain.compile_flags()
    monkeypatch.setenv("RELVM_WERROR", "1")
    assert "-Werror" in toolchain.compile_flags()


def test_ci_sets_the_werror_flag():
    ci = ROOT / ".ci" / "run"
    if not ci.exists():
        pytest.skip("the CI script is not beside the tests")
    assert "export RELVM_WERROR=1" in ci.read_text()


def _entry(cache: Path, key: str, size: int, used: float) -> None:
    (cache / f"{key}.so").write_bytes(b"x" * size)
    (cache / f"{key}.sha256").write_bytes(b"0" * 64)
    os.utime(cache / f"{key}.so", (used, used))


def test_the_cache_drops_least_recently_used_entries(tmp_path):
    for key, used in (("old", 1000.0), ("mid", 2000.0), ("new", 3000.0)):
        _entry(tmp_path, key, 1000, used)
    assert [k for k, _, _ in toolchain.cache_entries(tmp_path)] == ["old", "mid", "new"]
    assert toolchain.prune_cache(tmp_path, 2200) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mid.sha256", "mid.so", "new.sha256",
                                                          "new.so"]
    assert toolchain.prune_cache(tmp_path, 10**9) == 0


def test_cache_limit_from_the_environment(monkeypatch):
    monkeypatch.delenv("RELVM_CACHE_MAX_MB", raising=False)
    assert toolchain.cache_limit() == toolchain.DEFAULT_CACHE_LIMIT
    monkeypatch.setenv("RELVM_CACHE_MAX_MB", "1.5")
    assert toolchain.cache_limit() == 3 * 2**19
    monkeypatch.setenv("RELVM_CACHE_MAX_MB", "lots")
    with pytest.raises(relvm.RelvmCompileError, match="RELVM_CACHE_MAX_MB='lots'"):
        toolchain.cache_limit()


@pytest.mark.skipif(SCRIPT is None, reason="the relvm script is not installed")
def test_cache_info_and_clear(tmp_path):
    cache = tmp_path / "kernels"
    cache.mkdir()
    _entry(cache, "a" * 32, 2048, 1000.0)
    env = dict(os.environ, RELVM_CACHE_DIR=str(tmp_path))
    info = subprocess.run([SCRIPT, "cache", "info"], capture_output=True, text=True, env=env)
    assert info.returncode == 0, info.stderr
    assert f"kernel cache: {cache}" in info.stdout and "1 libraries, 2.06 KiB" in info.stdout
    clear = subprocess.run([SCRIPT, "cache", "clear"], capture_output=True, text=True, env=env)
    assert clear.returncode == 0 and "removed 1 cached kernel libraries" in clear.stdout
    assert list(cache.iterdir()) == []


@pytest.mark.e2e
def test_a_build_without_a_c_compiler_runs_on_the_library_kernels(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no cc, gcc or clang
    monkeypatch.delenv("CC", raising=False)
    module = relvm.parse(examples.text("mlp"))
    params = examples.params("mlp")
    with pytest.warns(RuntimeWarning, match="no C compiler") as caught:
        exe = relvm.build(module, params=params)
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    assert exe.kernel_library is None and any(k.op == "fused" for k in exe.kernels)
    x = np.random.default_rng(0).standard_normal((3, 784)).astype(np.float32)
    from relvm.testing.reference import evaluate

    np.testing.assert_allclose(relvm.VirtualMachine(exe).invoke("main", x),
                               evaluate(module, x, params=params), rtol=1e-4, atol=1e-6)


@pytest.mark.e2e
def test_python_m_pytest_from_the_root_runs_the_installed_package():
    if not (ROOT / "relvm" / "__init__.py").exists() or not (ROOT / "tests").exists():
        pytest.skip("not run from a source tree")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/onnx/test_session.py", "-k", "run_as_ort_code"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "relvm is not installed" not in proc.stdout + proc.stderr


def test_a_slow_step_shows_progress(capsys):
    """A step still running after the delay prints a progress line, then how long it took;
    a quick one prints nothing."""
    import time

    from relvm.cli import _Slow

    with _Slow("importing m.onnx", after=0.0) as slow:
        deadline = time.monotonic() + 30
        while not slow.shown and time.monotonic() < deadline:
            time.sleep(0.01)
    err = capsys.readouterr().err
    assert "relvm: importing m.onnx ..." in err and "relvm: importing m.onnx: done in" in err
    with _Slow("compiling m.relay", after=600.0):
        pass
    assert capsys.readouterr().err == ""
