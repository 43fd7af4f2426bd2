"""Shared by the executable-file tests: a small program with constants, and file surgery."""

from __future__ import annotations

import json

import numpy as np

import relvm
from relvm.runtime.file.format import assemble, sections_of

# Small on purpose (fuzzing loads it 10,000 times), but with every part of a file: two functions,
# constants, kernels, dim programs with checks, a prologue, pooled storage.
SMALL = """def @scale(%h: Tensor[(n, 8), float32]) -> Tensor[(n, 8), float32] {
  multiply(%h, 0.5f)
}
def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(n, 4), float32],
          %w: Tensor[(8, 4), float32], %b: Tensor[(8), float32]) {
  %0 = nn.dense(add(%x, %y), %w);
  %1 = nn.relu(nn.bias_add(%0, %b));
  @scale(%1)
}"""
W = (np.arange(32, dtype=np.float32).reshape(8, 4) - 16) / 8
B = np.linspace(-1, 1, 8, dtype=np.float32)
X = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
Y = np.ones((3, 4), np.float32)


def small_exe() -> relvm.Executable:
    return relvm.build(relvm.parse(SMALL), params={"w": W, "b": B}, backend="numpy")


def small_expected() -> np.ndarray:
    return np.maximum((X + Y) @ W.T + B, 0) * np.float32(0.5)


def with_meta(data: bytes, edit) -> bytes:
    """``data`` with its meta JSON edited by ``edit(meta)`` (in place), checksums redone."""
    sections = sections_of(data)
    meta = json.loads(sections["meta"])
    edit(meta)
    sections["meta"] = json.dumps(meta).encode()
    return assemble(sections)


def with_section(data: bytes, name: str, content: bytes) -> bytes:
    sections = sections_of(data)
    sections[name] = content
    return assemble(sections)


def flat(v):
    if isinstance(v, (tuple, list)):  # a list result: its tensors
        for x in v:
            yield from flat(x)
    else:
        yield v


def assert_identical(got, want) -> None:
    """Same nesting, dtypes, shapes and bits."""
    got, want = list(flat(got)), list(flat(want))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        assert g.tobytes() == w.tobytes()


def signature_inputs(fn, rng: np.random.Generator, dim: int,
                     max_elements: int | None = None) -> list | None:
    """Inputs matching a VM function's signature, every symbolic dim ``dim``, small values (a
    list of two tensors for a list); None for a function value, or when they would pass ``max_elements`` in all."""
    values, size = [], 0
    for p in fn.params:
        if not p.tensors:
            return None  # a function value
        arrays = []
        for t in p.tensors * (2 if p.is_list else 1):  # a list: two elements
            shape = (dim,) if t.shape is None else tuple(d if isinstance(d, int) else dim
                                                         for d in t.shape)
            size += int(np.prod(shape, dtype=np.float64))
            if max_elements is not None and size > max_elements:
                return None
            if t.dtype.startswith("float"):
                arrays.append(rng.standard_normal(shape).astype(t.dtype))
            elif t.dtype == "bool":
                arrays.append(rng.integers(0, 2, shape).astype(bool))
            else:
                arrays.append(rng.integers(0, 4, shape).astype(t.dtype))
        values.append(tuple(arrays) if p.is_tuple else arrays if p.is_list else arrays[0])
    return values
