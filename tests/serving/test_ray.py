"""relvm serve as a Ray Serve deployment: two replicas on a local Ray cluster (loopback only),
driven through Ray's HTTP proxy by tritonclient like the plain server.

Ray is an optional extra (``relvm[ray]``): without it this test skips, unless
``RELVM_REQUIRE_RAY=1`` (as ``.ci/run`` sets after installing the extra) makes that a failure.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import relvm

if os.environ.get("RELVM_REQUIRE_RAY") == "1":
    import ray
    from ray import serve
else:
    ray = pytest.importorskip("ray")
    serve = pytest.importorskip("ray.serve")

import tritonclient.http as tc  # noqa: E402

from liveserver import free_port, rows  # noqa: E402


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # Ray's workers put the driver's working directory first on their path: from the
    # repository root that is the source folder, without the compiled kernels.
    here = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("ray"))
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _node_ip_address="127.0.0.1")
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield port
    finally:
        serve.shutdown()
        ray.shutdown()
        os.chdir(here)


def test_two_replicas_behind_ray_s_proxy(cluster, mlp_exe, tmp_path):
    from relvm.serving.ray import deployment

    path = tmp_path / "mlp.rvm"
    mlp_exe.save(str(path))
    serve.run(deployment([str(path)], num_replicas=2, max_batch=16), name="relvm",
              route_prefix="/")
    status = serve.status().applications["relvm"].deployments["relvm"]
    assert status.replica_states.get("RUNNING") == 2, status

    client = tc.InferenceServerClient(f"127.0.0.1:{cluster}", concurrency=8)
    deadline = time.monotonic() + 60
    while not client.is_model_ready("mlp"):
        assert time.monotonic() < deadline, "the deployment never got ready"
        time.sleep(0.2)
    meta = client.get_model_metadata("mlp")
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 784]}]
    vm = relvm.VirtualMachine(mlp_exe)
    xs = [rows(1 + i % 3, seed=i) for i in range(24)]
    pending = []
    for x in xs:
        inp = tc.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        pending.append(client.async_infer("mlp", [inp]))
    for x, p in zip(xs, pending):
        np.testing.assert_array_equal(p.get_result().as_numpy("output0"), vm.invoke("main", x))
    bad = tc.InferInput("x", [1, 3], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 3), np.float32))
    with pytest.raises(Exception, match="dim 1: expected 784, got 3"):
        client.infer("mlp", [bad])
