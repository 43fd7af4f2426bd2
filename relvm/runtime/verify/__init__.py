"""The verifier: everything in an executable checked before anything runs (``relvm.load`` runs
it on every file). ``code.py`` checks the bytecode's operands by their roles and the dim
programs, ``kernelcheck.py`` the kernel entries, ``regtypes.py`` the type of every register."""

from .code import ProgramUse, check_executable, check_function, check_program

__all__ = ["ProgramUse", "check_executable", "check_function", "check_program"]
