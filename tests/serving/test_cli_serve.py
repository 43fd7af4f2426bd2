"""``relvm serve`` as users run it: a subprocess that serves, answers, and stops cleanly on
SIGINT or SIGTERM; clear errors for what it cannot serve. And the server is runtime code: it
runs with the front end and lark blocked."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

from isolation import BLOCK_FRONT_END, run_python
from liveserver import free_port

MAIN = "import sys; from relvm.cli import main; sys.exit(main(sys.argv[1:]))"


def _start(*args):
    return subprocess.Popen([sys.executable, "-I", "-c", MAIN, "serve", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.status, json.loads(r.read() or b"null")


def _ready(proc, port):
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            return _get(port, "/v2/health/ready")
        except OSError:
            assert time.monotonic() < deadline, "relvm serve never got ready"
            time.sleep(0.1)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_serve_answers_then_stops_cleanly(mlp_exe, tmp_path, sig):
    path = tmp_path / "mlp.rvm"
    mlp_exe.save(str(path))
    port = free_port()
    proc = _start(f"classifier={path}", "--port", str(port), "--max-batch", "8")
    try:
        assert _ready(proc, port) == (200, {"ready": True})
        status, meta = _get(port, "/v2/models/classifier")
        assert meta["parameters"] == {"batch_dim": "n", "max_batch": 8}
        x = np.linspace(-1, 1, 784, dtype=np.float32)
        body = json.dumps({"inputs": [{"name": "x", "shape": [1, 784], "datatype": "FP32",
                                       "data": x.tolist()}]}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/classifier/infer",
                                     data=body, method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            out = json.loads(r.read())["outputs"][0]
        import relvm
        expected = relvm.VirtualMachine(mlp_exe).invoke("main", x[None])
        np.testing.assert_array_equal(np.array(out["data"], np.float32).reshape(1, 10), expected)
    finally:
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    # uvicorn drains, then lets the signal take its usual course: Ctrl-C is exit code 130
    # (relvm's for an interrupt), SIGTERM ends the process by that signal
    assert proc.returncode == (130 if sig == signal.SIGINT else -signal.SIGTERM), err
    assert "classifier (batching along n up to 8 rows)" in err
    assert "Traceback" not in err


def test_serve_errors_are_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-I", "-c", MAIN, "serve", str(tmp_path / "no.rvm")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"relvm: error: cannot read {tmp_path / 'no.rvm'}: no such file"
    bad = tmp_path / "bad.rvm"
    bad.write_bytes(b"not an executable")
    proc = subprocess.run([sys.executable, "-I", "-c", MAIN, "serve", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stderr.startswith("relvm: error: ")
    assert "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-I", "-c", MAIN, "serve", str(bad),
                           "--max-batch", "0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--max-batch" in proc.stderr


def test_a_model_the_protocol_cannot_carry_is_refused(tmp_path):
    import relvm
    from relvm.serving import ServedModel

    exe = relvm.build(relvm.parse("def @main(%x: (Tensor[(2), float32], Tensor[(2), float32])) "
                                  "{ add(%x.0, %x.1) }"))
    with pytest.raises(relvm.RelvmError, match="takes tensor inputs only"):
        ServedModel("t", exe)
    exe = relvm.build(relvm.parse("def @main(%x: Tensor[(n, 4), float32]) { %x }"))
    with pytest.raises(relvm.RelvmError, match="cannot batch along 'm': the batch dim is 'n'"):
        ServedModel("t", exe, batch_dim="m")


def test_the_server_runs_without_the_front_end(mlp_exe, tmp_path):
    path = tmp_path / "mlp.rvm"
    mlp_exe.save(str(path))
    code = BLOCK_FRONT_END + f"""
import json, sys, threading, time, urllib.request
import relvm, uvicorn
from relvm.serving import ModelServer, ServedModel
server = ModelServer([ServedModel("mlp", relvm.load({str(path)!r}))])
config = uvicorn.Config(server.app, host="127.0.0.1", port={free_port()}, log_level="error")
uv = uvicorn.Server(config)
threading.Thread(target=uv.run, daemon=True).start()
while not uv.started:
    time.sleep(0.01)
body = json.dumps({{"inputs": [{{"name": "x", "shape": [2, 784], "datatype": "FP32",
                                 "data": [0.1] * 1568}}]}}).encode()
port = config.port
req = urllib.request.Request(f"http://127.0.0.1:{{port}}/v2/models/mlp/infer", data=body)
with urllib.request.urlopen(req) as r:
    print(json.loads(r.read())["outputs"][0]["shape"])
uv.should_exit = True
print(sorted(m for m in sys.modules if m.startswith(("lark", "relvm.compiler",
                                                      "relvm.frontend", "relvm.passes"))))
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["[2, 10]", "[]"]


def test_without_the_serve_extra_the_command_says_what_to_install(mlp_exe, tmp_path):
    path = tmp_path / "mlp.rvm"
    mlp_exe.save(str(path))
    code = """
import sys


class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("uvicorn", "starlette", "prometheus_client"):
            raise ImportError(f"blocked import of {name}")
        return None


sys.meta_path.insert(0, _Block())
from relvm.cli import main
sys.exit(main(sys.argv[1:]))
"""
    proc = run_python(code, "serve", str(path))
    assert proc.returncode == 1
    assert proc.stderr.strip().endswith('serving needs uvicorn and starlette: pip install '
                                        '"relvm[serve]"'), proc.stderr
