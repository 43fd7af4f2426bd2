"""The symbols an ELF shared object defines itself, read from its bytes before it is loaded.

A symbol looked up with ``dlsym`` on a library's handle is searched in the library *and in
everything it links to*: asking a kernel library for ``system`` finds libc's. relvm looks a
generated kernel up only when the library's own dynamic symbol table (``.dynsym``) defines it
(a section index other than ``SHN_UNDEF``), so a name can only ever reach code the library
itself carries. Only what that needs is parsed: ELF64 little-endian (the machines relvm builds
kernels on), the section headers, ``.dynsym`` and its string table; anything malformed is a
RelvmFormatError naming section ``kernels``.
"""

from __future__ import annotations

import struct

from ..errors import RelvmFormatError

SHT_DYNSYM = 11
SHN_UNDEF = 0
#: Symbol types a kernel may be: a function (STT_FUNC), an indirect function (STT_GNU_IFUNC,
#: what ``target_clones`` makes), or data (STT_OBJECT, a kernel's ``_signature`` string).
DEFINABLE = {1, 2, 10}

_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")   # Elf64_Ehdr
_SECTION = struct.Struct("<IIQQQQIIQQ")         # Elf64_Shdr
_SYMBOL = struct.Struct("<IBBHQQ")              # Elf64_Sym


def _fail(message: str) -> RelvmFormatError:
    return RelvmFormatError(f"the kernel library's symbol table: {message}", section="kernels")


def defined_symbols(data: bytes) -> frozenset[str]:
    """The names of the functions and data the shared object ``data`` defines itself."""
    if len(data) < _HEADER.size or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise _fail("not a 64-bit little-endian ELF object")
    header = _HEADER.unpack_from(data, 0)
    shoff, shentsize, shnum = header[6], header[11], header[12]
    if shentsize != _SECTION.size or shoff + shnum * shentsize > len(data):
        raise _fail("section headers lie outside the file")
    sections = [_SECTION.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    names: set[str] = set()
    for s in sections:
        if s[1] != SHT_DYNSYM:
            continue
        offset, size, link, entsize = s[4], s[5], s[6], s[9]
        if entsize != _SYMBOL.size or offset + size > len(data) or link >= len(sections):
            raise _fail(".dynsym lies outside the file")
        strtab = sections[link]
        str_start, str_end = strtab[4], strtab[4] + strtab[5]
        if str_end > len(data):
            raise _fail("its string table lies outside the file")
        for at in range(offset, offset + size - entsize + 1, entsize):
            name, info, _, shndx, _, _ = _SYMBOL.unpack_from(data, at)
            if shndx == SHN_UNDEF or info & 0xF not in DEFINABLE or info >> 4 == 0:
                continue  # undefined (another library's), of another type, or local
            start = str_start + name
            end = data.find(b"\0", start, str_end)
            if start >= str_end or end < 0:
                raise _fail("a symbol name lies outside its string table")
            names.add(data[start:end].decode("ascii", "replace"))
    return frozenset(names)
