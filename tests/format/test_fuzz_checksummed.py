"""Fuzzing with valid checksums: 10,000 structure-aware mutants of each kind of executable,
every checksum recomputed (``mutants.py``), each loaded, given a VM and invoked with valid
inputs. Each must succeed or fail with an error of relvm's family -- never crash the process,
hang, or raise anything else.

Mutants run in subprocesses (``fuzz_worker.py``), two at a time (``RELVM_FUZZ_JOBS``), so a
segfault or an abort is caught and reported with the mutation that caused it, and so is a
mutant that runs longer than ``TIMEOUT`` seconds. ``RELVM_FUZZ_MUTANTS`` sets the count per kind
(default 10,000: 70,000 mutants in about two minutes on two cores); ``RELVM_FUZZ_LONG=1`` runs
100,000 per kind (about 25 minutes on two busy cores).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest

from mutants import KINDS

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_worker.py")
LONG = os.environ.get("RELVM_FUZZ_LONG", "") not in ("", "0")
MUTANTS = int(os.environ.get("RELVM_FUZZ_MUTANTS", 100_000 if LONG else 10_000))
JOBS = int(os.environ.get("RELVM_FUZZ_JOBS", "2"))
#: Seconds one mutant may take (the slowest valid ones take milliseconds).
TIMEOUT = 60.0
#: Seconds a worker may take to start: importing relvm and building its kind's programs.
STARTUP = 600.0
#: Mutants per worker process: the work is split so both cores stay busy to the end.
CHUNK = 2_500


@dataclass
class Job:
    """A worker running mutants ``first`` .. ``end - 1`` of one kind."""

    kind: str
    first: int
    end: int
    proc: subprocess.Popen | None = None
    stderr: object = None
    buffer: bytes = b""
    running: tuple[int, str] | None = None  # the mutant under way and its mutation
    last: tuple[int, str] | None = None  # the mutant last reported on
    done: int = 0  # the next mutant to report on
    retried: bool = False  # started again where a worker died between mutants
    deadline: float = 0.0

    def start(self) -> None:
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, WORKER, self.kind, str(self.first),
                                      str(self.end - self.first)], stdout=subprocess.PIPE,
                                     stderr=self.stderr, start_new_session=True)
        self.done, self.running, self.buffer = self.first, None, b""
        self.deadline = time.monotonic() + STARTUP

    def stderr_tail(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()[-1500:].decode("utf-8", "replace")


@dataclass
class Report:
    outcomes: dict[str, Counter] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def fuzz(count: int, jobs: int = JOBS) -> Report:
    """Run ``count`` mutants of every kind; what happened to them."""
    report = Report({kind: Counter() for kind in KINDS}, [], {kind: 0.0 for kind in KINDS})
    pending = [Job(kind, first, min(first + CHUNK, count)) for kind in KINDS
               for first in range(0, count, CHUNK)]
    active: list[Job] = []
    sel = selectors.DefaultSelector()
    started: dict[int, float] = {}
    while pending or active:
        while pending and len(active) < jobs:
            job = pending.pop(0)
            job.start()
            started[id(job)] = time.monotonic()
            sel.register(job.proc.stdout, selectors.EVENT_READ, job)
            active.append(job)
        for key, _ in sel.select(timeout=1.0):
            job = key.data
            data = os.read(job.proc.stdout.fileno(), 1 << 16)
            if data:
                _lines(job, data, report)
            else:
                _finish(job, report, sel, active, pending, started, hung=False)
        now = time.monotonic()
        for job in [j for j in active if now > j.deadline]:
            _finish(job, report, sel, active, pending, started, hung=True)
    return report


def _lines(job: Job, data: bytes, report: Report) -> None:
    *lines, job.buffer = (job.buffer + data).split(b"\n")
    for raw in lines:
        mark, number, rest = (raw.decode("utf-8", "replace").split(" ", 2) + ["", ""])[:3]
        if mark not in (">", "<") or not number.isdigit():
            continue  # not the worker's (a library printing to stdout)
        i = int(number)
        if mark == ">":
            job.running = (i, rest)
        elif mark == "<":
            report.outcomes[job.kind][rest.split(":")[0]] += 1
            if rest.startswith("FOREIGN"):
                report.failures.append(f"{job.kind} mutant {i}: {rest}\n    mutation: "
                                       f"{job.running[1] if job.running else '?'}")
            job.last, job.running, job.done = job.running, None, i + 1
        job.deadline = time.monotonic() + TIMEOUT


def _finish(job: Job, report: Report, sel, active: list, pending: list, started: dict,
            hung: bool) -> None:
    """The worker ended (or hung): report a crash or hang, and go on after its mutant."""
    sel.unregister(job.proc.stdout)
    active.remove(job)
    if hung:
        try:
            os.killpg(job.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it ended meanwhile
    code = job.proc.wait()
    report.seconds[job.kind] += time.monotonic() - started.pop(id(job))
    if not hung and code == 0 and job.done == job.end:
        return
    what = f"hung (no answer in {TIMEOUT:.0f} s)" if hung else \
        f"crashed ({_exit_text(code)})"
    if job.running is None:  # while starting, or freeing the last mutant's objects
        last = f"mutant {job.last[0]} ({job.last[1]})" if job.last else "none"
        report.failures.append(f"{job.kind}: the worker {what} between mutants; the last: "
                               f"{last}\n    stderr: {job.stderr_tail()[-600:]}")
        if job.done < job.end and not job.retried:
            pending.insert(0, Job(job.kind, job.done, job.end, retried=True))
        return
    i, mutation = job.running
    report.outcomes[job.kind]["CRASH" if not hung else "HANG"] += 1
    report.failures.append(f"{job.kind} mutant {i} {what}\n    mutation: {mutation}\n"
                           f"    stderr: {job.stderr_tail()[-600:]}")
    if i + 1 < job.end:
        pending.insert(0, Job(job.kind, i + 1, job.end))


def _exit_text(code: int) -> str:
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit status {code}"


@pytest.mark.slow
@pytest.mark.e2e
def test_mutants_with_valid_checksums_never_escape_relvms_errors() -> None:
    report = fuzz(MUTANTS)
    for kind in KINDS:
        counts = report.outcomes[kind]
        print(f"{kind}: {sum(counts.values())} mutants, {report.seconds[kind]:.1f} s of "
              f"workers: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    assert not report.failures, "\n".join(report.failures[:20])
    for kind in KINDS:
        counts = report.outcomes[kind]
        assert sum(counts.values()) == MUTANTS, (kind, counts)
        # The mutants reach every stage: most are refused at load, some get past the
        # verifier to be refused when kernels are made or to fail while running, and
        # harmless ones run.
        assert counts["refused at load"] > MUTANTS / 3 and counts["ran"] > MUTANTS / 20, counts
