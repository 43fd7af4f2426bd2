"""The server's Prometheus metrics (``prometheus-client``), one registry per server.

- ``relvm_requests_total{model, code}``: infer requests answered, by HTTP status;
- ``relvm_request_seconds{model}``: time from a request's arrival to its response;
- ``relvm_queue_seconds{model}``: time a request waited in its model's queue;
- ``relvm_batch_size{model}``: requests per invoke (1 with batching off);
- ``relvm_batch_rows{model}``: rows per invoke along the batch dim;
- ``relvm_invoke_seconds{model}``: time of one invoke (a batch);
- ``relvm_queue_depth{model}``: requests waiting now.
"""

from __future__ import annotations

from typing import Callable

from ..errors import RelvmError
from .batcher import BatchStats

_LATENCY = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
            1.0, 2.5, 5.0, 10.0)
_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def prometheus():
    """The prometheus_client module, or a RelvmError saying how to install it."""
    try:
        import prometheus_client
    except ImportError:
        raise RelvmError("serving needs prometheus-client: pip install \"relvm[serve]\"") \
            from None
    return prometheus_client


class Metrics:
    """The metrics above, in a registry of their own (``render`` gives the text format)."""

    def __init__(self):
        p = prometheus()
        self._p = p
        self.registry = p.CollectorRegistry()
        r = self.registry
        self.requests = p.Counter("relvm_requests", "Infer requests answered, by HTTP status",
                                  ["model", "code"], registry=r)
        self.latency = p.Histogram("relvm_request_seconds", "Time from an infer request's "
                                   "arrival to its response", ["model"], buckets=_LATENCY,
                                   registry=r)
        self.queue = p.Histogram("relvm_queue_seconds", "Time a request waited in its "
                                 "model's queue", ["model"], buckets=_LATENCY, registry=r)
        self.batch = p.Histogram("relvm_batch_size", "Requests per invoke", ["model"],
                                 buckets=_SIZES, registry=r)
        self.rows = p.Histogram("relvm_batch_rows", "Rows per invoke along the batch dim",
                                ["model"], buckets=_SIZES, registry=r)
        self.invoke = p.Histogram("relvm_invoke_seconds", "Time of one invoke", ["model"],
                                  buckets=_LATENCY, registry=r)
        self.depth = p.Gauge("relvm_queue_depth", "Requests waiting", ["model"], registry=r)
        self._answered: dict = {}

    def watch_queue(self, model: str, depth: Callable[[], int]) -> None:
        self.depth.labels(model).set_function(depth)

    def on_batch(self, model: str) -> Callable[[BatchStats], None]:
        """The batcher's callback for ``model``."""
        batch, rows = self.batch.labels(model), self.rows.labels(model)
        queue, invoke = self.queue.labels(model), self.invoke.labels(model)

        def record(s: BatchStats) -> None:
            batch.observe(s.requests)
            rows.observe(s.rows)
            invoke.observe(s.seconds)
            for w in s.waited:
                queue.observe(w)
        return record

    def answered(self, model: str, code: int, seconds: float) -> None:
        key = (model, code)
        children = self._answered.get(key)
        if children is None:  # labels() looks its child up by name: once per model and code
            children = self._answered[key] = (self.requests.labels(model, str(code)),
                                              self.latency.labels(model))
        children[0].inc()
        children[1].observe(seconds)

    def render(self) -> tuple[bytes, str]:
        """(body, content type) of the text exposition format."""
        return self._p.generate_latest(self.registry), self._p.CONTENT_TYPE_LATEST
