"""Shared helpers for relvm's benchmarks: timing with medians, optional peers."""

from __future__ import annotations

import statistics
import time
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


def optional(module: str):
    """Import a peer's module, or None when it is not installed (peers are optional extras)."""
    try:
        return __import__(module)
    except ImportError:
        return None
