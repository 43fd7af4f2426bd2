"""``relvm serve`` on Ray Serve: the same app and batcher in every replica, behind Ray's proxy.

Each replica (a Ray actor) loads the executables from bytes the driver read (so the files need
not exist on the other machines), and runs the ModelServer app of ``relvm serve`` with its own
VMs and batchers; Ray's HTTP proxy spreads requests over the replicas and speaks the same
protocol, since it forwards them to the app as they are. ``pip install "relvm[ray]"``.

On one machine::

    import ray
    from ray import serve
    from relvm.serving.ray import deployment

    ray.init()
    serve.start(http_options={"host": "127.0.0.1", "port": 8000})
    serve.run(deployment(["mlp.rvm"], num_replicas=2), route_prefix="/")
    # tritonclient.http.InferenceServerClient("127.0.0.1:8000") ... as with `relvm serve`

On several machines: ``ray start --head --port=6379`` on one, ``ray start
--address=<head-ip>:6379`` on each other (each with ``relvm[ray]`` installed), then the script
above with ``ray.init(address="auto")`` and ``http_options={"host": "0.0.0.0", ...}`` on the
head; replicas go wherever Ray finds CPUs (``ray_actor_options={"num_cpus": k}`` reserves k
per replica). A replica trusts a file's native code only if its own machine trusts the
signer (``relvm trust add``) or ``trust_native_code=True`` is given; else it runs without it.

``/metrics`` answers from whichever replica the proxy picks: each counts its own requests (Ray
exports its own per-replica metrics too).
"""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import RelvmError


def _serve():
    try:
        from ray import serve
    except ImportError:
        raise RelvmError("relvm.serving.ray needs Ray Serve: pip install \"relvm[ray]\"") \
            from None
    return serve


class Replica:
    """One replica: the executables loaded from bytes and the server's ASGI app.

    ``blobs``: (name, executable file bytes) pairs; ``options``: ServedModel's batching
    options; ``trust_native_code``: as for ``relvm.load``.
    """

    def __init__(self, blobs: list[tuple[str, bytes]], options: dict,
                 trust_native_code: bool = False, threads: int = 1):
        from .. import load_bytes, set_num_threads
        from .app import ModelServer, ServedModel

        set_num_threads(threads)  # the CPUs Ray gave this replica, not the whole machine

        self.server = ModelServer([
            ServedModel(name, load_bytes(data, trust_native_code=trust_native_code), **options)
            for name, data in blobs])

    def __serve_build_asgi_app__(self):
        return self.server.app


def deployment(models: Sequence[str], *, num_replicas: int = 1, name: str = "relvm",
               trust_native_code: bool = False, ray_actor_options: dict | None = None,
               **options: Any):
    """A Ray Serve application serving ``models`` (paths, or ``NAME=PATH``), for
    ``serve.run(app, route_prefix="/")``.

    Parameters
    ----------
    models : sequence of str
        Executable files, each served under its file's name (or NAME=PATH).
    num_replicas : int
        Replicas of the server (default 1).
    name : str
        The deployment's name in Ray.
    trust_native_code : bool
        Passed to ``relvm.load_bytes`` on every replica.
    ray_actor_options : dict, optional
        Ray's per-replica resources (default ``{"num_cpus": 1}``); a replica's invokes use
        as many relvm threads as it has CPUs.
    **options
        ServedModel's: ``batching``, ``max_batch``, ``max_delay``, ``max_queue``, ``workers``.

    Returns
    -------
    ray.serve.Application
    """
    from .server import model_file

    serve = _serve()
    blobs = []
    for spec in models:
        label, path = model_file(spec)
        with open(path, "rb") as f:
            blobs.append((label, f.read()))
    actor = dict(ray_actor_options or {"num_cpus": 1})
    threads = max(1, int(actor.get("num_cpus") or 1))
    cls = serve.ingress()(Replica)
    dep = serve.deployment(cls, name=name, num_replicas=num_replicas, ray_actor_options=actor)
    return dep.bind(blobs, options, trust_native_code, threads)
