"""oneDNN's thread count follows relvm's (``relvm.set_num_threads``).

This oneDNN build runs on TBB, which has no C API: the count is set the way
``tbb::global_control(max_allowed_parallelism, k)`` does, through TBB's stable binary interface
(``tbb::detail::r1::create`` / ``destroy`` on a ``d1::global_control``, whose layout and mangled
names are oneTBB's ``include/oneapi/tbb/global_control.h`` and ``nm -D libtbb.so.12``). That
interface has not changed since oneTBB 2021 (``libtbb.so.12``).
"""

from __future__ import annotations

import threading
from typing import Any

from ...errors import RelvmKernelError

_CDEF = """
struct relvm_tbb_global_control { size_t my_value; intptr_t my_reserved; int my_param; };
void _ZN3tbb6detail2r16createERNS0_2d114global_controlE(struct relvm_tbb_global_control *);
void _ZN3tbb6detail2r17destroyERNS0_2d114global_controlE(struct relvm_tbb_global_control *);
size_t _ZN3tbb6detail2r127global_control_active_valueEi(int);
"""
_MAX_ALLOWED_PARALLELISM = 0  # d1::global_control::parameter

_state: dict[str, Any] = {}
_lock = threading.Lock()


def _tbb():
    if "lib" not in _state:
        import cffi
        ffi = cffi.FFI()
        ffi.cdef(_CDEF)
        try:
            # libdnnl's own libtbb.so.12, already loaded globally by lib.load()
            _state["lib"] = ffi.dlopen("libtbb.so.12")
        except OSError as e:
            raise RelvmKernelError(f"cannot load libtbb.so.12 to set oneDNN's threads: {e}") \
                from None
        _state["ffi"] = ffi
    return _state["ffi"], _state["lib"]


def set_threads(k: int) -> None:
    """Let TBB (hence oneDNN) use at most ``k`` threads, replacing the previous limit."""
    with _lock:
        ffi, tbb = _tbb()
        old = _state.pop("control", None)
        # TBB applies the least of all live controls: drop the old one before adding the new.
        if old is not None:
            tbb._ZN3tbb6detail2r17destroyERNS0_2d114global_controlE(old)
        control = ffi.new("struct relvm_tbb_global_control *")
        control.my_value, control.my_param = k, _MAX_ALLOWED_PARALLELISM
        tbb._ZN3tbb6detail2r16createERNS0_2d114global_controlE(control)
        _state["control"] = control  # TBB keeps a pointer to it: keep it alive


def active_threads() -> int:
    """TBB's active max_allowed_parallelism (what ``global_control::active_value`` says)."""
    _, tbb = _tbb()
    return int(tbb._ZN3tbb6detail2r127global_control_active_valueEi(_MAX_ALLOWED_PARALLELISM))


def follow_relvm() -> None:
    """Once per process: apply relvm's count now and on every ``set_num_threads``."""
    with _lock:
        if _state.get("following"):
            return
        _state["following"] = True
    from ...runtime import threads
    threads.on_change(set_threads)
