"""The Executable: everything a VirtualMachine needs, as plain data.

An Executable holds VM functions (bytecode and metadata), constants, the kernel table and the
dim programs. It is produced by ``relvm.build`` and by ``relvm.load``; the runtime never needs
the compiler to use one. ``exe.bytecode`` is the disassembly: a product feature, not a debug aid.
``exe.save(path)`` writes it to one file (``file/writer.py``, ``docs/format.md``); ``relvm.load``
reads it back (``file/loader.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .bytecode import format_instruction
from .bytecode.dimprog import format_expr


@dataclass(frozen=True)
class TensorSig:
    """One tensor of a parameter or result: dtype and shape (ints, or dim text like ``n``;
    None: any rank, for the elements of a list whose rank is not known)."""

    dtype: str
    shape: tuple[int | str, ...] | None

    def __str__(self) -> str:
        if self.shape is None:
            return f"Tensor[..., {self.dtype}]"
        dims = ", ".join(str(d) for d in self.shape)
        return f"Tensor[({dims}), {self.dtype}]" if self.shape else self.dtype


@dataclass(frozen=True)
class ParamSig:
    """A function parameter: its name, its type's text, and its tensors flattened (a list's:
    its element type, a ``?`` dim any)."""

    name: str
    type_text: str
    tensors: tuple[TensorSig, ...]
    is_tuple: bool = False
    is_list: bool = False


@dataclass(frozen=True)
class OutputSig:
    """One tensor of a function's result (tuples flattened in order).

    ``shape`` holds dim operands (literal ints or ``-(k+1)`` for dims slot k) when the shape is
    known once the entry dims are computed, else None. ``alloc_pcs`` are the AllocTensor
    instructions whose tensor becomes this result: with outputs bound by the caller, they hand
    out the caller's array instead of allocating (zero-copy).
    """

    dtype: str
    shape: tuple[int, ...] | None
    alloc_pcs: tuple[int, ...]
    type_text: str
    #: The result is a list of tensors of ``dtype`` (returned as a Python list; the only
    #: result, ``shape`` None and no ``alloc_pcs``).
    is_list: bool = False


@dataclass
class VMFunction:
    name: str
    params: tuple[ParamSig, ...]
    num_regs: int
    instructions: list[tuple]
    num_dims: int
    dim_names: tuple[str, ...]
    outputs: tuple[OutputSig, ...]
    ret_type: str
    #: How many leading instructions validate the inputs (their failures are input errors).
    prologue: int = 0
    #: The model's own names of the parameters (ONNX's ``input.1`` for ``%input_1``), one per
    #: parameter, and of the flattened results; empty when the model gave none.
    input_names: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()

    def input_name(self, i: int) -> str:
        """Parameter ``i``'s name as the model gave it (else its IR name)."""
        return self.input_names[i] if self.input_names else self.params[i].name

    def output_name(self, i: int) -> str:
        """Result ``i``'s name as the model gave it (else ``output<i>``)."""
        return self.output_names[i] if self.output_names else f"output{i}"

    def signature(self) -> str:
        params = ", ".join(f"%{p.name}: {p.type_text}" for p in self.params)
        return f"@{self.name}({params}) -> {self.ret_type}"


@dataclass
class KernelEntry:
    """A kernel: ``op`` (a registry op name) with its attributes.

    ``name`` is what the disassembler and profiler show. ``inputs``/``outputs`` are the dtypes
    of the flattened arguments, for backends that specialise on them. ``groups`` gives, per op
    input, how many flattened tensors form it: -1 for a tensor, k for a tuple of k tensors
    (``concatenate`` takes one tuple input, passed as its k tensors). ``input_ranks`` and
    ``output_ranks`` are the ranks of the flattened arguments (empty when not recorded: files
    written before relvm recorded them); the verifier checks them against the bytecode and
    the VM never passes a kernel arrays of other dtypes or ranks.
    """

    name: str
    op: str
    attrs: dict[str, Any]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    groups: tuple[int, ...] = ()
    input_ranks: tuple[int, ...] = ()
    output_ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class NativeCode:
    """Whether an executable's native code (its kernel library) may run, and why.

    An executable built in this process runs its own kernels. A loaded one runs them only when
    its signature is by a key the user trusts, or the caller said to trust it
    (``relvm.load(..., trust_native_code=True)``); otherwise each generated kernel is made
    again from its description (``runtime/vm/kernels.py``).
    """

    trusted: bool
    why: str
    #: The id of the key that signed the file, if it is signed at all.
    signer: str | None = None


BUILT_HERE = NativeCode(True, "built in this process")


@dataclass(frozen=True)
class ExternalArtifact:
    """A region compiled by an external backend: the backend's name and the bytes its
    ``compile`` made (data its runtime reads; never native code). Kept in the ``extern``
    section by the region's symbol."""

    compiler: str
    data: bytes


@dataclass
class Executable:
    """A compiled module: run it with :class:`relvm.VirtualMachine`, save it with :meth:`save`.

    ``kernel_library`` is the compiled kernel library (shared-object bytes) the executable
    carries, or None; ``kernel_arch`` is the machine it was compiled for (``x86_64-linux``).
    ``relvm.load`` only checks the library (checksum, machine, ELF header); the backend named
    by ``backend`` is the one place that loads it, when it resolves the kernel table.
    """

    functions: list[VMFunction]
    constants: list[np.ndarray]
    kernels: list[KernelEntry]
    dim_programs: list[tuple]
    upper_bounds: dict[str, int] = field(default_factory=dict)
    backend: str = "numpy"
    kernel_library: bytes | None = None
    kernel_arch: str = ""
    #: Regions compiled by external backends, by symbol (kernel entries of op ``external``).
    externals: dict[str, ExternalArtifact] = field(default_factory=dict)
    #: Run regions whose backend cannot run here on relvm's own kernels (``relvm.load``'s
    #: ``external_fallback``) instead of refusing.
    external_fallback: bool = field(default=False, repr=False, compare=False)
    #: Lazy per-constant checksums of a loaded file (loader.ConstantChecks), else None.
    constant_checks: Any = field(default=None, init=False, repr=False, compare=False)
    #: Whether the kernel library may run (the loader decides it for a file).
    native: NativeCode = field(default=BUILT_HERE, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.function_index = {f.name: i for i, f in enumerate(self.functions)}

    def verify_constant(self, k: int) -> None:
        """Check constant ``k`` of a loaded file against its checksum (once; thread-safe).

        Raises RelvmFormatError naming the constant if its bytes were corrupted. A no-op for
        executables built in memory. The VM calls it the first time it loads a constant.
        """
        if self.constant_checks is not None:
            self.constant_checks.verify(k)

    def verify_constants(self) -> None:
        """Check every constant now (reads all of them; ``relvm.load`` defers this)."""
        for k in range(len(self.constants)):
            self.verify_constant(k)

    def save(self, path, weights=None, *, min_weight_bytes: int = 1024) -> None:
        """Write the executable to ``path``: one checked file (``docs/format.md``).

        Parameters
        ----------
        path : str or PathLike
            The file to write (replaced atomically).
        weights : str or PathLike, optional
            Keep constants of at least ``min_weight_bytes`` in this separate weights file; the
            executable records its name (relative to ``path``) and a content id, and
            ``relvm.load`` finds and checks it.

        Examples
        --------
        >>> exe.save("mlp.rvm")
        >>> vm = relvm.VirtualMachine(relvm.load("mlp.rvm"))
        """
        from .file.writer import save

        save(self, path, weights=weights, min_weight_bytes=min_weight_bytes)

    def save_bytes(self) -> bytes:
        """The file :meth:`save` would write, as bytes; read it back with ``relvm.load_bytes``."""
        from .file.writer import save_bytes

        return save_bytes(self)

    def function(self, name: str) -> VMFunction:
        from ..errors import RelvmInputError

        try:
            return self.functions[self.function_index[name]]
        except KeyError:
            raise RelvmInputError(f"the executable has no function @{name}; it has "
                                  + ", ".join("@" + f.name for f in self.functions)) from None

    @property
    def bytecode(self) -> str:
        """The disassembly of every function, with its signature and register count."""
        out = []
        for i, fn in enumerate(self.functions):
            out.append(f"VM Function[{i}]: {fn.signature()}")
            out.append(f"# reg file size = {fn.num_regs}, dims = {fn.num_dims}, "
                       f"instruction count = {len(fn.instructions)}")
            width = len(str(len(fn.instructions)))
            for pc, ins in enumerate(fn.instructions):
                out.append(f"  {pc:>{width}}: {format_instruction(ins, self, fn)}")
            out.append("")
        if self.dim_programs:
            out.append("Dim programs:")
            for k, prog in enumerate(self.dim_programs):
                out.append(f"  dims#{k}: " + "; ".join(_format_statement(s) for s in prog))
        return "\n".join(out)

    def __repr__(self) -> str:
        return (f"Executable({', '.join('@' + f.name for f in self.functions)}; "
                f"{len(self.kernels)} kernels, {len(self.constants)} constants)")


def _format_statement(s: tuple) -> str:
    if s[0] == "set":
        return f"d{s[1]} = {format_expr(s[2])}"
    if s[0] == "check":
        return f"check {format_expr(s[1])} == {format_expr(s[2])}"
    if s[0] == "broadcast":
        return f"check broadcast({format_expr(s[1])}, {format_expr(s[2])})"
    if s[0] == "bound":
        return f"check {format_expr(s[1])} <= {s[2]}"
    if s[0] in ("reshape", "reshape_allowzero"):
        return f"d{s[3]}.. = {s[0]}_dims(${s[1]}, ${s[2]})"
    return str(s)
