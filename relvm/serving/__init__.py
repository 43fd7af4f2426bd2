"""Serving: a dynamic-batching model server speaking the Open Inference Protocol (KServe v2).

``relvm serve model.rvm`` (``pip install "relvm[serve]"``) serves executables over HTTP;
concurrent requests are stacked along the model's batch dim and run as one invoke, with no
padding: one executable serves every batch size. The parts, in the order a request meets them:

- ``app.py``: the ASGI app (Starlette under uvicorn): routes, errors, deadlines, disconnects;
- ``protocol.py``: the wire format (JSON tensors and binary tensor data) to and from NumPy;
- ``model.py``: a model's signature, its batch dim, and each request checked against it;
- ``batcher.py``: the queue and worker threads that coalesce requests into invokes;
- ``metrics.py``: Prometheus metrics;
- ``server.py``: loading models and running uvicorn (the CLI's ``serve``);
- ``ray.py``: the same app as a Ray Serve deployment, for replicas on many machines.

Runtime code: it imports no compiler, and a server runs where lark is not installed.

Examples
--------
>>> from relvm.serving import ModelServer, ServedModel
>>> server = ModelServer([ServedModel("mlp", relvm.load("mlp.rvm"), max_batch=64)])
>>> import uvicorn; uvicorn.run(server.app, port=8000)   # or: relvm serve mlp.rvm
"""

from .app import ModelServer, ServedModel
from .batcher import Batcher
from .model import ModelSignature

__all__ = ["ModelServer", "ServedModel", "Batcher", "ModelSignature"]
