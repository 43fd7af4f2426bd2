"""Shared helpers for relvm's benchmarks: timing with medians, optional peers, the machine's
description for a report's header, and failures reported by stage."""

from __future__ import annotations

import platform
from importlib import metadata
import statistics
import subprocess
import time
from pathlib import Path
from typing import Callable


def median_us(fn: Callable[[], object], repeat: int = 15, number: int | None = None,
              warmup: int = 50) -> float:
    """Median over ``repeat`` runs of the mean time of ``number`` calls, in microseconds."""
    for _ in range(warmup):
        fn()
    if number is None:  # aim for ~20 ms per run
        start = time.perf_counter()
        fn()
        once = max(time.perf_counter() - start, 1e-7)
        number = max(1, min(10_000, int(0.02 / once)))
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - start) / number * 1e6)
    return statistics.median(runs)


def interleaved_us(fns: dict[str, Callable[[], object]], rounds: int = 7, repeat: int = 5,
                   number: int | None = None, settle: float = 0.05,
                   warmup: int = 50) -> dict[str, float]:
    """Median over ``rounds`` of each function's ``median_us``, the functions taking turns.

    Each round measures every function once, in an order rotated from round to round, so a
    burst of noise from the machine lands on all of them alike; the median of the round
    medians then drops the rounds it spoiled. Before each measurement the process rests
    ``settle`` seconds: thread pools spin for a while after their last call (relvm's and ORT's
    alike), and a pool still spinning would take a core from the runtime measured next.
    Comparisons between the results are fair. ``warmup`` calls precede each measurement (fewer
    for models whose one call takes a good part of a second).
    """
    names = list(fns)
    per_round: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            time.sleep(settle)
            per_round[name].append(median_us(fns[name], repeat=repeat, number=number,
                                             warmup=warmup))
    return {name: statistics.median(times) for name, times in per_round.items()}


def paired_ratio(a: Callable[[], object], b: Callable[[], object], rounds: int = 9,
                 repeat: int = 3, settle: float = 0.05, warmup: int = 50) -> float:
    """Median over ``rounds`` of the ratio a/b of two functions measured back to back (their
    order alternating from round to round): a slow stretch of the machine lands on both
    halves of a pair, and the median drops the pairs it split. For a ratio near 1 between two
    builds of one model (symbolic/static), steadier than the ratio of two medians."""
    ratios = []
    for r in range(rounds):
        pair = (a, b) if r % 2 == 0 else (b, a)
        times = []
        for fn in pair:
            time.sleep(settle)
            times.append(median_us(fn, repeat=repeat, warmup=warmup))
        ta, tb = times if r % 2 == 0 else times[::-1]
        ratios.append(ta / tb)
    return statistics.median(ratios)


def versions(names: tuple[str, ...]) -> dict[str, str]:
    """Python's version, relvm's (of the relvm that runs: a checkout on PYTHONPATH names its
    own) and those of the packages ``names`` as installed, read without importing them (torch
    stays out of the timed processes)."""
    import relvm

    out = {"python": platform.python_version(), "relvm": relvm.__version__}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "missing"
    return out


def optional(module: str):
    """Import a peer's module, or None when it is not installed (peers are optional extras)."""
    try:
        return __import__(module)
    except ImportError:
        return None


def ort_session(path: Path, threads: int):
    """An ONNX Runtime CPU session on ``threads`` intra-op threads (one inter-op thread)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3  # no warnings about unused initializers
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def cpu_model() -> str:
    """lscpu's "Model name" (or /proc/cpuinfo's "model name")."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def gemm_isa() -> str:
    """The instruction set relvm's packed GEMM chose on this CPU. relvm has no public call for
    it: this reads the kernel library's ``relvm_pgemm_isa()`` (as relvm's kernel tests do)."""
    try:
        from relvm.backends.native import load

        ffi, lib = load()
        return ffi.string(lib.relvm_pgemm_isa()).decode()
    except Exception as e:  # noqa: BLE001 -- reported, not fatal
        return f"unknown ({type(e).__name__})"


def first_line(e: BaseException) -> str:
    """The error's type and first line (OpenVINO's first lines only say where it was thrown)."""
    text = [line for line in str(e).strip().splitlines()
            if not line.startswith(("Exception from", "Check '"))]
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


class StageError(Exception):
    """A failure at a named stage (export, import, build, run, mismatch, ...): reports give the
    stage and the error's first line, and go on with the next model."""

    def __init__(self, stage: str, error: BaseException | str):
        self.stage = stage
        self.line = error if isinstance(error, str) else first_line(error)
        super().__init__(f"{stage}: {self.line}")


def stage(name: str, fn, *args, **kwargs):
    """Call fn, turning any exception into a StageError for ``name``."""
    try:
        return fn(*args, **kwargs)
    except StageError:
        raise
    except Exception as e:  # noqa: BLE001 -- every failure of relvm is a finding
        raise StageError(name, e) from e
