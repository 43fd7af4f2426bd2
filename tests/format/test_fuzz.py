"""Fuzzing the loader: mutated files are refused with a RelvmFormatError, or load and then run
correctly, or fail on first use of a damaged constant -- never another exception, never a crash.

The deterministic loop makes 10,000 mutations of a small file (flips, overwrites, truncations,
insertions, deletions, field values), aimed at every region; hypothesis adds random flips.
"""

from __future__ import annotations

import json
import struct
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import relvm
from relvm import RelvmError, RelvmFormatError
from relvm.runtime.file.format import ENTRY, HEADER, SECTIONS, sections_of

from formatcases import X, Y, assert_identical, small_exe, with_section

BASE = small_exe().save_bytes()
EXPECTED = relvm.VirtualMachine(small_exe()).invoke("main", X, Y)
TABLE_END = HEADER.size + len(SECTIONS) * ENTRY.size
REGIONS = [(0, TABLE_END)] + [
    (o, o + s) for o, s in (ENTRY.unpack_from(BASE, HEADER.size + i * ENTRY.size)[1:3]
                            for i in range(len(SECTIONS))) if s]
MUTATIONS = 10_000


def outcome(data: bytes) -> str:
    """'refused', 'constant' (refused on first use) or 'ok'; anything else fails the test."""
    try:
        exe = relvm.load_bytes(data)
    except RelvmFormatError:
        return "refused"
    try:
        got = relvm.VirtualMachine(exe).invoke("main", X, Y)
    except RelvmFormatError as e:
        assert e.section == "consts", e
        return "constant"
    assert_identical(got, EXPECTED)
    return "ok"


def mutate(rng: np.random.Generator, data: bytes) -> bytes:
    out = bytearray(data)
    lo, hi = REGIONS[rng.integers(len(REGIONS))]
    at = int(rng.integers(lo, hi))
    kind = rng.integers(7)
    if kind == 0:  # flip bits of one byte
        out[at] ^= int(rng.integers(1, 256))
    elif kind == 1:  # flip several bytes nearby
        for i in rng.integers(at, min(at + 16, len(out)), rng.integers(2, 6)):
            out[i] ^= int(rng.integers(1, 256))
    elif kind == 2:  # an interesting integer over a 4- or 8-byte field
        width = 4 if rng.integers(2) else 8
        value = int(rng.choice([0, 1, 63, 64, 2**31 - 1, 2**32 - 1, len(data), 2**63 - 1]))
        out[at:at + width] = value.to_bytes(8, "little")[:width]
    elif kind == 3:  # truncate
        del out[at:]
    elif kind == 4:  # insert bytes
        out[at:at] = rng.integers(0, 256, int(rng.integers(1, 9))).astype(np.uint8).tobytes()
    elif kind == 5:  # delete bytes
        del out[at:at + int(rng.integers(1, 9))]
    else:  # copy a chunk from elsewhere
        src = int(rng.integers(0, len(data) - 8))
        out[at:at + 8] = data[src:src + 8]
    return bytes(out)


@pytest.mark.slow
def test_ten_thousand_mutated_files() -> None:
    rng = np.random.default_rng(20240605)
    counts: Counter = Counter()
    for _ in range(MUTATIONS):
        data = mutate(rng, BASE)
        if data != BASE:
            counts[outcome(data)] += 1
    print(dict(counts))
    assert sum(counts.values()) >= MUTATIONS * 0.95
    # Every kind of outcome happens: most are refused at load, damaged constants on first use,
    # and harmless mutations (padding between constants) still run correctly.
    assert counts["refused"] > MUTATIONS / 2 and counts["constant"] > 100 and counts["ok"] > 10


@given(st.lists(st.tuples(st.integers(0, len(BASE) - 1), st.integers(1, 255)), min_size=1,
                max_size=8))
def test_random_byte_flips(flips) -> None:
    data = bytearray(BASE)
    for at, bits in flips:
        data[at] ^= bits
    outcome(bytes(data))


@given(st.integers(0, len(BASE) - 1), st.binary(min_size=1, max_size=16))
def test_random_overwrites(at, chunk) -> None:
    data = bytearray(BASE)
    data[at:at + len(chunk)] = chunk
    outcome(bytes(data)[:len(BASE)])


# --- well-formed files with random metadata: the verifier, not the checksums, must catch them ----

META = json.loads(sections_of(BASE)["meta"])


def _leaves(v, path=()):
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _leaves(x, path + (k,))
    elif isinstance(v, list) and v:
        for i, x in enumerate(v):
            yield from _leaves(x, path + (i,))
    else:
        yield path


LEAVES = list(_leaves(META))
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**64, 2**64) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3),
    max_leaves=6)


def run_any(data: bytes) -> None:
    """Load and run: any outcome but an exception outside relvm's error family."""
    try:
        vm = relvm.VirtualMachine(relvm.load_bytes(data))
        vm.invoke("main", X, Y)
    except RelvmError:
        pass


@given(st.sampled_from(LEAVES), JSON_VALUES)
def test_random_metadata_values(path, value) -> None:
    meta = json.loads(json.dumps(META))
    target = meta
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    run_any(with_section(BASE, "meta", json.dumps(meta).encode()))


def test_every_metadata_leaf_with_hostile_values() -> None:
    for path in LEAVES:
        for value in (None, -1, 2**31, 2**63, "n", [], {}, True, 1.5, [[["slot", 99]]]):
            meta = json.loads(json.dumps(META))
            target = meta
            for k in path[:-1]:
                target = target[k]
            target[path[-1]] = value
            run_any(with_section(BASE, "meta", json.dumps(meta).encode()))


def test_random_code_words() -> None:
    """Well-formed files whose bytecode words are random: refused, or run within the family."""
    rng = np.random.default_rng(7)
    code = np.frombuffer(sections_of(BASE)["code"], "<i8").copy()
    for _ in range(1000):
        words = code.copy()
        i = rng.integers(len(words))
        words[i] = rng.choice([rng.integers(-3, 30), words[i] + 1, words[i] - 1, 2**62])
        run_any(with_section(BASE, "code", words.astype("<i8").tobytes()))
    assert struct.calcsize("<q") == 8
