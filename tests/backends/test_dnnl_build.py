"""The oneDNN backend through the whole pipeline: relvm.build(..., targets=["dnnl"]) of models
with symbolic dims, run at several shapes against relvm alone, saved and loaded, and a machine
without the library (a clear error, or relvm's own kernels when asked).

Fails when libdnnl.so.3 cannot be loaded where the test extra installs it (RELVM_REQUIRE_DNNL,
tests/conftest.py); skips elsewhere.
"""

import os
import textwrap

import numpy as np
import pytest

import relvm
from dnnlcases import BLOCK, BLOCK_WEIGHTS, CNN, CNN_WEIGHTS, w
from isolation import run_python

dnnl = pytest.importorskip("relvm.backends.dnnl")
_why = dnnl.available()
if _why is not None:
    if os.environ.get("RELVM_REQUIRE_DNNL") == "1":
        pytest.fail(f"oneDNN is unavailable: {_why} (pip install \".[test]\" installs it; "
                    "RELVM_REQUIRE_DNNL=0 to skip)", pytrace=False)
    pytest.skip(f"oneDNN unavailable: {_why}", allow_module_level=True)

RNG = np.random.default_rng(1)

CASES = {"cnn": (CNN, CNN_WEIGHTS, [(1, 3, 32, 32), (2, 3, 48, 40), (3, 3, 16, 24)]),
         "block": (BLOCK, BLOCK_WEIGHTS, [(1, 16, 256), (2, 37, 256), (1, 128, 256)])}
#: oneDNN taking every region its patterns match: the cost model leaves a transformer block to
#: relvm (relvm/backends/dnnl/cost.py), and these tests are about the regions running right.
EVERY_REGION = dnnl.BACKEND.__class__(
    "dnnl", dnnl.BACKEND.patterns, dnnl.BACKEND.compile, dnnl.BACKEND.runtime,
    dnnl.BACKEND.available, worth=lambda region: True)


def _close(got, want) -> None:
    got = got if isinstance(got, (list, tuple)) else [got]
    want = want if isinstance(want, (list, tuple)) else [want]
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4 * float(np.abs(e).max()))


@pytest.fixture(scope="module", params=sorted(CASES))
def built(request):
    text, weights, shapes = CASES[request.param]
    mod = relvm.parse(text)
    alone = relvm.build(mod, params=weights)
    target = "dnnl" if request.param == "cnn" else EVERY_REGION
    with_dnnl = relvm.build(mod, params=weights, targets=[target])
    return request.param, alone, with_dnnl, shapes


def test_dnnl_regions_match_relvm_alone_at_every_shape(built) -> None:
    name, alone, with_dnnl, shapes = built
    assert with_dnnl.externals, f"{name}: nothing was given to oneDNN"
    assert all(a.compiler == "dnnl" for a in with_dnnl.externals.values())
    a, b = relvm.VirtualMachine(alone), relvm.VirtualMachine(with_dnnl)
    for shape in shapes:  # one executable, specialised per shape by the backend
        x = RNG.standard_normal(shape, dtype=np.float32)
        _close(b.invoke("main", x), a.invoke("main", x))


def test_saved_and_loaded_dnnl_executables_run(built, tmp_path) -> None:
    name, alone, with_dnnl, shapes = built
    with_dnnl.save(tmp_path / "m.rvm")
    loaded = relvm.load(tmp_path / "m.rvm")
    assert {s: a.data for s, a in loaded.externals.items()} == \
        {s: a.data for s, a in with_dnnl.externals.items()}
    x = RNG.standard_normal(shapes[1], dtype=np.float32)
    _close(relvm.VirtualMachine(loaded).invoke("main", x),
           relvm.VirtualMachine(alone).invoke("main", x))


def test_threads_share_one_vm(built) -> None:
    from concurrent.futures import ThreadPoolExecutor

    name, alone, with_dnnl, shapes = built
    vm, ref = relvm.VirtualMachine(with_dnnl), relvm.VirtualMachine(alone)
    xs = [RNG.standard_normal(shapes[i % len(shapes)], dtype=np.float32) for i in range(8)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: vm.invoke("main", x), xs))
    for x, g in zip(xs, got):
        _close(g, ref.invoke("main", x))


WITHOUT_LIBRARY = textwrap.dedent("""
    import sys
    import numpy as np
    import relvm

    path, x_path = sys.argv[1], sys.argv[2]
    x = np.load(x_path)
    try:
        relvm.load(path)
    except relvm.RelvmKernelError as e:
        print("refused:", e)
    exe = relvm.load(path, external_fallback=True)
    np.save(x_path + ".out.npy", relvm.VirtualMachine(exe).invoke("main", x))
""")


def test_without_the_library_load_names_it_or_falls_back(tmp_path) -> None:
    mod = relvm.parse(CNN)
    exe = relvm.build(mod, params=CNN_WEIGHTS, targets=["dnnl"])
    exe.save(tmp_path / "m.rvm")
    x = RNG.standard_normal((2, 3, 32, 32), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = run_python(WITHOUT_LIBRARY, str(tmp_path / "m.rvm"), str(tmp_path / "x.npy"),
                      env={"RELVM_DNNL_LIBRARY": str(tmp_path / "missing" / "libdnnl.so.3")})
    assert proc.returncode == 0, proc.stderr
    assert "refused: external backend 'dnnl' cannot run here" in proc.stdout
    assert 'pip install "relvm[dnnl]"' in proc.stdout and "external_fallback=True" in proc.stdout
    got = np.load(tmp_path / "x.npy.out.npy")
    _close(got, relvm.VirtualMachine(relvm.build(mod, params=CNN_WEIGHTS)).invoke("main", x))


def test_the_command_line_builds_inspects_and_runs_dnnl_regions(tmp_path) -> None:
    relay = tmp_path / "cnn.relay"
    relay.write_text(CNN)
    np.savez(tmp_path / "w.npz", **CNN_WEIGHTS)
    rvm = str(tmp_path / "cnn.rvm")

    def cli(*args, **env):
        return run_python("from relvm.cli import main; raise SystemExit(main())", *args,
                          env=env)
    done = cli("compile", str(relay), "--params", str(tmp_path / "w.npz"), "-o", rvm,
               "--target", "dnnl")
    assert done.returncode == 0, done.stderr
    shown = cli("inspect", rvm, "--no-bytecode").stdout
    assert "external regions (" in shown and "dnnl_0: dnnl, " in shown
    ran = cli("run", rvm, "--random-inputs", "--dims", "n=2", "--dims", "h=32", "--dims", "w=32")
    assert ran.returncode == 0 and "float32[2, 10]" in ran.stdout, ran.stderr
    missing = dict(RELVM_DNNL_LIBRARY=str(tmp_path / "libdnnl.so.3"))
    refused = cli("run", rvm, "--random-inputs", "--dims", "n=2", "--dims", "h=32", "--dims",
                  "w=32", **missing)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "external backend 'dnnl' cannot run here" in refused.stderr
    assert "--external-fallback" in refused.stderr
    fell_back = cli("run", rvm, "--random-inputs", "--dims", "n=2", "--dims", "h=32", "--dims",
                    "w=32", "--external-fallback", **missing)
    assert fell_back.returncode == 0 and fell_back.stdout.split("\n")[0] == \
        ran.stdout.split("\n")[0]


def test_an_inference_session_takes_the_dnnl_provider(tmp_path) -> None:
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    # A backbone of 3x3 convs: oneDNN's cost model takes it (one conv alone is not worth an
    # edge; relvm/backends/dnnl/cost.py).
    nodes, inits, prev = [], [], "x"
    for i, cin in enumerate([16] + [64] * 6):
        inits += [numpy_helper.from_array(w(64, cin, 3, 3), f"w{i}"),
                  numpy_helper.from_array(w(64), f"b{i}")]
        nodes += [helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"],
                                   pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"y{i}" if i < 6 else "y"])]
        prev = f"y{i}"
    graph = helper.make_graph(
        nodes, "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    path = str(tmp_path / "conv.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    sess = relvm.InferenceSession(path, providers=["DnnlExecutionProvider",
                                                   "CPUExecutionProvider"])
    assert sess.get_providers() == ["DnnlExecutionProvider", "CPUExecutionProvider"]
    assert [a.compiler for a in sess._exe.externals.values()] == ["dnnl"]
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for shape in [(1, 16, 20, 20), (2, 16, 9, 31)]:
        x = RNG.standard_normal(shape, dtype=np.float32)
        _close(sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0])
    if dnnl.available_bf16() is None:  # relvm's provider option: oneDNN in bfloat16
        bf16 = relvm.InferenceSession(path, providers=["DnnlExecutionProvider"],
                                      provider_options=[{"precision": "bf16"}])
        assert bf16.get_provider_options()["DnnlExecutionProvider"] == {"precision": "bf16"}
        assert [a.compiler for a in bf16._exe.externals.values()] == ["dnnl_bf16"]
        x = RNG.standard_normal((1, 16, 20, 20), dtype=np.float32)
        want = ref.run(None, {"x": x})[0]
        got = bf16.run(None, {"x": x})[0]
        assert np.abs(got - want).max() <= 2 ** -7 * 7 * np.abs(want).max()  # 7 bf16 convs


MUTANTS = textwrap.dedent("""
    import json, random, sys
    import numpy as np
    import relvm
    from relvm.runtime.file.format import assemble, sections_of

    data, x, count = open(sys.argv[1], "rb").read(), np.load(sys.argv[2]), int(sys.argv[3])
    parts = sections_of(data)
    meta = json.loads(parts["meta"])
    blobs = [json.loads(parts["extern"][e["offset"]:e["offset"] + e["size"]])
             for e in meta["externals"]]

    def leaves(v, path=()):
        yield path, v
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, c in items:
            yield from leaves(c, path + (k,))

    def mutant(r, blob):
        blob = json.loads(json.dumps(blob))
        for _ in range(r.randint(1, 3)):
            path, v = r.choice([n for n in leaves(blob) if n[0]])
            if isinstance(v, bool):
                new = not v
            elif isinstance(v, (int, float)):
                new = r.choice([0, 1, -1, v + 1, v - 1, v * 2, 2 ** 31, 64, 1e30, float("inf")])
            elif isinstance(v, str):
                new = r.choice(["in", "prim", "relu", "add", "mul", "max", "conv", "", "bf16",
                                "swish", "hardswish"])
            elif isinstance(v, list):
                new = r.choice([[], v[:1], v + v[-1:], None, [0, 0]])
            else:
                new = r.choice([["in", 0], ["in", 2], ["prim", 0], 0])
            parent = blob
            for p in path[:-1]:
                parent = parent[p]
            parent[path[-1]] = new
        return blob

    outcomes = {}
    for seed in range(count):
        r = random.Random(seed)
        k = r.randrange(len(blobs))
        new = [json.dumps(mutant(r, b) if i == k else b).encode() for i, b in enumerate(blobs)]
        at = 0
        for e, b in zip(meta["externals"], new):
            e["offset"], e["size"] = at, len(b)
            at += len(b)
        print("seed", seed, flush=True)  # the last line says which mutant crashed, if one does
        try:
            exe = relvm.load_bytes(assemble(dict(parts, extern=b"".join(new),
                                                 meta=json.dumps(meta).encode())))
            relvm.VirtualMachine(exe).invoke("main", x)
            outcome = "ran"
        except relvm.RelvmError as e:
            outcome = type(e).__name__
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    print(json.dumps(outcomes))
""")


@pytest.mark.slow
def test_mutated_artifacts_are_refused_never_crash(tmp_path) -> None:
    """A hostile file's oneDNN artifact (checksums recomputed): every mutant is refused within
    relvm's errors or runs; none crashes the process or raises anything else."""
    exe = relvm.build(relvm.parse(CNN), params=CNN_WEIGHTS, targets=[EVERY_REGION])
    assert len(exe.externals) >= 1
    (tmp_path / "m.rvm").write_bytes(exe.save_bytes())
    np.save(tmp_path / "x.npy", RNG.standard_normal((2, 3, 32, 32), dtype=np.float32))
    proc = run_python(MUTANTS, str(tmp_path / "m.rvm"), str(tmp_path / "x.npy"), "200",
                      timeout=600)
    assert proc.returncode == 0, (proc.stdout.splitlines()[-1:], proc.stderr[-2000:])
    import json

    outcomes = json.loads(proc.stdout.splitlines()[-1])
    assert sum(outcomes.values()) == 200
    assert outcomes.get("RelvmFormatError", 0) > 50 and outcomes.get("ran", 0) > 0, outcomes
