"""The installed ``relvm`` command, through subprocess: output and exit codes (0 ok, 1 error,
2 usage)."""

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


def _script() -> str | None:
    beside = Path(sys.executable).parent / "relvm"
    return str(beside) if beside.exists() else shutil.which("relvm")


SCRIPT = _script()
pytestmark = pytest.mark.skipif(SCRIPT is None, reason="the relvm script is not installed")


def relvm_cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=600, cwd=cwd)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> dict:
    """The MLP as .relay + weights .npz, compiled once by the CLI."""
    d = tmp_path_factory.mktemp("cli")
    (d / "mlp.relay").write_text(examples.text("mlp"))
    np.savez(d / "mlp.npz", **examples.params("mlp"))
    proc = relvm_cli("compile", str(d / "mlp.relay"), "--params", str(d / "mlp.npz"),
                     "--upper-bound", "n=64", "-o", str(d / "mlp.rvm"))
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and (d / "mlp.rvm").exists()
    return {"dir": d, "rvm": str(d / "mlp.rvm")}


@pytest.mark.parametrize("cmd", ["demo", "check", "compile", "import", "run", "inspect", "bench",
                                 "trust", "key"])
def test_help(cmd) -> None:
    proc = relvm_cli(cmd, "--help")
    assert proc.returncode == 0 and "usage: relvm " + cmd in proc.stdout


@pytest.mark.e2e
def test_demo_runs_and_checks_itself() -> None:
    proc = relvm_cli("demo", "--batch", "1", "3", "--repeat", "2")
    assert proc.returncode == 0, proc.stderr
    assert "Tensor[(n, 10), float32]" in proc.stdout and "loaded in" in proc.stdout
    assert proc.stdout.count(" yes ") == 2


def test_check_prints_types(tmp_path) -> None:
    path = tmp_path / "m.relay"
    path.write_text(examples.text("mlp"))
    proc = relvm_cli("check", str(path))
    assert proc.returncode == 0 and "-> Tensor[(n, 10), float32]" in proc.stdout


@pytest.mark.e2e
def test_run_with_npy_input_and_output(model) -> None:
    d = model["dir"]
    x = np.random.default_rng(0).standard_normal((3, 784)).astype(np.float32)
    np.save(d / "x.npy", x)
    proc = relvm_cli("run", model["rvm"], "--input", f"x={d / 'x.npy'}", "--output",
                     str(d / "y.npy"))
    assert proc.returncode == 0, proc.stderr
    want = relvm.VirtualMachine(relvm.load(model["rvm"])).invoke("main", x)
    np.testing.assert_array_equal(np.load(d / "y.npy"), want)
    assert "output 0 (output0): float32[3, 10]" in proc.stdout


@pytest.mark.e2e
def test_run_with_random_inputs_for_dims(model) -> None:
    proc = relvm_cli("run", model["rvm"], "--random-inputs", "--dims", "n=5")
    assert proc.returncode == 0, proc.stderr
    assert "output 0 (output0): float32[5, 10]" in proc.stdout


@pytest.mark.e2e
def test_inspect(model) -> None:
    proc = relvm_cli("inspect", model["rvm"])
    assert proc.returncode == 0, proc.stderr
    assert "@main(%x: Tensor[(n, 784), float32])" in proc.stdout
    assert "upper bounds: n <= 64" in proc.stdout and "invoke_packed" in proc.stdout


@pytest.mark.e2e
def test_bench_reports_each_setting(model) -> None:
    proc = relvm_cli("bench", model["rvm"], "--dims", "n=1,16", "--seconds", "0.05",
                     "--min-runs", "3", "--warmup", "1")
    assert proc.returncode == 0, proc.stderr
    assert "n=1 " in proc.stdout and "n=16 " in proc.stdout and "median ms" in proc.stdout
    assert "timing n=16" in proc.stderr  # progress


@pytest.mark.parametrize("args,message", [
    (["run", "missing.rvm", "--dims", "n=2"], "cannot read missing.rvm: no such file"),
    (["inspect", "README.md"], "executable"),
    (["check", "nope.relay"], "cannot read nope.relay"),
])
def test_bad_paths_are_one_clear_error(args, message, tmp_path) -> None:
    (tmp_path / "README.md").write_text("not an executable")
    proc = relvm_cli(*args, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith("relvm: error: ") and message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_ir_points_at_the_error(tmp_path) -> None:
    path = tmp_path / "bad.relay"
    path.write_text("def @main(%x: Tensor[(n), float32]) {\n  nn.rleu(%x)\n}\n")
    proc = relvm_cli("check", str(path))
    assert proc.returncode == 1
    assert "unknown op 'nn.rleu'" in proc.stderr and "nn.relu" in proc.stderr
    assert "line 2, column 3" in proc.stderr and "^" in proc.stderr
    assert "Traceback" not in proc.stderr
    debug = relvm_cli("--debug", "check", str(path))
    assert debug.returncode == 1 and "Traceback" in debug.stderr


@pytest.mark.e2e
def test_wrong_input_shape(model) -> None:
    d = model["dir"]
    np.save(d / "bad.npy", np.zeros((3, 780), np.float32))
    proc = relvm_cli("run", model["rvm"], "--input", f"x={d / 'bad.npy'}")
    assert proc.returncode == 1
    assert "input %x dim 1: expected 784, got 780" in proc.stderr


@pytest.mark.e2e
def test_over_the_upper_bound(model) -> None:
    proc = relvm_cli("run", model["rvm"], "--random-inputs", "--dims", "n=65")
    assert proc.returncode == 1 and "exceeds the upper bound n <= 64" in proc.stderr


@pytest.mark.parametrize("args", [[], ["frobnicate"], ["run"], ["bench", "m.rvm", "--dims", "n"]])
def test_usage_errors_exit_2(args, tmp_path) -> None:
    proc = relvm_cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)


@pytest.mark.e2e
def test_import_then_compile_then_run(tmp_path) -> None:
    pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would pass
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("Add", ["h", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(w, "w"),
         numpy_helper.from_array(np.float32([1, 2, 3]), "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "m.onnx")
    proc = relvm_cli("import", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.relay"))
    assert proc.returncode == 0, proc.stderr
    assert "batch" in (tmp_path / "m.relay").read_text()
    proc = relvm_cli("compile", str(tmp_path / "m.relay"), "--params", str(tmp_path / "m.npz"),
                     "-o", str(tmp_path / "m.rvm"))
    assert proc.returncode == 0, proc.stderr
    x = np.ones((2, 4), np.float32)
    got = relvm.VirtualMachine(relvm.load(str(tmp_path / "m.rvm"))).invoke("main", x)
    np.testing.assert_allclose(got, x @ w + np.float32([1, 2, 3]), rtol=1e-5)


@pytest.mark.e2e
def test_trust_commands_and_a_file_from_another_user(model, tmp_path) -> None:
    """Another user's file runs without its native code, with a one-line warning, until its
    signer's key is trusted; inspect says which kernels run and never runs them."""
    env = dict(os.environ, RELVM_CONFIG_DIR=str(tmp_path / "bob"))

    def bob(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=600,
                              env=env)

    mine = relvm_cli("key", "--comment", "alice")  # the test session's own key signed it
    assert mine.returncode == 0 and mine.stdout.startswith("relvm-ed25519 ")
    (tmp_path / "alice.pub").write_text(mine.stdout)
    proc = bob("run", model["rvm"], "--random-inputs", "--dims", "n=2")
    assert proc.returncode == 0, proc.stderr
    warning = [ln for ln in proc.stderr.splitlines() if ln.startswith("relvm: warning:")]
    assert len(warning) == 1 and "which you do not trust" in warning[0]
    assert "relvm trust add KEYFILE" in warning[0]
    assert "kernels: generated here" in bob("inspect", model["rvm"], "--no-bytecode").stdout
    added = bob("trust", "add", str(tmp_path / "alice.pub"))
    assert added.returncode == 0 and added.stdout.startswith("trusting key ")
    kid = added.stdout.split()[2].rstrip(":")
    assert bob("trust", "list").stdout.split() == [kid]
    proc = bob("run", model["rvm"], "--random-inputs", "--dims", "n=2")
    assert proc.returncode == 0 and "warning" not in proc.stderr
    assert f"kernels: the file's own kernels: signed by key {kid}, which you trust" in bob(
        "inspect", model["rvm"], "--no-bytecode").stdout
    assert bob("trust", "remove", kid).returncode == 0
    gone = bob("trust", "remove", kid)
    assert gone.returncode == 1 and f"key {kid} is not in the trusted list" in gone.stderr
    bad = bob("trust", "add", model["rvm"])
    assert bad.returncode == 1 and "relvm: error:" in bad.stderr


@pytest.mark.e2e
def test_run_trust_native_code_runs_the_files_own_kernels(model, tmp_path) -> None:
    env = dict(os.environ, RELVM_CONFIG_DIR=str(tmp_path / "carol"))
    proc = subprocess.run([SCRIPT, "run", model["rvm"], "--random-inputs", "--dims", "n=2",
                           "--trust-native-code"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0 and "warning" not in proc.stderr
