"""Bad files are RelvmFormatErrors naming the section: truncated, wrong magic, newer version,
sections out of range, checksum mismatches, and well-formed files the verifier rejects."""

from __future__ import annotations

import json
import struct
import zlib

import pytest

import relvm
from relvm import RelvmFormatError
from relvm.runtime import bytecode as B
from relvm.runtime.file.format import ENTRY, HEADER, SECTIONS, sections_of

from formatcases import small_exe, with_meta, with_section

DATA = small_exe().save_bytes()
TABLE_END = HEADER.size + len(SECTIONS) * ENTRY.size


def table(data: bytes) -> list[tuple[str, int, int]]:
    """(name, offset, size) of each section, in table order."""
    out = []
    for i in range(len(SECTIONS)):
        name, offset, size, _, _ = ENTRY.unpack_from(data, HEADER.size + i * ENTRY.size)
        out.append((name.rstrip(b"\0").decode(), offset, size))
    return out


def with_entry(data: bytes, name: str, offset: int | None = None, size: int | None = None
               ) -> bytes:
    """``data`` with a section table entry changed and the header checksum redone."""
    out = bytearray(data)
    i = [s.name for s in SECTIONS].index(name)
    at = HEADER.size + i * ENTRY.size
    raw, o, s, crc, r = ENTRY.unpack_from(out, at)
    out[at:at + ENTRY.size] = ENTRY.pack(raw, o if offset is None else offset,
                                         s if size is None else size, crc, r)
    crc = zlib.crc32(out[HEADER.size:TABLE_END], zlib.crc32(out[:HEADER.size - 4]))
    out[HEADER.size - 4:HEADER.size] = struct.pack("<I", crc)
    return bytes(out)


def load_error(data: bytes) -> RelvmFormatError:
    with pytest.raises(RelvmFormatError) as info:
        relvm.load_bytes(data)
    return info.value


# --- truncation -------------------------------------------------------------------------------

def test_truncation_at_every_byte_of_the_header() -> None:
    for n in range(TABLE_END):
        err = load_error(DATA[:n])
        assert err.section == "header", (n, err)
        assert "truncated" in str(err) or "magic" in str(err), (n, err)


def test_truncation_at_every_section_boundary_names_the_section() -> None:
    sections = table(DATA)
    cuts = sorted({c for _, offset, size in sections
                   for c in (offset, offset + 1, offset + size - 1, offset + size)
                   if TABLE_END <= c < len(DATA)})
    assert len(cuts) >= 8
    for n in cuts:
        first_cut = next(name for name, offset, size in sections if offset + size > n)
        err = load_error(DATA[:n])
        assert err.section == first_cut, (n, err)
        assert "outside the file" in str(err)


def test_truncation_anywhere_is_a_format_error() -> None:
    for n in range(len(DATA)):
        load_error(DATA[:n])


def test_bytes_after_the_last_section() -> None:
    err = load_error(DATA + b"\0")
    assert err.section == "header" and "1 bytes after the last section" in str(err)


# --- header -----------------------------------------------------------------------------------

def test_wrong_magic() -> None:
    err = load_error(b"\x7fELF" + DATA[4:])
    assert err.section == "header" and "not a relvm file" in str(err)
    assert "not a relvm file" in str(load_error(b"PK\x03\x04 a zip file"))


def test_a_weights_file_is_not_an_executable(tmp_path) -> None:
    small_exe().save(tmp_path / "m.rvm", weights=tmp_path / "m.weights", min_weight_bytes=64)
    err = load_error((tmp_path / "m.weights").read_bytes())
    assert err.section == "header" and "relvm weights file" in str(err)


def test_newer_format_version_says_which_relvm_is_needed() -> None:
    from relvm.runtime.file.format import FORMAT_VERSION

    newer = DATA[:8] + struct.pack("<I", FORMAT_VERSION + 1) + b"7.3.0".ljust(16, b"\0") + \
        DATA[28:]
    err = load_error(newer)
    assert err.section == "header"
    assert f"format version {FORMAT_VERSION + 1} is newer than this relvm" in str(err)
    assert "needs relvm 7.3.0 or later" in str(err)


def test_unknown_format_version_zero() -> None:
    err = load_error(DATA[:8] + struct.pack("<I", 0) + DATA[12:])
    assert err.section == "header" and "unknown format version 0" in str(err)


def test_header_checksum() -> None:
    data = bytearray(DATA)
    data[HEADER.size + 9] ^= 1  # the offset of `meta`, in the section table
    err = load_error(bytes(data))
    assert err.section == "header" and "checksum mismatch" in str(err)


# --- sections out of range, overlapping, corrupted --------------------------------------------

@pytest.mark.parametrize("name", [s.name for s in SECTIONS])
def test_section_out_of_range(name: str) -> None:
    err = load_error(with_entry(DATA, name, offset=len(DATA) + 64))
    assert err.section == name and "outside the file" in str(err)
    err = load_error(with_entry(DATA, name, size=2**63))
    assert err.section == name and "outside the file" in str(err)
    err = load_error(with_entry(DATA, name, offset=8))  # inside the header
    assert err.section == name


def test_overlapping_sections() -> None:
    sections = table(DATA)
    meta_offset = sections[0][1]
    err = load_error(with_entry(DATA, "code", offset=meta_offset))
    assert err.section in ("meta", "code") and "overlaps section" in str(err)


@pytest.mark.parametrize("name", ["meta", "code", "kernels"])
def test_section_checksum_mismatch_names_the_section(name: str) -> None:
    exe = small_exe()
    exe.kernel_library = b"\x7fELF" + b"\0" * 60
    data = bytearray(exe.save_bytes())
    _, offset, size = next(s for s in table(bytes(data)) if s[0] == name)
    data[offset + size // 2] ^= 0x04
    err = load_error(bytes(data))
    assert err.section == name and "checksum mismatch" in str(err)


# --- the verifier: well-formed files with wrong contents --------------------------------------

def _set(path: str, value):
    """An edit setting meta[path] (dotted, with list indices) to value."""
    def edit(meta):
        keys = [int(k) if k.isdigit() else k for k in path.split(".")]
        target = meta
        for k in keys[:-1]:
            target = target[k]
        if value is DELETE:
            del target[keys[-1]]
        else:
            target[keys[-1]] = value
    return edit


DELETE = object()
DEEP: list = ["const", 1]
for _ in range(300):
    DEEP = ["add", DEEP, ["const", 1]]

META_CASES = [
    ("functions.1.num_regs", "8", "meta", r"functions\[1\].num_regs: expected an integer"),
    ("functions.1.num_regs", 2**40, "meta", "outside 0..1048576"),
    ("functions.1.prologue", True, "meta", "expected an integer, got a boolean"),
    ("functions.1.params.0.tensors.0.dtype", "float128", "meta", "unknown dtype 'float128'"),
    ("functions.1.params.0.tensors.0.shape", [-3, 4], "meta", "-3 is outside"),
    ("functions.1.outputs.0.alloc_pcs", [500], "meta", "alloc pc 500 outside the function"),
    ("functions.1.outputs.0.shape", [-40, 8], "meta", "dims slot 39, but @main has 3"),
    ("functions.0.name", "main", "meta", "two functions have the same name"),
    ("functions.1.code.word_offset", 1, "code", "do not follow on at word"),
    ("functions.1.code.word_count", 3, "code", "bad length|ends in the middle"),
    ("functions.1.code.instructions", 50, "code", "ends in the middle"),
    ("backend", DELETE, "meta", "missing 'backend'"),
    ("backend", "cuda", "kernels", "unknown kernel backend 'cuda'"),
    ("upper_bounds", {"n": -1}, "meta", r"upper_bounds\['n'\]: -1 is outside"),
    ("kernels.0.groups", [3], "meta", "does not cover"),
    ("kernels.0.inputs", ["float32", 7], "meta", "unknown dtype 7"),
    ("kernels.0.attrs", [1], "meta", "expected an object"),
    ("dim_programs.0.0.0", "eval", "meta", "dims#0 statement 0: unknown tag 'eval'"),
    ("dim_programs.0.0.2", ["__import__", "os"], "meta", "unknown tag '__import__'"),
    ("dim_programs.0.0.2", ["shape", -1, 0], "meta", "must be a non-negative integer"),
    ("dim_programs.0.0.2", ["add", ["const", 1]], "meta", "takes 2 operands, got 1"),
    ("dim_programs.0.0.2", DEEP, "meta", "nested deeper than"),
    ("dim_programs.1.1.3", "{a.__class__}", "meta", r"may only use \{a\}, \{b\}"),
    ("dim_programs.1.1.3", "{a", "meta", "bad message"),
    ("dim_programs.1.0.1", 5, "code", "writes dims slot 5, but @main has 3"),
    ("constants.1.offset", 1, "consts", "misaligned or outside"),
    ("constants.1.offset", 2**20, "consts", "misaligned or outside"),
    ("constants.1.nbytes", 12, "meta", "cannot hold float32"),
    ("constants.1.dtype", "object", "meta", "unknown dtype 'object'"),
    ("constants.1.file", "elsewhere", "meta", "expected 'main' or 'weights'"),
    ("constants.1.file", "weights", "meta", "missing 'index'"),
    ("weights", {"path": "w", "content_id": "xyz"}, "meta", "expected 32 hex digits"),
    ("kernel_library", {"arch": "x86_64-linux"}, "kernels", "section is empty"),
    ("writer", 3, "meta", "writer: expected a string"),
]


@pytest.mark.parametrize("path,value,section,message", META_CASES,
                         ids=[f"{p}={str(v)[:20]}" for p, v, _, _ in META_CASES])
def test_verifier_rejects_bad_metadata(path, value, section, message) -> None:
    err = load_error(with_meta(DATA, _set(path, value)))
    assert err.section == section, err
    assert pytest.importorskip("re").search(message, str(err)), err


def test_meta_that_is_not_an_object_utf8_or_json() -> None:
    for content, message in [(b"[1, 2]", "expected a JSON object"), (b"\xff\xfe", "not UTF-8"),
                             (b"{'a': 1}", "not valid JSON"), (b"[" * 100000, "nested too")]:
        err = load_error(with_section(DATA, "meta", content))
        assert err.section == "meta" and message in str(err), err


def _with_instruction(fi: int, pc: int, *fields) -> bytes:
    exe = small_exe()
    exe.functions[fi].instructions[pc] = fields
    return exe.save_bytes()


CODE_CASES = [
    ((1, 5, 11, 99, 1), r"@main pc 5: load_const \$99 const\[1\]: dst: register 99 outside 0..7"),
    ((1, 5, 11, 3, 9), "const: const index 9, but the executable has 3"),
    ((1, 9, 2, 6, 7, (5,)), "func: func index 7, but the executable has 2"),
    ((1, 9, 2, 6, 0, (5, -1)), "args: register -1 outside"),
    ((1, 4, 4, 9, (0, 1), (2,)), "kernel: kernel index 9"),
    ((1, 4, 4, 0, (0, 1), (99,)), "outputs: register 99 outside"),
    ((1, 7, 5, 5, -1, 0, (-10, 8), "float32"), "shape: dims slot 9, but @main has 3"),
    ((1, 7, 5, 5, -2, 0, (-1, 8), "float32"), "storage: register -2 outside"),
    ((1, 10, 12, 5), "offset: jump to 15, outside the function"),
    ((1, 10, 12, -11), "offset: jump to -1, outside the function"),
    ((1, 0, 21, 1, (0,)), "dims#1 reads argument 1, but gets 1"),
    ((1, 0, 21, 17, (0, 1)), "prog: prog index 17"),
    ((1, 2, 16, 7, -1, 0, 1), "alignment: 0 is not a power of two in 1..4096"),
    ((1, 2, 16, 7, -1, 65, 1), "alignment: 65 is not a power of two in 1..4096"),
    ((1, 2, 16, 7, -1, 64, 2), "reuse: 2 outside 0..1"),
]


@pytest.mark.parametrize("instruction,message", CODE_CASES, ids=[m[:30] for _, m in CODE_CASES])
def test_verifier_rejects_bad_operands(instruction, message) -> None:
    fi, pc, *fields = instruction
    err = load_error(_with_instruction(fi, pc, *fields))
    assert err.section == "code", err
    assert pytest.importorskip("re").search(message, str(err)), err


def test_bad_code_words() -> None:
    sections = sections_of(DATA)
    for code, message in [(sections["code"][:-3], "not a whole number of int64 words"),
                          (sections["code"] + B"\0" * 8, "1 words belong to no function"),
                          (struct.pack("<q", 99) + sections["code"][8:], "unknown opcode 99")]:
        err = load_error(with_section(DATA, "code", code))
        assert err.section == "code" and message in str(err), err


def test_function_without_instructions() -> None:
    def empty_scale(meta):
        meta["functions"][0]["code"].update(word_count=0, instructions=0)
        meta["functions"][1]["code"]["word_offset"] = 0
    sections = sections_of(DATA)
    meta = json.loads(sections["meta"])
    words = meta["functions"][0]["code"]["word_count"]
    data = with_section(DATA, "code", sections["code"][8 * words:])
    err = load_error(with_meta(data, empty_scale))
    assert err.section == "code" and "@scale has no instructions" in str(err)


def test_unknown_dtype_code_names_the_code_section() -> None:
    """A dtype code past the last this relvm knows (uint64's, 11: a newer relvm's, say) is
    refused, naming the section, never read as another dtype."""
    sections = sections_of(DATA)
    words = list(struct.unpack(f"<{len(sections['code']) // 8}q", sections["code"]))
    alloc = B.encode([small_exe().functions[1].instructions[7]])  # alloc_tensor ... float32
    at = next(i for i in range(len(words)) if words[i:i + len(alloc)] == alloc)
    dtype_word = at + len(alloc) - 1
    assert words[dtype_word] == B.DTYPE_CODES["float32"] and len(B.DTYPE_NAMES) == 12
    for code in (12, 99, -1):
        words[dtype_word] = code
        err = load_error(with_section(DATA, "code", struct.pack(f"<{len(words)}q", *words)))
        assert err.section == "code" and f"unknown dtype code {code}" in str(err), err
