"""Replays (runtime/vm/replay.py): a straight-line entry called again with inputs of the same shapes
runs only its kernels, fresh allocations, output views and ret -- with every result, check,
error and statistic the full run gives."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import relvm
from relvm import RelvmInputError, RelvmRuntimeError, examples
from relvm.runtime.vm import replay
from relvm.runtime.bytecode import make
from relvm.runtime.bytecode.opcodes import BY_NAME

MLP = "mlp"
CONVNET = "convnet"


def _vm(name: str) -> relvm.VirtualMachine:
    exe = relvm.build(relvm.parse(examples.text(name)), params=examples.params(name))
    return relvm.VirtualMachine(exe)


def _numpy_mlp(x: np.ndarray) -> np.ndarray:
    p = examples.params(MLP)
    h = np.maximum(x @ p["w1"].T + p["b1"], 0)
    h = np.maximum(h @ p["w2"].T + p["b2"], 0)
    z = h @ p["w3"].T + p["b3"]
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.e2e
def test_reference_models_replay_all_but_kernels_allocations_and_ret() -> None:
    for name in (MLP, CONVNET):
        vm = _vm(name)
        fn = vm.exe.function("main")
        live, keep = replay.plan(fn, vm.exe.dim_programs)
        ops = [fn.instructions[pc][0] for pc in live]
        assert ops[-1] == BY_NAME["Ret"].number
        assert set(ops) == {BY_NAME[o].number for o in ("InvokePacked", "AllocTensor", "Ret")}
        # only the result's allocation stays live: pooled views are kept
        assert ops.count(BY_NAME["AllocTensor"].number) == 1
        assert not any(keep[:len(fn.params)])  # inputs come new with every call


@pytest.mark.e2e
def test_replayed_calls_read_new_input_values_and_write_new_output_arrays() -> None:
    vm = _vm(MLP)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 784)).astype(np.float32)
    for call in range(4):
        out = np.full((3, 10), np.nan, np.float32)  # a different output array each call
        got = vm.invoke_with_outputs("main", [x], [out])
        assert got is out
        np.testing.assert_allclose(out, _numpy_mlp(x), rtol=1e-4, atol=1e-6)
        # the first call makes the two pooled buffers; replays allocate nothing
        assert vm.stats.allocations == (2 if call == 0 else 0)
        assert vm.stats.output_copies == 0
        x *= -0.5  # in place: the same array object, new values
    assert len(vm._entry("main").replays) == 1


@pytest.mark.e2e
def test_replay_without_bound_outputs_returns_a_fresh_result_each_call() -> None:
    vm = _vm(MLP)
    x = np.ones((2, 784), np.float32)
    first = vm.invoke("main", x)
    second = vm.invoke("main", x)
    assert first is not second and not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, second)
    assert vm.stats.allocations == 1  # the result, as in the full run


@pytest.mark.e2e
def test_shapes_taking_turns_each_get_a_replay_and_growth_retires_old_ones() -> None:
    vm = _vm(CONVNET)
    rng = np.random.default_rng(1)
    for n in (1, 4, 1, 16, 4, 1, 16):
        x = rng.standard_normal((n, 3, 32, 32)).astype(np.float32)
        out = np.empty((n, 10), np.float32)
        vm.invoke_with_outputs("main", [x], [out])
        # a fresh VM has no replay: its full run is the reference
        want = relvm.VirtualMachine(vm.exe).invoke("main", x)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    ep = vm._entry("main")
    assert set(ep.replays) == {((1, 3, 32, 32),), ((4, 3, 32, 32),), ((16, 3, 32, 32),)}
    # the storage grew for n = 16: the replays of 1 and 4 were made again after it
    assert all(r.epoch == vm.storage_epoch for r in ep.replays.values())


@pytest.mark.e2e
def test_past_the_limit_the_least_recently_used_replay_goes(monkeypatch) -> None:
    """A server cycles through every batch size up to its max batch: one shape more than the
    limit drops only the coldest replay, not all of them."""
    monkeypatch.setattr(replay, "MAX_REPLAYS", 4)
    vm = _vm(MLP)
    rng = np.random.default_rng(2)
    vm.invoke("main", np.zeros((8, 784), np.float32))  # the pool at its largest: one epoch
    for n in (1, 2, 3, 1, 4, 5):  # 1 is used again, so 2 is the coldest when 5 comes
        x = rng.standard_normal((n, 784)).astype(np.float32)
        np.testing.assert_allclose(vm.invoke("main", x), _numpy_mlp(x), rtol=1e-4, atol=1e-6)
    ep = vm._entry("main")
    assert list(ep.replays) == [((3, 784),), ((1, 784),), ((4, 784),), ((5, 784),)]
    kept = ep.replays[((1, 784),)]
    vm.invoke("main", np.ones((1, 784), np.float32))  # replayed: nothing recorded anew
    assert ep.replays[((1, 784),)] is kept
    assert list(ep.replays)[-1] == ((1, 784),)


@pytest.mark.e2e
def test_replayed_call_checks_the_output_array_shape() -> None:
    vm = _vm(MLP)
    x = np.zeros((2, 784), np.float32)
    vm.invoke_with_outputs("main", [x], [np.empty((2, 10), np.float32)])
    vm.invoke_with_outputs("main", [x], [np.empty((2, 10), np.float32)])
    with pytest.raises(RelvmInputError, match=r"output 0: expected shape \(2, 10\)"):
        vm.invoke_with_outputs("main", [x], [np.empty((3, 10), np.float32)])
    with pytest.raises(RelvmInputError, match=r"input %x: expected dtype float32"):
        vm.invoke_with_outputs("main", [x.astype(np.float64)], [np.empty((2, 10), np.float32)])


def test_kernel_error_in_a_replayed_call_names_the_function_and_instruction() -> None:
    text = """def @main(%x: Tensor[(n, 4), float32], %i: Tensor[(2), int64]) {
      %0 = multiply(%x, 2f);
      take(%0, %i, axis=1, mode="fast")
    }"""
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(text)))
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    for _ in range(2):
        np.testing.assert_array_equal(vm.invoke("main", x, np.array([3, 0])), x[:, [3, 0]] * 2)
    assert vm._entry("main").live_steps is not None
    with pytest.raises(RelvmRuntimeError,
                       match=r"@main pc \d+: invoke_packed take.*index 9 is out of range"):
        vm.invoke("main", x, np.array([9, 0]))
    np.testing.assert_array_equal(vm.invoke("main", x, np.array([1, 2])), x[:, [1, 2]] * 2)


def test_functions_with_data_dependent_shapes_are_not_replayed() -> None:
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(
        "def @main(%x: Tensor[(n), int32]) { argwhere(%x) }")))
    ep = vm._entry("main")
    assert not ep.replayable and ep.live_steps is None
    for x in ([0, 3, 0, 5], [1, 1, 0, 0], [0, 0, 0, 0]):  # same shape, different results
        a = np.array(x, np.int32)
        np.testing.assert_array_equal(vm.invoke("main", a), np.argwhere(a))


def test_dims_read_from_values_the_input_shapes_decide_are_replayed() -> None:
    """A length taken from a value computed from shapes alone (a YOLO head's anchor grid,
    ``arange(0, float(shape[3]))``) is the same on every call with the same input shapes: the
    function is replayed, and the grid is computed by the call a replay is made from only."""
    vm = relvm.VirtualMachine(relvm.build(relvm.parse("""
def @main(%x: Tensor[(n, 2, h, w), float32]) {
  %s = shape_of(%x, dtype="int64");
  %f = cast(take(%s, 3), dtype="float32");
  %a = arange(0f, %f, 1f);
  add(%x, add(%a, 0.5f))
}""")))
    ep = vm._entry("main")
    assert ep.replayable and ep.live_steps is not None
    code = vm.exe.function("main").instructions
    live = {vm.exe.kernels[code[pc].kernel].name.split("#")[0] for pc, _ in ep.live_steps
            if code[pc][0] == BY_NAME["InvokePacked"].number}
    assert not any("arange" in name for name in live), live
    rng = np.random.default_rng(2)
    for shape in ((1, 2, 3, 4), (1, 2, 3, 4), (2, 2, 1, 7), (1, 2, 3, 4), (2, 2, 1, 7)):
        x = rng.standard_normal(shape).astype(np.float32)
        want = x + (np.arange(shape[3], dtype=np.float32) + 0.5)
        np.testing.assert_allclose(vm.invoke("main", x), want, rtol=1e-6)
    assert len(ep.replays) == 2


BRANCHY = """def @main(%x: Tensor[(n, 4), float32], %c: bool) {
  %0 = multiply(%x, 2f);
  %1 = if (%c) { add(%0, 1f) } else { nn.relu(subtract(%0, 1f)) };
  exp(%1)
}"""


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_a_function_with_ifs_is_replayed_along_its_path_with_guards(backend) -> None:
    """Each replay follows the path its call took, its ifs checked: a call going the other way
    runs in full (the right result) and its path becomes the replay."""
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(BRANCHY), backend=backend))
    ep = vm._entry("main")
    assert ep.replayable and ep.live_steps is None  # planned per replay
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    for c in (True, True, False, False, True, False, True):
        out = np.empty_like(x)
        vm.invoke_with_outputs("main", [x, np.array(c)], [out])
        want = np.exp(x * 2 + 1 if c else np.maximum(x * 2 - 1, 0))
        np.testing.assert_allclose(out, want, rtol=1e-6)
        x *= 0.9  # new values in the same array
    r = ep.replays[((3, 4), ())]
    names = [vm.exe.function("main").instructions[pc][0] for pc, _ in r.steps]
    assert names.count(BY_NAME["If"].number) == 1  # the guard
    assert BY_NAME["ComputeDims"].number not in names
    assert vm.stats.allocations == 0


def test_an_entry_whose_calls_keep_switching_paths_stops_replaying() -> None:
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(BRANCHY), backend="numpy"))
    x = np.ones((2, 4), np.float32)
    for i in range(replay.MAX_DIVERGED + 4):
        c = bool(i % 2)
        want = np.exp(x * 2 + 1 if c else np.maximum(x * 2 - 1, 0))
        np.testing.assert_allclose(vm.invoke("main", x, np.array(c)), want, rtol=1e-6)
    ep = vm._entry("main")
    assert not ep.replayable and not ep.replays


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_the_path_is_what_the_ifs_did_not_what_their_buffers_hold_later(backend) -> None:
    """The condition lives in a pooled buffer that kernels after the if reuse: by the end of
    the call it holds other bytes, so the path is recorded as the ifs run."""
    text = """def @main(%x: Tensor[(n, 4), float32]) {
      %c = greater(sum(%x), 0f);
      %1 = if (%c) { multiply(%x, 2f) } else { multiply(%x, -3f) };
      %2 = exp(%1);
      add(%2, 1f)
    }"""
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(text), backend=backend))
    for sign in (-1, -1, 1, 1, -1):
        x = np.full((3, 4), 0.5 * sign, np.float32)
        want = np.exp(x * (2 if sign > 0 else -3)) + 1
        np.testing.assert_allclose(vm.invoke("main", x), want, rtol=1e-6)


# Position ids and a causal mask made from the sequence length, as exported transformers do.
PER_SHAPE = """def @main(%x: Tensor[(b, n, 4), float32], %table: Tensor[(16, 4), float32]) {
  %n = take(shape_of(%x, dtype="int64"), 1i64, axis=0);
  %ids = arange(0i64, minimum(%n, 16i64), 1i64);
  %pos = take(%table, %ids, axis=0);
  %causal = greater_equal(expand_dims(%ids, axis=1), expand_dims(%ids, axis=0));
  %scores = nn.batch_matmul(%x, %x, transpose_b=True);
  %masked = where(%causal, %scores, -1e9f);
  (add(%x, %pos), %masked)
}"""


def _live_kernels(vm) -> list[str]:
    fn = vm.exe.function("main")
    live, _ = replay.plan(fn, vm.exe.dim_programs)
    return [vm.exe.kernels[fn.instructions[pc].kernel].name for pc in live
            if fn.instructions[pc][0] == BY_NAME["InvokePacked"].number]


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_what_depends_on_the_input_shapes_alone_is_computed_once_per_shape(backend) -> None:
    """The position ids, the rows of the table they take and the mask are what a static build
    folds: a replay keeps them from the call it was made from (fresh buffers, not pooled ones
    that later kernels overwrite), and only the kernels reading %x run again."""
    table = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(PER_SHAPE), params={"table": table},
                                          backend=backend))
    assert "arange" not in _live_kernels(vm) and "take" not in _live_kernels(vm)
    rng = np.random.default_rng(1)
    for n in (5, 7, 5, 16, 7, 5):  # shapes taking turns: each replay keeps its own values
        x = rng.standard_normal((2, n, 4)).astype(np.float32)
        got = vm.invoke("main", x)
        causal = np.tril(np.ones((n, n), bool))
        np.testing.assert_allclose(got[0], x + table[:n], rtol=1e-6)
        np.testing.assert_allclose(got[1], np.where(causal, x @ x.transpose(0, 2, 1), -1e9),
                                   rtol=1e-5, atol=1e-6)
    assert len(vm._entry("main").replays) == 3
    vm.invoke("main", x)
    assert vm.stats.allocations == 2  # the two results: nothing computed from shapes again


# The position ids of PER_SHAPE in an entry that also branches on an input value (as
# silero-vad does on its sample rate): each path's replay keeps what the shapes decide.
PER_SHAPE_BRANCHY = """def @main(%x: Tensor[(n, 4), float32], %table: Tensor[(16, 4), float32],
          %c: Tensor[(), bool]) {
  %n = take(shape_of(%x, dtype="int64"), 0i64, axis=0);
  %ids = arange(0i64, minimum(%n, 16i64), 1i64);
  %pos = take(%table, %ids, axis=0);
  %1 = if (%c) { add(%x, %pos) } else { subtract(%x, %pos) };
  exp(%1)
}"""


def _replayed_kernels(vm, key) -> list[str]:
    fn = vm.exe.function("main")
    r = vm._entry("main").replays[key]
    return [vm.exe.kernels[fn.instructions[pc].kernel].name for pc, _ in r.steps
            if fn.instructions[pc][0] == BY_NAME["InvokePacked"].number]


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_a_function_with_ifs_computes_what_the_shapes_decide_once_per_path(backend) -> None:
    table = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(PER_SHAPE_BRANCHY),
                                          params={"table": table}, backend=backend))
    rng = np.random.default_rng(1)
    for n, c in ((5, True), (5, True), (7, False), (7, False), (5, False), (5, True)):
        x = rng.standard_normal((n, 4)).astype(np.float32)
        want = np.exp(x + table[:n] if c else x - table[:n])
        np.testing.assert_allclose(vm.invoke("main", x, np.array(c)), want, rtol=1e-6)
    kernels = _replayed_kernels(vm, ((5, 4), ()))
    assert "arange" not in kernels and "take" not in kernels, kernels


def _fake(instructions, n_params=1, outputs=()):
    params = tuple(SimpleNamespace(is_tuple=False, is_list=False, tensors=(1,))
                   for _ in range(n_params))
    return SimpleNamespace(params=params, outputs=outputs, instructions=instructions,
                           num_regs=8)


def test_plan_refuses_reused_registers_and_overwritten_inputs() -> None:
    ok = [make("LoadConst", dst=1, const=0), make("Move", dst=2, src=1), make("Ret", result=2)]
    assert replay.plan(_fake(ok), []) == ((2,), [r in (1, 2) for r in range(8)])
    reused = [make("LoadConst", 1, 0), make("LoadConst", 1, 1), make("Ret", 1)]
    assert replay.plan(_fake(reused), []) is None
    overwritten = [make("LoadConst", 0, 0), make("Ret", 0)]
    assert replay.plan(_fake(overwritten), []) is None
    ret_not_last = [make("Ret", 0), make("LoadConst", 1, 0)]
    assert replay.plan(_fake(ret_not_last), []) is None
    fresh_storage = [make("AllocStorage", dst=1, size=64, alignment=64, reuse=0), make("Ret", 0)]
    assert replay.plan(_fake(fresh_storage), [])[0] == (0, 1)


@pytest.mark.e2e
def test_replays_bind_the_packed_kernels_once_and_still_see_new_arrays() -> None:
    """A replay's GEMM/conv steps call the kernel bound when the replay was made (plan and the
    pointers of weights and pooled buffers made once); the input and output arrays, which may
    be new objects each call, are still read and written where they are."""
    vm = _vm(CONVNET)
    rng = np.random.default_rng(5)
    fresh = relvm.VirtualMachine(vm.exe)
    x = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    for call in range(5):
        if call == 3:
            x = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)  # a new input array
        out = np.full((2, 10), np.nan, np.float32)  # a new output array
        assert vm.invoke_with_outputs("main", [x], [out]) is out
        np.testing.assert_allclose(out, fresh.invoke("main", x), rtol=1e-5, atol=1e-6)
        x *= 0.5  # in place
    (r,) = vm._entry("main").replays.values()
    code = vm.exe.function("main").instructions
    kernel_steps = [step for pc, step in r.steps
                    if code[pc][0] == BY_NAME["InvokePacked"].number]
    assert len(kernel_steps) == 2
    assert all(s.__qualname__.startswith("_bound_step") for s in kernel_steps)


def test_bind_call_places_fixed_pointers_once_and_the_others_per_call() -> None:
    from relvm.backends.ckernels import packed
    from relvm.backends.ckernels.common import library

    ffi = library()[0]
    seen = []

    def c_function(*args):
        seen.append(args)
        return 0 if args[0] == "ok" else -2

    a, b, c = (np.full(3, v, np.float32) for v in (1, 2, 3))
    address = lambda p: int(ffi.cast("uintptr_t", p))  # noqa: E731
    # b fixed (placed now), a and c passed per call, in order
    call = packed.bind_call(c_function, ["ok", None, 7, None, None], {1: 0, 3: 1, 4: 2},
                            [a, b, c], [False, True, False], "what")
    other = np.zeros(3, np.float32)
    call(other, c)
    (args,) = seen
    assert args[0] == "ok" and args[2] == 7
    assert [address(p) for p in (args[1], args[3], args[4])] == [
        other.ctypes.data, b.ctypes.data, c.ctypes.data]
    one = packed.bind_call(c_function, ["ok", None, None], {1: 0, 2: 1}, [a, b], [False, True],
                           "what")
    one(c)
    assert address(seen[-1][1]) == c.ctypes.data
    # a status is checked as the kernel's own call checks it
    failing = packed.bind_call(c_function, ["bad", None], {1: 0}, [a], [True], "conv (1, 2)")
    with pytest.raises(MemoryError, match=r"conv \(1, 2\)"):
        failing()
    # an array that is not fixed and has no place in the call cannot be bound
    assert packed.bind_call(c_function, ["ok", None], {1: 0}, [a, b], [True, False], "") is None


@pytest.mark.e2e
def test_a_replayed_call_keeps_no_registers_between_calls() -> None:
    vm = _vm(MLP)
    x = np.ones((2, 784), np.float32)
    for _ in range(3):
        vm.invoke("main", x)
    (r,) = vm._entry("main").replays.values()
    assert r.frame is not None and r.frame.regs is None  # its frame is reused, and empty


def test_a_kernel_that_reenters_the_vm_gets_a_frame_of_its_own(monkeypatch) -> None:
    """A replayed call whose kernel calls the VM again (same thread, same shapes: a replay
    too) must not share the outer call's frame."""
    from relvm.backends import numpy_ref

    make = numpy_ref.make_kernel
    inner: list = []

    def reentering(entry, constants=None):
        kernel = make(entry, constants)

        def run(x, out):
            if inner == [None]:
                inner[0] = "calling"  # once: the inner call's kernel does not call again
                inner[0] = vm.invoke("main", x + 1)
            kernel(x, out)
        return run
    monkeypatch.setattr(numpy_ref, "make_kernel", reentering)
    vm = relvm.VirtualMachine(relvm.build(relvm.parse(
        "def @main(%x: Tensor[(3), float32]) { exp(%x) }"), backend="numpy"))
    x = np.zeros(3, np.float32)
    vm.invoke("main", x)
    vm.invoke("main", x)  # a replay: its frame is kept
    inner.append(None)
    np.testing.assert_allclose(vm.invoke("main", x), np.exp(x))
    np.testing.assert_allclose(inner[0], np.exp(x + 1))


SILU_BLOCK = """
def @main(%x: Tensor[(n, 16, 12, 12), float32], %w1: Tensor[(32, 16, 1, 1), float32],
          %b1: Tensor[(32), float32], %w2: Tensor[(32, 1, 3, 3), float32],
          %b2: Tensor[(32), float32], %w3: Tensor[(16, 32, 1, 1), float32]) {
  %a = tanh(%x);
  %b = multiply(%a, %x);
  %0 = nn.conv2d(%b, %w1, channels=32, kernel_size=[1, 1]);
  %1 = nn.bias_add(%0, %b1);
  %2 = sigmoid(%1);
  %3 = multiply(%1, %2);
  %4 = nn.conv2d(%3, %w2, padding=[1, 1], groups=32, channels=32, kernel_size=[3, 3]);
  %5 = nn.bias_add(%4, %b2);
  %6 = sigmoid(%5);
  %7 = multiply(%5, %6);
  %8 = nn.conv2d(%7, %w3, channels=16, kernel_size=[1, 1]);
  add(%8, %x)
}
"""


def _numpy_silu_block(x: np.ndarray, p: dict) -> np.ndarray:
    def conv(v, w, groups=1, pad=0):
        v = np.pad(v, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        n, c, h, wd = v.shape
        oc, icg, kh, kw = w.shape
        oh, ow = h - kh + 1, wd - kw + 1
        out = np.zeros((n, oc, oh, ow), np.float64)
        ocg = oc // groups
        for o in range(oc):
            g = o // ocg
            for dy in range(kh):
                for dx in range(kw):
                    patch = v[:, g * icg:(g + 1) * icg, dy:dy + oh, dx:dx + ow]
                    out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, dy, dx])
        return out

    def silu(v):
        return v / (1 + np.exp(-v))
    h = silu(conv(np.tanh(x) * x, p["w1"]) + p["b1"][:, None, None])
    h = silu(conv(h, p["w2"], groups=32, pad=1) + p["b2"][:, None, None])
    return conv(h, p["w3"]) + x


@pytest.mark.e2e
@pytest.mark.parametrize("channels_last", [True, False])
def test_replays_bind_fused_kernels_with_a_rest_run_per_block_and_alone(channels_last) -> None:
    """Generated kernels are bound for replays too: a conv whose SiLU runs over each block of
    its output (the product's call bound with the kernel's own loop context), and a fused
    elementwise kernel alone (tanh(x) * x, reading the input array that comes new each call). Their calls see new input and output arrays, and inputs changed in place."""
    rng = np.random.default_rng(11)
    p = {"w1": rng.standard_normal((32, 16, 1, 1)) * 0.3, "b1": rng.standard_normal(32),
         "w2": rng.standard_normal((32, 1, 3, 3)) * 0.3, "b2": rng.standard_normal(32),
         "w3": rng.standard_normal((16, 32, 1, 1)) * 0.3}
    p = {k: v.astype(np.float32) for k, v in p.items()}
    exe = relvm.build(relvm.parse(SILU_BLOCK), params=p, channels_last=channels_last)
    vm = relvm.VirtualMachine(exe)
    x = rng.standard_normal((2, 16, 12, 12)).astype(np.float32)
    for call in range(6):
        if call == 4:
            x = rng.standard_normal((2, 16, 12, 12)).astype(np.float32)  # a new input array
        out = np.full((2, 16, 12, 12), np.nan, np.float32)  # a new output array
        assert vm.invoke_with_outputs("main", [x], [out]) is out
        np.testing.assert_allclose(out, _numpy_silu_block(x.astype(np.float64), p),
                                   rtol=1e-4, atol=1e-5)
        x *= 0.75  # in place
    (r,) = vm._entry("main").replays.values()
    code = exe.function("main").instructions
    names = {pc: exe.kernels[code[pc].kernel].name for pc, _ in r.steps
             if code[pc][0] == BY_NAME["InvokePacked"].number}
    bound = {names[pc] for pc, step in r.steps
             if pc in names and step.__qualname__.startswith("_bound_step")}
    assert "fused_conv2d_bias_add_sigmoid_multiply" in bound
    assert any(not n.startswith("fused_conv2d") and n.startswith("fused_") for n in bound), names
