"""``relvm serve``: load executables and serve them over HTTP with uvicorn."""

from __future__ import annotations

import os
from typing import Sequence

from ..errors import RelvmError
from .app import MAX_BODY_BYTES, ModelServer, ServedModel


def model_file(spec: str) -> tuple[str, str]:
    """(name, path) of a model given as ``PATH`` (named after its file: ``models/mlp.rvm`` ->
    ``mlp``) or ``NAME=PATH``; RelvmError if there is no such file."""
    name, _, path = spec.rpartition("=") if "=" in spec else ("", "", spec)
    if not os.path.exists(path):
        raise RelvmError(f"cannot read {path}: no such file")
    return name or os.path.splitext(os.path.basename(path))[0], path


def load_models(specs: Sequence[str], *, trust_native_code: bool = False,
                external_fallback: bool = False, **options) -> list[ServedModel]:
    """A ServedModel per ``PATH`` or ``NAME=PATH`` (``options``: ServedModel's batching
    options)."""
    from .. import load

    models = []
    for spec in specs:
        name, path = model_file(spec)
        models.append(ServedModel(name, load(path, trust_native_code=trust_native_code,
                                             external_fallback=external_fallback), **options))
    return models


def uvicorn_module():
    try:
        import uvicorn
    except ImportError:
        raise RelvmError("serving needs uvicorn and starlette: pip install \"relvm[serve]\"") \
            from None
    return uvicorn


def serve(models: Sequence[ServedModel], host: str = "127.0.0.1", port: int = 8000, *,
          max_body_bytes: int = MAX_BODY_BYTES, log_level: str = "warning",
          graceful_seconds: float = 30.0) -> None:
    """Serve ``models`` until interrupted (SIGINT/SIGTERM: in-flight requests finish, queued
    ones run, then the process stops)."""
    uvicorn = uvicorn_module()
    server = ModelServer(models, max_body_bytes=max_body_bytes)
    # No proxy-header rewriting (nothing here reads the client's address) and no access log
    # below log level info: both cost on every request.
    config = uvicorn.Config(server.app, host=host, port=port, log_level=log_level,
                            timeout_graceful_shutdown=graceful_seconds, lifespan="on",
                            proxy_headers=False,
                            access_log=log_level in ("info", "debug", "trace"))
    uvicorn.Server(config).run()
