"""The HTTP side of ``relvm serve``: an ASGI app (Starlette) speaking the Open Inference Protocol.

Routes (KServe v2; ``/versions/<v>`` may follow a model's name in each ``/v2/models`` route):

======  =================================  ===================================================
GET     ``/v2/health/live``                200 while the process serves
GET     ``/v2/health/ready``               200 when every model is ready, 503 when shutting down
GET     ``/v2``                            server metadata: name, version, extensions
GET     ``/v2/models/<m>``                 model metadata: inputs and outputs, symbolic dims -1
GET     ``/v2/models/<m>/ready``           200 when the model is ready
POST    ``/v2/models/<m>/infer``           inference: JSON tensors or binary tensor data
GET     ``/metrics``                       Prometheus text format (``metrics.py``)
======  =================================  ===================================================

Errors are ``{"error": "<relvm's message>"}``: 400 for a request relvm refuses (bad JSON, an
unknown input or output, a wrong datatype or shape, a body over ``max_body_bytes``), 404 for an
unknown model or version, 503 when the model's queue is full or the server is shutting down,
504 when the request's deadline (Triton's ``timeout`` parameter, microseconds) passes while it
waits, 500 when the model fails on it. A client that disconnects cancels its queued request.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Sequence

from .. import __version__
from ..errors import RelvmError
from ..runtime import Executable, VirtualMachine
from . import protocol as P
from .batcher import Batcher
from .infer import Infer, Reply, infer_route
from .metrics import Metrics
from .model import ModelSignature

#: Largest request body, by default (a 1 x 3 x 1024 x 1024 float32 image is 12 MB).
MAX_BODY_BYTES = 64 << 20


def _starlette():
    try:
        import starlette.applications
        import starlette.responses
        import starlette.routing
    except ImportError:
        raise RelvmError("serving needs starlette and uvicorn: pip install \"relvm[serve]\"") \
            from None
    return starlette


def deliver(jobs) -> None:
    """In the event loop: hand each finished job's result (or error) to its waiter."""
    for job in jobs:
        w = job.waiter
        if w is None or w.done():
            continue  # its client went away
        error = job.future.exception()
        if error is None:
            w.set_result(job.future.result())
        else:
            w.set_exception(error)


class ServedModel:
    """One executable served under a name: its VM, signature and batcher.

    Parameters
    ----------
    name : str
    exe : Executable
        From ``relvm.load`` (or ``relvm.build``).
    version : str
        The one version served (default "1").
    func : str
        The function to serve (default "main").
    batching : bool
        Coalesce concurrent requests along the batch dim (default True).
    max_batch, max_delay, max_queue, workers
        The batcher's bounds (:class:`~relvm.serving.batcher.Batcher`).
    batch_dim : str, optional
        The dim to batch along; default: the one the signature implies (``ModelSignature``).
    """

    def __init__(self, name: str, exe: Executable, *, version: str = "1", func: str = "main",
                 batching: bool = True, max_batch: int = 64, max_delay: float = 0.0,
                 max_queue: int = 1024, workers: int = 1, batch_dim: str | None = None):
        self.name, self.version = name, version
        self.signature = ModelSignature(exe, func, batch_dim)
        self.vm = VirtualMachine(exe)
        self.options = dict(max_batch=max_batch if batching else 1, max_delay=max_delay,
                            max_queue=max_queue, workers=workers)
        #: Most rows in one invoke (1: one request per invoke).
        self.max_batch = Batcher.rows_limit(self.signature, self.options["max_batch"])
        self.batcher: Batcher | None = None
        self.loop = None  # the event loop on_done delivers to (start)

    def start(self, metrics: Metrics | None, loop=None) -> None:
        """Start the batcher. With ``loop`` (the server's event loop), results reach it one
        wake-up per batch (``Batcher.on_done``), not one per request."""
        callback = metrics.on_batch(self.name) if metrics is not None else None
        done = None if loop is None else functools.partial(loop.call_soon_threadsafe, deliver)
        self.loop = loop
        self.batcher = Batcher(self.vm, self.signature, on_batch=callback, on_done=done,
                               **self.options)
        if metrics is not None:
            metrics.watch_queue(self.name, self.batcher.queued)

    def stop(self) -> None:
        """Run what is queued, stop the workers (a later ``start`` makes a new batcher)."""
        if self.batcher is not None:
            self.batcher.close()
            self.batcher = None

    def metadata(self) -> dict:
        meta = self.signature.metadata(self.name, [self.version])
        meta["parameters"] = {"batch_dim": self.signature.batch_dim,
                              "max_batch": self.max_batch}
        return meta


class ModelServer:
    """The server's state and its ASGI app (``.app``).

    Parameters
    ----------
    models : sequence of ServedModel
        Each served under its name.
    max_body_bytes : int
        Largest request body taken (400 over it).
    metrics : bool
        Serve ``/metrics`` (needs prometheus-client; default True).

    Examples
    --------
    >>> server = ModelServer([ServedModel("mlp", relvm.load("mlp.rvm"))])
    >>> uvicorn.run(server.app, host="127.0.0.1", port=8000)
    """

    def __init__(self, models: Sequence[ServedModel], *, max_body_bytes: int = MAX_BODY_BYTES,
                 metrics: bool = True):
        names = [m.name for m in models]
        if len(set(names)) != len(names):
            raise RelvmError(f"two models are named alike: {', '.join(names)}")
        self.models = {m.name: m for m in models}
        self.max_body_bytes = max_body_bytes
        self.metrics = Metrics() if metrics else None
        self.ready = False
        s = _starlette()
        self._responses = s.responses
        R = s.routing.Route
        routes = [R("/v2/health/live", self.live), R("/v2/health/ready", self.server_ready),
                  R("/v2", self.server_metadata), R("/metrics", self.render_metrics)]
        for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
            routes += [R(prefix, self.model_metadata), R(prefix + "/ready", self.model_ready),
                       # POSTs never reach it (__call__ takes them): other methods get 405
                       R(prefix + "/infer", self.live, methods=["POST"])]
        self._starlette = s.applications.Starlette(routes=routes, lifespan=self._lifespan)
        self._infer = Infer(self)

    @property
    def app(self):
        """The ASGI app: infer requests go straight to the endpoint (``infer.py``, the hot
        path), everything else (health, metadata, metrics, lifespan) through Starlette."""
        return self

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path, root = scope["path"], scope.get("root_path", "")
            # mounted under a prefix (Ray Serve's route_prefix), the path may still carry it
            route = infer_route(path[len(root):] if root and path.startswith(root) else path)
            if route is not None:
                return await self._infer(scope, receive, send, *route)
        await self._starlette(scope, receive, send)

    # --- life ----------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _lifespan(self, app):
        self.start(asyncio.get_running_loop())
        try:
            yield
        finally:
            self.stop()

    def start(self, loop=None) -> None:
        """Start every model's batcher (``loop``: the event loop serving requests)."""
        for m in self.models.values():
            if m.batcher is None:
                m.start(self.metrics, loop)
        self.ready = True

    def stop(self) -> None:
        """Not ready any more; run what is queued, then stop the workers."""
        self.ready = False
        for m in self.models.values():
            m.stop()

    # --- replies -------------------------------------------------------------------------------
    def _json(self, doc: dict, status: int = 200):
        return self._responses.JSONResponse(doc, status_code=status)

    def _error(self, status: int, message: str):
        return self._responses.Response(P.error_body(message), status_code=status,
                                        media_type="application/json")

    def _model(self, request) -> ServedModel:
        return self.lookup(request.path_params["model"], request.path_params.get("version"))

    def accepting(self, model: ServedModel) -> bool:
        """Whether ``model`` takes requests now (the server started and not stopping)."""
        return self.ready and model.batcher is not None

    def lookup(self, name: str, version: str | None) -> ServedModel:
        """The model served as ``name`` (at ``version``, if given); Reply 404 if none."""
        model = self.models.get(name)
        if model is None:
            raise Reply(404, f"unknown model {name!r}; this server serves "
                             f"{', '.join(sorted(self.models)) or 'none'}")
        if version is not None and version != model.version:
            raise Reply(404, f"model {name!r} has no version {version!r}; it serves version "
                             f"{model.version!r}")
        return model

    # --- health and metadata -------------------------------------------------------------------
    async def live(self, request):
        return self._json({"live": True})

    async def server_ready(self, request):
        if not self.ready:
            return self._error(503, "the server is not ready")
        return self._json({"ready": True})

    async def server_metadata(self, request):
        return self._json({"name": "relvm", "version": __version__,
                           "extensions": ["binary_tensor_data"]})

    async def model_metadata(self, request):
        try:
            return self._json(self._model(request).metadata())
        except Reply as e:
            return self._error(e.status, str(e))

    async def model_ready(self, request):
        try:
            model = self._model(request)
        except Reply as e:
            return self._error(e.status, str(e))
        if not self.accepting(model):
            return self._error(503, f"model {model.name!r} is not ready")
        return self._json({"name": model.name, "ready": True})

    async def render_metrics(self, request):
        if self.metrics is None:
            return self._error(404, "metrics are off")
        body, kind = self.metrics.render()
        return self._responses.Response(body, media_type=kind.split(";")[0])
