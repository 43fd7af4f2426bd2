"""relvm serve end to end: the official tritonclient against a live server, raw HTTP for the
malformed cases, dynamic batching observed through the metrics, every response equal to the
single request's result."""

from __future__ import annotations

import json
import socket
import threading
import time

import gevent
import httpx
import numpy as np
import pytest
import tritonclient.http as tc
from tritonclient.utils import InferenceServerException

import relvm
from relvm.serving import ModelServer, ServedModel

from liveserver import Live, rows, serving


def infer(client, x, binary=True, model="mlp", name="x", out="output0"):
    inp = tc.InferInput(name, list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    result = client.infer(model, [inp], outputs=[tc.InferRequestedOutput(out,
                                                                        binary_data=binary)])
    return result.as_numpy(out)


def infer_all(client, xs, model="mlp"):
    """Every request sent at once with tritonclient's own concurrency (``async_infer``, its
    greenlet pool: one client object must not be shared between threads), results in order."""
    pending = []
    for x in xs:
        inp = tc.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        pending.append(client.async_infer(model, [inp]))
    return [p.get_result().as_numpy("output0") for p in pending]


def metric(text: str, name: str, model: str = "mlp") -> float:
    for line in text.splitlines():
        if line.startswith(f'{name}{{model="{model}"}}'):
            return float(line.split()[-1])
    raise AssertionError(f"no {name} for {model} in the metrics")


def test_health_metadata_and_infer_with_tritonclient(mlp_exe):
    vm = relvm.VirtualMachine(mlp_exe)
    with serving(ServedModel("mlp", mlp_exe)) as live:
        client = tc.InferenceServerClient(live.url)
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready("mlp")
        assert not client.is_model_ready("nope")
        meta = client.get_model_metadata("mlp")
        assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 784]}]
        assert meta["outputs"] == [{"name": "output0", "datatype": "FP32", "shape": [-1, 10]}]
        assert meta["versions"] == ["1"] and meta["platform"] == "relvm"
        server = client.get_server_metadata()
        assert server["name"] == "relvm" and "binary_tensor_data" in server["extensions"]
        for n, binary in ((1, True), (5, True), (3, False)):
            x = rows(n, seed=n)
            np.testing.assert_array_equal(infer(client, x, binary), vm.invoke("main", x))
        with pytest.raises(InferenceServerException, match="unknown model 'nope'"):
            client.get_model_metadata("nope")


def test_concurrent_requests_are_batched_and_each_equals_its_single_result(mlp_exe):
    vm = relvm.VirtualMachine(mlp_exe)
    xs = [rows(1 + i % 3, seed=i) for i in range(48)]
    expected = [vm.invoke("main", x) for x in xs]
    # A short wait for company makes batches certain even on a busy machine.
    with serving(ServedModel("mlp", mlp_exe, max_delay=0.02, max_batch=16)) as live:
        got = infer_all(tc.InferenceServerClient(live.url, concurrency=16), xs)
        text = httpx.get(f"http://{live.url}/metrics").text
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)  # bit for bit: rows never depend on their batch
    batches = metric(text, "relvm_batch_size_count")
    assert metric(text, "relvm_batch_size_sum") == 48
    assert batches < 48, "no two requests ever ran together"
    assert metric(text, "relvm_batch_rows_sum") == sum(len(x) for x in xs)
    assert 'relvm_requests_total{code="200",model="mlp"} 48.0' in text
    assert metric(text, "relvm_request_seconds_count") == 48


def test_batching_off_runs_one_request_per_invoke(mlp_exe):
    with serving(ServedModel("mlp", mlp_exe, batching=False, max_delay=0.02)) as live:
        infer_all(tc.InferenceServerClient(live.url, concurrency=8),
                  [rows(2, seed=i) for i in range(16)])
        text = httpx.get(f"http://{live.url}/metrics").text
    assert metric(text, "relvm_batch_size_count") == metric(text, "relvm_batch_size_sum") == 16


def test_other_dims_batch_apart_and_two_inputs_two_outputs(pair_exe):
    vm = relvm.VirtualMachine(pair_exe)
    rng = np.random.default_rng(3)
    reqs = [(rng.standard_normal((1 + i % 2, t, 8), dtype=np.float32),
             rng.standard_normal((1 + i % 2, 8), dtype=np.float32))
            for i, t in enumerate([3, 5] * 12)]
    model = ServedModel("pair", pair_exe)
    model.vm = Gate(vm)
    with serving(model) as live:
        meta = httpx.get(f"http://{live.url}/v2/models/pair").json()
        assert meta["inputs"][0]["shape"] == [-1, -1, 8]
        assert meta["parameters"]["batch_dim"] == "n"
        client = tc.InferenceServerClient(live.url, concurrency=25)

        def send(x, w):
            a, b = tc.InferInput("x", list(x.shape), "FP32"), tc.InferInput("w", [len(w), 8],
                                                                          "FP32")
            a.set_data_from_numpy(x)
            b.set_data_from_numpy(w)
            return client.async_infer("pair", [a, b])

        first = send(*reqs[0])  # holds the worker while the others queue
        pending = [send(x, w) for x, w in reqs]
        deadline = time.monotonic() + 20
        while model.batcher is None or model.batcher.queued() < len(reqs):
            assert time.monotonic() < deadline, "the requests never queued"
            gevent.sleep(0.01)  # tritonclient's greenlets send while this one yields
        model.vm.open.set()
        first.get_result()
        got = [(r.as_numpy("output0"), r.as_numpy("output1"))
               for r in (p.get_result() for p in pending)]
        text = httpx.get(f"http://{live.url}/metrics").text
    for (x, w), (o0, o1) in zip(reqs, got):
        e0, e1 = vm.invoke("main", x, w)
        np.testing.assert_array_equal(o0, e0)
        np.testing.assert_array_equal(o1, e1)
    # the first request alone, then one batch per value of t
    assert [tuple(c.shape[:2]) for c in model.vm.calls] == [(1, 3), (12, 3), (24, 5)]
    assert metric(text, "relvm_batch_size_count", "pair") == 3


def _post(live, body, headers=None, model="mlp"):
    return httpx.post(f"http://{live.url}/v2/models/{model}/infer", content=body,
                      headers=headers or {})


def _doc(**item):
    base = {"name": "x", "shape": [1, 784], "datatype": "FP32", "data": [0.5] * 784}
    base.update(item)
    return json.dumps({"inputs": [base]}).encode()


MALFORMED = [
    (b"{not json", 400, "not valid JSON"),
    (b"[1, 2]", 400, "must be a JSON object"),
    (json.dumps({"inputs": []}).encode(), 400, "non-empty list"),
    (_doc(name="y"), 400, "unknown input 'y'; the model takes x"),
    (_doc(datatype="INT32", data=[1] * 784), 400, "expected datatype FP32, got INT32"),
    (_doc(datatype="BYTES"), 400, "datatype 'BYTES' is not one relvm serves"),
    (_doc(shape=[1, 783], data=[0.5] * 783), 400, "input 'x' dim 1: expected 784, got 783"),
    (_doc(shape=[784], data=[0.5] * 784), 400, "expected shape [n, 784], got [784]"),
    (_doc(shape=[2, 784]), 400, "'data' has 784 elements, 'shape' needs 1568"),
    (_doc(data=["a"] * 784), 400, "FP32 data must be numbers"),
    (_doc(shape=[1, -784]), 400, "'shape' must be a list of non-negative integers"),
    (_doc(data=None, parameters={"binary_data_size": 10}), 400,
     "binary_data_size is 10; FP32 of shape [1, 784] takes 3136 bytes"),
    (json.dumps({"inputs": [{"name": "x", "shape": [1, 784], "datatype": "FP32",
                             "data": [0.5] * 784}], "outputs": [{"name": "nope"}]}).encode(),
     400, "unknown output 'nope'; the model gives output0"),
    (json.dumps({"inputs": [{"name": "x", "shape": [1, 784], "datatype": "FP32",
                             "data": [0.5] * 784}], "parameters": {"timeout": -5}}).encode(),
     400, "'timeout' must be a positive integer"),
]


@pytest.mark.parametrize("body,status,message", MALFORMED)
def test_malformed_requests_get_400_with_relvm_s_message(mlp_exe, body, status, message):
    with serving(ServedModel("mlp", mlp_exe)) as live:
        r = _post(live, body)
        assert r.status_code == status, r.text
        assert message in r.json()["error"]
        # the server is fine afterwards
        assert _post(live, _doc()).status_code == 200


def test_binary_body_problems_and_unknown_model_and_version(mlp_exe):
    with serving(ServedModel("mlp", mlp_exe), max_body_bytes=8000) as live:
        head = json.dumps({"inputs": [{"name": "x", "shape": [1, 784], "datatype": "FP32",
                                       "parameters": {"binary_data_size": 3136}}]}).encode()
        blob = np.ones((1, 784), np.float32).tobytes()
        ok = _post(live, head + blob, {"Inference-Header-Content-Length": str(len(head))})
        assert ok.status_code == 200
        cases = [
            (head + blob[:100], str(len(head)), "the body ends before its 3136 bytes"),
            (head + blob + b"xx", str(len(head)), "2 bytes of binary data that no input"),
            (head + blob, "abc", "Inference-Header-Content-Length is 'abc'"),
            (head + blob, str(10 ** 6), "Inference-Header-Content-Length is '1000000'"),
        ]
        for body, length, message in cases:
            r = _post(live, body, {"Inference-Header-Content-Length": length})
            assert r.status_code == 400 and message in r.json()["error"], r.text
        big = _doc(shape=[3, 784], data=[0.5] * (3 * 784))
        r = _post(live, big)
        assert r.status_code == 400
        assert "over the server's limit of 8000" in r.json()["error"]
        r = _post(live, _doc(), model="nope")
        assert r.status_code == 404 and "unknown model 'nope'" in r.json()["error"]
        r = httpx.post(f"http://{live.url}/v2/models/mlp/versions/2/infer", content=_doc())
        assert r.status_code == 404 and "has no version '2'" in r.json()["error"]
        r = httpx.post(f"http://{live.url}/v2/models/mlp/versions/1/infer", content=_doc())
        assert r.status_code == 200


class Gate:
    """A stand-in for a model's VM whose invokes wait until released; it records each call's
    first input, and raises for inputs holding NaN (a model that fails on a request)."""

    def __init__(self, vm):
        self.vm, self.open, self.calls = vm, threading.Event(), []

    def invoke(self, func, *arrays):
        self.calls.append(arrays[0].copy())
        self.open.wait(20)
        if np.isnan(arrays[0]).any():
            raise relvm.RelvmRuntimeError("@main: the kernel failed on a NaN (test)")
        return self.vm.invoke(func, *arrays)


def _gated(exe, **kw):
    model = ServedModel("mlp", exe, **kw)
    model.vm = Gate(relvm.VirtualMachine(exe))
    return model


def _later(fn, *args):
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", fn(*args)), daemon=True)
    t.start()
    return t, box


def _wait_for(cond, seconds=10.0):
    end = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_a_failing_request_fails_alone_in_its_batch(mlp_exe):
    vm = relvm.VirtualMachine(mlp_exe)
    model = _gated(mlp_exe, max_batch=8)
    with serving(model) as live:
        first, _ = _later(_post, live, _doc())  # holds the worker while the others queue
        _wait_for(lambda: len(model.vm.calls) == 1)
        bad = np.full((1, 784), np.nan, np.float32)
        goods = [rows(1, seed=s) for s in range(3)]
        threads = [_later(_post, live, _doc(data=x.ravel().tolist())) for x in goods]
        threads.insert(1, _later(_post, live, _doc(data=[None] * 784)))  # 400 at once
        head = json.dumps({"inputs": [{"name": "x", "shape": [1, 784], "datatype": "FP32",
                                       "parameters": {"binary_data_size": 3136}}]}).encode()
        threads.append(_later(_post, live, head + bad.tobytes(),
                              {"Inference-Header-Content-Length": str(len(head))}))
        _wait_for(lambda: model.batcher.queued() == 4)
        model.vm.open.set()
        for t, _ in threads:
            t.join(20)
        first.join(20)
    replies = [box["r"] for _, box in threads]
    assert replies[1].status_code == 400
    nan_reply = replies[-1]
    assert nan_reply.status_code == 500 and "failed on a NaN" in nan_reply.json()["error"]
    for x, r in zip(goods, [replies[0]] + replies[2:4]):
        assert r.status_code == 200
        np.testing.assert_array_equal(np.array(r.json()["outputs"][0]["data"], np.float32),
                                      vm.invoke("main", x).ravel())
    # the batch of four ran once, then each alone
    assert [len(c) for c in model.vm.calls] == [1, 4, 1, 1, 1, 1]


def test_full_queue_is_503_and_deadlines_are_504(mlp_exe):
    model = _gated(mlp_exe, max_queue=2, max_batch=1)
    with serving(model) as live:
        first, _ = _later(_post, live, _doc())
        _wait_for(lambda: len(model.vm.calls) == 1)
        late = json.dumps({"inputs": [{"name": "x", "shape": [1, 784], "datatype": "FP32",
                                       "data": [0.5] * 784}],
                           "parameters": {"timeout": 1000}}).encode()
        queued = [_later(_post, live, late), _later(_post, live, _doc())]
        _wait_for(lambda: model.batcher.queued() == 2)
        r = _post(live, _doc())
        assert r.status_code == 503 and "the queue is full (2 requests waiting)" in r.text
        time.sleep(0.05)  # the first queued request's 1 ms deadline passes
        model.vm.open.set()
        for t, _ in queued:
            t.join(20)
        first.join(20)
        assert queued[0][1]["r"].status_code == 504
        assert "deadline passed" in queued[0][1]["r"].json()["error"]
        assert queued[1][1]["r"].status_code == 200
        text = httpx.get(f"http://{live.url}/metrics").text
    assert 'relvm_requests_total{code="503",model="mlp"} 1.0' in text
    assert 'relvm_requests_total{code="504",model="mlp"} 1.0' in text


def test_a_client_that_disconnects_cancels_its_queued_request(mlp_exe):
    model = _gated(mlp_exe, max_batch=1)
    with serving(model) as live:
        first, _ = _later(_post, live, _doc())
        _wait_for(lambda: len(model.vm.calls) == 1)
        body = _doc(data=[0.25] * 784)
        with socket.create_connection(("127.0.0.1", live.port)) as s:
            s.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: "
                      + str(len(body)).encode() + b"\r\n\r\n" + body)
            _wait_for(lambda: model.batcher.queued() == 1)
        _wait_for(lambda: 'code="499"' in httpx.get(f"http://{live.url}/metrics").text)
        model.vm.open.set()
        first.join(20)
        assert _post(live, _doc()).status_code == 200
    # the abandoned request (all 0.25) never ran
    assert not any(np.all(c == 0.25) for c in model.vm.calls)


def test_shutdown_drains_in_flight_requests(mlp_exe):
    model = _gated(mlp_exe, max_batch=4)
    live = Live(ModelServer([model])).__enter__()
    try:
        threads = [_later(_post, live, _doc()) for _ in range(3)]
        # all three inside the server: running (held) or queued
        _wait_for(lambda: model.vm.calls and sum(len(c) for c in model.vm.calls)
                  + model.batcher.queued() == 3)
        stopper = threading.Thread(target=live.stop)
        stopper.start()
        time.sleep(0.2)
        model.vm.open.set()
        stopper.join(30)
    finally:
        model.vm.open.set()
    for t, box in threads:
        t.join(20)
        assert box["r"].status_code == 200
    assert not live.thread.is_alive()
