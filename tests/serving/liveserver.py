"""Helpers of the serving tests: a live server (uvicorn in a thread on a free loopback port,
stopped at the end) and request rows."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import numpy as np
import uvicorn  # the test extra installs it: missing, the tests fail


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Live:
    """A ModelServer running under uvicorn in a thread: ``url``, ``port``, ``server``."""

    def __init__(self, server):
        self.server = server
        self.port = free_port()
        self.url = f"127.0.0.1:{self.port}"
        config = uvicorn.Config(server.app, host="127.0.0.1", port=self.port,
                                log_level="error", lifespan="on", timeout_graceful_shutdown=10)
        self.uv = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.uv.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.uv.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.uv.should_exit = True
        self.thread.join(20)

    def __exit__(self, *exc):
        self.stop()


@contextlib.contextmanager
def serving(*models, **kw):
    from relvm.serving import ModelServer

    with Live(ModelServer(list(models), **kw)) as live:
        yield live


def rows(n: int, seed: int = 0, width: int = 784) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, width), dtype=np.float32)
