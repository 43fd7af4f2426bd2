"""The dynamic batcher: requests queued one by one run together, stacked along the batch dim.

One queue per model, served by worker threads that share the model's VM (a VM may be called
from many threads at once: each thread has its own execution state). A worker takes the oldest
request, then every queued request that can join it -- same non-batch dims, the batch within
``max_batch`` rows -- waiting up to ``max_delay`` seconds from the oldest request's arrival
for more (0, the default: no wait; requests that arrive while a batch runs form the next one,
so a lone client never waits and a busy server batches by itself). The stacked inputs run as
one ``invoke``; each request gets views of its own rows of the results (no copies).

Faults stay with their request: a request is checked against the signature before it is
queued; if a batch fails anyway (a check only the bytecode makes), each of its requests runs
again alone, so only the bad one fails. A request cancelled (its client went away) or past its
deadline before it runs is dropped from its batch. Over ``max_queue`` queued requests, or after
``close``, ``submit`` raises RelvmOverloadedError.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import RelvmDeadlineError, RelvmError, RelvmOverloadedError, RelvmRuntimeError
from ..runtime import VirtualMachine
from ..runtime.vm.thread import result_leaves
from .model import ModelSignature


@dataclass
class Job:
    """One queued request: its checked arrays, rows along the batch dim, and its future."""

    arrays: list[np.ndarray]
    rows: int
    key: tuple
    deadline: float | None
    enqueued: float = field(default_factory=time.monotonic)
    future: Future = field(default_factory=Future)
    started: float = 0.0
    #: What the submitter waits on, if not the future (the server: an asyncio future, set in
    #: its event loop by ``on_done``).
    waiter: Any = None


@dataclass(frozen=True)
class BatchStats:
    """What one run did, for the metrics: requests in it, rows, seconds each waited, seconds
    the invoke took."""

    requests: int
    rows: int
    waited: tuple[float, ...]
    seconds: float


class Batcher:
    """Coalesces one model's requests into invokes (see the module docstring).

    Parameters
    ----------
    vm : VirtualMachine
    signature : ModelSignature
        Its batch dim, if any, is the one requests stack along.
    max_batch : int
        Most rows in one invoke (capped by the batch dim's upper bound, if the executable has
        one); 1 turns batching off. A request with more rows runs alone.
    max_delay : float
        Seconds a batch may wait for more requests after its oldest arrived (default 0).
    max_queue : int
        Most requests waiting; beyond it ``submit`` raises RelvmOverloadedError.
    workers : int
        Threads running batches (each invoke uses relvm's own threads too).
    on_batch : callable, optional
        Called with a :class:`BatchStats` after every run (metrics).
    on_done : callable, optional
        Called from the worker with the list of jobs whose futures it has just resolved (a
        batch, or requests whose deadline passed): one call per batch, so a server can hand
        all of them to its event loop at once rather than one wake-up per request.
    """

    def __init__(self, vm: VirtualMachine, signature: ModelSignature, *, max_batch: int = 64,
                 max_delay: float = 0.0, max_queue: int = 1024, workers: int = 1,
                 on_batch: Callable[[BatchStats], None] | None = None,
                 on_done: Callable[[list[Job]], None] | None = None):
        if max_batch < 1 or max_queue < 1 or workers < 1 or max_delay < 0:
            raise RelvmError("max_batch, max_queue and workers must be at least 1, max_delay "
                             "at least 0")
        self.vm, self.sig = vm, signature
        self.max_batch = self.rows_limit(signature, max_batch)
        self.max_delay, self.max_queue = max_delay, max_queue
        self.on_batch, self.on_done = on_batch, on_done
        self._queue: collections.deque[Job] = collections.deque()
        self._cv = threading.Condition()
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"relvm-batcher-{i}",
                                          daemon=True) for i in range(workers)]
        for t in self._threads:
            t.start()

    @staticmethod
    def rows_limit(signature: ModelSignature, max_batch: int) -> int:
        """Most rows one invoke takes: ``max_batch``, within the batch dim's upper bound; 1
        for a model without a batch dim."""
        if signature.batch_dim is None:
            return 1
        bound = signature.upper_bounds.get(signature.batch_dim)
        return min(max_batch, bound or max_batch)

    def queued(self) -> int:
        return len(self._queue)

    def submit(self, arrays: list[np.ndarray], deadline: float | None = None,
               waiter: Any = None) -> Job:
        """Queue one checked request (``ModelSignature.check``); its job's future gets the
        list of result arrays, or the RelvmError that failed it. ``deadline``:
        ``time.monotonic()`` value after which it is not run; ``waiter``: kept on the job for
        ``on_done``."""
        if self.sig.batch_dim is not None:
            rows = arrays[0].shape[0]
            key = tuple((a.shape[1:], a.dtype.str) for a in arrays)
        else:
            rows, key = 1, None
        job = Job(arrays, rows, key, deadline, waiter=waiter)
        with self._cv:
            if self._closed:
                raise RelvmOverloadedError("the server is shutting down")
            if len(self._queue) >= self.max_queue:
                raise RelvmOverloadedError(f"the queue is full ({self.max_queue} requests "
                                           f"waiting); try again later")
            self._queue.append(job)
            self._cv.notify()
        return job

    def close(self, timeout: float | None = None) -> None:
        """Take no more requests, run the queued ones, stop the workers."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        for t in self._threads:
            t.join(timeout)

    # --- the workers ---------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            taken = self._next_batch()
            if taken is None:
                return
            batch = [j for j in taken if self._start(j)]
            if batch:
                self._run(batch)
            if self.on_done is not None:
                done = [j for j in taken if j.future.done() and not j.future.cancelled()]
                if done:
                    self.on_done(done)

    def _next_batch(self) -> list[Job] | None:
        """The requests taken for the next batch (``_start`` then drops those cancelled or
        past their deadline), or None once closed and drained."""
        with self._cv:
            while not self._queue:
                if self._closed:
                    return None
                self._cv.wait()
            first = self._queue.popleft()
            batch, rows = [first], first.rows
            if first.key is not None:
                end = first.enqueued + self.max_delay
                while rows < self.max_batch:
                    rows = self._take(first.key, batch, rows)
                    wait = end - time.monotonic()
                    if rows >= self.max_batch or wait <= 0 or self._closed:
                        break
                    self._cv.wait(wait)
        return batch

    def _take(self, key: tuple, batch: list[Job], rows: int) -> int:
        """Move queued requests that fit (same key, rows within max_batch) into batch."""
        keep = collections.deque()
        for job in self._queue:
            if job.key == key and rows + job.rows <= self.max_batch:
                batch.append(job)
                rows += job.rows
            else:
                keep.append(job)
        self._queue = keep
        return rows

    @staticmethod
    def _start(job: Job) -> bool:
        """Mark a job running; False if it was cancelled or its deadline passed."""
        if not job.future.set_running_or_notify_cancel():
            return False
        job.started = time.monotonic()
        if job.deadline is not None and job.started > job.deadline:
            job.future.set_exception(RelvmDeadlineError(
                f"the request's deadline passed after {job.started - job.enqueued:.3f} s in "
                f"the queue"))
            return False
        return True

    def _invoke(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        return list(result_leaves(self.vm.invoke(self.sig.func, *arrays)))

    def _run(self, batch: list[Job]) -> None:
        start = time.perf_counter()
        if len(batch) == 1:
            self._run_alone(batch[0])
        else:
            try:
                stacked = [np.concatenate([j.arrays[i] for j in batch])
                           for i in range(len(batch[0].arrays))]
                results = self._invoke(stacked)
            except RelvmError:
                for job in batch:  # find the request at fault: each alone
                    self._run_alone(job)
            except Exception as e:  # noqa: BLE001 -- a bug must fail these requests, not the worker
                for job in batch:
                    job.future.set_exception(RelvmRuntimeError(f"the model failed: {e!r}"))
            else:
                at = 0
                for job in batch:
                    job.future.set_result([r[at:at + job.rows] for r in results])
                    at += job.rows
        if self.on_batch is not None:
            self.on_batch(BatchStats(len(batch), sum(j.rows for j in batch),
                                     tuple(j.started - j.enqueued for j in batch),
                                     time.perf_counter() - start))

    def _run_alone(self, job: Job) -> None:
        try:
            job.future.set_result(self._invoke(job.arrays))
        except RelvmError as e:
            job.future.set_exception(e)
        except Exception as e:  # noqa: BLE001
            job.future.set_exception(RelvmRuntimeError(f"the model failed: {e!r}"))
