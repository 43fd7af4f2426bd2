"""The virtual machine: the API (``machine.py``), one thread's state and the run loop
(``thread.py``), the opcode handlers (``handlers.py``), replays (``replay.py``), entry points'
argument checks (``entry.py``), kernel operand checks (``operands.py``) and the kernel table
resolved to callables (``kernels.py``)."""

from .machine import VirtualMachine

__all__ = ["VirtualMachine"]
