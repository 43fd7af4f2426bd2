"""Bytecode: the opcode table (``opcodes.py``), instructions in memory, their encoding and text
(``instructions.py``), and the dim programs ComputeDims runs (``dimprog.py``).

Everything that needs a fact about an opcode derives it from the table; the names below are
the instruction API the rest of relvm uses.
"""

from .instructions import (DTYPE_CODES, DTYPE_NAMES, DecodeError, decode, encode,
                           format_instruction, instruction_class, local_uses, make, operands,
                           reads, register_operands, shared, spec_of, writes)

__all__ = ["DTYPE_CODES", "DTYPE_NAMES", "DecodeError", "decode", "encode", "format_instruction",
           "instruction_class", "local_uses", "make", "operands", "reads", "register_operands",
           "shared", "spec_of", "writes"]
