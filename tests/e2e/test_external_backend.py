"""An external backend written in the tests, end to end: partition, build, run against relvm
alone, symbolic shapes specialised per shape, save and load, a missing backend, fallback."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import relvm
from relvm.backends import external as X
from relvm.ir.printer import meta_constants
from relvm.ops.registry import OPS
from relvm.runtime.file.format import assemble, sections_of


class Toy:
    """A backend that runs its regions with the ops' NumPy references; it records what it
    compiled, which shapes it specialised for and the constants it prepared."""

    name = "toy"

    def __init__(self):
        self.compiled: list[str] = []
        self.specialised: list[tuple] = []
        self.prepared = 0
        self.calls = 0

    def compile(self, region: X.Region) -> bytes:
        self.compiled.append(region.name)
        return json.dumps({"steps": list(region.steps), "outputs": list(region.outputs),
                           "constant": list(region.constant)}).encode()

    def runtime(self, artifact: bytes, constants):
        spec = json.loads(artifact)
        steps = [(OPS[s["op"]], OPS[s["op"]].make_attrs(
            {k: tuple(v) if isinstance(v, list) else v for k, v in s["attrs"].items()}),
            s["args"]) for s in spec["steps"]]
        plans: dict[tuple, str] = {}

        def kernel(*arrays):
            n_in = len(arrays) - len(spec["outputs"])
            ins, outs = arrays[:n_in], arrays[n_in:]
            key = tuple(a.shape for a in ins)
            if key not in plans:  # specialise once per shape, as a real library would
                self.specialised.append(key)
                plans[key] = "plan"
            for a, is_const in zip(ins, spec["constant"]):
                if is_const and constants.holds(a):
                    constants.prepared(a, ("toy",), self._prepare)
            values = []
            for op, attrs, args in steps:
                values.append(op.reference(attrs, *[ins[i] if kind == "in" else values[i]
                                                    for kind, i in args]))
            for out, (kind, j) in zip(outs, spec["outputs"]):
                out[...] = values[j]
            self.calls += 1
        return kernel

    def _prepare(self):
        self.prepared += 1
        return "prepared"

    def backend(self, patterns=None) -> X.Backend:
        return X.Backend(self.name, patterns or [
            X.Pattern("conv_bias_relu", ("nn.conv2d", "nn.bias_add?", "nn.relu?")),
            X.Pattern("dense", ("nn.dense", "add?"))], compile=self.compile,
            runtime=self.runtime)


@pytest.fixture
def toy():
    t = Toy()
    X.register(t.backend())
    yield t
    X.unregister("toy")


TEXT = """def @main(%x: Tensor[(n, 3, 16, 16), float32], %w1: Tensor[(16, 3, 3, 3), float32],
          %b1: Tensor[(16), float32], %w2: Tensor[(16, 16, 3, 3), float32],
          %d: Tensor[(10, 16), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1]);
  %1 = nn.bias_add(%0, %b1);
  %2 = nn.relu(%1);
  %3 = nn.conv2d(%2, %w2, padding=[1, 1, 1, 1], strides=[2, 2]);
  %4 = sigmoid(%3);
  %5 = nn.global_avg_pool2d(%4);
  %6 = nn.batch_flatten(%5);
  (nn.dense(%6, %d), %2)
}"""


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w1": rng.standard_normal((16, 3, 3, 3), dtype=np.float32),
            "b1": rng.standard_normal(16, dtype=np.float32),
            "w2": rng.standard_normal((16, 16, 3, 3), dtype=np.float32) / 8,
            "d": rng.standard_normal((10, 16), dtype=np.float32)}


def images(n: int) -> np.ndarray:
    return np.random.default_rng(n).standard_normal((n, 3, 16, 16), dtype=np.float32)


@pytest.fixture(scope="module")
def alone():
    return relvm.VirtualMachine(relvm.build(relvm.parse(TEXT), params=weights()))


def close(got, want) -> None:
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * float(np.abs(w).max()))


def test_regions_run_on_the_backend_and_match_relvm_alone(toy, alone) -> None:
    exe = relvm.build(relvm.parse(TEXT), params=weights(), targets=["toy"])
    assert toy.compiled == ["toy_0"]
    text = exe.bytecode
    assert "invoke_packed toy.toy_0" in text and "nn.conv2d" not in text.replace("toy.", "")
    vm = relvm.VirtualMachine(exe)
    for n in (1, 3, 7):  # one executable, specialised per shape by the backend
        close(vm.invoke("main", images(n)), alone.invoke("main", images(n)))
    assert [k[0] for k in toy.specialised] == [(1, 3, 16, 16), (3, 3, 16, 16), (7, 3, 16, 16)]
    vm.invoke("main", images(3))
    assert len(toy.specialised) == 3 and toy.calls == 4
    assert toy.prepared == 3  # each constant weight prepared once per VM, not per call


def test_a_region_writes_into_the_callers_output(toy) -> None:
    exe = relvm.build(relvm.parse("""def @main(%x: Tensor[(n, 16), float32], %w: Tensor[(8, 16), float32]) {
  nn.dense(%x, %w)
}"""), params={"w": np.ones((8, 16), np.float32)}, targets=["toy"])
    vm = relvm.VirtualMachine(exe)
    out = np.zeros((5, 8), np.float32)
    x = np.arange(80, dtype=np.float32).reshape(5, 16)
    vm.invoke_with_outputs("main", input_args=[x], output_args=[out])
    np.testing.assert_array_equal(out, x.sum(axis=1, keepdims=True).repeat(8, axis=1))
    assert vm.stats.output_copies == 0


def test_a_partitioned_module_builds_without_targets(toy, alone) -> None:
    part = relvm.partition(relvm.parse(TEXT), ["toy"], params=weights())
    exe = relvm.build(relvm.parse(relvm.print_module(part), constants=meta_constants(part)))
    close(relvm.VirtualMachine(exe).invoke("main", images(2)), alone.invoke("main", images(2)))
    assert toy.compiled == ["toy_0"]


def test_saved_and_loaded_executables_run_the_backend(toy, alone, tmp_path) -> None:
    exe = relvm.build(relvm.parse(TEXT), params=weights(), targets=["toy"])
    exe.save(tmp_path / "m.rvm")
    loaded = relvm.load(tmp_path / "m.rvm")
    assert loaded.externals["toy_0"].compiler == "toy"
    assert loaded.externals["toy_0"].data == exe.externals["toy_0"].data
    calls = toy.calls
    close(relvm.VirtualMachine(loaded).invoke("main", images(4)),
          alone.invoke("main", images(4)))
    assert toy.calls == calls + 1


def test_a_missing_backend_is_named_at_load_or_replaced_when_asked(alone, tmp_path) -> None:
    t = Toy()
    X.register(t.backend())
    relvm.build(relvm.parse(TEXT), params=weights(), targets=["toy"]).save(tmp_path / "m.rvm")
    X.unregister("toy")
    with pytest.raises(relvm.RelvmKernelError, match="no external backend 'toy'.*"
                       "external_fallback=True"):
        relvm.load(tmp_path / "m.rvm")
    exe = relvm.load(tmp_path / "m.rvm", external_fallback=True)
    np.testing.assert_allclose(relvm.VirtualMachine(exe).invoke("main", images(3))[0],
                               alone.invoke("main", images(3))[0], rtol=1e-5, atol=1e-5)


def test_a_backend_that_cannot_run_is_refused_at_build_unless_fallback(alone) -> None:
    t = Toy()
    backend = t.backend()
    backend.available = lambda: "libtoy.so not found"
    X.register(backend)
    try:
        with pytest.raises(relvm.RelvmCompileError,
                           match="external backend 'toy' cannot run here: libtoy.so not found"):
            relvm.build(relvm.parse(TEXT), params=weights(), targets=["toy"])
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            exe = relvm.build(relvm.parse(TEXT), params=weights(), targets=["toy"],
                              external_fallback=True)
        assert any("libtoy.so not found" in str(w.message) for w in seen)
        assert not exe.externals and t.compiled == []
        close(relvm.VirtualMachine(exe).invoke("main", images(2)),
              alone.invoke("main", images(2)))
    finally:
        X.unregister("toy")


def test_a_damaged_extern_section_names_it(toy) -> None:
    data = relvm.build(relvm.parse(TEXT), params=weights(), targets=["toy"]).save_bytes()
    parts = sections_of(data)
    with pytest.raises(relvm.RelvmFormatError) as err:
        relvm.load_bytes(assemble(dict(parts, extern=parts["extern"] + b"x")))
    assert err.value.section == "extern" and "1 bytes belong to no artifact" in str(err.value)
    meta = json.loads(parts["meta"])
    meta["externals"][0]["compiler"] = "other"
    with pytest.raises(relvm.RelvmFormatError, match="artifact 'toy_0' is for 'other'"):
        relvm.load_bytes(assemble(dict(parts, meta=json.dumps(meta).encode())))
    meta = json.loads(parts["meta"])
    entry = next(k for k in meta["kernels"] if k["op"] == "external")
    entry["attrs"]["region"]["outputs"] = [["step", 99]]
    with pytest.raises(relvm.RelvmFormatError) as err:
        relvm.load_bytes(assemble(dict(parts, meta=json.dumps(meta).encode())))
    assert err.value.section == "meta" and "toy.toy_0" in str(err.value)


def test_a_backend_that_fails_to_compile_is_named(toy) -> None:
    def broken(region):
        raise ValueError("no such layout")
    X.register(X.Backend("toy", toy.backend().patterns, compile=broken, runtime=toy.runtime))
    with pytest.raises(relvm.RelvmCompileError, match="backend 'toy' failed to compile region "
                       "@toy_0: ValueError: no such layout"):
        relvm.build(relvm.parse(TEXT), params=weights(), targets=["toy"])
