"""The command never guesses and never shows a traceback (issue 20): each case is one message
on stderr with exit code 1 (bad usage: 2)."""

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

SCRIPT = (str(Path(sys.executable).parent / "relvm")
          if (Path(sys.executable).parent / "relvm").exists() else shutil.which("relvm"))


def relvm_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=600)

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(SCRIPT is None, reason="the relvm script is not installed")]

TWO_OUTPUTS = """def @main(%x: Tensor[(n, 4), float32]) {
  (nn.relu(%x), sigmoid(%x))
}"""


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("cli-never-guesses")
    (d / "mlp.relay").write_text(examples.text("mlp"))
    np.savez(d / "mlp.npz", **examples.params("mlp"))
    relvm.build(relvm.parse(examples.text("mlp")), params=examples.params("mlp")).save(
        str(d / "mlp.rvm"))
    (d / "two.relay").write_text(TWO_OUTPUTS)
    relvm.build(relvm.parse(TWO_OUTPUTS)).save(str(d / "two.rvm"))
    # A model compiled without --params: its weights are inputs too.
    relvm.build(relvm.parse(examples.text("mlp"))).save(str(d / "noparams.rvm"))
    np.save(d / "x.npy", np.ones((2, 784), np.float32))
    return {"dir": d, **{k: str(d / f"{k}.rvm") for k in ("mlp", "two", "noparams")}}


def one_error(proc: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    kind = "relvm: usage error: " if code == 2 else "relvm: error: "
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith(kind)]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_run_refuses_missing_inputs(models):
    one_error(relvm_cli("run", models["noparams"], "--input", f"x={models['dir'] / 'x.npy'}"),
              1, "input %w1 is not given", "--random-inputs")
    one_error(relvm_cli("run", models["mlp"], "--dims", "n=2"), 1, "input %x is not given")
    proc = relvm_cli("run", models["noparams"], "--input", f"x={models['dir'] / 'x.npy'}",
                     "--random-inputs")
    assert proc.returncode == 0, proc.stderr


def test_import_of_a_file_that_is_not_onnx(tmp_path):
    pytest.importorskip("onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\xff\xff\xff\xff not a model")
    one_error(relvm_cli("import", str(bad), "-o", str(tmp_path / "m.relay")), 1,
              "is not an ONNX model")


def test_compile_params_npy_is_refused(models, tmp_path):
    np.save(tmp_path / "w.npy", np.zeros(3, np.float32))
    one_error(relvm_cli("compile", str(models["dir"] / "mlp.relay"), "--params",
                        str(tmp_path / "w.npy"), "-o", str(tmp_path / "m.rvm")),
              1, "it holds one array (.npy)", ".npz")


@pytest.mark.parametrize("command", ["compile", "run", "import"])
def test_outputs_into_a_folder_that_does_not_exist(models, tmp_path, command):
    missing = str(tmp_path / "nonexistent" / "out")
    if command == "compile":
        args = ["compile", str(models["dir"] / "mlp.relay"), "--params",
                str(models["dir"] / "mlp.npz"), "-o", missing + ".rvm"]
    elif command == "run":
        args = ["run", models["mlp"], "--random-inputs", "--dims", "n=2", "--output",
                missing + ".npy"]
    else:
        pytest.importorskip("onnx")
        args = ["import", str(tmp_path / "m.onnx"), "-o", missing + ".relay"]
        (tmp_path / "m.onnx").write_bytes(b"")
    one_error(relvm_cli(*args), 1, f"cannot write {missing}", "no such directory")


@pytest.mark.parametrize("args", [["inspect", "{mlp}"],
                                  ["bench", "{mlp}", "--dims", "n=1", "--seconds", "0.01",
                                   "--min-runs", "1", "--warmup", "0"]])
def test_a_closed_pipe_is_a_quiet_exit(models, args):
    """``relvm inspect m.rvm | head``: the reader is gone before relvm writes."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([SCRIPT, *(a.format(**models) for a in args)], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=600)
    finally:
        os.close(write)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def test_a_run_that_cannot_fit_is_refused_before_allocating(models):
    one_error(relvm_cli("run", models["mlp"], "--random-inputs", "--dims", "n=1000000000"),
              1, "needs at least", "TiB for its inputs and outputs", "available")


def test_unknown_dim_names_are_refused(models, tmp_path):
    one_error(relvm_cli("run", models["mlp"], "--random-inputs", "--dims", "m=8"), 1,
              "@main has no dim 'm' (its dims: n)")
    one_error(relvm_cli("run", models["mlp"], "--random-inputs", "--dims", "nn=8"), 1,
              "did you mean n?")
    one_error(relvm_cli("bench", models["mlp"], "--dims", "k=1,2"), 1, "has no dim 'k'")
    one_error(relvm_cli("compile", str(models["dir"] / "mlp.relay"), "--params",
                        str(models["dir"] / "mlp.npz"), "--upper-bound", "k=5", "-o",
                        str(tmp_path / "m.rvm")), 1, "@main has no dim 'k'")
    assert not (tmp_path / "m.rvm").exists()
    with pytest.raises(relvm.RelvmCompileError, match=r"@main has no dim 'm' \(its dims: n\)"):
        relvm.build(relvm.parse(examples.text("mlp")), upper_bounds={"m": 4})


@pytest.mark.parametrize("args", [["bench", "{mlp}", "--dims", "n=1,,16"],
                                  ["run", "{mlp}", "--random-inputs", "--dims", "n=1,,m=2"],
                                  ["run", "{mlp}", "--random-inputs", "--dims", "n=1,"]])
def test_empty_list_items_are_usage_errors(models, args):
    one_error(relvm_cli(*(a.format(**models) for a in args)), 2, "empty item")


def test_tuple_outputs_go_where_the_message_says(models, tmp_path):
    run = ("run", models["two"], "--random-inputs", "--dims", "n=3")
    one_error(relvm_cli(*run, "--output", str(tmp_path / "tup.npy")), 2, "has 2 results",
              "a.npy,b.npy", ".npz")
    assert list(tmp_path.iterdir()) == []
    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    proc = relvm_cli(*run, "--output", f"{a},{b}")
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {a}" in proc.stdout and f"wrote {b}" in proc.stdout
    assert np.load(a).shape == np.load(b).shape == (3, 4)
    assert (np.load(b) > 0).all()  # the sigmoid
    proc = relvm_cli(*run, "--output", str(tmp_path / "both.npz"))
    assert proc.returncode == 0 and f"wrote {tmp_path / 'both.npz'}" in proc.stdout
    with np.load(tmp_path / "both.npz") as z:
        assert z.files == ["output0", "output1"]
    plain = tmp_path / "plain"  # no suffix: written under exactly that name
    assert relvm_cli("run", models["mlp"], "--random-inputs", "--dims", "n=1", "--output",
                     str(plain)).returncode == 2
    proc = relvm_cli("run", models["mlp"], "--random-inputs", "--dims", "n=1", "--output",
                     str(plain) + ".npy")
    assert proc.returncode == 0 and np.load(str(plain) + ".npy").shape == (1, 10)


def test_verbose_logs_build_stages(models, tmp_path):
    proc = relvm_cli("-v", "compile", str(models["dir"] / "mlp.relay"), "--params",
                     str(models["dir"] / "mlp.npz"), "-o", str(tmp_path / "m.rvm"))
    assert proc.returncode == 0, proc.stderr
    for stage in ("bind 6 params", "fold constants", "fuse", "lower to registers",
                  "plan memory"):
        assert f"relvm: relvm.build: {stage}" in proc.stderr
    quiet = relvm_cli("compile", str(models["dir"] / "mlp.relay"), "--params",
                      str(models["dir"] / "mlp.npz"), "-o", str(tmp_path / "m.rvm"))
    assert "relvm.build" not in quiet.stderr


def test_docs_help_prints_usage(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "relvm.docs", "--help"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and "usage: python -m relvm.docs" in proc.stdout
    assert list(tmp_path.iterdir()) == []
