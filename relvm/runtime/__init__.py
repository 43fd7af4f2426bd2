"""The runtime: executables, the VM, kernel loading. Imports nothing from the front end."""

from .executable import Executable
from .vm import VirtualMachine

__all__ = ["Executable", "VirtualMachine"]
