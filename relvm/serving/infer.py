"""The infer endpoint, ``POST /v2/models/<m>[/versions/<v>]/infer``: the server's hot path.

A plain ASGI handler rather than a Starlette route: every request to a busy server comes this
way, and the framework's request and response objects, middleware and routing cost more than
the rest of the path (the bundled MLP at 64 clients: 4,800 requests/s through Starlette's
route, more without). Its steps: read the body (up to ``max_body_bytes``), decode it
(``protocol.py``), check it against the model's signature (``model.py``), queue it
(``batcher.py``), await the result, encode and send it.

A client that disconnects while its request waits has it cancelled: a watcher, started only
for a request still waiting after ``WATCH_AFTER`` seconds (most finish sooner, and a watcher
per request would cost as much again), reads the connection's next ASGI message, which is
``http.disconnect`` when the client has gone.
"""

from __future__ import annotations

import asyncio
import time

from ..errors import (RelvmDeadlineError, RelvmError, RelvmInputError, RelvmOverloadedError)
from . import protocol as P

#: Seconds a request waits before a watcher looks out for its client disconnecting.
WATCH_AFTER = 0.02

_JSON = [(b"content-type", b"application/json")]
_BINARY = [(b"content-type", b"application/octet-stream")]


class Reply(Exception):
    """An HTTP error reply: status and message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Gone(Exception):
    """The client disconnected: nothing is sent."""


def _reply(error: RelvmError) -> Reply:
    """The HTTP reply to a RelvmError: 400 for a request relvm refuses, 504 past its deadline,
    503 when the server cannot take it now, 500 when the model failed on it."""
    for kind, status in ((RelvmInputError, 400), (RelvmDeadlineError, 504),
                         (RelvmOverloadedError, 503)):
        if isinstance(error, kind):
            return Reply(status, str(error))
    return Reply(500, str(error))


def infer_route(path: str) -> tuple[str, str | None] | None:
    """(model, version or None) of an infer path, else None."""
    parts = path.split("/")
    # "", "v2", "models", m, "infer"  or  "", "v2", "models", m, "versions", v, "infer"
    if len(parts) == 5 and parts[1:3] == ["v2", "models"] and parts[4] == "infer":
        return parts[3], None
    if (len(parts) == 7 and parts[1:3] == ["v2", "models"] and parts[4] == "versions"
            and parts[6] == "infer"):
        return parts[3], parts[5]
    return None


class Infer:
    """The endpoint for one ModelServer (its models, limits, metrics, readiness)."""

    def __init__(self, server):
        self.server = server

    async def __call__(self, scope, receive, send, name: str, version: str | None) -> None:
        start = time.perf_counter()
        server = self.server
        try:
            model = server.lookup(name, version)
            body, headers = await self._respond(model, scope, receive)
            status = 200
        except Reply as e:
            status, body, headers = e.status, P.error_body(str(e)), _JSON
        except Gone:
            status, body = 499, None  # nginx's code for it, in the metrics
        if server.metrics is not None and name in server.models:
            server.metrics.answered(name, status, time.perf_counter() - start)
        if body is None:
            return
        await send({"type": "http.response.start", "status": status,
                    "headers": headers + [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def _body(self, scope, receive) -> tuple[bytes, str | None]:
        """The body and the Inference-Header-Content-Length header's value."""
        limit = self.server.max_body_bytes
        length = header = None
        for k, v in scope["headers"]:
            if k == b"content-length":
                length = v
            elif k == b"inference-header-content-length":
                header = v.decode("latin-1")
        if length is not None and length.isdigit() and int(length) > limit:
            raise Reply(400, f"the request body is {int(length)} bytes, over the server's "
                             f"limit of {limit}")
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise Gone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise Reply(400, f"the request body is over the server's limit of {limit} "
                                 f"bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks), header

    async def _respond(self, model, scope, receive) -> tuple[bytes, list]:
        body, header = await self._body(scope, receive)
        loop = asyncio.get_running_loop()
        # Delivered by the batcher's on_done when it serves this loop; else through the
        # job's own future.
        waiter = loop.create_future() if model.loop is loop else None
        try:
            req = P.decode_request(body, header)
            arrays = model.signature.check(req.inputs)
            picks = _outputs(model, req.outputs)
            deadline = _deadline(req.parameters)
            if not self.server.accepting(model):
                raise RelvmOverloadedError(f"model {model.name!r} is not ready")
            job = model.batcher.submit(arrays, deadline, waiter)
        except RelvmError as e:
            raise _reply(e) from None
        results = await _wait(job.future, waiter or asyncio.wrap_future(job.future), receive)
        outs = model.signature.outputs
        body, head = P.encode_response(model.name, model.version, req,
                                       [(outs[i].name, results[i]) for i in picks])
        if head is None:
            return body, _JSON
        return body, _BINARY + [(b"inference-header-content-length", str(head).encode())]


def _outputs(model, wanted: list[str]) -> list[int]:
    names = [t.name for t in model.signature.outputs]
    if not wanted:
        return list(range(len(names)))
    picks = []
    for w in wanted:
        if w not in names:
            raise RelvmInputError(f"unknown output {w!r}; the model gives {', '.join(names)}")
        picks.append(names.index(w))
    return picks


def _deadline(params: dict) -> float | None:
    """The request's deadline (``time.monotonic``) from Triton's ``timeout`` parameter
    (microseconds), or None."""
    timeout = params.get("timeout")
    if timeout is None:
        return None
    if type(timeout) is not int or timeout <= 0:
        raise RelvmInputError(f"parameter 'timeout' must be a positive integer (microseconds), "
                              f"got {timeout!r}")
    return time.monotonic() + timeout / 1e6


async def _wait(future, waiting, receive) -> list:
    """The request's results (``waiting``: the asyncio future that gets them, ``future``: the
    job's own); Gone when its client disconnected first (the queued request is cancelled); a
    Reply for the RelvmError that failed it."""
    gone: list = []

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.append(True)
        future.cancel()  # still queued: it never runs
        waiting.cancel()

    def start_watching() -> None:
        watchers.append(asyncio.ensure_future(watch()))

    watchers: list = []
    timer = asyncio.get_running_loop().call_later(WATCH_AFTER, start_watching)
    try:
        return await waiting
    except asyncio.CancelledError:
        if gone:
            raise Gone from None
        raise
    except RelvmError as e:
        raise _reply(e) from None
    finally:
        timer.cancel()
        for w in watchers:
            w.cancel()
