"""Shared set-up of the kernel tests: they run only when relvm._kernels is built, and compare
each C kernel with the op's NumPy reference (through the reference backend, in DPS form)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from typing import Any, Sequence

import numpy as np
import pytest

import relvm
from relvm.backends import native
from relvm.ops import OPS
from relvm.runtime.executable import KernelEntry

HAVE_KERNELS = native.available()

# The sweeps' shared helpers (sweeps.py) import from this folder.
sys.path.insert(0, os.path.dirname(__file__))


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="relvm._kernels is not built (pip install . builds it)")
    for item in items:
        if not HAVE_KERNELS and "tests/kernels/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)


def _jsonable(v: Any) -> Any:
    return [_jsonable(x) for x in v] if isinstance(v, tuple) else v


def make_entry(op: str, attrs: dict, inputs: Sequence[str], outputs: Sequence[str],
               groups: Sequence[int] = ()) -> KernelEntry:
    """An entry as an executable stores it: attrs normalized by the op, lists not tuples."""
    full = {k: _jsonable(v) for k, v in OPS[op].make_attrs(attrs).items()}
    return KernelEntry(op, op, full, tuple(inputs), tuple(outputs), tuple(groups))


def reference(op: str, attrs: dict, arrays: Sequence[np.ndarray], groups=()) -> list[np.ndarray]:
    o = OPS[op]
    args = [tuple(arrays)] if groups else list(arrays)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the reference's empty means
        result = o.reference(o.make_attrs(attrs), *args)
    leaves = list(result) if isinstance(result, tuple) else [result]
    return [np.asarray(r) for r in leaves]


def run_c(op: str, attrs: dict, arrays: Sequence[np.ndarray], out_like: Sequence[np.ndarray],
          groups=()) -> list[np.ndarray]:
    from relvm.backends import c

    entry = make_entry(op, attrs, [a.dtype.name for a in arrays],
                       [r.dtype.name for r in out_like], groups)
    kernel = c.make_kernel(entry)
    # Garbage in the outputs: a kernel must write every element. Each output sits between two
    # guard bands of GUARD bytes, which must come back untouched: no kernel stores a whole
    # vector past its output's first or last element.
    outs, buffers = [], []
    for r in out_like:
        nbytes = r.size * r.dtype.itemsize
        buffer = np.full(nbytes + 2 * GUARD, GUARD_BYTE, np.uint8)
        out = buffer[GUARD:GUARD + nbytes].view(r.dtype).reshape(r.shape)
        out[...] = np.nan if r.dtype.kind == "f" else 3
        outs.append(out)
        buffers.append(buffer)
    kernel(*arrays, *outs)
    for i, buffer in enumerate(buffers):
        bands = np.concatenate([buffer[:GUARD], buffer[len(buffer) - GUARD:]])
        assert (bands == GUARD_BYTE).all(), f"{op}: output {i} written outside its elements"
    return outs


GUARD, GUARD_BYTE = 256, 0xA5


def assert_same(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, what: str) -> None:
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} vs {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def check_op(op: str, attrs: dict, arrays: Sequence[np.ndarray], groups=(), rtol: float = 1e-5,
             atol: float = 1e-6, scaled: bool = False) -> list[np.ndarray]:
    """Run ``op`` on the C backend and compare every output with the reference.

    With ``scaled`` (sums of many products: GEMM, conv, reductions), ``atol`` is relative to
    the largest output: float32 accumulation errors grow with the terms, not with each result.
    """
    arrays = [np.require(a, requirements="C") for a in arrays]  # (0-d stays 0-d)
    want = reference(op, attrs, arrays, groups)
    got = run_c(op, attrs, arrays, want, groups)
    for i, (g, w) in enumerate(zip(got, want)):
        tol = atol
        if scaled and w.dtype.kind == "f" and w.size:
            finite = np.abs(w[np.isfinite(w)])
            tol = atol * max(1.0, float(finite.max()) if finite.size else 1.0)
        assert_same(g, w, rtol, tol, f"{op} {attrs} output {i} for {[a.shape for a in arrays]}")
    return got


@pytest.fixture
def check():
    return check_op


@pytest.fixture
def c_kernel():
    """``c_kernel(op, attrs, input_dtypes, output_dtypes)``: the C backend's kernel."""
    from relvm.backends import c

    return lambda op, attrs, inputs, outputs, groups=(): c.make_kernel(
        make_entry(op, attrs, inputs, outputs, groups))


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def random_array(rng, shape, dtype: str, low: float = -3, high: float = 3) -> np.ndarray:
    """Values of ``dtype`` spread over [low, high) (integers: the dtype's range where smaller)."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.uniform(low, high, shape).astype(dt)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    info = np.iinfo(dt)
    return rng.integers(max(info.min, int(low)), min(info.max, int(high)) + 1, shape).astype(dt)


@pytest.fixture
def rand(rng):
    return lambda shape, dtype="float32", low=-3, high=3: random_array(rng, shape, dtype, low, high)


def _rerun_under_isa(isa: str, test_file: str, selection: str) -> None:
    """Run the tests of ``test_file`` that ``-k selection`` picks in a subprocess whose GEMM
    kernels are those of ``isa`` (RELVM_PGEMM_ISA, chosen once per process); skip when this
    CPU lacks AVX2 for ``isa == "avx2"``."""
    ffi, lib = native.load()
    if isa == "avx2" and ffi.string(lib.relvm_pgemm_isa()).decode() == "sse2":
        pytest.skip("this CPU has no AVX2")
    script = (
        "import sys; sys.argv = ['pytest']\n"
        "import pytest\n"
        f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', {test_file!r}, "
        f"'-k', {selection!r}]))\n")
    env = dict(os.environ, RELVM_PGEMM_ISA=isa)
    check = ("from relvm.backends.native import load; f, l = load(); "
             "print(f.string(l.relvm_pgemm_isa()).decode())")
    here = os.path.dirname(test_file)  # not the checkout's root: import the installed relvm
    used = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True,
                          text=True, check=True, cwd=here).stdout.strip()
    assert used == isa
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, cwd=here)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.fixture
def rerun_under_isa():
    """:func:`_rerun_under_isa`: a test file's tests again, on a lesser instruction set."""
    return _rerun_under_isa


@pytest.fixture
def two_threads():
    """relvm's pool at two threads for the test, the count before restored after it."""
    before = relvm.get_num_threads()
    relvm.set_num_threads(2)
    yield
    relvm.set_num_threads(before)
