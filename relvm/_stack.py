"""Run deeply recursive tree walks (the reference interpreter, the compiler) without hitting
Python's recursion limit: in a thread with a large stack and a raised limit."""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable

STACK_BYTES = 1024 * 1024 * 1024
RECURSION_LIMIT = 1_000_000


def run_with_deep_stack(fn: Callable[[], Any]) -> Any:
    """``fn()``, run where recursion can go ~100k Python frames deep; exceptions propagate."""
    result: list[Any] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn())
        except BaseException as e:  # re-raised in the caller's thread
            error.append(e)

    old_limit = sys.getrecursionlimit()
    old_size = threading.stack_size()
    sys.setrecursionlimit(max(old_limit, RECURSION_LIMIT))
    threading.stack_size(STACK_BYTES)
    try:
        t = threading.Thread(target=target, name="relvm-deep")
        t.start()
    finally:
        threading.stack_size(old_size)
    t.join()
    sys.setrecursionlimit(old_limit)
    if error:
        raise error[0]
    return result[0]
