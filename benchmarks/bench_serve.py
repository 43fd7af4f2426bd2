"""Load test of ``relvm serve``: throughput and latency at 1, 8 and 64 concurrent clients.

Three servers, each in its own process on the loopback address, one at a time:

- ``batching``: ``relvm serve`` with dynamic batching (the default);
- ``no-batching``: ``relvm serve --no-batching``, one invoke per request;
- ``ort``: the same ASGI app (``relvm.serving``) whose model runs in ONNX Runtime, one
  ``session.run`` per request -- the HTTP side is the same, only the runtime differs.

The load generator is this process: asyncio, one keep-alive HTTP/1.1 connection per client,
each client sending batch-1 infer requests (binary tensor data, as ``tritonclient`` sends
them) back to back for ``--seconds``, after ``--warmup`` seconds. It reports requests per
second and p50/p99 latency, and checks every response against the model's result for that
request's input (direct ``vm.invoke``), and prints the direct invoke's own p50/p99 at batch 1.

    python benchmarks/bench_serve.py                     # the bundled MLP
    python benchmarks/bench_serve.py --model convnet     # the bundled convnet
    python benchmarks/bench_serve.py --clients 1 8 64 --seconds 5
    python benchmarks/bench_serve.py --onnx resnet18.onnx --shape 1x3x224x224

Needs ``relvm[serve]`` and, for the ``ort`` server, onnx and onnxruntime.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


# --- the models --------------------------------------------------------------------------------

def build_models(name: str, tmp: str, onnx_file: str | None = None) -> tuple[str, str]:
    """(path of the .rvm, path of the same model as .onnx): a bundled example (and its ONNX
    twin, ``models.py``), or an ONNX file imported."""
    import relvm

    if onnx_file is not None:
        from relvm.frontend.onnx import from_onnx

        module, params = from_onnx(onnx_file)
        rvm = os.path.join(tmp, "model.rvm")
        relvm.build(module, params=params).save(rvm)
        return rvm, onnx_file
    import onnx

    from models import onnx_model, relvm_model  # benchmarks/models.py: the same weights

    text, params = relvm_model(name)
    rvm = os.path.join(tmp, f"{name}.rvm")
    relvm.build(relvm.parse(text), params=params).save(rvm)
    onnx_path = os.path.join(tmp, f"{name}.onnx")
    onnx.save(onnx_model(name, params), onnx_path)
    return rvm, onnx_path


# --- the servers -------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(kind: str, rvm: str, onnx_path: str | None, port: int, threads: int):
    if kind == "ort":
        cmd = [sys.executable, os.path.abspath(__file__), "--serve-ort", rvm, onnx_path,
               "--port", str(port), "--threads", str(threads)]
    else:
        cmd = [sys.executable, "-m", "relvm.cli", "serve", rvm, "--port", str(port),
               "--threads", str(threads)]
        if kind == "no-batching":
            cmd.append("--no-batching")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the {kind} server stopped: {proc.stderr.read().decode()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the {kind} server did not get ready in 60 s")


def serve_ort(rvm: str, onnx_path: str, port: int, threads: int) -> None:
    """The ``ort`` server: relvm.serving's app, its model run by ONNX Runtime per request."""
    import onnxruntime as ort
    import uvicorn

    import relvm
    from relvm.serving import ModelServer, ServedModel

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    session = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    class OrtRunner:
        def invoke(self, func, *arrays):
            return tuple(session.run(None, dict(zip(names, arrays))))

    model = ServedModel(os.path.splitext(os.path.basename(rvm))[0], relvm.load(rvm),
                        batching=False)
    model.vm = OrtRunner()
    server = ModelServer([model])
    uvicorn.run(server.app, host="127.0.0.1", port=port, log_level="warning")


# --- the load generator ------------------------------------------------------------------------

def request_bytes(model: str, x: np.ndarray, port: int, inp: str = "x",
                  out: str = "output0") -> bytes:
    head = json.dumps({"inputs": [{"name": inp, "shape": list(x.shape), "datatype": "FP32",
                                   "parameters": {"binary_data_size": x.nbytes}}],
                       "outputs": [{"name": out, "parameters": {"binary_data": True}}]},
                      separators=(",", ":")).encode()
    body = head + x.tobytes()
    return (f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/octet-stream\r\n"
            f"Inference-Header-Content-Length: {len(head)}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def read_response(reader) -> tuple[int, dict, bytes]:
    status_line = await reader.readline()
    status = int(status_line.split()[1])
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        k, _, v = line.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


def output_of(headers: dict, body: bytes) -> np.ndarray:
    n = int(headers["inference-header-content-length"])
    doc = json.loads(body[:n])
    out = doc["outputs"][0]
    return np.frombuffer(body[n:], np.float32).reshape(out["shape"])


async def client(port: int, requests: list[bytes], expected: list[np.ndarray], until: float,
                 record_from: float, latencies: list[float], errors: list[str], seed: int,
                 exact: bool):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    k = seed
    try:
        while True:
            now = time.perf_counter()
            if now >= until:
                break
            i = k % len(requests)
            k += 1
            writer.write(requests[i])
            status, headers, body = await read_response(reader)
            done = time.perf_counter()
            if status != 200:
                errors.append(f"HTTP {status}: {body[:200]!r}")
                continue
            got = output_of(headers, body)
            if not (np.array_equal(got, expected[i]) if exact else
                    np.allclose(got, expected[i], rtol=1e-4, atol=1e-4)):
                errors.append("a response differs from the direct invoke's result")
            if now >= record_from:
                latencies.append(done - now)
    finally:
        writer.close()


async def load(port: int, clients: int, requests, expected, warmup: float, seconds: float,
               exact: bool):
    start = time.perf_counter()
    latencies: list[float] = []
    errors: list[str] = []
    await asyncio.gather(*[client(port, requests, expected, start + warmup + seconds,
                                  start + warmup, latencies, errors, c * 7, exact)
                           for c in range(clients)])
    return latencies, errors


def run_load(port, clients, requests, expected, warmup, seconds, exact=True) -> dict:
    """Responses must equal ``expected`` bit for bit (``exact``: relvm's own results, which do
    not depend on the batch), else to float32 rounding (another runtime's)."""
    latencies, errors = asyncio.run(load(port, clients, requests, expected, warmup, seconds,
                                         exact))
    lat = np.array(latencies) * 1e3
    return {"rps": len(lat) / seconds, "p50": float(np.percentile(lat, 50)) if len(lat) else 0,
            "p99": float(np.percentile(lat, 99)) if len(lat) else 0, "errors": errors}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="mlp", choices=["mlp", "convnet"],
                    help="a bundled example (default: mlp)")
    ap.add_argument("--onnx", metavar="FILE", help="serve this ONNX model instead (ORT runs it "
                    "too); its first input's first dim must be symbolic to batch")
    ap.add_argument("--shape", metavar="1xCxHxW", help="the --onnx model's input shape per "
                    "request (default: its dims, symbolic ones 1)")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--servers", nargs="+", default=["batching", "no-batching", "ort"])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1,
                    help="threads per invoke in the servers (default 1: the load generator "
                         "needs the other core)")
    ap.add_argument("--serve-ort", nargs=2, metavar=("RVM", "ONNX"), help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_ort:
        serve_ort(*args.serve_ort, args.port, args.threads)
        return 0

    import relvm
    relvm.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        rvm, onnx_path = build_models(args.model, tmp, args.onnx)
        exe = relvm.load(rvm)
        vm = relvm.VirtualMachine(exe)
        fn = exe.function("main")
        name = "model" if args.onnx else args.model
        inp, out = fn.input_name(0), fn.output_name(0)
        if args.shape:
            shape = tuple(int(d) for d in args.shape.split("x"))
        else:
            shape = tuple(1 if isinstance(d, str) else d for d in fn.params[0].tensors[0].shape)
        rng = np.random.default_rng(0)
        xs = [rng.standard_normal(shape, dtype=np.float32) for _ in range(64)]
        expected = [_first(vm.invoke("main", x)) for x in xs]
        direct = []
        for _ in range(3):
            for x in xs:
                t = time.perf_counter()
                vm.invoke("main", x)
                direct.append(time.perf_counter() - t)
        d50, d99 = np.percentile(np.array(direct[len(xs):]) * 1e3, [50, 99])
        print(f"# bench_serve: {args.onnx or args.model} {list(shape)} per request, "
              f"{args.seconds:g} s per setting; CPU: {_cpu()}; server threads per invoke: "
              f"{args.threads}")
        print(f"direct vm.invoke at batch 1: p50 {d50:.3f} ms, p99 {d99:.3f} ms")
        servers = list(args.servers)
        results: dict = {}
        for kind in servers:
            port = free_port()
            proc = start_server(kind, rvm, onnx_path, port, args.threads)
            try:
                for c in args.clients:
                    reqs = [request_bytes(name, x, port, inp, out) for x in xs]
                    r = run_load(port, c, reqs, expected, args.warmup, args.seconds,
                                 exact=kind != "ort")
                    results[kind, c] = r
                    bad = f"  ERRORS {len(r['errors'])}: {r['errors'][0]}" if r["errors"] else ""
                    print(f"{kind:>12} {c:>3} clients: {r['rps']:8.0f} req/s  p50 "
                          f"{r['p50']:7.3f} ms  p99 {r['p99']:7.3f} ms{bad}", flush=True)
            finally:
                proc.terminate()
                proc.wait(30)
        print()
        for c in args.clients:
            b = results.get(("batching", c))
            if b is None:
                continue
            ratios = [f"{b['rps'] / results[k, c]['rps']:.2f}x {k}" for k in servers
                      if k != "batching" and (k, c) in results and results[k, c]["rps"]]
            print(f"{c:>3} clients: batching's throughput = " + ", ".join(ratios))
        if ("batching", 1) in results:
            print(f"p99 at 1 client / direct invoke p99: {results['batching', 1]['p99'] / d99:.2f}")
    return 0


def _first(result):
    return result[0] if isinstance(result, (tuple, list)) else result


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
