"""The C backend as a whole: which ops it covers, its errors, fused entries, the VM end to end,
and the one thread pool shared with OpenBLAS."""

import json
import multiprocessing
import sys
import threading

import numpy as np
import pytest

from relvm.backends import c, native, numpy_ref
from relvm.dtypes import DTYPES, INT_DTYPES
from relvm.backends.ckernels.elementwise import BINARY, UNARY
from relvm.backends.ckernels.reduce import REDUCE
from relvm.errors import RelvmKernelError
from relvm.ops import OPS
from relvm.ops.lists import LIST_OPS
from relvm.runtime import threads
from relvm.runtime.executable import KernelEntry
from isolation import run_python

# Ops whose inputs are never float32: their dtype is bool, or an integer one.
BOOL_ONLY = {"logical_not", "logical_and", "logical_or"}
INTEGER_ONLY = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "left_shift",
                "right_shift"}
# Ops of quantized operands: int8 and uint8.
QUANTIZED_ONLY = {"nn.matmul_integer", "nn.conv2d_integer"}
# Ops of integer tokens: int64 and int32.
TOKENS_ONLY = {"tfidf_vectorizer"}
# float32 ops without a C kernel yet, and why.
MISSING = {
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_registry_op_has_a_float32_kernel(op):
    if op in BOOL_ONLY:
        assert (op, "bool") in c.SUPPORTED
        return
    if op in INTEGER_ONLY:
        assert all((op, dtype) in c.SUPPORTED for dtype in INT_DTYPES)
        return
    if op in QUANTIZED_ONLY:
        assert all((op, dtype) in c.SUPPORTED for dtype in ("int8", "uint8"))
        return
    if op in TOKENS_ONLY:
        assert all((op, dtype) in c.SUPPORTED for dtype in ("int64", "int32"))
        return
    if op in LIST_OPS:  # instructions of the VM (AllocList, ListGet...), not kernels
        assert not any(o == op for o, _ in c.SUPPORTED)
        return
    if op in MISSING:
        assert (op, "float32") not in c.SUPPORTED, f"{op} has a kernel now: drop it from MISSING"
        pytest.xfail(MISSING[op])
    assert (op, "float32") in c.SUPPORTED


def test_declared_dtypes_match_the_c_tables():
    ffi, lib = native.load()
    codes = {name: i for i, name in enumerate(DTYPES)}  # the codes kernels/relvm_config.h gives
    assert lib.RELVM_NUM_DTYPES == len(codes)
    assert [getattr(lib, f"RELVM_{name.upper()}") for name in codes] == list(codes.values())
    for table, query in ((UNARY, lib.relvm_unary_supported), (BINARY, lib.relvm_binary_supported)):
        for op, (const, dtypes) in table.items():
            in_c = {d for d, code in codes.items() if query(getattr(lib, const), code)}
            assert in_c == set(dtypes), op
    for op, const in REDUCE.items():
        in_c = {d for d, code in codes.items()
                if lib.relvm_reduce_supported(getattr(lib, const), code)}
        assert in_c == {d for (o, d) in c.SUPPORTED if o == op}, op


def _entry(op, inputs, outputs, attrs=None, groups=()):
    full = {k: list(v) if isinstance(v, tuple) else v
            for k, v in OPS[op].make_attrs(attrs or {}).items()}
    return KernelEntry(op, op, full, tuple(inputs), tuple(outputs), tuple(groups))


def test_unsupported_pairs_raise_naming_the_op_and_dtype():
    entry = _entry("nn.conv2d", ["float64", "float64"], ["float64"])
    assert not c.supports(entry)
    with pytest.raises(RelvmKernelError, match="the c backend has no kernel for op 'nn.conv2d' "
                       "on float64, float64 -> float64"):
        c.make_kernel(entry)
    unknown = KernelEntry("x", "no.such_op", {}, ("float32",), ("float32",))
    assert not c.supports(unknown)
    with pytest.raises(RelvmKernelError, match="no kernel for op 'no.such_op'"):
        c.make_kernel(unknown)


def test_a_kernel_without_the_new_integer_dtypes_says_so():
    """image.resize2d has no uint16 (nor int16, uint32, uint64) loop: the build refuses it by
    name rather than running another dtype's."""
    entry = _entry("image.resize2d", ["uint16"], ["uint16"], {"size": [4, 4]})
    assert not c.supports(entry)
    with pytest.raises(RelvmKernelError, match="no kernel for op 'image.resize2d' on uint16"):
        c.make_kernel(entry)


def test_out_dtype_rules_are_part_of_support():
    assert c.supports(_entry("nn.dense", ["int8", "int8"], ["int32"], {"out_dtype": "int32"}))
    assert not c.supports(_entry("nn.dense", ["float32", "float32"], ["float64"],
                                 {"out_dtype": "float64"}))
    assert not c.supports(_entry("take", ["float32", "float32"], ["float32"]))


def test_non_contiguous_arrays_are_refused():
    kernel = c.make_kernel(_entry("nn.relu", ["float32"], ["float32"]))
    x = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="contiguous"):
        kernel(x.T, np.empty((4, 4), np.float32))


def _fused_entry():
    steps = [{"op": "nn.dense", "attrs": {"units": None, "out_dtype": ""},
              "args": [["in", 0], ["in", 1]]},
             {"op": "nn.bias_add", "attrs": {"axis": 1}, "args": [["step", 0], ["in", 2]]},
             {"op": "nn.relu", "attrs": {}, "args": [["step", 1]]},
             {"op": "greater", "attrs": {}, "args": [["step", 2], ["in", 3]]},
             {"op": "cast", "attrs": {"dtype": "float32"}, "args": [["step", 3]]}]
    return KernelEntry("fused_dense_bias_add_relu_greater_cast", "fused",
                       {"steps": json.loads(json.dumps(steps))},
                       ("float32", "float32", "float32", "float32"), ("float32",), ())


def test_fused_entries_run_as_a_chain_of_c_kernels():
    entry = _fused_entry()
    assert c.supports(entry)
    rng = np.random.default_rng(0)
    for n in (1, 5, 0):
        args = [rng.standard_normal(s).astype(np.float32)
                for s in [(n, 7), (3, 7), (3,), ()]]
        got, want = np.empty((n, 3), np.float32), np.empty((n, 3), np.float32)
        c.make_kernel(entry)(*args, got)
        numpy_ref.make_kernel(entry)(*args, want)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_fused_entry_with_an_unsupported_step_is_refused():
    entry = _fused_entry()
    bad = dict(entry.attrs)
    # logical_not takes bool only: there is no float32 kernel for the second step.
    bad["steps"] = bad["steps"][:1] + [{"op": "logical_not", "attrs": {}, "args": [["step", 0]]}]
    entry = KernelEntry(entry.name, "fused", bad, entry.inputs, entry.outputs, ())
    assert not c.supports(entry)
    with pytest.raises(RelvmKernelError, match="no kernel for op 'logical_not' on float32"):
        c.make_kernel(entry)


def test_the_vm_runs_an_executable_built_for_c():
    import relvm
    from importlib.resources import files

    text = files("relvm.examples").joinpath("mlp.relay").read_text()
    exe_c = relvm.build(relvm.parse(text), backend="c")
    exe_n = relvm.build(relvm.parse(text))
    rng = np.random.default_rng(0)
    shapes = [(512, 784), (512,), (512, 512), (512,), (10, 512), (10,)]
    weights = [rng.standard_normal(s).astype(np.float32) * 0.05 for s in shapes]
    vm_c, vm_n = relvm.VirtualMachine(exe_c), relvm.VirtualMachine(exe_n)
    for n in (1, 3, 64):
        x = rng.standard_normal((n, 784)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(vm_c.run(x, *weights)),
                                   np.asarray(vm_n.run(x, *weights)), rtol=1e-4, atol=1e-6)


# --- threads ----------------------------------------------------------------------------------

@pytest.fixture
def restore_threads():
    before = threads.get_num_threads()
    yield
    threads.set_num_threads(before)


def test_set_and_get_num_threads(restore_threads):
    _, lib = native.load()
    for k in (1, 3, 2):
        threads.set_num_threads(k)
        assert threads.get_num_threads() == k == lib.relvm_threads_get()
    for bad in (0, -1, 1000, 2.0, True, "2"):
        with pytest.raises(ValueError):
            threads.set_num_threads(bad)


def test_openblas_runs_on_relvms_pool():
    assert native.blas_info()["uses_relvm_pool"]


@pytest.mark.parametrize("env,want", [({"OMP_NUM_THREADS": "1"}, 1), ({"OMP_NUM_THREADS": "3"}, 3)])
def test_omp_num_threads_is_honoured_at_start(env, want):
    code = ("from relvm.runtime import threads; from relvm.backends import native; "
            "_, lib = native.load(); print(threads.get_num_threads(), lib.relvm_threads_get())")
    proc = run_python(code, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(want), str(want)]


@pytest.mark.parametrize("k", [1, 2, 4])
def test_results_do_not_depend_on_the_thread_count(restore_threads, k):
    rng = np.random.default_rng(k)
    x = rng.standard_normal((2, 24, 40, 40)).astype(np.float32)
    w = rng.standard_normal((24, 1, 3, 3)).astype(np.float32)
    entry = _entry("nn.conv2d", ["float32", "float32"], ["float32"],
                   {"groups": 24, "padding": [1, 1]})
    threads.set_num_threads(1)
    want = np.empty((2, 24, 40, 40), np.float32)
    c.make_kernel(entry)(x, w, want)
    threads.set_num_threads(k)
    got = np.empty_like(want)
    c.make_kernel(entry)(x, w, got)
    np.testing.assert_array_equal(got, want)  # planes split among threads: same arithmetic


def test_concurrent_calls_from_python_threads(restore_threads):
    """cffi releases the GIL: BLAS and pool regions from two threads must not mix."""
    threads.set_num_threads(2)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 200)).astype(np.float32)
    w = rng.standard_normal((150, 200)).astype(np.float32)
    want = a @ w.T
    dense = c.make_kernel(_entry("nn.dense", ["float32", "float32"], ["float32"]))
    exp = c.make_kernel(_entry("exp", ["float32"], ["float32"]))
    errors = []

    def work():
        try:
            for _ in range(30):
                out = np.empty((300, 150), np.float32)
                dense(a, w, out)
                np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)
                e = np.empty((300, 200), np.float32)
                exp(a, e)
                np.testing.assert_allclose(e, np.exp(a), rtol=1e-5)
        except Exception as err:  # noqa: BLE001  (reported below)
            errors.append(err)

    workers = [threading.Thread(target=work) for _ in range(3)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not errors, errors[0]


def _child_runs_a_parallel_kernel(queue):
    x = np.arange(200_000, dtype=np.float32)
    out = np.empty_like(x)
    c.make_kernel(_entry("negative", ["float32"], ["float32"]))(x, out)
    dense = c.make_kernel(_entry("nn.dense", ["float32", "float32"], ["float32"]))
    y = np.empty((256, 256), np.float32)
    m = np.ones((256, 256), np.float32)
    dense(m, m, y)
    queue.put(bool((out == -x).all()) and bool((y == 256).all()))


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
def test_the_pool_works_in_a_forked_child(restore_threads):
    threads.set_num_threads(2)
    x = np.ones(200_000, np.float32)
    c.make_kernel(_entry("negative", ["float32"], ["float32"]))(x, np.empty_like(x))  # pool up
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_runs_a_parallel_kernel, args=(queue,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert queue.get(timeout=5)
