"""Format versions and the format document: relvm reads every version it released (a file of
each is in tests/data), and docs/format.md, the writer and the reader share one table."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

import relvm
from relvm.runtime.file.meta import META_KEYS
from relvm.runtime.vm.kernels import UntrustedCodeWarning
from relvm.runtime.file.format import (ENTRY, FORMAT_VERSION, HEADER, HEADER_FIELDS, MAGIC,
                                      READERS, RELEASES, SECTIONS, WEIGHTS_SECTIONS,
                                      format_markdown, sections_of)

from formatcases import small_exe

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"


@pytest.mark.e2e
@pytest.mark.parametrize("version", sorted(READERS))
def test_a_released_format_file_loads_and_runs_with_its_known_result(version) -> None:
    raw = (DATA / f"format_v{version}.rvm").read_bytes()
    assert raw[:8] == MAGIC and struct.unpack_from("<I", raw, 8)[0] == version
    exe = relvm.load(DATA / f"format_v{version}.rvm")
    if exe.kernel_library:  # (version 1's build carried none)
        with pytest.warns(UntrustedCodeWarning, match="signed by key .* which you do not trust"):
            vm = relvm.VirtualMachine(exe)  # another user's build: its kernels made here
        assert vm.stats.native_code.startswith("generated here from the file's kernel")
    else:
        vm = relvm.VirtualMachine(exe)
    x = np.array([[1, 0, -1], [2, 1, 0], [0.5, 0.5, 1]], np.float32)
    relu, sums = vm.invoke("main", x)
    # relu(x @ [[1, 2, 3], [-1, 0.5, 2]].T + [0.5, -1]), and each row's sum: exact in float32.
    np.testing.assert_array_equal(relu, np.array([[0, 0], [4.5, 0], [5, 0.75]], np.float32))
    np.testing.assert_array_equal(sums, np.array([0, 3, 2], np.float32))
    assert relu.dtype == np.float32 and vm.invoke("main", x[:0])[0].shape == (0, 2)


def test_a_file_of_every_released_version_is_kept() -> None:
    assert sorted(READERS) == sorted(RELEASES) == list(range(1, FORMAT_VERSION + 1))
    for version in READERS:
        path = DATA / f"format_v{version}.rvm"
        assert path.exists(), f"keep a small file of format version {version} in tests/data"
        assert struct.unpack_from("<I", path.read_bytes(), 8)[0] == version
        relvm.load(path)


def test_writer_follows_the_section_table() -> None:
    data = small_exe().save_bytes()
    magic, version, min_relvm, count, _, _ = HEADER.unpack_from(data, 0)
    assert magic == MAGIC and version == FORMAT_VERSION and count == len(SECTIONS)
    assert min_relvm.rstrip(b"\0").decode() == RELEASES[FORMAT_VERSION]
    names = [ENTRY.unpack_from(data, HEADER.size + i * ENTRY.size)[0].rstrip(b"\0").decode()
             for i in range(count)]
    assert names == [s.name for s in SECTIONS]
    assert set(json.loads(sections_of(data)["meta"])) == set(META_KEYS)


def test_format_doc_describes_every_section_and_the_version() -> None:
    doc = format_markdown()
    assert f"Format version **{FORMAT_VERSION}**" in doc
    for s in SECTIONS + WEIGHTS_SECTIONS:
        assert f"| `{s.name}` | {s.checked} |" in doc
    for name, _, _ in HEADER_FIELDS:
        assert f"`{name}`" in doc
    for key in META_KEYS:
        assert f"| `{key}` |" in doc


def test_docs_format_md_is_current() -> None:
    path = ROOT / "docs" / "format.md"
    if not path.exists():
        pytest.skip("docs/ is not beside the tests (installed elsewhere)")
    assert path.read_text() == format_markdown(), "run `python -m relvm.docs` to regenerate"
