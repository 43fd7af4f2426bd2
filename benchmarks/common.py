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


def optional(module: str):
    """Import a peer's module, or None when it is not installed (peers are optional extras)."""
    try:
        return __import__(module)
    except ImportError:
        return None
